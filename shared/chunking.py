"""Source files cut into line-ranged chunks with the metadata both indexes store."""

from __future__ import annotations

import hashlib
from pathlib import PurePosixPath

from shared.domain import Chunk

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
    for start, end in split_lines(len(lines), lines, size=size, overlap=overlap):
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
            )
        )
    return chunks


def embedding_text(chunk: Chunk) -> str:
    """What is embedded for a chunk: its path gives the model the module's name and role."""
    return f"{chunk.path}\n{chunk.text}"
