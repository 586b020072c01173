"""Private local processes for the demo and the tests: redis-server, chroma, celery workers.

Everything binds to 127.0.0.1 on a free port and lives in a directory of its own, so a run never
touches a shared Redis or Chroma.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

from shared.core.queues import MODEL_SLOTS
from shared.stack.children import (
    ChildSpec,
    Proc,
    free_port,
    start,
    wait_until,
)
from shared.stack.postgres import start_postgres

# The compose topology: one worker per model queue (its slots share the host's lease for that
# model), one CPU worker for the rest.
WORKER_GROUPS: dict[str, tuple[Sequence[str], int]] = {
    "embed": (("embed",), MODEL_SLOTS),
    "rerank": (("rerank",), MODEL_SLOTS),
    "llm": (("llm",), MODEL_SLOTS),
    "cpu": (("retrieve", "index", "notify", "intake"), 2),
}

# llama-server's -ub when started as the README says (its own default is 512): the Ollama
# simulator stands in for that server wherever tracehound runs on it (tests, demo,
# ``up --simulate``).
README_UBATCH = 2048


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
        """Redis, and the vector store ``extra_env`` names: Chroma, or with
        TRACEHOUND_VECTOR_STORE=pgvector a PostgreSQL of the pgserver wheel."""
        redis_proc, redis_url = start_redis(self.workdir, appendonly=self.appendonly)
        self.procs.append(redis_proc)
        if self.extra_env.get("TRACEHOUND_VECTOR_STORE") == "pgvector":
            store_proc, pg_url = start_postgres(self.workdir)
            store = {"TRACEHOUND_PG_URL": pg_url}
        else:
            store_proc, chroma_url = start_chroma(self.workdir)
            store = {"TRACEHOUND_CHROMA_URL": chroma_url}
        self.procs.append(store_proc)
        self.env = {
            "TRACEHOUND_REDIS_URL": redis_url,
            **store,
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
