"""Secrets redacted before embedding, the LLM and Slack: one pass of regex rules over error text.

Every rule replaces what it matches with ``[REDACTED:<rule>]`` (key-value rules keep the key and
separator). The rules are written to stay linear on multi-megabyte traces: each starts at a
literal or a narrow character class, repeats are possessive or bounded, and no quantified group
can match the same text two ways. Redacting twice gives the same text as redacting once: no rule
matches a marker, and values starting with ``[REDACTED`` are skipped.

Decisions worth knowing:

- Key-value rules (``password=…``, ``token: …``, ``"secret": "…"``) skip values that are plainly
  code, not data: a dotted attribute chain (``settings.DB_PASSWORD``), a call (``get_token(``),
  ``None``/``null``/``true``, and placeholders (``${X}``, ``{{x}}``, ``%(x)s``, ``***``). With a
  ``:`` separator an unquoted value must contain a non-letter, so prose such as
  ``invalid token: expired`` stays readable while ``password: s3cret`` is redacted.
- Emails are redacted, except the ``git@github.com:org/repo`` shape of SSH remotes (followed by
  ``:path``) and the user part of a URL (``https://user@host``): those name a host, not a person.
- ``Bearer <t>`` needs a token with a digit or symbol, or 20+ characters, and a bare
  ``Basic <b64>`` a digit or ``+/=``, so ``Bearer authentication failed`` is left alone. After an
  ``Authorization`` key any credential goes (rule ``authorization`` when the shape rules above
  did not take it), whatever the scheme.
- A value longer than the key-value grammar allows is still removed whole (possessive repeats,
  no upper bound), so redaction never leaves a secret's tail behind.
- A PEM private key is removed whole, BEGIN to END; when the text was cut before END, the BEGIN
  line and the base64 lines after it are removed. Three or more lines of bare base64 (a key's
  body kept without its BEGIN line, in YAML or a fixture) go too.
- Beyond these rules, shared/intake/secret_shapes.py finds ~90 provider token shapes by form
  alone, and shared/intake/secret_contexts.py finds a secret by where it stands (a name that
  names one, a name/value pair, a struct field, a command line, a header, a query parameter,
  the argument after a redacted key id); tests/data/secret_corpus.py is what they are measured
  against (tests/unit/test_secret_corpus.py, benchmarks/redaction.py).
- A match that spans lines is replaced by its marker followed by as many line breaks: a
  redacted file keeps its line numbers, so chunks, frames and citations still point at the
  right lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ahocorasick

from shared.core.domain import Candidate, ErrorEvent
from shared.core.memo import TextMemo
from shared.intake.secret_contexts import CONTEXT_RULES, STRUCT_RULE
from shared.intake.secret_rule import Rule, marker
from shared.intake.secret_rules import ENTROPY_RULE, OWN_RULES, detect_secrets_rules

MEMO_MIN_CHARS = 512  # texts this long (stack traces) are remembered apart from short ones


# Speed: CPython's regex search skips ahead quickly only when a pattern starts with a literal or
# one character class; a leading lookbehind or alternation costs ~0.2 s per rule on 5 MB. So
# every pattern starts with its first literal character, and word-boundary checks are
# lookbehinds placed after it.

_END = r"(?![A-Za-z0-9_-])"


def _keywords(*words: str) -> str:
    """Any of ``words`` (lowercase; the first character literal) starting a word (``db_token``,
    ``x-auth-token``) or a camelCase hump (``accessToken``), in any case."""
    firsts = sorted({w[0] for w in words})
    cls = "[" + "".join(f + f.upper() for f in firsts) + "]"
    branches = []
    for word in words:
        f, up = word[0], word[0].upper()
        branches.append(
            rf"(?:(?<=[{f}{up}])(?<![A-Za-z0-9][{f}{up}])|(?<=[a-z]{up}))(?i:{word[1:]})"
        )
    return cls + "(?:" + "|".join(branches) + ")"


# --- key-value rules ---------------------------------------------------------------------------

# A character of an unquoted value: stops at whitespace, quotes, separators and brackets.
_V = r"""[^\s"'`,;&(){}\[\]<>\\]"""
_NOT_V = r"""(?:[\s"'`,;&(){}\[\]<>\\]|$)"""
_V_NON_LETTER = r"""[^A-Za-z\s"'`,;&(){}\[\]<>\\]"""
# Unquoted values that are code or placeholders, not secrets: ${X}, {{x}}, %(x)s, ***, literals,
# a dotted attribute chain (settings.DB_PASSWORD; later parts without digits, unlike tokens
# such as ya29.a0Af) or a call (get_token().
_CODE_VALUE = (
    r"(?!\$\{|\{\{|%\(|\*{3}"
    r"|(?:None|null|nil|undefined|true|false|True|False)" + _NOT_V + r"|[A-Za-z_$][\w$]*+"
    r"(?:(?:\.[A-Za-z_$]++)++" + _NOT_V + r"|(?:\.[A-Za-z_$][\w$]*+)*+\())"
)


def _kv(keys: str) -> re.Pattern[str]:
    """``<key><sep><value>`` where the regex ``keys`` names a secret.

    Groups: ``pre`` (key and separator, kept) and the opening quote of a quoted value (``dq``,
    ``sq``, or ``eq`` for a JSON-escaped ``\\"``), put back around the marker. With a ``:``
    separator an unquoted value must hold a non-letter (prose: ``invalid token: expired``).
    """
    return re.compile(
        r"(?P<pre>" + keys + r"(?:\\?[\"'])?[ \t]{0,3}(?::=|(?P<colon>:)|=>|=)[ \t]{0,3})"
        r"(?:"
        r"(?P<eq>\\\")(?!\[REDACTED)[^\"\\\n]++(?:\\\")?"
        r"|(?P<dq>\")(?!\[REDACTED)[^\"\n]++\"?"
        r"|(?P<sq>')(?!\[REDACTED)[^'\n]++'?"
        r"|" + _CODE_VALUE + r"(?(colon)(?=[A-Za-z]*+" + _V_NON_LETTER + r"))"
        r"(?>" + _V + r"++)(?!\()"
        r")"
    )


def _kv_replacement(name: str) -> str:
    return r"\g<pre>\g<eq>\g<dq>\g<sq>" + marker(name) + r"\g<eq>\g<dq>\g<sq>"


# "password" is unambiguous even glued to a prefix (PGPASSWORD); "pwd" and "pass" must start a
# word or a camelCase hump (smtp_pass, DB_PASS, dbPass; not bypass, compass or passport).
_PASSWORD_KEYS = (
    r"[Pp](?:(?i:ass(?:w(?:or)?d|phrase))(?:[_-]?(?i:confirm(?:ation)?))?"
    r"|(?:(?<![A-Za-z0-9][Pp])|(?<=[a-z]P))(?i:wd|ass))" + _END
)
_SECRET_KEYS = (
    "(?:"
    + _keywords("secret", "credentials?", "private")
    + r")(?:(?<=[Pp]rivate|PRIVATE)[_-]?(?i:key)|(?<![Pp]rivate|PRIVATE)(?:[_-]?(?i:key))?)"
    + _END
)
# not a pagination token (nextPageToken, page_token): an opaque cursor, not a credential
_TOKEN_KEYS = (
    _keywords("token")
    + r"(?<![Pp]age[Tt]oken)(?<![Pp]age[_-][Tt]oken)(?<!PAGE_TOKEN)(?:[_-]?(?i:key))?"
    + _END
)
_API_KEY_KEYS = _keywords("api") + r"[_-]?(?i:key|token|secret)" + _END

# --- token shapes ------------------------------------------------------------------------------

_TOKEN = r"[A-Za-z0-9\-._~+/]"

_PRIVATE_KEY = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ ){0,4}PRIVATE KEY(?: BLOCK)?-----"
    r"(?:"
    # complete: the body up to the matching END, never past another BEGIN/END marker
    r"(?:(?!-----(?:BEGIN|END) )[\s\S]){0,65536}?-----END (?:[A-Z0-9]+ ){0,4}PRIVATE KEY"
    r"(?: BLOCK)?-----"
    # cut before END: base64 on the same line, after JSON-escaped newlines, or on whole lines
    r"|(?:[ \t]+[A-Za-z0-9+/=]++){0,500}"
    r"(?:\\r?\\n(?:[A-Za-z0-9+/=]++|(?:Proc-Type|DEK-Info):[ \t]?[\w,\- ]{0,100}))*+"
    r"(?:\r?\n[ \t]*+(?:[A-Za-z0-9+/=]++|(?:Proc-Type|DEK-Info):[ \t]?[\w,\- ]{0,100})[ \t]*+"
    r"(?=\r?\n|$))*+"
    r")"
)

# Lines of nothing but base64 (quoted or indented), three or more in a row: a key's body.
_KEY_BODY = re.compile(
    r"^[ \t]*+[\"']?+[A-Za-z0-9+/]{40,100}+={0,2}+[\"']?+,?+[ \t]*+"
    r"(?:\r?\n[ \t]*+[\"']?+[A-Za-z0-9+/]{40,100}+={0,2}+[\"']?+,?+[ \t]*+){2,}+$",
    re.MULTILINE,
)

# A MIME part's base64 body (an attachment in a logged e-mail) is data, not a key body; a PEM
# file attached that way is base64 of "-----BEGIN" and has a rule of its own (pem_base64).
_MIME_BASE64 = re.compile(r"(?i)content-transfer-encoding:[ \t]*base64[ \t]*\r?\n[ \t]*\r?\n$")

DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("private_key", _PRIVATE_KEY, marker("private_key"), ("private key",)),
    Rule(
        "key_body",
        _KEY_BODY,
        lambda m: (
            m.group()
            if _MIME_BASE64.search(m.string, max(0, m.start() - 120), m.start())
            else marker("key_body")
        ),
        # a line break, then 40 base64 characters: a cheap, linear search
        prefilter=re.compile(r"\n[ \t]*+[\"']?+[A-Za-z0-9+/]{40}"),
    ),
    # scheme://user:password@host -> keep scheme, user and host
    Rule(
        "url_password",
        re.compile(
            r"(?P<pre>://(?<=[A-Za-z0-9+.-]://)[^\s:/?#@'\"<>]{0,128}:)"
            r"(?!\[REDACTED)[^\s/?#@'\"<>]{1,256}+(?=@)"
        ),
        r"\g<pre>" + marker("url_password"),
        ("://",),
    ),
    # Bearer <token>: the token holds a digit or symbol, or is long (not "Bearer authentication")
    Rule(
        "bearer_token",
        re.compile(
            r"(?P<pre>[Bb](?<![\w-][Bb])(?i:earer)[ \t]{1,3})(?!\[REDACTED)"
            r"(?:(?=[A-Za-z]*+[0-9._~+/=-])" + _TOKEN + r"{8,}+|" + _TOKEN + r"{20,}+)=*+"
        ),
        r"\g<pre>" + marker("bearer_token"),
        ("bearer",),
    ),
    Rule(
        "basic_auth",
        re.compile(
            r"(?P<pre>B(?<![\w-]B)asic[ \t]{1,3})(?!\[REDACTED)"
            r"(?=[A-Za-z]*+[0-9+/=])[A-Za-z0-9+/]{8,}+=*+"
        ),
        r"\g<pre>" + marker("basic_auth"),
        ("basic",),
    ),
    # An Authorization header/key: whatever its scheme, the credential goes
    Rule(
        "authorization",
        re.compile(
            r"(?P<pre>[Aa](?<![A-Za-z0-9][Aa])(?i:uthorization)(?:\\?[\"'])?"
            r"[ \t]{0,3}[:=][ \t]{0,3}(?:\\?[\"'])?"
            r"(?>(?P<scheme>(?i:bearer|basic|token|digest|negotiate|apikey|api-key"
            r"|sso-key|key|hmac)[ \t]{1,3})?))"
            r"(?!\[REDACTED)(?(scheme)|(?=[A-Za-z]*+[0-9._~+/=-]))" + _TOKEN + r"{6,}+=*+"
        ),
        r"\g<pre>" + marker("authorization"),
        ("authorization",),
    ),
    Rule(
        "aws_access_key_id",
        re.compile(r"A(?<![A-Za-z0-9]A)(?:KIA|SIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        marker("aws_access_key_id"),
        ("akia", "asia"),
    ),
    Rule(
        "aws_secret_access_key",
        re.compile(
            r"(?P<pre>[AaSs](?:(?<=[Aa])(?i:ws_?secret_?(?:access_?)?key)"
            r"|(?<=[Ss])(?i:ecret_?access_?key))(?:\\?[\"'])?"
            r"[ \t]{0,3}(?:=>|[:=])[ \t]{0,3}(?:\\?[\"'])?)"
            r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
        ),
        r"\g<pre>" + marker("aws_secret_access_key"),
        ("secret",),
    ),
    Rule(
        "openai_key",
        re.compile(
            r"sk-(?<![\w-]sk-)(?:proj-|svcacct-|admin-)?(?=[A-Za-z_-]*+\d)[A-Za-z0-9_-]{20,}+"
        ),
        marker("openai_key"),
        ("sk-",),
    ),
    Rule(
        "slack_token",
        re.compile(r"x(?<![\w-]x)(?:ox[abposr]|app)-[A-Za-z0-9-]{10,}+"),
        marker("slack_token"),
        ("xox", "xapp-"),
    ),
    Rule(
        "slack_webhook",
        re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]++"),
        marker("slack_webhook"),
        ("hooks.slack.com",),
    ),
    Rule(
        "github_token",
        re.compile(r"g(?<![\w-]g)(?:h[pousr]_[A-Za-z0-9]{36,}+|ithub_pat_[A-Za-z0-9_]{22,}+)"),
        marker("github_token"),
        ("gh", "github_pat_"),
    ),
    Rule(
        "gitlab_token",
        re.compile(r"glpat-(?<![\w-]glpat-)[A-Za-z0-9_-]{20,}+"),
        marker("gitlab_token"),
        ("glpat-",),
    ),
    Rule(
        "stripe_key",
        re.compile(r"[sr]k_(?<![\w-][sr]k_)(?:live|test)_[A-Za-z0-9]{16,}+"),
        marker("stripe_key"),
        ("k_live_", "k_test_"),
    ),
    Rule(
        "google_api_key",
        re.compile(r"AIza(?<![\w-]AIza)[0-9A-Za-z_-]{35}(?![\w-])"),
        marker("google_api_key"),
        ("aiza",),
    ),
    Rule(
        "jwt",
        re.compile(
            r"eyJ(?<![\w-]eyJ)[A-Za-z0-9_-]{5,}+\.eyJ[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]{10,}+"
        ),
        marker("jwt"),
        ("eyj",),
    ),
    Rule("api_key", _kv(_API_KEY_KEYS), _kv_replacement("api_key"), ("api",)),
    Rule("password", _kv(_PASSWORD_KEYS), _kv_replacement("password"), ("pass", "pwd")),
    Rule(
        "secret", _kv(_SECRET_KEYS), _kv_replacement("secret"), ("secret", "credential", "private")
    ),
    Rule("token", _kv(_TOKEN_KEYS), _kv_replacement("token"), ("token",)),
    # user@example.com; not git@github.com:org/repo (an SSH remote), https://user@host, nor a
    # JVM object followed by a call (Repo@5b6f7412.close()
    Rule(
        "email",
        re.compile(
            r"[A-Za-z0-9._%+-](?<![A-Za-z0-9._%+-][A-Za-z0-9._%+-])(?<!//.)[A-Za-z0-9._%+-]{0,63}@"
            r"[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24}"
            r"(?![A-Za-z0-9-])(?!\.[A-Za-z0-9])(?!:[\w~/])(?!\()"
        ),
        marker("email"),
        ("@",),
    ),
)

# Attribute keys whose whole (string) value is a secret, by the rule that covers them.
_SECRET_ATTRIBUTE_KEYS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("password", re.compile(_PASSWORD_KEYS + "$")),
    ("api_key", re.compile(_API_KEY_KEYS + "$")),
    ("secret", re.compile(_SECRET_KEYS + "$")),
    ("token", re.compile(_TOKEN_KEYS + "$")),
    ("authorization", re.compile(r"(?<![A-Za-z0-9])(?i:authorization|cookie)$")),
)


_GENERIC = frozenset({"api_key", "password", "secret", "token", "email"})


def all_rules() -> tuple[Rule, ...]:
    """Every built-in rule, most specific first: tracehound's provider shapes, its own rules for
    formats the maintained set lacks, detect-secrets' provider regexes, then the key-value and
    email rules, the rules that find a secret by where it stands (shared/intake/secret_contexts.py)
    and last the entropy rule for assignments (shared/intake/secret_rules.py)."""
    specific = tuple(r for r in DEFAULT_RULES if r.name not in _GENERIC)
    generic = tuple(r for r in DEFAULT_RULES if r.name in _GENERIC)
    return (
        *specific,
        *OWN_RULES,
        *detect_secrets_rules(),
        STRUCT_RULE,
        *generic,
        *CONTEXT_RULES,
        ENTROPY_RULE,
    )


def _automaton(rules_of: Mapping[str, frozenset[int]]) -> Any:
    """An Aho-Corasick automaton over the triggers, each giving the rules it calls for; None
    when no rule has a trigger."""
    if not rules_of:
        return None
    automaton = ahocorasick.Automaton()
    for trigger, ids in rules_of.items():
        automaton.add_word(trigger, ids)
    automaton.make_automaton()
    return automaton


def _keeping_lines(
    replacement: str | Callable[[re.Match[str]], str],
) -> Callable[[re.Match[str]], str]:
    """``replacement`` followed by the line breaks of the text it replaces, so that redaction
    never moves a line."""

    def replace(m: re.Match[str]) -> str:
        out = m.expand(replacement) if isinstance(replacement, str) else replacement(m)
        lost = m.group().count("\n") - out.count("\n")
        return out + "\n" * lost if lost > 0 else out

    return replace


class Redactor:
    """Applies redaction rules, in order, to text and to error events."""

    def __init__(self, rules: Sequence[Rule] | None = None, *, enabled: bool = True) -> None:
        self.rules: tuple[Rule, ...] = tuple(all_rules() if rules is None else rules)
        self.enabled = enabled
        names = {rule.name for rule in self.rules}
        # Stack traces, exception types and many messages repeat: each distinct text is
        # redacted once (texts up to MEMO_MIN_CHARS in a memo of their own, so that 4,096
        # short ones cannot push out the 512 traces).
        self._long: TextMemo[str] = TextMemo(size=512)
        self._short: TextMemo[str] = TextMemo(size=4096)
        # Which rules a text needs, from the triggers it holds, and no pass of a rule whose
        # triggers are all absent. The triggers are found in one Aho-Corasick pass over the
        # text (pyahocorasick, in C): one ``in`` test per distinct trigger (199) took 90 µs of
        # a 330-character trace, most of its redaction.
        rules_of: dict[str, set[int]] = {}
        for i, rule in enumerate(self.rules):
            for t in rule.triggers:
                rules_of.setdefault(t, set()).add(i)
        self._rules_of = {t: frozenset(ids) for t, ids in rules_of.items()}
        self._untriggered = frozenset(i for i, rule in enumerate(self.rules) if not rule.triggers)
        self._triggers = _automaton(self._rules_of)
        self._attribute_keys = tuple(
            (name, pattern) for name, pattern in _SECRET_ATTRIBUTE_KEYS if name in names
        )
        self._subs = tuple(_keeping_lines(rule.replacement) for rule in self.rules)

    @classmethod
    def from_settings(
        cls, enabled: bool, extra_patterns: Sequence[str], disabled_rules: Sequence[str]
    ) -> Redactor:
        """The built-in rules minus ``disabled_rules``, plus ``extra_patterns`` (whole match
        becomes ``[REDACTED:custom]``). Unknown rule names and bad regexes raise ValueError."""
        builtin = all_rules()
        known = {rule.name for rule in builtin}
        unknown = sorted(set(disabled_rules) - known)
        if unknown:
            raise ValueError(
                f"unknown redaction rule(s) to disable: {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        rules = [rule for rule in builtin if rule.name not in set(disabled_rules)]
        for pattern in extra_patterns:
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid redaction pattern {pattern!r}: {exc}") from exc
            rules.append(Rule("custom", compiled, marker("custom")))
        return cls(rules, enabled=enabled)

    def redact(self, text: str) -> str:
        if not self.enabled or not text:
            return text
        memo = self._long if len(text) >= MEMO_MIN_CHARS else self._short
        return memo.get(text, None, lambda: self._redact(text))

    def needed_rules(self, text: str) -> frozenset[int]:
        """The indexes of the rules whose triggers ``text`` holds (lower-cased), and those
        without triggers."""
        if self._triggers is None:
            return self._untriggered
        found = {ids for _, ids in self._triggers.iter(text.lower())}
        return self._untriggered.union(*found)

    def _redact(self, text: str) -> str:
        # Triggers are tested on the original text: a replacement only inserts a marker, and no
        # rule matches text that a marker brought in.
        needed = self.needed_rules(text)
        for i in sorted(needed):  # in the rules' order
            rule = self.rules[i]
            if rule.prefilter is not None and not rule.prefilter.search(text):
                continue
            if rule.apply is not None:
                text = rule.apply(text)
                continue
            done = rule.pattern.sub(rule.replacement, text)
            if len(done) != len(text) and done.count("\n") != text.count("\n"):
                done = rule.pattern.sub(self._subs[i], text)  # a match spanned lines: keep them
            text = done
        return text

    def redact_event(self, event: ErrorEvent) -> ErrorEvent:
        """Message, stack trace, exception type and string attribute values (recursively)
        redacted; an attribute whose key names a secret (``password``, ``api_key``,
        ``Authorization``…) loses its whole string value."""
        if not self.enabled:
            return event
        return event.model_copy(update=self.redacted_fields(event))

    def redacted_fields(
        self,
        event: ErrorEvent,
        attributes: Mapping[str, Any] | None = None,
        *,
        message: bool = True,
    ) -> dict[str, Any]:
        """What ``redact_event`` changes, as a ``model_copy`` update (``attributes``: those
        to redact instead of the event's own; ``message=False``: all but the message, which
        the caller redacts later); the fields as they are when disabled."""
        exc_type = event.exception_type
        attributes = event.attributes if attributes is None else attributes
        if not self.enabled:
            return {"attributes": dict(attributes)}
        update = {
            "stacktrace": self.redact(event.stacktrace),
            "exception_type": self.redact(exc_type) if exc_type else exc_type,
            "attributes": self._redact_mapping(attributes),
        }
        if message:
            update["message"] = self.redact(event.message)
        return update

    def redact_candidates(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        """Retrieved code with its secrets redacted (a config default, a test fixture): what
        the reranker, the LLM and Slack are given."""
        if not self.enabled:
            return list(candidates)
        return [
            c.model_copy(
                update={
                    "chunks": [h.model_copy(update={"text": self.redact(h.text)}) for h in c.chunks]
                }
            )
            for c in candidates
        ]

    def _redact_mapping(self, mapping: Mapping[Any, Any]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for key, value in mapping.items():
            rule = self._secret_key_rule(key) if isinstance(value, str) and value else None
            out[key] = marker(rule) if rule else self._redact_value(value)
        return out

    def _redact_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return self._redact_mapping(value)
        if isinstance(value, list | tuple):
            return type(value)(self._redact_value(item) for item in value)
        return value

    def _secret_key_rule(self, key: object) -> str | None:
        if not isinstance(key, str):
            return None
        for name, pattern in self._attribute_keys:
            if pattern.search(key):
                return name
        return None
