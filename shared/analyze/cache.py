"""The analysis cache: a recurrence over unchanged code does not ask the LLM again.

An analysis is keyed by its group, the model, the prompt version and the exact code it read
(chunk ids hash their text), so any change to one of them asks the model afresh.
"""

from __future__ import annotations

import redis

from shared.core import keys
from shared.core.domain import Analysis, Investigation

CACHE_TTL_S = 30 * 24 * 3600


def cache_identity(
    inv: Investigation, model: str, prompt_version: str, language: str = "en"
) -> str | None:
    """What makes two analyses the same; None for an event outside any group."""
    if inv.group is None:
        return None
    chunk_ids = sorted(h.chunk_id for c in inv.candidates for h in c.chunks)
    weak = "weak" if inv.evidence is not None and inv.evidence.weak else ""
    return "\0".join([inv.group.fingerprint, model, prompt_version, language, weak, *chunk_ids])


class AnalysisCache:
    def __init__(self, r: redis.Redis, *, ttl_s: int = CACHE_TTL_S) -> None:
        self.r, self.ttl_s = r, ttl_s

    def get(self, identity: str | None) -> Analysis | None:
        raw = self.r.get(keys.analysis(identity)) if identity else None
        return Analysis.model_validate_json(raw) if raw else None

    def put(self, identity: str | None, analysis: Analysis) -> None:
        """Keep a good analysis; a degraded one is never cached (the next occurrence retries)."""
        if identity and not analysis.degraded:
            self.r.set(keys.analysis(identity), analysis.model_dump_json(), ex=self.ttl_s)


class FreshAnalysisCache(AnalysisCache):
    """ "Analyze again" from Slack: the model is asked afresh; its analysis is kept."""

    def get(self, identity: str | None) -> Analysis | None:
        return None
