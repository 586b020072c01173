"""Indexing a repository into real Chroma and the Redis BM25 corpus through real workers."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from shared.core import keys
from shared.core.errors import PermanentError
from shared.core.pipeline import enqueue_file, enqueue_remove
from shared.core.settings import Settings
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.index.corpus import RedisCorpus
from shared.index.indexing import FilePlan, finish_files, plan_file, plan_files, store_chunks
from shared.index.owners import OwnersStore, owners_of
from shared.index.reindex import index_repository
from shared.index.vectors import ChromaVectorIndex
from shared.intake.traces import parse_frames
from shared.models.embedder import OllamaEmbedder
from shared.retrieve.hybrid import frame_ranking, hybrid_retrieve
from shared.retrieve.keywords import BM25Index
from tests.conftest import model_not_pulled

pytestmark = pytest.mark.integration


def new_repo() -> str:
    return f"idx-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def chroma(settings: Settings) -> ChromaVectorIndex:
    return ChromaVectorIndex(url=settings.chroma_url)


@pytest.fixture
def corpus(redis_client: redis.Redis) -> RedisCorpus:
    return RedisCorpus(redis_client)


def index(sender: Any, root: Path, repo: str, settings: Settings, **kw: Any):  # type: ignore[no-untyped-def]
    return index_repository(
        sender,
        root,
        repo,
        max_bytes=kw.pop("max_bytes", settings.max_file_bytes),
        timeout=120,
        **kw,
    )


def paths_in_chroma(chroma: ChromaVectorIndex, repo: str) -> set[str]:
    got = chroma._collection(repo).get(include=["metadatas"])
    return {m["path"] for m in got["metadatas"]}


def test_reindexing_an_unchanged_tree_makes_no_embed_calls(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    ollama_sim: OllamaSimulator,
) -> None:
    repo = new_repo()
    first = index(sender, sample_copy, repo, settings)
    assert first.embedded == first.chunks > 0

    ollama_sim.clear_log()
    second = index(sender, sample_copy, repo, settings)

    assert second.embedded == 0 and second.chunks == first.chunks
    assert ollama_sim.requests_to("/api/embed") == []


def test_task_results_keep_no_file_text(
    sender: Any, settings: Settings, sample_copy: Path, redis_client: redis.Redis
) -> None:
    """What Celery keeps of an index task (7 days) is its small result, not the files it was
    sent: the text already lives in the keyword corpus."""
    marker = f"marker_{uuid.uuid4().hex}"
    (sample_copy / "shopapp" / "marked.py").write_text(f"def {marker}():\n    return 1\n")
    report = index(sender, sample_copy, new_repo(), settings)
    assert report.embedded > 0
    metas = list(redis_client.scan_iter("celery-task-meta-*"))
    assert metas
    assert not [k for k in metas if marker.encode() in (redis_client.get(k) or b"")]


def test_a_changed_file_reembeds_only_its_changed_chunks(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    ollama_sim: OllamaSimulator,
    corpus: RedisCorpus,
) -> None:
    repo = new_repo()
    index(sender, sample_copy, repo, settings)
    target = sample_copy / "shopapp/config.py"
    target.write_text(target.read_text() + "\n\nFEATURE_FLAG_REFUNDS = True\n")

    ollama_sim.clear_log()
    report = index(sender, sample_copy, repo, settings)

    assert 1 <= report.embedded <= 2
    inputs = [t for r in ollama_sim.requests_to("/api/embed") for t in r["body"]["input"]]
    assert all("shopapp/config.py" in t for t in inputs)
    documents = BM25Index(corpus).current(repo).documents()
    config_chunks = [d for d in documents if d[1] == "shopapp/config.py"]
    assert len(config_chunks) == len(corpus.file_ids(repo, "shopapp/config.py"))  # no stale


def test_deleted_files_leave_both_indexes(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    chroma: ChromaVectorIndex,
    corpus: RedisCorpus,
) -> None:
    repo = new_repo()
    index(sender, sample_copy, repo, settings)
    gone = "shopapp/notifications/email.py"
    assert gone in paths_in_chroma(chroma, repo)
    (sample_copy / gone).unlink()

    report = index(sender, sample_copy, repo, settings)

    assert report.removed_files == [gone]
    assert gone not in paths_in_chroma(chroma, repo)
    assert gone not in {d[1] for d in BM25Index(corpus).current(repo).documents()}
    hits = BM25Index(corpus).search(repo, "send order confirmation email notification", 50)
    assert gone not in {h.path for h in hits}
    assert BM25Index(corpus).defining(repo, ["EmailNotifier", "send_order_confirmation"]) == []


def test_the_keyword_index_finds_the_code_defining_a_name(
    sender: Any, settings: Settings, sample_copy: Path, corpus: RedisCorpus
) -> None:
    repo = new_repo()
    index(sender, sample_copy, repo, settings)
    hits = BM25Index(corpus).defining(repo, ["send_order_confirmation", "load_settings"])
    assert [h.path for h in hits] == ["shopapp/notifications/email.py", "shopapp/config.py"]
    assert "def send_order_confirmation" in hits[0].text
    assert "def load_settings" in hits[1].text


def test_a_corpus_in_the_format_before_segments_says_so_and_index_converts_it(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    corpus: RedisCorpus,
    redis_client: redis.Redis,
    ollama_sim: OllamaSimulator,
) -> None:
    """A keyword corpus written before segments (one JSON document per chunk) is not read as
    an empty index in silence: search says to run `tracehound index`, which converts it
    without embedding anything again."""
    repo = new_repo()
    index(sender, sample_copy, repo, settings)
    documents = BM25Index(corpus).current(repo).documents()
    for part in ("segments", "where", "dead"):
        redis_client.delete(f"th:corpus:{repo}:{part}")
    redis_client.hset(
        f"th:corpus:{repo}:docs",
        mapping={cid: json.dumps({"p": p, "s": s, "e": e, "t": ""}) for cid, p, s, e in documents},
    )
    redis_client.incr(f"th:corpus:{repo}:version")
    with pytest.raises(PermanentError, match=r"format before segments.*tracehound index"):
        BM25Index(corpus).search(repo, "send order confirmation", 5)

    ollama_sim.clear_log()
    report = index(sender, sample_copy, repo, settings)

    assert report.embedded == 0 and not ollama_sim.requests_to("/api/embed")
    assert not redis_client.exists(f"th:corpus:{repo}:docs")
    hits = BM25Index(corpus).defining(repo, ["send_order_confirmation"])
    assert [h.path for h in hits] == ["shopapp/notifications/email.py"]
    assert sorted(BM25Index(corpus).current(repo).documents()) == sorted(documents)


def test_binary_ignored_oversize_and_bad_utf8_files(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    chroma: ChromaVectorIndex,
    corpus: RedisCorpus,
) -> None:
    repo = new_repo()
    (sample_copy / "shopapp/blob.py").write_bytes(b"x = 1\n\x00\x01\x02binary")
    (sample_copy / "shopapp/huge.py").write_text("# big\n" * 40_000)

    report = index(sender, sample_copy, repo, settings, max_bytes=100_000)

    reasons = {s.path: s.reason for s in report.skipped}
    assert reasons["shopapp/blob.py"] == "binary"
    assert reasons["shopapp/huge.py"].startswith("oversize")
    indexed = paths_in_chroma(chroma, repo)
    assert "build/generated.py" not in indexed  # .gitignore'd
    assert "shopapp/blob.py" not in indexed and "shopapp/huge.py" not in indexed
    legacy = corpus.file_ids(repo, "shopapp/locale/legacy_fr.py")
    assert legacy and set(legacy) <= set(chroma.ids_for_path(repo, "shopapp/locale/legacy_fr.py"))
    assert "\ufffd" in "".join(corpus.texts(repo, legacy))


def test_index_file_and_remove_file_tasks_for_the_watcher(
    sender: Any,
    chroma: ChromaVectorIndex,
    corpus: RedisCorpus,
) -> None:
    repo = new_repo()
    text = "def refund(order):\n    return order.total_cents\n"
    summary = enqueue_file(sender, repo, "billing/refunds.py", text).get(timeout=60)
    assert summary["embedded"] == 1
    assert paths_in_chroma(chroma, repo) == {"billing/refunds.py"}
    again = enqueue_file(sender, repo, "billing/refunds.py", text).get(timeout=60)
    assert again["embedded"] == 0

    removed = enqueue_remove(sender, repo, "billing/refunds.py").get(timeout=60)

    assert removed["removed_chunks"] == 1
    assert paths_in_chroma(chroma, repo) == set()
    assert BM25Index(corpus).current(repo).documents() == []


def test_frames_find_a_file_indexed_after_the_last_query(sender: Any, corpus: RedisCorpus) -> None:
    """The frame mapper is kept per version of the keyword index: a file indexed later is
    found by the next trace that names it, by the same long-lived index object."""
    repo = new_repo()
    enqueue_file(sender, repo, "billing/refunds.py", "def refund(order):\n    return 1\n").get(
        timeout=60
    )
    keywords = BM25Index(corpus)  # one per worker process, kept across tasks
    trace = (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/billing/{name}.py", line 2, in {fn}\n'
        "ZeroDivisionError: division by zero\n"
    )
    own, _ = frame_ranking(repo, parse_frames(trace.format(name="refunds", fn="refund")), keywords)
    assert [h.path for h in own] == ["billing/refunds.py"]
    text = "def charge(order):\n    return order.total / order.count\n"
    enqueue_file(sender, repo, "billing/charges.py", text).get(timeout=60)

    own, _ = frame_ranking(repo, parse_frames(trace.format(name="charges", fn="charge")), keywords)

    assert [h.path for h in own] == ["billing/charges.py"]


def test_missing_embed_model_fails_the_index_with_an_ollama_pull_hint(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    ollama_sim: OllamaSimulator,
) -> None:
    with model_not_pulled(ollama_sim, settings.embed_model):
        report = index(sender, sample_copy, new_repo(), settings)
    assert report.failed
    assert f"ollama pull {settings.embed_model}" in report.failed[0]
    assert report.removed_files == []  # nothing pruned after a failed run


def test_single_file_changes_are_embedded_several_per_request_and_each_gets_its_result(
    sender: Any,
    settings: Settings,
    chroma: ChromaVectorIndex,
    ollama_sim: OllamaSimulator,
) -> None:
    """A burst of watcher changes (one task per file) reaches the model host as a few batched
    embed requests, not one request, one upsert and one keyword segment per file; still,
    every change's task returns its own summary. The host takes 0.2 s an embed request, as
    a busy one does: changes planned meanwhile wait for the next drain. (At the simulator's
    zero latency, how many share a request was a race between the CPU worker planning them
    and the drains: under a full parallel run's load it lost once, 21 requests for 40 files.)"""
    repo = new_repo()
    folder = f"burst_{uuid.uuid4().hex[:6]}"
    n = 40
    text = "def f_{}(x):\n    return x + {}\n"
    ollama_sim.configure(latency={"embed": 0.2})
    try:
        # mod_0 saved twice in a row: both saves may wait in one drain with the same chunk.
        again = enqueue_file(sender, repo, f"{folder}/mod_0.py", text.format(0, 0))
        changes = [
            enqueue_file(sender, repo, f"{folder}/mod_{i}.py", text.format(i, i)) for i in range(n)
        ]
        summaries = [c.get(timeout=120) for c in changes]
    finally:
        ollama_sim.configure(latency={})

    assert all(s["files"] == 1 and s["chunks"] == 1 and s["embedded"] <= 1 for s in summaries)
    assert again.get(timeout=120)["files"] == 1
    assert paths_in_chroma(chroma, repo) == {f"{folder}/mod_{i}.py" for i in range(n)}
    ours = [
        r
        for r in ollama_sim.requests_to("/api/embed")
        if any(folder in text for text in r["body"]["input"])
    ]
    # Each chunk embedded once (mod_0's twice if its saves fell in two drains).
    assert n <= sum(len(r["body"]["input"]) for r in ours) <= n + 1
    assert len(ours) < n // 2  # several files per request (one each before the backlog)


class CountingVectors:
    """The real Chroma index, counting the lookups a plan makes."""

    def __init__(self, inner: ChromaVectorIndex) -> None:
        self.inner, self.lookups = inner, 0

    def existing_ids(self, repo: str, ids: Any) -> set[str]:
        self.lookups += 1
        return self.inner.existing_ids(repo, ids)


def test_a_batch_is_planned_as_each_file_alone_in_one_lookup(
    settings: Settings,
    chroma: ChromaVectorIndex,
    corpus: RedisCorpus,
    ollama_sim: OllamaSimulator,
    redis_client: redis.Redis,
) -> None:
    """A watcher's batch: an unchanged file, a changed one, a new one, one whose keyword
    entries Redis lost (refilled, not re-embedded), and a file saved twice. Planned together,
    each file gets the plan it gets alone, and the batch asks the vector store once."""
    repo = new_repo()
    embedder = OllamaEmbedder(ollama_sim.url, settings.embed_model)
    old = {
        f"svc/mod_{i}.py": f"def handler_{i}(order):\n    return order.total / {i}\n"
        for i in range(4)
    }
    indexed = plan_files(repo, list(old.items()), settings=settings, vectors=chroma, corpus=corpus)
    store_chunks(
        repo, [c for p in indexed for c in p.missing], embedder=embedder, vectors=chroma,
        corpus=corpus,
    )  # fmt: skip
    finish_files(repo, indexed, vectors=chroma, corpus=corpus)
    lost = indexed[3].chunk_ids  # mod_3's keyword entries gone, its vectors still there
    redis_client.hdel(keys.corpus(repo, "where"), *lost)
    assert corpus.existing_ids(repo, lost) == set()

    batch = [
        ("svc/mod_0.py", old["svc/mod_0.py"]),  # unchanged
        ("svc/mod_1.py", "def handler_1(order):\n    return 0\n"),  # changed
        ("svc/new.py", "def fresh():\n    return 1\n"),  # new
        ("svc/mod_3.py", old["svc/mod_3.py"]),  # to refill
        ("svc/mod_2.py", "def handler_2(order):\n    return None\n"),  # saved twice
        ("svc/mod_2.py", old["svc/mod_2.py"]),
    ]
    counting = CountingVectors(chroma)
    together = plan_files(repo, batch, settings=settings, vectors=counting, corpus=corpus)  # type: ignore[arg-type]
    alone = [
        plan_file(repo, path, text, settings=settings, vectors=chroma, corpus=corpus)
        for path, text in batch
    ]

    assert together == alone
    assert counting.lookups == 1
    assert [bool(p.missing) for p in together] == [False, True, True, False, True, False]
    assert together[3].refill and not together[0].refill
    assert together[1].stale == indexed[1].chunk_ids


def test_a_file_changed_and_changed_back_in_one_drain_keeps_its_chunks(
    settings: Settings,
    chroma: ChromaVectorIndex,
    corpus: RedisCorpus,
    ollama_sim: OllamaSimulator,
) -> None:
    """Two saves of a file waiting in one drain of the embedding backlog, both planned against
    its indexed text A: B, then A again. The file ends with A's chunks in both indexes, not
    with ids whose chunks the first save's finish had dropped."""
    repo, path = new_repo(), "billing/refunds.py"
    a = "def refund(order):\n    return order.total_cents\n"
    b = "def refund(order):\n    return 0\n"
    embedder = OllamaEmbedder(ollama_sim.url, settings.embed_model)

    def plan(text: str) -> FilePlan:
        return plan_file(repo, path, text, settings=settings, vectors=chroma, corpus=corpus)

    first = plan(a)
    store_chunks(repo, first.missing, embedder=embedder, vectors=chroma, corpus=corpus)
    finish_files(repo, [first], vectors=chroma, corpus=corpus)
    to_b, back_to_a = plan(b), plan(a)
    store_chunks(repo, to_b.missing, embedder=embedder, vectors=chroma, corpus=corpus)
    finish_files(repo, [to_b, back_to_a], vectors=chroma, corpus=corpus)

    assert corpus.file_ids(repo, path) == first.chunk_ids
    assert chroma.existing_ids(repo, first.chunk_ids) == set(first.chunk_ids)
    assert corpus.existing_ids(repo, first.chunk_ids) == set(first.chunk_ids)
    assert not chroma.existing_ids(repo, to_b.chunk_ids)
    assert not corpus.existing_ids(repo, to_b.chunk_ids)


def test_index_records_the_codeowners_github_would_use_for_notify_to_read(
    sender: Any, settings: Settings, sample_copy: Path, redis_client: redis.Redis
) -> None:
    (sample_copy / ".github").mkdir(exist_ok=True)
    (sample_copy / ".github" / "CODEOWNERS").write_text("*.py @acme/py\n")
    (sample_copy / "CODEOWNERS").write_text("* @ignored\n")  # .github/ comes first
    repo = new_repo()
    index(sender, sample_copy, repo, settings, history=None)
    assert owners_of(OwnersStore(redis_client).rules(repo), "app/x.py") == ("@acme/py",)


def test_chroma_keeps_no_texts_and_vector_hits_still_show_their_code(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    chroma: ChromaVectorIndex,
    corpus: RedisCorpus,
    ollama_sim: OllamaSimulator,
) -> None:
    """A chunk's text is stored once, in the keyword corpus: Chroma gets vectors and metadata,
    no document for its full-text index to take in. The vector search the retrieve stage makes
    still shows each hit's code (read from the corpus), and a vector whose chunk the corpus
    does not hold (removed, or not written yet) shows nothing rather than an empty chunk."""
    repo = new_repo()
    index(sender, sample_copy, repo, settings)
    stored = chroma._collection(repo).get(include=["documents"])
    assert stored["ids"] and not any(stored["documents"])

    query = "ZeroDivisionError in _allocate_discount: share / line.quantity"
    [vector] = OllamaEmbedder(ollama_sim.url, settings.embed_model).embed([query])
    # A vector only Chroma holds, as near the query as can be: the corpus has no text for it.
    [orphan] = plan_file(
        repo, "shopapp/orphan.py", "def orphan():\n    return 1\n",
        settings=settings, vectors=chroma, corpus=corpus,
    ).missing  # fmt: skip
    chroma.upsert(repo, [orphan], [vector])

    found = hybrid_retrieve(
        repo, query, vector, vectors=chroma, keywords=BM25Index(corpus).current(repo),
        signals={"vector"},
    )  # fmt: skip
    [(signal, hits)] = found.rankings
    assert signal == "vector" and len(hits) >= 5
    assert orphan.id not in {h.chunk_id for h in hits}
    for hit in hits:
        assert hit.text.strip()
        raw = (sample_copy / hit.path).read_bytes()
        if raw.isascii():  # the code at the hit's lines (a Latin-1 file is read as decoded)
            assert hit.text.splitlines()[0] in raw.decode().splitlines()[hit.start_line - 1]
