"""Hybrid retrieval's signals and fusion on a small in-memory index (no servers)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from shared.core.settings import DEFAULT_DEMOTE, DEFAULT_DEMOTE_WEIGHT
from shared.devtools.eval import MemoryIndex, SimulatorEmbedder, embed_chunks
from shared.index.chunking import chunk_file, defined_names
from shared.retrieve.hybrid import hybrid_retrieve
from shared.retrieve.keywords import MAX_DEFINITIONS, defining, symbol_table
from shared.retrieve.priors import PathPrior

FILES = {
    "shop/pricing.py": (
        "def apply_discount(total, count):\n    return total / count\n\n\n"
        "class TaxTable:\n    def rate_for(self, region):\n        return 0.2\n"
    ),
    "shop/api.py": (
        "from shop.pricing import apply_discount\n\n\n"
        "def handle(cart):\n    return apply_discount(cart.total, cart.count)\n"
    ),
    "shop/inventory.py": "def reserve(sku, stock):\n    return stock[sku] - 1\n",
    "tests/test_pricing.py": (
        "from shop.pricing import apply_discount\n\n\n"
        "def test_apply_discount_divides_the_total_by_the_count():\n"
        "    assert apply_discount(10, 2) == 5  # apply_discount total count divides\n"
    ),
}


def index(files: dict[str, str] = FILES) -> MemoryIndex:
    chunks = [c for path, text in files.items() for c in chunk_file("shop", path, text)]
    return MemoryIndex(chunks, embed_chunks(chunks, SimulatorEmbedder(), None))


def ranked(
    text: str,
    idx: MemoryIndex,
    signals: Sequence[str],
    prior: PathPrior | None = None,
) -> list[str]:
    found = hybrid_retrieve(
        "shop", text, None, vectors=idx, keywords=idx, signals=signals, prior=prior
    )
    return [c.path for c in found.candidates]


def test_symbols_find_the_code_defining_a_name_the_message_mentions() -> None:
    idx = index()
    # No frames, no shared words with the code but the name itself.
    files = ranked("Crash inside apply_discount when the basket is empty", idx, ["symbols"])
    assert files == ["shop/pricing.py"]
    # Methods are found by their own name, classes by theirs.
    assert ranked("TaxTable.rate_for returned None", idx, ["symbols"]) == ["shop/pricing.py"]
    # Prose names nothing: the signal stays silent rather than guessing.
    assert ranked("the checkout fails for some users", idx, ["symbols"]) == []


def test_a_name_defined_in_many_places_is_not_used() -> None:
    table = symbol_table([["A", "run"], ["B", "run"], ["run"], ["run"], ["run"], ["run"], ["go"]])
    assert len(table["run"]) > MAX_DEFINITIONS
    assert defining(table, ["run", "go", "A"]) == [6, 0]


def test_defined_names_cover_methods_inside_a_one_chunk_class() -> None:
    text = (
        "class Notifier:\n    def send_order(self):\n        def _retry():\n            pass\n"
        "\n\nasync def poll():\n    pass\n"
    )
    [chunk] = chunk_file("shop", "shop/notify.py", text)
    assert defined_names(chunk) == ["Notifier", "poll", "send_order", "_retry"]
    go = chunk_file("svc", "svc/cart.go", "func (c *Cart) Total() int {\n\treturn 0\n}\n")[0]
    assert defined_names(go) == ["Total"]


def test_the_default_prior_demotes_tests_docs_and_config_only() -> None:
    prior = PathPrior(DEFAULT_DEMOTE, DEFAULT_DEMOTE_WEIGHT)
    for path in (
        "tests/test_pricing.py",
        "src/pkg/tests/helpers.py",
        "testing/python/collect.py",
        "shop/conftest.py",
        "pkg/api_test.go",
        "web/cart.spec.ts",
        "docs/index.rst",
        "CHANGELOG.md",
        "setup.cfg",
        "examples/plot_demo.py",
    ):
        assert prior(path) == pytest.approx(0.15), path
    for path in ("shop/pricing.py", "src/_pytest/python.py", "sklearn/utils/testing_utils.py"):
        assert prior(path) == 1.0, path
    assert "tests/" in DEFAULT_DEMOTE


def test_the_prior_puts_source_above_a_test_with_more_matching_words() -> None:
    idx = index()
    query = "apply_discount divides the total by the count wrongly"
    assert ranked(query, idx, ["bm25"])[0] == "tests/test_pricing.py"
    with_prior = ranked(
        query, idx, ["bm25"], prior=PathPrior(DEFAULT_DEMOTE, DEFAULT_DEMOTE_WEIGHT)
    )
    assert with_prior.index("shop/pricing.py") < with_prior.index("tests/test_pricing.py")


def test_demote_weight_is_bounded() -> None:
    with pytest.raises(ValueError):
        PathPrior(["tests/"], 1.5)
