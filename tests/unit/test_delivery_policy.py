"""The delivery policy's decisions, as plain functions: what is delivered once, where a
recurrence replies, when a "still happening" reply is due."""

from __future__ import annotations

from shared.core.domain import EMBED_FAILED, ErrorEvent, Fallback, GroupRef, Investigation, Posted
from shared.groups.store import GroupState
from shared.notify.policy import (
    claim_id,
    needs_second_chance,
    occurrences_of,
    reply_due,
    thread_target,
)

EVENT = ErrorEvent(service="shop", repo="shop", message="boom")


def state(**kw: object) -> GroupState:
    fields: dict[str, object] = {
        "fingerprint": "fp",
        "first_seen": 1_000,
        "last_seen": 9_000,
        "total": 12,
        "window_start": 5_000,
        "window_count": 7,
        "msg_channel": "C1",
        "msg_ts": "111.1",
        "msg_window": 5_000,
        "thread_reply_at": None,
    }
    fields.update(kw)
    return GroupState(**fields)  # type: ignore[arg-type]


def test_a_group_window_is_delivered_once_and_an_ungrouped_event_by_its_id() -> None:
    grouped = Investigation(event=EVENT, group=GroupRef(fingerprint="fp", window_start=5_000))
    assert claim_id(grouped) == "fp:5000"
    assert claim_id(Investigation(event=EVENT)) == EVENT.id


def test_a_recurrence_after_its_window_replies_in_the_first_message_thread() -> None:
    later = GroupRef(fingerprint="fp", window_start=9_000)
    assert thread_target(later, state(msg_window=5_000), thread_only=True) == "111.1"


def test_the_window_that_posted_the_message_is_not_sent_to_its_own_thread() -> None:
    same = GroupRef(fingerprint="fp", window_start=5_000)
    assert thread_target(same, state(msg_window=5_000), thread_only=True) is None


def test_without_thread_only_or_an_earlier_message_a_recurrence_posts_a_new_message() -> None:
    later = GroupRef(fingerprint="fp", window_start=9_000)
    assert thread_target(later, state(), thread_only=False) is None
    assert thread_target(later, state(msg_ts=None), thread_only=True) is None
    assert thread_target(later, None, thread_only=True) is None
    assert thread_target(None, state(), thread_only=True) is None


def test_still_happening_replies_come_once_per_interval() -> None:
    assert reply_due(state(thread_reply_at=None), now_ms=10_000, interval_s=60)
    assert not reply_due(state(thread_reply_at=10_000), now_ms=69_999, interval_s=60)
    assert reply_due(state(thread_reply_at=10_000), now_ms=70_000, interval_s=60)


def test_the_message_counts_the_window_with_first_and_last_seen() -> None:
    occ = occurrences_of(state())
    assert occ is not None
    assert (occ.count, occ.first_seen_ms, occ.last_seen_ms) == (7, 1_000, 9_000)
    assert occurrences_of(None) is None


def test_the_second_chance_reads_why_a_stage_fell_back_not_the_words_of_its_note() -> None:
    event = ErrorEvent(service="shop", repo="shop", message="boom")
    note = f"{EMBED_FAILED} (connection refused); keyword search only"
    assert needs_second_chance(Investigation(event=event).fell_back(Fallback.EMBED_HOST, note))
    assert needs_second_chance(Investigation(event=event).fell_back(Fallback.LLM_HOST, "x"))
    # the same words without the reason (an error message that happens to read so) are not it
    assert not needs_second_chance(Investigation(event=event, notes=[note]))
    for calm in (Fallback.NO_RERANKER, Fallback.RERANK_REFUSED):
        assert not needs_second_chance(Investigation(event=event).fell_back(calm, "x"))
    # a second analysis gets no third
    again = Investigation(event=event, revises=Posted(channel="C1", ts="1.0"))
    assert not needs_second_chance(again.fell_back(Fallback.EMBED_HOST, note))
