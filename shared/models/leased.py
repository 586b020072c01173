"""Model clients that run every call under their host's lease (see shared/models/hosts.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from shared.models.chat import ChatModel, ToolChat, ToolsUnsupported, Turn
from shared.models.embedder import Embedder
from shared.models.hosts import HostSession
from shared.models.reranker import Reranker


class LeasedEmbedder:
    def __init__(
        self, inner: Embedder, session: HostSession | None, url: str, priority: int
    ) -> None:
        self.inner, self.session, self.url, self.priority = inner, session, url, priority
        self.model = inner.model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.session is None:
            return self.inner.embed(texts)
        return self.session.call(
            self.model, self.url, "ollama", self.priority, lambda: self.inner.embed(texts)
        )


class LeasedChat:
    def __init__(
        self, inner: ChatModel, session: HostSession | None, url: str, priority: int
    ) -> None:
        self.inner, self.session, self.url, self.priority = inner, session, url, priority
        self.model = inner.model

    def complete(self, messages: list[dict[str, Any]], schema: dict[str, Any]) -> str:
        if self.session is None:
            return self.inner.complete(messages, schema)
        return self.session.call(
            self.model,
            self.url,
            "ollama",
            self.priority,
            lambda: self.inner.complete(messages, schema),
        )

    def converse(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Turn:
        inner = self.inner
        if not isinstance(inner, ToolChat):
            raise ToolsUnsupported(f"chat client for {self.model} cannot offer tools")
        if self.session is None:
            return inner.converse(messages, tools)
        return self.session.call(
            self.model, self.url, "ollama", self.priority, lambda: inner.converse(messages, tools)
        )

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """The host stays this model's between the calls of one analysis (its tool rounds):
        handing it over between two rounds would reload the model for the next one."""
        if self.session is None:
            yield
            return
        with self.session.holding():
            yield


class LeasedReranker:
    def __init__(
        self,
        inner: Reranker,
        session: HostSession | None,
        url: str,
        model: str,
        kind: str,
        priority: int,
    ) -> None:
        self.inner, self.session, self.url, self.priority = inner, session, url, priority
        self.model, self.kind = model, kind
        self.name = inner.name

    def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        if self.session is None:
            return self.inner.scores(query, documents)
        return self.session.call(
            self.model,
            self.url,
            self.kind,
            self.priority,
            lambda: self.inner.scores(query, documents),
        )
