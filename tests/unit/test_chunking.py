"""Unit tests of cutting source files into line-ranged chunks with deterministic ids."""

from __future__ import annotations

import itertools

import pytest

from shared.index.chunking import TRUNCATED, chunk_file, embedding_text, language_of


def functions(n: int, body: int = 8) -> list[str]:
    """``n`` Python-looking functions of ``body`` lines, separated by a blank line.

    Line-window tests give them a non-Python path.
    """
    lines: list[str] = []
    for f in range(n):
        lines.append(f"def handler_{f}(request):")
        lines.extend(f"    value_{f}_{j} = request.get('k{j}')" for j in range(body))
        lines.append("")
    return lines


def test_line_ranges_are_one_based_inclusive() -> None:
    lines = functions(12)
    for chunk in chunk_file("repo", "svc/app.swift", "\n".join(lines), size=25, overlap=5):
        assert chunk.text == "\n".join(lines[chunk.start_line - 1 : chunk.end_line])


def test_chunks_cover_every_non_blank_line() -> None:
    lines = functions(30)
    chunks = chunk_file("repo", "svc/app.swift", "\n".join(lines) + "\n\n\n", size=25, overlap=5)
    covered = {n for c in chunks for n in range(c.start_line, c.end_line + 1)}
    non_blank = {i + 1 for i, line in enumerate(lines) if line.strip()}
    assert non_blank <= covered
    assert max(c.end_line for c in chunks) <= len(lines)


def test_consecutive_chunks_overlap_by_the_configured_number_of_lines() -> None:
    chunks = chunk_file("repo", "svc/app.swift", "\n".join(functions(30)), size=25, overlap=5)
    assert len(chunks) > 3
    for prev, nxt in itertools.pairwise(chunks):
        assert prev.end_line - nxt.start_line + 1 == 5


def test_chunk_ends_before_a_top_level_line_instead_of_cutting_a_function() -> None:
    # Functions are 10 lines (def, 8 body lines, blank). A 25-line window would end inside
    # handler_2 (lines 21-30); the boundary in its last quarter is line 21, ``def handler_2``.
    lines = functions(6)
    first = chunk_file("repo", "svc/app.swift", "\n".join(lines), size=25, overlap=5)[0]
    assert (first.start_line, first.end_line) == (1, 20)
    assert lines[first.end_line] == "def handler_2(request):"


def test_without_any_boundary_windows_are_exactly_the_configured_size() -> None:
    lines = [f"    step_{i} = run({i})" for i in range(100)]
    chunks = chunk_file("repo", "svc/app.swift", "\n".join(lines), size=20, overlap=4)
    assert [(c.start_line, c.end_line) for c in chunks[:3]] == [(1, 20), (17, 36), (33, 52)]
    assert chunks[-1].end_line == 100


def test_same_text_gives_the_same_ids() -> None:
    text = "\n".join(functions(20))
    first = chunk_file("repo", "svc/app.py", text, size=25, overlap=5)
    again = chunk_file("repo", "svc/app.py", text, size=25, overlap=5)
    assert [c.id for c in first] == [c.id for c in again]
    assert len({c.id for c in first}) == len(first)


def test_same_text_in_another_file_gets_other_ids() -> None:
    text = "\n".join(functions(3))
    a = chunk_file("repo", "svc/a.py", text)
    b = chunk_file("repo", "svc/b.py", text)
    assert {c.id for c in a}.isdisjoint(c.id for c in b)


def test_edit_at_the_end_of_a_big_file_changes_only_the_last_chunk_id() -> None:
    lines = functions(40)
    before = chunk_file("repo", "svc/app.swift", "\n".join(lines), size=25, overlap=5)
    lines[-2] = "    value_39_7 = request.get('changed')"  # last non-blank line
    after = chunk_file("repo", "svc/app.swift", "\n".join(lines), size=25, overlap=5)
    assert len(before) == len(after) > 5
    assert [c.id for c in before[:-1]] == [c.id for c in after[:-1]]
    assert before[-1].id != after[-1].id
    assert before[-1].content_hash != after[-1].content_hash


def test_huge_single_line_is_truncated_with_a_marker() -> None:
    chunks = chunk_file("repo", "static/bundle.js", "x" * 100_000, max_chars=6000)
    assert len(chunks) == 1
    assert TRUNCATED in chunks[0].text
    assert len(chunks[0].text) <= 6000 + len(TRUNCATED)


def test_chunk_of_many_long_lines_is_bounded_by_max_chars_plus_marker() -> None:
    text = "\n".join(["y" * 3000] * 10)
    [chunk] = chunk_file("repo", "data/rows.py", text, max_chars=6000)
    assert "truncated" in chunk.text
    assert len(chunk.text) <= 6000 + 30


@pytest.mark.parametrize("text", ["", "\n\n", "   \n\t\n"])
def test_empty_or_blank_file_has_no_chunks(text: str) -> None:
    assert chunk_file("repo", "svc/empty.py", text) == []


def test_chunks_carry_repo_path_and_language() -> None:
    [chunk] = chunk_file("shop", "src/Main.java", "class Main {}\n")
    assert (chunk.repo, chunk.path, chunk.language) == ("shop", "src/Main.java", "java")
    assert (chunk.start_line, chunk.end_line) == (1, 1)


@pytest.mark.parametrize(
    ("path", "language"),
    [
        ("svc/app.py", "python"),
        ("src/main/java/Shop.java", "java"),
        ("cmd/server/main.go", "go"),
        ("web/src/index.ts", "typescript"),
        ("Dockerfile", "dockerfile"),
        ("deploy/api/Dockerfile", "dockerfile"),
        ("LEGACY.PY", "python"),
        ("assets/logo.png", None),
        ("LICENSE", None),
    ],
)
def test_language_of_path(path: str, language: str | None) -> None:
    assert language_of(path) == language


# --- Python: chunks follow the code's structure ------------------------------------------------

PY_SOURCE = '''\
"""Pricing rules."""

import math

RATE = 0.2


def small(x):
    return x + 1


@cache
@other.decorator(arg=1)
def decorated(y):
    return y * 2


class Cart:
    """A cart."""

    currency = "EUR"

    def total(self):
        return sum(self.items)

    class Line:
        def amount(self):
            return 1
'''


def spans(chunks: list) -> list[tuple[int, int, str]]:
    return [(c.start_line, c.end_line, c.symbol) for c in chunks]


def test_python_chunks_end_at_definitions_and_carry_their_symbol() -> None:
    # size=4: nothing merges (merging stops at size // 2 lines); Cart is longer than 4 lines,
    # so it is split into its header, its method and its nested class.
    chunks = chunk_file("repo", "shop/pricing.py", PY_SOURCE, size=4, overlap=1)
    got = spans(chunks)
    assert (8, 9, "small") in got
    assert (12, 15, "decorated") in got  # decorators belong to the function
    assert (23, 24, "Cart.total") in got
    assert (26, 28, "Cart.Line") in got  # a nested class small enough stays whole
    header = next(c for c in chunks if c.symbol == "Cart")
    assert header.start_line == 18 and "currency" in header.text
    module = chunks[0]
    assert module.symbol == "" and module.start_line == 1 and "import math" in module.text


def test_small_neighbouring_definitions_share_a_chunk() -> None:
    chunks = chunk_file("repo", "shop/pricing.py", PY_SOURCE, size=60, overlap=10)
    assert len(chunks) == 1
    assert chunks[0].symbol == "small, decorated, Cart"
    assert (chunks[0].start_line, chunks[0].end_line) == (1, 28)


def test_a_long_function_is_cut_into_windows_that_keep_its_name() -> None:
    body = "\n".join(f"    step_{i} = run({i})" for i in range(200))
    chunks = chunk_file("repo", "jobs/batch.py", f"def process(job):\n{body}\n", size=40)
    assert len(chunks) > 3
    assert {c.symbol for c in chunks} == {"process"}
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 201


def test_python_chunks_cover_every_non_blank_line() -> None:
    lines = PY_SOURCE.splitlines()
    covered = {
        n
        for c in chunk_file("repo", "shop/pricing.py", PY_SOURCE, size=4, overlap=1)
        for n in range(c.start_line, c.end_line + 1)
    }
    assert {i + 1 for i, line in enumerate(lines) if line.strip()} <= covered


def test_python_that_does_not_parse_falls_back_to_line_windows() -> None:
    broken = "def ok():\n    return 1\n\ndef broken(:\n    pass\n" + "x = 1\n" * 100
    chunks = chunk_file("repo", "svc/broken.py", broken, size=25, overlap=5)
    assert chunks and all(c.symbol == "" for c in chunks)
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 105


def test_python_chunk_ids_are_deterministic_and_metadata_has_no_none() -> None:
    first = chunk_file("repo", "shop/pricing.py", PY_SOURCE, size=4, overlap=1)
    again = chunk_file("repo", "shop/pricing.py", PY_SOURCE, size=4, overlap=1)
    assert [c.id for c in first] == [c.id for c in again]
    for chunk in first:
        meta = chunk.metadata()
        assert all(v is not None for v in meta.values())
        assert meta.get("symbol", "") == chunk.symbol


def test_embedding_text_names_the_symbol() -> None:
    chunk = next(
        c for c in chunk_file("repo", "shop/pricing.py", PY_SOURCE, size=4) if c.symbol == "small"
    )
    assert embedding_text(chunk).startswith("shop/pricing.py small\n")
