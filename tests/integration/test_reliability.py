"""Nothing is lost when a worker process dies mid-task."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from typing import Any

import pytest
import redis

from shared.core.pipeline import enqueue_error
from shared.core.settings import Settings
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.devtools.simulators.slack import SlackSimulator
from shared.index.reindex import index_repository
from shared.intake.events import parse_event
from shared.stack.localstack import LocalStack
from tests.conftest import DATA, SAMPLE_SERVICE, pool_children

pytestmark = pytest.mark.integration


def child_running(sender: Any, worker: str, task: str) -> int:
    """The pid of the pool child of ``worker`` (its node name's prefix, ``llm``) that runs
    ``task`` now: a model worker has two children, and the idle one is not the test."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        active = sender.control.inspect(timeout=1.0).active() or {}
        for node, running in active.items():
            if node.startswith(f"{worker}@"):
                for t in running:
                    if t["name"].rsplit(".", 1)[-1] == task:
                        return int(t["worker_pid"])
        time.sleep(0.1)
    raise AssertionError(f"no {worker} child runs {task}")


def test_llm_worker_child_killed_mid_analysis_the_task_runs_again(
    stack: LocalStack,
    sender: Any,
    settings: Settings,
    ollama_sim: OllamaSimulator,
) -> None:
    index_repository(
        sender, SAMPLE_SERVICE, "sample-kill", max_bytes=settings.max_file_bytes, timeout=120
    )
    llm = next(p for p in stack.procs if p.name == "worker-llm")
    ollama_sim.clear_log()
    ollama_sim.configure(latency={"chat": 3.0})
    try:
        event = parse_event(
            (DATA / "sample-error.txt").read_text(), service="shop-api", repo="sample-kill"
        )
        result = enqueue_error(sender, event)
        deadline = time.monotonic() + 60
        while not ollama_sim.requests_to("/api/chat") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ollama_sim.requests_to("/api/chat"), "analysis never reached the model"
        child = child_running(sender, "llm", "analyze")
        assert child in pool_children(llm.popen.pid)
        os.kill(child, signal.SIGKILL)  # what the OOM killer does to a busy model worker

        notification = result.get(timeout=120)
    finally:
        ollama_sim.configure(latency={})

    assert llm.alive()  # the pool replaced its child
    assert len(ollama_sim.requests_to("/api/chat")) >= 2  # the analysis ran again
    assert not notification["analysis"]["degraded"]
    assert "llm" in [v["queue"] for v in notification["trail"]]  # its analysis ran to the end


def analysis_in_flight(
    sender: Any, ollama_sim: OllamaSimulator, repo: str, service: str = "shop-api"
) -> Any:
    event = parse_event((DATA / "sample-error.txt").read_text(), service=service, repo=repo)
    result = enqueue_error(sender, event)
    deadline = time.monotonic() + 60
    while not ollama_sim.requests_to("/api/chat") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ollama_sim.requests_to("/api/chat"), "analysis never reached the model"
    return result


def test_a_whole_worker_killed_mid_task_is_replaced_and_the_task_finishes_soon(
    stack: LocalStack, sender: Any, settings: Settings, ollama_sim: OllamaSimulator
) -> None:
    """kill -9 of the worker process itself (its machine lost, an OOM kill of the group): its
    in-flight message comes back within the redelivery bound of a replacement starting."""
    index_repository(
        sender, SAMPLE_SERVICE, "sample-kill", max_bytes=settings.max_file_bytes, timeout=120
    )
    llm = next(p for p in stack.procs if p.name == "worker-llm" and p.alive())
    ollama_sim.clear_log()
    ollama_sim.configure(latency={"chat": 6.0})
    try:
        result = analysis_in_flight(sender, ollama_sim, "sample-kill")
        os.killpg(llm.popen.pid, signal.SIGKILL)  # the main process and its pool child
        llm.popen.wait(10)
        started = time.monotonic()
        stack.start_workers({"llm": (["llm"], 1)})  # the same name: later tests find it
        notification = result.get(timeout=settings.redelivery_after + 60)
        recovered = time.monotonic() - started
    finally:
        ollama_sim.configure(latency={})
    # The message is handed out again at most redelivery_after after its last renewal, swept
    # within 5 s, then analysed (6 s of simulated model time) and posted.
    assert recovered < settings.redelivery_after + 5 + 6 + 15, recovered
    assert not notification["analysis"]["degraded"]
    assert len(ollama_sim.requests_to("/api/chat")) >= 2  # the analysis ran again


def test_a_task_longer_than_the_redelivery_bound_is_not_handed_out_twice(
    stack: LocalStack, sender: Any, settings: Settings, ollama_sim: OllamaSimulator
) -> None:
    index_repository(
        sender, SAMPLE_SERVICE, "sample-long", max_bytes=settings.max_file_bytes, timeout=120
    )
    ollama_sim.clear_log()
    ollama_sim.configure(latency={"chat": settings.redelivery_after + 10.0})
    try:
        service = f"long-{uuid.uuid4().hex[:6]}"
        result = analysis_in_flight(sender, ollama_sim, "sample-long", service)
        notification = result.get(timeout=settings.redelivery_after + 60)
    finally:
        ollama_sim.configure(latency={})
    assert not notification["analysis"]["degraded"]
    chats = [r for r in ollama_sim.requests_to("/api/chat") if service in json.dumps(r["body"])]
    assert len(chats) == 1  # renewed while running: never handed out again


def test_a_worker_killed_while_slack_holds_its_post_does_not_post_twice(
    stack: LocalStack, sender: Any, settings: Settings, slack_sim: SlackSimulator
) -> None:
    """The cpu worker's children are killed while Slack is still answering the post: the
    redelivered notify finds the post in the channel (by its metadata) instead of posting."""
    index_repository(
        sender, SAMPLE_SERVICE, "sample-post", max_bytes=settings.max_file_bytes, timeout=120
    )
    cpu = next(p for p in stack.procs if p.name == "worker-cpu" and p.alive())
    event = parse_event(
        (DATA / "sample-error.txt").read_text(), service="shop-api", repo="sample-post"
    )
    slack_sim.configure(latency=4.0)
    try:
        result = enqueue_error(sender, event)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not [
            r for r in slack_sim.requests_to("chat.postMessage") if event.id[:12] in str(r["body"])
        ]:
            time.sleep(0.05)
        for child in pool_children(cpu.popen.pid):
            os.kill(child, signal.SIGKILL)  # mid-post: Slack has the request, we lose the answer
        notification = result.get(timeout=120)
    finally:
        slack_sim.configure(latency=0)
    time.sleep(2)
    posts = [
        m
        for m in slack_sim.messages
        if not m.get("thread_ts") and event.id[:12] in str(m.get("blocks"))
    ]
    assert len(posts) == 1
    assert notification["ts"] == posts[0]["ts"]


def test_a_worker_killed_while_slack_holds_its_thread_reply_does_not_reply_twice(
    stack: LocalStack, sender: Any, settings: Settings, slack_sim: SlackSimulator
) -> None:
    """The same for the stack trace's thread reply: the reply carries its claim in metadata,
    and the redelivered reply task finds it in the thread (conversations.replies)."""
    index_repository(
        sender, SAMPLE_SERVICE, "sample-reply", max_bytes=settings.max_file_bytes, timeout=120
    )
    cpu = next(p for p in stack.procs if p.name == "worker-cpu" and p.alive())
    event = parse_event(
        (DATA / "sample-error.txt").read_text(), service="shop-reply", repo="sample-reply"
    )
    slack_sim.configure(thread_latency=4.0)  # the top-level post is quick, the reply is not
    try:
        notification = enqueue_error(sender, event).get(timeout=120)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not [
            r
            for r in slack_sim.requests_to("chat.postMessage")
            if r["body"].get("thread_ts") == notification["ts"]
        ]:
            time.sleep(0.05)
        for child in pool_children(cpu.popen.pid):
            os.kill(child, signal.SIGKILL)  # mid-reply: Slack has it, we lose the answer
        # Redelivered after the bound, the task finds the reply instead of posting it.
        deadline = time.monotonic() + settings.redelivery_after + 60
        replies: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            replies = [m for m in slack_sim.messages if m.get("thread_ts") == notification["ts"]]
            finished = slack_sim.requests_to("conversations.replies")
            if replies and finished and all(r["t_end"] for r in finished):
                break
            time.sleep(0.2)
    finally:
        slack_sim.configure(thread_latency=0)
    time.sleep(2)
    replies = [m for m in slack_sim.messages if m.get("thread_ts") == notification["ts"]]
    assert len(replies) == 1, [r["text"][:60] for r in replies]
    assert slack_sim.requests_to("conversations.replies")  # it looked before posting


def test_embed_worker_child_killed_mid_drain_every_change_still_lands(
    stack: LocalStack, sender: Any, settings: Settings, ollama_sim: OllamaSimulator
) -> None:
    """kill -9 of the embed worker's child while it embeds a drain of coalesced index changes:
    the drain's entries stay in the backlog until stored, so the redelivered drain stores
    every file and each change's task still gets its result."""
    from shared.core.pipeline import enqueue_file
    from shared.index.corpus import RedisCorpus
    from shared.index.vectors import ChromaVectorIndex

    repo = f"drain-kill-{uuid.uuid4().hex[:8]}"
    folder = f"killed_{uuid.uuid4().hex[:6]}"
    embed = next(p for p in stack.procs if p.name == "worker-embed" and p.alive())
    ollama_sim.clear_log()
    ollama_sim.configure(latency={"embed": 2.0})
    try:
        changes = [
            enqueue_file(sender, repo, f"{folder}/mod_{i}.py", f"def f_{i}(x):\n    return x\n")
            for i in range(12)
        ]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
            any(folder in t for t in r["body"].get("input", []))
            for r in ollama_sim.requests_to("/api/embed")
        ):
            time.sleep(0.05)
        child = child_running(sender, "embed", "embed_backlog")
        assert child in pool_children(embed.popen.pid)
        os.kill(child, signal.SIGKILL)  # mid-request: the drain never stored anything
    finally:
        ollama_sim.configure(latency={})
    summaries = [c.get(timeout=settings.redelivery_after + 90) for c in changes]
    assert all(s["files"] == 1 for s in summaries)
    embedded = [
        r
        for r in ollama_sim.requests_to("/api/embed")
        if any(folder in t for t in r["body"].get("input", []))
    ]
    assert len(embedded) >= 2  # the killed drain's request, then its redelivery's
    assert embed.alive()  # the pool replaced its child
    got = ChromaVectorIndex(url=settings.chroma_url)._collection(repo).get(include=["metadatas"])
    assert {m["path"] for m in got["metadatas"]} == {f"{folder}/mod_{i}.py" for i in range(12)}
    corpus = RedisCorpus(redis.Redis.from_url(settings.redis_url))
    assert corpus.paths(repo) == {f"{folder}/mod_{i}.py" for i in range(12)}  # keyword side
