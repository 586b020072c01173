"""A deterministic stand-in for the model's lookups, for ``tracehound eval``'s +followup modes.

No model runs in the eval, so this plays one that follows up as the prompt invites it to:
with the retrieved files in front of it, it reads the code at the trace's frames those files
do not hold, looks up the definitions of the frames' functions and of the names the error
mentions that the shown code does not define, then searches for the exception line. The
lookups go through the analysis's own tools (shared/analyze/tools.py), bounded the same way
(rounds of CALLS_PER_ROUND calls, the same character budget), over the eval's in-memory index.
What the lookups return counts as seen (``recall@seen``: the gold among the shown files and
everything looked up). The files the definitions and frame reads return can also be fused
with retrieval's ranking by reciprocal rank at ``LOOKUP_WEIGHT`` of a retriever (searches
never: a search for an error's words, ``pop from empty list``, outranked the right file in 4
of 61 dev cases). What a real model would choose to look up is not measured by this.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from shared.analyze.code import CodeIndex, trace_lines
from shared.analyze.llm import CALLS_PER_ROUND
from shared.analyze.tools import Toolbox
from shared.core.domain import Candidate, ErrorEvent
from shared.intake.traces import parse_frames
from shared.retrieve.query import named_symbols

FRAME_RADIUS = 15
# The lookups' files do not re-rank retrieval's: fused at 0.25 to 2 of a retriever, they never
# helped held out — leave-one-repo-out chose 0 in all 17 folds on 85 dev cases, with both
# all-MiniLM-L6-v2 and the simulator's embeddings (README, *The follow-up lookups*). It was
# 0.5, set by hand.
LOOKUP_WEIGHT = 0.0
_EXCEPTION_PREFIX = re.compile(r"^[\w.]*(?:Error|Exception|Warning|Exit|Interrupt)\b:?")
_BUILTIN_NAME = re.compile(r"(?:Error|Exception|Warning)$|^NoneType$")


@dataclass(frozen=True)
class Lookups:
    specific: list[str]  # files the definitions and frame reads returned, in the order they came
    found: list[str]  # files every lookup returned (searches too), in the order they came
    calls: list[str]


def _defines(candidates: Sequence[Candidate], name: str) -> bool:
    pattern = re.compile(rf"\b(?:def|class|func|function)\s+{re.escape(name)}\b")
    return any(pattern.search(h.text) for c in candidates for h in c.chunks)


def planned_lookups(
    repo: str, event: ErrorEvent, query: str, shown: Sequence[Candidate], index: CodeIndex
) -> list[tuple[str, dict[str, Any]]]:
    """The lookups the stand-in model asks for, in the order it asks."""
    paths = {c.path for c in shown}
    calls: list[tuple[str, dict[str, Any]]] = []
    marked = trace_lines(event, index.path_mapper(repo))
    for path, lines in marked.items():
        if path not in paths:
            start, end = lines[0] - FRAME_RADIUS, lines[0] + FRAME_RADIUS
            calls.append(("read_file", {"path": path, "start": start, "end": end}))
    frames = index.path_mapper(repo).map_frames(parse_frames(query))
    names = [f.function for f in frames if f.function.isidentifier()]
    head = next((ln for ln in query.splitlines() if ln.strip()), "")
    # The message, not the exception's type: a model searches for what is particular to it.
    message = _EXCEPTION_PREFIX.sub("", head).strip()
    names += [n for n in named_symbols(head) if not _BUILTIN_NAME.search(n)]
    for name in dict.fromkeys(names):
        if not name.startswith("__") and not _defines(shown, name):
            calls.append(("find_symbol", {"name": name}))
    if message:
        calls.append(("search_code", {"query": message}))
    return calls


def run_lookups(
    repo: str,
    event: ErrorEvent,
    query: str,
    candidates: Sequence[Candidate],
    index: CodeIndex,
    *,
    shown: int = 5,
    rounds: int = 3,
    budget: int = 6000,
    prior: Callable[[str], float] | None = None,
) -> Lookups:
    """What the stand-in model's lookups return, with retrieval's first ``shown`` files in
    front of it, through the analysis's tools and bounds."""
    tools = Toolbox(repo, index, lambda text: text, budget, prior=prior)
    found: list[str] = []
    specific: list[str] = []  # from definitions and frames, not from a search's guesses
    for name, args in planned_lookups(repo, event, query, candidates[:shown], index)[
        : rounds * CALLS_PER_ROUND
    ]:
        before = len(tools.read)
        tools.call(name, args)
        paths = [r.path for r in tools.read[before:]]
        found += [p for p in paths if p not in found]
        if name != "search_code":
            specific += [p for p in paths if p not in specific]
    return Lookups(specific, found, list(tools.lookups))


def with_lookups(
    ranked: Sequence[str],
    specific: Sequence[str],
    *,
    weight: float = LOOKUP_WEIGHT,
    rrf_k: int = 60,
) -> list[str]:
    """Retrieval's files fused by reciprocal rank with the lookups' ``specific`` files, these
    counting ``weight`` of a retriever (0: retrieval's order unchanged)."""
    score: dict[str, float] = {}
    for ranking, w in ((ranked, 1.0), (specific, weight)):
        if w <= 0:
            continue
        for rank, path in enumerate(ranking, start=1):
            score[path] = score.get(path, 0.0) + w / (rrf_k + rank)
    return sorted(score, key=lambda p: -score[p])
