"""Identifier-aware tokenizer shared by the BM25 index, query building and the embed simulator."""

from __future__ import annotations

import re

# A "word" is a run of letters/digits/underscores in any script, so Hangul, CJK and accented
# identifiers survive as tokens. Dots, slashes, parentheses and operators separate words.
_WORD = re.compile(r"[^\W]+", re.UNICODE)
# camelCase / PascalCase / acronym boundaries: "HTTPServerError" -> HTTP, Server, Error;
# "findById" -> find, By, Id; digits stay attached to their letters' run ("utf8" -> utf, 8).
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_a-zA-Z]+", re.UNICODE)


def _parts(word: str) -> list[str]:
    parts: list[str] = []
    for piece in word.split("_"):
        if piece:
            parts.extend(_PART.findall(piece))
    return parts


def _keep(token: str) -> bool:
    # Single ASCII letters/digits are noise in code ("i", "x", "0"); a single Hangul or CJK
    # character can be a whole word, so keep those.
    return len(token) > 1 or not token.isascii()


def tokenize(text: str) -> list[str]:
    """Lower-cased tokens: each identifier whole, then its camelCase/snake_case parts.

    ``UserService.findById`` -> ``userservice user service findbyid find by id``.
    """
    out: list[str] = []
    for match in _WORD.finditer(text):
        word = match.group(0)
        whole = word.lower().strip("_")
        if not whole:
            continue
        parts = [p.lower() for p in _parts(word)]
        if _keep(whole):
            out.append(whole)
        if len(parts) > 1 or (parts and parts[0] != whole):
            out.extend(p for p in parts if _keep(p))
    return out
