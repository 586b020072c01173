"""Embedding through Ollama's ``/api/embed``: batched, in input order, with timeouts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import httpx

from shared.core.errors import PermanentError
from shared.core.http import error_text, json_body, post_json


class Embedder(Protocol):
    model: str

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def model_missing(model: str, base_url: str) -> PermanentError:
    return PermanentError(
        f"model {model!r} is not available on the Ollama at {base_url}: "
        f"run `ollama pull {model}` there, or set the model name in TRACEHOUND_*_MODEL"
    )


class OllamaEmbedder:
    """``POST /api/embed {model, input: [...]}`` -> ``{embeddings: [...]}``, batched."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        timeout: float = 60.0,
        batch_size: int = 32,
        client: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.batch_size = batch_size
        self._client = client or httpx.Client(timeout=httpx.Timeout(timeout, connect=5.0))

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for i in range(0, len(texts), self.batch_size):
            batch = list(texts[i : i + self.batch_size])
            response = post_json(
                self._client,
                f"{self.base_url}/api/embed",
                {"model": self.model, "input": batch, "truncate": True},
                f"embed with {self.model}",
                not_found=lambda r: _not_found(r, self.model, self.base_url),
            )
            body = json_body(response, f"embed with {self.model}")
            got = body.get("embeddings") if isinstance(body, dict) else None
            got = got or []
            if len(got) != len(batch):
                raise PermanentError(
                    f"embed with {self.model}: asked for {len(batch)} vectors, got {len(got)}"
                )
            vectors.extend(got)
        return vectors

    def close(self) -> None:
        self._client.close()


def _not_found(response: httpx.Response, model: str, base_url: str) -> PermanentError:
    if "not found" in error_text(response).lower():
        return model_missing(model, base_url)
    return PermanentError(f"{base_url}/api/embed not found: is this an Ollama server?")
