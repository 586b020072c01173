"""Keeping both indexes in step with the source: plan a file's chunks, store, remove, prune."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from shared.core.domain import Chunk
from shared.core.settings import Settings
from shared.index.chunking import chunk_file, embedding_text
from shared.index.corpus import RedisCorpus
from shared.index.vectors import VectorIndex
from shared.models.embedder import Embedder


@dataclass
class FilePlan:
    """What a file's new text needs: chunks to embed and store, chunk ids to drop."""

    path: str
    chunk_ids: list[str]
    missing: list[Chunk] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    # In Chroma but not in the keyword corpus (Redis lost it): stored again, not re-embedded.
    refill: list[Chunk] = field(default_factory=list)


def plan_file(
    repo: str,
    path: str,
    text: str,
    *,
    settings: Settings,
    vectors: VectorIndex,
    corpus: RedisCorpus,
    redact: Callable[[str], str] = str,
) -> FilePlan:
    """``plan_files`` of one file."""
    [plan] = plan_files(
        repo, [(path, text)], settings=settings, vectors=vectors, corpus=corpus, redact=redact
    )
    return plan


def plan_files(
    repo: str,
    files: Sequence[tuple[str, str]],
    *,
    settings: Settings,
    vectors: VectorIndex,
    corpus: RedisCorpus,
    redact: Callable[[str], str] = str,
) -> list[FilePlan]:
    """Each ``(path, text)``'s plan, in order. Chunks already present in both indexes are
    skipped: unchanged text costs no embedding.

    Every file is ``redact``-ed whole before it is chunked (redaction keeps its lines): a key
    block across a chunk boundary goes whole, and what is stored — chunk texts in Redis and
    Chroma, and so every excerpt later shown to the reranker, the model or Slack — and what is
    embedded is the redacted text.

    The whole batch is looked up at once: one vector-store round trip and two Redis ones,
    not three per file (a watcher's burst arrives as batches of up to 64 files, and a round
    trip to Chroma each made planning ~3 ms a file on the worker that also retrieves). A path
    twice in a batch (two saves) is planned twice against the same indexed state, as two
    tasks would be; ``finish_files`` settles them in order.
    """
    chunked = [
        chunk_file(
            repo,
            path,
            redact(text),
            size=settings.chunk_lines,
            overlap=settings.chunk_overlap,
            max_chars=settings.chunk_max_chars,
        )
        for path, text in files
    ]
    ids = list(dict.fromkeys(c.id for chunks in chunked for c in chunks))
    in_vectors = vectors.existing_ids(repo, ids)
    in_corpus = corpus.existing_ids(repo, ids)
    paths = list(dict.fromkeys(path for path, _ in files))
    previous = dict(zip(paths, corpus.files_ids(repo, paths), strict=True))
    plans = []
    for (path, _), chunks in zip(files, chunked, strict=True):
        chunk_ids = [c.id for c in chunks]
        plans.append(
            FilePlan(
                path=path,
                chunk_ids=chunk_ids,
                missing=[c for c in chunks if c.id not in in_vectors],
                stale=sorted(set(previous[path]) - set(chunk_ids)),
                refill=[c for c in chunks if c.id in in_vectors and c.id not in in_corpus],
            )
        )
    return plans


def store_chunks(
    repo: str,
    chunks: Sequence[Chunk],
    *,
    embedder: Embedder,
    vectors: VectorIndex,
    corpus: RedisCorpus,
    document_prefix: str = "",
) -> int:
    """Embed (batched) and write to Chroma first, then BM25: a chunk in BM25 is always in both.
    The chunks come redacted from ``plan_files``."""
    if not chunks:
        return 0
    embedded = embedder.embed([document_prefix + embedding_text(c) for c in chunks])
    vectors.upsert(repo, chunks, embedded)
    corpus.add(repo, chunks)
    return len(chunks)


def finish_files(
    repo: str, plans: Sequence[FilePlan], *, vectors: VectorIndex, corpus: RedisCorpus
) -> None:
    """After the new chunks are stored: drop the files' old chunks, record their new ids.

    Stale ids are taken again at this point, not only at planning time: two saves planned
    against the same old version must not leave the first save's chunks behind. Plans are
    taken in order, so a path saved twice ends with its last save's ids, and a chunk its last
    save holds is not dropped because an earlier save had dropped it (a file changed and
    changed back). Every path's ids are read in one round trip and written in another: a
    drain of the embedding backlog finishes up to a hundred files, and one round trip each
    kept the model host waiting after every drain.
    """
    if not plans:
        return
    paths = list(dict.fromkeys(p.path for p in plans))
    current = dict(zip(paths, corpus.files_ids(repo, paths), strict=True))
    dropped: set[str] = set()
    for plan in plans:
        dropped |= (set(plan.stale) | set(current[plan.path])) - set(plan.chunk_ids)
        current[plan.path] = plan.chunk_ids
    stale = sorted(dropped - {cid for ids in current.values() for cid in ids})
    vectors.delete(repo, stale)
    corpus.delete(repo, stale)
    corpus.set_files(repo, current)


def remove_path(repo: str, path: str, *, vectors: VectorIndex, corpus: RedisCorpus) -> int:
    """Every chunk of a deleted file leaves both indexes; returns how many."""
    ids = sorted(set(corpus.file_ids(repo, path)) | set(vectors.ids_for_path(repo, path)))
    vectors.delete(repo, ids)
    corpus.delete(repo, ids)
    corpus.forget_file(repo, path)
    return len(ids)


def prune(
    repo: str, live_paths: Iterable[str], *, vectors: VectorIndex, corpus: RedisCorpus
) -> list[str]:
    """Remove files that are indexed but no longer on disk; returns their paths."""
    gone = sorted(corpus.paths(repo) - set(live_paths))
    for path in gone:
        remove_path(repo, path, vectors=vectors, corpus=corpus)
    return gone
