"""The tailer's fast path (producers/skim.py) against the plain per-line Grouper + from_input:
the same records become the same events, and the grouper is left in the same state."""

from __future__ import annotations

import itertools
import random
import sys
from typing import Any

import pytest

from producers.multiline import Grouper, Record
from producers.skim import LINE_TRUNCATED, candidate_starts, group_lines
from shared.core.domain import ErrorEvent
from shared.intake.events import from_input, may_be_log_error
from tests.logmix import INFO, TRICKY, make_log

FLUSH_AFTER = 1.5


def event_of(record: Record) -> dict[str, Any] | None:
    found = from_input(record.text, origin="log", service="shop-api", repo="shop")
    if not isinstance(found, ErrorEvent):
        return None
    return found.model_dump(exclude={"id", "timestamp"})


def errors(records: list[Record]) -> list[tuple[Record, dict[str, Any]]]:
    pairs = [(r, event_of(r)) for r in records]
    return [(r, e) for r, e in pairs if e is not None]


def per_line(
    grouper: Grouper, data: bytes, lo: int, hi: int, now: float, max_line_bytes: int
) -> list[Record]:
    """The reference: every line through the grouper, cut as the tailer cuts it."""
    out: list[Record] = []
    pos = lo
    while pos < hi:
        nl = data.index(b"\n", pos, hi)
        raw = data[pos:nl]
        text = raw[:max_line_bytes].decode("utf-8", errors="replace").rstrip("\r")
        if len(raw) > max_line_bytes:
            text += LINE_TRUNCATED
        out += grouper.feed(text, pos, nl + 1, now)
        pos = nl + 1
    return out


def line_cuts(rng: random.Random, data: bytes, parts: int) -> list[int]:
    """Line starts splitting ``data`` into about ``parts`` pieces (as reads of a growing file)."""
    starts = [i + 1 for i in range(len(data) - 1) if data[i] == 0x0A]
    picks = sorted(rng.sample(starts, min(parts, len(starts))))
    return [0, *picks, len(data)]


@pytest.mark.parametrize("seed", range(40))
def test_skimming_keeps_every_error_record_of_a_generated_log(seed: int) -> None:
    rng = random.Random(seed)
    max_line_bytes = rng.choice([80, 600, 1 << 20])
    grouper_args = {
        "max_lines": rng.choice([4, 12, 1000]),
        "max_bytes": rng.choice([256, 3000, 256_000]),
        "flush_after": FLUSH_AFTER,
    }
    data = make_log(rng, 1500, long_line=rng.choice([100, 2000, 40_000]))
    fast, slow = Grouper(**grouper_args), Grouper(**grouper_args)
    fast_records: list[Record] = []
    slow_records: list[Record] = []
    cuts = line_cuts(rng, data, rng.choice([1, 5, 60]))
    now = 0.0
    for lo, hi in itertools.pairwise(cuts):
        now += rng.choice([0.0, 0.1, FLUSH_AFTER])  # some reads come after a quiet gap
        fast_records += group_lines(
            fast, data, lo, hi, base=0, now=now, max_line_bytes=max_line_bytes
        )
        slow_records += per_line(slow, data, lo, hi, now, max_line_bytes)
        assert fast.safe_offset() == slow.safe_offset()  # the checkpoint the tailer saves
    assert errors(fast_records) == errors(slow_records)
    assert errors(fast_records), "the generated log holds errors"
    assert fast.flush(now, force=True) == slow.flush(now, force=True)


def test_offsets_count_from_the_buffer_base() -> None:
    data = b"ERROR a\nINFO b\n"
    grouper = Grouper()
    records = group_lines(grouper, data, 0, len(data), base=1000, now=0.0, max_line_bytes=99)
    assert [(r.text, r.start, r.end) for r in records] == [("ERROR a", 1000, 1008)]
    assert grouper.safe_offset() == 1008  # "INFO b" is pending


@pytest.mark.parametrize("line", [t.replace("{n}", "7") for t in TRICKY])
def test_every_tricky_line_is_a_candidate_or_ignored_alone(line: str) -> None:
    """A line the scan passes over must be a record intake ignores, in any case."""
    raw = line.encode()
    if candidate_starts(raw + b"\n", 0, len(raw) + 1) == [0]:
        return
    assert not may_be_log_error(line)
    assert event_of(Record(text=line, start=0, end=len(raw) + 1, truncated=False)) is None


def test_only_two_non_ascii_characters_lower_to_ascii_letters() -> None:
    """The scan matches level words as ASCII bytes; maybe_error lowers the decoded line. They
    agree because no other character lowers to an ASCII letter (U+0130 adds a combining dot
    after its "i", U+212A is "k", in no level word)."""
    found = [
        c for c in range(0x80, sys.maxunicode + 1) if any(ord(x) < 128 for x in chr(c).lower())
    ]
    assert found == [0x130, 0x212A]


def test_a_line_the_grouper_would_cut_is_fed_not_skipped() -> None:
    """Cut to max_bytes / 4, this logcat line ends in " E … [103 bytes truncated…]": an error
    level that the whole line does not have. A skipped line must be one nothing cuts."""
    line = "11-30 10:00:00.123  123  456 Exyz" + "q" * 100
    data = "".join(f"{s}\n" for s in [INFO, INFO, line, INFO, INFO]).encode()
    fast, slow = Grouper(max_bytes=276), Grouper(max_bytes=276)
    fast_records = group_lines(fast, data, 0, len(data), base=0, now=0.0, max_line_bytes=1000)
    slow_records = per_line(slow, data, 0, len(data), 0.0, 1000)
    assert len(errors(slow_records)) == 1
    assert errors(fast_records) == errors(slow_records)


def test_a_line_the_tailer_would_cut_is_fed_not_skipped() -> None:
    """The same line cut by the tailer's max_line_bytes ends in " E …[line truncated…]"."""
    line = "11-30 10:00:00.123  123  456 Exyz" + "q" * 100
    data = "".join(f"{s}\n" for s in [INFO, INFO, line, INFO, INFO]).encode()
    fast_records = group_lines(Grouper(), data, 0, len(data), base=0, now=0.0, max_line_bytes=30)
    slow_records = per_line(Grouper(), data, 0, len(data), 0.0, 30)
    assert len(errors(slow_records)) == 1
    assert errors(fast_records) == errors(slow_records)


def test_quiet_runs_are_skipped_but_a_header_before_a_trace_is_fed() -> None:
    lines = [f"2026 INFO request {n}" for n in range(50)]
    lines[30] = "2026 INFO handler said:"  # logback: a plain header, then the exception line
    lines.insert(31, "java.lang.IllegalStateException: bad")
    lines.insert(32, "\tat com.shop.Orders.place(Orders.java:42)")
    data = ("\n".join(lines) + "\n").encode()
    fed: list[str] = []
    grouper = Grouper()
    feed = grouper.feed

    def spy(line: str, start: int, end: int, now: float) -> list[Record]:
        fed.append(line)
        return feed(line, start, end, now)

    grouper.feed = spy  # type: ignore[method-assign]
    records = group_lines(grouper, data, 0, len(data), base=0, now=0.0, max_line_bytes=1 << 20)
    records += grouper.flush(0.0, force=True)
    [(record, _)] = errors(records)
    assert record.text.splitlines() == lines[30:33]
    assert len(fed) < 10  # of 52 lines
