"""The keyword index in a real Redis: BM25Okapi's exact scores through every kind of change,
segments loaded one at a time, and no removed chunk coming back."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from rank_bm25 import BM25Okapi

from shared.core.domain import Chunk
from shared.index import corpus as corpus_module
from shared.index.chunking import chunk_file
from shared.index.corpus import RedisCorpus
from shared.index.segment_cache import SegmentCache
from shared.index.segments import chunk_tokens
from shared.index.tokens import tokenize
from shared.intake.frames import PathMapper
from shared.retrieve.keywords import BM25Index, KeywordView

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "data" / "traces"
REPO = "kw"


CHURN = "from tests.integration.test_keyword_index import churn; churn({url!r}, {seed})"


def code_chunks() -> list[Chunk]:
    """Chunks of this repository's own sources and the sample service: real code."""
    out: list[Chunk] = []
    for folder in ("shared", "producers", "workers", "tests/data/sample-service"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_bytes().decode("utf-8", errors="replace")
            out += chunk_file(REPO, str(path.relative_to(ROOT)), text)
    return out


@pytest.fixture(scope="module")
def code() -> list[Chunk]:
    return code_chunks()


def query_texts() -> list[str]:
    return [
        *(p.read_text(encoding="utf-8") for p in sorted(TRACES.glob("*.log"))),
        "KeyError: 'redelivery_after' in celery_config",
        "self self def return",  # terms in most chunks: the idf floor
    ]


def queries() -> list[list[str]]:
    return [tokenize(text) for text in query_texts()]


_TOKENS: dict[str, list[str]] = {}


def tokens_of(chunk: Chunk) -> list[str]:
    """The chunk's terms, counted once per chunk id for the whole session: the reference is
    rebuilt at every check and would otherwise tokenize every live chunk again."""
    if chunk.id not in _TOKENS:
        _TOKENS[chunk.id] = chunk_tokens(chunk)
    return _TOKENS[chunk.id]


def in_segments(client: redis.Redis, chunks: list[Chunk], size: int) -> RedisCorpus:
    """A corpus holding ``chunks``, added ``size`` at a time (one segment each, until merged)."""
    corpus = RedisCorpus(client)
    for lo in range(0, len(chunks), size):
        corpus.add(REPO, chunks[lo : lo + size])
    return corpus


def scores_by_id(view: KeywordView, query: list[str]) -> dict[str, float]:
    scores = view.scores(query)
    ids = [d[0] for d in view.documents()]
    live = np.flatnonzero(view.live)
    assert len(live) == len(ids)
    return {cid: float(scores[i]) for cid, i in zip(ids, live.tolist(), strict=True)}


def assert_same_as_bm25okapi(view: KeywordView, live: dict[str, Chunk]) -> None:
    ids = sorted(live)
    reference = BM25Okapi([tokens_of(live[c]) for c in ids])
    for text in query_texts():
        query = tokenize(text)
        expected = dict(zip(ids, reference.get_scores(query).tolist(), strict=True))
        got = scores_by_id(view, query)
        assert got.keys() == expected.keys()
        np.testing.assert_allclose(
            [got[c] for c in ids], [expected[c] for c in ids], rtol=0, atol=1e-6
        )

        def top(s: dict[str, float]) -> list[str]:
            return sorted(s, key=lambda cid: (-round(s[cid], 9), cid))[:50]

        assert top(got) == top(expected)
        ranked = sorted((v for v in expected.values() if v > 0), reverse=True)
        for n in (1, 10, 50):
            # The search's pruned top (shared/retrieve/top_scores.py): BM25Okapi's best n.
            hits = view.search(REPO, text, n)
            np.testing.assert_allclose([h.score for h in hits], ranked[:n], rtol=0, atol=1e-6)
            for h in hits:
                assert abs(h.score - expected[h.chunk_id]) < 1e-6


@pytest.mark.parametrize("mode", ["in-memory", "cache-files", "stats-always-moved"])
def test_scores_equal_bm25okapi_through_adds_removals_merges_and_compaction(
    fresh_redis: redis.Redis,
    code: list[Chunk],
    mode: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if mode == "stats-always-moved":  # never counted again from scratch after the first load
        monkeypatch.setattr("shared.retrieve.keywords.RECOUNT_SHARE", float("inf"))
    cache = SegmentCache(tmp_path / "cache" if mode == "cache-files" else None)
    corpus, index = RedisCorpus(fresh_redis), BM25Index(RedisCorpus(fresh_redis), cache)
    rng = random.Random(7)
    live: dict[str, Chunk] = {}
    seen_segments, seen_dead, checks = 0, 0, 0
    at = 0
    while at < len(code):
        batch = code[at : at + rng.choice([1, 2, 9, 60, 150])]
        at += len(batch)
        corpus.add(REPO, batch)
        live.update((c.id, c) for c in batch)
        if rng.random() < 0.4:
            gone = rng.sample(sorted(live), min(len(live) - 1, rng.choice([1, 4, 25])))
            corpus.delete(REPO, gone)
            for cid in gone:
                live.pop(cid)
        if rng.random() < 0.25 or at >= len(code):
            state = corpus.state(REPO)
            seen_segments = max(seen_segments, len(state.segments))
            seen_dead = max(seen_dead, sum(s.dead for s in state.segments))
            assert_same_as_bm25okapi(index.current(REPO), live)  # the same reader, kept warm
            checks += 1
    assert checks >= 3 and seen_segments >= 3 and seen_dead > 0, "the run must exercise these"
    readded = [c for c in code[:40] if c.id not in live]
    corpus.add(REPO, readded)
    live.update((c.id, c) for c in readded)
    assert_same_as_bm25okapi(index.current(REPO), live)

    assert corpus.merge(REPO, everything=True) >= 1

    state = corpus.state(REPO)
    assert len(state.segments) == 1 and not state.dead
    assert_same_as_bm25okapi(index.current(REPO), live)
    assert_same_as_bm25okapi(BM25Index(corpus, cache).current(REPO), live)  # a new worker
    assert corpus.existing_ids(REPO, list(live)) == set(live)


class CountingCorpus(RedisCorpus):
    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.loaded: list[int] = []

    def _fields(self, repo: str, sid: int) -> dict[bytes | str, bytes | np.ndarray] | None:
        self.loaded.append(sid)  # a segment read from Redis
        return super()._fields(repo, sid)


def test_a_warm_worker_loads_only_what_changed(fresh_redis: redis.Redis, code: list[Chunk]) -> None:
    writer = RedisCorpus(fresh_redis)
    writer.add(REPO, code[:600])
    writer.merge(REPO, everything=True)
    counting = CountingCorpus(fresh_redis)
    index = BM25Index(counting)
    assert index.search(REPO, "redelivery_after celery", 5)
    counting.loaded.clear()
    new = chunk_file(REPO, "billing/coupons.py", "def allocate_coupon_xq7(order):\n    pass\n")

    writer.add(REPO, new)
    hits = index.search(REPO, "allocate_coupon_xq7", 5)

    assert hits[0].path == "billing/coupons.py"
    assert counting.loaded == [max(s.sid for s in writer.state(REPO).segments)]
    counting.loaded.clear()

    writer.delete(REPO, [new[0].id])

    assert "billing/coupons.py" not in {
        h.path for h in index.search(REPO, "allocate_coupon_xq7", 5)
    }
    assert counting.loaded == []  # a removal loads nothing: the chunk is only marked dead
    view = index.current(REPO)
    assert view is index.current(REPO)  # unchanged index: the same view, one GET to know it


def test_a_segment_read_in_many_ranges_scores_the_same(
    fresh_redis: redis.Redis, code: list[Chunk], monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = RedisCorpus(fresh_redis)
    corpus.add(REPO, code[:500])
    whole = BM25Index(corpus).current(REPO)
    monkeypatch.setattr("shared.index.corpus.READ_RANGE", 1000)

    ranged = BM25Index(corpus).current(REPO)

    for query in queries():
        assert np.array_equal(ranged.scores(query), whole.scores(query))


def test_a_removal_made_while_a_merge_is_built_stays_removed(
    fresh_redis: redis.Redis, code: list[Chunk]
) -> None:
    corpus = in_segments(fresh_redis, code[:300], 50)
    corpus.delete(REPO, [code[3].id])
    before = corpus.state(REPO)  # the merge is planned on this state...
    victim = code[120]
    corpus.delete(REPO, [victim.id])  # ...and this removal lands before it commits

    assert corpus._merge(REPO, before, [s.sid for s in before.segments])

    view = BM25Index(corpus).current(REPO)
    ids = {d[0] for d in view.documents()}
    assert victim.id not in ids and code[3].id not in ids
    assert len(ids) == 298
    assert corpus.existing_ids(REPO, [victim.id, code[4].id]) == {code[4].id}
    query = chunk_tokens(victim)
    assert victim.id not in scores_by_id(view, query)


def test_a_reader_that_saw_the_segments_before_a_merge_reads_the_merged_one(
    fresh_redis: redis.Redis, code: list[Chunk]
) -> None:
    corpus = in_segments(fresh_redis, code[:400], 40)
    index = BM25Index(corpus)
    query = tokenize((TRACES / "python.log").read_text(encoding="utf-8"))
    before = scores_by_id(index.current(REPO), query)

    corpus.merge(REPO, everything=True)
    for key in fresh_redis.scan_iter(match=f"th:corpus:{REPO}:seg:*"):
        if fresh_redis.ttl(key) > 0:  # retired segments: gone sooner than their grace time
            fresh_redis.delete(key)

    after = scores_by_id(index.current(REPO), query)
    assert after.keys() == before.keys()
    np.testing.assert_allclose([after[c] for c in before], list(before.values()), rtol=0, atol=1e-9)


def test_writers_at_once_lose_nothing(
    fresh_redis: redis.Redis, private_redis_url: str, code: list[Chunk]
) -> None:
    """Four writers add, replace and remove chunks of their own files at the same time, with
    merges running in between: the index ends holding exactly what each one left."""
    by_path: dict[str, list[Chunk]] = {}
    for c in code:
        by_path.setdefault(c.path, []).append(c)
    paths = sorted(by_path)
    expected: dict[str, Chunk] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            corpus = RedisCorpus(redis.Redis.from_url(private_redis_url))
            rng = random.Random(k)
            mine: dict[str, Chunk] = {}
            for path in paths[k::4]:
                chunks = by_path[path]
                corpus.add(REPO, chunks)
                mine.update((c.id, c) for c in chunks)
                if rng.random() < 0.3:
                    gone = [c.id for c in chunks[::2]]
                    corpus.delete(REPO, gone)
                    for cid in gone:
                        mine.pop(cid)
            with lock:
                expected.update(mine)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors

    corpus = RedisCorpus(fresh_redis)
    view = BM25Index(corpus).current(REPO)
    assert sorted(d[0] for d in view.documents()) == sorted(expected)
    assert corpus.existing_ids(REPO, [c.id for c in code]) == set(expected)
    assert_same_as_bm25okapi(view, expected)


def churn(url: str, seed: int) -> None:
    """A writer that never stops: adds files' chunks, removes some, compacts now and then.
    Run as its own process by the test below, which kills it with -9. Its locks live 3 s,
    not 30: the test waits out a dead writer's lock once per run."""
    corpus_module.LOCK_TIMEOUT = 3.0
    corpus = RedisCorpus(redis.Redis.from_url(url))
    code = code_chunks()
    rng = random.Random(seed)
    print("writing", flush=True)  # the test's random kill point counts from here
    while True:
        lo = rng.randrange(len(code))
        corpus.add(REPO, code[lo : lo + rng.choice([1, 30, 200])])
        if rng.random() < 0.5:
            corpus.delete(REPO, [c.id for c in rng.sample(code, 20)])
        if rng.random() < 0.1:
            corpus.merge(REPO, everything=True)


def assert_consistent(client: redis.Redis, by_id: dict[str, Chunk]) -> dict[str, Chunk]:
    """Every live document is in ``where`` and the reverse, each with its text; the reader
    scores what ``where`` holds as BM25Okapi does. Returns the live chunks."""
    corpus = RedisCorpus(client)
    state = corpus.state(REPO)
    where = {k.decode(): v.decode() for k, v in client.hgetall(f"th:corpus:{REPO}:where").items()}
    live_docs = 0
    for info in state.segments:
        seg = corpus.segment(REPO, info.sid)
        assert seg is not None and len(seg) == info.size
        dead = set(state.dead.get(info.sid, np.zeros(0)).tolist())
        live_docs += info.size - len(dead)
        for doc in range(info.size):
            if doc not in dead:
                assert where[seg.id_at(doc)] == f"{info.sid}:{doc}"
    assert live_docs == len(where)
    assert corpus.existing_ids(REPO, list(where)) == set(where)
    assert all(corpus.texts(REPO, list(where)))
    live = {cid: by_id[cid] for cid in where}
    if live:
        assert_same_as_bm25okapi(BM25Index(corpus).current(REPO), live)
    return live


def test_a_writer_killed_mid_change_leaves_a_consistent_index(
    fresh_redis: redis.Redis, private_redis_url: str, code: list[Chunk]
) -> None:
    """kill -9 of a writer at random points (inside adds, removals and compactions): each
    change is one MULTI/EXEC, so the index is always a whole state, and after the dead
    writer's lock expires another writer carries on."""
    by_id = {c.id: c for c in code}
    rng = random.Random(3)
    for round_ in range(6):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHURN.format(url=private_redis_url, seed=round_)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
        )
        # Starting Python and reading the code can take seconds on a busy machine: the kill
        # falls 0.5-2 s into the writing, not into the start.
        assert proc.stdout is not None and proc.stdout.readline() == b"writing\n"
        time.sleep(rng.uniform(0.5, 2.0))
        proc.kill()
        proc.wait()
        assert_consistent(fresh_redis, by_id)
    corpus = RedisCorpus(fresh_redis)
    assert corpus.state(REPO).segments, "the writers must have written something"

    corpus.add(REPO, code[:50])  # may wait for a killed writer's lock to expire
    corpus.merge(REPO, everything=True)

    live = assert_consistent(fresh_redis, by_id)
    assert {c.id for c in code[:50]} <= live.keys()


def test_the_views_frame_mapper_maps_as_pathmapper_over_the_live_paths(
    fresh_redis: redis.Redis, code: list[Chunk], tmp_path: Path
) -> None:
    """The view finds a frame's file through each segment file's path suffixes (no table of
    every suffix in memory): the same answers as PathMapper over the live paths."""
    corpus = in_segments(fresh_redis, code[:900], 300)
    gone = sorted({c.path for c in code[:900]})[::7]  # every chunk of some files removed
    corpus.delete(REPO, [c.id for c in code[:900] if c.path in gone])
    view = BM25Index(corpus, SegmentCache(tmp_path)).current(REPO)
    live = {d[1] for d in view.documents()}
    assert live and not live & set(gone)
    reference = PathMapper(live)
    frames = [
        *(f"/srv/app/{p}" for p in sorted(live | set(gone))),
        *(p.rsplit("/", 1)[-1] for p in sorted(live)[:20]),  # a bare file name
        "/usr/lib/python3.11/site-packages/celery/app/task.py",
        "C:\\build\\shared\\core\\settings.py",
        "",
    ]
    mapper = view.path_mapper(REPO)
    assert [mapper.map_file(f) for f in frames] == [reference.map_file(f) for f in frames]
    assert any(mapper.map_file(f) for f in frames)
