"""Labelled cases from the on-call's Right file / Wrong file answers, in eval's format.

Delivery keeps each group's case (the analysed event, the files its message showed); an
answer turns it into one line of the JSON-lines format ``tracehound eval`` reads
(shared/devtools/eval.py ``load_cases``; /work/shared/bench/README.md): the event's text as
the query, the confirmed file as gold, the indexed repo as corpus (``pypi_name``; the
indexed commit, when known, as ``pypi_version``). Extra fields (``repo``, ``service``,
``answer``, ...) are ignored by ``load_cases`` and read by ``tracehound eval --feedback``.
One case per group: a later answer replaces the earlier one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis

from shared.core import keys
from shared.core.domain import ErrorEvent, Investigation

CASE_TTL_S = 30 * 24 * 3600


@dataclass(frozen=True)
class GroupCase:
    """What an action on a group's message needs: the event analysed and the files shown."""

    event: ErrorEvent
    files: list[str]  # repo paths, in the message's order


def shown_paths(inv: Investigation) -> list[str]:
    """The files the message presents, as repo paths (the LLM's, else retrieval's)."""
    a = inv.analysis
    paths = [f.path for f in a.relevant_files] if a and a.relevant_files else []
    paths += [c.path for c in inv.candidates] if not paths else []
    return list(dict.fromkeys(paths))


def remember_case(r: redis.Redis, fp: str, inv: Investigation) -> None:
    record = {"event": inv.event.model_dump(mode="json"), "files": shown_paths(inv)}
    r.set(keys.group_case(fp), json.dumps(record), ex=CASE_TTL_S)


def group_case(r: redis.Redis, fp: str) -> GroupCase | None:
    raw = r.get(keys.group_case(fp))
    if not raw:
        return None
    record = json.loads(raw)
    return GroupCase(ErrorEvent.model_validate(record["event"]), list(record["files"]))


def event_text(event: ErrorEvent) -> str:
    """The error as a report: its message line, then the trace (which often repeats it)."""
    head = ": ".join(p for p in (event.exception_type, event.message.strip()) if p)
    trace = event.stacktrace.strip()
    if head and head.splitlines()[0] not in trace:
        return f"{head}\n{trace}".strip()
    return trace or head


def labelled_case(
    fp: str, case: GroupCase, gold: str, *, answer: str, by: str, at_ms: int, version: str
) -> dict[str, Any]:
    ev = case.event
    return {
        "id": f"feedback-{fp[:16]}",
        "pypi_name": ev.repo,
        "pypi_version": version,
        "query": event_text(ev),
        "query_kind": "traceback" if ev.stacktrace.strip() else "error_message",
        "gold_files": [gold],
        "repo": ev.repo,
        "service": ev.service,
        "event_id": ev.id,
        "fingerprint": fp,
        "answer": answer,  # "right": the top file was confirmed; "wrong": another was picked
        "shown": case.files[:10],
        "by": by,
        "at": datetime.fromtimestamp(at_ms / 1000, UTC).isoformat(),
    }


def store(r: redis.Redis, record: dict[str, Any]) -> None:
    r.hset(keys.FEEDBACK, record["fingerprint"], json.dumps(record, ensure_ascii=False))


def load(r: redis.Redis) -> list[dict[str, Any]]:
    """Every stored case, oldest answer first."""
    records = [json.loads(v) for v in r.hvals(keys.FEEDBACK)]
    return sorted(records, key=lambda c: (c.get("at", ""), c.get("id", "")))


def as_lines(records: list[dict[str, Any]]) -> str:
    """The cases as the JSON-lines file ``tracehound eval --cases`` reads."""
    return "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in records)


__all__ = ["GroupCase", "as_lines", "group_case", "labelled_case", "load", "remember_case"]
