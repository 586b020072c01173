"""Mentions of a file's owners (shared/index/owners.py) in a Slack message.

A mention is built here and nowhere else: a Slack id that matches a strict shape becomes
``<@U…>`` or ``<!subteam^S…>``; every other owner (``@org/team``, ``@user``, an e-mail) is
shown as escaped plain text unless the routing file maps it to a Slack id. So a hostile
CODEOWNERS line such as ``* @<!channel>`` can ping nobody.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from shared.notify.message import escape

MAX_MENTIONS = 5
USER_ID = re.compile(r"^[UW][A-Z0-9]{2,20}$")
GROUP_ID = re.compile(r"^S[A-Z0-9]{2,20}$")


def mention(owner: str, aliases: Mapping[str, str]) -> str:
    """Slack mrkdwn for one owner: a mention for a Slack id (or a mapped name), else the name
    escaped as plain text."""
    target = aliases.get(owner, owner)
    if USER_ID.match(target):
        return f"<@{target}>"
    if GROUP_ID.match(target):
        return f"<!subteam^{target}>"
    return f"`{escape(owner[:100]).replace('`', 'ˋ')}`"


def mentions(owners: Iterable[str], aliases: Mapping[str, str]) -> str:
    """The owners' mentions, deduplicated, at most ``MAX_MENTIONS``."""
    shown = list(dict.fromkeys(mention(o, aliases) for o in owners))
    return " ".join(shown[:MAX_MENTIONS])
