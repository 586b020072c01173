"""Buttons pressed in Slack: ``slack_action`` [notify] applies one signed interaction payload.

The Socket Mode listener (producers/slack_listen.py) and the Request URL on the ingest server
(producers/ingest/slack_routes.py) ack Slack at once and enqueue the payload here; the policy is
shared/notify/respond.py. A paced channel comes back in a second, a transient Slack failure
is retried with backoff (the state change is already made and is safe to repeat).
"""

from __future__ import annotations

from typing import Any

from shared.core import queues as q
from shared.core.errors import TransientError
from shared.notify.actions import parse_actions
from shared.notify.courier import Paced
from shared.notify.respond import respond
from workers import context
from workers.app import app, task_options
from workers.retry import retry


@app.task(**task_options(q.SLACK_ACTION, retry_forever=True))
def slack_action(self: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """Apply the tracehound actions in a ``block_actions`` payload."""
    responder = context.clients().responder
    outcomes = []
    try:
        for action in parse_actions(payload):
            outcomes.append({"kind": action.kind, "outcome": respond(action, responder)})
    except Paced:
        raise self.retry(countdown=context.settings().slack_pace or 1) from None
    except TransientError as exc:
        raise retry(self, exc, forever=True) from exc  # the state is set; the message waits
    return {"actions": outcomes}
