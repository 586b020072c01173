"""Cross-encoder reranking through a rerank server; results mapped back by ``index``.

Ollama has no rerank endpoint (ollama/ollama#3368), so this is its own client with backends:
llama.cpp ``llama-server --reranking``, vLLM, Jina and Cohere-compatible APIs share the
``POST /v1/rerank`` shape; Hugging Face TEI has ``POST /rerank``; some Ollama forks serve
``POST /api/rerank`` in the llama.cpp shape.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import httpx

from shared.core.domain import Candidate
from shared.core.errors import PermanentError, TransientError
from shared.core.http import json_body, post_json
from shared.models.token_count import TokenCount

if TYPE_CHECKING:
    from shared.core.settings import Settings

log = logging.getLogger(__name__)

DOC_MAX_CHARS = 4000
QUERY_SHARE = 4  # the query takes at most a quarter of a pair's tokens; the file the rest
PAIR_OVERHEAD = 8  # BOS, EOS, SEP and the tokens a rerank template adds around the pair
MIN_ROOM = 16  # tokens of query and code below which a relevance score means nothing


@dataclass(frozen=True)
class Backend:
    """What one kind of rerank server takes and answers.

    ``score``: ``logit`` when the server returns the rank head's raw output, ``probability``
    when it applies the model's sigmoid itself. ``pair_limit``: the server refuses a
    query+document pair over its batch in tokens (instead of truncating it). ``batch``: most
    documents it takes in one request, when it has a limit of its own.
    """

    path: str
    shape: Literal["v1", "tei"]
    score: Literal["logit", "probability"]
    pair_limit: bool = False
    batch: bool = False


BACKENDS: dict[str, Backend] = {
    # llama.cpp tools/server: send_rerank returns embd[0], the rank head's raw output, with no
    # sigmoid; a pair over n_ubatch tokens fails the request with HTTP 500 "input (N tokens)
    # is too large to process. increase the physical batch size (current batch size: M)".
    "llamacpp": Backend("/v1/rerank", "v1", "logit", pair_limit=True),
    # Ollama forks that serve /api/rerank run llama.cpp's rerank path underneath.
    "ollama": Backend("/api/rerank", "v1", "logit", pair_limit=True),
    # vLLM: get_cross_encoder_activation_function applies nn.Sigmoid to a one-label
    # cross-encoder (bge-reranker); prompts over max_model_len are refused.
    "vllm": Backend("/v1/rerank", "v1", "probability", pair_limit=True),
    # Hosted Jina and Cohere rerankers truncate long documents themselves (Cohere:
    # max_tokens_per_doc, 4096 by default) and return relevance in [0, 1].
    "jina": Backend("/v1/rerank", "v1", "probability"),
    "cohere": Backend("/v1/rerank", "v1", "probability"),
    # TEI router: a sigmoid unless raw_scores (core/src/infer.rs); more texts than
    # max_client_batch_size (32 by default) is a 422 (router/src/http/server.rs).
    "tei": Backend("/rerank", "tei", "probability", batch=True),
}
PATHS = {name: b.path for name, b in BACKENDS.items()}
# llama.cpp refuses a rerank pair (which it cannot split) over its physical batch with a 500,
# and one within the batch but over the slot's context with a 400 exceed_context_size_error
# (tools/server/server-context.cpp, b11434): both name the pair's size and the limit.
_TOO_LARGE = re.compile(r"input \((\d+) tokens\) is too large.*?current batch size: (\d+)", re.S)
_OVER_CONTEXT = re.compile(
    r"input \((\d+) tokens\) is larger than the max context size \((\d+) tokens\)"
)
LEARN_ATTEMPTS = 4  # requests of one call while refusals still teach something


class RerankRefused(PermanentError):
    """The rerank server answered and refused the request (too large, invalid): its host is
    up, so this is no reason to analyse the message again once it "answers"."""


class Reranker(Protocol):
    name: str

    def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        """Relevance of each document to the query, in 0..1 (monotonic in the model's own
        score), in document order."""
        ...


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


def relevance(score: float, kind: Literal["logit", "probability"]) -> float:
    """A server's score on one monotonic 0..1 scale: a logit through the sigmoid, a
    probability as it is. (Deciding by the value — pass 0..1 through, squash the rest — read
    a logit of 0.1 as weak and one of -1.0 as strong.)"""
    if math.isinf(score):
        return 0.0 if score < 0 else 1.0
    if kind == "logit":
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, score))))
    return max(0.0, min(1.0, score))


class HttpReranker:
    """One rerank server of a given backend: pairs cut to its token limit, documents sent in
    batches it takes, scores on one relevance scale."""

    def __init__(
        self,
        backend: str,
        base_url: str,
        model: str,
        *,
        timeout: float = 30.0,
        api_key: str | None = None,
        client: httpx.Client | None = None,
        max_tokens: int = 2048,
        batch_size: int = 32,
    ) -> None:
        if backend not in BACKENDS:
            raise PermanentError(f"unknown rerank backend {backend!r}; one of {sorted(BACKENDS)}")
        self.backend = backend
        self.kind = BACKENDS[backend]
        self.name = f"{backend}:{model}"
        self.url = base_url.rstrip("/") + self.kind.path
        self.model = model
        self.max_tokens = max_tokens
        self.batch_size = batch_size if self.kind.batch else None
        self.tokens = TokenCount()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(
            timeout=httpx.Timeout(timeout, connect=5.0), headers=headers
        )

    @classmethod
    def from_settings(cls, s: Settings) -> HttpReranker | None:
        """The configured rerank server, or None without one."""
        if s.rerank_backend == "none" or not s.rerank_url:
            return None
        return cls(
            s.rerank_backend,
            s.rerank_url,
            s.rerank_model,
            timeout=s.rerank_timeout,
            api_key=s.rerank_api_key.get_secret_value() if s.rerank_api_key else None,
            max_tokens=s.rerank_max_tokens,
            batch_size=s.rerank_batch_size,
        )

    def fitted(self, query: str, documents: Sequence[str]) -> tuple[str, list[str]]:
        """The query and documents cut so every pair fits the server's token limit."""
        docs = [d[:DOC_MAX_CHARS] for d in documents]
        if not self.kind.pair_limit:
            return query, docs
        room = max(MIN_ROOM, self.max_tokens - PAIR_OVERHEAD)
        query = self.tokens.fit(query, room // QUERY_SHARE)
        left = room - self.tokens(query)
        return query, [self.tokens.fit(d, left) for d in docs]

    def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        if not documents:
            return []
        for attempt in range(1, LEARN_ATTEMPTS + 1):
            try:
                return self._scores(query, documents)
            except _TooLarge as refused:
                # The server's limit is below the configured one, or its tokenizer counts
                # more than the estimate: learn both from its answer and try again, as long
                # as the answer taught something.
                if attempt == LEARN_ATTEMPTS or not self._learn(refused):
                    raise RerankRefused(str(refused)) from refused
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _scores(self, query: str, documents: Sequence[str]) -> list[float]:
        query, docs = self.fitted(query, documents)
        step = self.batch_size or len(docs)
        out: list[float] = []
        for start in range(0, len(docs), step):
            out += self._request(query, docs[start : start + step])
        return [relevance(s, self.kind.score) for s in out]

    def _request(self, query: str, docs: list[str]) -> list[float]:
        what = f"rerank via {self.backend} at {self.url}"
        if self.kind.shape == "tei":
            body: dict[str, Any] = {"query": query, "texts": docs, "truncate": True}
            results = json_body(self._post(body, what), what)
            return scores_by_index(results, len(docs), score_key="score")
        body = {"model": self.model, "query": query, "documents": docs, "top_n": len(docs)}
        try:
            answer = self._post(body, what)
        except _TooLarge as refused:
            # the refused pair is one of these: the largest estimate is the one that was
            # undercounted least, so n over it is what the estimate must scale by at least
            refused.largest = max(self.tokens.raw(query) + self.tokens.raw(d) for d in docs)
            raise
        payload = json_body(answer, what)
        if isinstance(payload, dict):
            self._calibrate(query, docs, payload.get("usage"))
        results = payload.get("results") if isinstance(payload, dict) else None
        return scores_by_index(results, len(docs), score_key="relevance_score")

    def _post(self, body: dict[str, Any], what: str) -> httpx.Response:
        """The answer; a 4xx is ``RerankRefused``, llama.cpp's 500 for a pair over its batch
        ``_TooLarge`` (not a server that is down)."""
        try:
            return post_json(self._client, self.url, body, what, refused=RerankRefused)
        except (TransientError, RerankRefused) as exc:
            pattern = _TOO_LARGE if isinstance(exc, TransientError) else _OVER_CONTEXT
            if (found := pattern.search(str(exc))) is not None:
                raise _TooLarge(str(exc), int(found.group(1)), int(found.group(2))) from exc
            raise

    def _learn(self, refused: _TooLarge) -> bool:
        """The limit and the pair's size the refusal names, learnt; whether anything changed."""
        if refused.batch - PAIR_OVERHEAD < MIN_ROOM:
            return False  # a limit that leaves no room for a query and its code to be read
        before = (self.max_tokens, self.tokens.scale)
        if refused.largest:  # the text of the largest pair, without its special tokens
            self.tokens.observe(refused.largest, max(1, refused.n - PAIR_OVERHEAD))
        self.max_tokens = min(self.max_tokens, refused.batch)
        if (self.max_tokens, self.tokens.scale) == before:
            # The refused pair was a smaller one, undercounted more than the largest: scale
            # by its overshoot, so that every attempt fits tighter.
            self.tokens.grow(max(refused.n / refused.batch, 1.02))
        now = (self.max_tokens, self.tokens.scale)
        log.warning(
            "rerank.too_large",
            extra={"backend": self.backend, "server_batch": refused.batch, "tokens": refused.n,
                   "was": before, "now": now},
        )  # fmt: skip
        return now != before

    def _calibrate(self, query: str, docs: list[str], usage: Any) -> None:
        """llama.cpp reports the tokens it read (``usage.prompt_tokens``): an estimate below
        that is scaled up for the next request."""
        total = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if isinstance(total, int) and not isinstance(total, bool) and self.kind.pair_limit:
            raw = sum(self.tokens.raw(query) + self.tokens.raw(d) for d in docs)
            self.tokens.observe(raw + PAIR_OVERHEAD * len(docs), total)

    def close(self) -> None:
        self._client.close()


class _TooLarge(Exception):
    """A pair the server counted at ``n`` tokens, over its limit ``batch`` (the physical
    batch, or the slot's context); ``largest``: the largest raw estimate of a pair's text
    (query and document) in the refused request."""

    def __init__(self, message: str, n: int, batch: int) -> None:
        super().__init__(message)
        self.n, self.batch, self.largest = n, batch, 0


def candidate_document(candidate: Candidate) -> str:
    """What the cross-encoder reads for a file: its path and its best chunks."""
    body = "\n...\n".join(c.text for c in candidate.chunks)
    return f"{candidate.path}\n{body}"


def rerank_candidates(
    query: str, candidates: Sequence[Candidate], reranker: Reranker, *, top_k: int
) -> list[Candidate]:
    """Candidates ordered by cross-encoder relevance (fused order breaks ties), top_k kept."""
    scores = reranker.scores(query, [candidate_document(c) for c in candidates])
    scored = [
        c.model_copy(update={"rerank_score": s}) for c, s in zip(candidates, scores, strict=True)
    ]
    order = sorted(range(len(scored)), key=lambda i: (-scores[i], i))
    return [scored[i] for i in order][:top_k]
