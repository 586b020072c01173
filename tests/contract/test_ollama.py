"""Ollama's chat as its server source defines it, held by the simulator and kept by tracehound.

server/prompt.go drops the oldest messages that do not fit ``num_ctx`` (system messages and
the last message stay) and the runner cuts a single prompt too long for it in the middle; an
unload request loads nothing. The tests drive langchain-ollama's ``ChatOllama`` (inside
tracehound's ``OllamaChat``, with ``bind_tools`` and a ``format`` schema) against the
simulator and check both sides: what the model was left with, and that tracehound never leaves
it without the system prompt, the error or the top candidate. Rules and sources:
shared/devtools/simulators/ollama.py (fit_context, _in_context, _complete).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from shared.analyze.budget import Budget
from shared.analyze.llm import analyze, build_messages
from shared.analyze.tools import Toolbox
from shared.core.domain import Candidate, ChunkHit, ErrorEvent
from shared.devtools.eval import MemoryIndex, load_corpus
from shared.devtools.simulators.ollama import OllamaSimulator, fit_context
from shared.models.chat import OllamaChat, reply_tokens
from tests.conftest import DATA, SAMPLE_SERVICE

pytestmark = pytest.mark.contract

CHAT = "qwen2.5-coder:7b"
REPO = SAMPLE_SERVICE.name
EVENT = ErrorEvent(
    service="shop-api",
    repo=REPO,
    message="division by zero",
    exception_type="ZeroDivisionError",
    stacktrace=(DATA / "sample-error.txt").read_text(),
)


@pytest.fixture
def ollama() -> Iterator[OllamaSimulator]:
    with OllamaSimulator(models=[CHAT]) as sim:
        yield sim


def candidates(n: int, lines: int = 300) -> list[Candidate]:
    """``n`` large candidate files, the first the fix's file."""
    out = []
    for rank in range(n):
        path = f"shopapp/services/mod_{rank}.py"
        body = "\n".join(
            f"    total_{rank}_{i} = quantity_{i} * unit_price_{i}  # line {i}"
            for i in range(lines)
        )
        hit = ChunkHit(chunk_id=f"{path}#1", path=path, start_line=1, end_line=lines,
                       text=body, score=1.0)  # fmt: skip
        out.append(Candidate(path=path, score=1.0 / (rank + 1), chunks=[hit]))
    return out


def chats(sim: OllamaSimulator) -> list[dict[str, Any]]:
    return [r for r in sim.requests_to("/api/chat") if r["body"].get("messages")]


def test_the_oldest_messages_go_first_and_the_system_prompt_and_the_last_stay() -> None:
    """prompt.go, on the rendered conversation: the first message that has to go is the one
    holding the error — what a tool round left to Ollama's truncation loses first."""
    system = {"role": "system", "content": "You analyse production errors."}
    error = {"role": "user", "content": "<error>KeyError: 'sku'</error>\n" + "code line\n" * 3000}
    calls = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "x"}}]}
    result = {"role": "tool", "content": "def price(): ...\n" * 100}
    last = {"role": "user", "content": "Answer now."}
    fitted = fit_context([system, error, calls, result, last], None, 2048)
    assert fitted.messages == [system, calls, result, last] and fitted.dropped == 1
    alone = fit_context([system, error], None, 2048)  # only the last left, and too long
    assert alone.cut and "<error>" not in alone.messages[-1]["content"]
    assert alone.tokens <= 2048


def test_chat_ollama_reads_what_the_window_kept_and_reports_its_tokens(
    ollama: OllamaSimulator,
) -> None:
    chat = OllamaChat(ollama.url, CHAT, timeout=30, num_ctx=1024)
    big = [{"role": "user", "content": "<error>KeyError</error>\n" + "x = 1\n" * 2000},
           {"role": "user", "content": "Answer now."}]  # fmt: skip
    chat.complete(big, {"type": "object"})
    [request] = chats(ollama)
    assert request["body"]["options"]["num_ctx"] == 1024  # sent on every call
    assert request["context"]["dropped"] == 1
    assert request["context"]["prompt_tokens"] <= 1024


def test_a_small_window_keeps_the_error_and_the_top_file_in_every_call_of_a_tool_analysis(
    ollama: OllamaSimulator,
) -> None:
    """tracehound fits every call itself: at num_ctx 8192 the model is never left without
    the system prompt, the error or the top candidate, and Ollama never drops or cuts."""
    ollama.configure(
        tool_turns=[
            {"match": "ZeroDivisionError",
             "tool_calls": [{"name": "read_file", "arguments": {"path": "shopapp/app.py"}},
                            {"name": "search_code", "arguments": {"query": "discount"}}]},
            {"match": "ZeroDivisionError",
             "tool_calls": [{"name": "read_file",
                             "arguments": {"path": "shopapp/services/pricing.py"}}]},
        ]
    )  # fmt: skip
    chat = OllamaChat(ollama.url, CHAT, timeout=30, num_ctx=8192)
    index = MemoryIndex(load_corpus(SAMPLE_SERVICE), None)
    tools = Toolbox(REPO, index, lambda t: t, 6000)
    budget = Budget(8192, chat.tokens)
    shown = candidates(8)
    analysis = analyze(EVENT, shown, chat, tools=tools, rounds=3, budget=budget)
    assert not analysis.degraded
    sent = chats(ollama)
    assert len(sent) >= 3  # two rounds of tool calls, then the answer
    for request in sent:
        assert request["context"]["dropped"] == 0 and not request["context"]["cut"]
        assert request["context"]["prompt_tokens"] <= 8192 - reply_tokens(8192)
        messages = request["body"]["messages"]
        assert messages[0]["role"] == "system"
        prompt = messages[1]["content"]
        assert "ZeroDivisionError" in prompt and re.search(r"<error_\w+>", prompt)
        assert f'rank="1" path="{shown[0].path}"' in prompt
    first = sent[0]["body"]["messages"][1]["content"]
    assert f'path="{shown[-1].path}"' not in first  # the lowest-ranked code gave way


def test_a_window_too_small_for_tool_rounds_gets_one_call_that_fits(
    ollama: OllamaSimulator,
) -> None:
    chat = OllamaChat(ollama.url, CHAT, timeout=30, num_ctx=4096)
    index = MemoryIndex(load_corpus(SAMPLE_SERVICE), None)
    tools = Toolbox(REPO, index, lambda t: t, 6000)
    analyze(EVENT, candidates(8), chat, tools=tools, rounds=3, budget=Budget(4096, chat.tokens))
    [request] = chats(ollama)
    assert not request["body"].get("tools")
    assert request["context"]["prompt_tokens"] <= 4096 - reply_tokens(4096)
    assert request["context"]["dropped"] == 0 and not request["context"]["cut"]


def test_the_old_prompt_overflows_a_small_window_and_loses_the_error(
    ollama: OllamaSimulator,
) -> None:
    """What Ollama does to a prompt built for 16 kB of code when the window is 4096: the
    fitted prompt of the test above is what prevents this."""
    chat = OllamaChat(ollama.url, CHAT, timeout=30, num_ctx=4096)
    roomy = Budget(65536, chat.tokens)  # as if the window were unbounded
    messages = build_messages(EVENT, candidates(8), budget=roomy)
    messages.append({"role": "user", "content": "Answer now."})
    chat.complete(messages, {"type": "object"})
    [request] = chats(ollama)
    assert request["context"]["dropped"] == 1  # the message with the error and the code


def test_replies_calibrate_the_estimate_to_a_vocabulary_that_counts_more(
    ollama: OllamaSimulator,
) -> None:
    """A model whose tokenizer cuts code finer than the estimate: the first prompt is too
    long and the runner cuts it; its prompt_eval_count (the cut's exact size) raises the
    estimate, and the next prompts fit."""
    ollama.configure(chat_token_scale=1.6)
    chat = OllamaChat(ollama.url, CHAT, timeout=30, num_ctx=4096)
    budget = Budget(4096, chat.tokens)
    for _ in range(3):
        analyze(EVENT, candidates(8), chat, budget=budget)
    first, *later = [r["context"] for r in chats(ollama)]
    assert first["cut"] and chat.tokens.scale > 1.0
    for context in later:
        assert context["dropped"] == 0 and not context["cut"]
        assert context["prompt_tokens"] <= 4096 - reply_tokens(4096)


def test_an_unload_request_is_answered_without_loading(ollama: OllamaSimulator) -> None:
    import httpx

    from shared.models.hosts import unload_ollama_model

    with httpx.Client() as client:
        unload_ollama_model(client, ollama.url, CHAT)
    assert ollama.load_count == 0 and ollama.loaded_model is None
    [request] = ollama.requests_to("/api/generate")
    assert json.loads(json.dumps(request["body"])) == {"model": CHAT, "keep_alive": 0}


def test_embeddings_match_what_langchain_ollama_gets_for_the_same_texts(
    ollama: OllamaSimulator,
) -> None:
    """/api/embed {model, input: [...]} answers vectors in input order: tracehound's httpx
    embedder and langchain-ollama's OllamaEmbeddings (the ollama client) read the same."""
    from langchain_ollama import OllamaEmbeddings

    from shared.models.embedder import OllamaEmbedder

    ollama.configure(models=[CHAT, "nomic-embed-text"])
    texts = ["search_document: def total(order): ...", "search_document: class Cart: ..."]
    ours = OllamaEmbedder(ollama.url, "nomic-embed-text").embed(texts)
    theirs = OllamaEmbeddings(model="nomic-embed-text", base_url=ollama.url).embed_documents(texts)
    assert ours == theirs and len(ours) == 2
    bodies = [r["body"] for r in ollama.requests_to("/api/embed")]
    assert all(b["model"] == "nomic-embed-text" and b["input"] == texts for b in bodies)
