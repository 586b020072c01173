"""Owners of a file: CODEOWNERS read by the indexer, stored in Redis, turned into mentions.

The indexer (``index``, ``watch``) has the checkout; the workers that post may not, so the
file's text is recorded per repo (the ``record_owners`` task) and parsed where a message is
built. GitHub's rules: the first of ``.github/CODEOWNERS``, ``CODEOWNERS``,
``docs/CODEOWNERS`` is used, and the last pattern that matches a path decides its owners.

A mention is built here and nowhere else: a Slack id that matches a strict shape becomes
``<@U…>`` or ``<!subteam^S…>``; every other owner (``@org/team``, ``@user``, an e-mail) is
shown as escaped plain text unless the routing file maps it to a Slack id. So a hostile
CODEOWNERS line such as ``* @<!channel>`` can ping nobody.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pathspec
import redis

from shared.core import keys
from shared.notify.message import escape

log = logging.getLogger(__name__)

LOCATIONS = (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")
MAX_BYTES = 3 * 1024 * 1024  # GitHub ignores a CODEOWNERS file larger than this
MAX_MENTIONS = 5

USER_ID = re.compile(r"^[UW][A-Z0-9]{2,20}$")
GROUP_ID = re.compile(r"^S[A-Z0-9]{2,20}$")


def read_codeowners(root: Path) -> str | None:
    """The text of the checkout's CODEOWNERS file, where GitHub would look (None: none)."""
    for rel in LOCATIONS:
        path = root / rel
        try:
            if path.is_file() and path.stat().st_size <= MAX_BYTES:
                return path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            log.warning("codeowners.unreadable", extra={"path": str(path), "error": str(exc)})
    return None


@dataclass(frozen=True)
class OwnerRule:
    pattern: str
    spec: pathspec.GitIgnoreSpec
    owners: tuple[str, ...]


def parse_codeowners(text: str) -> list[OwnerRule]:
    """``pattern owner…`` lines; comments, blank lines and unparsable patterns are skipped."""
    rules = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if not line:
            continue
        pattern, *owners = line.split()
        if pattern.startswith("!"):  # GitHub does not support negation: such lines do nothing
            continue
        try:
            spec = pathspec.GitIgnoreSpec.from_lines([pattern])
        except (ValueError, TypeError):
            log.info("codeowners.bad_pattern", extra={"pattern": pattern[:200]})
            continue
        rules.append(OwnerRule(pattern, spec, tuple(owners)))
    return rules


def owners_of(rules: list[OwnerRule], path: str) -> tuple[str, ...]:
    """GitHub semantics: the last matching pattern wins (and may name nobody)."""
    for rule in reversed(rules):
        if rule.spec.match_file(path):
            return rule.owners
    return ()


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


class OwnersStore:
    """One Redis string per repo: its CODEOWNERS text ("" when it has none)."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r

    def put(self, repo: str, text: str | None) -> None:
        self.r.set(keys.codeowners(repo), text or "")

    def rules(self, repo: str) -> list[OwnerRule]:
        raw = self.r.get(keys.codeowners(repo))
        if not raw:
            return []
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
        return parse_codeowners(text)
