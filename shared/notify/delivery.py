"""Delivery policy: one message per group and window, paced per channel, never dropped.

The notify tasks (workers/tasks/delivery.py) only unpack and call these functions:

- ``deliver``: claim the group window (SET NX), build the message, take the channel's posting
  slot, post (or reply in the first message's thread when ``thread_only`` and the group
  recurs after its window), keep a refused message in the console file, record the message
  so repeats can update its count, and record the result under the claim. The post carries
  the claim in its Slack metadata: a run that finds the claim taken by a poster that crashed,
  or whose post timed out, looks for that message in the channel before posting again, so a
  crash between Slack accepting a post and tracehound recording it never posts twice.
- ``update_counts``: rewrite the count on a group's message, and at most one "still
  happening" thread reply per interval.
- ``post_reply``: one thread reply, once per key, under the same claim discipline as the
  message (shared/notify/claims.py): a worker killed while Slack takes the reply never
  leads to a second one.

Exceptions tell the task what to do: ``Paced`` and ``ClaimHeld`` mean "come back shortly",
``MessageNotOut`` "come back after the interval", ``TransientError`` "retry with backoff".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis

from shared.core import keys
from shared.core.domain import (
    EMBED_FAILED,
    NO_RERANK_BACKEND,
    RERANK_UNAVAILABLE,
    GroupRef,
    Investigation,
    Notification,
    Posted,
)
from shared.core.errors import PermanentError, TransientError
from shared.groups import incidents, triage
from shared.groups.store import GroupState, GroupStore
from shared.index.owners import OwnersStore, owners_of
from shared.notify import actions, claims
from shared.notify.claims import ClaimHeld
from shared.notify.feedback import remember_case
from shared.notify.mentions import mentions
from shared.notify.message import (
    MAX_BLOCKS,
    MessageOptions,
    Occurrences,
    build_message,
    escape,
    top_files,
    top_path,
    trace_reply,
    with_incident,
    with_occurrences,
)
from shared.notify.notifiers import Delivery, Notifier, SlackBotNotifier, SlackWebhookNotifier
from shared.notify.routing import Route, Routing

log = logging.getLogger(__name__)

NOTIFIED_TTL = claims.CLAIM_TTL  # how long a sent message's record answers a redelivered task


class Paced(Exception):
    """The channel's posting slot is taken: try again in about a second."""


class MessageNotOut(Exception):
    """The group's message for this window is not posted yet (its analysis still runs)."""


@dataclass(frozen=True)
class DeliveryPolicy:
    """The settings delivery follows (from TRACEHOUND_* via workers/context.py)."""

    channel: str  # what pacing is keyed on: the Slack channel, webhook URL, or "console"
    pace_s: float = 1.0
    thread_only: bool = False
    update_interval_s: float = 60.0
    repo_url_template: str | None = None
    min_relevance: float = 0.0
    language: str = "en"  # of the message's fixed strings (shared/notify/phrases.py)
    claim_ttl_s: int = 90  # a crashed run's claim frees the window after this
    # A post that got no answer is looked for this long after giving up on it (Slack may
    # still be taking it), then posted again only if it is not in the channel.
    claim_settle_s: float = 10.0
    actions: bool = False  # buttons on the message (a Slack app receives them)


@dataclass
class Courier:
    """Everything delivery touches, built once per worker process."""

    r: redis.Redis
    groups: GroupStore
    notifier: Notifier
    console: Notifier  # where a refused message is kept
    policy: DeliveryPolicy
    # (thread_ts, text, key, channel) -> enqueued; channel: the one the thread is in
    reply_later: Callable[[str, str, str, str | None], object]
    on_fallback: Callable[[str], None] = field(default=lambda stage: None)
    # A degraded message's second chance: the investigation (JSON) to analyse again later.
    reanalyze_later: Callable[[dict[str, Any]], object] | None = None
    routing: Routing = field(default_factory=Routing)  # TRACEHOUND_ROUTING's rules
    owners: OwnersStore | None = None  # CODEOWNERS as the indexer recorded them
    # An incident's list to rewrite shortly (shared/notify/incident.py).
    refresh_incident_later: Callable[[str], object] | None = None

    def __post_init__(self) -> None:
        self._routed: dict[str, Notifier] = {}

    @property
    def timing(self) -> claims.Timing:
        return claims.Timing(self.policy.claim_ttl_s, self.policy.claim_settle_s)

    def notifier_in(self, channel: str | None) -> Notifier:
        """The notifier posting to ``channel`` (the default one for None, a webhook or the
        console: they have one destination only)."""
        if not channel or not isinstance(self.notifier, SlackBotNotifier):
            return self.notifier
        if channel == self.notifier.channel:
            return self.notifier
        if channel not in self._routed:
            self._routed[channel] = self.notifier.in_channel(channel)
        return self._routed[channel]

    def notifier_for(self, route: Route | None) -> Notifier:
        if route is None:
            return self.notifier
        if route.webhook is not None:
            if route.webhook not in self._routed:
                self._routed[route.webhook] = SlackWebhookNotifier(route.webhook)
            return self._routed[route.webhook]
        return self.notifier_in(route.channel)


@dataclass(frozen=True)
class Target:
    """Where one message goes: its notifier, the channel its pacing is keyed on, and the
    owners' mentions (mrkdwn built by tracehound)."""

    notifier: Notifier
    channel: str
    owners: str = ""


def target(c: Courier, inv: Investigation) -> Target:
    """The first matching routing rule's channel (else the default) and the owners of the top
    cited file (CODEOWNERS) with the rule's owners."""
    path = top_path(inv)
    route = c.routing.route(inv.event.service, path)
    code_owners: tuple[str, ...] = ()
    if c.owners is not None and path is not None:
        code_owners = owners_of(c.owners.rules(inv.event.repo), path)
    named = mentions([*code_owners, *(route.owners if route else ())], c.routing.owners)
    if route is None:
        return Target(c.notifier, c.policy.channel, named)
    return Target(c.notifier_for(route), route.target, named)


# --- pure decisions ---------------------------------------------------------------------------

SECOND_CHANCE_NOTE = (
    "analysis: this message will be analysed again, and updated here, if the model host "
    "answers again within the group window"
)


def needs_second_chance(inv: Investigation) -> bool:
    """A message that degraded because a model host was out of reach — the LLM failed, the
    query could not be embedded, the reranker was down — gets one more analysis later (not a
    message that is already that second analysis, nor one without a rerank server at all)."""
    if inv.revises is not None:
        return False
    a = inv.analysis
    if a is not None and a.degraded and (a.degraded_reason or "").startswith("LLM failed"):
        return True
    return any(
        n.startswith(EMBED_FAILED)
        or (n.startswith(RERANK_UNAVAILABLE) and NO_RERANK_BACKEND not in n)
        for n in inv.notes
    )


def claim_id(inv: Investigation) -> str:
    """What is delivered once: the group's window, or the event itself without a group (an
    "Analyze again" run: once per press)."""
    if inv.rerun is not None:
        return f"rerun:{inv.rerun}"
    group = inv.group
    return f"{group.fingerprint}:{group.window_start}" if group else inv.event.id


def thread_target(
    group: GroupRef | None, state: GroupState | None, thread_only: bool
) -> str | None:
    """The first message's ts when a recurrence after its window should reply in its thread."""
    if not (group and state and thread_only and state.msg_ts):
        return None
    return state.msg_ts if state.msg_window != group.window_start else None


def occurrences_of(state: GroupState | None) -> Occurrences | None:
    if state is None:
        return None
    return Occurrences(state.window_count, state.first_seen, state.last_seen)


def message_options(
    c: Courier, inv: Investigation, state: GroupState | None, owners: str = ""
) -> MessageOptions:
    return MessageOptions(
        repo_url_template=c.policy.repo_url_template,
        min_relevance=c.policy.min_relevance,
        occurrences=occurrences_of(state),
        trace_in_thread=c.notifier.destination == "slack" and bool(inv.event.stacktrace.strip()),
        language=c.policy.language,
        owners=owners,
    )


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("on %Y-%m-%d at %H:%M UTC")


def dressed(
    c: Courier,
    inv: Investigation,
    blocks: list[dict[str, Any]],
    resolved: triage.Resolved | None = None,
) -> list[dict[str, Any]]:
    """The message's blocks with what a Slack app adds: "Regressed" on top when the group was
    resolved, and the buttons at the bottom."""
    group = inv.group
    if resolved is not None:
        head = actions.regressed_block(resolved.by, _when(resolved.at_ms), resolved.link)
        blocks = [*blocks[:1], head, *blocks[1:]]
    if c.policy.actions and group is not None and c.notifier.destination == "slack":
        blocks = [*blocks, actions.buttons_block(group.fingerprint)]
    return blocks[:MAX_BLOCKS]


def reply_due(state: GroupState, now_ms: int, interval_s: float) -> bool:
    """A "still happening" thread reply is due once per interval."""
    return state.thread_reply_at is None or now_ms - state.thread_reply_at >= interval_s * 1000


def still_happening(count: int) -> str:
    return escape(f"Still happening: {count:,} occurrences in this window, the latest just now.")


# --- Redis-backed steps -----------------------------------------------------------------------


def _release(c: Courier, guard: str) -> None:
    claims.release(c.r, keys.notified(guard))


def pace_key(c: Courier, channel: str | None) -> str:
    """What a message already posted (its count update, thread reply, rewrite) is paced on:
    the channel it is in. Without routing every message is in the default channel, keyed as
    its posts are (``policy.channel``, perhaps a ``#name`` where Slack answers with the id)."""
    return channel if channel and c.routing.rules else c.policy.channel


def take_slot(r: redis.Redis, channel: str, pace_s: float) -> None:
    """Hold the channel's posting slot for ``pace_s``, or raise ``Paced``."""
    pace_ms = int(pace_s * 1000)
    if pace_ms > 0 and not r.set(keys.slack_pace(channel), "1", nx=True, px=pace_ms):
        raise Paced(channel)


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
        placed = _incident_place(c, group.fingerprint, aim.channel, guard)
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
        _incident_posted(c, placed.incident, placed.post, delivery, aim.channel)
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


def _incident_posted(
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


def _incident_place(c: Courier, fingerprint: str, channel: str, guard: str) -> Placed:
    """``ClaimHeld`` while another member is posting the incident's message."""
    incident = incidents.incident_of(c.r, fingerprint)
    if incident is None:
        return Placed()
    where = incidents.place(
        c.r, incident, fingerprint, now_ms=c.groups.now_ms(), stale_s=c.policy.claim_ttl_s
    )
    if isinstance(where, incidents.Wait):
        _release(c, guard)  # nothing was sent
        raise ClaimHeld(guard)
    if isinstance(where, incidents.Post):
        return Placed(incident, post=True)
    if where.ts != incidents.NO_THREAD and where.target == channel:
        return Placed(incident, reply_to=where.ts)
    return Placed(incident)


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
        _release(c, guard)
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


__all__ = [
    "ClaimHeld",
    "Courier",
    "DeliveryPolicy",
    "MessageNotOut",
    "Paced",
    "TransientError",
    "deliver",
    "post_reply",
    "update_counts",
]
