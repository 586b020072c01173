"""Results stored for tasks that another task finished: an index drain stores one per file.

``backend.store_result`` takes two round trips per result (a read of the current state, then
the write and its publish): 128 of them were a third of a drain's time, the model host idle
meanwhile (issue 35). Here a drain's results take two round trips in all, written as Celery
writes them (its own meta, encoding and expiry), and a result already SUCCESS is left alone,
as ``store_result`` leaves it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery import states
from celery.backends.redis import RedisBackend


def store_successes(backend: Any, results: Sequence[tuple[str, Any]]) -> None:
    """Store ``(task_id, result)`` pairs as those tasks' SUCCESS results."""
    if not results:
        return
    if not isinstance(backend, RedisBackend):
        for task_id, result in results:
            backend.store_result(task_id, result, states.SUCCESS)
        return
    keys = [backend.get_key_for_task(task_id) for task_id, _ in results]

    def write() -> None:  # whole again on a retry: a failed pipeline keeps nothing
        current = backend.client.mget(keys)
        pipe = backend.client.pipeline(transaction=False)
        for (task_id, result), key, stored in zip(results, keys, current, strict=True):
            if stored is not None and backend.decode_result(stored)["status"] == states.SUCCESS:
                continue
            meta = backend._get_result_meta(
                result=backend.encode_result(result, states.SUCCESS),
                state=states.SUCCESS,
                traceback=None,
                request=None,
            )
            meta["task_id"] = task_id
            value = backend.encode(meta)
            if backend.expires:
                pipe.setex(key, backend.expires, value)
            else:
                pipe.set(key, value)
            pipe.publish(key, value)
        pipe.execute()

    backend.ensure(write, ())  # retried on connection errors, as store_result is
