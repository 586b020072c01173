"""The routing file's rules and errors, CODEOWNERS semantics and the mentions built from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.core.settings import Settings
from shared.index.owners import owners_of, parse_codeowners, read_codeowners
from shared.notify.mentions import mention, mentions
from shared.notify.routing import (
    Routing,
    RoutingError,
    load_routing,
    parse_routing,
    routing_for,
)

RULES = """
[[rule]]
services = ["billing*"]
paths = ["billing/**"]
channel = "C0BILLPATH"

[[rule]]
services = ["billing*"]
webhook = "https://hooks.example/T/B/x"
owners = ["S0BILL"]

[[rule]]
paths = ["*.sql"]
channel = "#db"
"""


def channel_of(routing: Routing, service: str, path: str | None) -> str | None:
    route = routing.route(service, path)
    return route.channel if route else None


def test_the_first_matching_rule_wins_and_unrouted_services_get_none() -> None:
    routing = parse_routing(RULES, Path("r.toml"))
    assert channel_of(routing, "billing-api", "billing/pay.py") == "C0BILLPATH"
    second = routing.route("billing-api", "shop/x.py")
    assert second is not None and second.webhook and second.owners == ("S0BILL",)
    assert channel_of(routing, "shop", "db/migrate.sql") == "#db"
    assert routing.route("shop", "shop/x.py") is None
    assert routing.route("shop", None) is None  # a path rule needs a cited file


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            '[[rule]]\nchannel = "C1"\n\n[[rule]]\nservices = ["a"]\n',
            "r.toml:4: rule 2: give exactly one",
        ),
        ('[[rule]]\nchannel = "C1"\nwebhook = "https://x"\n', "r.toml:1: rule 1: give exactly one"),
        (
            '[[rule]]\nchannel = "C1"\nowners = ["@acme/web"]\n',
            "'@acme/web' is not a Slack user id",
        ),
        ('[[rule]]\nwebhook = "http://plain"\n', "webhook must be an https:// URL"),
        ('[[rule]]\nchannel = "C1"\nservices = [1]\n', "services must be a string or a list"),
        ('[[rule]]\nchannel = "my channel"\n', "channel must be a channel id or #name"),
        ("[[rule]\n", "r.toml: not valid TOML"),
        ("[routes]\nx = 1\n", "unknown key(s) ['routes']"),
        ('[owners]\n"@a" = "nobody"\n', "owners['@a']: 'nobody' is not a Slack user id"),
    ],
)
def test_a_bad_routing_file_says_where_and_what(text: str, said: str) -> None:
    with pytest.raises(RoutingError) as caught:
        parse_routing(text, Path("r.toml"))
    assert said in str(caught.value)


def test_yaml_routing_is_read_when_pyyaml_is_installed(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    path = tmp_path / "routing.yaml"
    path.write_text("rule:\n  - services: billing*\n    channel: C0B\n  - services: x\n")
    with pytest.raises(RoutingError, match=r"routing.yaml:4: rule 2: give exactly one"):
        load_routing(path)
    path.write_text("rule:\n  - services: billing*\n    channel: C0B\n")
    assert channel_of(load_routing(path), "billing", None) == "C0B"


def test_a_missing_routing_file_and_a_channel_without_a_bot_token_are_errors(
    tmp_path: Path,
) -> None:
    with pytest.raises(RoutingError, match="cannot be read"):
        load_routing(tmp_path / "nope.toml")
    path = tmp_path / "routing.toml"
    path.write_text('[[rule]]\nservices = ["a"]\nchannel = "C1"\n')
    with pytest.raises(RoutingError, match="needs TRACEHOUND_SLACK_BOT_TOKEN"):
        routing_for(Settings(routing=path, slack_webhook_url="https://hooks.example/x"))
    assert routing_for(Settings()).rules == ()


CODEOWNERS = """
# comment
*           @acme/everyone
/shop/      @acme/shop   # trailing comment
*.sql       U0DBA
/shop/legacy.py
!shop/x.py  @never
"""


def test_codeowners_last_matching_pattern_wins_and_may_name_nobody() -> None:
    rules = parse_codeowners(CODEOWNERS)
    assert owners_of(rules, "shop/pricing.py") == ("@acme/shop",)
    assert owners_of(rules, "shop/db.sql") == ("U0DBA",)
    assert owners_of(rules, "web/app.py") == ("@acme/everyone",)
    assert owners_of(rules, "shop/legacy.py") == ()
    assert owners_of(rules, "shop/x.py") == ("@acme/shop",)  # negation is not CODEOWNERS


def test_codeowners_is_read_where_github_looks_first(tmp_path: Path) -> None:
    assert read_codeowners(tmp_path) is None
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "CODEOWNERS").write_text("* @docs")
    assert read_codeowners(tmp_path) == "* @docs"
    (tmp_path / "CODEOWNERS").write_text("* @root")
    assert read_codeowners(tmp_path) == "* @root"
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "CODEOWNERS").write_text("* @github")
    assert read_codeowners(tmp_path) == "* @github"


@pytest.mark.parametrize(
    ("owner", "shown"),
    [
        ("U0ALICE", "<@U0ALICE>"),
        ("W0ENTERPRISE", "<@W0ENTERPRISE>"),
        ("S0TEAM", "<!subteam^S0TEAM>"),
        ("@acme/web", "<!subteam^S0WEB>"),  # mapped by the routing file's [owners]
        ("@acme/other", "`@acme/other`"),
        ("@<!channel>", "`@&lt;!channel&gt;`"),
        ("<@U0ALICE>", "`&lt;@U0ALICE&gt;`"),
        ("a`b&c", "`aˋb&amp;c`"),
        ("U0ALICE>", "`U0ALICE&gt;`"),
    ],
)
def test_a_mention_is_built_only_from_a_strict_slack_id(owner: str, shown: str) -> None:
    assert mention(owner, {"@acme/web": "S0WEB"}) == shown


def test_a_mapping_to_a_non_id_is_still_plain_text_and_mentions_are_deduplicated() -> None:
    assert mention("@x", {"@x": "<!channel>"}) == "`@x`"
    assert mentions(["U0A", "U0A", "S0B"], {}) == "<@U0A> <!subteam^S0B>"
