"""What one analysis may send its model: the context window less the reply, in tokens.

Ollama drops the oldest messages that do not fit ``num_ctx`` (server/prompt.go) — in a round
of tool calls the first to go is the message holding the error and the code — and cuts a
single prompt too long for it in the middle. So tracehound fits the prompt itself, by an
estimate of the model's tokens that each reply's ``prompt_eval_count`` calibrates
(shared/models/chat.py): the code is sized before the first call, leaving room for the tool
rounds, and before every call tool results (oldest first), then the lowest-ranked code, then
the code at the trace's other frames give way. The system prompt, the error and the top
candidate always stay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from shared.models.chat import prompt_tokens, reply_tokens
from shared.models.token_count import TokenCount

MARGIN = 0.05  # of the prompt's room, kept free against the estimate's error
TOOL_SHARE = 3  # tool rounds may take up to a third of the prompt's room
DROPPED = "[dropped: the context window is full]"


@dataclass(frozen=True)
class Budget:
    """The model's context (``num_ctx``, sent with every call) and the token count the
    prompt is measured with (the chat model's, calibrated by its replies)."""

    num_ctx: int = 16384
    count: TokenCount = field(default_factory=TokenCount)

    @property
    def reply(self) -> int:
        return reply_tokens(self.num_ctx)

    @property
    def prompt(self) -> int:
        """Tokens the prompt may take: what the reply leaves, less a margin."""
        return int((self.num_ctx - self.reply) * (1 - MARGIN))

    def of(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
        return prompt_tokens(self.count, messages, tools)

    def tokens(self, text: str) -> int:
        return self.count(text)

    def chars(self, tokens: int) -> int:
        """Characters of dense code that fit ``tokens`` (the estimate's worst case for code:
        about two characters a token), for budgets kept in characters."""
        return max(0, int(tokens * 2 / self.count.scale))


def _blocks(text: str, tag: str) -> list[re.Match[str]]:
    """The ``<tag rank=…>…</tag>`` blocks of a prompt (``tag`` ends in the request's nonce,
    so text from logs or code cannot open or close one)."""
    return list(re.finditer(rf'<{tag} rank="([^"]*)"[^>]*>.*?</{tag}>\n?', text, re.DOTALL))


def fit(
    messages: list[dict[str, Any]],
    budget: Budget,
    nonce: str,
    tools: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """``messages`` within the budget: tool results cut from the oldest, then candidates
    dropped from the lowest rank up (never rank 1), then the frame windows. The system
    prompt and the error are never touched."""
    out = [dict(m) for m in messages]
    over = budget.of(out, tools) - budget.prompt
    for m in out:
        if over <= 0:
            return out
        if m.get("role") == "tool" and m.get("content") != DROPPED:
            over -= budget.tokens(str(m.get("content") or "")) - budget.tokens(DROPPED)
            m["content"] = DROPPED
    tag = f"candidate_{nonce}"
    first_user = next((m for m in out if m.get("role") == "user"), None)
    if first_user is None:
        return out
    text = str(first_user.get("content") or "")
    ranked = [b for b in _blocks(text, tag) if b.group(1).isdigit() and b.group(1) != "1"]
    frames = [b for b in _blocks(text, tag) if b.group(1) == "frame"]
    order = sorted(ranked, key=lambda b: -int(b.group(1))) + frames[::-1]
    cut: list[tuple[int, int]] = []
    for block in order:
        if over <= 0:
            break
        cut.append(block.span())
        over -= budget.tokens(block.group(0))
    for start, end in sorted(cut, reverse=True):
        text = text[:start] + text[end:]
    first_user["content"] = text
    return out
