"""Tests of the Ollama and Slack SIMULATORS (test doubles), over real loopback HTTP."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import ollama
import pytest
from langchain_ollama import ChatOllama
from pydantic import BaseModel, ConfigDict, Field
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook import WebhookClient

from shared.devtools.simulators.ollama import OllamaSimulator, hashed_embedding, schema_instance
from shared.devtools.simulators.slack import SlackSimulator

REPO = Path(__file__).resolve().parents[2]
EMBED = "nomic-embed-text"
CHAT = "qwen2.5-coder:7b"
RERANK = "bge-reranker-v2-m3"
NO_TLS = {"verify": False}  # plain-HTTP loopback; skips loading CA certificates


# ------------------------------------------------------------------ schema mirror


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Hypothesis(_Strict):
    cause: str
    confidence: float = Field(ge=0.0, le=1.0)
    evidence: list[str]


class FileRef(_Strict):
    path: str
    start_line: int = Field(ge=0)
    end_line: int = Field(ge=0)
    reason: str = ""


class Reply(_Strict):
    summary: str
    hypotheses: list[Hypothesis]
    suggested_fix: str
    relevant_files: list[FileRef]
    confidence: float = Field(ge=0.0, le=1.0)


SCHEMA = Reply.model_json_schema()

ERROR = """Traceback (most recent call last):
  File "app/orders.py", line 31, in total_price
    return sum(item["sku_price"] * item["quantity"] for item in order.items)
KeyError: 'sku_price'"""

PROMPT = f"""Service: shop
Exception: KeyError

<error>
{ERROR}
</error>

Candidate source files, best first:
<candidate rank="1" path="app/utils.py" lines="1-12">
def slugify(text):
    return text.lower().replace(" ", "-")
</candidate>
<candidate rank="2" path="app/orders.py" lines="20-42">
def total_price(order):
    return sum(item["sku_price"] * item["quantity"] for item in order.items)
</candidate>

Return the analysis as JSON."""


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    # One client for the module: building an httpx.Client loads CA certificates (~80 ms).
    with httpx.Client(verify=False, timeout=5) as client:
        yield client


@pytest.fixture
def sim() -> Iterator[OllamaSimulator]:
    with OllamaSimulator() as s:
        yield s


@pytest.fixture
def slack() -> Iterator[SlackSimulator]:
    with SlackSimulator() as s:
        yield s


def _embed(
    http: httpx.Client, sim: OllamaSimulator, texts: list[str] | str, model: str = EMBED
) -> httpx.Response:
    return http.post(f"{sim.url}/api/embed", json={"model": model, "input": texts})


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


# ------------------------------------------------------------------------- ollama


def test_root_version_tags_and_ps(sim: OllamaSimulator, http: httpx.Client) -> None:
    assert http.get(sim.url + "/").text == "Ollama is running"
    assert http.get(sim.url + "/api/version").json() == {"version": "0.0.0-simulator"}
    client = ollama.Client(host=sim.url, verify=False)
    names = [m.model for m in client.list().models]
    assert names == [EMBED, CHAT, RERANK]
    assert client.ps().models == []
    _embed(http, sim, "warm up")
    assert [m.model for m in client.ps().models] == [EMBED]


def test_embed_is_deterministic_ordered_and_normalised(
    sim: OllamaSimulator,
    http: httpx.Client,
) -> None:
    texts = ["OrderService.findById failed", "def total_price(order):", "καλημέρα κόσμε"]
    first = _embed(http, sim, texts).json()
    again = _embed(http, sim, texts).json()
    reversed_ = _embed(http, sim, texts[::-1]).json()
    assert first["model"] == EMBED
    assert set(first) >= {"embeddings", "total_duration", "load_duration", "prompt_eval_count"}
    vectors = first["embeddings"]
    assert len(vectors) == 3 and all(len(v) == 256 for v in vectors)
    assert vectors == again["embeddings"]
    assert vectors == reversed_["embeddings"][::-1]
    for v in vectors:
        assert math.isclose(math.sqrt(_dot(v, v)), 1.0, rel_tol=1e-9)
    assert vectors[0] == pytest.approx(hashed_embedding(texts[0]))
    single = _embed(http, sim, texts[1]).json()["embeddings"]
    assert single == [vectors[1]]


def test_embed_similarity_prefixes_and_empty_text(sim: OllamaSimulator, http: httpx.Client) -> None:
    query = "search_query: KeyError sku_price in total_price of OrderService"
    related = "search_document: class OrderService:\n    def total_price(self, sku_price): ..."
    unrelated = "search_document: CSS stylesheet colour palette for the marketing banner"
    q, r, u = _embed(http, sim, [query, related, unrelated]).json()["embeddings"]
    assert _dot(q, r) > _dot(q, u) + 0.2
    plain, prefixed = _embed(http, sim, ["total price", "search_query: total price"]).json()[
        "embeddings"
    ]
    assert plain == prefixed
    empty = _embed(http, sim, ["", "  ... ;; "]).json()["embeddings"]
    assert empty[0] == empty[1] == [1.0] + [0.0] * 255
    sim.configure(dim=64)
    assert len(_embed(http, sim, "x y").json()["embeddings"][0]) == 64


def test_unknown_model_is_404_with_ollama_phrasing(
    sim: OllamaSimulator,
    http: httpx.Client,
) -> None:
    response = _embed(http, sim, "hello", model="no-such-model")
    assert response.status_code == 404
    # server/routes.go (chat, generate, embed): fmt.Sprintf("model '%s' not found", ...)
    assert response.json() == {"error": "model 'no-such-model' not found"}
    chat = http.post(
        f"{sim.url}/api/chat",
        json={"model": "nope:1b", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert chat.status_code == 404
    with pytest.raises(ollama.ResponseError) as info:
        ollama.Client(host=sim.url, verify=False).embed(model="missing", input="x")
    assert info.value.status_code == 404
    assert info.value.error == "model 'missing' not found"
    # name and name:latest are the same model, as in Ollama
    assert _embed(http, sim, "hello", model=f"{EMBED}:latest").status_code == 200


def test_malformed_json_is_400(sim: OllamaSimulator, http: httpx.Client) -> None:
    response = http.post(
        f"{sim.url}/api/embed", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert "error" in response.json()
    assert http.get(f"{sim.url}/api/nothing").status_code == 404


def _check_cites_orders(content: str) -> Reply:
    reply = Reply.model_validate_json(content)
    assert "app/orders.py" in reply.summary
    assert "KeyError: 'sku_price'" in reply.summary
    assert reply.hypotheses[0].evidence == ["app/orders.py:20-42"]
    assert reply.relevant_files[0].path == "app/orders.py"
    assert (reply.relevant_files[0].start_line, reply.relevant_files[0].end_line) == (20, 42)
    assert [f.path for f in reply.relevant_files] == ["app/orders.py", "app/utils.py"]
    assert "app/orders.py" in reply.suggested_fix
    assert reply.confidence == pytest.approx(0.6)
    return reply


def test_chat_langchain_non_streaming_structured(sim: OllamaSimulator) -> None:
    llm = ChatOllama(
        model=CHAT, base_url=sim.url, format=SCHEMA, client_kwargs=NO_TLS, temperature=0
    )
    message = llm.invoke([("system", "You are tracehound."), ("user", PROMPT)], stream=False)
    _check_cites_orders(str(message.content))
    (entry,) = sim.requests_to("/api/chat")
    assert entry["body"]["stream"] is False
    assert entry["body"]["format"] == SCHEMA
    assert entry["model"] == CHAT and entry["status"] == 200


def test_chat_langchain_streaming_structured(sim: OllamaSimulator) -> None:
    llm = ChatOllama(model=CHAT, base_url=sim.url, format=SCHEMA, client_kwargs=NO_TLS)
    message = llm.invoke([("user", PROMPT)])
    _check_cites_orders(str(message.content))
    assert sim.requests_to("/api/chat")[0]["body"]["stream"] is True


def test_chat_repair_turn_still_reads_the_prompt_markers(sim: OllamaSimulator) -> None:
    client = ollama.Client(host=sim.url, verify=False)
    response = client.chat(
        model=CHAT,
        format=SCHEMA,
        messages=[
            {"role": "user", "content": PROMPT},
            {"role": "assistant", "content": "{oops"},
            {"role": "user", "content": "Your previous answer was not valid JSON. Fix it."},
        ],
    )
    _check_cites_orders(response.message.content or "")


def test_chat_streaming_ndjson_over_httpx_and_ollama_client(
    sim: OllamaSimulator,
    http: httpx.Client,
) -> None:
    body = {"model": CHAT, "messages": [{"role": "user", "content": PROMPT}]}  # stream default
    with http.stream("POST", f"{sim.url}/api/chat", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in response.iter_lines() if line.strip()]
    assert len(lines) >= 3
    assert all(not line["done"] for line in lines[:-1])
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "stop"
    assert lines[-1]["message"]["content"] == ""
    assert lines[-1]["eval_count"] >= 1 and "total_duration" in lines[-1]
    text = "".join(line["message"]["content"] for line in lines)
    assert text.startswith("SIMULATED ANALYSIS:") and "app/orders.py:20-42" in text

    parts = list(
        ollama.Client(host=sim.url, verify=False).chat(
            model=CHAT, messages=[{"role": "user", "content": PROMPT}], stream=True
        )
    )
    assert parts[-1].done is True
    assert "".join(p.message.content or "" for p in parts) == text


def test_chat_injected_500_then_recovers(sim: OllamaSimulator, http: httpx.Client) -> None:
    sim.fail("/api/chat", 500, times=1)
    messages = [{"role": "user", "content": "hi"}]
    body = {"model": CHAT, "messages": messages, "stream": True}
    with http.stream("POST", f"{sim.url}/api/chat", json=body) as response:
        response.read()
    assert response.status_code == 500
    assert "error" in response.json()
    ok = http.post(f"{sim.url}/api/chat", json={**body, "stream": False})
    assert ok.status_code == 200 and ok.json()["done"] is True
    sim.fail("/api/chat", 503, times=-1, body={"error": "busy"})
    with pytest.raises(ollama.ResponseError) as info:
        client = ollama.Client(host=sim.url, verify=False)
        list(client.chat(model=CHAT, messages=messages, stream=True))
    assert info.value.status_code == 503 and info.value.error == "busy"
    assert http.post(f"{sim.url}/api/chat", json=body).status_code == 503
    sim.reset_faults()
    assert http.post(f"{sim.url}/api/chat", json=body).status_code == 200
    assert [e["status"] for e in sim.requests_to("/api/chat")] == [500, 200, 503, 503, 200]


def test_chat_reply_overrides(sim: OllamaSimulator) -> None:
    client = ollama.Client(host=sim.url, verify=False)
    messages = [{"role": "user", "content": PROMPT}]
    sim.configure(chat_replies=["not json {"])
    first = client.chat(model=CHAT, messages=messages, format=SCHEMA).message.content
    second = client.chat(model=CHAT, messages=messages, format=SCHEMA).message.content
    assert first == "not json {"
    _check_cites_orders(second or "")
    sim.configure(chat_reply="fixed")
    assert client.chat(model=CHAT, messages=messages, format=SCHEMA).message.content == "fixed"
    sim.configure(chat_reply=None)
    assert client.chat(model=CHAT, messages=messages, format="json").message.content == (
        '{"response": "simulated"}'
    )


def test_no_candidates_gives_low_confidence(sim: OllamaSimulator) -> None:
    client = ollama.Client(host=sim.url, verify=False)
    content = client.chat(
        model=CHAT,
        format=SCHEMA,
        messages=[
            {"role": "user", "content": "<error>\nValueError: bad\n</error>\nNo candidates."}
        ],
    ).message.content
    reply = Reply.model_validate_json(content or "")
    assert reply.confidence == pytest.approx(0.1)
    assert reply.relevant_files == [] and reply.hypotheses[0].evidence == []
    assert "ValueError: bad" in reply.summary


def test_generic_schema_instance_validates() -> None:
    jsonschema = pytest.importorskip("jsonschema")

    class Inner(BaseModel):
        kind: str = Field(pattern="^.*$")
        level: int = Field(ge=3, le=5)

    class Other(BaseModel):
        name: str = Field(min_length=12)
        ratio: float = Field(gt=1.0)
        flag: bool
        mode: str = Field(json_schema_extra={"enum": ["fast", "slow"]})
        inner: Inner
        items: list[Inner] = Field(min_length=2)
        maybe: Inner | None = None
        tags: dict[str, int] = {}

    schema = Other.model_json_schema()
    instance = schema_instance(schema)
    jsonschema.validate(instance, schema)
    Other.model_validate(instance)
    assert instance["mode"] == "fast" and len(instance["items"]) == 2


def test_generic_schema_over_http(sim: OllamaSimulator) -> None:
    class Answer(BaseModel):
        verdict: bool
        count: int = Field(ge=10)

    content = (
        ollama.Client(host=sim.url, verify=False)
        .chat(
            model=CHAT,
            messages=[{"role": "user", "content": "hi"}],
            format=Answer.model_json_schema(),
        )
        .message.content
    )
    assert Answer.model_validate_json(content or "") == Answer(verdict=True, count=10)


def test_model_loading_swaps_and_keep_alive_zero(sim: OllamaSimulator, http: httpx.Client) -> None:
    sim.configure(load_seconds=0.05)
    chat = {"model": CHAT, "messages": [{"role": "user", "content": "hi"}], "stream": False}
    started = time.perf_counter()
    assert _embed(http, sim, "a").json()["load_duration"] >= 40_000_000
    _embed(http, sim, "b")  # already loaded: no load
    http.post(f"{sim.url}/api/chat", json=chat)
    _embed(http, sim, "c")
    assert time.perf_counter() - started >= 0.15
    assert sim.load_count == 3 and sim.swap_count == 2
    assert sim.loaded_model == EMBED
    load = http.post(f"{sim.url}/api/chat", json={"model": CHAT, "messages": []}).json()
    assert load["done"] is True and load["done_reason"] == "load"
    assert sim.loaded_model == CHAT
    http.post(f"{sim.url}/api/chat", json={**chat, "keep_alive": 0})
    assert sim.loaded_model is None and sim.unload_count == 1
    assert http.get(f"{sim.url}/api/ps").json() == {"models": []}
    _embed(http, sim, "d")
    http.post(f"{sim.url}/api/embed", json={"model": EMBED, "input": "e", "keep_alive": "0s"})
    assert sim.loaded_model is None and sim.unload_count == 2
    assert [e["event"] for e in sim.model_events][-2:] == ["load", "unload"]


def test_an_unload_request_for_a_model_not_loaded_loads_nothing(
    sim: OllamaSimulator, http: httpx.Client
) -> None:
    """routes.go answers an empty request with keep_alive 0 at once ("unload"); the
    scheduler's expireRunner acts on a loaded runner only, so nothing is loaded (the simulator
    used to load the model to unload it: host-scheduling costs counted a load too many)."""
    sim.configure(load_seconds=0.2)
    _embed(http, sim, "a")
    for path, empty in (("/api/generate", {"prompt": ""}), ("/api/chat", {"messages": []})):
        started = time.perf_counter()
        reply = http.post(f"{sim.url}{path}", json={"model": CHAT, **empty, "keep_alive": 0})
        assert reply.json()["done_reason"] == "unload"
        assert time.perf_counter() - started < 0.2  # no load paid
    assert sim.loaded_model == EMBED and sim.load_count == 1 and sim.unload_count == 0
    http.post(f"{sim.url}/api/generate", json={"model": EMBED, "keep_alive": 0})
    assert sim.loaded_model is None and sim.unload_count == 1 and sim.load_count == 1


def test_an_exclusive_host_logs_when_it_took_each_request_up(
    sim: OllamaSimulator, http: httpx.Client
) -> None:
    """One request at a time: the second of two sent together waits for the first, and its
    log entry says when the host took it up (``t_start``), so a benchmark tells its queueing
    from its service (benchmarks/host_scheduling.py)."""
    # 0.6 s each: the two threads' requests arrive within 0.45 s of each other even on a
    # loaded machine (with 0.2 s, CI once saw the second arrive after the first was served).
    sim.configure(exclusive=True, latency={"embed": 0.6})

    def send(text: str) -> None:
        with httpx.Client() as own:  # one connection each: they arrive together
            _embed(own, sim, text).raise_for_status()

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(send, ["a", "b"]))
    first, second = sorted(sim.requests_to("/api/embed"), key=lambda e: e["t_start"])
    assert second["t_start"] >= first["t_end"] - 0.01  # not served side by side
    assert second["t_start"] - second["t"] >= 0.15  # it queued for the first
    assert all(e["t_end"] - e["t_start"] >= 0.6 for e in (first, second))


def test_latency_is_applied_and_logged(sim: OllamaSimulator, http: httpx.Client) -> None:
    sim.configure(latency={"embed": 0.15})
    started = time.perf_counter()
    _embed(http, sim, "slow")
    assert time.perf_counter() - started >= 0.15
    (entry,) = sim.requests_to("/api/embed")
    assert entry["t_end"] - entry["t"] >= 0.15
    assert entry["method"] == "POST" and entry["body"]["input"] == "slow"
    with pytest.raises(httpx.ReadTimeout):
        http.post(f"{sim.url}/api/embed", json={"model": EMBED, "input": "x"}, timeout=0.05)
    sim.clear_log()
    sim.configure(latency={})
    _embed(http, sim, "fast")
    assert [e["body"]["input"] for e in sim.requests] == ["fast"]


def test_rerank_shapes_are_sorted_and_map_back_by_index(
    sim: OllamaSimulator,
    http: httpx.Client,
) -> None:
    query = "KeyError sku_price in total_price"
    docs = [
        "def slugify(text): ...",
        "def total_price(order): item['sku_price']",
        "sku_price lookup table",
    ]
    v1 = http.post(
        f"{sim.url}/v1/rerank",
        json={"model": RERANK, "query": query, "documents": docs, "top_n": 3},
    ).json()
    assert v1["model"] == RERANK and "usage" in v1
    scores = [r["relevance_score"] for r in v1["results"]]
    assert scores == sorted(scores, reverse=True)
    assert v1["results"][0]["index"] == 1 and v1["results"][-1]["index"] == 0
    assert scores[-1] < 0 < scores[0]  # llama.cpp answers the rank head's logits
    top1 = http.post(
        f"{sim.url}/v1/rerank",
        json={"model": RERANK, "query": query, "documents": docs, "top_n": 1},
    )
    assert [r["index"] for r in top1.json()["results"]] == [1]
    objects = http.post(  # llama.cpp takes documents as strings only
        f"{sim.url}/v1/rerank",
        json={"model": RERANK, "query": query, "documents": [{"text": d} for d in docs]},
    )
    assert objects.status_code == 400

    tei = http.post(
        f"{sim.url}/rerank", json={"query": query, "texts": docs, "return_text": True}
    ).json()
    assert isinstance(tei, list) and [r["index"] for r in tei] == [1, 2, 0]
    assert tei[0]["text"] == docs[1]
    by_index = {r["index"]: r["score"] for r in tei}
    assert by_index[1] == pytest.approx(1 / (1 + math.exp(-scores[0])))  # TEI: the sigmoid

    api = http.post(
        f"{sim.url}/api/rerank", json={"model": RERANK, "query": query, "documents": docs}
    ).json()
    assert [r["index"] for r in api["results"]] == [1, 2, 0]
    assert sim.loaded_model == RERANK
    assert sim.requests_to("/rerank")[0]["model"] is None

    missing = http.post(
        f"{sim.url}/api/rerank", json={"model": "nope", "query": query, "documents": docs}
    )
    assert missing.status_code == 404
    assert missing.json()["error"] == "model 'nope' not found"
    # llama-server serves the one model it loaded and echoes whatever name it was sent
    echoed = http.post(
        f"{sim.url}/v1/rerank", json={"model": "nope", "query": query, "documents": docs}
    )
    assert echoed.status_code == 200 and echoed.json()["model"] == "nope"


def test_ollama_control_endpoints(sim: OllamaSimulator, http: httpx.Client) -> None:
    base = sim.url
    config = http.post(
        f"{base}/_sim/config",
        json={
            "chat_reply": "from another process",
            "models": [CHAT],
            "fail": {"path": "/api/tags", "status": 502, "times": 1},
        },
    ).json()
    assert config["chat_reply"] == "from another process" and config["models"] == [CHAT]
    assert http.get(f"{base}/api/tags").status_code == 502
    assert http.get(f"{base}/api/tags").status_code == 200
    assert _embed(http, sim, "x").status_code == 404  # EMBED no longer "pulled"
    reply = http.post(
        f"{base}/api/chat",
        json={"model": CHAT, "messages": [{"role": "user", "content": "hi"}], "stream": False},
    )
    assert reply.json()["message"]["content"] == "from another process"
    log = http.get(f"{base}/_sim/log").json()
    assert [(e["method"], e["path"], e["status"]) for e in log] == [
        ("GET", "/api/tags", 502),
        ("GET", "/api/tags", 200),
        ("POST", "/api/embed", 404),
        ("POST", "/api/chat", 200),
    ]
    assert log[-1]["model"] == CHAT and log[-1]["t_end"] >= log[-1]["t"]
    assert http.post(f"{base}/_sim/config", json={"bogus": 1}).status_code == 400
    http.post(f"{base}/_sim/fail", json={"path": "/api/embed", "status": 500, "times": -1})
    assert http.post(f"{base}/_sim/reset").json() == {"ok": True}
    assert http.get(f"{base}/_sim/log").json() == []
    assert http.get(f"{base}/_sim/state").json()["faults"] == {}


def test_stop_drops_kept_alive_connections_and_restart_keeps_the_port() -> None:
    sim = OllamaSimulator().start()
    url = sim.url
    with httpx.Client(base_url=url, timeout=2, verify=False) as client:
        assert client.get("/api/version").status_code == 200
        sim.stop()
        assert not sim.running
        with pytest.raises(httpx.TransportError):
            client.get("/api/version")
        sim.start()  # comes back where the clients expect it
        try:
            assert sim.url == url
            assert client.get("/api/version").status_code == 200
            assert [e["status"] for e in sim.requests] == [200, 200]
        finally:
            sim.stop()


# -------------------------------------------------------------------------- slack


def _web(slack: SlackSimulator, token: str = "xoxb-test") -> WebClient:
    base = slack.url + "/api/"
    assert base == slack.api_url
    return WebClient(token=token, base_url=base)


BLOCKS = [
    {"type": "header", "text": {"type": "plain_text", "text": "KeyError in shop"}},
    {"type": "section", "text": {"type": "mrkdwn", "text": "*app/orders.py:20-42*"}},
]


def test_post_message_and_auth_test(slack: SlackSimulator) -> None:
    client = _web(slack)
    first = client.chat_postMessage(channel="C0ALERTS", text="KeyError", blocks=BLOCKS)
    second = client.chat_postMessage(channel="#alerts", text="reply", thread_ts=first["ts"])
    assert first["ok"] is True and first["channel"] == "C0ALERTS"
    assert first["message"]["blocks"] == BLOCKS
    assert float(second["ts"]) > float(first["ts"])
    stored = slack.messages
    assert [m["text"] for m in stored] == ["KeyError", "reply"]
    assert stored[0]["blocks"] == BLOCKS and stored[1]["thread_ts"] == first["ts"]
    assert slack.messages_in("alerts")[0]["text"] == "reply"
    auth = client.auth_test()
    assert (auth["team_id"], auth["user_id"], auth["bot_id"]) == ("T0SIM", "U0SIM", "B0SIM")
    assert slack.requests_to("/api/chat.postMessage")[0]["token"] == "xoxb-test"


def test_auth_and_channel_errors(slack: SlackSimulator, http: httpx.Client) -> None:
    with pytest.raises(SlackApiError) as info:
        _web(slack, token="xoxp-user").chat_postMessage(channel="C1", text="x")
    assert info.value.response.status_code == 200
    assert info.value.response["error"] == "invalid_auth"
    missing = http.post(slack.url + "/api/chat.postMessage", json={"channel": "C1", "text": "x"})
    assert missing.json() == {"ok": False, "error": "not_authed"}
    slack.configure(channels=["C0ALERTS"], valid_tokens=["xoxb-good"])
    with pytest.raises(SlackApiError) as info:
        _web(slack, token="xoxb-good").chat_postMessage(channel="C0OTHER", text="x")
    assert info.value.response["error"] == "channel_not_found"
    with pytest.raises(SlackApiError):
        _web(slack, token="xoxb-other").chat_postMessage(channel="C0ALERTS", text="x")
    assert _web(slack, token="xoxb-good").chat_postMessage(channel="C0ALERTS", text="x")["ok"]
    assert len(slack.messages) == 1


def test_rate_limit_then_success(slack: SlackSimulator) -> None:
    slack.rate_limit(1, retry_after=7)
    client = _web(slack)
    with pytest.raises(SlackApiError) as info:
        client.chat_postMessage(channel="C1", text="first try")
    assert info.value.response.status_code == 429
    assert info.value.response.headers["Retry-After"] == "7"
    assert info.value.response["error"] == "ratelimited"
    assert slack.messages == []
    assert client.chat_postMessage(channel="C1", text="second try")["ok"] is True
    assert [m["text"] for m in slack.messages] == ["second try"]
    assert [e["status"] for e in slack.requests] == [429, 200]


def test_rate_limit_aimed_at_top_level_messages_lets_thread_replies_pass(
    slack: SlackSimulator,
) -> None:
    slack.rate_limit(1, top_level_only=True)
    client = _web(slack)
    assert client.chat_postMessage(channel="C1", text="reply", thread_ts="1.000100")["ok"]
    with pytest.raises(SlackApiError) as info:
        client.chat_postMessage(channel="C1", text="new message")
    assert info.value.response.status_code == 429
    assert client.chat_postMessage(channel="C1", text="new message")["ok"]
    assert [e["status"] for e in slack.requests] == [200, 429, 200]


def test_chat_update(slack: SlackSimulator) -> None:
    client = _web(slack)
    posted = client.chat_postMessage(channel="C1", text="analysing…")
    updated = client.chat_update(channel="C1", ts=posted["ts"], text="done", blocks=BLOCKS)
    assert updated["ok"] and updated["ts"] == posted["ts"] and updated["text"] == "done"
    (message,) = slack.messages
    assert message["updated"] is True and message["text"] == "done"
    assert message["history"][0]["text"] == "analysing…" and message["blocks"] == BLOCKS
    with pytest.raises(SlackApiError) as info:
        client.chat_update(channel="C1", ts="1.000000", text="x")
    assert info.value.response["error"] == "message_not_found"


def test_form_encoded_post_with_json_blocks(slack: SlackSimulator, http: httpx.Client) -> None:
    response = http.post(
        slack.url + "/api/chat.postMessage",
        data={"token": "xoxb-form", "channel": "C1", "text": "form", "blocks": json.dumps(BLOCKS)},
    )
    assert response.json()["ok"] is True
    assert slack.messages[0]["blocks"] == BLOCKS
    entry = slack.requests[0]
    assert entry["token"] == "xoxb-form" and "token" not in entry["body"]


def test_validation_and_injected_failures(slack: SlackSimulator) -> None:
    client = _web(slack)
    with pytest.raises(SlackApiError) as info:
        client.chat_postMessage(
            channel="C1",
            text="x",
            blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "y" * 3001}}],
        )
    assert info.value.response["error"] == "invalid_blocks"
    with pytest.raises(SlackApiError) as info:
        client.chat_postMessage(channel="C1", text="x", blocks=[{"type": "divider"}] * 51)
    assert info.value.response["error"] == "invalid_blocks"
    with pytest.warns(UserWarning), pytest.raises(SlackApiError) as info:  # sdk warns: no text
        client.chat_postMessage(channel="C1")
    assert info.value.response["error"] == "no_text"
    slack.fail("chat.postMessage", "is_archived", times=1)
    with pytest.raises(SlackApiError) as info:
        client.chat_postMessage(channel="C1", text="x")
    assert info.value.response["error"] == "is_archived"
    assert client.chat_postMessage(channel="C1", text="x")["ok"]
    assert len(slack.messages) == 1


def test_webhook(slack: SlackSimulator) -> None:
    hook = WebhookClient(slack.url + "/services/T000/B000/secret")
    response = hook.send(text="from webhook", blocks=BLOCKS)
    assert (response.status_code, response.body) == (200, "ok")
    (message,) = slack.messages
    assert message["via"] == "webhook" and message["blocks"] == BLOCKS
    assert message["webhook"] == "/services/T000/B000/secret"
    slack.rate_limit(1, retry_after=2)
    limited = hook.send(text="again")
    assert limited.status_code == 429 and limited.headers["Retry-After"] == "2"
    assert hook.send(text="again").status_code == 200
    empty = hook.send_dict({})
    assert (empty.status_code, empty.body) == (400, "invalid_payload")
    slack.fail("webhook", "no_service", status=404)
    assert (hook.send(text="x").status_code, hook.send(text="y").status_code) == (404, 200)
    assert [m["text"] for m in slack.messages] == ["from webhook", "again", "y"]


def test_slack_control_endpoints(slack: SlackSimulator, http: httpx.Client) -> None:
    base = slack.url
    config = http.post(
        f"{base}/_sim/config",
        json={
            "channels": ["C0ALERTS"],
            "rate_limit": {"times": 1, "retry_after": 4},
            "fail": [{"method": "auth.test", "error": "account_inactive"}],
        },
    ).json()
    assert config["channels"] == {"C0ALERTS": "c0alerts"}
    client = _web(slack)
    with pytest.raises(SlackApiError) as info:
        client.chat_postMessage(channel="C0ALERTS", text="x")
    assert info.value.response.status_code == 429
    with pytest.raises(SlackApiError) as info:
        client.auth_test()
    assert info.value.response["error"] == "account_inactive"
    client.chat_postMessage(channel="C0ALERTS", text="hello")
    log = http.get(f"{base}/_sim/log").json()
    assert [(e["api_method"], e["status"], e["error"]) for e in log] == [
        ("chat.postMessage", 429, "ratelimited"),
        ("auth.test", 200, "account_inactive"),
        ("chat.postMessage", 200, None),
    ]
    assert [m["text"] for m in http.get(f"{base}/_sim/messages").json()] == ["hello"]
    assert http.post(f"{base}/_sim/config", json={"nope": True}).status_code == 400
    assert http.post(f"{base}/_sim/reset").json() == {"ok": True}
    assert http.get(f"{base}/_sim/log").json() == []
    assert slack.messages == []


# ---------------------------------------------------------------- standalone mode


@pytest.mark.parametrize(
    ("module", "probe"),
    [
        ("shared.devtools.simulators.ollama", "/api/version"),
        ("shared.devtools.simulators.slack", "/_sim/log"),
    ],
)
def test_main_runs_in_foreground_and_stops_on_sigterm(
    module: str,
    probe: str,
    http: httpx.Client,
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--port", "0"], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert http.get(url + probe, timeout=5).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "read",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_with_tools_answers_scripted_tool_calls_in_ollamas_shape(
    sim: OllamaSimulator, http: httpx.Client, stream: bool
) -> None:
    sim.configure(tool_turns=[{"match": "look", "tool_calls": [
        {"name": "read_file", "arguments": {"path": "a.py"}}]}])  # fmt: skip
    body = {"model": CHAT, "messages": [{"role": "user", "content": "look"}], "tools": TOOLS,
            "stream": stream}  # fmt: skip
    r = http.post(f"{sim.url}/api/chat", json=body)
    lines = [json.loads(x) for x in r.text.splitlines() if x.strip()]
    [call] = [c for line in lines for c in line["message"].get("tool_calls", [])]
    assert call["function"] == {"index": 0, "name": "read_file", "arguments": {"path": "a.py"}}
    assert lines[-1]["done"] is True and len(lines) == (2 if stream else 1)
    # The turn is used up: the next request is answered (with the analysis, as JSON).
    again = http.post(f"{sim.url}/api/chat", json={**body, "stream": False}).json()
    assert "tool_calls" not in again["message"] and json.loads(again["message"]["content"])


def test_chat_with_tools_for_a_model_without_them_is_ollamas_400(
    sim: OllamaSimulator, http: httpx.Client
) -> None:
    sim.configure(tools_unsupported="")
    body = {"model": CHAT, "messages": [{"role": "user", "content": "x"}], "tools": TOOLS}
    r = http.post(f"{sim.url}/api/chat", json=body)
    assert r.status_code == 400
    assert r.json() == {"error": f"registry.ollama.ai/library/{CHAT} does not support tools"}
    sim.configure(tools_unsupported=None)
