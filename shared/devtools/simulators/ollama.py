"""SIMULATOR — a test double of the Ollama HTTP API and of rerank servers; NOT the real service.

It speaks Ollama's wire format on a real loopback HTTP server (standard library only) so the
production clients (httpx, the ``ollama`` package, ``langchain_ollama.ChatOllama``) can be tested
end to end without a GPU, a model download or a network:

- ``POST /api/embed`` (and the legacy ``/api/embeddings``): deterministic "hashed token feature"
  vectors, L2-normalised, so texts that share identifiers are close and unrelated texts are not.
- ``POST /api/chat`` and ``POST /api/generate``: streaming (NDJSON, chunked) or not. With a JSON
  schema as ``format`` the reply validates against it; for tracehound's analysis schema it cites
  the ``<candidate>`` whose code shares most tokens with the ``<error>`` text of the prompt.
- ``GET /``, ``/api/tags``, ``/api/ps``, ``/api/version``; ``/health`` as llama-server answers it.
- Rerank shapes: ``POST /v1/rerank`` (llama.cpp, vLLM, Jina, Cohere), ``POST /rerank`` (Hugging
  Face TEI) and ``POST /api/rerank`` (Ollama forks), scored by lexical overlap, sorted by score.

Test controls: per-endpoint latency, model load time with a single loaded-model slot (loads,
swaps and ``keep_alive: 0`` unloads are counted), fault injection per path, fixed chat replies,
and a thread-safe request log. The same controls are served over HTTP for tests in another
process: ``GET /_sim/log``, ``GET /_sim/state``, ``GET|POST /_sim/config``, ``POST /_sim/fail``,
``POST /_sim/reset``. Run it standalone with
``python -m shared.devtools.simulators.ollama --port N``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import html
import json
import math
import re
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from shared.devtools.simulators._loopback import BaseHandler, LoopbackSimulator, run_until_signal
from shared.index.tokens import tokenize

DEFAULT_MODELS: tuple[str, ...] = ("nomic-embed-text", "qwen2.5-coder:7b", "bge-reranker-v2-m3")
DEFAULT_DIM = 256
LATENCY_KINDS: tuple[str, ...] = ("embed", "chat", "rerank")
ANALYSIS_KEYS = frozenset(
    {"summary", "hypotheses", "suggested_fix", "relevant_files", "confidence"}
)
_QUERY_PREFIXES = ("search_query: ", "search_document: ")
_KEEP_ALIVE_ZERO = re.compile(r"^0+(\.0+)?(ns|us|µs|ms|s|m|h)?$")
# Tags may end in a per-request suffix (<error_3fa9c1…>, as tracehound's prompt fences data).
_ERROR_RE = re.compile(r"<error((?:_\w+)?)>(?P<body>.*?)</error\1>", re.DOTALL)
_CANDIDATE_RE = re.compile(
    r"<candidate((?:_\w+)?)\b(?P<attrs>[^>]*)>(?P<body>.*?)</candidate\1>", re.DOTALL
)
_ATTR_RE = re.compile(r"([\w-]+)\s*=\s*\"([^\"]*)\"")
_PIECE_CHARS = 24


# --------------------------------------------------------------------------- pure functions


def hashed_embedding(text: str, dim: int = DEFAULT_DIM) -> list[float]:
    """The simulator's deterministic embedding of ``text``: signed hashed token counts, unit norm.

    A leading ``search_query: `` / ``search_document: `` prefix is ignored, tokens come from
    :func:`shared.index.tokens.tokenize`, each token adds ``±(1 + log count)`` to one of ``dim``
    buckets.
    A text without tokens (or whose features cancel out) maps to the unit vector ``e_0``.
    """
    if dim < 1:
        raise ValueError("dim must be >= 1")
    for prefix in _QUERY_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix) :]
            break
    vector = [0.0] * dim
    for token, count in Counter(_tokens(text)).items():
        digest = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest())
        sign = 1.0 if digest >> 63 else -1.0
        vector[digest % dim] += sign * (1.0 + math.log(count))
    norm = math.sqrt(sum(v * v for v in vector))
    if norm < 1e-12:
        return [1.0] + [0.0] * (dim - 1)
    return [v / norm for v in vector]


@lru_cache(maxsize=8192)
def _tokens(text: str) -> tuple[str, ...]:
    """``tokenize``, remembered: the same chunks and prompts come back request after request,
    and a zero-latency simulator should spend next to nothing on them."""
    return tuple(tokenize(text))


@lru_cache(maxsize=8192)
def _token_set(text: str) -> frozenset[str]:
    return frozenset(_tokens(text))


def rerank_raw_score(query: str, document: str) -> float:
    """Lexical relevance: shared distinct tokens over ``sqrt(distinct document tokens + 1)``."""
    query_tokens = _token_set(query)
    doc_tokens = _token_set(document)
    return len(query_tokens & doc_tokens) / math.sqrt(len(doc_tokens) + 1)


def rerank_logit(query: str, document: str) -> float:
    """What a cross-encoder's rank head outputs for the pair: an unbounded logit, negative for
    unrelated text, monotonic in :func:`rerank_raw_score`."""
    return 2.0 * math.log(rerank_raw_score(query, document) + 0.05)


def rerank_score(query: str, document: str) -> float:
    """:func:`rerank_logit` through the sigmoid: the probability TEI, vLLM and the hosted
    rerankers answer with."""
    return 1.0 / (1.0 + math.exp(-rerank_logit(query, document)))


_WORDS = re.compile(r"\w+|[^\w\s]", re.UNICODE)

# The chat model's context, as Ollama sets it. Without ``options.num_ctx`` the server picks it
# by VRAM: below 23 GiB (a CPU, a 16 GB Mac) 4096 (server/routes.go, "Set default context
# based on VRAM tier").
DEFAULT_NUM_CTX = 4096
# What the runner keeps at the head of a single prompt too long for the context: num_keep (4,
# api/types.go DefaultOptions) plus the BOS token (llm/llama_server.go).
NUM_KEEP = 5
MESSAGE_TOKENS = 5  # a chat template's tokens around each message (<|im_start|>role … <|im_end|>)
TOOLS_TOKENS = 40  # the template's instructions around the tools it renders into the prompt
_BPE = re.compile(r"[A-Za-z]+|[0-9]|\s+|[!-/:-@\[-`{-~]+|\w|.", re.UNICODE | re.DOTALL)


def chat_tokens(text: str) -> int:
    """Tokens of ``text`` as a byte-pair vocabulary of a code model counts them: letters in
    pieces of up to six, each digit one (Qwen and Llama 3 split numbers), a single space
    none (it joins the next word), other white space one a run, punctuation in pairs
    (``{"``, ``):``), each other character one."""
    total = 0
    for piece in _BPE.findall(text):
        first = piece[0]
        if piece == " ":
            continue
        if first.isascii() and first.isalpha():
            total += math.ceil(len(piece) / 6)
        elif first.isascii() and not first.isalnum() and not first.isspace():
            total += math.ceil(len(piece) / 2)
        else:
            total += 1
    return total


def rendered_tokens(
    messages: list[dict[str, Any]], tools: Any = None, *, scale: float = 1.0
) -> int:
    """Tokens of the prompt the chat template renders from ``messages`` (and ``tools``)."""
    total = 0
    for m in messages:
        total += MESSAGE_TOKENS + chat_tokens(str(m.get("content") or ""))
        if m.get("tool_calls"):
            total += chat_tokens(json.dumps(m["tool_calls"]))
    if tools:
        total += TOOLS_TOKENS + chat_tokens(json.dumps(tools))
    return math.ceil(total * scale)


@dataclass(frozen=True)
class ContextFit:
    """What survived of a chat request in the model's context window."""

    messages: list[dict[str, Any]]
    tokens: int
    dropped: int  # messages dropped from the front
    cut: bool  # the last message's middle cut away by the runner


def fit_context(
    messages: list[dict[str, Any]], tools: Any, num_ctx: int, *, scale: float = 1.0
) -> ContextFit:
    """The messages the model reads, as Ollama truncates them.

    server/prompt.go (chatPrompt): "truncates any messages that exceed the context window of
    the model, making sure to always include 1) the latest message and 2) system messages" —
    it renders the prompt from message i on (with the system messages before i kept) for
    i = 0, 1, … and takes the first that fits ``num_ctx``, with no room kept for the reply.
    When only the last message is left and still does not fit, the runner cuts the prompt's
    middle, keeping NUM_KEEP tokens at the head and the tail, to numCtx - (numCtx-numKeep)/2
    tokens (llm/llama_server.go): what precedes the tail is lost.
    """
    if not messages:
        return ContextFit([], 0, 0, False)
    last = len(messages) - 1
    kept, tokens, dropped = messages, 0, 0
    for i in range(len(messages)):
        kept = [m for m in messages[:i] if m.get("role") == "system"] + messages[i:]
        tokens = rendered_tokens(kept, tools, scale=scale)
        dropped = i - (len(kept) - len(messages[i:]))
        if tokens <= num_ctx or i == last:
            break
    if tokens <= num_ctx:
        return ContextFit(kept, tokens, dropped, False)
    limit = num_ctx - max((num_ctx - NUM_KEEP) // 2, 1)
    tail = str(messages[last].get("content") or "")
    while tail and rendered_tokens([{"content": tail}], scale=scale) > limit - NUM_KEEP:
        tail = tail[len(tail) // 8 or 1 :]
    survivor = {**messages[last], "content": tail}
    # The runner keeps exactly ``limit`` tokens: NUM_KEEP of the head and the rest of the tail.
    return ContextFit([survivor], limit, last, True)


def pair_tokens(query: str, document: str) -> int:
    """Tokens of llama.cpp's rerank input ``[BOS]query[EOS][SEP]doc[EOS]``
    (tools/server format_prompt_rerank), counted the way a WordPiece vocabulary cuts text:
    a word in pieces of up to six characters, each punctuation mark one token."""
    words = [*_WORDS.findall(query), *_WORDS.findall(document)]
    return 4 + sum(max(1, math.ceil(len(w) / 6)) for w in words)


def _llamacpp_error(code: int, message: str, kind: str) -> dict[str, Any]:
    """llama.cpp's error body (tools/server/server-common.cpp format_error_response)."""
    return {"error": {"code": code, "message": message, "type": kind}}


def _llamacpp_limits(counts: list[int], ubatch: int, n_ctx: int) -> dict[str, Any] | None:
    """llama.cpp's refusal of the first pair (of ``counts`` tokens each) over its limits.
    Over the physical batch: a 500 server_error (tools/server update_slots: "input (%d tokens)
    is too large to process. increase the physical batch size (current batch size: %d)").
    Within the batch but over the slot's context: a 400, checked after the batch rule
    (tools/server/server-context.cpp:3407-3416, b11434), whose error body carries both counts
    (server-common.cpp format_error_response)."""
    for n in counts:
        if n > ubatch:
            message = (
                f"input ({n} tokens) is too large to process. increase the physical "
                f"batch size (current batch size: {ubatch})"
            )
            return _llamacpp_error(500, message, "server_error")
        if n > n_ctx:
            message = (
                f"input ({n} tokens) is larger than the max context size ({n_ctx} tokens). skipping"
            )
            error = _llamacpp_error(400, message, "exceed_context_size_error")
            error["error"] |= {"n_prompt_tokens": n, "n_ctx": n_ctx}
            return error
    return None


@dataclass(frozen=True)
class PromptCandidate:
    """One ``<candidate rank=.. path=.. lines=a-b>`` block of an analysis prompt."""

    rank: int
    path: str
    start_line: int
    end_line: int
    code: str

    @property
    def location(self) -> str:
        return f"{self.path}:{self.start_line}-{self.end_line}"


@dataclass(frozen=True)
class PromptContext:
    """What the simulated analyst reads from a prompt: the error and the candidates."""

    error: str
    exception_line: str
    candidates: tuple[PromptCandidate, ...]
    overlaps: tuple[int, ...]

    @property
    def best(self) -> PromptCandidate | None:
        if not self.candidates:
            return None
        scored = zip(self.candidates, self.overlaps, strict=True)
        return max(scored, key=lambda pair: (pair[1], -pair[0].rank))[0]

    def ranked(self) -> list[PromptCandidate]:
        """The best candidate first, then the others in prompt rank order."""
        best = self.best
        rest = sorted((c for c in self.candidates if c is not best), key=lambda c: c.rank)
        return ([best] if best else []) + rest


def _line_range(value: str) -> tuple[int, int]:
    numbers = [int(n) for n in re.findall(r"\d+", value)]
    if not numbers:
        return 1, 1
    return numbers[0], numbers[1] if len(numbers) > 1 else numbers[0]


def parse_prompt(text: str) -> PromptContext:
    """Read ``<error>`` and ``<candidate>`` blocks; overlap = shared distinct tokens with the error.

    Without an ``<error>`` block the text outside candidate blocks stands for the error.
    """
    error_match = _ERROR_RE.search(text)
    error = (error_match["body"] if error_match else _CANDIDATE_RE.sub("", text)).strip()
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    exception_line = lines[-1] if lines else "unknown error"
    candidates: list[PromptCandidate] = []
    for number, match in enumerate(_CANDIDATE_RE.finditer(text), start=1):
        attrs = {k.lower(): html.unescape(v) for k, v in _ATTR_RE.findall(match["attrs"])}
        rank_text = attrs.get("rank", "")
        rank = int(rank_text) if rank_text.strip().isdigit() else number
        start, end = _line_range(attrs.get("lines", ""))
        path = attrs.get("path", f"unknown-{number}")
        candidates.append(PromptCandidate(rank, path, start, end, match["body"].strip("\n")))
    error_tokens = _token_set(error)
    overlaps = tuple(len(error_tokens & _token_set(f"{c.path}\n{c.code}")) for c in candidates)
    return PromptContext(error, exception_line, tuple(candidates), overlaps)


def simulated_analysis(context: PromptContext | str) -> dict[str, Any]:
    """The analysis the simulated model "finds": cites the best-overlapping candidate."""
    ctx = parse_prompt(context) if isinstance(context, str) else context
    exc = ctx.exception_line
    ranked = ctx.ranked()
    if not ranked:
        return {
            "summary": f"SIMULATED: {exc} — the retrieved code does not show where it comes from.",
            "hypotheses": [
                {
                    "cause": f"Not enough context: no candidate code was provided for: {exc}",
                    "confidence": 0.1,
                    "evidence": [],
                }
            ],
            "suggested_fix": "Retrieve more of the service's code around the failing call.",
            "relevant_files": [],
            "confidence": 0.1,
        }
    best = ranked[0]
    hypotheses = [
        {
            "cause": f"The code in {best.location} raises or triggers: {exc}",
            "confidence": 0.7,
            "evidence": [best.location],
        }
    ]
    if len(ranked) > 1:
        second = ranked[1]
        hypotheses.append(
            {
                "cause": f"A caller in {second.location} passes unexpected data that leads "
                f"to: {exc}",
                "confidence": 0.2,
                "evidence": [second.location],
            }
        )
    overlap = dict(zip(ctx.candidates, ctx.overlaps, strict=True))
    return {
        "summary": f"SIMULATED: {exc} — most likely raised in {best.path} "
        f"(lines {best.start_line}-{best.end_line}).",
        "hypotheses": hypotheses,
        "suggested_fix": f"In {best.path} (lines {best.start_line}-{best.end_line}), guard "
        f"against the condition behind: {exc}",
        "relevant_files": [
            {
                "path": c.path,
                "start_line": c.start_line,
                "end_line": c.end_line,
                "reason": (
                    "best lexical match for the error" if c is best else "other retrieved candidate"
                )
                + f" ({overlap[c]} shared tokens)",
            }
            for c in ranked
        ],
        "confidence": 0.6,
    }


def plain_analysis(context: PromptContext | str) -> str:
    """Free-text reply used when no ``format`` is requested."""
    ctx = parse_prompt(context) if isinstance(context, str) else context
    best = ctx.best
    where = f"most likely in {best.location}" if best else "no candidate code was provided"
    return f"SIMULATED ANALYSIS: {ctx.exception_line} — {where}."


# ------------------------------------------------------------------ JSON-schema instances


def _resolve_ref(ref: str, root: Mapping[str, Any]) -> dict[str, Any]:
    if not ref.startswith("#"):
        return {}
    node: Any = root
    for part in ref[1:].split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or part not in node:
            return {}
        node = node[part]
    return dict(node) if isinstance(node, Mapping) else {}


def _resolved(schema: Any, root: Mapping[str, Any], depth: int = 0) -> dict[str, Any]:
    """``schema`` with ``$ref`` and ``allOf`` folded in (shallowly)."""
    if not isinstance(schema, Mapping):
        return {}
    out = dict(schema)
    if isinstance(out.get("$ref"), str) and depth < 32:
        target = _resolved(_resolve_ref(out.pop("$ref"), root), root, depth + 1)
        out = {**target, **out}
    if isinstance(out.get("allOf"), list) and depth < 32:
        parts = [_resolved(s, root, depth + 1) for s in out.pop("allOf")]
        merged: dict[str, Any] = {}
        props: dict[str, Any] = {}
        required: list[str] = []
        for part in parts:
            props.update(part.get("properties", {}))
            required.extend(part.get("required", []))
            merged.update(part)
        if props:
            merged["properties"] = props
        if required:
            merged["required"] = required
        out = {**merged, **out}
    return out


def _schema_type(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        non_null = [k for k in kind if k != "null"]
        return non_null[0] if non_null else "null"
    if isinstance(kind, str):
        return kind
    if "properties" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    return None


def _bounded(schema: Mapping[str, Any], value: float, integer: bool) -> float:
    step = 1.0 if integer else 0.5
    low = schema.get("minimum")
    high = schema.get("maximum")
    x_low = schema.get("exclusiveMinimum")
    x_high = schema.get("exclusiveMaximum")
    if isinstance(x_low, int | float) and not isinstance(x_low, bool):
        low = x_low + (1 if integer else 0) if low is None else max(low, x_low)
    if isinstance(x_high, int | float) and not isinstance(x_high, bool):
        high = x_high - (1 if integer else 0) if high is None else min(high, x_high)

    def ok(v: float) -> bool:
        return (
            (low is None or v >= low)
            and (high is None or v <= high)
            and (x_low is None or v > x_low)
            and (x_high is None or v < x_high)
        )

    if ok(value):
        return value
    if low is not None and high is not None:
        mid = (low + high) / 2
        return float(math.ceil(mid)) if integer and ok(math.ceil(mid)) else mid
    if low is not None:
        return low if ok(low) else low + step
    if high is not None:
        return high if ok(high) else high - step
    return value


def _array_instance(s: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> list[Any]:
    if s.get("maxItems") == 0:
        return []
    prefix = s.get("prefixItems")
    if isinstance(prefix, list) and prefix:
        return [schema_instance(p, root, depth + 1) for p in prefix]
    count = max(1, int(s.get("minItems", 1)))
    items = s.get("items", {})
    return [
        schema_instance(items if isinstance(items, Mapping) else {}, root, depth + 1)
        for _ in range(count)
    ]


def schema_instance(
    schema: Mapping[str, Any], _root: Mapping[str, Any] | None = None, _depth: int = 0
) -> Any:
    """A minimal instance valid against a (pydantic-style) JSON schema.

    ``$ref`` into ``$defs`` is resolved; objects get all their properties; arrays one item (or
    ``minItems``); strings ``"simulated"``; integers 1; numbers 0.5 (both kept within bounds);
    booleans true; ``enum``/``const`` their first value; ``anyOf``/``oneOf`` the first non-null
    option.
    """
    root = schema if _root is None else _root
    if _depth > 24:
        return None
    s = _resolved(schema, root)
    if "const" in s:
        return s["const"]
    if isinstance(s.get("enum"), list) and s["enum"]:
        return s["enum"][0]
    for key in ("anyOf", "oneOf"):
        options = s.get(key)
        if isinstance(options, list) and options:
            resolved = [_resolved(o, root) for o in options]
            chosen = next((o for o in resolved if _schema_type(o) != "null"), None)
            return None if chosen is None else schema_instance(chosen, root, _depth + 1)
    kind = _schema_type(s)
    if kind == "object":
        props = s.get("properties")
        if isinstance(props, Mapping):
            return {k: schema_instance(v, root, _depth + 1) for k, v in props.items()}
        return {}
    if kind == "array":
        return _array_instance(s, root, _depth)
    if kind == "integer":
        return int(_bounded(s, 1, integer=True))
    if kind == "number":
        return _bounded(s, 0.5, integer=False)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    text = {
        "date-time": "2024-01-01T00:00:00Z",
        "date": "2024-01-01",
        "time": "00:00:00Z",
        "uri": "https://example.com/simulated",
        "email": "simulated@example.com",
        "uuid": "00000000-0000-4000-8000-000000000000",
    }.get(str(s.get("format")), "simulated")
    min_len = s.get("minLength")
    if isinstance(min_len, int) and len(text) < min_len:
        text += "x" * (min_len - len(text))
    max_len = s.get("maxLength")
    if isinstance(max_len, int):
        text = text[:max_len]
    return text


def _fit_list(values: list[Any], schema: Mapping[str, Any], root: Mapping[str, Any]) -> list[Any]:
    """Overlay generated list items onto generic instances of the list's item schema."""
    items_schema = _resolved(_resolved(schema, root).get("items", {}), root)
    kind = _schema_type(items_schema)
    out: list[Any] = []
    for value in values:
        if kind == "object" and isinstance(value, dict):
            base = schema_instance(items_schema, root)
            props = items_schema.get("properties", {})
            base.update({k: v for k, v in value.items() if k in props})
            out.append(base)
        elif kind in ("string", None):
            out.append(
                value
                if isinstance(value, str)
                else value.get("cause")
                or f"{value.get('path')}:{value.get('start_line')}-{value.get('end_line')}"
            )
        else:
            out.append(schema_instance(items_schema, root))
    return out


def schema_reply(schema: Mapping[str, Any], context: PromptContext | str) -> Any:
    """The structured reply for ``format=<schema>``: analysis-shaped when the schema is."""
    root = schema
    top = _resolved(schema, root)
    props = top.get("properties")
    instance = schema_instance(schema)
    if not (
        isinstance(props, Mapping) and set(props) >= ANALYSIS_KEYS and isinstance(instance, dict)
    ):
        return instance
    analysis = simulated_analysis(context)
    if "need_more" in instance:  # tracehound's requests for more code: none by default
        instance["need_more"] = []
    for key, value in analysis.items():
        prop = _resolved(props[key], root)
        kind = _schema_type(prop)
        if isinstance(value, list) and kind == "array":
            instance[key] = _fit_list(value, prop, root)
        elif isinstance(value, str) and kind in ("string", None):
            instance[key] = value
        elif isinstance(value, float) and kind == "number":
            instance[key] = _bounded(prop, value, integer=False)
    return instance


# ------------------------------------------------------------------------- HTTP plumbing


class _Handler(BaseHandler):
    """Ollama's wire details: plain-text 404s, compact JSON, chunked NDJSON streaming."""

    server_version = "OllamaSimulator/0"
    json_separators = (",", ":")
    entry: dict[str, Any]  # this request's log entry

    def start_chunked(self, status: int, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self._common_headers()
        self.end_headers()

    def write_chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(f"{len(data):X}\r\n".encode("ascii") + data + b"\r\n")
            self.wfile.flush()

    def end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


# ------------------------------------------------------------------------------ simulator


@dataclass
class _Fault:
    status: int
    remaining: int  # -1: forever
    body: Any


@dataclass
class _Config:
    models: list[str] = field(default_factory=lambda: list(DEFAULT_MODELS))
    dim: int = DEFAULT_DIM
    latency: dict[str, float] = field(default_factory=dict)
    load_seconds: float = 0.0
    chat_reply: str | None = None
    chat_replies: list[str] = field(default_factory=list)
    # One request at a time across all models, like a small host that fits one model: a
    # request for another model waits for the current one (then pays the load).
    exclusive: bool = False
    # Chat requests offering ``tools`` (each rule applies to a request whose messages contain
    # its ``match`` text): scripted tool calls, one turn popped per request
    # ([{"match", "tool_calls": [{"name", "arguments"}]}]); a model that never stops calling
    # search_code; a model whose template takes no tools (HTTP 400, as Ollama answers).
    tool_turns: list[dict[str, Any]] = field(default_factory=list)
    endless_tools: str | None = None
    tools_unsupported: str | None = None
    # /v1/rerank as llama.cpp serves it ("llamacpp": raw logits, a pair over rerank_ubatch
    # tokens refused), or as the hosted rerankers and vLLM do ("probability": sigmoid scores,
    # long documents truncated). rerank_token_scale multiplies the token count (a vocabulary
    # that cuts text finer). rerank_ctx: llama.cpp's slot context (-c, capped at the model's
    # training context: 8192 for bge-reranker-v2-m3). TEI's --max-client-batch-size.
    rerank_flavor: str = "llamacpp"
    rerank_ubatch: int = 512
    rerank_ctx: int = 8192
    # chat_tokens times this: a vocabulary that cuts text finer than the default count.
    chat_token_scale: float = 1.0
    # A model that repeats what it read: every line of the prompt and the tool results that
    # matches this regex is quoted in the analysis' summary, causes and suggested fix.
    quote: str | None = None
    rerank_token_scale: float = 1.0
    tei_max_client_batch_size: int = 32

    def snapshot(self) -> dict[str, Any]:
        return {
            "exclusive": self.exclusive,
            "models": list(self.models),
            "dim": self.dim,
            "latency": dict(self.latency),
            "load_seconds": self.load_seconds,
            "chat_reply": self.chat_reply,
            "chat_replies": list(self.chat_replies),
            "tool_turns": copy.deepcopy(self.tool_turns),
            "endless_tools": self.endless_tools,
            "tools_unsupported": self.tools_unsupported,
            "rerank_flavor": self.rerank_flavor,
            "rerank_ubatch": self.rerank_ubatch,
            "rerank_ctx": self.rerank_ctx,
            "rerank_token_scale": self.rerank_token_scale,
            "chat_token_scale": self.chat_token_scale,
            "quote": self.quote,
            "tei_max_client_batch_size": self.tei_max_client_batch_size,
        }


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _model_key(name: str) -> str:
    """Ollama treats ``name`` and ``name:latest`` as the same model."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _keep_alive_zero(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return value == 0
    return isinstance(value, str) and bool(_KEEP_ALIVE_ZERO.match(value.strip()))


def _now_iso(t: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if t is None else t, UTC)
    return moment.isoformat().replace("+00:00", "Z")


def _quoting(reply: Any, messages: list[dict[str, Any]], quote: str | None) -> Any:
    """An analysis that quotes every line it read matching ``quote`` (a model repeating its
    prompt) in its summary, causes and fix."""
    if quote is None or not isinstance(reply, dict) or "summary" not in reply:
        return reply
    pattern = re.compile(quote)
    lines = [
        line.strip()
        for m in messages
        if m.get("role") in ("user", "tool")
        for line in str(m.get("content") or "").splitlines()
        if pattern.search(line)
    ]
    if not lines:
        return reply
    quoted = dict(reply)
    quoted["summary"] = "Quoting what I read: " + " | ".join(lines)[:1500]
    quoted["suggested_fix"] = "\n".join(lines)
    quoted["hypotheses"] = [{"cause": line, "confidence": 0.5, "evidence": []} for line in lines]
    return quoted


def _not_found(model: str) -> _HttpError:
    # routes.go (chat, generate, embed): fmt.Sprintf("model '%s' not found", req.Model).
    return _HttpError(404, f"model '{model}' not found")


def part_of(key: str, content: str) -> Any:
    """The reply's text where a chat (``message``) or a generate (``response``) puts it."""
    return {"role": "assistant", "content": content} if key == "message" else content


class OllamaSimulator(LoopbackSimulator):
    """SIMULATOR of an Ollama server (plus rerank endpoints) on ``127.0.0.1``: a test double.

    ``start()`` binds (port 0 = a free port) and serves in a daemon thread; ``stop()`` also
    drops kept-alive client connections, so a stopped simulator looks like a dead server, and a
    later ``start()`` comes back on the same port. Log, faults and state survive a restart.
    """

    handler_class = _Handler
    display_name = "OllamaSimulator"
    thread_name = "ollama-simulator"

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        models: Iterable[str] | None = None,
        dim: int = DEFAULT_DIM,
        latency: Mapping[str, float] | None = None,
        load_seconds: float = 0.0,
        chat_reply: str | None = None,
        chat_replies: Iterable[str] | None = None,
        exclusive: bool = False,
        rerank_ubatch: int = 512,
        rerank_ctx: int = 8192,
    ) -> None:
        super().__init__(host=host, port=port)
        self._load_lock = threading.Lock()
        self._slot = threading.Lock()
        self._config = _Config()
        self._faults: dict[str, _Fault] = {}
        self._loaded: str | None = None
        self._loaded_at = 0.0
        self._load_count = 0
        self._swap_count = 0
        self._unload_count = 0
        self._model_events: list[dict[str, Any]] = []
        self.configure(
            models=list(models) if models is not None else list(DEFAULT_MODELS),
            dim=dim,
            latency=dict(latency or {}),
            load_seconds=load_seconds,
            chat_reply=chat_reply,
            chat_replies=list(chat_replies or []),
            exclusive=exclusive,
            rerank_ubatch=rerank_ubatch,
            rerank_ctx=rerank_ctx,
        )

    # ------------------------------------------------------------ configuration

    def configure(self, **opts: Any) -> None:
        """Change options at runtime: models, dim, latency, load_seconds, chat_reply,
        chat_replies (same names as the constructor). Unknown names raise ``TypeError``."""
        unknown = set(opts) - set(_Config.__dataclass_fields__)
        if unknown:
            raise TypeError(f"unknown OllamaSimulator option(s): {sorted(unknown)}")
        with self._lock:
            cfg = self._config
            if "models" in opts:
                models = opts["models"]
                if isinstance(models, str) or not all(isinstance(m, str) for m in models):
                    raise TypeError("models must be a list of model names")
                cfg.models = list(models)
            if "dim" in opts:
                dim = int(opts["dim"])
                if dim < 1:
                    raise ValueError("dim must be >= 1")
                cfg.dim = dim
            if "latency" in opts:
                latency = {str(k): float(v) for k, v in dict(opts["latency"] or {}).items()}
                if any(v < 0 for v in latency.values()):
                    raise ValueError("latency must be >= 0")
                cfg.latency = latency
            if "load_seconds" in opts:
                cfg.load_seconds = max(0.0, float(opts["load_seconds"]))
            if "chat_reply" in opts:
                reply = opts["chat_reply"]
                cfg.chat_reply = None if reply is None else str(reply)
            if "exclusive" in opts:
                cfg.exclusive = bool(opts["exclusive"])
            if "chat_replies" in opts:
                cfg.chat_replies = [str(r) for r in (opts["chat_replies"] or [])]
            self._configure_tools(cfg, opts)

    @staticmethod
    def _configure_tools(cfg: _Config, opts: dict[str, Any]) -> None:
        if "tool_turns" in opts:
            turns = list(opts["tool_turns"] or [])
            ok = all(isinstance(t, dict) and isinstance(t.get("tool_calls"), list) for t in turns)
            if not ok:
                raise TypeError("tool_turns items are {match, tool_calls: [...]}")
            cfg.tool_turns = copy.deepcopy(turns)
        for name in ("endless_tools", "tools_unsupported", "quote"):
            if name in opts:
                setattr(cfg, name, None if opts[name] is None else str(opts[name]))
        if "rerank_flavor" in opts:
            if opts["rerank_flavor"] not in ("llamacpp", "probability"):
                raise ValueError("rerank_flavor is 'llamacpp' or 'probability'")
            cfg.rerank_flavor = str(opts["rerank_flavor"])
        for name in ("rerank_ubatch", "rerank_ctx", "tei_max_client_batch_size"):
            if name in opts:
                setattr(cfg, name, max(1, int(opts[name])))
        for name in ("rerank_token_scale", "chat_token_scale"):
            if name in opts:
                setattr(cfg, name, max(0.1, float(opts[name])))

    @property
    def config(self) -> dict[str, Any]:
        with self._lock:
            return self._config.snapshot()

    def fail(
        self,
        path: str,
        status: int,
        times: int = 1,
        body: dict[str, Any] | None = None,
    ) -> None:
        """The next ``times`` requests to ``path`` answer ``status`` with ``body`` (default
        ``{"error": "..."}``); ``times=-1`` until :meth:`reset_faults`."""
        if times == 0 or times < -1:
            raise ValueError("times must be >= 1, or -1 for forever")
        payload = (
            body
            if body is not None
            else {"error": f"simulated failure: HTTP {status} injected on {path}"}
        )
        with self._lock:
            self._faults[path] = _Fault(int(status), int(times), payload)

    def reset_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def reset(self) -> None:
        """Clear the log, the faults, pending ``chat_replies`` and the loaded-model state and
        counters; other configuration stays."""
        with self._lock:
            self._log.clear()
            self._faults.clear()
            self._config.chat_replies = []
            self._config.tool_turns = []
            self._loaded = None
            self._load_count = self._swap_count = self._unload_count = 0
            self._model_events.clear()

    # -------------------------------------------------------------------- state

    @property
    def loaded_model(self) -> str | None:
        with self._lock:
            return self._loaded

    @property
    def load_count(self) -> int:
        """Model loads, the first one included."""
        with self._lock:
            return self._load_count

    @property
    def swap_count(self) -> int:
        """Loads that replaced another loaded model."""
        with self._lock:
            return self._swap_count

    @property
    def unload_count(self) -> int:
        """Unloads caused by ``keep_alive: 0``."""
        with self._lock:
            return self._unload_count

    @property
    def model_events(self) -> list[dict[str, Any]]:
        """``{"t", "event": "load" | "unload", "model", "replaced"}`` in order."""
        with self._lock:
            return copy.deepcopy(self._model_events)

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {
                "loaded_model": self._loaded,
                "load_count": self._load_count,
                "swap_count": self._swap_count,
                "unload_count": self._unload_count,
                "model_events": copy.deepcopy(self._model_events),
                "faults": {
                    p: {"status": f.status, "remaining": f.remaining}
                    for p, f in self._faults.items()
                },
            }

    # ------------------------------------------------------------ request flow

    def _handle(self, h: _Handler) -> None:
        received = time.time()
        path = urlsplit(h.path).path or "/"
        raw = h.read_body()
        if path.startswith("/_sim/"):
            self._control(h, path, raw)
            return
        body: Any = None
        parse_error: str | None = None
        if raw.strip():
            try:
                body = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                parse_error = f"invalid JSON request body: {exc}"
        model = body.get("model") if isinstance(body, dict) else None
        entry: dict[str, Any] = {
            "context": None,
            "t": received,
            "t_end": None,
            "method": h.command,
            "path": path,
            "model": model if isinstance(model, str) else None,
            "body": body,
            "status": None,
        }
        with self._lock:
            self._record(entry)
            fault = self._take_fault(path)
        h.entry = entry

        def complete(status: int) -> None:
            with self._lock:
                entry["t_end"] = time.time()
                entry["status"] = status

        h.on_complete = complete
        status = 500
        try:
            if fault is not None:
                status = h.send_json(fault.status, fault.body)
            else:
                status = self._route(h, path, body, parse_error)
        except _HttpError as exc:
            status = h.send_json(exc.status, {"error": exc.message})
        except OSError:
            raise
        except Exception as exc:  # a simulator bug: answer 500 rather than hang the client
            status = h.send_json(500, {"error": f"simulator error: {exc!r}"})
        finally:
            h.mark_complete(status)  # no-op unless the reply never got written

    def _take_fault(self, path: str) -> _Fault | None:
        fault = self._faults.get(path)
        if fault is None:
            return None
        if fault.remaining > 0:
            fault.remaining -= 1
            if fault.remaining == 0:
                del self._faults[path]
        return fault

    def _route(self, h: _Handler, path: str, body: Any, parse_error: str | None) -> int:
        method = h.command
        if method in ("GET", "HEAD"):
            if path == "/":
                return h.send_text(200, "Ollama is running")
            if path == "/api/version":
                return h.send_json(200, {"version": "0.0.0-simulator"})
            if path == "/health":  # llama-server's (and TEI's) health check
                return h.send_json(200, {"status": "ok"})
            if path == "/api/tags":
                return h.send_json(200, self._tags())
            if path == "/api/ps":
                return h.send_json(200, self._ps())
        if method == "POST":
            handlers = {
                "/api/embed": self._embed,
                "/api/embeddings": self._embeddings_legacy,
                "/api/chat": self._chat,
                "/api/generate": self._generate,
                "/v1/rerank": self._rerank_v1,
                "/api/rerank": self._rerank_v1,
                "/rerank": self._rerank_tei,
            }
            handler = handlers.get(path)
            if handler is not None:
                if parse_error is not None or body is None:
                    return self._unreadable(h, path, parse_error)
                if not isinstance(body, dict):
                    raise _HttpError(400, "missing or non-object JSON request body")
                with self._lock:
                    exclusive = self._config.exclusive
                with self._slot if exclusive else contextlib.nullcontext():
                    with self._lock:  # when the host took it up: the time before was a queue
                        h.entry["t_start"] = time.time()
                    return handler(h, path, body)
        return h.send_text(404, "404 page not found")

    def _unreadable(self, h: _Handler, path: str, parse_error: str | None) -> int:
        """A body that is not JSON (or none). llama-server parses every body with nlohmann's
        json::parse, whose parse_error the route wrapper answers as a 400
        invalid_request_error (tools/server/server.cpp:65-68, ex_wrapper, b11434); Ollama's
        handlers answer ``{"error": "..."}`` (server/routes.go, ShouldBindJSON)."""
        with self._lock:
            llamacpp = self._config.rerank_flavor == "llamacpp"
        if llamacpp and path == "/v1/rerank":
            detail = parse_error or "attempting to parse an empty input"
            message = f"[json.exception.parse_error.101] parse error: {detail}"
            return h.send_json(400, _llamacpp_error(400, message, "invalid_request_error"))
        raise _HttpError(400, parse_error or "missing or non-object JSON request body")

    # ---------------------------------------------------------- model handling

    def _require_model(self, body: Mapping[str, Any], required: bool = True) -> str | None:
        model = body.get("model")
        if model is None or model == "":
            if required:
                raise _HttpError(400, "model is required")
            return None
        if not isinstance(model, str):
            raise _HttpError(400, "model must be a string")
        with self._lock:
            known = {_model_key(m) for m in self._config.models}
        if _model_key(model) not in known:
            raise _not_found(model)
        return model

    def _ensure_loaded(self, model: str) -> int:
        """Load ``model`` into the single slot (sleeping ``load_seconds``); load time in ns."""
        with self._load_lock:
            with self._lock:
                if self._loaded is not None and _model_key(self._loaded) == _model_key(model):
                    return 0
                load_seconds = self._config.load_seconds
            started = time.perf_counter()
            if load_seconds > 0:
                time.sleep(load_seconds)
            with self._lock:
                replaced = self._loaded
                self._loaded = model
                self._loaded_at = time.time()
                self._load_count += 1
                if replaced is not None:
                    self._swap_count += 1
                self._model_events.append(
                    {"t": time.time(), "event": "load", "model": model, "replaced": replaced}
                )
            return int((time.perf_counter() - started) * 1e9)

    def _after_reply(self, model: str, body: Mapping[str, Any]) -> None:
        if not _keep_alive_zero(body.get("keep_alive")):
            return
        with self._lock:
            if self._loaded is not None and _model_key(self._loaded) == _model_key(model):
                self._loaded = None
                self._unload_count += 1
                self._model_events.append(
                    {"t": time.time(), "event": "unload", "model": model, "replaced": None}
                )

    def _latency(self, kind: str) -> float:
        with self._lock:
            return self._config.latency.get(kind, 0.0)

    @staticmethod
    def _details() -> dict[str, Any]:
        return {
            "parent_model": "",
            "format": "gguf",
            "family": "simulator",
            "families": ["simulator"],
            "parameter_size": "0B",
            "quantization_level": "F16",
        }

    def _tags(self) -> dict[str, Any]:
        with self._lock:
            models = list(self._config.models)
        return {
            "models": [
                {
                    "name": m,
                    "model": m,
                    "modified_at": "2024-01-01T00:00:00Z",
                    "size": 1,
                    "digest": "sim",
                    "details": self._details(),
                }
                for m in models
            ]
        }

    def _ps(self) -> dict[str, Any]:
        with self._lock:
            loaded, loaded_at = self._loaded, self._loaded_at
        if loaded is None:
            return {"models": []}
        return {
            "models": [
                {
                    "name": loaded,
                    "model": loaded,
                    "size": 1,
                    "digest": "sim",
                    "details": self._details(),
                    "expires_at": _now_iso(loaded_at + 300),
                    "size_vram": 1,
                    "context_length": 4096,
                }
            ]
        }

    # --------------------------------------------------------------- endpoints

    def _embed_vectors(self, texts: list[str], dimensions: Any) -> list[list[float]]:
        with self._lock:
            dim = self._config.dim
        vectors = [hashed_embedding(t, dim) for t in texts]
        if (
            isinstance(dimensions, int)
            and not isinstance(dimensions, bool)
            and 0 < dimensions < dim
        ):
            cut = []
            for v in vectors:
                head = v[:dimensions]
                norm = math.sqrt(sum(x * x for x in head))
                cut.append(
                    [x / norm for x in head] if norm > 1e-12 else [1.0] + [0.0] * (dimensions - 1)
                )
            vectors = cut
        return vectors

    def _embed(self, h: _Handler, path: str, body: dict[str, Any]) -> int:
        started = time.perf_counter()
        model = self._require_model(body)
        assert model is not None
        raw = body.get("input")
        if raw is None:
            texts: list[str] = []
        elif isinstance(raw, str):
            texts = [raw]
        elif isinstance(raw, list) and all(isinstance(t, str) for t in raw):
            texts = list(raw)
        else:
            raise _HttpError(400, "invalid input type")
        load_ns = self._ensure_loaded(model)
        if delay := self._latency("embed"):
            time.sleep(delay)
        vectors = self._embed_vectors(texts, body.get("dimensions"))
        self._after_reply(model, body)
        return h.send_json(
            200,
            {
                "model": model,
                "embeddings": vectors,
                "total_duration": int((time.perf_counter() - started) * 1e9),
                "load_duration": load_ns,
                "prompt_eval_count": sum(len(_tokens(t)) for t in texts),
            },
        )

    def _embeddings_legacy(self, h: _Handler, path: str, body: dict[str, Any]) -> int:
        model = self._require_model(body)
        assert model is not None
        prompt = body.get("prompt", "")
        if not isinstance(prompt, str):
            raise _HttpError(400, "prompt must be a string")
        self._ensure_loaded(model)
        if delay := self._latency("embed"):
            time.sleep(delay)
        vector = self._embed_vectors([prompt], None)[0] if prompt else []
        self._after_reply(model, body)
        return h.send_json(200, {"embedding": vector})

    def _content(self, messages: list[dict[str, Any]], fmt: Any) -> str:
        with self._lock:
            if self._config.chat_replies:
                return self._config.chat_replies.pop(0)
            if self._config.chat_reply is not None:
                return self._config.chat_reply
        user_texts = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
        if not user_texts:
            user_texts = [str(m.get("content") or "") for m in messages]
        # The last user message with prompt markers (a repair turn may follow the real prompt).
        prompt = next(
            (t for t in reversed(user_texts) if "<candidate" in t or "<error>" in t),
            user_texts[-1] if user_texts else "",
        )
        ctx = parse_prompt(prompt)
        with self._lock:
            quote = self._config.quote
        if isinstance(fmt, Mapping):
            return json.dumps(_quoting(schema_reply(fmt, ctx), messages, quote), ensure_ascii=False)
        if fmt == "analysis":  # offered tools, asked in the prompt for the analysis as JSON
            return json.dumps(
                _quoting(simulated_analysis(ctx), messages, quote), ensure_ascii=False
            )
        if fmt == "json":
            return json.dumps({"response": "simulated"})
        return plain_analysis(ctx)

    def _chat(self, h: _Handler, path: str, body: dict[str, Any]) -> int:
        model = self._require_model(body)
        assert model is not None
        messages = body.get("messages")
        if messages is None:
            messages = []
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise _HttpError(400, "messages must be a list of {role, content} objects")
        tools = body.get("tools")
        messages = self._in_context(h, body, messages, tools)
        if tools and messages:
            return self._with_tools(h, body, model, messages)
        return self._complete(h, body, model, messages, key="message")

    def _in_context(
        self, h: _Handler, body: dict[str, Any], messages: list[dict[str, Any]], tools: Any
    ) -> list[dict[str, Any]]:
        """What the model reads of ``messages`` (fit_context); the request log's entry gets
        ``context``: num_ctx, prompt tokens, messages dropped, and whether the last was cut."""
        options = body.get("options") if isinstance(body.get("options"), dict) else {}
        num_ctx = options.get("num_ctx") if isinstance(options, dict) else None
        if not isinstance(num_ctx, int) or isinstance(num_ctx, bool) or num_ctx < 1:
            num_ctx = DEFAULT_NUM_CTX
        truncate = body.get("truncate")
        with self._lock:
            scale = self._config.chat_token_scale
        fitted = fit_context(messages, tools, num_ctx, scale=scale)
        if truncate is False and (fitted.dropped or fitted.cut):
            # routes.go: with truncate false nothing is dropped; the runner refuses a prompt
            # longer than its context.
            raise _HttpError(400, "the input length exceeds the context length")
        with self._lock:
            h.entry["context"] = {
                "num_ctx": num_ctx,
                "prompt_tokens": fitted.tokens,
                "dropped": fitted.dropped,
                "cut": fitted.cut,
            }
            h.entry["prompt_tokens"] = fitted.tokens
        return fitted.messages

    def _with_tools(
        self, h: _Handler, body: dict[str, Any], model: str, messages: list[dict[str, Any]]
    ) -> int:
        """A request offering tools: scripted or endless tool calls, a model that takes no
        tools, or (by default) a model that answers at once with the analysis as JSON."""
        seen = json.dumps(messages, ensure_ascii=False)
        calls: list[dict[str, Any]] | None = None
        with self._lock:
            cfg = self._config
            if cfg.tools_unsupported is not None and cfg.tools_unsupported in seen:
                raise _HttpError(400, f"registry.ollama.ai/library/{model} does not support tools")
            turn = next((t for t in cfg.tool_turns if str(t.get("match", "")) in seen), None)
            if turn is not None:
                cfg.tool_turns.remove(turn)
                calls = list(turn["tool_calls"])
            elif cfg.endless_tools is not None and cfg.endless_tools in seen:
                rounds = sum(1 for m in messages if m.get("role") == "tool")
                calls = [{"name": "search_code", "arguments": {"query": f"round {rounds} again"}}]
        if calls is None:
            answer = self._content(messages, None if body.get("format") else "analysis")
            return self._complete(h, body, model, messages, key="message", content=answer)
        wire = [
            {
                "id": f"call_{secrets.token_hex(4)}",
                "function": {"index": i, "name": c["name"], "arguments": c.get("arguments", {})},
            }
            for i, c in enumerate(calls)
        ]
        return self._complete(h, body, model, messages, key="message", content="", tool_calls=wire)

    def _generate(self, h: _Handler, path: str, body: dict[str, Any]) -> int:
        model = self._require_model(body)
        assert model is not None
        prompt = body.get("prompt") or ""
        system = body.get("system")
        messages: list[dict[str, Any]] = []
        if prompt:
            if system:
                messages.append({"role": "system", "content": str(system)})
            messages.append({"role": "user", "content": str(prompt)})
        messages = self._in_context(h, body, messages, None)
        return self._complete(h, body, model, messages, key="response")

    def _complete(
        self,
        h: _Handler,
        body: dict[str, Any],
        model: str,
        messages: list[dict[str, Any]],
        key: str,
        content: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
    ) -> int:
        started = time.perf_counter()
        if not messages and _keep_alive_zero(body.get("keep_alive")):
            # routes.go: "expire the runner if unload is requested (empty prompt, keep alive
            # is 0)" — sched.go expireRunner acts only on a loaded runner: nothing is loaded.
            self._after_reply(model, body)
            return h.send_json(
                200,
                {"model": model, "created_at": _now_iso(), key: part_of(key, ""),
                 "done": True, "done_reason": "unload"},
            )  # fmt: skip
        load_ns = self._ensure_loaded(model)

        def part(content: str, calls: list[dict[str, Any]] | None = None) -> Any:
            if key != "message":
                return content
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
            return message

        if not messages:  # a load only (routes.go: done_reason "load")
            self._after_reply(model, body)
            return h.send_json(
                200,
                {
                    "model": model,
                    "created_at": _now_iso(),
                    key: part(""),
                    "done": True,
                    "done_reason": "load",
                },
            )

        if content is None:
            content = self._content(messages, body.get("format"))
        with self._lock:
            latency = self._config.latency
            delay = (
                latency.get("generate", latency.get("chat", 0.0))
                if key == "response"
                else latency.get("chat", 0.0)
            )
        pieces = [content[i : i + _PIECE_CHARS] for i in range(0, len(content), _PIECE_CHARS)]
        with self._lock:  # llama_server.go: cache_n + prompt_n, the prompt after truncation
            prompt_tokens = int(h.entry.get("prompt_tokens") or 0)

        def final() -> dict[str, Any]:
            total = int((time.perf_counter() - started) * 1e9)
            generation = max(0, total - load_ns)
            return {
                "done": True,
                "done_reason": "stop",
                "total_duration": total,
                "load_duration": load_ns,
                "prompt_eval_count": prompt_tokens,
                "prompt_eval_duration": generation // 4,
                "eval_count": max(1, len(pieces)),
                "eval_duration": generation - generation // 4,
            }

        stream = body.get("stream")
        if stream is None or stream is True:
            h.start_chunked(200, "application/x-ndjson")
            if tool_calls:  # Ollama streams the calls in one message before the final line
                line = {"model": model, "created_at": _now_iso(), key: part("", tool_calls),
                        "done": False}  # fmt: skip
                h.write_chunk(json.dumps(line).encode("utf-8") + b"\n")
            for piece in pieces:
                if delay:
                    time.sleep(delay / len(pieces))
                line = {"model": model, "created_at": _now_iso(), key: part(piece), "done": False}
                h.write_chunk(json.dumps(line, ensure_ascii=False).encode("utf-8") + b"\n")
            if delay and not pieces:
                time.sleep(delay)
            last = {"model": model, "created_at": _now_iso(), key: part(""), **final()}
            self._after_reply(model, body)
            h.mark_complete(200)
            h.write_chunk(json.dumps(last).encode("utf-8") + b"\n")
            h.end_chunked()
            return 200
        if delay:
            time.sleep(delay)
        self._after_reply(model, body)
        return h.send_json(
            200,
            {"model": model, "created_at": _now_iso(), key: part(content, tool_calls), **final()},
        )

    @staticmethod
    def _documents(raw: Any, name: str) -> list[str]:
        if not isinstance(raw, list):
            raise _HttpError(400, f"{name} must be a list")
        docs: list[str] = []
        for item in raw:
            if isinstance(item, str):
                docs.append(item)
            elif isinstance(item, Mapping) and isinstance(item.get("text"), str):
                docs.append(item["text"])
            else:
                raise _HttpError(400, f'{name} items must be strings or {{"text": ...}}')
        return docs

    def _rerank_v1(self, h: _Handler, path: str, body: dict[str, Any]) -> int:
        """llama.cpp's /v1/rerank (and an Ollama fork's /api/rerank, built on it): every
        query+document pair is one sequence that must fit ``n_ubatch`` tokens, else the whole
        request fails with HTTP 500 (tools/server update_slots: "input (%d tokens) is too
        large to process. increase the physical batch size (current batch size: %d)",
        ERROR_TYPE_SERVER); the score is the rank head's raw output, no sigmoid (send_rerank:
        ``res->score = embd[0]``); results sorted by score, cut to ``top_n``, with ``usage``
        (format_response_rerank). The "probability" flavour answers like vLLM and the
        hosted rerankers: sigmoid scores, long documents truncated."""
        ollama_shape = path == "/api/rerank"
        with self._lock:
            cfg = self._config
            flavor, ubatch, scale = cfg.rerank_flavor, cfg.rerank_ubatch, cfg.rerank_token_scale
            n_ctx = cfg.rerank_ctx
        llamacpp = flavor == "llamacpp" and not ollama_shape
        logits = llamacpp or ollama_shape
        if llamacpp:
            # llama-server serves the one model it loaded: post_rerank never reads "model",
            # format_response_rerank echoes it (server-common.cpp:1574, b11434).
            model = body["model"] if isinstance(body.get("model"), str) else None
        else:
            model = self._require_model(body, required=ollama_shape)
        query = body.get("query")
        if not isinstance(query, str):
            if llamacpp:  # post_rerank (server-context.cpp:5518-5526)
                message = (
                    '"query" must be a string' if "query" in body else '"query" must be provided'
                )
                return h.send_json(400, _llamacpp_error(400, message, "invalid_request_error"))
            raise _HttpError(400, "query must be a string")
        raw_docs = body.get("documents")
        if logits and not (
            isinstance(raw_docs, list) and raw_docs and all(isinstance(d, str) for d in raw_docs)
        ):
            # post_rerank: "documents" must be a non-empty array of strings.
            message = '"documents" must be a non-empty string array'
            return h.send_json(400, _llamacpp_error(400, message, "invalid_request_error"))
        docs = self._documents(raw_docs, "documents")
        counts = [math.ceil(pair_tokens(query, d) * scale) for d in docs]
        if logits and (refusal := _llamacpp_limits(counts, ubatch, n_ctx)) is not None:
            return h.send_json(refusal["error"]["code"], refusal)
        if ollama_shape and model is not None:
            self._ensure_loaded(model)
        if delay := self._latency("rerank"):
            time.sleep(delay)
        scores = [rerank_logit(query, d) if logits else rerank_score(query, d) for d in docs]
        order = sorted(range(len(docs)), key=lambda i: (-scores[i], i))
        top_n = body.get("top_n")
        if isinstance(top_n, int) and not isinstance(top_n, bool) and top_n >= 0:
            order = order[:top_n]
        results: list[dict[str, Any]] = []
        for i in order:
            result: dict[str, Any] = {"index": i, "relevance_score": scores[i]}
            # llama.cpp returns texts only in TEI's format (server-common.cpp:1548)
            if body.get("return_documents") and not llamacpp:
                result["document"] = {"text": docs[i]}
            results.append(result)
        tokens = sum(counts)
        if ollama_shape and model is not None:
            self._after_reply(model, body)
        reply: dict[str, Any] = {
            "model": model or "simulated-reranker",
            "object": "list",
            "results": results,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        if not llamacpp:  # llama.cpp's reply has no id (server-common.cpp:1573-1581)
            reply = {"id": f"rerank-sim-{time.monotonic_ns()}", **reply}
        return h.send_json(200, reply)

    def _rerank_tei(self, h: _Handler, path: str, body: dict[str, Any]) -> int:
        """Hugging Face TEI's /rerank (router/src/http/server.rs): empty ``texts`` is a 400
        (ErrorType::Empty), more than ``max_client_batch_size`` (32 by default) a 422
        (ErrorType::Validation); scores through the sigmoid unless ``raw_scores``
        (core/src/infer.rs); a bare array sorted by score; pairs truncated (``truncate``
        defaults to the server's --auto-truncate, true)."""
        query = body.get("query")
        if not isinstance(query, str):
            raise _HttpError(422, "query must be a string")
        texts = self._documents(body.get("texts"), "texts")
        if not texts:
            return h.send_json(400, {"error": "`texts` cannot be empty", "error_type": "Empty"})
        with self._lock:
            limit = self._config.tei_max_client_batch_size
        if len(texts) > limit:
            message = f"batch size {len(texts)} > maximum allowed batch size {limit}"
            return h.send_json(422, {"error": message, "error_type": "Validation"})
        if delay := self._latency("rerank"):
            time.sleep(delay)
        raw_scores = bool(body.get("raw_scores"))
        scores = [rerank_logit(query, t) if raw_scores else rerank_score(query, t) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: (-scores[i], i))
        results: list[dict[str, Any]] = []
        for i in order:
            result: dict[str, Any] = {"index": i, "score": scores[i]}
            if body.get("return_text"):
                result["text"] = texts[i]
            results.append(result)
        return h.send_json(200, results)

    # ---------------------------------------------------------------- control

    def _control(self, h: _Handler, path: str, raw: bytes) -> None:
        try:
            body = json.loads(raw) if raw.strip() else {}
        except (ValueError, UnicodeDecodeError) as exc:
            h.send_json(400, {"error": f"invalid JSON: {exc}"})
            return
        method = h.command
        try:
            if method == "GET" and path == "/_sim/log":
                h.send_json(200, self.requests)
            elif method == "GET" and path == "/_sim/state":
                h.send_json(200, self.state())
            elif method == "GET" and path == "/_sim/config":
                h.send_json(200, self.config)
            elif method == "POST" and path == "/_sim/reset":
                self.reset()
                h.send_json(200, {"ok": True})
            elif method == "POST" and path == "/_sim/fail":
                self._apply_faults(body)
                h.send_json(200, {"ok": True})
            elif method == "POST" and path == "/_sim/config":
                if not isinstance(body, dict):
                    raise TypeError("config body must be a JSON object")
                options = dict(body)
                faults = options.pop("fail", None)
                if options.pop("reset_faults", False):
                    self.reset_faults()
                self.configure(**options)
                if faults is not None:
                    self._apply_faults(faults)
                h.send_json(200, self.config)
            else:
                h.send_text(404, "404 page not found")
        except (TypeError, ValueError, KeyError) as exc:
            h.send_json(400, {"error": str(exc)})

    def _apply_faults(self, spec: Any) -> None:
        """``{"path", "status", "times"?, "body"?}`` or a list of them."""
        for item in spec if isinstance(spec, list) else [spec]:
            if not isinstance(item, dict):
                raise TypeError("a fault is {path, status, times?, body?}")
            self.fail(
                str(item["path"]), int(item["status"]), int(item.get("times", 1)), item.get("body")
            )


# ----------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """Run the simulator in the foreground; prints its URL, stops on SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(
        prog="python -m shared.devtools.simulators.ollama",
        description="SIMULATOR of the Ollama API and rerank servers (a test double).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = any free port")
    parser.add_argument(
        "--models", default=",".join(DEFAULT_MODELS), help="comma-separated 'pulled' models"
    )
    parser.add_argument("--dim", type=int, default=DEFAULT_DIM)
    parser.add_argument("--load-seconds", type=float, default=0.0)
    parser.add_argument(
        "--rerank-ubatch", type=int, default=512, help="llama-server's -ub (tokens a pair)"
    )
    for kind in LATENCY_KINDS:
        parser.add_argument(f"--{kind}-latency", type=float, default=0.0, metavar="SECONDS")
    args = parser.parse_args(argv)
    latency = {
        k: getattr(args, f"{k}_latency") for k in LATENCY_KINDS if getattr(args, f"{k}_latency")
    }
    sim = OllamaSimulator(
        host=args.host,
        port=args.port,
        dim=args.dim,
        load_seconds=args.load_seconds,
        models=[m.strip() for m in args.models.split(",") if m.strip()],
        latency=latency,
        rerank_ubatch=args.rerank_ubatch,
    )
    return run_until_signal(sim)


if __name__ == "__main__":
    raise SystemExit(main())
