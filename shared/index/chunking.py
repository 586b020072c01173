"""Source files cut into line-ranged chunks with the metadata both indexes store.

Python, Java, JavaScript, TypeScript and Go follow the code's own structure
(:mod:`shared.index.syntax`): a function, a method or a small class is one chunk, named by its
qualified symbol. Other languages, and files that do not parse, are cut into line windows that
overlap.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from shared.core.domain import Chunk
from shared.index.syntax import Definition, definitions

LANGUAGES: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".java": "java",
    ".kt": "kotlin",
    ".kts": "kotlin",
    ".scala": "scala",
    ".go": "go",
    ".rs": "rust",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".tsx": "typescript",
    ".rb": "ruby",
    ".php": "php",
    ".cs": "csharp",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".hpp": "cpp",
    ".swift": "swift",
    ".m": "objc",
    ".sh": "shell",
    ".bash": "shell",
    ".sql": "sql",
    ".html": "html",
    ".css": "css",
    ".vue": "vue",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "toml",
    ".json": "json",
    ".xml": "xml",
    ".ini": "ini",
    ".cfg": "ini",
    ".md": "markdown",
    ".rst": "rst",
    ".txt": "text",
    ".proto": "protobuf",
    ".gradle": "gradle",
    ".tf": "terraform",
    ".ex": "elixir",
    ".exs": "elixir",
    ".erl": "erlang",
    ".dart": "dart",
    ".lua": "lua",
    ".r": "r",
}
SPECIAL_NAMES = {"Dockerfile": "dockerfile", "Makefile": "make", "Jenkinsfile": "groovy"}
TRUNCATED = " …[line truncated]"
# Bumped whenever chunk boundaries change, so caches keyed on chunks are not reused across.
CHUNKER_VERSION = "ast-1"


def language_of(path: str) -> str | None:
    """The language of a path, or None for files tracehound does not index."""
    p = PurePosixPath(path)
    return SPECIAL_NAMES.get(p.name) or LANGUAGES.get(p.suffix.lower())


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()


def chunk_id(repo: str, path: str, start: int, end: int, content_hash: str) -> str:
    """Deterministic: the same text at the same place gets the same id, so upserts repeat safely."""
    key = f"{repo}\0{path}\0{start}\0{end}\0{content_hash}"
    return hashlib.sha1(key.encode("utf-8", errors="replace")).hexdigest()


def _is_boundary(line: str) -> bool:
    """A good place to start a chunk: a blank line or a top-level statement."""
    return not line.strip() or (not line[0].isspace() and not line.startswith(("}", ")", "]")))


def split_lines(
    n_lines: int, lines: list[str], *, size: int, overlap: int
) -> list[tuple[int, int]]:
    """0-based [start, end) windows of about ``size`` lines overlapping by ``overlap``.

    A window ends just before a boundary line in its last quarter when there is one, so chunks
    tend to hold whole functions instead of cutting one in half.
    """
    windows: list[tuple[int, int]] = []
    start = 0
    while start < n_lines:
        end = min(start + size, n_lines)
        if end < n_lines:
            for cut in range(end, start + (3 * size) // 4, -1):
                if _is_boundary(lines[cut]):
                    end = cut
                    break
        windows.append((start, end))
        if end >= n_lines:
            break
        start = max(end - overlap, start + 1)
    return windows


@dataclass(frozen=True)
class Span:
    """0-based [start, end) line range of one chunk and the symbol(s) it defines."""

    start: int
    end: int
    symbol: str = ""


def _windows(
    start: int, end: int, lines: list[str], symbol: str, size: int, overlap: int
) -> list[Span]:
    """Line windows over [start, end), each carrying ``symbol``."""
    return [
        Span(start + a, start + b, symbol)
        for a, b in split_lines(end - start, lines[start:end], size=size, overlap=overlap)
    ]


def _structured_spans(
    defs: Sequence[Definition],
    start: int,
    end: int,
    lines: list[str],
    prefix: str,
    size: int,
    overlap: int,
) -> list[Span]:
    """Spans partitioning [start, end): one per definition, windows for the code between."""
    pieces: list[Span] = []
    cursor = start
    for d in defs:
        node_start = max(d.start, cursor)
        node_end = min(d.end, end)
        if node_end <= node_start:
            continue
        if node_start > cursor:
            pieces.extend(_windows(cursor, node_start, lines, prefix.rstrip("."), size, overlap))
        symbol = prefix + d.name
        length = node_end - node_start
        if length <= size or d.members is None:
            if length <= size + size // 2:
                pieces.append(Span(node_start, node_end, symbol))
            else:  # a long function: windows, all named after it
                pieces.extend(_windows(node_start, node_end, lines, symbol, size, overlap))
        else:  # a big class: its header and attributes, then each member on its own
            pieces.extend(
                _structured_spans(
                    d.members, node_start, node_end, lines, symbol + ".", size, overlap
                )
            )
        cursor = max(cursor, node_end)
    if cursor < end:
        pieces.extend(_windows(cursor, end, lines, prefix.rstrip("."), size, overlap))
    # blank runs between definitions are no chunk of their own, and must not glue names together
    pieces = [p for p in pieces if any(lines[i].strip() for i in range(p.start, p.end))]
    return _merge_small(pieces, size // 2)


def _merge_small(pieces: list[Span], limit: int) -> list[Span]:
    """Neighbouring pieces joined while together they stay within ``limit`` lines.

    Only pieces that do not overlap are joined (windows of one long body overlap and stay apart),
    so a run of one-line helpers or a few imports does not become a chunk each.
    """
    merged: list[Span] = []
    for piece in pieces:
        prev = merged[-1] if merged else None
        if prev and prev.end <= piece.start and piece.end - prev.start <= limit:
            names = [n for n in (prev.symbol, piece.symbol) if n]
            symbol = ", ".join(dict.fromkeys(", ".join(names).split(", "))) if names else ""
            merged[-1] = Span(prev.start, piece.end, symbol)
        else:
            merged.append(piece)
    return merged


def spans_of(
    path: str, text: str, lines: list[str], *, size: int, overlap: int
) -> tuple[list[Span], bool]:
    """The file's chunk spans, and whether they follow its structure (else line windows)."""
    language = language_of(path)
    defs = definitions(language, path, text) if language else None
    if defs is not None:
        return _structured_spans(defs, 0, len(lines), lines, "", size, overlap), True
    windows = split_lines(len(lines), lines, size=size, overlap=overlap)
    return [Span(a, b) for a, b in windows], False


def chunk_file(
    repo: str, path: str, text: str, *, size: int = 60, overlap: int = 10, max_chars: int = 6000
) -> list[Chunk]:
    """Line-ranged chunks (1-based, inclusive) of one file; empty for an empty file."""
    language = language_of(path) or "text"
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    chunks: list[Chunk] = []
    per_line = max(200, max_chars // 4)
    spans, structured = spans_of(path, "\n".join(lines), lines, size=size, overlap=overlap)
    for span in spans:
        start, end = span.start, span.end
        while structured and start < end and not lines[start].strip():  # no blank edges
            start += 1
        while structured and end > start and not lines[end - 1].strip():
            end -= 1
        if start >= end:
            continue
        body_lines = [
            ln if len(ln) <= per_line else ln[:per_line] + TRUNCATED for ln in lines[start:end]
        ]
        body = "\n".join(body_lines)
        if len(body) > max_chars:
            body = body[:max_chars] + "\n…[chunk truncated]"
        if not body.strip():
            continue
        h = sha(body)
        chunks.append(
            Chunk(
                id=chunk_id(repo, path, start + 1, end, h),
                repo=repo,
                path=path,
                start_line=start + 1,
                end_line=end,
                language=language,
                content_hash=h,
                text=body,
                symbol=span.symbol,
            )
        )
    return chunks


def embedding_text(chunk: Chunk) -> str:
    """What is embedded for a chunk: its path gives the model the module's name and role."""
    if chunk.symbol:
        return f"{chunk.path} {chunk.symbol}\n{chunk.text}"
    return f"{chunk.path}\n{chunk.text}"


# Definitions in Python, JS/TS, Go, Ruby, Rust, Kotlin, Swift, PHP: the keyword and the name.
_DEFINITION = re.compile(
    r"^[ \t]*(?:export\s+)?(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?"
    r"(?:def|class|func|function|fn|fun|struct|trait|interface|enum|module)\s+"
    r"(?:\([^)]*\)\s*)?([A-Za-z_]\w*)",
    re.MULTILINE,
)


def names_defined_in(text: str) -> list[str]:
    """The names that ``def``/``class``/``func``/``function``… lines in ``text`` define."""
    return list(dict.fromkeys(m.group(1) for m in _DEFINITION.finditer(text)))


def defined_names(chunk: Chunk) -> list[str]:
    """Every name the chunk defines: its symbol's parts and the definitions in its text.

    A class small enough to be one chunk carries only the class as its symbol; its methods
    and nested functions are named here too, so a message naming a method finds it.
    """
    names = [q.rsplit(".", 1)[-1] for q in chunk.symbol.split(", ")] if chunk.symbol else []
    return list(dict.fromkeys([*names, *names_defined_in(chunk.text)]))
