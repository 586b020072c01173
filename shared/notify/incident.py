"""An incident's one Slack message: its first analysis, with the list of its groups on top.

The message of the member that delivered first is the incident's (shared/intake/incidents.py
``place``); the other members' analyses are replies in its thread. ``refresh`` rewrites the
list (groups by count, services, events) with chat.update as groups join and counts grow,
at most once per ``incidents.INCIDENT_UPDATE_S`` (the ``update_incident`` task). Every label
is text from logs: it is escaped like every other block.
"""

from __future__ import annotations

import logging

from shared.core.errors import PermanentError
from shared.intake import incidents
from shared.notify.delivery import Courier, MessageNotOut, pace_key, take_slot
from shared.notify.message import with_incident

log = logging.getLogger(__name__)


def refresh(incident: str, c: Courier) -> int | None:
    """Rewrite the incident's message with its current list: the number of groups shown, or
    None when there is nothing to rewrite. ``MessageNotOut`` while no member has posted."""
    inc = incidents.load(c.r, incident)
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
    take_slot(c.r, pace_key(c, channel), c.policy.pace_s)
    try:
        c.notifier_in(channel).update(channel, inc.msg_ts, message["text"], blocks)
    except PermanentError as exc:
        log.warning("update_incident.refused", extra={"incident": incident, "reason": str(exc)})
        return None
    c.groups.set_message(
        inc.poster, state.msg_window or state.window_start, channel, inc.msg_ts,
        message["text"], blocks,
    )  # fmt: skip
    return len(inc.members)
