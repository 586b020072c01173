"""MkDocs hook: the configuration reference is generated from the Settings model at build time.

docs/configuration.md holds a marker line; this hook replaces it with
``shared.core.settings_doc.settings_reference()``, so the page lists every TRACEHOUND_* variable
the code reads, with its default and description. Registered under ``hooks:`` in mkdocs.yml.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

MARKER = "<!-- settings-reference -->"
PAGE = "configuration.md"


def on_config(config: Any) -> Any:
    """Make the checkout importable when tracehound is not installed into the environment."""
    root = str(Path(config.config_file_path).resolve().parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the marker on the configuration page; refuse to build that page without it."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise PluginError(f"{PAGE} has no {MARKER} line for the settings reference")
    from shared.core.settings_doc import settings_reference

    return markdown.replace(MARKER, settings_reference())
