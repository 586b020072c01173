"""The learned ranker in the real retrieve worker: the model file a team sets decides the
message's first file, and a model file that cannot be read costs the ranking, not the message."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.core.pipeline import enqueue_error, sender_app
from shared.core.settings import Settings
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.devtools.simulators.slack import SlackSimulator
from shared.index.reindex import index_repository
from shared.intake.events import parse_event
from shared.retrieve.features import FEATURES
from shared.retrieve.ranker import LinearModel
from shared.stack.children import wait_until
from shared.stack.localstack import WORKER_GROUPS, LocalStack, simulator_env
from tests.conftest import DATA, SAMPLE_SERVICE, SLACK_CHANNEL, model_not_pulled, settings_of

pytestmark = pytest.mark.integration

TRACE = (DATA / "sample-error.txt").read_text()
TEST_FILE = "tests/test_pricing.py"
# The retrieve queue in a worker of its own, so a test can restart it with another model.
GROUPS = {
    **{name: spec for name, spec in WORKER_GROUPS.items() if name != "cpu"},
    "cpu": (("index", "notify", "intake"), 1),
    "retrieve": (("retrieve",), 1),
}


def model_liking(feature: str) -> str:
    """A model that scores one feature only (here: a test path), whatever the fusion says."""
    n = len(FEATURES)
    coef = tuple(5.0 if f == feature else 0.0 for f in FEATURES)
    return LinearModel(FEATURES, (0.0,) * n, (1.0,) * n, coef, 0.0).to_json()


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ranker") / "model.json"
    path.write_text(model_liking("test_path"))
    return path


@pytest.fixture(scope="module")
def ranker_stack(
    tmp_path_factory: pytest.TempPathFactory,
    ollama_sim: OllamaSimulator,
    slack_sim: SlackSimulator,
    model_file: Path,
) -> Iterator[LocalStack]:
    # No rerank server: the fused (or learned) order is the message's order, as by default.
    env = simulator_env(ollama_sim.url, slack_sim.url, channel=SLACK_CHANNEL) | {
        "TRACEHOUND_RANKER_MODEL": str(model_file),
        "TRACEHOUND_INCIDENT_WINDOW": "0",
        "TRACEHOUND_STAGE_MAX_RETRIES": "1",
        "TRACEHOUND_RETRY_BACKOFF_MAX": "1",
    }
    s = LocalStack(tmp_path_factory.mktemp("rankerstack"), env)
    try:
        s.start_services()
        s.start_workers(GROUPS)
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def ranker_sender(ranker_stack: LocalStack) -> Iterator[Any]:
    settings: Settings = settings_of(ranker_stack)
    app = sender_app(settings)
    index_repository(app, SAMPLE_SERVICE, "sample", max_bytes=settings.max_file_bytes, timeout=120)
    yield app
    app.close()


def first_file(
    sender: Any, slack_sim: SlackSimulator, ollama_sim: OllamaSimulator, llm: str
) -> str:
    """The message's first file as retrieval ordered it: the LLM, which would pick its own,
    is not there, so the message lists retrieval's files."""
    event = parse_event(TRACE, service=f"shop-{uuid.uuid4().hex[:6]}", repo="sample")
    with model_not_pulled(ollama_sim, llm):
        result = enqueue_error(sender, event).get(timeout=120)
    assert result["destination"] == "slack"
    assert any(event.id[:12] in json.dumps(m.get("blocks") or []) for m in slack_sim.messages)
    return str(result["top_files"][0].split(":")[0])


def ranker_fallbacks(stack: LocalStack) -> float:
    port = stack.metrics_ports["retrieve"]
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    found = re.search(r'^tracehound_fallbacks_total\{stage="ranker"\} (\S+)$', text, re.M)
    assert found, "the ranker's fallback series is exported from the start"
    return float(found.group(1))


def test_the_model_file_decides_the_first_file_and_a_broken_one_falls_back(
    ranker_stack: LocalStack,
    ranker_sender: Any,
    slack_sim: SlackSimulator,
    ollama_sim: OllamaSimulator,
    model_file: Path,
) -> None:
    llm = settings_of(ranker_stack).llm_model
    # The team's model prefers test files: the message leads with one, which neither the
    # fusion (its prior demotes tests) nor the shipped model would put first.
    first = first_file(ranker_sender, slack_sim, ollama_sim, llm)
    assert first == TEST_FILE
    assert ranker_fallbacks(ranker_stack) == 0

    # The file is overwritten with something that is not a model, and the worker restarts.
    model_file.write_bytes(b"\x00\xffnot a model")
    [proc] = [p for p in ranker_stack.procs if p.name == "worker-retrieve"]
    proc.stop(warm=True)
    ranker_stack.procs.remove(proc)
    restarted = ranker_stack.start_workers({"retrieve": GROUPS["retrieve"]})
    log = restarted["retrieve"].log_path
    wait_until(lambda: "ranker.unusable" in log.read_text(errors="replace"), 30, "the error")

    # The message still goes out, in the fusion's order, and the fallback is counted.
    first = first_file(ranker_sender, slack_sim, ollama_sim, llm)
    assert first != TEST_FILE and first.startswith("shopapp/")
    assert ranker_fallbacks(ranker_stack) >= 1
