"""``tracehound up`` and ``down``: the whole stack on this machine, without Docker, under one
supervisor and kept running; every other command finds it through the data dir's state file.

The topology is compose's (localstack.WORKER_GROUPS): a private redis-server (append-only, in
DATA_DIR/redis), the vector store — a ``chroma run`` server (DATA_DIR/chroma), or with
``--vector-store pgvector`` the PostgreSQL at TRACEHOUND_PG_URL or else a bundled one
(DATA_DIR/postgres, shared/stack/postgres.py) — one celery worker per model queue at
concurrency 1 and the CPU worker, and the HTTP ingest endpoint. Each child logs to
DATA_DIR/logs/NAME.log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx
import redis
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from shared.index.store_health import mask_password
from shared.models.health import has_model, ollama_models
from shared.stack import stackfile
from shared.stack.children import free_port, spawn, wait_until
from shared.stack.localstack import (
    README_UBATCH,
    WORKER_GROUPS,
    chroma_executable,
    chroma_spec,
    ingest_spec,
    redis_answers,
    redis_executable,
    redis_spec,
    simulator_env,
    simulator_spec,
    slack_listen_spec,
    wait_for_consumers,
    worker_specs,
)
from shared.stack.postgres import bin_dir, init_cluster, postgres_spec
from shared.stack.supervisor import Supervisor

log = logging.getLogger(__name__)

SIMULATED_CHANNEL = "C0TRACEHOUND"
READY_TIMEOUT = 300.0  # chroma and four workers importing on a loaded 2-core machine
DOWN_TIMEOUT = 120.0  # a worker's warm shutdown finishes its task first


@dataclass(frozen=True)
class UpOptions:
    data_dir: Path  # absolute
    ingest_port: int
    simulate: bool
    ollama_url: str = ""  # the configured one, checked (not used with --simulate)
    models: tuple[str, ...] = ()  # what it must have pulled
    slack_listen: bool = False  # TRACEHOUND_SLACK_APP_TOKEN is set: receive button presses
    vector_store: str = "chroma"  # or "pgvector"
    pg_url: str | None = None  # pgvector: use this server instead of a bundled one


def check_data_dir(data_dir: Path) -> str | None:
    """Why ``data_dir`` cannot hold a stack, or None."""
    try:
        (data_dir / "logs").mkdir(parents=True, exist_ok=True)
        probe = data_dir / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return f"the data dir {data_dir} is not writable: {exc.strerror or exc}"
    return None


def port_free(port: int) -> bool:
    with socket.socket() as s:
        # As uvicorn binds: a port in TIME_WAIT is free to it.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def check_can_start(opts: UpOptions) -> str | None:
    """What prevents starting (a missing program, the ingest port taken), or None."""
    try:
        redis_executable()
        if opts.vector_store == "pgvector":
            if not opts.pg_url:
                bin_dir()
        else:
            chroma_executable()
    except RuntimeError as exc:
        return str(exc)
    if not port_free(opts.ingest_port):
        return (
            f"port {opts.ingest_port} is in use on 127.0.0.1: stop what listens there or "
            "choose another with --ingest-port"
        )
    return None


def already_running(data_dir: Path) -> str:
    state = stackfile.read_state(data_dir)
    pid = f" (supervisor pid {state.supervisor_pid}, ingest {state.ingest_url})" if state else ""
    return (
        f"a tracehound stack is already running on {data_dir}{pid}: `tracehound down "
        f"--data-dir {data_dir}` stops it"
    )


def simulate_notice(ollama_url: str, slack_url: str) -> Panel:
    return Panel(
        f"--simulate: USING THE OLLAMA SIMULATOR ({ollama_url}) AND THE SLACK SIMULATOR "
        f"({slack_url}).\nHashed-token embeddings, lexical rerank and a canned analysis that "
        "cites the best candidate; messages go to the simulator, not to Slack. No real model "
        "runs.\nStart without --simulate to use the configured Ollama and Slack.",
        title="SIMULATED MODELS AND SLACK",
        style="bold yellow",
    )


def ollama_warning(opts: UpOptions, err: Console) -> None:
    """Say when the configured Ollama does not answer or lacks a model: the stack still starts
    (analyses say they degraded, and run again once it answers), but the user should know."""
    models = ollama_models(opts.ollama_url)
    if models is None:
        problem = f"no Ollama answers at {opts.ollama_url}"
    else:
        missing = [m for m in opts.models if not has_model(models, m)]
        if not missing:
            return
        problem = f"the Ollama at {opts.ollama_url} lacks " + ", ".join(missing)
    err.print(
        f"[yellow]warning:[/yellow] {problem}: analyses will be degraded until it does "
        "(set TRACEHOUND_OLLAMA_URL, or try everything with --simulate)",
        highlight=False,
    )


def refused(opts: UpOptions, claim: Callable[[], bool], err: Console) -> int | None:
    """The exit code when the stack cannot start (said on ``err``), else None. ``claim`` takes
    or probes the data dir's lock: False when another supervisor holds it."""
    problem = check_data_dir(opts.data_dir)
    if problem is None and not claim():
        err.print(f"[red]error:[/red] {already_running(opts.data_dir)}", highlight=False)
        return 1
    problem = problem or check_can_start(opts)
    if problem:
        err.print(f"[red]error:[/red] {problem}", highlight=False)
        return 2
    if not opts.simulate:
        ollama_warning(opts, err)
    return None


def run_up(opts: UpOptions, *, err: Console) -> int:
    """Supervise the stack in this process until SIGINT/SIGTERM; the exit code."""
    data_dir = opts.data_dir
    with contextlib.ExitStack() as held:

        def claim() -> bool:
            try:
                held.enter_context(stackfile.acquire_lock(data_dir))
            except stackfile.StackRunning:
                return False
            return True

        code = refused(opts, claim, err)
        if code is not None:
            return code
        stale = stackfile.read_state(data_dir)
        if stale is not None:
            # Its supervisor died without stopping them (SIGKILL, or not on Linux where its
            # children are not armed to die with it).
            reaped = stackfile.reap_orphans(stale)
            if reaped:
                log.warning("up.orphans_stopped", extra={"children": ",".join(reaped)})
        return _supervise(opts, err)


def _supervise(opts: UpOptions, err: Console) -> int:
    data_dir = opts.data_dir
    sup = Supervisor(data_dir / "logs")
    started_at = time.time()
    provided: dict[str, str] = {}
    ingest_url = f"http://127.0.0.1:{opts.ingest_port}"
    phase: Literal["starting", "ready", "stopping"] = "starting"

    def publish() -> None:
        stackfile.write_state(
            data_dir,
            stackfile.StackState(
                supervisor_pid=os.getpid(),
                status=phase,
                simulate=opts.simulate,
                started_at=started_at,
                ingest_url=ingest_url,
                settings=provided,
                children=tuple(sup.states()),
            ),
        )

    sup.on_change = publish
    publish()
    # SIGTERM (``tracehound down``) stops the stack as Ctrl-C does (even if a shell started
    # this in the background with SIGINT ignored).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = 0
    try:
        env = {"TRACEHOUND_DATA_DIR": str(data_dir)}
        # Authenticated by default: ingest gets a token and a DSN key of its own, which every
        # command reads from the stack (`tracehound token`, `tracehound dsn`).
        made = stackfile.credentials(data_dir, os.environ)
        env |= {f"{stackfile.ENV_PREFIX}{k.upper()}": v for k, v in made.items()}
        provided |= made
        if opts.simulate:
            ollama = sup.start(
                simulator_spec("ollama", free_port(), "--rerank-ubatch", str(README_UBATCH))
            ).spec.url
            slack = sup.start(simulator_spec("slack", free_port())).spec.url
            assert ollama and slack
            sim = simulator_env(ollama, slack, channel=SIMULATED_CHANNEL, rerank_url=ollama)
            env |= sim
            provided |= {k.removeprefix(stackfile.ENV_PREFIX).lower(): v for k, v in sim.items()}
            err.print(simulate_notice(ollama, slack))
        redis_url = sup.start(
            redis_spec(data_dir, free_port(), appendonly=True, name="redis")
        ).spec.url
        assert redis_url
        store = _start_store(opts, sup)
        provided |= {"redis_url": redis_url, **store}
        env |= {"TRACEHOUND_REDIS_URL": redis_url}
        env |= {f"{stackfile.ENV_PREFIX}{k.upper()}": v for k, v in store.items()}
        store_url = store.get("chroma_url") or mask_password(store.get("pg_url", ""))
        for spec in worker_specs(WORKER_GROUPS, env):
            sup.start(spec)
        queues = [q for qs, _ in WORKER_GROUPS.values() for q in qs]
        wait_for_consumers(redis_url, queues, timeout=READY_TIMEOUT)
        sup.start(ingest_spec(env, opts.ingest_port, name="ingest"))
        if opts.slack_listen:
            sup.start(slack_listen_spec(env))
        phase = "ready"
        publish()
        log.info("up.ready", extra={"data_dir": str(data_dir), "ingest": ingest_url})
        err.print(
            f"tracehound is up on {data_dir}: ingest {ingest_url}/v1/events, redis "
            f"{redis_url}, {opts.vector_store} {store_url}; logs in {data_dir / 'logs'}. "
            "Ctrl-C or `tracehound down` stops it.",
            highlight=False,
        )
        while True:
            sup.tend()
            time.sleep(0.5)
    except KeyboardInterrupt:
        log.info("up.stopping", extra={"data_dir": str(data_dir)})
    except (TimeoutError, RuntimeError, OSError) as exc:
        err.print(f"[red]error:[/red] the stack did not start: {exc}", highlight=False)
        code = 1
    finally:
        # A second Ctrl-C must not leave half the stack running.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        phase = "stopping"
        publish()
        sup.stop_all()
        stackfile.remove_state(data_dir)
        log.info("up.stopped", extra={"data_dir": str(data_dir)})
    return code


def _start_store(opts: UpOptions, sup: Supervisor) -> dict[str, str]:
    """Start the vector store (unless it is an outside PostgreSQL); the settings it provides."""
    if opts.vector_store != "pgvector":
        chroma_url = sup.start(chroma_spec(opts.data_dir, free_port())).spec.url
        assert chroma_url
        return {"vector_store": "chroma", "chroma_url": chroma_url}
    if opts.pg_url:
        return {"vector_store": "pgvector", "pg_url": opts.pg_url}
    pgdata = opts.data_dir / "postgres"
    init_cluster(pgdata)
    pg_url = sup.start(postgres_spec(pgdata, free_port())).spec.url
    assert pg_url
    return {"vector_store": "pgvector", "pg_url": pg_url}


def run_detached(argv: Sequence[str], opts: UpOptions, *, err: Console) -> int:
    """Start ``argv`` (this command without --detach) in the background and return once the
    stack is ready, or with its log's tail when it fails to start."""
    data_dir = opts.data_dir
    code = refused(opts, lambda: not stackfile.supervisor_alive(data_dir), err)
    if code is not None:
        return code
    proc = spawn("up", argv, data_dir / "logs")

    def ready() -> bool:
        state = stackfile.read_state(data_dir)
        return (
            state is not None
            and state.supervisor_pid == proc.popen.pid
            and (state.status == "ready")
        )

    try:
        wait_until(lambda: not proc.alive() or ready(), READY_TIMEOUT, "the stack", interval=0.2)
    except TimeoutError:
        proc.stop(DOWN_TIMEOUT)
        err.print(f"[red]error:[/red] the stack was not ready after {READY_TIMEOUT:.0f}s:")
        err.print(proc.log_tail(20), highlight=False, markup=False)
        return 1
    if not proc.alive():
        err.print(f"[red]error:[/red] the stack did not start ({proc.log_path}):")
        err.print(proc.log_tail(20), highlight=False, markup=False)
        return proc.popen.returncode or 1
    state = stackfile.read_state(data_dir)
    assert state is not None
    if state.simulate:
        err.print(simulate_notice(state.settings["ollama_url"], state.settings["slack_base_url"]))
    err.print(
        f"tracehound is up in the background (supervisor pid {proc.popen.pid}) on {data_dir}: "
        f"ingest {state.ingest_url}/v1/events; `tracehound status` shows it, `tracehound down` "
        f"stops it; its log: {proc.log_path}",
        highlight=False,
    )
    return 0


def run_down(data_dir: Path, *, err: Console) -> int:
    """Stop the stack on ``data_dir``; clean up after a supervisor that was killed."""
    state, running = stackfile.live_state(data_dir)
    if running:
        assert state is not None
        os.kill(state.supervisor_pid, signal.SIGTERM)
        try:
            wait_until(
                lambda: not stackfile.supervisor_alive(data_dir), DOWN_TIMEOUT, "the supervisor"
            )
        except TimeoutError as exc:
            err.print(f"[red]error:[/red] {exc}: it still runs (pid {state.supervisor_pid})")
            return 1
        err.print(f"stopped the stack on {data_dir}", highlight=False)
        return 0
    if state is None:
        err.print(f"no tracehound stack on {data_dir}", highlight=False)
        return 0
    reaped = stackfile.reap_orphans(state)
    stackfile.remove_state(data_dir)
    err.print(
        f"the stack on {data_dir} was not running (its supervisor, pid {state.supervisor_pid}, "
        f"is gone); stopped what it left: {', '.join(reaped) or 'nothing'}",
        highlight=False,
    )
    return 0


def child_health(child: stackfile.ChildState, consumed: set[str]) -> str:
    """``ok`` or what is wrong, asked now: a worker consumes its queues, a server answers."""
    if child.state != "running":
        return child.state
    try:
        if child.queues:
            return "ok" if set(child.queues) <= consumed else "not consuming"
        if child.health_url:
            return "ok" if httpx.get(child.health_url, timeout=2).is_success else "not answering"
        if child.url and child.url.startswith("redis://"):
            return "ok" if redis_answers(child.url) else "not answering"
    except (httpx.HTTPError, redis.RedisError, OSError) as exc:
        return f"not answering ({type(exc).__name__})"
    return "running"


def child_state_text(child: stackfile.ChildState, now: float) -> str:
    text: str = child.state
    if child.state == "restarting" and child.restart_at is not None:
        text = f"restarting in {max(0.0, child.restart_at - now):.0f}s"
    if child.quick_exits >= 3:
        text += f" (crash loop: {child.quick_exits} quick exits, last code {child.last_exit})"
    elif child.last_exit is not None:
        text += f" (last exit code {child.last_exit})"
    return text


def stack_table(state: stackfile.StackState, consumed: set[str]) -> Table:
    """The processes of an ``up`` stack for ``tracehound status``."""
    title = f"stack (supervisor pid {state.supervisor_pid}, {state.status}"
    title += ", SIMULATED models and Slack)" if state.simulate else ")"
    table = Table("process", "pid", "state", "restarts", "health", "log", title=title)
    now = time.time()
    for child in state.children:
        table.add_row(
            child.name,
            str(child.pid or "-"),
            child_state_text(child, now),
            str(child.restarts),
            child_health(child, consumed),
            str(Path(child.log).relative_to(Path(child.log).parents[1])),  # logs/NAME.log
        )
    return table
