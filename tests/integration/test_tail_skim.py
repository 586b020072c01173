"""The tailer's fast path against its reference path on growing files: the same events with the
same ids, handed over in the same rounds, and the same checkpoints after every round."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from producers.tailer import Tailer
from shared.core.domain import ErrorEvent
from tests.logmix import make_log

pytestmark = pytest.mark.integration


class Rounds:
    """Every hand-over, as its events without their timestamps (those are the wall clock)."""

    def __init__(self) -> None:
        self.calls: list[list[dict[str, Any]]] = []

    def __call__(self, events: list[ErrorEvent]) -> None:
        self.calls.append([e.model_dump(exclude={"timestamp"}) for e in events])


def tailer(log: Path, state: Path, rounds: Rounds, **kw: Any) -> Tailer:
    return Tailer(
        [str(log)],
        service="shop-api",
        repo="shop",
        enqueue_many=rounds,
        state_path=state,
        from_start=True,
        flush_after=0.5,
        inotify=False,
        **kw,
    )


@pytest.mark.parametrize("seed", range(12))
def test_fast_and_reference_paths_hand_over_the_same_events(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    data = make_log(rng, 2500, long_line=rng.choice([300, 5000]))
    log = tmp_path / "app.log"
    log.write_bytes(b"")
    options: dict[str, Any] = {
        "max_line_bytes": rng.choice([200, 4000, 1 << 20]),
        "max_record_lines": rng.choice([5, 1000]),
        "max_record_bytes": rng.choice([300, 256_000]),
    }
    fast_rounds, slow_rounds = Rounds(), Rounds()
    # Small reads: records and lines split across read buffers and across rounds.
    fast = tailer(
        log,
        tmp_path / "fast.json",
        fast_rounds,
        skim=True,
        read_chunk=rng.choice([7, 333, 4096]),
        **options,
    )
    slow = tailer(log, tmp_path / "slow.json", slow_rounds, skim=False, **options)
    try:
        written, now = 0, 0.0
        while written < len(data):
            step = rng.choice([1, 50, 700, 20_000])  # anywhere: mid-line, mid-record
            with open(log, "ab") as f:
                f.write(data[written : written + step])
            written += step
            now += rng.choice([0.0, 0.1, 1.0])  # a quiet second closes what is pending
            fast.poll_once(now)
            slow.poll_once(now)
            assert fast.checkpoints.entries == slow.checkpoints.entries
        fast.poll_once(now + 5)
        slow.poll_once(now + 5)
    finally:
        fast.close()
        slow.close()
    assert fast_rounds.calls == slow_rounds.calls
    assert sum(len(c) for c in fast_rounds.calls) > 20
