"""The model's ``file_history`` tool reads what the indexer recorded from git, in Redis."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from shared.analyze.tools import Toolbox
from shared.devtools.eval import MemoryIndex, load_corpus
from shared.devtools.sample_history import BUG_SUBJECT, HANDLERS, PRICING, build_sample_repo
from shared.index.history import HistoryBounds, HistoryStore, collect_history
from tests.conftest import SAMPLE_SERVICE

pytestmark = pytest.mark.integration

REPO = "sample"


def test_file_history_names_the_commit_behind_a_range_and_shows_its_change(
    fresh_redis: redis.Redis, tmp_path: Path
) -> None:
    sample = build_sample_repo(SAMPLE_SERVICE, tmp_path / "sample").path
    store = HistoryStore(fresh_redis)
    store.put(REPO, collect_history(sample, [PRICING], HistoryBounds()))
    index = MemoryIndex(load_corpus(sample), None)
    tools = Toolbox(REPO, index, lambda t: t.replace("Ben Ortiz", "[REDACTED]"), 6000, store)

    text = tools.call("file_history", {"path": PRICING, "start": 91, "end": 91})
    assert BUG_SUBJECT in text.splitlines()[0]  # the commit that planted line 91 comes first
    assert "Latest change:" in text
    assert "+            line.unit_discount_cents = round_half_up(share / line.quantity)" in text
    # Authors and subjects go through redaction (here: the bug commit's author's name).
    assert "Ben Ortiz" not in text and "[REDACTED]" in text.splitlines()[0]
    assert tools.lookups == [f"history of {PRICING}:91-91"]

    # An indexed file without recorded history (only pricing.py's was), and a file outside
    # the repository.
    assert tools.call("file_history", {"path": HANDLERS, "start": 1, "end": 20}).startswith(
        "no recorded recent change"
    )
    refused = tools.call("file_history", {"path": "../../etc/passwd", "start": 1, "end": 5})
    assert refused.startswith("refused:")
