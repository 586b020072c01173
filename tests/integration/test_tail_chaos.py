"""The tailer's guarantees under attack, each with exact counts: real writers (Python logging's
rotating and watched handlers), the real logrotate binary, kill -9 at random moments, a Redis
stopped and started again, a symlink loop. benchmarks/tail_chaos.py runs the same scenarios at
full size and prints the table the README quotes."""

from __future__ import annotations

import functools
import os
import re
import signal
import time
from pathlib import Path

import pytest

from shared.devtools import chaos
from shared.groups import deferred
from shared.stack.children import wait_until

pytestmark = pytest.mark.integration


def exact(outcome: chaos.Outcome, *, window: int = 0) -> None:
    """Everything in the files delivered, nothing counted twice; at most ``window`` errors
    undelivered because they were gone from every file before a read (copytruncate's gap
    between the copy and the truncate; the tailer may still have caught some of them)."""
    assert (outcome.lost, outcome.doubled) == (0, 0), outcome
    assert outcome.delivered >= outcome.on_disk, outcome
    assert outcome.written - outcome.delivered <= window, outcome


def test_no_rotation(tmp_path: Path) -> None:
    exact(chaos.run("plain", tmp_path, functools.partial(chaos.plain, errors=150)))


@pytest.mark.parametrize("glob", ["app.log*", "app.log"])
def test_rotating_file_handler_at_full_speed(tmp_path: Path, glob: str) -> None:
    # 300 errors with 20 info lines each through 40 kB files: about 12 rotations in a second.
    scenario = functools.partial(chaos.rotating, errors=300, glob=glob, max_bytes=40_000)
    outcome = chaos.run("rotating", tmp_path, scenario)
    exact(outcome)
    assert outcome.delivered == 300


def test_logrotate_create_with_the_plain_glob(tmp_path: Path) -> None:
    scenario = functools.partial(
        chaos.logrotate, errors=250, mode="create", glob="app.log", pace=0.004
    )
    outcome = chaos.run("create", tmp_path, scenario)
    exact(outcome)
    assert outcome.delivered == 250


@pytest.mark.parametrize("glob", ["app.log*", "app.log"])
def test_logrotate_copytruncate_loses_only_its_own_window(tmp_path: Path, glob: str) -> None:
    scenario = functools.partial(
        chaos.logrotate, errors=250, mode="copytruncate", glob=glob, pace=0.004
    )
    exact(chaos.run("copytruncate", tmp_path, scenario), window=25)


def test_kill_9_at_random_moments_then_the_same_command_again(tmp_path: Path) -> None:
    scenario = functools.partial(chaos.kill9, errors=400, kills=6, seed=11)
    outcome = chaos.run("kill9", tmp_path, scenario)
    exact(outcome)
    assert outcome.delivered == 400


def test_a_file_rotated_while_the_tailer_was_stopped_is_read_whole(tmp_path: Path) -> None:
    outcome = chaos.run("d1", tmp_path, functools.partial(chaos.restart_with_rotation, errors=20))
    exact(outcome)
    assert outcome.delivered == 20


def test_redis_stopped_and_started_again_loses_nothing(tmp_path: Path) -> None:
    scenario = functools.partial(chaos.redis_outage, errors=200, down_s=4)
    outcome = chaos.run("redis", tmp_path, scenario, appendonly=True, quiet=12)
    exact(outcome)
    assert outcome.delivered == 200
    log = (tmp_path / "proc-logs" / "tail-0.log").read_text()
    attempts = log.count("tail.enqueue_failed")
    assert 1 <= attempts <= 6  # one line per backoff attempt, not one per file per poll
    assert "Traceback" not in log and "tail.recovered" in log


def test_a_symlink_loop_neither_hangs_discovery_nor_grows_memory(tmp_path: Path) -> None:
    rig = chaos.Rig(tmp_path)
    try:
        loop = rig.logs / "L" / "sub"
        loop.mkdir(parents=True)
        os.symlink("..", loop / "up")
        os.symlink("../sub", loop / "again")
        os.mkfifo(rig.logs / "L" / "pipe.log")  # matches the pattern, is not a file
        tail = rig.start_tail(str(rig.logs / "L" / "**" / "*.log"))
        chaos_writer = rig.write("plain", 0, 5, path=loop / "app.log")
        chaos_writer.wait(30)
        wait_until(lambda: len(deferred.first_messages(rig.client)) == 5, 30, "the five errors")
        status = Path(f"/proc/{tail.popen.pid}/status").read_text()
        rss = re.search(r"VmRSS:\s+(\d+)", status)
        assert rss is not None and int(rss[1]) < 200_000  # kB
        time.sleep(2.5)  # a couple of scans more: the pipe named like a log is said once
        t0 = time.monotonic()
        tail.popen.send_signal(signal.SIGTERM)
        tail.popen.wait(10)
        assert time.monotonic() - t0 < 2.0
        log = tail.log_path.read_text()
        assert log.count("tail.skip") == 1 and "pipe.log" in log
    finally:
        rig.close()
