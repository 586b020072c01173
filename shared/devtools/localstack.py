"""Private local processes for the demo and the tests: redis-server, chroma, celery workers.

Everything binds to 127.0.0.1 on a free port and lives in a directory of its own, so a run never
touches a shared Redis or Chroma.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

# The compose topology: one consumer per model queue, one CPU worker for the rest.
WORKER_GROUPS: dict[str, tuple[Sequence[str], int]] = {
    "embed": (("embed",), 1),
    "rerank": (("rerank",), 1),
    "llm": (("llm",), 1),
    "cpu": (("retrieve", "index", "notify"), 2),
}


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

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def spawn(
    name: str,
    argv: Sequence[str],
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Proc:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    log_file = log_path.open("ab")
    popen = subprocess.Popen(
        list(argv),
        stdout=log_file,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        start_new_session=True,
    )
    log_file.close()
    return Proc(name, popen, log_path)


def start_redis(
    workdir: Path, *, port: int | None = None, appendonly: bool = False
) -> tuple[Proc, str]:
    """A private redis-server; ``port`` to start it again where its clients expect it, and
    ``appendonly`` to keep its data across that restart (as production Redis does)."""
    exe = shutil.which("redis-server")
    if not exe:
        raise RuntimeError(
            "redis-server is not installed (Debian/Ubuntu: apt-get install "
            "redis-server; macOS: brew install redis)"
        )
    port = port or free_port()
    data = workdir / "redis"
    data.mkdir(parents=True, exist_ok=True)
    proc = spawn(
        f"redis-{port}",
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes" if appendonly else "no",
            "--appendfsync",
            "always",
            "--dir",
            str(data),
        ],
        workdir / "logs",
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    wait_until(client.ping, 15, "redis-server")
    client.close()
    return proc, url


def chroma_executable() -> str:
    local = Path(sys.executable).parent / "chroma"
    exe = str(local) if local.exists() else shutil.which("chroma")
    if not exe:
        raise RuntimeError("the `chroma` command (from the chromadb package) is not installed")
    return exe


def start_chroma(workdir: Path) -> tuple[Proc, str]:
    port = free_port()
    proc = spawn(
        "chroma",
        [
            chroma_executable(),
            "run",
            "--path",
            str(workdir / "chroma"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        workdir / "logs",
        env={"ANONYMIZED_TELEMETRY": "False"},
    )
    url = f"http://127.0.0.1:{port}"
    wait_until(
        lambda: httpx.get(f"{url}/api/v2/heartbeat", timeout=1).is_success, 60, "chroma server"
    )
    return proc, url


def start_worker(
    name: str, queues: Sequence[str], concurrency: int, workdir: Path, env: Mapping[str, str]
) -> Proc:
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers",
        "worker",
        "-Q",
        ",".join(queues),
        "-c",
        str(concurrency),
        "-n",
        f"{name}@%h",
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
    ]
    return spawn(f"worker-{name}", argv, workdir / "logs", env=env)


def tracehound_executable() -> str:
    return str(Path(sys.executable).parent / "tracehound")


def start_ingest(workdir: Path, env: Mapping[str, str], *args: str) -> tuple[Proc, str]:
    """``tracehound ingest`` on a free port (extra CLI ``args``), ready; (process, URL)."""
    port = free_port()
    proc = spawn(
        f"ingest-{port}",
        [tracehound_executable(), "ingest", "--port", str(port), *args],
        workdir / "logs",
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(f"{url}/healthz", timeout=1).is_success, 30, "ingest")
    except TimeoutError as exc:
        proc.stop()
        raise TimeoutError(f"{exc}\n{proc.log_tail(15)}") from exc
    return proc, url


def start_simulator(kind: str, workdir: Path, *args: str) -> tuple[Proc, str]:
    """The ``ollama`` or ``slack`` simulator in a process of its own (its CPU is not charged
    to whoever measures), on a free port, answering; (process, URL). Its state is read over
    HTTP (``GET /_sim/messages``, ``/_sim/log``)."""
    port = free_port()
    proc = spawn(
        f"{kind}-simulator",
        [sys.executable, "-m", f"shared.devtools.simulators.{kind}", "--port", str(port), *args],
        workdir / "logs",
    )
    url = f"http://127.0.0.1:{port}"
    probe = "/api/tags" if kind == "ollama" else "/_sim/config"
    try:
        wait_until(lambda: httpx.get(url + probe, timeout=1).is_success, 30, f"{kind} simulator")
    except TimeoutError as exc:
        proc.stop()
        raise TimeoutError(f"{exc}\n{proc.log_tail(15)}") from exc
    return proc, url


def wait_for_consumers(redis_url: str, queues: Sequence[str], timeout: float = 90.0) -> None:
    """Until every queue has a worker consuming it (asked through Celery's control API)."""
    from shared.core.pipeline import sender_app
    from shared.core.settings import Settings

    app = sender_app(Settings(redis_url=redis_url))

    def ready() -> bool:
        active = app.control.inspect(timeout=1.0).active_queues() or {}
        consumed = {q["name"] for qs in active.values() for q in qs}
        return set(queues) <= consumed

    try:
        wait_until(ready, timeout, f"workers for queues {', '.join(queues)}", interval=0.5)
    finally:
        app.close()


def simulator_env(
    ollama_url: str, slack_url: str, *, channel: str, rerank_url: str | None = None
) -> dict[str, str]:
    """Settings that point tracehound at the Ollama simulator (and a rerank server when given)
    and at the Slack simulator, for tests and benchmarks."""
    env = {
        "TRACEHOUND_OLLAMA_URL": ollama_url,
        "TRACEHOUND_SLACK_BOT_TOKEN": "xoxb-test-token",
        "TRACEHOUND_SLACK_CHANNEL": channel,
        "TRACEHOUND_SLACK_BASE_URL": slack_url + "/api/",
    }
    if rerank_url:
        env |= {"TRACEHOUND_RERANK_BACKEND": "llamacpp", "TRACEHOUND_RERANK_URL": rerank_url}
    return env


@dataclass
class LocalStack:
    """Redis, Chroma and the workers, private to one directory; stopped on exit."""

    workdir: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    metrics_ports: dict[str, int] = field(default_factory=dict)
    appendonly: bool = False  # production's setting (compose); the demo keeps nothing on disk

    def start_services(self) -> None:
        redis_proc, redis_url = start_redis(self.workdir, appendonly=self.appendonly)
        self.procs.append(redis_proc)
        chroma_proc, chroma_url = start_chroma(self.workdir)
        self.procs.append(chroma_proc)
        self.env = {
            "TRACEHOUND_REDIS_URL": redis_url,
            "TRACEHOUND_CHROMA_URL": chroma_url,
            "TRACEHOUND_DATA_DIR": str(self.workdir),
            **self.extra_env,
        }

    def start_workers(
        self, groups: Mapping[str, tuple[Sequence[str], int]] = WORKER_GROUPS, wait: bool = True
    ) -> dict[str, Proc]:
        started = {}
        for name, (qs, c) in groups.items():
            # Each worker serves its own Prometheus /metrics on a free port.
            self.metrics_ports[name] = free_port()
            env = {**self.env, "TRACEHOUND_METRICS_PORT": str(self.metrics_ports[name])}
            started[name] = start_worker(name, qs, c, self.workdir, env)
        self.procs.extend(started.values())
        if wait:
            queues = [q for qs, _ in groups.values() for q in qs]
            try:
                wait_for_consumers(self.env["TRACEHOUND_REDIS_URL"], queues)
            except TimeoutError as exc:
                logs = "\n".join(f"--- {p.name}\n{p.log_tail(15)}" for p in started.values())
                raise TimeoutError(f"{exc}\n{logs}") from exc
        return started

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()


@contextlib.contextmanager
def local_stack(workdir: Path, extra_env: dict[str, str] | None = None) -> Iterator[LocalStack]:
    stack = LocalStack(workdir, dict(extra_env or {}))
    try:
        stack.start_services()
        yield stack
    finally:
        stack.stop()
