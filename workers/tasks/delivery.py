"""Delivery to Slack: the analysis message once per group and window, then its count updates.

``notify`` [notify] is the chain's last stage. ``update_group`` [notify] runs at most once per
group and interval (scheduled by shared/groups/submit.py for repeats): it rewrites the
message's occurrence count and posts at most one thread reply per interval. ``thread_reply``
[notify] posts one reply; ``update_incident`` [notify] rewrites an incident's list of groups.
The policy is in shared/notify/ (delivery.py, counts.py, replies.py); these tasks turn its
answers into retries: a paced channel or a held claim comes back shortly, a transient Slack
failure waits as long as it takes, a permanent refusal keeps the message in the console file.
"""

from __future__ import annotations

from typing import Any

from shared.core import queues as q
from shared.core.domain import Investigation
from shared.core.errors import TransientError
from shared.core.pipeline import enqueue_error
from shared.models.health import model_hosts_answer
from shared.notify.claims import ClaimHeld
from shared.notify.counts import update_counts
from shared.notify.courier import MessageNotOut, Paced
from shared.notify.delivery import claim_second_chance, deliver
from shared.notify.incident import refresh
from shared.notify.replies import post_reply
from workers import context
from workers.app import app, task_options
from workers.retry import retry, visit


def paced_retry_s() -> float:
    """The channel's slot frees within one pace interval (1 s for Slack): try again then."""
    return context.settings().slack_pace


CLAIM_RETRY_S = 5  # another run of the same delivery is posting it
MESSAGE_WAIT_RETRIES = 30  # intervals a count update waits for its message's analysis


@app.task(**task_options(q.NOTIFY, retry_forever=True))
def notify(self: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """Post the message once per group and window (per event without a group)."""
    inv = Investigation.model_validate(payload).visited(*visit(self))
    try:
        return deliver(inv, context.clients().courier).model_dump(mode="json")
    except Paced:
        raise self.retry(countdown=paced_retry_s()) from None
    except ClaimHeld:
        raise self.retry(countdown=CLAIM_RETRY_S) from None
    except TransientError as exc:
        raise retry(self, exc, forever=True) from exc  # nothing dropped: wait for Slack


@app.task(**task_options(q.THREAD_REPLY, retry_forever=True))
def thread_reply(
    self: Any, thread_ts: str, text: str, key: str, channel: str | None = None
) -> dict[str, Any]:
    """One reply in a message's thread, paced like every post; posted once per ``key``."""
    try:
        posted = post_reply(thread_ts, text, key, context.clients().courier, channel)
    except Paced:
        raise self.retry(countdown=paced_retry_s()) from None
    except TransientError as exc:
        raise retry(self, exc, forever=True) from exc
    return {"thread_ts": thread_ts, "posted": posted}


@app.task(**task_options(q.REANALYZE))
def reanalyze(self: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """A degraded message's second chance: once the model host answers, analyse again."""
    inv = Investigation.model_validate(payload)
    ctx = context.clients()
    s = ctx.settings
    if not model_hosts_answer(
        ctx.model_http, [s.llm_base_url, s.embed_base_url], ctx.reranker, inv.fallbacks
    ):
        attempts = max(1, int(s.group_window // s.reanalyze_after))  # while the window lasts
        if self.request.retries >= attempts:
            return {"event_id": inv.event.id, "reanalysed": False}
        raise self.retry(countdown=s.reanalyze_after, max_retries=attempts)
    if not claim_second_chance(ctx.redis, inv):
        return {"event_id": inv.event.id, "reanalysed": False}  # started before
    enqueue_error(app, inv.event, inv.group, revises=inv.revises)
    return {"event_id": inv.event.id, "reanalysed": True}


@app.task(**task_options(q.UPDATE_GROUP, retry_forever=True))
def update_group(self: Any, fingerprint: str) -> dict[str, Any]:
    """Repeats of a group: rewrite the count on its message, one thread reply per interval."""
    courier = context.clients().courier
    try:
        count = update_counts(fingerprint, courier)
    except Paced:
        raise self.retry(countdown=paced_retry_s()) from None
    except MessageNotOut:
        if self.request.retries >= MESSAGE_WAIT_RETRIES:
            return {"fingerprint": fingerprint, "updated": False}
        raise self.retry(
            countdown=courier.policy.update_interval_s, max_retries=MESSAGE_WAIT_RETRIES
        ) from None
    except TransientError as exc:
        raise retry(self, exc, forever=True) from exc
    if count is None:
        return {"fingerprint": fingerprint, "updated": False}
    return {"fingerprint": fingerprint, "updated": True, "count": count}


@app.task(**task_options(q.UPDATE_INCIDENT, retry_forever=True))
def update_incident(self: Any, incident: str) -> dict[str, Any]:
    """An incident's list of groups rewritten on its message (shared/notify/incident.py)."""
    try:
        shown = refresh(incident, context.clients().courier)
    except Paced:
        raise self.retry(countdown=paced_retry_s()) from None
    except MessageNotOut:
        if self.request.retries >= MESSAGE_WAIT_RETRIES:
            return {"incident": incident, "updated": False}
        raise self.retry(countdown=CLAIM_RETRY_S, max_retries=MESSAGE_WAIT_RETRIES) from None
    except TransientError as exc:
        raise retry(self, exc, forever=True) from exc
    return {"incident": incident, "updated": shown is not None, "groups": shown}
