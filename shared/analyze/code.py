"""Code as the model reads it: numbered lines, the trace's lines marked, a window at each frame.

Every block of code in the prompt and in tool results is numbered line by line
(``  91 | line.unit_discount_cents = …``) so the model cites real line numbers, and the lines
the trace's in-repo frames point at are marked ``>>``. A frame whose line no shown candidate
holds (retrieval ranked its chunk low) still gets a window around that line. Files are put
back together from the index's chunks: the model worker needs no checkout.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

from shared.core.domain import Candidate, ChunkHit, ErrorEvent
from shared.intake.frames import PathMapper

MARK = ">>"
FRAME_RADIUS = 12  # lines either side of a frame's line in its window
MAX_FRAME_WINDOWS = 4


class CodeIndex(Protocol):
    """What the analysis reads of a repo's index (the keyword view, or the eval's in-memory
    index): paths for frames, chunks by location, by file, by defined name, and BM25."""

    def path_mapper(self, repo: str) -> PathMapper: ...
    def chunks_at(self, repo: str, path: str, line: int | None) -> list[ChunkHit]: ...
    def chunks_of(self, repo: str, path: str) -> list[ChunkHit]: ...
    def defining(self, repo: str, names: Sequence[str]) -> list[ChunkHit]: ...
    def search(self, repo: str, text: str, n: int) -> list[ChunkHit]: ...


def numbered(text: str, start: int, marked: Collection[int] = ()) -> str:
    """``text`` (its first line is line ``start``) with a line number on every line and
    ``>>`` before the ``marked`` ones."""
    lines = text.split("\n")
    width = len(str(start + len(lines) - 1))
    return "\n".join(
        f"{MARK if n in marked else '  '}{n:>{width}} | {line}"
        for n, line in enumerate(lines, start=start)
    )


def file_lines(hits: Sequence[ChunkHit]) -> dict[int, str]:
    """Line number -> text, from chunks of one file (overlapping chunks agree)."""
    lines: dict[int, str] = {}
    for h in hits:
        for n, line in enumerate(h.text.split("\n"), start=h.start_line):
            lines.setdefault(n, line)
    return lines


def excerpt(lines: Mapping[int, str], start: int, end: int) -> tuple[int, int, str] | None:
    """Lines ``start``..``end`` clamped to those present: (first, last, text), or None."""
    present = [n for n in range(max(1, start), end + 1) if n in lines]
    if not present:
        return None
    first, last = present[0], present[-1]
    return first, last, "\n".join(lines.get(n, "") for n in range(first, last + 1))


def trace_lines(event: ErrorEvent, mapper: PathMapper) -> dict[str, list[int]]:
    """The lines the trace's in-repo frames point at, per repo path, nearest the raise first."""
    frames = event.trace.code_frames() if event.trace else ()  # read at intake
    lines: dict[str, list[int]] = {}
    for f in mapper.map_frames(frames):
        if f.line is not None and f.line not in lines.get(f.path, []):
            lines.setdefault(f.path, []).append(f.line)
    return lines


def _shown(candidates: Sequence[Candidate], path: str, line: int) -> bool:
    return any(
        h.start_line <= line <= h.end_line for c in candidates if c.path == path for h in c.chunks
    )


def frame_windows(
    repo: str,
    marked: Mapping[str, Sequence[int]],
    candidates: Sequence[Candidate],
    index: CodeIndex,
    redact: Callable[[str], str],
    *,
    radius: int = FRAME_RADIUS,
    limit: int = MAX_FRAME_WINDOWS,
) -> list[Candidate]:
    """A window around each frame line no candidate shows, nearest the raise first; each a
    one-chunk Candidate whose chunk id is the indexed chunk's (so it names the code's hash)."""
    windows: list[Candidate] = []
    for path, lines in marked.items():
        for line in lines:
            if len(windows) >= limit:
                return windows
            if _shown(candidates, path, line) or _shown(windows, path, line):
                continue
            hits = index.chunks_at(repo, path, line)
            found = excerpt(file_lines(hits), line - radius, line + radius) if hits else None
            if found is None:
                continue
            first, last, text = found
            hit = ChunkHit(
                chunk_id=hits[0].chunk_id,
                path=path,
                start_line=first,
                end_line=last,
                text=redact(text),
                score=0.0,
            )
            windows.append(Candidate(path=path, score=0.0, chunks=[hit]))
    return windows
