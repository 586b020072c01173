"""The state file of a ``tracehound up`` stack: where its services listen, which processes it
runs; and the lock that says whether its supervisor still lives.

``DATA_DIR/stack.json`` is written (atomically) by the supervisor and read by every other
command, so they find the stack without environment variables. ``DATA_DIR/up.lock`` is held
(``flock``) by the supervisor for its whole life: the kernel drops it when the supervisor dies,
even by SIGKILL, so a state file left behind never passes for a running stack.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

STATE_FILE = "stack.json"
LOCK_FILE = "up.lock"
ENV_PREFIX = "TRACEHOUND_"


class ChildState(BaseModel):
    """One supervised process as ``tracehound status`` shows it."""

    model_config = ConfigDict(frozen=True)

    name: str
    pid: int | None
    state: Literal["running", "restarting", "stopped"]
    restarts: int = 0
    quick_exits: int = 0  # consecutive exits soon after a start: a crash loop
    last_exit: int | None = None
    restart_at: float | None = None  # wall clock
    log: str
    argv0: str
    url: str | None = None
    health_url: str | None = None
    queues: tuple[str, ...] = ()


class StackState(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: Literal[1] = 1
    supervisor_pid: int
    status: Literal["starting", "ready", "stopping"]
    simulate: bool
    started_at: float
    ingest_url: str
    # Settings the stack provides (redis_url, chroma_url; the simulators' with --simulate),
    # by Settings field name; an explicit TRACEHOUND_* variable beats them.
    settings: dict[str, str]
    children: tuple[ChildState, ...] = ()


def state_path(data_dir: Path) -> Path:
    return data_dir / STATE_FILE


def read_state(data_dir: Path) -> StackState | None:
    """The state file's content; None when there is none or it is not one (a torn write
    cannot happen: it is replaced whole)."""
    try:
        return StackState.model_validate_json(state_path(data_dir).read_bytes())
    except (OSError, ValidationError):
        return None


def write_state(data_dir: Path, state: StackState) -> None:
    path = state_path(data_dir)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # It holds the stack's ingest token and DSN key: readable by its owner only.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(state.model_dump(mode="json"), indent=1))
    os.replace(tmp, path)


CREDENTIALS_FILE = "credentials.json"


def credentials(data_dir: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The stack's ingest token and Sentry DSN key: from TRACEHOUND_INGEST_TOKEN and
    TRACEHOUND_SENTRY_KEYS when set, else made once and kept in the data dir (owner-only), so
    shippers and SDKs configured with them keep working across restarts of the stack."""
    path = data_dir / CREDENTIALS_FILE
    try:
        kept = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        kept = {}
    made = {
        "ingest_token": kept.get("ingest_token") or secrets.token_urlsafe(32),
        "sentry_keys": kept.get("sentry_keys") or secrets.token_hex(16),
    }
    if made != kept:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(made))
    return {k: v for k, v in made.items() if f"{ENV_PREFIX}{k.upper()}" not in environ}


def remove_state(data_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        state_path(data_dir).unlink()


class StackRunning(RuntimeError):
    """Another supervisor holds this data dir."""


def acquire_lock(data_dir: Path, wait: float = 1.0) -> IO[bytes]:
    """The data dir's lock, held until the returned file is closed or this process dies.
    ``wait``: a status probe holds it shared for an instant, so try for a moment."""
    f = (data_dir / LOCK_FILE).open("ab")
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return f
        except BlockingIOError:
            if time.monotonic() >= deadline:
                f.close()
                raise StackRunning(str(data_dir)) from None
            time.sleep(0.05)


def supervisor_alive(data_dir: Path) -> bool:
    """Whether a supervisor holds ``data_dir`` (its lock is taken)."""
    try:
        f = (data_dir / LOCK_FILE).open("rb")
    except FileNotFoundError:
        return False
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def live_state(data_dir: Path) -> tuple[StackState | None, bool]:
    """(state, running): the state file, and whether its supervisor still holds the dir."""
    state = read_state(data_dir)
    return state, state is not None and supervisor_alive(data_dir)


def settings_overrides(state: StackState, environ: Mapping[str, str]) -> dict[str, str]:
    """The stack's settings that no TRACEHOUND_* variable sets: explicit beats the state file."""
    return {k: v for k, v in state.settings.items() if f"{ENV_PREFIX}{k.upper()}" not in environ}


def still_ours(child: ChildState) -> bool:
    """Whether ``child.pid`` is still the process the supervisor started (pids are reused): a
    session leader, as all its children are, running the same program (its first or second
    word: a script runs under its interpreter, and redis-server rewrites its command line)."""
    if child.pid is None:
        return False
    try:
        if os.getsid(child.pid) != child.pid:
            return False
    except ProcessLookupError:
        return False
    if sys.platform.startswith("linux"):
        try:
            cmdline = (Path("/proc") / str(child.pid) / "cmdline").read_bytes()
        except OSError:
            return False
        words = cmdline.replace(b"\0", b" ").split()[:2]
        return Path(child.argv0).name in {Path(os.fsdecode(w)).name for w in words}
    return True


def reap_orphans(state: StackState, timeout: float = 10.0) -> list[str]:
    """Stop what a dead supervisor left running (each child's whole process group); the
    names of those stopped. A child that outlived a SIGKILLed supervisor would otherwise keep
    Redis's append-only file, Chroma's directory and the ports."""
    left = [c for c in state.children if still_ours(c)]
    for child in left:
        assert child.pid is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for child in left:
        assert child.pid is not None
        while time.monotonic() < deadline and _group_alive(child.pid):
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
    return [c.name for c in left]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by init) still counts; it holds nothing.
    try:
        status = (Path("/proc") / str(pgid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return status != "Z"
