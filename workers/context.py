"""Per-process state of a worker: settings and clients, built lazily, rebuilt after fork."""

from __future__ import annotations

from functools import cached_property
from typing import Any

import redis
from celery.signals import worker_process_init

from shared.analysis import ChatModel, OllamaChat
from shared.corpus import RedisCorpus
from shared.embedder import Embedder, OllamaEmbedder
from shared.keywords import BM25Index
from shared.notifiers import ConsoleNotifier, Notifier, SlackBotNotifier, SlackWebhookNotifier
from shared.reranker import HttpReranker, Reranker
from shared.settings import Settings
from shared.vectors import ChromaVectorIndex


class Clients:
    """Every external client a stage may need, each created on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.settings.redis_url)

    @cached_property
    def corpus(self) -> RedisCorpus:
        return RedisCorpus(self.redis)

    @cached_property
    def keywords(self) -> BM25Index:
        return BM25Index(self.corpus)

    @cached_property
    def vectors(self) -> ChromaVectorIndex:
        s = self.settings
        return ChromaVectorIndex(url=s.chroma_url, path=s.chroma_path, timeout=s.chroma_timeout)

    @cached_property
    def embedder(self) -> Embedder:
        s = self.settings
        return OllamaEmbedder(
            s.ollama_url, s.embed_model, timeout=s.embed_timeout, batch_size=s.embed_batch_size
        )

    @cached_property
    def reranker(self) -> Reranker | None:
        s = self.settings
        if s.rerank_backend == "none" or not s.rerank_url:
            return None
        key = s.rerank_api_key.get_secret_value() if s.rerank_api_key else None
        return HttpReranker(
            s.rerank_backend, s.rerank_url, s.rerank_model, timeout=s.rerank_timeout, api_key=key
        )

    @cached_property
    def chat(self) -> ChatModel:
        s = self.settings
        return OllamaChat(
            s.ollama_url,
            s.llm_model,
            timeout=s.llm_timeout,
            num_ctx=s.llm_num_ctx,
            temperature=s.llm_temperature,
        )

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
            )
        if s.slack_webhook_url:
            return SlackWebhookNotifier(
                s.slack_webhook_url.get_secret_value(), timeout=s.slack_timeout
            )
        return self.console


_state: dict[str, Any] = {}


def settings() -> Settings:
    if "settings" not in _state:
        _state["settings"] = Settings()
    return _state["settings"]


def clients() -> Clients:
    if "clients" not in _state:
        _state["clients"] = Clients(settings())
    return _state["clients"]


@worker_process_init.connect
def _after_fork(**_: Any) -> None:
    # Sockets and HTTP pools must not be shared with the parent process.
    _state.pop("clients", None)
