"""Where a failure's cause is likely to live, by path alone.

An error from a running service is raised in the service's own code; its tests, docs,
examples and benchmarks share its vocabulary (a test of ``export_text`` says ``export_text``
as often as the function does) but are almost never where the fix lands. Retrieval still
searches them — a frame or a strong match can lift them back up — but their fused score is
multiplied by a weight below 1, so on a tie the source file wins. The patterns and the
weight are settings (``TRACEHOUND_DEMOTE_PATHS``, ``TRACEHOUND_DEMOTE_WEIGHT``); their
defaults are in shared/core/settings.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import pathspec

from shared.core.settings import Settings


class PathPrior:
    """A weight per path: ``weight`` for paths matching ``patterns``, else 1."""

    def __init__(self, patterns: Sequence[str], weight: float) -> None:
        if not 0 <= weight <= 1:
            raise ValueError(f"demote weight must be within [0, 1], not {weight}")
        self.weight = weight
        self._spec = pathspec.GitIgnoreSpec.from_lines(patterns)
        self._known: dict[str, float] = {}  # paths repeat query after query

    def __call__(self, path: str) -> float:
        w = self._known.get(path)
        if w is None:
            w = self._known[path] = self.weight if self._spec.match_file(path) else 1.0
        return w

    @classmethod
    def from_settings(cls, settings: Settings) -> PathPrior:
        return cls(settings.demote_paths, settings.demote_weight)
