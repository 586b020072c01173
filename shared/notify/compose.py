"""A message as a courier sends it: its options (links, occurrences, owners, language) and
what a Slack app adds to it ("Regressed" on top, the buttons)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from shared.core.domain import Investigation
from shared.groups import triage
from shared.groups.store import GroupState
from shared.notify import actions
from shared.notify.courier import Courier
from shared.notify.message import MAX_BLOCKS, MessageOptions
from shared.notify.policy import occurrences_of


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
