"""Whether retrieval found convincing code, judged at the end of retrieval (the rerank task).

With a reranker, its best score says it: below ``TRACEHOUND_MIN_RELEVANCE`` the files are weak
matches. Without one (the default), two signals that need no model decide: whether any frame
of the trace falls in the indexed repo's own code (then the files are where the error ran,
whatever they say), and, when none does, how many of the error's identifiers the top file
holds (``TRACEHOUND_MIN_OVERLAP``). ``tracehound eval`` suggests both thresholds from labelled
cases. A weak judgement reaches the prompt (the model is told) and the message (possible
leads, confidences capped).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared.core.domain import Candidate, Evidence

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
# Words a trace and most source files hold whatever failed: they locate nothing.
_EVERYWHERE = frozenset(
    {
        *("the", "and", "for", "with", "not", "none", "self", "this", "that", "from"),
        *("import", "return", "def", "class", "raise", "true", "false"),
        *("error", "errors", "exception", "exceptions", "traceback", "most", "recent"),
        *("call", "last", "line", "file", "files"),
    }
)


def identifiers(text: str) -> set[str]:
    """Lower-cased identifiers of three characters or more, minus words found everywhere."""
    return {w.lower() for w in _IDENTIFIER.findall(text)} - _EVERYWHERE


def lexical_overlap(query: str, candidate: Candidate) -> float:
    """Share of the query's identifiers that the candidate's path or shown chunks hold."""
    wanted = identifiers(query)
    if not wanted:
        return 0.0
    have = identifiers("\n".join([candidate.path, *(h.text for h in candidate.chunks)]))
    return len(wanted & have) / len(wanted)


def judge(
    query: str,
    candidates: Sequence[Candidate],
    *,
    own_frames: int,
    min_relevance: float,
    min_overlap: float,
) -> Evidence:
    """The evidence for ``candidates`` (in the order they will be shown)."""
    if not candidates:
        return Evidence(own_frames=own_frames, weak=True, reason="no code was found in the index")
    top = candidates[0]
    overlap = lexical_overlap(query, top)
    if top.rerank_score is not None:
        best = top.rerank_score
        weak = best < min_relevance
        reason = f"the best file's rerank relevance is {best:.2f} (< {min_relevance:.2f})"
    else:
        weak = own_frames == 0 and overlap < min_overlap
        reason = (
            "no frame of the trace is in the indexed code, and the top file holds "
            f"{overlap:.0%} of the error's identifiers (< {min_overlap:.0%})"
        )
    return Evidence(
        own_frames=own_frames, overlap=round(overlap, 4), weak=weak, reason=reason if weak else ""
    )


__all__ = ["identifiers", "judge", "lexical_overlap"]
