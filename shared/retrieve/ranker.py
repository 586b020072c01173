"""The learned ranking: a logistic regression over each candidate file's features
(shared/retrieve/features.py) puts the fusion's first files in the order it scores them.

The model is a few numbers (``LinearModel``): standardise, dot product. The one the package
ships, ``ranker.json`` beside this module, was fit on every dev case with all-MiniLM-L6-v2
on the order inside each case (``tracehound eval … --cv repo --save-ranker``,
shared/devtools/ranker.py ``fit_pairwise``); the plans that chose it were fixed before they
were scored (benchmarks/cases/README.md, *Learned ranker* and *A pairwise ranker*). The weighted
rank fusion (shared/retrieve/hybrid.py ``fuse``) makes the candidates, orders every file past
the first ``TOP``, and is the whole order with ``TRACEHOUND_RANKER=fusion`` or when a model
cannot score.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from shared.core.domain import Candidate
from shared.retrieve.features import FEATURES, file_features
from shared.retrieve.fusion import Ranking

TOP = 30  # the fusion's first files the model reorders (the plan's candidates)
SHIPPED = "ranker.json"
MAX_MODEL_BYTES = 64_000  # a model is ~2 KB; anything far larger is not one


@dataclass(frozen=True)
class LinearModel:
    """Standardise, then a dot product: what a trained logistic regression scores with."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float

    def __post_init__(self) -> None:
        n = len(self.features)
        if not (len(self.mean) == len(self.scale) == len(self.coef) == n):
            raise ValueError(f"a model needs one mean, scale and weight per feature ({n})")
        numbers = (*self.mean, *self.scale, *self.coef, self.intercept)
        if not all(math.isfinite(v) for v in numbers):
            raise ValueError("a model's numbers must be finite")
        if any(s <= 0 for s in self.scale):
            raise ValueError("a model's scales must be positive")
        if not all(math.isfinite(c / s) for c, s in zip(self.coef, self.scale, strict=True)):
            raise ValueError("a model's weight over its scale must be finite (a scale near 0)")

    def score(self, values: Sequence[float]) -> float:
        return self.intercept + sum(self.contributions(values))

    def contributions(self, values: Sequence[float]) -> list[float]:
        """Each feature's share of the score (its standardised value times its weight)."""
        return [
            c * (v - m) / s
            for c, v, m, s in zip(self.coef, values, self.mean, self.scale, strict=True)
        ]

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str) -> LinearModel:
        """A model as ``to_json`` wrote it; a clear ValueError naming ``source`` otherwise."""
        try:
            raw = json.loads(text)
            model = cls(
                tuple(str(f) for f in raw["features"]),
                tuple(float(v) for v in raw["mean"]),
                tuple(float(v) for v in raw["scale"]),
                tuple(float(v) for v in raw["coef"]),
                float(raw["intercept"]),
            )
        # JSONDecodeError is a ValueError; deep nesting a RecursionError; a 400-digit number
        # an OverflowError in float()
        except (ValueError, TypeError, KeyError, RecursionError, OverflowError) as exc:
            why = f"{type(exc).__name__}: {str(exc)[:200]}"
            raise ValueError(f"{source}: not a ranker model ({why})") from exc
        if model.features != FEATURES:
            raise ValueError(f"{source}: trained on other features than shared/retrieve/features")
        return model

    @classmethod
    def load(cls, path: Path) -> LinearModel:
        if not path.is_file():  # a directory, a FIFO (whose open would block), nothing there
            raise ValueError(f"{path}: no such file")
        with path.open("rb") as f:
            data = f.read(MAX_MODEL_BYTES + 1)
        if len(data) > MAX_MODEL_BYTES:
            raise ValueError(f"{path}: over {MAX_MODEL_BYTES} bytes, not a ranker model")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not UTF-8 text, not a ranker model") from exc
        return cls.from_json(text, str(path))


def shipped_model() -> LinearModel:
    """The model in the package (fit on the dev cases with all-MiniLM-L6-v2)."""
    try:
        text = resources.files("shared.retrieve").joinpath(SHIPPED).read_text("utf-8")
    except OSError as exc:  # an install without its package data
        missing = f"shared/retrieve/{SHIPPED}: the shipped model is missing ({exc})"
        raise ValueError(missing) from exc
    return LinearModel.from_json(text, f"shared/retrieve/{SHIPPED}")


def load_model(path: Path | None) -> LinearModel:
    """The team's own model (``TRACEHOUND_RANKER_MODEL``), else the shipped one."""
    return LinearModel.load(path) if path is not None else shipped_model()


def learned_order(
    model: LinearModel,
    rankings: Sequence[Ranking],
    fused: Sequence[Candidate],
    text: str,
    prior: Callable[[str], float] | None,
    *,
    top: int = TOP,
) -> list[Candidate]:
    """``fused`` (``fuse`` of ``rankings``) with its first ``top`` files in the model's order
    (ties keep the fusion's), the rest after them as they were. A score that is not a number
    raises ValueError: the caller keeps the fusion's order."""
    files = file_features(rankings, fused, text, prior, top=top)
    scores = [model.score(f.values) for f in files]
    if not all(math.isfinite(s) for s in scores):
        raise ValueError("the ranker scored a file with a number that is not finite")
    order = sorted(range(len(files)), key=lambda i: (-scores[i], i))
    return [fused[i] for i in order] + list(fused[len(files) :])
