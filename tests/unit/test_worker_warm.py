"""A worker child warms its clients after the fork; services that are down do not stop it."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import pytest

from shared.core import queues
from shared.core.settings import Settings
from shared.retrieve.ranker import load_model
from workers.context import WARM, Clients


def test_warming_with_redis_and_chroma_down_logs_and_carries_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings(
        redis_url="redis://127.0.0.1:9/0",  # nothing listens on the discard port
        chroma_url="http://127.0.0.1:9",
        ollama_url="http://127.0.0.1:9",
    )
    c = Clients(settings)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="workers.context"):
        c.warm(set(queues.ALL_QUEUES))
    assert [r.message for r in caplog.records] == ["worker.warm_failed"]
    # Redis down costs a worker's start one attempt, not the ~15 s tasks spend riding out a
    # restart (a generous bound: the retries alone would take 15 s).
    assert time.monotonic() - started < 10
    assert "model_http" in vars(c) and "query_embedder" in vars(c)  # built before the failure


def test_every_queue_has_its_clients_named() -> None:
    assert set(WARM) == set(queues.ALL_QUEUES)
    assert all(hasattr(Clients, name) for names in WARM.values() for name in names)


def test_the_ranker_is_the_shipped_model_unless_turned_off_or_unreadable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert Clients(Settings()).ranker == load_model(None)
    assert Clients(Settings(ranker="fusion")).ranker is None
    own = tmp_path / "model.json"
    own.write_text(dataclasses.replace(load_model(None), intercept=-3.0).to_json())
    assert Clients(Settings(ranker_model=own)).ranker.intercept == -3.0  # type: ignore[union-attr]
    own.write_text("{}")
    with caplog.at_level(logging.ERROR, logger="workers.context"):
        assert Clients(Settings(ranker_model=own)).ranker is None
    assert [r.message for r in caplog.records] == ["ranker.unusable"]
