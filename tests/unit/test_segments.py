"""Keyword-index segments: stored and read back whole, merged without losing a posting."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from shared.index.chunking import chunk_file
from shared.index.segments import (
    MERGE_FACTOR,
    Segment,
    SegmentInfo,
    chunk_tokens,
    invert,
    merge,
    merge_plan,
    segment_of,
)

ROOT = Path(__file__).resolve().parents[2]


def chunks(folder: str = "shared/index") -> list:  # type: ignore[type-arg]
    out = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        out += chunk_file("th", str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
    return out


def postings_of(seg: Segment) -> dict[tuple[str, str], int]:
    """(chunk id, term) -> term frequency, whatever the segment's internal numbering."""
    p = seg.postings
    out = {}
    for t, term in enumerate(p.vocab):
        for k in range(p.indptr[t], p.indptr[t + 1]):
            out[(seg.ids[p.docs[k]], term)] = int(p.tfs[k])
    return out


def test_a_segment_reads_back_as_it_was_written_with_odd_paths() -> None:
    some = chunks()[:30]
    odd = some[0].model_copy(update={"path": "caf\udce9/ünï code.py", "id": "x" * 40})
    seg = segment_of([*some, odd])

    back = Segment.from_fields({k.encode(): v for k, v in seg.fields().items()})
    assert [back.id_at(i) for i in range(len(back))] == seg.ids

    assert back.ids == seg.ids and back.paths == seg.paths and back.names == seg.names
    assert "caf\udce9/ünï code.py" in back.paths
    for a, b in [(back.starts, seg.starts), (back.ends, seg.ends), (back.path_of, seg.path_of)]:
        assert np.array_equal(a, b)
    assert postings_of(back) == postings_of(seg)
    assert np.array_equal(back.postings.lengths, seg.postings.lengths)


def format_1(seg: Segment) -> dict[str, bytes]:
    """A segment as written before FORMAT 2: every field raw."""
    p = seg.postings

    def raw(a: np.ndarray, dtype: str) -> bytes:
        return np.ascontiguousarray(a, dtype=dtype).tobytes()

    return {
        "format": b"1",
        "ids": seg.id_blob,
        "paths": "\0".join(seg.paths).encode("utf-8", errors="surrogateescape"),
        "path_of": raw(seg.path_of, "<i4"),
        "starts": raw(seg.starts, "<i4"),
        "ends": raw(seg.ends, "<i4"),
        "names": seg.name_blob,
        "vocab": "\0".join(p.vocab).encode(),
        "indptr": raw(p.indptr, "<i8"),
        "docs": raw(p.docs, "<i4"),
        "tfs_dtype": b"<u2",
        "tfs": raw(p.tfs, "<u2"),
        "lengths": raw(p.lengths, "<i4"),
    }


def test_a_segment_stored_before_compression_still_reads() -> None:
    seg = segment_of(chunks()[:40])
    back = Segment.from_fields(format_1(seg))
    assert back.ids == seg.ids and back.paths == seg.paths and back.names == seg.names
    assert postings_of(back) == postings_of(seg)
    assert np.array_equal(back.postings.docs, seg.postings.docs)


def test_the_stored_form_is_compressed() -> None:
    seg = segment_of(chunks())
    packed = sum(len(v) for v in seg.fields().values())
    assert packed * 2.5 < sum(len(v) for v in format_1(seg).values())


def test_an_empty_segment_reads_back_empty() -> None:
    back = Segment.from_fields(segment_of([]).fields())
    assert back.ids == [] and back.paths == [] and back.postings.vocab == []


def test_merging_keeps_exactly_the_live_documents_postings() -> None:
    all_chunks = chunks("shared")
    cuts = [0, 40, 90, 130, len(all_chunks)]
    segs = [segment_of(all_chunks[lo:hi]) for lo, hi in itertools.pairwise(cuts)]
    lives = [np.ones(len(s), dtype=bool) for s in segs]
    lives[0][[0, 5, 7]] = False
    lives[2][:] = False  # a wholly dead segment leaves nothing behind, not even its terms
    lives[3][::2] = False

    merged, moved = merge(list(zip(segs, lives, strict=True)))

    alive = np.concatenate(lives)
    expected = segment_of([ch for ch, keep in zip(all_chunks, alive, strict=True) if keep])
    assert merged.ids == expected.ids
    assert postings_of(merged) == postings_of(expected)
    assert sorted(merged.postings.vocab) == sorted(expected.postings.vocab)
    assert [merged.paths[i] for i in merged.path_of] == [
        expected.paths[i] for i in expected.path_of
    ]
    assert merged.names == expected.names
    assert np.array_equal(merged.postings.lengths, expected.postings.lengths)
    assert moved[0][0] == -1 and moved[0][1] == 0 and moved[1][0] == 40 - 3
    assert (moved[2] == -1).all()


def test_invert_counts_repeated_tokens_in_the_length() -> None:
    inv = invert([["a", "b", "a"], [], ["b"]])
    assert inv.vocab == ["a", "b"]
    assert inv.lengths.tolist() == [3, 0, 1]
    assert inv.docs.tolist() == [0, 0, 2] and inv.tfs.tolist() == [2, 1, 1]


def test_merge_plan_waits_for_a_full_tier_and_rewrites_mostly_dead_segments() -> None:
    small = [SegmentInfo(i, 3, 0) for i in range(MERGE_FACTOR - 1)]
    big = [SegmentInfo(100, 5_000, 0)]
    assert merge_plan([*big, *small]) == []
    assert merge_plan([*big, *small, SegmentInfo(50, 4, 0)]) == [s.sid for s in small] + [50]
    assert merge_plan([*big, SegmentInfo(7, 100, 51)]) == [7]
    assert merge_plan([SegmentInfo(8, 10, 10)]) == [8]  # nothing live: dropped


def test_tokens_are_the_path_and_the_text() -> None:
    c = chunks()[0]
    assert c.path.startswith("shared/index/") and "shared" not in c.text
    assert {"shared", "index"} <= set(chunk_tokens(c))


def test_a_token_repeated_past_65535_times_keeps_its_count() -> None:
    chunk = chunks()[0].model_copy(update={"text": "spam " * 70_000, "id": "y" * 40})
    back = Segment.from_fields(segment_of([chunk]).fields())
    assert int(back.postings.tfs.max()) == 70_000


def test_merge_plan_stops_at_the_segment_size_cap() -> None:
    tier = [SegmentInfo(i, 100 + i, 0) for i in range(MERGE_FACTOR)]
    assert merge_plan(tier, max_docs=10_000) == [s.sid for s in tier]
    # Only the smallest that fit under the cap, in index order; one alone is not a merge.
    assert merge_plan(tier, max_docs=205) == [0, 1]
    assert merge_plan(tier, max_docs=150) == []
