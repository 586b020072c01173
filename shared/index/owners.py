"""Owners of a file: CODEOWNERS read by the indexer and stored in Redis.

The indexer (``index``, ``watch``) has the checkout; the workers that post may not, so the
file's text is recorded per repo (the ``record_owners`` task) and parsed where a message is
built. GitHub's rules: the first of ``.github/CODEOWNERS``, ``CODEOWNERS``,
``docs/CODEOWNERS`` is used, and the last pattern that matches a path decides its owners.
Mentions are built from them in shared/notify/mentions.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pathspec
import redis

from shared.core import keys

log = logging.getLogger(__name__)

LOCATIONS = (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")
MAX_BYTES = 3 * 1024 * 1024  # GitHub ignores a CODEOWNERS file larger than this


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
