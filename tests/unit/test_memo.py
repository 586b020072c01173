"""The text memo: each distinct text worked on once, and only a few texts held whole."""

from __future__ import annotations

from shared.core import memo
from shared.core.memo import TextMemo


def test_an_equal_text_is_worked_on_once_and_a_put_value_is_not_shadowed() -> None:
    m: TextMemo[int] = TextMemo(size=8)
    calls: list[str] = []

    def compute(text: str) -> int:
        calls.append(text)
        return len(calls)

    trace = "Traceback (most recent call last):\n" * 50
    again = "".join(trace.split("\n", 1)[0] + "\n" for _ in range(50))  # equal, not the same
    assert again == trace and again is not trace
    assert m.get(trace, None, lambda: compute(trace)) == 1
    assert m.get(again, None, lambda: compute(again)) == 1
    assert m.get(trace, "other config", lambda: compute(trace)) == 2  # extra is in the key
    m.put(trace, None, 7)
    assert m.get(trace, None, lambda: compute(trace)) == 7
    assert len(calls) == 2


def test_only_the_most_recent_texts_are_held_whole() -> None:
    """Memory holds digests and results; the texts themselves only for the last RECENT."""
    m: TextMemo[int] = TextMemo(size=4096)
    texts = [f"trace {i}\n" * 1000 for i in range(memo.RECENT * 4)]
    for i, text in enumerate(texts):
        m.get(text, None, lambda i=i: i)
    assert len(m._recent) == memo.RECENT
    assert all(len(key[0]) == 20 for key in m._items)  # SHA-1 digests, not the texts
    # An older text, no longer held whole, is still found by its digest.
    assert m.get(texts[0], None, lambda: -1) == 0
