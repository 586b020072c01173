"""Moving an index between vector stores without embedding again (``tracehound vectors copy``).

Chunks go with their vectors, texts and metadata, a page at a time; the target upserts by chunk
id, so a copy that was cut off is finished by running it again, and copying twice doubles
nothing. The keyword corpus (Redis) is the same for both stores and is not touched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shared.index.vectors import VectorStore

PAGE = 1000  # chunks read and written at once


@dataclass(frozen=True)
class Copied:
    repo: str
    chunks: int  # written to the target
    source: int  # the source's count
    target: int  # the target's count after the copy


def copy_vectors(
    source: VectorStore,
    target: VectorStore,
    repos: Sequence[str] | None = None,
    *,
    page: int = PAGE,
    progress: Callable[[str, int], None] = lambda repo, done: None,
) -> list[Copied]:
    """Copy ``repos`` (every repo of ``source`` when None) into ``target``."""
    copied = []
    for repo in repos if repos is not None else source.repos():
        written = 0
        for chunks, vectors in source.export(repo, page):
            target.upsert(repo, chunks, vectors)
            written += len(chunks)
            progress(repo, written)
        copied.append(Copied(repo, written, source.count(repo), target.count(repo)))
    return copied
