"""One reply in a message's thread, once per key, under the same claim discipline as the
message (shared/notify/claims.py): a worker killed while Slack takes the reply never leads to a
second one."""

from __future__ import annotations

import logging

from shared.core import keys
from shared.core.errors import PermanentError
from shared.notify import claims
from shared.notify.courier import Courier, pace_key, take_slot

log = logging.getLogger(__name__)


def post_reply(thread_ts: str, text: str, key: str, c: Courier, channel: str | None = None) -> bool:
    """One reply in a message's thread (in ``channel``, the one its message was posted in;
    None: the default channel), paced like every post; False if Slack refused it or it was
    posted before. The reply carries its claim in metadata, so a run that follows one killed
    mid-post finds it in the thread instead of posting it again."""
    guard = keys.replied(key)
    state = claims.take(c.r, guard, c.timing)
    if isinstance(state, claims.Done):
        return False
    block = {"type": "section", "text": {"type": "mrkdwn", "text": text}}
    notifier = c.notifier_in(channel)
    tag = f"reply:{key}"
    try:
        claims.post_once(
            c.r,
            guard,
            state,
            notifier,
            lambda: notifier.send(text, [block], thread_ts=thread_ts, claim=tag),
            timing=c.timing,
            tag=tag,
            thread_ts=thread_ts,
            before_send=lambda: take_slot(c.r, pace_key(c, channel), c.policy.pace_s),
        )
    except PermanentError as exc:  # the top-level message is out; a reply is not worth more
        log.warning("thread_reply.refused", extra={"thread_ts": thread_ts, "reason": str(exc)})
        claims.record(c.r, guard, "refused")
        return False
    claims.record(c.r, guard, "posted")
    return True
