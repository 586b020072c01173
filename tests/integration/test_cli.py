"""The ``tracehound`` command against the running stack, as a user types it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from shared.core.pipeline import sender_app
from shared.core.settings import Settings
from shared.stack.children import spawn
from shared.stack.localstack import LocalStack, tracehound_executable
from tests.conftest import DATA, SAMPLE_SERVICE

pytestmark = pytest.mark.integration

TRACEHOUND = tracehound_executable()


def run_cli(
    args: list[str], env: dict[str, str], stdin: str | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TRACEHOUND, *args],
        env={**os.environ, **env},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_index_then_analyze_with_wait_prints_the_message(stack: LocalStack) -> None:
    indexed = run_cli(["index", str(SAMPLE_SERVICE), "--repo", "cli-sample"], stack.env)
    assert indexed.returncode == 0, indexed.stderr
    assert "indexed" in indexed.stdout and "cli-sample" in indexed.stdout

    done = run_cli(
        [
            "analyze",
            str(DATA / "sample-error.txt"),
            "--service",
            "shop-api",
            "--repo",
            "cli-sample",
            "--wait",
        ],
        stack.env,
    )

    assert done.returncode == 0, done.stderr
    assert "shop-api: ZeroDivisionError" in done.stdout
    assert "shopapp/services/pricing.py" in done.stdout
    assert "delivered to: slack" in done.stdout


def test_analyze_reads_a_json_event_from_stdin_and_counts_a_repeat(stack: LocalStack) -> None:
    record = json.loads((DATA / "sample-event.json").read_text())
    event = json.dumps({**record, "service": f"stdin-{uuid.uuid4().hex[:6]}"})
    done = run_cli(["analyze", "-", "--repo", "cli-sample"], stack.env, stdin=event)
    assert done.returncode == 0, done.stderr
    assert "enqueued event" in done.stderr

    again = run_cli(["analyze", "-", "--repo", "cli-sample"], stack.env, stdin=event)
    assert again.returncode == 0
    assert "occurrence 2 of group" in again.stderr and "counted" in again.stderr


def test_index_of_a_missing_path_exits_2_with_a_clear_error(stack: LocalStack) -> None:
    done = run_cli(["index", "/no/such/dir", "--repo", "x"], stack.env)
    assert done.returncode == 2
    assert "does not exist" in done.stderr


def test_analyze_of_text_without_service_exits_2(stack: LocalStack) -> None:
    done = run_cli(["analyze", "-"], stack.env, stdin="Traceback ...\nValueError: x")
    assert done.returncode == 2 and "--service" in done.stderr


@pytest.mark.parametrize(
    ("content", "said"),
    [(b"", "empty input"), (b" \n\n", "empty input"), (bytes(range(256)) * 4096, "binary input")],
    ids=["empty", "blank", "random-bytes"],
)
def test_analyze_refuses_what_is_not_an_error_report(
    stack: LocalStack, tmp_path: Path, content: bytes, said: str
) -> None:
    path = tmp_path / "input"
    path.write_bytes(content)
    done = run_cli(["analyze", str(path), "--service", "shop-api"], stack.env)
    assert done.returncode == 2 and said in done.stderr


def test_analyze_reads_a_100_mb_file_in_bounded_memory(stack: LocalStack, tmp_path: Path) -> None:
    path = tmp_path / "huge.log"
    filler = b"2026-11-30 10:00:00,000 INFO [shop] served request in 12 ms\n"
    with open(path, "wb") as f:
        for _ in range(100_000_000 // (len(filler) * 10_000) + 1):
            f.write(filler * 10_000)
        f.write(b"Traceback (most recent call last):\n")
        f.write(b'  File "/srv/app/shopapp/services/pricing.py", line 91, in allocate\n')
        f.write(b"ZeroDivisionError: division by zero\n")
    assert path.stat().st_size > 100_000_000
    # Started from a small Python rather than from pytest: Linux carries the forking process's
    # peak RSS into the child's ru_maxrss, and pytest's is hundreds of MB.
    measure = (
        "import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)"
    )
    service = f"big-{uuid.uuid4().hex[:6]}"
    done = subprocess.run(
        [sys.executable, "-c", measure, TRACEHOUND, "analyze", str(path), "--service", service],
        env={**os.environ, **stack.env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) < 200_000  # kB: it did not read 100 MB into memory


def test_config_prints_settings_with_secrets_masked(stack: LocalStack) -> None:
    env = {**stack.env, "TRACEHOUND_REDIS_URL": "redis://:hunter2@127.0.0.1:6379/0"}
    done = run_cli(["config"], env)
    assert done.returncode == 0
    assert "hunter2" not in done.stdout and "xoxb-test-token" not in done.stdout
    assert 'slack_bot_token = "********"' in done.stdout
    assert "redis://:****@127.0.0.1:6379/0" in done.stdout
    # Values print literally, not as Rich markup ("[jt]" is part of a glob).
    assert '"*.test.[jt]s"' in done.stdout


def test_config_lists_every_host_the_stack_contacts_and_no_other(
    stack: LocalStack, tmp_path: Path
) -> None:
    routing = tmp_path / "routing.toml"
    routing.write_text(
        '[[rule]]\nservices = ["billing*"]\nwebhook = "https://hooks.example/services/T/B/sekrit"\n'
    )
    env = {**stack.env, "TRACEHOUND_ROUTING": str(routing)}

    listed = run_cli(["config", "--egress"], env)

    assert listed.returncode == 0, listed.stderr
    rows = {tuple(line.split(None, 3)[:2]) for line in listed.stdout.splitlines()}
    slack = env["TRACEHOUND_SLACK_BASE_URL"].removesuffix("/api/")
    assert rows == {
        ("redis", env["TRACEHOUND_REDIS_URL"].removesuffix("/0")),
        ("chroma", env["TRACEHOUND_CHROMA_URL"]),
        ("ollama", env["TRACEHOUND_OLLAMA_URL"]),
        ("rerank", env["TRACEHOUND_RERANK_URL"]),
        ("slack", slack),
        ("slack-socket", "ws://127.0.0.1"),  # the simulator hands out a loopback websocket
        ("slack-webhook", "https://hooks.example:443"),
    }
    assert "sekrit" not in listed.stdout
    # Plain `config` ends with the same list, as comments after the key = value lines.
    full = run_cli(["config"], env).stdout.splitlines()
    section = full.index("# egress: every host tracehound contacts (tracehound config --egress)")
    assert all(" = " in line for line in full[:section])
    assert [line.removeprefix("#   ") for line in full[section + 1 :]] == (
        listed.stdout.splitlines()
    )


def test_tracehound_worker_and_celery_worker_both_consume_a_queue(
    stack: LocalStack,
    settings: Settings,
) -> None:
    workers = [
        spawn(
            "cli-worker",
            [TRACEHOUND, "worker", "--queues", "embed", "--name", "cli@%h"],
            stack.workdir / "logs",
            env=stack.env,
        ),
        spawn(
            "celery-worker",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "workers",
                "worker",
                "-Q",
                "embed",
                "-c",
                "1",
                "-n",
                "plain@%h",
            ],
            stack.workdir / "logs",
            env=stack.env,
        ),
    ]
    app = sender_app(settings)
    try:
        deadline = time.monotonic() + 90
        names: set[str] = set()
        while time.monotonic() < deadline and not {"cli", "plain"} <= names:
            active = app.control.inspect(timeout=1).active_queues() or {}
            names = {
                w.split("@")[0] for w, qs in active.items() if any(q["name"] == "embed" for q in qs)
            }
        assert {"cli", "plain"} <= names, [w.log_tail() for w in workers]
    finally:
        for w in workers:
            w.stop()
        app.close()


def test_worker_refuses_more_slots_than_a_model_queue_shares(stack: LocalStack) -> None:
    done = run_cli(["worker", "--queues", "llm", "--concurrency", "4"], stack.env, timeout=30)
    assert done.returncode == 2 and "at most 2 tasks at once" in done.stderr


def test_watch_of_a_missing_path_exits_2_with_a_clear_error(stack: LocalStack) -> None:
    done = run_cli(["watch", "/no/such/dir", "--repo", "x"], stack.env)
    assert done.returncode == 2
    assert "does not exist" in done.stderr


def test_status_warns_when_redis_keeps_nothing_on_disk(stack: LocalStack) -> None:
    done = run_cli(["status"], stack.env)  # the test stack's Redis runs without persistence
    assert done.returncode == 0, done.stderr
    assert "keeps nothing on disk" in done.stderr
