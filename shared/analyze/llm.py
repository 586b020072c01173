"""The LLM stage: prompt from template files, structured JSON reply, one repair, else degraded."""

from __future__ import annotations

import copy
import hashlib
import html
import json
import logging
import math
import secrets
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from string import Template
from typing import Any

from pydantic import ValidationError

from shared.analyze.budget import Budget, fit
from shared.analyze.code import numbered
from shared.analyze.history import RecentChange
from shared.analyze.tools import TOOL_NAMES, TOOL_SPECS, Toolbox
from shared.core.domain import (
    TYPE_MAX_CHARS,
    Analysis,
    AnalysisReply,
    Candidate,
    ErrorEvent,
    FileRef,
    one_line,
)
from shared.models.chat import ChatModel, ToolCall, ToolChat, ToolsUnsupported

log = logging.getLogger(__name__)

PROMPT_ERROR_MAX_CHARS = 6000
PROMPT_CODE_MAX_CHARS = 16000  # and within the context window's room (shared/analyze/budget.py)
PROMPT_WINDOW_MAX_CHARS = 2000  # one frame window (its numbered lines)
TOP_MIN_TOKENS = 300  # the top candidate is shown at least this much, whatever the room
CALL_TOKENS = 40  # one tool call the model writes, as it comes back in the conversation
PROMPTS = (
    "analysis_system.txt",
    "analysis_user.txt",
    "repair.txt",
    "tools.txt",
    "answer_now.txt",
    "need_more.txt",
    "need_more_results.txt",
)


@cache
def template(name: str) -> Template:
    return Template(resources.files("shared.analyze").joinpath("prompts", name).read_text("utf-8"))


@cache
def prompt_version() -> str:
    """Changes whenever a prompt template or the reply schema changes (analysis cache key)."""
    parts = [template(n).template for n in PROMPTS]
    parts.append(json.dumps(analysis_schema(), sort_keys=True))
    parts.append(json.dumps(TOOL_SPECS, sort_keys=True))
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()[:12]


@cache
def analysis_schema() -> dict[str, Any]:
    """The JSON schema sent as Ollama's ``format``; replies are validated by the same model."""
    return AnalysisReply.model_json_schema()


def _candidate_block(
    rank: int | str,
    candidate: Candidate,
    budget: int,
    nonce: str,
    marked: Mapping[str, Sequence[int]],
) -> str:
    lines = marked.get(candidate.path, ())
    parts = [numbered(chunk.text, chunk.start_line, lines) for chunk in candidate.chunks]
    body = "\n   ...\n".join(parts)[:budget]
    first, last = candidate.chunks[0].start_line, candidate.chunks[0].end_line
    path = html.escape(candidate.path, quote=True)  # an attribute value cannot be closed
    return (
        f'<candidate_{nonce} rank="{rank}" path="{path}" lines="{first}-{last}">\n'
        f"{body}\n</candidate_{nonce}>"
    )


PROMPT_BREADCRUMBS = 5
# Request attributes worth a line in the prompt, by the names producers give them (top level,
# a Sentry event's tags, an OTLP record's attributes); nothing else of ``attributes`` is sent.
WHITELIST: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Route", ("route", "http.route", "transaction", "url.path")),
    ("Status", ("status", "status_code", "http.status_code", "http.response.status_code")),
    ("Request id", ("request_id", "request.id", "http.request.id", "x-request-id")),
)


FIELD_MAX_CHARS = 200  # one field from outside (a release, a tag, a breadcrumb) in the prompt


def whitelisted(attrs: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) of the whitelisted request attributes an event carries, each once."""
    places = [attrs, *(attrs.get(k) for k in ("tags", "log_attributes"))]
    found: list[tuple[str, str]] = []
    for label, names in WHITELIST:
        for place in places:
            value = next(
                (place[n] for n in names if isinstance(place, Mapping) and place.get(n)), None
            )
            if isinstance(value, str | int) and not isinstance(value, bool):
                found.append((label, one_line(str(value), FIELD_MAX_CHARS)))
                break
    return found


def sdk_context(event: ErrorEvent) -> str:
    """What an error SDK reported beside the trace (shared/intake/sentry.py, otlp.py): the
    release and environment, and the last breadcrumbs, already redacted by intake; each on one
    line of its own, clipped, inside the error's fence."""
    attrs = event.attributes
    lines = [
        f"{name}: {one_line(attrs[key], FIELD_MAX_CHARS)}"
        for key, name in (("release", "Release"), ("environment", "Environment"))
        if isinstance(attrs.get(key), str)
    ]
    lines += [f"{name}: {value}" for name, value in whitelisted(attrs)]
    crumbs = attrs.get("breadcrumbs")
    if isinstance(crumbs, list) and crumbs:
        lines.append("Breadcrumbs (oldest first):")
        for crumb in crumbs[-PROMPT_BREADCRUMBS:]:
            if isinstance(crumb, dict):
                what = " ".join(
                    one_line(str(crumb[k]), FIELD_MAX_CHARS)
                    for k in ("category", "level", "message")
                    if crumb.get(k)
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
    windows: Sequence[Candidate] = (),
    marked: Mapping[str, Sequence[int]] | None = None,
    budget: Budget | None = None,
    reserve: int = 0,
) -> list[dict[str, Any]]:
    """System and user messages for the analysis; code shares a fixed budget, best first.

    Code is numbered line by line and the trace's lines are marked (shared/analyze/code.py).
    It fills what the context window leaves (``budget``, less ``reserve`` tokens kept for
    tool rounds) and at most PROMPT_CODE_MAX_CHARS: the top candidate first (always, cut if it
    must be), then ``windows`` (the code at frames no candidate shows), then the others by
    rank. Untrusted text (the error, the code) sits inside tags whose names end in a random
    ``nonce``: a log line saying ``</error>`` cannot close the fence and speak as the prompt.
    """
    nonce = nonce or secrets.token_hex(6)
    budget = budget or Budget()
    marked = marked or {}
    error = "\n".join(p for p in (event.message, event.stacktrace) if p.strip()) or "(empty)"
    if context := sdk_context(event):
        error = f"{error}\n\n{context}"
    if len(error) > PROMPT_ERROR_MAX_CHARS:
        error = "…[trimmed]\n" + error[-PROMPT_ERROR_MAX_CHARS:]

    def user_text(code: str) -> str:
        return template("analysis_user.txt").substitute(
            service=one_line(event.service, FIELD_MAX_CHARS),
            exception=one_line(event.exception_type or "(unknown)", TYPE_MAX_CHARS),
            error=error,
            candidates=code or "(retrieval found no code)",
            guidance=guidance(weak_reason, language),
            changes=_changes_block(changes, nonce),
            nonce=nonce,
        )

    system = template("analysis_system.txt").template
    fixed = budget.of([{"role": "system", "content": system}, {"role": "user", "content": ""}])
    tokens_left = budget.prompt - reserve - fixed - budget.tokens(user_text(""))
    chars_left = PROMPT_CODE_MAX_CHARS
    ranked: list[str] = []
    at_frames: list[str] = []

    def add(rank: int | str, cand: Candidate, most_chars: int, into: list[str]) -> None:
        nonlocal tokens_left, chars_left
        room = min(most_chars, chars_left, budget.chars(tokens_left))
        block = _candidate_block(rank, cand, room, nonce, marked)
        into.append(block)
        tokens_left -= budget.tokens(block)
        chars_left -= len(block)

    if candidates:  # never left out: cut to what is left, or to TOP_MIN_TOKENS
        top = min(chars_left, budget.chars(max(tokens_left, TOP_MIN_TOKENS)))
        add(1, candidates[0], top, ranked)
    for window in windows:
        if budget.chars(tokens_left) > 200 and chars_left > 200:
            add("frame", window, PROMPT_WINDOW_MAX_CHARS, at_frames)
    for rank, cand in enumerate(candidates[1:], start=2):
        if budget.chars(tokens_left) <= 200 or chars_left <= 200:
            break
        add(rank, cand, chars_left, ranked)
    blocks = list(ranked)
    if at_frames:
        blocks.append("Code at the trace's other frames:\n" + "\n\n".join(at_frames))
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": user_text("\n\n".join(blocks))},
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


CALLS_PER_ROUND = 4  # tool calls served per round (or need_more requests in the fallback)


@cache
def need_more_schema() -> dict[str, Any]:
    """The reply schema plus optional ``need_more`` requests (models without tools)."""
    schema = copy.deepcopy(analysis_schema())
    schema["properties"]["need_more"] = {
        "type": "array",
        "maxItems": CALLS_PER_ROUND,
        "description": "Lookups to make before the final answer; empty when none is needed.",
        "items": {
            "type": "object",
            "properties": {
                "tool": {"type": "string", "enum": list(TOOL_NAMES)},
                "query": {"type": "string"},
                "path": {"type": "string"},
                "name": {"type": "string"},
                "start": {"type": "integer"},
                "end": {"type": "integer"},
            },
            "required": ["tool"],
        },
    }
    return schema


def _served(tools: Toolbox, calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """Tool messages answering ``calls``; past CALLS_PER_ROUND a call is refused."""
    out = []
    for n, call in enumerate(calls):
        text = (
            tools.call(call.name, call.args)
            if n < CALLS_PER_ROUND
            else f"refused: at most {CALLS_PER_ROUND} tool calls per round."
        )
        out.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": text})
    return out


def tool_room(budget: Budget, tools: Toolbox, rounds: int) -> int:
    """Tokens to keep free for ``rounds`` of tool calls: the tool instructions and specs, the
    calls, and the results — the toolbox's budget, cut to a third of the prompt's room."""
    fixed = (
        budget.tokens(template("tools.txt").template)
        + budget.tokens(json.dumps(analysis_schema()))
        + budget.of([], TOOL_SPECS)
        + budget.of([{"role": "user", "content": template("answer_now.txt").template}])
        + rounds * CALLS_PER_ROUND * CALL_TOKENS
    )
    results = min(budget.prompt // 3, math.ceil(tools.budget / 2 * budget.count.scale))
    tools.budget = min(tools.budget, budget.chars(results))
    return fixed + results


def _with_tools(
    messages: list[dict[str, Any]],
    chat: ToolChat,
    tools: Toolbox,
    rounds: int,
    budget: Budget,
    nonce: str,
) -> tuple[list[dict[str, Any]], str]:
    """Up to ``rounds`` rounds of tool calls; then, unless the model already answered with
    valid JSON, one call with the schema as ``format`` and no tools, which must answer. Each
    call is fitted to the context window first (shared/analyze/budget.py)."""
    convo = [*messages]
    convo[-1] = {
        **convo[-1],
        "content": convo[-1]["content"]
        + "\n\n"
        + template("tools.txt").substitute(
            rounds=rounds, schema=json.dumps(analysis_schema(), separators=(",", ":"))
        ),
    }
    for _ in range(rounds):
        convo = fit(convo, budget, nonce, TOOL_SPECS)
        turn = chat.converse(convo, TOOL_SPECS)
        if not turn.tool_calls:
            try:
                parse_reply(turn.content)
                return convo, turn.content
            except ValueError:
                convo.append({"role": "assistant", "content": turn.content})
                break
        calls = [{"id": c.id, "name": c.name, "args": c.args} for c in turn.tool_calls]
        convo.append({"role": "assistant", "content": turn.content, "tool_calls": calls})
        convo += _served(tools, turn.tool_calls)
    else:
        log.info("analyze.rounds_used_up", extra={"rounds": rounds, "lookups": len(tools.lookups)})
    convo.append({"role": "user", "content": template("answer_now.txt").template})
    convo = fit(convo, budget, nonce)
    return convo, chat.complete(convo, analysis_schema())


def _with_requests(
    messages: list[dict[str, Any]], chat: ChatModel, tools: Toolbox, budget: Budget, nonce: str
) -> tuple[list[dict[str, Any]], str]:
    """Models without tools: the reply may carry ``need_more`` requests, which are served
    and answered in a second call (the plain schema: no more requests)."""
    convo = [*messages]
    convo[-1] = {
        **convo[-1],
        "content": convo[-1]["content"] + "\n\n" + template("need_more.txt").template,
    }
    convo = fit(convo, budget, nonce)
    raw = chat.complete(convo, need_more_schema())
    try:
        reply = json.loads(raw)
    except ValueError:
        return convo, raw  # the repair below says what is wrong
    if not isinstance(reply, dict):
        return convo, raw
    requests = reply.pop("need_more", None) or []
    if not isinstance(requests, list) or not requests:
        return convo, json.dumps(reply)
    calls = [
        ToolCall(id=f"req_{n}", name=str(r.get("tool")), args=r)
        for n, r in enumerate(requests)
        if isinstance(r, dict)
    ]
    results = "\n\n".join(
        f"[{c.name} {json.dumps({k: v for k, v in c.args.items() if k != 'tool'})}]\n{m['content']}"
        for c, m in zip(calls, _served(tools, calls), strict=True)
    )
    convo += [
        {"role": "assistant", "content": raw},
        {"role": "user", "content": template("need_more_results.txt").substitute(results=results)},
    ]
    convo = fit(convo, budget, nonce)
    return convo, chat.complete(convo, analysis_schema())


def analyze(
    event: ErrorEvent,
    candidates: Sequence[Candidate],
    chat: ChatModel,
    changes: Sequence[RecentChange] = (),
    *,
    weak_reason: str = "",
    language: str = "en",
    windows: Sequence[Candidate] = (),
    marked: Mapping[str, Sequence[int]] | None = None,
    tools: Toolbox | None = None,
    rounds: int = 0,
    budget: Budget | None = None,
) -> Analysis:
    """Ask the model; with ``tools`` and ``rounds``, it may look up more code first (natively,
    or by ``need_more`` requests when the model takes no tools); one repair attempt on invalid
    JSON; a degraded analysis if that fails too.

    Transient model failures (timeouts, 5xx) propagate so the task can retry them. Every call
    fits ``budget``, the model's context window (default: 16384 tokens).
    """
    budget = budget or Budget()
    nonce = secrets.token_hex(6)

    def prompt(reserve: int, shown: Sequence[Candidate] = candidates) -> list[dict[str, Any]]:
        return build_messages(
            event,
            shown,
            nonce,
            changes=changes,
            weak_reason=weak_reason,
            language=language,
            windows=windows,
            marked=marked,
            budget=budget,
            reserve=reserve,
        )

    reserve = tool_room(budget, tools, rounds) if tools is not None and rounds > 0 else 0
    if reserve and budget.prompt - reserve - budget.of(prompt(0, [])) < TOP_MIN_TOKENS:
        # A window too small for tool rounds beside the error and the top file: one call.
        log.info(
            "analyze.no_room_for_tools", extra={"event_id": event.id, "num_ctx": budget.num_ctx}
        )
        tools, rounds, reserve = None, 0, 0
    messages = prompt(reserve)
    schema = analysis_schema()
    if tools is None or rounds <= 0:
        raw = chat.complete(messages, schema)
    elif isinstance(chat, ToolChat):
        with chat.hold():
            try:
                messages, raw = _with_tools(messages, chat, tools, rounds, budget, nonce)
            except ToolsUnsupported as exc:
                log.info("analyze.no_tools", extra={"event_id": event.id, "reason": str(exc)})
                messages, raw = _with_requests(messages, chat, tools, budget, nonce)
    else:
        messages, raw = _with_requests(messages, chat, tools, budget, nonce)
    seen = {
        "lookups": list(tools.lookups) if tools else [],
        "read": [
            *(FileRef(path=w.path, start_line=w.chunks[0].start_line,
                      end_line=w.chunks[0].end_line) for w in windows),
            *(tools.read if tools else []),
        ],
        "read_chunks": list(tools.chunk_ids) if tools else [],
    }  # fmt: skip
    try:
        reply = parse_reply(raw)
    except ValueError as first_problem:
        log.warning(
            "analyze.invalid_reply", extra={"event_id": event.id, "problem": str(first_problem)}
        )
        repair = template("repair.txt").substitute(
            problem=str(first_problem), previous=raw[:PROMPT_ERROR_MAX_CHARS]
        )
        again = [
            *messages,
            {"role": "assistant", "content": raw},
            {"role": "user", "content": repair},
        ]
        raw2 = chat.complete(fit(again, budget, nonce), schema)
        try:
            reply = parse_reply(raw2)
        except ValueError as second_problem:
            return degraded(
                f"LLM reply was not valid JSON after one repair ({second_problem})",
                model=chat.model,
                raw_text=raw2 or raw,
            ).model_copy(update={"lookups": seen["lookups"]})
    return Analysis(**reply.model_dump(), model=chat.model, **seen)
