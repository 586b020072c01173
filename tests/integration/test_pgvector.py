"""PostgreSQL + pgvector as the vector store (TRACEHOUND_VECTOR_STORE=pgvector), on a real
PostgreSQL 16 with pgvector from the pgserver wheel, started here on a free port.

The store alone (schema and migrations, the same nearest neighbours as Chroma, refused data),
then a stack of its own on it — Redis, PostgreSQL, real workers — indexing, re-indexing,
deleting, PostgreSQL killed mid-index, and an error through every stage to Slack.
"""

from __future__ import annotations

import getpass
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest
import redis

from shared.core.domain import Chunk
from shared.core.errors import PermanentError, TransientError
from shared.core.pipeline import enqueue_error, sender_app
from shared.core.settings import Settings
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.devtools.simulators.slack import SlackSimulator
from shared.index.corpus import RedisCorpus
from shared.index.pgvectors import (
    MIGRATIONS,
    SCHEMA_VERSION_TABLE,
    PgVectorIndex,
    SchemaTooNew,
    migrate,
    schema_version,
    table_name,
)
from shared.index.reindex import index_repository
from shared.index.transfer import copy_vectors
from shared.index.vectors import ChromaVectorIndex
from shared.intake.events import parse_event
from shared.stack.children import Proc, wait_until
from shared.stack.localstack import LocalStack, simulator_env, start_ingest
from shared.stack.postgres import start_postgres
from tests.conftest import DATA, SAMPLE_SERVICE, SLACK_CHANNEL, settings_of

pytestmark = pytest.mark.integration

BUGGY = "shopapp/services/pricing.py"
TRACE = (DATA / "sample-error.txt").read_text()


# --- the store on its own ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg(server_dir: Path) -> Iterator[str]:
    proc, url = start_postgres(server_dir / "pg")
    try:
        yield url
    finally:
        proc.stop()


@pytest.fixture
def database(pg: str) -> Iterator[str]:
    """A new, empty database on the server; its URL."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield pg.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_another_pytest_session_starting_leaves_the_server_running(pg: str) -> None:
    """A pytest session resets its basetemp root to 0700 when it starts (a developer's run
    beside CI, a second xdist session). The server runs as its own user, so its data lives
    outside that root (``server_dir``); under it, the next checkpoint would PANIC."""
    root = Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}"
    mode = root.stat().st_mode & 0o777
    root.chmod(0o700)
    try:
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute("CREATE DATABASE t_reset")
            conn.execute("DROP DATABASE t_reset WITH (FORCE)")  # a checkpoint: pg_control
            conn.execute("CHECKPOINT")
        with psycopg.connect(pg, autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        root.chmod(mode)


def chunk(i: int, path: str = "app/x.py", repo: str = "r") -> Chunk:
    return Chunk(
        id=f"{repo}-{i}",
        repo=repo,
        path=path,
        start_line=i * 10 + 1,
        end_line=i * 10 + 10,
        language="python",
        content_hash=f"h{i}",
        text=f"def f{i}():\n    return {i}\n",
    )


def unit_vectors(n: int, dims: int, seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        v = [rng.gauss(0, 1) for _ in range(dims)]
        norm = sum(x * x for x in v) ** 0.5
        out.append([x / norm for x in v])
    return out


def test_a_new_database_gets_the_schema_once_and_a_newer_one_is_refused(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        assert schema_version(conn) == 0
        assert migrate(conn) == len(MIGRATIONS)
        assert migrate(conn) == len(MIGRATIONS)  # again: nothing to do, nothing doubled
        assert conn.execute(f"SELECT count(*) FROM {SCHEMA_VERSION_TABLE}").fetchone() == (1,)
        assert conn.execute("SELECT to_regclass('th_repos')").fetchone() != (None,)
        # A later tracehound migrated this database further: this one must not write to it.
        conn.execute(f"UPDATE {SCHEMA_VERSION_TABLE} SET version = %s", (len(MIGRATIONS) + 1,))
    index = PgVectorIndex(url=database, timeout=5)
    with pytest.raises(SchemaTooNew, match="newer than this tracehound"):
        index.connect()


def test_a_failing_migration_leaves_the_version_before_it(database: str) -> None:
    broken = (*MIGRATIONS, ("CREATE TABLE th_next (x int)", "SELECT no_such_function()"))
    with psycopg.connect(database, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedFunction):
            migrate(conn, broken)
        assert schema_version(conn) == 0  # the whole upgrade rolled back: nothing half-done
        assert conn.execute("SELECT to_regclass('th_next')").fetchone() == (None,)
        assert migrate(conn) == len(MIGRATIONS)


def test_the_same_vectors_give_chromas_nearest_neighbours(database: str, tmp_path: Path) -> None:
    """Both stores given the same 2,000 vectors, against the exact neighbours (brute force):
    both HNSW indexes approximate (same parameters), both find nearly all of the top 10 and
    the nearest first, and a chunk both return has the same score (cosine, 1 - distance)."""
    import numpy as np

    chunks = [chunk(i, path=f"app/m{i % 50}.py") for i in range(2000)]
    vectors = unit_vectors(len(chunks), 32, seed=7)
    pg_index = PgVectorIndex(url=database, timeout=30)
    chroma = ChromaVectorIndex(url=None, path=tmp_path / "chroma")
    for store in (pg_index, chroma):
        store.upsert("r", chunks, vectors)
    matrix = np.asarray(vectors)
    found = {"pgvector": 0, "chroma": 0}
    queries = unit_vectors(20, 32, seed=8)
    for q in queries:
        exact = [chunks[i].id for i in np.argsort(-(matrix @ np.asarray(q)))[:10]]
        ours = pg_index.query("r", q, 10)
        theirs = chroma.query("r", q, 10)
        assert ours[0].chunk_id == theirs[0].chunk_id == exact[0]
        found["pgvector"] += len({h.chunk_id for h in ours} & set(exact))
        found["chroma"] += len({h.chunk_id for h in theirs} & set(exact))
        scores = {h.chunk_id: h.score for h in theirs}
        assert all(abs(h.score - scores[h.chunk_id]) < 1e-4 for h in ours if h.chunk_id in scores)
        assert (ours[0].path, ours[0].start_line) == (theirs[0].path, theirs[0].start_line)
        # pgvector keeps the text; Chroma none (retrieval reads it from the keyword corpus)
        assert ours[0].text == chunks[int(ours[0].chunk_id.split("-")[1])].text
        assert theirs[0].text == ""
    recall = {k: v / (10 * len(queries)) for k, v in found.items()}
    assert recall["pgvector"] >= 0.95 and recall["chroma"] >= 0.95, recall
    pg_index.close()


def test_repos_are_apart_and_ids_paths_and_deletes_answer_as_chromas(database: str) -> None:
    index = PgVectorIndex(url=database, timeout=5)
    a = [chunk(i, path=f"a{i % 2}.py", repo="shop") for i in range(6)]
    b = [chunk(i, path="b.py", repo="billing") for i in range(4)]
    index.upsert("shop", a, unit_vectors(6, 8, seed=1))
    index.upsert("billing", b, unit_vectors(4, 8, seed=2))
    assert {h.chunk_id for h in index.query("shop", unit_vectors(1, 8, 3)[0], 50)} == {
        c.id for c in a
    }
    assert index.ids_for_path("shop", "a0.py") == ["shop-0", "shop-2", "shop-4"]
    assert index.existing_ids("shop", ["shop-1", "billing-1", "nope"]) == {"shop-1"}
    index.delete("shop", ["shop-0", "shop-2"])
    assert index.ids_for_path("shop", "a0.py") == ["shop-4"]
    assert index.query("never-indexed", unit_vectors(1, 8, 3)[0], 5) == []
    # An upsert of an id again replaces it: one row, the new text.
    moved = Chunk(**{**chunk(4, path="a0.py", repo="shop").__dict__, "text": "new text"})
    index.upsert("shop", [moved], unit_vectors(1, 8, seed=4))
    assert index.ids_for_path("shop", "a0.py") == ["shop-4"]
    [hit] = [h for h in index.query("shop", unit_vectors(1, 8, 4)[0], 1)]
    assert hit.chunk_id == "shop-4" and hit.text == "new text"
    index.close()


def test_vectors_of_another_size_are_refused_with_the_reason(database: str) -> None:
    index = PgVectorIndex(url=database, timeout=5)
    index.upsert("r", [chunk(1)], unit_vectors(1, 8, seed=1))
    with pytest.raises(PermanentError, match="8-dimension vectors and these have 16"):
        index.upsert("r", [chunk(2)], unit_vectors(1, 16, seed=1))
    assert index.existing_ids("r", ["r-1", "r-2"]) == {"r-1"}  # nothing half-written
    index.close()


def test_a_batch_fails_whole(database: str) -> None:
    """An upsert is one transaction: a chunk PostgreSQL refuses takes the batch with it, and
    the batch can be sent again (the backlog's retry)."""
    index = PgVectorIndex(url=database, timeout=5)
    good = [chunk(i) for i in range(3)]
    bad = Chunk(**{**chunk(3).__dict__, "text": "NUL \x00 byte"})  # text columns refuse NUL
    with pytest.raises(PermanentError):
        index.upsert("r", [*good, bad], unit_vectors(4, 8, seed=1))
    assert index.existing_ids("r", [c.id for c in good]) == set()
    index.upsert("r", good, unit_vectors(3, 8, seed=1))
    assert index.existing_ids("r", [c.id for c in good]) == {c.id for c in good}
    index.close()


def test_postgres_down_is_transient_and_the_index_reconnects(server_dir: Path) -> None:
    workdir = server_dir / "down"
    proc, url = start_postgres(workdir)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    index = PgVectorIndex(url=url, timeout=3)
    try:
        index.upsert("r", [chunk(1)], unit_vectors(1, 8, seed=1))
        _kill(proc)
        with pytest.raises(TransientError, match="pgvector"):
            index.query("r", unit_vectors(1, 8, seed=1)[0], 3)
        proc, _ = start_postgres(workdir, port)
        assert [h.chunk_id for h in index.query("r", unit_vectors(1, 8, seed=1)[0], 3)] == ["r-1"]
    finally:
        index.close()
        proc.stop()


def _kill(proc: Proc) -> None:
    """kill -9 of the server and every backend: a crash, not a shutdown."""
    os.killpg(proc.popen.pid, signal.SIGKILL)
    proc.popen.wait(10)


# --- a stack on PostgreSQL --------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg_stack(
    server_dir: Path,
    ollama_sim: OllamaSimulator,
    rerank_sim: OllamaSimulator,
    slack_sim: SlackSimulator,
) -> Iterator[LocalStack]:
    env = simulator_env(
        ollama_sim.url, slack_sim.url, channel=SLACK_CHANNEL, rerank_url=rerank_sim.url
    ) | {
        "TRACEHOUND_VECTOR_STORE": "pgvector",
        # Retries that outlast a PostgreSQL restart of a few seconds (production: 3 retries,
        # backoff up to 60 s); the policy is the production one.
        "TRACEHOUND_STAGE_MAX_RETRIES": "6",
        "TRACEHOUND_RETRY_BACKOFF_MAX": "2",
        "TRACEHOUND_PG_TIMEOUT": "5",
        "TRACEHOUND_BULK_EMBED_CHUNKS": "8",  # many small drains: a kill lands mid-index
        "TRACEHOUND_INCIDENT_WINDOW": "0",
    }
    (server_dir / "pgstack").mkdir()
    s = LocalStack(server_dir / "pgstack", env)
    try:
        s.start_services()
        s.start_workers()
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def pg_settings(pg_stack: LocalStack) -> Settings:
    return settings_of(pg_stack)


@pytest.fixture(scope="module")
def pg_sender(pg_settings: Settings) -> Iterator[Any]:
    app = sender_app(pg_settings)
    yield app
    app.close()


@pytest.fixture
def store(pg_settings: Settings) -> Iterator[PgVectorIndex]:
    index = PgVectorIndex(url=pg_settings.pg_url, timeout=10)
    yield index
    index.close()


@pytest.fixture
def corpus(pg_settings: Settings) -> Iterator[RedisCorpus]:
    client = redis.Redis.from_url(pg_settings.redis_url)
    yield RedisCorpus(client)
    client.close()


def rows(store: PgVectorIndex, repo: str) -> list[tuple[str, str]]:
    """(id, path) of every chunk of ``repo`` in PostgreSQL."""

    def op(conn: Any) -> list[tuple[str, str]]:
        table = store._table(conn, repo)
        if table is None:
            return []
        return [(r[0], r[1]) for r in conn.execute(f"SELECT id, path FROM {table} ORDER BY id")]

    return store._run("rows", op)


def in_step(store: PgVectorIndex, corpus: RedisCorpus, repo: str) -> None:
    """PostgreSQL holds exactly the keyword corpus's chunks, each once, under the same file."""
    stored = rows(store, repo)
    assert len(stored) == len({i for i, _ in stored})
    expected = {(i, p) for p in corpus.paths(repo) for i in corpus.file_ids(repo, p)}
    assert set(stored) == expected and expected


def test_index_reindex_and_delete_keep_postgres_in_step(
    pg_sender: Any,
    pg_settings: Settings,
    tmp_path: Path,
    store: PgVectorIndex,
    corpus: RedisCorpus,
    ollama_sim: OllamaSimulator,
) -> None:
    tree = tmp_path / "sample"
    shutil.copytree(SAMPLE_SERVICE, tree)
    repo = f"pg-{uuid.uuid4().hex[:8]}"

    def index() -> Any:
        return index_repository(pg_sender, tree, repo, max_bytes=1_000_000, timeout=120)

    first = index()
    assert first.embedded == first.chunks > 0 and not first.failed
    in_step(store, corpus, repo)

    ollama_sim.clear_log()
    assert index().embedded == 0  # unchanged: found in PostgreSQL, nothing embedded again
    assert ollama_sim.requests_to("/api/embed") == []

    changed = tree / "shopapp/config.py"
    before = store.ids_for_path(repo, "shopapp/config.py")
    changed.write_text(changed.read_text() + "\n\nFEATURE_FLAG_REFUNDS = True\n")
    assert 1 <= index().embedded <= 2
    after = store.ids_for_path(repo, "shopapp/config.py")
    assert after != before and after == sorted(corpus.file_ids(repo, "shopapp/config.py"))
    in_step(store, corpus, repo)

    gone = "shopapp/notifications/email.py"
    (tree / gone).unlink()
    assert index().removed_files == [gone]
    assert store.ids_for_path(repo, gone) == []
    in_step(store, corpus, repo)


def test_postgres_killed_mid_index_loses_and_doubles_nothing(
    pg_sender: Any,
    pg_stack: LocalStack,
    tmp_path: Path,
    store: PgVectorIndex,
    corpus: RedisCorpus,
    ollama_sim: OllamaSimulator,
) -> None:
    """kill -9 of PostgreSQL (server and backends) while the index drains, started again two
    seconds later where it was: the drains retry, every chunk lands once."""
    tree = tmp_path / "big"
    files = 300  # five index tasks (64 files each), so five drains, each stored at once
    for i in range(files):
        body = "\n\n".join(
            f"def handler_{i}_{j}(order):\n    total = order.amount * {j}\n    return total"
            for j in range(12)
        )
        (tree / f"pkg{i % 6}").mkdir(parents=True, exist_ok=True)
        (tree / f"pkg{i % 6}/mod{i}.py").write_text(body + "\n")
    repo = f"pg-kill-{uuid.uuid4().hex[:8]}"
    proc = next(p for p in pg_stack.procs if p.name == "postgres")
    port = int(pg_stack.env["TRACEHOUND_PG_URL"].rsplit(":", 1)[1].split("/")[0])
    killed = threading.Event()
    stored_when_killed: list[int] = []

    def kill_mid_index() -> None:
        wait_until(lambda: len(rows(store, repo)) > 0, 60, "the first chunks stored")
        stored_when_killed.append(len(rows(store, repo)))
        _kill(proc)
        killed.set()

    killer = threading.Thread(target=kill_mid_index, daemon=True)
    killer.start()
    report_holder: dict[str, Any] = {}

    def run_index() -> None:
        report_holder["report"] = index_repository(
            pg_sender, tree, repo, max_bytes=1_000_000, timeout=240
        )

    ollama_sim.configure(latency={"embed": 0.3})  # drains of 8 chunks take a while
    indexer = threading.Thread(target=run_index, daemon=True)
    try:
        indexer.start()
        assert killed.wait(90), "PostgreSQL was not killed mid-index"
        time.sleep(2)
        pg_stack.procs.remove(proc)
        restarted, _ = start_postgres(pg_stack.workdir, port)
        pg_stack.procs.append(restarted)
        indexer.join(240)
    finally:
        ollama_sim.configure(latency={})
    report = report_holder["report"]
    assert report.files == files and not report.failed, report
    store.close()  # its connection died with the server
    in_step(store, corpus, repo)
    assert len(rows(store, repo)) == report.chunks
    assert stored_when_killed[0] < report.chunks  # it was killed with chunks still to store


def test_an_error_through_every_stage_on_postgres_names_the_buggy_file(
    pg_sender: Any, pg_settings: Settings, slack_sim: SlackSimulator
) -> None:
    report = index_repository(pg_sender, SAMPLE_SERVICE, "sample", max_bytes=1_000_000, timeout=120)
    assert not report.failed
    event = parse_event(TRACE, service=f"pg-{uuid.uuid4().hex[:6]}", repo="sample")
    result = enqueue_error(pg_sender, event).get(timeout=120)
    assert result["destination"] == "slack"
    assert BUGGY in [f.split(":")[0] for f in result["top_files"][:3]]
    assert not any("vector search failed" in n for n in result["notes"])
    [message] = [
        m for m in slack_sim.messages if result["event_id"][:12] in json.dumps(m.get("blocks"))
    ]
    assert BUGGY in message["text"]


def test_postgres_down_at_query_time_says_vector_search_failed_and_keywords_still_find_it(
    pg_sender: Any, pg_stack: LocalStack
) -> None:
    index_repository(pg_sender, SAMPLE_SERVICE, "sample", max_bytes=1_000_000, timeout=120)
    proc = next(p for p in pg_stack.procs if p.name == "postgres")
    port = int(pg_stack.env["TRACEHOUND_PG_URL"].rsplit(":", 1)[1].split("/")[0])
    ingest, url = start_ingest(pg_stack.workdir, pg_stack.env)
    try:
        assert httpx.get(f"{url}/readyz", timeout=10).json()["vector_store"]["ok"]
        proc.stop()
        # Ingest stays ready (errors still come in) and says what is missing.
        ready = httpx.get(f"{url}/readyz", timeout=10)
        assert ready.status_code == 200 and not ready.json()["vector_store"]["ok"]
        assert any("keyword search only" in w for w in ready.json()["warnings"])
        event = parse_event(TRACE, service=f"pg-down-{uuid.uuid4().hex[:6]}", repo="sample")
        result = enqueue_error(pg_sender, event).get(timeout=180)
    finally:
        ingest.stop()
        if proc in pg_stack.procs:
            pg_stack.procs.remove(proc)
            restarted, _ = start_postgres(pg_stack.workdir, port)
            pg_stack.procs.append(restarted)
    assert any("vector search failed" in n for n in result["notes"])
    assert BUGGY in [f.split(":")[0] for f in result["top_files"][:3]]


# --- moving an index between stores ----------------------------------------------------------


def test_vectors_copy_moves_an_index_from_chroma_without_embedding_and_again_doubles_nothing(
    database: str, settings: Settings, tmp_path: Path
) -> None:
    chroma = ChromaVectorIndex(url=settings.chroma_url)
    repos = [f"copy-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    sizes = {repos[0]: 2500, repos[1]: 7}  # three pages, and less than one
    vectors = {r: unit_vectors(n, 16, seed=i) for i, (r, n) in enumerate(sizes.items())}
    corpus = RedisCorpus(redis.Redis.from_url(settings.redis_url))
    for r, n in sizes.items():
        chunks = [chunk(i, path=f"m{i % 9}.py", repo=r) for i in range(n)]
        chroma.upsert(r, chunks, vectors[r])
        corpus.add(r, chunks)  # as indexing writes both: the texts are the corpus's alone
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TRACEHOUND_")},
        "TRACEHOUND_REDIS_URL": settings.redis_url,
        "TRACEHOUND_CHROMA_URL": settings.chroma_url or "",
        "TRACEHOUND_PG_URL": database,
        "TRACEHOUND_DATA_DIR": str(tmp_path),
    }

    def copy(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "producers.cli", "vectors", "copy", *args]
        for r in repos:
            argv += ["--repo", r]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)

    # A copy cut off by its source (Chroma gone after the first page) leaves the target
    # repo as it was: pages stream into one load, which commits whole or not at all.
    class CutSource:
        def __getattr__(self, name: str) -> Any:
            return getattr(chroma, name)

        def export(self, repo: str, batch: int) -> Iterator[tuple[list[Chunk], Any]]:
            pages = chroma.export(repo, batch)
            yield next(pages)
            raise TransientError("chroma export: gone")

    pg_index = PgVectorIndex(url=database, timeout=10)
    with pytest.raises(TransientError):
        copy_vectors(CutSource(), pg_index, [repos[0]])  # type: ignore[arg-type]
    assert pg_index.count(repos[0]) == 0
    done = copy("--from", "chroma", "--to", "pgvector")
    assert done.returncode == 0, done.stderr
    assert f"{repos[0]}: 2500 chunks copied; chroma holds 2500, pgvector 2500" in done.stdout
    with psycopg.connect(database) as conn:  # loaded, then its HNSW index built once
        indexes = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s", (table_name(repos[0]),)
        ).fetchall()
    assert f"{table_name(repos[0])}_hnsw" in {i for (i,) in indexes}
    for r, n in sizes.items():
        assert pg_index.count(r) == n
        q = vectors[r][3]
        ours, theirs = pg_index.query(r, q, 5), chroma.query(r, q, 5)
        assert ours[0].chunk_id == theirs[0].chunk_id == f"{r}-3" and ours[0].score > 0.9999
        assert ours[0].path == theirs[0].path
        assert ours[0].text == chunk(3).text  # read from the corpus on the way: Chroma has none
    [moved] = [c for c, _ in [next(pg_index.export(repos[1], 100))]]
    assert {c.id for c in moved} == {f"{repos[1]}-{i}" for i in range(7)}
    assert all(c.language == "python" and c.content_hash for c in moved)

    again = copy("--from", "chroma", "--to", "pgvector")  # an interrupted copy is run again
    assert again.returncode == 0 and pg_index.count(repos[0]) == 2500
    back = copy("--from", "pgvector", "--to", "chroma")
    assert back.returncode == 0, back.stderr
    assert chroma.count(repos[0]) == 2500
    pg_index.close()


def test_vectors_copy_refuses_a_store_it_does_not_know() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "producers.cli", "vectors", "copy", "--from", "chroma", "--to", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "chroma and pgvector" in done.stderr


def test_eval_on_pgvector_ranks_as_the_exact_search_and_writes_a_corpus_once(
    database: str, tmp_path: Path
) -> None:
    """``tracehound eval --vector-store pgvector``: the vector signal from PostgreSQL, the
    corpus written once (by id) per embedding model, the same files first as the exact
    in-memory search."""
    from shared.devtools.eval import (
        SimulatorEmbedder,
        fill_store,
        load_cases,
        run_eval,
        store_repo,
    )
    from tests.unit.test_eval import cases_file, corpora_at

    corpora = corpora_at(tmp_path)
    cases = load_cases(cases_file(tmp_path))
    store = PgVectorIndex(url=database, timeout=10)
    runs = {}
    for name, vector_store, embedder in (
        ("memory", None, SimulatorEmbedder()),
        ("other model first", store, SimulatorEmbedder(dim=64)),
        ("pgvector", store, SimulatorEmbedder()),
    ):
        runs[name] = run_eval(
            cases, corpora, embedder=embedder, modes=["vector", "all"], vector_store=vector_store
        )
    # The same file first for every case, and the same files; below the first, chunks that
    # share nothing with the query tie at 0 and either store may order them otherwise.
    per_case = {
        name: [
            (c["id"], c["modes"]["vector"]["files"][0], sorted(c["modes"]["vector"]["files"]))
            for c in r.to_json()["cases"]
        ]
        for name, r in runs.items()
    }
    # Another model's vectors of the same chunks were written first, to their own repo: they
    # neither answered these queries nor were taken for this model's.
    assert per_case["pgvector"] == per_case["memory"]
    repo = store_repo("shop-1.0", SimulatorEmbedder().model)
    assert sorted(store.repos()) == sorted([repo, store_repo("shop-1.0", "simulator-hashed-64")])
    # Run again: nothing to write. A store with chunks the corpus lacks is refused.
    chunks = next(iter(store.export(repo, 1000)))[0]
    assert fill_store(store, repo, chunks, np.zeros((len(chunks), 256))) == 0
    store.upsert(repo, [chunk(1, repo="shop-1.0")], unit_vectors(1, 256, seed=1))
    with pytest.raises(PermanentError, match="measure on an empty store"):
        fill_store(store, repo, chunks, np.zeros((len(chunks), 256)))
    store.close()


def test_a_bulk_load_answers_as_upserts_do_and_a_failed_one_leaves_the_repo_as_it_was(
    database: str,
) -> None:
    index = PgVectorIndex(url=database, timeout=30)
    chunks = [chunk(i, path=f"m{i % 7}.py", repo="bulk") for i in range(1500)]
    vectors = unit_vectors(len(chunks), 16, seed=3)
    index.bulk_load("bulk", chunks, vectors)
    index.upsert("rows", [chunk(i, path=f"m{i % 7}.py", repo="rows") for i in range(1500)], vectors)
    for q in unit_vectors(10, 16, seed=4):
        bulk = [(h.chunk_id.split("-")[1], round(h.score, 5)) for h in index.query("bulk", q, 10)]
        rows = [(h.chunk_id.split("-")[1], round(h.score, 5)) for h in index.query("rows", q, 10)]
        assert bulk[0] == rows[0] and len(bulk) == 10
    # Again with new texts for the same ids: merged, not doubled; the index is rebuilt.
    again = [Chunk(**{**c.__dict__, "text": "v2"}) for c in chunks]
    index.bulk_load("bulk", again, vectors)
    assert index.count("bulk") == 1500
    assert index.query("bulk", vectors[7], 1)[0].text == "v2"
    # A load PostgreSQL refuses (a NUL byte in a text) leaves the rows and the index as they were.
    bad = [*again[:-1], Chunk(**{**again[-1].__dict__, "text": "NUL \x00"})]
    with pytest.raises(PermanentError):
        index.bulk_load("bulk", bad, vectors)
    assert index.count("bulk") == 1500
    assert index.query("bulk", vectors[7], 1)[0].chunk_id == "bulk-7"
    index.close()
