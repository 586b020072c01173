"""Slack's Web API as its spec and docs give it, held by the simulator and kept by tracehound.

Each test drives slack-sdk's real ``WebClient`` (directly, or inside tracehound's notifier)
against the simulator and checks both sides: what the simulator received is what Slack
documents, and tracehound copes with what Slack refuses. The rules and their sources are in
shared/devtools/simulators/slack.py (FORM_ONLY_METHODS, ID_ONLY_METHODS, _LIMITS, TIER1_*).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from shared.core.errors import TransientError
from shared.devtools.simulators.slack import SlackSimulator, is_channel_id
from shared.notify import claims
from shared.notify.channel_ids import ChannelIds
from shared.notify.notifiers import Delivery, SlackBotNotifier, Window

pytestmark = pytest.mark.contract

CHANNEL = "C0CONTRACT"
BLOCKS = [{"type": "section", "text": {"type": "mrkdwn", "text": "KeyError in shop"}}]


def web(slack: SlackSimulator) -> WebClient:
    return WebClient(token="xoxb-test", base_url=slack.api_url)


def bot(slack: SlackSimulator, channel: str = CHANNEL, **kw: Any) -> SlackBotNotifier:
    return SlackBotNotifier("xoxb-test", channel, base_url=slack.api_url, timeout=5, **kw)


def around_now(seconds: float = 120.0) -> Window:
    now = time.time()
    return Window(now - seconds, now + seconds)


@pytest.fixture
def workspace(slack: SlackSimulator) -> Any:
    yield slack
    slack.configure(marketplace=True, tier1_period=60.0, channels=None)


# --- read methods take form arguments, never a JSON body -------------------------------------


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("conversations.history", {"channel": CHANNEL}),
        ("conversations.replies", {"channel": CHANNEL, "ts": "{ts}"}),
        ("chat.getPermalink", {"channel": CHANNEL, "message_ts": "{ts}"}),
    ],
)
def test_a_read_method_answers_form_arguments_and_reads_no_json_body(
    slack: SlackSimulator, method: str, args: dict[str, str]
) -> None:
    client = web(slack)
    posted = client.chat_postMessage(channel=CHANNEL, text="x", blocks=BLOCKS)
    filled = {k: v.format(ts=posted["ts"]) for k, v in args.items()}
    typed = getattr(client, method.replace(".", "_"))
    assert typed(**filled)["ok"] is True  # slack-sdk's typed method: form arguments
    sent = slack.requests_to(method)[-1]
    assert sent["content_type"] == "application/x-www-form-urlencoded"
    with pytest.raises(SlackApiError) as refused:
        client.api_call(method, json=filled)  # what tracehound's notifier used to send
    assert refused.value.response["error"] == "channel_not_found"
    assert slack.requests_to(method)[-1]["json_ignored"] == sorted(filled)


def test_tracehound_finds_its_post_and_links_it_with_form_arguments_only(
    slack: SlackSimulator,
) -> None:
    notifier = bot(slack)
    posted = notifier.send("KeyError", BLOCKS, claim="fp:1")
    assert notifier.find("fp:1", within=around_now()) == posted
    link = notifier.permalink(CHANNEL, str(posted.ts))
    assert link is not None and link.startswith("https://")
    reads = [r for r in slack.requests if r["api_method"] != "chat.postMessage"]
    assert reads and all(r["content_type"] != "application/json" for r in reads)


# --- channel names -----------------------------------------------------------------------------


def test_only_post_message_takes_a_channel_name_and_it_answers_with_the_id(
    slack: SlackSimulator,
) -> None:
    client = web(slack)
    posted = client.chat_postMessage(channel="#alerts", text="x")
    assert is_channel_id(posted["channel"]) and posted["channel"] == slack.channel_id("alerts")
    for call in (
        lambda: client.conversations_history(channel="#alerts"),
        lambda: client.conversations_history(channel="alerts"),
        lambda: client.conversations_replies(channel="#alerts", ts=posted["ts"]),
        lambda: client.chat_getPermalink(channel="#alerts", message_ts=posted["ts"]),
        lambda: client.chat_update(channel="#alerts", ts=posted["ts"], text="y"),
    ):
        with pytest.raises(SlackApiError) as refused:
            call()
        assert refused.value.response["error"] == "channel_not_found"
    assert client.conversations_history(channel=posted["channel"])["messages"]


def test_a_channel_configured_by_name_is_resolved_and_every_later_call_uses_its_id(
    workspace: SlackSimulator, fresh_redis: redis.Redis
) -> None:
    workspace.configure(channels={"C0ONCALL1": "oncall", "C0OTHER01": "other"})
    learnt = ChannelIds(fresh_redis)
    first = bot(workspace, "#oncall", channel_ids=learnt)
    posted = first.send("KeyError", BLOCKS, claim="fp:2")
    assert posted.channel == "C0ONCALL1"
    first.update(str(posted.channel), str(posted.ts), "KeyError (2)", BLOCKS)
    # Another worker, same Redis: the ID the post answered with is known there, no listing.
    second = bot(workspace, "#oncall", channel_ids=learnt)
    assert second.find("fp:2", within=around_now()) == posted
    assert workspace.requests_to("conversations.list") == []
    # A worker with nothing learnt lists the channels once.
    third = bot(workspace, "oncall")
    assert third.find("fp:2", within=around_now()) == posted
    assert third.permalink("#oncall", str(posted.ts)) is not None
    assert len(workspace.requests_to("conversations.list")) == 1
    bodies = [r["body"] for r in workspace.requests if r["api_method"] != "chat.postMessage"]
    assert all(b.get("channel") in (None, "C0ONCALL1") for b in bodies)


# --- limits, cursors and the non-Marketplace rate limit ------------------------------------


def test_history_pages_by_cursor_within_the_documented_caps(workspace: SlackSimulator) -> None:
    client = web(workspace)
    for i in range(40):
        client.chat_postMessage(channel=CHANNEL, text=f"m{i}")
    first = client.conversations_history(channel=CHANNEL, limit=15)
    assert len(first["messages"]) == 15 and first["has_more"] is True
    seen = [m["text"] for page in client.conversations_history(channel=CHANNEL, limit=15)
            for m in page["messages"]]  # fmt: skip
    assert seen == [f"m{i}" for i in reversed(range(40))]  # newest first, every one once
    workspace.configure(marketplace=False, tier1_period=60.0)
    capped = client.conversations_history(channel=CHANNEL, limit=200)
    assert len(capped["messages"]) == 15 and capped["has_more"] is True
    with pytest.raises(SlackApiError) as limited:
        client.conversations_history(channel=CHANNEL)
    assert limited.value.response.status_code == 429
    assert 1 <= int(limited.value.response.headers["Retry-After"]) <= 60
    client.chat_postMessage(channel=CHANNEL, text="posting is not limited")


def test_history_rate_limited_in_tracehound_is_a_transient_error_with_its_wait(
    workspace: SlackSimulator,
) -> None:
    workspace.configure(marketplace=False, tier1_period=60.0)
    notifier = bot(workspace)
    notifier.send("x", BLOCKS, claim="fp:3")
    assert notifier.find("fp:3", within=around_now()) is not None
    with pytest.raises(TransientError) as limited:
        notifier.find("fp:3", within=around_now())
    assert limited.value.retry_after is not None and limited.value.retry_after > 0


def _lost_post(
    slack: SlackSimulator, r: redis.Redis, key: str, *, thread_ts: str | None, others: int
) -> tuple[Delivery, SlackBotNotifier]:
    """A post tagged with ``key`` whose answer was lost, with ``others`` messages where a
    lookup meets them first: after it in the channel (history is newest first), before it in
    a thread (replies are oldest first)."""
    notifier = bot(slack)
    client = web(slack)
    since = int(time.time() * 1000)

    def chatter() -> None:
        for i in range(others):
            client.chat_postMessage(channel=CHANNEL, text=f"other {i}", thread_ts=thread_ts)

    if thread_ts:
        chatter()
    lost = notifier.send("the lost one", BLOCKS, claim=key, thread_ts=thread_ts)
    if not thread_ts:
        chatter()
    r.set(key, f"{claims.UNANSWERED}{since}:{since}")
    return lost, notifier


@pytest.mark.parametrize("in_thread", [False, True], ids=["channel", "thread"])
def test_a_lost_post_in_a_busy_channel_is_found_at_one_request_a_minute(
    workspace: SlackSimulator, fresh_redis: redis.Redis, in_thread: bool
) -> None:
    """Slack's limit outside the Marketplace: one history/replies request a minute (here a
    period of 1 s) and 15 messages a page. The lookup reads page after page across the rate
    limit, resumes where it stopped, never reads a page twice, and does not post again."""
    thread_ts = web(workspace).chat_postMessage(channel=CHANNEL, text="parent")["ts"]
    thread_ts = thread_ts if in_thread else None
    key = "th:notified:contract-lost"
    lost, notifier = _lost_post(workspace, fresh_redis, key, thread_ts=thread_ts, others=40)
    workspace.configure(marketplace=False, tier1_period=1.0)
    timing = claims.Timing(stale_s=90, settle_s=0)
    state = claims.take(fresh_redis, key, timing)
    assert isinstance(state, claims.Pending)
    waits = 0
    while True:
        try:
            found = claims.post_once(
                fresh_redis, key, state, notifier,
                lambda: notifier.send("again", BLOCKS, claim=key, thread_ts=thread_ts),
                timing=timing, tag=key, thread_ts=thread_ts,
            )  # fmt: skip
            break
        except TransientError as exc:  # the task would retry after Retry-After
            assert exc.retry_after is not None
            waits += 1
            time.sleep(exc.retry_after)
    assert found == lost
    # Not posted again: no message says "again". (Not a count of every message: the session's
    # simulator is also the local stack's workers' Slack, and they may deliver for another
    # test meanwhile.)
    assert not [m for m in workspace.messages if m.get("text") == "again"]
    method = "conversations.replies" if in_thread else "conversations.history"
    pages = [r["body"] for r in workspace.requests_to(method) if r["status"] == 200]
    assert len(pages) == 3 and waits >= 2  # 41 or 42 messages, 15 a page, one page a period
    bound = "oldest" if in_thread else "latest"
    moved = [float(p[bound]) for p in pages]
    assert len(set(moved)) == 3  # each page began where the last one ended
    assert moved == (sorted(moved) if in_thread else sorted(moved, reverse=True))
