"""``tracehound ingest`` as a sink log shippers can retry: Redis down is a 503 with Retry-After,
a retried batch counts nothing twice, and hostile bodies are refused within their limits.

Vector's http sink retries 429 and 5xx and gives up on other 4xx; Fluent Bit retries a failed
flush up to its Retry_Limit. The tests share a real ``tracehound ingest`` process on a private
redis-server, emptied (and started again where a test stopped it) before each test.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from shared.stack.children import Proc, wait_until
from shared.stack.localstack import start_ingest, start_redis, start_worker
from tests.conftest import SETTLE_OFF, counted_in_groups

pytestmark = pytest.mark.integration

TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/shop/pricing.py", line 12, in total\n'
    "    return sum(items) / len(items)\n"
    "ZeroDivisionError: division by zero"
)


class Sink:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.redis_proc, self.redis_url = start_redis(workdir, appendonly=True)
        self.port = int(self.redis_url.rsplit(":", 1)[1].split("/")[0])
        env = {
            "TRACEHOUND_REDIS_URL": self.redis_url,
            "TRACEHOUND_INGEST_MAX_RECORDS": "1000",
            "TRACEHOUND_INGEST_READ_TIMEOUT": "1",
            **SETTLE_OFF,
        }
        self.ingest, self.url = start_ingest(workdir, env, "--service", "shop-api")
        self.client = redis.Redis.from_url(self.redis_url)

    def post(self, body: bytes | str, **headers: str) -> httpx.Response:
        data = body.encode() if isinstance(body, str) else body
        # ?wait=true: these tests read what became of each record in the reply.
        return httpx.post(
            f"{self.url}/v1/events?wait=true", content=data, headers=headers, timeout=60
        )

    def total(self) -> int:
        """Occurrences counted over every group."""
        return counted_in_groups(self.client)

    def restart_redis(self) -> None:
        self.client.close()
        self.redis_proc.stop()
        self.redis_proc, _ = start_redis(self.workdir, port=self.port, appendonly=True)
        self.client = redis.Redis.from_url(self.redis_url)

    def reset(self) -> None:
        """Redis running and empty, as a new sink's."""
        if not self.redis_proc.alive():
            self.redis_proc, _ = start_redis(self.workdir, port=self.port, appendonly=True)
        self.client.close()
        self.client = redis.Redis.from_url(self.redis_url)
        self.client.flushall()
        assert self.ingest.alive(), self.ingest.log_tail(30)

    def close(self) -> None:
        self.ingest.stop()
        self.client.close()
        self.redis_proc.stop()


@pytest.fixture(scope="module")
def shared_sink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sink]:
    s = Sink(tmp_path_factory.mktemp("sink"))
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def sink(shared_sink: Sink) -> Sink:
    shared_sink.reset()
    return shared_sink


def ndjson(n: int, start: int = 0) -> str:
    return "\n".join(
        json.dumps({"level": "error", "message": f"payment {i} failed", "stack": TRACE})
        for i in range(start, start + n)
    )


def test_a_retried_batch_counts_nothing_twice(sink: Sink) -> None:
    body = ndjson(50)
    first = sink.post(body)
    again = sink.post(body)  # the shipper did not see the first reply and sends it again
    assert first.status_code == again.status_code == 202
    assert first.json()["accepted"] == again.json()["accepted"]
    assert all(g["duplicate"] for g in again.json()["groups"])
    assert sink.total() == 50
    assert sink.client.llen("embed") == 1  # one error group, analysed once


def test_a_queued_batch_waits_for_an_intake_worker_and_a_batch_taken_twice_counts_once(
    sink: Sink,
) -> None:
    """Without ``?wait``: answered before any worker ran, the batch is in Redis (append-only),
    and a worker that comes later takes it. Taken again (a worker killed before its ack: the
    message comes back), nothing is counted twice."""
    body = ndjson(40)
    r = httpx.post(f"{sink.url}/v1/events", content=body, timeout=60)
    assert r.status_code == 202 and r.json()["queued"] == 40
    [message] = sink.client.lrange("intake", 0, -1)
    # The message is small; the body waits under its own key, beside it.
    assert len(message) < 4096 < len(body)
    [body_key] = list(sink.client.scan_iter("th:intake:*:body"))
    assert sink.client.get(body_key) == body.encode()
    assert sink.total() == 0  # no worker yet: nothing was taken
    sink.restart_redis()  # what Redis had when it answered survives a restart
    env = {
        "TRACEHOUND_REDIS_URL": sink.redis_url,
        "TRACEHOUND_DATA_DIR": str(sink.workdir),
        **SETTLE_OFF,
    }
    worker = start_worker("intake", ["intake"], 1, sink.workdir, env)
    try:
        # Counted first, then (after the group's admission) its analysis started.
        wait_until(lambda: sink.total() == 40, 60, "the queued batch taken")
        wait_until(lambda: sink.client.llen("embed") >= 1, 30, "its analysis started")
        assert sink.client.llen("embed") == 1  # one error group, one analysis started
        wait_until(lambda: not sink.client.exists(body_key), 30, "the body deleted once taken")
        sink.client.lpush("intake", message)  # the same batch delivered again
        # Out of the list, then acknowledged (kombu's "unacked" hash) once the task returned.
        wait_until(
            lambda: sink.client.llen("intake") == 0 and sink.client.hlen("unacked") == 0,
            60,
            "the batch taken again",
        )
        assert sink.total() == 40 and sink.client.llen("embed") == 1
    finally:
        worker.stop()


def test_the_same_record_twice_in_one_batch_is_two_occurrences(sink: Sink) -> None:
    line = json.dumps({"level": "error", "message": "payment failed", "stack": TRACE})
    assert sink.post(f"{line}\n{line}").status_code == 202
    assert sink.total() == 2


def test_redis_down_is_a_503_with_retry_after_and_the_retry_counts_once(sink: Sink) -> None:
    assert sink.post(ndjson(10)).status_code == 202
    sink.redis_proc.stop()
    down = sink.post(ndjson(20, start=10))
    assert down.status_code == 503
    assert int(down.headers["Retry-After"]) > 0
    assert "Redis" in down.json()["error"]
    sink.redis_proc, _ = start_redis(sink.workdir, port=sink.port, appendonly=True)
    deadline = time.monotonic() + 30
    while (retried := sink.post(ndjson(20, start=10))).status_code == 503:
        assert time.monotonic() < deadline, retried.text
        time.sleep(0.5)
    assert retried.status_code == 202
    assert sink.post(ndjson(20, start=10)).status_code == 202  # and once more, as shippers do
    assert sink.total() == 30


def test_every_member_of_a_concatenated_gzip_body_is_read(sink: Sink) -> None:
    body = gzip.compress((ndjson(3) + "\n").encode()) + gzip.compress(ndjson(2, start=3).encode())
    r = sink.post(body, **{"Content-Encoding": "gzip"})
    assert r.status_code == 202 and len(r.json()["accepted"]) == 5


def test_a_truncated_gzip_body_is_a_400(sink: Sink) -> None:
    body = gzip.compress(ndjson(3).encode())[:-12]
    r = sink.post(body, **{"Content-Encoding": "gzip"})
    assert r.status_code == 400 and "gzip" in r.json()["error"]


@pytest.mark.parametrize(
    "body",
    ["[" * 100_000 + "]" * 100_000, '{"a": ' * 100 + "1" + "}" * 100],
    ids=["array-100k-deep", "object-100-deep"],
)
def test_deeply_nested_json_is_a_400_not_a_crash(sink: Sink, body: str) -> None:
    r = sink.post(body)
    assert r.status_code == 400 and "nested" in r.json()["error"]
    assert sink.post(ndjson(1)).status_code == 202  # and the server is fine


@pytest.mark.parametrize("shape", ["ndjson", "array"])
def test_more_records_than_the_limit_is_a_413_and_nothing_is_counted(
    sink: Sink, shape: str
) -> None:
    records = [{"level": "error", "message": "x"}] * 1001
    body = "\n".join(json.dumps(r) for r in records) if shape == "ndjson" else json.dumps(records)
    r = sink.post(body)
    assert r.status_code == 413 and "1000" in r.json()["error"]
    assert sink.total() == 0


def test_the_reply_lists_at_most_a_hundred_rejections_and_counts_them_all(sink: Sink) -> None:
    r = sink.post("\n".join(["5"] * 300 + [ndjson(1)]))
    assert r.status_code == 202
    body = r.json()
    assert len(body["rejected"]) == 100 and body["rejected_count"] == 300
    assert len(body["accepted"]) == 1


def test_an_empty_batch_queued_without_waiting_is_accepted_not_a_500(sink: Sink) -> None:
    # found by benchmarks/fuzz_ingest.py: `[]` made the queue path index an empty list
    r = httpx.post(f"{sink.url}/v1/events", content=b"[]", timeout=30)
    assert r.status_code == 202 and r.json()["queued"] == 0


def test_a_lone_surrogate_echoed_in_a_reply_is_escaped_not_a_500(sink: Sink) -> None:
    # found by benchmarks/fuzz_ingest.py: JSON's "\ud800" escape is valid JSON text, decodes to
    # a str UTF-8 cannot encode, and a reply that echoed it failed to render
    r = sink.post('{"level": "error", "message": "bad \\ud800", "service": "shop-\\udc00"}')
    assert r.status_code == 400 and "surrogate" in r.json()["error"]  # refused, said why
    envelope = b'{}\n{"type": "\\ud800", "length": 2}\n{}\n'
    r = httpx.post(f"{sink.url}/api/1/envelope/", content=envelope, timeout=30)
    assert r.status_code < 500, r.text


def test_a_body_that_trickles_in_is_cut_off(sink: Sink) -> None:
    def slow() -> Iterator[bytes]:
        yield b'{"level": "error", '
        time.sleep(3)
        yield b'"message": "x"}'

    r = httpx.post(f"{sink.url}/v1/events", content=slow(), timeout=30)
    assert r.status_code == 408


def _rss_kb(proc: Proc) -> int:
    for line in Path(f"/proc/{proc.popen.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_hostile_bodies_within_the_limits_keep_memory_bounded(sink: Sink) -> None:
    sink.post("[" + ",".join(["{}"] * 1001) + "]")  # past the record limit: refused early
    sink.post("\n".join(["{}"] * 1000))  # at the limit: 1000 rejections, 100 listed
    sink.post(gzip.compress(b"x" * 9_000_000), **{"Content-Encoding": "gzip"})
    assert _rss_kb(sink.ingest) < 200_000
