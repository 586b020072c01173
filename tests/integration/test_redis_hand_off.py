"""Redis going away in the instant after it hands a worker a message: the worker keeps the
message it could not record and puts it back when Redis is there again (workers/redis_restart.py).

kombu takes a message with ``BRPOP`` and records it as unacknowledged with a second command;
a restart between the two left the message nowhere (the restart test lost one analysis in ten
in about half its runs). Here a proxy in front of a real redis-server cuts every connection
exactly there (shared/devtools/redis_cut.py), under a real worker, so the window is hit every
time instead of by chance.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from shared.core.pipeline import enqueue_thread_reply, sender_app
from shared.core.settings import Settings
from shared.devtools.localstack import LocalStack, simulator_env, wait_until
from shared.devtools.redis_cut import RedisCut
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.devtools.simulators.slack import SlackSimulator
from tests.conftest import SLACK_CHANNEL

pytestmark = pytest.mark.integration


@pytest.fixture
def cut_stack(
    tmp_path_factory: pytest.TempPathFactory,
    ollama_sim: OllamaSimulator,
    slack_sim: SlackSimulator,
) -> Iterator[tuple[LocalStack, RedisCut, str]]:
    env = simulator_env(ollama_sim.url, slack_sim.url, channel=SLACK_CHANNEL)
    s = LocalStack(tmp_path_factory.mktemp("cut"), env)
    cut = None
    try:
        s.start_services()
        real_url = s.env["TRACEHOUND_REDIS_URL"]
        port = int(real_url.rsplit(":", 1)[1].split("/")[0])
        cut = RedisCut(redis_port=port, queue="notify", down_s=3.0)
        s.env["TRACEHOUND_REDIS_URL"] = cut.start()  # the worker talks to Redis through it
        s.start_workers({"cpu": (("notify",), 1)})
        yield s, cut, real_url
    finally:
        s.stop()
        if cut is not None:
            cut.stop()


def test_a_message_taken_as_redis_goes_away_is_put_back_and_runs_once(
    cut_stack: tuple[LocalStack, RedisCut, str], slack_sim: SlackSimulator
) -> None:
    stack, cut, real_url = cut_stack
    app = sender_app(Settings(redis_url=real_url))
    text = f"hand-off {uuid.uuid4().hex[:8]}"
    enqueue_thread_reply(app, "1700000000.000100", text, key=text)

    def replies() -> list[str]:
        return [m["text"] for m in slack_sim.messages if m.get("text") == text]

    wait_until(lambda: cut.cuts == 1, 30, "the cut after the worker took the message")
    wait_until(lambda: replies(), 60, "the reply, once Redis is back")
    assert replies() == [text]
    [worker] = [p for p in stack.procs if p.name.startswith("worker-")]
    assert worker.alive(), worker.log_tail(30)
    assert "broker.hand_off_kept" in worker.log_path.read_text()
    app.close()
