"""Every Redis key tracehound writes, in one place (Celery's own keys are kombu's business).

All keys start with ``th:``. Keys that embed free text (a channel name, a thread key) hash it,
so a key never grows with its input nor contains a secret such as a webhook URL.
"""

from __future__ import annotations

import hashlib

PREFIX = "th:"


def _digest(text: str, length: int = 40) -> str:
    return hashlib.sha1(text.encode("utf-8", errors="replace")).hexdigest()[:length]


# --- error groups (shared/groups/store.py) ---------------------------------------------------


def group(fingerprint: str) -> str:
    """Hash: service, first/last seen, counts, window, the posted message's channel and ts."""
    return f"{PREFIX}group:{fingerprint}"


def group_message(fingerprint: str) -> str:
    """The last message posted for a group (JSON text and blocks), for count updates."""
    return f"{group(fingerprint)}:message"


def group_update(fingerprint: str) -> str:
    """SET NX guard: at most one pending count update per group and interval."""
    return f"{group(fingerprint)}:update"


GROUP_PATTERN = f"{PREFIX}group:*"


def analysis_started(fingerprint: str, window_start: int) -> str:
    """Which chain analyses a group's window: a chain enqueued twice (a producer that died
    between enqueueing and recording it) stops at its first stage."""
    return f"{group(fingerprint)}:analysis:{window_start}"


def second_chance(claim: str) -> str:
    """A degraded message's one re-analysis was started (or is no longer wanted)."""
    return f"{PREFIX}second-chance:{claim}"


def seen(service: str, event_id: str) -> str:
    """The service's event was counted: a replay of the same id counts nothing (for
    ``dedup_ttl``). Per service: a shipper's own ids ("1", "2", …) repeat across services."""
    return f"{PREFIX}seen:{_digest(service + chr(0) + event_id)}"


# hash: second -> ids stored in it, over the last ten: how long a seen key is kept in a storm
# (shared/groups/store.py).
SEEN_RATE = f"{PREFIX}seen-rate"


# --- delivery (shared/notify/delivery.py) -----------------------------------------------------


def notified(guard: str) -> str:
    """Claim, then record, of the one message for a group window (or an ungrouped event)."""
    return f"{PREFIX}notified:{guard}"


def replied(reply_key: str) -> str:
    """A thread reply that was posted (so a redelivered task does not post it again)."""
    return f"{PREFIX}replied:{_digest(reply_key)}"


def claim_scan(claim_key: str) -> str:
    """Where the lookup for a claimed post whose answer was lost has got to (a Slack window)."""
    return f"{PREFIX}claim-scan:{_digest(claim_key)}"


# Hash: a configured Slack channel name -> its ID (from conversations.list or a post's answer).
SLACK_CHANNEL_IDS = f"{PREFIX}slack:channel-ids"


def slack_pace(channel: str) -> str:
    """The channel's posting slot (Slack allows about one message per second per channel)."""
    return f"{PREFIX}slack:pace:{_digest(channel, 16)}"


# --- analysis cache (shared/analyze/cache.py) -------------------------------------------------


def analysis(identity: str) -> str:
    """A finished analysis, by group, model, prompt version and the exact code it read."""
    return f"{PREFIX}analysis:{_digest(identity)}"


# --- keyword corpus (shared/index/corpus.py) --------------------------------------------------


def corpus(repo: str, part: str) -> str:
    """One part of a repo's keyword corpus: ``segments``, ``where``, ``dead``, ``text``,
    ``files``, ``next``, ``lock``, ``merging`` or ``version`` (``docs``: the old format)."""
    return f"{PREFIX}corpus:{repo}:{part}"


def corpus_segment(repo: str, sid: int, array: str = "") -> str:
    """One segment of a repo's keyword index: its hash, or one of its large arrays."""
    return f"{PREFIX}corpus:{repo}:seg:{sid}" + (f":{array}" if array else "")


# --- bulk embedding backlog (shared/index/backlog.py) ----------------------------------------


def embed_backlog(repo: str, part: str) -> str:
    """A repo's index work waiting for the embedding model: ``pending`` (a list of entries) or
    ``scheduled`` (set while a drain task is queued or running)."""
    return f"{PREFIX}embed-backlog:{repo}:{part}"


# --- model hosts (shared/models/hosts.py) -----------------------------------------------------


def host(host_id: str, part: str) -> str:
    """One part of a model host's lease state: ``lease``, ``members`` (its holders), ``fence``,
    ``waiting``, ``loaded``, ``stats``, or ``waiter:`` (a prefix, followed by the waiter's id)."""
    return f"{PREFIX}host:{host_id}:{part}"


HOST_STATS_PATTERN = host("*", "stats")


def host_of_stats_key(key: str) -> str:
    """The host id inside a key that matched ``HOST_STATS_PATTERN``."""
    return key[len(f"{PREFIX}host:") : -len(":stats")]


# --- source maps (shared/intake/sourcemap_store.py) -----------------------------------------


def sourcemaps(repo: str) -> str:
    """Hash: ``<release>\n<bundle path>`` -> the bundle's map (JSON: digest, when added), and
    ``~version``; release "" holds the maps `tracehound index` found in the repo's tree."""
    return f"{PREFIX}sourcemaps:{_digest(repo)}"


def sourcemap_blobs(repo: str) -> str:
    """Hash: map digest -> the decoded map (shared/intake/sourcemap.py), once per repo."""
    return f"{PREFIX}sourcemaps:{_digest(repo)}:blobs"


# --- code history (shared/index/history.py) ---------------------------------------------------


def history(repo: str) -> str:
    """Hash: the commit the repo was indexed at, and its recently changed files' history."""
    return f"{PREFIX}history:{_digest(repo)}"


def codeowners(repo: str) -> str:
    """String: the repo's CODEOWNERS file as the indexer found it (shared/index/owners.py)."""
    return f"{PREFIX}codeowners:{_digest(repo)}"


# --- what the on-call said in Slack (shared/groups/triage.py, shared/notify/respond.py) ----


def group_muted(fingerprint: str) -> str:
    """The group is counted but not posted until this key expires (JSON: by, until)."""
    return f"{group(fingerprint)}:muted"


def group_resolved(fingerprint: str) -> str:
    """The group was resolved (JSON: by, at, the first message's channel, ts and link); its
    next occurrence posts "Regressed"."""
    return f"{group(fingerprint)}:resolved"


def group_case(fingerprint: str) -> str:
    """The group's last analysed event and the files its message showed (JSON), for the
    actions on that message (a re-analysis, the file picker, a labelled case)."""
    return f"{group(fingerprint)}:case"


def group_activity(fingerprint: str) -> str:
    """Hash: one "who did what" line per kind of action, shown on the group's message."""
    return f"{group(fingerprint)}:activity"


def slack_message(channel: str, ts: str) -> str:
    """Which group a posted Slack message belongs to: an action names its message (Slack
    signs that), and the group is found from it, never from a value a client could forge."""
    return f"{PREFIX}slack:message:{_digest(channel + chr(0) + ts)}"


def rerun_limit(fingerprint: str) -> str:
    """SET NX EX: a group's "Analyze again" ran within the interval; the next press waits."""
    return f"{PREFIX}group:{fingerprint}:rerun"


def action_done(action_key: str) -> str:
    """SET NX: a Slack action whose side effect must happen once (a re-analysis enqueued)."""
    return f"{PREFIX}slack:action:{_digest(action_key)}"


FEEDBACK = f"{PREFIX}feedback"  # hash: fingerprint -> the labelled case (JSON, eval's format)


# --- incident memory (shared/groups/memory.py) ------------------------------------------------


def memory(fingerprint: str) -> str:
    """Hash: what a later message says of a delivered group (title, service, repo, summary,
    file, first seen, message; resolved by, at, commit, link)."""
    return f"{PREFIX}memory:{fingerprint}"


MEMORY_VECTORS = f"{PREFIX}memory-vectors"  # sorted set: fingerprint -> when its vector was kept


def memory_signature(signature: str) -> str:
    """Sorted set: the groups remembered with exactly this signature, fingerprint -> when kept."""
    return f"{PREFIX}memory-sig:{_digest(signature)}"


# --- incidents and the deferred backlog (shared/groups/incidents.py, deferred.py) ------------

INCIDENT_SEQ = f"{PREFIX}incident:seq"


def incident(incident_id: str) -> str:
    """Hash: one incident's cause, lead, poster and message (its members: ``:groups``,
    ``:labels``)."""
    return f"{PREFIX}incident:{incident_id}"


def incident_cause(cause: str) -> str:
    """String: the open incident of a root cause; expires when no new group joins for a
    window."""
    return f"{PREFIX}incident:cause:{_digest(cause)}"


def cap_batch(service: str) -> str:
    """String: the incident that summarises a service's new groups over its cap (expires with
    the cap window)."""
    return f"{PREFIX}incident:cap:{_digest(service)}"


def new_groups(service: str) -> str:
    """Counter: new analyses started for a service in its current cap window."""
    return f"{PREFIX}newgroups:{_digest(service)}"


# Counter: new analyses started for every service in the current cap window (the global cap:
# naming new services does not buy more analyses).
NEW_GROUPS_ALL = f"{PREFIX}newgroups:all"


DEFERRED = f"{PREFIX}deferred"  # sorted set: waiting group -> when it was deferred (ms)
DEFERRED_MESSAGES = f"{PREFIX}deferred:messages"  # hash: group -> its chain's first message
DEFERRED_DRAIN = f"{PREFIX}deferred:drain"  # SET NX: a drain task is scheduled
# sorted set: waiting group -> its window's count + a fraction that ranks the longest waiting
# first among equal counts (shared/groups/deferred.py ``rank``); kept by intake as it counts.
DEFERRED_RANK = f"{PREFIX}deferred:rank"
# sorted set: incident whose lead waits for its groups' counts -> when it may start (ms)
DEFERRED_SETTLING = f"{PREFIX}deferred:settling"


# --- deploys (shared/groups/deploys.py) -------------------------------------------------------


def deploys(service: str) -> tuple[str, str]:
    """(hash: deploy id -> its JSON, sorted set: deploy id -> time) of one service."""
    base = f"{PREFIX}deploys:{_digest(service)}"
    return base, f"{base}:times"


DEPLOYS_RECENT = f"{PREFIX}deploys:recent"  # sorted set: "service\0id" -> time, every service


# --- analysis chains in flight (shared/core/inflight.py) ---------------------------------------

INFLIGHT = f"{PREFIX}inflight"  # hash: chain root id -> its first message, queue, last id
INFLIGHT_MISSING = f"{PREFIX}inflight:missing"  # hash: root id -> when no message of it was seen
INFLIGHT_SWEEP = f"{PREFIX}inflight:sweep"  # SET NX: one sweep per interval across workers


# --- forwarding to an upstream Sentry (producers/ingest/upstream_queue.py) --------------------

UPSTREAM_QUEUE = f"{PREFIX}upstream:queue"  # stream: requests waiting for the upstream's 2xx
UPSTREAM_BYTES = f"{PREFIX}upstream:bytes"  # counter: bytes of the entries in that stream
UPSTREAM_STATS = f"{PREFIX}upstream:stats"  # hash: queued, delivered, dropped, refused counts
UPSTREAM_LEASE = f"{PREFIX}upstream:lease"  # SET NX PX: the one ingest process that drains it


# --- batches queued by HTTP ingest (shared/intake/batch.py) -----------------------------------


def queued_body(batch_id: str) -> str:
    """String: a queued batch's request body, beside its small ``intake_batch`` message (set
    in the same MULTI as the LPUSH); deleted once the batch is taken."""
    return f"{PREFIX}intake:{batch_id}:body"


# counter: queued batches the intake workers have taken; ingest reads their pace from it
# (producers/ingest/events.py: how long a batch accepted now would wait).
INTAKE_TAKEN = f"{PREFIX}intake:taken"


def queued_taken(batch_id: str) -> str:
    """String: a queued batch was taken, so a redelivered message finding no body is a
    repeat, not a loss."""
    return f"{PREFIX}intake:{batch_id}:taken"
