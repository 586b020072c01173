"""An incident's one Slack message: its first analysis, with the list of its groups on top.

The message of the member that delivered first is the incident's (shared/groups/incidents.py
``place``); the other members' analyses are replies in its thread. ``refresh`` rewrites the
list (groups by count, services, events) with chat.update as groups join and counts grow,
at most once per ``incidents.INCIDENT_UPDATE_S`` (the ``update_incident`` task).

A cap batch (a service's new groups over its cap of new analyses) does not wait for an
analysis: its first refresh posts the list on its own, a summary of what waits (claimed as
its poster ``SUMMARY``, so members reply under it; posted once, shared/notify/claims.py),
and later refreshes rewrite it until the last one is analysed. Every label is text from
logs: it is escaped like every other block.
"""

from __future__ import annotations

import logging
from typing import Any

from shared.core import keys
from shared.core.errors import PermanentError
from shared.groups import incidents
from shared.notify import claims
from shared.notify.courier import Courier, MessageNotOut, pace_key, take_slot
from shared.notify.message import cap_summary, with_incident

log = logging.getLogger(__name__)

SUMMARY = "summary"  # a cap batch's poster when its message is the summary


def refresh(incident: str, c: Courier) -> int | None:
    """Rewrite the incident's message with its current list: the number of groups shown, or
    None when there is nothing to rewrite. ``MessageNotOut`` while no member has posted."""
    inc = incidents.load(c.r, incident)
    if inc is not None and inc.kind == "cap" and inc.poster in (None, SUMMARY):
        return _summary(inc, c)
    if inc is None or inc.msg_ts == incidents.NO_THREAD or len(inc.members) < 2:
        return None  # gone, not editable (a webhook), or one group: no list
    if inc.poster is None or not inc.msg_ts:
        raise MessageNotOut(incident)
    message = c.groups.message(inc.poster)
    state = c.groups.state(inc.poster)
    if message is None or state is None:
        return None
    blocks = with_incident(message["blocks"], inc, c.policy.language)
    channel = inc.msg_channel or c.policy.channel
    if not _update(c, inc.id, channel, inc.msg_ts, message["text"], blocks):
        return None
    c.groups.set_message(
        inc.poster, state.msg_window or state.window_start, channel, inc.msg_ts,
        message["text"], blocks,
    )  # fmt: skip
    return len(inc.members)


def _summary(inc: incidents.Incident, c: Courier) -> int | None:
    """Post the cap batch's summary (once: a run that died after posting is found by its
    claim), or rewrite it."""
    text, blocks = cap_summary(inc, c.policy.language)
    if inc.msg_ts:
        if inc.msg_ts == incidents.NO_THREAD:
            return None
        channel = inc.msg_channel or c.policy.channel
        updated = _update(c, inc.id, channel, inc.msg_ts, text, blocks)
        return len(inc.members) if updated else None
    route = c.routing.route(inc.cause, None)  # the service's channel, as its groups are aimed
    notifier = c.notifier_for(route)
    aimed = route.target if route else c.policy.channel
    where = incidents.place(
        c.r, inc.id, SUMMARY, now_ms=c.groups.now_ms(), stale_s=c.policy.claim_ttl_s
    )
    if isinstance(where, incidents.Wait):
        raise MessageNotOut(inc.id)  # a member is posting its analysis as the batch's message
    if isinstance(where, incidents.Reply):
        return refresh(inc.id, c)  # a member's analysis came first: it carries the list
    tag = f"th-summary:{inc.id}"
    key = keys.notified(tag)
    try:
        state = claims.take(c.r, key, c.timing)
        if isinstance(state, claims.Done):
            return None  # refused by Slack earlier: members post on their own
        found = claims.post_once(
            c.r,
            key,
            state,
            notifier,
            lambda: notifier.send(text, blocks, claim=tag),
            timing=c.timing,
            tag=tag,
            before_send=lambda: take_slot(c.r, aimed, c.policy.pace_s),
        )
    except claims.ClaimHeld:
        raise MessageNotOut(inc.id) from None  # an earlier run's post is not resolved yet
    except PermanentError as exc:
        log.warning("cap_summary.refused", extra={"incident": inc.id, "reason": str(exc)})
        incidents.posted(c.r, inc.id, None, None, aimed)  # members post on their own
        claims.record(c.r, key, "refused")
        return None
    incidents.posted(c.r, inc.id, found.channel, found.ts, aimed)
    claims.record(c.r, key, "posted")
    return len(inc.members)


def _update(
    c: Courier, incident: str, channel: str, msg_ts: str, text: str, blocks: list[dict[str, Any]]
) -> bool:
    take_slot(c.r, pace_key(c, channel), c.policy.pace_s)
    try:
        c.notifier_in(channel).update(channel, msg_ts, text, blocks)
    except PermanentError as exc:
        log.warning("update_incident.refused", extra={"incident": incident, "reason": str(exc)})
        return False
    return True
