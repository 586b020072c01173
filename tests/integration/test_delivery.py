"""The delivery policy and the analysis stage as plain functions, on a real private Redis and
the Slack simulator, without Celery: what the notify and analyze tasks do once they unpack."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from shared.analyze.cache import AnalysisCache
from shared.analyze.stage import REUSED_NOTE, analyze_investigation
from shared.core.domain import (
    Analysis,
    Candidate,
    ChunkHit,
    ErrorEvent,
    Evidence,
    FileRef,
    GroupRef,
    Hypothesis,
    Investigation,
)
from shared.core.errors import TransientError
from shared.devtools.simulators.slack import SlackSimulator
from shared.groups.store import GroupStore
from shared.notify.claims import ClaimHeld
from shared.notify.counts import update_counts
from shared.notify.courier import Courier, DeliveryPolicy, MessageNotOut, Paced
from shared.notify.delivery import deliver
from shared.notify.notifiers import ConsoleNotifier, SlackBotNotifier
from shared.notify.policy import claim_id
from shared.notify.replies import post_reply

pytestmark = pytest.mark.integration

CHANNEL = "C0DELIVERY"
TRACE = 'Traceback (most recent call last):\n  File "shop/pricing.py", line 12\nKeyError: "sku"'


class Courtyard:
    """A courier whose scheduled replies and fallbacks are recorded for the test."""

    def __init__(self, r: redis.Redis, slack: SlackSimulator, tmp: Path, **policy: Any) -> None:
        self.replies: list[tuple[str, str, str]] = []
        self.fallbacks: list[str] = []
        self.groups = GroupStore(r, window_s=1800)
        self.console_file = tmp / "notifications.jsonl"
        self.courier = Courier(
            r=r,
            groups=self.groups,
            notifier=SlackBotNotifier(
                "xoxb-test", CHANNEL, base_url=slack.url + "/api/", timeout=5
            ),
            console=ConsoleNotifier(self.console_file, stream=io.StringIO()),
            policy=DeliveryPolicy(channel=CHANNEL, **{"pace_s": 0.0, **policy}),
            reply_later=lambda ts, text, key, channel: self.replies.append((ts, text, key)),
            on_fallback=self.fallbacks.append,
        )

    def investigation(self, fp: str = "fp-1", *, service: str = "shop") -> Investigation:
        event = ErrorEvent(
            service=service, repo="shop", message='KeyError: "sku"', stacktrace=TRACE
        )
        occ = self.groups.record(fp, service, event.id)
        return Investigation(
            event=event, group=GroupRef(fingerprint=fp, window_start=occ.window_start)
        )


@pytest.fixture
def yard(fresh_redis: redis.Redis, slack: SlackSimulator, tmp_path: Path) -> Courtyard:
    return Courtyard(fresh_redis, slack, tmp_path)


def top_level(slack: SlackSimulator) -> list[dict[str, Any]]:
    return [m for m in slack.messages_in(CHANNEL) if not m.get("thread_ts")]


def test_a_group_window_is_posted_once_and_a_rerun_returns_the_first_result(
    yard: Courtyard, slack: SlackSimulator
) -> None:
    inv = yard.investigation()
    first = deliver(inv, yard.courier)
    again = deliver(inv, yard.courier)  # acks_late: the task ran twice
    assert len(top_level(slack)) == 1
    assert again == first and first.ts
    # The trace goes to the thread through its own task, not inside the post.
    assert [(ts, key) for ts, _, key in yard.replies] == [(first.ts, f"{first.ts}:trace")]


def test_a_run_that_finds_the_claim_pending_waits_instead_of_posting(
    yard: Courtyard, slack: SlackSimulator, fresh_redis: redis.Redis
) -> None:
    inv = yard.investigation()
    now = yard.groups.now_ms()
    fresh_redis.set(f"th:notified:{claim_id(inv)}", f"posting:{now}")
    with pytest.raises(ClaimHeld):
        deliver(inv, yard.courier)
    assert top_level(slack) == []


def test_a_crash_after_slack_took_the_post_finds_it_instead_of_posting_again(
    yard: Courtyard, slack: SlackSimulator, fresh_redis: redis.Redis
) -> None:
    inv = yard.investigation()
    first = deliver(inv, yard.courier)
    # The worker died after Slack accepted the post and before recording it: only the claim
    # ("posting") is left, and the message in the channel carries the claim in its metadata.
    fresh_redis.set(f"th:notified:{claim_id(inv)}", f"posting:{yard.groups.now_ms()}")
    again = deliver(inv, yard.courier)
    assert len(top_level(slack)) == 1
    assert again.ts == first.ts


def test_a_stale_claim_with_nothing_in_the_channel_is_taken_over_and_posted_once(
    yard: Courtyard, slack: SlackSimulator, fresh_redis: redis.Redis
) -> None:
    inv = yard.investigation()
    long_ago = yard.groups.now_ms() - (yard.courier.policy.claim_ttl_s + 5) * 1000
    fresh_redis.set(f"th:notified:{claim_id(inv)}", f"posting:{long_ago}")
    deliver(inv, yard.courier)  # the crashed run never reached Slack: post now
    deliver(inv, yard.courier)
    assert len(top_level(slack)) == 1


def test_a_timed_out_post_keeps_its_claim_and_the_retry_finds_the_post(
    yard: Courtyard, slack: SlackSimulator, fresh_redis: redis.Redis
) -> None:
    inv = yard.investigation()
    slack.configure(latency=2.0)  # longer than the notifier's timeout below
    yard.courier.notifier = SlackBotNotifier(
        "xoxb-test", CHANNEL, base_url=slack.url + "/api/", timeout=1
    )
    try:
        with pytest.raises(TransientError):
            deliver(inv, yard.courier)
        # No answer: the claim says so, and nobody posts until the channel has been read.
        assert fresh_redis.get(f"th:notified:{claim_id(inv)}").startswith(b"unanswered:")  # type: ignore[union-attr]
    finally:
        slack.configure(latency=0)
    time.sleep(1.5)  # Slack finishes the post it was given
    deliver(inv, yard.courier)
    assert len(top_level(slack)) == 1


def test_a_paced_channel_sends_the_task_back_and_frees_the_claim_for_its_rerun(
    fresh_redis: redis.Redis, slack: SlackSimulator, tmp_path: Path
) -> None:
    yard = Courtyard(fresh_redis, slack, tmp_path, pace_s=30.0)
    deliver(yard.investigation("fp-a"), yard.courier)
    second = yard.investigation("fp-b")
    with pytest.raises(Paced):
        deliver(second, yard.courier)
    fresh_redis.delete(*fresh_redis.keys("th:slack:pace:*"))  # the slot frees
    deliver(second, yard.courier)
    assert len(top_level(slack)) == 2


def test_slack_down_raises_for_a_retry_and_the_retry_posts_exactly_once(
    yard: Courtyard, slack: SlackSimulator
) -> None:
    inv = yard.investigation()
    slack.fail("chat.postMessage", "internal_error", times=1, status=500)
    with pytest.raises(TransientError):
        deliver(inv, yard.courier)
    deliver(inv, yard.courier)
    assert len(top_level(slack)) == 1


def test_a_slack_refusal_keeps_the_message_in_the_notifications_file(
    yard: Courtyard, slack: SlackSimulator
) -> None:
    inv = yard.investigation()
    slack.fail("chat.postMessage", "channel_not_found", times=1)
    result = deliver(inv, yard.courier)
    assert result.destination.startswith("console (slack failed")
    assert "channel_not_found" in result.destination
    kept = [json.loads(line) for line in yard.console_file.read_text().splitlines()]
    assert len(kept) == 1 and kept[0]["text"] == result.text
    assert yard.fallbacks == ["notify"]


def test_with_thread_only_a_recurrence_after_its_window_replies_in_the_thread(
    fresh_redis: redis.Redis, slack: SlackSimulator, tmp_path: Path
) -> None:
    yard = Courtyard(fresh_redis, slack, tmp_path, thread_only=True)
    first = deliver(yard.investigation(), yard.courier)
    # The window ends: the next event of the group opens a new one.
    fresh_redis.hset("th:group:fp-1", "window_start", 1)
    recurrence = yard.investigation()
    assert recurrence.group is not None and recurrence.group.window_start != 1
    deliver(recurrence, yard.courier)
    assert len(top_level(slack)) == 1
    assert [m["thread_ts"] for m in slack.messages_in(CHANNEL) if m.get("thread_ts")] == [first.ts]


def test_count_updates_wait_for_the_message_then_rewrite_it_and_reply_once_per_interval(
    yard: Courtyard, slack: SlackSimulator
) -> None:
    inv = yard.investigation()
    with pytest.raises(MessageNotOut):
        update_counts("fp-1", yard.courier)
    first = deliver(inv, yard.courier)
    for _ in range(4):
        yard.groups.record("fp-1", "shop", f"repeat-{_}")
    yard.replies.clear()
    assert update_counts("fp-1", yard.courier) == 5
    assert update_counts("fp-1", yard.courier) == 5
    [message] = top_level(slack)
    assert message["updated"] and "5" in json.dumps(message["blocks"])
    assert [(ts, "Still happening" in text) for ts, text, _ in yard.replies] == [(first.ts, True)]


def test_a_count_update_for_an_expired_group_does_nothing(yard: Courtyard) -> None:
    assert update_counts("never-seen", yard.courier) is None


def test_a_thread_reply_is_posted_once_per_key(yard: Courtyard, slack: SlackSimulator) -> None:
    assert post_reply("123.4", "the trace", "123.4:trace", yard.courier)
    assert not post_reply("123.4", "the trace", "123.4:trace", yard.courier)
    assert [m["text"] for m in slack.messages_in(CHANNEL)] == ["the trace"]


# ------------------------------------------------------------------------ analysis stage

VALID = json.dumps(
    {
        "summary": "KeyError in pricing",
        "hypotheses": [{"cause": "sku missing", "confidence": 0.7, "evidence": ["p.py:1-2"]}],
        "suggested_fix": "check the sku",
        "relevant_files": [{"path": "p.py", "start_line": 1, "end_line": 2}],
        "confidence": 0.7,
    }
)


class Chat:
    model = "test-llm"

    def __init__(self, *replies: str | Exception) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []

    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any]) -> str:
        self.prompts.append(messages[-1]["content"])
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def with_code(text: str, fp: str = "fp-1") -> Investigation:
    hit = ChunkHit(chunk_id=f"p.py#{hash(text)}", path="p.py", start_line=1, end_line=2,
                   text=text, score=1.0)  # fmt: skip
    return Investigation(
        event=ErrorEvent(service="shop", repo="shop", message="KeyError"),
        group=GroupRef(fingerprint=fp, window_start=1),
        candidates=[Candidate(path="p.py", score=1.0, chunks=[hit])],
    )


def test_a_recurrence_over_unchanged_code_reuses_the_analysis_without_the_llm(
    fresh_redis: redis.Redis,
) -> None:
    cache = AnalysisCache(fresh_redis)
    chat = Chat(VALID, VALID)
    first = analyze_investigation(
        with_code("a = 1"), chat=chat, redact=str, cache=cache, may_retry=True
    )
    again = analyze_investigation(
        with_code("a = 1"), chat=chat, redact=str, cache=cache, may_retry=True
    )
    assert len(chat.prompts) == 1
    assert again.analysis == first.analysis and REUSED_NOTE in again.notes
    analyze_investigation(with_code("a = 2"), chat=chat, redact=str, cache=cache, may_retry=True)
    assert len(chat.prompts) == 2  # the code changed: the model is asked again


def test_the_llm_reads_redacted_code(fresh_redis: redis.Redis) -> None:
    chat = Chat(VALID)
    analyze_investigation(
        with_code("password = 'hunter2'"),
        chat=chat,
        redact=lambda s: s.replace("hunter2", "[REDACTED]"),
        cache=AnalysisCache(fresh_redis),
        may_retry=True,
    )
    assert "hunter2" not in chat.prompts[0] and "[REDACTED]" in chat.prompts[0]


def test_a_transient_llm_failure_is_raised_while_retries_remain_then_degrades_uncached(
    fresh_redis: redis.Redis,
) -> None:
    cache = AnalysisCache(fresh_redis)
    chat = Chat(TransientError("HTTP 503"), TransientError("HTTP 503"), VALID)
    with pytest.raises(TransientError):
        analyze_investigation(with_code("x"), chat=chat, redact=str, cache=cache, may_retry=True)
    last = analyze_investigation(
        with_code("x"), chat=chat, redact=str, cache=cache, may_retry=False
    )
    assert last.analysis is not None and last.analysis.degraded
    assert "HTTP 503" in (last.analysis.degraded_reason or "")
    # A degraded analysis is not kept: the next occurrence asks the model again.
    fresh = analyze_investigation(
        with_code("x"), chat=chat, redact=str, cache=cache, may_retry=True
    )
    assert fresh.analysis is not None and not fresh.analysis.degraded


def test_a_korean_team_reads_the_message_in_korean_with_code_left_as_it_is(
    fresh_redis: redis.Redis, slack: SlackSimulator, tmp_path: Path
) -> None:
    yard = Courtyard(fresh_redis, slack, tmp_path, language="ko")
    inv = yard.investigation()
    korean = Analysis(
        summary="가격 계산에서 수량이 0인 줄이 나눗셈에 들어갑니다.",
        hypotheses=[
            Hypothesis(
                cause="쿠폰 할인 배분에서 quantity가 0인 줄을 건너뛰지 않습니다",
                confidence=0.7,
                evidence=["shopapp/services/pricing.py:80-95"],
            )
        ],
        suggested_fix="allocate_discount에서 quantity == 0인 줄을 건너뛰세요.",
        relevant_files=[FileRef(path="shopapp/services/pricing.py", start_line=80, end_line=95)],
        confidence=0.7,
        model="qwen2.5-coder:7b",
    )
    strong = Evidence(own_frames=2, overlap=0.6)  # the trace ran through the cited file
    deliver(inv.model_copy(update={"analysis": korean, "evidence": strong}), yard.courier)
    [message] = top_level(slack)
    shown = json.dumps(message["blocks"], ensure_ascii=False)
    # The fixed strings come from the Korean table; the model's prose is kept as written, and
    # paths, identifiers and the error stay untouched.
    for heading in ("*요약:*", "*추정 원인:*", "*제안하는 수정:*", "*관련 파일:*", "신뢰도 70%"):
        assert heading in shown, heading
    for english in ("Summary", "Probable causes", "Suggested fix", "Relevant files"):
        assert english not in shown, english
    assert "shopapp/services/pricing.py:80-95" in shown and "quantity == 0" in shown
    assert 'KeyError: \\"sku\\"' in shown
    assert "요약:" in message["text"] and "가격 계산에서" in message["text"]
