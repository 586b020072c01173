"""The bounded investigation: numbered and marked code, frame windows, the model's tools, the
tool loop and its fallback, citations held to the numbered lines, the cache's validity."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from shared.analyze.cache import cache_identity
from shared.analyze.code import frame_windows, numbered, trace_lines
from shared.analyze.ground import ground, onto_shown
from shared.analyze.llm import analyze, build_messages, need_more_schema, whitelisted
from shared.analyze.stage import lookups_note
from shared.analyze.tools import TOOL_NAMES, Toolbox
from shared.core.domain import (
    Analysis,
    Candidate,
    ErrorEvent,
    FileRef,
    GroupRef,
    Hypothesis,
    Investigation,
)
from shared.devtools.eval import MemoryIndex, load_corpus
from shared.intake.trace import with_trace
from shared.models.chat import ToolCall, ToolsUnsupported, Turn
from tests.conftest import DATA, SAMPLE_SERVICE

REPO = SAMPLE_SERVICE.name
PRICING = "shopapp/services/pricing.py"
TRACE = (DATA / "sample-error.txt").read_text()
EVENT = with_trace(  # as intake hands it on: its trace read once
    ErrorEvent(
        service="shop-api",
        repo=REPO,
        message="division by zero",
        exception_type="ZeroDivisionError",
        stacktrace=TRACE,
    )
)
VALID = {
    "summary": "A line with quantity 0 divides by zero.",
    "hypotheses": [{"cause": "quantity 0", "confidence": 0.8, "evidence": [f"{PRICING}:91-91"]}],
    "suggested_fix": "Skip lines with quantity 0.",
    "relevant_files": [{"path": PRICING, "start_line": 84, "end_line": 91}],
    "confidence": 0.8,
}


@pytest.fixture(scope="module")
def index() -> MemoryIndex:
    return MemoryIndex(load_corpus(SAMPLE_SERVICE), None)


def toolbox(index: MemoryIndex, budget: int = 6000) -> Toolbox:
    marked = trace_lines(EVENT, index.path_mapper(REPO))
    return Toolbox(REPO, index, lambda t: t.replace("s3cr3t", "[REDACTED]"), budget, marked=marked)


# ------------------------------------------------------------- numbering and marking


def test_code_is_numbered_line_by_line_and_frame_lines_are_marked() -> None:
    text = "def f(x):\n    y = 1 / x\n    return y"
    assert numbered(text, 89, {90}).split("\n") == [
        "  89 | def f(x):",
        ">>90 |     y = 1 / x",
        "  91 |     return y",
    ]
    # Widths follow the largest number, so the bars line up across a power of ten.
    assert numbered("a\nb", 99).split("\n") == ["   99 | a", "  100 | b"]


def test_the_prompt_numbers_candidates_and_marks_the_traces_lines(index: MemoryIndex) -> None:
    marked = trace_lines(EVENT, index.path_mapper(REPO))
    assert marked[PRICING] == [91, 80, 61]  # nearest the raise first
    [chunk] = index.chunks_at(REPO, PRICING, 91)
    cand = Candidate(path=PRICING, score=1.0, chunks=[chunk])
    [_, user] = build_messages(EVENT, [cand], nonce="n", marked=marked)
    assert (
        ">> 91 |             line.unit_discount_cents = round_half_up(share / line.quantity)"
        in (user["content"])
    )
    assert "   90 |             line.discount_cents = share" in user["content"]


def test_every_in_repo_frame_gets_a_window_even_when_its_chunk_was_not_retrieved(
    index: MemoryIndex,
) -> None:
    marked = trace_lines(EVENT, index.path_mapper(REPO))
    shown = [Candidate(path=PRICING, score=1.0, chunks=index.chunks_at(REPO, PRICING, 91))]
    windows = frame_windows(REPO, marked, shown, index, lambda t: t)
    where = {(w.path, w.chunks[0].start_line, w.chunks[0].end_line) for w in windows}
    assert any(p == "shopapp/api/handlers.py" and a <= 30 <= b for p, a, b in where)
    assert {p for p, _, _ in where} >= {
        "shopapp/api/handlers.py",
        "shopapp/services/order_service.py",
    }
    assert all(w.path != PRICING or not (w.chunks[0].start_line <= 91 <= w.chunks[0].end_line)
               for w in windows)  # fmt: skip
    [_, user] = build_messages(EVENT, shown, nonce="n", marked=marked, windows=windows)
    assert "Code at the trace's other frames" in user["content"]
    assert '<candidate_n rank="frame" path="shopapp/api/handlers.py"' in user["content"]
    assert ">>30 |" in user["content"]


def test_route_status_and_request_id_reach_the_prompt_and_nothing_else_does() -> None:
    attrs = {
        "release": "1.4.2",
        "environment": "prod",
        "tags": {"http.route": "/orders", "request_id": "req-77"},
        "log_attributes": {"http.response.status_code": 500, "user.email": "a@b.c"},
    }
    assert whitelisted(attrs) == [("Route", "/orders"), ("Status", "500"), ("Request id", "req-77")]
    [_, user] = build_messages(EVENT.model_copy(update={"attributes": attrs}), [], nonce="n")
    fenced = user["content"].split("<error_n>")[1].split("</error_n>")[0]
    for line in ("Release: 1.4.2", "Environment: prod", "Route: /orders", "Status: 500",
                 "Request id: req-77"):  # fmt: skip
        assert line in fenced
    assert "a@b.c" not in user["content"]


# ------------------------------------------------------------------------ citations


def test_a_cited_range_is_cut_to_the_numbered_lines_it_overlaps_or_moved_onto_them() -> None:
    assert onto_shown(80, 120, [(84, 95)]) == (84, 95)
    assert onto_shown(91, 91, [(84, 95)]) == (91, 91)
    assert onto_shown(300, 310, [(84, 95), (10, 20)]) == (84, 95)  # the best shown range


def test_evidence_lines_are_checked_and_code_the_model_read_may_be_cited() -> None:
    cands = [Candidate(path=PRICING, score=1.0, chunks=[
        # a candidate's shown lines 84-95
        {"chunk_id": "c", "path": PRICING, "start_line": 84, "end_line": 95, "text": "x",
         "score": 1.0}])]  # fmt: skip
    analysis = Analysis.model_validate(
        {
            **VALID,
            "hypotheses": [
                Hypothesis(cause="a", confidence=0.8, evidence=[f"{PRICING}:400-410"]),
                Hypothesis(cause="b", confidence=0.5, evidence=["shopapp/models.py:12-14"]),
            ],
            "relevant_files": [FileRef(path="shopapp/models.py", start_line=1, end_line=90)],
            "read": [FileRef(path="shopapp/models.py", start_line=5, end_line=30)],
        }
    )
    out = ground(analysis, cands).analysis
    assert out.hypotheses[0].evidence == [f"{PRICING}:84-95"]  # no such lines were shown
    assert out.hypotheses[1].evidence == ["shopapp/models.py:12-14"]  # read by a lookup
    assert [(f.path, f.start_line, f.end_line) for f in out.relevant_files] == [
        ("shopapp/models.py", 5, 30)
    ]
    assert ground(analysis.model_copy(update={"read": []}), cands).notes  # unread: dropped


# ---------------------------------------------------------------------------- tools


def test_read_file_serves_numbered_redacted_lines_of_an_indexed_file_only(
    index: MemoryIndex,
) -> None:
    tools = toolbox(index)
    text = tools.call("read_file", {"path": PRICING, "start": 88, "end": 92})
    assert text.startswith(f"{PRICING}:\n")
    assert ">>91 |             line.unit_discount_cents" in text
    assert "  92 |" not in text or text.count("|") == 5
    assert tools.lookups == [f"read {PRICING}:88-92"]
    assert tools.read == [FileRef(path=PRICING, start_line=88, end_line=92)]
    for outside in ("../../etc/passwd", "/etc/passwd", "shopapp/../../../etc/passwd",
                    "shopapp/not_indexed.py", ""):  # fmt: skip
        refused = tools.call("read_file", {"path": outside, "start": 1, "end": 5})
        assert refused.startswith("refused:") and "repository" in refused
    # A frame's absolute path maps onto the repo as frames do.
    assert ">> 91 |" in tools.call("read_file", {"path": "/srv/app/" + PRICING, "start": 91})


def test_reads_are_bounded_in_lines_and_in_total_characters(index: MemoryIndex) -> None:
    tools = toolbox(index, budget=2500)
    long = tools.call("read_file", {"path": PRICING, "start": 1, "end": 500})
    assert long.count("\n") <= 80
    tools.call("find_symbol", {"name": "PricingService"})
    assert tools.used <= 2500
    assert tools.call("search_code", {"query": "coupon"}).startswith("refused: the lookup budget")


def test_find_symbol_and_search_code_read_the_index(index: MemoryIndex) -> None:
    tools = toolbox(index)
    found = tools.call("find_symbol", {"name": "round_half_up"})
    assert "def round_half_up" in found and "shopapp/" in found
    hits = tools.call("search_code", {"query": "coupon allocation"})
    assert "coupon" in hits.lower()
    assert tools.lookups[-1] == "searched 'coupon allocation'"
    assert tools.call("drop_tables", {}).startswith("refused: no tool named")
    assert set(TOOL_NAMES) == {"search_code", "read_file", "find_symbol", "file_history"}


# ------------------------------------------------------------------------- the loop


class ToolModel:
    """An in-memory ToolChat: scripted turns offered tools, then JSON under ``format``."""

    model = "tool-llm"

    def __init__(self, turns: list[Turn | Exception], *finals: str) -> None:
        self.turns, self.finals = turns, list(finals) or [json.dumps(VALID)]
        self.conversed: list[list[dict[str, Any]]] = []
        self.completed: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []
        self.held = 0

    def converse(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Turn:
        self.conversed.append(messages)
        turn = (
            self.turns.pop(0)
            if self.turns
            else Turn("", [ToolCall("x", "search_code", {"query": "again"})])
        )  # a model that never stops
        if isinstance(turn, Exception):
            raise turn
        return turn

    def complete(self, messages: list[dict[str, Any]], schema: dict[str, Any]) -> str:
        self.completed.append((messages, schema))
        return self.finals.pop(0) if len(self.finals) > 1 else self.finals[0]

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        self.held += 1
        yield


def cands(index: MemoryIndex) -> list[Candidate]:
    return [Candidate(path=PRICING, score=1.0, chunks=index.chunks_at(REPO, PRICING, 91))]


def test_tool_calls_are_served_and_an_outside_path_is_refused(index: MemoryIndex) -> None:
    chat = ToolModel([
        Turn("", [ToolCall("1", "read_file", {"path": "../../etc/passwd", "start": 1, "end": 9}),
                  ToolCall("2", "find_symbol", {"name": "allocate"})]),
        Turn(json.dumps(VALID)),
    ])  # fmt: skip
    analysis = analyze(EVENT, cands(index), chat, tools=toolbox(index), rounds=3)
    assert not analysis.degraded and chat.held == 1
    results = [m for m in chat.conversed[1] if m["role"] == "tool"]
    assert results[0]["content"].startswith("refused:") and "passwd" in results[0]["content"]
    assert "def allocate" in results[1]["content"]
    assert not chat.completed  # the model answered with valid JSON: no extra call
    assert analysis.lookups[0].startswith("refused read ../../etc/passwd")
    assert any(lookup.startswith("looked up allocate in ") for lookup in analysis.lookups)
    assert analysis.read and analysis.read_chunks  # what it may cite, what the cache checks


def test_a_model_that_never_stops_calling_tools_is_cut_off_at_the_bound(index: MemoryIndex) -> None:
    chat = ToolModel([])
    analysis = analyze(EVENT, cands(index), chat, tools=toolbox(index), rounds=3)
    assert len(chat.conversed) == 3  # the rounds bound
    [(messages, schema)] = chat.completed  # then one call that must answer, with the schema
    assert "properties" in schema and "need_more" not in schema["properties"]
    assert messages[-1]["role"] == "user" and "No more lookups" in messages[-1]["content"]
    assert not analysis.degraded and len(analysis.lookups) == 3


def test_a_model_without_tools_falls_back_to_need_more_requests(index: MemoryIndex) -> None:
    asks = {**VALID, "need_more": [{"tool": "read_file", "path": PRICING, "start": 84, "end": 95}]}
    chat = ToolModel(
        [ToolsUnsupported("HTTP 400: x does not support tools")],
        json.dumps(asks),
        json.dumps(VALID),
    )
    analyze(EVENT, cands(index), chat, tools=toolbox(index), rounds=3)
    [(_, schema1), (second, schema2)] = chat.completed
    assert "need_more" in schema1["properties"] and schema1 == need_more_schema()
    assert "need_more" not in schema2["properties"]
    assert ">>91 |" in second[-1]["content"] and "Answer now" in second[-1]["content"]


def test_no_need_more_means_one_call_and_the_reply_validates(index: MemoryIndex) -> None:
    chat = ToolModel([ToolsUnsupported("no tools")], json.dumps({**VALID, "need_more": []}))
    analysis = analyze(EVENT, cands(index), chat, tools=toolbox(index), rounds=3)
    assert len(chat.completed) == 1 and not analysis.degraded and analysis.lookups == []


# -------------------------------------------------------------- cache and footnote


def test_the_cache_key_holds_what_is_known_before_asking() -> None:
    inv = Investigation(event=EVENT, group=GroupRef(fingerprint="f", window_start=0))
    plain = cache_identity(inv, "m", "v")
    assert cache_identity(inv, "m", "v", shown=["w1"]) != plain  # a frame window's code
    assert cache_identity(inv, "m", "v", rounds=3) != plain  # tools allowed
    assert cache_identity(inv, "m", "v", rounds=0) == plain  # no tools: as before


def test_the_footnote_lists_what_the_model_looked_up() -> None:
    analysis = Analysis.model_validate(
        {**VALID, "lookups": [f"read {PRICING}:40-95", "searched 'coupon allocation'"]}
    )
    assert lookups_note(analysis) == (
        f"analysis: looked up: read {PRICING}:40-95, searched 'coupon allocation'"
    )
    assert lookups_note(analysis.model_copy(update={"lookups": []})) is None
