"""What a redaction rule is: a named pattern and what a match becomes (``marker``).

Kept apart from the redactor (shared/intake/redact.py) and the rule sets
(secret_shapes, secret_contexts, secret_rules), which all import it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """A named pattern; ``replacement`` is an ``re.sub`` template (groups allowed).

    ``triggers``: lowercase substrings one of which every match contains; a text holding none
    of them skips the rule (a cheap ``in`` test instead of a regex pass). Empty: always run.
    """

    name: str
    pattern: re.Pattern[str]
    replacement: str | Callable[[re.Match[str]], str]
    triggers: tuple[str, ...] = ()
    prefilter: re.Pattern[str] | None = None  # a cheap search that every match's text passes
    # Instead of ``pattern.sub(replacement, text)``: for a rule whose matches may nest (a
    # quoted value that holds another assignment); it never changes the number of lines.
    apply: Callable[[str], str] | None = None


def marker(name: str) -> str:
    return f"[REDACTED:{name}]"
