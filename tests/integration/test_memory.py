"""The incident you already solved: a group analysed, its file confirmed and resolved in Slack;
the same bug raised later from another entry point in another service says "looks like" that
group, who resolved it, at which commit, with a link, and shows the confirmed file. Real Redis,
Celery workers and Chroma; Slack and Ollama simulated (its embeddings are bags of words, so
this pins the behaviour, not the model's judgement: benchmarks/incident_memory.py does that)."""

from __future__ import annotations

import json
import random
import string
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import chromadb
import pytest
import redis

from producers.slack_listen import Listener
from shared.core import keys
from shared.core.settings import Settings
from shared.devtools.sample_history import SampleRepo
from shared.devtools.simulators.ollama import OllamaSimulator, hashed_embedding
from shared.devtools.simulators.slack import SlackSimulator
from shared.devtools.simulators.slack_socket import block_actions
from shared.groups.memory import MEMORY_REPO, keep, recall, signature
from shared.groups.submit import Intake, intake_for
from shared.index.vectors import ChromaVectorIndex, collection_name
from shared.intake.events import parse_event
from shared.notify import actions
from shared.stack.children import wait_until
from shared.stack.localstack import LocalStack
from tests.conftest import DATA, SLACK_CHANNEL, indexed_history, slack_listening

pytestmark = pytest.mark.integration

REPO = "sample-memory"
USER = "U0RESOLVER"
TRACE = (DATA / "sample-error.txt").read_text()
CONFIRMED = "shopapp/locale/legacy_fr.py"  # typed by on-call: a file retrieval does not show
HTTP_ENTRY = '  File "/srv/app/shopapp/app.py", line 72, in handle\n    return route(request)\n'
JOB_ENTRY = (
    '  File "/opt/app/shopapp/jobs/reprice.py", line 18, in reprice_open_orders\n'
    "    run(order)\n"
    '  File "/opt/app/shopapp/jobs/base.py", line 9, in execute\n'
    "    return self.handle(order)\n"
)


@pytest.fixture(scope="module")
def history(
    stack: LocalStack, sender: Any, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> SampleRepo:
    """The sample service as a git checkout, indexed (the index knows its commit)."""
    return indexed_history(sender, settings, tmp_path_factory.mktemp("memory") / "sample", REPO)


@pytest.fixture(scope="module")
def listener(
    history: SampleRepo, settings: Settings, sender: Any, slack_sim: SlackSimulator
) -> Iterator[Listener]:
    with slack_listening(settings, sender, slack_sim) as listening:
        yield listening


@pytest.fixture(scope="module")
def intake(settings: Settings, sender: Any) -> Intake:
    return intake_for(settings, sender)


def word() -> str:
    return "".join(random.choices(string.ascii_lowercase, k=10))  # letters: kept by normalizing


def the_bug(case: str) -> str:
    """The sample's bug, with a root cause of this test's own (no earlier test's group)."""
    return TRACE.replace("division by zero", f"division by zero (case {case})")


def from_a_job(trace: str) -> str:
    """The same bug entered from a batch job instead of the HTTP handler."""
    assert HTTP_ENTRY in trace
    return trace.replace(HTTP_ENTRY, JOB_ENTRY)


def message(slack_sim: SlackSimulator, ts: str) -> dict[str, Any]:
    return next(m for m in slack_sim.messages if m["ts"] == ts and not m.get("thread_ts"))


def post(intake: Intake, redis_client: redis.Redis, text: str, service: str) -> dict[str, Any]:
    # Each group here is its own incident: the same root cause in two services within the
    # incident window is otherwise one incident's thread (tests/conftest.py, own_cause).
    for key in redis_client.scan_iter(match="th:incident:cause:*", count=1000):
        redis_client.delete(key)
    submitted = intake.submit(parse_event(text, service=service, repo=REPO))
    assert submitted.new and submitted.result is not None
    result = dict(submitted.result.get(timeout=120))
    assert result["destination"] == "slack", result
    return {**result, "fingerprint": submitted.fingerprint}


def press(slack_sim: SlackSimulator, ts: str, action: str, **kw: Any) -> None:
    envelope = slack_sim.socket_mode.deliver(
        block_actions(message(slack_sim, ts), action, user=USER, **kw)
    )
    assert slack_sim.socket_mode.wait_ack(envelope, timeout=3.0) == {"envelope_id": envelope}


def memory_line(slack_sim: SlackSimulator, ts: str) -> str:
    blocks = message(slack_sim, ts)["blocks"]
    return next((b["text"]["text"] for b in blocks if b.get("block_id") == "th-memory"), "")


def files_section(slack_sim: SlackSimulator, ts: str) -> str:
    blocks = message(slack_sim, ts)["blocks"]
    texts = [b.get("text", {}).get("text", "") for b in blocks if b["type"] == "section"]
    return next(t for t in texts if "Relevant files" in t or "closest files" in t)


def solved(
    intake: Intake, redis_client: redis.Redis, slack_sim: SlackSimulator, case: str
) -> dict[str, Any]:
    """A group posted, its file given by on-call (Wrong file, then a typed path) and resolved."""
    first = post(intake, redis_client, the_bug(case), f"shop-{uuid.uuid4().hex[:6]}")
    ts, fp = first["ts"], first["fingerprint"]
    press(slack_sim, ts, actions.WRONG_FILE)
    wait_until(
        lambda: any(b.get("block_id") == "th-pick-path" for b in message(slack_sim, ts)["blocks"]),
        60,
        "the path input",
    )
    press(slack_sim, ts, actions.TYPE_PATH, typed=CONFIRMED)
    wait_until(lambda: redis_client.hget(keys.FEEDBACK, fp) is not None, 60, "the confirmed file")
    press(slack_sim, ts, actions.RESOLVE)
    wait_until(
        lambda: redis_client.hget(keys.memory(fp), "resolved_by") is not None, 60, "resolved"
    )
    return first


def test_the_same_bug_from_another_entry_point_and_service_says_who_resolved_it(
    listener: Listener,
    intake: Intake,
    history: SampleRepo,
    slack_sim: SlackSimulator,
    redis_client: redis.Redis,
) -> None:
    case = word()
    first = solved(intake, redis_client, slack_sim, case)

    again = post(intake, redis_client, from_a_job(the_bug(case)), f"repricer-{case}")

    assert again["fingerprint"] != first["fingerprint"]  # a new group, not a recurrence
    line = memory_line(slack_sim, again["ts"])
    link = (
        f"https://tracehound-sim.slack.com/archives/{SLACK_CHANNEL}/p{first['ts'].replace('.', '')}"
    )
    head = list(history.shas.values())[-1]  # the commit the index held when resolved
    assert line.startswith("*Seen before:* looks like `shop-"), line
    assert f"division by zero (case {case})" in line and "(first seen 20" in line
    assert f"resolved by <@{USER}> on 20" in line, line
    assert f"code `{head[:7]}`" in line and f"<{link}|thread>" in line, line
    files = files_section(slack_sim, again["ts"])
    assert f"`{CONFIRMED}` — _from memory" in files, files
    assert "Seen before: looks like" in message(slack_sim, again["ts"])["text"]


def test_an_unrelated_error_gets_no_memory_line(
    listener: Listener,
    intake: Intake,
    slack_sim: SlackSimulator,
    redis_client: redis.Redis,
) -> None:
    case = word()
    solved(intake, redis_client, slack_sim, case)
    other = (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/shopapp/api/handlers.py", line 44, in get_stock\n'
        "    return self._inventory.available(sku)\n"
        '  File "/srv/app/shopapp/services/inventory.py", line 20, in available\n'
        "    return self._stock[sku]\n"
        f"LookupError: no stock row for warehouse {case}\n"
    )

    unrelated = post(intake, redis_client, other, f"stock-{case}")

    assert memory_line(slack_sim, unrelated["ts"]) == ""
    assert "from memory" not in json.dumps(message(slack_sim, unrelated["ts"])["blocks"])


def test_with_the_embed_host_down_the_same_signature_is_still_recalled_and_kept(
    listener: Listener,
    intake: Intake,
    slack_sim: SlackSimulator,
    ollama_sim: OllamaSimulator,
    redis_client: redis.Redis,
) -> None:
    """The same bug again (another service, another entry point: the same signature) while
    the embed host is down: retrieval goes keyword-only and says so, and memory still says
    who resolved it, from the exact signature alone; a variant only a vector would match
    gets no line. A group first seen with the host down is kept by its signature too."""
    case = word()
    solved(intake, redis_client, slack_sim, case)
    ollama_sim.fail("/api/embed", 503, times=-1)

    again = post(intake, redis_client, from_a_job(the_bug(case)), f"repricer-{case}")
    reworded = the_bug(case).replace("division by zero", "float division by zero")
    near = post(intake, redis_client, reworded, f"pricer-{case}")
    other = word()
    unseen = post(intake, redis_client, the_bug(other), f"shop-{other}")

    # Read now: when the host is back, degraded messages are analysed again in place.
    line = memory_line(slack_sim, again["ts"])
    assert line.startswith("*Seen before:* looks like `shop-"), line
    assert f"resolved by <@{USER}> on 20" in line, line
    assert "embedding: failed" in json.dumps(message(slack_sim, again["ts"])["blocks"])
    assert memory_line(slack_sim, near["ts"]) == ""
    assert memory_line(slack_sim, unseen["ts"]) == ""
    kept = signature(parse_event(the_bug(other), service=f"shop-{other}", repo=REPO))
    assert redis_client.zscore(keys.memory_signature(kept), unseen["fingerprint"]) is not None

    ollama_sim.reset_faults()
    later = post(intake, redis_client, the_bug(other), f"batch-{other}")
    line = memory_line(slack_sim, later["ts"])
    assert line.startswith(f"*Seen before:* looks like `shop-{other}:"), line


def test_with_the_memory_store_failing_the_message_goes_out_without_the_line(
    listener: Listener,
    intake: Intake,
    stack: LocalStack,
    settings: Settings,
    slack_sim: SlackSimulator,
    redis_client: redis.Redis,
) -> None:
    case = word()
    solved(intake, redis_client, slack_sim, case)
    # The collection vanishes under the retrieve worker (as when Chroma restarts on empty
    # data): its cached handle answers NotFoundError.
    url = urlparse(settings.chroma_url or "")
    chroma = chromadb.HttpClient(host=url.hostname or "127.0.0.1", port=url.port or 8000)
    chroma.delete_collection(collection_name(MEMORY_REPO))

    again = post(intake, redis_client, from_a_job(the_bug(case)), f"repricer-{case}")

    assert memory_line(slack_sim, again["ts"]) == ""
    assert files_section(slack_sim, again["ts"])  # retrieval itself went on
    logs = "".join(p.read_text(errors="replace") for p in Path(stack.workdir, "logs").glob("*"))
    assert "memory.failed" in logs


def test_the_same_signature_is_recalled_where_the_vector_index_cannot_find_it(
    fresh_redis: redis.Redis, tmp_path: Path
) -> None:
    # Many groups whose signatures differ by one word: Chroma's HNSW leaves some of their
    # vectors unreachable, so a query with a group's own vector misses it (the first assert
    # shows it happens here). The same bug again must still find its group.
    store = ChromaVectorIndex(url=None, path=tmp_path / "chroma")
    rng = random.Random(7)
    kept = {}
    for n in range(300):
        case = "".join(rng.choices(string.ascii_lowercase, k=10))
        text = f"ZeroDivisionError: division by zero case {case}\nat shopapp/pricing.py:discount"
        fp, vector = f"fp{n:03}", hashed_embedding(text)
        keep(store, fresh_redis, fp, vector, text, ttl_s=3600)
        fresh_redis.hset(keys.memory(fp), mapping={"title": f"shop: {case}", "service": "shop"})
        kept[fp] = (text, vector)

    missed = [fp for fp, (_, v) in kept.items()
              if fp not in {h.chunk_id for h in store.query(MEMORY_REPO, v, 50)}]  # fmt: skip
    assert missed, "the vector index found every group: this test no longer shows the gap"
    for fp in missed:
        text, vector = kept[fp]
        found = recall(store, fresh_redis, vector, fingerprint="new", threshold=0.95, text=text)
        assert found is not None and found.fingerprint == fp and found.score == 1.0


def test_an_exact_signature_answers_without_asking_the_vector_store(
    fresh_redis: redis.Redis, tmp_path: Path
) -> None:
    """The same bug again is answered from the exact-signature set: no nearest-neighbour query
    on the retrieve stage's path. An exact group with nothing to say yet (in flight) still
    lets the nearest neighbours answer."""

    class Counting(ChromaVectorIndex):
        queries = 0

        def query(self, repo: str, vector: Any, n: int) -> Any:
            Counting.queries += 1
            return super().query(repo, vector, n)

    store = Counting(url=None, path=tmp_path / "chroma")
    text = "ZeroDivisionError: division by zero\nat shopapp/pricing.py:discount"
    near_text = text + " (refund)"
    keep(store, fresh_redis, "old", hashed_embedding(text), text, ttl_s=3600)
    keep(store, fresh_redis, "near", hashed_embedding(near_text), near_text, ttl_s=3600)
    fresh_redis.hset(keys.memory("near"), mapping={"title": "shop: refund", "service": "shop"})
    vector = hashed_embedding(text)

    in_flight = recall(store, fresh_redis, vector, fingerprint="new", threshold=0.5, text=text)
    assert in_flight is not None and in_flight.fingerprint == "near"
    assert Counting.queries == 1

    fresh_redis.hset(keys.memory("old"), mapping={"title": "shop: discount", "service": "shop"})
    found = recall(store, fresh_redis, vector, fingerprint="new", threshold=0.5, text=text)
    assert found is not None and found.fingerprint == "old" and found.score == 1.0
    assert Counting.queries == 1  # the exact one answered: the store was not asked again
