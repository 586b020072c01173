"""A worker started with invalid settings stops at once and says which variable is wrong,
instead of going on with Celery's defaults (an AMQP broker on localhost) and failing later
with an error about something else."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_invalid_settings_stop_a_worker_at_start_naming_each_variable(
    private_redis_url: str,
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TRACEHOUND_REDIS_URL": private_redis_url,
        "TRACEHOUND_REDELIVERY_AFTER": "5",
        "TRACEHOUND_INCIDENT_SETTLE": "-1",
    }
    cmd = [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "-Q", "llm",
           "--pool", "solo", "--loglevel", "INFO"]  # fmt: skip
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "invalid TRACEHOUND_* settings" in out
    assert "TRACEHOUND_REDELIVERY_AFTER: Input should be greater than or equal to 10" in out
    assert "TRACEHOUND_INCIDENT_SETTLE: Input should be greater than or equal to 0" in out
    assert "amqp://" not in out  # it never started on Celery's defaults
