"""Per-process state of a worker: settings and clients, built lazily, rebuilt after fork."""

from __future__ import annotations

import logging
from collections.abc import Collection
from functools import cached_property
from typing import Any

import httpx
import redis
from celery import current_app
from celery.signals import task_postrun, worker_process_init, worker_process_shutdown

from shared.analyze.budget import Budget
from shared.analyze.cache import AnalysisCache
from shared.core import queues, redisconn
from shared.core.domain import Investigation
from shared.core.errors import TracehoundError
from shared.core.pipeline import enqueue_error, enqueue_reanalysis, enqueue_thread_reply
from shared.core.settings import Settings
from shared.groups.deploys import DeployStore
from shared.groups.store import GroupStore
from shared.groups.submit import Intake, schedule_incident_update
from shared.index.backlog import EmbedBacklog
from shared.index.corpus import RedisCorpus
from shared.index.history import HistoryStore
from shared.index.owners import OwnersStore
from shared.index.segment_cache import SegmentCache
from shared.index.vectors import VectorStore, open_vector_store
from shared.intake.redact import Redactor
from shared.models.chat import ChatModel, OllamaChat
from shared.models.embedder import Embedder, OllamaEmbedder
from shared.models.hosts import (
    PRIORITY_BULK,
    PRIORITY_CHAIN,
    PRIORITY_QUERY,
    HostSession,
    host_id,
    unload_ollama_model,
)
from shared.models.leased import LeasedChat, LeasedEmbedder, LeasedReranker
from shared.models.reranker import HttpReranker, Reranker
from shared.notify.channel_ids import ChannelIds
from shared.notify.courier import Courier, DeliveryPolicy
from shared.notify.notifiers import (
    ConsoleNotifier,
    Notifier,
    SlackBotNotifier,
    SlackWebhookNotifier,
)
from shared.notify.respond import Responder
from shared.notify.routing import Routing, routing_for
from shared.retrieve.keywords import BM25Index
from shared.retrieve.priors import PathPrior
from shared.retrieve.ranker import LinearModel, load_model
from workers import metrics


class Clients:
    """Every external client a stage may need, each created on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sessions: dict[str, HostSession] = {}

    def warm(self, consumed: Collection[str]) -> None:
        """Build now what the first task of ``consumed`` queues would build (HTTP clients, each
        with its TLS context; connections): about 100 ms per stage otherwise spent inside the
        first error after a start. A service that is down costs only the attempt here: the
        task meets it for real and retries or says so."""
        built = sorted({n for q in consumed for n in WARM.get(q, ())})
        for name in built:
            getattr(self, name)
        try:
            redisconn.ping_once(self.settings.redis_url)  # down: one attempt, not 15 s of retries
            self.redis.ping()
            if "vectors" in built:
                self.vectors.connect()
        except (redis.RedisError, TracehoundError, OSError) as exc:
            log.warning("worker.warm_failed", extra={"reason": f"{type(exc).__name__}: {exc}"})

    @cached_property
    def redis(self) -> redis.Redis:
        return redisconn.client(self.settings.redis_url)

    @cached_property
    def corpus(self) -> RedisCorpus:
        return RedisCorpus(self.redis)

    @cached_property
    def embed_backlog(self) -> EmbedBacklog:
        return EmbedBacklog(self.redis)

    @cached_property
    def keywords(self) -> BM25Index:
        return BM25Index(self.corpus, SegmentCache(self.settings.keyword_cache_path))

    @cached_property
    def prior(self) -> PathPrior:
        return PathPrior.from_settings(self.settings)

    @cached_property
    def ranker(self) -> LinearModel | None:
        """The learned ranker (None with TRACEHOUND_RANKER=fusion). A model file that cannot be
        read is logged as an error once, and every retrieve then falls back to the fusion's
        order and counts it (tracehound_fallbacks_total{stage="ranker"}): errors still reach
        on-call, ranked as before the ranker."""
        if self.settings.ranker != "learned":
            return None
        path = self.settings.ranker_model
        try:
            return load_model(path)
        except Exception as exc:  # whatever it is, retrieval goes on without it
            reason = f"{type(exc).__name__}: {exc}"[:500]
            log.error("ranker.unusable", extra={"path": str(path or "shipped"), "reason": reason})
            return None

    @cached_property
    def vectors(self) -> VectorStore:
        return open_vector_store(self.settings)

    @cached_property
    def model_http(self) -> httpx.Client:
        """Calls to model hosts outside the model clients (unload, health), kept open."""
        return httpx.Client(timeout=httpx.Timeout(self.settings.embed_timeout, connect=5.0))

    def session(self, url: str) -> HostSession | None:
        """The lease session of the machine behind ``url`` (None with leases turned off)."""
        s = self.settings
        if not s.host_leases:
            return None
        host = host_id(url)
        if host not in self.sessions:
            self.sessions[host] = HostSession(
                self.redis,
                host,
                ttl=s.lease_ttl,
                max_tasks=s.lease_max_tasks,
                max_seconds=s.lease_max_seconds,
                idle_release=s.lease_idle_release,
                unload=lambda u, m: unload_ollama_model(self.model_http, u, m),
                on_swap=metrics.swap,
                queue_depth=self._model_queue_depth,
            )
        return self.sessions[host]

    def _model_queue_depth(self) -> int:
        """Messages waiting on the model queues this worker consumes."""
        consumed = _state.get("consumed", set(queues.ALL_QUEUES)) & set(queues.MODEL_QUEUES)
        return sum(queues.depth(self.redis, q) for q in sorted(consumed))

    @cached_property
    def _embedder(self) -> OllamaEmbedder:
        s = self.settings
        return OllamaEmbedder(
            s.embed_base_url, s.embed_model, timeout=s.embed_timeout, batch_size=s.embed_batch_size
        )

    @cached_property
    def query_embedder(self) -> Embedder:
        """An error's query: goes ahead of bulk indexing when waiting for the host."""
        url = self.settings.embed_base_url
        return LeasedEmbedder(self._embedder, self.session(url), url, PRIORITY_QUERY)

    @cached_property
    def bulk_embedder(self) -> Embedder:
        url = self.settings.embed_base_url
        return LeasedEmbedder(self._embedder, self.session(url), url, PRIORITY_BULK)

    @cached_property
    def reranker(self) -> Reranker | None:
        s = self.settings
        inner = HttpReranker.from_settings(s)
        if inner is None or not s.rerank_url:
            return None
        kind = "ollama" if s.rerank_backend == "ollama" else "rerank"
        return LeasedReranker(
            inner, self.session(s.rerank_url), s.rerank_url, s.rerank_model, kind, PRIORITY_CHAIN
        )

    @cached_property
    def _ollama_chat(self) -> OllamaChat:
        s = self.settings
        return OllamaChat(
            s.llm_base_url,
            s.llm_model,
            timeout=s.llm_timeout,
            num_ctx=s.llm_num_ctx,
            temperature=s.llm_temperature,
        )

    @cached_property
    def chat(self) -> ChatModel:
        url = self.settings.llm_base_url
        return LeasedChat(self._ollama_chat, self.session(url), url, PRIORITY_CHAIN)

    @cached_property
    def prompt_budget(self) -> Budget:
        """The chat model's context window, measured by its calibrated token count."""
        chat = self._ollama_chat
        return Budget(chat.num_ctx, chat.tokens)

    @cached_property
    def intake(self) -> Intake:
        return Intake(
            current_app._get_current_object(),
            self.redis,
            self.settings,
            counted=metrics.counted,
        )

    @cached_property
    def groups(self) -> GroupStore:
        return GroupStore(self.redis, window_s=self.settings.group_window)

    @cached_property
    def redactor(self) -> Redactor:
        s = self.settings
        return Redactor.from_settings(s.redact, s.redact_extra, s.redact_disable)

    @cached_property
    def analysis_cache(self) -> AnalysisCache:
        return AnalysisCache(self.redis)

    @cached_property
    def deploys(self) -> DeployStore:
        """Announced and seen deploys (a new group's message names the one it came after)."""
        return DeployStore(self.redis)

    @cached_property
    def history(self) -> HistoryStore:
        """What index and watch recorded from git (analyze reads it; no checkout needed)."""
        return HistoryStore(self.redis)

    @cached_property
    def courier(self) -> Courier:
        """What the notify tasks deliver with (shared/notify/delivery.py)."""
        s = self.settings
        if s.slack_channel:
            channel = s.slack_channel
        elif s.slack_webhook_url:
            channel = s.slack_webhook_url.get_secret_value()  # hashed inside the pacing key
        else:
            channel = "console"
        return Courier(
            r=self.redis,
            groups=self.groups,
            notifier=self.notifier,
            console=self.console,
            policy=DeliveryPolicy(
                channel=channel,
                pace_s=s.slack_pace,
                thread_only=s.slack_thread_only,
                update_interval_s=s.group_update_interval,
                repo_url_template=s.repo_url_template,
                min_relevance=s.min_relevance,
                language=s.language,
                claim_ttl_s=queues.TIME_LIMITS[queues.NOTIFY] + 30,
                actions=s.slack_actions,
                memory_days=s.memory_days if s.memory else 0,
            ),
            reply_later=self._reply_later,
            on_fallback=metrics.fallback,
            reanalyze_later=self._reanalyze_later,
            routing=self.routing,
            owners=OwnersStore(self.redis),
            refresh_incident_later=self._refresh_incident_later,
        )

    @cached_property
    def routing(self) -> Routing:
        """TRACEHOUND_ROUTING's rules (checked at worker start: workers/app.py)."""
        return routing_for(self.settings)

    @cached_property
    def responder(self) -> Responder:
        """What the slack_action task applies buttons with (shared/notify/respond.py)."""
        courier = self.courier
        return Responder(
            r=self.redis,
            groups=self.groups,
            notifier=self.notifier,
            policy=courier.policy,
            rerun=self._rerun,
            code_version=self._code_version,
            routed=bool(self.routing.rules),
            rerun_interval_s=self.settings.slack_rerun_interval,
        )

    def _rerun(self, inv: Investigation) -> None:
        app = current_app._get_current_object()
        enqueue_error(app, inv.event, inv.group, revises=inv.revises, rerun=inv.rerun)

    def _code_version(self, repo: str) -> str | None:
        version = self.history.version(repo)
        return version.commit if version else None

    def _reanalyze_later(self, investigation: dict[str, Any]) -> None:
        app = current_app._get_current_object()
        enqueue_reanalysis(app, investigation, countdown=self.settings.reanalyze_after)

    def _refresh_incident_later(self, incident: str) -> None:
        app = current_app._get_current_object()
        schedule_incident_update(app, self.redis, incident)

    def _reply_later(self, thread_ts: str, text: str, key: str, channel: str | None) -> None:
        app = current_app._get_current_object()
        enqueue_thread_reply(app, thread_ts, text, key, channel=channel)

    @cached_property
    def console(self) -> ConsoleNotifier:
        return ConsoleNotifier(self.settings.notifications_path)

    @cached_property
    def notifier(self) -> Notifier:
        s = self.settings
        if s.slack_bot_token and s.slack_channel:
            return SlackBotNotifier(
                s.slack_bot_token.get_secret_value(),
                s.slack_channel,
                base_url=s.slack_base_url,
                timeout=s.slack_timeout,
                channel_ids=ChannelIds(self.redis),
                on_call=metrics.slack_call,
            )
        if s.slack_webhook_url:
            return SlackWebhookNotifier(
                s.slack_webhook_url.get_secret_value(),
                timeout=s.slack_timeout,
                on_call=metrics.slack_call,
            )
        return self.console


log = logging.getLogger(__name__)
_state: dict[str, Any] = {}


def settings() -> Settings:
    if "settings" not in _state:
        _state["settings"] = Settings()
    return _state["settings"]


# Libraries a queue's tasks import on first use (see each client's lazy import), by queue;
# "vectors": the vector store's client library, by TRACEHOUND_VECTOR_STORE.
CLIENT_MODULES: dict[str, tuple[str, ...]] = {
    "llm": ("langchain_ollama",),
    "retrieve": ("vectors",),
    "index": ("vectors",),
}
STORE_MODULES: dict[str, tuple[str, ...]] = {
    "chroma": ("chromadb",),
    "pgvector": ("psycopg", "pgvector.psycopg"),
}


# What each queue's first task builds (Clients attributes), for Clients.warm.
WARM: dict[str, tuple[str, ...]] = {
    "embed": ("query_embedder", "bulk_embedder", "model_http", "embed_backlog", "vectors"),
    "retrieve": ("keywords", "prior", "ranker", "redactor", "vectors"),
    "rerank": ("reranker", "model_http"),
    "llm": ("chat", "analysis_cache", "redactor", "model_http", "courier", "groups", "keywords"),
    "notify": ("courier", "groups", "responder"),
    "intake": ("intake",),
    "index": ("corpus", "vectors", "embed_backlog"),
}


def remember_queues(consumed: set[str]) -> None:
    """The queues this worker consumes (set before the pool forks), for its children."""
    _state["consumed"] = set(consumed)


def consumed_queues() -> set[str]:
    """The queues this worker consumes (every queue until the worker has said)."""
    return set(_state.get("consumed", queues.ALL_QUEUES))


def client_modules(consumed: set[str]) -> list[str]:
    """The heavy modules the tasks of ``consumed`` queues import."""
    names = {m for q in consumed for m in CLIENT_MODULES.get(q, ())}
    if "vectors" in names:
        names = (names - {"vectors"}) | set(STORE_MODULES[settings().vector_store])
    return sorted(names)


def clients() -> Clients:
    if "clients" not in _state:
        _state["clients"] = Clients(settings())
    return _state["clients"]


@worker_process_init.connect
def _after_fork(**_: Any) -> None:
    # Sockets, HTTP pools and lease renewer threads must not be shared with the parent.
    _state.pop("clients", None)
    clients().warm(_state.get("consumed", queues.ALL_QUEUES))


@task_postrun.connect
def _after_task(task: Any = None, **_: Any) -> None:
    """Between two tasks of a model queue: keep the host for more of the same, or yield it."""
    c = _state.get("clients")
    if c is None or not c.sessions or task is None:
        return
    info = task.request.delivery_info or {}
    queue = info.get("routing_key")
    if queue not in queues.MODEL_QUEUES or not any(s.lease.held for s in c.sessions.values()):
        return  # released already: by the last call, when nothing waited
    depth = queues.depth(c.redis, queue)
    for session in c.sessions.values():
        session.after_task(depth)


@worker_process_shutdown.connect
def _on_shutdown(**_: Any) -> None:
    c = _state.get("clients")
    if c is not None:
        for session in c.sessions.values():
            session.close()
