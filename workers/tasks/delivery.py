"""Delivery to Slack: the analysis message once per group and window, then its count updates.

``notify`` [notify] is the chain's last stage. ``update_group`` [notify] runs at most once per
group and interval (scheduled by shared/intake.py for repeats): it rewrites the message's
occurrence count with chat.update and posts at most one thread reply per interval.
Posting is paced per channel (~1 message/s); a 429 waits for Retry-After; a transient failure
waits as long as it takes; a permanent refusal keeps the message in the notifications file.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from shared.core import queues as q
from shared.core.domain import Investigation, Notification
from shared.core.errors import PermanentError, TransientError
from shared.notify.message import (
    MessageOptions,
    Occurrences,
    build_message,
    escape,
    top_files,
    trace_reply,
    with_occurrences,
)
from shared.notify.notifiers import Delivery
from workers import context, metrics
from workers.app import app, task_options
from workers.retry import retry, visit

log = logging.getLogger(__name__)

NOTIFIED_TTL = 7 * 24 * 3600
PENDING = "pending"


def _pace(task: Any, channel: str) -> None:
    """Hold the channel's one-per-second slot, or come back in a second."""
    ctx = context.clients()
    pace_ms = int(ctx.settings.slack_pace * 1000)
    if pace_ms <= 0:
        return
    key = f"th:slack:pace:{hashlib.sha1(channel.encode()).hexdigest()[:16]}"
    if not ctx.redis.set(key, "1", nx=True, px=pace_ms):
        raise task.retry(countdown=1)  # the task retries without limit


def _channel_key() -> str:
    s = context.settings()
    if s.slack_channel:
        return s.slack_channel
    if s.slack_webhook_url:
        return s.slack_webhook_url.get_secret_value()
    return "console"


@app.task(**task_options(q.NOTIFY, retry_forever=True))
def notify(self: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """Post the message once per group and window (per event without a group)."""
    inv = Investigation.model_validate(payload).visited(*visit(self))
    ctx = context.clients()
    s = ctx.settings
    group = inv.group
    guard = (
        f"th:notified:{group.fingerprint}:{group.window_start}"
        if group
        else f"th:notified:{inv.event.id}"
    )
    # Claim before posting (SET NX): of two runs of this task (acks_late, a duplicate
    # enqueue) only one posts; the other waits for the claim to resolve.
    if not ctx.redis.set(guard, PENDING, nx=True, ex=q.TIME_LIMITS[q.NOTIFY] + 30):
        sent = ctx.redis.get(guard)
        if sent and sent != PENDING.encode():
            return dict(json.loads(sent))
        raise self.retry(countdown=5)
    state = ctx.groups.state(group.fingerprint) if group else None
    occurrences = (
        Occurrences(state.window_count, state.first_seen, state.last_seen) if state else None
    )
    in_thread_of = None
    if (
        group
        and state
        and s.slack_thread_only
        and state.msg_ts
        and state.msg_window != group.window_start
    ):
        in_thread_of = state.msg_ts  # a recurrence after its window: keep the channel quiet
    threads = ctx.notifier.destination == "slack"
    options = MessageOptions(
        repo_url_template=s.repo_url_template,
        min_relevance=s.min_relevance,
        occurrences=occurrences,
        trace_in_thread=threads and bool(inv.event.stacktrace.strip()),
    )
    text, blocks = build_message(inv, options)
    try:
        _pace(self, _channel_key())
        delivery = ctx.notifier.send(text, blocks, thread_ts=in_thread_of)
    except TransientError as exc:
        ctx.redis.delete(guard)
        raise retry(self, exc, forever=True) from exc  # nothing dropped: wait for Slack
    except PermanentError as exc:
        delivery = _fallback(inv, text, blocks, str(exc))
    except BaseException:
        ctx.redis.delete(guard)  # a pacing retry, or a crash: let the next run post
        raise
    if options.trace_in_thread and delivery.ts and delivery.destination == "slack":
        _trace_in_thread(inv, delivery)
    if group and delivery.ts and in_thread_of is None:
        ctx.groups.set_message(
            group.fingerprint, group.window_start, delivery.channel, delivery.ts, text, blocks
        )
    result = Notification(
        event_id=inv.event.id,
        destination=delivery.destination,
        channel=delivery.channel,
        ts=delivery.ts,
        text=text,
        blocks=blocks,
        notes=inv.notes,
        top_files=top_files(inv),
        trail=inv.trail,
        analysis=inv.analysis,
    ).model_dump(mode="json")
    ctx.redis.set(guard, json.dumps(result), ex=NOTIFIED_TTL)
    return result


def _trace_in_thread(inv: Investigation, delivery: Delivery) -> None:
    """The trimmed trace as a thread reply, posted (and paced) by its own task."""
    assert delivery.ts is not None
    _reply_later(delivery.ts, trace_reply(inv), key=f"{delivery.ts}:trace")


def _reply_later(thread_ts: str, text: str, *, key: str) -> None:
    app.signature(
        q.THREAD_REPLY, args=(thread_ts, text, key), queue=q.ROUTES[q.THREAD_REPLY]
    ).apply_async()


@app.task(**task_options(q.THREAD_REPLY, retry_forever=True))
def thread_reply(self: Any, thread_ts: str, text: str, key: str) -> dict[str, Any]:
    """One reply in a message's thread, paced like every post; posted once per ``key``."""
    ctx = context.clients()
    guard = f"th:replied:{hashlib.sha1(key.encode()).hexdigest()}"
    if ctx.redis.exists(guard):
        return {"thread_ts": thread_ts, "posted": False}
    block = {"type": "section", "text": {"type": "mrkdwn", "text": text}}
    try:
        _pace(self, _channel_key())
        ctx.notifier.send(text, [block], thread_ts=thread_ts)
    except TransientError as exc:
        raise retry(self, exc, forever=True) from exc
    except PermanentError as exc:  # the top-level message is out; a reply is not worth more
        log.warning("thread_reply.refused", extra={"thread_ts": thread_ts, "reason": str(exc)})
        return {"thread_ts": thread_ts, "posted": False}
    ctx.redis.set(guard, "1", ex=NOTIFIED_TTL)
    return {"thread_ts": thread_ts, "posted": True}


def _fallback(inv: Investigation, text: str, blocks: list[dict[str, Any]], reason: str) -> Delivery:
    """Never drop a finished analysis: keep it in the console notifier's file, loudly."""
    log.error("notify.fallback", extra={"event_id": inv.event.id, "reason": reason})
    metrics.fallback("notify")
    delivery = context.clients().console.send(text, blocks)
    return Delivery(f"console (slack failed: {reason})", channel=delivery.channel)


@app.task(**task_options(q.UPDATE_GROUP, retry_forever=True))
def update_group(self: Any, fingerprint: str) -> dict[str, Any]:
    """Repeats of a group: rewrite the count on its message, one thread reply per interval."""
    ctx = context.clients()
    interval = ctx.settings.group_update_interval
    state = ctx.groups.state(fingerprint)
    message = ctx.groups.message(fingerprint)
    if state is None:
        return {"fingerprint": fingerprint, "updated": False}
    if not state.msg_ts or state.msg_window != state.window_start or message is None:
        # This window's message is not out yet (its analysis is still running): later.
        if self.request.retries < 30:
            raise self.retry(countdown=interval, max_retries=30)
        return {"fingerprint": fingerprint, "updated": False}
    occ = Occurrences(state.window_count, state.first_seen, state.last_seen)
    blocks = with_occurrences(message["blocks"], occ)
    channel = state.msg_channel or _channel_key()
    try:
        _pace(self, _channel_key())
        ctx.notifier.update(channel, state.msg_ts, message["text"], blocks)
        ctx.groups.set_message(
            fingerprint, state.window_start, channel, state.msg_ts, message["text"], blocks
        )
        now = ctx.groups.now_ms()
        if state.thread_reply_at is None or now - state.thread_reply_at >= interval * 1000:
            reply = escape(
                f"Still happening: {occ.count:,} occurrences in this window, the latest just now."
            )
            _reply_later(state.msg_ts, reply, key=f"{state.msg_ts}:{now}")
            ctx.groups.mark_thread_reply(fingerprint, now)
    except TransientError as exc:
        raise retry(self, exc, forever=True) from exc
    except PermanentError as exc:
        log.warning("update_group.refused", extra={"fingerprint": fingerprint, "reason": str(exc)})
        return {"fingerprint": fingerprint, "updated": False}
    return {"fingerprint": fingerprint, "updated": True, "count": occ.count}
