"""The keyword corpus in Redis: every chunk's tokens and text, and each file's chunk ids.

Keys per repo (``{r}`` is the repo name):
  th:corpus:{r}:docs      hash chunk id -> JSON {p: path, s: start, e: end,
                          y: "names it defines", t: "tokens ..."}
  th:corpus:{r}:text      hash chunk id -> zlib-compressed chunk text
  th:corpus:{r}:files     hash path -> JSON list of the chunk ids last fully indexed for it
  th:corpus:{r}:version   counter bumped by every change, so readers know when to reload
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis

from shared.core import keys
from shared.core.domain import Chunk, ChunkHit
from shared.index.chunking import defined_names, names_defined_in
from shared.index.tokens import tokenize


@dataclass(frozen=True)
class CorpusSnapshot:
    version: int
    ids: list[str]
    meta: list[tuple[str, int, int]]  # path, start, end
    tokens: list[list[str]]
    names: list[list[str]]  # what each chunk defines (functions, classes, methods)


class RedisCorpus:
    def __init__(self, client: redis.Redis) -> None:
        self.r = client

    def version(self, repo: str) -> int:
        return int(self.r.get(keys.corpus(repo, "version")) or 0)

    def existing_ids(self, repo: str, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        found = self.r.hmget(keys.corpus(repo, "docs"), list(ids))
        return {cid for cid, v in zip(ids, found, strict=True) if v is not None}

    def add(self, repo: str, chunks: Sequence[Chunk]) -> None:
        if not chunks:
            return
        docs: dict[Any, Any] = {
            c.id: json.dumps(
                {
                    "p": c.path,
                    "s": c.start_line,
                    "e": c.end_line,
                    "y": " ".join(defined_names(c)),
                    "t": " ".join(tokenize(f"{c.path}\n{c.text}")),
                }
            )
            for c in chunks
        }
        texts: dict[Any, Any] = {
            c.id: zlib.compress(c.text.encode("utf-8", errors="replace")) for c in chunks
        }
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(keys.corpus(repo, "docs"), mapping=docs)
        pipe.hset(keys.corpus(repo, "text"), mapping=texts)
        pipe.incr(keys.corpus(repo, "version"))
        pipe.execute()

    def delete(self, repo: str, ids: Sequence[str]) -> None:
        if not ids:
            return
        pipe = self.r.pipeline(transaction=True)
        pipe.hdel(keys.corpus(repo, "docs"), *ids)
        pipe.hdel(keys.corpus(repo, "text"), *ids)
        pipe.incr(keys.corpus(repo, "version"))
        pipe.execute()

    def file_ids(self, repo: str, path: str) -> list[str]:
        raw = self.r.hget(keys.corpus(repo, "files"), path)
        return json.loads(raw) if raw else []

    def set_file_ids(self, repo: str, path: str, ids: Sequence[str]) -> None:
        self.r.hset(keys.corpus(repo, "files"), path, json.dumps(list(ids)))

    def forget_file(self, repo: str, path: str) -> None:
        self.r.hdel(keys.corpus(repo, "files"), path)

    def paths(self, repo: str) -> set[str]:
        return {
            p.decode() if isinstance(p, bytes) else p
            for p in self.r.hkeys(keys.corpus(repo, "files"))
        }

    def texts(self, repo: str, ids: Sequence[str]) -> list[str]:
        if not ids:
            return []
        raw = self.r.hmget(keys.corpus(repo, "text"), list(ids))
        return [zlib.decompress(cast(bytes, v)).decode("utf-8") if v else "" for v in raw]

    def snapshot(self, repo: str) -> CorpusSnapshot:
        """All documents at one version (read in one MULTI so the two agree)."""
        pipe = self.r.pipeline(transaction=True)
        pipe.get(keys.corpus(repo, "version"))
        pipe.hgetall(keys.corpus(repo, "docs"))
        version, docs = pipe.execute()
        ids, meta, tokens, names = [], [], [], []
        unnamed: list[int] = []
        for cid, raw in docs.items():
            d = json.loads(raw)
            ids.append(cid.decode() if isinstance(cid, bytes) else cid)
            meta.append((d["p"], int(d["s"]), int(d["e"])))
            tokens.append(d["t"].split())
            names.append(d["y"].split() if "y" in d else [])
            if "y" not in d:
                unnamed.append(len(ids) - 1)
        if unnamed:  # indexed before names were kept: read them off the stored text
            texts = self.texts(repo, [ids[i] for i in unnamed])
            for i, text in zip(unnamed, texts, strict=True):
                names[i] = names_defined_in(text)
        return CorpusSnapshot(int(version or 0), ids, meta, tokens, names)

    def hits(
        self, repo: str, ranked: Iterable[tuple[int, float]], snap: CorpusSnapshot
    ) -> list[ChunkHit]:
        ranked = list(ranked)
        ids = [snap.ids[i] for i, _ in ranked]
        texts = self.texts(repo, ids)
        return [
            ChunkHit(
                chunk_id=snap.ids[i],
                path=snap.meta[i][0],
                start_line=snap.meta[i][1],
                end_line=snap.meta[i][2],
                text=text,
                score=score,
            )
            for (i, score), text in zip(ranked, texts, strict=True)
        ]
