"""Unit tests of code history: git output parsing, the bounds, and the quiet degradations
(not a checkout, no git, a shallow clone, a renamed file), on real git repositories."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared.analyze.history import Recorded, cited_history, same_code, suspects, version_note
from shared.core.domain import CitedHistory, CodeVersion, Commit, ErrorEvent, Investigation
from shared.devtools.sample_history import BUG_SUBJECT, HANDLERS, PRICING, build_sample_repo
from shared.index.git import UNCOMMITTED, parse_blame, parse_hunks
from shared.index.history import HistoryBounds, collect_history, latest_hunks
from shared.notify.message import build_message, history_text
from tests.conftest import SAMPLE_SERVICE

SHA_A = "a" * 40
SHA_B = "b" * 40


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_sample_repo(SAMPLE_SERVICE, tmp_path_factory.mktemp("h") / "sample").path


def git(repo: Path, *args: str, date: str = "2026-10-01T00:00:00+00:00") -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | {
        "GIT_AUTHOR_NAME": "T",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "T",
        "GIT_COMMITTER_EMAIL": "t@x",
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
    }
    return subprocess.run(
        ["git", "-c", "commit.gpgsign=false", *args],
        cwd=repo, env=env, check=True, capture_output=True, text=True, timeout=30,
    ).stdout.strip()  # fmt: skip


def test_blame_leaves_out_boundary_and_uncommitted_lines() -> None:
    text = "\n".join(
        [
            f"{SHA_A} 1 1 2",
            "author Ann",
            "author-time 100",
            "summary first",
            "boundary",
            "filename a.py",
            f"{SHA_B} 5 3 1",
            "author Bob <b@x>",
            "author-time 200",
            "summary second",
            "filename old/a.py",
            f"{UNCOMMITTED} 4 4 1",
            "author Not Committed Yet",
            "author-time 300",
            "summary Version of a.py from a.py",
            "filename a.py",
        ]
    )
    got = parse_blame(text)
    assert list(got.commits) == [SHA_B]
    assert [(r.start, r.end, r.orig_start) for r in got.ranges] == [(3, 3, 5)]
    assert got.paths == {SHA_B: "old/a.py"}  # the name in that commit (a rename)


def test_hunks_are_split_and_clipped() -> None:
    diff = "diff --git a/x b/x\n@@ -1,2 +1,3 @@\n a\n+b\n c\n@@ -10 +11 @@ f()\n-" + "x" * 500
    first, second = parse_hunks(SHA_A, diff, max_chars=200)
    assert (first.start, first.end) == (1, 3) and "+b" in first.text
    assert (second.start, second.end) == (11, 11)
    assert len(second.text) <= 200 and second.text.endswith("[clipped]")


def test_sample_history_blames_the_planted_line_on_its_commit(sample: Path) -> None:
    record = collect_history(sample, [PRICING, HANDLERS], HistoryBounds())
    assert record.version.commit and record.version.tags == ["1.4.1"]
    files = {f.path: f for f in record.files}
    pricing = files[PRICING]
    # The function's range was last touched by a later docstring edit; the trace's line 91
    # by the commit that planted the bug, which comes first.
    assert suspects(pricing, 49, 103, [], limit=3)[0].subject.startswith("Shipping")
    assert suspects(pricing, 49, 103, [91], limit=3)[0].subject == BUG_SUBJECT
    [hunk] = latest_hunks(pricing, 91, 91)
    assert "+            line.unit_discount_cents = round_half_up(share / line.quantity)" in (
        hunk.text
    )
    assert not any(h.text.startswith("@@ -0,0 ") for h in pricing.hunks)  # no creation dumps


def test_bounds_limit_commits_and_age(sample: Path) -> None:
    one = collect_history(sample, [PRICING], HistoryBounds(max_commits=1)).files[0]
    assert [c.subject for c in one.commits] == [one.commits[0].subject]
    assert {r.sha for r in one.ranges} == {one.commits[0].sha}
    # HEAD is 2026-11-20; 30 days back leaves out the bug (October) and the first commit.
    recent = collect_history(sample, [PRICING, HANDLERS], HistoryBounds(since_days=30))
    subjects = {c.subject for f in recent.files for c in f.commits}
    assert BUG_SUBJECT not in subjects and len(subjects) == 2
    assert collect_history(sample, [PRICING], HistoryBounds(max_files=0)).files == []


def test_a_tree_that_is_not_a_checkout_has_no_history(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    record = collect_history(tmp_path, ["a.py"], HistoryBounds())
    assert record.version.commit is None and record.version.reason == "not a git checkout"
    assert record.files == []


def test_without_git_installed_history_is_unavailable(
    sample: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    record = collect_history(sample, [PRICING], HistoryBounds())
    assert record.version.reason == "git is not installed" and not record.files


def test_a_shallow_clone_does_not_blame_everything_on_its_graft(
    sample: Path, tmp_path: Path
) -> None:
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{sample}", "shallow")
    record = collect_history(tmp_path / "shallow", [PRICING], HistoryBounds())
    assert record.version.shallow and record.version.commit
    assert record.files == []  # the one commit stands for all the cut-off history


def test_blame_follows_a_renamed_file(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "old.py").write_text("".join(f"line_{i} = {i}\n" for i in range(30)))
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "add old", date="2026-09-01T00:00:00+00:00")
    git(tmp_path, "mv", "old.py", "new.py")
    git(tmp_path, "commit", "-q", "-m", "rename", date="2026-09-02T00:00:00+00:00")
    record = collect_history(tmp_path, ["new.py"], HistoryBounds())
    [file] = record.files
    assert [c.subject for c in file.commits] == ["add old"]


def test_release_against_indexed_commit() -> None:
    v = CodeVersion(commit="c8264cc78818aabfcd4c3afcdab43fe734275de0", tags=["v1.4.1"])
    assert same_code("1.4.1", v) and same_code("shop-api@c8264cc", v)
    assert not same_code("1.4.2", v)
    event = ErrorEvent(service="s", repo="r", attributes={"release": "1.4.2"})
    assert version_note(event, v) == "code indexed at c8264cc, error from release 1.4.2"
    assert version_note(event.model_copy(update={"attributes": {}}), v) is None
    assert version_note(event, CodeVersion(reason="not a git checkout")) is None


def test_commit_text_is_escaped_in_the_message() -> None:
    commit = Commit(sha=SHA_A, author="<!channel> Eve", time=0, subject="fix <@U123> & more")
    inv = Investigation(
        event=ErrorEvent(service="s", repo="r"),
        history=[CitedHistory(location="a.py:1-2", commits=[commit])],
        code_version=CodeVersion(commit=SHA_A),
    )
    text = history_text(inv, now=datetime(2026, 1, 1, tzinfo=UTC))
    assert "&lt;!channel&gt; Eve" in text and "&lt;@U123&gt; &amp; more" in text
    assert "56 years ago" in text
    fallback, blocks = build_message(inv)
    assert "<!channel>" not in fallback and "<!channel>" not in str(blocks)


def test_cited_ranges_without_recorded_history_are_left_out() -> None:
    assert cited_history(["a.py:1-5", "not a location"], Recorded(None, {}), str, {}) == []
