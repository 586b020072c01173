"""Index maintenance: files in, chunks embedded on the embed queue, stale chunks out.

``index_files`` / ``index_file`` [index] plan each file's chunks against both indexes; only
chunks missing from them go on to ``embed_chunks`` [embed], which embeds and stores them.
"""

from __future__ import annotations

from typing import Any

from shared.core import queues as q
from shared.core.domain import Chunk
from shared.core.errors import TransientError
from shared.core.pipeline import embed_chunks_step
from shared.index.indexing import FilePlan, finish_file, plan_file, prune, remove_path, store_chunks
from workers import context
from workers.app import app, task_options
from workers.retry import retry


def _plan_dict(plan: FilePlan) -> dict[str, Any]:
    return {"path": plan.path, "chunk_ids": plan.chunk_ids, "stale": plan.stale}


def _index(task: Any, repo: str, files: list[dict[str, str]]) -> dict[str, Any]:
    ctx = context.clients()
    try:
        plans = [
            plan_file(
                repo,
                f["path"],
                f["text"],
                settings=ctx.settings,
                vectors=ctx.vectors,
                corpus=ctx.corpus,
            )
            for f in files
        ]
    except TransientError as exc:
        raise retry(task, exc) from exc
    ctx.corpus.add(repo, [c for p in plans for c in p.refill])  # no model call needed
    missing = [c.model_dump() for p in plans for c in p.missing]
    if missing:
        # The embed stage finishes the job; replacing keeps this task's id, so whoever waits on
        # it gets the final result.
        raise task.replace(embed_chunks_step(app, repo, missing, [_plan_dict(p) for p in plans]))
    return _finish(repo, plans, embedded=0)


def _finish(repo: str, plans: list[FilePlan], *, embedded: int) -> dict[str, Any]:
    ctx = context.clients()
    for plan in plans:
        finish_file(repo, plan, vectors=ctx.vectors, corpus=ctx.corpus)
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


@app.task(**task_options(q.EMBED_CHUNKS))
def embed_chunks(
    self: Any, repo: str, chunks: list[dict[str, Any]], plans: list[dict[str, Any]]
) -> dict[str, Any]:
    """Embed missing chunks in batches, store them in Chroma and BM25, then retire stale ones."""
    ctx = context.clients()
    parsed = [Chunk.model_validate(c) for c in chunks]
    try:
        n = store_chunks(
            repo,
            parsed,
            embedder=ctx.bulk_embedder,
            vectors=ctx.vectors,
            corpus=ctx.corpus,
            document_prefix=ctx.settings.embed_document_prefix,
            redact=ctx.redactor.redact,
        )
    except TransientError as exc:
        raise retry(self, exc) from exc
    return _finish(repo, [FilePlan(**p) for p in plans], embedded=n)


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
