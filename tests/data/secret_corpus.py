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
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
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


_WORDS = (
    "amber anchor basin beacon birch cactus canyon cedar cobalt comet coral cotton delta ember "
    "falcon fern fjord garnet glacier harbor hazel indigo island jasper juniper kelp lantern "
    "lichen maple marble meadow nectar nickel oasis onyx orchid pebble pepper prism quartz "
    "raven reef saffron sierra sparrow spruce tango thistle tundra umber velvet walnut willow"
).split()


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
    return "ABSK" + _b64(f"BedrockAPIKey-{_r(g, LOWER_NUM, 4)}-at-{_digits(g, 12)}:{_r(g, B64, 60)}")


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
        f"{GL}generic-api-key,{TH}aws",
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
        f"{GL}generic-api-key",
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
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
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
        lambda g: "hvs." + _r(g, URLSAFE, 95),
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
            {"auths": {"https://index.docker.io/v1/": {k: v}}, "credsStore": ""}, indent="\t"
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
        render=lambda v, k, g: (
            f"{k}=https://{v}@o{_digits(g, 6)}.ingest.sentry.io/{_digits(g, 7)}"
        ),
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
        lambda g: f"sk.{_b64(json.dumps({'u': 'shop', 'a': _r(g, LOWER_NUM, 25)}), url=True)}"
        f".{_r(g, URLSAFE, 22)}",
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
        f"{DS}JwtTokenDetector",
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
        lambda g: _r(g, ALNUM, 18),
        kind="password",
        natural="cli",
        render=_line("curl -sS -u admin:{v} https://grafana.shop.example/api/dashboards/home"),
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
        f"{GL}generic-api-key",
        "FERNET_KEY",
        lambda g: _b64(g.randbytes(32), url=True),
    ),
    _f(
        "hmac-secret-base64",
        f"{GL}generic-api-key",
        "JWT_SECRET",
        lambda g: _b64(g.randbytes(48)),
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
