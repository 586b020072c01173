"""The in-process sentence-transformers embedder (needs the eval extra; skipped without it)."""

from __future__ import annotations

import math

import pytest

from shared.devtools.st_embedder import SentenceTransformerEmbedder, available

pytestmark = pytest.mark.skipif(not available(), reason="eval extra not installed")


def test_bundled_model_embeds_offline_normalised_and_in_order() -> None:
    embedder = SentenceTransformerEmbedder(max_seq_length=64)
    texts = ["ZeroDivisionError: division by zero", "def apply_discount(total, count):"]
    vectors = embedder.embed(texts)
    assert len(vectors) == 2 and len(vectors[0]) == 384
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4) for v in vectors)
    assert embedder.embed(texts[1:])[0] == pytest.approx(vectors[1], abs=1e-5)
    assert embedder.model == "all-MiniLM-L6-v2@64"
