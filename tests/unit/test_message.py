"""Unit tests of the Slack message built for an investigation, and of its console rendering."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from shared.core.domain import (
    Analysis,
    Candidate,
    ChunkHit,
    ErrorEvent,
    FileRef,
    Hypothesis,
    Investigation,
)
from shared.notify.message import (
    MAX_BLOCKS,
    SECTION_MAX,
    MessageOptions,
    build_message,
    escape,
    trace_reply,
)
from shared.notify.notifiers import plain, render_console

MENTIONS = "<!channel> <!here> <@U123> <!subteam^S1|oncall> *bold* &amp; <https://evil|x>"


def event(**kw: Any) -> ErrorEvent:
    fields: dict[str, Any] = {
        "service": "checkout",
        "repo": "shop",
        "message": "division by zero",
        "exception_type": "ZeroDivisionError",
        "stacktrace": 'File "shop/order_service.py", line 12\nZeroDivisionError: division by zero',
    }
    return ErrorEvent(**{**fields, **kw})


def candidate(path: str, start: int = 10, end: int = 14) -> Candidate:
    chunk = ChunkHit(chunk_id=path, path=path, start_line=start, end_line=end, text="x", score=0.1)
    return Candidate(path=path, score=0.1, chunks=[chunk])


def analysis(**kw: Any) -> Analysis:
    fields: dict[str, Any] = {
        "summary": "Average price divides by the item count of an empty cart.",
        "hypotheses": [
            Hypothesis(cause="Empty cart", confidence=0.8, evidence=["shop/order_service.py:10-14"])
        ],
        "suggested_fix": "Return 0 for an empty cart.",
        "relevant_files": [FileRef(path="shop/order_service.py", start_line=10, end_line=14)],
        "confidence": 0.8,
        "model": "qwen2.5-coder:7b",
    }
    return Analysis(**{**fields, **kw})


def all_text(blocks: list[dict[str, Any]]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def mrkdwn_texts(blocks: list[dict[str, Any]]) -> list[str]:
    out = []
    for b in blocks:
        if b["type"] == "section":
            out.append(b["text"]["text"])
        elif b["type"] == "context":
            out.extend(e["text"] for e in b["elements"])
    return out


# ---------------------------------------------------------------------------- escape


def test_escape_replaces_the_three_control_characters() -> None:
    assert escape("a & b < c > d") == "a &amp; b &lt; c &gt; d"


def test_escape_of_an_entity_escapes_its_ampersand_so_it_shows_literally() -> None:
    assert escape("&lt;") == "&amp;lt;"


# ----------------------------------------------------------------------- mentions


def test_untrusted_text_cannot_mention_anyone() -> None:
    hostile = f"boom {MENTIONS}"
    inv = Investigation(
        event=event(message=hostile, stacktrace=f"Traceback\nValueError: {hostile}"),
        candidates=[candidate(f"shop/{MENTIONS}.py")],
        analysis=analysis(
            summary=hostile,
            hypotheses=[Hypothesis(cause=hostile, confidence=0.5, evidence=[hostile])],
            suggested_fix=hostile,
            relevant_files=[
                FileRef(path=f"a{MENTIONS}.py", start_line=1, end_line=2, reason=hostile)
            ],
            model=hostile,
        ),
        notes=[f"rerank: unavailable ({hostile})"],
    )
    text, blocks = build_message(inv)
    for rendered in [text, *mrkdwn_texts(blocks)]:
        assert "<!" not in rendered
        assert "<@" not in rendered
        assert "<http" not in rendered
    assert "&lt;!channel&gt;" in text
    assert "&lt;!channel&gt;" in all_text(blocks)


def test_candidate_paths_with_mentions_are_escaped_when_there_is_no_analysis() -> None:
    inv = Investigation(event=event(), candidates=[candidate("shop/<!here>.py")])
    text, blocks = build_message(inv)
    assert "<!" not in text
    assert all("<!" not in t for t in mrkdwn_texts(blocks))


# ------------------------------------------------------------------------- limits


@pytest.mark.parametrize("unit", ["<>&" * 40, "a" * 120, "x & y < z > w " * 9])
def test_a_long_trace_keeps_its_closing_fence_in_the_message_and_the_thread_reply(
    unit: str,
) -> None:
    # Escaping grows "<" to "&lt;": clipping before escaping left sections over the limit,
    # and Slack's clip of the whole cut off the closing ``` (the rest of the message read as
    # code).
    inv = Investigation(event=event(stacktrace="\n".join(unit for _ in range(12))))
    _, blocks = build_message(inv)
    [section] = [b for b in blocks if "```" in b.get("text", {}).get("text", "")][-1:]
    for text in (section["text"]["text"], trace_reply(inv)):
        assert len(text) <= SECTION_MAX
        assert text.endswith("```") and text.count("```") == 2
        assert re.search(r"&(?!amp;|lt;|gt;)", text) is None  # no half an escape


def test_huge_analysis_stays_within_slack_limits() -> None:
    huge = "word " * 20_000
    inv = Investigation(
        event=event(
            message=huge,
            stacktrace="\n".join(f"  at f{i} {huge[:500]}" for i in range(50)),
        ),
        candidates=[candidate(f"shop/m{i}.py") for i in range(100)],
        analysis=analysis(
            summary=huge,
            hypotheses=[Hypothesis(cause=huge, confidence=0.3, evidence=[huge] * 5)] * 10,
            suggested_fix=huge,
            relevant_files=[
                FileRef(path=f"shop/m{i}.py", start_line=1, end_line=2, reason=huge)
                for i in range(100)
            ],
        ),
        notes=[huge] * 30,
    )
    text, blocks = build_message(inv)
    assert len(blocks) <= MAX_BLOCKS
    for b in blocks:
        if b["type"] == "section":
            assert len(b["text"]["text"]) <= SECTION_MAX
        if b["type"] == "context":
            assert len(b["elements"]) <= 10
            assert all(len(e["text"]) <= SECTION_MAX for e in b["elements"])
        if b["type"] == "header":
            assert len(b["text"]["text"]) <= 150
    assert len(text) < 40_000


def test_header_names_the_service_and_the_exception_type() -> None:
    _, blocks = build_message(Investigation(event=event(), analysis=analysis()))
    assert blocks[0]["type"] == "header"
    header = blocks[0]["text"]["text"]
    assert "checkout" in header
    assert "ZeroDivisionError" in header


def test_header_without_exception_type_still_names_the_service() -> None:
    _, blocks = build_message(Investigation(event=event(exception_type=None)))
    assert blocks[0]["text"]["text"].startswith("checkout")


def test_analysis_summary_cause_fix_and_files_are_shown() -> None:
    inv = Investigation(
        event=event(), analysis=analysis(), candidates=[candidate("shop/order_service.py")]
    )
    text, blocks = build_message(inv)
    shown = all_text(blocks)
    for part in [
        "Average price divides",
        "Probable causes",
        "Empty cart",
        "80%",
        "Return 0 for an empty cart",
        "shop/order_service.py:10-14",
    ]:
        assert part in shown
        assert part in text or part == "Probable causes"


def test_weak_evidence_is_said_and_no_confidence_reaches_fifty_percent() -> None:
    """Nothing retrieved (a service that is not indexed) or only weak matches: the model's
    hypotheses are shown as possible leads, their confidence capped, whatever it claimed."""
    weak_cases = [
        Investigation(event=event(), analysis=analysis()),  # no code retrieved at all
        Investigation(
            event=event(),
            analysis=analysis(),
            candidates=[
                candidate("shop/order_service.py").model_copy(update={"rerank_score": -5.0})
            ],
        ),
    ]
    for inv in weak_cases:
        text, blocks = build_message(inv, MessageOptions(min_relevance=0.5))
        shown = all_text(blocks)
        assert "Possible leads (weak evidence)" in shown and "Probable causes" not in shown
        assert "Possible lead 1 (30%)" in text
        percents = [int(p) for p in re.findall(r"(\d+)%", shown + text)]
        assert percents and max(percents) <= 30


# ---------------------------------------------------------------------- footnotes


def footnotes(blocks: list[dict[str, Any]]) -> list[str]:
    return [
        e["text"]
        for b in blocks
        if b["type"] == "context"
        for e in b["elements"]
        if e["text"].startswith("⚠")
    ]


def test_notes_appear_as_footnotes() -> None:
    inv = Investigation(
        event=event(),
        candidates=[candidate("shop/order_service.py")],
        notes=["rerank: unavailable (x)", "embedding: failed (y); keyword search only"],
    )
    text, blocks = build_message(inv)
    notes = footnotes(blocks)
    assert any("rerank: unavailable (x)" in n for n in notes)
    assert any("embedding: failed (y)" in n for n in notes)
    assert "rerank: unavailable (x)" in text


def test_degraded_analysis_appears_as_a_footnote_without_a_confidence() -> None:
    degraded = analysis(
        summary="Automatic analysis unavailable.",
        hypotheses=[],
        relevant_files=[],
        suggested_fix="",
        confidence=0.0,
        degraded=True,
        degraded_reason="LLM failed: timed out",
    )
    inv = Investigation(event=event(), candidates=[candidate("shop/pricing.py")], analysis=degraded)
    text, blocks = build_message(inv)
    assert any("degraded" in n and "LLM failed: timed out" in n for n in footnotes(blocks))
    assert "confidence 0%" not in all_text(blocks)
    assert "shop/pricing.py:10-14" in all_text(blocks)  # retrieval's files still listed
    assert "degraded" in text


def test_no_analysis_and_no_candidates_says_no_relevant_code_was_found() -> None:
    text, blocks = build_message(Investigation(event=event()))
    assert "no relevant code was found" in all_text(blocks)
    assert "no relevant code found" in text


def test_without_analysis_retrieved_files_are_listed() -> None:
    inv = Investigation(event=event(), candidates=[candidate("a.py", 1, 5), candidate("b.py")])
    text, blocks = build_message(inv)
    assert "a.py:1-5" in all_text(blocks)
    assert "b.py:10-14" in all_text(blocks)
    assert "a.py:1-5, b.py:10-14" in text


# -------------------------------------------------------------------- console view


def test_console_rendering_keeps_underscores_in_file_names() -> None:
    inv = Investigation(event=event(), analysis=analysis())
    _, blocks = build_message(inv)
    out = render_console(blocks)
    assert "shop/order_service.py:10-14" in out
    assert "*Summary:*" not in out and "Summary:" in out  # emphasis markers removed


def test_console_rendering_shows_escaped_text_as_typed() -> None:
    inv = Investigation(event=event(message="expected <Order> & got None"))
    _, blocks = build_message(inv)
    out = render_console(blocks)
    assert "expected <Order> & got None" in out
    assert "&lt;" not in out


@pytest.mark.parametrize(
    ("mrkdwn", "shown"),
    [
        ("`order_service.py`", "`order_service.py`"),
        ("*Error:* bad", "Error: bad"),
        ("_(confidence 80%)_", "(confidence 80%)"),
        ("a &lt;b&gt; &amp; c", "a <b> & c"),
        ("&amp;lt;", "&lt;"),  # an escaped entity shows as the entity the user typed
        ("__init__.py and my_var_name", "__init__.py and my_var_name"),
    ],
)
def test_plain_turns_mrkdwn_into_terminal_text(mrkdwn: str, shown: str) -> None:
    assert plain(mrkdwn) == shown


def test_console_rendering_keeps_star_args_in_stack_traces() -> None:
    trace = 'File "shop/app.py", line 3, in wrapper\n    return fn(*args, **kwargs)\nValueError: x'
    _, blocks = build_message(Investigation(event=event(stacktrace=trace)))
    assert "return fn(*args, **kwargs)" in render_console(blocks)


def test_the_release_an_sdk_reported_is_shown_escaped() -> None:
    ev = event(attributes={"release": "1.4.2", "environment": "prod"})
    text, blocks = build_message(Investigation(event=ev, candidates=[], analysis=analysis()))
    context = next(b for b in blocks if b["type"] == "context")["elements"][0]["text"]
    assert "release `1.4.2`" in context
    assert "Release: 1.4.2" in text
    hostile = event(attributes={"release": "<!channel>"})
    _, blocks = build_message(Investigation(event=hostile, candidates=[], analysis=None))
    assert "<!channel>" not in all_text(blocks)
    _, blocks = build_message(Investigation(event=event(), candidates=[], analysis=None))
    assert "release" not in all_text(blocks)
