"""Source maps (ECMA-426, "Source Map" format version 3) decoded once into sorted arrays.

A bundler (esbuild, webpack, Rollup, Vite) writes, next to each bundle, a JSON map from every
position of the generated code back to a position in an original file. Decoding the
``mappings`` string (base64 VLQ) is done once, when a map is stored (shared/intake/
sourcemap_store.py); what is kept is six int32 columns per segment, so a lookup at intake is a
binary search. Maps come from an indexed tree or from CI, and are treated like any input from
outside: size, counts and every string are bounded, and a malformed map is refused whole with
the reason, never half-read.

Spec references are to ECMA-426 1st edition (https://tc39.es/ecma426/): §8 the map object,
§8.1 ``mappings``, §8.2 index maps (``sections``), §11.1.1 ``sourceMappingURL`` comments.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from shared.core.domain import one_line

MAX_MAP_BYTES = 64 * 1024 * 1024
MAX_SOURCES = 100_000
MAX_NAMES = 1_000_000
MAX_SEGMENTS = 20_000_000
MAX_SECTIONS = 10_000
SOURCE_MAX_CHARS = 1000
NAME_MAX_CHARS = 200
_BLOB_MAGIC = b"THSM1"

# §8.1: the 64 characters of base64, each carrying six bits of a VLQ digit.
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_DIGIT = {c: i for i, c in enumerate(_B64)}
_VLQ_CONTINUE = 0x20  # §8.1.1: the sixth bit says another digit follows
_VLQ_MASK = 0x1F
_IDENT = re.compile(r"[A-Za-z_$][\w$]*")
# §8: a map may begin with the XSSI guard ")]}'" and must then have it stripped.
_XSSI = re.compile(rb"^\)\]\}'[^\n]*\n?")


class SourceMapError(ValueError):
    """A map that cannot be used, and why (refused whole)."""


@dataclass(frozen=True)
class Origin:
    """Where a generated position came from: an original file, its line and column (1-based,
    as traces print them) and the original identifier at that position, if the map names one."""

    source: str
    line: int
    column: int
    name: str = ""


@dataclass(frozen=True)
class DecodedMap:
    """A map's segments sorted by generated position: generated line and column (0-based),
    source index, original line and column (0-based), name index (-1: none). Source index -1
    marks a segment that maps to nothing (a one-field segment, §8.1)."""

    sources: tuple[str, ...]
    names: tuple[str, ...]
    segments: np.ndarray  # shape (n, 6), int32
    file: str = ""
    # The identifier the generated code holds at each named segment (a minified ``m`` where the
    # map names ``applyDiscount``): index into ``tokens``, -1 where unknown; empty when the
    # bundle's text was not at hand (``with_tokens``).
    tokens: tuple[str, ...] = ()
    token_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    # §8 ``sourcesContent``: each source's text where the map carries it ("" where not).
    contents: tuple[str, ...] = ()

    def source_line(self, source: str, line: int) -> str | None:
        """Line ``line`` (1-based) of an original source, if the map carries its text."""
        at = self._source_index.get(source)
        text = self.contents[at] if at is not None and at < len(self.contents) else ""
        lines = text.split("\n") if text else []
        return lines[line - 1].rstrip("\r") if 0 < line <= len(lines) else None

    @cached_property
    def _source_index(self) -> dict[str, int]:
        return {s: i for i, s in reversed(list(enumerate(self.sources)))}

    def lookup(self, line: int, column: int) -> Origin | None:
        """The original position of 1-based ``line`` and ``column`` in the generated file.

        The segment chosen is the last one at or before the position, across lines, as Node's
        own ``SourceMap.findEntry`` does (lib/internal/source_map/source_map.js), so a frame
        maps where ``node --enable-source-maps`` prints it."""
        seg = self.segments
        if not len(seg) or line < 1 or column < 1:
            return None
        at = int(np.searchsorted(self._keys, ((line - 1) << 32) | (column - 1), side="right")) - 1
        if at < 0 or seg[at, 2] < 0:
            return None
        _, _, src, oline, ocol, name = (int(v) for v in seg[at])
        return Origin(self.sources[src], oline + 1, ocol + 1, self.names[name] if name >= 0 else "")

    def original_name(self, line: int, column: int, minified: str) -> str:
        """The original name of the binding a minified bundle calls ``minified`` at 1-based
        ``line``/``column``: the name the map gives the nearest place at or before it where
        the generated code holds that identifier (its declaration, or a use of it). "" when
        the bundle's text was not at hand or the identifier is nowhere named."""
        at = self._by_token.get(minified)
        if at is None:
            return ""
        i = int(np.searchsorted(at, ((line - 1) << 32) | (column - 1), side="right")) - 1
        if i < 0:
            return ""
        seg = self.segments[int(self._token_rows[minified][i])]
        return self.names[int(seg[5])]

    @cached_property
    def _token_rows(self) -> dict[str, np.ndarray]:
        rows: dict[str, np.ndarray] = {}
        if len(self.token_ids) == len(self.segments) and len(self.tokens):
            order = np.argsort(self.token_ids, kind="stable")
            ids = self.token_ids[order]
            for t in np.unique(ids[ids >= 0]):
                rows[self.tokens[int(t)]] = order[ids == t]
        return rows

    @cached_property
    def _by_token(self) -> dict[str, np.ndarray]:
        return {token: self._keys[rows] for token, rows in self._token_rows.items()}

    def with_tokens(self, generated: str) -> DecodedMap:
        """This map with the generated identifier at each named segment, read from the
        bundle's text (columns count UTF-16 units in the spec, characters here: equal for the
        ASCII that minifiers write)."""
        lines = generated.split("\n")
        ids = np.full(len(self.segments), -1, dtype=np.int32)
        index: dict[str, int] = {}
        for row in np.flatnonzero(self.segments[:, 5] >= 0):
            gline, gcol = int(self.segments[row, 0]), int(self.segments[row, 1])
            m = _IDENT.match(lines[gline], gcol) if gline < len(lines) else None
            if m is not None:
                ids[row] = index.setdefault(m.group(0), len(index))
        return replace(self, tokens=tuple(index), token_ids=ids)

    @cached_property
    def _keys(self) -> np.ndarray:
        seg = self.segments
        return (seg[:, 0].astype(np.int64) << 32) | seg[:, 1].astype(np.int64)

    def to_blob(self) -> bytes:
        """The decoded map as stored in Redis: a JSON header, then the segments, compressed."""
        header = json.dumps(
            {
                "sources": self.sources,
                "names": self.names,
                "file": self.file,
                "tokens": self.tokens,
                "contents": self.contents,
            }
        ).encode()
        body = np.ascontiguousarray(self.segments, dtype="<i4").tobytes()
        if len(self.tokens):
            body += np.ascontiguousarray(self.token_ids, dtype="<i4").tobytes()
        return _BLOB_MAGIC + zlib.compress(struct.pack("<I", len(header)) + header + body, 6)

    @classmethod
    def from_blob(cls, blob: bytes) -> DecodedMap:
        if not blob.startswith(_BLOB_MAGIC):
            raise SourceMapError("not a stored source map")
        inflater = zlib.decompressobj()
        raw = inflater.decompress(blob[len(_BLOB_MAGIC) :], MAX_MAP_BYTES * 2)
        if inflater.unconsumed_tail:
            raise SourceMapError("stored source map larger than its bound")
        (size,) = struct.unpack_from("<I", raw)
        header = json.loads(raw[4 : 4 + size])
        tokens = tuple(header.get("tokens", ()))
        arrays = np.frombuffer(raw[4 + size :], dtype="<i4")
        n = len(arrays) // 7 if tokens else len(arrays) // 6
        segments = arrays[: n * 6].reshape(-1, 6)
        ids = arrays[n * 6 :] if tokens else np.zeros(0, dtype=np.int32)
        return cls(
            tuple(header["sources"]),
            tuple(header["names"]),
            segments,
            header["file"],
            tokens,
            ids,
            tuple(header.get("contents", ())),
        )


def _vlq_line(text: str, at: int) -> list[list[int]]:
    """The segments of one generated line of ``mappings`` (§8.1), each a list of its relative
    fields; ``at`` is the line's offset in the whole string, for error messages."""
    segments: list[list[int]] = []
    for field_text in text.split(","):
        if not field_text:
            at += 1
            continue
        values: list[int] = []
        value = shift = 0
        for ch in field_text:
            digit = _DIGIT.get(ch)
            if digit is None:
                raise SourceMapError(f"mappings: {ch!r} at offset {at} is not base64")
            at += 1
            value += (digit & _VLQ_MASK) << shift
            if digit & _VLQ_CONTINUE:
                shift += 5
                if shift > 30:
                    raise SourceMapError(f"mappings: a number past 32 bits at offset {at}")
                continue
            # §8.1.1: the lowest bit of the value is its sign
            values.append(-(value >> 1) if value & 1 else value >> 1)
            value = shift = 0
        if shift:
            raise SourceMapError(f"mappings: a number cut off at offset {at}")
        if len(values) not in (1, 4, 5):
            raise SourceMapError(f"mappings: a segment of {len(values)} fields at offset {at}")
        segments.append(values)
        at += 1
    return segments


def decode_mappings(mappings: str, n_sources: int, n_names: int) -> np.ndarray:
    """``mappings`` as absolute segments (generated line, generated column, source, original
    line, original column, name), in the order written (§8.1: the generated column is relative
    within its line; the other fields are relative to the previous segment that has them)."""
    rows: list[tuple[int, int, int, int, int, int]] = []
    src = oline = ocol = name = 0
    at = 0
    for gline, line_text in enumerate(mappings.split(";")):
        gcol = 0
        for values in _vlq_line(line_text, at):
            gcol += values[0]
            if gcol < 0:
                raise SourceMapError(f"mappings: a negative column on line {gline + 1}")
            if len(values) == 1:
                rows.append((gline, gcol, -1, -1, -1, -1))
                continue
            src += values[1]
            oline += values[2]
            ocol += values[3]
            if not 0 <= src < n_sources or oline < 0 or ocol < 0:
                raise SourceMapError(
                    f"mappings: a source position out of range on line {gline + 1}"
                )
            this_name = -1
            if len(values) == 5:
                name += values[4]
                if not 0 <= name < n_names:
                    raise SourceMapError(f"mappings: a name out of range on line {gline + 1}")
                this_name = name
            rows.append((gline, gcol, src, oline, ocol, this_name))
            if len(rows) > MAX_SEGMENTS:
                raise SourceMapError(f"more than {MAX_SEGMENTS} segments")
        at += len(line_text) + 1
    if not rows:
        return np.zeros((0, 6), dtype=np.int32)
    out = np.array(rows, dtype=np.int64)
    if out.max() >= 2**31:
        raise SourceMapError("mappings: a position past 2^31")
    order = np.lexsort((out[:, 1], out[:, 0]))  # stable: equal positions keep their order
    return out[order].astype(np.int32)


def _strings(value: Any, what: str, limit: int, chars: int) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise SourceMapError(f"{what} is not a list")
    if len(value) > limit:
        raise SourceMapError(f"{what}: more than {limit}")
    # §8: an entry may be null (a source with no name); it stays in place so indexes hold.
    return tuple(one_line(v, chars) if isinstance(v, str) else "" for v in value)


def _source_url(root: str, source: str) -> str:
    """§8: ``sourceRoot`` is prepended to each source (with a slash between, when neither
    side has one)."""
    if not root or not source or re.match(r"^[a-zA-Z][\w+.-]*:", source) or source.startswith("/"):
        return source
    return root + source if root.endswith("/") else f"{root}/{source}"


def _plain(obj: dict[str, Any]) -> DecodedMap:
    version = obj.get("version")
    if version != 3:
        raise SourceMapError(f"version is {version!r}, not 3")
    mappings = obj.get("mappings")
    if not isinstance(mappings, str):
        raise SourceMapError("mappings is missing or not a string")
    root = obj.get("sourceRoot")
    root = root if isinstance(root, str) else ""
    sources = _strings(obj.get("sources"), "sources", MAX_SOURCES, SOURCE_MAX_CHARS)
    sources = tuple(one_line(_source_url(root, s), SOURCE_MAX_CHARS) for s in sources)
    names = _strings(obj.get("names"), "names", MAX_NAMES, NAME_MAX_CHARS)
    file = obj.get("file")
    contents = obj.get("sourcesContent")
    return DecodedMap(
        sources,
        names,
        decode_mappings(mappings, len(sources), len(names)),
        one_line(file, SOURCE_MAX_CHARS) if isinstance(file, str) else "",
        contents=tuple(c if isinstance(c, str) else "" for c in contents[: len(sources)])
        if isinstance(contents, list)
        else (),
    )


def _indexed(obj: dict[str, Any]) -> DecodedMap:
    """§8.2: an index map's sections, each a map placed at an offset, flattened into one."""
    if obj.get("version") != 3:
        raise SourceMapError(f"version is {obj.get('version')!r}, not 3")
    sections = obj["sections"]
    if not isinstance(sections, list) or len(sections) > MAX_SECTIONS:
        raise SourceMapError(f"sections is not a list of at most {MAX_SECTIONS}")
    sources: list[str] = []
    names: list[str] = []
    contents: list[str] = []
    parts: list[np.ndarray] = []
    last = (-1, -1)
    for i, section in enumerate(sections):
        offset = section.get("offset") if isinstance(section, dict) else None
        inner = section.get("map") if isinstance(section, dict) else None
        if not isinstance(offset, dict) or not isinstance(inner, dict):
            raise SourceMapError(f"section {i}: needs an offset and a map (url is not supported)")
        line, column = offset.get("line"), offset.get("column")
        if not isinstance(line, int) or not isinstance(column, int) or line < 0 or column < 0:
            raise SourceMapError(f"section {i}: offset needs a line and a column")
        if (line, column) <= last:
            raise SourceMapError(f"section {i}: sections must be in order, not overlapping")
        last = (line, column)
        if "sections" in inner:
            raise SourceMapError(f"section {i}: an index map inside an index map")
        decoded = _plain(inner)
        seg = decoded.segments.astype(np.int64)
        if len(seg):
            first = seg[:, 0] == 0
            seg[first, 1] += column  # the offset's column applies to its first line only
            seg[:, 0] += line
            has_source = seg[:, 2] >= 0
            seg[has_source, 2] += len(sources)
            has_name = seg[:, 5] >= 0
            seg[has_name, 5] += len(names)
            parts.append(seg)
        contents += [*decoded.contents, *[""] * (len(decoded.sources) - len(decoded.contents))]
        sources += decoded.sources
        names += decoded.names
        if len(sources) > MAX_SOURCES or len(names) > MAX_NAMES:
            raise SourceMapError("sections: too many sources or names")
    merged = np.concatenate(parts) if parts else np.zeros((0, 6), dtype=np.int64)
    if len(merged) and merged.max() >= 2**31:
        raise SourceMapError("sections: a position past 2^31")
    order = np.lexsort((merged[:, 1], merged[:, 0]))
    file = obj.get("file")
    return DecodedMap(
        tuple(sources),
        tuple(names),
        merged[order].astype(np.int32),
        one_line(file, SOURCE_MAX_CHARS) if isinstance(file, str) else "",
        contents=tuple(contents),
    )


def parse_map(raw: bytes, *, max_bytes: int = MAX_MAP_BYTES) -> DecodedMap:
    """A map's JSON text decoded, or SourceMapError saying why it cannot be used."""
    if len(raw) > max_bytes:
        raise SourceMapError(f"{len(raw)} bytes, over the bound of {max_bytes}")
    raw = _XSSI.sub(b"", raw, count=1)
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise SourceMapError(f"not JSON ({str(exc)[:120]})") from None
    if not isinstance(obj, dict):
        raise SourceMapError("not a JSON object")
    return _indexed(obj) if "sections" in obj else _plain(obj)
