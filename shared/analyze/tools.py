"""The model's tools in the analyze loop: search_code, read_file, find_symbol, file_history.

Everything is served from what the indexer stored (the keyword index's chunks and symbols,
the recorded git history), never from a checkout: the model worker may have none, and a path
can only name a file of the indexed repo. ``../../etc/passwd`` or a file the index does not
hold is refused with a result that says so. Results are redacted, numbered and marked like
the prompt's code (shared/analyze/code.py), and share one character budget per analysis.

search_code is BM25, named symbols and frames over the repo, without the vector signal: the
loop runs while the chat model holds the one-model host (shared/models/hosts.py), and
embedding a query would unload it, load the embedder, and load it again for the next round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis

from shared.analyze.code import CodeIndex, excerpt, file_lines, numbered
from shared.core.domain import ChunkHit, FileRef
from shared.core.errors import TracehoundError
from shared.index.history import HistoryStore, changes_in, latest_hunks
from shared.intake.traces import parse_frames
from shared.retrieve.hybrid import hybrid_retrieve

log = logging.getLogger(__name__)

READ_MAX_LINES = 80
SEARCH_FILES = 5
SEARCH_PREVIEW_LINES = 6
SYMBOL_DEFINITIONS = 3
SYMBOL_LINES = 40
HISTORY_COMMITS = 3
HISTORY_DIFF_CHARS = 1500
RESULT_MAX_CHARS = 3000  # one tool result; the budget across all of them is a setting
MIN_RESULT_CHARS = 200  # less budget left than this: a lookup is refused, not cut to nothing
CLIPPED = "\n…[clipped]"
# search_code without the vector signal: see the module docstring.
SEARCH_SIGNALS = frozenset({"bm25", "symbols", "frames"})


def _function(name: str, description: str, /, **params: tuple[str, str]) -> dict[str, Any]:
    """An OpenAI-style function spec (what ChatOllama.bind_tools and Ollama's ``tools`` take);
    every parameter is required except ``start``/``end``."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {p: {"type": t, "description": d} for p, (t, d) in params.items()},
                "required": [p for p in params if p not in ("start", "end")],
            },
        },
    }


TOOL_SPECS: list[dict[str, Any]] = [
    _function(
        "search_code",
        "Search the service's indexed repository (keywords, names, stack frames); returns "
        "the best matching files with line ranges.",
        query=("string", "words, identifiers or an error line to look for"),
    ),
    _function(
        "read_file",
        f"Read numbered lines of a file of the indexed repository (at most {READ_MAX_LINES}).",
        path=("string", "repository-relative path, as shown in the candidates"),
        start=("integer", "first line"),
        end=("integer", "last line"),
    ),
    _function(
        "find_symbol",
        "Find where a function, class or method is defined in the indexed repository.",
        name=("string", "the name, e.g. _allocate_discount or PricingService"),
    ),
    _function(
        "file_history",
        "The latest commits that changed some lines of a file, with the last change's diff.",
        path=("string", "repository-relative path"),
        start=("integer", "first line"),
        end=("integer", "last line"),
    ),
]
TOOL_NAMES = tuple(t["function"]["name"] for t in TOOL_SPECS)


class _NoVectors:
    def query(self, repo: str, vector: Sequence[float], n: int) -> list[ChunkHit]:
        return []


@dataclass
class Toolbox:
    """One analysis's tools over one repo, with its budget and a record of what was read."""

    repo: str
    index: CodeIndex
    redact: Callable[[str], str]
    budget: int
    history: HistoryStore | None = None
    marked: Mapping[str, Sequence[int]] = field(default_factory=dict)
    prior: Callable[[str], float] | None = None  # retrieval's path prior (tests, docs weigh less)
    used: int = 0
    lookups: list[str] = field(default_factory=list)
    read: list[FileRef] = field(default_factory=list)
    chunk_ids: list[str] = field(default_factory=list)

    def call(self, name: str, args: Mapping[str, Any]) -> str:
        """Run one tool; a refusal or a failure is the result's text, never an exception
        (the model reads why and goes on)."""
        if self.budget - self.used < MIN_RESULT_CHARS:
            return "refused: the lookup budget of this analysis is used up; answer now."
        handlers: dict[str, Callable[[Mapping[str, Any]], str]] = {
            "search_code": self._search_code,
            "read_file": self._read_file,
            "find_symbol": self._find_symbol,
            "file_history": self._file_history,
        }
        handler = handlers.get(name)
        if handler is None:
            return f"refused: no tool named {name!r}; the tools are {', '.join(TOOL_NAMES)}."
        try:
            text = handler(args)
        except (TracehoundError, redis.RedisError) as exc:
            log.warning("analyze.tool_failed", extra={"tool": name, "error": str(exc)})
            return f"failed: {name} could not read the index ({exc})."
        room = min(RESULT_MAX_CHARS, self.budget - self.used)
        if len(text) > room:
            text = text[: room - len(CLIPPED)] + CLIPPED
        self.used += len(text)
        return text

    # --- arguments -------------------------------------------------------------------

    def _path(self, raw: Any) -> tuple[str | None, str]:
        """The indexed path ``raw`` names, or None and why not. Absolute paths (a frame's
        file) are mapped onto the repo as frames are; ``..`` never is."""
        text = str(raw or "").strip().replace("\\", "/")
        parts = text.split("/")
        if not text or "\0" in text or ".." in parts:
            return None, f"refused: {text[:200]!r} is outside the indexed repository {self.repo}"
        path = text.removeprefix("./")
        if path.startswith("/"):
            mapped = self.index.path_mapper(self.repo).map_file(path)
            if mapped is None:
                return None, f"refused: {path[:200]!r} is not a file of the indexed repository"
            path = mapped
        if not self.index.chunks_of(self.repo, path):
            return None, f"refused: {path[:200]!r} is not a file of the indexed repository"
        return path, ""

    @staticmethod
    def _lines(args: Mapping[str, Any], default_end: int) -> tuple[int, int]:
        def number(key: str, fallback: int) -> int:
            try:
                return max(1, int(args.get(key) or fallback))
            except (TypeError, ValueError):
                return fallback

        start = number("start", 1)
        end = max(start, number("end", start + default_end - 1))
        return start, end

    def _noted(self, what: str, hits: Sequence[ChunkHit], path: str, start: int, end: int) -> None:
        self.lookups.append(what)
        self.read.append(FileRef(path=path, start_line=start, end_line=end))
        self.chunk_ids.extend(h.chunk_id for h in hits if h.chunk_id not in self.chunk_ids)

    def _block(self, path: str, start: int, text: str) -> str:
        return f"{path}:\n{numbered(self.redact(text), start, self.marked.get(path, ()))}"

    # --- the tools ---------------------------------------------------------------------

    def _read_file(self, args: Mapping[str, Any]) -> str:
        path, why = self._path(args.get("path"))
        if path is None:
            self.lookups.append(f"refused read {str(args.get('path'))[:60]}")
            return why
        start, end = self._lines(args, READ_MAX_LINES)
        end = min(end, start + READ_MAX_LINES - 1)
        hits = [
            h
            for h in self.index.chunks_of(self.repo, path)
            if h.start_line <= end and start <= h.end_line
        ]
        found = excerpt(file_lines(hits), start, end)
        if found is None:
            self.lookups.append(f"read {path}:{start}-{end} (past its end)")
            return f"{path} has no lines {start}-{end} in the index."
        first, last, text = found
        self._noted(f"read {path}:{first}-{last}", hits, path, first, last)
        return self._block(path, first, text)

    def _search_code(self, args: Mapping[str, Any]) -> str:
        query = " ".join(str(args.get("query") or "").split())[:500]
        if not query:
            return "refused: search_code needs a query."
        found = hybrid_retrieve(
            self.repo,
            query,
            None,
            vectors=_NoVectors(),
            keywords=self.index,
            locator=self.index,
            depth=20,
            signals=SEARCH_SIGNALS,
            prior=self.prior,
            # the model's own search text, not the event's trace: a trace line it pastes here
            # is followed like a frame
            frames=parse_frames(query),
        )
        self.lookups.append(f"searched {query[:60]!r}")
        if not found.candidates:
            return f"no code in {self.repo} matches {query!r}."
        parts = []
        for cand in found.candidates[:SEARCH_FILES]:
            best = cand.chunks[0]
            head = "\n".join(best.text.split("\n")[:SEARCH_PREVIEW_LINES])
            parts.append(self._block(f"{cand.path} (lines {cand.lines})", best.start_line, head))
            self.read.append(
                FileRef(
                    path=cand.path,
                    start_line=best.start_line,
                    end_line=best.start_line + head.count("\n"),
                )
            )
            if best.chunk_id not in self.chunk_ids:
                self.chunk_ids.append(best.chunk_id)
        return "\n\n".join(parts)

    def _find_symbol(self, args: Mapping[str, Any]) -> str:
        name = str(args.get("name") or "").strip().rsplit(".", 1)[-1][:100]
        if not name.isidentifier():
            return f"refused: {name!r} is not a name."
        hits = self.index.defining(self.repo, [name])[:SYMBOL_DEFINITIONS]
        if not hits:
            self.lookups.append(f"looked up {name} (not found)")
            return f"no definition of {name} in {self.repo} (or too many to be telling)."
        parts = []
        for h in hits:
            text = "\n".join(h.text.split("\n")[:SYMBOL_LINES])
            last = h.start_line + text.count("\n")
            what = f"looked up {name} in {h.path}:{h.start_line}"
            self._noted(what, [h], h.path, h.start_line, last)
            parts.append(self._block(h.path, h.start_line, text))
        return "\n\n".join(parts)

    def _file_history(self, args: Mapping[str, Any]) -> str:
        path, why = self._path(args.get("path"))
        if path is None:
            return why
        start, end = self._lines(args, READ_MAX_LINES)
        self.lookups.append(f"history of {path}:{start}-{end}")
        recorded = self.history.files(self.repo, [path]).get(path) if self.history else None
        commits = changes_in(recorded, start, end, limit=HISTORY_COMMITS) if recorded else []
        if recorded is None or not commits:
            return f"no recorded recent change to {path}:{start}-{end}."
        lines = []
        for c in commits:
            when = datetime.fromtimestamp(c.time, UTC).strftime("%Y-%m-%d")
            lines.append(f"{c.sha[:7]} {when} {self.redact(c.author)}: {self.redact(c.subject)}")
        diff = "\n".join(h.text for h in latest_hunks(recorded, start, end))
        if diff:
            lines.append("Latest change:\n" + self.redact(diff)[:HISTORY_DIFF_CHARS])
        return "\n".join(lines)
