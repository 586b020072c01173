"""The LLM stage: prompt from template files, structured JSON reply, one repair, else degraded."""

from __future__ import annotations

import hashlib
import html
import json
import logging
import secrets
from collections.abc import Sequence
from functools import cache
from importlib import resources
from string import Template
from typing import Any

from pydantic import ValidationError

from shared.analyze.history import RecentChange
from shared.core.domain import Analysis, AnalysisReply, Candidate, ErrorEvent
from shared.models.chat import ChatModel

log = logging.getLogger(__name__)

PROMPT_ERROR_MAX_CHARS = 6000
PROMPT_CODE_MAX_CHARS = 16000


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


def _candidate_block(rank: int, candidate: Candidate, budget: int, nonce: str) -> str:
    parts = []
    for chunk in candidate.chunks:
        parts.append(f"# lines {chunk.start_line}-{chunk.end_line}\n{chunk.text}")
    body = "\n...\n".join(parts)[:budget]
    first, last = candidate.chunks[0].start_line, candidate.chunks[0].end_line
    path = html.escape(candidate.path, quote=True)  # an attribute value cannot be closed
    return (
        f'<candidate_{nonce} rank="{rank}" path="{path}" lines="{first}-{last}">\n'
        f"{body}\n</candidate_{nonce}>"
    )


PROMPT_BREADCRUMBS = 5


def sdk_context(event: ErrorEvent) -> str:
    """What an error SDK reported beside the trace (shared/intake/sentry.py, otlp.py): the
    release and environment, and the last breadcrumbs, already redacted by intake."""
    attrs = event.attributes
    lines = [
        f"{name}: {attrs[key]}"
        for key, name in (("release", "Release"), ("environment", "Environment"))
        if isinstance(attrs.get(key), str)
    ]
    crumbs = attrs.get("breadcrumbs")
    if isinstance(crumbs, list) and crumbs:
        lines.append("Breadcrumbs (oldest first):")
        for crumb in crumbs[-PROMPT_BREADCRUMBS:]:
            if isinstance(crumb, dict):
                what = " ".join(
                    str(crumb[k])[:300] for k in ("category", "level", "message") if crumb.get(k)
                )
                lines.append(f"- {what}")
    return "\n".join(lines)


LANGUAGE_NAMES = {
    "en": "English",
    "ko": "Korean",
    "ja": "Japanese",
    "zh": "Chinese",
    "de": "German",
    "fr": "French",
    "es": "Spanish",
    "pt": "Portuguese",
}


def guidance(weak_reason: str, language: str) -> str:
    """What the model is told beyond the error and the code: that the evidence is weak (the
    same judgement the message shows, shared/retrieve/evidence.py), and which language its
    prose is read in."""
    lines = []
    if weak_reason:
        lines.append(
            f"Evidence is weak: {weak_reason}. These files may have nothing to do with the "
            "failure. Say so in the summary, offer causes only as possible leads, and give no "
            "confidence above 0.3."
        )
    if language.split("-", 1)[0] != "en":
        name = LANGUAGE_NAMES.get(language.split("-", 1)[0], f"the language with code {language}")
        lines.append(
            f"Write summary, causes, suggested fix and reasons in {name}. Keep identifiers, "
            "file paths, code, exception names and quoted log text exactly as they are."
        )
    return "".join(f"{line}\n\n" for line in lines)


def _changes_block(changes: Sequence[RecentChange], nonce: str) -> str:
    """The latest git change to the candidates' lines, fenced like the code (commit subjects
    and diffs are untrusted text too)."""
    if not changes:
        return ""
    blocks = []
    for ch in changes:
        c = ch.commit
        attrs = " ".join(
            f'{k}="{html.escape(v, quote=True)}"'
            for k, v in (("path", ch.path), ("lines", ch.lines), ("commit", c.sha[:12]),
                         ("author", c.author), ("subject", c.subject))
        )  # fmt: skip
        blocks.append(f"<change_{nonce} {attrs}>\n{ch.diff}\n</change_{nonce}>")
    return "Latest change to those lines (git history):\n" + "\n\n".join(blocks) + "\n\n"


def build_messages(
    event: ErrorEvent,
    candidates: Sequence[Candidate],
    nonce: str | None = None,
    changes: Sequence[RecentChange] = (),
    *,
    weak_reason: str = "",
    language: str = "en",
) -> list[dict[str, str]]:
    """System and user messages for the analysis; code shares a fixed budget, best first.

    Untrusted text (the error, the code) sits inside tags whose names end in a random
    ``nonce``: a log line saying ``</error>`` cannot close the fence and speak as the prompt.
    """
    nonce = nonce or secrets.token_hex(6)
    error = "\n".join(p for p in (event.message, event.stacktrace) if p.strip()) or "(empty)"
    if context := sdk_context(event):
        error = f"{error}\n\n{context}"
    if len(error) > PROMPT_ERROR_MAX_CHARS:
        error = "…[trimmed]\n" + error[-PROMPT_ERROR_MAX_CHARS:]
    blocks, budget = [], PROMPT_CODE_MAX_CHARS
    for rank, cand in enumerate(candidates, start=1):
        if budget <= 200:
            break
        block = _candidate_block(rank, cand, budget, nonce)
        blocks.append(block)
        budget -= len(block)
    user = template("analysis_user.txt").substitute(
        service=event.service,
        exception=event.exception_type or "(unknown)",
        error=error,
        candidates="\n\n".join(blocks) or "(retrieval found no code)",
        guidance=guidance(weak_reason, language),
        changes=_changes_block(changes, nonce),
        nonce=nonce,
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


def analyze(
    event: ErrorEvent,
    candidates: Sequence[Candidate],
    chat: ChatModel,
    changes: Sequence[RecentChange] = (),
    *,
    weak_reason: str = "",
    language: str = "en",
) -> Analysis:
    """Ask the model; one repair attempt on invalid JSON; a degraded analysis if that fails too.

    Transient model failures (timeouts, 5xx) propagate so the task can retry them.
    """
    messages = build_messages(
        event, candidates, changes=changes, weak_reason=weak_reason, language=language
    )
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
