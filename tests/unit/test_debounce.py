"""Unit tests of the watcher's debounce, path selection and inotify-limit message (no stack)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from producers.watcher import Debouncer, Stat, Watcher, watch_limit_error
from shared.core.pipeline import sender_app
from shared.core.settings import Settings


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def stats() -> dict[str, Stat]:
    return {}


def debouncer(clock: Clock, stats: dict[str, Stat], **kw: float) -> Debouncer:
    return Debouncer(0.5, stat=lambda p: stats.get(p), clock=clock, **kw)


def test_a_path_is_released_only_after_it_has_been_quiet(
    clock: Clock, stats: dict[str, Stat]
) -> None:
    d = debouncer(clock, stats)
    stats["a.py"] = (10, 1)
    d.touch("a.py")
    clock.now += 0.3
    assert d.take() == []
    clock.now += 0.25
    assert d.take() == ["a.py"]
    assert len(d) == 0 and d.take() == []


def test_a_new_event_restarts_the_quiet_period(clock: Clock, stats: dict[str, Stat]) -> None:
    d = debouncer(clock, stats)
    d.touch("a.py")
    clock.now += 0.4
    d.touch("a.py")
    clock.now += 0.4
    assert d.take() == []
    clock.now += 0.1
    assert d.take() == ["a.py"]


def test_a_file_still_growing_without_events_waits_for_a_stable_size(
    clock: Clock, stats: dict[str, Stat]
) -> None:
    d = debouncer(clock, stats)
    stats["big.py"] = (100, 1)
    d.touch("big.py")
    clock.now += 0.6
    stats["big.py"] = (5000, 2)  # written on by a process whose events were dropped
    assert d.take() == []
    clock.now += 0.6
    assert d.take() == ["big.py"]


def test_a_burst_is_released_as_one_batch(clock: Clock, stats: dict[str, Stat]) -> None:
    d = debouncer(clock, stats)
    for i in range(500):  # a checkout writing 500 files over a second
        d.touch(f"f{i}.py")
        clock.now += 0.002
    clock.now += 0.1
    assert d.take() == []  # the first files are ready, the last ones still settling
    clock.now += 0.5
    got = d.take()
    assert len(got) == 500 and got == sorted(got)


def test_ready_paths_are_not_held_forever_by_a_stream_of_other_changes(
    clock: Clock, stats: dict[str, Stat]
) -> None:
    d = debouncer(clock, stats, max_hold=2.0)
    d.touch("settled.py")
    released: list[str] = []
    for _ in range(40):  # a log file touched every 0.1 s
        clock.now += 0.1
        d.touch("busy.py")
        released += d.take()
    assert released == ["settled.py"]


def test_a_file_that_never_settles_is_sent_after_max_wait(
    clock: Clock, stats: dict[str, Stat]
) -> None:
    d = debouncer(clock, stats, max_wait=3.0)
    got: list[str] = []
    for n in range(50):
        clock.now += 0.1
        stats["app.log.py"] = (n, n)
        d.touch("app.log.py")
        got += d.take()
    assert got == ["app.log.py"]


def test_a_deleted_path_is_released_like_any_other(clock: Clock, stats: dict[str, Stat]) -> None:
    d = debouncer(clock, stats)
    d.touch("gone.py")  # stat None: not a file any more
    clock.now += 0.5
    assert d.take() == ["gone.py"]


def test_the_inotify_watch_limit_error_names_the_sysctl_and_polling(tmp_path: Path) -> None:
    err = watch_limit_error(OSError(errno.ENOSPC, "inotify watch limit reached"), tmp_path)
    assert err is not None
    assert "fs.inotify.max_user_watches" in str(err) and "--polling" in str(err)
    instances = watch_limit_error(OSError(errno.EMFILE, "inotify instance limit reached"), tmp_path)
    assert instances is not None and "fs.inotify.max_user_instances" in str(instances)
    assert watch_limit_error(OSError(errno.EACCES, "denied"), tmp_path) is None


def test_selection_honours_gitignore_include_exclude_and_languages(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("build/\n*.gen.py\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/.gitignore").write_text("secret.py\n")
    settings = Settings(redis_url="redis://127.0.0.1:1/0")
    app = sender_app(settings)  # never connects: nothing is sent here
    w = Watcher(
        app,
        tmp_path,
        "r",
        settings=settings,
        include=["src/**", "pkg/**"],
        exclude=["**/vendor/**"],
    )
    assert w.selected("src/app.py") and w.selected("src/deep/er/mod.ts")
    assert not w.selected("other/app.py")  # not included
    assert not w.selected("src/vendor/lib.py")  # excluded
    assert not w.selected("src/notes.bin")  # no language
    assert not w.selected("src/build/out.py") and not w.selected("src/x.gen.py")  # .gitignore
    assert not w.selected("pkg/secret.py") and w.selected("pkg/public.py")
    assert not w.selected("src/.git/hooks/pre-commit.py") and not w.selected("src/.x.py.swp")
    app.close()
