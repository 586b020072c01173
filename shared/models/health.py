"""Whether a model host answers at all: a cheap request before work is sent to it again."""

from __future__ import annotations

import httpx

from shared.core.errors import TracehoundError
from shared.models.reranker import Reranker


def ollama_answers(base_url: str, *, timeout: float = 5.0) -> bool:
    """Ollama's ``GET /api/version`` answered with a 2xx."""
    try:
        return httpx.get(f"{base_url.rstrip('/')}/api/version", timeout=timeout).is_success
    except httpx.HTTPError:
        return False


def reranker_answers(reranker: Reranker) -> bool:
    """The rerank server scored a one-document request (rerank servers share no health path:
    llama.cpp and TEI have ``/health``, the hosted APIs do not)."""
    try:
        return len(reranker.scores("is the rerank server up", ["yes"])) == 1
    except (TracehoundError, httpx.HTTPError):
        return False
