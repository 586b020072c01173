"""Tokens of a text as a model server counts them, estimated without its tokenizer.

A server refuses an input over its limit (llama.cpp's ``n_ubatch`` for a rerank pair) or drops
what does not fit (Ollama's ``num_ctx``), in tokens of a tokenizer tracehound does not have.
The estimate counts sub-word pieces the way BPE and sentencepiece vocabularies cut code — an
identifier's camelCase and snake_case parts at up to four letters a token, each digit one
(Qwen's and Llama 3's vocabularies split numbers),
punctuation two marks a token (vocabularies hold ``("``, ``):``, ``->``), each non-ASCII
character one, a line break one — so it lands above what real vocabularies count for code and
prose. ``scale`` corrects it from what a server
reports (an Ollama reply's ``prompt_eval_count``, llama.cpp's ``usage`` or the size it names
in a refusal): upward only by default; with ``learn_down`` (a chat model, whose every reply
reports its prompt) it follows the largest ratio among the last reports, so a pessimistic
start gives back the context it would waste without ever trusting one lucky prompt.
"""

from __future__ import annotations

import math
import re
import threading
from collections import deque

from shared.core.memo import TextMemo

# One piece per match: a capitalised or lower-case word part, an upper-case run (not the start
# of a capitalised part), digits, line breaks, other white space, a run of ASCII punctuation,
# any other single character.
_PIECE = re.compile(
    r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+|\n+|[ \t\r\f\v]+|[!-/:-@\[-`{-~]+|.", re.DOTALL
)
_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
# Raw estimates of the last texts counted, by digest (shared/core/memo.py): 4096 entries of a
# 20-byte digest and an int.
_RAW: TextMemo[int] = TextMemo(4096)
MAX_SCALE = 8.0
MIN_SCALE = 0.5
REPORTS_KEPT = 16


def _cost(piece: str) -> int:
    first = piece[0]
    if first.isascii() and first.isalpha():
        return math.ceil(len(piece) / 4)
    if first.isdigit():
        return len(piece)
    if first == "\n":
        return len(piece)
    if first in " \t\r\f\v":
        return 1 if len(piece) > 1 else 0  # a single space joins the next piece
    if first in _PUNCT:
        return math.ceil(len(piece) / 2)
    return 1


class TokenCount:
    """A model server's token count of a text, estimated and scaled by what it reported."""

    def __init__(self, scale: float = 1.0, *, learn_down: bool = False) -> None:
        self.scale = scale
        self._lock = threading.Lock()
        self._reports: deque[float] | None = deque(maxlen=REPORTS_KEPT) if learn_down else None

    def raw(self, text: str) -> int:
        """The unscaled estimate (remembered: an analysis counts the same prompt parts and a
        rerank the same code again after the call, while the model host waits)."""
        return _RAW.get(text, None, lambda: sum(_cost(m.group()) for m in _PIECE.finditer(text)))

    def __call__(self, text: str) -> int:
        return math.ceil(self.raw(text) * self.scale)

    def fit(self, text: str, budget: int) -> str:
        """The longest head of ``text`` whose estimate stays within ``budget`` tokens."""
        if budget <= 0:
            return ""
        limit = budget / self.scale
        used = 0
        for m in _PIECE.finditer(text):
            cost = _cost(m.group())
            if used + cost > limit:
                head = text[: m.start()]
                _RAW.put(head, None, used)
                return head
            used += cost
        _RAW.put(text, None, used)
        return text

    def grow(self, factor: float) -> None:
        """Scale up by ``factor`` (a server refused what the estimate said would fit)."""
        with self._lock:
            self.scale = min(MAX_SCALE, self.scale * factor)

    def observe(self, estimated_raw: int, actual: int) -> None:
        """A server counted ``actual`` tokens where the raw estimate said ``estimated_raw``:
        scale up when it counted more; down (``learn_down``) to the largest recent ratio."""
        if estimated_raw <= 0 or actual <= 0:
            return
        ratio = min(MAX_SCALE, actual / estimated_raw)
        with self._lock:
            if self._reports is None:
                self.scale = max(self.scale, ratio)
                return
            self._reports.append(ratio)
            self.scale = max(MIN_SCALE, max(self._reports))
