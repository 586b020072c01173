"""Secrets stay in, whichever way they arrive: the fake secrets of tests/data/secret_corpus.py
(every format it generates, in all of its contexts) planted in the events of every intake path and
in an indexed repository never reach the model host (index-time and query embeddings, the LLM
prompt and its tool results), the rerank server or Slack (messages and raw requests).

Planted, each event small enough that the prompt shows all of its error text:

- JSON records to ``POST /v1/events``: message, stack trace, exception type, and attributes (the
  ``route`` and ``request_id`` the prompt shows, request headers and query it does not);
- errors captured by the real ``sentry-sdk`` in a subprocess: exception value, the source line of
  the raising frame, tags, breadcrumbs, release and environment, plus extra and contexts (which
  intake drops);
- log records exported by the OpenTelemetry SDK's OTLP/HTTP exporter: body, log attributes and
  resource attributes (``service.version`` and ``deployment.environment.name`` among them);
- a repository indexed before the errors arrive: an env script, a YAML config, a JSON fixture and
  a Python settings module (plus a gitignored ``.env``, which the index skips). The model reads
  those files with its tools, and quotes every line it read that holds a marker or a long token.

Asserted: no planted value reaches a sink, as written or as JSON, Python or Slack escape it; every
event was embedded, analysed and posted with its trace reply, the reranker ran, and what the
model and Slack received carries redaction markers.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.analyze.llm import FIELD_MAX_CHARS, PROMPT_BREADCRUMBS, PROMPT_ERROR_MAX_CHARS
from shared.core.pipeline import sender_app
from shared.core.settings import Settings
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.devtools.simulators.slack import SlackSimulator
from shared.index.reindex import index_repository
from shared.intake.events import MAX_MESSAGE_CHARS
from shared.intake.otlp import MAX_VALUE_CHARS
from shared.intake.sentry import MAX_FIELD_CHARS
from shared.stack.children import wait_until
from shared.stack.localstack import LocalStack, start_ingest
from tests.conftest import SAMPLE_SERVICE
from tests.data.secret_corpus import CONTEXTS, Sample, corpus, unnamed

pytestmark = pytest.mark.integration

SEED = 31
TOKEN = "ingest-secret"
SENTRY_KEY = "0123456789abcdef0123456789abcdef"
SENTRY_FIRST_PROJECT = 101
# The prompt shows the last PROMPT_ERROR_MAX_CHARS of an error (message, trace and the SDK's
# context lines): planted text stays well below it, leaving room for the trace's own lines and
# the short fields. A Sentry event shows its exception value twice (message and trace).
EVENT_CHARS = PROMPT_ERROR_MAX_CHARS - 1500
SENTRY_VALUE_CHARS = 1800  # twice, with the trace and nine short fields: within 6,000
# A tag, breadcrumb, release or whitelisted attribute: the prompt shows FIELD_MAX_CHARS of one.
SHORT_CHARS = FIELD_MAX_CHARS - 20
# Every context's samples are dealt in this order (the repository takes two shares: a file
# holds many secrets and costs no analysis, where every event is one).
SHARES = ("repo", "http", "repo", "sentry", "otlp")
DOTENV_SAMPLES = 6  # into the gitignored .env; the rest of the env lines into an env script

# The fields of an event that take one short sample each, in the order they are filled: first
# those the prompt shows, then those intake keeps (or drops) and no sink shows today.
HTTP_SHORT = (
    "exception type", "attribute route", "attribute request_id",
    "attribute request.headers.X-Debug", "attribute request.query",
)  # fmt: skip
SENTRY_SHORT = (
    "frame source line", "tag route", "tag request_id", "release", "environment",
    *(f"breadcrumb {i}" for i in range(PROMPT_BREADCRUMBS)),
    "tag upstream", "extra reload_input", "context upstream.note",
)  # fmt: skip
OTLP_SHORT = (
    "log attribute http.route", "log attribute http.request.id",
    "resource attribute service.version", "resource attribute deployment.environment.name",
    "log attribute upstream.response", "resource attribute upstream.endpoint",
)  # fmt: skip

ENV_SCRIPT = "deploy/production.env.sh"
YAML_CONFIG = "config/settings.yaml"
JSON_FIXTURE = "shopapp/fixtures/upstream_calls.json"
SETTINGS_MODULE = "shopapp/prod_settings.py"
INDEXED_FILES = (ENV_SCRIPT, YAML_CONFIG, JSON_FIXTURE, SETTINGS_MODULE)


@dataclass(frozen=True)
class Placed:
    sample: Sample
    where: str  # the intake path and field, or the repository file


@dataclass
class Batch:
    """One event's share: long texts for its message/trace/body, short ones for its fields."""

    long: list[Sample] = field(default_factory=list)
    short: list[Sample] = field(default_factory=list)


def planted_samples() -> list[Sample]:
    # unnamed(): a keyword-anchored format written bare, with no name beside it, is the one case
    # no rule can tell from an identifier (tests/data/secret_corpus.py); it is left out here.
    return [s for s in corpus(SEED) if not unnamed(s)]


def dealt(samples: Sequence[Sample]) -> dict[str, list[Sample]]:
    """Each context's samples dealt in turn over SHARES, going on where the last context
    stopped: every context has more samples than SHARES, so every path gets every context."""
    out: dict[str, list[Sample]] = {share: [] for share in SHARES}
    turn = 0
    for context in CONTEXTS:
        for sample in [s for s in samples if s.context == context]:
            out[SHARES[turn % len(SHARES)]].append(sample)
            turn += 1
    return out


def is_short(s: Sample) -> bool:
    return "\n" not in s.text and "\r" not in s.text and len(s.text) <= SHORT_CHARS


def packed(samples: Iterable[Sample], *, long_chars: int, short_slots: int) -> list[Batch]:
    """Samples into as few events as fit (first fit): a short one into the first free field, the
    others into the first long text with room for them (``long_chars``), else a new event."""
    batches: list[Batch] = []
    for s in samples:
        if is_short(s):
            free = next((b for b in batches if len(b.short) < short_slots), None)
            if free is not None:
                free.short.append(s)
                continue
        room = next(
            (
                b
                for b in batches
                if sum(len(x.text) + 1 for x in b.long) + len(s.text) <= long_chars
            ),
            None,
        )
        if room is None:
            room = Batch()
            batches.append(room)
        room.long.append(s)
    return batches


def lines(samples: Iterable[Sample]) -> str:
    return "\n".join(s.text for s in samples)


# --- the repository -------------------------------------------------------------------------


def _is_python(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def _json_item(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def settings_module(samples: Sequence[Sample]) -> str:
    """A settings module: the samples that are Python code as its code, the others (log lines,
    requests, other languages) verbatim in its docstring, as pasted from an incident, so each
    stays in the context the corpus wrote it in."""
    code = [s.text for s in samples if _is_python(s.text)]
    pasted = [s.text for s in samples if not _is_python(s.text)]
    quote = "'''" if not any("'''" in t for t in pasted) else '"""'
    return (
        f"r{quote}Production settings.\n\nPasted from incidents while debugging:\n\n"
        + "\n\n".join(pasted)
        + f"\n{quote}\n\n"
        + "\n".join(code)
        + "\n\n\ndef load_production_settings():\n    return None\n"
    )


def plant_repository(root: Path, samples: Sequence[Sample]) -> list[Placed]:
    """The samples written where they are found in real repositories: env lines in the env
    script (a few in the .env the index must skip), YAML and Kubernetes snippets and key blocks
    in the YAML config, JSON in the fixture, and everything else in the settings module."""
    by_file: dict[str, list[Sample]] = {name: [] for name in (".env", *INDEXED_FILES)}
    for s in samples:
        if s.context in ("env", "dotenv_pass"):
            name = ".env" if len(by_file[".env"]) < DOTENV_SAMPLES else ENV_SCRIPT
        elif s.context in ("yaml", "k8s_env", "base64_key_body", "pem_block"):
            name = YAML_CONFIG
        elif s.context in ("json", "cookie_json"):
            name = JSON_FIXTURE
        else:
            name = SETTINGS_MODULE
        by_file[name].append(s)
    fixture = [{"id": i, "logged": _json_item(s.text)} for i, s in enumerate(by_file[JSON_FIXTURE])]
    texts = {
        ".env": lines(by_file[".env"]) + "\n",
        ENV_SCRIPT: "#!/bin/sh\n# Production environment (checked in by mistake).\n"
        + lines(by_file[ENV_SCRIPT])
        + "\n",
        YAML_CONFIG: "# Service configuration, one document per component.\n"
        + "\n---\n".join(s.text for s in by_file[YAML_CONFIG])
        + "\n",
        JSON_FIXTURE: json.dumps({"calls": fixture}, indent=2) + "\n",
        SETTINGS_MODULE: settings_module(by_file[SETTINGS_MODULE]),
    }
    for name, text in texts.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return [Placed(s, f"repository {name}") for name, got in by_file.items() for s in got]


# --- HTTP ingest ------------------------------------------------------------------------------

TRACE_HEAD = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/shopapp/config.py", line 52, in load_settings\n'
    "    return Settings(**_parse(environ))\n"
    '  File "/srv/app/shopapp/prod_settings.py", line 7, in load_production_settings\n'
    "    return SETTING_0\n"
)


def cause_word(name: str) -> str:
    """A word of letters of ``name``'s own for its root cause: the session stack runs incidents,
    and one root cause in many services within the window is one incident (one message)."""
    return "".join(chr(97 + b % 26) for b in hashlib.sha1(name.encode()).digest()[:8])


def http_record(
    service: str, repo: str, batch: Batch, max_trace_bytes: int
) -> tuple[dict[str, Any], list[Placed]]:
    """A JSON record whose message, trace, exception type and attributes carry the batch."""
    short = dict(zip(HTTP_SHORT, batch.short, strict=False))
    cut = len(batch.long) // 3
    in_message, in_stack = batch.long[:cut], batch.long[cut:]
    message = "\n".join([f"{service}: settings reload failed", *(s.text for s in in_message)])
    exc = f"shopapp.config.ConfigError: cannot parse settings of {cause_word(service)}:\n"
    stack = TRACE_HEAD + exc + lines(in_stack)
    text = {k: s.text for k, s in short.items()}
    record: dict[str, Any] = {
        "service": service,
        "repo": repo,
        "level": "error",
        "message": message,
        "stack": stack,
        "attributes": {
            "route": text.get("attribute route", "/v1/settings/reload"),
            "request_id": text.get("attribute request_id", service),
            "request": {
                "headers": {"X-Debug": text.get("attribute request.headers.X-Debug", "1")},
                "query": text.get("attribute request.query", ""),
            },
        },
    }
    if "exception type" in text:
        record["exception_type"] = f"shopapp.config.ConfigError[{text['exception type']}]"
    assert len(message) <= MAX_MESSAGE_CHARS and len(stack.encode()) <= max_trace_bytes
    placed = [Placed(s, "http message") for s in in_message]
    placed += [Placed(s, "http stack") for s in in_stack]
    placed += [Placed(s, f"http {where}") for where, s in short.items()]
    return record, placed


# --- Sentry SDK -------------------------------------------------------------------------------

SENTRY_APP = """
import json
import sys

import sentry_sdk

import planted_frames

for event in json.loads(open(sys.argv[1]).read()):
    sentry_sdk.init(dsn=event["dsn"], release=event["release"], environment=event["environment"])
    with sentry_sdk.isolation_scope() as scope:
        for key, value in event["tags"].items():
            scope.set_tag(key, value)
        for key, value in event["extra"].items():
            scope.set_extra(key, value)
        for key, value in event["contexts"].items():
            scope.set_context(key, value)
        for message in event["breadcrumbs"]:
            scope.add_breadcrumb(category="settings", level="info", message=message)
        try:
            getattr(planted_frames, event["raiser"])(event["value"])
        except planted_frames.PlantedError as exc:
            print(sentry_sdk.capture_exception(exc), flush=True)
    sentry_sdk.flush(10)
"""


def sentry_event(project: int, dsn: str, batch: Batch) -> tuple[dict[str, Any], str, list[Placed]]:
    """What the Sentry app is told to send for the batch, the source of the function that
    raises it (its raise line carries one sample as a comment), and where each sample went."""
    short = dict(zip(SENTRY_SHORT, batch.short, strict=False))
    text = {k: s.text for k, s in short.items()}
    value = f"settings reload failed in {cause_word(str(project))}:\n" + lines(batch.long)
    comment = f"  # {text['frame source line']}" if "frame source line" in text else ""
    raiser = f"fail_{project}"
    source = f"\n\ndef {raiser}(value):\n    raise PlantedError(value){comment}\n"
    event = {
        "dsn": dsn,
        "raiser": raiser,
        "value": value,
        "release": text.get("release", "1.4.2"),
        "environment": text.get("environment", "production"),
        "tags": {
            name: text[f"tag {name}"]
            for name in ("route", "request_id", "upstream")
            if f"tag {name}" in text
        },
        "breadcrumbs": [text[k] for k in text if k.startswith("breadcrumb ")],
        "extra": {"reload_input": text["extra reload_input"]} if "extra reload_input" in text
        else {},
        "contexts": {"upstream": {"note": text["context upstream.note"]}}
        if "context upstream.note" in text else {},
    }  # fmt: skip
    assert len(value) <= MAX_MESSAGE_CHARS
    assert all(len(s.text) <= MAX_FIELD_CHARS for s in short.values())
    placed = [Placed(s, "sentry exception value") for s in batch.long]
    placed += [Placed(s, f"sentry {where}") for where, s in short.items()]
    return event, source, placed


def run_sentry_app(workdir: Path, events: list[dict[str, Any]], sources: list[str]) -> list[str]:
    """The real sentry-sdk sends the events from a process of its own; their event ids."""
    pytest.importorskip("sentry_sdk", reason="sentry-sdk is in the dev extra")
    app = workdir / "sentry-app"
    app.mkdir()
    (app / "planted_frames.py").write_text(
        "class PlantedError(Exception):\n    pass\n" + "".join(sources)
    )
    (app / "main.py").write_text(SENTRY_APP)
    (app / "events.json").write_text(json.dumps(events))
    done = subprocess.run(
        [sys.executable, "main.py", "events.json"],
        cwd=app,
        env={**os.environ, "PYTHONPATH": str(app)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"the Sentry app failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout.split()


# --- OpenTelemetry SDK ------------------------------------------------------------------------


def otlp_export(url: str, service: str, batch: Batch) -> list[Placed]:
    """One caught error logged through the OTel SDK's logging handler with the batch in its
    body and attributes, exported over OTLP/HTTP protobuf by the SDK's exporter."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="in the dev extra")
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import (
        InMemoryLogRecordExporter,
        LogRecordExportResult,
        SimpleLogRecordProcessor,
    )
    from opentelemetry.sdk.resources import Resource

    short = dict(zip(OTLP_SHORT, batch.short, strict=False))
    resource_attrs = {
        where.removeprefix("resource attribute "): s.text
        for where, s in short.items()
        if where.startswith("resource attribute ")
    }
    log_attrs = {
        where.removeprefix("log attribute "): s.text
        for where, s in short.items()
        if where.startswith("log attribute ")
    }
    body = f"{service}: settings reload failed\n" + lines(batch.long)
    assert len(body) <= MAX_MESSAGE_CHARS
    assert all(len(s.text) <= MAX_VALUE_CHARS for s in short.values())
    provider = LoggerProvider(resource=Resource.create({"service.name": service, **resource_attrs}))
    memory = InMemoryLogRecordExporter()
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    handler = LoggingHandler(logger_provider=provider)
    logger = logging.getLogger(f"tracehound.planted.{service}")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        raise KeyError(f"settings of {cause_word(service)}")
    except KeyError:
        logger.exception(body, extra=log_attrs)
    finally:
        logger.removeHandler(handler)
        provider.shutdown()
    exporter = OTLPLogExporter(
        endpoint=f"{url}/v1/logs",
        headers={"Authorization": f"Bearer {TOKEN}"},
        compression=Compression.Gzip,
    )
    assert exporter.export(memory.get_finished_logs()) == LogRecordExportResult.SUCCESS
    exporter.shutdown()
    placed = [Placed(s, "otlp body") for s in batch.long]
    return placed + [Placed(s, f"otlp {where}") for where, s in short.items()]


# --- the leak check ---------------------------------------------------------------------------


def _forms(value: str) -> set[str]:
    """``value`` as it reads in the JSON dump of a sink: as written, or as a JSON fixture, a
    Python literal or Slack's mrkdwn escaping wrote it."""
    slack = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    written = {value, json.dumps(value)[1:-1], repr(value)[1:-1], slack}
    return {json.dumps(w, ensure_ascii=False)[1:-1] for w in written}


def leaks(placed: Sequence[Placed], sinks: Mapping[str, Any]) -> list[str]:
    """One line per planted value found in a sink: format, context, where it was planted, the
    sink, and the text around it there."""
    found = []
    for sink, seen in sinks.items():
        blob = json.dumps(seen, ensure_ascii=False, default=str)
        for p in placed:
            at = next((i for form in _forms(p.sample.value) if (i := blob.find(form)) >= 0), -1)
            if at >= 0:
                around = blob[max(0, at - 60) : at + len(p.sample.value) + 60]
                found.append(
                    f"{p.sample.format} [{p.sample.context}] planted in {p.where} "
                    f"reached {sink}: …{around}…"
                )
    return found


def top_message(messages: list[dict[str, Any]], service: str) -> dict[str, Any] | None:
    for m in messages:
        blocks = m.get("blocks") or []
        header = blocks[0].get("text", {}).get("text", "") if blocks else ""
        if m.get("thread_ts") is None and header.startswith(f"{service}:"):
            return m
    return None


def delivered(slack: SlackSimulator, services: Sequence[str]) -> bool:
    """Every service's message is posted, and its trace reply in the thread."""
    messages = slack.messages
    replied = {m.get("thread_ts") for m in messages}
    tops = [top_message(messages, s) for s in services]
    return all(m is not None and m["ts"] in replied for m in tops)


def test_no_corpus_secret_from_any_intake_path_or_file_reaches_models_reranker_or_slack(
    stack: LocalStack,
    settings: Settings,
    tmp_path: Path,
    ollama_sim: OllamaSimulator,
    rerank_sim: OllamaSimulator,
    slack: SlackSimulator,
) -> None:
    samples = planted_samples()
    shares = dealt(samples)
    name = f"corpus-{uuid.uuid4().hex[:6]}"
    repo_dir = tmp_path / "repo"
    shutil.copytree(SAMPLE_SERVICE, repo_dir)
    placed = plant_repository(repo_dir, shares["repo"])

    http_batches = packed(shares["http"], long_chars=EVENT_CHARS, short_slots=len(HTTP_SHORT))
    sentry_batches = packed(
        shares["sentry"], long_chars=SENTRY_VALUE_CHARS, short_slots=len(SENTRY_SHORT)
    )
    otlp_batches = packed(shares["otlp"], long_chars=EVENT_CHARS, short_slots=len(OTLP_SHORT))
    http_services = [f"{name}-http-{i:02d}" for i in range(len(http_batches))]
    projects = [SENTRY_FIRST_PROJECT + i for i in range(len(sentry_batches))]
    sentry_services = [f"{name}-sentry-{p}" for p in projects]
    otlp_services = [f"{name}-otlp-{i:02d}" for i in range(len(otlp_batches))]
    services = http_services + sentry_services + otlp_services

    env = {
        **stack.env,
        "TRACEHOUND_INGEST_TOKEN": TOKEN,
        "TRACEHOUND_SENTRY_KEYS": SENTRY_KEY,
        "TRACEHOUND_SENTRY_PROJECTS": ",".join(
            f"{p}={s}:{name}" for p, s in zip(projects, sentry_services, strict=True)
        ),
        # OTLP records name no repo: their services' records go to the planted one.
        "TRACEHOUND_SERVICE_REPOS": f"{name}-*={name}",
    }
    # The model reads one planted file in each HTTP event's analysis (one analysis's lookup
    # budget holds about two reads), and quotes what it read that looks like a token.
    reads = [
        {"match": http_services[i % len(http_services)],
         "tool_calls": [{"name": "read_file", "arguments": {"path": p, "start": 1, "end": 80}}]}
        for i, p in enumerate(INDEXED_FILES)
    ]  # fmt: skip
    ollama_sim.clear_log()
    rerank_sim.clear_log()
    ollama_sim.configure(tool_turns=reads, quote=r"REDACTED|[A-Za-z0-9+/_=-]{24,}")
    ingest, url = start_ingest(stack.workdir, env)
    app = sender_app(settings)
    try:
        report = index_repository(app, repo_dir, name, max_bytes=1_000_000, timeout=180)
        assert report.files > 10 and not report.failed
        indexed_at = len(ollama_sim.requests)

        records = []
        for service, batch in zip(http_services, http_batches, strict=True):
            record, where = http_record(service, name, batch, settings.max_trace_bytes)
            records.append(record)
            placed += where
        r = httpx.post(
            f"{url}/v1/events?wait=true",
            json=records,
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=60,
        )
        assert r.status_code == 202, r.text
        assert [g["new"] for g in r.json()["groups"]] == [True] * len(records)

        host = url.removeprefix("http://")
        events, sources = [], []
        for project, batch in zip(projects, sentry_batches, strict=True):
            dsn = f"http://{SENTRY_KEY}@{host}/{project}"
            event, source, where = sentry_event(project, dsn, batch)
            events.append(event)
            sources.append(source)
            placed += where
        assert len(run_sentry_app(tmp_path, events, sources)) == len(events)

        for service, batch in zip(otlp_services, otlp_batches, strict=True):
            placed += otlp_export(url, service, batch)

        wait_until(lambda: delivered(slack, services), 240, "every event's message and trace")
    finally:
        ollama_sim.configure(quote=None, tool_turns=[])
        app.close()
        ingest.stop()

    # What was planted: every sample once, every context on every path, 150+ formats.
    assert len(placed) == len(samples) and {p.sample for p in placed} == set(samples)
    assert len({p.sample.format for p in placed}) >= 150
    for path in ("repository", "http", "sentry", "otlp"):
        on_path = {p.sample.context for p in placed if p.where.startswith(path)}
        assert on_path == set(CONTEXTS), f"{path} lacks {set(CONTEXTS) - on_path}"

    model_log = ollama_sim.requests
    embeds = [r["body"] for r in model_log if "embed" in r["path"]]
    # Chat calls only: the model host also gets GETs without a body (/api/tags, /api/ps: is
    # it back, what is loaded), which a CI run once met here.
    chats = [r["body"] for r in model_log if r["path"] == "/api/chat"]
    reranks = [r["body"] for r in rerank_sim.requests]
    posted = slack.messages
    # They ran: the index and every error's query embedded, every error analysed (the planted
    # files read with tools), the reranker asked, and what the model and Slack got redacted.
    assert any("search_document" in json.dumps(r["body"]) for r in model_log[:indexed_at])
    query_embeds = [b for b in embeds if "search_query" in json.dumps(b)]
    assert len(query_embeds) >= len(services)
    for service in services:
        prompts = [c for c in chats if service in json.dumps(c)]
        assert prompts, f"{service} was not analysed"
        assert "REDACTED" in json.dumps(prompts), f"{service}'s prompts hold no redaction marker"
    tool_results = [
        str(m.get("content"))
        for c in chats
        for m in c.get("messages", [])
        if m.get("role") == "tool"
    ]
    for path in INDEXED_FILES:
        read = [t for t in tool_results if t.startswith(f"{path}:")]
        assert read and "REDACTED" in json.dumps(read), f"the model did not read {path}"
    assert reranks
    assert "REDACTED" in json.dumps(posted)

    leaked = leaks(
        placed,
        {
            "embed": embeds,
            "chat": chats,
            "rerank": reranks,
            "slack": [posted, slack.requests],
        },
    )
    assert not leaked, f"{len(leaked)} planted secrets left tracehound:\n" + "\n".join(leaked)
