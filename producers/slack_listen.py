"""``tracehound slack-listen``: button presses from Slack over Socket Mode, no public URL.

slack_sdk's builtin Socket Mode client (no websocket dependency) opens the websocket with
``apps.connections.open`` and reconnects by itself. Each press is enqueued for the
``slack_action`` task [notify] and then acked: one Redis write in the ack path, well inside
Slack's 3 seconds, and no model or Slack call. A press that cannot be enqueued (Redis out of
reach) is not acked, so Slack shows the user that it failed instead of tracehound dropping it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import redis
from celery import Celery
from kombu.exceptions import OperationalError

from shared.core.pipeline import enqueue_slack_action
from shared.core.settings import Settings
from shared.notify.actions import parse_actions

log = logging.getLogger(__name__)


class Listener:
    """A Socket Mode client that hands tracehound's actions to the notify queue."""

    def __init__(self, settings: Settings, app: Celery) -> None:
        from slack_sdk import WebClient
        from slack_sdk.socket_mode import SocketModeClient

        if settings.slack_app_token is None:
            raise ValueError("slack-listen needs TRACEHOUND_SLACK_APP_TOKEN (xapp-…)")
        base_url = settings.slack_base_url
        self.app = app
        self.client = SocketModeClient(
            app_token=settings.slack_app_token.get_secret_value(),
            web_client=WebClient(base_url=base_url if base_url.endswith("/") else base_url + "/"),
            logger=logging.getLogger("tracehound.slack_sdk"),
        )
        self.client.socket_mode_request_listeners.append(self._on_request)

    def _on_request(self, client: Any, req: Any) -> None:
        from slack_sdk.socket_mode.response import SocketModeResponse

        if req.type == "interactive" and parse_actions(req.payload):
            try:
                enqueue_slack_action(self.app, req.payload)
            except (OperationalError, redis.RedisError, OSError) as exc:
                # Transient: the user sees the press fail and may press again.
                log.error("slack.enqueue_failed", extra={"error": f"{type(exc).__name__}: {exc}"})
                return
            log.info("slack.action_received", extra={"envelope_id": req.envelope_id})
        client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))

    def start(self) -> None:
        self.client.connect()

    def close(self) -> None:
        self.client.close()


def run(settings: Settings) -> None:
    """Listen until SIGINT/SIGTERM."""
    from shared.core.pipeline import sender_app

    listener = Listener(settings, sender_app(settings))
    listener.start()
    log.info("slack.listening")
    try:
        threading.Event().wait()
    finally:
        listener.close()
