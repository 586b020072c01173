"""The signature a group is remembered by, and the "looks like" line of the message."""

from __future__ import annotations

import json

from shared.core.domain import Candidate, ChunkHit, ErrorEvent, Investigation, Recalled
from shared.groups.memory import MAX_FRAMES, SIGNATURE_CHARS, signature
from shared.intake.events import parse_event
from shared.notify.message import build_message

INNER = [  # MAX_FRAMES deep: the entry points' frames are past the bound
    ("/srv/app/shop/api/orders.py", 20, "post"),
    ("/srv/app/shop/services/checkout.py", 33, "checkout"),
    ("/srv/app/shop/services/orders.py", 53, "place_order"),
    ("/srv/app/shop/services/pricing.py", 61, "price_order"),
    ("/srv/app/shop/services/pricing.py", 80, "_apply_coupon"),
    ("/srv/app/shop/services/pricing.py", 91, "_allocate_discount"),
]
HTTP_ENTRY = [
    ("/srv/app/shop/app.py", 72, "handle"),
    ("/srv/app/shop/api/handlers.py", 30, "create_order"),
    ("/srv/app/shop/api/middleware.py", 12, "authenticate"),
]
JOB_ENTRY = [
    ("/opt/app/shop/worker.py", 210, "run_forever"),
    ("/opt/app/shop/jobs/reprice.py", 44, "reprice_open_orders"),
    ("/opt/app/shop/jobs/base.py", 9, "execute"),
]
ERROR = "ZeroDivisionError: division by zero"


def trace(frames: list[tuple[str, int, str]], error: str = ERROR) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, function in frames:
        lines += [f'  File "{path}", line {line}, in {function}', "    call()"]
    return "\n".join([*lines, error]) + "\n"


def event(text: str, service: str = "shop-api") -> ErrorEvent:
    return parse_event(text, service=service, repo="shop")


def test_another_entry_point_service_or_ids_leave_the_signature_as_it_was() -> None:
    http = signature(event(trace(HTTP_ENTRY + INNER, "KeyError: 'sku-1234' in order 991")))
    job = signature(
        event(trace(JOB_ENTRY + INNER, "KeyError: 'sku-9' in order 17"), service="repricer")
    )

    assert http == job
    assert "KeyError" in http and "order" in http and "1234" not in http and "sku" not in http
    assert http.splitlines()[1] == "at shop/services/pricing:_allocate_discount"  # innermost first
    assert "authenticate" not in http and "run_forever" not in http  # outer frames past the bound


def test_line_numbers_and_library_frames_do_not_count() -> None:
    moved = [(p, line + 7, f) for p, line, f in INNER]
    library = [("/usr/lib/python3.11/site-packages/sqlalchemy/orm/session.py", 3, "flush")]

    assert signature(event(trace(INNER + library))) == signature(event(trace(moved)))


def test_another_exception_or_another_innermost_frame_changes_it() -> None:
    base = signature(event(trace(HTTP_ENTRY + INNER)))
    other_error = signature(event(trace(HTTP_ENTRY + INNER, "TypeError: unsupported operand")))
    other_frame = signature(
        event(trace(HTTP_ENTRY + INNER[:-1] + [("/srv/app/shop/services/tax.py", 5, "rate")]))
    )

    assert other_error != base and "TypeError" in other_error
    assert other_frame != base and "shop/services/tax:rate" in other_frame


def test_a_chain_reads_root_cause_first_and_the_signature_is_bounded() -> None:
    chained = (
        trace(INNER[:1], "KeyError: 'amex'")
        + "\nDuring handling of the above exception, another exception occurred:\n\n"
        + trace(HTTP_ENTRY, "PaymentDeclined: card brand 'amex' not accepted")
    )
    lines = signature(event(chained)).splitlines()
    assert lines[:2] == ["KeyError", "PaymentDeclined: card brand not accepted"]

    deep = [(f"/srv/app/shop/m{i}.py", i + 1, f"f{i}") for i in range(200)]
    huge = signature(event(trace(deep, "ValueError: " + "x y " * 50_000)))
    assert len(huge) <= SIGNATURE_CHARS
    assert len([ln for ln in huge.splitlines() if ln.startswith("at ")]) <= MAX_FRAMES


def investigation(recalled: Recalled | None) -> Investigation:
    hit = ChunkHit(chunk_id="c", path="shop/services/orders.py", start_line=1, end_line=9,
                   text="", score=1.0)  # fmt: skip
    return Investigation(
        event=event(trace(HTTP_ENTRY + INNER)),
        candidates=[Candidate(path=hit.path, score=1.0, chunks=[hit])],
        recalled=recalled,
    )


REMEMBERED = Recalled(
    fingerprint="v1:abc",
    score=0.93,
    title="checkout: ZeroDivisionError: division by zero <!channel> `x`",
    service="checkout",
    repo="shop",
    first_seen_ms=1_780_000_000_000,
    file="shop/services/pricing.py",
    resolved_by="U0ONCALL",
    resolved_at_ms=1_780_100_000_000,
    commit="A1B2C3D4E5",
    link="https://team.slack.com/archives/C1/p1780000000000100",
)


def test_the_message_says_who_resolved_the_group_it_looks_like_and_shows_its_file() -> None:
    text, blocks = build_message(investigation(REMEMBERED))

    [line] = [b["text"]["text"] for b in blocks if b.get("block_id") == "th-memory"]
    assert line.startswith("*Seen before:* looks like `checkout: ZeroDivisionError")
    assert "(first seen 2026-05-28 " in line and "resolved by <@U0ONCALL> on 2026-05-30" in line
    assert "code `a1b2c3d`" in line
    assert "<https://team.slack.com/archives/C1/p1780000000000100|thread>" in line
    assert "<!channel>" not in json.dumps(blocks) and "&lt;!channel&gt;" in line
    files = next(b["text"]["text"] for b in blocks if "Relevant files" in json.dumps(b))
    assert "`shop/services/pricing.py` — _from memory" in files
    assert "Seen before: looks like" in text and "resolved by U0ONCALL" in text


def test_a_field_from_outside_that_is_no_id_sha_or_link_is_not_shown() -> None:
    forged = REMEMBERED.model_copy(update={"resolved_by": "<!here>", "commit": "not-a-sha",
                                           "link": "javascript:alert(1)"})  # fmt: skip
    checked = Recalled.model_validate(forged.model_dump())

    _, blocks = build_message(investigation(checked))

    [line] = [b["text"]["text"] for b in blocks if b.get("block_id") == "th-memory"]
    assert line.endswith("— not resolved yet") and "javascript" not in json.dumps(blocks)


def test_no_memory_line_without_a_close_group_and_the_korean_one_reads_korean() -> None:
    from shared.notify.message import MessageOptions

    _, plain_blocks = build_message(investigation(None))
    _, ko = build_message(investigation(REMEMBERED), MessageOptions(language="ko"))

    assert not any(b.get("block_id") == "th-memory" for b in plain_blocks)
    assert "from memory" not in json.dumps(plain_blocks)
    [line] = [b["text"]["text"] for b in ko if b.get("block_id") == "th-memory"]
    assert line.startswith("*이전 사례:*") and "U0ONCALL>님이" in line


def test_the_remembered_file_is_not_repeated_when_shown_already_nor_for_another_repo() -> None:
    shown = REMEMBERED.model_copy(update={"file": "shop/services/orders.py"})
    elsewhere = REMEMBERED.model_copy(update={"repo": "billing"})

    for recalled in (shown, elsewhere):
        _, blocks = build_message(investigation(recalled))
        assert "from memory" not in json.dumps(blocks)
