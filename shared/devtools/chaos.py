"""Breaking the tailer on purpose: real writers, real logrotate, kill -9 and a Redis restart.

Used by tests/integration/test_tail_chaos.py (small runs that assert exact counts) and by
benchmarks/tail_chaos.py (the issue's sizes, printed as a table). A scenario runs a private
redis-server and a real ``tracehound tail`` process; a writer process logs error tracebacks
through Python's ``logging`` handlers, each error with its own marker and its own call site (so
each is its own error group and starts its own analysis chain). At the end the enqueued chains
and the groups' counts are compared with what the writer wrote and what is still on disk:

- **delivered**: distinct errors whose analysis chain was enqueued (or kept in the deferred
  backlog: each error is a new group of one service, and the cap of new analyses per service
  holds all but the first 20 back — counted, to be started later);
- **lost**: errors in the log files that were never delivered (the tailer's fault);
- **not on disk**: errors written but in no file at the end — copytruncate's window between
  the copy and the truncate (a tailer catches them only if it read them in between);
- **double-counted**: extra counts (a group counted more than once);
- **chain twice**: a group window's analysis chain enqueued a second time (the producer died
  between enqueueing it and recording that it did, and replayed the event); the chain's first
  stage stops such a duplicate (tests/integration/test_grouping.py), so it is no second
  analysis, but it is reported here because this rig runs no workers.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from base64 import b64decode
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from shared.core import keys
from shared.groups import deferred
from shared.stack.children import Proc, spawn, wait_until
from shared.stack.localstack import start_redis, tracehound_executable

SERVICE = "shop-api"
MARKER = re.compile(r"marker-([a-z]+)")

WRITER = r"""
import logging, logging.handlers, sys, time
path, kind, start, count, infos, max_bytes, pace = sys.argv[1:8]
start, count, infos, max_bytes = int(start), int(count), int(infos), int(max_bytes)
pace = float(pace)
if kind == "rotating":
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=max_bytes, backupCount=10000)
elif kind == "watched":
    handler = logging.handlers.WatchedFileHandler(path)
else:
    handler = logging.FileHandler(path)
handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
log = logging.getLogger("shop")
log.addHandler(handler)
log.setLevel(logging.INFO)
log.propagate = False

def tag(n):
    s = ""
    for _ in range(4):
        n, r = divmod(n, 26)
        s = chr(97 + r) + s
    return s

SOURCE = "def place_order(items):\n    return sum(items) / len(items)\n"
for n in range(start, start + count):
    t = tag(n)
    # Its own module path per error: its own in-app frame, so its own error group.
    code = compile(SOURCE, f"/srv/app/shop/orders_{t}.py", "exec")
    ns = {}
    exec(code, ns)
    try:
        ns["place_order"]([])
    except ZeroDivisionError:
        log.exception("order failed marker-%s", t)
    for i in range(infos):
        log.info("served request %d of batch %s in 12ms", i, t)
    if pace:
        time.sleep(pace)
handler.close()
"""


def tag(n: int) -> str:
    out = ""
    for _ in range(4):
        n, r = divmod(n, 26)
        out = chr(97 + r) + out
    return out


@dataclass
class Outcome:
    scenario: str
    written: int
    on_disk: int
    delivered: int
    lost: int
    doubled: int
    seconds: float
    chain_twice: int = 0

    @property
    def not_on_disk(self) -> int:
        return self.written - self.on_disk


class Rig:
    """A private redis-server, a log directory and ``tracehound tail`` processes."""

    def __init__(self, workdir: Path, *, appendonly: bool = False) -> None:
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.appendonly = appendonly
        self.redis_proc, self.redis_url = start_redis(workdir, appendonly=appendonly)
        self.port = int(self.redis_url.rsplit(":", 1)[1].split("/")[0])
        self.client = redis.Redis.from_url(self.redis_url)
        self.tails: list[Proc] = []
        self.state = workdir / "data" / "tail" / f"{SERVICE}.json"
        self.last_start = 0.0  # when the latest tailer was started (time.time())

    def env(self) -> dict[str, str]:
        return {
            "TRACEHOUND_REDIS_URL": self.redis_url,
            "TRACEHOUND_DATA_DIR": str(self.workdir / "data"),
            "TRACEHOUND_LOG_LEVEL": "INFO",
        }

    def start_tail(self, pattern: str, *extra: str, ready: bool = True) -> Proc:
        """A ``tracehound tail`` process; with ``ready``, once its first scan is saved (the
        first run reads files already there from their end, as tail -F does)."""
        state = self.state
        self.last_start = time.time()
        proc = spawn(
            f"tail-{len(self.tails)}",
            [tracehound_executable(), "tail", pattern, "--service", SERVICE, *extra],
            self.workdir / "proc-logs",
            env=self.env(),
        )
        self.tails.append(proc)
        if ready:
            wait_until(state.exists, 60, "the tailer's first scan")
        return proc

    def kill_tail(self, proc: Proc) -> None:
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(10)

    def write(
        self, kind: str, start: int, count: int, *, infos: int = 5, max_bytes: int = 0,
        pace: float = 0.0, path: Path | None = None,
    ) -> subprocess.Popen[bytes]:  # fmt: skip
        script = self.workdir / "writer.py"
        script.write_text(WRITER)
        target = path or self.logs / "app.log"
        argv = [sys.executable, str(script), str(target), kind, str(start), str(count)]
        argv += [str(infos), str(max_bytes), str(pace)]
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def restart_redis(self, down_s: float) -> None:
        self.redis_proc.stop()
        time.sleep(down_s)
        self.redis_proc, _ = start_redis(self.workdir, port=self.port, appendonly=self.appendonly)

    # --- what happened ---------------------------------------------------------------

    def delivered(self) -> tuple[set[str], int]:
        """Markers whose analysis chain is enqueued, and how many chains there are."""
        found: list[str] = []
        for raw in deferred.first_messages(self.client):
            event = json.loads(b64decode(json.loads(raw)["body"]))[0][0]["event"]
            m = MARKER.search(f"{event['message']}\n{event['stacktrace']}")
            if m:
                found.append(m[1])
        return set(found), len(found)

    def extra_counts(self) -> int:
        """Counts beyond one per group (each error is its own group)."""
        extra = 0
        for key in self.client.scan_iter(match=keys.GROUP_PATTERN, count=1000):
            if key.count(b":") != 3:  # the group's :message / :update keys
                continue
            extra += max(0, int(self.client.hget(key, "total") or 0) - 1)
        return extra

    def on_disk(self) -> set[str]:
        """Markers of the error records still in some file of the log directory."""
        found: set[str] = set()
        for path in self.logs.iterdir():
            if path.is_file():
                text = path.read_text(errors="replace")
                found |= {m[1] for m in MARKER.finditer(text)}
        return found

    def settle(self, expected: int, timeout: float = 120.0, quiet: float = 3.0) -> None:
        """Until every expected marker is delivered, or nothing new arrived for ``quiet`` s
        while the latest tailer runs (it saved its checkpoints since it was started: one
        restarted after a kill -9 may take seconds to start on a loaded machine, and a quiet
        spell before it reads is not the end)."""
        deadline = time.monotonic() + timeout
        last, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            n = self.client.llen("embed") + self.client.hlen(keys.DEFERRED_MESSAGES)
            if n != last or not self._saved_since_start():
                last, since = n, time.monotonic()
            elif (
                n >= expected and time.monotonic() - since >= 0.5
            ) or time.monotonic() - since >= quiet:
                return
            time.sleep(0.2)

    def _saved_since_start(self) -> bool:
        try:
            return self.state.stat().st_mtime >= self.last_start
        except OSError:
            return False

    def outcome(self, scenario: str, written: int, seconds: float) -> Outcome:
        markers, chains = self.delivered()
        disk = self.on_disk()
        return Outcome(
            scenario=scenario,
            written=written,
            on_disk=len(disk),
            delivered=len(markers),
            lost=len(disk - markers),
            doubled=self.extra_counts(),
            seconds=seconds,
            chain_twice=chains - len(markers),
        )

    def close(self) -> None:
        for proc in self.tails:
            proc.stop()
        self.client.close()
        self.redis_proc.stop()


def _logrotate(rig: Rig, mode: str, stop: threading.Event, every: float) -> None:
    """Run the real logrotate on the log directory every ``every`` seconds until ``stop``."""
    exe = shutil.which("logrotate") or "/usr/sbin/logrotate"
    conf = rig.workdir / "logrotate.conf"
    conf.write_text(
        f"{rig.logs}/app.log {{\n  rotate 10000\n  {mode}\n  missingok\n  nocompress\n"
        "  notifempty\n}\n"
    )
    state = rig.workdir / "logrotate.state"
    while not stop.wait(every):
        subprocess.run([exe, "-f", "-s", str(state), str(conf)], check=False, capture_output=True)


def _wait_writer(writer: subprocess.Popen[bytes], timeout: float = 300.0) -> None:
    _, err = writer.communicate(timeout=timeout)
    if writer.returncode != 0:
        raise RuntimeError(f"log writer failed: {err.decode(errors='replace')[-500:]}")


# --- scenarios -------------------------------------------------------------------------------


def plain(rig: Rig, errors: int) -> int:
    """No rotation: the baseline."""
    rig.start_tail(str(rig.logs / "app.log"))
    _wait_writer(rig.write("plain", 0, errors))
    return errors


def rotating(rig: Rig, errors: int, *, glob: str, max_bytes: int) -> int:
    """Python's RotatingFileHandler at full speed."""
    rig.start_tail(str(rig.logs / glob))
    _wait_writer(rig.write("rotating", 0, errors, max_bytes=max_bytes, infos=20))
    return errors


def logrotate(rig: Rig, errors: int, *, mode: str, glob: str, pace: float) -> int:
    """The real logrotate binary rotating while a writer logs (a WatchedFileHandler reopens its
    file after ``create``; a plain FileHandler keeps appending after ``copytruncate``)."""
    rig.start_tail(str(rig.logs / glob))
    stop = threading.Event()
    rotator = threading.Thread(target=_logrotate, args=(rig, mode, stop, 0.3), daemon=True)
    writer = rig.write("watched" if mode == "create" else "plain", 0, errors, pace=pace)
    rotator.start()
    try:
        _wait_writer(writer)
    finally:
        stop.set()
        rotator.join()
    return errors


def kill9(rig: Rig, errors: int, *, kills: int, seed: int = 7) -> int:
    """kill -9 the tailer at random moments while the writer logs; restart it with the same
    command line each time (no --from-start)."""
    pattern = str(rig.logs / "app.log*")
    tail = rig.start_tail(pattern)
    writer = rig.write("rotating", 0, errors, max_bytes=64_000, infos=5, pace=0.004)
    rng = random.Random(seed)
    for _ in range(kills):
        time.sleep(rng.uniform(0.3, 1.5))
        rig.kill_tail(tail)
        tail = rig.start_tail(pattern, ready=False)
    _wait_writer(writer)
    return errors


def restart_with_rotation(rig: Rig, errors: int) -> int:
    """D1: stop the tailer, rotate, write more, start it again: the new file is read whole."""
    pattern = str(rig.logs / "app.log*")
    tail = rig.start_tail(pattern)
    half = errors // 2
    _wait_writer(rig.write("plain", 0, half))
    rig.settle(half, timeout=60)
    tail.stop()
    (rig.logs / "app.log").rename(rig.logs / "app.log.1")
    _wait_writer(rig.write("plain", half, errors - half))
    rig.start_tail(pattern, ready=False)
    return errors


def redis_outage(rig: Rig, errors: int, *, down_s: float) -> int:
    """Redis stops while the writer logs and comes back ``down_s`` later (append-only, so the
    counts already made survive)."""
    log = rig.logs / "app.log"
    rig.start_tail(str(log))
    writer = rig.write("plain", 0, errors, pace=0.01)
    # Redis stops once the writer is a third of the way in, counted from its first lines and
    # not from its start: on a loaded machine a process takes seconds to start, and an outage
    # that ended before the writing began would test nothing.
    third = errors // 3
    wait_until(lambda: log.exists() and log.read_bytes().count(b"marker-") >= third, 120,
               "the writer's first third")  # fmt: skip
    rig.restart_redis(down_s)
    _wait_writer(writer)
    return errors


Scenario = Callable[[Rig], int]


def run(
    name: str, workdir: Path, scenario: Scenario, *, appendonly: bool = False, quiet: float = 3.0
) -> Outcome:
    """Run ``scenario`` on a fresh rig; ``quiet``: seconds without news that end the wait (more
    than the tailer's backoff after an outage)."""
    rig = Rig(workdir, appendonly=appendonly)
    try:
        t0 = time.monotonic()
        written = scenario(rig)
        rig.settle(written, quiet=quiet)
        return rig.outcome(name, written, time.monotonic() - t0)
    finally:
        rig.close()


__all__ = ["Outcome", "Rig", "run", "tag", "wait_until"]
