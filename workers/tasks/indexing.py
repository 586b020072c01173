"""Index maintenance: files in, chunks embedded on the embed queue, stale chunks out.

``index_files`` / ``index_file`` [index] plan each file's chunks against both indexes; only
chunks missing from them go to the repo's embedding backlog, which ``embed_backlog`` [embed]
drains several files at a time: it embeds, stores, and records each index task's result under
that task's id (shared/index/backlog.py says why).
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from celery.exceptions import Ignore

from shared.core import queues as q
from shared.core.domain import Chunk, RepoHistory
from shared.core.errors import PermanentError, TransientError
from shared.core.pipeline import enqueue_embed_backlog
from shared.index.backlog import Entry
from shared.index.history import HistoryStore
from shared.index.indexing import (
    FilePlan,
    finish_files,
    plan_files,
    prune,
    remove_path,
    store_chunks,
)
from shared.index.owners import OwnersStore
from workers import context
from workers.app import app, task_options
from workers.results import store_successes
from workers.retry import retry

log = logging.getLogger(__name__)


def _plan_dict(plan: FilePlan) -> dict[str, Any]:
    return {"path": plan.path, "chunk_ids": plan.chunk_ids, "stale": plan.stale}


def _index(task: Any, repo: str, files: list[dict[str, str]]) -> dict[str, Any]:
    ctx = context.clients()
    try:
        plans = plan_files(
            repo,
            [(f["path"], f["text"]) for f in files],
            settings=ctx.settings,
            vectors=ctx.vectors,
            corpus=ctx.corpus,
            redact=ctx.redactor.redact,
        )
    except TransientError as exc:
        raise retry(task, exc) from exc
    ctx.corpus.add(repo, [c for p in plans for c in p.refill])  # no model call needed
    missing = [c.model_dump() for p in plans for c in p.missing]
    if missing:
        # A drain of the backlog finishes the job and stores the result under this task's id,
        # so whoever waits on it gets the final result; this run records none (Ignore).
        entry = Entry(task.request.id, missing, [_plan_dict(p) for p in plans])
        if ctx.embed_backlog.push(repo, entry):
            enqueue_embed_backlog(app, repo)
        raise Ignore()
    return _finish(repo, plans, embedded=0)


def _finish(repo: str, plans: list[FilePlan], *, embedded: int) -> dict[str, Any]:
    ctx = context.clients()
    finish_files(repo, plans, vectors=ctx.vectors, corpus=ctx.corpus)
    return _result(repo, plans, embedded=embedded)


def _result(repo: str, plans: list[FilePlan], *, embedded: int) -> dict[str, Any]:
    """An index task's result: what it stored and dropped."""
    return {
        "repo": repo,
        "files": len(plans),
        "chunks": sum(len(p.chunk_ids) for p in plans),
        "embedded": embedded,
        "removed_chunks": sum(len(p.stale) for p in plans),
    }


@app.task(**task_options(q.INDEX_FILES))
def index_files(self: Any, repo: str, files: list[dict[str, str]]) -> dict[str, Any]:
    """Index a batch of files (``{"path", "text"}``) of one repo."""
    return _index(self, repo, files)


@app.task(**task_options(q.INDEX_FILE))
def index_file(self: Any, repo: str, path: str, text: str) -> dict[str, Any]:
    """Index one file's current text (what the watcher sends on a change)."""
    return _index(self, repo, [{"path": path, "text": text}])


def _store(repo: str, chunks: list[Chunk]) -> int:
    """Embed what is missing and store the chunks in Chroma and the keyword index."""
    ctx = context.clients()
    return store_chunks(
        repo,
        chunks,
        embedder=ctx.bulk_embedder,
        vectors=ctx.vectors,
        corpus=ctx.corpus,
        document_prefix=ctx.settings.embed_document_prefix,
    )


@app.task(**task_options(q.EMBED_CHUNKS))
def embed_chunks(
    self: Any, repo: str, chunks: list[dict[str, Any]], plans: list[dict[str, Any]]
) -> dict[str, Any]:
    """Embed missing chunks in batches, store them in Chroma and BM25, then retire stale ones."""
    parsed = [Chunk.model_validate(c) for c in chunks]
    try:
        n = _store(repo, parsed)
    except TransientError as exc:
        raise retry(self, exc) from exc
    return _finish(repo, [FilePlan(**p) for p in plans], embedded=n)


@app.task(**task_options(q.EMBED_BACKLOG))
def embed_backlog(self: Any, repo: str) -> dict[str, Any]:
    """Embed and store the oldest waiting index work of ``repo`` (several files), then queue
    the next drain while work remains."""
    ctx = context.clients()
    backlog = ctx.embed_backlog
    entries = backlog.take(repo, ctx.settings.bulk_embed_chunks)
    # One chunk id once: two saves of a file in one drain share their unchanged chunks, and
    # Chroma refuses an upsert that names an id twice.
    unique = {c["id"]: c for e in entries for c in e.chunks}
    chunks = [Chunk.model_validate(c) for c in unique.values()]
    try:
        n = _store(repo, chunks)
        plans = [[FilePlan(**p) for p in e.plans] for e in entries]
        finish_files(repo, [p for ps in plans for p in ps], vectors=ctx.vectors, corpus=ctx.corpus)
        store_successes(
            self.backend,
            [
                (e.task_id, _result(repo, ps, embedded=len(e.chunks)))
                for e, ps in zip(entries, plans, strict=True)
            ],
        )
    except TransientError as exc:
        raise retry(self, exc) from exc  # the entries stay; the retry does them all again
    except PermanentError as exc:
        # Nothing will make these embeddings work (unknown model, bad input): their index
        # tasks fail, as they did when each embedded on its own, and the backlog moves on.
        log.error("index.embed_failed", extra={"repo": repo, "error": str(exc)})
        for e in entries:
            self.backend.mark_as_failure(e.task_id, exc)
        n = 0
    backlog.done(repo, entries)
    if backlog.more(repo):
        enqueue_embed_backlog(app, repo)
    return {"repo": repo, "files": len(entries), "embedded": n}


@app.task(**task_options(q.REMOVE_FILE))
def remove_file(self: Any, repo: str, path: str) -> dict[str, Any]:
    """Drop a deleted file's chunks from both indexes."""
    ctx = context.clients()
    try:
        n = remove_path(repo, path, vectors=ctx.vectors, corpus=ctx.corpus)
    except TransientError as exc:
        raise retry(self, exc) from exc
    return {"repo": repo, "path": path, "removed_chunks": n}


@app.task(**task_options(q.PRUNE_REPO))
def prune_repo(self: Any, repo: str, live_paths: list[str]) -> dict[str, Any]:
    """Drop every indexed file that is not in ``live_paths`` (deleted while nobody watched)."""
    ctx = context.clients()
    try:
        gone = prune(repo, live_paths, vectors=ctx.vectors, corpus=ctx.corpus)
        # The end of a full index: its many per-batch segments become one (per 250k chunks),
        # the fastest shape to load and to search.
        ctx.corpus.merge(repo, everything=True)
    except TransientError as exc:
        raise retry(self, exc) from exc
    return {"repo": repo, "removed_files": gone}


@app.task(**task_options(q.RECORD_HISTORY))
def record_history(self: Any, repo: str, record: dict[str, Any]) -> dict[str, Any]:
    """Store a repo's git history as read by index or watch (replacing the previous one)."""
    parsed = RepoHistory.model_validate(record)
    try:
        HistoryStore(context.clients().redis).put(repo, parsed)
    except redis.RedisError as exc:
        raise retry(self, TransientError(f"redis: {exc}")) from exc
    return {"repo": repo, "commit": parsed.version.commit, "files": len(parsed.files)}


@app.task(**task_options(q.RECORD_OWNERS))
def record_owners(self: Any, repo: str, codeowners: str | None) -> dict[str, Any]:
    """Store a repo's CODEOWNERS text as read by index or watch (replacing the previous one)."""
    try:
        OwnersStore(context.clients().redis).put(repo, codeowners)
    except redis.RedisError as exc:
        raise retry(self, TransientError(f"redis: {exc}")) from exc
    return {"repo": repo, "codeowners": codeowners is not None}
