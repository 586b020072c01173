"""A segment as a reader maps it: everything the stored segment said, found by key."""

from __future__ import annotations

import numpy as np
import pytest

from shared.core.domain import Chunk
from shared.index import segment_files
from shared.index.chunking import chunk_file, defined_names
from shared.index.segment_files import SegmentFile, arrays_of, image, keys_of
from shared.index.segments import Segment, chunk_tokens, segment_of


def chunks() -> list[Chunk]:
    a = chunk_file("r", "billing/coupons.py", "def apply(order):\n    return order\n")
    b = chunk_file(
        "r", "billing/\udcff-odd.py", "class Coupon:\n    def apply(self):\n        pass\n"
    )
    c = chunk_file("r", "core/run.py", "def run():\n    apply(1)\n" + "x = 1\n" * 200, size=40)
    return [*a, *b, *c]


def mapped(seg: Segment) -> SegmentFile:
    return SegmentFile(image(arrays_of(seg)))


def test_a_mapped_segment_answers_as_the_stored_one() -> None:
    cs = chunks()
    seg = segment_of(cs)
    f = mapped(seg)

    assert len(f) == len(cs)
    assert [f.id_at(d) for d in range(len(f))] == [c.id for c in cs]
    assert [f.path_at(d) for d in range(len(f))] == [c.path for c in cs]
    assert f.starts.tolist() == [c.start_line for c in cs]
    for path in {c.path for c in cs}:
        assert f.docs_of_path(path).tolist() == [i for i, c in enumerate(cs) if c.path == path]
    assert f.docs_of_path("billing/none.py").tolist() == []
    for name in ("apply", "Coupon", "run", "missing"):
        assert f.defining(name).tolist() == [
            i for i, c in enumerate(cs) if name in defined_names(c)
        ]
    vocab = seg.postings.vocab
    words = [*vocab, "nowhere"]
    assert f.find_terms(words, keys_of(words)).tolist() == [*range(len(vocab)), -1]
    assert np.array_equal(f.term_frequencies(), np.diff(seg.postings.indptr))
    docs = np.asarray([0, 2])
    held = [sum(1 for d in docs.tolist() if w in chunk_tokens(cs[d])) for w in seg.postings.vocab]
    assert f.terms_of(docs).tolist() == held


def test_an_empty_segment_maps() -> None:
    f = mapped(segment_of([]))
    assert len(f) == 0 and f.terms == 0
    assert f.find_terms(["x"], keys_of(["x"])).tolist() == [-1]
    assert f.docs_of_path("a.py").tolist() == [] and f.defining("a").tolist() == []


def test_strings_sharing_a_key_are_told_apart_by_the_stored_string(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Keys are 64 bits of BLAKE2b; force every string onto three keys and nothing that only
    shares a key with a term, path or name is found."""
    monkeypatch.setattr(segment_files, "key_of", lambda text: len(text) % 3)
    cs = chunks()
    seg = segment_of(cs)
    f = mapped(seg)

    vocab = seg.postings.vocab
    words = [*vocab, "zz", "zzz", "zzzz"]
    assert f.find_terms(words, keys_of(words)).tolist() == [*range(len(vocab)), -1, -1, -1]
    assert f.docs_of_path("core/ru.py").tolist() == []
    assert f.docs_of_path("core/run.py").tolist() == [
        i for i, c in enumerate(cs) if c.path == "core/run.py"
    ]
    assert f.defining("ran").tolist() == []
    assert f.defining("run").tolist() == [i for i, c in enumerate(cs) if "run" in defined_names(c)]


def test_a_file_shorter_than_its_header_says_is_refused() -> None:
    raw = image(arrays_of(segment_of(chunks())))
    with pytest.raises(segment_files.CorruptSegmentFile):
        SegmentFile(raw[: len(raw) // 2])
    with pytest.raises(segment_files.CorruptSegmentFile):
        SegmentFile(b"not a segment at all")
