"""Exactly-once posts: a claim in Redis before a post, and the post marked with it in Slack.

A post's claim key (``keys.notified`` for a group's message, ``keys.replied`` for a thread
reply) moves through these values:

- ``posting:<ms>``: a run took the claim at ``<ms>`` (Redis time) and is posting, or died
  doing it;
- ``unanswered:<ms>:<gave up ms>``: the post sent after ``<ms>`` got no answer (a timeout, a
  reset connection): it may be in the channel, and no run is posting it;
- ``sent:<delivery JSON>``: Slack took the post; its run may have died before recording it;
- anything else: what the posting run recorded, which answers every later run.

A run that meets ``posting`` or ``unanswered`` looks at the newest page of the channel (or the
thread) since the claim was taken: the post is often there already. Otherwise it waits until
the claim is ready — stale, for ``posting`` (its run is over); a few seconds after the post
was given up, for ``unanswered`` (Slack may still be taking it). Then it reads the whole
window, from the claim's time to the stale bound, one page at a time — the page reached is
kept in Redis, so a lookup rate-limited to a request a minute (Slack's limit for apps outside
its Marketplace) resumes where it stopped — and posts only when the post is not there.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from shared.core import keys
from shared.core.errors import PermanentError, TransientError
from shared.notify.notifiers import Delivery, Notifier, Window

log = logging.getLogger(__name__)

CLAIM_TTL = 7 * 24 * 3600  # how long a claim's result answers a redelivered task
POSTING = "posting:"
UNANSWERED = "unanswered:"
SENT = "sent:"
# Slack stamps a message with its own clock, the claim carries Redis's: NTP keeps the two
# within a second or so; the margin covers a badly kept host.
CLOCK_SKEW_S = 30.0

# Swap the claim from the value a run found to its own, only if nobody else did meanwhile.
_TAKE_OVER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  return 1
end
return 0
"""


class ClaimHeld(Exception):
    """Another run of this post holds the claim: try again once it has resolved."""


@dataclass(frozen=True)
class Timing:
    """How long a claim's states last."""

    stale_s: float  # a run that took the claim this long ago is over (its task's limit)
    settle_s: float = 10.0  # Slack may still take an unanswered post this long after


@dataclass(frozen=True)
class Claimed:
    """This run may post; ``since_ms`` is when it took the claim."""

    since_ms: int


@dataclass(frozen=True)
class Pending:
    """Another run claimed the post at ``since_ms`` and recorded no result: it is posting
    (``unanswered`` False) or its post got no answer; it may be looked for from ``ready_ms``."""

    value: str
    since_ms: int
    ready_ms: int
    unanswered: bool


@dataclass(frozen=True)
class Sent:
    """Slack took the post; what follows it was not recorded."""

    delivery: Delivery


@dataclass(frozen=True)
class Done:
    """The result recorded under the claim."""

    value: str


State = Claimed | Pending | Sent | Done


def _now_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def parse(value: str, timing: Timing) -> Pending | Sent | Done:
    """What a claim's value says."""
    if value.startswith(POSTING):
        since = int(value[len(POSTING) :] or 0)
        return Pending(value, since, since + int(timing.stale_s * 1000), unanswered=False)
    if value.startswith(UNANSWERED):
        sent_at, _, gave_up = value[len(UNANSWERED) :].partition(":")
        ready = int(gave_up or sent_at or 0) + int(timing.settle_s * 1000)
        return Pending(value, int(sent_at or 0), ready, unanswered=True)
    if value.startswith(SENT):
        return Sent(Delivery(**json.loads(value[len(SENT) :])))
    return Done(value)


def _sent(delivery: Delivery) -> str:
    return SENT + json.dumps(dataclasses.asdict(delivery))


def take(r: redis.Redis, key: str, timing: Timing) -> State:
    """Claim a post: ``Claimed``, or what the claim already says."""
    now = _now_ms(r)
    if r.set(key, f"{POSTING}{now}", nx=True, ex=CLAIM_TTL):
        return Claimed(now)
    raw = r.get(key)
    if raw is None:  # released between the two calls: try again shortly
        raise ClaimHeld(key)
    return parse(raw.decode() if isinstance(raw, bytes) else str(raw), timing)


def release(r: redis.Redis, key: str) -> None:
    """Nothing was sent: the next run claims afresh."""
    r.delete(key, keys.claim_scan(key))


def record(r: redis.Redis, key: str, value: str) -> None:
    """The result that answers every later run (it must not start with a state's prefix)."""
    r.set(key, value, ex=CLAIM_TTL)
    r.delete(keys.claim_scan(key))


def post_once(
    r: redis.Redis,
    key: str,
    state: Claimed | Pending | Sent,
    notifier: Notifier,
    send: Callable[[], Delivery],
    *,
    timing: Timing,
    tag: str,
    thread_ts: str | None = None,
    before_send: Callable[[], Any] = lambda: None,
) -> Delivery:
    """Post under the claim — or find the post of a run that claimed it and died, or whose
    post got no answer. ``send`` posts with ``tag`` in the message's metadata;
    ``before_send`` takes the channel's slot (when it raises, the claim is released: nothing
    was sent). ``ClaimHeld`` while another run may still be posting."""
    if isinstance(state, Sent):
        return state.delivery
    since = state.since_ms
    if isinstance(state, Pending):
        ready = _now_ms(r) >= state.ready_ms
        found = look_for(r, key, notifier, tag, thread_ts, state.since_ms, timing, whole=ready)
        if found is not None:
            r.set(key, _sent(found), ex=CLAIM_TTL)
            return found
        if not ready:
            raise ClaimHeld(key)
        since = _now_ms(r)
        mine = f"{POSTING}{since}"
        if not r.register_script(_TAKE_OVER)(keys=[key], args=[state.value, mine, CLAIM_TTL]):
            raise ClaimHeld(key)  # another run took it over first
    try:
        before_send()
    except BaseException:
        release(r, key)
        raise
    try:
        delivery = send()
    except TransientError as exc:
        if exc.maybe_done:  # it may be in the channel: the next run looks before posting
            r.set(key, f"{UNANSWERED}{since}:{_now_ms(r)}", ex=CLAIM_TTL)
        else:  # Slack answered with an error: it did not post
            release(r, key)
        raise
    r.set(key, _sent(delivery), ex=CLAIM_TTL)
    return delivery


def look_for(
    r: redis.Redis,
    key: str,
    notifier: Notifier,
    tag: str,
    thread_ts: str | None,
    since_ms: int,
    timing: Timing,
    *,
    whole: bool = True,
) -> Delivery | None:
    """The post tagged ``tag`` that a run sent after ``since_ms``: the ``whole`` window read
    page by page from where an earlier lookup stopped (a rate limit, ``TransientError``,
    keeps the place), else only its newest page (the post may still be on its way)."""
    progress = keys.claim_scan(key)
    saved = r.get(progress) if whole else None
    start = since_ms / 1000
    window = (
        Window.load(saved.decode() if isinstance(saved, bytes) else str(saved))
        if saved
        else Window(start - CLOCK_SKEW_S, start + timing.stale_s + CLOCK_SKEW_S)
    )
    while True:
        try:
            step = notifier.find(tag, within=window, thread_ts=thread_ts)
        except PermanentError as exc:
            # Slack will not let us look (a channel the bot cannot read): post again rather
            # than never — a duplicate is better than a lost message.
            log.error("claim.lookup_refused", extra={"claim": tag, "reason": str(exc)})
            r.delete(progress)
            return None
        if not isinstance(step, Window):
            if whole:
                r.delete(progress)
            return step
        if not whole:
            return None
        window = step
        r.set(progress, window.dump(), ex=CLAIM_TTL)
