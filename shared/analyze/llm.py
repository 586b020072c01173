"""The LLM stage: prompt from template files, structured JSON reply, one repair, else degraded."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from functools import cache
from importlib import resources
from string import Template
from typing import Any, Protocol

import httpx
from pydantic import ValidationError

from shared.core.domain import Analysis, AnalysisReply, Candidate, ErrorEvent
from shared.core.errors import PermanentError, TransientError
from shared.models.embedder import model_missing

log = logging.getLogger(__name__)

PROMPT_ERROR_MAX_CHARS = 6000
PROMPT_CODE_MAX_CHARS = 16000
REPLY_MAX_TOKENS = 2048


class ChatModel(Protocol):
    model: str

    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any]) -> str: ...


@cache
def template(name: str) -> Template:
    return Template(resources.files("shared.analyze").joinpath("prompts", name).read_text("utf-8"))


@cache
def prompt_version() -> str:
    """Changes whenever a prompt template or the reply schema changes (analysis cache key)."""
    parts = [
        template(n).template for n in ("analysis_system.txt", "analysis_user.txt", "repair.txt")
    ]
    parts.append(json.dumps(analysis_schema(), sort_keys=True))
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()[:12]


@cache
def analysis_schema() -> dict[str, Any]:
    """The JSON schema sent as Ollama's ``format``; replies are validated by the same model."""
    return AnalysisReply.model_json_schema()


def _candidate_block(rank: int, candidate: Candidate, budget: int) -> str:
    parts = []
    for chunk in candidate.chunks:
        parts.append(f"# lines {chunk.start_line}-{chunk.end_line}\n{chunk.text}")
    body = "\n...\n".join(parts)[:budget]
    first, last = candidate.chunks[0].start_line, candidate.chunks[0].end_line
    return (
        f'<candidate rank="{rank}" path="{candidate.path}" lines="{first}-{last}">\n'
        f"{body}\n</candidate>"
    )


def build_messages(event: ErrorEvent, candidates: Sequence[Candidate]) -> list[dict[str, str]]:
    """System and user messages for the analysis; code shares a fixed budget, best first."""
    error = "\n".join(p for p in (event.message, event.stacktrace) if p.strip()) or "(empty)"
    if len(error) > PROMPT_ERROR_MAX_CHARS:
        error = "…[trimmed]\n" + error[-PROMPT_ERROR_MAX_CHARS:]
    blocks, budget = [], PROMPT_CODE_MAX_CHARS
    for rank, cand in enumerate(candidates, start=1):
        if budget <= 200:
            break
        block = _candidate_block(rank, cand, budget)
        blocks.append(block)
        budget -= len(block)
    user = template("analysis_user.txt").substitute(
        service=event.service,
        exception=event.exception_type or "(unknown)",
        error=error,
        candidates="\n\n".join(blocks) or "(retrieval found no code)",
    )
    return [
        {"role": "system", "content": template("analysis_system.txt").template},
        {"role": "user", "content": user},
    ]


def parse_reply(text: str) -> AnalysisReply:
    """Validate the model's JSON; ``ValueError`` says what is wrong."""
    cleaned = text.strip()
    if cleaned.startswith("```"):  # some models fence JSON even when asked not to
        cleaned = cleaned.strip("`")
        cleaned = cleaned[cleaned.find("{") :] if "{" in cleaned else cleaned
    try:
        return AnalysisReply.model_validate_json(cleaned)
    except ValidationError as exc:
        raise ValueError(_short_errors(exc)) from exc


def _short_errors(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
    )


def degraded(reason: str, *, model: str, raw_text: str | None = None) -> Analysis:
    return Analysis(
        summary="Automatic analysis unavailable; the retrieved files are listed as found.",
        hypotheses=[],
        suggested_fix="",
        relevant_files=[],
        confidence=0.0,
        model=model,
        degraded=True,
        degraded_reason=reason,
        raw_text=raw_text,
    )


def analyze(event: ErrorEvent, candidates: Sequence[Candidate], chat: ChatModel) -> Analysis:
    """Ask the model; one repair attempt on invalid JSON; a degraded analysis if that fails too.

    Transient model failures (timeouts, 5xx) propagate so the task can retry them.
    """
    messages = build_messages(event, candidates)
    schema = analysis_schema()
    raw = chat.complete(messages, schema)
    try:
        reply = parse_reply(raw)
    except ValueError as first_problem:
        log.warning(
            "analyze.invalid_reply", extra={"event_id": event.id, "problem": str(first_problem)}
        )
        repair = template("repair.txt").substitute(
            problem=str(first_problem), previous=raw[:PROMPT_ERROR_MAX_CHARS]
        )
        raw2 = chat.complete(
            [*messages, {"role": "assistant", "content": raw}, {"role": "user", "content": repair}],
            schema,
        )
        try:
            reply = parse_reply(raw2)
        except ValueError as second_problem:
            return degraded(
                f"LLM reply was not valid JSON after one repair ({second_problem})",
                model=chat.model,
                raw_text=raw2 or raw,
            )
    return Analysis(**reply.model_dump(), model=chat.model)


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
            reply = self._llm(schema).invoke(lc_messages)
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
