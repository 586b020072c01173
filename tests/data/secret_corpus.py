"""A corpus of fake secrets in 150+ published formats, each placed in the contexts where real
systems write them (env files, YAML, JSON, URLs, CLIs, cookies, struct dumps, stack frames, PEM
blocks, log lines…), plus secret-free texts full of secret-looking noise.

Every value is generated at run time from a seeded ``random.Random`` (no secret-shaped literal is
committed), in the shape that a public rule set publishes for it: ``Format.source`` names the rule
(``gitleaks:<rule id>`` from gitleaks' config/gitleaks.toml, ``detect-secrets:<plugin class>``,
``trufflehog:<detector>``); ``(unverified)`` marks formats whose cited shape no regex checked.
``_self_check()`` compiles the cited gitleaks rules (and detect-secrets' plugins) and lists the
formats whose generated value they do not match.

- ``FORMATS``: the formats (name, source, config key, generator).
- ``CONTEXTS``: context name -> ``render(value, key, rng)``, the text a real system would write.
- ``corpus(seed)``: every format once in its natural context, then each context applied to a
  rotating subset of the formats that fit it; ``Sample.value`` is what must never leave (for a
  multi-line key, one of its middle body lines).
- ``clean_texts()``: traces, log lines and code without any secret, for false positives.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import string
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote
from xml.sax.saxutils import escape, quoteattr

ALNUM = string.ascii_letters + string.digits
LOWER_NUM = string.ascii_lowercase + string.digits
UPPER_NUM = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
HEX_UPPER = "0123456789ABCDEF"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
WORD = ALNUM + "_"
BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"
PUNCT = "!#$%&*+-.:=?@^_~"

Make = Callable[[random.Random], str]
Render = Callable[[str, str, random.Random], str]


@dataclass(frozen=True)
class Format:
    name: str  # e.g. "github-pat"
    source: str  # the rules it matches, comma-separated; "(unverified)" when none was checked
    key: str  # a natural name for it in config
    make: Make  # -> the secret value


@dataclass(frozen=True)
class Sample:
    format: str
    context: str
    text: str  # the secret as it appears in a log line or source file in that context
    value: str  # the exact part that must never leave


# --- value helpers -------------------------------------------------------------------------------


def _r(g: random.Random, chars: str, n: int) -> str:
    """``n`` characters of ``chars``; 8+ long: at least one digit and one letter when the
    alphabet has both, and no separator at either end (real tokens start and end alphanumeric)."""
    digits, letters = set(chars) & set(string.digits), set(chars) & set(string.ascii_letters)
    while True:
        s = "".join(g.choice(chars) for _ in range(n))
        if n < 8:
            return s
        if digits and not any(c.isdigit() for c in s):
            continue
        if letters and not any(c.isalpha() for c in s):
            continue
        if s[0].isalnum() and s[-1].isalnum():
            return s


def _hex(g: random.Random, n: int) -> str:
    return _r(g, HEX, n)


def _digits(g: random.Random, n: int) -> str:
    return str(g.randrange(1, 10)) + "".join(g.choice(string.digits) for _ in range(n - 1))


def _uuid(g: random.Random, *, upper: bool = False) -> str:
    h = _hex(g, 32)
    h = h[:12] + "4" + h[13:16] + g.choice("89ab") + h[17:]
    u = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return u.upper() if upper else u


def _b64(data: bytes | str, *, url: bool = False, pad: bool = True) -> str:
    raw = data.encode() if isinstance(data, str) else data
    out = (base64.urlsafe_b64encode if url else base64.b64encode)(raw).decode()
    return out if pad else out.rstrip("=")


def _b64_random(g: random.Random, n: int) -> str:
    """base64 of ``n`` random bytes that starts and ends alphanumeric (as tokens are written)."""
    while True:
        s = _b64(g.randbytes(n))
        if s[0].isalnum() and s.rstrip("=")[-1].isalnum():
            return s


def _b64_alnum(g: random.Random, build: Callable[[random.Random], str]) -> str:
    """base64 of ``build(g)`` (retried until the encoding holds no ``+`` or ``/``)."""
    while True:
        s = _b64(build(g))
        if "+" not in s and "/" not in s:
            return s


def _tidy(s: str) -> str:
    """A base64url token whose last character is alphanumeric (word-boundary rules need it)."""
    return s if s[-1].isalnum() else s[:-1] + "Q"


def _jwt(g: random.Random, claims: dict[str, object], alg: str = "HS256", sig: int = 32) -> str:
    header = _b64(json.dumps({"alg": alg, "typ": "JWT"}, separators=(",", ":")), url=True)
    body = _b64(json.dumps(claims, separators=(",", ":")), url=True, pad=False)
    return f"{header.rstrip('=')}.{body}.{_tidy(_b64(g.randbytes(sig), url=True, pad=False))}"


def _jwt_user(g: random.Random) -> str:
    now = 1795950000 + g.randrange(10**6)
    claims = {"sub": str(g.randrange(10**6)), "iat": now, "exp": now + 3600, "scope": "orders"}
    return _jwt(g, claims)


def _wrap(s: str, width: int) -> str:
    return "\n".join(s[i : i + width] for i in range(0, len(s), width))


def _pem(label: str, prefix: str, size: int, *, width: int = 64, headers: str = "") -> Make:
    """A PEM block: ``prefix`` (hex of a real DER header) then random bytes, ``size`` in all."""

    def make(g: random.Random) -> str:
        body = bytes.fromhex(prefix) + g.randbytes(size - len(prefix) // 2)
        return (
            f"-----BEGIN {label}-----\n{headers}{_wrap(_b64(body), width)}\n-----END {label}-----"
        )

    return make


def _crc24(data: bytes) -> bytes:
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return (crc & 0xFFFFFF).to_bytes(3, "big")


def _pgp(g: random.Random) -> str:
    body = bytes.fromhex("9503c604") + g.randbytes(1140)
    armored = _wrap(_b64(body), 64)
    return (
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n"
        f"{armored}\n={_b64(_crc24(body))}\n-----END PGP PRIVATE KEY BLOCK-----"
    )


def _openssh(size: int) -> Make:
    magic = b"openssh-key-v1\x00\x00\x00\x00\x04none\x00\x00\x00\x04none\x00\x00\x00\x00"

    def make(g: random.Random) -> str:
        body = magic + b"\x00\x00\x00\x01" + g.randbytes(size - len(magic) - 4)
        return (
            "-----BEGIN OPENSSH PRIVATE KEY-----\n"
            f"{_wrap(_b64(body), 70)}\n-----END OPENSSH PRIVATE KEY-----"
        )

    return make


def _ssh2(g: random.Random) -> str:
    body = bytes.fromhex("3f6ff9eb0000052b") + g.randbytes(1320)
    return (
        "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----\n"
        'Comment: "2048-bit rsa, deploy@build-7, Tue Dec 01 2026 10:00:00 +0000"\n'
        f"{_wrap(_b64(body), 70)}\n---- END SSH2 ENCRYPTED PRIVATE KEY ----"
    )


def _putty(g: random.Random) -> str:
    public = b"\x00\x00\x00\x07ssh-rsa\x00\x00\x00\x03\x01\x00\x01\x00\x00\x01\x01\x00"
    public += g.randbytes(279 - len(public))
    return (
        "PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nComment: rsa-key-20261201\n"
        f"Public-Lines: 6\n{_wrap(_b64(public), 64)}\n"
        f"Private-Lines: 14\n{_wrap(_b64(g.randbytes(660)), 64)}\n"
        f"Private-MAC: {_hex(g, 40)}"
    )


def _pkcs12(g: random.Random) -> str:
    body = bytes.fromhex("30820a5a02010330820a2006092a864886f70d010701a0820a1104820a0d")
    return _wrap(_b64(body + g.randbytes(2620)), 76)


_RSA_PKCS1 = "308204a40201000282010100"
_RSA_PKCS8 = "308204be020100300d06092a864886f70d0101010500048204a8308204a40201000282010100"
_EC_SEC1 = "307702010104"
_DSA = "308203560201000282010100"
_PKCS8_ENCRYPTED = "3082051c304e06092a864886f70d01050d3041302906092a864886f70d01050c301c0408"


def _legacy_encrypted_rsa(g: random.Random) -> str:
    headers = f"Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-256-CBC,{_r(g, HEX_UPPER, 32)}\n\n"
    return _pem("RSA PRIVATE KEY", "", 1200, headers=headers)(g)


def _ec_key(g: random.Random) -> str:
    body = (
        bytes.fromhex(_EC_SEC1 + "20")
        + g.randbytes(32)
        + bytes.fromhex("a00a06082a8648ce3d030107a144034200" + "04")
        + g.randbytes(64)
    )
    return f"-----BEGIN EC PRIVATE KEY-----\n{_wrap(_b64(body), 64)}\n-----END EC PRIVATE KEY-----"


def _luhn(g: random.Random) -> str:
    digits = [4] + [g.randrange(10) for _ in range(14)]
    total = 0
    for i, d in enumerate(reversed(digits)):
        d = d * 2 if i % 2 == 0 else d
        total += d - 9 if d > 9 else d
    digits.append((10 - total % 10) % 10)
    return "".join(map(str, digits))


_WORDS = [
    "amber",
    "anchor",
    "basin",
    "beacon",
    "birch",
    "cactus",
    "canyon",
    "cedar",
    "cobalt",
    "comet",
    "coral",
    "cotton",
    "delta",
    "ember",
    "falcon",
    "fern",
    "fjord",
    "garnet",
    "glacier",
    "harbor",
    "hazel",
    "indigo",
    "island",
    "jasper",
    "juniper",
    "kelp",
    "lantern",
    "lichen",
    "maple",
    "marble",
    "meadow",
    "nectar",
    "nickel",
    "oasis",
    "onyx",
    "orchid",
    "pebble",
    "pepper",
    "prism",
    "quartz",
    "raven",
    "reef",
    "saffron",
    "sierra",
    "sparrow",
    "spruce",
    "tango",
    "thistle",
    "tundra",
    "umber",
    "velvet",
    "walnut",
    "willow",
]


def _password_human(g: random.Random) -> str:
    word = g.choice(_WORDS).capitalize()
    return f"{word}{g.choice(_WORDS)}{g.randrange(1990, 2027)}{g.choice('!?#$%&*')}"


def _password_random(g: random.Random) -> str:
    while True:
        s = _r(g, ALNUM + "!$%^&*()-_=+[]{}:.,?~", 20)
        if any(c in "!$%^&*()-_=+[]{}:.,?~" for c in s):
            return s


def _password_url_unsafe(g: random.Random) -> str:
    chars = [*_r(g, ALNUM, 14)]
    for sym in ("#", "/", "@"):
        chars.insert(g.randrange(1, len(chars)), sym)
    return "".join(chars)


def _password_percent(g: random.Random) -> str:
    chars = [*_r(g, ALNUM, 14)]
    for sym in ("%40", "%23", "%2F"):
        chars.insert(g.randrange(1, len(chars)), sym)
    return "".join(chars)


def _bcrypt(g: random.Random) -> str:
    return f"$2y$12${_r(g, ALNUM + './', 53)}"


def _sentry_org_token(g: random.Random) -> str:
    # A JSON claim set whose base64 is 156 characters: the token is sntrys_ + 200 characters.
    iat = f"{1795950000 + g.randrange(10**6)}.{g.randrange(10**6):06d}"
    org = "shop-"
    while True:
        claims = (
            f'{{"iat":{iat},"url":"https://sentry.io","region_url":"https://us.sentry.io",'
            f'"org":"{org}"}}'
        )
        if len(claims) >= 117:
            break
        org += g.choice(string.ascii_lowercase)
    return f"sntrys_{_b64(claims[:116] + '}')}_{_r(g, ALNUM, 43)}"


def _onepassword_sa(g: random.Random) -> str:
    claims = {
        "signInAddress": "my.1password.com",
        "userAuth": {"method": "SRPg-4096", "alg": "PBES2g-HS256", "iterations": 650000},
        "email": f"{_r(g, string.ascii_lowercase, 13)}@1passwordserviceaccounts.com",
        "srpX": _hex(g, 64),
        "muk": {"alg": "A256GCM", "ext": True, "k": _r(g, URLSAFE, 43), "kty": "oct"},
        "secretKey": _onepassword_key(g),
        "deviceUuid": _r(g, LOWER_NUM, 26),
    }
    return "ops_" + _b64(json.dumps(claims, separators=(",", ":")))


def _onepassword_key(g: random.Random) -> str:
    parts = [_r(g, UPPER_NUM, 6), _r(g, UPPER_NUM, 11), *(_r(g, UPPER_NUM, 5) for _ in range(3))]
    return "-".join(["A3", *parts])


def _grafana_cloud(g: random.Random) -> str:
    claims = {
        "o": _digits(g, 7),
        "n": f"stack-{_digits(g, 6)}-hm-read-shop",
        "k": _r(g, ALNUM, 24),
        "m": {"r": "prod-eu-west-2"},
    }
    return "glc_" + _b64(json.dumps(claims, separators=(",", ":")))


def _grafana_api_key(g: random.Random) -> str:
    return _b64_alnum(
        g,
        lambda h: json.dumps(
            {"k": _r(h, ALNUM, 32), "n": "deploy-bot", "id": h.randrange(1, 99)},
            separators=(",", ":"),
        ),
    )


def _intercom(g: random.Random) -> str:
    return _b64(f"tok:{_uuid(g).replace('-', '_')}:1:0", url=True)


def _bedrock_long(g: random.Random) -> str:
    return "ABSK" + _b64(
        f"BedrockAPIKey-{_r(g, LOWER_NUM, 4)}-at-{_digits(g, 12)}:{_r(g, B64, 60)}"
    )


def _bedrock_short(g: random.Random) -> str:
    url = (
        "bedrock.amazonaws.com/?Action=CallWithBearerToken&X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential=ASIA{_r(g, BASE32, 16)}%2F20261201%2Fus-east-1%2Fbedrock%2Faws4_request"
        f"&X-Amz-Date=20261201T100000Z&X-Amz-Expires=43200"
        f"&X-Amz-Security-Token={quote(_r(g, B64, 120), safe='')}"
        f"&X-Amz-Signature={_hex(g, 64)}&Version=1"
    )
    return "bedrock-api-key-" + _b64(url)


def _teams_webhook(g: random.Random) -> str:
    return (
        f"https://shopgmbh.webhook.office.com/webhookb2/{_uuid(g)}@{_uuid(g)}/IncomingWebhook/"
        f"{_r(g, LOWER_NUM, 32)}/{_uuid(g)}"
    )


def _jwe(g: random.Random) -> str:
    header = _b64('{"alg":"RSA-OAEP-256","enc":"A256GCM","kid":"k1"}', url=True, pad=False)
    parts = [g.randbytes(256), g.randbytes(12), g.randbytes(150), g.randbytes(16)]
    return ".".join([header, *(_tidy(_b64(p, url=True, pad=False)) for p in parts)])


def _flask_cookie(g: random.Random) -> str:
    payload = _b64(json.dumps({"_user_id": str(g.randrange(10**5)), "_fresh": True}), url=True)
    return f"{payload.rstrip('=')}.{_r(g, URLSAFE, 6)}.{_r(g, URLSAFE, 27)}"


def _laravel_cookie(g: random.Random) -> str:
    claims = {"iv": _b64(g.randbytes(16)), "value": _b64(g.randbytes(96)), "mac": _hex(g, 64)}
    return quote(_b64(json.dumps(claims, separators=(",", ":"))), safe="")


def _rails_cookie(g: random.Random) -> str:
    return quote(f"{_b64(g.randbytes(120))}--{_hex(g, 40)}", safe="")


def _connect_sid(g: random.Random) -> str:
    return f"s%3A{_r(g, URLSAFE, 32)}.{quote(_b64(g.randbytes(32), pad=False), safe='')}"


# --- formats -------------------------------------------------------------------------------------

_KIND: dict[str, str] = {}  # format -> kind: token, password, session, pem, keybody, url, ...
_NATURAL: dict[str, tuple[str, Render | None]] = {}  # format -> its natural context (+ render)


def _f(
    name: str,
    source: str,
    key: str,
    make: Make,
    kind: str = "token",
    natural: str | None = None,
    render: Render | None = None,
) -> Format:
    _KIND[name] = kind
    if natural:
        _NATURAL[name] = (natural, render)
    return Format(name, source, key, make)


def _line(template: str) -> Render:
    """A natural rendering: ``template`` with ``{v}`` (the value) and ``{k}`` (the key)."""
    return lambda v, k, g: template.replace("{v}", v).replace("{k}", k)


GL, DS, TH = "gitleaks:", "detect-secrets:", "trufflehog:"
_ADMIN = "admin"
UNVERIFIED = " (unverified)"

FORMATS: list[Format] = [
    # --- AWS, GCP, Azure and other clouds ---
    _f(
        "aws-access-key-id",
        f"{GL}aws-access-token,{DS}AWSKeyDetector,{TH}aws",
        "AWS_ACCESS_KEY_ID",
        lambda g: "AKIA" + _r(g, BASE32, 16),
    ),
    _f(
        "aws-secret-access-key",
        f"{DS}AWSKeyDetector,{TH}aws",
        "AWS_SECRET_ACCESS_KEY",
        lambda g: _r(g, ALNUM + "+/", 40),
    ),
    _f(
        "aws-session-token",
        f"{TH}aws",
        "AWS_SESSION_TOKEN",
        lambda g: "IQoJb3JpZ2luX2VjE" + _b64(g.randbytes(600), pad=False),
    ),
    _f(
        "aws-bedrock-api-key-long-lived",
        f"{GL}aws-amazon-bedrock-api-key-long-lived",
        "AWS_BEARER_TOKEN_BEDROCK",
        _bedrock_long,
    ),
    _f(
        "aws-bedrock-api-key-short-lived",
        f"{GL}aws-amazon-bedrock-api-key-short-lived",
        "AWS_BEARER_TOKEN_BEDROCK",
        _bedrock_short,
    ),
    _f(
        "gcp-api-key",
        f"{GL}gcp-api-key,{TH}googlegemini",
        "GOOGLE_API_KEY",
        lambda g: "AIzaSy" + _r(g, URLSAFE, 33),
    ),
    _f(
        "google-oauth-client-secret",
        "doc:google-oauth-client-secret (GOCSPX-)" + UNVERIFIED,
        "GOOGLE_CLIENT_SECRET",
        lambda g: "GOCSPX-" + _r(g, URLSAFE, 28),
    ),
    _f(
        "google-oauth-access-token",
        f"{TH}googleoauth2",
        "token",
        lambda g: "ya29.a0AfB_by" + _r(g, URLSAFE, 150),
        natural="json",
    ),
    _f(
        "google-oauth-refresh-token",
        "doc:google oauth refresh token (1//…)" + UNVERIFIED,
        "refresh_token",
        lambda g: "1//0" + _r(g, URLSAFE, 99),
        natural="json",
    ),
    _f(
        "gcp-service-account-key-id",
        "doc:gcp-service-account-json (private_key_id)" + UNVERIFIED,
        "private_key_id",
        lambda g: _hex(g, 40),
        natural="json",
        render=lambda v, k, g: json.dumps(
            {
                "type": "service_account",
                "project_id": "shop-prod-4242",
                "private_key_id": v,
                "client_email": "orders@shop-prod-4242.iam.gserviceaccount.com",
                "client_id": _digits(g, 21),
                "token_uri": "https://oauth2.googleapis.com/token",
            },
            indent=2,
        ),
    ),
    _f(
        "firebase-fcm-server-key",
        "doc:firebase-legacy-server-key (AAAA…:APA91b…)" + UNVERIFIED,
        "FCM_SERVER_KEY",
        lambda g: f"AAAA{_r(g, URLSAFE, 7)}:APA91b{_r(g, URLSAFE, 134)}",
    ),
    _f(
        "azure-storage-account-key",
        f"{DS}AzureStorageKeyDetector,{TH}azure_storage",
        "AccountKey",
        lambda g: _r(g, B64, 86) + "==",
        natural="name_value_pairs",
        render=_line(
            "DefaultEndpointsProtocol=https;AccountName=shopexports;AccountKey={v};"
            "EndpointSuffix=core.windows.net"
        ),
    ),
    _f(
        "azure-sas-signature",
        f"{TH}azuresastoken",
        "sig",
        lambda g: quote(_b64(g.randbytes(32)), safe=""),
        natural="url_query",
        render=_line(
            "https://shopexports.blob.core.windows.net/reports/2026-11.csv?sv=2022-11-02&ss=b"
            "&srt=o&sp=r&se=2026-12-31T00:00:00Z&st=2026-12-01T00:00:00Z&spr=https&sig={v}"
        ),
    ),
    _f(
        "azure-ad-client-secret",
        f"{GL}azure-ad-client-secret,{TH}azure_entra",
        "AZURE_CLIENT_SECRET",
        lambda g: _r(g, ALNUM, 3) + str(g.randrange(10)) + "Q~" + _r(g, ALNUM + "_~.-", 34),
    ),
    _f(
        "azure-devops-pat",
        f"{TH}azuredevopspersonalaccesstoken",
        "AZURE_DEVOPS_PAT",
        lambda g: _r(g, "abcdefghijklmnopqrstuvwxyz234567", 52),
    ),
    _f(
        "azure-service-bus-key",
        "doc:azure-service-bus-connection-string" + UNVERIFIED,
        "SharedAccessKey",
        lambda g: _b64(g.randbytes(32)),
        natural="name_value_pairs",
        render=_line(
            "Endpoint=sb://shop-events.servicebus.windows.net/;"
            "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={v}"
        ),
    ),
    _f(
        "azure-container-registry-password",
        f"{TH}azurecontainerregistry",
        "ACR_PASSWORD",
        lambda g: _r(g, ALNUM, 42) + "+ACR" + _r(g, ALNUM, 6),
    ),
    _f(
        "azure-redis-access-key",
        f"{TH}redis",
        "password",
        lambda g: _b64(g.randbytes(32)),
        natural="name_value_pairs",
        render=_line(
            "shop-cache.redis.cache.windows.net:6380,password={v},ssl=True,abortConnect=False"
        ),
    ),
    _f(
        "alibaba-access-key-id",
        f"{GL}alibaba-access-key-id",
        "ALIBABA_CLOUD_ACCESS_KEY_ID",
        lambda g: "LTAI5t" + _r(g, ALNUM, 18),
    ),
    _f(
        "alibaba-secret-key",
        f"{GL}alibaba-secret-key",
        "ALIBABA_ACCESS_KEY_SECRET",
        lambda g: _r(g, ALNUM, 30),
    ),
    _f(
        "ibm-cloud-iam-key",
        f"{DS}IbmCloudIamDetector",
        "ibm_cloud_iam_api_key",
        lambda g: _r(g, URLSAFE, 44),
    ),
    _f(
        "ibm-cos-hmac-secret",
        f"{DS}IbmCosHmacDetector",
        "cos_hmac_secret_access_key",
        lambda g: _hex(g, 48),
    ),
    _f(
        "softlayer-api-key",
        f"{DS}SoftlayerDetector",
        "softlayer_api_key",
        lambda g: _r(g, LOWER_NUM, 64),
    ),
    _f(
        "cloudant-password",
        f"{DS}CloudantDetector",
        "cloudant_password",
        lambda g: _r(g, string.ascii_lowercase, 24),
    ),
    _f(
        "digitalocean-pat",
        f"{GL}digitalocean-pat,{TH}digitaloceanv2",
        "DIGITALOCEAN_TOKEN",
        lambda g: "dop_v1_" + _hex(g, 64),
    ),
    _f(
        "cloudflare-api-token",
        f"{GL}cloudflare-api-key,{TH}cloudflareapitoken",
        "CLOUDFLARE_API_TOKEN",
        lambda g: _r(g, URLSAFE, 40),
    ),
    _f(
        "cloudflare-global-api-key",
        f"{GL}cloudflare-global-api-key",
        "CLOUDFLARE_API_KEY",
        lambda g: _hex(g, 37),
    ),
    _f(
        "cloudflare-origin-ca-key",
        f"{GL}cloudflare-origin-ca-key,{TH}cloudflarecakey",
        "CF_ORIGIN_CA_KEY",
        lambda g: f"v1.0-{_hex(g, 24)}-{_hex(g, 146)}",
    ),
    _f(
        "cloudflare-user-api-token",
        f"{TH}cloudflareapitoken",
        "CLOUDFLARE_API_TOKEN",
        lambda g: "cfut_" + _r(g, ALNUM, 40) + _hex(g, 8),
    ),
    _f(
        "fastly-api-token",
        f"{GL}fastly-api-token",
        "FASTLY_API_TOKEN",
        lambda g: _r(g, URLSAFE, 32),
    ),
    _f(
        "heroku-api-key",
        f"{GL}heroku-api-key",
        "HEROKU_API_KEY",
        lambda g: _uuid(g),
    ),
    _f(
        "heroku-api-key-v2",
        f"{GL}heroku-api-key-v2,{TH}heroku",
        "HEROKU_API_KEY",
        lambda g: "HRKU-AA" + _r(g, URLSAFE, 58),
    ),
    _f(
        "flyio-access-token",
        f"{GL}flyio-access-token",
        "FLY_ACCESS_TOKEN",
        lambda g: "fo1_" + _r(g, URLSAFE, 43),
    ),
    _f(
        "flyio-macaroon",
        f"{GL}flyio-access-token,{TH}flyio",
        "FLY_API_TOKEN",
        lambda g: "fm2_" + _r(g, B64, 600),
        natural="env",
        render=_line('FLY_API_TOKEN="FlyV1 {v}"'),
    ),
    _f(
        "vercel-token",
        f"{TH}vercel",
        "VERCEL_TOKEN",
        lambda g: _r(g, ALNUM, 24),
    ),
    _f(
        "netlify-pat",
        f"{TH}netlify",
        "NETLIFY_AUTH_TOKEN",
        lambda g: "nfp_" + _r(g, ALNUM, 36),
    ),
    _f(
        "supabase-pat",
        f"{TH}supabasetoken",
        "SUPABASE_ACCESS_TOKEN",
        lambda g: "sbp_" + _hex(g, 40),
    ),
    _f(
        "databricks-token",
        f"{GL}databricks-api-token,{TH}databrickstoken",
        "DATABRICKS_TOKEN",
        lambda g: "dapi" + _hex(g, 32),
    ),
    _f(
        "planetscale-api-token",
        f"{GL}planetscale-api-token",
        "PLANETSCALE_SERVICE_TOKEN",
        lambda g: "pscale_tkn_" + _r(g, WORD, 43),
    ),
    _f(
        "planetscale-password",
        f"{GL}planetscale-password",
        "DATABASE_PASSWORD",
        lambda g: "pscale_pw_" + _r(g, WORD, 43),
    ),
    _f(
        "doppler-token",
        f"{GL}doppler-api-token,{TH}doppler",
        "DOPPLER_TOKEN",
        lambda g: "dp.pt." + _r(g, ALNUM, 43),
    ),
    _f(
        "pulumi-access-token",
        f"{GL}pulumi-api-token",
        "PULUMI_ACCESS_TOKEN",
        lambda g: "pul-" + _hex(g, 40),
    ),
    _f(
        "terraform-cloud-token",
        f"{GL}hashicorp-tf-api-token,{TH}terraformcloudpersonaltoken",
        "TF_TOKEN_app_terraform_io",
        lambda g: f"{_r(g, ALNUM, 14)}.atlasv1.{_r(g, ALNUM, 67)}",
    ),
    _f(
        "vault-service-token",
        f"{GL}vault-service-token",
        "VAULT_TOKEN",
        lambda g: "hvs." + _r(g, ALNUM, 20) + _r(g, URLSAFE, 75),
    ),
    _f(
        "vault-batch-token",
        f"{GL}vault-batch-token",
        "VAULT_TOKEN",
        lambda g: "hvb." + _r(g, URLSAFE, 150),
    ),
    _f(
        "vault-legacy-token",
        f"{GL}vault-service-token",
        "VAULT_TOKEN",
        lambda g: "s." + _r(g, ALNUM, 24),
    ),
    _f(
        "onepassword-secret-key",
        f"{GL}1password-secret-key",
        "OP_SECRET_KEY",
        _onepassword_key,
    ),
    _f(
        "onepassword-service-account-token",
        f"{GL}1password-service-account-token",
        "OP_SERVICE_ACCOUNT_TOKEN",
        _onepassword_sa,
    ),
    _f(
        "age-secret-key",
        f"{GL}age-secret-key",
        "SOPS_AGE_KEY",
        lambda g: "AGE-SECRET-KEY-1" + _r(g, BECH32, 58),
    ),
    _f(
        "tailscale-auth-key",
        f"{TH}tailscale",
        "TS_AUTHKEY",
        lambda g: f"tskey-auth-k{_r(g, ALNUM, 11)}CNTRL-{_r(g, ALNUM, 33)}",
    ),
    _f(
        "ngrok-authtoken",
        f"{TH}ngrok",
        "NGROK_AUTHTOKEN",
        lambda g: f"2{_r(g, ALNUM, 26)}_{g.randrange(10)}{_r(g, ALNUM, 20)}",
    ),
    _f(
        "clickhouse-cloud-secret",
        f"{GL}clickhouse-cloud-api-secret-key",
        "CLICKHOUSE_KEY_SECRET",
        lambda g: "4b1d" + _r(g, ALNUM, 38),
    ),
    _f(
        "scalingo-api-token",
        f"{GL}scalingo-api-token",
        "SCALINGO_API_TOKEN",
        lambda g: "tk-us-" + _r(g, URLSAFE, 48),
    ),
    _f(
        "openshift-user-token",
        f"{GL}openshift-user-token",
        "OPENSHIFT_TOKEN",
        lambda g: "sha256~" + _r(g, URLSAFE, 43),
    ),
    _f(
        "kubernetes-secret-data",
        f"{GL}kubernetes-secret-yaml",
        "password",
        lambda g: _b64(_password_random(g)),
        natural="yaml",
        render=lambda v, k, g: (
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: orders-db\n  namespace: shop\n"
            f"type: Opaque\ndata:\n  username: {_b64('orders')}\n  {k}: {v}\n"
        ),
    ),
    _f(
        "kubeconfig-client-key-data",
        "doc:kubeconfig client-key-data (base64 of a PEM key)" + UNVERIFIED,
        "client-key-data",
        lambda g: _b64(_pem("RSA PRIVATE KEY", _RSA_PKCS1, 1192)(g) + "\n"),
        natural="yaml",
        render=lambda v, k, g: (
            "users:\n- name: ci-deployer\n  user:\n"
            f"    client-certificate-data: {_b64(g.randbytes(600))}\n    {k}: {v}\n"
        ),
    ),
    _f(
        "docker-config-auth",
        f"{TH}docker",
        "auth",
        lambda g: _b64(f"ci-bot:{_r(g, ALNUM, 24)}"),
        natural="json",
        render=lambda v, k, g: json.dumps(
            {"auths": {"https://index.docker.io/v1/": {k: v}}}, indent="\t"
        ),
    ),
    _f(
        "dockerhub-pat",
        f"{TH}dockerhub",
        "DOCKERHUB_TOKEN",
        lambda g: "dckr_pat_" + _r(g, URLSAFE, 27),
    ),
    # --- version control, CI/CD and developer platforms ---
    _f(
        "github-pat",
        f"{GL}github-pat,{DS}GitHubTokenDetector,{TH}github",
        "GITHUB_TOKEN",
        lambda g: "ghp_" + _r(g, ALNUM, 36),
    ),
    _f(
        "github-oauth-token",
        f"{GL}github-oauth,{DS}GitHubTokenDetector,{TH}github",
        "GH_OAUTH_TOKEN",
        lambda g: "gho_" + _r(g, ALNUM, 36),
    ),
    _f(
        "github-app-installation-token",
        f"{GL}github-app-token,{DS}GitHubTokenDetector,{TH}github",
        "GH_APP_TOKEN",
        lambda g: "ghs_" + _r(g, ALNUM, 36),
    ),
    _f(
        "github-refresh-token",
        f"{GL}github-refresh-token,{DS}GitHubTokenDetector,{TH}github",
        "GH_REFRESH_TOKEN",
        lambda g: "ghr_" + _r(g, ALNUM, 36),
    ),
    _f(
        "github-fine-grained-pat",
        f"{GL}github-fine-grained-pat,{TH}github",
        "GITHUB_TOKEN",
        lambda g: f"github_pat_{_r(g, ALNUM, 22)}_{_r(g, ALNUM, 59)}",
    ),
    _f(
        "gitlab-pat",
        f"{GL}gitlab-pat,{DS}GitLabTokenDetector,{TH}gitlab",
        "GITLAB_TOKEN",
        lambda g: "glpat-" + _r(g, URLSAFE, 20),
    ),
    _f(
        "gitlab-pat-routable",
        f"{GL}gitlab-pat-routable",
        "GITLAB_TOKEN",
        lambda g: f"glpat-{_r(g, URLSAFE, 38)}.01{_r(g, LOWER_NUM, 7)}",
    ),
    _f(
        "gitlab-pipeline-trigger-token",
        f"{GL}gitlab-ptt,{DS}GitLabTokenDetector",
        "CI_TRIGGER_TOKEN",
        lambda g: "glptt-" + _hex(g, 40),
    ),
    _f(
        "gitlab-runner-token-routable",
        f"{GL}gitlab-runner-authentication-token-routable",
        "RUNNER_TOKEN",
        lambda g: f"glrt-t{g.randrange(1, 4)}_{_r(g, URLSAFE, 27)}.01{_r(g, LOWER_NUM, 7)}",
    ),
    _f(
        "gitlab-runner-registration-token",
        f"{GL}gitlab-rrt,{DS}GitLabTokenDetector",
        "REGISTRATION_TOKEN",
        lambda g: "GR1348941" + _r(g, URLSAFE, 20),
    ),
    _f(
        "gitlab-deploy-token",
        f"{GL}gitlab-deploy-token,{DS}GitLabTokenDetector",
        "CI_DEPLOY_PASSWORD",
        lambda g: "gldt-" + _r(g, URLSAFE, 20),
    ),
    _f(
        "gitlab-incoming-mail-token",
        f"{GL}gitlab-incoming-mail-token,{DS}GitLabTokenDetector",
        "INCOMING_EMAIL_TOKEN",
        lambda g: "glimt-" + _r(g, URLSAFE, 25),
    ),
    _f(
        "gitlab-agent-token",
        f"{GL}gitlab-kubernetes-agent-token,{DS}GitLabTokenDetector",
        "AGENT_TOKEN",
        lambda g: "glagent-" + _r(g, URLSAFE, 50),
    ),
    _f(
        "gitlab-oauth-app-secret",
        f"{GL}gitlab-oauth-app-secret,{DS}GitLabTokenDetector",
        "GITLAB_OAUTH_SECRET",
        lambda g: "gloas-" + _r(g, URLSAFE, 64),
    ),
    _f(
        "gitlab-ci-job-token",
        f"{GL}gitlab-cicd-job-token,{DS}GitLabTokenDetector",
        "CI_JOB_TOKEN",
        lambda g: f"glcbt-{_r(g, HEX, 2)}_{_r(g, URLSAFE, 20)}",
    ),
    _f(
        "gitlab-session-cookie",
        f"{GL}gitlab-session-cookie",
        "_gitlab_session",
        lambda g: _r(g, LOWER_NUM, 32),
        kind="session",
    ),
    _f(
        "bitbucket-app-password",
        f"{TH}bitbucketapppassword",
        "BITBUCKET_APP_PASSWORD",
        lambda g: "ATBB" + _r(g, ALNUM, 32) + _r(g, HEX_UPPER, 8),
        natural="url_userinfo",
        render=_line("https://ci-bot:{v}@bitbucket.org/shop/orders.git"),
    ),
    _f(
        "bitbucket-datacenter-token",
        f"{TH}atlassiandatacenter",
        "BITBUCKET_TOKEN",
        lambda g: "BBDC-" + _r(g, ALNUM + "+/@_-", 44),
    ),
    _f(
        "atlassian-api-token",
        f"{GL}atlassian-api-token",
        "JIRA_API_TOKEN",
        lambda g: "ATATT3" + _r(g, URLSAFE, 177) + "=" + _r(g, HEX_UPPER, 8),
    ),
    _f(
        "sourcegraph-token",
        f"{GL}sourcegraph-access-token",
        "SRC_ACCESS_TOKEN",
        lambda g: f"sgp_{_hex(g, 16)}_{_hex(g, 40)}",
    ),
    _f(
        "circleci-pat",
        f"{TH}circleci",
        "CIRCLECI_TOKEN",
        lambda g: f"CCIPAT_{_r(g, ALNUM, 22)}_{_hex(g, 40)}",
    ),
    _f(
        "buildkite-token",
        f"{TH}buildkite",
        "BUILDKITE_API_TOKEN",
        lambda g: "bkua_" + _r(g, LOWER_NUM, 40),
    ),
    _f(
        "travis-ci-token",
        f"{GL}travisci-access-token",
        "TRAVIS_TOKEN",
        lambda g: _r(g, ALNUM, 22),
    ),
    _f(
        "octopus-deploy-api-key",
        f"{GL}octopus-deploy-api-key",
        "OCTOPUS_API_KEY",
        lambda g: "API-" + _r(g, UPPER_NUM, 26),
    ),
    _f(
        "harness-pat",
        f"{GL}harness-api-key",
        "HARNESS_API_KEY",
        lambda g: f"pat.{_r(g, URLSAFE, 22)}.{_r(g, ALNUM, 24)}.{_r(g, ALNUM, 20)}",
    ),
    _f(
        "sonarqube-token",
        f"{GL}sonar-api-token",
        "SONAR_TOKEN",
        lambda g: "squ_" + _hex(g, 40),
    ),
    _f(
        "launchdarkly-api-key",
        f"{GL}launchdarkly-access-token,{TH}launchdarkly",
        "LAUNCHDARKLY_ACCESS_TOKEN",
        lambda g: "api-" + _uuid(g),
    ),
    _f(
        "infracost-api-key",
        f"{GL}infracost-api-token",
        "INFRACOST_API_KEY",
        lambda g: "ico-" + _r(g, ALNUM, 32),
    ),
    _f(
        "prefect-api-key",
        f"{GL}prefect-api-token",
        "PREFECT_API_KEY",
        lambda g: "pnu_" + _r(g, ALNUM, 36),
    ),
    _f(
        "readme-api-key",
        f"{GL}readme-api-token",
        "README_API_KEY",
        lambda g: "rdme_" + _r(g, LOWER_NUM, 70),
    ),
    _f(
        "postman-api-key",
        f"{GL}postman-api-token,{TH}postman",
        "POSTMAN_API_KEY",
        lambda g: f"PMAK-{_hex(g, 24)}-{_hex(g, 34)}",
    ),
    _f(
        "settlemint-pat",
        f"{GL}settlemint-personal-access-token",
        "SETTLEMINT_ACCESS_TOKEN",
        lambda g: "sm_pat_" + _r(g, ALNUM, 16),
    ),
    _f(
        "frameio-token",
        f"{GL}frameio-api-token",
        "FRAMEIO_TOKEN",
        lambda g: "fio-u-" + _r(g, URLSAFE, 64),
    ),
    _f(
        "linear-api-key",
        f"{GL}linear-api-key,{TH}linearapi",
        "LINEAR_API_KEY",
        lambda g: "lin_api_" + _r(g, ALNUM, 40),
    ),
    _f(
        "notion-token",
        f"{GL}notion-api-token",
        "NOTION_TOKEN",
        lambda g: f"ntn_{_digits(g, 11)}{_r(g, ALNUM, 35)}",
    ),
    _f(
        "airtable-pat",
        f"{GL}airtable-personnal-access-token",
        "AIRTABLE_TOKEN",
        lambda g: f"pat{_r(g, ALNUM, 14)}.{_hex(g, 64)}",
    ),
    _f(
        "typeform-token",
        f"{GL}typeform-api-token,{TH}typeform",
        "TYPEFORM_TOKEN",
        lambda g: "tfp_" + _r(g, WORD, 59),
    ),
    _f(
        "adobe-client-secret",
        f"{GL}adobe-client-secret",
        "ADOBE_CLIENT_SECRET",
        lambda g: "p8e-" + _r(g, ALNUM, 32),
    ),
    _f(
        "authress-access-key",
        f"{GL}authress-service-client-access-key",
        "AUTHRESS_KEY",
        lambda g: (
            f"sc_{_r(g, LOWER_NUM, 10)}.{_r(g, LOWER_NUM, 5)}.acc_{_r(g, LOWER_NUM, 24)}."
            + _r(g, ALNUM + "+/", 60)
        ),
    ),
    _f(
        "maxmind-license-key",
        f"{GL}maxmind-license-key",
        "MAXMIND_LICENSE_KEY",
        lambda g: f"{_r(g, ALNUM, 6)}_{_r(g, ALNUM, 29)}_mmk",
    ),
    _f(
        "intra42-client-secret",
        f"{GL}intra42-client-secret",
        "FT_CLIENT_SECRET",
        lambda g: "s-s4t2ud-" + _hex(g, 64),
    ),
    _f(
        "figma-pat",
        f"{TH}figmapersonalaccesstoken",
        "FIGMA_TOKEN",
        lambda g: "figd_" + _r(g, URLSAFE, 40),
    ),
    _f(
        "posthog-personal-api-key",
        f"{TH}posthog",
        "POSTHOG_PERSONAL_API_KEY",
        lambda g: "phx_" + _r(g, ALNUM, 47),
    ),
    _f(
        "salesforce-access-token",
        f"{TH}salesforce",
        "SF_ACCESS_TOKEN",
        lambda g: f"00D{_r(g, ALNUM, 12)}!{_r(g, ALNUM + '_.', 96)}",
    ),
    # --- payment ---
    _f(
        "stripe-secret-key",
        f"{GL}stripe-access-token,{DS}StripeDetector,{TH}stripe",
        "STRIPE_SECRET_KEY",
        lambda g: "sk_live_51" + _r(g, ALNUM, 97),
    ),
    _f(
        "stripe-restricted-key",
        f"{GL}stripe-access-token,{DS}StripeDetector,{TH}stripe",
        "STRIPE_RESTRICTED_KEY",
        lambda g: "rk_live_" + _r(g, ALNUM, 24),
    ),
    _f(
        "stripe-webhook-secret",
        "doc:stripe-webhook-signing-secret (whsec_)" + UNVERIFIED,
        "STRIPE_WEBHOOK_SECRET",
        lambda g: "whsec_" + _r(g, ALNUM, 32),
    ),
    _f(
        "square-access-token",
        f"{GL}square-access-token,{TH}square",
        "SQUARE_ACCESS_TOKEN",
        lambda g: "EAAA" + _r(g, URLSAFE, 60),
    ),
    _f(
        "square-legacy-access-token",
        f"{GL}square-access-token",
        "SQUARE_ACCESS_TOKEN",
        lambda g: "sq0atp-" + _r(g, URLSAFE, 22),
    ),
    _f(
        "square-oauth-secret",
        f"{DS}SquareOAuthDetector,{TH}squareapp",
        "SQUARE_APP_SECRET",
        lambda g: "sq0csp-" + _r(g, URLSAFE, 43),
    ),
    _f(
        "braintree-access-token",
        "doc:braintree-access-token (access_token$production$…)" + UNVERIFIED,
        "BRAINTREE_ACCESS_TOKEN",
        lambda g: f"access_token$production${_r(g, LOWER_NUM, 16)}${_hex(g, 32)}",
    ),
    _f(
        "checkout-secret-key",
        f"{TH}checkout",
        "CHECKOUT_SECRET_KEY",
        lambda g: "sk_" + _uuid(g),
    ),
    _f(
        "razorpay-key",
        f"{TH}razorpay",
        "RAZORPAY_KEY_ID",
        lambda g: "rzp_live_" + _r(g, ALNUM, 14),
    ),
    _f(
        "flutterwave-secret-key",
        f"{GL}flutterwave-secret-key",
        "FLW_SECRET_KEY",
        lambda g: f"FLWSECK_TEST-{_hex(g, 32)}-X",
    ),
    _f(
        "duffel-token",
        f"{GL}duffel-api-token",
        "DUFFEL_ACCESS_TOKEN",
        lambda g: "duffel_live_" + _r(g, URLSAFE, 43),
    ),
    _f(
        "shippo-token",
        f"{GL}shippo-api-token",
        "SHIPPO_API_TOKEN",
        lambda g: "shippo_live_" + _hex(g, 40),
    ),
    _f(
        "easypost-api-key",
        f"{GL}easypost-api-token",
        "EASYPOST_API_KEY",
        lambda g: "EZAK" + _r(g, ALNUM, 54),
    ),
    _f(
        "plaid-access-token",
        f"{GL}plaid-api-token,{TH}plaidkey",
        "PLAID_ACCESS_TOKEN",
        lambda g: "access-production-" + _uuid(g),
    ),
    _f(
        "gocardless-token",
        f"{GL}gocardless-api-token",
        "GOCARDLESS_ACCESS_TOKEN",
        lambda g: "live_" + _r(g, URLSAFE, 40),
    ),
    _f(
        "lob-api-key",
        f"{GL}lob-api-key",
        "LOB_API_KEY",
        lambda g: "live_" + _hex(g, 35),
    ),
    _f(
        "kraken-private-key",
        f"{GL}kraken-access-token",
        "KRAKEN_PRIVATE_KEY",
        lambda g: _b64(g.randbytes(64)),
    ),
    _f(
        "shopify-access-token",
        f"{GL}shopify-access-token,{TH}shopify",
        "SHOPIFY_ACCESS_TOKEN",
        lambda g: "shpat_" + _hex(g, 32),
    ),
    _f(
        "shopify-shared-secret",
        f"{GL}shopify-shared-secret,{TH}shopifyoauth",
        "SHOPIFY_API_SECRET",
        lambda g: "shpss_" + _hex(g, 32),
    ),
    _f(
        "facebook-app-access-token",
        f"{GL}facebook-access-token",
        "FACEBOOK_APP_TOKEN",
        lambda g: f"{_digits(g, 15)}|{_hex(g, 32)}",
    ),
    _f(
        "facebook-page-access-token",
        f"{GL}facebook-page-access-token",
        "FB_PAGE_ACCESS_TOKEN",
        lambda g: "EAAC" + _r(g, ALNUM, 180),
    ),
    _f(
        "credit-card-number",
        "doc:ISO/IEC 7812 card number with a Luhn check digit" + UNVERIFIED,
        "card_number",
        _luhn,
        kind="pii",
        natural="log_line",
        render=lambda v, k, g: (
            f"2026-12-01T10:00:{g.randrange(60):02d}Z ERROR [payments] charge declined for "
            f"card {v} exp 04/28: insufficient_funds"
        ),
    ),
    # --- messaging and email ---
    _f(
        "slack-bot-token",
        f"{GL}slack-bot-token,{DS}SlackDetector,{TH}slack",
        "SLACK_BOT_TOKEN",
        lambda g: f"xoxb-{_digits(g, 11)}-{_digits(g, 13)}-{_r(g, ALNUM, 24)}",
    ),
    _f(
        "slack-user-token",
        f"{GL}slack-user-token,{DS}SlackDetector,{TH}slack",
        "SLACK_USER_TOKEN",
        lambda g: f"xoxp-{_digits(g, 11)}-{_digits(g, 13)}-{_digits(g, 13)}-{_hex(g, 32)}",
    ),
    _f(
        "slack-app-token",
        f"{GL}slack-app-token",
        "SLACK_APP_TOKEN",
        lambda g: f"xapp-1-A{_r(g, UPPER_NUM, 10)}-{_digits(g, 13)}-{_hex(g, 64)}",
    ),
    _f(
        "slack-config-access-token",
        f"{GL}slack-config-access-token",
        "SLACK_CONFIG_TOKEN",
        lambda g: "xoxe.xoxp-1-" + _r(g, ALNUM, 164),
    ),
    _f(
        "slack-config-refresh-token",
        f"{GL}slack-config-refresh-token",
        "SLACK_CONFIG_REFRESH_TOKEN",
        lambda g: "xoxe-1-" + _r(g, ALNUM, 146),
    ),
    _f(
        "slack-legacy-bot-token",
        f"{GL}slack-legacy-bot-token",
        "SLACK_BOT_TOKEN",
        lambda g: f"xoxb-{_digits(g, 12)}-{_r(g, ALNUM, 24)}",
    ),
    _f(
        "slack-legacy-workspace-token",
        f"{GL}slack-legacy-workspace-token",
        "SLACK_TOKEN",
        lambda g: f"xoxa-2-{_r(g, ALNUM, 40)}",
    ),
    _f(
        "slack-legacy-token",
        f"{GL}slack-legacy-token,{DS}SlackDetector",
        "SLACK_TOKEN",
        lambda g: f"xoxs-{_digits(g, 10)}-{_digits(g, 11)}-{_digits(g, 12)}-{_hex(g, 64)}",
    ),
    _f(
        "slack-webhook-url",
        f"{GL}slack-webhook-url,{DS}SlackDetector,{TH}slackwebhook",
        "SLACK_WEBHOOK_URL",
        lambda g: (
            f"https://hooks.slack.com/services/T{_r(g, UPPER_NUM, 8)}/B{_r(g, UPPER_NUM, 10)}/"
            + _r(g, ALNUM, 24)
        ),
        kind="url",
    ),
    _f(
        "discord-bot-token",
        f"{DS}DiscordBotTokenDetector,{TH}discordbottoken",
        "DISCORD_TOKEN",
        lambda g: f"MT{_r(g, ALNUM, 22)}.{_r(g, ALNUM, 6)}.{_r(g, URLSAFE, 27)}",
    ),
    _f(
        "discord-webhook-url",
        f"{TH}discordwebhook",
        "DISCORD_WEBHOOK_URL",
        lambda g: f"https://discord.com/api/webhooks/{_digits(g, 19)}/{_r(g, ALNUM + '-', 68)}",
        kind="url",
    ),
    _f(
        "teams-webhook-url",
        f"{GL}microsoft-teams-webhook",
        "TEAMS_WEBHOOK_URL",
        _teams_webhook,
        kind="url",
    ),
    _f(
        "zapier-webhook-url",
        f"{TH}zapierwebhook",
        "ZAPIER_HOOK_URL",
        lambda g: f"https://hooks.zapier.com/hooks/catch/{_digits(g, 7)}/{_r(g, LOWER_NUM, 7)}/",
        kind="url",
    ),
    _f(
        "telegram-bot-token",
        f"{GL}telegram-bot-api-token,{DS}TelegramBotTokenDetector,{TH}telegrambottoken",
        "TELEGRAM_BOT_TOKEN",
        lambda g: f"{_digits(g, 10)}:AA{_r(g, URLSAFE, 33)}",
    ),
    _f(
        "twilio-auth-token",
        f"{TH}twilio",
        "TWILIO_AUTH_TOKEN",
        lambda g: _hex(g, 32),
    ),
    _f(
        "twilio-api-key",
        f"{GL}twilio-api-key,{DS}TwilioKeyDetector,{TH}twilioapikey",
        "TWILIO_API_KEY",
        lambda g: "SK" + _hex(g, 32),
    ),
    _f(
        "sendgrid-api-key",
        f"{GL}sendgrid-api-token,{DS}SendGridDetector,{TH}sendgrid",
        "SENDGRID_API_KEY",
        lambda g: f"SG.{_r(g, URLSAFE, 22)}.{_r(g, URLSAFE, 43)}",
    ),
    _f(
        "mailgun-api-key",
        f"{GL}mailgun-private-api-token,{TH}mailgun",
        "MAILGUN_API_KEY",
        lambda g: "key-" + _hex(g, 32),
    ),
    _f(
        "mailgun-signing-key",
        f"{GL}mailgun-signing-key,{TH}mailgun",
        "MAILGUN_WEBHOOK_SIGNING_KEY",
        lambda g: f"{_hex(g, 32)}-{_hex(g, 8)}-{_hex(g, 8)}",
    ),
    _f(
        "mailchimp-api-key",
        f"{GL}mailchimp-api-key,{DS}MailchimpDetector,{TH}mailchimp",
        "MAILCHIMP_API_KEY",
        lambda g: f"{_hex(g, 32)}-us{g.randrange(10, 22)}",
    ),
    _f(
        "brevo-api-key",
        f"{GL}sendinblue-api-token,{TH}sendinbluev2",
        "BREVO_API_KEY",
        lambda g: f"xkeysib-{_hex(g, 64)}-{_r(g, ALNUM, 16)}",
    ),
    _f(
        "intercom-access-token",
        f"{GL}intercom-api-key,{TH}intercom",
        "INTERCOM_ACCESS_TOKEN",
        _intercom,
    ),
    # --- monitoring ---
    _f(
        "datadog-api-key",
        f"{TH}datadogtoken",
        "DD_API_KEY",
        lambda g: _hex(g, 32),
    ),
    _f(
        "datadog-app-key",
        f"{GL}datadog-access-token,{TH}datadogtoken",
        "DATADOG_APP_KEY",
        lambda g: _hex(g, 40),
    ),
    _f(
        "new-relic-user-key",
        f"{GL}new-relic-user-api-key,{TH}newrelicuserkey",
        "NEW_RELIC_API_KEY",
        lambda g: "NRAK-" + _r(g, UPPER_NUM, 27),
    ),
    _f(
        "new-relic-insert-key",
        f"{GL}new-relic-insert-key",
        "NEW_RELIC_INSERT_KEY",
        lambda g: "NRII-" + _r(g, LOWER_NUM + "-", 32),
    ),
    _f(
        "new-relic-browser-key",
        f"{GL}new-relic-browser-api-token",
        "NEW_RELIC_BROWSER_KEY",
        lambda g: "NRJS-" + _hex(g, 19),
    ),
    _f(
        "new-relic-license-key",
        f"{TH}newreliclicensekey",
        "NEW_RELIC_LICENSE_KEY",
        lambda g: _hex(g, 32) + "FFFFNRAL",
    ),
    _f(
        "sentry-user-token",
        f"{GL}sentry-user-token,{TH}sentrytoken",
        "SENTRY_AUTH_TOKEN",
        lambda g: "sntryu_" + _hex(g, 64),
    ),
    _f(
        "sentry-org-token",
        f"{GL}sentry-org-token,{TH}sentryorgtoken",
        "SENTRY_AUTH_TOKEN",
        _sentry_org_token,
    ),
    _f(
        "sentry-dsn-key",
        "doc:sentry-dsn (public key in the userinfo)" + UNVERIFIED,
        "SENTRY_DSN",
        lambda g: _hex(g, 32),
        natural="url_userinfo",
        render=lambda v, k, g: f"{k}=https://{v}@o{_digits(g, 6)}.ingest.sentry.io/{_digits(g, 7)}",
    ),
    _f(
        "dynatrace-api-token",
        f"{GL}dynatrace-api-token",
        "DT_API_TOKEN",
        lambda g: f"dt0c01.{_r(g, UPPER_NUM, 24)}.{_r(g, UPPER_NUM, 64)}",
    ),
    _f(
        "grafana-cloud-token",
        f"{GL}grafana-cloud-api-token,{TH}grafana",
        "GRAFANA_CLOUD_TOKEN",
        _grafana_cloud,
    ),
    _f(
        "grafana-service-account-token",
        f"{GL}grafana-service-account-token,{TH}grafanaserviceaccount",
        "GRAFANA_TOKEN",
        lambda g: f"glsa_{_r(g, ALNUM, 32)}_{_hex(g, 8)}",
    ),
    _f(
        "grafana-api-key",
        f"{GL}grafana-api-key",
        "GRAFANA_API_KEY",
        _grafana_api_key,
    ),
    _f(
        "pagerduty-api-key",
        f"{TH}pagerdutyapikey",
        "PAGERDUTY_TOKEN",
        lambda g: "u+" + _r(g, URLSAFE + "+", 18),
    ),
    _f(
        "sumologic-access-id",
        f"{GL}sumologic-access-id,{TH}sumologickey",
        "SUMO_ACCESS_ID",
        lambda g: "su" + _r(g, ALNUM, 12),
    ),
    _f(
        "sumologic-access-key",
        f"{GL}sumologic-access-token,{TH}sumologickey",
        "SUMO_ACCESS_KEY",
        lambda g: _r(g, ALNUM, 64),
    ),
    _f(
        "okta-api-token",
        f"{GL}okta-access-token,{TH}okta",
        "OKTA_API_TOKEN",
        lambda g: "00" + _r(g, URLSAFE, 40),
    ),
    # --- package registries ---
    _f(
        "npm-token",
        f"{GL}npm-access-token,{TH}npmtokenv2",
        "NPM_TOKEN",
        lambda g: "npm_" + _r(g, ALNUM, 36),
    ),
    _f(
        "npm-legacy-token",
        f"{DS}NpmDetector,{TH}npmtoken",
        "_authToken",
        lambda g: _uuid(g),
        natural="env",
        render=_line("//registry.npmjs.org/:_authToken={v}"),
    ),
    _f(
        "pypi-token",
        f"{GL}pypi-upload-token,{DS}PypiTokenDetector,{TH}pypi",
        "TWINE_PASSWORD",
        lambda g: "pypi-AgEIcHlwaS5vcmcCJ" + _r(g, URLSAFE, 155),
    ),
    _f(
        "rubygems-api-key",
        f"{GL}rubygems-api-token,{TH}rubygems",
        "GEM_HOST_API_KEY",
        lambda g: "rubygems_" + _hex(g, 48),
    ),
    _f(
        "nuget-api-key",
        f"{TH}nugetapikey",
        "NUGET_API_KEY",
        lambda g: "oy2" + _r(g, LOWER_NUM, 43),
    ),
    _f(
        "nuget-config-password",
        f"{GL}nuget-config-password",
        "ClearTextPassword",
        lambda g: _r(g, ALNUM, 16),
        kind="password",
        natural="xml_config",
        render=lambda v, k, g: (
            "<packageSourceCredentials>\n  <shop-feed>\n"
            '    <add key="Username" value="ci-bot" />\n'
            f'    <add key="{k}" value="{v}" />\n  </shop-feed>\n</packageSourceCredentials>'
        ),
    ),
    _f(
        "clojars-token",
        f"{GL}clojars-api-token",
        "CLOJARS_PASSWORD",
        lambda g: "CLOJARS_" + _r(g, LOWER_NUM, 60),
    ),
    _f(
        "artifactory-api-key",
        f"{GL}artifactory-api-key,{DS}ArtifactoryDetector",
        "ARTIFACTORY_API_KEY",
        lambda g: "AKCp" + _r(g, ALNUM, 69),
    ),
    _f(
        "artifactory-reference-token",
        f"{GL}artifactory-reference-token",
        "ARTIFACTORY_ACCESS_TOKEN",
        lambda g: "cmVmd" + _r(g, ALNUM, 59),
    ),
    _f(
        "artifactory-encrypted-password",
        f"{DS}ArtifactoryDetector",
        "ARTIFACTORY_PASSWORD",
        lambda g: "AP" + g.choice(HEX_UPPER) + _r(g, ALNUM, 10),
    ),
    _f(
        "jfrog-identity-token",
        f"{GL}jfrog-identity-token",
        "JFROG_ACCESS_TOKEN",
        lambda g: _r(g, LOWER_NUM, 64),
    ),
    # --- AI APIs ---
    _f(
        "openai-project-key",
        f"{GL}openai-api-key,{TH}openai",
        "OPENAI_API_KEY",
        lambda g: f"sk-proj-{_r(g, URLSAFE, 74)}T3BlbkFJ{_r(g, URLSAFE, 74)}",
    ),
    _f(
        "openai-legacy-key",
        f"{GL}openai-api-key,{DS}OpenAIDetector,{TH}openai",
        "OPENAI_API_KEY",
        lambda g: f"sk-{_r(g, ALNUM, 20)}T3BlbkFJ{_r(g, ALNUM, 20)}",
    ),
    _f(
        "openai-admin-key",
        f"{GL}openai-api-key,{TH}openaiadmin",
        "OPENAI_ADMIN_KEY",
        lambda g: f"sk-admin-{_r(g, URLSAFE, 58)}T3BlbkFJ{_r(g, URLSAFE, 58)}",
    ),
    _f(
        "anthropic-api-key",
        f"{GL}anthropic-api-key,{TH}anthropic",
        "ANTHROPIC_API_KEY",
        lambda g: f"sk-ant-api03-{_r(g, URLSAFE, 93)}AA",
    ),
    _f(
        "huggingface-token",
        f"{GL}huggingface-access-token,{TH}huggingface",
        "HF_TOKEN",
        lambda g: "hf_" + _r(g, string.ascii_letters, 34),
    ),
    _f(
        "perplexity-api-key",
        f"{GL}perplexity-api-key",
        "PPLX_API_KEY",
        lambda g: "pplx-" + _r(g, ALNUM, 48),
    ),
    _f(
        "groq-api-key",
        f"{TH}groq",
        "GROQ_API_KEY",
        lambda g: "gsk_" + _r(g, ALNUM, 52),
    ),
    _f(
        "xai-api-key",
        f"{TH}xai",
        "XAI_API_KEY",
        lambda g: "xai-" + _r(g, ALNUM, 80),
    ),
    _f(
        "replicate-token",
        f"{TH}replicate",
        "REPLICATE_API_TOKEN",
        lambda g: "r8_" + _r(g, ALNUM, 37),
    ),
    _f(
        "pinecone-api-key",
        f"{TH}pinecone",
        "PINECONE_API_KEY",
        lambda g: f"pcsk_{_r(g, ALNUM, 6)}_{_r(g, ALNUM, 63)}",
    ),
    _f(
        "deepseek-api-key",
        f"{TH}deepseek",
        "DEEPSEEK_API_KEY",
        lambda g: "sk-" + _hex(g, 32),
    ),
    _f(
        "elevenlabs-api-key",
        f"{TH}elevenlabs",
        "ELEVENLABS_API_KEY",
        lambda g: "sk_" + _hex(g, 48),
    ),
    _f(
        "cohere-api-key",
        f"{GL}cohere-api-token",
        "CO_API_KEY",
        lambda g: _r(g, ALNUM, 40),
    ),
    _f(
        "langsmith-api-key",
        f"{TH}langsmith",
        "LANGSMITH_API_KEY",
        lambda g: f"lsv2_pt_{_hex(g, 32)}_{_hex(g, 10)}",
    ),
    _f(
        "openrouter-api-key",
        f"{TH}openrouter",
        "OPENROUTER_API_KEY",
        lambda g: "sk-or-v1-" + _hex(g, 64),
    ),
    _f(
        "nvidia-api-key",
        f"{TH}nvapi",
        "NVIDIA_API_KEY",
        lambda g: "nvapi-" + _r(g, URLSAFE, 64),
    ),
    _f(
        "mapbox-secret-token",
        f"{TH}mapbox",
        "MAPBOX_SECRET_TOKEN",
        lambda g: (
            f"sk.{_b64(json.dumps({'u': 'shop', 'a': _r(g, LOWER_NUM, 25)}), url=True)}"
            f".{_r(g, URLSAFE, 22)}"
        ),
    ),
    # --- generic credentials ---
    _f(
        "jwt",
        f"{GL}jwt,{DS}JwtTokenDetector,{TH}jwt",
        "ACCESS_TOKEN",
        _jwt_user,
    ),
    _f(
        "jwe",
        "doc:RFC 7516 JWE compact serialization (5 parts)" + UNVERIFIED,
        "ID_TOKEN",
        _jwe,
    ),
    _f(
        "jwt-base64",
        f"{GL}jwt-base64",
        "ENCODED_TOKEN",
        lambda g: _b64(_jwt_user(g)),
    ),
    _f(
        "basic-auth-credentials",
        f"{GL}curl-auth-header",
        "Authorization",
        lambda g: _b64(f"svc-orders:{_r(g, ALNUM, 20)}"),
        natural="name_value_pairs",
        render=_line("Authorization: Basic {v}"),
    ),
    _f(
        "bearer-opaque-token",
        f"{GL}curl-auth-header",
        "Authorization",
        lambda g: _r(g, URLSAFE + ".~", 48),
        natural="name_value_pairs",
        render=_line("Authorization: Bearer {v}"),
    ),
    _f(
        "elasticsearch-api-key",
        "doc:elasticsearch ApiKey base64(id:api_key)" + UNVERIFIED,
        "Authorization",
        lambda g: _b64(f"{_r(g, URLSAFE, 20)}:{_r(g, URLSAFE, 22)}"),
        natural="name_value_pairs",
        render=_line("Authorization: ApiKey {v}"),
    ),
    _f(
        "curl-user-password",
        f"{GL}curl-auth-user",
        "password",
        lambda g: g.choice(string.ascii_uppercase) + _r(g, ALNUM, 17),
        kind="password",
        natural="cli",
        render=lambda v, k, g: (
            f"curl -sS -u {_ADMIN}:{v} https://grafana.shop.example/api/dashboards/home"
        ),
    ),
    _f(
        "jdbc-url-password",
        f"{TH}jdbc",
        "password",
        lambda g: _r(g, ALNUM, 16),
        kind="password",
        natural="url_query",
        render=_line(
            "jdbc:mysql://db.internal:3306/shop?user=app&password={v}&useSSL=true"
            "&serverTimezone=UTC"
        ),
    ),
    _f(
        "password-human",
        f"{DS}KeywordDetector",
        "DB_PASSWORD",
        _password_human,
        kind="password",
    ),
    _f(
        "password-random-symbols",
        f"{DS}KeywordDetector,{TH}uri",
        "DB_PASSWORD",
        _password_random,
        kind="password",
        natural="url_userinfo",
    ),
    _f(
        "password-url-unsafe",
        f"{DS}KeywordDetector",
        "DATABASE_PASSWORD",
        _password_url_unsafe,
        kind="password",
        natural="url_userinfo",
    ),
    _f(
        "password-percent-encoded",
        f"{TH}uri,{TH}mongodb",
        "MONGO_PASSWORD",
        _password_percent,
        kind="password",
        natural="url_userinfo",
    ),
    _f(
        "password-alnum-generated",
        f"{GL}generic-api-key,{DS}KeywordDetector",
        "MYSQL_PASSWORD",
        lambda g: _r(g, ALNUM, 24),
        kind="password",
        natural="cli",
    ),
    _f(
        "passphrase-words",
        f"{DS}KeywordDetector",
        "smtp_password",
        lambda g: "-".join(g.choice(_WORDS) for _ in range(5)),
        kind="password",
        natural="yaml",
    ),
    _f(
        "passphrase-spaces",
        f"{DS}KeywordDetector",
        "password",
        lambda g: " ".join(g.choice(_WORDS) for _ in range(4)),
        kind="password",
        natural="json",
    ),
    _f(
        "htpasswd-bcrypt",
        "doc:bcrypt $2y$ hash (htpasswd)" + UNVERIFIED,
        "ADMIN_PASSWORD_HASH",
        _bcrypt,
        kind="password",
    ),
    _f(
        "django-secret-key",
        "doc:django SECRET_KEY (get_random_secret_key)" + UNVERIFIED,
        "SECRET_KEY",
        lambda g: "django-insecure-" + _r(g, LOWER_NUM + "!@#$%^&*(-_=+)", 50),
        natural="source_code",
    ),
    _f(
        "rails-secret-key-base",
        f"{GL}generic-api-key",
        "secret_key_base",
        lambda g: _hex(g, 128),
        natural="yaml",
    ),
    _f(
        "laravel-app-key",
        "doc:laravel APP_KEY (base64:…)" + UNVERIFIED,
        "APP_KEY",
        lambda g: "base64:" + _b64(g.randbytes(32)),
    ),
    _f(
        "fernet-key",
        "doc:cryptography Fernet key (urlsafe base64 of 32 bytes)" + UNVERIFIED,
        "FERNET_KEY",
        lambda g: _b64(g.randbytes(32), url=True),
    ),
    _f(
        "hmac-secret-base64",
        f"{DS}KeywordDetector",
        "JWT_SECRET",
        lambda g: _b64_random(g, 48),
    ),
    _f(
        "hex-secret-64",
        f"{GL}generic-api-key",
        "SECRET_KEY",
        lambda g: _hex(g, 64),
    ),
    _f(
        "generic-api-key-32",
        f"{GL}generic-api-key",
        "X-Api-Key",
        lambda g: _r(g, ALNUM, 32),
        natural="name_value_pairs",
        render=_line("X-Api-Key: {v}"),
    ),
    _f(
        "totp-seed",
        "doc:otpauth URI secret (RFC 4648 base32)" + UNVERIFIED,
        "secret",
        lambda g: _r(g, BASE32, 32),
        natural="url_query",
        render=_line("otpauth://totp/Shop:ops@shop.example?secret={v}&issuer=Shop&digits=6"),
    ),
    _f(
        "freemius-secret-key",
        f"{GL}freemius-secret-key",
        "secret_key",
        lambda g: "sk_" + _r(g, ALNUM + "#<>=!?*&$;@+", 29),
        natural="source_code",
        render=lambda v, k, g: (
            "fs_dynamic_init( array(\n    'id'         => '4242',\n"
            f"    'public_key' => 'pk_{_hex(g, 29)}',\n    '{k}' => '{v}',\n) );"
        ),
    ),
    # --- sessions (cookies) ---
    _f(
        "django-sessionid",
        "doc:django session key" + UNVERIFIED,
        "sessionid",
        lambda g: _r(g, LOWER_NUM, 32),
        kind="session",
    ),
    _f(
        "php-sessid",
        "doc:php session id (session.sid_bits_per_character=5)" + UNVERIFIED,
        "PHPSESSID",
        lambda g: _r(g, "0123456789abcdefghijklmnopqrstuv", 26),
        kind="session",
    ),
    _f(
        "jsessionid-tomcat",
        "doc:tomcat JSESSIONID" + UNVERIFIED,
        "JSESSIONID",
        lambda g: _r(g, HEX_UPPER, 32),
        kind="session",
        natural="jsessionid",
    ),
    _f(
        "jsessionid-jetty",
        "doc:jetty JSESSIONID (node0…)" + UNVERIFIED,
        "JSESSIONID",
        lambda g: f"node0{_r(g, LOWER_NUM, 26)}{g.randrange(1, 999)}.node0",
        kind="session",
        natural="jsessionid",
    ),
    _f(
        "aspnet-session-id",
        "doc:ASP.NET_SessionId" + UNVERIFIED,
        "ASP.NET_SessionId",
        lambda g: _r(g, "abcdefghijklmnopqrstuvwxyz012345", 24),
        kind="session",
    ),
    _f(
        "express-connect-sid",
        "doc:express-session connect.sid (signed)" + UNVERIFIED,
        "connect.sid",
        _connect_sid,
        kind="session",
    ),
    _f(
        "rails-session-cookie",
        "doc:rails encrypted cookie store" + UNVERIFIED,
        "_shop_session",
        _rails_cookie,
        kind="session",
    ),
    _f(
        "flask-session-cookie",
        "doc:flask itsdangerous session cookie" + UNVERIFIED,
        "session",
        _flask_cookie,
        kind="session",
    ),
    _f(
        "laravel-session-cookie",
        "doc:laravel encrypted session cookie" + UNVERIFIED,
        "laravel_session",
        _laravel_cookie,
        kind="session",
    ),
    # --- tracehound's own ---
    _f(
        "tracehound-dsn-key",
        "tracehound:TRACEHOUND_SENTRY_KEYS (DSN public key, uuid4 hex)" + UNVERIFIED,
        "TRACEHOUND_SENTRY_KEYS",
        lambda g: _hex(g, 32),
        kind="tracehound",
    ),
    _f(
        "tracehound-ingest-token",
        "tracehound:TRACEHOUND_INGEST_TOKEN (secrets.token_urlsafe(32))" + UNVERIFIED,
        "TRACEHOUND_INGEST_TOKEN",
        lambda g: _r(g, URLSAFE, 43),
        kind="tracehound",
    ),
    # --- private keys (multi-line) ---
    _f(
        "rsa-private-key",
        f"{GL}private-key,{DS}PrivateKeyDetector,{TH}privatekey",
        "TLS_PRIVATE_KEY",
        _pem("RSA PRIVATE KEY", _RSA_PKCS1, 1192),
        kind="pem",
    ),
    _f(
        "pkcs8-private-key",
        f"{GL}private-key,{DS}PrivateKeyDetector,{TH}privatekey",
        "private_key",
        _pem("PRIVATE KEY", _RSA_PKCS8, 1218),
        kind="pem",
    ),
    _f(
        "ec-private-key",
        f"{GL}private-key,{DS}PrivateKeyDetector,{TH}privatekey",
        "EC_PRIVATE_KEY",
        _ec_key,
        kind="pem",
    ),
    _f(
        "openssh-rsa-private-key",
        f"{GL}private-key,{DS}PrivateKeyDetector,{TH}privatekey",
        "SSH_PRIVATE_KEY",
        _openssh(1300),
        kind="pem",
    ),
    _f(
        "openssh-ed25519-private-key",
        f"{GL}private-key,{DS}PrivateKeyDetector,{TH}privatekey",
        "DEPLOY_KEY",
        _openssh(400),
        kind="pem",
    ),
    _f(
        "encrypted-pkcs8-private-key",
        f"{GL}private-key,{TH}privatekey",
        "SIGNING_KEY",
        _pem("ENCRYPTED PRIVATE KEY", _PKCS8_ENCRYPTED, 1312),
        kind="pem",
    ),
    _f(
        "rsa-private-key-legacy-encrypted",
        f"{GL}private-key,{DS}PrivateKeyDetector,{TH}privatekey",
        "SERVER_KEY",
        _legacy_encrypted_rsa,
        kind="pem",
    ),
    _f(
        "dsa-private-key",
        f"{GL}private-key,{DS}PrivateKeyDetector,{TH}privatekey",
        "DSA_KEY",
        _pem("DSA PRIVATE KEY", _DSA, 858),
        kind="pem",
    ),
    _f(
        "pgp-private-key-block",
        f"{GL}private-key,{DS}PrivateKeyDetector",
        "GPG_PRIVATE_KEY",
        _pgp,
        kind="pem",
    ),
    _f(
        "ssh2-encrypted-private-key",
        f"{DS}PrivateKeyDetector",
        "SSH2_KEY",
        _ssh2,
        kind="pem",
    ),
    _f(
        "putty-private-key",
        f"{DS}PrivateKeyDetector",
        "PPK",
        _putty,
        kind="pem",
    ),
    _f(
        "pkcs12-keystore-base64",
        "doc:PKCS #12 keystore, base64 (76-column MIME lines)" + UNVERIFIED,
        "keystore.p12",
        _pkcs12,
        kind="keybody",
    ),
]


# --- contexts ------------------------------------------------------------------------------------

_PASSWORDISH = re.compile(r"(?i)pass|pwd")


def _words_of(key: str) -> list[str]:
    return [w for w in re.split(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])", key) if w]


def _env_name(key: str) -> str:
    return "_".join(w.upper() for w in _words_of(key))


def _snake(key: str) -> str:
    return "_".join(w.lower() for w in _words_of(key))


def _camel(key: str) -> str:
    words = [w.lower() for w in _words_of(key)]
    return words[0] + "".join(w.title() for w in words[1:])


def _pascal(key: str) -> str:
    return "".join(w.title() for w in _words_of(key))


_GENERIC_WORDS = {"db", "api", "app", "secret", "access", "auth", "x", "id", "private", "signing"}


def _provider(key: str) -> str:
    """The service a key names (``STRIPE_SECRET_KEY`` -> ``stripe``), else ``upstream``."""
    words = [w.lower() for w in _words_of(key)]
    return next((w for w in words if w not in _GENERIC_WORDS and len(w) > 2), "upstream")


def _ts(g: random.Random) -> str:
    return f"2026-12-01T10:{g.randrange(60):02d}:{g.randrange(60):02d}Z"


def _shq(v: str) -> str:
    """As a shell command line shows it: bare when safe, else single-quoted."""
    return v if re.fullmatch(r"[A-Za-z0-9_./:=@%+,-]+", v) else "'" + v.replace("'", "'\\''") + "'"


def _yaml_scalar(v: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_./+=-][A-Za-z0-9_./+=@%~!$&*()-]*", v):
        return v
    return json.dumps(v)


def _dotenv(v: str) -> str:
    return v if re.fullmatch(r"[^\s\"'#$`\\]+", v) else '"' + v + '"'


def _block(v: str, indent: str) -> str:
    return "\n".join(indent + line for line in v.split("\n"))


def _ctx_env(v: str, k: str, g: random.Random) -> str:
    name = _env_name(k)
    if "\n" in v:
        return f'{name}="{v}"'
    return g.choice(
        [
            f"{name}={v}",
            f'export {name}="{v}"',
            f"APP_ENV=production\n{name}={_dotenv(v)}\nLOG_LEVEL=info",
            f"    environment:\n      - {name}={v}",
        ]
    )


def _ctx_dotenv_pass(v: str, k: str, g: random.Random) -> str:
    prefix = _env_name(k).split("_")[0]
    name = g.choice(
        ["DB_PASS", "SMTP_PASSWORD", "REDIS_PWD", "MYSQL_ROOT_PASSWORD", f"{prefix}_PASSWORD"]
    )
    return g.choice(
        [
            f"{name}={_dotenv(v)}",
            f"DB_HOST=db.internal\nDB_USER=app\n{name}={_dotenv(v)}\nDB_NAME=shop",
        ]
    )


def _ctx_yaml(v: str, k: str, g: random.Random) -> str:
    field = g.choice(["db_pass", "smtp_pass", "password"]) if _PASSWORDISH.search(k) else _snake(k)
    if "\n" in v:
        return f"tls:\n  enabled: true\n  {field}: |\n{_block(v, '    ')}\n"
    quoted = f'"{v}"' if '"' not in v and "\\" not in v else f"'{v}'"
    return g.choice(
        [
            f"{field}: {_yaml_scalar(v)}",
            f"{field}: {quoted}",
            "database:\n  primary:\n    host: db.internal\n    port: 5432\n    user: app\n"
            f"    {field}: {_yaml_scalar(v)}\n",
            f"spring:\n  mail:\n    host: smtp.shop.example\n    username: orders\n"
            f"    {field}: {quoted}\n",
        ]
    )


def _ctx_json(v: str, k: str, g: random.Random) -> str:
    if _PASSWORDISH.search(k):
        field = g.choice(["password", "pass", "pw", "secret"])
    else:
        field = g.choice(["api_key", "secret", _snake(k), _camel(k)])
    variant = g.randrange(3)
    if variant == 0:
        body = {"host": "db.internal", "port": 5432, "user": "app", field: v}
        return f"{_ts(g)} DEBUG loaded config: {json.dumps(body)}"
    if variant == 1:
        record = {
            "level": "error",
            "msg": "upstream auth failed",
            "request": {"method": "POST", "path": "/v1/sessions", "body": {field: v}},
        }
        return json.dumps(record)
    return json.dumps({"name": "orders", "credentials": {"user": "app", field: v}}, indent=2)


def _ctx_k8s_env(v: str, k: str, g: random.Random) -> str:
    name = "DB_PASSWORD" if _PASSWORDISH.search(k) and g.random() < 0.5 else _env_name(k)
    if g.random() < 0.5:
        env = [{"name": "DB_HOST", "value": "db.internal"}, {"name": name, "value": v}]
        return json.dumps(
            {"name": "orders", "image": "registry.shop.example/orders:1.8.2", "env": env}
        )
    value = f"|\n{_block(v, '            ')}" if "\n" in v else _yaml_scalar(v)
    return (
        "      containers:\n      - name: orders\n"
        "        image: registry.shop.example/orders:1.8.2\n"
        "        env:\n        - name: DB_HOST\n          value: db.internal\n"
        f"        - name: {name}\n          value: {value}\n"
    )


def _ctx_name_value_pairs(v: str, k: str, g: random.Random) -> str:
    if _PASSWORDISH.search(k):
        field, header = g.choice(["Password", "Pwd"]), "X-Db-Password"
    else:
        field = g.choice(["ApiKey", "AccessToken", _pascal(k)])
        header = g.choice(["X-Api-Key", "Private-Token", "X-Auth-Token", "-".join(_words_of(k))])
    variant = g.randrange(4)
    if variant == 0:
        return f"Server=tcp:db.internal,1433;Database=shop;User Id=app;{field}={v};Encrypt=True;"
    if variant == 1:
        return f"{_snake(k)}={v}; expires=3600; scope=orders.read"
    if variant == 2:
        return (
            "> GET /api/v4/projects?per_page=50 HTTP/1.1\n> Host: api.shop.example\n"
            f"> User-Agent: curl/8.5.0\n> Accept: */*\n> {header}: {v}\n>"
        )
    return f'level=error ts={_ts(g)} msg="upstream auth failed" {_snake(k)}={v} status=401'


_DB_URLS = (
    "postgres://app:{v}@db.internal:5432/shop",
    "mysql://svc_orders:{v}@10.0.3.7:3306/orders?charset=utf8mb4",
    "mongodb+srv://app:{v}@cluster0.ab12c.mongodb.net/shop?retryWrites=true&w=majority",
    "redis://:{v}@cache.internal:6379/0",
    "amqp://shop:{v}@rabbitmq:5672/%2F",
)
_DB_WRAP = (
    "{u}",
    "DATABASE_URL={u}",
    "sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) connection to {u} failed: "
    "FATAL:  password authentication failed for user",
    "INFO  [alembic.runtime.migration] Context impl PostgresqlImpl; connecting to {u}",
)
_TOKEN_URLS = (
    "https://x-access-token:{v}@github.com/shop/orders.git",
    "https://oauth2:{v}@gitlab.shop.example/shop/orders.git",
    "https://ci-bot:{v}@registry.shop.example/v2/orders/manifests/1.8.2",
    "https://api:{v}@hooks.shop.example/deploy",
)
_TOKEN_WRAP = (
    "{u}",
    "fatal: unable to access '{u}/': The requested URL returned error: 403",
    "remote: Invalid username or token.\nfatal: Authentication failed for '{u}/'",
    "+ git clone --depth 1 {u} /build/src",
)


def _ctx_url_userinfo(v: str, k: str, g: random.Random) -> str:
    if _PASSWORDISH.search(k):
        url, wrap = g.choice(_DB_URLS), g.choice(_DB_WRAP)
    else:
        url, wrap = g.choice(_TOKEN_URLS), g.choice(_TOKEN_WRAP)
    return wrap.replace("{u}", url.replace("{v}", v))


def _param(k: str, g: random.Random) -> str:
    if _PASSWORDISH.search(k):
        return "password"
    return g.choice(["access_token", "api_key", "token", "key", "client_secret"])


def _ctx_url_query(v: str, k: str, g: random.Random) -> str:
    p, q = _param(k, g), quote(v, safe="-._~")
    return g.choice(
        [
            f'10.0.4.19 - - [01/Dec/2026:10:00:03 +0000] "GET /v1/orders?{p}={q}&page=2 HTTP/1.1"'
            ' 401 53 "-" "python-requests/2.32.3"',
            "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: "
            f"https://api.shop.example/v2/export?format=csv&{p}={q}",
            f"{_ts(g)} WARN  ws: reconnecting to wss://stream.shop.example/socket?{p}={q}&v=2",
            f"GET https://maps.googleapis.com/maps/api/geocode/json?address=Berlin&{p}={q} -> 403",
        ]
    )


def _ctx_url_encoded(v: str, k: str, g: random.Random) -> str:
    p, q = _param(k, g), quote(v, safe="-._~")
    return g.choice(
        [
            "GET /oauth/callback?redirect_uri=https%3A%2F%2Fshop.example%2Fcb%3F"
            f"{p}%3D{q}%26state%3D{_hex(g, 8)} HTTP/1.1",
            f"{_ts(g)} WARN  redirect to /login?next=%2Faccount%2Fexport%3F{p}%3D{q}%26format"
            "%3Dcsv blocked",
            f"{_ts(g)} ERROR upstream GET /proxy?url=https%3A%2F%2Fapi.shop.example%2Fv1%2Fitems%3F"
            f"{p}%3D{q} failed: 502 Bad Gateway",
        ]
    )


def _ctx_cli(v: str, k: str, g: random.Random) -> str:
    s = _shq(v)
    if _PASSWORDISH.search(k):
        cmd = g.choice(
            [
                f"+ mysql -h db.internal -u app -p{s} shop < migrations/0042.sql",
                f"$ /usr/local/bin/pg_backup --host db.internal --user app --password {s} --out "
                "/backups/shop.sql.gz",
                "root      4242  0.3  2.1 java -jar /srv/orders.jar "
                f"--spring.datasource.password={s}",
                f"+ docker login registry.shop.example -u ci-bot --password {s}",
            ]
        )
        if g.random() < 0.25:
            argv = ["mysqldump", "-h", "db.internal", "-u", "app", f"-p{v}", "shop"]
            cmd = (
                f"subprocess.CalledProcessError: Command '{argv!r}' returned non-zero exit "
                "status 2."
            )
        return cmd
    return g.choice(
        [
            f"+ ./scripts/deploy.sh --token {s} --env prod",
            f"+ kubectl --token={s} -n shop rollout restart deployment/orders",
            f'$ curl -sS -H "Authorization: Bearer {v}" https://api.shop.example/v1/orders',
            f"+ terraform apply -auto-approve -var api_key={s}",
            f"Running command: orders-cli sync --api-key {s} --since 2026-11-30",
        ]
    )


_SESSION_NAME = re.compile(r"(?i)sess|sid")


def _cookie_name(k: str, g: random.Random) -> str:
    if _SESSION_NAME.search(k):
        return k
    return g.choice(["session", "access_token", "auth_token", "remember_token", "id_token"])


def _ctx_cookie_header(v: str, k: str, g: random.Random) -> str:
    name, csrf = _cookie_name(k, g), _r(g, ALNUM, 32)
    return g.choice(
        [
            f"Cookie: {name}={v}; csrftoken={csrf}; _ga=GA1.2.{_digits(g, 9)}.{_digits(g, 10)}",
            f"Set-Cookie: {name}={v}; Path=/; Expires=Wed, 31 Dec 2026 10:00:00 GMT; HttpOnly; "
            "Secure; SameSite=Lax",
            f"> GET /cart HTTP/1.1\n> Host: shop.example\n> Cookie: theme=dark; {name}={v}\n>",
        ]
    )


def _ctx_cookie_python_dict(v: str, k: str, g: random.Random) -> str:
    name, csrf = _cookie_name(k, g), _r(g, ALNUM, 32)
    cookies = {name: v, "csrftoken": csrf}
    return g.choice(
        [
            f"{_ts(g)} DEBUG request.COOKIES={cookies!r}",
            f"    response = session.get(url, cookies={cookies!r}, timeout=10)",
            f"<RequestsCookieJar[<Cookie csrftoken={csrf} for shop.example/>, "
            f"<Cookie {name}={v} for shop.example/>]>",
        ]
    )


def _ctx_cookie_json(v: str, k: str, g: random.Random) -> str:
    name = _cookie_name(k, g)
    if g.random() < 0.5:
        return json.dumps({name: v})
    record = {"ts": _ts(g), "level": "warn", "msg": "session rejected", "cookies": {name: v}}
    return json.dumps(record)


def _ctx_jsessionid(v: str, k: str, g: random.Random) -> str:
    return g.choice(
        [
            f"GET /shop/cart;jsessionid={v}?item=3 HTTP/1.1",
            f"Location: https://shop.example/checkout;jsessionid={v}?step=2",
            f'10.0.4.19 - - [01/Dec/2026:10:00:03 +0000] "GET /app/login.do;jsessionid={v}?error=1'
            ' HTTP/1.1" 302 0',
        ]
    )


def _ctx_bytes_literal(v: str, k: str, g: random.Random) -> str:
    variant = 3 if "\n" in v else g.randrange(4)
    if variant == 0:
        request = (
            f"POST /v1/charges HTTP/1.1\r\nHost: api.{_provider(k)}.com\r\nAccept-Encoding: "
            f"identity\r\nAuthorization: Bearer {v}\r\nContent-Length: 42\r\n\r\n"
        )
        return f"send: {request.encode()!r}"
    if variant == 1:
        return f'    headers = [b"Authorization: Bearer {v}", b"Accept: application/json"]'
    if variant == 2:
        resp = f"*2\r\n$4\r\nAUTH\r\n${len(v.encode())}\r\n{v}\r\n"
        return f"{_ts(g)} DEBUG redis.connection: send {resp.encode()!r}"
    return f"{_ts(g)} DEBUG signing payload with key={v.encode()!r}"


def _ctx_struct_dump(v: str, k: str, g: random.Random) -> str:
    snake = "password" if _PASSWORDISH.search(k) else _snake(k)
    camel, pascal = _camel(snake), _pascal(snake)
    dump = g.choice(
        [
            f"Config(user='app', {snake}={v!r}, host='db.internal', port=5432)",
            f"&{{User:app {pascal}:{v} Host:db.internal Port:5432 Timeout:30s}}",
            f"DataSourceConfig{{url='jdbc:postgresql://db/shop', user='app', {camel}='{v}'}}",
            f"ClientSettings(baseUrl=https://api.shop.example, {camel}={v}, timeoutMs=3000)",
            f'Settings {{ user: "app", {snake}: "{v}", pool_size: 8 }}',
        ]
    )
    return f"{_ts(g)} ERROR could not connect with {dump}"


def _ctx_positional_stack_arg(v: str, k: str, g: random.Random) -> str:
    prov = _provider(k)
    cls, sid = prov.title() + "Client", "AC" + _hex(g, 32)
    variant = g.randrange(3)
    if variant == 2 and len(v) <= 15 and "'" not in v:
        return (
            "PHP Fatal error:  Uncaught PDOException: SQLSTATE[HY000] [1045] Access denied\n"
            "Stack trace:\n"
            f"#0 /var/www/shop/src/Infra/Db.php(42): PDO->__construct('mysql:host=db;dbn...', "
            f"'app', '{v}')\n#1 /var/www/shop/src/Kernel.php(17): App\\Infra\\Db->connect()\n"
            "#2 {main}\n  thrown in /var/www/shop/src/Infra/Db.php on line 42"
        )
    if variant == 1:
        return (
            f"{_ts(g)} ERROR [main] c.s.notify.Bootstrap - client init failed\n"
            f"\tat com.shop.notify.{cls}.init({cls}.java:42) args=[{sid}, {v}]\n"
            "\tat com.shop.notify.Bootstrap.start(Bootstrap.java:18)"
        )
    quote_char = "'" if '"' in v else '"'
    return (
        "Traceback (most recent call last):\n"
        f'  File "/srv/app/notify/{prov}_client.py", line 31, in connect\n'
        f'    client = {cls}("{sid}", {quote_char}{v}{quote_char})\n'
        f'  File "/srv/app/.venv/lib/python3.11/site-packages/{prov}/client.py", line 88, in '
        "__init__\n"
        '    raise AuthenticationError("invalid credentials")\n'
        f"{prov}.errors.AuthenticationError: invalid credentials"
    )


def _ctx_labelled_prose(v: str, k: str, g: random.Random) -> str:
    prov = _provider(k)
    return g.choice(
        [
            f"{prov.title()} API key {v} rejected",
            f"the {prov} key {v} is invalid",
            f"{_ts(g)} WARN  {prov} token {v} expired, refreshing",
            f"could not authenticate with {prov} using {v}",
            f"{prov} credentials {v} were revoked by an administrator",
        ]
    )


def _ctx_tracehound_dsn(v: str, k: str, g: random.Random) -> str:
    project = g.randrange(1, 9)
    return g.choice(
        [
            f"SENTRY_DSN=http://{v}@127.0.0.1:8090/{project}",
            f'sentry_sdk.init(dsn="http://{v}@tracehound:8090/{project}", traces_sample_rate=0.0)',
            f"X-Sentry-Auth: Sentry sentry_key={v}, sentry_version=7, "
            "sentry_client=sentry.python/2.19.2",
            f"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1:8090\r\nAuthorization: Bearer {v}\r\n"
            "Content-Type: application/x-ndjson",
            f'curl -sS -X POST http://127.0.0.1:8090/v1/events -H "Authorization: Bearer {v}" '
            "--data-binary @events.ndjson",
            f'127.0.0.1 - "POST /api/{project}/store/?sentry_key={v}&sentry_version=7 '
            'HTTP/1.1" 200',
        ]
    )


def _ctx_pem_block(v: str, k: str, g: random.Random) -> str:
    return g.choice(
        [
            f"$ cat /etc/ssl/private/shop.key\n{v}\n",
            f"{_ts(g)} ERROR tls: failed to load key pair from /etc/shop/tls.key:\n{v}",
            f"# {_snake(k)} (rotated 2026-11-30)\n{v}\n",
        ]
    )


def _body_lines(v: str) -> list[str]:
    return [ln for ln in v.split("\n") if re.fullmatch(r"[A-Za-z0-9+/]{4,}={0,2}", ln)]


def _ctx_base64_key_body(v: str, k: str, g: random.Random) -> str:
    body = "\n".join(_body_lines(v))
    if g.random() < 0.5:
        return f"tls:\n  crt: /etc/shop/tls.crt\n  key: |\n{_block(body, '    ')}\n"
    return f"signing:\n  enabled: true\n  {_camel(k)}: |-\n{_block(body, '    ')}\n"


def _ctx_log_line(v: str, k: str, g: random.Random) -> str:
    ts = _ts(g)
    if "\n" in v:
        return f"{ts} ERROR [tls] could not parse private key:\n{v}"
    return g.choice(
        [
            f"{ts} ERROR [payments] request to {_provider(k)} failed: 401 Unauthorized "
            f"(credential {v})",
            f"{ts} WARN  auth: rejecting token {v} for user 1042: expired",
            f"{ts} ERROR [worker-3] {BARE}{v}",
            f"{ts} INFO  bootstrap: loaded {_snake(k)} {v} from vault",
            f"{ts} ERROR [http-nio-8080-exec-4] c.s.orders.Client - call failed, key {v}",
        ]
    )


def _ctx_xml_config(v: str, k: str, g: random.Random) -> str:
    attr = quoteattr(v)
    return g.choice(
        [
            f"<add key={quoteattr(_pascal(k))} value={attr} />",
            "<server>\n  <id>shop-releases</id>\n  <username>ci</username>\n"
            f"  <password>{escape(v)}</password>\n</server>",
            f'<property name="{_camel(k)}" value={attr}/>',
            '<add name="ShopDb" connectionString='
            + quoteattr(f"Server=db;Database=shop;User Id=app;Password={v};")
            + ' providerName="System.Data.SqlClient" />',
        ]
    )


def _ctx_source_code(v: str, k: str, g: random.Random) -> str:
    env, camel = _env_name(k), _camel(k)
    q = "'" if '"' in v else '"'
    return g.choice(
        [
            f"{env} = {q}{v}{q}  # TODO: move to vault",
            f"const {camel} = {q}{v}{q};",
            f"    private static final String {env} = {q}{v}{q};",
            f"\t{camel} := {q}{v}{q}",
            f"{_snake(k)} = {q}{v}{q}",
        ]
    )


CONTEXTS: dict[str, Render] = {
    "env": _ctx_env,
    "dotenv_pass": _ctx_dotenv_pass,
    "yaml": _ctx_yaml,
    "json": _ctx_json,
    "k8s_env": _ctx_k8s_env,
    "name_value_pairs": _ctx_name_value_pairs,
    "url_userinfo": _ctx_url_userinfo,
    "url_query": _ctx_url_query,
    "url_encoded": _ctx_url_encoded,
    "cli": _ctx_cli,
    "cookie_header": _ctx_cookie_header,
    "cookie_python_dict": _ctx_cookie_python_dict,
    "cookie_json": _ctx_cookie_json,
    "jsessionid": _ctx_jsessionid,
    "bytes_literal": _ctx_bytes_literal,
    "struct_dump": _ctx_struct_dump,
    "positional_stack_arg": _ctx_positional_stack_arg,
    "labelled_prose": _ctx_labelled_prose,
    "tracehound_dsn": _ctx_tracehound_dsn,
    "pem_block": _ctx_pem_block,
    "base64_key_body": _ctx_base64_key_body,
    "log_line": _ctx_log_line,
    "xml_config": _ctx_xml_config,
    "source_code": _ctx_source_code,
}

# Which formats a context applies to: the kinds it takes (None: any) and a test on the value.
_ANY_KIND = None
_FLAT = frozenset({"token", "password", "session", "url", "pii", "tracehound"})
_SECRETS = frozenset({"token", "password", "tracehound"})


def _single(v: str) -> bool:
    return "\n" not in v


def _no_space(v: str) -> bool:
    return not any(c.isspace() for c in v)


def _url_safe(v: str) -> bool:
    return quote(v, safe="-._~") == v


def _cookie_safe(v: str) -> bool:
    return re.fullmatch(r"[!#$%&'()*+\-./0-9:<=>?@A-Z\[\]^_`a-z{|}~]+", v) is not None


def _long_body(v: str) -> bool:
    return len(_body_lines(v)) >= 20


def _anything(v: str) -> bool:
    return True


_FITS: dict[str, tuple[frozenset[str] | None, Callable[[str], bool]]] = {
    "env": (_ANY_KIND, _anything),
    "dotenv_pass": (_SECRETS, _single),
    "yaml": (_ANY_KIND, _anything),
    "json": (_ANY_KIND, _anything),
    "k8s_env": (_ANY_KIND, _anything),
    "name_value_pairs": (_FLAT, _single),
    "url_userinfo": (_SECRETS, _no_space),
    "url_query": (_SECRETS | {"session"}, _url_safe),
    "url_encoded": (_SECRETS | {"session"}, _url_safe),
    "cli": (_FLAT, _single),
    "cookie_header": (frozenset({"session", "token", "tracehound"}), _cookie_safe),
    "cookie_python_dict": (frozenset({"session", "token", "tracehound"}), _cookie_safe),
    "cookie_json": (frozenset({"session", "token", "tracehound"}), _cookie_safe),
    "jsessionid": (frozenset({"session", "token"}), _url_safe),
    "bytes_literal": (_ANY_KIND, _anything),
    "struct_dump": (_FLAT | {"pem"}, _anything),
    "positional_stack_arg": (_FLAT, _single),
    "labelled_prose": (_FLAT, _no_space),
    "tracehound_dsn": (frozenset({"tracehound", "token"}), _url_safe),
    "pem_block": (frozenset({"pem"}), _anything),
    "base64_key_body": (frozenset({"pem", "keybody"}), _long_body),
    "log_line": (_ANY_KIND, _anything),
    "xml_config": (_FLAT, _single),
    "source_code": (_FLAT, _single),
}

# Formats each context always takes first (the cases it exists for), then a rotating subset.
_FEATURED: dict[str, tuple[str, ...]] = {
    "url_userinfo": ("password-url-unsafe", "password-percent-encoded", "github-pat", "gitlab-pat"),
    "dotenv_pass": ("password-human", "password-random-symbols", "passphrase-words"),
    "json": ("pkcs8-private-key", "passphrase-words"),
    "yaml": ("rsa-private-key", "password-url-unsafe"),
    "env": ("ec-private-key",),
    "cookie_header": ("django-sessionid", "express-connect-sid", "rails-session-cookie", "jwt"),
    "cookie_python_dict": ("django-sessionid", "flask-session-cookie", "php-sessid"),
    "cookie_json": ("django-sessionid", "laravel-session-cookie", "aspnet-session-id"),
    "jsessionid": ("php-sessid", "django-sessionid"),
    "bytes_literal": ("rsa-private-key", "bearer-opaque-token", "password-human"),
    "struct_dump": ("password-random-symbols", "openssh-ed25519-private-key"),
    "labelled_prose": ("heroku-api-key", "stripe-secret-key", "heroku-api-key-v2"),
    "positional_stack_arg": ("twilio-auth-token", "password-human", "stripe-restricted-key"),
    "cli": ("password-human", "password-random-symbols", "github-pat"),
    "tracehound_dsn": ("tracehound-dsn-key", "tracehound-ingest-token"),
    "log_line": ("openssh-rsa-private-key", "jwt"),
}

PER_CONTEXT = 12  # samples per context beyond the natural ones

# Formats whose value carries no sign of what it is: every public rule that finds them anchors on
# a name beside the value (gitleaks' ``[\w.-]{0,50}?(?:travis)…`` keyword prefix, trufflehog's
# keyword prefilters, detect-secrets' KeywordDetector) or on a file's structure. Written bare,
# with no name ("unexpected value in config reload: <value>"), no tool can tell them from an
# identifier; every other context names them.
KEYWORD_ANCHORED = frozenset(
    {
        "aws-secret-access-key",
        "gcp-service-account-key-id",
        "azure-storage-account-key",
        "azure-sas-signature",
        "azure-devops-pat",
        "azure-service-bus-key",
        "azure-container-registry-password",
        "azure-redis-access-key",
        "alibaba-secret-key",
        "ibm-cloud-iam-key",
        "ibm-cos-hmac-secret",
        "softlayer-api-key",
        "cloudant-password",
        "cloudflare-api-token",
        "cloudflare-global-api-key",
        "fastly-api-token",
        "heroku-api-key",
        "vercel-token",
        "kubernetes-secret-data",
        "docker-config-auth",
        "gitlab-session-cookie",
        "travis-ci-token",
        "kraken-private-key",
        "twilio-auth-token",
        "mailgun-signing-key",
        "datadog-api-key",
        "datadog-app-key",
        "sentry-dsn-key",
        "pagerduty-api-key",
        "sumologic-access-id",
        "sumologic-access-key",
        "okta-api-token",
        "npm-legacy-token",
        "nuget-config-password",
        "jfrog-identity-token",
        "cohere-api-key",
        "basic-auth-credentials",
        "bearer-opaque-token",
        "elasticsearch-api-key",
        "curl-user-password",
        "jdbc-url-password",
        "password-human",
        "password-random-symbols",
        "password-url-unsafe",
        "password-percent-encoded",
        "password-alnum-generated",
        "passphrase-words",
        "passphrase-spaces",
        "rails-secret-key-base",
        "fernet-key",
        "hmac-secret-base64",
        "hex-secret-64",
        "generic-api-key-32",
        "totp-seed",
        "freemius-secret-key",
        "django-sessionid",
        "php-sessid",
        "jsessionid-tomcat",
        "aspnet-session-id",
        "rails-session-cookie",
        "tracehound-dsn-key",
        "tracehound-ingest-token",
    }
)
BARE = "unexpected value in config reload: "  # the log-line template that names nothing


def unnamed(sample: Sample) -> bool:
    """A keyword-anchored format written bare: the one case no rule can catch."""
    return sample.format in KEYWORD_ANCHORED and BARE + sample.value in sample.text


def _natural(f: Format) -> tuple[str, Render]:
    context, render = _NATURAL.get(f.name, (None, None))
    if context is None:
        kind = _KIND[f.name]
        context = {
            "pem": "pem_block",
            "keybody": "base64_key_body",
            "session": "cookie_header",
            "tracehound": "tracehound_dsn",
            "password": "dotenv_pass",
        }.get(kind, "env")
    return context, render or CONTEXTS[context]


def _secret_part(value: str) -> str:
    """What a test searches for: the value, or for a multi-line key a middle line of its body."""
    if "\n" not in value:
        return value
    lines = value.split("\n")
    if any(ln.startswith("Private-Lines:") for ln in lines):  # PuTTY: the private lines only
        lines = lines[next(i for i, ln in enumerate(lines) if ln.startswith("Private-Lines")) :]
    body = [ln for ln in lines if re.fullmatch(r"[A-Za-z0-9+/]{20,}={0,2}", ln)]
    return body[len(body) // 2]


def _fits(context: str, f: Format, value: str) -> bool:
    kinds, test = _FITS[context]
    return (kinds is None or _KIND[f.name] in kinds) and test(value)


def corpus(seed: int = 7, *, contexts: Iterable[str] | None = None) -> list[Sample]:
    """Every format once in its natural context, then each context applied to its featured
    formats and a rotating subset of the others that fit it (``PER_CONTEXT`` samples), all
    deterministic for ``seed``. ``contexts``: keep only samples of these contexts."""
    g = random.Random(seed)
    samples: list[Sample] = []
    seen: set[tuple[str, str]] = set()
    for f in FORMATS:
        context, render = _natural(f)
        value = f.make(g)
        text = render(value, f.key, g)
        part = _secret_part(value)
        if part not in text:
            raise AssertionError(f"{f.name}: natural text lost its value")
        samples.append(Sample(f.name, context, text, part))
        seen.add((f.name, context))
    by_name = {f.name: f for f in FORMATS}
    for i, (context, render) in enumerate(CONTEXTS.items()):
        start = (i * 37 + seed) % len(FORMATS)
        rotated = FORMATS[start:] + FORMATS[:start]
        featured = [by_name[n] for n in _FEATURED.get(context, ())]
        count = 0
        for f in featured + [f for f in rotated if f not in featured]:
            if count >= PER_CONTEXT:
                break
            if (f.name, context) in seen:
                continue
            value = f.make(g)
            if not _fits(context, f, value):
                continue
            text, part = render(value, f.key, g), _secret_part(value)
            if part not in text:
                continue
            samples.append(Sample(f.name, context, text, part))
            seen.add((f.name, context))
            count += 1
    wanted = None if contexts is None else set(contexts)
    return [s for s in samples if wanted is None or s.context in wanted]


# --- clean texts ---------------------------------------------------------------------------------

_DATA = Path(__file__).resolve().parent
_CLEAN_FILES = (
    "traces/python.log",
    "traces/java.log",
    "traces/go.log",
    "traces/node.log",
    "traces/kotlin.log",
    "traces/json.log",
    "sample-error.txt",
    "sample-service/shop-api.log",
    "sample-service/shopapp/services/pricing.py",
    "sample-service/shopapp/services/order_service.py",
    "sample-service/shopapp/services/inventory.py",
    "sample-service/shopapp/api/handlers.py",
    "sample-service/shopapp/repositories/order_repository.py",
    "sample-service/shopapp/utils/money.py",
)


def _noise_texts(g: random.Random) -> list[str]:
    """Secret-free traces, logs and code whose identifiers look random: request ids, digests,
    commit hashes, base64 of public data, object ids, hash codes, versions and paths."""
    ts, sha, short = _ts(g), _hex(g, 40), _hex(g, 7)
    rid, trace, span = _uuid(g), _hex(g, 32), _hex(g, 16)
    digest, layer = _hex(g, 64), _hex(g, 64)
    cursor = _b64(json.dumps({"page": 3, "sort": "created_at", "after": 4711}))
    state = _b64(json.dumps({"return_to": "/account/orders", "locale": "de-DE"}), url=True)
    go_sum = _b64(g.randbytes(32))
    integrity = _b64(g.randbytes(64))
    amz_id2 = _b64(g.randbytes(57))
    oid = _hex(g, 24)
    ulid = _r(g, "0123456789ABCDEFGHJKMNPQRSTVWXYZ", 26)
    return [
        f"{ts} INFO  [orders] request_id={rid} trace_id={trace} span_id={span} "
        "POST /v1/orders 201 84ms",
        f"traceparent: 00-{trace}-{span}-01\ntracestate: shop=t61rcWkgMzE",
        f"commit {sha}\nMerge: {short} {_hex(g, 7)}\nAuthor: CI Bot <ci>\n"
        "Date:   Tue Dec 1 10:00:00 2026 +0000\n\n    Merge branch 'fix/discount-rounding'",
        f"diff --git a/shopapp/services/pricing.py b/shopapp/services/pricing.py\n"
        f"index {short}..{_hex(g, 7)} 100644\n--- a/shopapp/services/pricing.py\n"
        "+++ b/shopapp/services/pricing.py\n@@ -88,7 +88,9 @@ class PricingEngine:",
        f"#7 [build 3/6] COPY requirements.txt .\n#7 sha256:{layer} 1.21kB / 1.21kB done\n"
        f"#8 exporting to image\n#8 writing image sha256:{digest} done\n"
        "#8 naming to registry.shop.example/orders:1.8.2 done",
        f"Digest: sha256:{digest}\nStatus: Downloaded newer image for python:3.11-slim",
        f"SHA256 (orders-1.8.2.tar.gz) = {digest}\nSHA256 (orders-1.8.2-py3-none-any.whl) = "
        f"{_hex(g, 64)}",
        f"orders==1.8.2 \\\n    --hash=sha256:{_hex(g, 64)} \\\n    --hash=sha256:{_hex(g, 64)}",
        f'"node_modules/express": {{\n  "version": "4.21.2",\n  "resolved": '
        f'"https://registry.npmjs.org/express/-/express-4.21.2.tgz",\n  "integrity": '
        f'"sha512-{integrity}"\n}}',
        f"github.com/jackc/pgx/v5 v5.7.1 h1:{go_sum}\ngithub.com/jackc/pgx/v5 v5.7.1/go.mod "
        f"h1:{_b64(g.randbytes(32))}",
        f"{ts} INFO  GET /v1/orders?limit=50&cursor={quote(cursor)} 200 12ms",
        f'{{"level": "info", "msg": "login redirect", "state": "{state}", "ts": "{ts}"}}',
        f'x-amz-request-id: {_r(g, HEX_UPPER, 16)}\nx-amz-id-2: {amz_id2}\nETag: "{_hex(g, 32)}"',
        f"{ts} INFO  k8s: pod orders-7d9f8b6c4-x2v9q uid={_uuid(g)} resourceVersion=48213377 "
        "phase=Running node=ip-10-0-3-7.eu-west-1.compute.internal",
        '"main" #1 prio=5 os_prio=0 cpu=812.44ms elapsed=3.91s tid=0x00007f1c4002a800 '
        "nid=0x1 waiting on condition\n   java.lang.Thread.State: TIMED_WAITING (sleeping)\n"
        "\tat java.lang.Thread.sleep(java.base@17.0.9/Native Method)\n"
        "\t- locked <0x000000070ff2a3c8> (a java.util.concurrent.ThreadPoolExecutor$Worker)\n"
        "\tat com.shop.orders.OrderService$Repo@5b6f7412.close(OrderService.java:19)",
        "java.util.concurrent.RejectedExecutionException: Task com.shop.orders.Job@1a2b3c4d "
        "rejected from java.util.concurrent.ThreadPoolExecutor@7e0ea639[Running, pool size = 8, "
        "active threads = 8, queued tasks = 100, completed tasks = 48213]",
        "\tat com.shop.orders.OrderController$$SpringCGLIB$$0.create(<generated>)\n"
        "\tat com.shop.orders.OrderService$$Lambda/0x00007f1c40123456.apply(Unknown Source)",
        f"<shopapp.models.Order object at 0x7f3a2c1e8e28> order_id=ord_{_hex(g, 12)} "
        f"request_id={_uuid(g)}",
        '  File "/srv/app/.venv/lib/python3.11/site-packages/sqlalchemy/engine/base.py", '
        "line 1967, in _exec_single_context\n    self.dialect.do_execute(\n"
        "sqlalchemy.exc.IntegrityError: (psycopg2.errors.UniqueViolation) duplicate key value "
        f'violates unique constraint "orders_pkey"\nDETAIL:  Key (id)=({_uuid(g)}) already '
        "exists.",
        f"{ts} INFO  celery.worker.strategy Task shop.tasks.send_receipt[{_uuid(g)}] received\n"
        f"{ts} INFO  celery.app.trace Task shop.tasks.send_receipt[{_uuid(g)}] succeeded in "
        "0.412s: None",
        f"{ts} INFO  sidekiq jid={_hex(g, 24)} class=ReceiptJob queue=default elapsed=0.218 done",
        f'{{"_id": {{"$oid": "{oid}"}}, "order": 4711, "status": "paid", "ulid": "{ulid}"}}',
        f"{ts} INFO  kafka: consumer group orders-sync clientId=consumer-orders-sync-1 "
        f"memberId=consumer-orders-sync-1-{_uuid(g)} assigned partitions [orders-0, orders-1]",
        "   at Shop.Orders.PricingService.Allocate(Order order) in /src/Shop.Orders/"
        "PricingService.cs:line 91\n--- End of stack trace from previous location ---\n"
        f"   at Shop.Orders.Api.OrdersController.Create() RequestId: 0HN7{_r(g, UPPER_NUM, 8)}"
        f":00000002, ActivityId: {_uuid(g)}",
        "/srv/app/lib/shop/pricing.rb:91:in `allocate_discount': divided by 0 "
        "(ZeroDivisionError)\n\tfrom /srv/app/lib/shop/pricing.rb:80:in `apply_coupon'\n"
        f'Completed 500 Internal Server Error in 38ms (ActiveRecord: 4.1ms) request_id="{rid}"',
        f"  vite v5.4.11 building for production...\n  dist/assets/index-{_r(g, URLSAFE, 8)}"
        f".js   142.31 kB | gzip: 45.90 kB\n  dist/assets/index-{_r(g, URLSAFE, 8)}.css   "
        "8.02 kB | gzip: 2.41 kB",
        '  # aws_iam_role.orders_task will be updated in-place\n  ~ resource "aws_iam_role" '
        '"orders_task" {\n        arn = "arn:aws:iam::123456789012:role/orders-task"\n'
        f'        id  = "orders-task"\n        unique_id = "AROA{_r(g, BASE32, 17)}"\n    }}',
        f"{ts} INFO  ec2: launched i-0{_hex(g, 16)} from ami-0{_hex(g, 16)} in subnet-"
        f"0{_hex(g, 16)} (sg-0{_hex(g, 16)})",
        f"orders-api 1.8.2+build.20261201.{short} (go1.23.4 linux/amd64) starting pid=7",
        f"GET /static/js/main.{_hex(g, 8)}.chunk.js 200 0.4ms\nGET /static/css/main."
        f"{_hex(g, 8)}.css 200 0.3ms",
        "    password = settings.DB_PASSWORD\n    token = get_token(client_id)\n"
        '    api_key = os.environ["SHOP_API_KEY"]\n    secret = None',
        "db:\n  password: ${DB_PASSWORD}\n  token: {{ .Values.orders.token }}\n"
        '  api_key: "***"\n  secret: "%(secret)s"',
        "        env:\n        - name: DB_PASSWORD\n          valueFrom:\n            "
        "secretKeyRef:\n              name: orders-db\n              key: password",
        f"{ts} WARN  auth: invalid token: expired (user 1042)\n{ts} INFO  password reset "
        "requested for user 1042\n"
        f"{ts} WARN  Bearer authentication failed: missing header",
        '{"error": "invalid_grant", "error_description": "Token has been expired or revoked."}',
        "def verify_signature(payload: bytes, header: str, secret: bytes) -> bool:\n"
        '    expected = hmac.new(secret, payload, "sha256").hexdigest()\n'
        "    return hmac.compare_digest(expected, header)",
        f"PYTHON_VERSION=3.11.11\nPYTHON_SHA256={_hex(g, 64)}\nHOSTNAME=orders-7d9f8b6c4-x2v9q\n"
        "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin\nLANG=C.UTF-8",
        f"{ts} INFO  payments: captured pi_{_r(g, ALNUM, 24)} for cus_{_r(g, ALNUM, 14)} "
        f"amount=4999 currency=eur charge=ch_{_r(g, ALNUM, 24)}",
        f"{ts} DEBUG gc: [GC (Allocation Failure) [PSYoungGen: 65536K->10744K(76288K)] "
        "65536K->10760K(251392K), 0.0123456 secs]",
        'Exception in thread "DefaultDispatcher-worker-1" '
        "java.lang.IllegalStateException: Order 42 has no lines\n"
        '\tSuppressed: [CoroutineId(7), "coroutine#7":StandaloneCoroutine{Cancelling}@5b6f7412]',
        f"{ts} ERROR nginx: *4242 upstream timed out (110: Connection timed out) while reading "
        "response header from upstream, client: 10.0.4.19, server: shop.example, request: "
        '"GET /v1/orders/17 HTTP/1.1", upstream: "http://10.0.3.7:8080/v1/orders/17"',
        f"Successfully installed orders-1.8.2 pydantic-2.10.3 pydantic_core-2.27.1 "
        f"sqlalchemy-2.0.36\nCreated wheel for orders: filename=orders-1.8.2-py3-none-any.whl "
        f"size=18233 sha256={_hex(g, 64)}",
        f"PYTHON_VERSION=3.11.11\nGPG_KEY={_r(g, HEX_UPPER, 40)}\nPYTHON_PIP_VERSION=24.0\n"
        f"PYTHON_GET_PIP_SHA256={_hex(g, 64)}",
        f"{ts} INFO  s3: put_object Bucket=shop-exports Key=orders/2026/11/30/export-4711.csv "
        f'ETag="{_hex(g, 32)}" x-amz-content-sha256={_hex(g, 64)} Content-MD5='
        f"{_b64(g.randbytes(16))}",
        f"{ts} INFO  payments: POST /v1/refunds idempotency_key={_uuid(g)} "
        f"api_version=2024-06-20 public_key=pk_live_{_r(g, ALNUM, 24)} status=200",
        f'{{"kid": "{_hex(g, 40)}", "alg": "RS256", "use": "sig", "kty": "RSA", "e": "AQAB"}}',
        f"{ts} DEBUG cache: miss cache_key=orders:v3:customer:1042:cart ttl=300 "
        f'etag=W/"{_hex(g, 16)}"',
        f'{{"items": [], "nextPageToken": "{_b64(json.dumps({"offset": 50, "q": "status:paid"}))}"'
        ', "kind": "shop#orderList"}',
        f"{ts} INFO  llm: model=llama3.1:8b max_tokens=4096 prompt_tokens=1532 "
        "completion_tokens=412 token_type=Bearer auth=ok",
        f'{ts} INFO  sentry: captured event_id={_hex(g, 32)} release="orders@1.8.2+{short}" '
        "environment=production",
        f"{ts} INFO  kms: decrypt key_id=alias/orders-data grant_token_count=0 "
        f"request_id={_uuid(g)} signature_version=v4",
        f"{ts} INFO  training: run started seed=42 salt_rounds=12 dataset=orders-2026-11 "
        f"checkpoint=ckpt-{_hex(g, 12)}",
        f'Content-Type: application/pdf; name="invoice-4711.pdf"\nContent-Transfer-Encoding: '
        f"base64\n\n{_wrap(_b64(b'%PDF-1.7' + g.randbytes(340)), 76)}",
    ]


def clean_texts() -> list[str]:
    """Secret-free traces, log lines and code: the project's own fixtures (traces, the sample
    service) and generated noise that looks random. Redaction should change nothing here."""
    texts = [(_DATA / name).read_text(encoding="utf-8") for name in _CLEAN_FILES]
    return texts + _noise_texts(random.Random(20261201))


# --- self-check against the published rules -------------------------------------------------------


def _entropy(s: str) -> float:
    from math import log2

    return -sum(s.count(c) / len(s) * log2(s.count(c) / len(s)) for c in set(s)) if s else 0.0


def _scope_inline_flags(p: str) -> str:
    """RE2 lets ``(?i)`` appear mid-pattern (to the end of its group); Python only at the start:
    ``x(?i)y`` becomes ``x(?i:y)``."""
    flag = re.compile(r"\(\?([a-zA-Z]+)\)")
    while m := flag.search(p, 1):
        depth, i, in_class = 0, m.end(), False
        while i < len(p):
            c = p[i]
            if c == "\\":
                i += 2
                continue
            if in_class:
                in_class = c != "]"
            elif c == "[":
                in_class = True
            elif c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    break
                depth -= 1
            i += 1
        p = p[: m.start()] + f"(?{m[1]}:" + p[m.end() : i] + ")" + p[i:]
    return p


def _re2_to_python(p: str) -> re.Pattern[str]:
    p = p.replace("[:alnum:]", "0-9A-Za-z").replace("[:alpha:]", "A-Za-z")
    p = re.sub(r"(?<!\\)\\z", r"\\Z", p)
    return re.compile(_scope_inline_flags(p))


def _probes(f: Format, value: str, natural_text: str) -> list[str]:
    k = f.key
    return [
        natural_text,
        f"{k}={value}",
        f'{k} = "{value}"',
        f'"{k}": "{value}"',
        f'curl -H "Authorization: Basic {value}" https://api.shop.example/v1/orders',
        f'curl -H "Authorization: Bearer {value}" https://api.shop.example/v1/orders',
        f"https://app:{value}@db.internal/shop",
        f"mongodb+srv://app:{value}@cluster0.ab12c.mongodb.net/shop",
        value,
    ]


def _fires(text: str, value: str, spans: Iterable[tuple[int, int]]) -> bool:
    """Some reported secret and the value overlap: one holds the other."""
    start = text.find(value)
    end = start + len(value)
    return any((s <= start and end <= e) or (start <= s and e <= end) for s, e in spans)


def _allowed(
    rule: dict[str, Any], secret: str, match: str, line: str, global_allow: dict[str, Any]
) -> bool:
    for allow in [*rule.get("allowlists", []), global_allow]:
        if allow.get("paths") and allow.get("condition") == "AND":
            continue  # needs a file path, which a log line has not
        target = {"match": match, "line": line}.get(allow.get("regexTarget", ""), secret)
        if any(_re2_to_python(rx).search(target) for rx in allow.get("regexes", [])):
            return True
        if any(w.lower() in secret.lower() for w in allow.get("stopwords", [])):
            return True
    return False


def _gitleaks_spans(
    rule: dict[str, Any], text: str, global_allow: dict[str, Any]
) -> list[tuple[int, int]]:
    """Where gitleaks reports a secret in ``text``: keywords, secret group, entropy and the
    allowlists applied as gitleaks applies them."""
    keywords = [k.lower() for k in rule.get("keywords", [])]
    if keywords and not any(k in text.lower() for k in keywords):
        return []
    spans = []
    for m in _re2_to_python(rule["regex"]).finditer(text):
        group = rule.get("secretGroup") or next(
            (i for i in range(1, (m.re.groups or 0) + 1) if m.group(i)), 0
        )
        secret = m.group(group)
        if rule.get("entropy") and _entropy(secret) < rule["entropy"]:
            continue
        line_start = text.rfind("\n", 0, m.start()) + 1
        line_end = text.find("\n", m.end())
        line = text[line_start : line_end if line_end >= 0 else len(text)]
        if _allowed(rule, secret, m.group(), line, global_allow):
            continue
        spans.append(m.span(group))
    return spans


def _detect_secrets_fires(plugin_name: str, text: str, value: str) -> bool | None:
    """Whether detect-secrets' plugin reports the value; None: detect-secrets is missing."""
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    except ImportError:
        return None
    mapping: dict[str, Any] = get_mapping_from_secret_type_to_class()
    classes = {cls.__name__: cls for cls in mapping.values()}
    plugin = classes[plugin_name]()
    for filename in ("settings.py", "config.yaml", "app.env"):
        for number, line in enumerate(text.split("\n"), 1):
            for found in plugin.analyze_line(filename=filename, line=line, line_number=number):
                secret = found.secret_value or ""
                if secret and (secret in value or value in secret):
                    return True
    return False


def _self_check(gitleaks_toml: str | None = None, seeds: Iterable[int] = range(3)) -> list[str]:
    """Names of formats whose generated value a cited gitleaks rule or detect-secrets plugin does
    not report (in the natural text or a plain ``KEY=value``/``curl -H`` line), for each seed.

    ``gitleaks_toml``: gitleaks' config/gitleaks.toml (default: $GITLEAKS_TOML). trufflehog's
    regexes live in Go source; they were checked when the corpus was written (see
    secret_corpus_sources.md)."""
    import tomllib

    path = gitleaks_toml or os.environ.get("GITLEAKS_TOML")
    if not path:
        raise FileNotFoundError("pass gitleaks' config/gitleaks.toml or set GITLEAKS_TOML")
    config = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    rules = {r["id"]: r for r in config["rules"]}
    global_allow = config.get("allowlist", {})
    failed: list[str] = []
    for seed in seeds:
        g = random.Random(seed)
        for f in FORMATS:
            value = f.make(g)
            _, render = _natural(f)
            probes = _probes(f, value, render(value, f.key, g))
            for cited in f.source.replace(UNVERIFIED, "").split(","):
                tool, _, rule = cited.partition(":")
                ok: bool | None = None
                if tool == "gitleaks":
                    r = rules[rule]
                    ok = any(_fires(p, value, _gitleaks_spans(r, p, global_allow)) for p in probes)
                elif tool == "detect-secrets":
                    results = [_detect_secrets_fires(rule, p, value) for p in probes]
                    ok = None if None in results else any(results)
                if ok is False and f"{f.name} ({cited})" not in failed:
                    failed.append(f"{f.name} ({cited})")
    return failed


if __name__ == "__main__":
    print("\n".join(_self_check(sys.argv[1] if len(sys.argv) > 1 else None)) or "all match")
