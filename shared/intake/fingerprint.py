"""Grouping key for error events: exception type + in-app frames, never LLM text.

The dedup step (``shared.groups.store``) counts events per fingerprint, so two events share a key
exactly when on-call would call them "the same error":

- With a stack trace: the service, the exception types (chained causes included) and the
  in-app frames as ``module:function`` — no line numbers, no message text. Paths lose their
  deployment root (``/srv/app/``, ``/app/``, ``site-packages/``…) and keep their last three
  components, so the same code deployed at two roots groups together. Runs of a repeated frame
  or of a repeated cycle of up to 8 frames (recursion) count once; at most ``max_frames``
  frames nearest the raise are kept.
- Without frames: the service, the exception type (if any) and the normalized message.
- A custom rule that matches overrides both with a fixed key (still per service).

The value carries ``FINGERPRINT_VERSION``: changing what goes into the hash bumps it, so old and
new groups never collide silently.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from shared.core.domain import ErrorEvent, Frame, Trace
from shared.core.memo import TextMemo
from shared.intake.frames import LIBRARY_PATHS, normalize_path
from shared.intake.trace import trace_of, trace_text

FINGERPRINT_VERSION = 1

# Longest cycle of frames collapsed as recursion (a -> b -> c -> a ...).
_MAX_CYCLE = 8
# Normalized messages are cut here: a key must not grow with a megabyte of log text.
_MAX_MESSAGE = 1000


@dataclass(frozen=True)
class CustomRule:
    """A fixed group key for events whose type and message match (each regex optional, not both).

    ``match_type`` is searched in every exception type of the event (chained causes included),
    ``match_message`` in the raw message.
    """

    match_type: str | None = None
    match_message: str | None = None
    fingerprint: str = ""

    def __post_init__(self) -> None:
        if not self.fingerprint:
            raise ValueError("a grouping rule needs a non-empty 'fingerprint'")
        if self.match_type is None and self.match_message is None:
            raise ValueError(
                f"grouping rule {self.fingerprint!r} needs 'match_type' or 'match_message'"
            )
        for pattern in (self.match_type, self.match_message):
            if pattern is not None:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise ValueError(
                        f"grouping rule {self.fingerprint!r}: bad regex {pattern!r}: {exc}"
                    ) from exc

    def matches(self, types: Sequence[str], message: str) -> bool:
        if self.match_type is not None and not any(re.search(self.match_type, t) for t in types):
            return False
        return self.match_message is None or re.search(self.match_message, message) is not None


@dataclass(frozen=True)
class GroupingConfig:
    # Path prefixes (absolute, or repo-relative such as "shopapp/") or module prefixes
    # ("com.shop.", "github.com/shop/") of the service's own code; empty: heuristics.
    in_app_prefixes: tuple[str, ...] = ()
    rules: tuple[CustomRule, ...] = ()
    max_frames: int = 30

    @property
    def reads_message(self) -> bool:
        """Whether a rule matches on messages: then the message may decide the group even
        of an event whose trace has frames."""
        return any(rule.match_message is not None for rule in self.rules)

    def __post_init__(self) -> None:
        if self.max_frames < 1:
            raise ValueError("max_frames must be at least 1")


@dataclass(frozen=True)
class Fingerprint:
    value: str  # "v1:" + sha1 hex
    kind: str  # "frames" | "message" | "rule"
    exception_types: tuple[str, ...]  # outermost -> root cause, names as printed
    frames: tuple[str, ...] = field(default=())  # "module:function", nearest the raise first
    message: str = field(default="", repr=False)  # what normalized_message is made of

    @cached_property
    def normalized_message(self) -> str:
        """Only worked out when asked for: a key made of frames never reads it."""
        return normalize_message(self.message)


# ---------------------------------------------------------------------------------------------
# Messages

_WIN_TEMP = r"[A-Za-z]:\\(?:Users|Documents and Settings)\\[^\\\s]+\\AppData\\Local\\Temp\\?"
_PLACEHOLDERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s'\"<>]{1,2000}"), "<url>"),
    (
        re.compile(
            r"[A-Za-z0-9._%+-](?<![A-Za-z0-9._%+-][A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{0,63}@"
            r"[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24}\b(?!\()"
        ),
        "<email>",
    ),
    (
        re.compile(
            r"(?<![\w.])(?:/private)?/(?:tmp|var/tmp|var/folders|dev/shm)/[^\s'\"]*"
            r"|" + _WIN_TEMP + r"[^\s'\"]*"
        ),
        "<path>",
    ),
    (
        re.compile(
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
        ),
        "<uuid>",
    ),
    (
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?"
            r"(?:Z|[+-]\d{2}:?\d{2})?)?(?![\w:])"
            r"|\b\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?\b"
        ),
        "<ts>",
    ),
    (
        re.compile(r"(?<![\w\\])'[^'\n]{0,200}'(?!\w)|(?<![\w\\])\"[^\"\n]{0,200}\"(?!\w)"),
        "<str>",
    ),
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?\b"), "<ip>"),
    (re.compile(r"(?<![\w:])(?:[0-9a-fA-F]{0,4}:){2,7}[0-9a-fA-F]{1,4}(?![\w:])"), "<ip>"),
    (re.compile(r"\b0[xX][0-9a-fA-F]+\b"), "<hex>"),
    # long hex ids (git shas, Mongo ObjectIds): at least one digit and one letter
    (re.compile(r"\b(?=[0-9a-fA-F]*[a-fA-F])(?=[0-9a-fA-F]*[0-9])[0-9a-fA-F]{8,}\b"), "<hex>"),
    (re.compile(r"\b1\d{9}(?:\d{3}|\d{6}|\d{9})?(?:\.\d+)?\b"), "<ts>"),  # epoch s/ms/us/ns
    (re.compile(r"\d+(?:\.\d+)*"), "<num>"),
)
_SPACE = re.compile(r"\s+")


def normalize_message(message: str) -> str:
    """The message with volatile parts as placeholders: ``<url>``, ``<email>``, ``<path>``
    (temp paths), ``<uuid>``, ``<ts>``, ``<str>`` (quoted values), ``<ip>``, ``<hex>``,
    ``<num>``; whitespace collapsed, cut at 1000 characters."""
    text = message[: _MAX_MESSAGE * 8]
    for pattern, placeholder in _PLACEHOLDERS:
        text = pattern.sub(placeholder, text)
    return _SPACE.sub(" ", text).strip()[:_MAX_MESSAGE]


# ---------------------------------------------------------------------------------------------
# Frames

_THIRD_PARTY_PATH = re.compile(
    r"(?:^|/)(?:site-packages|dist-packages|node_modules|\.venv|venv|\.tox|__pypackages__"
    r"|\.eggs|bower_components|jspm_packages)/"
    r"|\.egg/"
    r"|(?:^|/)lib(?:64)?/python\d+(?:\.\d+)?/"  # CPython stdlib
    r"|(?:^|/)pkg/mod/|@v\d"  # Go module cache
    r"|^node:|^internal/"  # Node built-ins
)
# Not the app's own code: each language's runtime and libraries (frames.py), and PHP's
# Composer packages (a repo may keep vendor/: mapped, but not in-app).
_LIBRARY_PATHS = {**LIBRARY_PATHS, "php": re.compile(r"(?:^|/)vendor/")}
_DOTNET = frozenset({"csharp", "fsharp", "vb"})
_DOTNET_LIBRARIES = ("System.", "Microsoft.", "Mono.", "FSharp.Core.", "Newtonsoft.")
_JVM_LIBRARIES = (
    "java.",
    "javax.",
    "jakarta.",
    "jdk.",
    "sun.",
    "com.sun.",
    "kotlin.",
    "kotlinx.",
    "scala.",
    "groovy.",
    "org.springframework.",
    "org.apache.",
    "org.hibernate.",
    "org.eclipse.",
    "org.junit.",
    "org.slf4j.",
    "org.jetbrains.",
    "ch.qos.logback.",
    "io.netty.",
    "io.grpc.",
    "io.micrometer.",
    "io.undertow.",
    "io.ktor.",
    "io.reactivex.",
    "reactor.",
    "akka.",
    "com.fasterxml.",
    "com.google.",
    "com.zaxxer.",
    "okhttp3.",
    "retrofit2.",
    "_COROUTINE.",
)
# Deployment roots stripped from absolute paths before the last components are taken.
_DEPLOY_ROOTS: tuple[tuple[str, ...], ...] = (
    ("usr", "src", "app"),
    ("srv", "app"),
    ("opt", "app"),
    ("var", "task"),
    ("var", "www"),
    ("app",),
    ("srv",),
    ("code",),
    ("workspace",),
    ("src",),
)
_PATH_COMPONENTS = 3
_JVM_NUMBERED = re.compile(r"\$\d+")  # anonymous classes and lambdas: Foo$1, lambda$main$0
_NODE_ALIAS = re.compile(r"\s*\[as [^\]]*\]$")


def _posix(path: str) -> str:
    return path.replace("\\", "/")


def _matches_prefix(frame: Frame, prefix: str) -> bool:
    """Whether ``frame`` is under a configured in-app prefix (path or module)."""
    if frame.module and frame.module.startswith(prefix):
        return True
    path, want = _posix(frame.file), _posix(prefix)
    if want.startswith("/") or re.match(r"^[A-Za-z]:/", want):
        return path.startswith(want)
    want = want.removeprefix("./")
    candidates = [want]
    if "/" not in want and "." in want.rstrip("."):
        candidates.append(want.replace(".", "/"))  # a Python module prefix: shopapp.services
    return any(("/" + path.lstrip("/")).find("/" + c) >= 0 for c in candidates)


def _heuristic_in_app(frame: Frame) -> bool:
    if frame.language == "java":
        return not frame.module.startswith(_JVM_LIBRARIES)
    if frame.language in _DOTNET and frame.module.startswith(_DOTNET_LIBRARIES):
        return False
    file = _posix(frame.file.strip())
    if not file or file.startswith("<"):  # <frozen importlib._bootstrap>, <string>, <stdin>
        return False
    if _THIRD_PARTY_PATH.search(file):
        return False
    library = _LIBRARY_PATHS.get(frame.language)
    if library is not None and library.search(file):
        return False
    if frame.language == "go":
        # the package path ends at the first "." after the last "/": net/http.(*Server)
        rest = frame.module[frame.module.rfind("/") + 1 :]
        package = (
            frame.module[: len(frame.module) - len(rest) + rest.find(".")]
            if "." in rest
            else frame.module
        )
        stdlib = bool(package) and "." not in package.split("/", 1)[0] and package != "main"
        return not stdlib
    return True


def _path_module(file: str, config: GroupingConfig) -> str:
    raw = _posix(file.strip())
    for prefix in config.in_app_prefixes:  # an absolute in-app prefix is a deployment root
        want = _posix(prefix)
        if want.startswith("/") and raw.startswith(want):
            raw = raw[len(want) :]
            break
    parts, installed = normalize_path(raw)
    absolute = raw.startswith("/") or bool(re.match(r"^(?:file://|[A-Za-z]:/)", raw))
    if absolute and not installed:
        for root in _DEPLOY_ROOTS:
            if tuple(parts[: len(root)]) == root and len(parts) > len(root):
                parts = parts[len(root) :]
                break
    parts = parts[-_PATH_COMPONENTS:]
    if parts and "." in parts[-1][1:]:
        parts[-1] = parts[-1].rsplit(".", 1)[0]
    return "/".join(parts)


def _frame_key(frame: Frame, config: GroupingConfig) -> str:
    if frame.language == "java":
        module = _JVM_NUMBERED.sub("$N", frame.module)
        return f"{module}:{_JVM_NUMBERED.sub('$N', frame.function)}"
    if frame.language == "go" and frame.module:
        return f"{frame.module}:{frame.function}"
    function = _NODE_ALIAS.sub("", frame.function)
    return f"{_path_module(frame.file, config)}:{function}"


def _collapse_repeats(keys: list[str]) -> list[str]:
    """Runs of one frame, or of a cycle of up to ``_MAX_CYCLE`` frames, kept once.

    A trailing partial cycle is dropped too and a cycle is kept in one canonical rotation, so a
    recursion printed 990 or 1000 frames deep (cut at another point of the cycle) gives the
    same signature.
    """
    out: list[str] = []
    i, n = 0, len(keys)
    while i < n:
        for period in range(1, min(_MAX_CYCLE, (n - i) // 2) + 1):
            block = keys[i : i + period]
            if keys[i + period : i + 2 * period] == block:
                break
        else:
            out.append(keys[i])
            i += 1
            continue
        j = i + 2 * period
        while j + period <= n and keys[j : j + period] == block:
            j += period
        k = 0
        while j + k < n and k < period - 1 and keys[j + k] == block[k]:
            k += 1
        # a cycle is entered wherever the trace was cut: keep one canonical rotation of it
        out.extend(min(block[r:] + block[:r] for r in range(period)))
        i = j + k
    return out


def frame_signature(
    frames: Sequence[Frame], config: GroupingConfig = GroupingConfig()
) -> tuple[str, ...]:
    """The ``module:function`` keys of a trace's in-app frames, nearest the raise first."""
    if not frames:
        return ()
    if config.in_app_prefixes:
        in_app = [f for f in frames if any(_matches_prefix(f, p) for p in config.in_app_prefixes)]
    else:
        in_app = [f for f in frames if _heuristic_in_app(f)]
    chosen = in_app or frames  # nothing in-app (a crash inside a library): all frames
    keys = _collapse_repeats([_frame_key(f, config) for f in chosen])
    return tuple(keys[: config.max_frames])


# ---------------------------------------------------------------------------------------------
# The fingerprint


def _digest(payload: Mapping[str, Any]) -> str:
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return f"v{FINGERPRINT_VERSION}:" + hashlib.sha1(blob.encode("ascii")).hexdigest()


_TRACES: TextMemo[tuple[tuple[str, ...], tuple[str, ...]]] = TextMemo()


def _trace_parts(
    text: str, trace: Trace, config: GroupingConfig
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(exception types, frame keys) of a trace, once per distinct trace: a storm repeats the
    same stack thousands of times."""
    return _TRACES.get(text, config, lambda: (trace.chain(), frame_signature(trace.frames, config)))


def fingerprint(event: ErrorEvent, config: GroupingConfig = GroupingConfig()) -> Fingerprint:
    """The event's group key (see the module docstring for what goes in)."""
    text = trace_text(event)
    types, frames = _trace_parts(text, trace_of(event), config) if text else ((), ())
    if not types and event.exception_type:
        types = (event.exception_type,)
    message = event.message or event.stacktrace
    base = {"v": FINGERPRINT_VERSION, "service": event.service}

    match_types = types
    if event.exception_type and event.exception_type not in types:
        match_types = (*types, event.exception_type)
    for rule in config.rules:
        if rule.matches(match_types, event.message):
            value = _digest({**base, "kind": "rule", "rule": rule.fingerprint})
            return Fingerprint(value, "rule", types, frames, message)
    if frames:
        return Fingerprint(
            _frames_key(event.service, types, frames), "frames", types, frames, message
        )
    normalized = normalize_message(message)
    value = _digest({**base, "kind": "message", "types": list(types), "message": normalized})
    return Fingerprint(value, "message", types, (), message)


@lru_cache(maxsize=4096)
def _frames_key(service: str, types: tuple[str, ...], frames: tuple[str, ...]) -> str:
    """The key of a frames fingerprint, hashed once per distinct stack and service."""
    base = {"v": FINGERPRINT_VERSION, "service": service}
    return _digest({**base, "kind": "frames", "types": list(types), "frames": list(frames)})


# ---------------------------------------------------------------------------------------------
# Configuration

_SECTION_KEYS = frozenset({"in_app", "rules", "max_frames"})
_RULE_KEYS = {
    "match_type": "match_type",
    "type": "match_type",
    "match_message": "match_message",
    "message": "match_message",
    "fingerprint": "fingerprint",
}


def _read(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:
            raise ValueError(f"grouping config {path}: YAML needs pyyaml installed") from exc
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"grouping config {path}: invalid YAML: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"grouping config {path}: invalid JSON: {exc}") from exc


def _section(data: Any, where: str, path: Path) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"grouping config {path}: {where} must be a mapping")
    unknown = sorted(set(data) - _SECTION_KEYS)
    if unknown:
        raise ValueError(
            f"grouping config {path}: {where} has unknown key(s) {', '.join(unknown)}; "
            f"expected {', '.join(sorted(_SECTION_KEYS))}"
        )
    return data


def _rules(data: Any, where: str, path: Path) -> list[CustomRule]:
    if not isinstance(data, list):
        raise ValueError(f"grouping config {path}: {where}.rules must be a list")
    rules = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or set(item) - set(_RULE_KEYS):
            raise ValueError(
                f"grouping config {path}: {where}.rules[{i}] must be a mapping with "
                "match_type / match_message / fingerprint"
            )
        kwargs = {_RULE_KEYS[k]: v for k, v in item.items()}
        if not all(v is None or isinstance(v, str) for v in kwargs.values()):
            raise ValueError(f"grouping config {path}: {where}.rules[{i}] values must be strings")
        try:
            rules.append(CustomRule(**kwargs))
        except ValueError as exc:
            raise ValueError(f"grouping config {path}: {where}.rules[{i}]: {exc}") from exc
    return rules


def load_grouping_config(path: Path | None, service: str) -> GroupingConfig:
    """The grouping config for ``service`` from a JSON or YAML file.

    Shape: ``{"services": {"shop-api": {"in_app": [...], "rules": [...], "max_frames": 30}},
    "default": {...}}``. A service's ``in_app`` and ``max_frames`` replace the default's; its
    rules are tried before the default's. No file, or a service not listed: the defaults.
    A malformed file raises ValueError naming the file.
    """
    if path is None or not path.exists():
        return GroupingConfig()
    data = _read(path)
    if data is None:
        return GroupingConfig()
    if not isinstance(data, dict) or set(data) - {"services", "default"}:
        raise ValueError(
            f"grouping config {path}: top level must be a mapping with 'services' and/or 'default'"
        )
    services = data.get("services") or {}
    if not isinstance(services, dict):
        raise ValueError(f"grouping config {path}: 'services' must be a mapping")
    default = _section(data.get("default"), "default", path)
    own = _section(services.get(service), f"services.{service}", path)
    in_app = own.get("in_app", default.get("in_app", []))
    if not isinstance(in_app, list) or not all(isinstance(p, str) and p for p in in_app):
        raise ValueError(f"grouping config {path}: in_app must be a list of non-empty strings")
    rules = [
        *_rules(own.get("rules", []), f"services.{service}", path),
        *_rules(default.get("rules", []), "default", path),
    ]
    max_frames = own.get("max_frames", default.get("max_frames", 30))
    if not isinstance(max_frames, int) or isinstance(max_frames, bool) or max_frames < 1:
        raise ValueError(f"grouping config {path}: max_frames must be a positive integer")
    return GroupingConfig(tuple(in_app), tuple(rules), max_frames)
