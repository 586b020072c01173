"""The log tailer on real files: rotation, truncation, restarts, and a SIGKILL mid-stream."""

from __future__ import annotations

import base64
import json
import os
import signal
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from producers.tailer import Tailer
from shared.core.domain import ErrorEvent
from shared.groups import deferred
from shared.stack.children import Proc, spawn, wait_until
from shared.stack.localstack import start_redis, tracehound_executable

pytestmark = pytest.mark.integration


def traceback_record(n: int) -> str:
    return (
        f"2026-11-30 10:00:{n % 60:02d},000 ERROR [shop] request {n} failed\n"
        "Traceback (most recent call last):\n"
        # A call site per record: each is its own error group, so each starts a chain.
        f'  File "/srv/app/shopapp/services/pricing.py", line 91, in allocate_{n}\n'
        "    line.unit_discount_cents = round_half_up(share / line.quantity)\n"
        f"ZeroDivisionError: division by zero (marker-{n})\n"
    )


def info_line(n: int) -> str:
    return f"2026-11-30 10:00:{n % 60:02d},000 INFO [shop] served request {n} in 12ms\n"


def marker_in(text: str) -> str | None:
    """The ``marker-N`` a record carries, one per event."""
    return next((w.strip("()") for w in text.split() if w.strip("()").startswith("marker-")), None)


def markers(events: list[ErrorEvent]) -> list[str]:
    return [m for e in events if (m := marker_in(f"{e.message} {e.stacktrace}"))]


class Collect:
    """The hand-over interface as a list (the Redis path is covered by the SIGKILL test)."""

    def __init__(self) -> None:
        self.events: list[ErrorEvent] = []
        self.fail_next = 0  # hand-overs (one per file and round) that fail

    def __call__(self, events: list[ErrorEvent]) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("broker down")
        self.events.extend(events)


@pytest.fixture
def tailer_for(tmp_path: Path) -> Iterator:  # type: ignore[type-arg]
    made: list[Tailer] = []

    def make(pattern: str, collect: Collect, **kw: object) -> Tailer:
        t = Tailer(
            [pattern],
            service="shop-api",
            repo="sample",
            enqueue_many=collect,
            state_path=tmp_path / "state.json",
            from_start=True,
            flush_after=0.5,
            linger=2.0,
            **kw,
        )  # type: ignore[arg-type]
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


def settle(t: Tailer, now: float) -> float:
    """Poll until a round reads nothing more (a round reads at most READ_BUDGET per file),
    then once more after the flush timeout so pending records close."""
    for _ in range(50):
        before = {k: fl.offset for k, fl in t.files.items()}
        t.poll_once(now)
        if {k: fl.offset for k, fl in t.files.items()} == before:
            break
    t.poll_once(now + 1.0)
    return now + 1.0


def test_a_record_read_again_gets_the_same_event_id_and_other_records_other_ids(
    tmp_path: Path,
    tailer_for,  # type: ignore[no-untyped-def]
) -> None:
    log = tmp_path / "app.log"
    log.write_text(traceback_record(1) + info_line(2) + traceback_record(3))
    first, again = Collect(), Collect()
    settle(tailer_for(str(log), first), 0.0)
    (tmp_path / "state.json").unlink()  # a replay from the start, as after a lost checkpoint
    settle(tailer_for(str(log), again), 0.0)
    assert markers(first.events) == ["marker-1", "marker-3"]
    assert [e.id for e in again.events] == [e.id for e in first.events]
    assert first.events[0].id != first.events[1].id


def test_rotation_by_rename_reads_the_old_file_to_its_end(tmp_path: Path, tailer_for) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "app.log"
    log.write_text(info_line(0) + traceback_record(1))
    collect = Collect()
    t = tailer_for(str(log), collect)
    now = settle(t, 0.0)
    with open(log, "a") as still_open:  # the writer keeps its descriptor across the rename
        os.rename(log, tmp_path / "app.log.1")
        still_open.write(traceback_record(2))
    log.write_text(traceback_record(3))

    now = settle(t, now + 1)
    assert sorted(markers(collect.events)) == ["marker-1", "marker-2", "marker-3"]
    assert len(t.files) == 2  # the rotated file may still grow: kept for ``linger``
    settle(t, now + 3)
    assert len(t.files) == 1  # read to its end and quiet since: closed


def rotate(log: Path) -> None:
    """RotatingFileHandler's rollover: app.log.N -> app.log.N+1, ..., app.log -> app.log.1."""
    numbered = [p for p in log.parent.glob(f"{log.name}.*") if p.suffix[1:].isdigit()]
    backups = sorted(numbered, key=lambda p: -int(p.suffix[1:]))
    for b in backups:
        os.rename(b, b.with_suffix(f".{int(b.suffix[1:]) + 1}"))
    os.rename(log, log.parent / f"{log.name}.1")


def test_generations_rotated_away_between_two_scans_are_read_without_inotify(  # type: ignore[no-untyped-def]
    tmp_path: Path, tailer_for
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "app.log"
    # Rotations from before this tailer ran are history (each rollover renames them again),
    # and a compressed one is never read.
    (logs / "app.log.1").write_text(traceback_record(70))
    past = time.time() - 3600
    os.utime(logs / "app.log.1", (past, past))
    (logs / "app.log.2.gz").write_bytes(b"\x1f\x8b" + traceback_record(80).encode())
    log.write_text(traceback_record(1))
    collect = Collect()
    # No inotify: an inotify limit reached or a queue that overflowed looks the same.
    t = tailer_for(str(log), collect, inotify=False)
    now = settle(t, 0.0)
    # Three generations written and rotated away before the next scan: the scan only ever sees
    # the fourth at app.log; the second and third were never at a path it looked at.
    for n in (2, 3, 4):
        rotate(log)
        log.write_text(info_line(n) + traceback_record(n))
    now = settle(t, now + 1.5)
    assert sorted(markers(collect.events)) == [f"marker-{n}" for n in (1, 2, 3, 4)]
    # Read to their end, let go, and not read again while they stay where they are.
    now = settle(t, now + 3)
    now = settle(t, now + 3)
    assert len(t.files) == 1
    assert len(collect.events) == 4


def test_copytruncate_starts_over_on_the_same_inode(tmp_path: Path, tailer_for) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "app.log"
    log.write_text(traceback_record(1) + info_line(2) * 50)
    collect = Collect()
    t = tailer_for(str(log), collect)
    now = settle(t, 0.0)
    with open(log, "r+") as f:  # logrotate copytruncate
        f.truncate(0)
    with open(log, "a") as f:
        f.write(traceback_record(2))

    settle(t, now + 1)

    assert sorted(markers(collect.events)) == ["marker-1", "marker-2"]


def test_copytruncate_landing_while_a_round_reads_counts_each_error_once(  # type: ignore[no-untyped-def]
    tmp_path: Path, tailer_for
) -> None:
    """logrotate copies, truncates and the writer refills the file past the tailer's offset,
    all after the round checked the file and before it read: the bytes at the old offset are
    the new content's middle. Nothing may be read twice under another id, nor skipped in the
    copy."""
    log = tmp_path / "app.log"
    log.write_text("".join(traceback_record(n) + info_line(n) for n in range(1, 6)))
    collect = Collect()
    t = tailer_for(str(tmp_path / "app.log*"), collect)
    now = settle(t, 0.0)
    with open(log, "a") as f:  # written, not read yet: only the copy will hold these
        f.write("".join(traceback_record(n) + info_line(n) for n in range(6, 11)))
    group = t._group

    def rotate_then_read(fl, at):  # type: ignore[no-untyped-def]
        if fl.path == str(log) and not (tmp_path / "app.log.1").exists():
            (tmp_path / "app.log.1").write_bytes(log.read_bytes())  # copy ...
            with open(log, "r+") as w:  # ... truncate ...
                w.truncate(0)
            with open(log, "a") as w:  # ... and the writer goes on, past the old offset
                w.write("".join(traceback_record(n) + info_line(n) for n in range(11, 41)))
        return group(fl, at)

    t._group = rotate_then_read
    settle(t, now + 1)

    assert sorted(markers(collect.events)) == sorted(f"marker-{n}" for n in range(1, 41))


def test_delete_and_recreate_and_a_glob_that_matched_nothing_yet(  # type: ignore[no-untyped-def]
    tmp_path: Path, tailer_for
) -> None:
    collect = Collect()
    t = tailer_for(str(tmp_path / "logs" / "*.log"), collect)
    now = settle(t, 0.0)  # nothing there yet: no error, no crash
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "dir.log").mkdir()  # a directory whose name matches the pattern
    log = tmp_path / "logs" / "api.log"
    log.write_text(traceback_record(1))
    now = settle(t, now + 1)
    log.unlink()
    log.write_text(traceback_record(2))

    settle(t, now + 1)

    assert sorted(markers(collect.events)) == ["marker-1", "marker-2"]


def test_a_log_deleted_while_being_read_is_read_to_its_end(tmp_path: Path, tailer_for) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "app.log"
    log.write_text(traceback_record(1))
    collect = Collect()
    t = tailer_for(str(log), collect)
    now = settle(t, 0.0)
    with open(log, "a") as writer:
        log.unlink()
        writer.write(traceback_record(2))

    settle(t, now + 1)

    assert sorted(markers(collect.events)) == ["marker-1", "marker-2"]
    assert t.files == {}


def test_binary_garbage_and_invalid_utf8_do_not_stop_the_tailer(tmp_path: Path, tailer_for) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "app.log"
    log.write_bytes(
        os.urandom(20_000) + b"\n\xff\xfe ERROR caf\xe9 failed\n" + traceback_record(7).encode()
    )
    collect = Collect()
    settle(tailer_for(str(log), collect), 0.0)
    assert "marker-7" in markers(collect.events)
    assert any("\ufffd" in e.message for e in collect.events)


def test_a_50_mb_line_is_cut_without_holding_it_in_memory(tmp_path: Path, tailer_for) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "app.log"
    with open(log, "wb") as f:
        f.write(b"ERROR giant payload: ")
        for _ in range(50):
            f.write(b"x" * (1 << 20))
        f.write(b"\n" + traceback_record(1).encode())
    collect = Collect()
    t = tailer_for(str(log), collect)
    tracemalloc.start()
    settle(t, 0.0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 12 * (1 << 20)
    assert "marker-1" in markers(collect.events)
    giant = next(e for e in collect.events if "giant payload" in e.message)
    assert len(giant.message) < 70_000


def test_checkpoint_moves_only_after_enqueue_succeeds(tmp_path: Path, tailer_for) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "app.log"
    log.write_text(traceback_record(1) + traceback_record(2))
    collect = Collect()
    collect.fail_next = 1  # the broker is down for the first hand-over
    t = tailer_for(str(log), collect)
    now = settle(t, 0.0)
    settle(t, now + 1)
    t.close()
    # A restart from the saved checkpoints finds nothing new and loses nothing.
    again = Collect()
    settle(tailer_for(str(log), again), now + 5)
    assert sorted(markers(collect.events)) == ["marker-1", "marker-2"]
    assert again.events == []


# --- the real thing: tracehound tail → Redis, with a SIGKILL in the middle -------------


def queued_events(client: redis.Redis) -> list[dict]:
    """The error events inside the analysis chains waiting on the embed queue or in the
    deferred backlog (one service's many new groups: over the cap, they wait there)."""
    out = []
    for raw in deferred.first_messages(client):
        message = json.loads(raw)
        args = json.loads(base64.b64decode(message["body"]))[0]
        out.append(args[0]["event"])
    return out


def start_tail(log_glob: str, env: dict[str, str], state: Path, logs: Path) -> Proc:
    return spawn(
        "tail",
        [
            tracehound_executable(),
            "tail",
            log_glob,
            "--service",
            "shop-api",
            "--from-start",
            "--state-dir",
            str(state),
        ],
        logs,
        env=env,
    )


def test_sigkill_mid_stream_then_restart_loses_no_error(tmp_path: Path) -> None:
    redis_proc, redis_url = start_redis(tmp_path)
    client = redis.Redis.from_url(redis_url)
    env = {"TRACEHOUND_REDIS_URL": redis_url}
    log = tmp_path / "app.log"
    log.touch()
    total = 600
    errors = {f"marker-{n}" for n in range(total) if n % 10 == 3}
    done = threading.Event()

    def writer() -> None:
        with open(log, "a") as f:
            for n in range(total):
                f.write(traceback_record(n) if n % 10 == 3 else info_line(n))
                f.flush()
                if n % 10 == 0:
                    time.sleep(0.1)  # about 6 s of writing: the kill lands mid-stream
        done.set()

    tail = start_tail(str(log), env, tmp_path / "state", tmp_path / "logs")
    try:
        threading.Thread(target=writer, daemon=True).start()
        wait_until(lambda: len(queued_events(client)) >= 5, 60, "events while writing")
        os.kill(tail.popen.pid, signal.SIGKILL)
        tail.popen.wait(5)
        assert not done.is_set(), "the writer finished before the kill: make it slower"
        done.wait(60)
        tail = start_tail(str(log), env, tmp_path / "state", tmp_path / "logs")

        def all_in() -> bool:
            return errors <= set(markers_of(queued_events(client)))

        wait_until(all_in, 60, "every error record enqueued", interval=0.3)
    finally:
        tail.stop()
        client.close()
        redis_proc.stop()


def markers_of(events: list[dict]) -> list[str]:
    return [m for e in events if (m := marker_in(f"{e['message']} {e['stacktrace']}"))]


def test_the_first_event_of_a_new_tailer_needs_no_writer(tmp_path: Path) -> None:
    """Sanity for the helper above: a subprocess tailer enqueues into the private Redis."""
    redis_proc, redis_url = start_redis(tmp_path)
    client = redis.Redis.from_url(redis_url)
    (tmp_path / "app.log").write_text(traceback_record(5))
    tail = start_tail(
        str(tmp_path / "app.log"),
        {"TRACEHOUND_REDIS_URL": redis_url},
        tmp_path / "state",
        tmp_path / "logs",
    )
    try:
        wait_until(lambda: len(deferred.first_messages(client)) == 1, 60, "one event")
        [event] = queued_events(client)
        assert event["exception_type"] == "ZeroDivisionError"
        assert event["service"] == "shop-api"
    finally:
        tail.stop()
        client.close()
        redis_proc.stop()
