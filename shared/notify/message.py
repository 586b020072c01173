"""The Slack message for an investigation: Block Kit plus a plain-text fallback, all escaped."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shared.core.domain import Analysis, Investigation
from shared.groups.incidents import Incident
from shared.notify.phrases import phrase

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


def _code(text: str, limit: int) -> str:
    """``text`` escaped in a code block of at most ``limit`` characters, fences included:
    clipped inside the block, since escaping grows the text and a clip of the whole would cut
    the closing fence off."""
    # A backtick run inside a code block would end it early.
    body = escape(text).replace("```", "ˋˋˋ")
    room = max(1, limit - 6)
    if len(body) > room:
        cut = room - 1
        entity = body.rfind("&", max(0, cut - 4), cut)  # never half an "&amp;"
        body = body[: entity if entity != -1 else cut] + "…"
    return "```" + body + "```"


def _code_section(title: str, text: str) -> dict[str, Any]:
    """A section of a bold title and ``text`` as a code block, within Slack's limit."""
    head = f"*{title}:*\n"
    return _section(head + _code(text, SECTION_MAX - len(head)))


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


def top_path(inv: Investigation) -> str | None:
    """The path of the top cited file (what routing and CODEOWNERS look at)."""
    a = inv.analysis
    if a and a.relevant_files:
        return a.relevant_files[0].path
    return inv.candidates[0].path if inv.candidates else None


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
    language: str = "en"  # of the fixed strings (shared/notify/phrases.py)
    owners: str = ""  # mrkdwn mentions built by shared/notify/mentions.py, never from input


WEAK_CONFIDENCE_CAP = 0.30  # what a hypothesis may claim when the evidence is weak


def shown_confidence(confidence: float, weak: bool) -> float:
    """A model's confidence as shown: capped when the retrieved code is weak evidence, since
    the model's own number does not know that nothing convincing was found."""
    return min(confidence, WEAK_CONFIDENCE_CAP) if weak else confidence


def is_weak(inv: Investigation, min_relevance: float) -> bool:
    """Retrieval's judgement (shared/retrieve/evidence.py); for an investigation from before
    it judged: no code, or the best reranked file below the threshold."""
    if inv.evidence is not None:
        return inv.evidence.weak
    if not inv.candidates:
        return True
    best = inv.candidates[0].rerank_score
    return best is not None and best < min_relevance


def _link(path: str, start: int, end: int, repo: str, template: str | None) -> str:
    label = f"{path}:{start}-{end}"
    if not template:
        return f"`{escape(label)}`"
    url = template.format(repo=repo, path=path, start=start, end=end)
    # In <url|label> a "|" or ">" would end the link early; escape() handles < > &.
    return f"<{escape(url).replace('|', '%7C')}|{escape(label).replace('|', '¦')}>"


def memory_file(inv: Investigation) -> str:
    """The file on-call confirmed for the group this one reads like, when it is of the same
    repo and not among the files shown already; else ""."""
    found = inv.recalled
    if found is None or not found.file or found.repo != inv.event.repo:
        return ""
    a = inv.analysis
    shown = [f.path for f in a.relevant_files] if a and a.relevant_files else []
    shown = shown or [c.path for c in inv.candidates]
    return "" if found.file in shown else found.file


def _files_text(inv: Investigation, template: str | None, language: str = "en") -> str:
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
    if remembered := memory_file(inv):
        path = escape(remembered).replace("`", "'")  # a backtick would end the code span
        lines.append(f"• `{path}` — _{phrase(language, 'memory_file')}_")
    return "\n".join(lines)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def occurrences_block(occ: Occurrences, language: str = "en") -> dict[str, Any]:
    """The block a repeat rewrites with chat.update (found again by its block_id)."""
    count = phrase(language, "once" if occ.count == 1 else "times", count=f"*{occ.count:,}*")
    first = phrase(language, "first_seen", when=_when(occ.first_seen_ms))
    last = phrase(language, "last_seen", when=_when(occ.last_seen_ms))
    text = f"{count} · {first} · {last}"
    return {
        "type": "context",
        "block_id": "th-occurrences",
        "elements": [{"type": "mrkdwn", "text": text}],
    }


def with_occurrences(
    blocks: list[dict[str, Any]], occ: Occurrences, language: str = "en"
) -> list[dict[str, Any]]:
    new = occurrences_block(occ, language)
    replaced = [new if b.get("block_id") == "th-occurrences" else b for b in blocks]
    return replaced if new in replaced else [*blocks, new][:MAX_BLOCKS]


INCIDENT_BLOCK_ID = "th-incident"
INCIDENT_LISTED = 10  # groups named in the list; the rest are counted in one line


def incident_block(inc: Incident, language: str = "en") -> dict[str, Any]:
    """The incident's list of groups by count; a cap batch's (a service's groups over its cap
    of new analyses) says how many still wait."""
    say = lambda key, **f: phrase(language, key, **f)  # noqa: E731
    if inc.kind == "cap":
        head = say(
            "cap_batch", groups=len(inc.members), service=f"`{escape(inc.cause[:100])}`",
            cap=inc.cap, minutes=f"{inc.cap_window_s / 60:.3g}", events=inc.events,
        )  # fmt: skip
        lines = [f"*{head}*"]
    else:
        lines = [
            "*"
            + say("incident", groups=len(inc.members), services=inc.services, events=inc.events)
            + f":* `{escape(inc.cause[:200])}`"
        ]
    for m in inc.members[:INCIDENT_LISTED]:
        lines.append(f"• {escape(m.label[:120])} — {say('times', count=m.count)}")
    rest = inc.members[INCIDENT_LISTED:]
    if rest:
        lines.append(
            "• " + say("incident_more", groups=len(rest), events=sum(m.count for m in rest))
        )
    if inc.kind != "cap":
        lines.append(say("incident_thread"))
    elif inc.waiting:
        lines.append(say("cap_waiting", waiting=inc.waiting))
    else:
        lines.append(say("cap_done"))
    return {
        "type": "section",
        "block_id": INCIDENT_BLOCK_ID,
        "text": {"type": "mrkdwn", "text": "\n".join(lines)[:2900]},
    }


def cap_summary(inc: Incident, language: str = "en") -> tuple[str, list[dict[str, Any]]]:
    """A cap batch's own message while no member's analysis is out: the list alone."""
    block = incident_block(inc, language)
    return block["text"]["text"].splitlines()[0].strip("*"), [block]


def with_incident(
    blocks: list[dict[str, Any]], inc: Incident, language: str = "en"
) -> list[dict[str, Any]]:
    """The blocks with the incident's list after the header (replacing an older list); a
    lone group's message stays as it is."""
    kept = [b for b in blocks if b.get("block_id") != INCIDENT_BLOCK_ID]
    if len(inc.members) < 2:
        return kept
    at = 1 if kept and kept[0].get("type") == "header" else 0
    return [*kept[:at], incident_block(inc, language), *kept[at:]][:MAX_BLOCKS]


def trace_reply(inv: Investigation, language: str = "en") -> str:
    """The trimmed stack trace as a thread reply (mrkdwn, escaped)."""
    lines = [ln for ln in inv.event.stacktrace.splitlines() if ln.strip()]
    head = _clip(phrase(language, "trace", n=TRACE_LINES * 3), 200) + ":\n"
    return head + _code("\n".join(lines[-TRACE_LINES * 3 :]), SECTION_MAX - len(head))


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


def span(seconds: float, language: str = "en") -> str:
    """``12 min``, ``3 h 5 min``, ``2 d 4 h``: how long after a deploy."""
    s = max(0, int(seconds))
    if s < 60:
        return phrase(language, "span_now")
    if s < 3600:
        return phrase(language, "span_min", m=s // 60)
    if s < 86400:
        return phrase(language, "span_hours", h=s // 3600, m=s % 3600 // 60)
    return phrase(language, "span_days", d=s // 86400, h=s % 86400 // 3600)


def deploy_text(inv: Investigation, language: str = "en", *, mrkdwn: bool = True) -> str:
    """``first seen 12 min after deploy 1.4.2 (a1b2c3d..d4e5f6a) to production; suspect
    commit 0f1e2d3 came with it`` (deploy fields are from outside: escaped, clipped)."""
    found = inv.deploy
    if found is None:
        return ""
    d = found.deploy

    def code(text: str) -> str:
        quoted = escape(text).replace("`", "'")  # a backtick would end the code span
        return f"`{quoted}`" if mrkdwn else text

    when = span(found.after_s, language)
    version = code(_clip(d.version, 80))
    if d.source == "release":
        text = phrase(language, "release_after", span=when, version=version)
    else:
        ends = f"{d.commit_from[:7]}..{d.commit_to[:7]}" if d.commit_from else d.commit_to[:7]
        env = _clip(d.environment, 60)
        text = phrase(
            language,
            "deploy_after",
            span=when,
            version=version,
            range=f" ({code(ends)})" if ends else "",
            env=phrase(language, "deploy_env", env=code(env)) if env else "",
        )
    if found.suspects_in:
        shas = ", ".join(code(s[:7]) for s in found.suspects_in)
        text += "; " + phrase(language, "suspects_in", shas=shas)
    elif found.suspects_out:
        shas = ", ".join(code(s[:7]) for s in found.suspects_out)
        text += "; " + phrase(language, "suspects_out", shas=shas)
    return text


def _deploy_blocks(inv: Investigation, language: str) -> list[dict[str, Any]]:
    deployed = deploy_text(inv, language)
    return [_section(f"*{phrase(language, 'deploy')}:* {deployed}")] if deployed else []


def memory_text(inv: Investigation, language: str = "en", *, mrkdwn: bool = True) -> str:
    """``looks like `shop: KeyError: sku` (first seen 2026-05-01 09:12 UTC) — resolved by
    @ana on 2026-05-02 10:00 UTC, code `a1b2c3d`, thread`` (remembered fields are from
    outside: escaped, clipped; the user id and link were checked when read)."""
    found = inv.recalled
    if found is None:
        return ""

    def code(text: str) -> str:
        quoted = escape(text).replace("`", "'")  # a backtick would end the code span
        return f"`{quoted}`" if mrkdwn else text

    when = _when(found.first_seen_ms) if found.first_seen_ms else "?"
    text = phrase(language, "memory_like", title=code(_clip(found.title, 150)), when=when)
    if not found.resolved_by:
        return f"{text} — {phrase(language, 'memory_open')}"
    who = f"<@{found.resolved_by}>" if mrkdwn else found.resolved_by
    done = [phrase(language, "memory_resolved", who=who, when=_when(found.resolved_at_ms))]
    if found.commit:
        done.append(phrase(language, "memory_commit", commit=code(found.commit[:7])))
    if found.link:
        label = phrase(language, "memory_thread")
        done.append(f"<{escape(found.link).replace('|', '%7C')}|{label}>" if mrkdwn else found.link)
    return f"{text} — " + ", ".join(done)


def _memory_blocks(inv: Investigation, language: str) -> list[dict[str, Any]]:
    said = memory_text(inv, language)
    block = {"type": "section", "block_id": "th-memory"}
    text = {"type": "mrkdwn", "text": _clip(f"*{phrase(language, 'memory')}:* {said}", 2000)}
    return [{**block, "text": text}] if said else []


def _history_context(inv: Investigation) -> str:
    v = inv.code_version
    if v is None:
        return ""
    if v.commit is None:
        return f"history unavailable ({escape(_clip(v.reason, 80))})"
    return f"code `{escape(v.commit[:7])}`" + (" (shallow clone)" if v.shallow else "")


def _context_line(inv: Investigation, weak: bool, language: str) -> str:
    """Event, repo, release, indexed code and the model's confidence, in one line."""
    ev, a = inv.event, inv.analysis
    context = [
        f"{phrase(language, 'event')} `{escape(ev.id[:12])}`",
        f"{phrase(language, 'repo')} `{escape(ev.repo)}`",
    ]
    if built := release(inv):
        context.append(f"{phrase(language, 'release')} `{escape(built)}`")
    if code := _history_context(inv):
        context.append(code)
    if a is not None and not a.degraded:
        shown = shown_confidence(a.confidence, weak)
        context.append(f"{phrase(language, 'confidence')} {shown:.0%} · {escape(a.model)}")
    return " · ".join(context)


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

    def say(key: str, **fields: object) -> str:
        return phrase(opts.language, key, **fields)

    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _clip(_title(inv), 150)}},
    ]
    if opts.owners:
        blocks.append(_section(f"*{say('owners')}:* {opts.owners}"))
    if ev.message:
        # In a code block: text from logs renders literally (*bold*, _italic_, ~strike~ too).
        blocks.append(_code_section(say("error"), _clip(ev.message, 500)))
    blocks += _deploy_blocks(inv, opts.language)
    blocks += _memory_blocks(inv, opts.language)
    if a is not None:
        blocks.append(_section(f"*{say('summary')}:* {escape(a.summary)}"))
        if a.hypotheses:
            hyp = "\n".join(
                f"{i}. {escape(h.cause)} "
                f"_({say('confidence')} {shown_confidence(h.confidence, weak):.0%})_"
                + (
                    f" — {', '.join('`' + escape(e) + '`' for e in h.evidence[:3])}"
                    if h.evidence
                    else ""
                )
                for i, h in enumerate(a.hypotheses[:3], start=1)
            )
            blocks.append(_section(f"*{say('leads' if weak else 'causes')}:*\n{hyp}"))
        if a.suggested_fix:
            blocks.append(_section(f"*{say('fix')}:* {escape(a.suggested_fix)}"))
    files = _files_text(inv, opts.repo_url_template, opts.language)
    if not files:
        blocks.append(_section(f"*{say('files')}:* {say('no_code')}"))
    elif weak:
        blocks.append(_section(f"*{say('weak_files')}* {say('weak_files_more')}\n{files}"))
    else:
        blocks.append(_section(f"*{say('files')}:*\n{files}"))
    if changes := history_text(inv):
        blocks.append(_section(f"*{say('changes')}:*\n{changes}"))
    trace = "" if opts.trace_in_thread else _trace_tail(inv)
    if trace:
        blocks.append({"type": "divider"})
        blocks.append(_code_section(say("trace", n=TRACE_LINES), trace))
    footnotes = list(inv.notes)
    if a is not None and a.degraded:
        footnotes.append(say("degraded", reason=a.degraded_reason))
    context = _context_line(inv, weak, opts.language)
    blocks.append(
        {"type": "context", "elements": [{"type": "mrkdwn", "text": _clip(context, SECTION_MAX)}]}
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
        blocks.append(occurrences_block(opts.occurrences, opts.language))
    text = _fallback_text(inv, weak, opts.language)
    if opts.owners:  # in the text too: it is what the notification shows
        text = f"{opts.owners} {text}"
    return text, blocks[:MAX_BLOCKS]


def _fallback_text(inv: Investigation, weak: bool, language: str = "en") -> str:
    """Plain text for notifications and clients that do not render blocks (also escaped)."""
    ev, a = inv.event, inv.analysis

    def say(key: str, **fields: object) -> str:
        return phrase(language, key, **fields)

    parts = [f"[tracehound] {_title(inv)}"]
    if built := release(inv):
        parts.append(f"{say('release').capitalize()}: {built}")
    if ev.message:
        parts.append(f"{say('error')}: {_clip(ev.message, 300)}")
    if deployed := deploy_text(inv, language, mrkdwn=False):
        parts.append(f"{say('deploy')}: {deployed}")
    if remembered := memory_text(inv, language, mrkdwn=False):
        parts.append(f"{say('memory')}: {remembered}")
    if a is not None:
        parts.append(f"{say('summary')}: {a.summary}")
        for i, h in enumerate(a.hypotheses[:3], start=1):
            ev_text = f" [{', '.join(h.evidence[:3])}]" if h.evidence else ""
            shown = shown_confidence(h.confidence, weak)
            parts.append(
                f"{say('lead' if weak else 'cause')} {i} ({shown:.0%}): {h.cause}{ev_text}"
            )
        if a.suggested_fix:
            parts.append(f"{say('fix_short')}: {a.suggested_fix}")
        if a.degraded:
            parts.append(f"{say('note')}: {say('degraded_short', reason=a.degraded_reason)}")
    files = top_files(inv)
    if extra := memory_file(inv):
        files = [*files, f"{extra} ({say('memory_file')})"]
    if not files:
        parts.append(f"{say('files_short')}: {say('no_code_short')}")
    elif weak:
        parts.append(f"{say('weak_files_short')} " + ", ".join(files[:8]))
    else:
        parts.append(f"{say('files_short')}: " + ", ".join(files[:8]))
    for cited in inv.history:
        c = cited.commits[0]
        parts.append(f"{say('last_change')} {cited.location}: {c.sha[:7]} {c.author} — {c.subject}")
    parts.extend(f"{say('note')}: {n}" for n in inv.notes)
    return escape(_clip("\n".join(parts), 3900))
