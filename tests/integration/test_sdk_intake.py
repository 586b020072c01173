"""Errors straight from the SDKs: real Sentry SDKs (Python, Node) and the OpenTelemetry SDK
pointed at a real ``tracehound ingest``, each error followed to the analysis chain it starts.

No payload here is written by hand except the bad ones: the SDKs build what they send. A chain
start is checked as the group being new and the event waiting on the ``embed`` queue. A real
intake worker takes what the Sentry routes queue; no other workers run.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from shared.core import keys
from shared.core.domain import ErrorEvent
from shared.devtools.llama_server import cache_root
from shared.intake.trace import sdk_frames
from shared.intake.traces import parse_frames
from shared.stack.localstack import start_ingest, start_redis, start_worker
from tests.conftest import SETTLE_OFF, counted_in_groups

pytestmark = pytest.mark.integration

TOKEN = "ingest-secret"
KEY = "0123456789abcdef0123456789abcdef"  # the DSN's public key
MAX_BODY = 200_000


class Server:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.redis_proc, self.redis_url = start_redis(workdir)
        env = {
            "TRACEHOUND_REDIS_URL": self.redis_url,
            "TRACEHOUND_INGEST_TOKEN": TOKEN,
            "TRACEHOUND_SENTRY_KEYS": KEY,
            "TRACEHOUND_SENTRY_PROJECTS": (
                "7=shop-api:sample,8=retry-check,12=node-shop,13=node-bundle"
            ),
            "TRACEHOUND_INGEST_MAX_BODY_BYTES": str(MAX_BODY),
            "TRACEHOUND_INGEST_MAX_RECORDS": "100",
            **SETTLE_OFF,
        }
        self.ingest, self.url = start_ingest(workdir, env)
        # The Sentry routes queue their events for the intake worker, as /v1/events does.
        self.worker = start_worker(
            "intake", ["intake"], 1, workdir, {**env, "TRACEHOUND_DATA_DIR": str(workdir)}
        )
        self.client = redis.Redis.from_url(self.redis_url)

    def dsn(self, project: str = "7", key: str = KEY) -> str:
        return f"http://{key}@{self.url.removeprefix('http://')}/{project}"

    def queued(self, timeout: float = 20.0, count: int = 1) -> list[ErrorEvent]:
        """The events of the analysis chains waiting on the embed queue (at least ``count``)."""
        deadline = time.monotonic() + timeout
        while True:
            raw = self.client.lrange("embed", 0, -1)
            if len(raw) >= count or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        events = []
        for message in reversed(raw):  # LPUSHed: the oldest is last
            body = json.loads(base64.b64decode(json.loads(message)["body"]))
            events.append(ErrorEvent.model_validate(body[0][0]["event"]))
        return events

    def envelope(self, body: bytes, project: str = "7", **headers: str) -> httpx.Response:
        auth = {"X-Sentry-Auth": f"Sentry sentry_version=7, sentry_key={KEY}"}
        return httpx.post(
            f"{self.url}/api/{project}/envelope/",
            content=body,
            headers={**auth, "Content-Type": "application/x-sentry-envelope", **headers},
            timeout=30,
        )

    def taken(self, messages: int, timeout: float = 20.0) -> None:
        """Until the intake worker has taken ``messages`` queued messages (since the flush)."""
        deadline = time.monotonic() + timeout
        while int(self.client.get(keys.INTAKE_TAKEN) or 0) < messages:
            assert time.monotonic() < deadline, "the intake worker did not take the request"
            time.sleep(0.05)

    def settled(self, timeout: float = 30.0) -> None:
        """Until every queued body is taken: a body's key is deleted in the MULTI that ends
        its take, after its events were counted (shared/intake/batch.py)."""
        deadline = time.monotonic() + timeout
        while next(self.client.scan_iter(match=keys.queued_body("*")), None) is not None:
            assert time.monotonic() < deadline, "the intake worker left queued bodies"
            time.sleep(0.05)

    def close(self) -> None:
        self.ingest.stop()
        self.worker.stop()
        self.client.close()
        self.redis_proc.stop()


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("sdk"))
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def server(module_server: Server) -> Iterator[Server]:
    module_server.client.flushdb()
    yield module_server
    module_server.settled()  # nothing of this test is counted after the next one's flush


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 120) -> str:
    done = subprocess.run(
        argv,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


# --- Python sentry-sdk ---------------------------------------------------------------------

SENTRY_APP = """
import logging, sys
import sentry_sdk
from sentry_sdk.integrations.logging import LoggingIntegration

from shopapp.checkout import place_order

sentry_sdk.init(
    dsn=sys.argv[1],
    release="1.4.2",
    environment="staging",
    server_name="web-1",
    integrations=[LoggingIntegration(level=logging.INFO, event_level=logging.ERROR)],
)
sentry_sdk.set_tag("region", "eu-west-1")
logging.getLogger().setLevel(logging.INFO)
logging.getLogger("shopapp").info("loading cart 42 with api_key=sk_live_abcdefghijklmnop1234")
mode = sys.argv[2]
try:
    place_order({"sku": "A-1", "qty": "two"})
except Exception as exc:
    if mode == "capture":
        sentry_sdk.capture_exception(exc)
    else:
        logging.getLogger("shopapp.orders").error("order %s failed", 42, exc_info=True)
sentry_sdk.flush(10)
"""

CHECKOUT = """
class CheckoutError(Exception):
    pass


def parse_quantity(order):
    return int(order["qty"])


def place_order(order):
    try:
        return parse_quantity(order)
    except ValueError as exc:
        raise CheckoutError("cannot place order A-1") from exc
"""


@pytest.fixture(scope="module")
def python_app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("sentry_sdk", reason="sentry-sdk is in the dev extra")
    app = tmp_path_factory.mktemp("pyapp")
    (app / "shopapp").mkdir()
    (app / "shopapp" / "__init__.py").write_text("")
    (app / "shopapp" / "checkout.py").write_text(CHECKOUT)
    (app / "main.py").write_text(SENTRY_APP)
    return app


def run_python_app(app: Path, dsn: str, mode: str) -> None:
    run([sys.executable, "main.py", dsn, mode], cwd=app, env={"PYTHONPATH": str(app)})


def test_python_sentry_sdk_chained_exception_becomes_an_event_and_starts_a_chain(
    server: Server, python_app: Path
) -> None:
    run_python_app(python_app, server.dsn(), "capture")
    [event] = server.queued()
    assert event.service == "shop-api" and event.repo == "sample"  # TRACEHOUND_SENTRY_PROJECTS
    assert event.exception_type == "CheckoutError"
    assert event.message == "cannot place order A-1"
    assert len(event.id) == 32  # the SDK's event_id
    attrs = event.attributes
    assert attrs["release"] == "1.4.2" and attrs["environment"] == "staging"
    assert attrs["server_name"] == "web-1" and attrs["tags"]["region"] == "eu-west-1"
    assert attrs["sentry"]["project"] == "7" and attrs["sentry"]["platform"] == "python"
    # Frames: in-app ones, nearest the raise first, the cause's after the thrown exception's.
    frames = [(f["function"], f["in_app"]) for f in attrs["frames"]]
    assert frames[:3] == [("place_order", True), ("<module>", True), ("parse_quantity", True)]
    assert attrs["frames"][0]["file"].endswith("shopapp/checkout.py")
    assert attrs["frames"][0]["code"].startswith("raise CheckoutError")
    # The trace text is Python's, and the pipeline's parser reads the same frames back.
    assert "The above exception was the direct cause" in event.stacktrace
    assert event.stacktrace.rstrip().endswith("CheckoutError: cannot place order A-1")
    parsed = [(f.function, f.line) for f in parse_frames(event.stacktrace)]
    assert parsed[0][0] == "place_order" and ("parse_quantity", 7) in parsed
    # Retrieval takes the SDK's own frames, in-app ones, nearest the raise first.
    structured = list(sdk_frames(event))
    assert structured[0].function == "place_order" and structured[0].language == "python"
    # Breadcrumbs are kept for the prompt, redacted.
    [crumb] = [c for c in attrs["breadcrumbs"] if "cart 42" in c.get("message", "")]
    assert "sk_live_abcdefghijklmnop1234" not in crumb["message"]


def test_python_logging_error_with_exc_info_keeps_the_log_message(
    server: Server, python_app: Path
) -> None:
    run_python_app(python_app, server.dsn(), "logging")
    [event] = server.queued()
    assert event.message == "order 42 failed"
    assert event.exception_type == "CheckoutError"
    assert event.attributes["logger"] == "shopapp.orders"
    assert event.attributes["release"] == "1.4.2"
    assert parse_frames(event.stacktrace)[0].function == "place_order"


def test_a_retried_envelope_counts_once(server: Server, python_app: Path) -> None:
    run_python_app(python_app, server.dsn("8"), "capture")
    [event] = server.queued()
    assert event.service == "retry-check"  # the project map's name for id 8
    # What the SDK sent, again: the same event id, counted once, no second chain.
    payload = {
        "event_id": event.id,
        "platform": "python",
        "level": "error",
        "exception": {"values": [{"type": "CheckoutError", "value": "cannot place order"}]},
    }
    body = json.dumps({"event_id": event.id}) + "\n" + '{"type":"event"}\n' + json.dumps(payload)
    again = server.envelope(body.encode(), project="8")
    assert again.status_code == 200 and again.json()["id"] == event.id
    server.taken(2)  # the SDK's request and the retry
    assert counted_in_groups(server.client) == 1
    assert server.client.llen("embed") == 1


# --- Node @sentry/node -----------------------------------------------------------------------

NODE_APP = """
const Sentry = require("@sentry/node");
Sentry.init({ dsn: process.argv[2], release: "2.0.1", environment: "prod" });

function parseOrder(order) {
  return JSON.parse(order);
}

function checkout(order) {
  try {
    return parseOrder(order);
  } catch (err) {
    throw new Error("checkout failed for order 42", { cause: err });
  }
}

(async () => {
  try {
    checkout("{not json");
  } catch (err) {
    Sentry.captureException(err);
  }
  await Sentry.flush(10000);
})();
"""


# Pinned, so the install can be kept: a new release is a deliberate change of this line.
SENTRY_NODE = "@sentry/node@11.12.0"


def node_modules(npm: str, node: str) -> Path:
    """``node_modules`` holding SENTRY_NODE, installed once per package and Node version and
    kept under $TRACEHOUND_CACHE (default ~/.cache/tracehound): a clean checkout pays npm's
    download once, not on every run."""
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    key = hashlib.sha256(f"{SENTRY_NODE}|{version}".encode()).hexdigest()[:12]
    kept = cache_root() / "npm" / f"sentry-node-{key}"
    if (kept / "node_modules" / "@sentry" / "node").is_dir():
        return kept / "node_modules"
    kept.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".install-", dir=kept.parent))
    (staging / "package.json").write_text('{"name": "shop-web", "private": true}')
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", SENTRY_NODE],
            cwd=staging,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except subprocess.TimeoutExpired:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.skip(f"npm install {SENTRY_NODE} took more than 5 minutes")
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.skip(f"npm install {SENTRY_NODE} failed: {done.stderr.strip()[-500:]}")
    try:
        staging.rename(kept)  # whole or not at all: a process that lost the race uses the winner's
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return kept / "node_modules"


@pytest.fixture(scope="module")
def node_app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.skip("node and npm are needed to run @sentry/node (not on PATH)")
    app = tmp_path_factory.mktemp("nodeapp")
    (app / "package.json").write_text('{"name": "shop-web", "private": true}')
    (app / "node_modules").symlink_to(node_modules(npm, node), target_is_directory=True)
    (app / "app.js").write_text(NODE_APP)
    return app


def test_node_sentry_sdk_error_with_cause_becomes_an_event_and_starts_a_chain(
    server: Server, node_app: Path
) -> None:
    run(["node", "app.js", server.dsn("12")], cwd=node_app)
    [event] = server.queued()
    assert event.service == "node-shop"
    assert event.exception_type == "Error"
    assert event.message == "checkout failed for order 42"
    assert event.attributes["release"] == "2.0.1"
    assert event.attributes["sentry"]["platform"] == "node"
    functions = [f["function"] for f in event.attributes["frames"]]
    assert functions[0] == "checkout" and "parseOrder" in functions
    assert all(f["in_app"] for f in event.attributes["frames"])
    # Node's layout, the cause after "Caused by:" (whose frames the parser puts first).
    assert event.stacktrace.startswith("Error: checkout failed for order 42\n    at checkout (")
    assert "\nCaused by: SyntaxError: " in event.stacktrace
    parsed = {(f.function, f.file.rsplit("/", 1)[-1]) for f in parse_frames(event.stacktrace)}
    assert {("checkout", "app.js"), ("parseOrder", "app.js")} <= parsed


SENTRY_SHOP = """
import * as Sentry from "@sentry/node";
import { placeOrder } from "./checkout/checkout.js";

Sentry.init({ dsn: process.argv[2], release: "3.0.0" });
try {
  await placeOrder('{"items": [{"sku": "A-1", "qty": 2, "cents": 1250}], "code": "SPRING-50"}');
} catch (err) {
  Sentry.captureException(err);
}
await Sentry.flush(10000);
"""


def test_node_sentry_sdk_frames_of_a_minified_bundle_reach_the_chain_as_the_original_code(
    server: Server, node_app: Path, tmp_path: Path
) -> None:
    """The shop (tests/data/sourcemaps) bundled and minified by esbuild with the real
    @sentry/node; the release's maps handed over as CI would: the SDK's frames (file, line,
    column) come out of intake as the original files, lines and functions."""
    from shared.index.bundles import find_maps
    from shared.intake.sourcemap_store import put_maps
    from tests.data.sourcemaps import build

    if (why := build.ready()) is not None:
        pytest.skip(f"the source-map fixture cannot be built: {why}")
    root = build.copy_app(tmp_path)
    (root / "src" / "sentry-main.js").write_text(SENTRY_SHOP)
    (root / "node_modules").symlink_to(node_app / "node_modules", target_is_directory=True)
    esbuild = build.APP / "node_modules" / ".bin" / "esbuild"
    run(
        [
            str(esbuild), "src/sentry-main.js", "--bundle", "--minify", "--platform=node",
            "--format=esm", "--outdir=dist", "--entry-names=[name].[hash]", "--sourcemap",
            "--external:@sentry/node", "--log-level=warning",
        ],
        cwd=root,
    )  # fmt: skip
    # A repo no other test sent an event for: intake re-reads a repo's list of maps at most
    # every REFRESH_S (5 s, shared/intake/symbolicate.py), and a list read moments ago by the
    # node-shop test before would not have these maps yet.
    put_maps(server.client, "node-bundle", "3.0.0", find_maps(root / "dist").maps)
    [bundle] = (root / "dist").glob("sentry-main.*.js")

    run(["node", str(bundle), server.dsn("13")], cwd=root)

    [event] = server.queued()
    assert event.attributes["release"] == "3.0.0"
    frames = [(f["file"], f["line"], f["function"]) for f in event.attributes["frames"]]
    assert frames[:3] == [
        ("src/pricing/discounts.js", 10, "applyDiscount"),
        ("src/pricing/total.js", 5, ""),
        ("src/pricing/total.js", 5, "cartTotal"),
    ], frames
    assert event.trace is not None
    assert event.trace.code_frames()[0].file == "src/pricing/discounts.js"
    assert "at applyDiscount (src/pricing/discounts.js:10:" in event.stacktrace


# --- OpenTelemetry logs ----------------------------------------------------------------------


def otel_records(endpoint: str | None, export: bool = True, timeout: float = 10.0) -> Any:
    """Log a caught exception through the OTel SDK's logging handler; exported to ``endpoint``
    over OTLP/HTTP protobuf (``timeout``: the exporter's deadline, its retries included), or
    returned as the exporter's encoded request."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="in the dev extra")
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import (
        InMemoryLogRecordExporter,
        SimpleLogRecordProcessor,
    )
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create({"service.name": "billing", "service.version": "3.1.0"})
    provider = LoggerProvider(resource=resource)
    memory = InMemoryLogRecordExporter()
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    if endpoint:
        exporter = OTLPLogExporter(
            endpoint=f"{endpoint}/v1/logs",
            headers={"Authorization": f"Bearer {TOKEN}"},
            compression=Compression.Gzip,
            timeout=timeout,
        )
        provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = logging.getLogger(f"billing.invoices.{time.monotonic_ns()}")
    logger.propagate = False
    logger.addHandler(LoggingHandler(logger_provider=provider))
    logger.info("invoice run started")  # not an error: ignored
    try:
        {"total": 10}["tax"]
    except KeyError:
        logger.exception("invoice 17 could not be totalled")
    provider.force_flush()
    provider.shutdown()
    return encode_logs(memory.get_finished_logs())


def test_otel_sdk_protobuf_log_with_exception_becomes_an_event(server: Server) -> None:
    otel_records(server.url)
    [event] = server.queued()
    assert event.service == "billing"
    assert event.attributes["release"] == "3.1.0"
    assert event.exception_type == "KeyError"
    assert event.message == "invoice 17 could not be totalled"
    assert "Traceback (most recent call last)" in event.stacktrace
    assert parse_frames(event.stacktrace)[0].function == "otel_records"
    assert server.client.llen("embed") == 1  # the INFO record started nothing


def test_otel_json_is_read_like_protobuf_and_replies_in_json(server: Server) -> None:
    from google.protobuf.json_format import MessageToDict

    request = otel_records(None)
    body = MessageToDict(request)
    r = httpx.post(
        f"{server.url}/v1/logs",
        json=body,
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    assert r.json() == {}
    [event] = server.queued()
    assert event.exception_type == "KeyError" and event.attributes["release"] == "3.1.0"
    again = httpx.post(
        f"{server.url}/v1/logs", json=body, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert again.status_code == 200
    server.taken(2)
    assert counted_in_groups(server.client) == 1 and server.client.llen("embed") == 1  # same ids


def test_otel_span_with_a_recorded_exception_becomes_an_event(server: Server) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="in the dev extra")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    resource = Resource.create({"service.name": "payments", "service.version": "5.0.0"})
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter(
        endpoint=f"{server.url}/v1/traces", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("payments.charge")
    with tracer.start_as_current_span("GET /health"):
        pass  # a span without an exception: nothing to analyze
    try:
        with tracer.start_as_current_span("charge card"):
            raise TimeoutError("card gateway did not answer in 5 s")
    except TimeoutError:
        pass
    provider.shutdown()
    [event] = server.queued()
    assert event.service == "payments" and event.attributes["release"] == "5.0.0"
    assert event.exception_type == "TimeoutError"
    assert event.message == "card gateway did not answer in 5 s"
    assert "Traceback (most recent call last)" in event.stacktrace
    assert parse_frames(event.stacktrace)[0].function.startswith("test_otel_span")
    assert event.attributes["log_attributes"]["span.name"] == "charge card"
    assert len(event.attributes["otel"]["trace_id"]) == 32


def test_an_unusable_otlp_record_is_a_partial_success_and_too_many_are_413(
    server: Server,
) -> None:
    def request(n: int) -> dict[str, Any]:
        record = {"severityNumber": 17}  # ERROR, with neither a body nor an exception
        return {"resourceLogs": [{"scopeLogs": [{"logRecords": [record] * n}]}]}

    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.post(f"{server.url}/v1/logs", json=request(1), headers=auth)
    assert r.status_code == 200
    assert r.json()["partialSuccess"]["rejectedLogRecords"] == "1"
    assert "neither 'message' nor a stack" in r.json()["partialSuccess"]["errorMessage"]
    r = httpx.post(f"{server.url}/v1/logs", json=request(101), headers=auth)
    assert r.status_code == 413


def test_otlp_needs_the_token_and_a_known_content_type(server: Server) -> None:
    r = httpx.post(f"{server.url}/v1/logs", json={"resourceLogs": []})
    assert r.status_code == 401
    r = httpx.post(
        f"{server.url}/v1/logs",
        content=b"x",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "text/plain"},
    )
    assert r.status_code == 415


# --- bad input -------------------------------------------------------------------------------


def test_the_older_store_endpoint_takes_one_event(server: Server) -> None:
    event = {
        "event_id": "d" * 32,
        "platform": "python",
        "level": "error",
        "release": "0.9.0",
        "exception": {
            "values": [
                {
                    "type": "KeyError",
                    "value": "'tax'",
                    "stacktrace": {
                        "frames": [
                            {"abs_path": "/app/bill.py", "lineno": 3, "function": "total"},
                        ]
                    },
                }
            ]
        },
    }
    r = httpx.post(
        f"{server.url}/api/7/store/",
        content=gzip.compress(json.dumps(event).encode()),
        headers={"X-Sentry-Auth": f"Sentry sentry_key={KEY}", "Content-Encoding": "gzip"},
    )
    assert r.status_code == 200 and r.json()["id"] == "d" * 32
    [queued] = server.queued()
    assert queued.exception_type == "KeyError" and queued.attributes["release"] == "0.9.0"


def test_malformed_envelopes_are_400(server: Server) -> None:
    assert server.envelope(b"{}\n", project="x" * 65).status_code == 400
    assert server.envelope(b"not json at all\n").status_code == 400
    truncated = b'{}\n{"type":"event","length":500}\n{"message":"x"}'
    r = server.envelope(truncated)
    assert r.status_code == 400 and "payload ends" in r.json()["detail"]
    r = server.envelope(b'{}\n{"type":"event"}\n{oops')
    assert r.status_code == 400 and "not JSON" in r.json()["detail"]


def test_missing_key_is_401_and_wrong_key_is_403(server: Server) -> None:
    body = b'{}\n{"type":"event"}\n{"message":"x","level":"error"}'
    r = httpx.post(f"{server.url}/api/7/envelope/", content=body)
    assert r.status_code == 401
    r = httpx.post(f"{server.url}/api/7/envelope/?sentry_key=nope", content=body)
    assert r.status_code == 403
    r = httpx.post(f"{server.url}/api/7/envelope/?sentry_key={KEY}", content=body)
    assert r.status_code == 200  # the key as a query parameter, as browser SDKs send it


def test_oversized_envelope_is_413(server: Server) -> None:
    big = b'{}\n{"type":"event"}\n' + json.dumps({"message": "x" * MAX_BODY}).encode()
    assert server.envelope(big).status_code == 413
    bomb = gzip.compress(b" " * 5_000_000)
    assert server.envelope(bomb, **{"Content-Encoding": "gzip"}).status_code == 413
    brotli = pytest.importorskip("brotli")
    br_bomb = brotli.compress(b" " * 5_000_000)
    assert server.envelope(br_bomb, **{"Content-Encoding": "br"}).status_code == 413


def test_an_envelope_with_only_a_transaction_is_accepted_and_dropped(server: Server) -> None:
    header = json.dumps({"event_id": "a" * 32, "sent_at": "2026-12-01T10:00:00Z"})
    transaction = json.dumps({"type": "transaction", "transaction": "/checkout", "spans": []})
    session = json.dumps({"sid": "b" * 32, "status": "ok"})
    body = "\n".join([header, '{"type":"transaction"}', transaction, '{"type":"session"}', session])
    r = server.envelope(body.encode())
    assert r.status_code == 200
    assert r.json()["id"] == "a" * 32
    assert r.json()["dropped"] == {"transaction": 1, "session": 1}
    assert r.json()["queued"] == [] and server.client.llen("embed") == 0


BURST_APP = """
import sys
import sentry_sdk

sentry_sdk.init(dsn=sys.argv[1])
for n in range(6):
    try:
        raise RuntimeError(f"order {n} failed")
    except RuntimeError as exc:
        sentry_sdk.capture_exception(exc)
sentry_sdk.flush(10)
"""


def refused_for_backlog(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    [line] = [
        ln
        for ln in text.splitlines()
        if ln.startswith("tracehound_ingest_refused_total") and 'reason="backlog"' in ln
    ]
    return float(line.split()[-1])


def test_a_sentry_sdk_told_429_past_the_backlog_bound_stops_sending(
    tmp_path: Path, python_app: Path
) -> None:
    """Sentry events wait for the intake worker as /v1/events batches do, under the same
    bound. Past it a Sentry SDK is told 429 with Retry-After, which the real SDK honours by
    sending nothing for that long: a 503 (what shippers are told) only drops the event in
    hand, and the next six requests would still come."""
    redis_proc, redis_url = start_redis(tmp_path)
    env = {
        "TRACEHOUND_REDIS_URL": redis_url,
        "TRACEHOUND_SENTRY_KEYS": KEY,
        "TRACEHOUND_INGEST_MAX_BACKLOG": "1",  # no intake worker: one message fills it
        "TRACEHOUND_INGEST_MAX_LAG": "0",
        **SETTLE_OFF,
    }
    ingest, url = start_ingest(tmp_path, env)
    try:
        dsn = f"http://{KEY}@{url.removeprefix('http://')}/7"
        first = b'{}\n{"type":"event"}\n' + json.dumps({"event_id": "e" * 32}).encode()
        auth = {"X-Sentry-Auth": f"Sentry sentry_version=7, sentry_key={KEY}"}
        r = httpx.post(f"{url}/api/7/envelope/", content=first, headers=auth, timeout=30)
        assert r.status_code == 200 and r.json()["queued"] == ["e" * 32]
        r = httpx.post(f"{url}/api/7/envelope/", content=first, headers=auth, timeout=30)
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
        assert "behind" in r.json()["error"]
        assert refused_for_backlog(url) == 1
        (python_app / "burst.py").write_text(BURST_APP)
        run([sys.executable, "burst.py", dsn], cwd=python_app)
        # Six errors captured at once: the first request is refused, the SDK sends no more.
        assert refused_for_backlog(url) == 2
    finally:
        ingest.stop()
        redis_proc.stop()


def test_an_otel_exporter_told_503_past_the_backlog_bound_retries_until_it_gets_in(
    tmp_path: Path,
) -> None:
    """OTLP records are queued for the intake worker under the same bound. Past it ingest
    answers 503 with Retry-After before reading the body; the real OTLP exporter waits that
    long and sends the same request again, which gets in once the worker has caught up."""
    redis_proc, redis_url = start_redis(tmp_path)
    env = {
        "TRACEHOUND_REDIS_URL": redis_url,
        "TRACEHOUND_INGEST_TOKEN": TOKEN,
        "TRACEHOUND_INGEST_MAX_BACKLOG": "1",  # one message waiting fills it
        "TRACEHOUND_INGEST_MAX_LAG": "0",
        **SETTLE_OFF,
    }
    ingest, url = start_ingest(tmp_path, env)
    client = redis.Redis.from_url(redis_url)
    worker: list[Any] = []

    def start_worker_once_refused() -> None:
        deadline = time.monotonic() + 30
        while refused_for_backlog(url) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        worker.append(
            start_worker(
                "intake", ["intake"], 1, tmp_path, {**env, "TRACEHOUND_DATA_DIR": str(tmp_path)}
            )
        )

    try:
        record = {
            "service": "payments",
            "level": "error",
            "message": "payment failed",
            "stack": "Traceback (most recent call last):\n"
            '  File "/app/pay.py", line 3, in charge\n'
            "    return total / 0\n"
            "ZeroDivisionError: division by zero",
        }
        r = httpx.post(
            f"{url}/v1/events",
            json=record,
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
        )
        assert r.status_code == 202  # the queue holds one message: the bound
        starter = threading.Thread(target=start_worker_once_refused)
        starter.start()
        otel_records(url, timeout=60)  # refused, retried after Retry-After, until it gets in
        starter.join()
        assert refused_for_backlog(url) >= 1
        deadline = time.monotonic() + 30
        while client.llen("embed") < 2:  # the shipper's error and the exporter's
            assert time.monotonic() < deadline, "the exporter's error was never counted"
            time.sleep(0.1)
        assert counted_in_groups(client) == 2
    finally:
        for w in worker:
            w.stop()
        ingest.stop()
        client.close()
        redis_proc.stop()


def test_redis_down_is_a_503_with_retry_after(tmp_path: Path) -> None:
    s = Server(tmp_path)
    try:
        s.redis_proc.stop()
        event = {"message": "x", "level": "error", "event_id": "c" * 32}
        body = b'{}\n{"type":"event"}\n' + json.dumps(event).encode()
        r = s.envelope(body)
        assert r.status_code == 503 and int(r.headers["Retry-After"]) > 0
        logs = otel_records(None).SerializeToString()
        r = httpx.post(
            f"{s.url}/v1/logs",
            content=logs,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-protobuf"},
            timeout=30,
        )
        assert r.status_code == 503 and int(r.headers["Retry-After"]) > 0  # exporters retry
    finally:
        s.ingest.stop()
        s.client.close()
