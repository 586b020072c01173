"""The chat model through langchain-ollama: a JSON schema as ``format``, a hard timeout."""

from __future__ import annotations

import json
from typing import Any, Protocol

import httpx

from shared.core.errors import PermanentError, TransientError
from shared.models.embedder import model_missing

REPLY_MAX_TOKENS = 2048


class ChatModel(Protocol):
    model: str

    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any]) -> str: ...


class OllamaChat:
    """langchain-ollama's ChatOllama with a JSON schema as ``format`` and a hard timeout."""

    def __init__(
        self, base_url: str, model: str, *, timeout: float, num_ctx: int, temperature: float = 0.1
    ) -> None:
        self.base_url, self.model = base_url.rstrip("/"), model
        self._timeout, self._num_ctx, self._temperature = timeout, num_ctx, temperature
        self._llms: dict[str, Any] = {}

    def _llm(self, schema: dict[str, Any]) -> Any:
        key = json.dumps(schema, sort_keys=True)
        if key not in self._llms:
            from langchain_ollama import ChatOllama  # heavy: only the llm worker imports it

            # The ollama client has no timeout by default; num_ctx stays fixed per model or
            # Ollama reloads it.
            self._llms[key] = ChatOllama(
                model=self.model,
                base_url=self.base_url,
                format=schema,
                num_ctx=self._num_ctx,
                # A bounded reply: a model looping on whitespace cannot outlive the task.
                num_predict=REPLY_MAX_TOKENS,
                temperature=self._temperature,
                client_kwargs={"timeout": self._timeout},
            )
        return self._llms[key]

    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any]) -> str:
        from ollama import ResponseError

        lc_messages = [
            (m["role"] if m["role"] != "assistant" else "ai", m["content"]) for m in messages
        ]
        try:
            # One reply, not a stream: nothing reads the tokens as they come, and invoke would
            # otherwise stream them and join them again (ChatOllama streams by default).
            reply = self._llm(schema).invoke(lc_messages, stream=False)
        except ResponseError as exc:
            detail = f"chat with {self.model}: HTTP {exc.status_code}: {exc.error}"
            if exc.status_code == 404:
                raise model_missing(self.model, self.base_url) from exc
            if exc.status_code in (408, 429) or exc.status_code >= 500 or exc.status_code == -1:
                raise TransientError(detail) from exc
            raise PermanentError(detail) from exc
        except httpx.TimeoutException as exc:
            raise TransientError(
                f"chat with {self.model}: timed out after {self._timeout:.0f}s"
            ) from exc
        except (httpx.TransportError, ConnectionError) as exc:
            raise TransientError(
                f"chat with {self.model}: cannot reach {self.base_url} ({exc})"
            ) from exc
        content = reply.content
        return content if isinstance(content, str) else json.dumps(content)
