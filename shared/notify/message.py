"""The Slack message for an investigation: Block Kit plus a plain-text fallback, all escaped."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shared.core.domain import Analysis, Investigation
from shared.models.reranker import relevance

SECTION_MAX = 3000  # Slack's limit for a section's text
MAX_BLOCKS = 50
TRACE_LINES = 12


def escape(text: str) -> str:
    """Slack mrkdwn escaping of untrusted text: ``&``, ``<`` and ``>``.

    With ``<`` escaped no input can form ``<!channel>``, ``<!here>`` or ``<@U123>``.
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _code(text: str) -> str:
    # A backtick run inside a code block would end it early.
    return "```" + escape(text).replace("```", "ˋˋˋ") + "```"


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _clip(text, SECTION_MAX)}}


def _trace_tail(inv: Investigation) -> str:
    lines = [ln for ln in inv.event.stacktrace.splitlines() if ln.strip()]
    return "\n".join(lines[-TRACE_LINES:])


def top_files(inv: Investigation) -> list[str]:
    """``path:lines`` of the files the message presents: the LLM's, else retrieval's."""
    a = inv.analysis
    if a and a.relevant_files:
        return [f"{f.path}:{f.start_line}-{f.end_line}" for f in a.relevant_files]
    return [f"{c.path}:{c.lines}" for c in inv.candidates]


@dataclass(frozen=True)
class Occurrences:
    count: int  # in this window
    first_seen_ms: int
    last_seen_ms: int


@dataclass(frozen=True)
class MessageOptions:
    """How to present an investigation (from settings and the group's state)."""

    repo_url_template: str | None = None  # "https://…/{repo}/blob/main/{path}#L{start}-L{end}"
    min_relevance: float = 0.0  # below this best rerank score the files are weak matches
    occurrences: Occurrences | None = None
    trace_in_thread: bool = False  # the trace goes to a thread reply, not the main body


WEAK_CONFIDENCE_CAP = 0.30  # what a hypothesis may claim when the evidence is weak


def shown_confidence(confidence: float, weak: bool) -> float:
    """A model's confidence as shown: capped when the retrieved code is weak evidence, since
    the model's own number does not know that nothing convincing was found."""
    return min(confidence, WEAK_CONFIDENCE_CAP) if weak else confidence


def is_weak(inv: Investigation, min_relevance: float) -> bool:
    """No code, or the best reranked file scores below the threshold: not worth presenting
    as the cause."""
    if not inv.candidates:
        return True
    best = inv.candidates[0].rerank_score
    return best is not None and relevance(best) < min_relevance


def _link(path: str, start: int, end: int, repo: str, template: str | None) -> str:
    label = f"{path}:{start}-{end}"
    if not template:
        return f"`{escape(label)}`"
    url = template.format(repo=repo, path=path, start=start, end=end)
    # In <url|label> a "|" or ">" would end the link early; escape() handles < > &.
    return f"<{escape(url).replace('|', '%7C')}|{escape(label).replace('|', '¦')}>"


def _files_text(inv: Investigation, template: str | None) -> str:
    a: Analysis | None = inv.analysis
    repo = inv.event.repo
    lines = []
    if a and a.relevant_files:
        for f in a.relevant_files[:8]:
            why = f" — {escape(_clip(f.reason, 200))}" if f.reason else ""
            lines.append(f"• {_link(f.path, f.start_line, f.end_line, repo, template)}{why}")
    else:
        for c in inv.candidates[:8]:
            best = c.chunks[0]
            lines.append(f"• {_link(c.path, best.start_line, best.end_line, repo, template)}")
    return "\n".join(lines)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def occurrences_block(occ: Occurrences) -> dict[str, Any]:
    """The block a repeat rewrites with chat.update (found again by its block_id)."""
    times = "time" if occ.count == 1 else "times"
    text = (
        f"*{occ.count:,}* {times} · first seen {_when(occ.first_seen_ms)} · "
        f"last seen {_when(occ.last_seen_ms)}"
    )
    return {
        "type": "context",
        "block_id": "th-occurrences",
        "elements": [{"type": "mrkdwn", "text": text}],
    }


def with_occurrences(blocks: list[dict[str, Any]], occ: Occurrences) -> list[dict[str, Any]]:
    new = occurrences_block(occ)
    replaced = [new if b.get("block_id") == "th-occurrences" else b for b in blocks]
    return replaced if new in replaced else [*blocks, new][:MAX_BLOCKS]


def trace_reply(inv: Investigation) -> str:
    """The trimmed stack trace as a thread reply (mrkdwn, escaped)."""
    lines = [ln for ln in inv.event.stacktrace.splitlines() if ln.strip()]
    return _clip(
        f"Stack trace (last {TRACE_LINES * 3} lines):\n"
        + _code("\n".join(lines[-TRACE_LINES * 3 :])),
        SECTION_MAX,
    )


def release(inv: Investigation) -> str:
    """The release the error came from (an SDK's ``release``, OTel's ``service.version``)."""
    value = inv.event.attributes.get("release")
    return _clip(value.strip(), 100) if isinstance(value, str) else ""


def age(seconds: float) -> str:
    """``3 hours ago``: the largest whole unit."""
    for unit, size in (("year", 365 * 86400), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n > 1 else ''} ago"
    return "just now"


def history_text(inv: Investigation, now: datetime | None = None) -> str:
    """The most recent commits behind each cited range (recorded at index time; escaped)."""
    moment = (now or datetime.now(UTC)).timestamp()
    lines = []
    for cited in inv.history:
        lines.append(f"`{escape(cited.location)}`")
        lines += [
            f"• `{escape(c.sha[:7])}` {escape(_clip(c.author, 60))}, {age(moment - c.time)} — "
            f"{escape(_clip(c.subject, 120))}"
            for c in cited.commits
        ]
    return "\n".join(lines)


def _history_context(inv: Investigation) -> str:
    v = inv.code_version
    if v is None:
        return ""
    if v.commit is None:
        return f"history unavailable ({escape(_clip(v.reason, 80))})"
    return f"code `{escape(v.commit[:7])}`" + (" (shallow clone)" if v.shallow else "")


def _title(inv: Investigation) -> str:
    ev = inv.event
    return f"{ev.service}: {ev.exception_type or 'error'}"


def build_message(
    inv: Investigation, options: MessageOptions | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks) for Slack; the same content the console notifier prints."""
    opts = options or MessageOptions()
    ev, a = inv.event, inv.analysis
    weak = is_weak(inv, opts.min_relevance)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _clip(_title(inv), 150)}},
    ]
    if ev.message:
        # In a code block: text from logs renders literally (*bold*, _italic_, ~strike~ too).
        blocks.append(_section(f"*Error:*\n{_code(_clip(ev.message, 500))}"))
    if a is not None:
        blocks.append(_section(f"*Summary:* {escape(a.summary)}"))
        if a.hypotheses:
            hyp = "\n".join(
                f"{i}. {escape(h.cause)} _(confidence {shown_confidence(h.confidence, weak):.0%})_"
                + (
                    f" — {', '.join('`' + escape(e) + '`' for e in h.evidence[:3])}"
                    if h.evidence
                    else ""
                )
                for i, h in enumerate(a.hypotheses[:3], start=1)
            )
            heading = "Possible leads (weak evidence)" if weak else "Probable causes"
            blocks.append(_section(f"*{heading}:*\n{hyp}"))
        if a.suggested_fix:
            blocks.append(_section(f"*Suggested fix:* {escape(a.suggested_fix)}"))
    files = _files_text(inv, opts.repo_url_template)
    if not files:
        blocks.append(_section("*Relevant files:* no relevant code was found in the index."))
    elif weak:
        blocks.append(
            _section(
                "*No strongly relevant code was found.* The closest files, "
                f"weak matches and not a diagnosis:\n{files}"
            )
        )
    else:
        blocks.append(_section(f"*Relevant files:*\n{files}"))
    if changes := history_text(inv):
        blocks.append(_section(f"*Recent changes:*\n{changes}"))
    trace = "" if opts.trace_in_thread else _trace_tail(inv)
    if trace:
        blocks.append({"type": "divider"})
        blocks.append(
            _section(
                f"*Stack trace (last {TRACE_LINES} lines):*\n"
                f"{_code(_clip(trace, SECTION_MAX - 100))}"
            )
        )
    footnotes = list(inv.notes)
    if a is not None and a.degraded:
        footnotes.append(f"analysis: degraded ({a.degraded_reason})")
    context = [f"event `{escape(ev.id[:12])}`", f"repo `{escape(ev.repo)}`"]
    if built := release(inv):
        context.append(f"release `{escape(built)}`")
    if code := _history_context(inv):
        context.append(code)
    if a is not None and not a.degraded:
        context.append(f"confidence {shown_confidence(a.confidence, weak):.0%} · {escape(a.model)}")
    blocks.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": _clip(" · ".join(context), SECTION_MAX)}],
        }
    )
    if footnotes:
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {"type": "mrkdwn", "text": _clip("⚠ " + escape(n), 1000)}
                    for n in footnotes[:10]
                ],
            }
        )
    if opts.occurrences is not None:
        blocks.append(occurrences_block(opts.occurrences))
    text = _fallback_text(inv, weak)
    return text, blocks[:MAX_BLOCKS]


def _fallback_text(inv: Investigation, weak: bool) -> str:
    """Plain text for notifications and clients that do not render blocks (also escaped)."""
    ev, a = inv.event, inv.analysis
    parts = [f"[tracehound] {_title(inv)}"]
    if built := release(inv):
        parts.append(f"Release: {built}")
    if ev.message:
        parts.append(f"Error: {_clip(ev.message, 300)}")
    if a is not None:
        parts.append(f"Summary: {a.summary}")
        for i, h in enumerate(a.hypotheses[:3], start=1):
            ev_text = f" [{', '.join(h.evidence[:3])}]" if h.evidence else ""
            lead = "Possible lead" if weak else "Cause"
            shown = shown_confidence(h.confidence, weak)
            parts.append(f"{lead} {i} ({shown:.0%}): {h.cause}{ev_text}")
        if a.suggested_fix:
            parts.append(f"Fix: {a.suggested_fix}")
        if a.degraded:
            parts.append(f"Note: analysis degraded ({a.degraded_reason})")
    files = top_files(inv)
    if not files:
        parts.append("Files: no relevant code found")
    elif weak:
        parts.append("No strongly relevant code was found; closest: " + ", ".join(files[:8]))
    else:
        parts.append("Files: " + ", ".join(files[:8]))
    for cited in inv.history:
        c = cited.commits[0]
        parts.append(f"Last change to {cited.location}: {c.sha[:7]} {c.author} — {c.subject}")
    parts.extend(f"Note: {n}" for n in inv.notes)
    return escape(_clip("\n".join(parts), 3900))
