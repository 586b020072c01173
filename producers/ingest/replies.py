"""The JSON replies of the HTTP routes, and what they share: a 503 with Retry-After when
Redis is out of reach, and what became of each accepted event.

Starlette's ``JSONResponse`` encodes with ``ensure_ascii=False`` and refuses NaN: a reply that
echoes a string from the request (an envelope item's type, a rejected record's error) holding a
lone surrogate (JSON's ``"\\ud800"`` escape decodes to one), or a float the sender wrote as
``NaN``, would raise while rendering and become a 500. ``JSONReply`` writes non-ASCII as
``\\u`` escapes (a lone surrogate too) and NaN as Python's json writes it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.responses import JSONResponse

from shared.core.logs import Throttle
from shared.groups.submit import Submitted

log = logging.getLogger(__name__)

REPLY_LIST_MAX = 100  # rejected / ignored entries listed in a reply (the counts are complete)
RETRY_AFTER_S = 5  # what a 503 asks the shipper to wait: Redis out of reach
# ... and the intake backlog past its bound: it drains at thousands of events a second, so there
# is room again within one. Waiting 5 s left the workers idle while shippers slept (the
# sustained storm's CPU was 38% idle with every client waiting out a 503).
RETRY_BACKLOG_S = 1
# A storm past the bounds is refused hundreds of times a second: said once every ten seconds,
# with how many refusals were not said (the metrics count every one).
_SAID = Throttle(every=10.0)


class JSONReply(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def unavailable(exc: Exception) -> JSONReply:
    """Redis out of reach: a 503 the shipper retries after Retry-After."""
    log.warning("ingest.unavailable", extra={"error": f"{type(exc).__name__}: {exc}"})
    return JSONReply(
        {"error": f"cannot reach Redis, retry later: {type(exc).__name__}: {exc}"},
        status_code=503,
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def backlogged(backlog: int, bound: int) -> JSONReply:
    """The intake worker is behind: a 503 the shipper retries after Retry-After, so the
    backlog stops growing while nothing sent is lost."""
    if (held := _SAID.allow("backlogged")) is not None:
        log.warning(
            "ingest.backlogged", extra={"backlog": backlog, "bound": bound, "repeated": held}
        )
    return JSONReply(
        {
            "error": f"intake is {backlog} batches behind (bound {bound}): retry later",
            "backlog": backlog,
        },
        status_code=503,
        headers={"Retry-After": str(RETRY_BACKLOG_S)},
    )


def lagging(lag_s: float, bound_s: float) -> JSONReply:
    """The oldest batch waiting has waited longer than the bound: a 503 the shipper retries
    after Retry-After, so what is accepted is counted within about the bound."""
    if (held := _SAID.allow("lagging")) is not None:
        log.warning(
            "ingest.lagging",
            extra={"lag_s": round(lag_s, 3), "bound_s": bound_s, "repeated": held},
        )
    return JSONReply(
        {
            "error": f"intake is {lag_s:.1f} s behind (bound {bound_s:g} s): retry later",
            "lag_s": round(lag_s, 3),
        },
        status_code=503,
        headers={"Retry-After": str(RETRY_BACKLOG_S)},
    )


def group_replies(submitted: list[Submitted]) -> list[dict[str, Any]]:
    """What became of each accepted event, as the endpoints' replies list it."""
    return [
        {
            "event_id": s.event_id,
            "fingerprint": s.fingerprint,
            "new": s.new,
            "count": s.count,
            "duplicate": s.duplicate,
        }
        for s in submitted
    ]
