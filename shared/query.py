"""The retrieval query built from an error: its type, message and the trace's tail."""

from __future__ import annotations

from shared.domain import ErrorEvent

QUERY_MAX_CHARS = 2000


def build_query(event: ErrorEvent, *, max_chars: int = QUERY_MAX_CHARS) -> str:
    """Exception line first (it says what failed), then the trace's innermost frames.

    Embedding models truncate long inputs from the end, and a trace's last frames are nearest
    the raise, so the trace is cut from the top.
    """
    head = ": ".join(p for p in (event.exception_type, event.message.strip()) if p)
    head = head[: max_chars // 2]
    trace = event.stacktrace.strip()
    room = max_chars - len(head) - 1
    if trace and room > 0:
        if len(trace) > room:
            trace = trace[-room:]
            trace = trace[trace.find("\n") + 1 :] if "\n" in trace else trace
        return f"{head}\n{trace}" if head else trace
    return head or event.service
