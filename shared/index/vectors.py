"""The vector index: one Chroma collection per repo, cosine space, our own vectors; or the same
in PostgreSQL with pgvector (shared/index/pgvectors.py), as TRACEHOUND_VECTOR_STORE says.

Chroma keeps no chunk texts: the keyword corpus in Redis holds each chunk's text
(shared/index/corpus.py), and retrieval reads a vector hit's text from it
(shared/retrieve/hybrid.py ``with_texts``). Chroma indexes every document it is given in an
SQLite FTS5 table with the trigram tokenizer (chromadb/migrations/metadb/
00003-full-text-tokenize.sqlite.sql), for ``where_document`` filters tracehound never makes:
writing 128 code chunks of ~1.5 kB took 248 ms with their documents and 86 ms without (median
of 16 upserts, 768 dimensions, one throwaway run), and an index drain waits for that write.
Collections written before keep their documents, and their hits carry them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlparse

import httpx

from shared.core.domain import Chunk, ChunkHit
from shared.core.errors import PermanentError, TransientError
from shared.core.settings import Settings

T = TypeVar("T")
# Chroma rejects larger upserts; its server reports the limit (get_max_batch_size(), 5461 here).
UPSERT_BATCH = 5000


class VectorIndex(Protocol):
    def existing_ids(self, repo: str, ids: Sequence[str]) -> set[str]: ...
    def upsert(
        self, repo: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]
    ) -> None: ...
    def delete(self, repo: str, ids: Sequence[str]) -> None: ...
    def ids_for_path(self, repo: str, path: str) -> list[str]: ...
    def query(self, repo: str, vector: Sequence[float], n: int) -> list[ChunkHit]:
        """The ``n`` nearest chunks; a hit's text is empty where the store keeps none."""
        ...


class VectorStore(VectorIndex, Protocol):
    """A vector index behind a server: connected ahead of the first call (Clients.warm), and
    read whole for ``tracehound vectors copy`` (shared/index/transfer.py): ``export``'s chunks
    have an empty text where the store keeps none."""

    def connect(self) -> None: ...
    def bulk_load(
        self, repo: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]
    ) -> None: ...
    def load_pages(
        self, repo: str, pages: Iterable[tuple[Sequence[Chunk], Sequence[Sequence[float]]]]
    ) -> int: ...
    def repos(self) -> list[str]: ...
    def count(self, repo: str) -> int: ...
    def export(self, repo: str, batch: int) -> Iterator[tuple[list[Chunk], list[list[float]]]]: ...


def open_vector_store(settings: Settings) -> VectorStore:
    """The store TRACEHOUND_VECTOR_STORE names, not yet connected."""
    if settings.vector_store == "pgvector":
        from shared.index.pgvectors import PgVectorIndex

        return PgVectorIndex(url=settings.pg_url, timeout=settings.pg_timeout)
    return ChromaVectorIndex(
        url=settings.chroma_url, path=settings.chroma_path, timeout=settings.chroma_timeout
    )


def collection_name(repo: str) -> str:
    """A valid Chroma name (3-512 of [a-zA-Z0-9._-], alphanumeric ends) unique per repo."""
    clean = re.sub(r"[^a-zA-Z0-9._-]+", "-", repo).strip("._-")
    name = f"th-{clean}" if clean else "th"
    if clean != repo:
        name += "-" + hashlib.sha1(repo.encode()).hexdigest()[:8]
    return name[:500]


def _guard(what: str, fn: Callable[[], T]) -> T:
    """Run a Chroma call; unreachable or overloaded becomes TransientError."""
    try:
        return fn()
    except (httpx.TransportError, ConnectionError, TimeoutError) as exc:
        raise TransientError(f"chroma {what}: {type(exc).__name__}: {exc}") from exc
    except ValueError as exc:
        if "could not connect" in str(exc).lower():
            raise TransientError(f"chroma {what}: {exc}") from exc
        raise PermanentError(f"chroma {what}: {exc}") from exc
    except Exception as exc:
        from chromadb.errors import ChromaError, NotFoundError

        if isinstance(exc, NotFoundError):
            raise CollectionGone(f"chroma {what}: {exc}") from exc
        if isinstance(exc, ChromaError):  # server-side failure: worth another try
            raise TransientError(f"chroma {what}: {type(exc).__name__}: {exc}") from exc
        raise


class CollectionGone(TransientError):
    """The collection vanished (Chroma restarted on empty data): the cached handle is stale."""


class ChromaVectorIndex:
    """Chroma over HTTP (any multi-process set-up) or a local path (single process only)."""

    def __init__(self, *, url: str | None, path: Path | None = None, timeout: float = 30.0) -> None:
        self._url, self._path, self._timeout = url, path, timeout
        self._client: Any = None
        self._collections: dict[str, Any] = {}

    def connect(self) -> None:
        """Open the client now rather than at the first call."""
        self._connect()

    def _connect(self) -> Any:
        if self._client is None:
            import chromadb  # heavy: import only in processes that use the index
            from chromadb.config import Settings as ChromaSettings

            chroma_settings = ChromaSettings(anonymized_telemetry=False)
            if self._url:
                u = urlparse(self._url)
                port = u.port or (443 if u.scheme == "https" else 8000)
                self._client = _guard(
                    "connect",
                    lambda: chromadb.HttpClient(
                        host=u.hostname or "127.0.0.1",
                        port=port,
                        ssl=u.scheme == "https",
                        settings=chroma_settings,
                    ),
                )
            elif self._path:
                self._client = chromadb.PersistentClient(
                    path=str(self._path), settings=chroma_settings
                )
            else:
                raise PermanentError("set TRACEHOUND_CHROMA_URL (or TRACEHOUND_CHROMA_PATH)")
        return self._client

    def _collection(self, repo: str) -> Any:
        col = self._collections.get(repo)
        if col is None:
            client = self._connect()
            # embedding_function=None: Chroma's default one downloads a model on first use.
            # The space is fixed when the collection is created and ignored afterwards.
            col = _guard(
                "collection",
                lambda: client.get_or_create_collection(
                    collection_name(repo),
                    embedding_function=None,
                    configuration={"hnsw": {"space": "cosine"}},
                    metadata={"repo": repo},
                ),
            )
            self._collections[repo] = col
        return col

    def _run(self, repo: str, what: str, op: Callable[[Any], T]) -> T:
        """``op(collection)`` with errors mapped; a vanished collection is looked up afresh."""
        col = self._collection(repo)
        try:
            return _guard(what, lambda: op(col))
        except CollectionGone:
            self._collections.pop(repo, None)
            raise

    def existing_ids(self, repo: str, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        got = self._run(repo, "get", lambda col: col.get(ids=list(ids), include=[]))
        return set(got["ids"])

    def upsert(
        self, repo: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]
    ) -> None:
        for i in range(0, len(chunks), UPSERT_BATCH):
            part = chunks[i : i + UPSERT_BATCH]
            part_vectors = [list(v) for v in vectors[i : i + UPSERT_BATCH]]
            # No documents: the corpus holds the texts (see the module doc).
            kwargs: dict[str, Any] = {
                "ids": [c.id for c in part],
                "embeddings": part_vectors,
                "metadatas": [c.metadata() for c in part],
            }

            def upsert_part(col: Any, kwargs: dict[str, Any] = kwargs) -> None:
                col.upsert(**kwargs)

            self._run(repo, "upsert", upsert_part)

    def bulk_load(
        self, repo: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]
    ) -> None:
        """Chroma has no faster path for many chunks than its batched upsert."""
        self.upsert(repo, chunks, vectors)

    def load_pages(
        self, repo: str, pages: Iterable[tuple[Sequence[Chunk], Sequence[Sequence[float]]]]
    ) -> int:
        """Each page upserted as it comes (Chroma has no load path of its own)."""
        written = 0
        for chunks, vectors in pages:
            self.upsert(repo, chunks, vectors)
            written += len(chunks)
        return written

    def delete(self, repo: str, ids: Sequence[str]) -> None:
        if ids:
            self._run(repo, "delete", lambda col: col.delete(ids=list(ids)))

    def ids_for_path(self, repo: str, path: str) -> list[str]:
        got = self._run(repo, "get", lambda col: col.get(where={"path": path}, include=[]))
        return list(got["ids"])

    def repos(self) -> list[str]:
        """The repos with a collection of tracehound's (its metadata names the repo)."""
        client = self._connect()
        found = []
        for col in _guard("list", lambda: client.list_collections()):
            repo = (col.metadata or {}).get("repo")
            if isinstance(repo, str) and col.name == collection_name(repo):
                found.append(repo)
        return sorted(found)

    def count(self, repo: str) -> int:
        return int(self._run(repo, "count", lambda col: col.count()))

    def export(self, repo: str, batch: int) -> Iterator[tuple[list[Chunk], list[list[float]]]]:
        """Every chunk of ``repo`` with its vector, ``batch`` at a time."""
        offset = 0
        while True:

            def page(col: Any, at: int = offset) -> Any:
                return col.get(
                    include=["embeddings", "documents", "metadatas"], limit=batch, offset=at
                )

            got = self._run(repo, "get", page)
            if not got["ids"]:
                return
            chunks = [
                Chunk.from_metadata(cid, doc or "", meta)
                for cid, doc, meta in zip(
                    got["ids"], got["documents"], got["metadatas"], strict=True
                )
            ]
            yield chunks, [[float(x) for x in v] for v in got["embeddings"]]
            offset += len(got["ids"])

    def query(self, repo: str, vector: Sequence[float], n: int) -> list[ChunkHit]:
        res = self._run(
            repo,
            "query",
            lambda col: col.query(
                query_embeddings=[list(vector)],
                n_results=n,
                include=["documents", "metadatas", "distances"],
            ),
        )
        hits = []
        for cid, doc, meta, dist in zip(
            res["ids"][0],
            res["documents"][0],
            res["metadatas"][0],
            res["distances"][0],
            strict=True,
        ):
            hits.append(
                ChunkHit(
                    chunk_id=cid,
                    path=str(meta["path"]),
                    start_line=int(meta["start_line"]),
                    end_line=int(meta["end_line"]),
                    text=doc or "",
                    score=1.0 - float(dist),
                )
            )
        return hits
