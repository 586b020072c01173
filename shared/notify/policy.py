"""Delivery's pure decisions: what is delivered once, whether a message gets a second chance,
where a recurrence replies, and when a "still happening" reply is due."""

from __future__ import annotations

from shared.core.domain import HOST_DOWN, GroupRef, Investigation
from shared.groups.store import GroupState
from shared.notify.message import Occurrences, escape

SECOND_CHANCE_NOTE = (
    "analysis: this message will be analysed again, and updated here, if the model host "
    "answers again within the group window"
)


def needs_second_chance(inv: Investigation) -> bool:
    """A message that degraded because a model host was out of reach — the LLM failed, the
    query could not be embedded, the reranker was down — gets one more analysis later (not a
    message that is already that second analysis, nor one without a rerank server at all, nor
    one whose rerank server answered and refused)."""
    return inv.revises is None and any(why in HOST_DOWN for why in inv.fallbacks)


def claim_id(inv: Investigation) -> str:
    """What is delivered once: the group's window, or the event itself without a group (an
    "Analyze again" run: once per press)."""
    if inv.rerun is not None:
        return f"rerun:{inv.rerun}"
    group = inv.group
    return f"{group.fingerprint}:{group.window_start}" if group else inv.event.id


def thread_target(
    group: GroupRef | None, state: GroupState | None, thread_only: bool
) -> str | None:
    """The first message's ts when a recurrence after its window should reply in its thread."""
    if not (group and state and thread_only and state.msg_ts):
        return None
    return state.msg_ts if state.msg_window != group.window_start else None


def occurrences_of(state: GroupState | None) -> Occurrences | None:
    if state is None:
        return None
    return Occurrences(state.window_count, state.first_seen, state.last_seen)


def reply_due(state: GroupState, now_ms: int, interval_s: float) -> bool:
    """A "still happening" thread reply is due once per interval."""
    return state.thread_reply_at is None or now_ms - state.thread_reply_at >= interval_s * 1000


def still_happening(count: int) -> str:
    return escape(f"Still happening: {count:,} occurrences in this window, the latest just now.")
