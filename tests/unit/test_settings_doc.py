"""The configuration reference is generated from the Settings model (shared/core/settings_doc.py)
and put into docs/configuration.md by an MkDocs hook: every field must be described, every
TRACEHOUND_* variable must reach the page."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from shared.core.settings import Settings
from shared.core.settings_doc import env_var, field_groups, settings_reference, table_cell

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION_PAGE = ROOT / "docs" / "configuration.md"
HOOK = ROOT / "docs" / "hooks" / "settings_reference.py"
MARKER = "<!-- settings-reference -->"


def test_every_settings_field_has_a_description() -> None:
    missing = [name for name, f in Settings.model_fields.items() if not (f.description or "")]
    assert not missing, f"Settings fields without description=: {missing}"


def test_every_variable_is_in_the_reference_once() -> None:
    reference = settings_reference()
    for name in Settings.model_fields:
        assert reference.count(f"| `{env_var(name)}` |") == 1, env_var(name)
    rows = [line for line in reference.splitlines() if line.startswith("| `TRACEHOUND_")]
    assert len(rows) == len(Settings.model_fields)


def test_the_reference_shows_defaults_and_descriptions() -> None:
    reference = settings_reference()
    assert "| `TRACEHOUND_REDIS_URL` | `redis://127.0.0.1:6379/0` | Celery broker," in reference
    # An edge space is part of the value, so the prefix is quoted.
    assert "| `TRACEHOUND_EMBED_QUERY_PREFIX` | `'search_query: '` |" in reference
    assert "| `TRACEHOUND_SLACK_BOT_TOKEN` | unset |" in reference
    assert "| `TRACEHOUND_HOST_LEASES` | `true` |" in reference


def test_groups_follow_the_class_in_order_and_hold_every_field_once() -> None:
    groups = field_groups()
    flat = [name for _, names in groups for name in names]
    assert flat == list(Settings.model_fields)
    titles = [title for title, _ in groups]
    assert titles[0] == "Infrastructure"
    assert "Retrieval" in titles and "Notification" in titles
    for title in titles:
        assert f"### {title}\n" in settings_reference()


def _cells(row: str) -> int:
    """Cells of a Markdown table row: pipes that are neither escaped nor inside a code span."""
    outside = row.split("`")[::2]
    return sum(len(re.findall(r"(?<!\\)\|", part)) for part in outside) - 1


def test_every_row_has_three_cells_whatever_the_description_holds() -> None:
    # TRACEHOUND_SERVICE_REPOS' description holds "billing|billing-legacy" outside backticks.
    for row in settings_reference().splitlines():
        if row.startswith("|"):
            assert _cells(row) == 3, row
    assert table_cell("a|b `c|d`\n e") == r"a\|b `c|d` e"


def test_the_configuration_page_has_the_marker() -> None:
    lines = CONFIGURATION_PAGE.read_text(encoding="utf-8").splitlines()
    assert MARKER in lines, f"{CONFIGURATION_PAGE} needs a line {MARKER}"


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("settings_reference_hook", HOOK)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page(src_uri: str) -> SimpleNamespace:
    return SimpleNamespace(file=SimpleNamespace(src_uri=src_uri))


def test_the_hook_puts_the_reference_in_place_of_the_marker() -> None:
    pytest.importorskip("mkdocs")
    hook = _hook()
    markdown = CONFIGURATION_PAGE.read_text(encoding="utf-8")
    built = hook.on_page_markdown(markdown, _page("configuration.md"), None, None)
    assert MARKER not in built
    assert settings_reference() in built
    other = "# Benchmarks\n\n" + MARKER + "\n"
    assert hook.on_page_markdown(other, _page("benchmarks.md"), None, None) == other


def test_the_hook_refuses_a_configuration_page_without_the_marker() -> None:
    pytest.importorskip("mkdocs")
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError):
        _hook().on_page_markdown("# Configuration\n", _page("configuration.md"), None, None)
