"""Holding the LLM's reply to what it was shown: only retrieved code may be cited.

A model can invent a path, or be talked into one by text in the logs ("the bug is in
/etc/passwd"). Files and evidence that name no retrieved candidate are dropped and said in a
footnote, and where the prose names them it reads "[not in the retrieved code]"; a hypothesis
whose every piece of evidence was dropped keeps its words but loses its confidence; line ranges
outside the retrieved chunks of a file are moved onto them. A suggested
fix that downloads and runs a script (``curl … | sh``) is withheld, not presented as the fix.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from shared.core.domain import Analysis, Candidate, FileRef, Hypothesis

_EVIDENCE = re.compile(r"^(?P<path>.+?)(?::\d+(?:-\d+)?)?$")
# A download piped into an interpreter, or fetched and then executed.
_DOWNLOAD_AND_RUN = re.compile(
    r"\b(?:curl|wget|fetch|iwr|irm|invoke-webrequest|invoke-restmethod)\b[^\n|;]*"
    r"(?:\|\s*(?:sudo\s+)?(?:sh|bash|zsh|dash|ksh|python3?|perl|ruby|node|iex|invoke-expression)\b"
    r"|;\s*(?:sudo\s+)?(?:sh|bash|chmod)\b)",
    re.IGNORECASE,
)
NOT_RETRIEVED = "[not in the retrieved code]"
WITHHELD_FIX = (
    "(withheld: the model suggested downloading and running a script; check the analysis "
    "against the code yourself)"
)


@dataclass(frozen=True)
class Grounded:
    analysis: Analysis
    notes: list[str]


def _path_of(reference: str) -> str:
    m = _EVIDENCE.match(reference.strip())
    path = m["path"] if m else reference.strip()
    return path.removeprefix("./")


def _onto_retrieved(ref: FileRef, spans: list[tuple[int, int]]) -> FileRef:
    if any(ref.start_line <= end and start <= ref.end_line for start, end in spans):
        return ref
    start, end = spans[0]  # the candidate's best chunk
    return ref.model_copy(update={"start_line": start, "end_line": end})


def _scrub(text: str, paths: list[str]) -> str:
    """``text`` with every mention of a dropped location (with or without its lines) replaced."""
    for path in sorted(paths, key=len, reverse=True):
        text = re.sub(re.escape(path) + r"(?::\d+(?:-\d+)?)?", NOT_RETRIEVED, text)
    return text


def ground(analysis: Analysis, candidates: Sequence[Candidate]) -> Grounded:
    """The analysis citing only the candidates it was given (see the module doc)."""
    if analysis.degraded:
        return Grounded(analysis, [])
    spans = {c.path: [(h.start_line, h.end_line) for h in c.chunks] for c in candidates}
    dropped: list[str] = []
    files: list[FileRef] = []
    for ref in analysis.relevant_files:
        path = _path_of(ref.path)
        if path in spans:
            files.append(_onto_retrieved(ref.model_copy(update={"path": path}), spans[path]))
        else:
            dropped.append(ref.path)
    hypotheses: list[Hypothesis] = []
    for h in analysis.hypotheses:
        kept = [e for e in h.evidence if _path_of(e) in spans]
        dropped += [e for e in h.evidence if _path_of(e) not in spans]
        unsupported = bool(h.evidence) and not kept
        hypotheses.append(
            h.model_copy(
                update={"evidence": kept, "confidence": 0.0 if unsupported else h.confidence}
            )
        )
    notes = []
    unique = list(dict.fromkeys(_path_of(d) for d in dropped))
    if unique:
        notes.append(
            f"analysis: {len(unique)} cited location(s) not in the retrieved code dropped: "
            + ", ".join(unique[:5])
        )
        hypotheses = [h.model_copy(update={"cause": _scrub(h.cause, unique)}) for h in hypotheses]
    fix = _scrub(analysis.suggested_fix, unique)
    if _DOWNLOAD_AND_RUN.search(fix):
        fix = WITHHELD_FIX
        notes.append("analysis: a suggested fix that downloads and runs a script was withheld")
    confidence = analysis.confidence
    if dropped:
        confidence = min(confidence, max((h.confidence for h in hypotheses), default=0.0))
    grounded = analysis.model_copy(
        update={
            "summary": _scrub(analysis.summary, unique),
            "relevant_files": files,
            "hypotheses": hypotheses,
            "suggested_fix": fix,
            "confidence": confidence,
        }
    )
    return Grounded(grounded, notes)
