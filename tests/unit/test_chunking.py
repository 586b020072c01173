"""Unit tests of cutting source files into line-ranged chunks with deterministic ids."""

from __future__ import annotations

import pytest

from shared.chunking import TRUNCATED, chunk_file, language_of


def functions(n: int, body: int = 8) -> list[str]:
    """``n`` Python functions of ``body`` indented lines each, separated by a blank line."""
    lines: list[str] = []
    for f in range(n):
        lines.append(f"def handler_{f}(request):")
        lines.extend(f"    value_{f}_{j} = request.get('k{j}')" for j in range(body))
        lines.append("")
    return lines


def test_line_ranges_are_one_based_inclusive() -> None:
    lines = functions(12)
    for chunk in chunk_file("repo", "svc/app.py", "\n".join(lines), size=25, overlap=5):
        assert chunk.text == "\n".join(lines[chunk.start_line - 1 : chunk.end_line])


def test_chunks_cover_every_non_blank_line() -> None:
    lines = functions(30)
    chunks = chunk_file("repo", "svc/app.py", "\n".join(lines) + "\n\n\n", size=25, overlap=5)
    covered = {n for c in chunks for n in range(c.start_line, c.end_line + 1)}
    non_blank = {i + 1 for i, line in enumerate(lines) if line.strip()}
    assert non_blank <= covered
    assert max(c.end_line for c in chunks) <= len(lines)


def test_consecutive_chunks_overlap_by_the_configured_number_of_lines() -> None:
    chunks = chunk_file("repo", "svc/app.py", "\n".join(functions(30)), size=25, overlap=5)
    assert len(chunks) > 3
    for prev, nxt in zip(chunks, chunks[1:], strict=False):
        assert prev.end_line - nxt.start_line + 1 == 5


def test_chunk_ends_before_a_top_level_line_instead_of_cutting_a_function() -> None:
    # Functions are 10 lines (def, 8 body lines, blank). A 25-line window would end inside
    # handler_2 (lines 21-30); the boundary in its last quarter is line 21, ``def handler_2``.
    lines = functions(6)
    first = chunk_file("repo", "svc/app.py", "\n".join(lines), size=25, overlap=5)[0]
    assert (first.start_line, first.end_line) == (1, 20)
    assert lines[first.end_line] == "def handler_2(request):"


def test_without_any_boundary_windows_are_exactly_the_configured_size() -> None:
    lines = [f"    step_{i} = run({i})" for i in range(100)]
    chunks = chunk_file("repo", "svc/app.py", "\n".join(lines), size=20, overlap=4)
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
    before = chunk_file("repo", "svc/app.py", "\n".join(lines), size=25, overlap=5)
    lines[-2] = "    value_39_7 = request.get('changed')"  # last non-blank line
    after = chunk_file("repo", "svc/app.py", "\n".join(lines), size=25, overlap=5)
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
