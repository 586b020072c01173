"""The analysis chain's four stages; each takes and returns an Investigation as JSON.

Wired in shared/core/pipeline.py: embed_query → retrieve → rerank → analyze, which posts the
message (or hands it to notify when Slack does not take it at once). A stage that cannot do its
job degrades and says so in the investigation's notes, so every event ends in a message; only
Slack delivery retries until Slack takes it.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.exceptions import Ignore, SoftTimeLimitExceeded

from shared.analyze.cache import FreshAnalysisCache
from shared.analyze.llm import degraded
from shared.analyze.stage import CodeAccess, analyze_investigation, with_analysis
from shared.core import inflight
from shared.core import queues as q
from shared.core.domain import (
    EMBED_FAILED,
    NO_RERANK_BACKEND,
    RERANK_REFUSED,
    RERANK_UNAVAILABLE,
    Evidence,
    Fallback,
    Investigation,
    Recalled,
)
from shared.core.errors import PermanentError, TracehoundError, TransientError
from shared.core.pipeline import notify_step
from shared.groups.deploys import with_deploy
from shared.groups.memory import keep, recall, signature
from shared.intake.trace import with_trace
from shared.models.reranker import RerankRefused, rerank_candidates
from shared.notify.claims import ClaimHeld
from shared.notify.courier import Paced
from shared.notify.delivery import deliver
from shared.retrieve.evidence import judge
from shared.retrieve.features import error_text
from shared.retrieve.hybrid import hybrid_retrieve
from shared.retrieve.query import compose_query
from workers import context, metrics
from workers.app import app, task_options
from workers.retry import attempts_left, retry, visit

log = logging.getLogger(__name__)


def _load(task: Any, payload: dict[str, Any]) -> Investigation:
    return Investigation.model_validate(payload).visited(*visit(task))


@app.task(**task_options(q.EMBED_QUERY))
def embed_query(self: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """Embed the query built from the error; if embedding fails for good, go on keyword-only."""
    inv = _load(self, payload)
    ctx = context.clients()
    group = inv.group
    # An "Analyze again" run is started once per press (shared/notify/respond.py) instead.
    if (
        group
        and inv.rerun is None
        and not ctx.groups.claim_analysis(
            group.fingerprint, group.window_start, self.request.id, revision=inv.revises is not None
        )
    ):
        # The same group window enqueued twice (its producer died between enqueueing the chain
        # and recording it, then replayed the event): one analysis is enough.
        log.info("analysis.duplicate_chain", extra={"event_id": inv.event.id})
        inflight.done(ctx.redis, self.request.root_id or self.request.id)  # no result follows
        raise Ignore()
    if inv.event.trace is None:
        # Intake redacts every event and reads its trace once; an event enqueued without it
        # (a caller of enqueue_error) is redacted and read here, before any model sees it.
        inv = inv.model_copy(update={"event": with_trace(ctx.redactor.redact_event(inv.event))})
    query = compose_query(inv.event)
    # The error's signature rides in the same call (the embed model is loaded now; a call of
    # its own on the retrieve or notify worker would take the model host from the others).
    texts = [query.text]
    if ctx.settings.memory and inv.group is not None and (sig := signature(inv.event)):
        texts.append(sig)
    vector: list[float] | None = None
    memory_vector: list[float] | None = None
    try:
        vector, *more = ctx.query_embedder.embed(
            [ctx.settings.embed_query_prefix + t for t in texts]
        )
        memory_vector = more[0] if more else None
    except TransientError as exc:
        if attempts_left(self):
            raise retry(self, exc) from exc
        inv = inv.fell_back(Fallback.EMBED_HOST, f"{EMBED_FAILED} ({exc}); keyword search only")
        metrics.fallback("embed_query")
    except PermanentError as exc:
        inv = inv.fell_back(Fallback.EMBED_HOST, f"{EMBED_FAILED} ({exc}); keyword search only")
        metrics.fallback("embed_query")
    update = {
        "query": query.text,
        "query_frames": query.frames,
        "query_vector": vector,
        "memory_vector": memory_vector,
    }
    return inv.model_copy(update=update).model_dump(mode="json")


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
            # One version of the keyword index for the whole retrieve: BM25, frames, symbols.
            keywords=ctx.keywords.current(inv.event.repo),
            depth=ctx.settings.candidate_depth,
            rrf_k=ctx.settings.rrf_k,
            degrade=not attempts_left(self),
            prior=ctx.prior,
            # An SDK's own frames (in-app first) when it sent them; else those the query names.
            frames=(inv.event.trace.sdk_frames if inv.event.trace else ()) or inv.query_frames,
            ranker=ctx.ranker,
            error_text=error_text(inv.event),
        )
    except TransientError as exc:
        raise retry(self, exc) from exc
    if found.notes:
        metrics.fallback("retrieve")
    if ctx.settings.ranker == "learned" and found.ranked_by != "learned" and found.candidates:
        metrics.fallback("ranker")
    inv = inv.model_copy(
        update={
            "recalled": _recall(inv, ctx),
            "memory_vector": None,
            # Secrets in the code stay here: the reranker, the LLM and Slack get it redacted.
            "candidates": ctx.redactor.redact_candidates(found.candidates),
            "evidence": Evidence(own_frames=found.own_frames),
            "query_vector": None,
            "notes": [*inv.notes, *found.notes],
        }
    )
    return inv.model_dump(mode="json")


def _recall(inv: Investigation, ctx: context.Clients) -> Recalled | None:
    """The group analysed before that this one reads like, and this group's vector kept for
    later ones: here, where the vector store is at hand. It only adds a line to the
    message, so whatever fails (the store, Redis) is logged and the line dropped. With the
    embed host down there is no vector: the exact signature is still looked up and kept."""
    if not ctx.settings.memory or inv.group is None:
        return None
    fp, text = inv.group.fingerprint, signature(inv.event)
    if not text:  # nothing to tell this error from another (embed_query embedded none either)
        return None
    try:
        found = recall(ctx.vectors, ctx.redis, inv.memory_vector, fingerprint=fp,
                       threshold=ctx.settings.memory_threshold, text=text)  # fmt: skip
        keep(ctx.vectors, ctx.redis, fp, inv.memory_vector, text,
             ttl_s=ctx.settings.memory_days * 86400)  # fmt: skip
    except Exception as exc:
        log.warning("memory.failed", extra={"event_id": inv.event.id, "error": str(exc)[:300]})
        metrics.fallback("memory")
        return None
    if found is not None:
        log.info("memory.recalled", extra={"event_id": inv.event.id, "score": found.score})
    return found


@app.task(**task_options(q.RERANK))
def rerank(self: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """Cross-encoder order, top-k kept; without a working reranker, fused order and a note."""
    inv = _load(self, payload)
    ctx = context.clients()
    top_k = ctx.settings.top_k
    reranker = ctx.reranker
    reason = None
    candidates = inv.candidates[:top_k]
    note, why = RERANK_UNAVAILABLE, Fallback.RERANK_HOST
    if reranker is None:
        reason, why = NO_RERANK_BACKEND, Fallback.NO_RERANKER
    elif inv.candidates:
        try:
            candidates = rerank_candidates(inv.query, inv.candidates, reranker, top_k=top_k)
        except Exception as exc:
            # Reranking only sharpens the order: whatever breaks it (a dead server, a proxy's
            # HTML page, a malformed reply) must not stop the chain or delay the page.
            reason = (
                str(exc) if isinstance(exc, TracehoundError) else f"{type(exc).__name__}: {exc}"
            )
            if isinstance(exc, RerankRefused):
                note, why = RERANK_REFUSED, Fallback.RERANK_REFUSED
            log.warning("rerank.fallback", extra={"event_id": inv.event.id, "reason": reason})
            metrics.fallback("rerank")
    if reason:
        inv = inv.fell_back(why, f"{note} ({reason})")
    # Judged on what will be shown, in the order it will be shown.
    evidence = judge(
        inv.query,
        candidates,
        own_frames=inv.evidence.own_frames if inv.evidence else 0,
        min_relevance=ctx.settings.min_relevance,
        min_overlap=ctx.settings.min_overlap,
    )
    if evidence.weak:
        log.info(
            "rerank.weak_evidence", extra={"event_id": inv.event.id, "reason": evidence.reason}
        )
    return inv.model_copy(update={"candidates": candidates, "evidence": evidence}).model_dump(
        mode="json"
    )


@app.task(**task_options(q.ANALYZE))
def analyze(self: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """LLM analysis with a JSON schema, after up to ``analysis_rounds`` rounds of lookups;
    transient failures retried, then a degraded analysis."""
    inv = _load(self, payload)
    ctx = context.clients()
    try:
        done = analyze_investigation(
            inv,
            chat=ctx.chat,
            redact=ctx.redactor.redact,
            cache=ctx.analysis_cache if inv.rerun is None else FreshAnalysisCache(ctx.redis),
            may_retry=attempts_left(self),
            history=ctx.history,
            language=ctx.settings.language,
            code=CodeAccess(
                ctx.keywords,
                ctx.corpus.existing_ids,
                rounds=ctx.settings.analysis_rounds,
                budget=ctx.settings.analysis_tool_chars,
                prior=ctx.prior,
            ),
            budget=ctx.prompt_budget,
        )
    except TransientError as exc:
        raise retry(self, exc) from exc
    except SoftTimeLimitExceeded:
        limit = q.TIME_LIMITS[q.ANALYZE] - 10
        slow = degraded(f"LLM took longer than {limit}s", model=ctx.chat.model)
        done = with_analysis(inv, slow, ctx.redactor.redact)
    if done.analysis is not None and done.analysis.degraded:
        metrics.fallback("analyze")
    done = with_deploy(done, ctx.deploys, ctx.settings.deploy_window)
    try:
        return deliver(done, ctx.courier).model_dump(mode="json")
    except (Paced, ClaimHeld, TransientError):
        # Slack is paced, busy with this post, or unreachable: the notify queue waits for it
        # (under this task's id, so the chain's result is its), not the model worker.
        raise self.replace(notify_step(app, done.model_dump(mode="json"))) from None
