"""The analyze stage as a plain function: cache, redaction, the LLM call, degradation.

workers/tasks/analysis.py calls ``analyze_investigation`` from the ``analyze`` task [llm].
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from shared.analyze.cache import AnalysisCache, cache_identity
from shared.analyze.ground import ground
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
from shared.core.domain import Analysis, Investigation
from shared.core.errors import PermanentError, TransientError
from shared.index.history import HistoryStore
from shared.models.chat import ChatModel

log = logging.getLogger(__name__)

REUSED_NOTE = "analysis: reused from an earlier occurrence (code unchanged)"


def with_analysis(inv: Investigation, analysis: Analysis) -> Investigation:
    """The investigation with the analysis held to the code it was shown (its footnotes say
    what was dropped)."""
    if analysis.degraded:
        log.warning(
            "analyze.degraded", extra={"event_id": inv.event.id, "reason": analysis.degraded_reason}
        )
    grounded = ground(analysis, inv.candidates)
    return inv.model_copy(
        update={"analysis": grounded.analysis, "notes": [*inv.notes, *grounded.notes]}
    )


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
) -> Investigation:
    """The investigation with its analysis: cached, asked of the model, or degraded.

    A transient model failure is raised while ``may_retry`` (the task retries it with
    backoff); after that, and for a permanent failure, the analysis is degraded and says why.
    With ``history`` (what the indexer recorded from git) the prompt shows the latest change
    to the best candidates' lines and the message the commits behind each cited range.
    """
    recorded = (
        lookup(history, inv.event.repo, [c.path for c in inv.candidates])
        if history is not None
        else Recorded(None, {})
    )
    identity = cache_identity(inv, chat.model, prompt_version(), language)
    cached = cache.get(identity)
    if cached is not None:
        # Same group, model, prompt and code as an earlier analysis: it would say the same.
        return with_history(with_analysis(inv.noted(REUSED_NOTE), cached), recorded, redact)
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
        analysis = analyze(
            inv.event, safe, chat, changes, weak_reason=weak_reason, language=language
        )
    except TransientError as exc:
        if may_retry:
            raise
        analysis = degraded(f"LLM failed: {exc}", model=chat.model)
    except PermanentError as exc:
        analysis = degraded(f"LLM failed: {exc}", model=chat.model)
    cache.put(identity, analysis)
    return with_history(with_analysis(inv, analysis), recorded, redact)
