"""Source maps from outside (an indexed tree, a CI upload) decoded, or refused with the reason."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from shared.index.bundles import find_maps, link_of, resolve_source
from shared.intake.sourcemap import DecodedMap, SourceMapError, parse_map

# "AAAA;AACA,IAAE" (ECMA-426 §8.1): line 1 col 0 -> a.js 1:0; line 2 col 0 -> a.js 2:0,
# col 4 -> a.js 2:2 named "run".
SMALL = {
    "version": 3,
    "sources": ["a.js"],
    "names": ["run"],
    "mappings": "AAAA;AACA,IAAEA",
    "sourcesContent": ["first\nsecond line"],
}


def _raw(obj: object) -> bytes:
    return json.dumps(obj).encode()


def test_a_small_map_maps_each_position_to_its_source_line_and_name() -> None:
    m = parse_map(_raw(SMALL))
    first = m.lookup(1, 1)
    assert first is not None and (first.source, first.line) == ("a.js", 1)
    at = m.lookup(2, 7)
    assert at is not None and (at.line, at.column, at.name) == (2, 3, "run")
    assert m.source_line("a.js", 2) == "second line"
    again = DecodedMap.from_blob(m.to_blob())
    assert again.lookup(2, 7) == at and again.source_line("a.js", 1) == "first"


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (_raw({**SMALL, "version": 2}), "not 3"),
        (_raw({**SMALL, "mappings": "AA!A"}), "is not base64"),
        (_raw({**SMALL, "mappings": "AAA"}), "a segment of 3 fields"),
        (_raw({**SMALL, "mappings": "AAg"}), "cut off"),
        (_raw({**SMALL, "mappings": "ACAA"}), "source position out of range"),
        (_raw({**SMALL, "mappings": "AAAAC"}), "a name out of range"),
        (_raw({**SMALL, "mappings": "D"}), "negative column"),
        (_raw({**SMALL, "mappings": "gggggggA"}), "past 32 bits"),
        (_raw({**SMALL, "sources": "a.js"}), "sources is not a list"),
        (_raw({**SMALL, "mappings": 5}), "mappings is missing"),
    ],
)
def test_a_broken_map_is_refused_whole_with_the_reason(raw: bytes, why: str) -> None:
    with pytest.raises(SourceMapError, match=why):
        parse_map(raw)


def test_an_oversize_map_is_refused_before_it_is_read() -> None:
    with pytest.raises(SourceMapError, match="over the bound"):
        parse_map(b" " * 101, max_bytes=100)


def test_the_xssi_guard_is_stripped_and_strings_are_bounded() -> None:
    hostile = {**SMALL, "sources": ["a\n\u2028" + "x" * 5000], "names": ["r\x00un"]}
    m = parse_map(b")]}'\n" + _raw(hostile))
    assert "\n" not in m.sources[0] and len(m.sources[0]) <= 1000
    assert "\x00" not in m.names[0]


def test_an_index_map_places_each_section_at_its_offset() -> None:
    index = {
        "version": 3,
        "sections": [
            {"offset": {"line": 0, "column": 0}, "map": SMALL},
            {"offset": {"line": 10, "column": 5}, "map": {**SMALL, "sources": ["b.js"]}},
        ],
    }
    m = parse_map(_raw(index))
    first = m.lookup(2, 5)
    assert first is not None and (first.source, first.line, first.name) == ("a.js", 2, "run")
    moved = m.lookup(11, 6)  # the second section's line 1, column 0 shifted by 5
    assert moved is not None and (moved.source, moved.line) == ("b.js", 1)
    with pytest.raises(SourceMapError, match="in order"):
        parse_map(_raw({"version": 3, "sections": index["sections"][::-1]}))


@pytest.mark.parametrize(
    ("source", "map_dir", "want"),
    [
        ("../src/cart.js", "dist", "src/cart.js"),
        ("webpack://shop/./src/cart.js", "dist/js", "src/cart.js"),
        ("webpack:///src/cart.ts?abc1", "dist", "src/cart.ts"),
        ("../../../app/src/cart.js", "dist", "app/src/cart.js"),
        ("/home/ci/app/src/cart.js", "dist", "/home/ci/app/src/cart.js"),
        ("file:///home/ci/app/src/cart.js", "dist", "/home/ci/app/src/cart.js"),
        ("../src/my cart (old).js", "dist", "src/my%20cart%20%28old%29.js"),
    ],
)
def test_sources_resolve_to_paths_a_frame_mapper_places(
    source: str, map_dir: str, want: str
) -> None:
    assert resolve_source(source, map_dir) == want


def test_a_tree_gives_up_no_map_outside_itself_and_fetches_nothing(tmp_path: Path) -> None:
    outside = tmp_path / "secret.js.map"
    outside.write_text(json.dumps(SMALL))
    root = tmp_path / "repo"
    (root / "dist").mkdir(parents=True)
    (root / ".gitignore").write_text("dist/\n")  # build output: read all the same
    (root / "dist" / "a.js").write_text("x()\n//# sourceMappingURL=../../secret.js.map\n")
    (root / "dist" / "b.js").write_text("x()\n//# sourceMappingURL=https://cdn.example/b.js.map\n")
    (root / "dist" / "c.js").write_text("x()\n//# sourceMappingURL=c.js.map\n")
    (root / "dist" / "c.js.map").write_text("{broken")
    inline = base64.b64encode(json.dumps(SMALL).encode()).decode()
    (root / "dist" / "d.js").write_text(
        f"x()\n//# sourceMappingURL=data:application/json;charset=utf-8;base64,{inline}\n"
    )
    (root / "dist" / "e.js.map").write_text(json.dumps(SMALL))  # beside a bundle not deployed here
    (root / "dist" / "link.js.map").symlink_to(outside)
    found = find_maps(root)
    assert sorted(found.maps) == ["dist/d.js", "dist/e.js"]
    assert found.maps["dist/d.js"].sources == ("dist/a.js",)
    assert [p for p, _ in found.refused] == ["dist/c.js.map"]
    assert "not JSON" in found.refused[0][1]


def test_the_link_comment_is_read_only_from_the_last_lines() -> None:
    assert link_of("code\n//# sourceMappingURL=app.js.map\n") == "app.js.map"
    assert link_of("/*# sourceMappingURL=app.js.map */") == "app.js.map"
    assert link_of("//# sourceMappingURL=early.js.map\n" + "code()\n" * 5) is None
