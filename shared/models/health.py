"""Whether a model host answers at all: a cheap request before work is sent to it again."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from shared.core.domain import RERANK_UNAVAILABLE
from shared.core.errors import TracehoundError
from shared.models.reranker import Reranker


def ollama_answers(client: httpx.Client, base_url: str, *, timeout: float = 5.0) -> bool:
    """Ollama's ``GET /api/version`` answered with a 2xx."""
    try:
        return client.get(f"{base_url.rstrip('/')}/api/version", timeout=timeout).is_success
    except httpx.HTTPError:
        return False


def reranker_answers(reranker: Reranker) -> bool:
    """The rerank server scored a one-document request (rerank servers share no health path:
    llama.cpp and TEI have ``/health``, the hosted APIs do not)."""
    try:
        return len(reranker.scores("is the rerank server up", ["yes"])) == 1
    except (TracehoundError, httpx.HTTPError):
        return False


def model_hosts_answer(
    client: httpx.Client,
    ollama_urls: Sequence[str],
    reranker: Reranker | None,
    notes: Sequence[str],
) -> bool:
    """The Ollama hosts answer, and the rerank server too when the notes say it failed."""
    if not all(ollama_answers(client, url) for url in dict.fromkeys(ollama_urls)):
        return False
    rerank_failed = any(n.startswith(RERANK_UNAVAILABLE) for n in notes)
    return reranker is None or not rerank_failed or reranker_answers(reranker)
