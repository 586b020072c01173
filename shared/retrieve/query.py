"""The retrieval query built from an error's parts: type, message, frame symbols and frames.

A raw log blob is mostly noise to both retrievers (timestamps, session banners, paths into
other packages). The query keeps what names the failing code, most telling first, because
embedding models read only the head of a long input: the exception line, the symbols of the
frames nearest the raise, a little surrounding text (an issue title, the log message), then
the frames themselves in a canonical form that retrieval parses again to use them as a signal.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from shared.core.domain import ErrorEvent, Frame, Trace

QUERY_MAX_CHARS = 2000
HEAD_MAX_CHARS = 400
SYMBOLS_MAX_CHARS = 300
CONTEXT_MAX_CHARS = 400
FRAMES_MAX = 12

# Lines that say nothing about the code: separators, test-session banners, prompts, progress.
_NOISE = re.compile(
    r"^(?:[\W_]{3,}.*[\W_]{3,}|[\W_]*"
    r"|platform .*|rootdir:.*|cachedir:.*|plugins:.*|collect(?:ed|ing) .*|configfile:.*"
    r"|Traceback \(most recent call last\):?|During handling of the above exception.*"
    r"|The above exception was the direct cause.*|\d+ frames?|.*\[\s*\d+%\]"
    r"|(?:INTERNALERROR>|PS [A-Z]:\\.*>|\$|>>>|\.\.\.|In \[\d+\]:|Out\[\d+\]:).*)$"
)
_FRAME_LIKE = re.compile(
    r'File "|\.py:\d+|\.pyx?\b.* in [\w<>.]+\(|^\s*at .*[:(]\d+|^\t\S+\.go:\d+|^-*> \d+'
)
# Stdlib / interpreter frames are no code of the service; they only cost room in the query.
_NOT_CODE = re.compile(r"^<|(^|[/\\])lib(64)?[/\\]python\d+(\.\d+)?[/\\](?!.*(site|dist)-packages)")


def _frames_for_query(frames: Sequence[Frame]) -> list[Frame]:
    return [f for f in frames if not _NOT_CODE.search(f.file)][:FRAMES_MAX]


def _symbol_line(frames: Sequence[Frame]) -> str:
    """``in wrapper (astropy/units/decorators.py), __init__ (...)``, nearest the raise first."""
    names: list[str] = []
    for f in frames:
        if not f.function or f.function.startswith("<"):
            continue
        owner = f.module.rsplit(".", 1)[-1] if f.module else f.file.replace("\\", "/")
        owner = owner.rsplit("/", 1)[-1] if f.module else "/".join(owner.split("/")[-3:])
        names.append(f"{f.function} ({owner})")
    return ("in " + ", ".join(dict.fromkeys(names)))[:SYMBOLS_MAX_CHARS] if names else ""


_TRACE_START = re.compile(r"Traceback \(most recent call last\)")


def _before_trace(message: str) -> str:
    """The message on one line, cut where a trace pasted into it starts: its frames are
    written below, once, as the frames retrieval follows (a report whose message runs into
    its traceback would otherwise name a frame twice, or one retrieval never follows)."""
    line = " ".join(message.split())
    found = _TRACE_START.search(line)
    return line[: found.start()].rstrip() if found else line


_LINE_NUMBER = re.compile(r"^(?:-*>\s*)?\d+\s*")


def _context(text: str, skip: set[str]) -> str:
    """The text's informative lines that are neither frames nor already in the head."""
    kept: list[str] = []
    size = 0
    for raw in text.splitlines():
        line = _LINE_NUMBER.sub("", " ".join(raw.split()))  # IPython's numbered source lines
        if (
            not line
            or line in skip
            or _NOISE.match(line)
            or _FRAME_LIKE.search(raw)
            or line in kept
        ):
            continue
        line = line[:200]
        kept.append(line)
        size += len(line) + 1
        if size >= CONTEXT_MAX_CHARS:
            break
    return "\n".join(kept)[:CONTEXT_MAX_CHARS]


def render_frames(frames: Sequence[Frame]) -> list[str]:
    """Frames as trace lines, written as each language prints them (an embedding model and
    BM25 read them as they read a trace).

    Python frames are written innermost last, as Python does; the others innermost first.
    """
    python = [f for f in frames if f.language == "python"]
    other = [f for f in frames if f.language != "python"]
    lines: list[str] = []
    for f in other:
        if f.language == "java":
            lines.append(f"\tat {f.module}.{f.function}({f.file}:{f.line or 0})")
        elif f.language == "go":
            lines.append(f"{f.module}.{f.function}(...)" if f.module else f"{f.function}(...)")
            lines.append(f"\t{f.file}:{f.line or 0}")
        else:
            lines.append(f"    at {f.function or '<anonymous>'} ({f.file}:{f.line or 0}:0)")
    for f in reversed(python):
        if f.line is None and f.function:  # IPython's form for a frame it has no line of
            lines.append(f"{f.file} in {f.function}()")
            continue
        where = f'  File "{f.file}", line {f.line or 0}'
        lines.append(f"{where}, in {f.function}" if f.function else where)
        if f.code:
            lines.append(f"    {f.code}")
    return lines


@dataclass(frozen=True)
class Query:
    """What retrieval searches with: the text, and the frames it names (nearest the raise
    first), taken from the trace intake read, never parsed back out of the text."""

    text: str
    frames: tuple[Frame, ...] = ()


def build_query(event: ErrorEvent, *, max_chars: int = QUERY_MAX_CHARS) -> str:
    """Exception line, frame symbols, context, then the frames nearest the raise."""
    return compose_query(event, max_chars=max_chars).text


def compose_query(event: ErrorEvent, *, max_chars: int = QUERY_MAX_CHARS) -> Query:
    """The query and the frames it holds. The event's trace was read at intake
    (shared/intake/trace.py); an event without one gets a query without frames."""
    exc_type, message = event.exception_type, event.message.strip()
    source = event.stacktrace or event.message
    trace = event.trace or Trace()
    if not exc_type and event.stacktrace:
        found = trace.reported()
        if found is not None:
            exc_type, message = found.type, found.message
    elif not event.stacktrace:  # free text: its first line leads, the rest is context
        message = next((ln for ln in message.splitlines() if ln.strip()), "")
    head = ": ".join(p for p in (exc_type, _before_trace(message)) if p)[:HEAD_MAX_CHARS]
    frames = _frames_for_query(trace.frames)
    parts = [p for p in (head, _symbol_line(frames)) if p]
    skip = {" ".join(message.split()), head, *(" ".join(f.code.split()) for f in frames)}
    context = _context(source, skip)
    if context:
        parts.append(context)
    query = "\n".join(parts)
    kept = frames
    # Frames are dropped from the far end of the trace first, a whole frame at a time.
    while kept and len(query) + 1 + len("\n".join(render_frames(kept))) > max_chars:
        kept = kept[:-1]
    if kept:
        query = f"{query}\n" + "\n".join(render_frames(kept))
    if not query:
        return Query(event.message.strip()[:max_chars] or event.service)
    return Query(query[:max_chars], tuple(kept))


_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_CAMEL = re.compile(r"[a-z0-9][A-Z]")
SYMBOLS_MAX = 16


def named_symbols(text: str, *, limit: int = SYMBOLS_MAX) -> list[str]:
    """Names in ``text`` that look like code rather than prose, in order of appearance.

    ``export_text``, ``LogisticRegressionCV``, the parts of ``units.quantity_input``: names
    with an inner underscore or an inner capital, or any part of a dotted name that has one
    of those or starts with a capital. Short and plain words ("the", "value", "Error") never
    qualify; retrieval looks the names up among the symbols the code defines.
    """
    found: list[str] = []
    for match in _DOTTED.finditer(text):
        dotted = match.group(0)
        for part in dotted.split("."):
            core = part.strip("_")
            if len(part) < 4 or part in found or not core:
                continue
            if "_" in core or _CAMEL.search(core) or ("." in dotted and core[0].isupper()):
                found.append(part)
                if len(found) >= limit:
                    return found
    return found
