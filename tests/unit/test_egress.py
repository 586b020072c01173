"""Unit tests of the egress list: every host a configuration makes tracehound contact."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
from pydantic import Field

from shared.core.egress import NOT_OUTBOUND, OUTBOUND, Destination, destinations
from shared.core.settings import Settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test sets: nothing from the shell that runs the suite."""
    for name in list(os.environ):
        if name.upper().startswith("TRACEHOUND_"):
            monkeypatch.delenv(name)


# A setting whose name or default says "address" must be classified (shared/core/egress.py).
_ADDRESS_NAME = re.compile(
    r"(^|_)(url|uri|urls|host|hosts|dsn|endpoint|webhook|upstream|address|server|origin|"
    r"origins|proxy)(_|$)"
)


def unclassified(model: type[Settings]) -> set[str]:
    """Fields that look like an address (by name, or a default holding ``://``) but are in
    neither OUTBOUND nor NOT_OUTBOUND."""
    found = set()
    for name, field in model.model_fields.items():
        if _ADDRESS_NAME.search(name) or "://" in str(field.default):
            found.add(name)
    return found - OUTBOUND - set(NOT_OUTBOUND)


def addresses(settings: Settings, **kwargs: Any) -> list[str]:
    return [d.address for d in destinations(settings, **kwargs)]


def test_every_setting_that_names_an_address_is_classified() -> None:
    assert unclassified(Settings) == set()
    assert (OUTBOUND | set(NOT_OUTBOUND)) <= set(Settings.model_fields)  # none stale


def test_a_new_address_setting_left_unclassified_is_caught() -> None:
    class WithMore(Settings):
        relay_dsn: str | None = Field(None, description="A Sentry relay's DSN.")
        proxy_for_models: str = Field("http://proxy:3128", description="A proxy.")

    assert unclassified(WithMore) == {"relay_dsn", "proxy_for_models"}


def test_a_fresh_install_contacts_only_its_loopback_services() -> None:
    listed = destinations(Settings())
    assert [(d.role, d.address) for d in listed] == [
        ("redis", "redis://127.0.0.1:6379"),
        ("chroma", "http://127.0.0.1:8000"),
        ("ollama", "http://127.0.0.1:11434"),
    ]
    # Slack's default base URL is not contacted while no token is set.
    assert not any("slack" in d.address for d in listed)


# Each OUTBOUND setting on a host of its own, with what it needs to be used.
CASES: dict[str, dict[str, Any]] = {
    "redis_url": {"redis_url": "redis://cache.internal:6390/2"},
    "chroma_url": {"chroma_url": "https://vectors.internal"},
    "pg_url": {"vector_store": "pgvector", "pg_url": "postgresql://th@pg.internal/th"},
    "ollama_url": {"ollama_url": "http://mac-mini.lan:11434"},
    "embed_url": {"embed_url": "http://embed.lan:11434"},
    "llm_url": {"llm_url": "http://llm.lan:11434"},
    "rerank_url": {"rerank_backend": "tei", "rerank_url": "http://rerank.lan:8080"},
    "slack_base_url": {
        "slack_bot_token": "xoxb-1",
        "slack_channel": "C1",
        "slack_base_url": "https://slack.gov.example/api/",
    },
    "slack_webhook_url": {"slack_webhook_url": "https://hooks.slack.com/services/T/B/x"},
    "sentry_upstream": {"sentry_upstream": "https://0123abcd@o1.ingest.sentry.io/4507"},
}
EXPECTED = {
    "redis_url": "redis://cache.internal:6390",
    "chroma_url": "https://vectors.internal:443",
    "pg_url": "postgresql://pg.internal:5432",
    "ollama_url": "http://mac-mini.lan:11434",
    "embed_url": "http://embed.lan:11434",
    "llm_url": "http://llm.lan:11434",
    "rerank_url": "http://rerank.lan:8080",
    "slack_base_url": "https://slack.gov.example:443",
    "slack_webhook_url": "https://hooks.slack.com:443",
    "sentry_upstream": "https://o1.ingest.sentry.io:443",
}


@pytest.mark.parametrize("name", sorted(OUTBOUND - {"routing"}))
def test_every_outbound_setting_puts_its_host_on_the_list(name: str) -> None:
    listed = destinations(Settings(**CASES[name]))
    assert EXPECTED[name] in [d.address for d in listed]
    assert f"TRACEHOUND_{name.upper()}" in [d.setting for d in listed]


def test_the_routing_files_webhooks_are_listed() -> None:
    hooks = ["https://hooks.slack.com/services/T0/B0/abc", "https://chat.example:8443/hook"]
    listed = destinations(Settings(), webhooks=hooks)
    routed = [d.address for d in listed if d.setting == "TRACEHOUND_ROUTING"]
    assert routed == ["https://hooks.slack.com:443", "https://chat.example:8443"]


def test_the_vector_store_in_use_is_listed_and_the_other_is_not() -> None:
    pg = Settings(vector_store="pgvector", pg_url="postgresql://u@db:5433/th")
    assert "postgresql://db:5433" in addresses(pg)
    assert not any(a.startswith("http://127.0.0.1:8000") for a in addresses(pg))
    assert not any(a.startswith("postgresql") for a in addresses(Settings(pg_url="postgresql://x")))


@pytest.mark.parametrize(
    ("dsn", "expected"),
    [
        (
            "postgresql://u:pw@[::1]:5433,db2/th",
            ["postgresql://[::1]:5433", "postgresql://db2:5432"],
        ),
        ("host=a,b port=6001,6002 dbname=th", ["postgresql://a:6001", "postgresql://b:6002"]),
        ("host=/run/postgresql dbname=th", ["unix:/run/postgresql"]),
        ("postgresql:///th?host=%2Ftmp", ["unix:/tmp"]),
    ],
    ids=["url-hosts", "conninfo-hosts", "conninfo-socket", "url-socket"],
)
def test_postgres_hosts_are_read_from_a_url_or_a_conninfo(dsn: str, expected: list[str]) -> None:
    listed = destinations(Settings(vector_store="pgvector", pg_url=dsn))
    assert [d.address for d in listed if d.role == "postgres"] == expected


def test_socket_mode_lists_slack_and_its_websocket_hosts() -> None:
    s = Settings(slack_app_token="xapp-1")
    assert addresses(s)[-2:] == ["https://slack.com:443", "wss://*.slack.com"]


def test_no_credential_or_webhook_path_reaches_the_list() -> None:
    s = Settings(
        redis_url="rediss://:hunter2@cache:6380/0",
        vector_store="pgvector",
        pg_url="postgresql://th:pgsecret@db/th",
        slack_webhook_url="https://hooks.slack.com/services/T0/B0/hooksecret",
        rerank_backend="cohere",
        rerank_url="https://user:rerankpw@api.example/v1",
    )
    text = "\n".join(d.line() for d in destinations(s, webhooks=["https://h.example/routed-x"]))
    for secret in ("hunter2", "pgsecret", "hooksecret", "rerankpw", "routed-x", "services"):
        assert secret not in text


def test_a_line_reads_back_as_role_address_setting_purpose() -> None:
    d = Destination("ollama", "http", "::1", 11434, "TRACEHOUND_OLLAMA_URL", "model host: x y")
    assert d.line().split(None, 3) == [
        "ollama",
        "http://[::1]:11434",
        "TRACEHOUND_OLLAMA_URL",
        "model host: x y",
    ]
