"""``tracehound up`` / ``down``: the whole stack under one supervisor, as a user runs it.

Real processes throughout: the supervisor, redis-server, ``chroma run``, four celery workers and
the ingest endpoint; ``--simulate`` puts the Ollama and Slack simulators (loopback HTTP servers,
the only doubles) under the same supervisor. Every client command runs from the stack's parent
directory with no TRACEHOUND_* variable: it finds the stack through ``.tracehound/stack.json``.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import chromadb
import httpx
import pytest

from shared.index.vectors import collection_name
from shared.stack import stackfile
from shared.stack.children import ChildSpec, Proc, spawn, wait_until
from shared.stack.supervisor import Supervisor, restart_delay
from shared.stack.up import child_state_text
from tests.conftest import DATA, SAMPLE_SERVICE

pytestmark = pytest.mark.integration

REPO = "up-sample"
TRACE = (DATA / "sample-error.txt").read_text()


def stable_port() -> int:
    """A free port below Linux's ephemeral range (32768 and up), so that none of the ports the
    stack binds while starting (simulators, Redis, Chroma: port 0, the kernel's choice) can be
    handed the one the test chose for ingest before ingest binds it (a CI run met that)."""
    for _ in range(500):
        port = random.randrange(20_000, 32_000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port in 20000-32000")


def clean_env() -> dict[str, str]:
    """This process's environment without any TRACEHOUND_* variable."""
    return {k: v for k, v in os.environ.items() if not k.startswith(stackfile.ENV_PREFIX)}


def th(args: list[str], cwd: Path, timeout: float = 360) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "producers.cli", *args],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def said(text: str) -> str:
    """``text`` with Rich's line wrapping undone."""
    return " ".join(text.split())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie holds nothing: it is gone
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def child(data_dir: Path, name: str) -> stackfile.ChildState:
    state = stackfile.read_state(data_dir)
    assert state is not None
    return next(c for c in state.children if c.name == name)


def post_error(ingest_url: str, service: str, token: str) -> dict:
    # Each post its own event id: a replay of one id would count once, whatever the groups.
    event = {"id": uuid.uuid4().hex, "service": service, "repo": REPO, "stack": TRACE}
    r = httpx.post(
        f"{ingest_url}/v1/events?wait=true",
        json=event,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert r.status_code == 202, r.text
    return r.json()["groups"][0]


def slack_messages(slack_api_url: str) -> list[dict]:
    r = httpx.get(slack_api_url.removesuffix("/api/") + "/_sim/messages", timeout=5)
    return list(r.json())


def delivered(slack_api_url: str, service: str) -> bool:
    return any(
        f"{service}: ZeroDivisionError" in m["text"] and "shopapp/services/pricing.py" in m["text"]
        for m in slack_messages(slack_api_url)
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """Where the user types the commands; the stack lives in its ``.tracehound``."""
    return tmp_path


def up(home: Path, port: int) -> subprocess.CompletedProcess[str]:
    return th(["up", "--detach", "--simulate", "--ingest-port", str(port)], home)


@pytest.mark.timeout(900)  # three starts of the stack on a loaded machine
def test_up_serves_restarts_a_killed_worker_and_keeps_index_and_groups_across_down_and_up(
    home: Path,
) -> None:
    data_dir = home / ".tracehound"
    port = stable_port()
    extra: Proc | None = None
    started = up(home, port)
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        assert "SLACK SIMULATOR" in said(started.stderr) and "OLLAMA SIMULATOR" in said(
            started.stderr
        )
        state = stackfile.read_state(data_dir)
        assert state is not None and state.status == "ready"
        ingest, slack = state.ingest_url, state.settings["slack_base_url"]
        for name in ("redis", "chroma", "worker-embed", "worker-llm", "ingest"):
            assert (data_dir / "logs" / f"{name}.log").exists()

        again = th(["up", "--detach", "--ingest-port", str(stable_port())], home)
        assert again.returncode == 1 and "already running" in said(again.stderr)

        # A worker started by hand joins the stack the same way (Celery reads only variables).
        extra = spawn(
            "extra-worker",
            [sys.executable, "-m", "producers.cli", "worker", "-Q", "notify", "-n", "extra@%h"],
            home / "logs",
            env=clean_env(),
            cwd=home,
        )
        indexed = th(["index", str(SAMPLE_SERVICE), "--repo", REPO], home)
        assert indexed.returncode == 0, indexed.stderr
        # Authenticated by default: the stack made a token and a DSN key, which the commands
        # read from it; without the token, ingest refuses.
        token = th(["token"], home).stdout.strip()
        assert len(token) >= 32
        anonymous = httpx.post(f"{ingest}/v1/events", json={"service": "x", "stack": TRACE})
        assert anonymous.status_code == 401
        dsn = th(["dsn", "5"], home).stdout.strip()
        key, _, where = dsn.removeprefix("http://").partition("@")
        assert where == ingest.removeprefix("http://") + "/5" and key != token
        first = post_error(ingest, "shop-api", token)
        assert first["new"]
        wait_until(lambda: delivered(slack, "shop-api"), 180, "the first analysis in Slack")

        # The llm queue's only consumer, killed: the supervisor starts it again, and only then
        # can the next new error be analysed and delivered.
        llm = child(data_dir, "worker-llm")
        assert llm.pid is not None
        os.kill(llm.pid, signal.SIGKILL)
        wait_until(
            lambda: (
                child(data_dir, "worker-llm").restarts == 1
                and child(data_dir, "worker-llm").state == "running"
            ),
            60,
            "worker-llm restarted",
        )
        restarted = child(data_dir, "worker-llm")
        assert restarted.pid != llm.pid and restarted.last_exit == -signal.SIGKILL
        assert post_error(ingest, "billing", token)["new"]
        wait_until(lambda: delivered(slack, "billing"), 180, "an analysis after the restart")
        assert "up.child_restarted child=worker-llm" in (data_dir / "logs/up.log").read_text()

        def status_shows(*texts: str) -> bool:
            status = th(["status"], home)
            assert status.returncode == 0, status.stderr
            return all(t in status.stdout for t in texts)

        # The restarted worker consumes its queue again; the hand-started one is there too.
        wait_until(lambda: status_shows("SIMULATED", "worker-llm", "llm@", "extra@"), 90, "status")
        extra.stop()

        chroma_url = state.settings["chroma_url"]
        vectors = chroma_count(chroma_url)
        assert vectors > 0
        latest = stackfile.read_state(data_dir)
        assert latest is not None
        pids = [c.pid for c in latest.children if c.pid]
    finally:
        stopped = th(["down"], home)
        if extra is not None:
            extra.stop()
    assert stopped.returncode == 0, stopped.stderr
    assert not stackfile.supervisor_alive(data_dir)
    assert not (data_dir / "stack.json").exists()
    assert not [p for p in pids if alive(p)]
    assert "Warm shutdown" in (data_dir / "logs/worker-llm.log").read_text()

    # Up again on the same data dir: the index and the group are still there.
    started = up(home, port)
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        state = stackfile.read_state(data_dir)
        assert state is not None
        assert chroma_count(state.settings["chroma_url"]) == vectors
        assert th(["token"], home).stdout.strip() == token  # kept across down and up
        repeat = post_error(state.ingest_url, "shop-api", token)
        assert not repeat["new"] and not repeat["duplicate"] and repeat["count"] == 2
        # Were they left behind, down and the next up would know them for the stack's own.
        assert all(stackfile.still_ours(c) for c in state.children)
        # The supervisor killed -9: its children are not left behind (they die with it).
        children = [c.pid for c in state.children if c.pid]
        os.kill(state.supervisor_pid, signal.SIGKILL)
        wait_until(lambda: not [p for p in children if alive(p)], 90, "the orphans' exit")
    finally:
        if stackfile.supervisor_alive(data_dir):
            th(["down"], home)

    # The state file it left does not block the next `up`.
    assert (data_dir / "stack.json").exists() and not stackfile.supervisor_alive(data_dir)
    started = up(home, port)
    try:
        assert started.returncode == 0, started.stderr + started.stdout
    finally:
        assert th(["down"], home).returncode == 0


def chroma_count(url: str) -> int:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    client = chromadb.HttpClient(host=host, port=int(port))
    return int(client.get_collection(collection_name(REPO)).count())


def test_up_refuses_a_data_dir_it_cannot_write(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    done = th(["up", "--data-dir", str(tmp_path / "file" / "stack")], tmp_path)
    assert done.returncode == 2 and "not writable" in said(done.stderr)


def test_up_refuses_an_ingest_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = th(["up", "--detach", "--ingest-port", str(port)], tmp_path)
    assert done.returncode == 2 and f"port {port} is in use" in said(done.stderr)
    assert not stackfile.supervisor_alive(tmp_path / ".tracehound")


def test_up_names_a_missing_redis_server(tmp_path: Path) -> None:
    env = clean_env() | {"PATH": str(tmp_path)}  # nothing on PATH
    done = subprocess.run(
        [sys.executable, "-m", "producers.cli", "up", "--ingest-port", str(stable_port())],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "redis-server is not installed" in said(done.stderr)


def test_down_after_a_killed_supervisor_stops_what_it_left(tmp_path: Path) -> None:
    """Where children are not armed to die with the supervisor (not Linux), `down` (and the
    next `up`) stop what the state file lists, checked to be the same program."""
    data_dir = tmp_path / ".tracehound"
    data_dir.mkdir()
    sleeper = spawn("sleeper", ["sleep", "600"], data_dir / "logs")
    dead = subprocess.Popen(["true"])
    dead.wait()
    stackfile.write_state(
        data_dir,
        stackfile.StackState(
            supervisor_pid=dead.pid,
            status="ready",
            simulate=False,
            started_at=time.time(),
            ingest_url="http://127.0.0.1:1",
            settings={"redis_url": "redis://127.0.0.1:1/0"},
            children=(
                stackfile.ChildState(
                    name="sleeper",
                    pid=sleeper.popen.pid,
                    state="running",
                    log="",
                    argv0="sleep",
                ),
            ),
        ),
    )
    # A client is not misled by the stale file: it says so and uses its own settings.
    config = th(["config"], tmp_path)
    assert "no longer runs" in said(config.stderr) and "redis://127.0.0.1:1/0" not in config.stdout
    try:
        done = th(["down"], tmp_path)
        assert done.returncode == 0 and "sleeper" in said(done.stderr), done.stderr
        wait_until(lambda: not sleeper.alive(), 10, "the sleeper's exit")
    finally:
        sleeper.stop()
    assert not (data_dir / "stack.json").exists()


def test_a_crash_looping_child_is_restarted_with_capped_backoff(tmp_path: Path) -> None:
    assert [restart_delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    sup = Supervisor(tmp_path / "logs", first=0.05, cap=0.2, stable_after=30)
    sup.start(ChildSpec("crasher", (sys.executable, "-c", "raise SystemExit(3)")))
    stamps: list[float] = []

    def restarted_six_times() -> bool:
        before = sup.children[0].restarts
        sup.tend()
        if sup.children[0].restarts > before:
            stamps.append(time.monotonic())
        return sup.children[0].restarts >= 6

    try:
        wait_until(restarted_six_times, 60, "six restarts", interval=0.01)
    finally:
        sup.stop_all()
    (state,) = sup.states()
    assert state.quick_exits >= 6 and state.last_exit == 3
    assert "crash loop" in child_state_text(state, time.time())
    # Backoff grows to the cap: the last gaps are at least the cap, never a spin.
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert len(gaps) == 5 and min(gaps[-2:]) >= 0.2


@pytest.mark.timeout(600)
def test_up_with_pgvector_runs_a_bundled_postgres_that_status_readyz_and_an_analysis_use(
    server_dir: Path,
) -> None:
    """``up --vector-store pgvector`` with no TRACEHOUND_PG_URL: a PostgreSQL with pgvector of
    its own under the data dir, in place of Chroma; every command finds it through the stack."""
    home = server_dir  # the server runs as its own user: not under pytest's basetemp root
    data_dir = home / ".tracehound"
    port = stable_port()
    pids: list[int] = []
    started = th(
        ["up", "--detach", "--simulate", "--vector-store", "pgvector", "--ingest-port", str(port)],
        home,
    )
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        state = stackfile.read_state(data_dir)
        assert state is not None
        names = {c.name for c in state.children}
        assert "postgres" in names and "chroma" not in names
        assert state.settings["vector_store"] == "pgvector"
        assert (data_dir / "postgres" / "PG_VERSION").exists()

        indexed = th(["index", str(SAMPLE_SERVICE), "--repo", REPO], home)
        assert indexed.returncode == 0, indexed.stderr
        token = th(["token"], home).stdout.strip()
        assert post_error(state.ingest_url, "shop-pg", token)["new"]
        slack = state.settings["slack_base_url"]
        wait_until(lambda: delivered(slack, "shop-pg"), 180, "the analysis in Slack")

        status = th(["status"], home)
        assert status.returncode == 0, status.stderr
        shown = said(status.stdout)
        assert "vector store: pgvector at postgresql://postgres@127.0.0.1:" in shown
        assert "answers (PostgreSQL 16" in shown and "pgvector 0.6" in shown
        assert "schema 1, 1 repo(s)" in shown
        ready = httpx.get(f"{state.ingest_url}/readyz", timeout=10).json()
        assert ready["vector_store"]["kind"] == "pgvector" and ready["vector_store"]["ok"]

        # PostgreSQL killed -9 (server and backends): the supervisor starts it again on its
        # data, and what was indexed is still there.
        pg = child(data_dir, "postgres")
        assert pg.pid is not None
        os.killpg(pg.pid, signal.SIGKILL)
        wait_until(
            lambda: (
                child(data_dir, "postgres").restarts == 1
                and child(data_dir, "postgres").state == "running"
            ),
            60,
            "postgres restarted",
        )
        wait_until(
            lambda: "schema 1, 1 repo(s)" in said(th(["status"], home).stdout),
            60,
            "the restarted PostgreSQL answering with the index",
        )
        pids = [c.pid for c in (stackfile.read_state(data_dir) or state).children if c.pid]
    finally:
        stopped = th(["down"], home)
    assert stopped.returncode == 0, stopped.stderr
    assert not [p for p in pids if alive(p)]
