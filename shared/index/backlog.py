"""Index work waiting for the embedding model, coalesced so the host sees few large requests.

Index tasks (a single file, or a watcher's batch of up to 64) each used to become their own
``embed_chunks`` task: one embed request, one Chroma upsert and one keyword segment per task
(2,000 single-file changes kept the embed worker busy for ~100 s, mostly on per-file overhead).
Now an index task that has chunks to embed appends them to its repo's backlog and, if no drain
is queued, queues one; a drain takes up to ``max_chunks`` chunks (several files' worth), embeds
them in batched requests, stores them once, and queues the next drain while entries remain.
A drain is one bounded task at bulk priority, so an error's query embedding still goes first.

An entry stays in the list until its drain has stored it (``done`` removes it by value), so a
drain that dies is redone by its redelivered message; storing is idempotent (upserts by id).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from shared.core import keys

# A drain that died leaves ``scheduled`` set; its message is redelivered within the visibility
# timeout, and this TTL (renewed by every drain) lets a new index task queue one after that.
SCHEDULED_TTL_S = 900


@dataclass(frozen=True)
class Entry:
    """One index task's work: its id (its result is stored under it), chunks and file plans."""

    task_id: str
    chunks: list[dict[str, Any]]
    plans: list[dict[str, Any]]
    raw: str = ""  # the stored form, to remove exactly this entry


class EmbedBacklog:
    def __init__(self, r: redis.Redis) -> None:
        self.r = r

    def push(self, repo: str, entry: Entry) -> bool:
        """Append ``entry``; True if the caller must queue a drain (none was scheduled)."""
        raw = json.dumps({"task_id": entry.task_id, "chunks": entry.chunks, "plans": entry.plans})
        pipe = self.r.pipeline(transaction=False)
        pipe.rpush(keys.embed_backlog(repo, "pending"), raw)
        pipe.set(keys.embed_backlog(repo, "scheduled"), "1", nx=True, ex=SCHEDULED_TTL_S)
        _, scheduled_now = pipe.execute()
        return bool(scheduled_now)

    def take(self, repo: str, max_chunks: int) -> list[Entry]:
        """The oldest entries, up to ``max_chunks`` chunks in all (at least one entry)."""
        self.r.expire(keys.embed_backlog(repo, "scheduled"), SCHEDULED_TTL_S)
        # An entry holds at least one chunk, so max_chunks entries always cover the budget.
        raws = [
            r.decode() if isinstance(r, bytes) else str(r)
            for r in self.r.lrange(keys.embed_backlog(repo, "pending"), 0, max_chunks - 1)
        ]
        taken: list[Entry] = []
        total = 0
        for raw in raws:
            d = json.loads(raw)
            if taken and total + len(d["chunks"]) > max_chunks:
                break
            taken.append(Entry(d["task_id"], d["chunks"], d["plans"], raw))
            total += len(d["chunks"])
        return taken

    def done(self, repo: str, entries: list[Entry]) -> None:
        pipe = self.r.pipeline(transaction=False)
        for e in entries:
            pipe.lrem(keys.embed_backlog(repo, "pending"), 1, e.raw)
        pipe.execute()

    def more(self, repo: str) -> bool:
        """After a drain: True if another must be queued; else the schedule flag is cleared."""
        pending = keys.embed_backlog(repo, "pending")
        if self.r.llen(pending):
            return True
        self.r.delete(keys.embed_backlog(repo, "scheduled"))
        # An entry pushed between LLEN and DEL saw the flag set and queued nothing: take over.
        return bool(self.r.llen(pending)) and bool(
            self.r.set(keys.embed_backlog(repo, "scheduled"), "1", nx=True, ex=SCHEDULED_TTL_S)
        )

    def depth(self, repo: str) -> int:
        return int(self.r.llen(keys.embed_backlog(repo, "pending")))
