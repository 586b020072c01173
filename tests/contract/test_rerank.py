"""Rerank servers as their sources define them, held by the simulator and kept by tracehound.

llama.cpp refuses a query+document pair over its batch (n_ubatch) with HTTP 500 and answers
raw logits; TEI refuses more than 32 texts a request and answers sigmoid scores. Each test
drives httpx (inside tracehound's HttpReranker, or directly) against the simulator and checks
both sides: what the server received fits what it documents, and tracehound copes with what
it refuses. Rules and sources: shared/devtools/simulators/ollama.py (_rerank_v1,
_rerank_tei), shared/models/reranker.py (BACKENDS).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import httpx
import pytest

from shared.core.domain import (
    RERANK_REFUSED,
    RERANK_UNAVAILABLE,
    ErrorEvent,
    Fallback,
    Investigation,
)
from shared.devtools.simulators.ollama import OllamaSimulator, pair_tokens
from shared.models.health import reranker_answers
from shared.models.reranker import (
    DOC_MAX_CHARS,
    LEARN_ATTEMPTS,
    HttpReranker,
    RerankRefused,
    relevance,
)
from shared.notify.policy import needs_second_chance

pytestmark = pytest.mark.contract

MODEL = "bge-reranker-v2-m3"
QUERY = (
    "\n".join(
        f'  File "shop/services/pricing_{i}.py", line {i * 7}, in total_price_{i}'
        for i in range(30)
    )
    + "\nKeyError: 'sku_price'"
)
FILES = [
    f"shop/module_{i}.py\n"
    + f"def total_price_{i}(order):\n    return order['sku_price'] * {i}\n" * 50
    for i in range(45)
]


@pytest.fixture
def server() -> Iterator[OllamaSimulator]:
    with OllamaSimulator(models=[MODEL]) as sim:
        yield sim


def sent_pairs(server: OllamaSimulator, path: str = "/v1/rerank") -> list[int]:
    """Tokens of every pair the server was sent (by its own count), request by request."""
    return [
        pair_tokens(r["body"]["query"], doc)
        for r in server.requests_to(path)
        for doc in r["body"]["documents"]
    ]


def test_llamacpp_refuses_a_pair_over_its_batch_as_its_source_does(
    server: OllamaSimulator,
) -> None:
    refused = httpx.post(
        f"{server.url}/v1/rerank",
        json={"model": MODEL, "query": QUERY, "documents": FILES[:2]},
    )
    assert refused.status_code == 500
    error = refused.json()["error"]
    assert error["type"] == "server_error" and error["code"] == 500
    assert "is too large to process. increase the physical batch size" in error["message"]
    assert "(current batch size: 512)" in error["message"]


def test_pairs_are_cut_to_the_configured_batch_and_the_server_takes_them(
    server: OllamaSimulator,
) -> None:
    reranker = HttpReranker("llamacpp", server.url, MODEL, max_tokens=512)
    scores = reranker.scores(QUERY, FILES[:10])
    assert len(scores) == 10 and all(0.0 < s < 1.0 for s in scores)
    assert [r["status"] for r in server.requests_to("/v1/rerank")] == [200]
    assert max(sent_pairs(server)) <= 512


def test_a_server_batch_smaller_than_configured_is_learnt_from_its_refusal(
    server: OllamaSimulator,
) -> None:
    """The README's command sets -ub 2048; a server started without it refuses the first
    request, and the worker learns its real batch from the error and fits it from then on:
    reranking goes on instead of falling back to fused order on every error."""
    reranker = HttpReranker("llamacpp", server.url, MODEL, max_tokens=2048)
    assert len(reranker.scores(QUERY, FILES[:5])) == 5
    assert len(reranker.scores(QUERY, FILES[5:10])) == 5
    statuses = [r["status"] for r in server.requests_to("/v1/rerank")]
    assert statuses == [500, 200, 200]
    assert reranker.max_tokens == 512


def test_a_slot_context_smaller_than_the_batch_is_learnt_from_its_400(
    server: OllamaSimulator,
) -> None:
    """A reranker of 512 positions behind the README's -ub 2048: the pair fits the batch but
    not the slot, and llama.cpp answers 400 exceed_context_size_error, not the batch's 500.
    The worker learns the context from it as from the batch refusal, instead of giving up."""
    server.configure(rerank_ubatch=2048, rerank_ctx=512)
    reranker = HttpReranker("llamacpp", server.url, MODEL, max_tokens=2048)
    assert len(reranker.scores(QUERY, FILES[:5])) == 5
    answers = server.requests_to("/v1/rerank")
    assert [r["status"] for r in answers] == [400, 200]
    assert reranker.max_tokens == 512 and max(sent_pairs(server)[-5:]) <= 512


def test_a_vocabulary_that_counts_more_tokens_scales_the_estimate(
    server: OllamaSimulator,
) -> None:
    server.configure(rerank_token_scale=3.0)  # a tokenizer that cuts code three times finer
    reranker = HttpReranker("llamacpp", server.url, MODEL, max_tokens=512)
    assert len(reranker.scores(QUERY, FILES[:5])) == 5
    assert [r["status"] for r in server.requests_to("/v1/rerank")][-1] == 200
    assert reranker.tokens.scale > 1.0


def test_a_refusal_that_learning_cannot_fix_is_refused_not_unavailable(
    server: OllamaSimulator,
) -> None:
    server.configure(rerank_ubatch=8)  # smaller than any pair with its special tokens
    reranker = HttpReranker("llamacpp", server.url, MODEL, max_tokens=512)
    with pytest.raises(RerankRefused, match="too large"):
        reranker.scores(QUERY, FILES[:3])
    # a limit that leaves no room for a query and its code is not worth a second request
    assert len(server.requests_to("/v1/rerank")) == 1


def test_a_server_that_keeps_refusing_is_asked_a_bounded_number_of_times(
    server: OllamaSimulator,
) -> None:
    # a tokenizer that cuts code forty times finer than the estimate: every refusal teaches
    # the client something, but it stops after LEARN_ATTEMPTS requests all the same
    server.configure(rerank_ubatch=64, rerank_token_scale=40.0)
    reranker = HttpReranker("llamacpp", server.url, MODEL, max_tokens=512)
    with pytest.raises(RerankRefused):
        reranker.scores(QUERY, FILES[:3])
    statuses = [r["status"] for r in server.requests_to("/v1/rerank")]
    assert 2 <= len(statuses) <= LEARN_ATTEMPTS
    assert reranker.max_tokens == 64


def test_a_refused_rerank_gets_no_second_chance_but_a_host_that_was_down_does() -> None:
    event = ErrorEvent(service="shop", repo="shop", message="boom")
    refused = Investigation(event=event).fell_back(
        Fallback.RERANK_REFUSED, f"{RERANK_REFUSED} (input too large)"
    )
    down = Investigation(event=event).fell_back(
        Fallback.RERANK_HOST, f"{RERANK_UNAVAILABLE} (cannot reach)"
    )
    assert not needs_second_chance(refused)
    assert needs_second_chance(down)


def test_the_health_check_sends_a_realistic_request(server: OllamaSimulator) -> None:
    """A one-word probe passed where every real request was refused; the probe is as large
    as the chain's requests, so it meets the refusal (and learns from it) first."""
    reranker = HttpReranker("llamacpp", server.url, MODEL, max_tokens=4096)
    assert reranker_answers(reranker)
    probe = server.requests_to("/v1/rerank")
    assert probe[0]["status"] == 500 and probe[-1]["status"] == 200
    assert max(pair_tokens(probe[0]["body"]["query"], d)
               for d in probe[0]["body"]["documents"]) > 512  # fmt: skip
    server.clear_log()
    reranker.scores(QUERY, FILES[:5])
    assert [r["status"] for r in server.requests_to("/v1/rerank")] == [200]


def test_tei_takes_at_most_its_client_batch_and_tracehound_sends_no_more(
    server: OllamaSimulator,
) -> None:
    over = httpx.post(f"{server.url}/rerank", json={"query": QUERY, "texts": FILES[:33]})
    assert over.status_code == 422
    assert over.json() == {
        "error": "batch size 33 > maximum allowed batch size 32",
        "error_type": "Validation",
    }
    empty = httpx.post(f"{server.url}/rerank", json={"query": QUERY, "texts": []})
    assert empty.status_code == 400 and empty.json()["error_type"] == "Empty"
    server.clear_log()
    reranker = HttpReranker("tei", server.url, MODEL, batch_size=32)
    scores = reranker.scores(QUERY, FILES)
    batches = [len(r["body"]["texts"]) for r in server.requests_to("/rerank")]
    assert batches == [32, 13]
    assert all(len(f) < DOC_MAX_CHARS for f in FILES)  # TEI truncates; tracehound cuts none
    direct = httpx.post(f"{server.url}/rerank", json={"query": QUERY, "texts": FILES[32:]})
    by_index = {r["index"]: r["score"] for r in direct.json()}
    assert scores[32:] == [pytest.approx(by_index[i]) for i in range(13)]  # mapped back


def test_logits_map_to_relevance_in_their_order() -> None:
    """llama.cpp answers the rank head's raw logit: a logit inside 0..1 is not a
    probability (reading it as one made 0.1 weak and -1.0 strong)."""
    logits = [-9.0, -1.0, 0.0, 0.1, 0.9, 1.0, 4.0]
    mapped = [relevance(x, "logit") for x in logits]
    assert mapped == sorted(mapped) and len(set(mapped)) == len(mapped)
    assert relevance(0.1, "logit") > relevance(-1.0, "logit")
    assert relevance(0.7, "probability") == 0.7


def test_llamacpp_scores_reach_tracehound_as_relevance_in_the_servers_order(
    server: OllamaSimulator,
) -> None:
    reranker = HttpReranker("llamacpp", server.url, MODEL, max_tokens=512)
    docs = ["def slugify(text): ...", "def total_price_3(order): order['sku_price']"]
    mapped = reranker.scores(QUERY, docs)
    raw = httpx.post(
        f"{server.url}/v1/rerank",
        json={"model": MODEL, "query": reranker.fitted(QUERY, docs)[0], "documents": docs},
    ).json()["results"]
    logits = {r["index"]: r["relevance_score"] for r in raw}
    assert logits[0] < 0  # a raw logit, below zero for the unrelated file
    assert mapped == [pytest.approx(1 / (1 + math.exp(-logits[i]))) for i in range(2)]
