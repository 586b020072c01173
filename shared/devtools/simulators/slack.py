"""SIMULATOR — a test double of the Slack Web API and incoming webhooks; NOT the real service.

A real loopback HTTP server (standard library only) speaking the wire format ``slack_sdk`` 3.x
uses, so ``WebClient(token="xoxb-...", base_url=sim.url + "/api/")`` and
``WebhookClient(sim.url + "/services/...")`` can be tested end to end:

- ``POST /api/chat.postMessage``, ``/api/chat.update``, ``/api/auth.test`` (JSON or form-encoded
  bodies, JSON strings inside form fields such as ``blocks``, query parameters); other method
  names answer ``{"ok": false, "error": "unknown_method"}``.
- ``/api/conversations.history`` (top-level messages, newest first) and
  ``/api/conversations.replies`` (a thread, oldest first), both bounded by ``oldest``/
  ``latest``/``inclusive``, paged by ``limit`` and ``cursor``; a message's ``metadata``
  (``{event_type, event_payload}``, as posted) is returned with ``include_all_metadata=true``.
  ``/api/conversations.list`` pages the channels the simulator knows.

Rules that hold tracehound to the real service (each cites its source where it is enforced):
the read methods take form or query arguments only, a JSON body's fields are not read; every
method but ``chat.postMessage`` takes a channel ID, never a name; ``chat.postMessage`` takes
either and answers with the ID; ``limit`` caps; and, switched on with
``configure(marketplace=False)``, the limits Slack puts on apps outside its Marketplace:
``conversations.history``/``.replies`` at one request a minute (``tier1_period`` seconds in
tests) and at most 15 messages a page.
- Auth from ``Authorization: Bearer ...`` or a ``token`` field: a missing token gives
  ``not_authed``, an unaccepted one ``invalid_auth`` (HTTP 200, as Slack does).
- Block Kit limits Slack enforces (50 blocks, 3000-char section text, 150-char header text,
  10 fields of 2000 chars, ...) give ``invalid_blocks``; no text/blocks/attachments ``no_text``.
- ``POST /services/...`` incoming webhooks answer ``ok`` (text) or a text error with HTTP 400.
- ``/api/chat.getPermalink``; ``/api/apps.connections.open`` with an app-level token
  (``xapp-...``) answers the URL of a real Socket Mode websocket (``self.socket_mode``,
  shared/devtools/simulators/slack_socket.py, which also builds signed interaction payloads).

Test controls: accepted tokens and channels, latency, 429 rate limiting with ``Retry-After``,
injected ``{"ok": false, "error": ...}`` replies, stored messages with update history and a
thread-safe request log. Over HTTP, for tests in another process: ``GET /_sim/log``,
``GET /_sim/messages``, ``GET|POST /_sim/config``, ``POST /_sim/reset``. Standalone:
``python -m shared.devtools.simulators.slack --port N``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import hashlib
import json
import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from shared.devtools.simulators._loopback import BaseHandler, LoopbackSimulator, run_until_signal
from shared.devtools.simulators.slack_socket import SocketModeServer

WEBHOOK = "webhook"  # pseudo method name for incoming webhooks in fail() and the log
RATE_LIMITED_METHODS = frozenset({"chat.postMessage", WEBHOOK})
TEAM: Mapping[str, str] = MappingProxyType(
    {"team": "sim", "user": "tracehound", "team_id": "T0SIM", "user_id": "U0SIM", "bot_id": "B0SIM"}
)
_JSON_FIELDS = ("blocks", "attachments", "metadata")
_MAX_BLOCKS = 50
# A conversation ID: upper-case letters and digits after C (public), G (private) or D (direct).
# Slack's spec (slackapi/slack-api-specs web-api/slack_web_openapi_v2.json, defs_channel)
# gives ``^[CGD][A-Z0-9]{8,}$``; shorter IDs are allowed here so tests can name "C1". Channel
# names are lower-case only, so a name never looks like an ID.
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]+$")
# Methods whose spec entry is ``get`` with ``consumes: application/x-www-form-urlencoded``
# only (web_openapi_v2.json: conversations.history, .replies, .info, .list,
# chat.getPermalink; api.slack.com/methods/conversations.list: "This method does not
# currently accept application/json"): a JSON body's fields are not read, so the call is
# answered as if they were never sent (the required ``channel`` missing: channel_not_found).
FORM_ONLY_METHODS = frozenset(
    {
        "conversations.history",
        "conversations.replies",
        "conversations.info",
        "conversations.list",
        "chat.getPermalink",
    }
)
# "Conversation ID to fetch history for." (web_openapi_v2.json, the channel parameter of each):
# these methods answer channel_not_found for a name (with or without "#").
ID_ONLY_METHODS = frozenset(
    {
        "conversations.history",
        "conversations.replies",
        "conversations.info",
        "chat.getPermalink",
        "chat.update",
    }
)
# Page sizes: conversations.history "Maximum of 999. Default: 100"; conversations.replies
# default 1000 (docs.slack.dev reference pages); conversations.list "no larger than 1000.
# Default: 100" (api.slack.com/methods/conversations.list).
_LIMITS = {
    "conversations.history": (100, 999),
    "conversations.replies": (1000, 1000),
    "conversations.list": (100, 1000),
}
# Slack's changelog of 2025-05-29, "Rate limit changes for non-Marketplace apps": for apps not
# approved for the Marketplace, conversations.history and .replies move to Tier 1, "1
# request per minute", and "The maximum and default for the limit parameter has been reduced
# to 15 objects" (new apps from 2025-05-29, existing installations from 2025-09-02).
TIER1_METHODS = frozenset({"conversations.history", "conversations.replies"})
TIER1_LIMIT = 15
_MAX_TEXT = 40_000


def validate_blocks(blocks: Any) -> list[str]:
    """Block Kit problems Slack reports as ``invalid_blocks`` (a practical subset)."""
    if not isinstance(blocks, list):
        return ["must be an array [json-pointer:/blocks]"]
    errors: list[str] = []
    if len(blocks) > _MAX_BLOCKS:
        errors.append(f"no more than {_MAX_BLOCKS} items allowed [json-pointer:/blocks]")
    for i, block in enumerate(blocks):
        where = f"[json-pointer:/blocks/{i}"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            errors.append(f"missing required field: type {where}]")
            continue
        kind = block["type"]
        text = block.get("text")
        if kind == "section":
            fields = block.get("fields")
            if text is None and not fields:
                errors.append(f"must provide either text or fields {where}]")
            if text is not None:
                errors.extend(_text_errors(text, 3000, f"{where}/text", ("mrkdwn", "plain_text")))
            if fields is not None:
                if not isinstance(fields, list) or len(fields) > 10:
                    errors.append(f"must be an array of at most 10 items {where}/fields]")
                else:
                    for j, item in enumerate(fields):
                        errors.extend(
                            _text_errors(
                                item, 2000, f"{where}/fields/{j}", ("mrkdwn", "plain_text")
                            )
                        )
        elif kind == "header":
            errors.extend(_text_errors(text, 150, f"{where}/text", ("plain_text",)))
        elif kind == "context":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= 10:
                errors.append(f"must be an array of 1 to 10 items {where}/elements]")
    return errors


def _text_errors(obj: Any, limit: int, where: str, kinds: tuple[str, ...]) -> list[str]:
    if not isinstance(obj, dict):
        return [f"must be a text object {where}]"]
    if obj.get("type") not in kinds:
        return [f"must be one of {list(kinds)} {where}/type]"]
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        return [f"must be a non-empty string {where}/text]"]
    if len(text) > limit:
        return [f"must be less than {limit + 1} characters {where}/text]"]
    return []


# ------------------------------------------------------------------------- HTTP plumbing


class _Handler(BaseHandler):
    """Slack's wire details: default JSON separators, text replies as ``text/html``."""

    server_version = "SlackSimulator/0"
    text_content_type = "text/html; charset=utf-8"


# ------------------------------------------------------------------------------ simulator


@dataclass
class _Fault:
    error: str
    remaining: int  # -1: forever
    status: int


@dataclass
class _Reply:
    status: int
    payload: Any  # dict -> JSON, str -> text
    headers: dict[str, str]

    @property
    def error(self) -> str | None:
        if isinstance(self.payload, dict) and self.payload.get("ok") is False:
            return str(self.payload.get("error"))
        if isinstance(self.payload, str) and self.status != 200:
            return self.payload
        return None


def is_channel_id(channel: str) -> bool:
    return bool(_CHANNEL_ID.match(channel))


def _name(channel: str) -> str:
    return channel.lstrip("#").lower()


def id_for_name(name: str) -> str:
    """The ID the simulator gives the channel called ``name`` (stable across runs)."""
    return "C" + hashlib.sha1(_name(name).encode()).hexdigest()[:10].upper()


class SlackSimulator(LoopbackSimulator):
    """SIMULATOR of the Slack Web API and incoming webhooks on ``127.0.0.1``: a test double.

    ``valid_tokens=None`` accepts any token starting with ``xoxb-``; ``channels=None`` accepts
    any channel ID, and gives a channel posted to by name its own ID (:func:`id_for_name`);
    else ``channels`` lists the workspace's channels: IDs, names, or ``{id: name}``.
    ``start()`` binds (port 0 = a free port) and serves in a daemon thread;
    ``stop()`` drops kept-alive connections too; a later ``start()`` reuses the same port.
    """

    handler_class = _Handler
    display_name = "SlackSimulator"
    thread_name = "slack-simulator"

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        valid_tokens: Iterable[str] | None = None,
        channels: Iterable[str] | Mapping[str, str] | None = None,
        latency: float = 0.0,
    ) -> None:
        super().__init__(host=host, port=port)
        self._valid_tokens: set[str] | None = None
        self._channels: dict[str, str] | None = None  # id -> name; None: any
        self._seen: dict[str, str] = {}  # id -> name, of channels posted to when any goes
        self._latency = 0.0
        self._thread_latency = 0.0
        self._marketplace = True
        self._tier1_period = 60.0
        self._tier1_last: dict[str, float] = {}
        self._rate_limit_remaining = 0
        self._retry_after = 1
        self._rate_limit_top_level_only = False
        self._faults: dict[str, _Fault] = {}
        self._messages: list[dict[str, Any]] = []
        self._last_ts_micros = 0
        # Socket Mode's websocket, started when an app first calls apps.connections.open.
        self.socket_mode = SocketModeServer(host)
        self.configure(valid_tokens=valid_tokens, channels=channels, latency=latency)

    # ---------------------------------------------------------------- URLs

    @property
    def api_url(self) -> str:
        """``base_url`` for ``slack_sdk.WebClient`` (ends with ``/``)."""
        return f"{self.url}/api/"

    def webhook_url(self, path: str = "/services/T0SIM/B0SIM/simulated") -> str:
        return f"{self.url}{path if path.startswith('/') else '/' + path}"

    # ------------------------------------------------------------ configuration

    def configure(self, **opts: Any) -> None:
        """Change options at runtime: ``valid_tokens`` (iterable or None = any ``xoxb-``),
        ``channels`` (IDs, names or ``{id: name}``; None = any), ``latency`` (seconds per
        request), ``thread_latency`` (more seconds for a post in a thread), ``marketplace``
        (False: the non-Marketplace limits on conversations.history and .replies),
        ``tier1_period`` (their "one request a minute", in seconds)."""
        unknown = set(opts) - {
            "valid_tokens",
            "channels",
            "latency",
            "thread_latency",
            "marketplace",
            "tier1_period",
        }
        if unknown:
            raise TypeError(f"unknown SlackSimulator option(s): {sorted(unknown)}")

        def as_set(value: Any, name: str) -> set[str] | None:
            if value is None:
                return None
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise TypeError(f"{name} must be a list of strings or null")
            return set(value)

        with self._lock:
            if "valid_tokens" in opts:
                self._valid_tokens = as_set(opts["valid_tokens"], "valid_tokens")
            if "channels" in opts:
                self._channels = _workspace(opts["channels"])
            if "marketplace" in opts:
                self._marketplace = bool(opts["marketplace"])
                self._tier1_last.clear()
            if "tier1_period" in opts:
                self._tier1_period = max(0.0, float(opts["tier1_period"]))
            for name in ("latency", "thread_latency"):
                if name in opts:
                    seconds = float(opts[name] or 0.0)
                    if seconds < 0:
                        raise ValueError(f"{name} must be >= 0")
                    setattr(self, f"_{name}", seconds)

    @property
    def config(self) -> dict[str, Any]:
        with self._lock:
            return {
                "valid_tokens": None if self._valid_tokens is None else sorted(self._valid_tokens),
                "channels": None if self._channels is None else dict(self._channels),
                "latency": self._latency,
                "thread_latency": self._thread_latency,
                "marketplace": self._marketplace,
                "tier1_period": self._tier1_period,
            }

    def rate_limit(self, times: int, retry_after: int = 1, *, top_level_only: bool = False) -> None:
        """The next ``times`` chat.postMessage / webhook calls answer HTTP 429 with
        ``Retry-After`` and ``{"ok": false, "error": "ratelimited"}`` (``times=-1``: until
        :meth:`reset_faults`); nothing is stored. ``top_level_only``: thread replies
        (``thread_ts`` set) pass, so a test can aim the 429 at a new message."""
        if times < -1:
            raise ValueError("times must be >= 0, or -1 for forever")
        with self._lock:
            self._rate_limit_remaining = int(times)
            self._retry_after = int(retry_after)
            self._rate_limit_top_level_only = top_level_only

    def fail(
        self,
        method_name: str,
        error: str,
        times: int = 1,
        status: int | None = None,
    ) -> None:
        """The next ``times`` calls of ``method_name`` (e.g. ``"chat.postMessage"``, or
        ``"webhook"``) answer ``{"ok": false, "error": error}`` (HTTP ``status``, default 200);
        webhooks answer ``error`` as text with HTTP ``status`` (default 400)."""
        if times == 0 or times < -1:
            raise ValueError("times must be >= 1, or -1 for forever")
        default = 400 if method_name == WEBHOOK else 200
        with self._lock:
            self._faults[method_name] = _Fault(error, int(times), status or default)

    def reset_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            self._rate_limit_remaining = 0
            self._tier1_last.clear()

    def stop(self) -> None:
        self.socket_mode.stop()
        super().stop()

    def reset(self) -> None:
        """Clear the log, faults, rate limits and stored messages; configuration stays."""
        with self._lock:
            self._log.clear()
            self._faults.clear()
            self._rate_limit_remaining = 0
            self._tier1_last.clear()
            self._messages.clear()

    # -------------------------------------------------------------------- state

    def requests_to(self, path: str) -> list[dict[str, Any]]:
        """Entries whose path is ``path``; ``"chat.postMessage"`` also matches its API path."""
        return [e for e in self.requests if path in (e["path"], e.get("api_method"))]

    @property
    def messages(self) -> list[dict[str, Any]]:
        """Stored messages: ``channel, ts, text, blocks, attachments, thread_ts, via ("api" |
        "webhook"), webhook (path), updated, history (earlier versions), extra, t``."""
        with self._lock:
            return copy.deepcopy(self._messages)

    def messages_in(self, channel: str) -> list[dict[str, Any]]:
        """The messages stored in ``channel`` (its ID, or its name for the ID it was given)."""
        key = self.channel_id(channel) or channel
        return [m for m in self.messages if m["channel"] == key]

    def channel_id(self, channel: str) -> str | None:
        """The ID of ``channel`` (an ID or a name) in this workspace; None if there is none."""
        with self._lock:
            known = self._channels if self._channels is not None else self._seen
            if is_channel_id(channel):
                return channel if self._channels is None or channel in known else None
            name = _name(channel)
            found = next((cid for cid, n in known.items() if n == name), None)
            if found is None and self._channels is None:
                found = id_for_name(name)
                self._seen[found] = name
            return found

    def clear_messages(self) -> None:
        with self._lock:
            self._messages.clear()

    # ------------------------------------------------------------ request flow

    def _handle(self, h: _Handler) -> None:
        received = time.time()
        parts = urlsplit(h.path)
        path = parts.path or "/"
        raw = h.read_body()
        if path.startswith("/_sim/"):
            self._control(h, path, raw)
            return
        content_type = h.headers.get("Content-Type", "").split(";")[0].strip().lower()
        args, json_args, parse_error = _parse_args(raw, content_type, parts.query)
        if path.startswith("/api/"):
            api_method: str | None = path[len("/api/") :]
        elif path.startswith("/services/"):
            api_method = WEBHOOK
        else:
            api_method = None
        if api_method not in FORM_ONLY_METHODS:  # see FORM_ONLY_METHODS: JSON is not read there
            args.update(json_args)
        auth = h.headers.get("Authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        if "token" in args:
            form_token = args.pop("token")
            token = token or (form_token if isinstance(form_token, str) else None)
        entry: dict[str, Any] = {
            "t": received,
            "t_end": None,
            "method": h.command,
            "path": path,
            "api_method": api_method,
            "content_type": content_type,
            "body": args if parse_error is None else None,
            "json_ignored": sorted(json_args) if api_method in FORM_ONLY_METHODS else [],
            "token": token,
            "status": None,
            "error": None,
        }
        with self._lock:
            self._record(entry)
            latency = self._latency
            if api_method == "chat.postMessage" and args.get("thread_ts"):
                latency += self._thread_latency
        if latency:
            time.sleep(latency)
        reply = _Reply(500, {"ok": False, "error": "internal_error"}, {})
        try:
            reply = self._answer(api_method, path, args, token, parse_error)
        except Exception as exc:  # a simulator bug: answer rather than hang the client
            reply = _Reply(500, {"ok": False, "error": f"simulator_error: {exc!r}"}, {})
        finally:
            with self._lock:  # before writing, so a client with its answer sees the entry done
                entry["status"] = reply.status
                entry["error"] = reply.error
                entry["t_end"] = time.time()
            if isinstance(reply.payload, str):
                h.send_text(reply.status, reply.payload, reply.headers)
            else:
                h.send_json(reply.status, reply.payload, reply.headers)

    def _take(self, api_method: str, args: dict[str, Any]) -> _Reply | None:
        """A rate-limit or injected failure for this call, if one is pending (lock held)."""
        limited = not (self._rate_limit_top_level_only and args.get("thread_ts"))
        if api_method in RATE_LIMITED_METHODS and self._rate_limit_remaining != 0 and limited:
            if self._rate_limit_remaining > 0:
                self._rate_limit_remaining -= 1
            return _Reply(
                429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(self._retry_after)}
            )
        fault = self._faults.get(api_method)
        if fault is None:
            return None
        if fault.remaining > 0:
            fault.remaining -= 1
            if fault.remaining == 0:
                del self._faults[api_method]
        if api_method == WEBHOOK:
            return _Reply(fault.status, fault.error, {})
        return _Reply(fault.status, {"ok": False, "error": fault.error}, {})

    def _answer(
        self,
        api_method: str | None,
        path: str,
        args: dict[str, Any],
        token: str | None,
        parse_error: str | None,
    ) -> _Reply:
        if api_method is None:
            return _Reply(404, "not_found", {})
        with self._lock:
            injected = self._take(api_method, args)
        if injected is not None:
            return injected
        if api_method == WEBHOOK:
            return self._webhook(path, args, parse_error)
        if parse_error is not None:
            return _fail("invalid_json" if "json" in parse_error else "invalid_form_data")
        if not token:
            return _fail("not_authed")
        if api_method == "apps.connections.open":  # the one method an app-level token calls
            if not token.startswith("xapp-"):
                return _fail("invalid_auth")
            return _Reply(200, {"ok": True, "url": self.socket_mode.url()}, {})
        with self._lock:
            valid = self._valid_tokens
        if (token not in valid) if valid is not None else not token.startswith("xoxb-"):
            return _fail("invalid_auth")
        handlers = {
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "auth.test": self._auth_test,
            "conversations.history": self._history,
            "conversations.replies": self._replies,
            "conversations.list": self._list,
            "chat.getPermalink": self._permalink,
        }
        handler = handlers.get(api_method)
        if handler is None:
            return _Reply(
                200, {"ok": False, "error": "unknown_method", "req_method": api_method}, {}
            )
        with self._lock:
            limited = self._tier1(api_method)
        return limited or handler(args)

    def _tier1(self, api_method: str) -> _Reply | None:
        """Outside the Marketplace, conversations.history and .replies take one request a
        minute (see TIER1_METHODS): a second within the period is a 429 with the seconds left
        in ``Retry-After`` (api.slack.com/apis/rate-limits: "a Retry-After header containing
        the number of seconds until you can retry"). Lock held."""
        if self._marketplace or api_method not in TIER1_METHODS:
            return None
        now = time.monotonic()
        last = self._tier1_last.get(api_method)
        if last is not None and now - last < self._tier1_period:
            wait = max(1, math.ceil(self._tier1_period - (now - last)))
            return _Reply(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(wait)})
        self._tier1_last[api_method] = now
        return None

    def _resolve(self, channel: Any, method: str) -> tuple[str, _Reply | None]:
        """The channel's ID, or the error Slack gives for it."""
        if not isinstance(channel, str) or not channel:
            return "", _fail("channel_not_found")
        if method in ID_ONLY_METHODS and not is_channel_id(channel):
            return "", _fail("channel_not_found")  # a name where Slack takes only an ID
        found = self.channel_id(channel)
        return (found, None) if found else ("", _fail("channel_not_found"))

    def _next_ts(self) -> str:
        """Slack's ``ts``: the time it took the message, in microseconds, unique per workspace
        here (real ones are unique per channel)."""
        with self._lock:
            micros = max(int(time.time() * 1_000_000), self._last_ts_micros + 1)
            self._last_ts_micros = micros
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"

    @staticmethod
    def _content_error(args: Mapping[str, Any]) -> _Reply | None:
        text, blocks = args.get("text"), args.get("blocks")
        if not text and not blocks and not args.get("attachments"):
            return _fail("no_text")
        if text is not None and not isinstance(text, str):
            return _fail("invalid_arguments")
        if isinstance(text, str) and len(text) > _MAX_TEXT:
            return _fail("msg_too_long")
        if blocks is not None:
            errors = validate_blocks(blocks)
            if errors:
                return _Reply(
                    200,
                    {
                        "ok": False,
                        "error": "invalid_blocks",
                        "errors": errors,
                        "response_metadata": {"messages": [f"[ERROR] {e}" for e in errors]},
                    },
                    {},
                )
        return None

    def _post_message(self, args: dict[str, Any]) -> _Reply:
        # "Can be an encoded ID, or a name" (web_openapi_v2.json, chat.postMessage channel);
        # the answer's channel is the ID (its schema: defs_channel).
        channel, problem = self._resolve(args.get("channel"), "chat.postMessage")
        problem = problem or self._content_error(args)
        if problem is not None:
            return problem
        ts = self._next_ts()
        message = self._store(channel, ts, args, via="api", webhook=None)
        reply_message = {
            "type": "message",
            "subtype": "bot_message",
            "text": message["text"],
            "ts": ts,
            "user": TEAM["user_id"],
            "bot_id": TEAM["bot_id"],
        }
        if message["blocks"] is not None:
            reply_message["blocks"] = message["blocks"]
        if message["thread_ts"]:
            reply_message["thread_ts"] = message["thread_ts"]
        return _Reply(200, {"ok": True, "channel": channel, "ts": ts, "message": reply_message}, {})

    def _store(
        self, channel: Any, ts: str, args: Mapping[str, Any], *, via: str, webhook: str | None
    ) -> dict[str, Any]:
        known = {"channel", "text", "blocks", "attachments", "thread_ts"}
        thread_ts = args.get("thread_ts")
        message = {
            "channel": channel,
            "ts": ts,
            "text": args.get("text") or "",
            "blocks": args.get("blocks"),
            "attachments": args.get("attachments"),
            "thread_ts": str(thread_ts) if thread_ts else None,
            "via": via,
            "webhook": webhook,
            "updated": False,
            "history": [],
            "extra": {k: v for k, v in args.items() if k not in known},
            "t": time.time(),
        }
        with self._lock:
            self._messages.append(message)
            return copy.deepcopy(message)

    def _update(self, args: dict[str, Any]) -> _Reply:
        channel, problem = self._resolve(args.get("channel"), "chat.update")
        ts = args.get("ts")
        if problem is not None:
            return problem
        if not isinstance(ts, str) or not ts:
            return _fail("message_not_found")
        blocks = args.get("blocks")
        if blocks is not None:
            errors = validate_blocks(blocks)
            if errors:
                return _Reply(200, {"ok": False, "error": "invalid_blocks", "errors": errors}, {})
        text = args.get("text")
        if isinstance(text, str) and len(text) > _MAX_TEXT:
            return _fail("msg_too_long")
        with self._lock:
            found = next(
                (m for m in self._messages if m["ts"] == ts and m["channel"] == channel), None
            )
            if found is None:
                return _fail("message_not_found")
            found["history"].append(
                {"text": found["text"], "blocks": found["blocks"], "t": time.time()}
            )
            if text is not None:
                found["text"] = text
            if blocks is not None:
                found["blocks"] = blocks
            found["updated"] = True
            message = {
                "type": "message",
                "text": found["text"],
                "ts": ts,
                "user": TEAM["user_id"],
                "bot_id": TEAM["bot_id"],
                "edited": {"user": TEAM["user_id"], "ts": f"{time.time():.6f}"},
            }
            if found["blocks"] is not None:
                message["blocks"] = copy.deepcopy(found["blocks"])
        return _Reply(
            200,
            {"ok": True, "channel": channel, "ts": ts, "text": message["text"], "message": message},
            {},
        )

    def _listed(self, message: dict[str, Any], with_metadata: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "message",
            "text": message["text"],
            "ts": message["ts"],
            "user": TEAM["user_id"],
            "bot_id": TEAM["bot_id"],
        }
        if message["blocks"] is not None:
            out["blocks"] = copy.deepcopy(message["blocks"])
        if message["thread_ts"]:
            out["thread_ts"] = message["thread_ts"]
        metadata = message["extra"].get("metadata")
        if with_metadata and isinstance(metadata, dict):
            out["metadata"] = copy.deepcopy(metadata)
        return out

    def _in_channel(
        self, args: dict[str, Any], method: str
    ) -> tuple[str, list[dict[str, Any]], _Reply | None]:
        channel, problem = self._resolve(args.get("channel"), method)
        if problem is not None:
            return "", [], problem
        with self._lock:
            found = [
                copy.deepcopy(m)
                for m in self._messages
                if m["via"] == "api" and m["channel"] == channel
            ]
        return channel, found, None

    @staticmethod
    def _flag(args: dict[str, Any], name: str) -> bool:
        return str(args.get(name, "")).lower() in ("true", "1")

    def _limit(self, args: dict[str, Any], method: str) -> int:
        """``limit`` as Slack applies it: its default when absent, never above the cap (15
        outside the Marketplace for TIER1_METHODS)."""
        default, cap = _LIMITS[method]
        if not self._marketplace and method in TIER1_METHODS:
            default, cap = TIER1_LIMIT, TIER1_LIMIT
        try:
            asked = int(args.get("limit") or 0)
        except (TypeError, ValueError):
            asked = 0
        return min(asked, cap) if asked > 0 else default

    def _page(
        self,
        items: list[dict[str, Any]],
        args: dict[str, Any],
        method: str,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]] | _Reply:
        """One page of ``items`` (in the order Slack gives them) from ``cursor``, and the page
        fields: ``has_more`` and ``response_metadata.next_cursor`` ("" at the end, as
        web_openapi_v2.json's examples of conversations.list show)."""
        limit = self._limit(args, method)
        start = 0
        if cursor := str(args.get("cursor") or ""):
            try:
                start = int(base64.urlsafe_b64decode(cursor.encode()).decode().split(":")[1])
            except (ValueError, IndexError, UnicodeDecodeError):
                return _fail("invalid_cursor")
        page = items[start : start + limit]
        more = start + limit < len(items)
        following = base64.urlsafe_b64encode(f"next:{start + limit}".encode()).decode()
        return page, {
            "has_more": more,
            "response_metadata": {"next_cursor": following if more else ""},
        }

    @staticmethod
    def _bounds(args: dict[str, Any]) -> tuple[float, float, bool] | _Reply:
        """``oldest`` (default 0) and ``latest`` (default now), both left out unless
        ``inclusive`` (docs.slack.dev conversations.history: "If a message has the same
        timestamp as oldest or latest it will not be included in the list")."""
        try:
            oldest = float(args.get("oldest") or 0)
        except ValueError:
            return _fail("invalid_ts_oldest")
        try:
            latest = float(args.get("latest") or time.time() + 1)
        except ValueError:
            return _fail("invalid_ts_latest")
        return oldest, latest, str(args.get("inclusive", "")).lower() in ("true", "1")

    @staticmethod
    def _within(ts: str, oldest: float, latest: float, inclusive: bool) -> bool:
        t = float(ts)
        return oldest <= t <= latest if inclusive else oldest < t < latest

    def _history(self, args: dict[str, Any]) -> _Reply:
        """Top-level messages between the bounds, newest first."""
        _, found, problem = self._in_channel(args, "conversations.history")
        bounds = problem or self._bounds(args)
        if isinstance(bounds, _Reply):
            return bounds
        top = [m for m in found if not m["thread_ts"] and self._within(m["ts"], *bounds)]
        top.sort(key=lambda m: float(m["ts"]), reverse=True)
        paged = self._page(top, args, "conversations.history")
        if isinstance(paged, _Reply):
            return paged
        page, more = paged
        meta = self._flag(args, "include_all_metadata")
        messages = [self._listed(m, meta) for m in page]
        return _Reply(200, {"ok": True, "messages": messages, **more}, {})

    def _replies(self, args: dict[str, Any]) -> _Reply:
        """A thread between the bounds, oldest first; ``ts`` must be a message of the
        channel ("ts must be the timestamp of an existing message", docs.slack.dev)."""
        _, found, problem = self._in_channel(args, "conversations.replies")
        bounds = problem or self._bounds(args)
        if isinstance(bounds, _Reply):
            return bounds
        ts = str(args.get("ts") or "")
        if not any(m["ts"] == ts for m in found):
            return _fail("thread_not_found")
        thread = [
            m
            for m in found
            if (m["ts"] == ts or m["thread_ts"] == ts) and self._within(m["ts"], *bounds)
        ]
        thread.sort(key=lambda m: float(m["ts"]))
        paged = self._page(thread, args, "conversations.replies")
        if isinstance(paged, _Reply):
            return paged
        page, more = paged
        meta = self._flag(args, "include_all_metadata")
        messages = [self._listed(m, meta) for m in page]
        return _Reply(200, {"ok": True, "messages": messages, **more}, {})

    def _list(self, args: dict[str, Any]) -> _Reply:
        """The workspace's channels (those configured, or posted to when any goes)."""
        with self._lock:
            known = dict(self._channels if self._channels is not None else self._seen)
            for m in self._messages:
                if m["via"] == "api" and m["channel"] not in known:
                    known[m["channel"]] = m["channel"].lower()
        channels = [
            {"id": cid, "name": name, "is_channel": True, "is_private": False,
             "is_archived": False, "name_normalized": name}
            for cid, name in sorted(known.items())
        ]  # fmt: skip
        paged = self._page(channels, args, "conversations.list")
        if isinstance(paged, _Reply):
            return paged
        page, more = paged
        return _Reply(
            200, {"ok": True, "channels": page, "response_metadata": more["response_metadata"]}, {}
        )

    def _permalink(self, args: dict[str, Any]) -> _Reply:
        channel, problem = self._resolve(args.get("channel"), "chat.getPermalink")
        ts = str(args.get("message_ts") or "")
        if problem is not None:
            return problem
        with self._lock:
            known = any(m["ts"] == ts and m["channel"] == channel for m in self._messages)
        if not known:
            return _fail("message_not_found")
        link = f"https://tracehound-sim.slack.com/archives/{channel}/p{ts.replace('.', '')}"
        return _Reply(200, {"ok": True, "channel": channel, "permalink": link}, {})

    def _auth_test(self, args: dict[str, Any]) -> _Reply:
        return _Reply(
            200,
            {
                "ok": True,
                "url": "https://tracehound-sim.slack.com/",
                **TEAM,
                "is_enterprise_install": False,
            },
            {},
        )

    def _webhook(self, path: str, args: dict[str, Any], parse_error: str | None) -> _Reply:
        if parse_error is not None or not args:
            return _Reply(400, "invalid_payload", {})
        problem = self._content_error(args)
        if problem is not None:
            assert isinstance(problem.payload, dict)
            return _Reply(400, str(problem.payload["error"]), {})
        self._store(args.get("channel"), self._next_ts(), args, via="webhook", webhook=path)
        return _Reply(200, "ok", {})

    # ---------------------------------------------------------------- control

    def _control(self, h: _Handler, path: str, raw: bytes) -> None:
        try:
            body = json.loads(raw) if raw.strip() else {}
        except (ValueError, UnicodeDecodeError) as exc:
            h.send_json(400, {"ok": False, "error": f"invalid JSON: {exc}"})
            return
        method = h.command
        try:
            if method == "GET" and path == "/_sim/log":
                h.send_json(200, self.requests)
            elif method == "GET" and path == "/_sim/messages":
                h.send_json(200, self.messages)
            elif method == "GET" and path == "/_sim/config":
                h.send_json(200, self.config)
            elif method == "POST" and path == "/_sim/reset":
                self.reset()
                h.send_json(200, {"ok": True})
            elif method == "POST" and path == "/_sim/config":
                if not isinstance(body, dict):
                    raise TypeError("config body must be a JSON object")
                options = dict(body)
                rate = options.pop("rate_limit", None)
                faults = options.pop("fail", None)
                if options.pop("reset_faults", False):
                    self.reset_faults()
                self.configure(**options)
                if rate is not None:
                    self.rate_limit(
                        int(rate["times"]),
                        int(rate.get("retry_after", 1)),
                        top_level_only=bool(rate.get("top_level_only", False)),
                    )
                for item in faults if isinstance(faults, list) else [faults] if faults else []:
                    self.fail(
                        str(item["method"]),
                        str(item["error"]),
                        int(item.get("times", 1)),
                        item.get("status"),
                    )
                h.send_json(200, self.config)
            else:
                h.send_json(404, {"ok": False, "error": "unknown_control_endpoint"})
        except (TypeError, ValueError, KeyError) as exc:
            h.send_json(400, {"ok": False, "error": str(exc)})


def _fail(error: str) -> _Reply:
    return _Reply(200, {"ok": False, "error": error}, {})


def _parse_args(
    raw: bytes, content_type: str, query: str
) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """Query parameters plus a form body (JSON strings in ``blocks`` etc. decoded), and a
    JSON body's fields apart: some methods do not read them."""
    args: dict[str, Any] = dict(parse_qsl(query, keep_blank_values=True))
    if not raw.strip():
        return args, {}, None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return args, {}, f"invalid encoding: {exc}"
    if content_type == "application/json" or (not content_type and text.lstrip()[:1] in "{["):
        try:
            body = json.loads(text)
        except ValueError as exc:
            return args, {}, f"invalid json: {exc}"
        if not isinstance(body, dict):
            return args, {}, "invalid json: body is not an object"
        return args, body, None
    if content_type in ("application/x-www-form-urlencoded", ""):
        form = dict(parse_qsl(text, keep_blank_values=True))
        if "payload" in form and len(form) == 1:  # legacy webhook form: payload=<json>
            try:
                payload = json.loads(form["payload"])
            except ValueError as exc:
                return args, {}, f"invalid json payload: {exc}"
            if isinstance(payload, dict):
                form = payload
        args.update(form)
        for name in _JSON_FIELDS:
            value = args.get(name)
            if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
                with contextlib.suppress(ValueError):  # else a string: block validation says so
                    args[name] = json.loads(value)
        return args, {}, None
    return args, {}, f"unsupported content type {content_type!r}"


def _workspace(channels: Any) -> dict[str, str] | None:
    """Configured channels as ``{id: name}``: an ID alone is named after itself, a name alone
    gets :func:`id_for_name`."""
    if channels is None:
        return None
    if isinstance(channels, Mapping):
        pairs = list(channels.items())
    elif isinstance(channels, str) or not all(isinstance(c, str) for c in channels):
        raise TypeError("channels must be a list of IDs or names, a {id: name} map, or null")
    else:
        pairs = [(c, c.lower()) if is_channel_id(c) else (id_for_name(c), c) for c in channels]
    out: dict[str, str] = {}
    for cid, name in pairs:
        if not (isinstance(cid, str) and is_channel_id(cid) and isinstance(name, str)):
            raise TypeError(f"channel {cid!r}: an ID is upper-case letters and digits after C/G/D")
        out[cid] = _name(name)
    return out


# ----------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """Run the simulator in the foreground; prints its URL, stops on SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(
        prog="python -m shared.devtools.simulators.slack",
        description="SIMULATOR of the Slack Web API and incoming webhooks (a test double).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = any free port")
    parser.add_argument("--channels", default=None, help="comma-separated; default: any")
    parser.add_argument("--tokens", default=None, help="comma-separated; default: any xoxb-")
    parser.add_argument("--latency", type=float, default=0.0, metavar="SECONDS")
    args = parser.parse_args(argv)

    def split(value: str | None) -> list[str] | None:
        return None if value is None else [v.strip() for v in value.split(",") if v.strip()]

    sim = SlackSimulator(
        host=args.host,
        port=args.port,
        valid_tokens=split(args.tokens),
        channels=split(args.channels),
        latency=args.latency,
    )
    return run_until_signal(sim)


if __name__ == "__main__":
    raise SystemExit(main())
