"""The incident you already solved: groups analysed before, found again by the shape of their
error, so a new group's message can say "looks like …, resolved by …".

- **The signature** of a group (``signature``): its exception chain (types and messages with
  numbers, ids and quoted values stripped) and its in-app frames as ``module/file:function``,
  nearest the raise first, at most ``MAX_FRAMES``. No service, no line numbers, no outer
  frames past the bound: the same bug raised from another entry point or another service
  reads (nearly) the same. The embed stage embeds it beside the query, in the same call.
- **Remembered** in two halves. The vector, in the vector store of the day under its own
  collection (``MEMORY_REPO``: ``th-tracehound-memory-…`` in Chroma, its own table in
  pgvector), is kept by the retrieve stage (``keep``); a sorted set of fingerprints by time
  bounds it (older than ``ttl`` or past ``MAX_REMEMBERED`` are deleted). What a message
  needs is a Redis hash per group (``th:memory:{fp}``: service, repo, title, summary, top
  file, first seen, message), written once the group's message is delivered
  (``remember``), and the resolution (who, when, the indexed commit, the thread's link)
  added when on-call presses Resolve (``note_resolved``). A vector without its hash (a
  group still in flight, muted, or forgotten) is never recalled.
- **The lookup** (``recall``): first the groups kept with exactly this signature (a sorted
  set per signature, the newest ``SAME_SIGNATURE`` of them), then, only when none of them has
  a message to point at, the nearest ``TOP_K`` vectors, cosine at least the threshold
  (``TRACEHOUND_MEMORY_THRESHOLD``, measured by benchmarks/incident_memory.py), never the
  group itself; the closest one remembered wins, with the file on-call confirmed for it
  (shared/notify/feedback.py's labelled case). The exact half is there because a vector
  index's search is approximate: among many near-identical signatures Chroma's HNSW can
  leave a vector unreachable, so querying it with its own vector does not return it at any
  ``n_results`` (chroma-core/chroma#3113, #3580; tests/integration/test_memory.py reproduces
  it) — and the same bug again is the case this feature exists for. It needs no vector
  either: with the embed host down, the same signature is still found (and kept), only the
  nearest neighbours are not.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Sequence
from typing import Any, Protocol

import redis

from shared.core import keys
from shared.core.domain import (
    Chunk,
    ChunkHit,
    ErrorEvent,
    Investigation,
    Recalled,
    one_line,
)
from shared.intake.fingerprint import frame_signature, normalize_message
from shared.intake.trace import trace_of

MEMORY_REPO = "tracehound\nmemory"  # a line break: no real repo's name (one_line) has one
MAX_FRAMES = 2  # innermost in-app frames signed (benchmarks/incident_memory.py --frames)
MAX_EXCEPTIONS = 4  # exceptions of a chain in a signature, root cause and outermost kept
MESSAGE_CHARS = 200  # of each exception's normalised message
SIGNATURE_CHARS = 2000
TOP_K = 5  # neighbours read per lookup
SAME_SIGNATURE = 8  # groups kept per exact signature (the newest), read before the neighbours
MAX_REMEMBERED = 50_000  # vectors kept, at most (the oldest go first)
PRUNE_BATCH = 200  # expired vectors deleted per new group, at most
TITLE_CHARS = 150
SUMMARY_CHARS = 300
PATH_CHARS = 300

# normalize_message's placeholders: stripped, not kept, so "<num>" is no shared word.
_PLACEHOLDER = re.compile(r"<(?:url|email|path|uuid|ts|str|ip|hex|num)>")
_SPACE = re.compile(r"\s+")


class MemoryVectors(Protocol):
    """What memory needs of a vector store (shared/index/vectors.py VectorIndex has it)."""

    def upsert(
        self, repo: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]
    ) -> None: ...
    def delete(self, repo: str, ids: Sequence[str]) -> None: ...
    def query(self, repo: str, vector: Sequence[float], n: int) -> list[ChunkHit]: ...


def _message(text: str) -> str:
    stripped = _PLACEHOLDER.sub(" ", normalize_message(text))
    return _SPACE.sub(" ", stripped).strip()[:MESSAGE_CHARS]


def signature(event: ErrorEvent, max_frames: int = MAX_FRAMES) -> str:
    """The text a group is remembered and recalled by (see the module doc); "" when the
    event says nothing to tell one error from another."""
    trace = trace_of(event)
    printed = [p for p in trace.printed if not p.group]
    # Root cause first, as chain_of orders them reversed: the cause is what a bug is.
    ordered = [p for p in printed if p.cause_first] + [p for p in reversed(printed)
                                                       if not p.cause_first]  # fmt: skip
    if len(ordered) > MAX_EXCEPTIONS:
        ordered = [*ordered[: MAX_EXCEPTIONS - 1], ordered[-1]]
    lines = [f"{p.type}: {_message(p.message)}".rstrip(": ") for p in ordered]
    if not lines and event.exception_type:
        lines = [f"{event.exception_type}: {_message(event.message)}".rstrip(": ")]
    elif not lines and event.message.strip():
        lines = [_message(event.message)]
    frames = frame_signature(trace.code_frames())[:max_frames]
    lines += [f"at {f}" for f in frames]
    return "\n".join(line for line in lines if line)[:SIGNATURE_CHARS]


def title_of(event: ErrorEvent) -> str:
    """``service: Type: message`` (redacted at intake; clipped, one line)."""
    head = ": ".join(p for p in (event.exception_type, event.message.strip()) if p) or "error"
    return one_line(f"{event.service}: {head}", TITLE_CHARS)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")


def keep(
    vectors: MemoryVectors,
    r: redis.Redis,
    fingerprint: str,
    vector: Sequence[float] | None,
    text: str,
    *,
    ttl_s: int,
    now: float | None = None,
) -> None:
    """Store the group's vector (again: an upsert by fingerprint) and its signature's exact
    entry, and forget vectors older than ``ttl_s`` or past ``MAX_REMEMBERED``, a bounded
    batch at a time (an exact entry expires with its signature's last group). Without a
    vector (the embed host was down) only the exact entry is kept."""
    at = time.time() if now is None else now
    if vector is not None:
        chunk = Chunk(
            id=fingerprint,
            repo=MEMORY_REPO,
            path=fingerprint,
            start_line=0,
            end_line=0,
            language="signature",
            content_hash=hashlib.sha1(text.encode("utf-8", "replace")).hexdigest(),
            text=text,
        )
        vectors.upsert(MEMORY_REPO, [chunk], [vector])
    pipe = r.pipeline(transaction=False)
    if text:
        same = keys.memory_signature(text)
        pipe.zadd(same, {fingerprint: at})
        pipe.zremrangebyrank(same, 0, -SAME_SIGNATURE - 1)
        pipe.expire(same, ttl_s)
    if vector is None:
        pipe.execute()
        return
    pipe.zadd(keys.MEMORY_VECTORS, {fingerprint: at})
    pipe.zrangebyscore(keys.MEMORY_VECTORS, "-inf", at - ttl_s, start=0, num=PRUNE_BATCH)
    pipe.zcard(keys.MEMORY_VECTORS)
    expired, count = pipe.execute()[-2:]
    extra = max(0, int(count) - MAX_REMEMBERED)
    if extra:
        expired += r.zrange(keys.MEMORY_VECTORS, 0, min(extra, PRUNE_BATCH) - 1)
    old = list(dict.fromkeys(_text(f) for f in expired))
    if old:
        vectors.delete(MEMORY_REPO, old)
        r.zrem(keys.MEMORY_VECTORS, *old)


def remember(
    r: redis.Redis,
    inv: Investigation,
    *,
    channel: str | None,
    ts: str,
    ttl_s: int,
) -> None:
    """What a later message says of this group, written once its message is delivered (a
    repeat rewrites the message's fields; a resolution stays)."""
    if inv.group is None:
        return
    a = inv.analysis
    top = a.relevant_files[0].path if a and a.relevant_files else ""
    top = top or (inv.candidates[0].path if inv.candidates else "")
    fp = inv.group.fingerprint
    first_seen = _int(_text(r.hget(keys.group(fp), "first_seen")))
    key = keys.memory(fp)
    pipe = r.pipeline(transaction=True)
    pipe.hset(
        key,
        mapping={
            "title": title_of(inv.event),
            "service": inv.event.service,
            "repo": inv.event.repo,
            "summary": one_line(a.summary, SUMMARY_CHARS) if a and not a.degraded else "",
            "file": top[:PATH_CHARS],
            "first_seen": first_seen or int(inv.event.timestamp.timestamp() * 1000),
            "channel": channel or "",
            "ts": ts,
        },
    )
    pipe.expire(key, ttl_s)
    pipe.execute()


def note_resolved(
    r: redis.Redis, fingerprint: str, *, by: str, at_ms: int, commit: str | None, link: str | None
) -> None:
    """On-call resolved the group: who, when, the commit its repo's index held, the link."""
    key = keys.memory(fingerprint)
    if not r.exists(key):
        return  # not remembered (memory off, or forgotten): nothing to add to
    r.hset(
        key,
        mapping={
            "resolved_by": by,
            "resolved_at": at_ms,
            "commit": (commit or "")[:64],
            "link": (link or "")[:500],
        },
    )


def recall(
    vectors: MemoryVectors,
    r: redis.Redis,
    vector: Sequence[float] | None,
    *,
    fingerprint: str | None,
    threshold: float,
    text: str = "",
    top_k: int = TOP_K,
) -> Recalled | None:
    """The remembered group with exactly the signature ``text`` (the newest), else the
    closest at cosine ``threshold`` or more; never ``fingerprint`` itself; None when there
    is none. Without a ``vector`` (the embed host was down) only the exact signature."""
    newest = r.zrevrange(keys.memory_signature(text), 0, SAME_SIGNATURE - 1) if text else []
    same = [_text(f) for f in newest]
    # The exact ones first, on their own: the vector store is asked only when none of them
    # has anything to say (a regression's own group answers without a nearest-neighbour query).
    exact = [_exact(f, text) for f in same if f != fingerprint]
    if (found := _first_said(r, exact)) is not None or vector is None:
        return found
    hits = vectors.query(MEMORY_REPO, vector, top_k + 1)
    seen = {fingerprint, *same}
    near = sorted(
        (h for h in hits if h.chunk_id not in seen and h.score >= threshold),
        key=lambda h: -h.score,
    )
    return _first_said(r, near[:top_k])


def _first_said(r: redis.Redis, close: Sequence[ChunkHit]) -> Recalled | None:
    """The first of ``close`` whose group has a message to point at."""
    if not close:
        return None
    pipe = r.pipeline(transaction=False)
    for hit in close:
        pipe.hgetall(keys.memory(hit.chunk_id))
    pipe.hmget(keys.FEEDBACK, [hit.chunk_id for hit in close])
    *records, confirmed = pipe.execute()
    for hit, raw, case in zip(close, records, confirmed, strict=True):
        record = {_text(k): _text(v) for k, v in raw.items()}
        if not record.get("title"):
            continue  # in flight, muted or forgotten: nothing to say of it
        return _recalled(hit, record, case)
    return None


def _exact(fingerprint: str, text: str) -> ChunkHit:
    """A group kept with the very signature looked up: as close as a vector can be."""
    return ChunkHit(chunk_id=fingerprint, path=fingerprint, start_line=0, end_line=0,
                    text=text, score=1.0)  # fmt: skip


def _confirmed_file(case: Any) -> str:
    """The file on-call confirmed (Right file, a pick or a typed path) for the group."""
    if not case:
        return ""
    try:
        gold = json.loads(case).get("gold_files") or []
    except (ValueError, AttributeError):
        return ""
    return str(gold[0])[:PATH_CHARS] if gold and isinstance(gold[0], str) else ""


def _int(value: str) -> int:
    return int(value) if value.isdigit() else 0


def _recalled(hit: ChunkHit, record: dict[str, str], case: Any) -> Recalled:
    return Recalled(
        fingerprint=hit.chunk_id,
        score=round(hit.score, 4),
        title=record["title"],
        service=record.get("service", ""),
        repo=record.get("repo", ""),
        first_seen_ms=_int(record.get("first_seen", "")),
        file=_confirmed_file(case),
        resolved_by=record.get("resolved_by", ""),
        resolved_at_ms=_int(record.get("resolved_at", "")),
        commit=record.get("commit", ""),
        link=record.get("link", ""),
    )


__all__ = [
    "MEMORY_REPO",
    "MemoryVectors",
    "keep",
    "note_resolved",
    "recall",
    "remember",
    "signature",
    "title_of",
]
