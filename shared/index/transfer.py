"""Moving an index between vector stores without embedding again (``tracehound vectors copy``).

Chunks go with their vectors, texts and metadata, a page at a time, written by chunk id: a copy
that was cut off is finished by running it again, and copying twice doubles nothing. Into a
repo the target does not hold yet, the pages stream into the target's load path (pgvector:
COPY and one index build, in one transaction); into one it holds, they are upserted. The
keyword corpus (Redis) is the same for both stores and is not changed; the texts a source
keeps none of (Chroma) are read from it on the way, so pgvector holds them as when it indexed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

from shared.core.domain import Chunk
from shared.index.vectors import VectorStore

PAGE = 1000  # chunks read and written at once
Page = tuple[list[Chunk], list[list[float]]]


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
    texts: Callable[[str, Sequence[str]], list[str]] | None = None,
) -> list[Copied]:
    """Copy ``repos`` (every repo of ``source`` when None) into ``target``; ``texts`` (the
    corpus's) gives the chunks the source keeps no text of theirs."""
    copied = []
    for repo in repos if repos is not None else source.repos():
        pages = _sent(source.export(repo, page), partial(progress, repo))
        if texts is not None:
            pages = _with_texts(repo, pages, texts)
        if target.count(repo) == 0:
            written = target.load_pages(repo, pages)
        else:
            written = 0
            for chunks, vectors in pages:
                target.upsert(repo, chunks, vectors)
                written += len(chunks)
        copied.append(Copied(repo, written, source.count(repo), target.count(repo)))
    return copied


def _with_texts(
    repo: str, pages: Iterable[Page], texts: Callable[[str, Sequence[str]], list[str]]
) -> Iterator[Page]:
    for chunks, vectors in pages:
        missing = [c.id for c in chunks if not c.text]
        found = dict(zip(missing, texts(repo, missing), strict=True)) if missing else {}
        yield (
            [c.model_copy(update={"text": found[c.id]}) if found.get(c.id) else c for c in chunks],
            vectors,
        )


def _sent(pages: Iterable[Page], on_sent: Callable[[int], None]) -> Iterator[Page]:
    """``pages`` as they are, telling ``on_sent`` how many chunks went out so far."""
    sent = 0
    for chunks, vectors in pages:
        yield chunks, vectors
        sent += len(chunks)
        on_sent(sent)
