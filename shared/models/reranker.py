"""Cross-encoder reranking through a rerank server; results mapped back by ``index``.

Ollama has no rerank endpoint (ollama/ollama#3368), so this is its own client with backends:
llama.cpp ``llama-server --reranking``, vLLM, Jina and Cohere-compatible APIs share the
``POST /v1/rerank`` shape; Hugging Face TEI has ``POST /rerank``; some Ollama forks serve
``POST /api/rerank`` in the llama.cpp shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import httpx

from shared.core.domain import Candidate
from shared.core.errors import PermanentError
from shared.core.http import json_body, post_json

PATHS = {
    "llamacpp": "/v1/rerank",
    "vllm": "/v1/rerank",
    "jina": "/v1/rerank",
    "cohere": "/v1/rerank",
    "tei": "/rerank",
    "ollama": "/api/rerank",
}
DOC_MAX_CHARS = 4000


class Reranker(Protocol):
    name: str

    def scores(self, query: str, documents: Sequence[str]) -> list[float]: ...


def scores_by_index(results: Any, n_docs: int, *, score_key: str) -> list[float]:
    """Scores in document order from a server's list sorted by score.

    Servers sort results and may drop some (``top_n``); a document with no result scores -inf.
    """
    if not isinstance(results, list):
        raise PermanentError(f"rerank: expected a list of results, got {type(results).__name__}")
    scores = [float("-inf")] * n_docs
    for item in results:
        try:
            index = int(item["index"])
            score = float(item[score_key])
        except (KeyError, TypeError, ValueError) as exc:
            raise PermanentError(f"rerank: malformed result {item!r}") from exc
        if not 0 <= index < n_docs:
            raise PermanentError(f"rerank: result index {index} outside 0..{n_docs - 1}")
        scores[index] = score
    return scores


class HttpReranker:
    """One rerank server of a given backend shape."""

    def __init__(
        self,
        backend: str,
        base_url: str,
        model: str,
        *,
        timeout: float = 30.0,
        api_key: str | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        if backend not in PATHS:
            raise PermanentError(f"unknown rerank backend {backend!r}; one of {sorted(PATHS)}")
        self.backend = backend
        self.name = f"{backend}:{model}"
        self.url = base_url.rstrip("/") + PATHS[backend]
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(
            timeout=httpx.Timeout(timeout, connect=5.0), headers=headers
        )

    def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        if not documents:
            return []
        docs = [d[:DOC_MAX_CHARS] for d in documents]
        what = f"rerank via {self.backend} at {self.url}"
        if self.backend == "tei":
            body: dict[str, Any] = {"query": query, "texts": docs, "truncate": True}
            results = json_body(post_json(self._client, self.url, body, what), what)
            return scores_by_index(results, len(docs), score_key="score")
        body = {"model": self.model, "query": query, "documents": docs, "top_n": len(docs)}
        payload = json_body(post_json(self._client, self.url, body, what), what)
        results = payload.get("results") if isinstance(payload, dict) else None
        return scores_by_index(results, len(docs), score_key="relevance_score")

    def close(self) -> None:
        self._client.close()


def candidate_document(candidate: Candidate) -> str:
    """What the cross-encoder reads for a file: its path and its best chunks."""
    body = "\n...\n".join(c.text for c in candidate.chunks)
    return f"{candidate.path}\n{body}"


def relevance(score: float) -> float:
    """Rerank scores in 0..1: servers that return logits (llama.cpp) are squashed."""
    if 0.0 <= score <= 1.0:
        return score
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, score))))


def rerank_candidates(
    query: str, candidates: Sequence[Candidate], reranker: Reranker, *, top_k: int
) -> list[Candidate]:
    """Candidates ordered by cross-encoder score (fused order breaks ties), top_k kept."""
    scores = reranker.scores(query, [candidate_document(c) for c in candidates])
    scored = [
        c.model_copy(update={"rerank_score": s}) for c, s in zip(candidates, scores, strict=True)
    ]
    order = sorted(range(len(scored)), key=lambda i: (-scores[i], i))
    return [scored[i] for i in order][:top_k]
