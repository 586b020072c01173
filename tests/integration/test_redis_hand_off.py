"""Redis going away in the instant after it hands a worker a message: the worker keeps the
message it could not record and puts it back when Redis is there again (workers/redis_restart.py);
and when the answer never reached the worker, the in-flight sweep starts the chain again
(shared/core/inflight.py).

kombu takes a message with ``BRPOP`` and records it as unacknowledged with a second command;
a restart between the two left the message nowhere (the restart test lost one analysis in ten
in about half its runs). Here a proxy in front of a real redis-server cuts every connection
exactly there (shared/devtools/redis_cut.py), under a real worker, so the window is hit every
time instead of by chance.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from shared.core import inflight, keys
from shared.core.pipeline import enqueue_error, enqueue_thread_reply, sender_app
from shared.core.queues import MODEL_SLOTS
from shared.core.settings import Settings
from shared.devtools.redis_cut import RedisCut
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.devtools.simulators.slack import SlackSimulator
from shared.intake.events import parse_event
from shared.stack.children import wait_until
from shared.stack.localstack import LocalStack, simulator_env
from tests.conftest import DATA, SLACK_CHANNEL

TRACE = (DATA / "sample-error.txt").read_text()

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cut_stack(
    tmp_path_factory: pytest.TempPathFactory,
    ollama_sim: OllamaSimulator,
    slack_sim: SlackSimulator,
) -> Iterator[tuple[LocalStack, RedisCut, str]]:
    """Redis and Chroma, and workers that talk to Redis through a cut each test arms;
    (stack, cut, the real Redis URL, for senders)."""
    env = simulator_env(ollama_sim.url, slack_sim.url, channel=SLACK_CHANNEL) | {
        "TRACEHOUND_REDELIVERY_AFTER": "10",  # the sweep's grace: a lost chain restarts in ~15 s
        # Under the host lease the last chain's rerank waits for the chats to end, and its
        # analyze message then finds an llm slot free instead of waiting on the queue (see the
        # test below); what these tests break is Redis, not the host's schedule.
        "TRACEHOUND_HOST_LEASES": "false",
    }
    s = LocalStack(tmp_path_factory.mktemp("cut"), env)
    cut = RedisCut(redis_port=0)
    try:
        s.start_services()
        real_url = s.env["TRACEHOUND_REDIS_URL"]
        cut.redis_port = int(real_url.rsplit(":", 1)[1].split("/")[0])
        s.env["TRACEHOUND_REDIS_URL"] = cut.start()
        s.start_workers()
        yield s, cut, real_url
    finally:
        s.stop()
        cut.stop()


def logged_since(stack: LocalStack) -> Callable[[str], bool]:
    """Whether a worker logged ``text`` after this call (the stack's workers serve every test
    of this module)."""
    workers = [p for p in stack.procs if p.name.startswith("worker-")]
    marks = {p.name: p.log_path.stat().st_size for p in workers}

    def logged(text: str) -> bool:
        for p in workers:
            with p.log_path.open("rb") as f:
                f.seek(marks[p.name])
                if text.encode() in f.read():
                    return True
        return False

    return logged


def sweep_state(redis_url: str, stack: LocalStack) -> str:
    """The in-flight sweep's records, the chain queues' lengths and what the workers logged
    of it: a failure's explanation."""
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        state = {
            "inflight": {k: v[:200] for k, v in r.hgetall(keys.INFLIGHT).items()},
            "missing": r.hgetall(keys.INFLIGHT_MISSING),
            "queues": {q: r.llen(q) for q in inflight.CHAIN_QUEUES},
            "unacked": r.hlen(inflight.UNACKED),
        }
    finally:
        r.close()
    lines = [
        f"{p.name}: {line}"
        for p in stack.procs
        if p.name.startswith("worker-")
        for line in p.log_tail(2000).splitlines()
        if "inflight" in line or "sweep" in line or "analysis.duplicate" in line
    ]
    return f"{state}\n" + "\n".join(lines[-40:])


@pytest.fixture(autouse=True)
def _disarmed(cut_stack: tuple[LocalStack, RedisCut, str]) -> Iterator[None]:
    yield
    cut_stack[1].disarm()  # a test that failed before its cut leaves none for the next


def test_a_message_taken_as_redis_goes_away_is_put_back_and_runs_once(
    cut_stack: tuple[LocalStack, RedisCut, str], slack_sim: SlackSimulator
) -> None:
    stack, cut, real_url = cut_stack
    app = sender_app(Settings(redis_url=real_url))
    text = f"hand-off {uuid.uuid4().hex[:8]}"
    logged = logged_since(stack)
    cut.arm("notify", down_s=3.0)
    enqueue_thread_reply(app, "1700000000.000100", text, key=text)

    def replies() -> list[str]:
        return [m["text"] for m in slack_sim.messages if m.get("text") == text]

    wait_until(lambda: cut.cuts == 1, 30, "the cut after the worker took the message")
    wait_until(lambda: replies(), 60, "the reply, once Redis is back")
    assert replies() == [text]
    workers = [p for p in stack.procs if p.name.startswith("worker-")]
    assert all(p.alive() for p in workers), [p.log_tail(30) for p in workers]
    assert logged("broker.hand_off_kept")
    app.close()


def test_a_chain_whose_message_redis_popped_and_never_answered_is_started_again(
    cut_stack: tuple[LocalStack, RedisCut, str],
    slack_sim: SlackSimulator,
    ollama_sim: OllamaSimulator,
) -> None:
    """Redis served the llm worker's BRPOP and shut down before writing the answer: the
    message is off the queue, in no worker's hands, in no unacked hash. Only the in-flight
    sweep (shared/core/inflight.py) knows the chain; it starts it again, and it posts once."""
    stack, cut, real_url = cut_stack
    app = sender_app(Settings(redis_url=real_url))
    services = [f"svc-{uuid.uuid4().hex[:6]}" for _ in range(MODEL_SLOTS + 1)]
    logged = logged_since(stack)
    # The last analyze message is cut: it waited on the llm queue while the others were
    # analysed (one per slot of the llm worker), so the stage before it had long been
    # acknowledged (no redelivery of that stage can bring it back: only the in-flight sweep
    # can). One slot fewer busy, and the llm worker takes it as it is sent: the rerank task
    # that sent it is not acknowledged yet, and the cut's dropped connections redeliver that.
    cut.arm("llm", down_s=2.0, swallow=True, skip=MODEL_SLOTS)
    ollama_sim.configure(latency={"chat": 2.0})  # the first analyses hold the llm worker
    try:
        results = [
            enqueue_error(app, parse_event(TRACE, service=s, repo="nowhere")) for s in services
        ]

        def posts(service: str) -> list[dict[str, object]]:
            return [
                m for m in slack_sim.messages if not m.get("thread_ts") and service in json.dumps(m)
            ]

        wait_until(lambda: cut.cuts == 1, 60, "the last analyze message swallowed")
        try:
            wait_until(lambda: all(posts(s) for s in services), 90, "every message")
        except TimeoutError as exc:
            # Failed once under the full suite's load (2026-12-07) and never alone: say what
            # the sweep saw and did, for the next time.
            raise AssertionError(f"{exc}\n{sweep_state(real_url, stack)}") from exc
    finally:
        ollama_sim.configure(latency={})
    assert [r.get(timeout=30)["destination"] for r in results] == ["slack"] * len(services)
    time.sleep(2)
    assert [len(posts(s)) for s in services] == [1] * len(services)
    workers = [p for p in stack.procs if p.name.startswith("worker-")]
    assert all(p.alive() for p in workers)
    assert logged("inflight.restarted")
    app.close()
