"""Private local processes for the demo and the tests: redis-server, chroma, celery workers.

Everything binds to 127.0.0.1 on a free port and lives in a directory of its own, so a run never
touches a shared Redis or Chroma.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

# The compose topology: one consumer per model queue, one CPU worker for the rest.
WORKER_GROUPS: dict[str, tuple[Sequence[str], int]] = {
    "embed": (("embed",), 1),
    "rerank": (("rerank",), 1),
    "llm": (("llm",), 1),
    "cpu": (("retrieve", "index", "notify", "intake"), 2),
}

# llama-server's -ub when started as the README says (its own default is 512): the Ollama
# simulator stands in for that server wherever tracehound runs on it (tests, demo,
# ``up --simulate``).
README_UBATCH = 2048


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
                self.popen.send_signal(signal.SIGTERM)
            else:
                os.killpg(self.popen.pid, signal.SIGTERM)

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
) -> Proc:
    """Start ``argv`` in a session of its own, output appended to ``log_dir/NAME.log``;
    ``die_with_parent``: terminated when this process dies (Linux only; elsewhere a no-op)."""
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
    )
    log_file.close()
    return Proc(name, popen, log_path)


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


def start(spec: ChildSpec, log_dir: Path, *, die_with_parent: bool = False) -> Proc:
    """Spawn ``spec`` and wait until it is ready; stopped, with its log's tail, if it is not."""
    proc = spawn(spec.name, spec.argv, log_dir, env=spec.env, die_with_parent=die_with_parent)
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


def redis_executable() -> str:
    exe = shutil.which("redis-server")
    if not exe:
        raise RuntimeError(
            "redis-server is not installed (Debian/Ubuntu: apt-get install "
            "redis-server; macOS: brew install redis)"
        )
    return exe


def redis_answers(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_timeout=2)
    try:
        return bool(client.ping())
    finally:
        client.close()


def http_answers(url: str) -> bool:
    return httpx.get(url, timeout=1).is_success


def redis_spec(
    workdir: Path, port: int, *, appendonly: bool = False, name: str | None = None
) -> ChildSpec:
    data = workdir / "redis"
    data.mkdir(parents=True, exist_ok=True)
    url = f"redis://127.0.0.1:{port}/0"
    argv = (
        redis_executable(),
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
    )
    return ChildSpec(
        name or f"redis-{port}", argv, url, ready=lambda: redis_answers(url), ready_timeout=15
    )


def start_redis(
    workdir: Path, *, port: int | None = None, appendonly: bool = False
) -> tuple[Proc, str]:
    """A private redis-server; ``port`` to start it again where its clients expect it, and
    ``appendonly`` to keep its data across that restart (as production Redis does)."""
    spec = redis_spec(workdir, port or free_port(), appendonly=appendonly)
    assert spec.url is not None
    return start(spec, workdir / "logs"), spec.url


def chroma_executable() -> str:
    local = Path(sys.executable).parent / "chroma"
    exe = str(local) if local.exists() else shutil.which("chroma")
    if not exe:
        raise RuntimeError("the `chroma` command (from the chromadb package) is not installed")
    return exe


def chroma_spec(workdir: Path, port: int) -> ChildSpec:
    url = f"http://127.0.0.1:{port}"
    argv = (
        chroma_executable(),
        "run",
        "--path",
        str(workdir / "chroma"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    )
    return ChildSpec(
        "chroma",
        argv,
        url,
        f"{url}/api/v2/heartbeat",
        env={"ANONYMIZED_TELEMETRY": "False"},
        ready=lambda: http_answers(f"{url}/api/v2/heartbeat"),
        ready_timeout=60,
    )


def start_chroma(workdir: Path, port: int | None = None) -> tuple[Proc, str]:
    """A chroma server on ``workdir/chroma``; ``port`` to start it again where it was."""
    spec = chroma_spec(workdir, port or free_port())
    assert spec.url is not None
    return start(spec, workdir / "logs"), spec.url


def worker_spec(
    name: str, queues: Sequence[str], concurrency: int, env: Mapping[str, str]
) -> ChildSpec:
    argv = (
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
    )
    return ChildSpec(f"worker-{name}", argv, env=dict(env), queues=tuple(queues))


def worker_specs(
    groups: Mapping[str, tuple[Sequence[str], int]], env: Mapping[str, str]
) -> list[ChildSpec]:
    """One worker per group, each serving its own Prometheus /metrics on a free port."""
    return [
        worker_spec(name, qs, c, {**env, "TRACEHOUND_METRICS_PORT": str(free_port())})
        for name, (qs, c) in groups.items()
    ]


def start_worker(
    name: str, queues: Sequence[str], concurrency: int, workdir: Path, env: Mapping[str, str]
) -> Proc:
    return start(worker_spec(name, queues, concurrency, env), workdir / "logs")


def tracehound_executable() -> str:
    return str(Path(sys.executable).parent / "tracehound")


def ingest_spec(
    env: Mapping[str, str], port: int, *args: str, name: str | None = None
) -> ChildSpec:
    """``tracehound ingest`` on ``port`` (extra CLI ``args``)."""
    url = f"http://127.0.0.1:{port}"
    return ChildSpec(
        name or f"ingest-{port}",
        (tracehound_executable(), "ingest", "--port", str(port), *args),
        url,
        f"{url}/healthz",
        env=dict(env),
        ready=lambda: http_answers(f"{url}/healthz"),
    )


def slack_listen_spec(env: Mapping[str, str]) -> ChildSpec:
    """``tracehound slack-listen``: Socket Mode (its token comes from the environment)."""
    return ChildSpec(
        "slack-listen", (tracehound_executable(), "slack-listen"), env=dict(env), ready=None
    )


def start_ingest(workdir: Path, env: Mapping[str, str], *args: str) -> tuple[Proc, str]:
    """``tracehound ingest`` on a free port (extra CLI ``args``), ready; (process, URL)."""
    spec = ingest_spec(env, free_port(), *args)
    assert spec.url is not None
    return start(spec, workdir / "logs"), spec.url


def simulator_spec(kind: str, port: int, *args: str) -> ChildSpec:
    """The ``ollama`` or ``slack`` simulator in a process of its own on ``port``."""
    url = f"http://127.0.0.1:{port}"
    probe = "/api/tags" if kind == "ollama" else "/_sim/config"
    return ChildSpec(
        f"{kind}-simulator",
        (sys.executable, "-m", f"shared.devtools.simulators.{kind}", "--port", str(port), *args),
        url,
        url + probe,
        ready=lambda: http_answers(url + probe),
    )


def start_simulator(kind: str, workdir: Path, *args: str) -> tuple[Proc, str]:
    """The ``ollama`` or ``slack`` simulator in a process of its own (its CPU is not charged
    to whoever measures), on a free port, answering; (process, URL). Its state is read over
    HTTP (``GET /_sim/messages``, ``/_sim/log``)."""
    spec = simulator_spec(kind, free_port(), *args)
    assert spec.url is not None
    return start(spec, workdir / "logs"), spec.url


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
        for name, spec in zip(groups, worker_specs(groups, self.env), strict=True):
            self.metrics_ports[name] = int(spec.env["TRACEHOUND_METRICS_PORT"])
            started[name] = start(spec, self.workdir / "logs")
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
