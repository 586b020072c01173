"""Redaction rules that find a secret by where it stands, whatever its shape: an environment
variable or setting named for a secret, a name/value pair (Kubernetes env, XML config), a
session cookie in any notation, a command-line password, an HTTP header, a URL-encoded query
parameter, a Redis AUTH on the wire, a password in URL userinfo that holds ``#``, ``/`` or
``@``, a secret named in prose ("the sumo key … is invalid").

They run after the provider shapes (shared/intake/secret_rules.py) and the generic key-value
rules (shared/intake/redact.py), on what those left. Each value check keeps words and short settings
(``MAX_KEY=10``, ``SORT_KEY=created_at``) readable: a value is taken when it could be a
credential — long, or holding digits or symbols beside letters.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import lru_cache

from shared.intake.secret_rule import Rule, marker

# The last word of a name that names a secret (an environment variable, a setting, a header).
_SECRET_WORD = (
    r"(?:pass(?:w(?:or)?d|phrase)?|pwd|pw|secret|token|api_?key|access_?key|private_?key"
    r"|credentials?|auth(?:_?key)?|signature|sig|pat|dsn|webhook(?:_?url)?|hook_?url"
    r"|session(?:_?id)?|sess_?id|sid|access_?id|app_?key|client_?secret)"
)
_SECRET_NAME = re.compile(_SECRET_WORD)
_WORDS = re.compile(r"[_.\-\s]+|(?<=[a-z0-9])(?=[A-Z])")  # snake, kebab, dotted, camelCase
# ``<word>_KEY`` names a secret (SERVER_KEY, LICENSE_KEY, MASTER_KEY) unless the word says the
# key is public or an identifier: GPG_KEY (a fingerprint), PUBLIC_KEY, IDEMPOTENCY_KEY, an S3
# object Key, CACHE_KEY, SORT_KEY, PARTITION_KEY, a database's PRIMARY/FOREIGN key.
_NOT_SECRET_KEYS = frozenset(
    {
        *("public", "pub", "publishable", "site", "recaptcha", "pk", "gpg", "pgp", "ssh_public"),
        *("idempotency", "idempotent", "cache", "lookup", "hash", "map", "dedup", "dedupe"),
        *("sort", "partition", "routing", "shard", "distribution", "ordering", "order"),
        *("object", "bucket", "file", "s3", "row", "index", "cursor", "group"),
        *("primary", "foreign", "unique", "composite", "natural", "surrogate", "join"),
        *("message", "event", "request", "trace", "span", "correlation"),
    }
)
_NOT_SECRET_TOKENS = frozenset({"page", "continuation", "pagination", "cursor", "sync"})
_CODE = re.compile(
    r"(?:\$\{|\{\{|%\(|\*{3}|<%|#\{|[({\[])"  # ${X}, {{x}}, %(x)s, ***, <%= %>, #{x}, (a, b)
    r"|[a-z][a-z0-9]*+(?:_[a-z0-9]++)++$|[A-Z][A-Z0-9]*+(?:_[A-Z0-9]++)++$"  # aws_secret_key, X_Y
    r"|\.?[A-Za-z_$][\w$]*+(?:\.[A-Za-z_$][A-Za-z_$]*+)++[(\[]?$"  # settings.DB_PASSWORD, .Values.x
    # a call or subscript of a word-like name: get_token(, os.environ[, System.getenv(
    r"|(?:[A-Za-z_][a-z0-9_]*+(?:[A-Z]++[a-z0-9_]*+)*+\.)*+[A-Za-z_][a-z0-9_]*+(?:[A-Z]++[a-z0-9_]*+)*+"
    r"[(\[](?:$|[A-Za-z_\"'\[{)\]*])"
)
_PATH = re.compile(r"[a-z0-9_.~-]*+(?:/[a-z0-9_.~-]++)++/?")  # orders/2026/11/export.csv


def path_like(value: str) -> bool:
    """A lowercase path (``orders/2026/11/30/export.csv``, ``/run/secrets/db``): where something
    is, not a credential (base64 keys that hold ``/`` have capitals)."""
    return _PATH.fullmatch(value) is not None


def denies_a_secret(name: str) -> bool:
    """``PUBLIC_KEY``, ``idempotency_key``, ``GPG_KEY``, ``cache_key``, ``nextPageToken``: a key
    or token name whose word before ``key``/``token`` says it is public or an identifier."""
    words = [w.lower() for w in _WORDS.split(name.strip("\"' ")) if w]
    if len(words) < 2:
        return False
    return (words[-1] == "key" and words[-2] in _NOT_SECRET_KEYS) or (
        words[-1] == "token" and words[-2] in _NOT_SECRET_TOKENS
    )


def code_like(value: str) -> bool:
    """A value that is code naming where the secret comes from, or a placeholder, not the
    secret: ``settings.DB_PASSWORD``, ``get_token(``, ``os.environ[``, ``${DB_PASS}``."""
    return _CODE.match(value.strip("\"'")) is not None


def _entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def credential_like(value: str) -> bool:
    """Long, or holding digits or symbols beside letters, and not one repeated character: a
    value that could be a credential (``created_at``, ``10`` and ``true`` cannot)."""
    v = value.strip("\"'").rstrip(".,:;!?")  # a sentence's last word is still a word
    if len(v) < 8 or v.startswith("[REDACTED") or _entropy(v) < 2.5:
        return False
    if len(v) >= 20:
        return True
    letters = any(c.isalpha() for c in v)
    others = any(c.isdigit() for c in v) or any(not c.isalnum() and c != "_" for c in v)
    return letters and others


@lru_cache(maxsize=4096)
def names_a_secret(name: str) -> bool:
    """``DB_PASSWORD``, ``stripeWebhookSecret``, ``X-Api-Key``, ``smtp.pass``, ``FCM_SERVER_KEY``:
    the name's last word (snake, kebab, dotted or camelCase), or its last two, name a secret."""
    words = [w.lower() for w in _WORDS.split(name.strip("\"' ")) if w]
    if not words or denies_a_secret(name):
        return False
    if _SECRET_NAME.fullmatch(words[-1]) or _SECRET_NAME.fullmatch("_".join(words[-2:])):
        return True
    return words[-1] == "key" and len(words) > 1


def _value_if(name_group: str, label: str, *value_groups: str):  # type: ignore[no-untyped-def]
    """A replacement that redacts the value (the first of ``value_groups`` that matched) when
    the name group names a secret and the value could be a credential, not code."""

    def replace(m: re.Match[str]) -> str:
        group = next(g for g in value_groups if m[g] is not None)
        name, value = m[name_group], m[group]
        if not names_a_secret(name) or not credential_like(value) or code_like(value):
            return m.group()
        start, end = m.start(group) - m.start(), m.end(group) - m.start()
        return m.group()[:start] + marker(label) + m.group()[end:]

    return replace


def name_before(text: str, at: int) -> str:
    """The name that ends just before ``at`` (past spaces, a closing quote and a backslash):
    ``DB_PASSWORD`` in ``DB_PASSWORD = `` or ``"db_pass"``; at most 80 characters."""
    j = at
    while j > 0 and text[j - 1] in " \t":
        j -= 1
    if j > 0 and text[j - 1] in "\"'":
        j -= 1
    if j > 0 and text[j - 1] == "\\":
        j -= 1
    k = j
    while k > 0 and j - k < 80 and (text[k - 1].isalnum() or text[k - 1] in "_.-"):
        k -= 1
    return text[k:j]


# A separator after a name character, a quote or a space (not a timestamp's colon), and the value
# after it, read in a lookahead: only the separator is consumed, so the scan goes on inside a
# quoted value that is not a secret (SETTING = "… key=b'<key>'").
_NAMED_SEP = re.compile(
    r"[=:](?<=[A-Za-z_\"'\\ \t][=:])(?:(?<==)>?|(?<=:)=|(?<=:)(?![/\\]))[ \t]{0,3}"
    r"(?=\\?\"(?P<q>[^\"\\\n]{8,512})\\?\"|'(?P<sq>[^'\n]{8,512})'"
    r"|b(?P<bq>'[^'\n]{8,512}'|\"[^\"\n]{8,512}\")"
    r"|(?P<v>[^\s\"'`,;)}\]<>\\]{8,512}+))"
)
_VALUE_GROUPS = ("q", "sq", "bq", "v")


def _secret_value(m: re.Match[str]) -> str | None:
    """The group of ``m`` holding a secret: the name before the separator names one (or is a
    bare ``key`` before a bytes literal: key material, unlike an S3 ``Key=``) and the value
    could be a credential, not code or a path."""
    group = next(g for g in _VALUE_GROUPS if m[g] is not None)
    name = name_before(m.string, m.start())
    if not (names_a_secret(name) or (group == "bq" and name.lower() == "key")):
        return None
    value = m[group]
    if not credential_like(value) or code_like(value) or path_like(value):
        return None
    return group


def redact_named(text: str) -> str:
    """Every value assigned to a name that names a secret, as ``[REDACTED:named_secret]``."""
    out: list[str] = []
    done = 0
    for m in _NAMED_SEP.finditer(text):
        group = _secret_value(m)
        if group is None or m.start(group) < done:
            continue
        out += [text[done : m.start(group)], marker("named_secret")]
        done = m.end(group)
    return "".join([*out, text[done:]]) if out else text


_STRUCT_FIELD = re.compile(
    r"(?P<n>(?<![^ ])[A-Z]\w{0,60}):(?P<v>(?:(?! [A-Z]\w{0,60}:)[^\n]){1,512})"
)


def _struct(line: str) -> str:
    """``{Field:value Field:value}…`` with the values of secret fields redacted: the struct
    ends at the last brace of ``line``."""
    end = line.rfind("}")
    if end < 0:
        return line
    return "{" + _STRUCT_FIELD.sub(_struct_field, line[1:end]) + line[end:]


def _struct_field(m: re.Match[str]) -> str:
    if names_a_secret(m["n"]) and credential_like(m["v"]) and not code_like(m["v"]):
        return m["n"] + ":" + marker("struct_field")
    return m.group()


def _credential(label: str, group: str):  # type: ignore[no-untyped-def]
    """A replacement that redacts one group when it could be a credential and is not code."""

    def replace(m: re.Match[str]) -> str:
        if m[group] is None or not credential_like(m[group]) or code_like(m[group]):
            return m.group()
        start, end = m.start(group) - m.start(), m.end(group) - m.start()
        return m.group()[:start] + marker(label) + m.group()[end:]

    return replace


def _always(label: str, *groups: str):  # type: ignore[no-untyped-def]
    """A replacement that redacts the first of ``groups`` that matched."""

    def replace(m: re.Match[str]) -> str:
        group = next(g for g in groups if m[g] is not None)
        if m[group].startswith("[REDACTED"):
            return m.group()
        start, end = m.start(group) - m.start(), m.end(group) - m.start()
        return m.group()[:start] + marker(label) + m.group()[end:]

    return replace


# Go's %+v of a struct: &{User:app Password:a,b]c Host:db}: a field's value runs to the
# next " Field:" or the struct's end, the last brace on the line (a value may hold braces).
STRUCT_RULE = Rule(
    "struct_field",
    re.compile(r"\{[A-Z]\w{0,60}:[^\n]{0,2048}+"),
    lambda m: _struct(m.group()),
    ("{",),
)

CONTEXT_RULES: tuple[Rule, ...] = (
    # NAME=value, export NAME="value", NAME: value (YAML), "name": "value", name := "value" (Go):
    # any assignment to a name whose last word names a secret (DB_PASS, AZURE_DEVOPS_PAT,
    # FCM_SERVER_KEY, SIG). The pattern starts at the separator and the name is read backwards
    # from there (name_before).
    Rule(
        "named_secret",
        _NAMED_SEP,
        marker("named_secret"),  # see apply
        ("=", ":"),
        apply=redact_named,
    ),
    # {"name": "DB_PASSWORD", "value": "…"}, "- name: X\n  value: Y" (Kubernetes), and XML's
    # <add key="ClearTextPassword" value="…"/>, <property name="apiToken" value="…"/>.
    Rule(
        "named_value",
        re.compile(
            r"[nNkK](?<![\w-][nNkK])(?:(?<=[nN])(?i:ame)|(?<=[kK])(?i:ey))"
            r"\"?[ \t]*[:=][ \t]*[\"']?(?P<n>[\w.-]{1,80}+)[\"']?"
            r"[ \t]*,?[ \t]*(?:\r?\n[ \t-]*)?\"?(?i:value)\"?[ \t]*[:=][ \t]*[\"']?"
            r"(?P<v>[^\"'\s,}<>]{1,1024})"
        ),
        _value_if("n", "named_value", "v"),
        ("value",),
    ),
    # <password>…</password>, <apiToken>…</apiToken>
    Rule(
        "xml_secret",
        re.compile(r"<(?P<t>[\w:.-]{1,64})>(?P<v>[^<\n]{1,512})</(?P=t)>"),
        _value_if("t", "xml_secret", "v"),
        ("</",),
    ),
    # Session cookies in any notation: sessionid, PHPSESSID, JSESSIONID (;jsessionid= too),
    # ASP.NET_SessionId, connect.sid, _app_session, laravel_session (the match starts at
    # "sess"); not code (session = requests.Session()).
    Rule(
        "session",
        re.compile(
            r"(?P<pre>(?:[sS](?i:ess(?:ion)?(?:_?id)?)|connect\.sid)"
            r"(?:\\?[\"'])?[ \t]{0,3}[:=][ \t]{0,3}(?:\\?[\"'])?)"
            r"(?P<v>(?!\[REDACTED)[^\s\"';,&?<>)}\]]{8,4096}+)"
        ),
        _credential("session", "v"),
        ("sess", "sid"),
    ),
    # Command lines: --password X, --password=X, --api-key X, --token X; mysql's -pX; curl -u
    # user:password.
    Rule(
        "cli_secret",
        re.compile(
            r"(?P<pre>--(?:[\w-]{0,40}-)?(?i:password|passwd|pass|token|secret|api-?key"
            r"|access-key|secret-key|auth-token)(?:=|[ \t]+|'[ \t]*,[ \t]*'))"
            r"(?P<v>'[^'\n]{1,256}'|\"[^\"\n]{1,256}\"|[^\s'\",]{1,256})"
        ),
        _always("cli_secret", "v"),
        ("--",),
    ),
    Rule(
        "cli_password",
        re.compile(
            r"(?P<pre>(?:mysql(?:dump|admin)?|mariadb(?:-dump)?)\b[^\n]{0,400}?[\s'\"]-p)"
            r"(?:'(?P<sq>[^'\n]{1,256})'|\"(?P<dq>[^\"\n]{1,256})\"|(?P<v>[^\s'\",]{3,256}))"
        ),
        _always("cli_secret", "sq", "dq", "v"),
        ("mysql", "mariadb"),
    ),
    Rule(
        "cli_user_password",
        re.compile(
            r"(?P<pre>-(?<![\w-]-)(?:u|-user)[ \t]+['\"]?[^\s:'\"]{1,64}:)(?P<v>[^\s'\"]{1,256})"
        ),
        _always("cli_secret", "v"),
        ("-u", "--user"),
    ),
    # HTTP headers (a curl -v dump, a logged request): X-Db-Password: a passphrase of words. A
    # header's name has a hyphen (X-Api-Key), which keeps "password: must be at least …" prose.
    Rule(
        "header_secret",
        re.compile(
            r"(?m)^[>< \t]{0,4}(?P<n>[A-Za-z][\w]{0,30}(?:-[\w]{1,30}){1,4}):[ \t]*"
            r"(?P<v>[^\r\n]{1,1024})$"
        ),
        _value_if("n", "header_secret", "v"),
        (":",),
    ),
    # token%3D…, password%3D… inside a URL-encoded URL.
    Rule(
        "url_encoded_secret",
        re.compile(
            r"(?P<pre>(?i:token|password|passwd|pwd|secret|api_?key|access_token|sig|key)%3D)"
            r"(?P<v>(?:[^%&\s\"']|%(?!26)[0-9A-Fa-f]{2}){4,1024})"
        ),
        _always("url_encoded_secret", "v"),
        ("%3d",),
    ),
    # Redis's AUTH on the wire (RESP, as a logged bytes repr or raw): the password argument(s).
    Rule(
        "redis_auth",
        re.compile(
            r"(?P<pre>AUTH(?:\\r\\n|\r\n)(?:\$\d+(?:\\r\\n|\r\n)[^\\\r\n]{1,256}(?:\\r\\n|\r\n))?"
            r"\$\d+(?:\\r\\n|\r\n))(?P<v>[^\\\r\n]{1,512})"
        ),
        _always("redis_auth", "v"),
        ("auth",),
    ),
    # scheme://user:password@host where the password holds #, / or @ (the last @ before the
    # host ends it).
    Rule(
        "url_password_raw",
        re.compile(
            r"(?P<pre>://(?<=[A-Za-z0-9+.-]://)[^\s:/?#@'\"<>]{0,128}:)(?P<v>(?!\[REDACTED)"
            r"[^\s'\"<>]{1,4096})@(?=[A-Za-z0-9.-]{1,253}(?::\d{1,5})?(?:[/?#\s'\"]|$))"
        ),
        _always("url_password", "v"),
        ("://",),
    ),
    # A token as the user part of a DSN: http://<key>@host/<project> (Sentry's, tracehound's).
    Rule(
        "dsn_key",
        re.compile(
            r"(?P<pre>https?://)(?P<v>[A-Za-z0-9]{24,64})(?=@[\w.-]{1,253}(?::\d{1,5})?/\d)"
        ),
        _always("dsn_key", "v"),
        ("://",),
    ),
    # A secret named in prose: "the sumo key Uv… is invalid", "pagerduty token u+t2… expired",
    # "loaded jira_api_token ATATT…", "authenticate with okta using 00ed…".
    Rule(
        "prose_secret",
        re.compile(
            r"[ \t](?:(?<=[^A-Za-z][Tt]oken[ \t])|(?<=[^A-Za-z][Kk]ey[ \t])"
            r"|(?<=[^A-Za-z][Pp]assword[ \t])|(?<=[^A-Za-z][Pp]assphrase[ \t])"
            r"|(?<=[^A-Za-z][Ss]ecret[ \t])|(?<=[^A-Za-z][Cc]redential[ \t])"
            r"|(?<=[^A-Za-z][Cc]redentials[ \t])|(?<=[^A-Za-z][Ss]ession[ \t])"
            r"|(?<=[^A-Za-z]using[ \t]))[ \t]{0,2}"
            r"(?P<v>(?!\[REDACTED)[A-Za-z0-9+/=_~|.-]{12,512}+)(?![\w/+=-])"
        ),
        _credential("prose_secret", "v"),
        ("token", "key", "pass", "secret", "credential", "session", "using"),
    ),
    # A query parameter that carries a credential: ?key=… (Google's API keys), &sig=, &code=.
    Rule(
        "query_secret",
        re.compile(
            r"(?P<pre>[?&;](?i:key|api_?key|apikey|access_?key|sig|signature|auth|code|secret"
            r"|password|passwd|pwd|pass|client_secret|private_token|access_token|token)=)"
            r"(?P<v>(?!\[REDACTED)[^&\s#'\"<>]{8,4096}+)"
        ),
        _credential("query_secret", "v"),
        ("key=", "sig", "auth", "code=", "secret=", "pass", "pwd=", "token="),
    ),
    # PHP's PDO->__construct('mysql:…', 'user', 'password') in a stack trace.
    Rule(
        "pdo_password",
        re.compile(
            r"(?P<pre>PDO->__construct\('[^'\n]{0,256}', '[^'\n]{0,128}', ')(?P<v>[^'\n]{1,256})'"
        ),
        _always("cli_secret", "v"),
        ("pdo->",),
    ),
    # The argument after a redacted credential is its other half: Client("AC…", "<auth token>"),
    # args=[<key id>, <secret>].
    Rule(
        "paired_argument",
        re.compile(
            r"(?P<pre>\[REDACTED:[\w-]{1,40}\]\\?[\"']?[ \t]*,[ \t]*\\?[\"']?)"
            r"(?P<v>(?!\[REDACTED)[^\s\"',)\]]{8,512}+)"
        ),
        _credential("paired_argument", "v"),
        (),
    ),
    # A human password as a quoted literal: a word, a year or number, a symbol (Coral1995*).
    Rule(
        "human_password",
        re.compile(r"[\"'](?P<v>[A-Z][a-z]{3,40}\d{2,4}[!@#$%^&*?.+-])(?=[\"'])"),
        _always("human_password", "v"),
        (),
    ),
)
