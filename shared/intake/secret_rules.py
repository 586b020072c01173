"""More redaction rules: provider token formats from detect-secrets, tracehound's own for what it
lacks, and an entropy rule for ``key=``/``token=``/``secret=`` assignments.

detect-secrets (Yelp) maintains the regexes of its provider plugins (AWS, Azure storage keys,
SendGrid, Twilio, PyPI, Square, Telegram, Mailchimp, public IPv4 addresses…): they are used as
data here, each a ``Rule``, so a new release brings its new formats. Its plugins that need
whole files or a scanner's context (high-entropy strings, keywords) are not used; the
assignment entropy rule below does that job for log lines. tracehound adds formats the
plugins lack or match too narrowly (npm, Docker Hub, Vault, Shopify, Mailgun, Sentry DSN keys,
Azure SAS signatures, GCP key ids, Datadog keys, cookies, credit-card numbers with a valid
Luhn check digit, US social security numbers), and the provider shapes of
shared/intake/secret_shapes.py. The entropy rule leaves identifiers alone: a call, a path, a
public or identifying key name (``idempotency_key``, ``GPG_KEY``; shared/intake/secret_contexts.py).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from functools import cache

from shared.intake.secret_contexts import code_like, denies_a_secret, name_before, path_like
from shared.intake.secret_rule import Rule, marker
from shared.intake.secret_shapes import PROVIDER_RULES

# Plugins tracehound's own rules already cover better (a PEM block whole, a URL password).
_SKIPPED_PLUGINS = frozenset({"Private Key", "Basic Auth Credentials"})

# A lowercase substring every match of a plugin's regexes contains (a regex for the few whose
# literal is case-sensitive or has no fixed text): a text without it skips the regexes, which
# keeps the whole set near a millisecond on a 64 kB trace.
_KEYWORD = ("key", "pw", "pass", "token")
# A prefilter starts with a literal character where it can: the regex engine then skips to it
# as fast as str.find, where a leading class (\d, [MNO]) is tried at every position.
_PLUGIN_TRIGGERS: dict[str, tuple[str, ...] | re.Pattern[str]] = {
    "AWS Access Key": ("akia", "asia", "abia", "acca", "a3t", "aws"),
    "Artifactory Credentials": re.compile(r"AKC|AP[\dA-F]"),
    "Azure Storage Account access key": ("accountkey=",),
    "Cloudant Credentials": (*_KEYWORD, "cloudant"),
    "Discord Bot Token": re.compile(r"\.[\w-]{6}\.[\w-]{27}"),
    "GitHub Token": ("gh",),
    "GitLab Token": ("gl", "gr1348941"),
    "IBM COS HMAC Credentials": ("secret",),
    "IBM Cloud IAM Key": _KEYWORD,
    "JSON Web Token": ("eyj",),
    "Mailchimp Access Key": ("-us",),
    "NPM tokens": ("_authtoken",),
    "OpenAI Token": ("t3blbkfj",),
    "Public IP (ipv4)": re.compile(r"\.\d{1,3}\.\d{1,3}\.\d"),
    "PyPI Token": ("pypi-",),
    "SendGrid API Key": ("sg.",),
    "Slack Token": ("xox", "hooks.slack"),
    "SoftLayer Credentials": (*_KEYWORD, "softlayer"),
    "Square OAuth Secret": ("sq0csp-",),
    "Stripe Access Key": ("k_live_",),
    "Telegram Bot Token": re.compile(r":[\w-]{35}"),
    "Twilio API Key": re.compile(r"AC[a-z0-9]{32}|SK[a-z0-9]{32}"),
}


def _replacer(name: str) -> Callable[[re.Match[str]], str]:
    """The match, or only its first group when the pattern has one, becomes the marker."""

    def replace(m: re.Match[str]) -> str:
        if m.re.groups and m.group(1):
            start, end = m.start(1) - m.start(), m.end(1) - m.start()
            return m.group()[:start] + marker(name) + m.group()[end:]
        return marker(name)

    return replace


@cache
def detect_secrets_rules() -> tuple[Rule, ...]:
    """A rule per regex of detect-secrets' regex-based plugins."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    rules = []
    plugins: dict[str, type] = get_mapping_from_secret_type_to_class()
    for kind, plugin in sorted(plugins.items()):
        if kind in _SKIPPED_PLUGINS or not issubclass(plugin, RegexBasedDetector):
            continue
        name = "ds_" + re.sub(r"\W+", "_", kind.lower()).strip("_")
        trigger = _PLUGIN_TRIGGERS.get(kind, ())
        for pattern in plugin().denylist:
            if isinstance(trigger, re.Pattern):
                rules.append(Rule(name, pattern, _replacer(name), prefilter=trigger))
            else:
                rules.append(Rule(name, pattern, _replacer(name), trigger))
    return tuple(rules)


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _card(m: re.Match[str]) -> str:
    digits = re.sub(r"[ -]", "", m.group())
    return marker("card_number") if 13 <= len(digits) <= 19 and _luhn(digits) else m.group()


def _entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


ENTROPY_BITS = 3.5  # per character: random tokens sit above, words and identifiers below


_NAME_PART = re.compile(r"[\w-]*")
_IDENTIFIERS = re.compile(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+\(?")  # settings.DB_PASSWORD


def _assigned(m: re.Match[str]) -> str:
    value = m["v"]
    if _entropy(value) < ENTROPY_BITS or value.startswith("[REDACTED"):
        return m.group()
    if _IDENTIFIERS.fullmatch(value) or code_like(value):  # code naming where the secret is
        return m.group()
    if m.string.startswith("(", m.end("v")):  # a call: DynamoDBAttribute(name=…)
        return m.group()
    # the whole name (idempotency_key, GPG_KEY, an S3 object's Key=orders/2026/…): an
    # identifier, a public key or a path, not a secret
    name = name_before(m.string, m.start()) + _NAME_PART.match(m["pre"]).group()  # type: ignore[union-attr]
    if denies_a_secret(name) or path_like(value):
        return m.group()
    return m["pre"] + marker("high_entropy") + m.group()[m.end("v") - m.start() :]


_COOKIE_PAIR = re.compile(r"(?P<name>[A-Za-z0-9_.-]{1,64}=)(?!\[REDACTED)[^;\s]{4,}+")


OWN_RULES: tuple[Rule, ...] = (
    Rule(
        "npm_token",
        re.compile(r"npm_" + r"(?<![\w-]npm_)[A-Za-z0-9]{36}(?![A-Za-z0-9])"),
        marker("npm_token"),
        ("npm_",),
    ),
    Rule(
        "docker_hub",
        re.compile(r"dckr_pat_[A-Za-z0-9_-]{20,}+"),
        marker("docker_hub"),
        ("dckr_pat_",),
    ),
    Rule(
        "vault_token",
        re.compile(r"h(?<![\w-]h)v[sbr]\.[A-Za-z0-9_-]{24,}+"),
        marker("vault_token"),
        ("hvs.", "hvb.", "hvr."),
    ),
    Rule(
        "shopify_token",
        re.compile(r"shp(?<![\w-]shp)(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
        marker("shopify_token"),
        ("shp",),
    ),
    Rule(
        "mailgun_key",
        re.compile(r"key-(?<![\w-]key-)[0-9a-f]{32}(?![0-9a-f])"),
        marker("mailgun_key"),
        ("key-",),
    ),
    # https://<public key>[:<secret>]@o123.ingest.sentry.io/456: the keys, not the host
    Rule(
        "sentry_dsn",
        re.compile(r"(?P<pre>://)(?<=s://)[0-9a-f]{32}(?::[0-9a-f]{32})?(?=@)"),
        r"\g<pre>" + marker("sentry_dsn"),
        ("sentry", "://"),
    ),
    Rule(
        "azure_sas",
        re.compile(r"(?P<pre>[?&]sig=)[A-Za-z0-9%+/=]{16,}+"),
        r"\g<pre>" + marker("azure_sas"),
        ("sig=",),
    ),
    Rule(
        "gcp_key_id",
        re.compile(r"(?P<pre>private_key_id\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?)[0-9a-f]{40}"),
        r"\g<pre>" + marker("gcp_key_id"),
        ("private_key_id",),
    ),
    Rule(
        "datadog_key",
        re.compile(
            r"(?P<pre>(?i:dd|datadog)[_-]?(?i:app(?:lication)?|api)[_-]?(?i:key)"
            r"\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?)[0-9a-f]{32}(?:[0-9a-f]{8})?(?![0-9a-f])"
        ),
        r"\g<pre>" + marker("datadog_key"),
        ("dd", "datadog"),
    ),
    # Cookie / Set-Cookie header values: the value of every name=value pair on the line
    Rule(
        "cookie",
        re.compile(r"(?P<pre>[Cc](?<![\w][Cc])ookie[ \t]*[:=][ \t]*)(?P<pairs>[^\n]{1,4096})"),
        lambda m: m["pre"] + _COOKIE_PAIR.sub(r"\g<name>" + marker("cookie"), m["pairs"]),
        ("cookie",),
    ),
    *PROVIDER_RULES,
    Rule(
        "card_number",
        re.compile(r"[3-6](?<![\d-][3-6])(?:\d[ -]?){12,18}\d(?![\d-])"),
        _card,
        (),
    ),
    Rule(
        "ssn",
        re.compile(r"\d(?<![\d-]\d)(?!000|666|9\d\d)\d{2}-(?!00)\d{2}-(?!0000)\d{4}(?![\d-])"),
        marker("ssn"),
        ("-",),
        # Every log line's date has dashes: only "-dd-dddd" is worth the pattern's pass.
        prefilter=re.compile(r"-\d\d-\d{4}"),
    ),
)

# ``signing_key = 'Xy9…'``, ``"client_secret": "…"``: a random-looking value assigned to a name
# that says it is a secret, whatever the provider. Last, so specific rules name what they know.
ENTROPY_RULE = Rule(
    "high_entropy",
    re.compile(
        r"(?P<pre>(?i:key|token|secret|passw(?:or)?d|pwd|auth|credential|signature|salt|seed)"
        r"[A-Za-z0-9_-]{0,20}\\?[\"']?[ \t]{0,3}(?:=>|:=|[:=])[ \t]{0,3}\\?[\"']?)"
        r"(?P<v>[A-Za-z0-9+/=_\-.~!@#$%^&*]{16,256}+)"
    ),
    _assigned,
    ("key", "token", "secret", "pass", "pwd", "auth", "credential", "sig", "salt", "seed"),
)
