"""Applying a button pressed in Slack: group state in Redis, a labelled case, the message
rewritten to say who did what (the ``slack_action`` task, workers/tasks/actions.py).

The action names the message it was pressed on, as Slack signed it; the group is the one
tracehound recorded for that message when it posted it. A button whose value names another
group is refused. Each press is safe to apply twice (Slack or Celery may deliver it again):
state is set, not toggled, and the one-off effects (closing the window on Resolve, a new
analysis) are guarded by the press's key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis

from shared.core import keys
from shared.core.domain import GroupRef, Investigation, Posted
from shared.core.errors import PermanentError
from shared.groups import memory, triage
from shared.groups.store import GroupStore
from shared.notify import actions, feedback
from shared.notify.actions import Action, mention
from shared.notify.courier import DeliveryPolicy, take_slot
from shared.notify.message import escape
from shared.notify.notifiers import Notifier

log = logging.getLogger(__name__)

MUTE_S = 24 * 3600
ACTION_TTL_S = 7 * 24 * 3600
BUTTON_KINDS = frozenset(
    {actions.RIGHT_FILE, actions.WRONG_FILE, actions.MUTE, actions.RESOLVE, actions.ANALYZE_AGAIN}
)


@dataclass
class Responder:
    """Everything applying an action touches, built once per worker process."""

    r: redis.Redis
    groups: GroupStore
    notifier: Notifier
    policy: DeliveryPolicy
    rerun: Callable[[Investigation], object]  # enqueue the analysis chain
    code_version: Callable[[str], str | None]  # repo -> the commit its index holds
    mute_s: int = MUTE_S
    routed: bool = False  # messages may be in other channels than the default (routing)
    rerun_interval_s: float = 300.0  # one "Analyze again" per group within it


def _s(value: object) -> str | None:
    return value.decode() if isinstance(value, bytes) else (value if value is None else str(value))


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _once(rs: Responder, action: Action) -> bool:
    return bool(rs.r.set(keys.action_done(action.key), "1", nx=True, ex=ACTION_TTL_S))


def respond(action: Action, rs: Responder) -> str:
    """Apply one action; what became of it (``done``, ``unknown_message``, ``refused``...).
    Raises ``Paced`` or ``TransientError`` when the message update should be retried."""
    fp = _s(rs.r.get(keys.slack_message(action.channel, action.message_ts)))
    if fp is None:
        log.info("slack.action_unknown_message", extra={"ts": action.message_ts})
        return "unknown_message"
    if action.kind in BUTTON_KINDS and action.value != fp:
        log.warning("slack.action_refused", extra={"ts": action.message_ts, "kind": action.kind})
        return "refused"
    case = feedback.group_case(rs.r, fp)
    now = rs.groups.now_ms()
    who = mention(action.user)
    picker: list[dict[str, Any]] | None = None
    if action.kind in (actions.RIGHT_FILE, actions.PICK_FILE, actions.TYPE_PATH):
        gold = _gold(action, case)
        if gold is None or case is None:
            log.info("slack.action_no_file", extra={"ts": action.message_ts})
            return "refused"
        answer = "right" if action.kind == actions.RIGHT_FILE else "wrong"
        version = rs.code_version(case.event.repo) or "live"
        record = feedback.labelled_case(
            fp, case, gold, answer=answer, by=action.user, at_ms=now, version=version[:12]
        )
        feedback.store(rs.r, record)
        verb = "confirmed" if answer == "right" else "says the right file is"
        kind, line, picker = "file", f":white_check_mark: {who} {verb} `{escape(gold)}`", []
    elif action.kind == actions.WRONG_FILE:
        files = case.files if case else []
        top = f"`{escape(files[0])}`" if files else "the file shown"
        kind, line = "file", f":x: {who} says {top} is not it: which file is?"
        picker = actions.picker_blocks(fp, files)
    elif action.kind == actions.MUTE:
        muted = triage.mute(rs.r, fp, action.user, now_ms=now, seconds=rs.mute_s)
        kind, line = "mute", f":no_bell: Muted by {who} until {_utc(muted.until_ms)}"
    elif action.kind == actions.RESOLVE:
        if _once(rs, action):
            link = rs.notifier.permalink(action.channel, action.message_ts)
            resolved = triage.Resolved(action.user, now, action.channel, action.message_ts, link)
            triage.resolve(rs.r, fp, resolved)
            rs.r.hdel(keys.group_activity(fp), "mute")
            # For a later group that reads like this one: who, the code it was resolved at.
            commit = rs.code_version(case.event.repo) if case else None
            memory.note_resolved(rs.r, fp, by=action.user, at_ms=now, commit=commit, link=link)
        kind, line = "resolve", f":heavy_check_mark: Resolved by {who} on {_utc(now)}"
    elif action.kind == actions.ANALYZE_AGAIN:
        if case is None:
            return "refused"
        kind, line = "rerun", f":arrows_counterclockwise: {who} asked for a new analysis"
        if not _press_rerun(rs, action, fp, case):
            minutes = max(1, round(rs.rerun_interval_s / 60))
            line = (
                f":hourglass: {who} asked for a new analysis: one runs at most every "
                f"{minutes} min per group"
            )
    else:
        return "ignored"
    lines = actions.note_activity(rs.r, fp, kind, line)
    log.info("slack.action", extra={"kind": action.kind, "ts": action.message_ts})
    _show(action, fp, lines, picker, rs)
    return "done"


def _gold(action: Action, case: feedback.GroupCase | None) -> str | None:
    files = case.files if case else []
    if action.kind == actions.RIGHT_FILE:
        return files[0] if files else None
    if action.kind == actions.PICK_FILE:
        i = int(action.value) if action.value.isdigit() else -1
        return files[i] if 0 <= i < len(files) else None
    return actions.clean_path(action.value)


def _press_rerun(rs: Responder, action: Action, fp: str, case: feedback.GroupCase) -> bool:
    """Run the analysis again for this press, once: whether it ran (False: the group ran one
    within the interval — each is a fresh, uncached LLM call). The first application's
    answer is kept for its retries (a paced rewrite applies the press again)."""
    done = keys.action_done(action.key)
    if not rs.r.set(done, "pending", nx=True, ex=ACTION_TTL_S):
        return _s(rs.r.get(done)) != "limited"
    interval_ms = int(rs.rerun_interval_s * 1000)
    ran = interval_ms <= 0 or bool(rs.r.set(keys.rerun_limit(fp), "1", nx=True, px=interval_ms))
    if ran:
        _rerun(action, fp, case, rs)
    rs.r.set(done, "ran" if ran else "limited", ex=ACTION_TTL_S)
    return ran


def _rerun(action: Action, fp: str, case: feedback.GroupCase, rs: Responder) -> None:
    state = rs.groups.state(fp)
    window = (state.msg_window or state.window_start) if state else 0
    inv = Investigation(
        event=case.event,
        group=GroupRef(fingerprint=fp, window_start=window),
        revises=Posted(channel=action.channel, ts=action.message_ts),
        rerun=keys.action_done(action.key).rsplit(":", 1)[-1],
    )
    rs.rerun(inv)


def _show(
    action: Action,
    fp: str,
    lines: list[str],
    picker: list[dict[str, Any]] | None,
    rs: Responder,
) -> None:
    """Rewrite the message with who did what (only the group's current message: an older
    one's blocks are not kept)."""
    state = rs.groups.state(fp)
    message = rs.groups.message(fp)
    if state is None or message is None or state.msg_ts != action.message_ts:
        log.info("slack.action_old_message", extra={"ts": action.message_ts})
        return
    blocks = actions.with_blocks(message["blocks"], activity=lines, picker=picker)
    # Paced on the message's own channel (see delivery.pace_key).
    channel = action.channel if rs.routed and action.channel else rs.policy.channel
    take_slot(rs.r, channel, rs.policy.pace_s)
    try:
        rs.notifier.update(action.channel, action.message_ts, message["text"], blocks)
    except PermanentError as exc:  # the message is gone: the state change stands
        log.warning("slack.action_update_refused", extra={"reason": str(exc)})
        return
    window = state.msg_window if state.msg_window is not None else state.window_start
    rs.groups.set_message(fp, window, action.channel, action.message_ts, message["text"], blocks)


__all__ = ["Responder", "respond"]
