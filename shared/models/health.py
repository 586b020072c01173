"""Whether a model host answers at all: a cheap request before work is sent to it again."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from shared.core.domain import Fallback
from shared.core.errors import TracehoundError
from shared.models.reranker import Reranker


def ollama_answers(client: httpx.Client, base_url: str, *, timeout: float = 5.0) -> bool:
    """Ollama's ``GET /api/version`` answered with a 2xx."""
    try:
        return client.get(f"{base_url.rstrip('/')}/api/version", timeout=timeout).is_success
    except httpx.HTTPError:
        return False


# A request as large as the analysis chain sends: a trace-sized query and files of the size
# kept for reranking. A one-word request passes where a real one is refused as too large
# (llama.cpp's n_ubatch), and a second chance would wait on a server that never reranks.
_PROBE_QUERY = "\n".join(
    f'  File "app/service_{i}.py", line {10 * i + 7}, in handle_request_{i}' for i in range(40)
)
_PROBE_FILE = "def handle_request(payload):\n" + "    value = payload.get('key', 0) + 1\n" * 200


def reranker_answers(reranker: Reranker) -> bool:
    """The rerank server scored a realistic request (rerank servers share no health path:
    llama.cpp and TEI have ``/health``, the hosted APIs do not)."""
    try:
        return len(reranker.scores(_PROBE_QUERY, [_PROBE_FILE] * 2)) == 2
    except (TracehoundError, httpx.HTTPError):
        return False


def model_hosts_answer(
    client: httpx.Client,
    ollama_urls: Sequence[str],
    reranker: Reranker | None,
    fallbacks: Sequence[Fallback],
) -> bool:
    """The Ollama hosts answer, and the rerank server too when the rerank stage fell back for
    want of it."""
    if not all(ollama_answers(client, url) for url in dict.fromkeys(ollama_urls)):
        return False
    rerank_failed = Fallback.RERANK_HOST in fallbacks
    return reranker is None or not rerank_failed or reranker_answers(reranker)


def ollama_models(url: str) -> list[str] | None:
    """Model names the Ollama at ``url`` has pulled, or None when nothing answers there."""
    try:
        r = httpx.get(f"{url.rstrip('/')}/api/tags", timeout=3)
        r.raise_for_status()
        return [m["name"] for m in r.json().get("models", [])]
    except (httpx.HTTPError, ValueError, KeyError):
        return None


def has_model(models: list[str], name: str) -> bool:
    return name in models or f"{name}:latest" in models or name.removesuffix(":latest") in models
