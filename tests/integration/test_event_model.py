"""One event model: the same records, written by real logging libraries, become the same events
whether the tailer reads them from a file, a log shipper posts them to ``tracehound ingest`` or
an engineer runs ``tracehound analyze`` on them.

The corpus comes from tests/data/records: Python logging, structlog, python-json-logger,
loguru, java.util.logging, logback, log4j2, the JVM's uncaught handler, Node's console.error
and uncaught errors, pino, winston, Rust and Go panics, and PHP and .NET samples. Each producer
runs its real code against a private redis-server, and the events are read back from the
analysis chains it enqueued there, after intake redacted, fingerprinted and grouped them.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from typer.testing import CliRunner

from producers.cli import cli
from producers.tailer import Tailer
from shared.core.domain import ErrorEvent
from shared.core.pipeline import sender_app
from shared.core.settings import Settings
from shared.devtools.llama_server import cache_root
from shared.groups import deferred
from shared.groups.submit import intake_for
from shared.intake.frames import PathMapper
from shared.intake.redact import Redactor
from shared.stack.localstack import start_ingest
from tests.data.records.generate import Corpus, generate

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PRODUCERS = ("tail", "ingest", "analyze")
DB = {"tail": 1, "ingest": 2, "analyze": 3}  # one Redis database each: no shared groups
COMPARED = ("service", "repo", "exception_type", "message", "stacktrace", "level")
RECORDS = ROOT / "tests" / "data" / "records"
# The frames each runtime's trace names, nearest the raise first: (file in the program's
# folder, function). Each must land on a line of that file marked "frame: <function>".
FRAMES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "rust--panic": ("rust", [("src/panic.rs", "")]),
    "rust--panic-backtrace": (
        "rust", [("src/panic.rs", "parse_quantity"), ("src/panic.rs", "main")]
    ),
    "rust--index-out-of-bounds": ("rust", [("src/panic.rs", "")]),
    "php--uncaught-exception": (
        "php",
        [("src/Orders/Checkout.php", "load"), ("src/Orders/Checkout.php", "place"),
         ("records.php", "{main}")],
    ),
    "php--uncaught-chained": (
        "php",
        [("src/Payment/Gateway.php", "send"), ("src/Payment/Gateway.php", "charge"),
         ("src/Orders/Checkout.php", "settle"), ("records.php", "{main}"),
         ("src/Orders/Checkout.php", "settle"), ("records.php", "{main}")],
    ),
    "ruby--uncaught-nil": ("ruby", [("lib/shop/checkout.rb", "total"), ("records.rb", "<main>")]),
    "ruby--uncaught-cause": (
        "ruby",
        [("lib/shop/checkout.rb", "Integer"), ("lib/shop/checkout.rb", "place"),
         ("records.rb", "<main>"),
         ("lib/shop/checkout.rb", "place"), ("lib/shop/checkout.rb", "place"),
         ("records.rb", "<main>")],
    ),
    "ruby--logger-error": (
        "ruby",
        [("lib/shop/checkout.rb", "place"), ("lib/shop/checkout.rb", "place"),
         ("records.rb", "<main>")],
    ),
    **{
        stem: (
            "dotnet",
            [("Shop/Gateway.cs", "Total"), ("Shop/Gateway.cs", "Charge"),
             ("Shop/Checkout.cs", "Place"), ("Shop/Checkout.cs", "Place"),
             ("Records.cs", "Main")],
        )
        for stem in ("mono--unhandled-inner", "mono--logged")
    },
}  # fmt: skip
_MARK = re.compile(r"(?://|#) frame: (?P<names>[\w{}<>]+(?:, [\w{}<>]+)*)\s*$")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    # Kept beside the other builds (by digest of sources and toolchain), not in the checkout:
    # a clean checkout compiles the Java, Rust and Go record writers only when they changed.
    cache = Path(os.environ.get("TRACEHOUND_RECORDS_CACHE") or cache_root() / "records")
    generated = generate(tmp_path_factory.mktemp("records"), cache=cache)
    if generated.skipped and os.environ.get("TRACEHOUND_REQUIRE_ALL_RECORDS"):
        pytest.fail(f"record sources that could not run: {generated.skipped}")
    return generated


def service_of(record: dict[str, Any]) -> str:
    """Each record its own service, so no two records share an error group."""
    return "svc-" + record["file"].rsplit(".", 1)[0]


def db_url(base: str, producer: str) -> str:
    return base.rsplit("/", 1)[0] + f"/{DB[producer]}"


def enqueued_events(url: str) -> dict[str, ErrorEvent]:
    """The events of the analysis chains waiting on the embed queue, or in the deferred
    backlog (records of one root cause form an incident: its later groups wait), by
    service."""
    r = redis.Redis.from_url(url)
    try:
        raw = deferred.first_messages(r)
    finally:
        r.close()
    events: dict[str, ErrorEvent] = {}
    for message in raw:
        body = json.loads(base64.b64decode(json.loads(message)["body"]))
        event = ErrorEvent.model_validate(body[0][0]["event"])
        assert event.service not in events, f"two analyses for {event.service}"
        events[event.service] = event
    return events


def run_tailer(corpus: Corpus, url: str, workdir: Path) -> None:
    intake = intake_for(Settings(redis_url=url), sender_app(Settings(redis_url=url)))
    logs = workdir / "logs"
    logs.mkdir()
    for i, record in enumerate(corpus.records):
        path = logs / record["file"].replace(".json", ".log")
        path.write_bytes((corpus.dir / record["file"]).read_bytes())
        tailer = Tailer(
            [str(path)],
            service=service_of(record),
            repo=service_of(record),
            enqueue_many=intake.submit_many,
            state_path=workdir / f"state-{i}.json",
            from_start=True,
        )
        tailer.poll_once(now=0.0)
        tailer.poll_once(now=60.0)  # a quiet minute later: the last record is complete
        tailer.close()
    intake.app.close()


def run_ingest(corpus: Corpus, url: str, workdir: Path) -> None:
    """As a shipper sends them: JSON records as they are, a text record as a multiline
    shipper's ``{"message": …}``."""
    proc, base = start_ingest(workdir, {**os.environ, "TRACEHOUND_REDIS_URL": url})
    try:
        with httpx.Client(timeout=30) as client:
            for record in corpus.records:
                text = (corpus.dir / record["file"]).read_text("utf-8")
                body = text if record["format"] == "json" else json.dumps({"message": text})
                reply = client.post(
                    f"{base}/v1/events",
                    params={"service": service_of(record), "wait": "true"},
                    content=body,
                )
                assert reply.status_code == 202, reply.text
                answer = reply.json()
                assert len(answer["accepted"]) + len(answer["ignored"]) == 1, answer
    finally:
        proc.stop()


def run_analyze(corpus: Corpus, url: str) -> dict[str, str]:
    """``tracehound analyze FILE --service …``; what it said for records that are not errors."""
    refusals: dict[str, str] = {}
    runner = CliRunner()
    for record in corpus.records:
        result = runner.invoke(
            cli,
            ["analyze", str(corpus.dir / record["file"]), "--service", service_of(record)],
            env={"TRACEHOUND_REDIS_URL": url},
        )
        if result.exit_code != 0:
            refusals[record["file"]] = result.output
    return refusals


@pytest.fixture(scope="module")
def produced(
    corpus: Corpus, private_redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    urls = {p: db_url(private_redis_url, p) for p in PRODUCERS}
    for url in urls.values():
        redis.Redis.from_url(url).flushdb()
    run_tailer(corpus, urls["tail"], tmp_path_factory.mktemp("tail"))
    run_ingest(corpus, urls["ingest"], tmp_path_factory.mktemp("ingest"))
    refusals = run_analyze(corpus, urls["analyze"])
    yield {
        "events": {p: enqueued_events(urls[p]) for p in PRODUCERS},
        "refusals": refusals,
    }
    for url in urls.values():
        redis.Redis.from_url(url).flushdb()


def test_every_producer_turns_exactly_the_error_records_into_events(
    corpus: Corpus, produced: dict[str, Any]
) -> None:
    errors = {service_of(r) for r in corpus.records if r["is_error"]}
    assert errors and len(errors) < len(corpus.records)  # the corpus holds both kinds
    for producer in PRODUCERS:
        assert set(produced["events"][producer]) == errors, producer


def test_the_same_record_gives_the_same_event_through_tail_ingest_and_analyze(
    corpus: Corpus, produced: dict[str, Any]
) -> None:
    differences = []
    for record in corpus.records:
        if not record["is_error"]:
            continue
        events = {p: produced["events"][p][service_of(record)] for p in PRODUCERS}
        fields = COMPARED + (("timestamp",) if record["format"] == "json" else ())
        for field in fields:
            values = {p: getattr(e, field) for p, e in events.items()}
            if len(set(map(str, values.values()))) > 1:
                differences.append((record["file"], field, values))
    assert differences == []


def test_events_say_what_a_reader_of_the_record_would_say(
    corpus: Corpus, produced: dict[str, Any]
) -> None:
    redact = Redactor.from_settings(True, [], []).redact  # intake redacts before anything else
    wrong = []
    for record in corpus.records:
        if not record["is_error"]:
            continue
        event = produced["events"]["tail"][service_of(record)]
        said = (event.exception_type, event.message, event.level)
        truth_message = redact(record["message"]) if record["message"] else None
        right_message = (truth_message is not None and truth_message in event.message) or (
            event.message == record["log_message"]
        )
        if (
            event.exception_type != record["exception_type"]
            or not right_message
            or (record["level_printed"] and event.level != record["level"])
            or (record["exception_type"] and not event.stacktrace)
        ):
            wrong.append((record["file"], said, record))
    assert wrong == []


def test_analyze_says_why_it_does_not_analyze_a_record_below_error(
    corpus: Corpus, produced: dict[str, Any]
) -> None:
    quiet = {r["file"] for r in corpus.records if not r["is_error"]}
    assert set(produced["refusals"]) == quiet
    for output in produced["refusals"].values():
        assert "not an error" in output and "nothing to analyze" in output


def test_every_record_source_ran(corpus: Corpus) -> None:
    """A source whose tool is missing here is named in the test report, never left out
    silently (CI sets TRACEHOUND_REQUIRE_ALL_RECORDS and fails instead)."""
    if corpus.skipped:
        pytest.skip("; ".join(f"{s}: {why}" for s, why in corpus.skipped.items()))
    assert {r["source"] for r in corpus.records} >= {"python-logging", "pino", "java-jul"}


def marked_lines(folder: Path) -> dict[tuple[str, int], set[str]]:
    """(file, line) -> the functions its "frame:" comment names, over a program's folder."""
    marks: dict[tuple[str, int], set[str]] = {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or "node_modules" in path.parts:
            continue
        rel = path.relative_to(folder).as_posix()
        for number, line in enumerate(path.read_text("utf-8", errors="replace").splitlines(), 1):
            if m := _MARK.search(line):
                marks[(rel, number)] = set(m["names"].split(", "))
    return marks


def test_each_runtimes_frames_land_on_the_lines_its_program_marks(
    corpus: Corpus, produced: dict[str, Any]
) -> None:
    """Rust, PHP, Ruby and C# (Mono) traces as their runtimes print them, through the tailer
    and intake: every frame in the program's own files, in order, on the right line with the
    right function; the runtimes' and libraries' frames map nowhere."""
    ran = {r["file"].rsplit(".", 1)[0] for r in corpus.records}
    checked = 0
    for stem, (folder, want) in FRAMES.items():
        if stem not in ran:
            continue  # its runtime is missing here: test_every_record_source_ran says so
        marks = marked_lines(RECORDS / folder)
        files = {file for file, _ in marks} | {file for file, _ in want}
        event = produced["events"]["tail"][f"svc-{stem}"]
        assert event.trace is not None, stem
        mapped = PathMapper(files).map_frames(event.trace.frames)
        assert [(m.path, m.function) for m in mapped] == want, stem
        for m in mapped:  # on a marked line; a frame without a function on any marked line
            names = marks.get((m.path, m.line or 0))
            assert names is not None and (not m.function or m.function in names), (stem, m)
        checked += 1
    assert checked or corpus.skipped
