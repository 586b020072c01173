"""The machine's keyword segment files: read from Redis once, mapped by every process, and
never a reason for a wrong score or a failed retrieve (damaged, unwritable, a writer killed)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from shared.core import keys
from shared.core.domain import Chunk
from shared.index.corpus import RedisCorpus
from shared.index.segment_cache import SUFFIX, SegmentCache
from shared.index.segment_files import read
from shared.retrieve.keywords import BM25Index
from tests.integration.test_keyword_index import (
    REPO,
    ROOT,
    CountingCorpus,
    assert_same_as_bm25okapi,
    code_chunks,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def code() -> list[Chunk]:
    return code_chunks()


def indexed(client: redis.Redis, chunks: list[Chunk]) -> dict[str, Chunk]:
    corpus = RedisCorpus(client)
    corpus.add(REPO, chunks[:400])
    corpus.add(REPO, chunks[400:700])
    corpus.delete(REPO, [chunks[5].id])
    return {c.id: c for c in chunks[:700] if c.id != chunks[5].id}


def files(root: Path) -> list[Path]:
    return sorted(root.glob(f"*{SUFFIX}"))


def test_a_second_reader_maps_the_first_ones_files_and_reads_nothing_from_redis(
    fresh_redis: redis.Redis, code: list[Chunk], tmp_path: Path
) -> None:
    live = indexed(fresh_redis, code)
    cache = SegmentCache(tmp_path)
    first = CountingCorpus(fresh_redis)
    assert_same_as_bm25okapi(BM25Index(first, cache).current(REPO), live)
    sids = [s.sid for s in first.state(REPO).segments]
    assert first.loaded == sids and len(files(tmp_path)) == len(sids)

    second = CountingCorpus(fresh_redis)
    view = BM25Index(second, cache).current(REPO)

    assert second.loaded == []
    assert_same_as_bm25okapi(view, live)
    stored = {fresh_redis.hget(keys.corpus_segment(REPO, sid), "digest").decode() for sid in sids}
    assert {p.name.removesuffix(SUFFIX) for p in files(tmp_path)} == stored


PROBE = """
import sys, redis
from pathlib import Path
from shared.index.corpus import RedisCorpus
from shared.index.segment_cache import SegmentCache
from shared.retrieve.keywords import BM25Index
index = BM25Index(RedisCorpus(redis.Redis.from_url({url!r})), SegmentCache(Path({cache!r})))
assert index.search({repo!r}, "redelivery_after celery config", 5)
print("ready", flush=True)
sys.stdin.readline()
"""


def mapped_file(pid: int, root: Path) -> dict[str, int]:
    """Rss and Pss (kB) of the pid's mappings of segment files under ``root``."""
    out = {"Rss": 0, "Pss": 0}
    inside = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if "-" in head[0] and len(head) >= 5:  # a mapping's header line
            inside = len(head) >= 6 and head[5].startswith(str(root))
        elif inside and head[0].rstrip(":") in out:
            out[head[0].rstrip(":")] += int(head[1])
    return out


def test_two_processes_share_the_pages_of_one_segment_file(
    fresh_redis: redis.Redis, private_redis_url: str, code: list[Chunk], tmp_path: Path
) -> None:
    RedisCorpus(fresh_redis).add(REPO, code)
    script = PROBE.format(url=private_redis_url, cache=str(tmp_path), repo=REPO)
    procs = []
    try:
        for _ in range(2):
            p = subprocess.Popen(
                [sys.executable, "-c", script],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert p.stdout is not None and p.stdout.readline() == b"ready\n"
            procs.append(p)
        maps = [mapped_file(p.pid, tmp_path) for p in procs]
    finally:
        for p in procs:
            p.communicate(b"\n", timeout=30)
    assert len(files(tmp_path)) == 1
    for m in maps:
        # Both map the file, and each is charged about half of the pages they both touched.
        assert m["Rss"] > 0
        assert m["Pss"] < m["Rss"] * 0.75, maps


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_damaged_file_is_read_again_from_redis(
    fresh_redis: redis.Redis, code: list[Chunk], tmp_path: Path, damage: str
) -> None:
    live = indexed(fresh_redis, code)
    cache = SegmentCache(tmp_path)
    BM25Index(RedisCorpus(fresh_redis), cache).current(REPO)
    victim = files(tmp_path)[0]
    raw = victim.read_bytes()
    victim.write_bytes(
        {"truncated": raw[: len(raw) // 3], "garbage": os.urandom(len(raw)), "empty": b""}[damage]
    )

    counting = CountingCorpus(fresh_redis)
    assert_same_as_bm25okapi(BM25Index(counting, cache).current(REPO), live)

    assert len(counting.loaded) == 1  # only the damaged one
    assert read(victim).nbytes == len(raw)  # and it is whole again


def test_an_unwritable_cache_falls_back_to_memory(
    fresh_redis: redis.Redis, code: list[Chunk], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    live = indexed(fresh_redis, code)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")

    with caplog.at_level(logging.WARNING):
        view = BM25Index(RedisCorpus(fresh_redis), SegmentCache(blocker / "cache")).current(REPO)

    assert_same_as_bm25okapi(view, live)
    assert "segment_cache.unwritable" in caplog.text


def test_an_index_written_before_digests_is_cached_by_its_content(
    fresh_redis: redis.Redis, code: list[Chunk], tmp_path: Path
) -> None:
    live = indexed(fresh_redis, code)
    sids = [s.sid for s in RedisCorpus(fresh_redis).state(REPO).segments]
    stored = [fresh_redis.hget(keys.corpus_segment(REPO, s), "digest") for s in sids]
    for sid in sids:
        fresh_redis.hdel(keys.corpus_segment(REPO, sid), "digest")

    assert_same_as_bm25okapi(
        BM25Index(RedisCorpus(fresh_redis), SegmentCache(tmp_path)).current(REPO), live
    )
    assert sorted(p.name.removesuffix(SUFFIX) for p in files(tmp_path)) == sorted(
        d.decode() for d in stored if d is not None
    )


def test_past_the_size_bound_the_least_recently_opened_files_go_first(
    fresh_redis: redis.Redis, code: list[Chunk], tmp_path: Path
) -> None:
    now = time.time()
    aged = []
    for i, age in enumerate((3 * 3600, 2 * 3600, 60)):  # opened 3 h, 2 h and a minute ago
        p = tmp_path / f"{str(i) * 32}{SUFFIX}"
        p.write_bytes(b"x" * 1000)
        os.utime(p, (now - age, now - age))
        aged.append(p)
    indexed(fresh_redis, code)

    BM25Index(RedisCorpus(fresh_redis), SegmentCache(tmp_path, max_bytes=1500)).current(REPO)

    assert [p.exists() for p in aged] == [False, False, True]  # the recent one stays
    assert len(files(tmp_path)) == 3  # it and the index's two segments, just written


def test_idle_files_and_killed_writers_temporaries_are_pruned(
    fresh_redis: redis.Redis, code: list[Chunk], tmp_path: Path
) -> None:
    old = time.time() - 10 * 86_400
    stale, stray = tmp_path / f"{'a' * 32}{SUFFIX}", tmp_path / f".{'b' * 32}.1.x.tmp"
    for p in (stale, stray):
        p.write_bytes(b"x")
        os.utime(p, (old, old))
    indexed(fresh_redis, code)

    BM25Index(RedisCorpus(fresh_redis), SegmentCache(tmp_path)).current(REPO)

    assert not stale.exists() and not stray.exists()
    assert len(files(tmp_path)) == 2  # the index's two segments, just written


KILLED_MIDWAY = """
import os, signal, redis
from pathlib import Path
from shared.index import segment_cache, segment_files
from shared.index.corpus import RedisCorpus
from shared.retrieve.keywords import BM25Index

def write_half_then_die(arrays, out):
    segment_files.write(dict(list(arrays.items())[: len(arrays) // 2]), out)
    out.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # kill -9 with half a file written

segment_cache.write = write_half_then_die
cache = segment_cache.SegmentCache(Path({cache!r}))
BM25Index(RedisCorpus(redis.Redis.from_url({url!r})), cache).current({repo!r})
"""


def test_a_reader_killed_while_writing_a_file_leaves_none_half_written(
    fresh_redis: redis.Redis, private_redis_url: str, code: list[Chunk], tmp_path: Path
) -> None:
    """kill -9 of a process halfway through writing a cache file: the next reader finds no
    half file under the segment's name, and reads, writes and scores the segment whole."""
    live = indexed(fresh_redis, code)
    script = KILLED_MIDWAY.format(cache=str(tmp_path), url=private_redis_url, repo=REPO)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=False)
    assert proc.returncode == -9
    assert files(tmp_path) == [] and any(tmp_path.glob(".*.tmp"))  # only its temporary

    counting = CountingCorpus(fresh_redis)
    view = BM25Index(counting, SegmentCache(tmp_path)).current(REPO)

    assert_same_as_bm25okapi(view, live)
    assert len(files(tmp_path)) == 2
    for f in files(tmp_path):
        read(f)  # whole
