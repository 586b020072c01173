"""``POST /slack/actions`` on the ingest server: the Slack app's Request URL for button presses.

Slack signs each request with the app's signing secret (``X-Slack-Signature`` over
``v0:<timestamp>:<body>``); ``slack_sdk.signature.SignatureVerifier`` checks it and refuses a
timestamp more than five minutes away, so a captured request cannot be replayed later. Both
failures answer 401 before the body is parsed. A valid press is enqueued for the
``slack_action`` task [notify] and answered 200 at once (Slack wants an answer in 3 s); when
Redis is out of reach the answer is 503, and Slack shows the user the press failed.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import parse_qs

import redis
from celery import Celery
from kombu.exceptions import OperationalError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from producers.ingest.body import read_body
from producers.ingest.replies import JSONReply
from shared.core.pipeline import enqueue_slack_action
from shared.intake.batch import BodyError
from shared.notify.actions import parse_actions

log = logging.getLogger(__name__)

MAX_BODY = 1_000_000  # an interaction payload carries the message's blocks: tens of kB


def slack_routes(app: Celery, signing_secret: str, *, read_timeout: float = 30.0) -> list[Route]:
    from slack_sdk.signature import SignatureVerifier

    verifier = SignatureVerifier(signing_secret)

    async def actions(request: Request) -> Response:
        try:
            body = await read_body(request, MAX_BODY, read_timeout)
        except BodyError as exc:
            return JSONReply({"error": str(exc)}, status_code=exc.status)
        try:
            valid = verifier.is_valid_request(body, dict(request.headers))
        except (ValueError, TypeError):  # a timestamp that is not a number, and the like
            valid = False
        if not valid:
            log.warning("slack.bad_signature", extra={"client": str(request.client)})
            return JSONReply({"error": "bad or expired Slack signature"}, status_code=401)
        payload = _payload(body)
        if payload is None:
            return JSONReply({"error": "no interaction payload"}, status_code=400)
        if parse_actions(payload):
            try:
                await run_in_threadpool(enqueue_slack_action, app, payload)
            except (OperationalError, redis.RedisError, OSError) as exc:
                log.error("slack.enqueue_failed", extra={"error": f"{type(exc).__name__}: {exc}"})
                return JSONReply({"error": "cannot reach Redis, retry"}, status_code=503)
        return Response(status_code=200)

    return [Route("/slack/actions", actions, methods=["POST"])]


def _payload(body: bytes) -> dict[str, Any] | None:
    try:
        form = parse_qs(body.decode("utf-8"), max_num_fields=10)
        payload = json.loads(form["payload"][0])
    except (UnicodeDecodeError, ValueError, KeyError, IndexError):
        return None
    return payload if isinstance(payload, dict) else None
