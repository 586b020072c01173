"""Child processes as the demo, the tests and ``tracehound up`` start them: spawned in a
session of their own with their output in a log, and awaited until they serve."""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: object, timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except Exception as exc:  # the service is still starting: any failure means "not yet"
            last = exc
        time.sleep(interval)
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s" + (f" ({last})" if last else ""))


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    stop_signal: int = signal.SIGTERM  # PostgreSQL: SIGINT (SIGTERM waits for every client)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 10.0, *, warm: bool = False) -> None:
        """SIGTERM, then SIGKILL to the whole group after ``timeout``. ``warm``: the first
        SIGTERM goes to the leader only, so a celery worker makes its warm shutdown (finishes
        its tasks, stops its pool) instead of its pool children dying under it."""
        if not self.alive():
            return
        self.terminate(warm=warm)
        self.wait_or_kill(timeout)

    def wait_or_kill(self, timeout: float) -> None:
        """Wait for the exit; after ``timeout``, SIGKILL the whole group."""
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)

    def terminate(self, *, warm: bool = False) -> None:
        with contextlib.suppress(ProcessLookupError):
            if warm:
                self.popen.send_signal(self.stop_signal)
            else:
                os.killpg(self.popen.pid, self.stop_signal)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with(parent: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGTERM when ``parent`` dies, even by SIGKILL (Linux).
    It is tied to the spawning thread, so only the main thread may spawn with it."""

    def arm() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def spawn(
    name: str,
    argv: Sequence[str],
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    *,
    die_with_parent: bool = False,
    user: str | None = None,
    stop_signal: int = signal.SIGTERM,
) -> Proc:
    """Start ``argv`` in a session of its own, output appended to ``log_dir/NAME.log``;
    ``die_with_parent``: terminated when this process dies (Linux only; elsewhere a no-op);
    ``user``: as that user (from root: PostgreSQL refuses to run as root)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    log_file = log_path.open("ab")
    linux = sys.platform.startswith("linux")
    popen = subprocess.Popen(
        list(argv),
        stdout=log_file,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        start_new_session=True,
        preexec_fn=_die_with(os.getpid()) if die_with_parent and linux else None,
        user=user,
        group=pwd.getpwnam(user).pw_gid if user else None,
        extra_groups=[] if user else None,
    )
    log_file.close()
    return Proc(name, popen, log_path, stop_signal)


@dataclass(frozen=True)
class ChildSpec:
    """How to start one local process and how to tell that it serves: what the demo, the tests
    and ``tracehound up`` all start, so they start it the same way."""

    name: str
    argv: tuple[str, ...]
    url: str | None = None  # what clients connect to
    health_url: str | None = None  # answers 2xx while it serves
    env: Mapping[str, str] = field(default_factory=dict)
    ready: Callable[[], bool] | None = None  # raises or False while not serving
    ready_timeout: float = 30.0
    queues: tuple[str, ...] = ()  # a celery worker's; it stops warm (SIGTERM to the leader)
    user: str | None = None  # run as this user (set only when started as root)
    stop_signal: int = signal.SIGTERM  # what asks it to stop


def start(spec: ChildSpec, log_dir: Path, *, die_with_parent: bool = False) -> Proc:
    """Spawn ``spec`` and wait until it is ready; stopped, with its log's tail, if it is not."""
    proc = spawn(
        spec.name,
        spec.argv,
        log_dir,
        env=spec.env,
        die_with_parent=die_with_parent,
        user=spec.user,
        stop_signal=spec.stop_signal,
    )
    if spec.ready is not None:
        ready = spec.ready

        def serving() -> bool:
            if not proc.alive():
                raise ChildExited(f"{spec.name} exited with code {proc.popen.returncode}")
            return ready()

        try:
            wait_until(serving, spec.ready_timeout, spec.name)
        except (TimeoutError, ChildExited) as exc:
            proc.stop()
            raise TimeoutError(f"{exc}\n{proc.log_tail(15)}") from exc
    return proc


class ChildExited(RuntimeError):
    """A process exited while it was awaited."""
