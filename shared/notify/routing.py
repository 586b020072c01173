"""Routing: which channel (or webhook) and which owners a message goes to, from one file.

``TRACEHOUND_ROUTING`` names a TOML file (or YAML, when PyYAML is installed)::

    [owners]                      # optional: CODEOWNERS names -> Slack user or group ids
    "@acme/payments" = "S0PAYMENTS"

    [[rule]]
    services = ["billing*"]       # fnmatch globs of the service (default: any service)
    paths = ["billing/**"]        # gitignore globs of the top cited file (default: any)
    channel = "C0BILLING"         # or webhook = "https://hooks.slack.com/services/…"
    owners = ["S0123", "U0456"]   # Slack ids mentioned on the message (default: none)

The first matching rule wins; no match goes to the default channel. The file is checked when
a worker starts: a mistake stops it with the rule and line at fault, never a silent fallback.
"""

from __future__ import annotations

import fnmatch
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pathspec

from shared.core.errors import PermanentError
from shared.core.settings import Settings
from shared.notify.mentions import GROUP_ID, USER_ID

RULE_KEYS = {"services", "paths", "channel", "webhook", "owners"}


class RoutingError(PermanentError):
    """The routing file cannot be used; the message names the file, rule and line."""


@dataclass(frozen=True)
class Route:
    """Where a matching message goes (exactly one of ``channel`` and ``webhook``)."""

    index: int  # the rule's number in the file, from 1
    channel: str | None = None
    webhook: str | None = None
    owners: tuple[str, ...] = ()

    @property
    def target(self) -> str:
        """What pacing is keyed on: the channel, or the webhook URL (hashed in the key)."""
        return self.channel or self.webhook or ""


@dataclass(frozen=True)
class Rule:
    route: Route
    services: tuple[str, ...] = ()
    paths: pathspec.GitIgnoreSpec | None = None

    def matches(self, service: str, path: str | None) -> bool:
        if self.services and not any(fnmatch.fnmatchcase(service, g) for g in self.services):
            return False
        return self.paths is None or (path is not None and self.paths.match_file(path))


@dataclass(frozen=True)
class Routing:
    rules: tuple[Rule, ...] = ()
    owners: Mapping[str, str] = field(default_factory=dict)  # CODEOWNERS name -> Slack id

    def route(self, service: str, path: str | None) -> Route | None:
        """The first matching rule's route; None: the default channel."""
        return next((r.route for r in self.rules if r.matches(service, path)), None)


def _strings(value: Any, where: str, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise RoutingError(f"{where}: {key} must be a string or a list of non-empty strings")
    return tuple(v.strip() for v in value)


def _slack_id(value: str, where: str) -> str:
    if not (USER_ID.match(value) or GROUP_ID.match(value)):
        raise RoutingError(
            f"{where}: {value!r} is not a Slack user id (U…/W…) or user group id (S…)"
        )
    return value


def _is_channel(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip()) and not any(c.isspace() for c in value)


def _rule(raw: Any, index: int, where: str) -> Rule:
    if not isinstance(raw, dict):
        raise RoutingError(f"{where}: a rule must be a table of {sorted(RULE_KEYS)}")
    unknown = set(raw) - RULE_KEYS
    if unknown:
        raise RoutingError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(RULE_KEYS)}")
    channel, webhook = raw.get("channel"), raw.get("webhook")
    if (channel is None) == (webhook is None):
        raise RoutingError(f"{where}: give exactly one of channel and webhook")
    if channel is not None and not _is_channel(channel):
        raise RoutingError(f"{where}: channel must be a channel id or #name, got {channel!r}")
    if webhook is not None and (not isinstance(webhook, str) or not webhook.startswith("https://")):
        raise RoutingError(f"{where}: webhook must be an https:// URL")
    services = _strings(raw["services"], where, "services") if "services" in raw else ()
    spec = None
    if "paths" in raw:
        globs = _strings(raw["paths"], where, "paths")
        try:
            spec = pathspec.GitIgnoreSpec.from_lines(globs)
        except (ValueError, TypeError) as exc:
            raise RoutingError(f"{where}: bad path glob: {exc}") from exc
    owners = _strings(raw["owners"], where, "owners") if "owners" in raw else ()
    route = Route(
        index=index,
        channel=channel if isinstance(channel, str) else None,
        webhook=webhook,
        owners=tuple(_slack_id(o, where) for o in owners),
    )
    return Rule(route=route, services=services, paths=spec)


def _rule_lines(text: str, yaml_doc: bool) -> list[int]:
    """The line (from 1) each rule starts on, for error messages."""
    if not yaml_doc:
        return [
            n for n, line in enumerate(text.splitlines(), start=1) if line.strip() == "[[rule]]"
        ]
    import yaml

    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(node, yaml.MappingNode):
        return []
    for key, value in node.value:
        if key.value == "rule" and isinstance(value, yaml.SequenceNode):
            return [item.start_mark.line + 1 for item in value.value]
    return []


def _load_document(path: Path, text: str) -> tuple[Any, bool]:
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:
            raise RoutingError(f"{path}: YAML needs PyYAML installed; or write it as TOML") from exc
        try:
            return yaml.safe_load(text), True
        except yaml.YAMLError as exc:
            raise RoutingError(f"{path}: not valid YAML: {exc}") from exc
    try:
        return tomllib.loads(text), False
    except tomllib.TOMLDecodeError as exc:
        raise RoutingError(f"{path}: not valid TOML: {exc}") from exc


def parse_routing(text: str, path: Path) -> Routing:
    doc, yaml_doc = _load_document(path, text)
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise RoutingError(f"{path}: expected [[rule]] tables and an optional [owners] table")
    unknown = set(doc) - {"rule", "owners"}
    if unknown:
        raise RoutingError(f"{path}: unknown key(s) {sorted(unknown)}; known: owners, rule")
    raw_rules = doc.get("rule", [])
    if not isinstance(raw_rules, list):
        raise RoutingError(f"{path}: rule must be a list of tables ([[rule]])")
    lines = _rule_lines(text, yaml_doc)
    rules = []
    for i, raw in enumerate(raw_rules, start=1):
        line = f":{lines[i - 1]}" if i <= len(lines) else ""
        rules.append(_rule(raw, i, f"{path}{line}: rule {i}"))
    aliases = doc.get("owners", {})
    if not isinstance(aliases, dict):
        raise RoutingError(f"{path}: owners must be a table of name = Slack id")
    owners = {
        str(name): _slack_id(str(value), f"{path}: owners[{name!r}]")
        for name, value in aliases.items()
    }
    return Routing(rules=tuple(rules), owners=owners)


def load_routing(path: Path | None) -> Routing:
    """The routing file's rules (no file: route everything to the default channel)."""
    if path is None:
        return Routing()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RoutingError(f"routing file {str(path)!r} cannot be read: {exc}") from exc
    return parse_routing(text, path)


def routing_for(s: Settings) -> Routing:
    """TRACEHOUND_ROUTING checked against the rest: a rule naming a channel needs the bot
    token (a webhook posts to its own channel only)."""
    routing = load_routing(s.routing)
    if not s.slack_bot_token:
        for rule in routing.rules:
            if rule.route.channel is not None:
                raise RoutingError(
                    f"{s.routing}: rule {rule.route.index} names channel "
                    f"{rule.route.channel!r}, which needs TRACEHOUND_SLACK_BOT_TOKEN "
                    "(or give the rule a webhook)"
                )
    return routing
