"""The trace of an event, read once at intake: its frames and the exceptions it printed.

Intake (shared/groups/submit.py) redacts an event and then reads its trace here, so the
``Trace`` comes from the redacted text; the event carries it through every queue, and the later
stages (fingerprint, incidents, the query, retrieval's frame signal, the code windows and code
history of the analysis) read it instead of parsing the text again. A Go panic dump is read
from its panicking goroutine, Mono's report of an unhandled exception once (it prints two).
An event that reached the chain without intake (a caller of ``enqueue_error``) is read by the
chain's first task, once.
"""

from __future__ import annotations

from shared.core.domain import ErrorEvent, Frame, Trace
from shared.core.memo import TextMemo
from shared.intake.exceptions import printed
from shared.intake.traces import dotnet, go, parse_frames

_TRACES: TextMemo[Trace] = TextMemo()
MEMO_MIN_CHARS = 256  # a stack trace: storms repeat the same one; short texts are cheap


def read_trace(text: str) -> Trace:
    """The frames and exception lines of ``text`` (remembered per distinct trace: a storm
    repeats the same stack thousands of times)."""
    if len(text) >= MEMO_MIN_CHARS:
        return _TRACES.get(text, None, lambda: _read(text))
    return _read(text)


def _read(text: str) -> Trace:
    text = dotnet.unrepeated(text)
    return Trace(frames=tuple(parse_frames(go.panicking(text))), printed=printed(text))


def trace_text(event: ErrorEvent) -> str:
    """What holds the trace: some shippers put the whole of it in ``message``."""
    return event.stacktrace or event.message


def with_trace(event: ErrorEvent) -> ErrorEvent:
    """``event`` carrying its trace, read now (whatever it carried before)."""
    return event.model_copy(update={"trace": _read_event(event)})


def trace_of(event: ErrorEvent) -> Trace:
    """The trace intake read, or (for an event that has not been through intake) read now."""
    return event.trace if event.trace is not None else _read_event(event)


def _read_event(event: ErrorEvent) -> Trace:
    text = trace_text(event)
    trace = read_trace(text) if text else Trace()
    frames = sdk_frames(event)
    return trace.model_copy(update={"sdk_frames": frames}) if frames else trace


_SDK_LANGUAGES = {"python": "python", "java": "java", "kotlin": "java", "scala": "java"}


def sdk_frames(event: ErrorEvent) -> tuple[Frame, ...]:
    """The frames an error SDK reported (``attributes["frames"]``, shared/intake/sentry.py:
    in-app ones when there are any, nearest the raise first), for retrieval's frame signal
    as they are; none when the event has none, and the text's frames are followed instead."""
    raw = event.attributes.get("frames")
    if not isinstance(raw, list) or not raw:
        return ()
    sdk = event.attributes.get("sentry")
    platform = sdk.get("platform") if isinstance(sdk, dict) else None
    language = _SDK_LANGUAGES.get(platform or "", "javascript")
    frames = []
    for f in raw:
        if not isinstance(f, dict) or not isinstance(f.get("file"), str):
            continue
        line = f.get("line")
        column = f.get("column")
        # A JVM frame is found by its class's package plus the file's name (PathMapper).
        file = f["file"].replace("\\", "/").rsplit("/", 1)[-1] if language == "java" else f["file"]
        frames.append(
            Frame(
                file,
                line if isinstance(line, int) else None,
                str(f.get("function") or ""),
                module=str(f.get("module") or "") if language == "java" else "",
                language=language,
                code=str(f.get("code") or ""),
                column=column if isinstance(column, int) and not isinstance(column, bool) else None,
            )
        )
    return tuple(frames)
