"""Model hosts as scheduled resources: leases in real Redis, real workers, the simulator's log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from shared.core.errors import TransientError
from shared.core.pipeline import enqueue_error, enqueue_file
from shared.core.settings import Settings
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.index.reindex import index_repository
from shared.intake.events import parse_event
from shared.models.hosts import (
    PRIORITY_BULK,
    PRIORITY_CHAIN,
    PRIORITY_QUERY,
    HostLease,
    HostSession,
    LeaseLost,
    host_status,
)
from shared.stack.children import wait_until
from shared.stack.localstack import LocalStack, tracehound_executable
from tests.conftest import DATA, SAMPLE_SERVICE

pytestmark = pytest.mark.integration

TRACE = (DATA / "sample-error.txt").read_text()


def new_host() -> str:
    return f"test-host-{uuid.uuid4().hex[:8]}"


def loaded(r: redis.Redis, host: str, model: str) -> None:
    """What a holder's first successful call records: the host has ``model`` loaded."""
    r.set(
        f"th:host:{host}:loaded", json.dumps({"model": model, "url": "http://x", "kind": "ollama"})
    )


# --- the lease itself ----------------------------------------------------------------------


def test_one_holder_at_a_time_and_release_hands_over(redis_client: redis.Redis) -> None:
    host = new_host()
    a, b = HostLease(redis_client, host), HostLease(redis_client, host)
    a.acquire("m1", PRIORITY_QUERY, timeout=1)
    with pytest.raises(TransientError, match="not free"):
        b.acquire("m2", PRIORITY_QUERY, timeout=0.3)
    a.release()
    b.acquire("m2", PRIORITY_QUERY, timeout=1)
    assert b.token is not None and a.token is None


def test_a_lease_whose_key_was_deleted_by_hand_is_fenced(redis_client: redis.Redis) -> None:
    host = new_host()
    a = HostLease(redis_client, host)
    a.acquire("m1", PRIORITY_QUERY, timeout=1)
    redis_client.delete(f"th:host:{host}:lease")
    b = HostLease(redis_client, host)
    b.acquire("m2", PRIORITY_QUERY, timeout=1)  # someone else takes the free host

    with pytest.raises(LeaseLost):
        a.check()  # the old holder must not call the host any more
    assert b.token is not None and b.token > (a.token or 0)


def test_a_lease_recovers_after_sigkill_of_its_holder(
    settings: Settings, redis_client: redis.Redis
) -> None:
    host = new_host()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import time, redis
        from shared.models.hosts import HostSession
        r = redis.Redis.from_url({settings.redis_url!r})
        s = HostSession(r, {host!r}, ttl=1.0)
        s.call("m1", "http://x", "rerank", 0, lambda: print("holding", flush=True)
               or time.sleep(3600))
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(5)
        t0 = time.monotonic()
        HostLease(redis_client, host).acquire("m2", PRIORITY_QUERY, timeout=10)
        assert time.monotonic() - t0 < 3  # the TTL (1 s), not a deadlock
    finally:
        if holder.poll() is None:
            holder.kill()


def test_waiters_go_by_priority_and_a_dead_waiter_does_not_block(
    redis_client: redis.Redis,
) -> None:
    host = new_host()
    owner = HostLease(redis_client, host)
    owner.acquire("m0", PRIORITY_QUERY, timeout=1)
    order: list[str] = []

    def wait_for(name: str, priority: int) -> None:
        lease = HostLease(redis_client, host)
        lease.acquire(name, priority, timeout=10)
        order.append(name)
        time.sleep(0.05)
        lease.release()

    # A waiter that died while queued: in the ranking but with no heartbeat.
    redis_client.zadd(f"th:host:{host}:waiting", {"ghost": -(10**12)})
    bulk = threading.Thread(target=wait_for, args=("bulk", PRIORITY_BULK))
    bulk.start()
    time.sleep(0.2)  # bulk waits first ...
    query = threading.Thread(target=wait_for, args=("query", PRIORITY_QUERY))
    query.start()
    time.sleep(0.2)
    owner.release()
    bulk.join(10)
    query.join(10)
    assert order == ["query", "bulk"]  # ... but the query goes first


def test_a_waiter_pruned_as_dead_while_alive_keeps_its_place(redis_client: redis.Redis) -> None:
    host = new_host()
    owner = HostLease(redis_client, host)
    owner.acquire("m0", PRIORITY_QUERY, timeout=1)
    order: list[str] = []

    def wait_for(name: str, priority: int) -> None:
        lease = HostLease(redis_client, host)
        lease.acquire(name, priority, timeout=10)
        order.append(name)
        time.sleep(0.05)
        lease.release()

    chain = threading.Thread(target=wait_for, args=("chain", PRIORITY_CHAIN))
    chain.start()
    time.sleep(0.2)
    # What another waiter's pruning does when it finds no heartbeat (not written yet, or
    # expired while the process was not scheduled): the live waiter leaves the ranking.
    redis_client.zrem(
        f"th:host:{host}:waiting", *redis_client.zrange(f"th:host:{host}:waiting", 0, -1)
    )
    bulk = threading.Thread(target=wait_for, args=("bulk", PRIORITY_BULK))
    bulk.start()
    time.sleep(0.2)
    owner.release()
    chain.join(10)
    bulk.join(10)
    assert order == ["chain", "bulk"]


def test_bulk_work_yields_the_host_to_an_errors_stage_after_one_task(
    redis_client: redis.Redis,
) -> None:
    host = new_host()
    # Nothing releases the host on a timer here: only after_task may.
    indexer = HostSession(redis_client, host, max_tasks=20, max_seconds=60, idle_release=60)
    indexer.call("embed", "http://x", "ollama", PRIORITY_BULK, lambda: None)
    got: list[str] = []

    def wait_for(name: str, priority: int) -> None:
        lease = HostLease(redis_client, host)
        lease.acquire(name, priority, timeout=10)
        got.append(name)
        lease.release()

    other_bulk = threading.Thread(target=wait_for, args=("bulk", PRIORITY_BULK))
    other_bulk.start()
    time.sleep(0.2)
    indexer.after_task(queue_depth=100)  # another bulk waiter, fair share not used: keep it
    assert host_status(redis_client, host)["holder"]["holder"] == indexer.lease.holder

    rerank = threading.Thread(target=wait_for, args=("rerank", PRIORITY_CHAIN))
    rerank.start()
    time.sleep(0.2)
    indexer.after_task(queue_depth=100)  # an error's stage waits: yield after this one task
    assert not indexer.lease.held

    rerank.join(10)
    other_bulk.join(10)
    assert got == ["rerank", "bulk"]
    indexer.close()


def test_a_burst_of_short_tasks_keeps_the_host_until_its_share_of_host_time_is_used(
    redis_client: redis.Redis,
) -> None:
    """Fifty reranks of a burst, the LLM waiting: the count of tasks does not end the hold
    (the rest of the burst would wait out the LLM's turn and cost two more loads); the
    seconds held do."""
    host = new_host()
    reranker = HostSession(redis_client, host, max_seconds=2.0, idle_release=60)
    reranker.call("rerank", "http://x", "rerank", PRIORITY_CHAIN, lambda: None)
    got: list[str] = []

    def wait_for_llm() -> None:
        lease = HostLease(redis_client, host)
        lease.acquire("chat", PRIORITY_CHAIN, timeout=10)
        got.append("chat")
        lease.release()

    llm = threading.Thread(target=wait_for_llm)
    llm.start()
    wait_until(lambda: host_status(redis_client, host)["waiting"], 5, "the LLM waiting")
    for _ in range(50):
        reranker.after_task(queue_depth=10)
    assert reranker.lease.held and got == []

    time.sleep(2.0)
    reranker.after_task(queue_depth=10)  # its share of host time used, someone waits: yield
    assert not reranker.lease.held
    llm.join(10)
    assert got == ["chat"]
    reranker.close()


def test_a_dead_host_is_not_held_while_waiting_to_retry(redis_client: redis.Redis) -> None:
    host = new_host()
    session = HostSession(redis_client, host, ttl=5)

    def down() -> None:
        raise TransientError("connection refused")

    with pytest.raises(TransientError):
        session.call("m1", "http://x", "rerank", PRIORITY_QUERY, down)
    assert host_status(redis_client, host)["holder"] is None
    session.close()


def test_the_host_goes_at_once_when_a_call_leaves_nothing_queued_for_its_model(
    redis_client: redis.Redis,
) -> None:
    """An analysis's model call ends, its task still posts to Slack: the next error's query
    embedding must not wait for that (nor poll for it) when nothing more is queued for the LLM."""
    host = new_host()
    waiting = {"n": 1}
    session = HostSession(redis_client, host, ttl=5, queue_depth=lambda: waiting["n"])
    session.call("m1", "http://x", "chat", PRIORITY_QUERY, lambda: None)
    assert host_status(redis_client, host)["holder"] is not None  # more of the same queued
    waiting["n"] = 0
    session.call("m1", "http://x", "chat", PRIORITY_QUERY, lambda: None)
    assert host_status(redis_client, host)["holder"] is None  # nothing queued: let go now
    other = HostLease(redis_client, host, ttl=5)
    t0 = time.monotonic()
    other.acquire("m2", PRIORITY_QUERY, timeout=1)
    assert time.monotonic() - t0 < other.poll  # taken at once, no polling
    other.release()
    session.close()


def test_processes_serving_one_model_share_its_lease_until_the_last_leaves(
    redis_client: redis.Redis,
) -> None:
    host = new_host()
    a, b, other = (HostLease(redis_client, host, ttl=5) for _ in range(3))
    a.acquire("chat", PRIORITY_CHAIN, timeout=1)
    loaded(redis_client, host, "chat")
    b.acquire("chat", PRIORITY_CHAIN, timeout=0.3)  # joins: the host has that model already
    assert a.token == b.token and host_status(redis_client, host)["holders"] == 2
    with pytest.raises(TransientError, match="not free"):
        other.acquire("embed", PRIORITY_QUERY, timeout=0.3)
    a.release()
    b.check()  # still held: b's request may be at the host right now
    with pytest.raises(TransientError, match="not free"):
        other.acquire("embed", PRIORITY_QUERY, timeout=0.3)
    b.release()
    other.acquire("embed", PRIORITY_QUERY, timeout=1)
    other.release()


def test_nobody_joins_the_holders_ahead_of_a_waiter_for_another_model(
    redis_client: redis.Redis,
) -> None:
    host = new_host()
    a, late = HostLease(redis_client, host, ttl=5), HostLease(redis_client, host, ttl=5)
    a.acquire("chat", PRIORITY_CHAIN, timeout=1)
    loaded(redis_client, host, "chat")
    got: list[str] = []

    def wait_for_embed() -> None:
        lease = HostLease(redis_client, host, ttl=5)
        lease.acquire("embed", PRIORITY_QUERY, timeout=10)
        got.append("embed")
        lease.release()

    waiter = threading.Thread(target=wait_for_embed)
    waiter.start()
    time.sleep(0.2)
    with pytest.raises(TransientError, match="not free"):
        late.acquire("chat", PRIORITY_QUERY, timeout=0.3)  # the embed waiter was first
    a.release()
    waiter.join(10)
    assert got == ["embed"]


def test_every_holder_of_a_shared_lease_is_fenced_when_it_is_taken_over(
    redis_client: redis.Redis,
) -> None:
    host = new_host()
    a, b = HostLease(redis_client, host), HostLease(redis_client, host)
    a.acquire("chat", PRIORITY_CHAIN, timeout=1)
    loaded(redis_client, host, "chat")
    b.acquire("chat", PRIORITY_CHAIN, timeout=1)
    redis_client.delete(f"th:host:{host}:lease")
    HostLease(redis_client, host).acquire("embed", PRIORITY_QUERY, timeout=1)
    for holder in (a, b):
        with pytest.raises(LeaseLost):
            holder.check()


def test_a_holder_killed_beside_another_frees_the_host_within_its_ttl(
    settings: Settings, redis_client: redis.Redis
) -> None:
    host = new_host()
    script = textwrap.dedent(f"""
        import time, redis
        from shared.models.hosts import HostSession
        r = redis.Redis.from_url({settings.redis_url!r})
        s = HostSession(r, {host!r}, ttl=1.0)
        s.call("chat", "http://x", "ollama", 1, lambda: None)  # the model is loaded
        s.call("chat", "http://x", "ollama", 1, lambda: print("holding", flush=True)
               or time.sleep(3600))
    """)
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        alive = HostLease(redis_client, host, ttl=1.0)
        alive.acquire("chat", PRIORITY_CHAIN, timeout=1)  # joins the process about to die
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(5)
        alive.release()
        t0 = time.monotonic()
        HostLease(redis_client, host).acquire("embed", PRIORITY_QUERY, timeout=10)
        assert time.monotonic() - t0 < 3  # the dead member's TTL (1 s), not a deadlock
    finally:
        if holder.poll() is None:
            holder.kill()


def test_nobody_joins_before_the_model_is_loaded(redis_client: redis.Redis) -> None:
    """The holder that took the lease may still be unloading the last model: a joiner's
    request would reach the host beside it. It joins once a call has loaded the model."""
    host = new_host()
    loaded(redis_client, host, "embed")  # what the host had before
    taker, joiner = HostLease(redis_client, host, ttl=5), HostLease(redis_client, host, ttl=5)
    assert not taker.acquire("chat", PRIORITY_CHAIN, timeout=1)["joined"]  # it swaps
    with pytest.raises(TransientError, match="not free"):
        joiner.acquire("chat", PRIORITY_CHAIN, timeout=0.3)
    loaded(redis_client, host, "chat")  # the taker's first call went through
    assert joiner.acquire("chat", PRIORITY_CHAIN, timeout=1)["joined"]


def test_a_holder_calling_its_other_model_waits_for_those_sharing_the_first(
    redis_client: redis.Redis,
) -> None:
    """A worker serving two model queues switches models under the lease only alone: never
    while another process's request for the first model may be at the host."""
    host = new_host()
    both = HostSession(redis_client, host, ttl=5, idle_release=60)
    both.call("chat", "http://x", "ollama", PRIORITY_CHAIN, lambda: None)
    other = HostLease(redis_client, host, ttl=5)
    other.acquire("chat", PRIORITY_CHAIN, timeout=1)  # joined
    done = threading.Event()
    switching = threading.Thread(
        target=lambda: both.call("embed", "http://x", "ollama", PRIORITY_QUERY, done.set)
    )
    switching.start()
    time.sleep(0.4)
    assert not done.is_set() and host_status(redis_client, host)["holder"]["model"] == "chat"
    other.release()
    switching.join(10)
    assert done.is_set() and host_status(redis_client, host)["holder"]["model"] == "embed"
    alone = HostSession(redis_client, new_host(), ttl=5, idle_release=60)
    alone.call("chat", "http://x", "ollama", PRIORITY_CHAIN, lambda: None)
    token = alone.lease.token
    alone.call("embed", "http://x", "ollama", PRIORITY_QUERY, lambda: None)
    assert alone.lease.token == token  # alone: switched under the same lease
    both.close()
    alone.close()


# --- real workers against the simulator ------------------------------------------------------


def intervals(*sims: OllamaSimulator) -> list[tuple[float, float, str]]:
    return sorted(
        (r["t"], r["t_end"], r["model"])
        for sim in sims
        for r in sim.requests
        if r.get("model") and r.get("t_end") and r["path"] != "/api/tags"
    )


def overlaps(spans: list[tuple[float, float, str]]) -> list[tuple[Any, Any]]:
    found = []
    for i, (s1, e1, m1) in enumerate(spans):
        for s2, e2, m2 in spans[i + 1 :]:
            if s2 >= e1:
                break
            if m1 != m2:
                found.append(((s1, e1, m1), (s2, e2, m2)))
    return found


@pytest.fixture
def slow_models(ollama_sim: OllamaSimulator, rerank_sim: OllamaSimulator) -> Iterator[None]:
    ollama_sim.configure(latency={"embed": 0.05, "chat": 0.3})
    rerank_sim.configure(latency={"rerank": 0.1})
    ollama_sim.clear_log()
    rerank_sim.clear_log()
    yield
    ollama_sim.configure(latency={})
    rerank_sim.configure(latency={})


def bulk_index(sender: Any, repo: str, n: int) -> list[Any]:
    return [
        enqueue_file(
            sender,
            repo,
            f"pkg/mod_{i}.py",
            f"def handler_{i}(order):\n    return order.total / {i + 1}\n",
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def sample_repo(stack: LocalStack, sender: Any, settings: Settings) -> str:
    index_repository(
        sender, SAMPLE_SERVICE, "sample-hosts", max_bytes=settings.max_file_bytes, timeout=120
    )
    return "sample-hosts"


def errors(sender: Any, n: int, repo: str = "sample-hosts") -> list[Any]:
    return [
        enqueue_error(sender, parse_event(TRACE, service="shop-api", repo=repo)) for _ in range(n)
    ]


def test_an_analysis_keeps_the_host_between_its_tool_rounds_and_lets_it_go_after(
    redis_client: redis.Redis,
) -> None:
    """Between two tool rounds the chat model must stay loaded: handing the host over while
    the index is read would unload it and load it again for the next round."""
    host = new_host()
    session = HostSession(redis_client, host, ttl=5, idle_release=0.2, queue_depth=lambda: 0)
    with session.holding():
        session.call("chat", "http://x", "ollama", PRIORITY_QUERY, lambda: None)
        time.sleep(0.5)  # longer than idle_release: a lookup between two rounds
        assert host_status(redis_client, host)["holder"] is not None
        session.call("chat", "http://x", "ollama", PRIORITY_QUERY, lambda: None)
        assert host_status(redis_client, host)["holder"] is not None
    assert host_status(redis_client, host)["holder"] is None  # nothing queued: let go now
    session.close()


def test_no_two_models_ever_overlap_on_the_host(
    sample_repo: str,
    sender: Any,
    slow_models: None,
    ollama_sim: OllamaSimulator,
    rerank_sim: OllamaSimulator,
) -> None:
    index = bulk_index(sender, f"busy-{uuid.uuid4().hex[:6]}", 30)
    analyses = errors(sender, 4)
    for r in index + analyses:
        r.get(timeout=120)

    spans = intervals(ollama_sim, rerank_sim)
    assert len({m for _, _, m in spans}) == 3  # embed, llm and rerank models all ran
    assert overlaps(spans) == []
    # Switching models unloaded the previous Ollama model (keep_alive 0).
    assert ollama_sim.unload_count >= 1


def test_query_embedding_overtakes_a_queued_reindex_and_neither_starves(
    sample_repo: str,
    sender: Any,
    slow_models: None,
    ollama_sim: OllamaSimulator,
) -> None:
    index = bulk_index(sender, f"reindex-{uuid.uuid4().hex[:6]}", 60)
    wait_until(lambda: len(ollama_sim.requests_to("/api/embed")) >= 3, 30, "re-index running")
    analyses = errors(sender, 3)
    for r in analyses + index:
        r.get(timeout=180)

    embeds = ollama_sim.requests_to("/api/embed")
    queries = [r["t"] for r in embeds if r["body"]["input"][0].startswith("search_query: ")]
    documents = [r for r in embeds if r["body"]["input"][0].startswith("search_document: ")]
    bulk = [r["t"] for r in documents]
    chats = [r["t"] for r in ollama_sim.requests_to("/api/chat")]
    # The 60 files' chunks, several per request (the backlog coalesces single-file changes).
    assert len(queries) == 3 and sum(len(r["body"]["input"]) for r in documents) == 60
    # Every error's query was embedded while the re-index still had work queued ...
    assert max(queries) < max(bulk)
    # ... and the analyses finished before it, rather than waiting for the whole re-index,
    assert max(chats) < max(bulk)
    # while indexing kept moving between the analyses (it was not starved either).
    assert any(min(chats) < t < max(chats) for t in bulk) or min(bulk) < min(chats)


def test_status_shows_queues_consumers_and_the_host(
    stack: LocalStack, sample_repo: str, sender: Any
) -> None:
    errors(sender, 1)[0].get(timeout=60)
    done = subprocess.run(
        [tracehound_executable(), "status"],
        env={**os.environ, **stack.env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    for queue in ("embed", "rerank", "llm", "retrieve", "index", "notify"):
        assert queue in done.stdout
    assert "127.0.0.1" in done.stdout and "swaps" in done.stdout
