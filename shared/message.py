"""The Slack message for an investigation: Block Kit plus a plain-text fallback, all escaped."""

from __future__ import annotations

from typing import Any

from shared.domain import Analysis, Candidate, Investigation

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


def _files_text(inv: Investigation) -> str:
    a: Analysis | None = inv.analysis
    lines = []
    if a and a.relevant_files:
        for f in a.relevant_files[:8]:
            why = f" — {escape(_clip(f.reason, 200))}" if f.reason else ""
            lines.append(f"• `{escape(f.path)}:{f.start_line}-{f.end_line}`{why}")
    else:
        for c in inv.candidates[:8]:
            lines.append(f"• `{escape(c.path)}:{c.lines}`")
    return "\n".join(lines)


def _title(inv: Investigation) -> str:
    ev = inv.event
    return f"{ev.service}: {ev.exception_type or 'error'}"


def build_message(inv: Investigation) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks) for Slack; the same content the console notifier prints."""
    ev, a = inv.event, inv.analysis
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _clip(_title(inv), 150)}},
    ]
    if ev.message:
        blocks.append(_section(f"*Error:* {escape(_clip(ev.message, 500))}"))
    if a is not None:
        blocks.append(_section(f"*Summary:* {escape(a.summary)}"))
        if a.hypotheses:
            hyp = "\n".join(
                f"{i}. {escape(h.cause)} _(confidence {h.confidence:.0%})_"
                + (
                    f" — {', '.join('`' + escape(e) + '`' for e in h.evidence[:3])}"
                    if h.evidence
                    else ""
                )
                for i, h in enumerate(a.hypotheses[:3], start=1)
            )
            blocks.append(_section(f"*Probable causes:*\n{hyp}"))
        if a.suggested_fix:
            blocks.append(_section(f"*Suggested fix:* {escape(a.suggested_fix)}"))
    files = _files_text(inv)
    if files:
        blocks.append(_section(f"*Relevant files:*\n{files}"))
    else:
        blocks.append(_section("*Relevant files:* no relevant code was found in the index."))
    trace = _trace_tail(inv)
    if trace:
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
    if a is not None and not a.degraded:
        context.append(f"confidence {a.confidence:.0%} · {escape(a.model)}")
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
    text = _fallback_text(inv)
    return text, blocks[:MAX_BLOCKS]


def _fallback_text(inv: Investigation) -> str:
    """Plain text for notifications and clients that do not render blocks (also escaped)."""
    ev, a = inv.event, inv.analysis
    parts = [f"[tracehound] {_title(inv)}"]
    if ev.message:
        parts.append(f"Error: {_clip(ev.message, 300)}")
    if a is not None:
        parts.append(f"Summary: {a.summary}")
        for i, h in enumerate(a.hypotheses[:3], start=1):
            ev_text = f" [{', '.join(h.evidence[:3])}]" if h.evidence else ""
            parts.append(f"Cause {i} ({h.confidence:.0%}): {h.cause}{ev_text}")
        if a.suggested_fix:
            parts.append(f"Fix: {a.suggested_fix}")
        if a.degraded:
            parts.append(f"Note: analysis degraded ({a.degraded_reason})")
    files = top_files(inv)
    parts.append("Files: " + (", ".join(files[:8]) if files else "no relevant code found"))
    parts.extend(f"Note: {n}" for n in inv.notes)
    return escape(_clip("\n".join(parts), 3900))


def candidate_paths(candidates: list[Candidate]) -> list[str]:
    return [c.path for c in candidates]
