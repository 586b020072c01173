"""The buttons on a group's message and the actions Slack sends back when they are pressed.

Block and action ids are a contract with messages already in channels: they never change.
An action is trusted only as far as Slack's signature goes: the message it was pressed on
(``container``) and the user who pressed it. The group is looked up from that message
(shared/notify/respond.py), never taken from a button's value alone; a picked file is an
index into the files the message showed, and a typed path is plain text shown escaped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import redis

from shared.core import keys
from shared.notify.message import escape

BUTTONS_BLOCK = "th-actions"
ACTIVITY_BLOCK = "th-activity"
PICK_BLOCK = "th-pick"
PATH_BLOCK = "th-pick-path"
REGRESSED_BLOCK = "th-regressed"

RIGHT_FILE = "th_right_file"
WRONG_FILE = "th_wrong_file"
MUTE = "th_mute"
RESOLVE = "th_resolve"
ANALYZE_AGAIN = "th_analyze_again"
PICK_FILE = "th_pick_file"
TYPE_PATH = "th_type_path"
KINDS = frozenset({RIGHT_FILE, WRONG_FILE, MUTE, RESOLVE, ANALYZE_AGAIN, PICK_FILE, TYPE_PATH})

MAX_PATH = 300
MAX_OPTIONS = 100  # Slack's limit for a static_select
_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,20}$")
_TS = re.compile(r"^\d{1,12}\.\d{1,8}$")


def mention(user_id: str) -> str:
    """A Slack mention built here from a checked id; anything else is "someone", never text
    from the payload."""
    return f"<@{user_id}>" if _USER_ID.match(user_id) else "someone"


def _button(text: str, action_id: str, value: str, style: str | None = None) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": text},
        "value": value,
    }
    if style:
        button["style"] = style
    return button


def buttons_block(fingerprint: str) -> dict[str, Any]:
    """Right file / Wrong file / Mute 24 h / Resolve / Analyze again."""
    return {
        "type": "actions",
        "block_id": BUTTONS_BLOCK,
        "elements": [
            _button("Right file", RIGHT_FILE, fingerprint, "primary"),
            _button("Wrong file", WRONG_FILE, fingerprint),
            _button("Mute 24 h", MUTE, fingerprint),
            _button("Resolve", RESOLVE, fingerprint),
            _button("Analyze again", ANALYZE_AGAIN, fingerprint),
        ],
    }


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def picker_blocks(fingerprint: str, files: list[str]) -> list[dict[str, Any]]:
    """After "Wrong file": choose the right one among the files shown, or type its path."""
    blocks: list[dict[str, Any]] = []
    if files:
        options = [
            {"text": {"type": "plain_text", "text": _clip(path, 75)}, "value": str(i)}
            for i, path in enumerate(files[:MAX_OPTIONS])
        ]
        blocks.append(
            {
                "type": "actions",
                "block_id": PICK_BLOCK,
                "elements": [
                    {
                        "type": "static_select",
                        "action_id": PICK_FILE,
                        "placeholder": {"type": "plain_text", "text": "The right file"},
                        "options": options,
                    }
                ],
            }
        )
    blocks.append(
        {
            "type": "input",
            "block_id": PATH_BLOCK,
            "dispatch_action": True,  # Enter sends the path as a block action
            "label": {"type": "plain_text", "text": "Or type its path in the repo"},
            "element": {
                "type": "plain_text_input",
                "action_id": TYPE_PATH,
                "placeholder": {"type": "plain_text", "text": "src/app/module.py"},
            },
        }
    )
    return blocks


def activity_block(lines: list[str]) -> dict[str, Any]:
    """Who did what on this message (lines built by tracehound, untrusted parts escaped)."""
    return {
        "type": "context",
        "block_id": ACTIVITY_BLOCK,
        "elements": [{"type": "mrkdwn", "text": _clip(line, 3000)} for line in lines[:10]],
    }


ACTIVITY_ORDER = ("file", "mute", "resolve", "rerun")


def note_activity(r: redis.Redis, fp: str, kind: str, line: str) -> list[str]:
    """Record the latest ``kind`` of action on the group's message; every line, in order."""
    r.hset(keys.group_activity(fp), kind, line)
    r.expire(keys.group_activity(fp), 30 * 24 * 3600)
    return activity_lines(r, fp)


def activity_lines(r: redis.Redis, fp: str) -> list[str]:
    raw = {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in r.hgetall(keys.group_activity(fp)).items()
    }
    return [raw[k] for k in ACTIVITY_ORDER if k in raw]


def regressed_block(by: str, when: str, link: str | None) -> dict[str, Any]:
    """The head of a message for a group that recurred after it was resolved."""
    first = f"<{escape(link).replace('|', '%7C')}|first message>" if link else "first message"
    text = f":rotating_light: *Regressed*: resolved by {mention(by)} {when}; see the {first}."
    return {
        "type": "section",
        "block_id": REGRESSED_BLOCK,
        "text": {"type": "mrkdwn", "text": text},
    }


def with_blocks(
    blocks: list[dict[str, Any]],
    *,
    activity: list[str] | None = None,
    picker: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The message's blocks with its activity lines rewritten and its file picker kept
    (``picker=None``) or replaced (``[]`` removes it); both sit just before the buttons."""
    ours = {ACTIVITY_BLOCK, PICK_BLOCK, PATH_BLOCK}
    kept = [b for b in blocks if b.get("block_id") in (PICK_BLOCK, PATH_BLOCK)]
    rest = [b for b in blocks if b.get("block_id") not in ours]
    inserted = [activity_block(activity)] if activity else []
    inserted += kept if picker is None else picker
    at = next((i for i, b in enumerate(rest) if b.get("block_id") == BUTTONS_BLOCK), len(rest))
    return (rest[:at] + inserted + rest[at:])[:50]


@dataclass(frozen=True)
class Action:
    """One pressed button (or picked file) as Slack signed it."""

    kind: str  # one of KINDS
    user: str  # Slack user id
    channel: str
    message_ts: str
    value: str  # the button's value, the picked option's index, or the typed path
    action_ts: str

    @property
    def key(self) -> str:
        """What identifies this press (Slack may deliver it twice)."""
        return f"{self.channel}:{self.message_ts}:{self.user}:{self.kind}:{self.action_ts}"


def parse_actions(payload: dict[str, Any]) -> list[Action]:
    """tracehound's actions in a ``block_actions`` payload (others are ignored)."""
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        return []
    user = payload.get("user") or {}
    container = payload.get("container") or {}
    user_id = str(user.get("id") or "") if isinstance(user, dict) else ""
    channel = str(container.get("channel_id") or "") if isinstance(container, dict) else ""
    ts = str(container.get("message_ts") or "") if isinstance(container, dict) else ""
    if not (_USER_ID.match(user_id) and channel and _TS.match(ts)):
        return []
    found = []
    for a in payload.get("actions") or []:
        if not isinstance(a, dict) or a.get("action_id") not in KINDS:
            continue
        selected = a.get("selected_option")
        if isinstance(selected, dict):
            value = str(selected.get("value") or "")
        else:
            value = str(a.get("value") or "")
        found.append(
            Action(
                kind=str(a["action_id"]),
                user=user_id,
                channel=channel,
                message_ts=ts,
                value=value[: MAX_PATH + 1],
                action_ts=str(a.get("action_ts") or ""),
            )
        )
    return found


def clean_path(typed: str) -> str | None:
    """A typed repo path, or None when it cannot be one (empty, too long, several lines)."""
    path = typed.strip().removeprefix("./").lstrip("/")
    if not path or len(path) > MAX_PATH or any(c in path for c in "\n\r\t\0"):
        return None
    return path


__all__ = [
    "ACTIVITY_BLOCK",
    "BUTTONS_BLOCK",
    "Action",
    "buttons_block",
    "clean_path",
    "mention",
    "parse_actions",
    "picker_blocks",
    "with_blocks",
]
