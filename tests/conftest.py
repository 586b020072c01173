"""Fixtures: a private redis-server, a real chroma server, real celery workers, simulators.

Only Ollama, the rerank server and Slack are doubled (as real HTTP servers on loopback);
everything else is the real thing, started here on free ports and stopped at the end.
"""

from __future__ import annotations

import contextlib
import gc
import random
import shutil
import string
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis

from shared.core import keys
from shared.core.pipeline import sender_app
from shared.core.settings import Settings
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.devtools.simulators.slack import SlackSimulator
from shared.stack.children import free_port
from shared.stack.localstack import README_UBATCH, LocalStack, simulator_env, start_redis

if TYPE_CHECKING:
    from shared.devtools.sample_history import SampleRepo

DATA = Path(__file__).parent / "data"
SAMPLE_SERVICE = DATA / "sample-service"
SLACK_CHANNEL = "C0ONCALL"
SLACK_SIGNING_SECRET = "test-signing-secret"


# `make test` spreads test files over processes (pytest-xdist, --dist loadfile: a file's tests
# and its module-scoped stack stay in one process). Files are handed out in collection order
# (`--no-loadscope-reorder`: xdist otherwise sorts them by their number of tests), so the
# longest go first: none of them starts last and holds up the whole run.
LONGEST_FIRST = (  # by the seconds each took in a whole run (pytest --junitxml, 2026-12-06)
    "test_reliability.py",
    "test_up.py",
    "test_keyword_index.py",
    "test_pgvector.py",
    "test_redis_hand_off.py",
    "test_pipeline.py",
    "test_memory.py",
    "test_sentry_upstream.py",
    "test_slack_actions.py",
    "test_tail_chaos.py",
    "test_hosts.py",
    "test_redis_restart.py",
    "test_incident_delivery.py",
    "test_secret_corpus_flow.py",
    "test_cli.py",
    "test_ingest.py",
    "test_grouping.py",
    "test_watcher.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file's tests keep their order


INCIDENTS_OFF = {"TRACEHOUND_INCIDENT_WINDOW": "0", "TRACEHOUND_MAX_NEW_GROUPS": "0"}
INCIDENTS_ON = {
    "TRACEHOUND_INCIDENT_WINDOW": "300",
    "TRACEHOUND_INCIDENT_SETTLE": "1",
    "TRACEHOUND_MAX_NEW_GROUPS": "3",
}
# An incident's first group starts at once instead of after the settle (as before incidents
# settled): for rigs that check what intake started, not which group an incident starts.
SETTLE_OFF = {"TRACEHOUND_INCIDENT_SETTLE": "0"}


@pytest.fixture(scope="module")
def server_dir() -> Iterator[Path]:
    """A directory outside pytest's basetemp root for a server that runs as another user (the
    bundled PostgreSQL, started as root, runs as its own user). Another pytest session on the
    machine resets that root to 0700 when it starts; a server under it then loses its data
    directory and stops at its next checkpoint (PANIC: could not open pg_control)."""
    path = Path(tempfile.mkdtemp(prefix="tracehound-test-servers-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def ollama_sim() -> Iterator[OllamaSimulator]:
    with OllamaSimulator() as sim:
        yield sim


@pytest.fixture(scope="session")
def rerank_sim() -> Iterator[OllamaSimulator]:
    """The rerank server is its own process in production, so its own simulator here; a fixed
    port lets a test stop it and start it again where the workers expect it."""
    with OllamaSimulator(port=free_port(), rerank_ubatch=README_UBATCH) as sim:
        yield sim


@pytest.fixture(scope="session")
def slack_sim() -> Iterator[SlackSimulator]:
    with SlackSimulator() as sim:
        yield sim


@pytest.fixture
def slack(slack_sim: SlackSimulator) -> Iterator[SlackSimulator]:
    """The session's Slack simulator, emptied before and after the test."""
    slack_sim.reset()
    yield slack_sim
    slack_sim.reset()


@pytest.fixture(scope="session")
def private_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of this test session's own, for tests that need Redis but no workers."""
    proc, url = start_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield url
    finally:
        proc.stop()


@pytest.fixture
def fresh_redis(private_redis_url: str) -> Iterator[redis.Redis]:
    """A client of the private redis-server, emptied before the test."""
    client = redis.Redis.from_url(private_redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture(scope="session")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
    ollama_sim: OllamaSimulator,
    rerank_sim: OllamaSimulator,
    slack_sim: SlackSimulator,
) -> Iterator[LocalStack]:
    workdir = tmp_path_factory.mktemp("stack")
    env = simulator_env(
        ollama_sim.url, slack_sim.url, channel=SLACK_CHANNEL, rerank_url=rerank_sim.url
    ) | {
        # Short retries keep failure tests quick; the policy itself is the production one.
        "TRACEHOUND_STAGE_MAX_RETRIES": "1",
        "TRACEHOUND_RETRY_BACKOFF_MAX": "1",
        "TRACEHOUND_RERANK_TIMEOUT": "5",
        "TRACEHOUND_CHROMA_TIMEOUT": "5",
        # Count updates and thread replies once a second, so grouping tests see them quickly.
        "TRACEHOUND_GROUP_UPDATE_INTERVAL": "1",
        "TRACEHOUND_SLACK_THREAD_ONLY": "true",
        # A killed worker's tasks come back after this (production: 30 s); live workers renew.
        "TRACEHOUND_REDELIVERY_AFTER": "20",
        # A degraded message's second analysis comes soon after the model host is back.
        "TRACEHOUND_REANALYZE_AFTER": "2",
        # Small index drains (production: 128 chunks), so a test's re-index of tens of files
        # is still several bulk tasks on the embed queue for an error's query to overtake.
        "TRACEHOUND_BULK_EMBED_CHUNKS": "8",
        # A Slack app receives button presses (Socket Mode and the Request URL), so messages
        # carry the buttons (tests/integration/test_slack_actions.py).
        "TRACEHOUND_SLACK_APP_TOKEN": "xapp-test-token",
        "TRACEHOUND_SLACK_SIGNING_SECRET": SLACK_SIGNING_SECRET,
        # Incidents on, as in production, with a short settle; each test starts with no open
        # incident and no cap count (``_forget_incidents``), so it joins no earlier test's.
        **INCIDENTS_ON,
    }
    s = LocalStack(workdir, env)
    try:
        s.start_services()
        s.start_workers()
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def settings(stack: LocalStack) -> Settings:
    """What the workers run with, as a Settings object for the test process."""
    return settings_of(stack)


def settings_of(stack: LocalStack) -> Settings:
    """A stack's worker settings as a Settings object for the test process."""
    return Settings(**{k.removeprefix("TRACEHOUND_").lower(): v for k, v in stack.env.items()})


@pytest.fixture(scope="session")
def sender(settings: Settings):  # type: ignore[no-untyped-def]
    app = sender_app(settings)
    yield app
    gc.collect()  # drop AsyncResults (and their Redis subscriptions) while Redis still runs
    app.close()


@pytest.fixture(scope="session")
def redis_client(settings: Settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.redis_url)
    yield client
    client.close()


@pytest.fixture
def sample_copy(tmp_path: Path) -> Path:
    """A private copy of the sample service that a test may change."""
    dest = tmp_path / "sample-service"
    shutil.copytree(SAMPLE_SERVICE, dest)
    return dest


# What makes a test's new groups depend on an earlier test's: open incidents (a new group with
# the same root cause joins one) and cap batches, and the new-analysis counts the cap reads.
# Incidents already open keep going: only their keys for joining go.
_INCIDENT_STATE = ("th:incident:cause:*", "th:incident:cap:*", "th:newgroups:*")


@pytest.fixture(autouse=True)
def _forget_incidents(request: pytest.FixtureRequest) -> None:
    """Before each test on the session stack: no incident or cap batch to join, no cap count
    (as rq's tests flush Redis per test; groups and the index stay, module fixtures hold
    them)."""
    if "stack" not in request.fixturenames:
        return
    client: redis.Redis = request.getfixturevalue("redis_client")
    for pattern in _INCIDENT_STATE:
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)


@pytest.fixture(autouse=True)
def _clean_simulators(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    for name in ("ollama_sim", "rerank_sim", "slack_sim"):
        if name in request.fixturenames:
            sim = request.getfixturevalue(name)
            sim.reset_faults()


def group_keys(client: redis.Redis) -> list[bytes]:
    """Every error group's hash (th:group:v1:<sha1>), not its :message / :update keys."""
    return [k for k in client.scan_iter(match=keys.GROUP_PATTERN) if k.count(b":") == 3]


def counted_in_groups(client: redis.Redis) -> int:
    """Occurrences counted over every group."""
    return sum(int(client.hget(k, "total") or 0) for k in group_keys(client))


def pool_children(pid: int) -> list[int]:
    """The pool children of the worker whose main process is ``pid``."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def own_cause(trace: str) -> str:
    """The sample trace with a root cause of its own: the session stack runs incidents, and
    the same error in two services within the window is one incident (one message)."""
    word = "".join(random.choices(string.ascii_lowercase, k=10))  # letters: kept by normalizing
    return trace.replace("division by zero", f"division by zero (case {word})")


@contextlib.contextmanager
def model_not_pulled(sim: OllamaSimulator, model: str) -> Iterator[None]:
    """The Ollama simulator answers 404 for ``model`` while inside the block."""
    models = sim.config["models"]
    sim.configure(models=[m for m in models if m != model])
    try:
        yield
    finally:
        sim.configure(models=models)


def indexed_history(sender: Any, settings: Settings, dest: Path, repo: str) -> SampleRepo:
    """The sample service as a git history (the bug planted by one commit), at ``dest``,
    indexed as ``repo`` with its history recorded."""
    from shared.devtools.sample_history import build_sample_repo
    from shared.index.reindex import index_repository

    sample = build_sample_repo(SAMPLE_SERVICE, dest)
    report = index_repository(sender, sample.path, repo, max_bytes=settings.max_file_bytes,
                              timeout=120)  # fmt: skip
    assert not report.failed and report.history.startswith("at ")
    return sample


@contextlib.contextmanager
def slack_listening(settings: Settings, sender: Any, slack_sim: SlackSimulator) -> Iterator[Any]:
    """``tracehound slack-listen``'s listener, connected to the Slack double's Socket Mode."""
    from producers.slack_listen import Listener

    listening = Listener(settings, sender)
    listening.start()
    slack_sim.socket_mode.wait_connected(30)
    try:
        yield listening
    finally:
        listening.close()
