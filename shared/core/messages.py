"""Celery task messages for a chain, built without Celery's publisher.

Celery's ``chain(...).apply_async()`` costs about 1 ms per chain on this project's 2-core
machine (signature freezing, signals, kombu's publish path): 17-25 times an ``LPUSH`` of the
same event, and intake starts one chain per new error group. ``chain_message`` builds the same
protocol-2 message Celery would send (tests/unit/test_messages.py compares the two field by
field), so intake can ``LPUSH`` it in the pipeline that records the group. Workers, redelivery,
retries and the chain's final result are unchanged: it is the same message.

Only what the Redis transport needs: a direct route to a queue of the same name (Celery's
``task_routes`` with ``{"queue": name}``), priority 0 (kombu's list is the queue's own name).
"""

from __future__ import annotations

import base64
import os
import socket
import time
import uuid
from collections.abc import Sequence
from functools import cache
from typing import Any

import orjson

SENT_AT = "th_sent_at"  # message header: when it was published (workers measure queue wait)


def _signature(name: str, queue: str, task_id: str, reply_to: str) -> dict[str, Any]:
    return {
        "task": name,
        "args": [],
        "kwargs": {},
        "options": {"queue": queue, "task_id": task_id, "reply_to": reply_to},
        "subtask_type": None,
        "immutable": False,
    }


def chain_message(
    steps: Sequence[tuple[str, str]],
    args: Sequence[Any],
    *,
    reply_to: str,
    task_ids: Sequence[str] | None = None,
) -> tuple[str, bytes, list[str]]:
    """(queue, message, task ids) of a chain of ``steps`` — (task name, queue) in order — whose
    first task gets ``args`` and passes its result on. The last id is the chain's result."""
    ids = list(task_ids) if task_ids is not None else [str(uuid.uuid4()) for _ in steps]
    (first, queue), rest = steps[0], steps[1:]
    later = [
        _signature(name, q, task_id, reply_to)
        for (name, q), task_id in zip(rest, ids[1:], strict=True)
    ]
    embed = {"callbacks": None, "errbacks": None, "chain": later[::-1] or None, "chord": None}
    # orjson: a queued ingest batch is one argument of up to 10 MB of text to escape.
    body = orjson.dumps([list(args), {}, embed])
    root = ids[0]
    message = {
        "body": base64.b64encode(body).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py",
            "task": first,
            "id": root,
            "shadow": None,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            "timelimit": [None, None],
            "root_id": root,
            "parent_id": None,
            "argsrepr": "(…)",  # Celery repeats the arguments here; the event is in the body
            "kwargsrepr": "{}",
            "origin": f"gen{os.getpid()}@{_hostname()}",
            "ignore_result": None,
            "replaced_task_nesting": 0,
            "stamped_headers": None,
            "stamps": {},
            SENT_AT: time.time(),
        },
        "properties": {
            "correlation_id": root,
            "reply_to": reply_to,
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        },
    }
    return queue, orjson.dumps(message), ids


@cache
def _hostname() -> str:
    return socket.gethostname()
