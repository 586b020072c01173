"""``POST /v1/deploys``: a CI pipeline says a release of a service went out.

``tracehound deploy`` posts here (with the range's commits read from git); so can any pipeline,
with the ingest token as ``Authorization: Bearer …`` (as ``/v1/events``). The body is one JSON
object:

- ``service`` and ``version`` (required); ``environment``;
- ``range``: ``"<from>..<to>"`` (the commits the deploy brought, as ``git log from..to``), or
  just ``"<to>"``; ``commits``: those commits' shas (at most 1,000), which lets a message say
  whether a suspect commit came with the deploy;
- ``time``: epoch seconds or ISO 8601 (default: now).

Answers 201 ``{"id", "new": true}``, 200 with ``"new": false`` for a deploy already recorded
(a retried request), 400 with the reason (unknown fields included: a typo must not pass
silently), 401, 413, and 503 with Retry-After when Redis is out of reach.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import orjson
import redis
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import Route

from producers.ingest.auth import bearer_ok
from producers.ingest.body import read_body
from producers.ingest.replies import JSONReply, unavailable
from shared.core.domain import Deploy
from shared.groups.deploys import DeployStore
from shared.intake.batch import BodyError

MAX_BODY_BYTES = 256_000  # 1,000 commits of 64 hex digits and the rest, with room
FIELDS = frozenset({"service", "environment", "version", "range", "commits", "time"})


class DeployError(ValueError):
    """A deploy body that can never be accepted (a 400 with this text)."""


def parse_deploy(body: bytes, now: float) -> Deploy:
    """The deploy a request's body announces; DeployError says what is wrong with it."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise DeployError(f"malformed JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise DeployError(f"the body must be a JSON object, got {type(obj).__name__}")
    unknown = sorted(str(k)[:40] for k in obj if k not in FIELDS)
    if unknown:
        raise DeployError(
            f"unknown field(s): {', '.join(unknown)}; known: {', '.join(sorted(FIELDS))}"
        )
    commit_from, commit_to = parse_range(_text(obj, "range"))
    commits = obj.get("commits", [])
    if not isinstance(commits, list) or not all(isinstance(c, str) for c in commits):
        raise DeployError("commits must be a list of commit shas")
    fields: dict[str, Any] = {
        "service": _text(obj, "service"),
        "environment": _text(obj, "environment"),
        "version": _text(obj, "version"),
        "commit_from": commit_from,
        "commit_to": commit_to,
        "commits": tuple(commits),
        "time": parse_time(obj.get("time"), now),
    }
    try:
        return Deploy.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise DeployError(f"{where}: {first['msg']}") from exc


def _text(obj: dict[str, Any], name: str) -> str:
    value = obj.get(name, "")
    if not isinstance(value, str):
        raise DeployError(f"{name} must be a string")
    return value


def parse_range(text: str) -> tuple[str, str]:
    """``"a1b2c3d..d4e5f6a"`` -> (from, to); ``"d4e5f6a"`` -> ("", to); "" -> ("", "")."""
    text = text.strip()
    if not text:
        return "", ""
    start, dots, end = text.partition("..")
    if not dots:
        return "", start
    if end.startswith("."):
        raise DeployError("range: use from..to (the commits the deploy brought), not from...to")
    if not start or not end:
        raise DeployError("range: both ends of from..to are needed")
    return start, end


def parse_time(value: Any, now: float) -> float:
    """Epoch seconds (a number or its digits) or ISO 8601; None or "": now."""
    if value is None or value == "":
        return now
    if isinstance(value, bool):
        raise DeployError("time must be epoch seconds or ISO 8601")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
        try:
            stamp = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError as exc:
            raise DeployError(f"time: not epoch seconds nor ISO 8601: {value[:40]!r}") from exc
        return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
    raise DeployError("time must be epoch seconds or ISO 8601")


def deploy_routes(store: DeployStore, *, token: str | None, read_timeout: float) -> list[Route]:
    async def deploys(request: Request) -> JSONReply:
        if not bearer_ok(request, token):
            return JSONReply(
                {"error": "missing or wrong bearer token"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        try:
            raw = await read_body(request, MAX_BODY_BYTES, read_timeout)
            deploy = parse_deploy(raw, time.time())
        except BodyError as exc:
            return JSONReply({"error": str(exc)}, status_code=exc.status)
        except DeployError as exc:
            return JSONReply({"error": str(exc)}, status_code=400)
        try:
            ident, new = await run_in_threadpool(store.record, deploy)
        except (redis.RedisError, OSError) as exc:
            return unavailable(exc)
        return JSONReply({"id": ident, "new": new}, status_code=201 if new else 200)

    return [Route("/v1/deploys", deploys, methods=["POST"])]
