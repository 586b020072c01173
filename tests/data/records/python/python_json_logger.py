"""python-json-logger's ``JsonFormatter`` on a stdlib handler: one JSON object per line.

Run by ``../generate.py`` in a subprocess; writes to stderr, a separator line before each record.
"""

import logging
import sys

try:  # python-json-logger >= 3.1
    from pythonjsonlogger.json import JsonFormatter
except ImportError:  # older releases
    from pythonjsonlogger.jsonlogger import JsonFormatter  # type: ignore[no-redef]


def separator(stem: str) -> None:
    print(f"=== tracehound-record {stem} ===", file=sys.stderr, flush=True)


def connect(host: str, port: int) -> None:
    raise ConnectionRefusedError(111, "Connection refused")


def fetch_inventory(sku: str) -> None:
    connect("inventory.internal", 8080)


def main() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    log = logging.getLogger("shop.inventory")

    separator("python-json-logger--info")
    log.info("inventory sync started", extra={"skus": 3})

    separator("python-json-logger--exception")
    try:
        fetch_inventory("sku-001")
    except OSError:
        log.exception("inventory sync failed")

    separator("python-json-logger--error-no-trace")
    log.error("stock below zero for sku-002", extra={"sku": "sku-002", "stock": -1})


if __name__ == "__main__":
    main()
