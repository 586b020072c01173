"""stdlib ``logging`` with a usual basicConfig format, to stderr: the records of a small service.

Run by ``../generate.py`` in a subprocess. Before each record it prints a separator line
(``=== tracehound-record <stem> ===``) that the generator splits on and drops.
"""

import logging
import sys
from typing import Any

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def separator(stem: str) -> None:
    print(f"=== tracehound-record {stem} ===", file=sys.stderr, flush=True)


# Stand-ins for requests' exception hierarchy (requests is not a dependency): the traceback's
# last line prints the class as ``requests.exceptions.ConnectTimeout``, as with the real library.
class RequestException(OSError):
    pass


class RequestsConnectionError(RequestException):
    pass


class Timeout(RequestException):
    pass


class ConnectTimeout(RequestsConnectionError, Timeout):
    pass


for _cls, _name in [
    (RequestException, "RequestException"),
    (RequestsConnectionError, "ConnectionError"),
    (Timeout, "Timeout"),
    (ConnectTimeout, "ConnectTimeout"),
]:
    _cls.__module__ = "requests.exceptions"
    _cls.__name__ = _cls.__qualname__ = _name


class PaymentError(Exception):
    pass


PaymentError.__module__ = "shop.payments"

log = logging.getLogger("shop.payments")


def post(url: str, timeout: int) -> dict[str, str]:
    reason = (
        "ConnectTimeoutError(<urllib3.connection.HTTPSConnection object at 0x7f3a2c1e9d50>, "
        f"'Connection to api.stripe.com timed out. (connect timeout={timeout})')"
    )
    raise ConnectTimeout(
        "HTTPSConnectionPool(host='api.stripe.com', port=443): Max retries exceeded with url: "
        f"/v1/charges (Caused by {reason})"
    )


def charge(order_id: int) -> dict[str, str]:
    return post("https://api.stripe.com/v1/charges", timeout=5)


def parse_amount(raw: str) -> int:
    return int(raw)


def settle(order_id: int, raw_amount: str) -> int:
    try:
        return parse_amount(raw_amount)
    except ValueError as exc:
        raise PaymentError(f"cannot settle order {order_id}: bad amount") from exc


def customer_id(cache: dict[str, Any], order_id: int) -> int:
    try:
        return cache[f"order:{order_id}"]["customer"]
    except KeyError:
        customer = cache.get("fallback")
        return customer["id"]


def main() -> None:
    logging.basicConfig(format=FORMAT, level=logging.INFO, stream=sys.stderr)

    separator("python-logging--info")
    log.info("started")

    separator("python-logging--exception")
    try:
        charge(42)
    except RequestException:
        log.exception("charge request failed for order 42")

    separator("python-logging--chained")
    try:
        settle(42, "12,50")
    except PaymentError:
        log.exception("settlement failed")

    separator("python-logging--during-handling")
    try:
        customer_id({}, 42)
    except TypeError:
        log.exception("could not resolve customer")

    separator("python-logging--error-no-trace")
    log.error("payment failed for order 42")


if __name__ == "__main__":
    main()
