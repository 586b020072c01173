"""Everything delivery touches (the ``Courier``), where a message goes (``target``: routing
and owners) and when (``take_slot``: one post per channel and pace)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from shared.core import keys
from shared.core.domain import Investigation
from shared.groups.store import GroupStore
from shared.index.owners import OwnersStore, owners_of
from shared.notify import claims
from shared.notify.mentions import mentions
from shared.notify.message import top_path
from shared.notify.notifiers import Notifier, SlackBotNotifier, SlackWebhookNotifier
from shared.notify.routing import Route, Routing


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
    memory_days: int = 0  # delivered groups are remembered this long (0: not at all)


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


def release(c: Courier, guard: str) -> None:
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
