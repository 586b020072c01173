"""The buttons' blocks and the parsing of Slack's block_actions payloads."""

from __future__ import annotations

from typing import Any

from shared.core.domain import ErrorEvent
from shared.devtools.simulators.slack_socket import block_actions
from shared.notify import actions
from shared.notify.feedback import GroupCase, event_text, labelled_case

FP = "f" * 40


def posted(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"channel": "C1", "ts": "1700000000.000100", "text": "x", "blocks": blocks}


def test_a_button_press_parses_to_the_message_it_was_pressed_on() -> None:
    payload = block_actions(posted([actions.buttons_block(FP)]), actions.MUTE, user="U123ABC")
    [action] = actions.parse_actions(payload)
    assert (action.kind, action.user, action.channel, action.value) == (
        actions.MUTE,
        "U123ABC",
        "C1",
        FP,
    )
    assert action.message_ts == "1700000000.000100"


def test_foreign_actions_and_malformed_payloads_are_ignored() -> None:
    payload = block_actions(posted([actions.buttons_block(FP)]), actions.MUTE)
    payload["actions"][0]["action_id"] = "somebody_elses"
    assert actions.parse_actions(payload) == []
    assert actions.parse_actions({"type": "view_submission"}) == []
    bad_user = block_actions(posted([actions.buttons_block(FP)]), actions.MUTE, user="<!here>")
    assert actions.parse_actions(bad_user) == []


def test_a_picked_option_is_an_index_and_a_typed_path_is_cleaned() -> None:
    blocks = [*actions.picker_blocks(FP, ["a.py", "b.py"]), actions.buttons_block(FP)]
    [pick] = actions.parse_actions(block_actions(posted(blocks), actions.PICK_FILE, option=1))
    assert pick.value == "1"
    typed = block_actions(posted(blocks), actions.TYPE_PATH, typed=" ./src/x.py ")
    [path] = actions.parse_actions(typed)
    assert actions.clean_path(path.value) == "src/x.py"
    assert actions.clean_path("a\nb") is None and actions.clean_path("  ") is None


def test_the_mention_is_built_from_a_checked_id_only() -> None:
    assert actions.mention("U0ONCALL") == "<@U0ONCALL>"
    assert actions.mention("<!channel>") == "someone"
    assert actions.mention("U1> <!here") == "someone"


def test_activity_and_picker_sit_before_the_buttons_and_are_replaced_not_stacked() -> None:
    blocks = [{"type": "header"}, actions.buttons_block(FP)]
    once = actions.with_blocks(blocks, activity=["a"], picker=actions.picker_blocks(FP, ["x"]))
    ids = [b.get("block_id") for b in once]
    assert ids == [None, "th-activity", "th-pick", "th-pick-path", "th-actions"]
    twice = actions.with_blocks(once, activity=["a", "b"])  # picker kept
    assert [b.get("block_id") for b in twice] == ids
    done = actions.with_blocks(twice, activity=["a", "b"], picker=[])
    assert [b.get("block_id") for b in done] == [None, "th-activity", "th-actions"]


def test_the_regressed_head_escapes_the_link_and_mentions_the_resolver() -> None:
    block = actions.regressed_block("U1AB", "on 2026-01-01", "https://x.slack.com/a|<!here>")
    text = block["text"]["text"]
    assert "<@U1AB>" in text and "<!here>" not in text and "%7C" in text


def test_a_labelled_case_is_in_the_format_eval_reads() -> None:
    event = ErrorEvent(
        service="shop",
        repo="sample",
        message="division by zero",
        exception_type="ZeroDivisionError",
        stacktrace='Traceback:\n  File "a.py", line 1\nZeroDivisionError: division by zero',
    )
    case = labelled_case(
        FP,
        GroupCase(event, ["a.py", "b.py"]),
        "a.py",
        answer="right",
        by="U1",
        at_ms=0,
        version="abc",
    )
    assert case["pypi_name"] == "sample" and case["pypi_version"] == "abc"
    assert case["gold_files"] == ["a.py"] and case["query_kind"] == "traceback"
    assert event_text(event).startswith("Traceback")
