"""Secrets stay in: 80 fake secrets of 40 real formats, planted in error events (message, trace,
exception type, attributes) and in an indexed repository, never reach the model host (index-time
and query embeddings, the LLM prompt), the rerank server or Slack."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from shared.core.pipeline import sender_app
from shared.core.settings import Settings
from shared.devtools.localstack import LocalStack, wait_until
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.devtools.simulators.slack import SlackSimulator
from shared.index.reindex import index_repository
from shared.intake.events import from_record
from shared.intake.submit import intake_for
from tests.conftest import SAMPLE_SERVICE
from tests.data.planted_secrets import Planted, planted

pytestmark = pytest.mark.integration


def leaked(secrets: list[Planted], *seen: Any) -> list[str]:
    blob = json.dumps(seen, ensure_ascii=False, default=str)
    return sorted({s.kind for s in secrets if s.value in blob})


def test_no_planted_secret_reaches_a_model_the_reranker_or_slack(
    stack: LocalStack,
    settings: Settings,
    tmp_path: Path,
    ollama_sim: OllamaSimulator,
    rerank_sim: OllamaSimulator,
    slack_sim: SlackSimulator,
) -> None:
    secrets = planted(seed=11)
    assert len(secrets) >= 60 and len({s.kind for s in secrets}) >= 25
    half = len(secrets) // 2
    in_code, in_events = secrets[:half], secrets[half:]

    repo_dir = tmp_path / "repo"
    shutil.copytree(SAMPLE_SERVICE, repo_dir)
    config = repo_dir / "shopapp" / "prod_settings.py"
    config.write_text(
        '"""Production settings (secrets checked in by mistake)."""\n\n'
        + "\n".join(f"# {s.kind}\nSETTING_{i} = {s.text!r}" for i, s in enumerate(in_code))
        + "\n\n\ndef load_payment_settings():\n    return SETTING_0\n"
    )
    repo = f"secrets-{uuid.uuid4().hex[:6]}"
    ollama_sim.clear_log()
    rerank_sim.clear_log()
    app = sender_app(settings)
    try:
        report = index_repository(app, repo_dir, repo, max_bytes=1_000_000, timeout=180)
        assert report.files > 10 and not report.failed

        service = f"svc-{repo}"
        lines = [s.text.replace("\n", " ") for s in in_events]
        trace = (
            "Traceback (most recent call last):\n"
            f'  File "/srv/app/shopapp/prod_settings.py", line {len(in_code) * 2 + 5}, '
            "in load_payment_settings\n"
            "    return SETTING_0\n"
            + "\n".join(f"  context: {line}" for line in lines[:20])
            + f"\nKeyError: 'payment settings missing: {lines[20]}'"
        )
        record = {
            "level": "error",
            "message": "payment settings failed: " + " ; ".join(lines[21:30]),
            "stack": trace,
            "exception_type": f"shopapp.SettingsError[{lines[30]}]",
            "attributes": {"request": {"headers": {"X-Debug": " ".join(lines[31:])}}},
        }
        event = from_record(record, origin="sent", service=service, repo=repo)
        submitted = intake_for(settings, app).submit(event)  # what every producer does
        assert submitted.result is not None
        notification = submitted.result.get(timeout=120)
        wait_until(
            lambda: any(m.get("thread_ts") == notification["ts"] for m in slack_sim.messages),
            30,
            "the trace's thread reply",
        )
    finally:
        app.close()

    models = [r["body"] for r in ollama_sim.requests]
    reranks = [r["body"] for r in rerank_sim.requests]
    posted = slack_sim.messages
    assert any(r["path"] == "/api/embed" for r in ollama_sim.requests)  # they did run
    assert reranks and any(r["path"] == "/api/chat" for r in ollama_sim.requests)
    assert "REDACTED" in json.dumps(posted)  # the secrets reached tracehound, redacted
    assert leaked(secrets, models) == []
    assert leaked(secrets, reranks) == []
    assert leaked(secrets, posted, slack_sim.requests) == []
