"""Unit tests of the Ollama embedding client against the Ollama SIMULATOR on loopback."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from shared.core.errors import PermanentError, TransientError
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.models.embedder import OllamaEmbedder

MODEL = "nomic-embed-text"
TEXTS = [
    "search_document: def charge(card): gateway.charge(card)",
    "search_document: class UserRepository: def find_by_id(self, user_id)",
    "search_document: SELECT * FROM orders WHERE status = 'open'",
    "search_document: func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request)",
    "search_document: 사용자 서비스 조회 실패",
]


@pytest.fixture(scope="module")
def sim() -> Iterator[OllamaSimulator]:
    with OllamaSimulator() as s:
        yield s


@pytest.fixture
def embedder(sim: OllamaSimulator) -> Iterator[OllamaEmbedder]:
    sim.reset()
    e = OllamaEmbedder(sim.url, MODEL, timeout=5, batch_size=2)
    yield e
    e.close()
    sim.reset_faults()


def test_batches_keep_input_order(sim: OllamaSimulator, embedder: OllamaEmbedder) -> None:
    batched = embedder.embed(TEXTS)
    one_by_one = [embedder.embed([t])[0] for t in TEXTS]
    assert len(batched) == 5
    assert len({tuple(v) for v in batched}) == 5  # distinct, so order is observable
    assert batched == one_by_one


def test_five_texts_with_batch_size_two_take_three_requests(
    sim: OllamaSimulator, embedder: OllamaEmbedder
) -> None:
    embedder.embed(TEXTS)
    inputs = [r["body"]["input"] for r in sim.requests_to("/api/embed")]
    assert inputs == [TEXTS[0:2], TEXTS[2:4], TEXTS[4:5]]


def test_no_texts_means_no_request(sim: OllamaSimulator, embedder: OllamaEmbedder) -> None:
    assert embedder.embed([]) == []
    assert sim.requests_to("/api/embed") == []


def test_unknown_model_tells_the_user_to_pull_it(sim: OllamaSimulator) -> None:
    e = OllamaEmbedder(sim.url, "mxbai-embed-large", timeout=5)
    try:
        with pytest.raises(PermanentError, match="ollama pull mxbai-embed-large"):
            e.embed(["hello world"])
    finally:
        e.close()


def test_server_error_is_transient(sim: OllamaSimulator, embedder: OllamaEmbedder) -> None:
    sim.fail("/api/embed", 500)
    with pytest.raises(TransientError, match="500"):
        embedder.embed(["hello world"])


def test_bad_request_is_permanent(sim: OllamaSimulator, embedder: OllamaEmbedder) -> None:
    sim.fail("/api/embed", 400, body={"error": "input too long"})
    with pytest.raises(PermanentError, match="input too long"):
        embedder.embed(["hello world"])


def test_dead_server_is_transient() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = OllamaEmbedder(f"http://127.0.0.1:{port}", MODEL, timeout=2)
    try:
        with pytest.raises(TransientError, match="cannot reach"):
            e.embed(["hello world"])
    finally:
        e.close()
