"""A database outage as services log it, for the incident tests and ``benchmarks/incident.py``.

Every endpoint of every service fails with its own stack and its own outer exception, and
underneath each the same ``psycopg2.OperationalError: could not connect to server`` (Python
prints the cause first, then "The above exception was the direct cause…"). The host, port and
pool size vary per line as they do in real logs; grouping sees one group per endpoint, and the
incident one root cause.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from shared.core.domain import ErrorEvent
from shared.intake.events import parse_event

_OUTER = (
    "sqlalchemy.exc.OperationalError",
    "app.errors.StorageUnavailable",
    "django.db.utils.OperationalError",
)
_VERBS = ("list", "get", "create", "update", "delete", "search", "export", "sync")
_NOUNS = ("orders", "users", "invoices", "carts", "payments", "reports", "sessions", "items")


@dataclass(frozen=True)
class Endpoint:
    service: str
    module: str
    function: str


def endpoints(services: int, per_service: int) -> list[Endpoint]:
    out = []
    for s in range(services):
        service = f"svc-{s + 1}"
        for e in range(per_service):
            verb, noun = _VERBS[e % len(_VERBS)], _NOUNS[(e // len(_VERBS)) % len(_NOUNS)]
            out.append(Endpoint(service, f"{service.replace('-', '_')}/api/{noun}", f"{verb}_{e}"))
    return out


def trace(ep: Endpoint, rng: random.Random) -> str:
    host = f"10.0.{rng.randint(0, 9)}.{rng.randint(2, 250)}"
    outer = _OUTER[sum(map(ord, ep.function)) % len(_OUTER)]  # stable across runs
    return (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/db/pool.py", line 88, in connect\n'
        "    conn = psycopg2.connect(dsn, connect_timeout=3)\n"
        "psycopg2.OperationalError: could not connect to server: Connection refused\n"
        f'\tIs the server running on host "{host}" and accepting TCP/IP connections on port '
        f"{rng.choice((5432, 6432))}?\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        f'  File "/srv/app/{ep.module}.py", line {20 + len(ep.function)}, in {ep.function}\n'
        f"    rows = self.repo.{ep.function}(request.params)\n"
        f'  File "/srv/app/{ep.module}_repo.py", line 41, in {ep.function}\n'
        "    with self.pool.connection() as conn:\n"
        '  File "/srv/app/db/pool.py", line 90, in connect\n'
        "    raise StorageUnavailable(str(exc)) from exc\n"
        f"{outer}: (psycopg2.OperationalError) could not connect to server "
        f"(pool size {rng.randint(5, 40)})\n"
    )


def events(
    services: int, per_service: int, total: int, *, repo: str, seed: int = 7
) -> Iterator[ErrorEvent]:
    """``total`` events over ``services * per_service`` endpoints: a few endpoints take most of
    the traffic (Zipf-like, as in a real outage), every endpoint at least once."""
    rng = random.Random(seed)
    eps = endpoints(services, per_service)
    weights = [1 / (i + 1) for i in range(len(eps))]
    order = list(eps) + rng.choices(eps, weights=weights, k=max(0, total - len(eps)))
    rng.shuffle(order)
    for ep in order:
        yield parse_event(trace(ep, rng), service=ep.service, repo=repo)
