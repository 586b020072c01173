"""The analysis cache: a recurrence over unchanged code does not ask the LLM again.

An analysis is keyed by its group, the model, the prompt version (templates, reply schema and
tool specs), the tool rounds allowed, and the exact code it was shown up front (candidates and
frame windows: chunk ids hash their text), so any change to one of them asks the model afresh.
What the model looked up with its tools is not known before it asks, so it cannot be in the
key: the entry records the chunks its lookups read, and is reused only while every one of them
is still indexed (an edit to a file it read replaces that file's chunk ids). An analysis
without lookups costs nothing more than before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import redis

from shared.core import keys
from shared.core.domain import Analysis, Investigation

CACHE_TTL_S = 30 * 24 * 3600


def cache_identity(
    inv: Investigation,
    model: str,
    prompt_version: str,
    language: str = "en",
    *,
    shown: Sequence[str] = (),
    rounds: int = 0,
) -> str | None:
    """What makes two analyses the same; None for an event outside any group. ``shown``:
    chunk ids of code shown beside the candidates (frame windows)."""
    if inv.group is None:
        return None
    chunk_ids = sorted({h.chunk_id for c in inv.candidates for h in c.chunks} | set(shown))
    weak = "weak" if inv.evidence is not None and inv.evidence.weak else ""
    tools = f"rounds={rounds}" if rounds else ""
    return "\0".join(
        [inv.group.fingerprint, model, prompt_version, language, weak, tools, *chunk_ids]
    )


class AnalysisCache:
    def __init__(self, r: redis.Redis, *, ttl_s: int = CACHE_TTL_S) -> None:
        self.r, self.ttl_s = r, ttl_s

    def get(
        self,
        identity: str | None,
        indexed: Callable[[Sequence[str]], set[str]] | None = None,
    ) -> Analysis | None:
        """The analysis stored under ``identity``; None when there is none, or when a chunk
        its lookups read is no longer among those ``indexed`` says exist."""
        raw = self.r.get(keys.analysis(identity)) if identity else None
        if not raw:
            return None
        analysis = Analysis.model_validate_json(raw)
        looked_up = set(analysis.read_chunks)
        if looked_up and indexed is not None and indexed(analysis.read_chunks) != looked_up:
            return None  # code it looked up has changed since
        return analysis

    def put(self, identity: str | None, analysis: Analysis) -> None:
        """Keep a good analysis; a degraded one is never cached (the next occurrence retries)."""
        if identity and not analysis.degraded:
            self.r.set(keys.analysis(identity), analysis.model_dump_json(), ex=self.ttl_s)


class FreshAnalysisCache(AnalysisCache):
    """ "Analyze again" from Slack: the model is asked afresh; its analysis is kept."""

    def get(
        self,
        identity: str | None,
        indexed: Callable[[Sequence[str]], set[str]] | None = None,
    ) -> Analysis | None:
        return None
