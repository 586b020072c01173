"""Analysis chains in flight, so that a chain whose message Redis lost is started again.

Redis can lose a message on its own: when it shuts down (a restart, SIGTERM) it may serve a
worker's ``BRPOP`` — the message leaves the list, and the append-only file says so — in its
last event-loop turn, and exit before the reply is written. The worker never had it; no
``unacked`` entry exists; nothing redelivers it (the restart test lost 1 analysis in 10 this
way: Redis logged its shutdown 10 ms after the llm worker asked for its next message).

So every analysis chain is recorded when it starts (``record``, in the pipeline that LPUSHes
its first message: intake, the deferred backlog's drain, ``enqueue_error``), by the root id
that every message of the chain carries in its headers (retries and ``replace`` keep it).
``sweep`` runs every few seconds in one worker (workers/heartbeat.py): a chain whose last task
has a result is done and forgotten; a chain with a message on an analysis queue or in kombu's
``unacked`` hash is alive; a chain seen with neither on two sweeps ``grace_s`` apart is
started again from its first message, with the same task ids. Running a chain twice is
harmless — its first stage claims the group window for its root id, and its message is posted
once per claim — so the sweep errs on the side of starting again.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis

from shared.core import keys, queues

log = logging.getLogger(__name__)

# The lists an analysis chain's messages wait on (notify: a post Slack did not take at once)
# and kombu's hash of messages held by workers.
CHAIN_QUEUES = (*queues.ANALYSIS_QUEUES, "notify")
UNACKED = "unacked"
RESULT_PREFIX = "celery-task-meta-"


def record(pipe: Any, queue: str, message: bytes, *, last_id: str, now_ms: int) -> None:
    """Note a chain whose first message is LPUSHed in the same pipeline."""
    root = orjson.loads(message)["headers"]["id"]
    entry = {"queue": queue, "body": message.decode(), "last": last_id, "at": now_ms}
    pipe.hset(keys.INFLIGHT, root, json.dumps(entry))


def done(r: redis.Redis, root_id: str) -> None:
    """The chain ended without a result (a duplicate chain its first stage stopped)."""
    pipe = r.pipeline(transaction=False)
    pipe.hdel(keys.INFLIGHT, root_id)
    pipe.hdel(keys.INFLIGHT_MISSING, root_id)
    pipe.execute()


def _root_of(message: Any) -> str | None:
    try:
        headers = message["headers"]
        return str(headers.get("root_id") or headers["id"])
    except (KeyError, TypeError, AttributeError):
        return None


def present_roots(r: redis.Redis) -> set[str]:
    """Root ids of the chain messages waiting on a queue or held by a worker."""
    pipe = r.pipeline(transaction=False)
    for queue in CHAIN_QUEUES:
        pipe.lrange(queue, 0, -1)
    pipe.hvals(UNACKED)
    *lists, held = pipe.execute()
    roots: set[str] = set()
    for raw in (m for lst in lists for m in lst):
        try:
            root = _root_of(orjson.loads(raw))
        except orjson.JSONDecodeError:
            continue
        if root:
            roots.add(root)
    for raw in held:
        try:
            payload = orjson.loads(raw)[0]  # [message, exchange, routing key]
        except (orjson.JSONDecodeError, IndexError, KeyError, TypeError):
            continue
        if root := _root_of(payload):
            roots.add(root)
    return roots


@dataclass
class Swept:
    alive: int = 0
    finished: int = 0
    missing: int = 0  # seen missing once: started again if still missing after the grace
    restarted: list[str] = field(default_factory=list)


def sweep(r: redis.Redis, *, grace_s: float) -> Swept:
    out = Swept()
    entries = {_s(k): json.loads(v) for k, v in r.hgetall(keys.INFLIGHT).items()}
    if not entries:
        return out
    roots = list(entries)
    pipe = r.pipeline(transaction=False)
    for root in roots:
        pipe.exists(RESULT_PREFIX + entries[root]["last"])
    pipe.hgetall(keys.INFLIGHT_MISSING)
    pipe.time()
    *finished, missing_raw, (secs, micros) = pipe.execute()
    now_ms = int(secs) * 1000 + int(micros) // 1000
    since = {_s(k): int(v) for k, v in missing_raw.items()}
    present = present_roots(r)
    pipe = r.pipeline(transaction=False)
    for root, is_done in zip(roots, finished, strict=True):
        entry = entries[root]
        if is_done:
            pipe.hdel(keys.INFLIGHT, root)
            pipe.hdel(keys.INFLIGHT_MISSING, root)
            out.finished += 1
        elif root in present:
            if root in since:
                pipe.hdel(keys.INFLIGHT_MISSING, root)
            out.alive += 1
        elif root not in since:
            pipe.hset(keys.INFLIGHT_MISSING, root, now_ms)
            out.missing += 1
        elif now_ms - since[root] >= grace_s * 1000:
            # RPUSH: BRPOP takes from the right, so the chain goes first, as it had waited.
            pipe.rpush(entry["queue"], entry["body"])
            pipe.hdel(keys.INFLIGHT_MISSING, root)
            out.restarted.append(root)
        else:
            out.missing += 1
    pipe.execute()
    if out.restarted:
        log.warning("inflight.restarted", extra={"chains": out.restarted})
    return out


def claim_sweep(r: redis.Redis, every_s: float) -> bool:
    """One sweep per interval across every worker (SET NX)."""
    return bool(r.set(keys.INFLIGHT_SWEEP, "1", nx=True, px=max(1, int(every_s * 1000))))


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
