"""A group's message in its incident: the incident's own message, a reply under it, or
neither (no incident, or one in another channel)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.groups import incidents
from shared.notify.claims import ClaimHeld
from shared.notify.courier import Courier, release
from shared.notify.notifiers import Delivery


def incident_posted(
    c: Courier, incident: str, post: bool, delivery: Delivery, channel: str
) -> None:
    if post:
        incidents.posted(c.r, incident, delivery.channel, delivery.ts, channel)
    # Most errors are an incident of one group: their message has no list to rewrite. A
    # member that did not post has one above it (a cap batch's summary counts who waits).
    if c.refresh_incident_later is not None and (not post or incidents.size(c.r, incident) > 1):
        c.refresh_incident_later(incident)


@dataclass(frozen=True)
class Placed:
    """A group's message in its incident: the incident's own message (``post``), a reply
    under it (``reply_to``), or neither (no incident, or one in another channel)."""

    incident: str | None = None
    post: bool = False
    reply_to: str | None = None


def incident_place(c: Courier, fingerprint: str, channel: str, guard: str) -> Placed:
    """``ClaimHeld`` while another member is posting the incident's message."""
    incident = incidents.incident_of(c.r, fingerprint)
    if incident is None:
        return Placed()
    where = incidents.place(
        c.r, incident, fingerprint, now_ms=c.groups.now_ms(), stale_s=c.policy.claim_ttl_s
    )
    if isinstance(where, incidents.Wait):
        release(c, guard)  # nothing was sent
        raise ClaimHeld(guard)
    if isinstance(where, incidents.Post):
        return Placed(incident, post=True)
    if where.ts != incidents.NO_THREAD and where.target == channel:
        return Placed(incident, reply_to=where.ts)
    return Placed(incident)
