"""Which deploy a new group came after, and what its message says of it (scripted histories)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from producers.ingest.deploy_routes import DeployError, parse_deploy, parse_range, parse_time
from shared.core.domain import (
    CitedHistory,
    Commit,
    Deploy,
    DeployNote,
    ErrorEvent,
    Investigation,
)
from shared.groups.deploys import match, note, same_version, suspect_commits
from shared.notify.message import build_message, deploy_text

T0 = 1_796_000_000.0  # a fixed "now" (2026-11-30)
BUG = "b" * 40
OTHER = "c" * 40


def deploy(version: str, at: float, **fields: object) -> Deploy:
    return Deploy.model_validate({"service": "shop-api", "version": version, "time": at, **fields})


def newest_first(*deploys: Deploy) -> list[Deploy]:
    return sorted(deploys, key=lambda d: d.time, reverse=True)


# Each case: the deploys around the first sighting, the error's release and environment, and
# the version the message must name (None: no deploy line).
HISTORIES = [
    pytest.param([deploy("1.0", T0 - 600)], "", "", "1.0", id="the-only-one"),
    pytest.param(
        [deploy("1.1", T0 - 60), deploy("1.0", T0 - 3600)], "", "", "1.1", id="the-newest"
    ),
    pytest.param(
        [deploy("1.1", T0 - 60), deploy("1.0", T0 - 3600)], "shop@1.0", "", "1.0",
        id="the-release-the-error-names-not-the-newest",
    ),
    pytest.param([deploy("1.1", T0 - 60)], "v1.1", "", "1.1", id="v-prefix"),
    pytest.param(
        [deploy("1.1", T0 - 60)], "0.9", "", None, id="a-release-no-deploy-brought-blames-none"
    ),
    pytest.param(
        [deploy("2.0", T0 - 60, environment="staging"), deploy("1.9", T0 - 900,
         environment="production")], "", "production", "1.9", id="its-environment-only",
    ),
    pytest.param(
        [deploy("2.0", T0 - 60)], "", "production", "2.0", id="a-deploy-without-environment-fits"
    ),
    pytest.param(
        [deploy("2.0", T0 - 60, environment="staging")], "", "", "2.0",
        id="an-error-without-environment-fits",
    ),
    pytest.param(
        [deploy("3.0", T0 - 100, source="release"), deploy("3.0", T0 - 300)], "3.0", "", "3.0",
        id="announced-before-seen",
    ),
    pytest.param([], "", "", None, id="none-in-the-window"),
]  # fmt: skip


@pytest.mark.parametrize(("deploys", "release", "environment", "named"), HISTORIES)
def test_the_deploy_named_is_the_right_one(
    deploys: list[Deploy], release: str, environment: str, named: str | None
) -> None:
    found = match(newest_first(*deploys), release, environment)
    assert (found.version if found else None) == named
    if found is not None and release:
        assert found.source == "announced" or not any(
            d.source == "announced" and same_version(d.version, release) for d in deploys
        )


def test_suspects_in_and_out_of_the_range() -> None:
    with_list = deploy("1.0", T0 - 60, commit_from="a" * 40, commit_to=OTHER, commits=[BUG, OTHER])
    assert note(with_list, T0, [BUG]).suspects_in == (BUG,)
    short = note(with_list, T0, [BUG[:7]])  # a suspect known by its short sha
    assert short.suspects_in == (BUG[:7],)
    older = deploy("1.1", T0 - 60, commit_from=BUG, commit_to=OTHER, commits=[OTHER])
    assert note(older, T0, [BUG]).suspects_out == (BUG,)
    # No commit list: nothing is claimed either way, except the deploy's own last commit.
    bare = deploy("1.2", T0 - 60, commit_from="a" * 40, commit_to=OTHER)
    assert note(bare, T0, [BUG]) == DeployNote(deploy=bare, after_s=60.0)
    assert note(bare, T0, [OTHER]).suspects_in == (OTHER,)


def test_suspects_are_the_first_commit_of_each_cited_range() -> None:
    def commit(sha: str) -> Commit:
        return Commit(sha=sha, author="a", time=0, subject="s")

    inv = Investigation(
        event=ErrorEvent(service="s", repo="r"),
        history=[
            CitedHistory(location="a.py:1-2", commits=[commit(BUG), commit(OTHER)]),
            CitedHistory(location="b.py:3-4", commits=[commit(BUG)]),
        ],
    )
    assert suspect_commits(inv) == [BUG]


def message_of(found: DeployNote, language: str = "en") -> tuple[str, str]:
    from shared.notify.message import MessageOptions

    inv = Investigation(
        event=ErrorEvent(service="shop-api", repo="r", message="boom"), deploy=found
    )
    text, blocks = build_message(inv, MessageOptions(language=language))
    return text, str(blocks)


def test_the_message_says_how_long_after_which_deploy_and_range() -> None:
    d = deploy("1.4.2", T0 - 12 * 60, environment="production", commit_from="a1b2c3d" + "0" * 33,
               commit_to="d4e5f6a" + "0" * 33, commits=[BUG])  # fmt: skip
    text, blocks = message_of(note(d, T0, [BUG]))
    assert (
        "first seen 12 min after deploy `1.4.2` (`a1b2c3d..d4e5f6a`) to `production`; "
        "suspect commit `bbbbbbb` came with it" in blocks
    )
    assert "Deploy: first seen 12 min after deploy 1.4.2 (a1b2c3d..d4e5f6a)" in text
    _, blocks = message_of(note(d, T0 + 3 * 3600, [OTHER]))
    assert "first seen 3 h 12 min after" in blocks
    assert "the suspect commits (`ccccccc`) are older than it" in blocks


def test_a_release_seen_in_events_says_no_deploy_was_announced() -> None:
    d = deploy("3.1.0", T0 - 30, source="release")
    _, blocks = message_of(note(d, T0, [BUG]))
    assert (
        "first seen under a minute after release `3.1.0` first appeared in events "
        "(no deploy was announced)" in blocks
    )


def test_deploy_fields_cannot_ping_or_break_out_of_their_code_span() -> None:
    d = deploy("<!channel> `x` *bold*", T0 - 60)
    text = deploy_text(Investigation(event=ErrorEvent(service="s", repo="r"),
                                     deploy=note(d, T0, [])))  # fmt: skip
    assert "<!channel>" not in text and "&lt;!channel&gt;" in text
    assert text.count("`") == 2  # the version's own backticks are not code-span ends


def test_the_team_reads_it_in_its_language() -> None:
    d = deploy("1.4.2", T0 - 5 * 60)
    _, blocks = message_of(note(d, T0, []), language="ko")
    assert "배포 `1.4.2` 후 5분 만에 처음 발생" in blocks


def test_a_deploy_body_is_read_and_refused_with_the_reason() -> None:
    got = parse_deploy(
        b'{"service": "shop-api", "version": "1.4.2", "environment": "production",'
        b' "range": "A1B2C3D..d4e5f6a", "commits": ["D4E5F6A"], "time": "2026-12-04T10:00:00Z"}',
        now=T0,
    )
    assert (got.commit_from, got.commit_to, got.commits) == ("a1b2c3d", "d4e5f6a", ("d4e5f6a",))
    assert got.time == 1796378400.0
    assert parse_deploy(b'{"service": "s", "version": "1"}', now=T0).time == T0
    refused = {
        b"{oops": "malformed JSON",
        b"[]": "must be a JSON object",
        b'{"service": "s", "version": "1", "verison": "2"}': "unknown field(s): verison",
        b'{"service": "s"}': "version",
        b'{"service": "", "version": "1"}': "service: Value error, must name something",
        b'{"service": "s", "version": "1", "range": "main..HEAD"}': "commit_from",
        b'{"service": "s", "version": "1", "range": "a1b2c3d...d4e5f6a"}': "not from...to",
        b'{"service": "s", "version": "1", "commits": "a1b2c3d"}': "list of commit shas",
        b'{"service": "s", "version": "1", "commits": ["zz"]}': "not a commit sha",
        b'{"service": "s", "version": "1", "time": "yesterday"}': "ISO 8601",
        b'{"service": "s", "version": "1", "time": -5}': "seconds since the epoch",
        b'{"service": 5, "version": "1"}': "service must be a string",
    }
    for body, reason in refused.items():
        with pytest.raises(DeployError, match=None) as caught:
            parse_deploy(body, now=T0)
        assert reason in str(caught.value), (body, str(caught.value))


def test_ranges_and_times() -> None:
    assert parse_range("") == ("", "")
    assert parse_range("d4e5f6a") == ("", "d4e5f6a")
    assert parse_range(" a..b ") == ("a", "b")
    with pytest.raises(DeployError):
        parse_range("a..")
    assert parse_time(None, T0) == T0
    assert parse_time("1796000000", T0) == 1796000000.0
    assert parse_time("2026-12-04T10:00:00", T0) == 1796378400.0  # no zone: UTC
    with pytest.raises(DeployError):
        parse_time(True, T0)


def test_a_deploy_lists_at_most_a_thousand_commits() -> None:
    with pytest.raises(ValidationError, match="at most 1000 commits"):
        deploy("1", T0, commits=[f"{i:040x}" for i in range(1001)])
