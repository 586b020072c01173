"""Task names, queues and routing, declared once; producers enqueue by name from here.

Model queues (``embed``, ``rerank``, ``llm``) are consumed with concurrency 1 so the model host
serves one request at a time; CPU queues (``retrieve``, ``index``, ``notify``, ``intake``)
scale out.
"""

from __future__ import annotations

from typing import Any

MODEL_QUEUES = ("embed", "rerank", "llm")
# Tasks a model queue's worker runs at once. Its slots share the host's lease for that model
# (shared/models/hosts.py): one slot's request waits at the host while the other posts its
# result and takes its next task, instead of the host idling in between. More slots would only
# queue more requests at the host.
MODEL_SLOTS = 2
CPU_QUEUES = ("retrieve", "index", "notify", "intake")
ALL_QUEUES = MODEL_QUEUES + CPU_QUEUES
# The lists an analysis chain's stages wait on before Slack, in order (embed: the query's own
# priority level; bulk index embedding waits under another key, at priority 9).
ANALYSIS_QUEUES = ("embed", "retrieve", "rerank", "llm")

EMBED_QUERY = "tracehound.embed_query"
RETRIEVE = "tracehound.retrieve"
RERANK = "tracehound.rerank"
ANALYZE = "tracehound.analyze"
NOTIFY = "tracehound.notify"
INDEX_FILES = "tracehound.index_files"
INDEX_FILE = "tracehound.index_file"
REMOVE_FILE = "tracehound.remove_file"
PRUNE_REPO = "tracehound.prune_repo"
EMBED_CHUNKS = "tracehound.embed_chunks"
EMBED_BACKLOG = "tracehound.embed_backlog"
UPDATE_GROUP = "tracehound.update_group"
THREAD_REPLY = "tracehound.thread_reply"
REANALYZE = "tracehound.reanalyze"
RECORD_HISTORY = "tracehound.record_history"
RECORD_OWNERS = "tracehound.record_owners"
INTAKE_BATCH = "tracehound.intake_batch"
SLACK_ACTION = "tracehound.slack_action"
DRAIN_DEFERRED = "tracehound.drain_deferred"
UPDATE_INCIDENT = "tracehound.update_incident"

ROUTES: dict[str, str] = {
    EMBED_QUERY: "embed",
    RETRIEVE: "retrieve",
    RERANK: "rerank",
    ANALYZE: "llm",
    NOTIFY: "notify",
    INDEX_FILES: "index",
    INDEX_FILE: "index",
    REMOVE_FILE: "index",
    PRUNE_REPO: "index",
    EMBED_CHUNKS: "embed",
    EMBED_BACKLOG: "embed",
    UPDATE_GROUP: "notify",
    THREAD_REPLY: "notify",
    REANALYZE: "notify",
    RECORD_HISTORY: "index",
    RECORD_OWNERS: "index",
    INTAKE_BATCH: "intake",
    SLACK_ACTION: "notify",
    DRAIN_DEFERRED: "intake",
    UPDATE_INCIDENT: "notify",
}

# Redis priority of bulk index embedding on the shared embed queue: kombu serves priority 0
# (an error's query embedding) before 9, so a re-index never delays an analysis by more than
# the one bulk task the embed worker is running (measured: query embeds waited 0.5 s median
# behind 2,000 queued bulk tasks, which waited 49 s).
BULK_PRIORITY = 9

# Time limits per task (seconds), next to the routing that names the tasks.
TIME_LIMITS: dict[str, int] = {
    EMBED_QUERY: 120,
    RETRIEVE: 120,
    RERANK: 120,
    ANALYZE: 900,
    NOTIFY: 60,
    INDEX_FILES: 600,
    INDEX_FILE: 300,
    REMOVE_FILE: 120,
    PRUNE_REPO: 600,
    EMBED_CHUNKS: 600,
    EMBED_BACKLOG: 600,
    UPDATE_GROUP: 60,
    THREAD_REPLY: 60,
    REANALYZE: 60,
    RECORD_HISTORY: 60,
    RECORD_OWNERS: 60,
    INTAKE_BATCH: 120,
    SLACK_ACTION: 60,
    DRAIN_DEFERRED: 60,
    UPDATE_INCIDENT: 60,
}


PRIORITY_SEP = "\x06\x16"  # kombu's Redis separator between a queue and its priority level


def depth(r: Any, queue: str) -> int:
    """Messages waiting in a queue, every priority level included (kombu's Redis layout)."""
    pipe = r.pipeline(transaction=False)
    for key in [queue] + [f"{queue}{PRIORITY_SEP}{p}" for p in (3, 6, 9)]:
        pipe.llen(key)
    return int(sum(pipe.execute()))


RESTORE_SWEEP_S = 5  # how often a worker looks for messages whose holder stopped renewing them


# The analysis chain's stages before analyze hand their result to the next stage in its message;
# nobody reads them from the result backend, so they are not stored there (a failure still is,
# and marks the rest of the chain failed). The chain's last result (analyze's, or notify's when
# analyze handed the post over) is what callers wait on.
RESULT_NOT_READ = frozenset(
    {EMBED_QUERY, RETRIEVE, RERANK, INTAKE_BATCH, DRAIN_DEFERRED, UPDATE_INCIDENT}
)


def celery_config(
    redis_url: str,
    *,
    max_retries: int,
    backoff_max: int,
    redelivery_after: int = 30,
    task_events: bool = False,
) -> dict[str, Any]:
    """Celery settings shared by the worker app and the producers' sending app.

    ``redelivery_after`` is the Redis transport's visibility timeout: a message held (running,
    or waiting for its countdown) by a worker that stopped renewing it is handed out again that
    long after the last renewal. Live workers renew theirs (workers/heartbeat.py), so the
    timeout no longer has to outlast the longest task with all its retries (96 minutes did).
    """
    transport = {
        "visibility_timeout": redelivery_after,
        "unacked_restore_interval": RESTORE_SWEEP_S,
        "unacked_restore_throttle": 1,
        # kombu waits forever on a dead connection by default: a publish (a stage handing its
        # result to the next) hung a pool child after a cut in test_redis_hand_off.py.
        "socket_timeout": 30.0,
        "socket_connect_timeout": 5.0,
    }
    return {
        "broker_url": redis_url,
        "result_backend": redis_url,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_routes": {name: {"queue": queue} for name, queue in ROUTES.items()},
        "task_default_queue": "index",
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "broker_transport_options": transport,
        "result_backend_transport_options": transport,
        "result_expires": 7 * 24 * 3600,
        # Not extended: each result would also keep its task's arguments (the indexed files'
        # text: 163 MiB for one repo in issue 13; each stage's input payload) for result_expires.
        "result_extended": False,
        "broker_connection_retry_on_startup": True,
        # A stage publishes the next one before its message is acknowledged; Celery's default
        # (3 tries, 0.6 s) gave up during a Redis restart and failed the stage.
        # Storing a result over a dead pooled connection (Redis restarted while the task ran)
        # failed the task by default; retried here, and a connection idle for 10 s is checked
        # with a PING before use.
        "result_backend_always_retry": True,
        "result_backend_max_retries": 10,
        "redis_backend_health_check_interval": 10,
        # A half-open connection (seen once in test_redis_hand_off.py: a child stuck reading
        # the handshake of a new connection for Celery's default 120 s) fails and is retried.
        "redis_socket_timeout": 30.0,
        "redis_socket_connect_timeout": 5.0,
        "task_publish_retry_policy": {
            "max_retries": 10,
            "interval_start": 0.2,
            "interval_step": 0.5,
            "interval_max": 2,
        },
        # No STARTED state nor task events by default: each is a write or a PUBLISH per task
        # that nothing in tracehound reads (Flower enables events when it starts).
        "task_track_started": False,
        "worker_send_task_events": task_events,
        "enable_utc": True,
    }
