"""Unit tests of error grouping: pairs of traces that must and must not share a fingerprint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shared.core.domain import ErrorEvent
from shared.intake.events import parse_event
from shared.intake.fingerprint import (
    FINGERPRINT_VERSION,
    CustomRule,
    GroupingConfig,
    fingerprint,
    frame_signature,
    load_grouping_config,
    normalize_message,
)
from shared.intake.trace import read_trace

DATA = Path(__file__).resolve().parents[1] / "data"
ROOT = Path(__file__).resolve().parents[2]


def py_trace(
    *,
    root: str = "/srv/app",
    lines: tuple[int, int, int] = (72, 53, 91),
    caller: str = "place_order",
    exc: str = "ZeroDivisionError: division by zero",
) -> str:
    return f"""Traceback (most recent call last):
  File "{root}/shopapp/app.py", line {lines[0]}, in handle
    return route(request)
  File "{root}/shopapp/services/order_service.py", line {lines[1]}, in {caller}
    breakdown = self._pricing.price_order(order)
  File "/usr/local/lib/python3.11/site-packages/pydantic/main.py", line 212, in validate
    return cls(**data)
  File "{root}/shopapp/services/pricing.py", line {lines[2]}, in _allocate_discount
    line.unit_discount_cents = round_half_up(share / line.quantity)
{exc}
"""


def event(trace: str, service: str = "shop-api", **kw: object) -> ErrorEvent:
    return parse_event(trace, service=service, repo="shop").model_copy(update=kw)


def fp(trace: str, service: str = "shop-api", config: GroupingConfig | None = None) -> str:
    return fingerprint(event(trace, service), config or GroupingConfig()).value


# --- must group ----------------------------------------------------------------------------------


def test_same_call_site_with_shifted_line_numbers_groups() -> None:
    assert fp(py_trace(lines=(72, 53, 91))) == fp(py_trace(lines=(75, 61, 104)))


def test_same_frames_with_different_ids_and_timestamps_in_the_message_groups() -> None:
    a = py_trace(exc="KeyError: order 4711 at 2026-11-30T10:41:03Z (req 0x7f3a2c1e8e28)")
    b = py_trace(exc="KeyError: order 98 at 2026-12-01T08:00:00Z (req 0x7f00aa)")
    assert fp(a) == fp(b)


def test_same_deploy_at_srv_app_and_app_groups() -> None:
    assert fp(py_trace(root="/srv/app")) == fp(py_trace(root="/app"))
    assert fp(py_trace(root="/srv/app")) == fp(py_trace(root="/usr/src/app"))


def test_the_real_sample_error_at_another_root_groups_with_itself() -> None:
    text = (DATA / "sample-error.txt").read_text()
    moved = text.replace("/srv/app/", "/app/").replace("line 91", "line 95")
    first = fingerprint(event(text))
    assert first.kind == "frames"
    assert first.value == fp(moved)
    assert first.frames[0] == "shopapp/services/pricing:_allocate_discount"
    assert first.frames[-1] == "shopapp/app:handle"


def _java_recursion(depth: int) -> str:
    head = "java.lang.StackOverflowError\n"
    body = "\tat com.shop.catalog.Tree.depth(Tree.java:12)\n" * depth
    tail = (
        "\tat com.shop.catalog.CatalogService.maxDepth(CatalogService.java:40)\n"
        "\tat org.springframework.web.servlet.FrameworkServlet.service(FrameworkServlet.java:897)\n"
    )
    return head + body + tail


def test_recursion_990_or_1000_frames_deep_groups() -> None:
    assert fp(_java_recursion(990)) == fp(_java_recursion(1000))
    # the JVM cuts a StackOverflowError at 1024 frames: only the repeated frame is printed
    cut = "java.lang.StackOverflowError\n" + "\tat com.shop.catalog.Tree.depth(Tree.java:12)\n"
    assert fp(cut * 1) == fp("java.lang.StackOverflowError\n" + cut[29:] * 990)
    assert fingerprint(event(_java_recursion(1000))).frames == (
        "com.shop.catalog.Tree:depth",
        "com.shop.catalog.CatalogService:maxDepth",
    )


def _python_mutual_recursion(depth: int) -> str:
    frames = ['  File "/app/walk.py", line 5, in main\n    visit(root)\n']
    for i in range(depth):
        name, line = ("visit", 9) if i % 2 == 0 else ("children", 14)
        frames.append(f'  File "/app/walk.py", line {line}, in {name}\n    call()\n')
    return (
        "Traceback (most recent call last):\n"
        + "".join(frames)
        + "RecursionError: maximum recursion depth exceeded\n"
    )


def test_mutual_recursion_cut_at_either_point_of_the_cycle_groups() -> None:
    assert fp(_python_mutual_recursion(990)) == fp(_python_mutual_recursion(1000))
    assert fp(_python_mutual_recursion(991)) == fp(_python_mutual_recursion(1000))


def test_message_only_events_with_different_ids_group() -> None:
    a = ErrorEvent(service="shop-api", repo="shop", message="user 12345 not found")
    b = ErrorEvent(service="shop-api", repo="shop", message="user 67890 not found")
    c = ErrorEvent(service="shop-api", repo="shop", message="order 12345 not found")
    assert fingerprint(a).kind == "message"
    assert fingerprint(a).value == fingerprint(b).value != fingerprint(c).value


def test_a_message_made_only_of_ids_groups_with_one_of_the_same_shape() -> None:
    def msg(text: str) -> str:
        return fingerprint(ErrorEvent(service="s", repo="r", message=text)).value

    assert msg("12345 67890") == msg("1 2")
    assert msg("123e4567-e89b-12d3-a456-426614174000") == msg(
        "9b2f0c1d-0000-4000-8000-00000000abcd"
    )
    assert msg("3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39") == msg("507f1f77bcf86cd799439011")
    assert msg("12345") != msg("123e4567-e89b-12d3-a456-426614174000")
    assert msg("") == msg("  ")  # no crash on nothing at all


# --- must not group ------------------------------------------------------------------------------


def test_same_exception_type_from_two_call_sites_does_not_group() -> None:
    assert fp(py_trace(caller="place_order")) != fp(py_trace(caller="reprice_order"))


def test_different_exception_types_at_the_same_site_do_not_group() -> None:
    assert fp(py_trace()) != fp(py_trace(exc="TypeError: unsupported operand"))


def test_same_error_in_two_services_does_not_group() -> None:
    assert fp(py_trace(), service="shop-api") != fp(py_trace(), service="billing")
    a = ErrorEvent(service="shop-api", repo="r", message="user 1 not found")
    b = ErrorEvent(service="billing", repo="r", message="user 1 not found")
    assert fingerprint(a).value != fingerprint(b).value


def test_frames_win_over_message_text() -> None:
    a = fingerprint(event(py_trace(exc="ValueError: coupon SPRING not valid")))
    b = fingerprint(event(py_trace(exc="ValueError: the cart was emptied")))
    assert a.kind == "frames" and a.value == b.value
    assert a.normalized_message != b.normalized_message


# --- chained causes ------------------------------------------------------------------------------


def test_python_chained_causes_contribute_their_types_outermost_first() -> None:
    text = (DATA / "traces" / "python.log").read_text()
    start = text.index("Traceback", text.index("could not start billing run"))
    chained = text[start : text.index("2026-11-30", start)]
    assert read_trace(chained).chain() == ("RuntimeError", "FileNotFoundError")
    alone = chained[chained.index("The above") :].split("\n", 2)[2]
    assert fp(chained) != fp(alone)
    during = text[text.index("Traceback", text.index("charge failed")) :]
    during = during[: during.index("2026-11-30")]
    assert read_trace(during).chain() == ("PaymentDeclined", "KeyError")


def test_java_caused_by_contributes_its_types() -> None:
    text = (DATA / "traces" / "java.log").read_text()
    trace = text[text.index("java.lang.RuntimeException") : text.index("2026-11-30 10:41:03.411")]
    assert read_trace(trace).chain() == (
        "java.lang.RuntimeException",
        "java.lang.IllegalStateException",
        "java.io.IOException",
    )
    without_root = trace[: trace.index("Caused by: java.io.IOException")]
    assert fp(trace) != fp(without_root)
    found = fingerprint(event(trace))
    assert "com.shop.orders.OrderService$Repo:reserve" in found.frames
    assert not any(f.startswith(("java.", "jdk.")) for f in found.frames)


def test_node_cause_and_go_panic_keep_in_app_frames_only() -> None:
    node = (DATA / "traces" / "node.log").read_text()
    node = node[node.index("Error: price") : node.index("2026-11-30T10:43:04")]
    assert read_trace(node).chain() == ("Error", "Error")
    assert all(f.startswith("src/server:") for f in frame_signature(read_trace(node).frames))
    go = (DATA / "traces" / "go.log").read_text()
    go = go[go.index("panic: runtime error: index") : go.index("exit status 2")]
    # only the panicking goroutine counts, not the other goroutines' stacks
    expected = ("main.(*Syncer):apply", "main.(*Syncer):run", "main:main")
    assert frame_signature(read_trace(go).frames) == expected


def test_rust_php_ruby_and_dotnet_keep_their_own_frames_not_their_runtimes() -> None:
    """Each language's runtime and libraries (Rust's std and crates, PHP's vendor/, Ruby's
    stdlib and gems, .NET's System.*) stay out of the signature."""
    frames = DATA / "frames"
    rust = frame_signature(read_trace((frames / "rust-backtrace.txt").read_text()).frames)
    assert rust == ("src/orders/parse:quantity", "src/main:main")
    php = frame_signature(read_trace((frames / "php-chained.txt").read_text()).frames)
    assert not any("Pipeline" in key for key in php) and "src/Payment/Gateway:send" in php
    ruby = frame_signature(read_trace((frames / "ruby34.txt").read_text()).frames)
    assert ruby == ("app/models/order:total", "app/controllers/orders_controller:show")
    dotnet = frame_signature(read_trace((frames / "dotnet-inner.txt").read_text()).frames)
    assert dotnet and not any("System" in key or "Task" in key for key in dotnet)


# --- in-app frames -------------------------------------------------------------------------------


def test_library_frames_do_not_change_the_group() -> None:
    with_lib = py_trace()
    without_lib = with_lib.replace(
        '  File "/usr/local/lib/python3.11/site-packages/pydantic/main.py", line 212, in '
        "validate\n    return cls(**data)\n",
        "",
    )
    assert with_lib != without_lib
    assert fp(with_lib) == fp(without_lib)


def test_a_crash_entirely_inside_libraries_uses_all_frames() -> None:
    trace = """Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/usr/lib/python3.11/json/decoder.py", line 337, in decode
    obj, end = self.raw_decode(s, idx=_w(s, 0).end())
json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)
"""
    found = fingerprint(event(trace))
    assert found.kind == "frames"
    assert found.frames == ("python3.11/json/decoder:decode", "<frozen runpy>:_run_module_as_main")


def test_in_app_prefixes_pick_the_frames() -> None:
    only_app = GroupingConfig(in_app_prefixes=("shopapp/services/",))
    found = fingerprint(event(py_trace()), only_app)
    assert found.frames == (
        "shopapp/services/pricing:_allocate_discount",
        "shopapp/services/order_service:place_order",
    )
    # the handler changed: same group under this config, different under the heuristics
    other = py_trace().replace("in handle", "in dispatch")
    assert fp(py_trace(), config=only_app) == fp(other, config=only_app)
    assert fp(py_trace()) != fp(other)


def test_absolute_in_app_prefix_is_stripped_as_a_deployment_root() -> None:
    config = GroupingConfig(in_app_prefixes=("/home/ci/build/shop/",))
    local = py_trace(root="/home/ci/build/shop")
    assert fingerprint(event(local), config).frames[0] == (
        "shopapp/services/pricing:_allocate_discount"
    )


def test_max_frames_keeps_the_frames_nearest_the_raise() -> None:
    found = fingerprint(event(py_trace()), GroupingConfig(max_frames=1))
    assert found.frames == ("shopapp/services/pricing:_allocate_discount",)


# --- big traces ----------------------------------------------------------------------------------


def test_ten_thousand_distinct_frames_fingerprint_fast() -> None:
    frames = "".join(
        f'  File "/app/gen/mod{i}.py", line {i}, in f{i}\n    step()\n' for i in range(10_000)
    )
    trace = "Traceback (most recent call last):\n" + frames + "ValueError: deep\n"
    ev = event(trace)
    start = time.thread_time()
    found = fingerprint(ev)
    assert time.thread_time() - start < 0.5
    assert len(found.frames) == 30 and found.frames[0] == "gen/mod9999:f9999"


def test_ten_thousand_recursive_frames_fingerprint_fast() -> None:
    ev = event(_java_recursion(10_000))
    start = time.thread_time()
    found = fingerprint(ev)
    assert time.thread_time() - start < 0.5
    assert found.value == fp(_java_recursion(990))


# --- the value -----------------------------------------------------------------------------------


def test_value_is_versioned_sha1_and_stable_across_processes() -> None:
    value = fp(py_trace())
    assert value.startswith(f"v{FINGERPRINT_VERSION}:") and len(value) == 3 + 40
    code = (
        "import sys; sys.path.insert(0, 'tests/unit'); import test_fingerprint as t; "
        "print(t.fp(t.py_trace()))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == value


def test_normalize_message_replaces_volatile_parts() -> None:
    message = (
        "order 4711 at 2026-11-30T10:41:03.117Z from 10.0.3.7:5432 id 123e4567-e89b-12d3-a456-"
        "426614174000 obj 0x7f3a2c1e8e28 file /tmp/pytest-7/x.json 'amex' \"sku-12\" by "
        "bob@example.com via https://api.example.com/v1?id=9 tmp "
        r"C:\Users\bob\AppData\Local\Temp\tmp1a2b\out.txt"
        " sha 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 epoch 1795950363512 mac /var/folders/x1/T/y"
    )
    assert normalize_message(message) == (
        "order <num> at <ts> from <ip> id <uuid> obj <hex> file <path> <str> <str> by <email> via "
        "<url> tmp <path> sha <hex> epoch <ts> mac <path>"
    )
    assert normalize_message("can't find user's   cart\n") == "can't find user's cart"
    assert len(normalize_message("x " * 10_000)) == 1000


# --- custom rules and the config file ------------------------------------------------------------


def test_custom_rule_gives_a_fixed_key_when_type_and_message_match() -> None:
    rule = CustomRule(match_type=r"Timeout", match_message=r"^upstream", fingerprint="upstream")
    config = GroupingConfig(rules=(rule,))
    a = event(py_trace(exc="GatewayTimeoutError: upstream pricing timed out"))
    b = event(py_trace(caller="reprice", exc="ReadTimeoutError: upstream stock timed out"))
    c = event(py_trace(exc="GatewayTimeoutError: local cache timed out"))
    assert fingerprint(a, config).kind == "rule"
    assert fingerprint(a, config).value == fingerprint(b, config).value
    assert fingerprint(c, config).kind == "frames"
    other_service = event(py_trace(exc="GatewayTimeoutError: upstream x"), service="billing")
    assert fingerprint(other_service, config).value != fingerprint(a, config).value


def test_a_trace_that_landed_in_the_message_still_groups_by_frames() -> None:
    # An event built elsewhere (an older client, a hand-written JSON event) may carry the whole
    # trace in its message and no stacktrace; its frames still count.
    ev = ErrorEvent(
        service="shop-api", repo="shop", message=py_trace(exc="GatewayTimeout: upstream pricing x")
    )
    found = fingerprint(ev)
    assert found.kind == "frames"
    assert found.exception_types == ("GatewayTimeout",)
    assert found.value == fp(py_trace(lines=(1, 2, 3), exc="GatewayTimeout: upstream x"))


def test_custom_rule_needs_a_fingerprint_and_a_match() -> None:
    with pytest.raises(ValueError, match="fingerprint"):
        CustomRule(match_type="X")
    with pytest.raises(ValueError, match="match_type"):
        CustomRule(fingerprint="x")
    with pytest.raises(ValueError, match="bad regex"):
        CustomRule(match_type="(", fingerprint="x")


CONFIG = {
    "services": {
        "shop-api": {
            "in_app": ["shopapp/services/"],
            "rules": [{"type": "Timeout$", "fingerprint": "timeouts"}],
        }
    },
    "default": {"rules": [{"match_message": "disk full", "fingerprint": "disk"}], "max_frames": 12},
}


def test_config_file_gives_in_app_prefixes_and_rules_per_service(tmp_path: Path) -> None:
    path = tmp_path / "grouping.json"
    path.write_text(json.dumps(CONFIG))
    shop = load_grouping_config(path, "shop-api")
    assert shop.in_app_prefixes == ("shopapp/services/",)
    assert [r.fingerprint for r in shop.rules] == ["timeouts", "disk"]
    assert shop.max_frames == 12
    found = fingerprint(event(py_trace(exc="GatewayTimeout: x")), shop)
    assert found.kind == "rule"
    other = load_grouping_config(path, "billing")
    assert other.in_app_prefixes == () and [r.fingerprint for r in other.rules] == ["disk"]


def test_yaml_config_file_reads_the_same(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "grouping.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    json_path = tmp_path / "grouping.json"
    json_path.write_text(json.dumps(CONFIG))
    assert load_grouping_config(path, "shop-api") == load_grouping_config(json_path, "shop-api")


def test_missing_file_or_no_path_gives_defaults(tmp_path: Path) -> None:
    assert load_grouping_config(None, "x") == GroupingConfig()
    assert load_grouping_config(tmp_path / "absent.json", "x") == GroupingConfig()


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[1, 2]",
        '{"services": {"shop-api": {"in_app": "shopapp/"}}}',
        '{"services": {"shop-api": {"inapp": ["x"]}}}',
        '{"default": {"rules": [{"fingerprint": "x", "type": "("}]}}',
        '{"default": {"rules": [{"type": "X"}]}}',
        '{"default": {"max_frames": 0}}',
    ],
)
def test_malformed_config_raises_naming_the_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "grouping.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=r"grouping\.json"):
        load_grouping_config(path, "shop-api")
