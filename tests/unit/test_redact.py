"""Unit tests of secret redaction: one case per rule, its look-alikes, idempotence and speed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from shared.core.domain import ErrorEvent
from shared.intake.redact import DEFAULT_RULES, Redactor

DATA = Path(__file__).resolve().parents[1] / "data"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM_BODY = (
    "MIIEowIBAAKCAQEAvJ8ppbm0zs3X8rMkl2Vd1f0cNJb6lK+t6bNq0t0F4o1E9cXq\n"
    "3nQm8yS0Xk8bq2v7YxPz1Yc9hJm2Q0vZ1k3l9+5x0wq8r2k1YQIDAQABAoIBAGq=\n"
)

# (rule, text, expected): each rule on realistic lines as they show up in logs and traces.
POSITIVE = [
    (
        "aws_access_key_id",
        "botocore: using key AKIAIOSFODNN7EXAMPLE for s3",
        "botocore: using key [REDACTED:aws_access_key_id] for s3",
    ),
    (
        "aws_access_key_id",
        "sts creds ASIAY34FZKBOKMUTVV7A expired",
        "sts creds [REDACTED:aws_access_key_id] expired",
    ),
    (
        "aws_secret_access_key",
        f"aws_secret_access_key = {AWS_SECRET}",
        "aws_secret_access_key = [REDACTED:aws_secret_access_key]",
    ),
    (
        "aws_secret_access_key",
        f'{{"SecretAccessKey": "{AWS_SECRET}", "Expiration": "2026-11-30"}}',
        '{"SecretAccessKey": "[REDACTED:aws_secret_access_key]", "Expiration": "2026-11-30"}',
    ),
    (
        "bearer_token",
        "Authorization: Bearer 8f14e45fceea167a5a36dedd4bea2543",
        "Authorization: Bearer [REDACTED:bearer_token]",
    ),
    (
        "bearer_token",
        "retrying with bearer abc.def-ghi_jkl after 401",
        "retrying with bearer [REDACTED:bearer_token] after 401",
    ),
    (
        "bearer_token",
        f"{{'Authorization': 'Bearer {JWT}'}}",
        "{'Authorization': 'Bearer [REDACTED:bearer_token]'}",
    ),
    ("basic_auth", "curl -H 'Basic dXNlcjpwYXNzd29yZA=='", "curl -H 'Basic [REDACTED:basic_auth]'"),
    (
        "authorization",
        "headers={'authorization': 'Basic dXNlcjpwYXNz'}",
        "headers={'authorization': 'Basic [REDACTED:authorization]'}",
    ),
    (
        "authorization",
        "Authorization: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b",
        "Authorization: Token [REDACTED:authorization]",
    ),
    (
        "api_key",
        "GET /v1/rates?api_key=3a9f1c77e0&currency=EUR",
        "GET /v1/rates?api_key=[REDACTED:api_key]&currency=EUR",
    ),
    ("api_key", "apikey: 5f0c7ad0a1b2", "apikey: [REDACTED:api_key]"),
    ("api_key", "X-Api-Key: Zm9vYmFyYmF6cXV4", "X-Api-Key: [REDACTED:api_key]"),
    ("api_key", 'config {"apiKey": "live-abc"}', 'config {"apiKey": "[REDACTED:api_key]"}'),
    (
        "openai_key",
        "openai.AuthenticationError: Incorrect API key provided: sk-proj-Ab3dEf6hIj9kLm2nOp5q",
        "openai.AuthenticationError: Incorrect API key provided: [REDACTED:openai_key]",
    ),
    (
        "slack_token",
        "slack_sdk: invalid_auth for xoxb-2416892347-1234567890123-AbCdEfGhIjKlMnOp",
        "slack_sdk: invalid_auth for [REDACTED:slack_token]",
    ),
    ("slack_token", "token xoxp-1234567890-abcdef", "token [REDACTED:slack_token]"),
    (
        "slack_webhook",
        "POST https://hooks.slack.com/services/T0AAA1111/B0BBB2222/XXXXXXXXXXXXXXXXXXXXXXXX -> 404",
        "POST [REDACTED:slack_webhook] -> 404",
    ),
    (
        "github_token",
        "remote: Invalid username or password. ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "remote: Invalid username or password. [REDACTED:github_token]",
    ),
    ("github_token", "GH=gho_16C7e42F292c6912E7710c838347Ae178B4a", "GH=[REDACTED:github_token]"),
    (
        "github_token",
        "using github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "using [REDACTED:github_token]",
    ),
    (
        "gitlab_token",
        "PRIVATE-TOKEN glpat-xxXXxx11yyYY22zzZZ00",
        "PRIVATE-TOKEN [REDACTED:gitlab_token]",
    ),
    (
        "stripe_key",
        "stripe.error.AuthenticationError: Invalid API Key: sk_live_4eC39HqLyjWDarjtT1zdp7dc",
        "stripe.error.AuthenticationError: Invalid API Key: [REDACTED:stripe_key]",
    ),
    ("stripe_key", "rk_live_51H8abcDEF0123456789xyz", "[REDACTED:stripe_key]"),
    (
        "google_api_key",
        "maps: key=AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY denied",
        "maps: key=[REDACTED:google_api_key] denied",
    ),
    (
        "url_password",
        "OperationalError: could not connect to postgresql://shop:pa55w0rd@db.internal:5432/shop",
        "OperationalError: could not connect to "
        "postgresql://shop:[REDACTED:url_password]@db.internal:5432/shop",
    ),
    (
        "url_password",
        "redis://:s3cr3t@cache:6379/0",
        "redis://:[REDACTED:url_password]@cache:6379/0",
    ),
    (
        "password",
        "login failed password=hunter2 user=bob",
        "login failed password=[REDACTED:password] user=bob",
    ),
    ("password", "DB_PASSWORD: s3cret!", "DB_PASSWORD: [REDACTED:password]"),
    ("password", "passwd: hunter2", "passwd: [REDACTED:password]"),
    (
        "password",
        'payload {"password": "hunter2", "user": "bob"}',
        'payload {"password": "[REDACTED:password]", "user": "bob"}',
    ),
    ("password", "PGPASSWORD=abc ./migrate", "PGPASSWORD=[REDACTED:password] ./migrate"),
    (
        "password",
        r'{"msg": "retry with password=\"hunter2\""}',
        r'{"msg": "retry with password=\"[REDACTED:password]\""}',
    ),
    (
        "password",
        "Server=db;User Id=sa;Password=Xy9z;",
        "Server=db;User Id=sa;Password=[REDACTED:password];",
    ),
    ("secret", "client_secret=8Qx_2fA", "client_secret=[REDACTED:secret]"),
    ("secret", "SECRET_KEY = 'django-insecure-abc'", "SECRET_KEY = '[REDACTED:secret]'"),
    ("secret", "clientSecret=abcd1234", "clientSecret=[REDACTED:secret]"),
    (
        "token",
        "GET /cb?access_token=ya29.a0Af&state=x",
        "GET /cb?access_token=[REDACTED:token]&state=x",
    ),
    ("token", "X-Auth-Token: 7f9a2c", "X-Auth-Token: [REDACTED:token]"),
    ("token", "refresh_token: 'r1-abc'", "refresh_token: '[REDACTED:token]'"),
    ("jwt", f"session {JWT} rejected", "session [REDACTED:jwt] rejected"),
    (
        "private_key",
        f"key = '''-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}-----END RSA PRIVATE KEY-----'''\nok",
        # redaction keeps the lines: the block's three line breaks follow its marker
        "key = '''[REDACTED:private_key]\n\n\n'''\nok",
    ),
    (
        "private_key",
        f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}…[4000 bytes trimmed by tracehound]…\n"
        '  File "/srv/app/x.py", line 3, in f',
        "[REDACTED:private_key]\n\n\n…[4000 bytes trimmed by tracehound]…\n"
        '  File "/srv/app/x.py", line 3, in f',
    ),
    (
        "private_key",
        '{"key": "-----BEGIN EC PRIVATE KEY-----\\nMHcCAQEEIB\\n-----END EC PRIVATE KEY-----\\n"}',
        '{"key": "[REDACTED:private_key]\\n"}',
    ),
    (
        "private_key",
        "PEM=-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAA BG5vbmUAAAAE",
        "PEM=[REDACTED:private_key]",
    ),
    (
        "key_body",  # a key's body kept without its BEGIN line
        f"signing:\n  key: |\n{''.join('    ' + line + chr(10) for line in PEM_BODY.split())}"
        f"    {PEM_BODY.split()[0]}\nport: 8080",
        "signing:\n  key: |\n[REDACTED:key_body]\n\n\nport: 8080",
    ),
    ("email", "user alice.smith+shop@example.co.uk not found", "user [REDACTED:email] not found"),
    ("email", "smtp: 550 <bob@mail.example.com>", "smtp: 550 <[REDACTED:email]>"),
]

# Text that must come out unchanged: code, ids and prose that look a little like secrets.
NEGATIVE = [
    "commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 (HEAD -> main)",  # git sha
    "request_id=123e4567-e89b-12d3-a456-426614174000",  # UUID
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "AKIAIOSFODNN7EXAMPL is too short, akiaiosfodnn7example is lower case",
    "Bearer authentication failed: no token",
    "Basic auth is disabled",
    "authorization failed for user bob",
    "Authorization: invalid credentials",
    "invalid token: expired signature",
    "password: must be at least twelve characters",
    "conn = psycopg2.connect(host=h, password=settings.DB_PASSWORD)",
    'token = request.headers.get("X-Token")',
    "password=None, token=null",
    "password=${DB_PASSWORD} secret={{ vault_secret }} token=%(token)s",
    "max_tokens=100 token_count=3 tokenizer=bpe password_reset_url=/reset",
    "pip install scikit-learn; sk-learn-compat",
    "git@github.com:shop/orders.git",
    "https://alice@github.com/shop/orders",
    "https://api.example.com:8443/v1/orders?id=5",
    "at com.shop.orders.OrderService$Repo@5b6f7412.close(OrderService.java:19)",
    "@app.route('/orders') and npm @babel/core@7.24.0",
    "eyJ alone, and eyJhbGciOiJIUzI1NiJ9 as one segment",
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
    "xoxo-hugs and ghp_short and glpat-short",
    "ValueError: invalid literal for int() with base 10: 'abc'",
]


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return Redactor()


@pytest.mark.parametrize(("rule", "text", "expected"), POSITIVE)
def test_rule_redacts_its_secret_and_keeps_the_context(
    redactor: Redactor, rule: str, text: str, expected: str
) -> None:
    assert f"[REDACTED:{rule}]" in expected
    assert redactor.redact(text) == expected


@pytest.mark.parametrize("text", NEGATIVE)
def test_look_alikes_and_ordinary_code_are_left_alone(redactor: Redactor, text: str) -> None:
    assert redactor.redact(text) == text


def test_every_rule_has_a_positive_case() -> None:
    assert {rule.name for rule in DEFAULT_RULES} <= {rule for rule, _, _ in POSITIVE}


@pytest.mark.parametrize(("rule", "text", "expected"), POSITIVE)
def test_redacting_twice_is_redacting_once(
    redactor: Redactor, rule: str, text: str, expected: str
) -> None:
    assert redactor.redact(redactor.redact(text)) == expected


def test_each_rule_alone_catches_its_case() -> None:
    for rule in DEFAULT_RULES:
        alone = Redactor([rule])
        cases = [(text, expected) for name, text, expected in POSITIVE if name == rule.name]
        assert any(f"[REDACTED:{rule.name}]" in alone.redact(text) for text, _ in cases), rule


def _fixtures() -> list[Path]:
    return [
        DATA / "sample-error.txt",
        DATA / "sample-event.json",
        *sorted(DATA.glob("traces/*.log")),
    ]


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.name)
def test_real_traces_and_logs_come_out_unchanged(redactor: Redactor, path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert redactor.redact(text) == text


PLANTED = [
    ("password=hunter2", "password=[REDACTED:password]"),
    (
        "Authorization: Bearer 8f14e45fceea167a5a36dedd4bea2543",
        "Authorization: Bearer [REDACTED:bearer_token]",
    ),
    ("AKIAIOSFODNN7EXAMPLE", "[REDACTED:aws_access_key_id]"),
    ("ops@example.com", "[REDACTED:email]"),
]


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.name)
def test_only_planted_secrets_change_in_real_traces(redactor: Redactor, path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    planted = list(lines)
    expected = list(lines)
    for k, (secret, marker) in enumerate(PLANTED):
        at = (k + 1) * len(lines) // (len(PLANTED) + 1)
        planted.insert(at + k, f"2026-11-30 10:00:0{k} ERROR [app] context {secret} end")
        expected.insert(at + k, f"2026-11-30 10:00:0{k} ERROR [app] context {marker} end")
    assert redactor.redact("\n".join(planted)) == "\n".join(expected)


def _five_mb(unit: str) -> str:
    return (unit * (5_000_000 // len(unit) + 1))[:5_000_000]


def test_a_5mb_trace_full_of_secret_shapes_is_redacted_in_linear_time() -> None:
    # tracehound's hand-written rules stay linear on multi-megabyte text; the maintained
    # provider set (detect-secrets' regexes) only ever sees bounded text (next test).
    redactor = Redactor(DEFAULT_RULES)
    traces = "".join(p.read_text(encoding="utf-8") for p in _fixtures())
    secrets = " ".join(text for _, text, _ in POSITIVE)
    text = _five_mb(traces) + "\n" + secrets
    start = time.thread_time()
    out = redactor.redact(text)
    # CPU seconds of this thread (other processes do not count): about 1 s here; quadratic
    # backtracking on 5 MB would take hours. Speed itself is benchmarks/redaction.py's job.
    assert time.thread_time() - start < 5.0
    assert "hunter2" not in out and "AKIAIOSFODNN7EXAMPLE" not in out and JWT not in out


@pytest.mark.parametrize(
    "unit",
    [
        "a",
        "aB3+/",
        "a@",
        "-----BEGIN PRIVATE KEY-----\n",
        "eyJaaaaa.",
        'password="',
        "x://u:",
        "Bearer aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa ",
        "Authorization: ",
        "token: ",
    ],
    ids=lambda u: repr(u[:12]),
)
def test_pathological_5mb_inputs_stay_linear(unit: str) -> None:
    text = _five_mb(unit)
    start = time.thread_time()
    Redactor(DEFAULT_RULES).redact(text)
    assert time.thread_time() - start < 5.0  # CPU time; linear, not a speed target


@pytest.mark.parametrize(
    "unit",
    [
        *("a", "aB3+/", "key=", 'password="', "token: ", "1.2.3.", "AKC", "x" * 31 + "-us1 "),
        # the rules that read a name beside a value, or the structure around it
        *("session=", "{A:", "[REDACTED:x], ", "s.", "q~", "name: x\n  value: ", "--password "),
        *("-u x:", "X-Y: z\n", "token ", "DB_PASS=", "<a>", "://u:", "&key=", "AUTH\r\n"),
    ],
    ids=lambda u: repr(u[:12]),
)
def test_every_rule_on_an_event_at_its_size_limit_stays_fast(redactor: Redactor, unit: str) -> None:
    """Events reach redaction bounded: a 64 kB trace, 8 kB messages and attribute strings, 6 kB
    chunks (shared/intake/events.py, shared/index/chunking.py)."""
    text = (unit * (64_000 // len(unit) + 1))[:64_000]
    start = time.thread_time()
    redactor.redact(text)
    assert time.thread_time() - start < 0.5


def test_disabled_redactor_returns_text_and_event_as_they_are() -> None:
    redactor = Redactor(enabled=False)
    event = ErrorEvent(service="s", repo="r", message="password=hunter2")
    assert redactor.redact("password=hunter2") == "password=hunter2"
    assert redactor.redact_event(event) is event


def test_from_settings_drops_disabled_rules_and_adds_custom_patterns() -> None:
    redactor = Redactor.from_settings(True, [r"ORD-\d{6}"], ["email"])
    assert redactor.redact("ops@example.com ORD-123456 password=x") == (
        "ops@example.com [REDACTED:custom] password=[REDACTED:password]"
    )
    assert not Redactor.from_settings(False, [], []).enabled


def test_from_settings_rejects_unknown_rules_and_bad_patterns() -> None:
    with pytest.raises(ValueError, match=r"unknown redaction rule.*emails"):
        Redactor.from_settings(True, [], ["emails"])
    with pytest.raises(ValueError, match="invalid redaction pattern"):
        Redactor.from_settings(True, ["(unclosed"], [])


def test_redact_event_covers_message_trace_and_nested_attributes() -> None:
    event = ErrorEvent(
        service="shop-api",
        repo="shop",
        message="login failed for bob@example.com",
        exception_type="AuthError",
        stacktrace='Traceback:\n  File "/app/x.py", line 1, in f\nAuthError: token=abc123',
        attributes={
            "password": "hunter2",
            "headers": {"Authorization": "Bearer x", "Accept": "application/json"},
            "urls": ["postgres://u:pw@db/x", 3],
            "dbPassword": "s3",
            "count": 2,
            "note": "api_key=zz9 sent",
            "max_tokens": "100",
        },
    )
    out = Redactor().redact_event(event)
    assert out.message == "login failed for [REDACTED:email]"
    assert out.stacktrace.endswith("AuthError: token=[REDACTED:token]")
    assert out.exception_type == "AuthError"
    assert out.attributes == {
        "password": "[REDACTED:password]",
        "headers": {"Authorization": "[REDACTED:authorization]", "Accept": "application/json"},
        "urls": ["postgres://u:[REDACTED:url_password]@db/x", 3],
        "dbPassword": "[REDACTED:password]",
        "count": 2,
        "note": "api_key=[REDACTED:api_key] sent",
        "max_tokens": "100",
    }
    assert event.attributes["password"] == "hunter2"  # the input is not mutated
    assert Redactor().redact_event(out) == out


# -------------------------------------------------------------- whole files, kept lines


def _key_block(lines: int) -> str:
    import base64
    import random

    rng = random.Random(3)
    body = [base64.b64encode(rng.randbytes(48)).decode() for _ in range(lines)]
    return "\n".join(["-----BEGIN RSA PRIVATE KEY-----", *body, "-----END RSA PRIVATE KEY-----"])


def test_a_key_block_across_a_chunk_boundary_is_redacted_whole_with_the_file(
    redactor: Redactor,
) -> None:
    """Chunk by chunk, the chunk holding the END line lost the BEGIN line that the key rule
    needed, and 20 of 26 key lines went out raw. Redacting the file before chunking takes the
    block whole, and keeps every line where it was."""
    from shared.index.chunking import chunk_file

    block = _key_block(24)
    config = (
        "\n".join(f"setting_{i}: {i}" for i in range(50))
        + f"\nsigning_key: |\n{block}\n"
        + "\n".join(f"after_{i}: {i}" for i in range(30))
    )
    secret_lines = block.splitlines()[1:-1]
    redacted = redactor.redact(config)
    chunks = chunk_file("r", "conf/app.yaml", redacted)
    assert len(chunks) >= 2
    assert not any(line in c.text for c in chunks for line in secret_lines)
    assert redacted.count("\n") == config.count("\n")
    original = config.splitlines()
    for chunk in chunks:  # every unredacted line is where it was
        for n, line in enumerate(chunk.text.splitlines(), start=chunk.start_line):
            if "REDACTED" not in line and line:
                assert original[n - 1] == line


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("smtp_pass: s3cr3t-Value", "smtp_pass: "),
        ("DB_PASS=hunter2x", "DB_PASS="),
        ("dbPass = 'x9y8z7'", "dbPass = '"),
        ("pass: ab12", "pass: "),
    ],
)
def test_a_pass_key_is_a_password_key(redactor: Redactor, text: str, kept: str) -> None:
    out = redactor.redact(text)
    assert out.startswith(kept) and "[REDACTED:password]" in out


@pytest.mark.parametrize(
    "text", ["bypass=cache_hit", "compass: north", "passport_number=ok", "tests pass: all green"]
)
def test_words_that_end_or_start_with_pass_are_not_keys(redactor: Redactor, text: str) -> None:
    assert redactor.redact(text) == text


_TRIGGERS = sorted({t for rule in Redactor().rules for t in rule.triggers})


@hyp_settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(_TRIGGERS),
            st.sampled_from(_TRIGGERS).map(str.upper),  # a trigger holds in any case
            st.text(max_size=12),
        ),
        max_size=12,
    ).map("".join)
)
def test_the_rules_a_text_needs_are_those_whose_triggers_it_holds(text: str) -> None:
    """The one-pass trigger search (Aho-Corasick) finds what a substring test per trigger
    finds, overlapping triggers ("api", "api_key", "key") and case included."""
    redactor = Redactor()
    lowered = text.lower()
    expected = {
        i
        for i, rule in enumerate(redactor.rules)
        if not rule.triggers or any(t in lowered for t in rule.triggers)
    }
    assert redactor.needed_rules(text) == expected
