"""The analysis chain's five stages; each takes and returns an Investigation as JSON.

Wired in shared/pipeline.py: embed_query → retrieve → rerank → analyze → notify. A stage that
cannot do its job degrades and says so in the investigation's notes, so every event ends in a
message; only Slack delivery retries until Slack takes it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from shared import queues as q
from shared.analysis import analyze as run_analysis
from shared.analysis import degraded
from shared.domain import Investigation, Notification
from shared.errors import PermanentError, TracehoundError, TransientError
from shared.message import build_message, top_files
from shared.notifiers import Delivery
from shared.query import build_query
from shared.reranker import rerank_candidates
from shared.retrieval import hybrid_retrieve
from workers import context, metrics
from workers.app import app, task_options
from workers.retry import attempts_left, retry, visit

log = logging.getLogger(__name__)

NOTIFIED_TTL = 7 * 24 * 3600
PENDING = "pending"
NOTIFY_MAX_RETRIES = 50  # with Retry-After pacing: Slack gets many chances before a fallback


def _load(task: Any, payload: dict[str, Any]) -> Investigation:
    return Investigation.model_validate(payload).visited(*visit(task))


@app.task(**task_options(q.EMBED_QUERY))
def embed_query(self: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """Embed the query built from the error; if embedding fails for good, go on keyword-only."""
    inv = _load(self, payload)
    ctx = context.clients()
    query = build_query(inv.event)
    vector: list[float] | None = None
    try:
        [vector] = ctx.query_embedder.embed([ctx.settings.embed_query_prefix + query])
    except TransientError as exc:
        if attempts_left(self):
            raise retry(self, exc) from exc
        inv = inv.noted(f"embedding: failed ({exc}); keyword search only")
        metrics.fallback("embed_query")
    except PermanentError as exc:
        inv = inv.noted(f"embedding: failed ({exc}); keyword search only")
        metrics.fallback("embed_query")
    return inv.model_copy(update={"query": query, "query_vector": vector}).model_dump(mode="json")


@app.task(**task_options(q.RETRIEVE))
def retrieve(self: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """Hybrid retrieval over the repo's whole index; Chroma trouble is retried, then noted."""
    inv = _load(self, payload)
    ctx = context.clients()
    try:
        found = hybrid_retrieve(
            inv.event.repo,
            inv.query,
            inv.query_vector,
            vectors=ctx.vectors,
            keywords=ctx.keywords,
            depth=ctx.settings.candidate_depth,
            rrf_k=ctx.settings.rrf_k,
            degrade=not attempts_left(self),
        )
    except TransientError as exc:
        raise retry(self, exc) from exc
    if found.notes:
        metrics.fallback("retrieve")
    inv = inv.model_copy(
        update={
            "candidates": found.candidates,
            "query_vector": None,
            "notes": [*inv.notes, *found.notes],
        }
    )
    return inv.model_dump(mode="json")


@app.task(**task_options(q.RERANK))
def rerank(self: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """Cross-encoder order, top-k kept; without a working reranker, fused order and a note."""
    inv = _load(self, payload)
    ctx = context.clients()
    top_k = ctx.settings.top_k
    reranker = ctx.reranker
    reason = None
    candidates = inv.candidates[:top_k]
    if reranker is None:
        reason = "no rerank backend configured"
    elif inv.candidates:
        try:
            candidates = rerank_candidates(inv.query, inv.candidates, reranker, top_k=top_k)
        except Exception as exc:
            # Reranking only sharpens the order: whatever breaks it (a dead server, a proxy's
            # HTML page, a malformed reply) must not stop the chain or delay the page.
            reason = (
                str(exc) if isinstance(exc, TracehoundError) else f"{type(exc).__name__}: {exc}"
            )
            log.warning("rerank.fallback", extra={"event_id": inv.event.id, "reason": reason})
            metrics.fallback("rerank")
    if reason:
        inv = inv.noted(f"rerank: unavailable ({reason})")
    return inv.model_copy(update={"candidates": candidates}).model_dump(mode="json")


@app.task(**task_options(q.ANALYZE))
def analyze(self: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """LLM analysis with a JSON schema; transient failures retried, then a degraded analysis."""
    inv = _load(self, payload)
    ctx = context.clients()
    try:
        analysis = run_analysis(inv.event, inv.candidates, ctx.chat)
    except TransientError as exc:
        if attempts_left(self):
            raise retry(self, exc) from exc
        analysis = degraded(f"LLM failed: {exc}", model=ctx.chat.model)
    except PermanentError as exc:
        analysis = degraded(f"LLM failed: {exc}", model=ctx.chat.model)
    except SoftTimeLimitExceeded:
        analysis = degraded(
            f"LLM took longer than {q.TIME_LIMITS[q.ANALYZE] - 10}s", model=ctx.chat.model
        )
    if analysis.degraded:
        metrics.fallback("analyze")
        log.warning(
            "analyze.degraded", extra={"event_id": inv.event.id, "reason": analysis.degraded_reason}
        )
    return inv.model_copy(update={"analysis": analysis}).model_dump(mode="json")


@app.task(**task_options(q.NOTIFY))
def notify(self: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """Send the message once per event; 429 waits for Retry-After; a refusal falls back to file."""
    inv = _load(self, payload)
    ctx = context.clients()
    guard = f"th:notified:{inv.event.id}"
    # Claim the event before posting (SET NX): of two runs of this task (acks_late, a
    # duplicate enqueue) only one posts; the other waits for the claim to resolve.
    if not ctx.redis.set(guard, PENDING, nx=True, ex=q.TIME_LIMITS[q.NOTIFY] + 30):
        sent = ctx.redis.get(guard)
        if sent and sent != PENDING.encode():
            return dict(json.loads(sent))
        raise self.retry(countdown=5, max_retries=NOTIFY_MAX_RETRIES)
    text, blocks = build_message(inv)
    try:
        delivery = ctx.notifier.send(text, blocks)
    except TransientError as exc:
        if attempts_left(self, NOTIFY_MAX_RETRIES):
            ctx.redis.delete(guard)
            raise retry(self, exc, NOTIFY_MAX_RETRIES) from exc
        delivery = _fallback(inv, text, blocks, f"Slack kept failing: {exc}")
    except PermanentError as exc:
        delivery = _fallback(inv, text, blocks, str(exc))
    result = Notification(
        event_id=inv.event.id,
        destination=delivery.destination,
        channel=delivery.channel,
        ts=delivery.ts,
        text=text,
        blocks=blocks,
        notes=inv.notes,
        top_files=top_files(inv),
        trail=inv.trail,
        analysis=inv.analysis,
    ).model_dump(mode="json")
    ctx.redis.set(guard, json.dumps(result), ex=NOTIFIED_TTL)
    return result


def _fallback(inv: Investigation, text: str, blocks: list[dict[str, Any]], reason: str) -> Delivery:
    """Never drop a finished analysis: keep it in the console notifier's file, loudly."""
    log.error("notify.fallback", extra={"event_id": inv.event.id, "reason": reason})
    metrics.fallback("notify")
    delivery = context.clients().console.send(text, blocks)
    return Delivery(f"console (slack failed: {reason})", channel=delivery.channel)
