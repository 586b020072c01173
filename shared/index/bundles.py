"""Built bundles and their source maps, found in a directory tree.

Bundlers write ``app.3f9a1c.js`` and ``app.3f9a1c.js.map`` side by side, and end the bundle
with a ``//# sourceMappingURL=`` comment naming the map (a file beside it, or the whole map
inline as a ``data:`` URL). Build output is usually git-ignored, so the walk here does not
honour .gitignore (only the directories never worth reading: node_modules, .git, …). Each map's
sources are resolved to paths a frame mapper can place in the repo (shared/intake/frames.py):
relative to the map's directory, or to the project root for ``webpack://`` sources.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import posixpath
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from shared.index.sources import ALWAYS_SKIP_DIRS
from shared.intake.sourcemap import MAX_MAP_BYTES, DecodedMap, SourceMapError, parse_map

BUNDLE_SUFFIXES = (".js", ".mjs", ".cjs")
MAP_SUFFIX = ".map"
MAX_BUNDLES = 10_000
# ECMA-426 §11.1.1: the comment linking a bundle to its map ("//@" is the old form), on one
# of the file's last lines.
_LINK = re.compile(r"^\s*//[#@]\s*sourceMappingURL=(\S+)\s*$")
_LINK_BLOCK = re.compile(r"^\s*/\*[#@]\s*sourceMappingURL=(\S+)\s*\*/\s*$")
TAIL_LINES = 3
TAIL_BYTES = 4096  # read first: a file whose last lines fit and name no map is not read whole
# Sources written by bundlers with a namespace instead of a directory: the rest is relative to
# the project's root (webpack's context), not to the map.
_NAMESPACED = re.compile(r"^(?:webpack|rollup|vite|turbopack|ng|parcel)://[^/]*/+")
_URL = re.compile(r"^[a-zA-Z][\w+.-]*://[^/]*")
_UNSAFE = {" ": "%20", "(": "%28", ")": "%29", "\t": "%09"}


@dataclass
class FoundMaps:
    """Bundle path (relative to the searched root) -> its map with sources resolved, and the
    maps that could not be used with the reason."""

    maps: dict[str, DecodedMap] = field(default_factory=dict)
    refused: list[tuple[str, str]] = field(default_factory=list)


def resolve_source(source: str, map_dir: str) -> str:
    """Where an original source lives, as a path a frame mapper matches against the repo.

    ``webpack://shop/./src/cart.js`` -> ``src/cart.js``; ``../src/cart.js`` beside
    ``dist/app.js.map`` -> ``src/cart.js``; a path that climbs out of the searched tree keeps
    what is left of it (``../../app/src/cart.js`` from ``dist/`` -> ``app/src/cart.js``), which
    the mapper matches by its trailing components. Absolute paths stay absolute.
    """
    text = source.split("?", 1)[0].split("#", 1)[0]
    if m := _NAMESPACED.match(text):
        joined = text[m.end() :]
    elif m := _URL.match(text):
        joined = urllib.parse.unquote(text[m.end() :]) or "/"
    elif text.startswith("/"):
        joined = text
    else:
        joined = posixpath.join(map_dir, text)
    absolute = joined.startswith("/")
    parts: list[str] = []
    for part in joined.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue  # past the top: dropped
        parts.append(part)
    path = ("/" if absolute else "") + "/".join(parts)
    return "".join(_UNSAFE.get(ch, ch) for ch in path)


def link_of(text: str) -> str | None:
    """The URL a bundle's ``sourceMappingURL`` comment names, if its last lines hold one."""
    tail = [ln for ln in text.rstrip().rsplit("\n", TAIL_LINES)[-TAIL_LINES:] if ln.strip()]
    for line in reversed(tail):
        if m := _LINK.match(line) or _LINK_BLOCK.match(line):
            return m.group(1)
    return None


def _data_url(url: str) -> bytes:
    """The map inside a ``data:`` URL (base64 or percent-encoded JSON)."""
    head, _, data = url.partition(",")
    if not head.startswith("data:") or "json" not in head:
        raise SourceMapError("a data: URL that does not hold JSON")
    if head.endswith(";base64"):
        try:
            return base64.b64decode(data, validate=True)
        except ValueError:
            raise SourceMapError("a data: URL whose base64 is broken") from None
    return urllib.parse.unquote_to_bytes(data)


def _resolved(decoded: DecodedMap, map_dir: str, bundle_text: str | None) -> DecodedMap:
    """Sources resolved; the bundle's identifiers read where its text is at hand."""
    resolved = dataclasses.replace(
        decoded, sources=tuple(resolve_source(s, map_dir) if s else "" for s in decoded.sources)
    )
    return resolved.with_tokens(bundle_text) if bundle_text is not None else resolved


def _read(full: Path, max_bytes: int) -> bytes:
    size = full.stat().st_size
    if size > max_bytes:
        raise SourceMapError(f"{size} bytes, over the bound of {max_bytes}")
    return full.read_bytes()


def find_maps(root: Path, *, max_bytes: int = MAX_MAP_BYTES, limit: int = MAX_BUNDLES) -> FoundMaps:
    """Every bundle under ``root`` with a usable map: the map its ``sourceMappingURL`` names
    (a file under ``root``, or inline), else ``<bundle>.map`` beside it; and every ``.map``
    file no bundle claimed, for the bundle its name says (``app.js.map``: ``app.js``)."""
    root = root.resolve()
    found = FoundMaps()
    bundles, map_files, any_maps = _walk(root)
    claimed: set[str] = set()
    for rel in bundles:
        if len(found.maps) >= limit:
            found.refused.append((rel, f"over the bound of {limit} bundles"))
            continue
        try:
            raw_map, map_rel, text = _map_of(root, rel, max_bytes, any_maps)
        except (OSError, SourceMapError) as exc:
            found.refused.append((rel, str(exc)))
            continue
        if raw_map is None:
            continue
        if map_rel:
            claimed.add(map_rel)
        try:
            decoded = parse_map(raw_map, max_bytes=max_bytes)
        except SourceMapError as exc:
            found.refused.append((map_rel or rel, str(exc)))
            continue
        found.maps[rel] = _resolved(decoded, posixpath.dirname(map_rel or rel), text)
    for map_rel in map_files:
        if map_rel in claimed:
            continue
        if len(found.maps) >= limit:
            found.refused.append((map_rel, f"over the bound of {limit} bundles"))
            continue
        try:
            decoded = parse_map(_read(root / map_rel, max_bytes), max_bytes=max_bytes)
        except (OSError, SourceMapError) as exc:
            found.refused.append((map_rel, str(exc)))
            continue
        bundle = map_rel.removesuffix(MAP_SUFFIX)
        found.maps.setdefault(bundle, _resolved(decoded, posixpath.dirname(map_rel), None))
    return found


def _walk(root: Path) -> tuple[list[str], list[str], set[str]]:
    """Bundles, maps named after a bundle (``app.js.map``), and every ``.map`` file (what a
    ``sourceMappingURL`` comment may name) under ``root``; links are not followed."""
    bundles: list[str] = []
    map_files: list[str] = []
    any_maps: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in ALWAYS_SKIP_DIRS)
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        for name in sorted(filenames):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if (Path(dirpath) / name).is_symlink():
                continue
            if name.endswith(BUNDLE_SUFFIXES):
                bundles.append(rel)
            elif name.endswith(MAP_SUFFIX):
                any_maps.add(rel)
                if name.removesuffix(MAP_SUFFIX).endswith(BUNDLE_SUFFIXES):
                    map_files.append(rel)
    return bundles, map_files, any_maps


def _map_of(
    root: Path, rel: str, max_bytes: int, map_files: set[str]
) -> tuple[bytes | None, str, str | None]:
    """A bundle's map (its JSON), the map file's path ("" for an inline map) and the bundle's
    text; (None, "", None) when the bundle has none."""
    full = root / rel
    size = full.stat().st_size
    if size > max_bytes:
        return None, "", None  # too large to read for its comment: its .map is used alone
    beside = rel + MAP_SUFFIX
    with full.open("rb") as f:  # most .js files are sources: their tail says so
        f.seek(max(0, size - TAIL_BYTES))
        tail = f.read()
    whole_line = b"\n" in tail.rstrip() or size <= TAIL_BYTES
    if whole_line and b"sourceMappingURL=" not in tail and beside not in map_files:
        return None, "", None
    text = full.read_bytes().decode("utf-8", "replace")
    url = link_of(text)
    if url is not None and url.startswith("data:"):
        return _data_url(url), "", text
    if url is not None and not _URL.match(url):
        target = posixpath.normpath(posixpath.join(posixpath.dirname(rel), url.split("?")[0]))
        if target in map_files:  # never a file outside the tree, nor one of another kind
            return _read(root / target, max_bytes), target, text
    if beside in map_files:  # a remote URL is never fetched; a map beside the bundle is used
        return _read(root / beside, max_bytes), beside, text
    return None, "", None
