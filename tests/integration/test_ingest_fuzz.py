"""Every ingest endpoint under generated requests (shared/devtools/fuzz.py): a real ``tracehound
ingest`` with every credential configured answers each with a 2xx or 4xx, never a 5xx, and its
memory stays bounded. ``benchmarks/fuzz_ingest.py`` runs the same with 10,000 requests."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from shared.devtools.fuzz import DSN_KEY, ENV, TOKEN, fuzz
from shared.stack.localstack import start_ingest, start_redis

pytestmark = pytest.mark.integration


def _peak_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_generated_requests_to_every_endpoint_get_no_5xx(tmp_path: Path) -> None:
    redis_proc, redis_url = start_redis(tmp_path)
    ingest, url = start_ingest(tmp_path, {"TRACEHOUND_REDIS_URL": redis_url, **ENV})
    try:
        tally = fuzz(url, 400, seed=20261202)
        assert tally.server_errors == []
        assert ingest.alive()
        # the generated traffic reached every route and got past the credentials
        answered = tally.by_endpoint()
        for route in ("/v1/events", "/api/{id}/envelope/", "/api/{id}/store/", "/v1/logs"):
            assert any(code < 300 for code in answered.get(route, {})), route
        assert "/slack/actions" in answered and "/v1/traces" in answered
        assert _peak_rss_kb(ingest.popen.pid) < 250_000
        # and the server still does its job afterwards
        good = httpx.post(
            f"{url}/v1/events?wait=true",
            json={"level": "error", "message": "after the fuzz", "service": "checkout"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert good.status_code == 202 and good.json()["accepted"]
        store = httpx.post(
            f"{url}/api/42/store/?sentry_key={DSN_KEY}",
            json={"level": "error", "message": "still here"},
        )
        assert store.status_code == 200
    finally:
        ingest.stop()
        redis_proc.stop()
