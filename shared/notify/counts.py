"""The count on a group's message, rewritten as its events arrive, and at most one "still
happening" thread reply per interval."""

from __future__ import annotations

import logging

from shared.core.errors import PermanentError
from shared.groups import incidents, triage
from shared.notify import actions
from shared.notify.courier import Courier, MessageNotOut, pace_key, take_slot
from shared.notify.message import with_occurrences
from shared.notify.policy import occurrences_of, reply_due, still_happening

log = logging.getLogger(__name__)


def update_counts(fingerprint: str, c: Courier) -> int | None:
    """Rewrite the count on the group's message; the count shown, or None if there is nothing
    to update (the group expired, or Slack refused). ``MessageNotOut`` while its message is
    not posted yet."""
    state = c.groups.state(fingerprint)
    if state is None:
        return None
    message = c.groups.message(fingerprint)
    if not state.msg_ts or state.msg_window != state.window_start or message is None:
        raise MessageNotOut(fingerprint)
    occ = occurrences_of(state)
    assert occ is not None
    blocks = with_occurrences(message["blocks"], occ, c.policy.language)
    blocks = actions.with_blocks(blocks, activity=actions.activity_lines(c.r, fingerprint))
    channel = state.msg_channel or c.policy.channel
    take_slot(c.r, pace_key(c, channel), c.policy.pace_s)
    try:
        c.notifier.update(channel, state.msg_ts, message["text"], blocks)
    except PermanentError as exc:
        log.warning("update_group.refused", extra={"fingerprint": fingerprint, "reason": str(exc)})
        return None
    c.groups.set_message(
        fingerprint, state.window_start, channel, state.msg_ts, message["text"], blocks
    )
    now = c.groups.now_ms()
    quiet = triage.muted(c.r, fingerprint) is not None  # counted on the message, not posted
    incident = incidents.incident_of(c.r, fingerprint)
    if incident is not None and incidents.size(c.r, incident) > 1:
        # One of several groups: its count shows in the incident's list, and its thread is
        # the incident's — no "still happening" reply per group.
        if c.refresh_incident_later is not None:
            c.refresh_incident_later(incident)
        return occ.count
    if not quiet and reply_due(state, now, c.policy.update_interval_s):
        c.reply_later(state.msg_ts, still_happening(occ.count), f"{state.msg_ts}:{now}", channel)
        c.groups.mark_thread_reply(fingerprint, now)
    return occ.count
