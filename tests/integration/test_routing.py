"""Routing and owners on a real Redis and the Slack simulator: services reach their own
channels, paced and claimed per channel; CODEOWNERS owners are mentioned, never injected; a
bad routing file stops a worker at start."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from shared.core import keys
from shared.core.domain import Candidate, ChunkHit, ErrorEvent, GroupRef, Investigation
from shared.devtools.simulators.slack import SlackSimulator
from shared.groups.store import GroupStore
from shared.index.owners import OwnersStore
from shared.notify.counts import update_counts
from shared.notify.courier import Courier, DeliveryPolicy, Paced
from shared.notify.delivery import deliver
from shared.notify.notifiers import ConsoleNotifier, SlackBotNotifier
from shared.notify.policy import claim_id
from shared.notify.replies import post_reply
from shared.notify.routing import Routing, parse_routing

pytestmark = pytest.mark.integration

DEFAULT = "C0DEFAULT"
BILLING = "C0BILLING"
ROUTING = f"""
[owners]
"@acme/web" = "S0WEBTEAM"

[[rule]]
services = ["billing*"]
channel = "{BILLING}"
owners = ["S0BILLING"]
"""
ROOT = Path(__file__).resolve().parents[2]


class Yard:
    """A real courier with routing and CODEOWNERS, replies recorded with their channel."""

    def __init__(
        self, r: redis.Redis, slack: SlackSimulator, tmp: Path, routing: Routing, pace_s: float
    ) -> None:
        self.replies: list[tuple[str, str, str, str | None]] = []
        self.groups = GroupStore(r, window_s=1800)
        self.courier = Courier(
            r=r,
            groups=self.groups,
            notifier=SlackBotNotifier("xoxb-test", DEFAULT, base_url=slack.url + "/api/"),
            console=ConsoleNotifier(tmp / "notifications.jsonl", stream=io.StringIO()),
            policy=DeliveryPolicy(channel=DEFAULT, pace_s=pace_s),
            reply_later=lambda ts, text, key, channel: self.replies.append(
                (ts, text, key, channel)
            ),
            routing=routing,
            owners=OwnersStore(r),
        )

    def investigation(self, service: str, fp: str, path: str = "shop/pricing.py") -> Investigation:
        event = ErrorEvent(service=service, repo="shop", message="KeyError", stacktrace="")
        occ = self.groups.record(fp, service, event.id)
        hit = ChunkHit(chunk_id=f"{path}#1", path=path, start_line=1, end_line=9, text="x",
                       score=1.0)  # fmt: skip
        return Investigation(
            event=event,
            group=GroupRef(fingerprint=fp, window_start=occ.window_start),
            candidates=[Candidate(path=path, score=1.0, chunks=[hit])],
        )


def routing_from(text: str, tmp: Path) -> Routing:
    return parse_routing(text, tmp / "routing.toml")


def top_level(slack: SlackSimulator, channel: str) -> list[dict[str, Any]]:
    return [m for m in slack.messages_in(channel) if not m.get("thread_ts")]


def test_two_services_reach_two_channels_paced_and_updated_per_channel(
    fresh_redis: redis.Redis, slack: SlackSimulator, tmp_path: Path
) -> None:
    yard = Yard(fresh_redis, slack, tmp_path, routing_from(ROUTING, tmp_path), pace_s=30.0)
    shop = deliver(yard.investigation("shop-api", "fp-shop"), yard.courier)
    # A pace of 30 s per channel: the other channel's slot is its own, so this posts at once.
    billing = deliver(yard.investigation("billing-worker", "fp-bill"), yard.courier)
    assert [m["ts"] for m in top_level(slack, DEFAULT)] == [shop.ts]
    assert [m["ts"] for m in top_level(slack, BILLING)] == [billing.ts]
    assert billing.channel == BILLING
    assert "<!subteam^S0BILLING>" in top_level(slack, BILLING)[0]["text"]  # the rule's owners
    # A crash after Slack took the routed post: the claim is found in the routed channel.
    bill_inv = yard.investigation("billing-worker", "fp-bill")
    fresh_redis.set(keys.notified(claim_id(bill_inv)), f"posting:{yard.groups.now_ms()}")
    assert deliver(bill_inv, yard.courier).ts == billing.ts
    assert len(top_level(slack, BILLING)) == 1
    with pytest.raises(Paced):  # ...while the routed channel's own slot is taken
        deliver(yard.investigation("billing-api", "fp-bill-2"), yard.courier)
    # The count update and its thread reply go to the channel the message is in.
    fresh_redis.delete(keys.slack_pace(BILLING))
    yard.groups.record("fp-bill", "billing-worker", "again")
    assert update_counts("fp-bill", yard.courier) == 3
    [updated] = top_level(slack, BILLING)
    assert "*3* times" in json.dumps(updated["blocks"])
    reply = [r for r in yard.replies if r[0] == billing.ts]
    assert reply and {r[3] for r in reply} == {BILLING}
    fresh_redis.delete(keys.slack_pace(BILLING))
    ts, text, key, channel = reply[-1]
    assert post_reply(ts, text, key, yard.courier, channel)
    assert [m["thread_ts"] for m in slack.messages_in(BILLING) if m.get("thread_ts")] == [ts]
    assert not [m for m in slack.messages_in(DEFAULT) if m.get("thread_ts")]


def test_the_codeowners_owner_of_the_top_file_is_mentioned_and_a_hostile_entry_pings_nobody(
    fresh_redis: redis.Redis, slack: SlackSimulator, tmp_path: Path
) -> None:
    OwnersStore(fresh_redis).put(
        "shop",
        "# owners\n*  @acme/web\n/shop/ U0ALICE @<!channel> <!here> @acme/unmapped\n"
        "/shop/other.py @nobody\n",
    )
    yard = Yard(fresh_redis, slack, tmp_path, routing_from(ROUTING, tmp_path), pace_s=0.0)
    deliver(yard.investigation("shop-api", "fp-1"), yard.courier)
    deliver(yard.investigation("shop-api", "fp-2", path="web/app.py"), yard.courier)
    owned, web = top_level(slack, DEFAULT)
    shown = json.dumps(owned["blocks"]) + owned["text"]
    assert "<@U0ALICE>" in owned["text"] and "<@U0ALICE>" in shown
    assert "&lt;!channel&gt;" in shown and "&lt;!here&gt;" in shown
    assert "@acme/unmapped" in shown  # unmapped: shown as text
    for sent in (owned, web):
        every = json.dumps(sent["blocks"]) + sent["text"]
        assert "<!channel>" not in every and "<!here>" not in every
    assert "<!subteam^S0WEBTEAM>" in web["text"]  # "@acme/web" mapped by [owners]
    assert "@nobody" not in shown  # the last matching pattern wins, not a later file's


BAD_RULE = """[[rule]]
services = ["billing*"]
channel = "C0BILLING"

[[rule]]
services = ["shop*"]
chanel = "C0SHOP"
"""


def test_a_bad_routing_file_stops_a_worker_at_start_naming_the_rule_and_line(
    tmp_path: Path, private_redis_url: str
) -> None:
    bad = tmp_path / "routing.toml"
    bad.write_text(BAD_RULE)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TRACEHOUND_REDIS_URL": private_redis_url,
        "TRACEHOUND_ROUTING": str(bad),
        "TRACEHOUND_SLACK_BOT_TOKEN": "xoxb-test",
        "TRACEHOUND_SLACK_CHANNEL": DEFAULT,
    }
    cmd = [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "-Q", "notify",
           "--pool", "solo", "--loglevel", "INFO"]  # fmt: skip
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert f"{bad}:5: rule 2: unknown key(s) ['chanel']" in out
