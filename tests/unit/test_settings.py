"""Unit tests of the one Settings object: environment prefix, secret masking, validation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from shared.core.settings import Settings, mask_url_password
from shared.retrieve.priors import PathPrior


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test sets: nothing from the shell that runs the suite."""
    for name in list(os.environ):
        if name.upper().startswith("TRACEHOUND_"):
            monkeypatch.delenv(name)


def test_values_are_read_from_tracehound_prefixed_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRACEHOUND_OLLAMA_URL", "http://gpu-box:11434")
    monkeypatch.setenv("TRACEHOUND_TOP_K", "7")
    monkeypatch.setenv("TRACEHOUND_DATA_DIR", "/var/lib/th")
    s = Settings()
    assert s.ollama_url == "http://gpu-box:11434"
    assert s.top_k == 7
    assert s.data_dir == Path("/var/lib/th")


def test_unprefixed_variables_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_URL", "http://elsewhere:1")
    monkeypatch.setenv("TOP_K", "9")
    s = Settings()
    assert s.ollama_url == "http://127.0.0.1:11434"
    assert s.top_k == 5


def test_invalid_number_in_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEHOUND_TOP_K", "lots")
    with pytest.raises(ValidationError, match="top_k"):
        Settings()


def test_notifications_file_defaults_inside_the_data_dir() -> None:
    assert Settings(data_dir=Path("/d")).notifications_path == Path("/d/notifications.jsonl")


# --------------------------------------------------------------------------- masking


def test_masked_hides_the_slack_token_and_the_rerank_api_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRACEHOUND_SLACK_BOT_TOKEN", "xoxb-1234-secret")
    monkeypatch.setenv("TRACEHOUND_SLACK_CHANNEL", "C0ONCALL")
    monkeypatch.setenv("TRACEHOUND_SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T/B/zzz")
    monkeypatch.setenv("TRACEHOUND_RERANK_BACKEND", "cohere")
    monkeypatch.setenv("TRACEHOUND_RERANK_URL", "https://api.example.com")
    monkeypatch.setenv("TRACEHOUND_RERANK_API_KEY", "sk-live-abcdef")
    shown = Settings().masked()
    printed = repr(shown)
    for secret in ("xoxb-1234-secret", "sk-live-abcdef", "zzz"):
        assert secret not in printed
    assert shown["slack_bot_token"] == "********"
    assert shown["rerank_api_key"] == "********"
    assert shown["slack_channel"] == "C0ONCALL"  # not a secret


def test_masked_hides_the_password_in_the_redis_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEHOUND_REDIS_URL", "redis://:secret@host:6379/0")
    shown = Settings().masked()
    assert shown["redis_url"] == "redis://:****@host:6379/0"


def test_masked_values_are_plain_printable_values() -> None:
    shown = Settings(data_dir=Path("/d")).masked()
    assert shown["data_dir"] == "/d"
    assert shown["slack_bot_token"] is None
    assert shown["top_k"] == 5


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:secret@host:6379/0", "redis://:****@host:6379/0"),
        ("redis://user:pw@host/1", "redis://user:****@host/1"),
        ("http://admin:hunter2@chroma:8000", "http://admin:****@chroma:8000"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ],
)
def test_mask_url_password(url: str, masked: str) -> None:
    assert mask_url_password(url) == masked


# ------------------------------------------------------------------------ validation


def test_overlap_not_smaller_than_chunk_lines_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEHOUND_CHUNK_LINES", "20")
    monkeypatch.setenv("TRACEHOUND_CHUNK_OVERLAP", "20")
    with pytest.raises(ValidationError, match="chunk_overlap"):
        Settings()


def test_overlap_just_below_chunk_lines_is_accepted() -> None:
    assert Settings(chunk_lines=20, chunk_overlap=19).chunk_overlap == 19


def test_bot_token_without_a_channel_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEHOUND_SLACK_BOT_TOKEN", "xoxb-1")
    with pytest.raises(ValidationError, match="TRACEHOUND_SLACK_CHANNEL"):
        Settings()


def test_rerank_backend_without_a_url_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEHOUND_RERANK_BACKEND", "llamacpp")
    with pytest.raises(ValidationError, match="TRACEHOUND_RERANK_URL"):
        Settings()


def test_unknown_rerank_backend_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEHOUND_RERANK_BACKEND", "magic")
    monkeypatch.setenv("TRACEHOUND_RERANK_URL", "http://x")
    with pytest.raises(ValidationError, match="rerank_backend"):
        Settings()


def test_defaults_are_valid_without_any_environment() -> None:
    s = Settings()
    assert s.rerank_backend == "none"
    assert s.chunk_overlap < s.chunk_lines


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:p/ss@h:6379/0", "redis://:****@h:6379/0"),
        ("https://tok3n@hooks.example/x", "https://****@hooks.example/x"),
        ("redis://user:pw@h/1", "redis://user:****@h/1"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ],
)
def test_url_credentials_are_masked_even_with_slashes_or_without_a_user(
    url: str, masked: str
) -> None:
    from shared.core.settings import mask_url_password

    assert mask_url_password(url) == masked


def test_an_invalid_setting_never_prints_the_secret_it_rejected() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "TRACEHOUND_SLACK_BOT_TOKEN": "xoxb-very-secret-token-value"}
    env.pop("TRACEHOUND_SLACK_CHANNEL", None)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "tracehound"), "config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "TRACEHOUND_SLACK_CHANNEL" in done.stderr
    assert "secret-token" not in done.stderr + done.stdout


def test_the_path_prior_is_configured_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert PathPrior.from_settings(Settings())("tests/test_app.py") == pytest.approx(0.15)
    monkeypatch.setenv("TRACEHOUND_DEMOTE_PATHS", '["qa/", "*.feature"]')
    monkeypatch.setenv("TRACEHOUND_DEMOTE_WEIGHT", "0.5")
    prior = PathPrior.from_settings(Settings())
    assert prior("qa/login_check.py") == prior("features/pay.feature") == 0.5
    assert prior("tests/test_app.py") == prior("app/orders.py") == 1.0
    monkeypatch.setenv("TRACEHOUND_DEMOTE_WEIGHT", "2")
    with pytest.raises(ValueError, match="demote_weight"):
        Settings()


def test_sentry_keys_are_never_the_ingest_token_and_are_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().sentry_key_values is None  # neither set: any key (loopback only)
    monkeypatch.setenv("TRACEHOUND_INGEST_TOKEN", "tok")
    assert Settings().sentry_key_values == []  # a DSN is often public: no key, no Sentry
    monkeypatch.setenv("TRACEHOUND_SENTRY_KEYS", "k1, k2")
    s = Settings()
    assert s.sentry_key_values == ["k1", "k2"]
    assert s.masked()["sentry_keys"] == ["********", "********"]


@pytest.mark.parametrize(
    "value",
    ["1=shop-api, 2=billing:billing-repo", '{"1": "shop-api", "2": "billing:billing-repo"}'],
)
def test_sentry_projects_as_pairs_or_json(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("TRACEHOUND_SENTRY_PROJECTS", value)
    assert Settings().sentry_projects == {"1": "shop-api", "2": "billing:billing-repo"}


def test_a_sentry_project_without_a_service_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEHOUND_SENTRY_PROJECTS", "1=shop-api,2")
    with pytest.raises(ValidationError, match="is not id=service"):
        Settings()


def test_buttons_need_a_bot_token_and_a_way_to_receive_presses() -> None:
    bot = {"slack_bot_token": "xoxb-1", "slack_channel": "C1"}
    assert not Settings(**bot).slack_actions  # type: ignore[arg-type]
    assert Settings(**bot, slack_app_token="xapp-1").slack_actions  # type: ignore[arg-type]
    assert Settings(**bot, slack_signing_secret="s").slack_actions  # type: ignore[arg-type]
    assert not Settings(slack_app_token="xapp-1").slack_actions  # type: ignore[arg-type]


def test_the_app_token_and_signing_secret_are_masked() -> None:
    shown = Settings(slack_app_token="xapp-1", slack_signing_secret="s").masked()  # type: ignore[arg-type]
    assert shown["slack_app_token"] == shown["slack_signing_secret"] == "********"


def test_up_starts_the_socket_mode_listener_as_a_child() -> None:
    from shared.stack.localstack import slack_listen_spec

    spec = slack_listen_spec({"TRACEHOUND_REDIS_URL": "redis://x"})
    assert spec.argv[1:] == ("slack-listen",) and spec.env["TRACEHOUND_REDIS_URL"] == "redis://x"
