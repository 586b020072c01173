"""SIMULATOR — Slack's Socket Mode and interaction payloads, for tests; NOT the real service.

- :class:`SocketModeServer`: the websocket ``apps.connections.open`` hands out (a real
  websocket server on loopback, ``websockets``' sync server). On connect it sends Slack's
  ``hello``; :meth:`SocketModeServer.deliver` sends an ``interactive`` envelope to the
  connected app and :meth:`SocketModeServer.wait_ack` waits for its ack
  (``{"envelope_id": ...}``), as Slack does before showing the press as failed.
- :func:`block_actions` builds the ``block_actions`` payload Slack sends when a user presses
  a button (or picks an option) of a stored message; :func:`signed_request` encodes it as the
  HTTP Request URL receives it (``payload=`` form body, ``X-Slack-Signature`` and
  ``X-Slack-Request-Timestamp`` computed with the signing secret, as Slack signs).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlencode

APP_ID = "A0SIM"


class SocketModeServer:
    """The websocket end of Socket Mode on ``127.0.0.1`` (started on first use)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Condition()
        self._connections: list[Any] = []
        self.acks: dict[str, dict[str, Any]] = {}
        self.delivered: list[dict[str, Any]] = []

    def url(self) -> str:
        """A fresh ``wss``-style URL for ``apps.connections.open`` (plain ``ws`` on loopback)."""
        if self._server is None:
            self._start()
        port = self._server.socket.getsockname()[1]
        return f"ws://{self.host}:{port}/link/?ticket={uuid.uuid4()}&app_id={APP_ID}"

    def _start(self) -> None:
        from websockets.sync.server import serve

        # The client pings (slack_sdk's builtin client every 5 s); no compression, as Slack.
        self._server = serve(
            self._session, self.host, 0, compression=None, ping_interval=None, max_size=None
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="slack-socket-mode", daemon=True
        )
        self._thread.start()

    def _session(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        hello = {
            "type": "hello",
            "num_connections": 1,
            "debug_info": {"host": "sim", "approximate_connection_time": 3600},
            "connection_info": {"app_id": APP_ID},
        }
        ws.send(json.dumps(hello))
        with self._lock:
            self._connections.append(ws)
            self._lock.notify_all()
        try:
            for raw in ws:
                try:
                    message = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(message, dict) and message.get("envelope_id"):
                    with self._lock:
                        self.acks[str(message["envelope_id"])] = message
                        self._lock.notify_all()
        except ConnectionClosed:  # the app went away: its session ends
            pass
        finally:
            with self._lock:
                if ws in self._connections:
                    self._connections.remove(ws)

    @property
    def connected(self) -> int:
        with self._lock:
            return len(self._connections)

    def wait_connected(self, timeout: float = 30.0) -> None:
        with self._lock:
            if not self._lock.wait_for(lambda: bool(self._connections), timeout):
                raise TimeoutError("no Socket Mode client connected")

    def deliver(self, payload: dict[str, Any], *, kind: str = "interactive") -> str:
        """Send an envelope to the newest connection; its ``envelope_id``."""
        envelope_id = str(uuid.uuid4())
        envelope = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": kind,
            "accepts_response_payload": False,
        }
        with self._lock:
            if not self._connections:
                raise RuntimeError("no Socket Mode client connected")
            ws = self._connections[-1]
            self.delivered.append(envelope)
        ws.send(json.dumps(envelope))
        return envelope_id

    def wait_ack(self, envelope_id: str, timeout: float = 3.0) -> dict[str, Any]:
        """The app's ack; ``TimeoutError`` after ``timeout`` (Slack allows 3 s)."""
        with self._lock:
            if not self._lock.wait_for(lambda: envelope_id in self.acks, timeout):
                raise TimeoutError(f"envelope {envelope_id} not acked within {timeout}s")
            return self.acks[envelope_id]

    def disconnect_all(self) -> None:
        with self._lock:
            connections = list(self._connections)
        for ws in connections:
            ws.close()

    def stop(self) -> None:
        if self._server is not None:
            self.disconnect_all()
            self._server.shutdown()
            self._server = None


def _element(blocks: list[dict[str, Any]], action_id: str) -> tuple[str, dict[str, Any]]:
    for block in blocks:
        elements = block.get("elements") if block.get("type") == "actions" else None
        if block.get("type") == "input":
            elements = [block.get("element") or {}]
        for element in elements or []:
            if isinstance(element, dict) and element.get("action_id") == action_id:
                return str(block.get("block_id") or ""), element
    raise KeyError(f"no element with action_id {action_id!r} in the message")


def block_actions(
    message: dict[str, Any],
    action_id: str,
    *,
    user: str = "U0ONCALL",
    option: int | None = None,
    typed: str | None = None,
    team_domain: str = "tracehound-sim",
) -> dict[str, Any]:
    """The payload of pressing ``action_id`` on a stored message (``SlackSimulator.messages``
    entry): a button, the ``option``-th option of a select, or ``typed`` text in an input."""
    blocks = message.get("blocks") or []
    block_id, element = _element(blocks, action_id)
    now = f"{time.time():.6f}"
    action: dict[str, Any] = {
        "action_id": action_id,
        "block_id": block_id,
        "type": element.get("type"),
        "action_ts": now,
    }
    if element.get("type") == "button":
        action |= {"text": element.get("text"), "value": element.get("value")}
    elif element.get("type") == "static_select":
        action["selected_option"] = element["options"][option or 0]
    elif element.get("type") == "plain_text_input":
        action["value"] = typed or ""
    channel, ts = message["channel"], message["ts"]
    return {
        "type": "block_actions",
        "user": {"id": user, "username": "oncall", "name": "oncall", "team_id": "T0SIM"},
        "api_app_id": APP_ID,
        "token": "deprecated-verification-token",
        "container": {
            "type": "message",
            "message_ts": ts,
            "channel_id": channel,
            "is_ephemeral": False,
        },
        "trigger_id": f"{int(time.time())}.{uuid.uuid4().hex[:12]}",
        "team": {"id": "T0SIM", "domain": team_domain},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": "oncall"},
        "message": {
            "type": "message",
            "ts": ts,
            "text": message.get("text") or "",
            "blocks": blocks,
            "bot_id": "B0SIM",
        },
        "state": {"values": {}},
        "response_url": f"https://hooks.slack.com/actions/T0SIM/{uuid.uuid4().hex[:10]}/x",
        "actions": [action],
    }


def signed_request(
    payload: dict[str, Any], signing_secret: str, *, timestamp: int | None = None
) -> tuple[bytes, dict[str, str]]:
    """(body, headers) of the interaction as Slack POSTs it to the Request URL."""
    from slack_sdk.signature import SignatureVerifier

    body = urlencode({"payload": json.dumps(payload)}).encode()
    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(signing_secret).generate_signature(timestamp=ts, body=body)
    assert signature is not None
    return body, {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": signature,
    }
