"""Delivery policy: one message per group and window, paced per channel, never dropped.

The notify tasks (workers/tasks/delivery.py) only unpack and call these functions:

- ``deliver``: claim the group window (SET NX), build the message, take the channel's posting
  slot, post (or reply in the first message's thread when ``thread_only`` and the group
  recurs after its window), keep a refused message in the console file, record the message
  so repeats can update its count, and record the result under the claim. The post carries
  the claim in its Slack metadata: a run that finds the claim taken by a poster that crashed,
  or whose post timed out, looks for that message in the channel before posting again, so a
  crash between Slack accepting a post and tracehound recording it never posts twice.

Beside it: the courier (courier.py: what delivery touches, routing, pacing), its pure decisions
(policy.py), the message's options and buttons (compose.py), a group's place in its incident
(placement.py), thread replies (replies.py) and count updates (counts.py).

Exceptions tell the task what to do: ``Paced`` and ``ClaimHeld`` mean "come back shortly",
``MessageNotOut`` "come back after the interval", ``TransientError`` "retry with backoff".
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from shared.core import keys
from shared.core.domain import Investigation, Notification, Posted
from shared.core.errors import PermanentError
from shared.groups import incidents, memory, triage
from shared.notify import actions, claims
from shared.notify.compose import dressed, message_options
from shared.notify.courier import Courier, Target, pace_key, release, take_slot, target
from shared.notify.feedback import remember_case
from shared.notify.message import build_message, escape, top_files, trace_reply, with_incident
from shared.notify.notifiers import Delivery
from shared.notify.placement import Placed, incident_place, incident_posted
from shared.notify.policy import SECOND_CHANCE_NOTE, claim_id, needs_second_chance, thread_target

log = logging.getLogger(__name__)

NOTIFIED_TTL = claims.CLAIM_TTL  # how long a sent message's record answers a redelivered task


def _keep_refused(
    inv: Investigation, text: str, blocks: list[dict[str, Any]], reason: str, c: Courier
) -> Delivery:
    """Never drop a finished analysis: keep it in the console notifier's file, loudly."""
    log.error("notify.fallback", extra={"event_id": inv.event.id, "reason": reason})
    c.on_fallback("notify")
    kept = c.console.send(text, blocks)
    return Delivery(f"console (slack failed: {reason})", channel=kept.channel)


def deliver(inv: Investigation, c: Courier) -> Notification:
    """Post the investigation's message once per group and window (see the module doc); a
    revision (``inv.revises``) rewrites the message it revises instead."""
    p = c.policy
    second_chance = c.reanalyze_later is not None and needs_second_chance(inv)
    if second_chance:
        inv = inv.noted(SECOND_CHANCE_NOTE)
    if inv.revises is not None:
        return _revise(inv, c)
    guard = claim_id(inv)
    claimed = claims.take(c.r, keys.notified(guard), c.timing)
    if isinstance(claimed, claims.Done):
        return Notification.model_validate_json(claimed.value)
    group = inv.group
    if group is not None and (quiet := triage.muted(c.r, group.fingerprint)) is not None:
        return _muted(inv, c, guard, quiet)
    state = c.groups.state(group.fingerprint) if group else None
    resolved = triage.resolved(c.r, group.fingerprint) if group else None
    in_thread_of = None if resolved else thread_target(group, state, p.thread_only)
    aim = target(c, inv)
    placed = Placed()
    if group is not None and in_thread_of is None and not resolved:
        placed = incident_place(c, group.fingerprint, aim.channel, guard)
        in_thread_of = placed.reply_to
    options = message_options(c, inv, state, aim.owners)
    text, blocks = build_message(inv, options)
    blocks = dressed(c, inv, blocks, resolved)
    if placed.post and placed.incident and (inc := incidents.load(c.r, placed.incident)):
        blocks = with_incident(blocks, inc, p.language)  # the groups that joined so far
    if resolved is not None:
        text = escape("Regressed: ") + text
    delivery = _send_once(inv, c, aim, guard, claimed, text, blocks, in_thread_of)
    # A reply under the incident's message is the group's own message (its count is rewritten
    # there); a recurrence's reply in the group's old thread is not.
    own = in_thread_of if placed.reply_to is None else None
    result = _record(inv, c, guard, delivery, text, blocks, trace=options.trace_in_thread,
                     in_thread_of=own)  # fmt: skip
    if placed.incident is not None:
        incident_posted(c, placed.incident, placed.post, delivery, aim.channel)
    if resolved is not None and group is not None:
        triage.regressed(c.r, group.fingerprint)
    if second_chance and delivery.ts and c.reanalyze_later is not None:
        posted = Posted(channel=delivery.channel, ts=delivery.ts)
        c.reanalyze_later(inv.model_copy(update={"revises": posted}).model_dump(mode="json"))
    return result


def _send_once(
    inv: Investigation,
    c: Courier,
    aim: Target,
    guard: str,
    claimed: claims.Claimed | claims.Pending | claims.Sent,
    text: str,
    blocks: list[dict[str, Any]],
    in_thread_of: str | None,
) -> Delivery:
    """Post under the claim — or find the post of a run that claimed it and died."""
    notifier = aim.notifier
    try:
        return claims.post_once(
            c.r,
            keys.notified(guard),
            claimed,
            notifier,
            lambda: notifier.send(text, blocks, thread_ts=in_thread_of, claim=guard),
            timing=c.timing,
            tag=guard,
            thread_ts=in_thread_of,
            before_send=lambda: take_slot(c.r, aim.channel, c.policy.pace_s),
        )
    except PermanentError as exc:
        return _keep_refused(inv, text, blocks, str(exc), c)


def _muted(inv: Investigation, c: Courier, guard: str, quiet: triage.Muted) -> Notification:
    """A muted group's analysis (its chain started before the mute): kept, not posted."""
    log.info("notify.muted", extra={"event_id": inv.event.id, "until_ms": quiet.until_ms})
    text, blocks = build_message(inv, message_options(c, inv, None))
    return _keep_result(inv, c, guard, Delivery("muted"), text, blocks)


def _revise(inv: Investigation, c: Courier) -> Notification:
    """A second analysis — of a degraded message, or asked for with "Analyze again": the
    message rewritten in place (chat.update) with the new analysis, once."""
    assert inv.revises is not None
    guard = claim_id(inv) + ":revision"
    # chat.update is safe to repeat: a run that meets another's claim rewrites too.
    claimed = claims.take(c.r, keys.notified(guard), c.timing)
    if isinstance(claimed, claims.Done):
        return Notification.model_validate_json(claimed.value)
    group = inv.group
    state = c.groups.state(group.fingerprint) if group else None
    owners = target(c, inv).owners  # the rewrite keeps the mention (of the new top file)
    text, blocks = build_message(inv, message_options(c, inv, state, owners))
    blocks = dressed(c, inv, blocks)
    if group is not None:
        activity = actions.activity_lines(c.r, group.fingerprint)
        blocks = actions.with_blocks(blocks, activity=activity, picker=[])
    posted = inv.revises
    try:
        take_slot(c.r, pace_key(c, posted.channel), c.policy.pace_s)
        c.notifier.update(posted.channel or c.policy.channel, posted.ts, text, blocks)
    except PermanentError as exc:  # the message is gone (deleted): say so, keep the result
        log.warning("notify.revision_refused", extra={"ts": posted.ts, "reason": str(exc)})
    except BaseException:
        release(c, guard)
        raise
    delivery = Delivery(c.notifier.destination, channel=posted.channel, ts=posted.ts)
    return _record(inv, c, guard, delivery, text, blocks, trace=False, in_thread_of=None)


def claim_second_chance(r: redis.Redis, inv: Investigation) -> bool:
    """The one re-analysis of this message may start (SET NX on its claim)."""
    return bool(r.set(keys.second_chance(claim_id(inv)), "1", nx=True, ex=NOTIFIED_TTL))


def _record(
    inv: Investigation,
    c: Courier,
    guard: str,
    delivery: Delivery,
    text: str,
    blocks: list[dict[str, Any]],
    *,
    trace: bool,
    in_thread_of: str | None,
) -> Notification:
    """What was posted: the trace's thread reply, the group's message for count updates, and
    the result under the claim, which answers every later run."""
    group = inv.group
    if trace and delivery.ts and delivery.destination == "slack":
        c.reply_later(
            delivery.ts,
            trace_reply(inv, c.policy.language),
            f"{delivery.ts}:trace",
            delivery.channel,
        )
    if group and delivery.ts and in_thread_of is None:
        c.groups.set_message(
            group.fingerprint, group.window_start, delivery.channel, delivery.ts, text, blocks
        )
        # The actions on this message find its group (and case) from the message itself.
        c.r.set(
            keys.slack_message(delivery.channel or "", delivery.ts),
            group.fingerprint,
            ex=NOTIFIED_TTL * 4,
        )
        remember_case(c.r, group.fingerprint, inv)
        if c.policy.memory_days:  # what a later group that reads like this one will say
            memory.remember(c.r, inv, channel=delivery.channel, ts=delivery.ts,
                            ttl_s=c.policy.memory_days * 86400)  # fmt: skip
        if inv.revises is None:  # a new message: the last one's "who did what" is not its
            c.r.delete(keys.group_activity(group.fingerprint))
    return _keep_result(inv, c, guard, delivery, text, blocks)


def _keep_result(
    inv: Investigation,
    c: Courier,
    guard: str,
    delivery: Delivery,
    text: str,
    blocks: list[dict[str, Any]],
) -> Notification:
    """The result under the claim, which answers every later run of this delivery."""
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
    )
    claims.record(c.r, keys.notified(guard), result.model_dump_json())
    return result
