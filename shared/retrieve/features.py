"""What a learned ranker sees of each candidate file: the signals' scores and ranks, their
agreement, and facts about the file the rank fusion never sees.

The inputs are what ``fuse`` reads and gives (shared/retrieve/hybrid.py): each signal's
ranking of chunks, the files it fused from them and the path prior, plus the error's text.
``file_features`` gives the fusion's top files, in its order, each with one value per name of
``FEATURES``;
a ranker reorders them (shared/devtools/ranker.py trains and cross-validates one), and
``tracehound eval --explain CASE`` prints them, so a reader sees why the first file came first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shared.core.domain import Candidate, ErrorEvent
from shared.retrieve.fusion import Ranking

SIGNAL_NAMES = ("vector", "bm25", "frames", "vendored", "symbols")
PER_SIGNAL = ("rr", "chunks", "score")  # 1 / best rank, log(1 + chunks found), score / best
FEATURES: tuple[str, ...] = (
    *(f"{s}_{p}" for s in SIGNAL_NAMES for p in PER_SIGNAL),
    "fused_rr",  # 1 / the file's rank in today's fusion
    "fused_share",  # its fused score / the first file's
    "agree",  # how many of vector, bm25 and symbols found it
    "prior",  # the path prior's weight (tests, docs, examples below 1)
    "path_words",  # share of the path's words the error text holds
    "name_in_text",  # the file's name (without extension) is in the error text
    "init_file",  # __init__ / index: a package's entry, rarely the fix
    "test_path",  # under a tests directory or named test_*
)
_WORDS = re.compile(r"[a-z][a-z0-9]+")
_TEST = re.compile(r"(?:^|/)(?:tests?|testing)/|(?:^|/)test_[^/]*$|_test\.[a-z]+$")


# What the text features read of an error, at most: a 64 KB trace costs ~1 ms to scan.
ERROR_TEXT_MAX = 20_000


def error_text(event: ErrorEvent) -> str:
    """What the error says, whole (message, then trace, as intake redacted them): the text the
    features look for a file's name and path words in. The query retrieval searches with is
    shorter (shared/retrieve/query.py) and loses words the report had; the ranker was chosen
    on this text (benchmarks/cases/README.md, *Learned ranker*: "the error text")."""
    text = f"{event.message}\n{event.stacktrace}" if event.stacktrace else event.message
    return text[:ERROR_TEXT_MAX]


@dataclass(frozen=True)
class FileFeatures:
    path: str
    values: tuple[float, ...]  # one per name of FEATURES

    def as_dict(self) -> dict[str, float]:
        return dict(zip(FEATURES, self.values, strict=True))


def file_features(
    rankings: Sequence[Ranking],
    fused: Sequence[Candidate],
    text: str,
    prior: Callable[[str], float] | None,
    *,
    top: int = 30,
) -> list[FileFeatures]:
    """The first ``top`` of ``fused`` (``fuse`` of ``rankings``), in its order, with their
    features."""
    fused = fused[:top]
    if not fused:
        return []
    best_fused = fused[0].score or 1.0
    per: dict[str, dict[str, tuple[int, int, float]]] = {}  # signal -> path -> (rank, n, score)
    for signal, hits in rankings:
        top_score = max((abs(h.score) for h in hits), default=0.0) or 1.0
        seen = per.setdefault(signal, {})
        for rank, hit in enumerate(hits, start=1):
            old = seen.get(hit.path)
            if old is None:
                seen[hit.path] = (rank, 1, hit.score / top_score)
            else:
                seen[hit.path] = (old[0], old[1] + 1, old[2])
    lowered = text.lower()
    text_words = set(_WORDS.findall(lowered))
    out = []
    for rank, cand in enumerate(fused, start=1):
        values: list[float] = []
        for signal in SIGNAL_NAMES:
            found = per.get(signal, {}).get(cand.path)
            if found is None:
                values += [0.0, 0.0, 0.0]
            else:
                values += [1.0 / found[0], math.log1p(found[1]), found[2]]
        name = cand.path.rsplit("/", 1)[-1].rsplit(".", 1)[0].lower()
        words = _WORDS.findall(cand.path.lower().rsplit(".", 1)[0])
        values += [
            1.0 / rank,
            cand.score / best_fused,
            float(sum(cand.path in per.get(s, {}) for s in ("vector", "bm25", "symbols"))),
            prior(cand.path) if prior is not None else 1.0,
            sum(w in text_words for w in words) / len(words) if words else 0.0,
            float(bool(name) and name not in ("__init__", "index") and name in lowered),
            float(name in ("__init__", "index", "mod", "lib")),
            float(bool(_TEST.search(cand.path.lower()))),
        ]
        out.append(FileFeatures(cand.path, tuple(values)))
    return out
