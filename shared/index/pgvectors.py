"""The vector index in PostgreSQL with pgvector, for teams that already run Postgres.

Same interface and answers as the Chroma index (shared/index/vectors.py): one table per repo
(Chroma's collection per repo), cosine distance, an HNSW index, score = 1 - distance.

- **A table per repo**, listed in ``th_repos``: a query's nearest neighbours are that repo's.
  pgvector 0.6's HNSW scan cannot apply a ``WHERE repo = …`` inside the index; filtered after
  it, a query of one repo among many would get fewer rows than it asked for.
- **Cosine**: ``vector_cosine_ops`` and ``<=>`` match the embedders' cosine similarity
  (Chroma's "cosine" space); the dimension is fixed by a repo's first upsert (HNSW needs it).
- **Its own schema, migrated by tracehound**: ``th_schema`` holds the version; each migration
  runs in one transaction with its version bump, under an advisory lock (workers starting
  together migrate once). A database newer than this tracehound is refused, not written.
- **Each call one transaction**: an upsert of many chunks lands whole or not at all.
- **Errors as Chroma's**: Postgres unreachable or gone away is a ``TransientError`` (the task
  retries; retrieval goes keyword-only and says so; index changes wait in the backlog), a
  table that vanished is looked up afresh, refused data is a ``PermanentError``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from shared.core.domain import Chunk, ChunkHit
from shared.core.errors import PermanentError, TransientError

T = TypeVar("T")

SCHEMA_VERSION_TABLE = "th_schema"
_MIGRATE_LOCK = 0x7472_6163  # pg_advisory_xact_lock key: one migration at a time
# The HNSW parameters of Chroma's collections (chromadb/api/collection_configuration.py:
# ef_construction 100, max_neighbors 16, ef_search 100), so both stores approximate alike;
# pgvector's own defaults are m 16, ef_construction 64, ef_search 40. A scan returns at most
# ef_search rows: a deeper query raises it (pgvector's maximum is 1000).
_HNSW_M, _HNSW_EF_CONSTRUCTION = 16, 100
_BUILD_MEMORY = "256MB"  # maintenance_work_mem of a bulk load's index build (the graph fits)
_EF_SEARCH_MIN, _EF_SEARCH_MAX = 100, 1000
# An id written again replaces its row: upserts and bulk loads merge by chunk id.
_MERGE = (
    " ON CONFLICT (id) DO UPDATE SET path = EXCLUDED.path, start_line = EXCLUDED.start_line,"
    " end_line = EXCLUDED.end_line, document = EXCLUDED.document, metadata = EXCLUDED.metadata,"
    " embedding = EXCLUDED.embedding"
)

# Migration n (1-based) takes the schema from version n-1 to n. Never edit a released one:
# add the next.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE EXTENSION IF NOT EXISTS vector",
        "CREATE TABLE th_repos ("
        " repo text PRIMARY KEY,"
        " table_name text NOT NULL UNIQUE,"
        " dimensions integer NOT NULL CHECK (dimensions > 0),"
        " created_at timestamptz NOT NULL DEFAULT now())",
    ),
)


class SchemaTooNew(PermanentError):
    """The database holds a newer tracehound schema than this code knows."""


def table_name(repo: str) -> str:
    """A table name of its own per repo (any repo string, at most 63 bytes)."""
    return "th_vec_" + hashlib.sha1(repo.encode()).hexdigest()[:24]


class PgVectorIndex:
    """pgvector over one connection per process, opened on first use and again after a loss."""

    def __init__(self, *, url: str | None, timeout: float = 30.0) -> None:
        if not url:
            raise PermanentError("set TRACEHOUND_PG_URL for TRACEHOUND_VECTOR_STORE=pgvector")
        self._url, self._timeout = url, timeout
        self._conn: Any = None
        self._tables: dict[str, tuple[str, int]] = {}  # repo -> (table, dimensions)

    # --- connection and schema ---

    def connect(self) -> None:
        """Open the connection (and migrate the schema) now rather than at the first call."""
        self._run("connect", lambda conn: None)

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            psycopg = _client()
            from pgvector.psycopg import register_vector

            ms = int(self._timeout * 1000)
            conn = psycopg.connect(
                self._url,
                autocommit=True,  # transactions are explicit: conn.transaction() in _run
                connect_timeout=max(1, int(self._timeout)),
                options=f"-c statement_timeout={ms} -c lock_timeout={ms}",
            )
            try:
                migrate(conn)
                register_vector(conn)
            except BaseException:
                conn.close()
                raise
            self._conn, self._tables = conn, {}
        return self._conn

    def _run(self, what: str, op: Callable[[Any], T]) -> T:
        """``op(connection)`` in one transaction, with errors mapped as Chroma's are."""
        psycopg = _client()
        errors = psycopg.errors
        try:
            conn = self._connection()
            try:
                with conn.transaction():
                    return op(conn)
            except BaseException:
                # A table created in the transaction went with it, and one dropped under us
                # is gone: look the repos up afresh.
                self._tables.clear()
                raise
        except errors.UndefinedTable as exc:
            raise TransientError(f"pgvector {what}: {exc}") from exc
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            # Unreachable, gone away (AdminShutdown), or a statement or lock timeout
            # (QueryCanceled, LockNotAvailable): worth another try on a fresh connection.
            self._drop()
            raise TransientError(f"pgvector {what}: {type(exc).__name__}: {exc}") from exc
        except psycopg.Error as exc:
            raise PermanentError(f"pgvector {what}: {type(exc).__name__}: {exc}") from exc

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        self._tables = {}
        if conn is not None:
            with contextlib.suppress(Exception):  # the connection is already broken
                conn.close()

    def close(self) -> None:
        self._drop()

    def _table(self, conn: Any, repo: str, dimensions: int | None = None) -> str | None:
        """The repo's table; created at ``dimensions`` when missing and given, else None."""
        known = self._tables.get(repo)
        if known is None:
            row = conn.execute(
                "SELECT table_name, dimensions FROM th_repos WHERE repo = %s", (repo,)
            ).fetchone()
            if row is None and dimensions is None:
                return None
            if row is None:
                assert dimensions is not None
                row = _create_table(conn, repo, dimensions)
            known = self._tables[repo] = (str(row[0]), int(row[1]))
        table, dims = known
        if dimensions is not None and dimensions != dims:
            raise PermanentError(
                f"pgvector: repo {repo!r} is indexed with {dims}-dimension vectors and these "
                f"have {dimensions}: the embedding model changed; index it into an empty "
                "database (or drop its table) to start again"
            )
        return table

    # --- the VectorIndex interface ---

    def existing_ids(self, repo: str, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()

        def op(conn: Any) -> set[str]:
            table = self._table(conn, repo)
            if table is None:
                return set()
            rows = conn.execute(f"SELECT id FROM {table} WHERE id = ANY(%s)", (list(ids),))
            return {r[0] for r in rows}

        return self._run("existing_ids", op)

    def upsert(
        self, repo: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]
    ) -> None:
        if not chunks:
            return
        dimensions, arrays = _arrays(chunks, vectors)
        rows = [
            (c.id, c.path, c.start_line, c.end_line, c.text, json.dumps(c.metadata()), a)
            for c, a in zip(chunks, arrays, strict=True)
        ]

        def op(conn: Any) -> None:
            table = self._table(conn, repo, dimensions)
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {table} (id, path, start_line, end_line, document, metadata,"
                    " embedding) VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s)" + _MERGE,
                    rows,
                )

        self._run("upsert", op)

    def bulk_load(
        self, repo: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]
    ) -> None:
        """Many chunks at once into a repo that holds fewer (an eval corpus, a first load):
        ``load_pages`` with one page. Into a repo holding more than the load, rebuilding its
        index would cost more than inserting, so it upserts."""
        if not chunks:
            return
        if self.count(repo) > len(chunks):
            self.upsert(repo, chunks, vectors)
            return
        self.load_pages(repo, [(chunks, vectors)])

    def load_pages(
        self, repo: str, pages: Iterable[tuple[Sequence[Chunk], Sequence[Sequence[float]]]]
    ) -> int:
        """Pages of chunks with their vectors, streamed in by COPY, and the HNSW index built
        once after them instead of row by row, as pgvector advises for initial loads (an HNSW
        insert is what an upsert costs: several times slower per chunk here). One
        transaction: the repo's table is locked for it, and a load cut off (the source gone,
        a bad page) leaves the repo as it was. Merged by id like ``upsert``; one page at a
        time in memory. Returns the chunks written."""
        from psycopg.types.json import Jsonb

        def op(conn: Any) -> int:
            written, table, dimensions = 0, None, 0
            for chunks, vectors in pages:
                if not chunks:
                    continue
                dims, arrays = _arrays(chunks, vectors)
                if table is None:
                    table, dimensions = self._begin_load(conn, repo, dims), dims
                elif dims != dimensions:
                    raise PermanentError(f"pgvector: vectors of {dims} and {dimensions} dims")
                with (
                    conn.cursor() as cur,
                    cur.copy(
                        "COPY th_load (id, path, start_line, end_line, document, metadata,"
                        " embedding) FROM STDIN WITH (FORMAT BINARY)"
                    ) as copy,
                ):
                    copy.set_types(["text", "text", "int4", "int4", "text", "jsonb", "vector"])
                    for c, a in zip(chunks, arrays, strict=True):
                        copy.write_row(
                            (c.id, c.path, c.start_line, c.end_line, c.text, Jsonb(c.metadata()), a)
                        )
                written += len(chunks)
            if table is not None:
                conn.execute(f"INSERT INTO {table} SELECT * FROM th_load" + _MERGE)
                conn.execute(f"SET LOCAL maintenance_work_mem = '{_BUILD_MEMORY}'")
                _create_hnsw(conn, table)
            return written

        return self._run("bulk_load", op)

    def _begin_load(self, conn: Any, repo: str, dimensions: int) -> str:
        """The repo's table without its HNSW index, and an empty staging table beside it."""
        table = self._table(conn, repo, dimensions)
        assert table is not None  # created at these dimensions when missing
        # Asked for and long by nature: the graph of 100k chunks takes minutes to build,
        # past the per-call statement timeout meant for queries and drains.
        conn.execute("SET LOCAL statement_timeout = 0")
        conn.execute(f"DROP INDEX IF EXISTS {table}_hnsw")
        conn.execute(f"CREATE TEMP TABLE th_load (LIKE {table}) ON COMMIT DROP")
        return table

    def delete(self, repo: str, ids: Sequence[str]) -> None:
        if not ids:
            return

        def op(conn: Any) -> None:
            table = self._table(conn, repo)
            if table is not None:
                conn.execute(f"DELETE FROM {table} WHERE id = ANY(%s)", (list(ids),))

        self._run("delete", op)

    def ids_for_path(self, repo: str, path: str) -> list[str]:
        def op(conn: Any) -> list[str]:
            table = self._table(conn, repo)
            if table is None:
                return []
            rows = conn.execute(f"SELECT id FROM {table} WHERE path = %s ORDER BY id", (path,))
            return [r[0] for r in rows]

        return self._run("ids_for_path", op)

    def repos(self) -> list[str]:
        return self._run(
            "repos",
            lambda conn: [r[0] for r in conn.execute("SELECT repo FROM th_repos ORDER BY 1")],
        )

    def count(self, repo: str) -> int:
        def op(conn: Any) -> int:
            table = self._table(conn, repo)
            return (
                0
                if table is None
                else int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
            )

        return self._run("count", op)

    def export(self, repo: str, batch: int) -> Iterator[tuple[list[Chunk], list[list[float]]]]:
        """Every chunk of ``repo`` with its vector, ``batch`` at a time (in id order, each page
        its own transaction)."""
        after = ""
        while True:

            def page(conn: Any, after: str = after) -> list[tuple[Any, ...]]:
                table = self._table(conn, repo)
                if table is None:
                    return []
                return list(
                    conn.execute(
                        f"SELECT id, document, metadata, embedding FROM {table}"
                        " WHERE id > %s ORDER BY id LIMIT %s",
                        (after, batch),
                    )
                )

            rows = self._run("export", page)
            if not rows:
                return
            chunks = [Chunk.from_metadata(cid, doc, meta) for cid, doc, meta, _ in rows]
            yield chunks, [_floats(vec) for *_, vec in rows]
            after = rows[-1][0]

    def query(self, repo: str, vector: Sequence[float], n: int) -> list[ChunkHit]:
        import numpy as np

        query = np.asarray(vector, dtype=np.float32)

        def op(conn: Any) -> list[ChunkHit]:
            table = self._table(conn, repo)
            if table is None or n <= 0:
                return []
            ef = min(max(n, _EF_SEARCH_MIN), _EF_SEARCH_MAX)
            conn.execute(f"SET LOCAL hnsw.ef_search = {ef}")
            rows = conn.execute(
                f"SELECT id, path, start_line, end_line, document, embedding <=> %s AS distance"
                f" FROM {table} ORDER BY embedding <=> %s LIMIT %s",
                (query, query, n),
            ).fetchall()
            return [
                ChunkHit(
                    chunk_id=cid,
                    path=path,
                    start_line=int(start),
                    end_line=int(end),
                    text=doc or "",
                    score=1.0 - float(dist),
                )
                for cid, path, start, end, doc, dist in rows
            ]

        return self._run("query", op)


def _client() -> Any:
    """psycopg, with pgvector's adapters importable; heavy, so imported only where used."""
    try:
        import pgvector.psycopg  # noqa: F401
        import psycopg
    except ImportError as exc:
        raise PermanentError(
            f"TRACEHOUND_VECTOR_STORE=pgvector needs {exc.name}: pip install 'tracehound[pgvector]'"
        ) from exc
    return psycopg


def schema_version(conn: Any) -> int:
    """The version of tracehound's schema in the database (0: none yet)."""
    exists = conn.execute("SELECT to_regclass(%s)", (SCHEMA_VERSION_TABLE,)).fetchone()[0]
    if exists is None:
        return 0
    row = conn.execute(f"SELECT version FROM {SCHEMA_VERSION_TABLE}").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: Any, migrations: Sequence[Sequence[str]] = MIGRATIONS) -> int:
    """Bring the schema to the newest version in one transaction (each step followed by its
    version bump: a failing step leaves the version before it); returns the version. A database
    newer than ``migrations`` know is refused."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA_VERSION_TABLE} (version integer NOT NULL)"
        )
        row = conn.execute(f"SELECT version FROM {SCHEMA_VERSION_TABLE}").fetchone()
        if row is None:
            conn.execute(f"INSERT INTO {SCHEMA_VERSION_TABLE} (version) VALUES (0)")
        version = int(row[0]) if row else 0
        if version > len(migrations):
            raise SchemaTooNew(
                f"pgvector: the database's tracehound schema is version {version}, newer than "
                f"this tracehound knows ({len(migrations)}): upgrade tracehound"
            )
        while version < len(migrations):
            for statement in migrations[version]:
                conn.execute(statement)
            version += 1
            conn.execute(f"UPDATE {SCHEMA_VERSION_TABLE} SET version = %s", (version,))
    return version


def _create_table(conn: Any, repo: str, dimensions: int) -> tuple[str, int]:
    """The repo's table, its path index and HNSW index, and its row in ``th_repos``; a process
    that created it first wins (the lock serializes, the row tells)."""
    lock = int(hashlib.sha1(repo.encode()).hexdigest()[:15], 16)
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
    row = conn.execute(
        "SELECT table_name, dimensions FROM th_repos WHERE repo = %s", (repo,)
    ).fetchone()
    if row is not None:
        return str(row[0]), int(row[1])
    table = table_name(repo)
    conn.execute(
        f"CREATE TABLE {table} ("
        " id text PRIMARY KEY,"
        " path text NOT NULL,"
        " start_line integer NOT NULL,"
        " end_line integer NOT NULL,"
        " document text NOT NULL,"
        " metadata jsonb NOT NULL,"
        f" embedding vector({int(dimensions)}) NOT NULL)"
    )
    conn.execute(f"CREATE INDEX {table}_path ON {table} (path)")
    _create_hnsw(conn, table)
    conn.execute(
        "INSERT INTO th_repos (repo, table_name, dimensions) VALUES (%s, %s, %s)",
        (repo, table, dimensions),
    )
    return table, dimensions


def _floats(vector: Any) -> list[float]:
    """A stored vector as floats (pgvector's adapter hands back its ``Vector``)."""
    values = vector.to_list() if hasattr(vector, "to_list") else vector
    return [float(x) for x in values]


def _create_hnsw(conn: Any, table: str) -> None:
    conn.execute(
        f"CREATE INDEX {table}_hnsw ON {table} USING hnsw (embedding vector_cosine_ops)"
        f" WITH (m = {_HNSW_M}, ef_construction = {_HNSW_EF_CONSTRUCTION})"
    )


def _arrays(chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]) -> tuple[int, list[Any]]:
    """The vectors as float32 arrays and their one dimension; refused when they do not match
    the chunks or one another."""
    import numpy as np

    if len(chunks) != len(vectors):
        raise PermanentError(f"pgvector: {len(chunks)} chunks, {len(vectors)} vectors")
    arrays = [np.asarray(v, dtype=np.float32) for v in vectors]
    sizes = {a.shape[0] for a in arrays}
    if len(sizes) != 1:
        raise PermanentError(f"pgvector: vectors of several sizes {sorted(sizes)}")
    return sizes.pop(), arrays
