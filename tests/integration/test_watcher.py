"""The source watcher against the real stack: watchdog, Redis, Chroma and Celery workers."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from producers.watcher import Watcher, run
from shared.core.settings import Settings
from shared.devtools.sample_history import build_sample_repo
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.index.corpus import RedisCorpus
from shared.index.history import HistoryStore
from shared.index.owners import OwnersStore, owners_of
from shared.index.reindex import index_repository
from shared.index.vectors import ChromaVectorIndex
from shared.retrieve.keywords import BM25Index
from tests.conftest import SAMPLE_SERVICE

pytestmark = pytest.mark.integration

QUIET = 0.3
SERVICES = [
    "shopapp/services/order_service.py",
    "shopapp/services/pricing.py",
    "shopapp/services/inventory.py",
]


def new_repo() -> str:
    return f"watch-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def corpus(redis_client: redis.Redis) -> RedisCorpus:
    return RedisCorpus(redis_client)


@pytest.fixture
def chroma(settings: Settings) -> ChromaVectorIndex:
    return ChromaVectorIndex(url=settings.chroma_url)


def eventually(check: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


@contextmanager
def watching(
    sender: Any, root: Path, repo: str, settings: Settings, corpus: RedisCorpus, **kw: Any
) -> Iterator[Watcher]:
    w = Watcher(sender, root, repo, settings=settings, corpus=corpus, quiet=QUIET, **kw)
    w.start()
    try:
        eventually(w.idle, "the start-up reconcile to be indexed")
        yield w
    finally:
        w.stop()


def text_of(corpus: RedisCorpus, repo: str, path: str) -> str:
    return "\n".join(corpus.texts(repo, corpus.file_ids(repo, path)))


def paths_in_chroma(chroma: ChromaVectorIndex, repo: str) -> set[str]:
    got = chroma._collection(repo).get(include=["metadatas"])
    return {m["path"] for m in got["metadatas"]}


def settled(w: Watcher, check: Callable[[], object]) -> Callable[[], bool]:
    """The expected state, reached with nothing left in flight (so nothing can undo it)."""
    return lambda: bool(check()) and w.idle()


def test_start_reconciles_the_tree_and_drops_files_deleted_while_down(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    corpus: RedisCorpus,
    chroma: ChromaVectorIndex,
) -> None:
    repo = new_repo()
    index_repository(sender, sample_copy, repo, max_bytes=settings.max_file_bytes, timeout=120)
    gone = "shopapp/notifications/email.py"
    assert gone in corpus.paths(repo)
    (sample_copy / gone).unlink()

    with watching(sender, sample_copy, repo, settings, corpus) as w:
        eventually(settled(w, lambda: gone not in corpus.paths(repo)), "email.py removed")
        assert w.stats.index_tasks == 0  # nothing else changed: nothing re-sent
        assert w.stats.remove_tasks == 1

    assert gone not in paths_in_chroma(chroma, repo)
    assert set(SERVICES) <= corpus.paths(repo)
    assert "build/generated.py" not in corpus.paths(repo)  # .gitignore'd


def test_a_fresh_repo_is_indexed_on_start(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    corpus: RedisCorpus,
) -> None:
    repo = new_repo()
    with watching(sender, sample_copy, repo, settings, corpus) as w:
        assert set(SERVICES) | {"shopapp/app.py", "README.md"} <= corpus.paths(repo)
        assert w.stats.index_tasks >= 1
        assert not {p for p in corpus.paths(repo) if p.startswith("build/") or p == ".env"}


@pytest.mark.parametrize("temp_name", [".config.py.tmp", "config.py.swp", "config.py~"])
def test_an_editor_save_reindexes_the_target_and_never_the_temp_file(
    temp_name: str,
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    corpus: RedisCorpus,
) -> None:
    repo = new_repo()
    target = sample_copy / "shopapp/config.py"
    with watching(sender, sample_copy, repo, settings, corpus) as w:
        temp = target.parent / temp_name
        temp.write_text(target.read_text() + "\nREFUND_WINDOW_DAYS = 30\n")
        os.replace(temp, target)

        eventually(
            settled(w, lambda: "REFUND_WINDOW_DAYS" in text_of(corpus, repo, "shopapp/config.py")),
            "config.py reindexed with the saved text",
        )
    assert not {p for p in corpus.paths(repo) if p.endswith((".tmp", ".swp", "~"))}
    assert {d[1] for d in BM25Index(corpus).current(repo).documents()} <= corpus.paths(repo)


def test_a_python_named_temp_file_renamed_at_once_is_never_indexed(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    corpus: RedisCorpus,
) -> None:
    repo = new_repo()
    target = sample_copy / "shopapp/models.py"
    with watching(sender, sample_copy, repo, settings, corpus) as w:
        temp = target.parent / ".#models.tmp.py"  # indexable by its name alone
        temp.write_text(target.read_text() + "\nMARKER_MODELS = 1\n")
        os.replace(temp, target)
        eventually(
            settled(w, lambda: "MARKER_MODELS" in text_of(corpus, repo, "shopapp/models.py")),
            "models.py reindexed",
        )
        assert w.stats.remove_tasks == 0  # the temp path was never known, so nothing to remove
    assert "shopapp/.#models.tmp.py" not in corpus.paths(repo)


def test_a_deleted_file_leaves_both_indexes(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    corpus: RedisCorpus,
    chroma: ChromaVectorIndex,
) -> None:
    repo = new_repo()
    gone = "shopapp/utils/money.py"
    with watching(sender, sample_copy, repo, settings, corpus) as w:
        assert gone in paths_in_chroma(chroma, repo)
        (sample_copy / gone).unlink()
        eventually(settled(w, lambda: gone not in corpus.paths(repo)), "money.py removed")
    assert gone not in {d[1] for d in BM25Index(corpus).current(repo).documents()}
    assert gone not in paths_in_chroma(chroma, repo)


def test_a_directory_rename_moves_every_file_below_it(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    corpus: RedisCorpus,
    chroma: ChromaVectorIndex,
) -> None:
    repo = new_repo()
    moved = {p.replace("shopapp/services/", "shopapp/svc/") for p in SERVICES}
    with watching(sender, sample_copy, repo, settings, corpus) as w:
        os.rename(sample_copy / "shopapp/services", sample_copy / "shopapp/svc")

        def done() -> bool:
            paths = corpus.paths(repo)
            return moved <= paths and not {p for p in paths if p.startswith("shopapp/services/")}

        eventually(settled(w, done), "services/ → svc/ in the index")
    in_chroma = paths_in_chroma(chroma, repo)
    assert moved <= in_chroma and not {p for p in in_chroma if "shopapp/services/" in p}


def test_a_checkout_sized_burst_arrives_in_a_few_batches(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    corpus: RedisCorpus,
    ollama_sim: OllamaSimulator,
) -> None:
    repo = new_repo()
    with watching(sender, sample_copy, repo, settings, corpus) as w:
        ollama_sim.clear_log()
        before = w.stats.index_tasks
        gen = sample_copy / "shopapp/generated_pages"
        gen.mkdir()
        for i in range(300):
            (gen / f"page_{i:03d}.py").write_text(f"def page_{i}():\n    return {i}\n")

        wanted = {f"shopapp/generated_pages/page_{i:03d}.py" for i in range(300)}
        eventually(settled(w, lambda: wanted <= corpus.paths(repo)), "300 files indexed")

        assert w.stats.flushes <= 2  # typically 1
        assert w.stats.index_tasks - before <= 8  # 64 files per index_files message: 5 for 300
    embeds = ollama_sim.requests_to("/api/embed")
    assert len(embeds) <= 20  # one request per embed batch (32), not one per file or event
    assert sum(len(r["body"]["input"]) for r in embeds) == 300


def test_gitignored_and_binary_files_are_never_indexed(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    corpus: RedisCorpus,
) -> None:
    repo = new_repo()
    with watching(sender, sample_copy, repo, settings, corpus) as w:
        (sample_copy / "build/new_output.py").write_text("GENERATED = True\n")
        (sample_copy / "shopapp/blob.py").write_bytes(b"x = 1\n\x00\x01\x02binary")
        (sample_copy / "var").mkdir()
        (sample_copy / "var/cache.py").write_text("CACHE = {}\n")
        # generated code and a Sphinx build's output are no code anybody fixes
        (sample_copy / "shopapp/_speedups.c").write_text("/* Generated by Cython 3.0.2 */\n")
        sphinx = sample_copy / "docs/_build/html"
        sphinx.mkdir(parents=True)
        (sphinx / ".buildinfo").write_text("# Sphinx build info version 1\n")
        (sphinx / "_modules.py").write_text("def rendered():\n    pass\n")
        (sample_copy / "shopapp/sentinel.py").write_text("SENTINEL = 1\n")
        eventually(settled(w, lambda: "shopapp/sentinel.py" in corpus.paths(repo)), "sentinel")
        assert w.stats.skipped >= 2  # the binary and the Cython file, logged as watch.skip
    paths = corpus.paths(repo)
    ignored = {"build/new_output.py", "shopapp/blob.py", "var/cache.py", "shopapp/_speedups.c"}
    assert not (ignored | {"docs/_build/html/_modules.py"}) & paths


def test_a_gitignore_change_drops_newly_ignored_files(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    corpus: RedisCorpus,
) -> None:
    repo = new_repo()
    with watching(sender, sample_copy, repo, settings, corpus) as w:
        assert "shopapp/locale/legacy_fr.py" in corpus.paths(repo)
        with (sample_copy / ".gitignore").open("a") as f:
            f.write("shopapp/locale/\n")
        eventually(
            settled(w, lambda: not {p for p in corpus.paths(repo) if "/locale/" in p}),
            "locale/ dropped after the .gitignore change",
        )


def test_include_and_exclude_globs_limit_what_is_indexed(
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    corpus: RedisCorpus,
) -> None:
    repo = new_repo()
    with watching(
        sender,
        sample_copy,
        repo,
        settings,
        corpus,
        include=["shopapp/**/*.py"],
        exclude=["**/locale/**"],
    ) as w:
        (sample_copy / "scripts/new_tool.py").write_text("TOOL = 1\n")
        (sample_copy / "shopapp/new_mod.py").write_text("MOD = 1\n")
        eventually(settled(w, lambda: "shopapp/new_mod.py" in corpus.paths(repo)), "new_mod")
    paths = corpus.paths(repo)
    assert paths and all(p.startswith("shopapp/") and p.endswith(".py") for p in paths)
    assert not {p for p in paths if "/locale/" in p}


@pytest.mark.parametrize("polling", [False, True], ids=["inotify", "polling"])
def test_symlink_loops_do_not_hang_and_polling_sees_changes(
    polling: bool,
    sender: Any,
    settings: Settings,
    sample_copy: Path,
    corpus: RedisCorpus,
) -> None:
    repo = new_repo()
    os.symlink("..", sample_copy / "shopapp/loop")  # shopapp/loop/shopapp/loop/...
    os.symlink(sample_copy / "shopapp/app.py", sample_copy / "shopapp/app_link.py")
    started = time.monotonic()
    with watching(
        sender, sample_copy, repo, settings, corpus, polling=polling, poll_interval=0.2
    ) as w:
        assert time.monotonic() - started < 30
        target = sample_copy / "shopapp/app.py"
        target.write_text(target.read_text() + "\nWATCH_MODE = 'changed'\n")
        eventually(
            settled(w, lambda: "WATCH_MODE" in text_of(corpus, repo, "shopapp/app.py")),
            "app.py reindexed",
        )
        shutil.rmtree(sample_copy / "shopapp/repositories")
        eventually(
            settled(w, lambda: not {p for p in corpus.paths(repo) if "repositories/" in p}),
            "repositories/ removed",
        )
    assert not {p for p in corpus.paths(repo) if "loop/" in p or p.endswith("app_link.py")}


def test_run_blocks_until_stopped_and_indexes_meanwhile(
    settings: Settings, sample_copy: Path, corpus: RedisCorpus
) -> None:
    repo = new_repo()
    stop = threading.Event()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            run(settings, sample_copy, repo, quiet=QUIET, stop=stop)
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    try:
        eventually(lambda: set(SERVICES) <= corpus.paths(repo), "start-up reconcile")
        (sample_copy / "shopapp/late.py").write_text("LATE = 1\n")
        eventually(lambda: "shopapp/late.py" in corpus.paths(repo), "a change while running")
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive() and errors == []


def test_a_commit_that_changes_no_file_is_recorded_as_the_code_version(
    sender: Any,
    settings: Settings,
    corpus: RedisCorpus,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    """History is read where the checkout is: on start, and again at a rescan once HEAD moved
    (an empty commit, a merge: no file event says so)."""
    sample = build_sample_repo(SAMPLE_SERVICE, tmp_path / "sample").path
    repo = new_repo()
    store = HistoryStore(redis_client)

    def head() -> str:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=sample, capture_output=True)
        return done.stdout.decode().strip()

    def recorded() -> str | None:
        version = store.version(repo)
        return version.commit if version else None

    with watching(sender, sample, repo, settings, corpus) as w:
        first = head()
        eventually(lambda: recorded() == first, "HEAD recorded on start")
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | {
            "GIT_AUTHOR_NAME": "Dee Park",
            "GIT_AUTHOR_EMAIL": "dee@shop.example",
            "GIT_COMMITTER_NAME": "Dee Park",
            "GIT_COMMITTER_EMAIL": "dee@shop.example",
        }
        subprocess.run(
            ["git", "commit", "-q", "--allow-empty", "-m", "Release 1.4.2"],
            cwd=sample,
            env=env,
            check=True,
        )
        moved = head()
        assert moved != first
        w.reconcile()  # what the periodic rescan does
        eventually(lambda: recorded() == moved, "the new HEAD recorded after a rescan")


def test_watch_records_codeowners_on_start_and_again_once_it_changed(
    sender: Any, settings: Settings, sample_copy: Path, corpus: RedisCorpus,
    redis_client: redis.Redis,
) -> None:  # fmt: skip
    (sample_copy / "CODEOWNERS").write_text("* @acme/first\n")
    repo = new_repo()
    store = OwnersStore(redis_client)
    with watching(sender, sample_copy, repo, settings, corpus) as w:
        eventually(lambda: owners_of(store.rules(repo), "a.py") == ("@acme/first",), "on start")
        (sample_copy / "CODEOWNERS").write_text("* @acme/second\n")
        w.reconcile()  # what the periodic rescan does
        eventually(lambda: owners_of(store.rules(repo), "a.py") == ("@acme/second",), "changed")
