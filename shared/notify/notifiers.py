"""Destinations for a finished analysis: Slack (bot token or webhook) or the console and a file."""

from __future__ import annotations

import copy
import json
import re
import sys
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TextIO

from shared.core.errors import PermanentError, TransientError

METADATA_EVENT = "tracehound_alert"  # Slack message metadata: which delivery posted it

# Slack channel IDs are upper-case (C… public, G… private, D… direct); channel names are
# lower-case only ("Channel names can only contain lowercase letters, numbers, hyphens, and
# underscores": Slack's conversations.create/rename docs), so the two never look alike.
CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]+$")
# conversations.history/replies for apps outside the Slack Marketplace (Slack's changelog of
# 2025-05-29): 1 request a minute, ``limit`` at most 15. A page of 15 is correct everywhere.
HISTORY_PAGE = 15


@dataclass(frozen=True)
class Delivery:
    destination: str
    channel: str | None = None
    ts: str | None = None


@dataclass(frozen=True)
class Window:
    """The part of a channel (or thread) still to read for a lost post: Slack ``ts`` bounds,
    in seconds. A lookup reads one page and hands back the rest, so a rate-limited lookup
    resumes where it stopped instead of reading the newest page again."""

    oldest: float
    latest: float

    def dump(self) -> str:
        return f"{self.oldest:.6f}:{self.latest:.6f}"

    @classmethod
    def load(cls, text: str) -> Window:
        oldest, latest = text.split(":")
        return cls(float(oldest), float(latest))


class Notifier(Protocol):
    destination: str

    def send(
        self,
        text: str,
        blocks: list[dict[str, Any]],
        *,
        thread_ts: str | None = None,
        claim: str | None = None,
    ) -> Delivery:
        """Post; ``claim`` marks the message (Slack message metadata) so ``find`` can tell
        later whether a post whose answer was lost reached the channel."""

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> None:
        """Rewrite a message already sent (a no-op where the destination cannot)."""

    def find(
        self, claim: str, *, within: Window, thread_ts: str | None = None
    ) -> Delivery | Window | None:
        """One page of the search for the message posted with ``claim`` inside ``within``:
        the message; the part of the window still to read; or None (not there, or the
        destination cannot say)."""

    def permalink(self, channel: str, ts: str) -> str | None:
        """A link to a message sent, if the destination has them (else None)."""


def _retry_after(headers: Any) -> float | None:
    value = (headers or {}).get("Retry-After") or (headers or {}).get("retry-after")
    if isinstance(value, list):
        value = value[0] if value else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


# What became of a call to Slack, as the metrics count it (a bounded set: the label values).
OK, RATE_LIMITED, SERVER_ERROR, REFUSED, NO_ANSWER = (
    "ok",
    "rate_limited",
    "server_error",
    "refused",
    "no_answer",
)
SLACK_OUTCOMES = (OK, RATE_LIMITED, SERVER_ERROR, REFUSED, NO_ANSWER)
_SERVER_ERRORS = ("internal_error", "fatal_error", "service_unavailable", "request_timeout")

# Told of every call to Slack: its API method (or "webhook") and its outcome.
CallObserver = Callable[[str, str], None]


def slack_outcome(status: int, error: str) -> str:
    """How Slack answered a call that failed: rate limited, its own failure, or a refusal."""
    if status == 429 or error == "ratelimited":
        return RATE_LIMITED
    if status >= 500 or error in _SERVER_ERRORS:
        return SERVER_ERROR
    return REFUSED


def _slack_failure(what: str, status: int, error: str, headers: Any) -> Exception:
    outcome = slack_outcome(status, error)
    if outcome == RATE_LIMITED:
        wait = _retry_after(headers)
        return TransientError(f"{what}: rate limited (Retry-After {wait})", retry_after=wait)
    if outcome == SERVER_ERROR:
        return TransientError(f"{what}: Slack error {status} {error}")
    return PermanentError(f"{what}: Slack refused the message: {error or status}")


def channel_key(channel: str) -> str:
    """A channel as configured (``#alerts``, ``alerts`` or an ID) in one spelling."""
    return channel if CHANNEL_ID.match(channel) else channel.lstrip("#").lower()


class SlackBotNotifier:
    """A bot token on the Web API; the base URL is configurable for tests.

    Every method goes through slack-sdk's typed wrapper, so each is sent the way Slack's
    spec gives it: ``chat.postMessage`` and ``chat.update`` as JSON, the read methods
    (``conversations.history``/``.replies``/``.list``, ``chat.getPermalink``) as form
    arguments — Slack's spec gives them no JSON body, and reads none there. A configured
    channel name is resolved to its ID once (``conversations.list``, or the ID
    ``chat.postMessage`` answers with): every method but ``chat.postMessage`` takes only IDs.
    """

    def __init__(
        self,
        token: str,
        channel: str,
        *,
        base_url: str,
        timeout: float = 30.0,
        channel_ids: MutableMapping[str, str] | None = None,
        on_call: CallObserver | None = None,
    ) -> None:
        from slack_sdk import WebClient

        if not base_url.endswith("/"):
            base_url += "/"  # slack-sdk joins method names onto it
        self.channel = channel
        self._client = WebClient(token=token, base_url=base_url, timeout=int(timeout))
        # name -> ID, shared by the routed copies (and, given one, across processes).
        self._ids: MutableMapping[str, str] = {} if channel_ids is None else channel_ids
        self.on_call = on_call

    destination = "slack"

    def in_channel(self, channel: str) -> SlackBotNotifier:
        """The same bot (and HTTP client) posting to another channel: a routed message."""
        other = copy.copy(self)
        other.channel = channel
        return other

    def _call(self, method: str, call: Callable[[], Any]) -> Any:
        from slack_sdk.errors import SlackApiError, SlackClientError

        try:
            answer = call()
        except SlackApiError as exc:
            r = exc.response
            status, error = r.status_code, str(r.get("error", ""))
            self._observe(method, slack_outcome(status, error))
            raise _slack_failure(f"slack {method}", status, error, r.headers) from exc
        except (SlackClientError, OSError) as exc:
            # No answer: Slack may still have done it (a post that timed out can be in the
            # channel).
            self._observe(method, NO_ANSWER)
            raise TransientError(f"slack {method}: {exc}", maybe_done=True) from exc
        self._observe(method, OK)
        return answer

    def _observe(self, method: str, outcome: str) -> None:
        if self.on_call is not None:
            self.on_call(method, outcome)

    def channel_id(self, channel: str | None = None) -> str:
        """The ID of ``channel`` (default: this notifier's). ``PermanentError`` when Slack
        knows no channel of that name the bot can see."""
        key = channel_key(channel or self.channel)
        if CHANNEL_ID.match(key):
            return key
        known = self._ids.get(key)
        if known:
            return known

        def lookup() -> str | None:
            pages = self._client.conversations_list(
                types="public_channel,private_channel", exclude_archived=True, limit=200
            )
            for page in pages:  # SlackResponse follows response_metadata.next_cursor
                for conv in page.get("channels") or []:
                    if isinstance(conv, dict) and conv.get("name") == key and conv.get("id"):
                        return str(conv["id"])
            return None

        found = self._call("conversations.list", lookup)
        if not found:
            raise PermanentError(
                f"slack: no channel #{key} the bot can see; configure its ID (C…) instead"
            )
        self._ids[key] = found
        return found

    def send(
        self,
        text: str,
        blocks: list[dict[str, Any]],
        *,
        thread_ts: str | None = None,
        claim: str | None = None,
    ) -> Delivery:
        extra: dict[str, Any] = {"thread_ts": thread_ts} if thread_ts else {}
        if claim:
            extra["metadata"] = {"event_type": METADATA_EVENT, "event_payload": {"claim": claim}}
        key = channel_key(self.channel)
        channel = self._ids.get(key, key)  # a name is fine here: Slack answers with the ID
        resp = self._call(
            "chat.postMessage",
            lambda: self._client.chat_postMessage(
                channel=channel,
                text=text,
                blocks=blocks,
                unfurl_links=False,
                unfurl_media=False,
                **extra,
            ),
        )
        answered = resp.get("channel")
        if isinstance(answered, str) and CHANNEL_ID.match(answered) and answered != key:
            self._ids[key] = answered
        return Delivery("slack", channel=answered, ts=resp.get("ts"))

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> None:
        target = self.channel_id(channel)
        self._call(
            "chat.update",
            lambda: self._client.chat_update(channel=target, ts=ts, text=text, blocks=blocks),
        )

    def permalink(self, channel: str, ts: str) -> str | None:
        """chat.getPermalink; None when Slack does not give one (the link is a nicety)."""
        try:
            target = self.channel_id(channel)
            resp = self._call(
                "chat.getPermalink",
                lambda: self._client.chat_getPermalink(channel=target, message_ts=ts),
            )
        except (PermanentError, TransientError):
            return None
        link = resp.get("permalink")
        return link if isinstance(link, str) and link.startswith("https://") else None

    def find(
        self, claim: str, *, within: Window, thread_ts: str | None = None
    ) -> Delivery | Window | None:
        """One page of the channel's messages (or the thread's) inside ``within``, looking
        for ``claim`` in their metadata. History comes newest first and replies oldest
        first: the rest of the window is what lies beyond the page."""
        channel = self.channel_id()
        oldest, latest = f"{within.oldest:.6f}", f"{within.latest:.6f}"
        if thread_ts:
            resp = self._call(
                "conversations.replies",
                lambda: self._client.conversations_replies(
                    channel=channel,
                    ts=thread_ts,
                    oldest=oldest,
                    latest=latest,
                    inclusive=False,
                    include_all_metadata=True,
                    limit=HISTORY_PAGE,
                ),
            )
        else:
            resp = self._call(
                "conversations.history",
                lambda: self._client.conversations_history(
                    channel=channel,
                    oldest=oldest,
                    latest=latest,
                    inclusive=False,
                    include_all_metadata=True,
                    limit=HISTORY_PAGE,
                ),
            )
        messages = [m for m in resp.get("messages") or [] if isinstance(m, dict)]
        for message in messages:
            metadata = message.get("metadata") or {}
            payload = metadata.get("event_payload") or {}
            if metadata.get("event_type") == METADATA_EVENT and payload.get("claim") == claim:
                return Delivery("slack", channel=channel, ts=message.get("ts"))
        stamps = [float(m["ts"]) for m in messages if _is_ts(m.get("ts"))]
        if not resp.get("has_more") or not stamps:
            return None
        if thread_ts:  # oldest first: go on after the newest seen
            return Window(max(stamps), within.latest)
        return Window(within.oldest, min(stamps))  # newest first: go on before the oldest


def _is_ts(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


class SlackWebhookNotifier:
    """An incoming webhook: no token, one fixed channel, no ``ts`` to update later."""

    def __init__(
        self, url: str, *, timeout: float = 30.0, on_call: CallObserver | None = None
    ) -> None:
        from slack_sdk.webhook import WebhookClient

        self._client = WebhookClient(url, timeout=int(timeout))
        self.on_call = on_call

    destination = "slack-webhook"

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> None:
        return None  # a webhook message cannot be edited; the next window posts the count

    def find(
        self, claim: str, *, within: Window, thread_ts: str | None = None
    ) -> Delivery | Window | None:
        return None  # a webhook cannot read its channel back

    def permalink(self, channel: str, ts: str) -> str | None:
        return None

    def send(
        self,
        text: str,
        blocks: list[dict[str, Any]],
        *,
        thread_ts: str | None = None,
        claim: str | None = None,
    ) -> Delivery:
        if thread_ts:
            return Delivery("slack-webhook")  # webhooks cannot reply in threads
        try:
            resp = self._client.send(text=text, blocks=blocks)
        except OSError as exc:
            self._observe(NO_ANSWER)
            raise TransientError(f"slack webhook: {exc}") from exc
        if resp.status_code != 200:
            self._observe(slack_outcome(resp.status_code, resp.body or ""))
            raise _slack_failure("slack webhook", resp.status_code, resp.body or "", resp.headers)
        self._observe(OK)
        return Delivery("slack-webhook")

    def _observe(self, outcome: str) -> None:
        if self.on_call is not None:
            self.on_call("webhook", outcome)


# Emphasis markers only where mrkdwn treats them as such: not inside identifiers (order_service).
_BOLD = re.compile(r"(?<!\w)\*([^*\n]+)\*(?!\w)")
_ITALIC = re.compile(r"(?<!\w)_([^_\n]+)_(?!\w)")


def plain(text: str) -> str:
    """mrkdwn (with its escapes) as terminal text."""
    # Odd segments between ``` fences are code: shown as they are (``*args`` stays).
    parts = text.split("```")
    for i in range(0, len(parts), 2):
        parts[i] = _ITALIC.sub(r"\1", _BOLD.sub(r"\1", parts[i]))
    text = "".join(parts)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def render_console(blocks: list[dict[str, Any]]) -> str:
    """The blocks as readable terminal text: what the Slack message would show."""
    out: list[str] = []
    for b in blocks:
        if b["type"] == "header":
            title = b["text"]["text"]
            out += [title, "=" * len(title)]
        elif b["type"] == "section":
            out += [plain(b["text"]["text"]), ""]
        elif b["type"] == "context":
            out += [plain(e.get("text", "")) for e in b["elements"]]
    return "\n".join(out).rstrip() + "\n"


class ConsoleNotifier:
    """No Slack configured: print the message and append it as JSON to a file."""

    def __init__(self, path: Path, *, stream: TextIO | None = None) -> None:
        self.path = path
        self._stream = stream

    destination = "console"

    def _write(self, record: dict[str, Any], shown: str) -> None:
        stream = self._stream or sys.stdout
        stream.write(shown)
        stream.flush()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")

    def send(
        self,
        text: str,
        blocks: list[dict[str, Any]],
        *,
        thread_ts: str | None = None,
        claim: str | None = None,
    ) -> Delivery:
        ts = f"{datetime.now(UTC).timestamp():.6f}"
        record = {
            "at": datetime.now(UTC).isoformat(),
            "ts": ts,
            "thread_ts": thread_ts,
            "text": text,
            "blocks": blocks,
            "claim": claim,
        }
        shown = render_console(blocks) if blocks else plain(text) + "\n"
        self._write(record, ("  ↳ " if thread_ts else "") + shown)
        return Delivery("console", channel=str(self.path), ts=ts)

    def find(
        self, claim: str, *, within: Window | None = None, thread_ts: str | None = None
    ) -> Delivery | Window | None:
        """A message written with ``claim`` among the file's last megabyte."""
        try:
            with self.path.open("rb") as f:
                f.seek(max(0, self.path.stat().st_size - (1 << 20)))
                tail = f.read().decode("utf-8", errors="replace").splitlines()
        except OSError:
            return None
        for line in reversed(tail):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("claim") == claim:
                return Delivery("console", channel=str(self.path), ts=record.get("ts"))
        return None

    def permalink(self, channel: str, ts: str) -> str | None:
        return None

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> None:
        record = {
            "at": datetime.now(UTC).isoformat(),
            "update_of": ts,
            "text": text,
            "blocks": blocks,
        }
        self._write(record, f"[updated {ts}] " + plain(text).splitlines()[0] + "\n")
