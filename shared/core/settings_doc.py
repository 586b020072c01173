"""The configuration reference, generated from the Settings model: one row per TRACEHOUND_*
variable, so the docs cannot drift from the settings the code reads.

docs/hooks/settings_reference.py puts :func:`settings_reference` into docs/configuration.md when
MkDocs builds the site; tests/unit/test_settings_doc.py holds every field to a description.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from pydantic.fields import FieldInfo

from shared.core.settings import Settings

# The class groups its fields under comment lines such as "# --- retrieval ---".
_GROUP_COMMENT = re.compile(r"^\s*# --- (?P<title>.+?) ---\s*$")
_FIELD_LINE = re.compile(r"^\s{4}(?P<name>[a-z_][a-z0-9_]*)\s*:")
_UNGROUPED = "Settings"


def env_var(name: str) -> str:
    """The environment variable that sets field ``name``."""
    prefix = str(Settings.model_config.get("env_prefix", ""))
    return f"{prefix}{name}".upper()


def field_groups() -> list[tuple[str, list[str]]]:
    """The fields in class order, grouped under the class's ``# --- title ---`` comments.

    Fields before the first comment, or every field when the source cannot be read, fall in
    one group named "Settings"; a field the source scan misses is appended to the last group.
    """
    names = list(Settings.model_fields)
    try:
        lines, _ = inspect.getsourcelines(Settings)
    except (OSError, TypeError):
        return [(_UNGROUPED, names)]
    groups: list[tuple[str, list[str]]] = []
    seen: set[str] = set()
    for line in lines:
        if match := _GROUP_COMMENT.match(line):
            title = match["title"]
            groups.append((title[:1].upper() + title[1:], []))
            continue
        field = _FIELD_LINE.match(line)
        if field and field["name"] in Settings.model_fields and field["name"] not in seen:
            if not groups:
                groups.append((_UNGROUPED, []))
            groups[-1][1].append(field["name"])
            seen.add(field["name"])
    missing = [n for n in names if n not in seen]
    if missing:
        if not groups:
            groups.append((_UNGROUPED, []))
        groups[-1][1].extend(missing)
    return [(title, members) for title, members in groups if members]


def default_text(field: FieldInfo) -> str:
    """The default as it would be written in the variable; a secret as its masked repr."""
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    return f"`{_plain(value)}`"


def _plain(value: Any) -> str:
    if isinstance(value, SecretStr):
        return str(value)  # "**********": a default secret is never printed
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, str):
        # Quoted only when the quotes carry something: an edge space or an empty string.
        return repr(value) if value != value.strip() or not value else value
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, default=_plain, ensure_ascii=False)
    return repr(value)


def table_cell(text: str) -> str:
    """``text`` on one line with its pipes escaped outside code spans (Markdown tables)."""
    flat = " ".join(text.split())
    parts = flat.split("`")
    # Even parts are outside backticks; a pipe inside a code span does not split a cell.
    return "`".join(p.replace("|", r"\|") if i % 2 == 0 else p for i, p in enumerate(parts))


def settings_reference(heading_level: int = 3) -> str:
    """Markdown: a heading per group of the Settings class and a table of its variables."""
    hashes = "#" * heading_level
    out: list[str] = []
    for title, names in field_groups():
        out += [f"{hashes} {title}", "", "| variable | default | meaning |", "|---|---|---|"]
        for name in names:
            field = Settings.model_fields[name]
            out.append(
                f"| `{env_var(name)}` | {table_cell(default_text(field))} "
                f"| {table_cell(field.description or '')} |"
            )
        out.append("")
    return "\n".join(out)
