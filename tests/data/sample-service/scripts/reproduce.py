"""Replay the request behind incident INC-2291 against a local app and print the logged stack.

Usage, from the service root::

    python scripts/reproduce.py [--trace FILE] [--event FILE]

The stack is rewritten so that its paths read like the production container (``/srv/app``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

SERVICE_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(SERVICE_ROOT))

from shopapp.api.http import Request  # noqa: E402
from shopapp.app import Application  # noqa: E402
from shopapp.config import Settings  # noqa: E402

PRODUCTION_ROOT = "/srv/app"
REQUEST_ID = "req-5c1e9a07d3"
TIMESTAMP = "2026-11-30T09:14:03Z"

# The cart still carries the sticker pack the customer removed: quantity 0.
BODY = {
    "customer": {"id": "c-18734", "email": "marie.dupont@example.com", "name": "Marie Dupont"},
    "items": [
        {"sku": "MUG-BLUE", "quantity": 2},
        {"sku": "TEE-L", "quantity": 1},
        {"sku": "STICKER-PACK", "quantity": 0},
    ],
    "coupon": "WELCOME10",
}


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, help="write the rewritten stack to this file")
    parser.add_argument("--event", type=Path, help="write a log event (JSON) to this file")
    args = parser.parse_args()

    capture = _Capture()
    logging.getLogger("shopapp").addHandler(capture)
    app = Application(Settings(environment="production"))
    request = Request(
        "POST", "/orders", json.dumps(BODY).encode(), headers={"x-request-id": REQUEST_ID}
    )
    response = app.handle(request)
    if response.status != 500 or not capture.records:
        print(f"not reproduced: {response.status} {response.payload}", file=sys.stderr)
        return 1

    record = capture.records[-1]
    stack = record.stack.replace(str(SERVICE_ROOT), PRODUCTION_ROOT)  # type: ignore[attr-defined]
    print(stack, end="")
    if args.trace:
        args.trace.write_text(stack, encoding="utf-8")
    if args.event:
        event = {
            "service": "shop-api",
            "repo": "sample-service",
            "level": "ERROR",
            "message": record.getMessage(),
            "stack": stack,
            "timestamp": TIMESTAMP,
            "attributes": {"request_id": REQUEST_ID, "path": request.path},
        }
        args.event.write_text(json.dumps(event, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
