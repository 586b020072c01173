"""Unit tests of reranking: server results mapped back by index, candidates reordered, and the
HTTP client against the rerank-server SIMULATOR on loopback."""

from __future__ import annotations

import math
import socket
from collections.abc import Iterator, Sequence

import pytest

from shared.core.domain import Candidate, ChunkHit
from shared.core.errors import PermanentError, TransientError
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.models.reranker import HttpReranker, rerank_candidates, scores_by_index

MODEL = "bge-reranker-v2-m3"
QUERY = "PaymentGateway charge declined card"
DOCS = [
    "svc/users.py\ndef load_user(user_id): return db.users.get(user_id)",
    "svc/payments.py\nclass PaymentGateway:\n    def charge(self, card): raise Declined(card)",
    "svc/cart.py\ndef add_item(cart, sku): cart.items.append(sku)",
]


# ---------------------------------------------------------------- scores_by_index


def test_sorted_results_are_mapped_back_to_document_order() -> None:
    results = [
        {"index": 2, "relevance_score": 0.9},
        {"index": 0, "relevance_score": 0.5},
        {"index": 1, "relevance_score": 0.1},
    ]
    assert scores_by_index(results, 3, score_key="relevance_score") == [0.5, 0.1, 0.9]


def test_documents_without_a_result_score_minus_infinity() -> None:
    scores = scores_by_index([{"index": 1, "score": 0.7}], 3, score_key="score")
    assert scores[1] == 0.7
    assert scores[0] == scores[2] == -math.inf


@pytest.mark.parametrize(
    "results",
    [
        [{"index": 0}],  # no score
        [{"relevance_score": 0.3}],  # no index
        [{"index": "first", "relevance_score": 0.3}],
        [{"index": 0, "relevance_score": "high"}],
        ["not an object"],
        [None],
    ],
)
def test_malformed_result_is_a_permanent_error(results: list[object]) -> None:
    with pytest.raises(PermanentError, match="malformed"):
        scores_by_index(results, 2, score_key="relevance_score")


@pytest.mark.parametrize("index", [2, -1, 99])
def test_result_index_out_of_range_is_a_permanent_error(index: int) -> None:
    with pytest.raises(PermanentError, match="outside"):
        scores_by_index([{"index": index, "score": 0.3}], 2, score_key="score")


def test_results_that_are_not_a_list_are_a_permanent_error() -> None:
    with pytest.raises(PermanentError, match="list"):
        scores_by_index({"results": []}, 2, score_key="score")
    with pytest.raises(PermanentError):
        scores_by_index(None, 2, score_key="score")


# ------------------------------------------------------------- rerank_candidates


class FixedReranker:
    """An in-memory Reranker: each document scores by the first keyword it contains."""

    name = "fixed"

    def __init__(self, by_keyword: dict[str, float]) -> None:
        self.by_keyword = by_keyword
        self.calls: list[tuple[str, list[str]]] = []

    def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        self.calls.append((query, list(documents)))
        out = []
        for doc in documents:
            out.append(next((s for k, s in self.by_keyword.items() if k in doc), 0.0))
        return out


def candidate(path: str, fused: float, text: str = "") -> Candidate:
    chunk = ChunkHit(
        chunk_id=path, path=path, start_line=3, end_line=9, text=text or path, score=fused
    )
    return Candidate(path=path, score=fused, chunks=[chunk])


def test_candidates_are_reordered_by_rerank_score_and_cut_to_top_k() -> None:
    fused = [candidate("a.py", 0.05), candidate("b.py", 0.04), candidate("c.py", 0.03)]
    reranker = FixedReranker({"a.py": 0.1, "b.py": 0.2, "c.py": 0.9})
    out = rerank_candidates("why", fused, reranker, top_k=2)
    assert [c.path for c in out] == ["c.py", "b.py"]
    assert [c.rerank_score for c in out] == [0.9, 0.2]
    assert [c.score for c in out] == [0.03, 0.04]  # fused scores kept


def test_equal_rerank_scores_keep_fused_order() -> None:
    fused = [candidate("a.py", 0.05), candidate("b.py", 0.04), candidate("c.py", 0.03)]
    out = rerank_candidates("q", fused, FixedReranker({"c.py": 0.9}), top_k=5)
    assert [c.path for c in out] == ["c.py", "a.py", "b.py"]


def test_reranker_reads_path_and_chunk_text_of_each_candidate() -> None:
    reranker = FixedReranker({})
    rerank_candidates("q", [candidate("svc/x.py", 0.1, text="def pay(): ...")], reranker, top_k=1)
    [(query, [doc])] = reranker.calls
    assert query == "q"
    assert doc.startswith("svc/x.py\n")
    assert "def pay(): ..." in doc


# ------------------------------------------------------------------ HttpReranker


@pytest.fixture(scope="module")
def sim() -> Iterator[OllamaSimulator]:
    with OllamaSimulator() as s:
        yield s


@pytest.fixture(autouse=True)
def _no_leftover_faults(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "sim" in request.fixturenames:
        request.getfixturevalue("sim").reset_faults()


def dead_url() -> str:
    """A loopback port with nothing listening: connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("backend", "path"), [("llamacpp", "/v1/rerank"), ("tei", "/rerank"), ("ollama", "/api/rerank")]
)
def test_most_lexically_similar_document_scores_highest(
    sim: OllamaSimulator, backend: str, path: str
) -> None:
    reranker = HttpReranker(backend, sim.url, MODEL, timeout=5)
    try:
        scores = reranker.scores(QUERY, DOCS)
    finally:
        reranker.close()
    assert len(scores) == 3
    assert max(range(3), key=lambda i: scores[i]) == 1  # the payments document
    assert sim.requests_to(path), f"{backend} should call {path}"


def test_http_reranker_reorders_candidates(sim: OllamaSimulator) -> None:
    fused = [
        candidate("svc/users.py", 0.05, DOCS[0]),
        candidate("svc/cart.py", 0.04, DOCS[2]),
        candidate("svc/payments.py", 0.03, DOCS[1]),
    ]
    reranker = HttpReranker("llamacpp", sim.url, MODEL, timeout=5)
    try:
        out = rerank_candidates(QUERY, fused, reranker, top_k=2)
    finally:
        reranker.close()
    assert out[0].path == "svc/payments.py"
    assert len(out) == 2


def test_no_documents_means_no_request(sim: OllamaSimulator) -> None:
    sim.clear_log()
    reranker = HttpReranker("llamacpp", sim.url, MODEL, timeout=5)
    assert reranker.scores(QUERY, []) == []
    assert sim.requests == []


def test_connection_refused_is_transient() -> None:
    reranker = HttpReranker("llamacpp", dead_url(), MODEL, timeout=2)
    with pytest.raises(TransientError):
        reranker.scores(QUERY, DOCS)


def test_unknown_model_is_permanent(sim: OllamaSimulator) -> None:
    reranker = HttpReranker("ollama", sim.url, "no-such-reranker", timeout=5)
    with pytest.raises(PermanentError, match="404"):
        reranker.scores(QUERY, DOCS)


def test_server_error_is_transient(sim: OllamaSimulator) -> None:
    sim.fail("/v1/rerank", 503)
    reranker = HttpReranker("llamacpp", sim.url, MODEL, timeout=5)
    with pytest.raises(TransientError, match="503"):
        reranker.scores(QUERY, DOCS)


def test_unknown_backend_is_refused_with_the_known_ones() -> None:
    with pytest.raises(PermanentError, match="llamacpp"):
        HttpReranker("sentencepiece", "http://127.0.0.1:1", MODEL)


def test_a_200_with_an_html_page_is_a_clear_permanent_error() -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Proxy(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b"<html>login required</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        reranker = HttpReranker("llamacpp", f"http://127.0.0.1:{server.server_port}", "m")
        with pytest.raises(PermanentError, match="expected JSON"):
            reranker.scores("q", ["a", "b"])
    finally:
        server.shutdown()
