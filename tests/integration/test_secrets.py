"""Secrets stay in when the model quotes them: a key block across chunk boundaries and planted
secrets in indexed files, read by a simulated model that quotes everything it was shown, never
reach Slack. (The corpus of every format and context through every intake path:
test_secret_corpus_flow.py.)"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from shared.core.pipeline import sender_app
from shared.core.settings import Settings
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.devtools.simulators.slack import SlackSimulator
from shared.groups.submit import intake_for
from shared.index.reindex import index_repository
from shared.intake.events import from_record
from shared.stack.localstack import LocalStack
from tests.conftest import SAMPLE_SERVICE
from tests.data.planted_secrets import Planted, planted

pytestmark = pytest.mark.integration


def leaked(secrets: list[Planted], *seen: Any) -> list[str]:
    blob = json.dumps(seen, ensure_ascii=False, default=str)
    return sorted({s.kind for s in secrets if s.value in blob})


def _key_block(rng_seed: int, lines: int = 24) -> tuple[str, list[str]]:
    import base64
    import random

    rng = random.Random(rng_seed)
    body = [base64.b64encode(rng.randbytes(48)).decode() for _ in range(lines)]
    block = "\n".join(["-----BEGIN RSA PRIVATE KEY-----", *body, "-----END RSA PRIVATE KEY-----"])
    return block, body


def test_a_model_that_reads_and_quotes_the_secret_files_puts_none_of_them_in_slack(
    stack: LocalStack,
    settings: Settings,
    tmp_path: Path,
    ollama_sim: OllamaSimulator,
    rerank_sim: OllamaSimulator,
    slack_sim: SlackSimulator,
) -> None:
    """Secrets in YAML (a key block across a chunk boundary), an env file, a JSON fixture and
    Python; the model reads each file with its tools and quotes every line it read. What it
    read was redacted as the files were indexed, and what it says is redacted before it is
    posted: no secret reaches the model, the reranker or Slack."""
    secrets = planted(seed=23)
    by_kind = {s.kind: s for s in secrets}
    block, key_lines = _key_block(23)
    repo_dir = tmp_path / "repo"
    shutil.copytree(SAMPLE_SERVICE, repo_dir)
    (repo_dir / "config").mkdir()
    filler = "\n".join(f"feature_{i}: on" for i in range(44))
    (repo_dir / "config" / "settings.yaml").write_text(
        f"{filler}\nsmtp_pass: {by_kind['password'].value}\n"
        f"db:\n  password: '{by_kind['url_password'].value}'\n"
        f"signing_key: |\n{block}\n"
        f"stripe: {by_kind['stripe_key'].value}\n"
    )
    (repo_dir / "deploy").mkdir()
    (repo_dir / "deploy" / "env.sh").write_text(
        f"export DB_PASSWORD={by_kind['password'].value}x\n"
        f"export GITHUB_TOKEN={by_kind['github_token'].value}\n"
        f"SLACK_BOT_TOKEN={by_kind['slack_token'].value}\n"
        f"AWS_SECRET_ACCESS_KEY={by_kind['aws_secret'].value}\n"
    )
    fixture = {
        "user": "qa",
        "password": by_kind["password"].value + "y",
        "api_key": by_kind["openai_key"].value,
        "jwt": by_kind["jwt"].value,
    }
    (repo_dir / "shopapp" / "fixtures.json").write_text(json.dumps(fixture, indent=2))
    (repo_dir / "shopapp" / "keys.py").write_text(
        f'AWS_KEY = "{by_kind["aws_access_key_id"].value}"\n'
        f'SENDGRID = "{by_kind["sendgrid"].value}"\n\n\ndef load_keys():\n    return AWS_KEY\n'
    )
    planted_here = [
        *(by_kind[k] for k in ("password", "url_password", "stripe_key", "github_token",
                                "slack_token", "aws_secret", "openai_key", "jwt",
                                "aws_access_key_id", "sendgrid")),
        *(Planted("private_key", line, line) for line in key_lines),
    ]  # fmt: skip
    repo = f"quoted-{uuid.uuid4().hex[:6]}"
    service = f"svc-{repo}"
    reads = [
        {"name": "read_file", "arguments": {"path": path, "start": 1, "end": 80}}
        for path in ("config/settings.yaml", "deploy/env.sh", "shopapp/fixtures.json")
    ]
    ollama_sim.clear_log()
    rerank_sim.clear_log()
    ollama_sim.configure(
        tool_turns=[
            {"match": service, "tool_calls": reads},
            {"match": service, "tool_calls": [
                {"name": "read_file", "arguments": {"path": "config/settings.yaml",
                                                    "start": 40, "end": 80}},
                {"name": "search_code", "arguments": {"query": "password token key"}}]},
        ],
        quote=r"pass|key|token|secret|jwt|[A-Za-z0-9+/]{40}|REDACTED",
    )  # fmt: skip
    app = sender_app(settings)
    try:
        report = index_repository(app, repo_dir, repo, max_bytes=1_000_000, timeout=180)
        assert not report.failed
        trace = (
            "Traceback (most recent call last):\n"
            '  File "/srv/app/shopapp/keys.py", line 6, in load_keys\n'
            "    return AWS_KEY\nKeyError: 'signing_key'"
        )
        event = from_record({"level": "error", "message": "keys failed", "stack": trace},
                            origin="sent", service=service, repo=repo)  # fmt: skip
        notification = intake_for(settings, app).submit(event).result.get(timeout=120)  # type: ignore[union-attr]
    finally:
        ollama_sim.configure(quote=None, tool_turns=[])
        app.close()
    chats = [r["body"] for r in ollama_sim.requests_to("/api/chat")]
    tool_results = [m["content"] for c in chats for m in c["messages"] if m["role"] == "tool"]
    assert any("smtp_pass: [REDACTED" in t for t in tool_results)  # it read the files
    assert any("REDACTED:private_key" in t or "REDACTED:key_body" in t for t in tool_results)
    [message] = [m for m in slack_sim.messages if m["ts"] == notification["ts"]]
    assert "Quoting what I read" in json.dumps(message)  # and quoted them
    models = [r["body"] for r in ollama_sim.requests]
    assert leaked(planted_here, models) == []
    assert leaked(planted_here, [r["body"] for r in rerank_sim.requests]) == []
    assert leaked(planted_here, slack_sim.messages, slack_sim.requests) == []
