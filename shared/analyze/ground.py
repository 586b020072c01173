"""Holding the LLM's reply to what it was shown: only code it read may be cited.

What it read is the retrieved candidates plus ``analysis.read`` (the windows at the trace's
frames, what its lookups returned), each a range of numbered lines. A model can invent a path,
or be talked into one by text in the logs ("the bug is in /etc/passwd"). Files and evidence
that name no code it read are dropped and said in a footnote, and where the prose names them
it reads "[not in the retrieved code]"; a hypothesis whose every piece of evidence was dropped
keeps its words but loses its confidence. Line numbers are checked against the numbered lines
it was shown: a range is cut to the shown lines it overlaps, and one outside all of them is
moved onto the file's best shown range. A suggested
fix that downloads and runs a script (``curl … | sh``) is withheld, not presented as the fix,
and the command is withheld wherever else the reply repeats it.

The reply is the model's own words, and a model repeats what it read or knows: every text of
it (summary, causes, evidence, fix, reasons, lookups, the raw reply of a failed one) is
redacted before anyone sees it (``redacted_reply``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
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
WITHHELD_COMMAND = "[withheld: a command that downloads and runs a script]"


@dataclass(frozen=True)
class Grounded:
    analysis: Analysis
    notes: list[str]


def _path_of(reference: str) -> str:
    m = _EVIDENCE.match(reference.strip())
    path = m["path"] if m else reference.strip()
    return path.removeprefix("./")


_LINES = re.compile(r":(?P<start>\d+)(?:-(?P<end>\d+))?$")


def onto_shown(start: int, end: int, spans: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """``start``..``end`` held to the shown lines: cut to the spans it overlaps, or, when it
    overlaps none, the file's first (best) span."""
    start, end = min(start, end), max(start, end)
    hit = [(a, b) for a, b in spans if start <= b and a <= end]
    if not hit:
        return spans[0]
    return max(start, min(a for a, _ in hit)), min(end, max(b for _, b in hit))


def _onto_retrieved(ref: FileRef, spans: list[tuple[int, int]]) -> FileRef:
    start, end = onto_shown(ref.start_line, ref.end_line, spans)
    return ref.model_copy(update={"start_line": start, "end_line": end})


def _evidence_onto(evidence: str, spans: list[tuple[int, int]]) -> str:
    """``path:a-b`` with its lines held to the shown ones (a bare path stays as it is)."""
    path = _path_of(evidence)
    m = _LINES.search(evidence.strip())
    if m is None:
        return path
    start, end = onto_shown(int(m["start"]), int(m["end"] or m["start"]), spans)
    return f"{path}:{start}-{end}"


def shown_spans(
    analysis: Analysis, candidates: Sequence[Candidate]
) -> dict[str, list[tuple[int, int]]]:
    """Per path, the line ranges the model was shown: candidates' chunks (best first), then
    what it read beyond them."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for c in candidates:
        spans.setdefault(c.path, []).extend((h.start_line, h.end_line) for h in c.chunks)
    for ref in analysis.read:
        spans.setdefault(ref.path, []).append((ref.start_line, ref.end_line))
    return spans


def _scrub(text: str, paths: list[str]) -> str:
    """``text`` with every mention of a dropped location (with or without its lines) replaced."""
    for path in sorted(paths, key=len, reverse=True):
        text = re.sub(re.escape(path) + r"(?::\d+(?:-\d+)?)?", NOT_RETRIEVED, text)
    return text


def ground(analysis: Analysis, candidates: Sequence[Candidate]) -> Grounded:
    """The analysis citing only the code it was shown (see the module doc)."""
    if analysis.degraded:
        return Grounded(analysis, [])
    spans = shown_spans(analysis, candidates)
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
        kept = [_evidence_onto(e, spans[_path_of(e)]) for e in h.evidence if _path_of(e) in spans]
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
    hypotheses = [h.model_copy(update={"cause": _withheld(h.cause)}) for h in hypotheses]
    files = [f.model_copy(update={"reason": _withheld(f.reason)}) for f in files]
    confidence = analysis.confidence
    if dropped:
        confidence = min(confidence, max((h.confidence for h in hypotheses), default=0.0))
    grounded = analysis.model_copy(
        update={
            "summary": _withheld(_scrub(analysis.summary, unique)),
            "relevant_files": files,
            "hypotheses": hypotheses,
            "suggested_fix": fix,
            "confidence": confidence,
        }
    )
    return Grounded(grounded, notes)


def _withheld(text: str) -> str:
    """``text`` without any command that downloads and runs a script."""
    return _DOWNLOAD_AND_RUN.sub(WITHHELD_COMMAND, text)


def redacted_reply(analysis: Analysis, redact: Callable[[str], str]) -> Analysis:
    """Every text of the model's reply redacted: what it quotes of the code or the error,
    and what it makes up or knows, is shown only as redaction markers."""
    return analysis.model_copy(
        update={
            "summary": redact(analysis.summary),
            "hypotheses": [
                h.model_copy(
                    update={"cause": redact(h.cause), "evidence": [redact(e) for e in h.evidence]}
                )
                for h in analysis.hypotheses
            ],
            "suggested_fix": redact(analysis.suggested_fix),
            "relevant_files": [
                f.model_copy(update={"reason": redact(f.reason)}) for f in analysis.relevant_files
            ],
            "lookups": [redact(x) for x in analysis.lookups],
            "degraded_reason": redact(analysis.degraded_reason or "") or analysis.degraded_reason,
            "raw_text": redact(analysis.raw_text) if analysis.raw_text else analysis.raw_text,
        }
    )
