"""The token estimate remembers what it counted, and what it remembers is what it would count."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.models import token_count
from shared.models.token_count import _PIECE, TokenCount, _cost

CODE = st.text(
    alphabet=st.sampled_from(list("abcXYZ_019 \n\t()[]{}:.,'\"->=é中")), min_size=0, max_size=400
)


def counted(text: str) -> int:
    """The estimate worked out afresh, as before it was remembered."""
    return sum(_cost(m.group()) for m in _PIECE.finditer(text))


@settings(max_examples=300, deadline=None)
@given(text=CODE, budget=st.integers(min_value=1, max_value=120))
def test_a_fitted_head_is_remembered_at_the_count_it_has(text: str, budget: int) -> None:
    tokens = TokenCount()
    head = tokens.fit(text, budget)  # remembers the head's count on the way
    assert tokens.raw(head) == counted(head) <= budget
    assert tokens.raw(text) == counted(text)


def test_counting_the_same_text_again_does_not_scan_it(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "def checkout(order):\n    return applyDiscount(order.total, 'SPRING-50')\n" * 50
    first = TokenCount().raw(text)
    scans: list[str] = []
    real = token_count._PIECE

    class Watching:
        def finditer(self, t: str) -> object:
            scans.append(t)
            return real.finditer(t)

    monkeypatch.setattr(token_count, "_PIECE", Watching())
    assert TokenCount(scale=2.0).raw(text) == first  # another instance, another scale
    assert TokenCount()(text) == first
    assert scans == []
    TokenCount().raw(text + "x")
    assert len(scans) == 1 and re.fullmatch(r"(?s).*x", scans[0])
