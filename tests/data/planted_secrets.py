"""Fake secrets of real formats, generated at run time (no secret-shaped literal is committed),
for testing that none leaves tracehound: ``planted(seed)`` gives (kind, text, value) triples —
``text`` is how the secret appears in a log line or a source file, ``value`` the part that must
never reach the LLM, the reranker, an embedding or Slack."""

from __future__ import annotations

import base64
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
UPPER_NUM = string.ascii_uppercase + string.digits
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


@dataclass(frozen=True)
class Planted:
    kind: str
    text: str  # as it appears in a log line or source
    value: str  # what must never leave the process


def _luhn_valid(rng: random.Random) -> str:
    digits = [4] + [rng.randrange(10) for _ in range(14)]
    total = 0
    for i, d in enumerate(reversed(digits)):
        d = d * 2 if i % 2 == 0 else d
        total += d - 9 if d > 9 else d
    digits.append((10 - total % 10) % 10)
    return "".join(map(str, digits))


def planted(seed: int = 7) -> list[Planted]:
    rng = random.Random(seed)

    def r(chars: str, n: int) -> str:
        # at least one digit and one letter where the alphabet allows (real keys do)
        digits, letters = set(chars) & set(string.digits), set(chars) & set(string.ascii_letters)
        while True:
            s = "".join(rng.choice(chars) for _ in range(n))
            if (not digits or any(c.isdigit() for c in s)) and (
                not letters or any(c.isalpha() for c in s)
            ):
                return s

    makers: list[Callable[[], Planted]] = [
        lambda: (v := "AKIA" + r(UPPER_NUM, 16), Planted("aws_access_key_id", f"key {v}", v))[1],
        lambda: (
            v := r(B64, 40),
            Planted("aws_secret", f"aws_secret_access_key={v}", v),
        )[1],
        lambda: (v := "ghp_" + r(ALNUM, 36), Planted("github_token", f"token {v}", v))[1],
        lambda: (v := "glpat-" + r(ALNUM, 20), Planted("gitlab_token", f"GL={v}", v))[1],
        lambda: (
            v := f"xoxb-{rng.randrange(10**11)}-{rng.randrange(10**12)}-{r(ALNUM, 24)}",
            Planted("slack_token", f"slack {v}", v),
        )[1],
        lambda: (
            v := f"https://hooks.slack.com/services/T{r(UPPER_NUM, 8)}/B{r(UPPER_NUM, 10)}/"
            + r(ALNUM, 24),
            Planted("slack_webhook", f"posting to {v}", v),
        )[1],
        lambda: (v := "sk_live_" + r(ALNUM, 24), Planted("stripe_key", f"stripe {v}", v))[1],
        lambda: (v := "AIza" + r(URLSAFE, 35), Planted("google_api_key", f"gcp {v}", v))[1],
        lambda: (
            v := "eyJ" + r(URLSAFE, 20) + ".eyJ" + r(URLSAFE, 30) + "." + r(URLSAFE, 43),
            Planted("jwt", f"jwt={v}", v),
        )[1],
        lambda: (v := "sk-proj-" + r(ALNUM, 48), Planted("openai_key", f"openai {v}", v))[1],
        lambda: (
            v := "\n".join(r(B64, 64) for _ in range(4)),
            Planted(
                "private_key",
                f"-----BEGIN RSA PRIVATE KEY-----\n{v}\n-----END RSA PRIVATE KEY-----",
                v.split("\n")[1],
            ),
        )[1],
        lambda: (
            v := r(ALNUM, 14),
            Planted("url_password", f"postgres://app:{v}@db.internal:5432/shop", v),
        )[1],
        lambda: (
            v := r(ALNUM, 32),
            Planted("bearer", f"Authorization: Bearer {v}", v),
        )[1],
        lambda: (
            v := base64.b64encode(f"svc:{r(ALNUM, 16)}".encode()).decode(),
            Planted("basic_auth", f"Authorization: Basic {v}", v),
        )[1],
        lambda: (v := r(ALNUM, 12) + "9!", Planted("password", f"password={v}", v))[1],
        lambda: (
            v := f"{r(string.ascii_lowercase, 8)}.{r(string.ascii_lowercase, 6)}@shopmail.com",
            Planted("email", f"user {v} failed", v),
        )[1],
        lambda: (
            v := r(B64, 86) + "==",
            Planted(
                "azure_account_key",
                f"DefaultEndpointsProtocol=https;AccountName=shop;AccountKey={v};",
                v,
            ),
        )[1],
        lambda: (
            v := r(ALNUM, 43) + "%3D",
            Planted(
                "azure_sas",
                f"https://shop.blob.core.windows.net/c?sv=2022-11-02&ss=b&sig={v}&se=2026",
                v,
            ),
        )[1],
        lambda: (
            v := r(HEX, 40),
            Planted("gcp_private_key_id", f'"private_key_id": "{v}"', v),
        )[1],
        lambda: (v := "AC" + r(HEX, 32), Planted("twilio_sid", f"account {v}", v))[1],
        lambda: (v := "SK" + r(HEX, 32), Planted("twilio_api_key", f"twilio key {v}", v))[1],
        lambda: (v := r(HEX, 32), Planted("twilio_auth_token", f"TWILIO_AUTH_TOKEN={v}", v))[1],
        lambda: (
            v := "SG." + r(URLSAFE, 22) + "." + r(URLSAFE, 43),
            Planted("sendgrid", f"sendgrid {v}", v),
        )[1],
        lambda: (v := "key-" + r(HEX, 32), Planted("mailgun", f"mailgun {v}", v))[1],
        lambda: (v := "npm_" + r(ALNUM, 36), Planted("npm_token", f"npm {v}", v))[1],
        lambda: (
            v := "pypi-AgEIcHlwaS5vcmc" + r(URLSAFE, 80),
            Planted("pypi_token", f"twine {v}", v),
        )[1],
        lambda: (v := "dckr_pat_" + r(URLSAFE, 27), Planted("docker_hub", f"docker {v}", v))[1],
        lambda: (v := "hvs." + r(URLSAFE, 24), Planted("vault_token", f"vault {v}", v))[1],
        lambda: (
            v := f"{r(HEX, 8)}-{r(HEX, 4)}-{r(HEX, 4)}-{r(HEX, 4)}-{r(HEX, 12)}",
            Planted("heroku_api_key", f"HEROKU_API_KEY={v}", v),
        )[1],
        lambda: (v := r(HEX, 40), Planted("datadog_app_key", f"DD_APP_KEY={v}", v))[1],
        lambda: (v := "shpat_" + r(HEX, 32), Planted("shopify", f"shopify {v}", v))[1],
        lambda: (
            v := r(HEX, 32),
            Planted(
                "sentry_dsn",
                f"SENTRY_DSN=https://{v}@o{rng.randrange(10**6)}.ingest.sentry.io/1",
                v,
            ),
        )[1],
        lambda: (v := _luhn_valid(rng), Planted("credit_card", f"card {v} declined", v))[1],
        lambda: (
            v := f"{rng.randrange(100, 665)}-{rng.randrange(10, 99)}-{rng.randrange(1000, 9999)}",
            Planted("ssn", f"ssn {v} rejected", v),
        )[1],
        lambda: (
            v := r(ALNUM, 32),
            Planted("cookie", f"Cookie: sessionid={v}; csrftoken=abc", v),
        )[1],
        lambda: (
            v := f"81.{rng.randrange(1, 250)}.{rng.randrange(1, 250)}.{rng.randrange(1, 250)}",
            Planted("public_ip", f"from {v} blocked", v),
        )[1],
        lambda: (
            v := f"{rng.randrange(10**8, 10**9)}:{r(URLSAFE, 35)}",
            Planted("telegram_bot", f"telegram {v}", v),
        )[1],
        lambda: (v := "sq0csp-" + r(URLSAFE, 43), Planted("square", f"square {v}", v))[1],
        lambda: (
            v := r(HEX, 32) + "-us12",
            Planted("mailchimp", f"mailchimp {v}", v),
        )[1],
        lambda: (
            v := r(ALNUM, 28),
            Planted("high_entropy_assignment", f"signing_key = '{v}'", v),
        )[1],
    ]
    # Two of each kind: 80 secrets of 40 kinds.
    return [make() for make in makers for _ in range(2)]
