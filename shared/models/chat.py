"""The chat model through langchain-ollama: a JSON schema as ``format``, tools, a hard timeout."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

import httpx

from shared.core.errors import PermanentError, TransientError
from shared.models.embedder import model_missing
from shared.models.token_count import TokenCount

REPLY_MAX_TOKENS = 2048
# A chat template's tokens around each message (Qwen's "<|im_start|>role\n … <|im_end|>\n" is
# five), and around the tools it renders into the prompt: counted high, as the text is.
MESSAGE_TOKENS = 8
TOOLS_TOKENS = 80
T = TypeVar("T")


def runner_cut(num_ctx: int) -> int:
    """The size Ollama's runner cuts a prompt longer than ``num_ctx`` to: num_ctx -
    max((num_ctx - num_keep)/2, 1), num_keep being 4 and the BOS token (llm/llama_server.go
    contextShiftPromptLimit, api/types.go DefaultOptions)."""
    return num_ctx - max((num_ctx - 5) // 2, 1)


def reply_tokens(num_ctx: int) -> int:
    """The reply's share of a context window: REPLY_MAX_TOKENS, a quarter of a small one."""
    return min(REPLY_MAX_TOKENS, num_ctx // 4)


def prompt_tokens(
    count: TokenCount, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> int:
    """The estimated tokens of the prompt Ollama renders from ``messages`` (and ``tools``)."""
    total = 0
    for m in messages:
        total += MESSAGE_TOKENS + count(str(m.get("content") or ""))
        if m.get("tool_calls"):
            total += count(json.dumps(m["tool_calls"]))
    if tools:
        total += TOOLS_TOKENS + count(json.dumps(tools))
    return total


class ChatModel(Protocol):
    model: str

    def complete(self, messages: list[dict[str, Any]], schema: dict[str, Any]) -> str: ...


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Turn:
    """One reply of a model offered tools: its text, and the tools it calls (maybe none)."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)


class ToolsUnsupported(PermanentError):
    """The model takes no tools: Ollama answers HTTP 400 ``<model> does not support tools``
    (its template declares none); the analysis falls back to ``need_more`` requests."""


@runtime_checkable
class ToolChat(Protocol):
    """A chat model that can be offered tools (Ollama's ``tools`` / ``tool_calls``)."""

    model: str

    def complete(self, messages: list[dict[str, Any]], schema: dict[str, Any]) -> str: ...
    def converse(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Turn: ...
    def hold(self) -> AbstractContextManager[None]:
        """Keep the model host between the calls of one analysis (shared/models/leased.py)."""
        ...


def lc_messages(messages: list[dict[str, Any]]) -> list[Any]:
    """Our message dicts as LangChain messages (assistant tool calls and tool results too)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[Any] = []
    for m in messages:
        role, content = m["role"], m.get("content") or ""
        if role == "system":
            out.append(SystemMessage(content))
        elif role == "assistant":
            calls = [
                {"id": c["id"], "name": c["name"], "args": c["args"], "type": "tool_call"}
                for c in m.get("tool_calls", [])
            ]
            out.append(AIMessage(content, tool_calls=calls))
        elif role == "tool":
            out.append(ToolMessage(content, tool_call_id=m["tool_call_id"], name=m.get("name")))
        else:
            out.append(HumanMessage(content))
    return out


class OllamaChat:
    """langchain-ollama's ChatOllama with a JSON schema as ``format``, ``num_ctx`` sent on
    every call, and a hard timeout. ``tokens`` estimates the model's token count of a prompt
    and learns from the ``prompt_eval_count`` each reply reports."""

    def __init__(
        self, base_url: str, model: str, *, timeout: float, num_ctx: int, temperature: float = 0.1
    ) -> None:
        self.base_url, self.model = base_url.rstrip("/"), model
        self._timeout, self.num_ctx, self._temperature = timeout, num_ctx, temperature
        self._llms: dict[str, Any] = {}
        self.tokens = TokenCount(learn_down=True)

    def _llm(self, schema: dict[str, Any] | None) -> Any:
        key = json.dumps(schema, sort_keys=True)
        if key not in self._llms:
            from langchain_ollama import ChatOllama  # heavy: only the llm worker imports it

            # The ollama client has no timeout by default; num_ctx stays fixed per model or
            # Ollama reloads it.
            self._llms[key] = ChatOllama(
                model=self.model,
                base_url=self.base_url,
                format=schema,
                num_ctx=self.num_ctx,
                # A bounded reply: a model looping on whitespace cannot outlive the task.
                num_predict=reply_tokens(self.num_ctx),
                temperature=self._temperature,
                client_kwargs={"timeout": self._timeout},
            )
        return self._llms[key]

    def _call(self, fn: Callable[[], T], *, tools: bool = False) -> T:
        from ollama import ResponseError

        try:
            return fn()
        except ResponseError as exc:
            detail = f"chat with {self.model}: HTTP {exc.status_code}: {exc.error}"
            if tools and exc.status_code in (400, 404) and "tools" in str(exc.error).lower():
                raise ToolsUnsupported(detail) from exc
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

    def complete(self, messages: list[dict[str, Any]], schema: dict[str, Any]) -> str:
        # One reply, not a stream: nothing reads the tokens as they come, and invoke would
        # otherwise stream them and join them again (ChatOllama streams by default).
        reply = self._call(lambda: self._llm(schema).invoke(lc_messages(messages), stream=False))
        self._learn(messages, None, reply)
        content = reply.content
        return content if isinstance(content, str) else json.dumps(content)

    def _learn(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, reply: Any
    ) -> None:
        """Calibrate the estimate against the tokens Ollama counted (``prompt_eval_count``).
        A prompt the runner cut to fit comes back at the cut's exact size; it counted more
        than the window."""
        usage = getattr(reply, "usage_metadata", None) or {}
        counted = usage.get("input_tokens") if isinstance(usage, dict) else None
        if not isinstance(counted, int) or counted <= 0:
            return
        raw = prompt_tokens(TokenCount(), messages, tools)  # unscaled: the ratio is the scale
        if abs(counted - runner_cut(self.num_ctx)) <= 2:
            # The runner cut the prompt to this size: it was longer than the whole window.
            counted = self.num_ctx + 1
        self.tokens.observe(raw, counted)

    def converse(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Turn:
        """One round offering ``tools`` (no ``format``: a schema's grammar would leave the
        model no way to write a tool call)."""
        llm = self._llm(None).bind_tools(tools)
        reply = self._call(lambda: llm.invoke(lc_messages(messages), stream=False), tools=True)
        self._learn(messages, tools, reply)
        content = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
        calls = [
            ToolCall(id=str(c.get("id") or f"call_{i}"), name=c["name"], args=dict(c["args"]))
            for i, c in enumerate(reply.tool_calls)
        ]
        return Turn(content, calls)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        yield  # no host lease here: LeasedChat holds one
