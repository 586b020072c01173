"""The analyze stage as a plain function: cache, redaction, the LLM call, degradation.

workers/tasks/analysis.py calls ``analyze_investigation`` from the ``analyze`` task [llm].
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import redis

from shared.analyze.budget import Budget
from shared.analyze.cache import AnalysisCache, cache_identity
from shared.analyze.code import CodeIndex, frame_windows, trace_lines
from shared.analyze.ground import ground, redacted_reply
from shared.analyze.history import (
    Recorded,
    cited_history,
    cited_locations,
    frame_lines,
    lookup,
    prompt_changes,
    version_note,
)
from shared.analyze.llm import analyze, degraded, prompt_version
from shared.analyze.tools import Toolbox
from shared.core.domain import Analysis, Candidate, Fallback, Investigation
from shared.core.errors import PermanentError, TracehoundError, TransientError
from shared.index.history import HistoryStore
from shared.models.chat import ChatModel

log = logging.getLogger(__name__)

REUSED_NOTE = "analysis: reused from an earlier occurrence (code unchanged)"
LOOKUPS_SHOWN = 6


@dataclass(frozen=True)
class CodeAccess:
    """The repo's index as the analysis reads it: windows at the trace's frames, the model's
    tools (``rounds`` of them, ``budget`` characters), and whether chunks are still indexed
    (a cached analysis's lookups, shared/analyze/cache.py)."""

    index: CodeIndex
    indexed: Callable[[str, Sequence[str]], set[str]]
    rounds: int = 0
    budget: int = 0
    prior: Callable[[str], float] | None = None


def lookups_note(analysis: Analysis) -> str | None:
    """ "analysis: looked up: read pricing.py:40-95, searched 'coupon allocation'"."""
    if not analysis.lookups:
        return None
    shown = ", ".join(analysis.lookups[:LOOKUPS_SHOWN])
    more = len(analysis.lookups) - LOOKUPS_SHOWN
    return f"analysis: looked up: {shown}" + (f" and {more} more" if more > 0 else "")


def with_analysis(
    inv: Investigation, analysis: Analysis, redact: Callable[[str], str]
) -> Investigation:
    """The investigation with the analysis held to the code it was shown (its footnotes say
    what was dropped), every text of it redacted."""
    if analysis.degraded:
        log.warning(
            "analyze.degraded", extra={"event_id": inv.event.id, "reason": analysis.degraded_reason}
        )
    analysis = redacted_reply(analysis, redact)
    grounded = ground(analysis, inv.candidates)
    looked = lookups_note(analysis)
    notes = [*inv.notes, *([looked] if looked else []), *grounded.notes]
    return inv.model_copy(update={"analysis": grounded.analysis, "notes": notes})


def _frames(
    inv: Investigation, code: CodeAccess | None, redact: Callable[[str], str]
) -> tuple[Mapping[str, Sequence[int]], list[Candidate]]:
    """The trace's lines per indexed path, and windows at those no candidate shows; nothing
    when the index cannot be read (the analysis goes on with the candidates)."""
    if code is None:
        return {}, []
    repo = inv.event.repo
    try:
        marked = trace_lines(inv.event, code.index.path_mapper(repo))
        return marked, frame_windows(repo, marked, inv.candidates, code.index, redact)
    except (TracehoundError, redis.RedisError) as exc:
        log.warning("analyze.index_unavailable", extra={"repo": repo, "error": str(exc)})
        return {}, []


def with_history(
    inv: Investigation, recorded: Recorded, redact: Callable[[str], str]
) -> Investigation:
    """The commits behind each cited range, the indexed commit, and a note when the error
    comes from another release than the one indexed."""
    locations = cited_locations(inv.analysis, inv.candidates)
    history = cited_history(locations, recorded, redact, frame_lines(inv.event, recorded))
    done = inv.model_copy(update={"code_version": recorded.version, "history": history})
    note = version_note(inv.event, recorded.version)
    return done.noted(redact(note)) if note else done


def analyze_investigation(
    inv: Investigation,
    *,
    chat: ChatModel,
    redact: Callable[[str], str],
    cache: AnalysisCache,
    may_retry: bool,
    history: HistoryStore | None = None,
    language: str = "en",
    code: CodeAccess | None = None,
    budget: Budget | None = None,
) -> Investigation:
    """The investigation with its analysis: cached, asked of the model, or degraded.

    A transient model failure is raised while ``may_retry`` (the task retries it with
    backoff); after that, and for a permanent failure, the analysis is degraded and says why.
    With ``history`` (what the indexer recorded from git) the prompt shows the latest change
    to the best candidates' lines and the message the commits behind each cited range. With
    ``code`` (the repo's index) the prompt shows the code at every in-repo frame, and the model
    may look up more with its tools, bounded by ``code.rounds`` and ``code.budget``.
    """
    recorded = (
        lookup(history, inv.event.repo, [c.path for c in inv.candidates])
        if history is not None
        else Recorded(None, {})
    )
    marked, windows = _frames(inv, code, redact)
    rounds = code.rounds if code is not None else 0
    identity = cache_identity(
        inv,
        chat.model,
        prompt_version(),
        language,
        shown=[w.chunks[0].chunk_id for w in windows],
        rounds=rounds,
    )
    repo = inv.event.repo
    cached = cache.get(
        identity, (lambda ids: code.indexed(repo, ids)) if code is not None else None
    )
    if cached is not None:
        # Same group, model, prompt and code as an earlier analysis: it would say the same.
        return with_history(with_analysis(inv.noted(REUSED_NOTE), cached, redact), recorded, redact)
    try:
        # Code can hold secrets too (a config default, a test fixture): the LLM reads it
        # redacted (retrieval redacts already; this covers any other caller).
        safe = [
            c.model_copy(
                update={"chunks": [h.model_copy(update={"text": redact(h.text)}) for h in c.chunks]}
            )
            for c in inv.candidates
        ]
        weak_reason = inv.evidence.reason if inv.evidence and inv.evidence.weak else ""
        changes = prompt_changes(safe, recorded, redact, frame_lines(inv.event, recorded))
        tools = (
            Toolbox(
                repo,
                code.index,
                redact,
                code.budget,
                history=history,
                marked=marked,
                prior=code.prior,
            )
            if code is not None and rounds > 0
            else None
        )
        analysis = analyze(
            inv.event,
            safe,
            chat,
            changes,
            weak_reason=weak_reason,
            language=language,
            windows=windows,
            marked=marked,
            tools=tools,
            rounds=rounds,
            budget=budget,
        )
    except (TransientError, PermanentError) as exc:
        if isinstance(exc, TransientError) and may_retry:
            raise
        analysis = degraded(f"LLM failed: {exc}", model=chat.model)
        inv = inv.model_copy(update={"fallbacks": [*inv.fallbacks, Fallback.LLM_HOST]})
    cache.put(identity, analysis)
    return with_history(with_analysis(inv, analysis, redact), recorded, redact)
