"""An exception nobody catches: the interpreter itself prints the traceback to stderr and exits 1.

Run by ``../generate.py``; the separator line before the crash is dropped by the generator.
"""

import sys

STOCK = {"sku-001": 3, "sku-002": 0}


def reserve(sku: str, quantity: int) -> int:
    left = STOCK[sku] - quantity
    STOCK[sku] = left
    return left


def place_order(lines: list[tuple[str, int]]) -> None:
    for sku, quantity in lines:
        reserve(sku, quantity)


if __name__ == "__main__":
    print("=== tracehound-record python--uncaught ===", file=sys.stderr, flush=True)
    place_order([("sku-001", 1), ("sku-123", 2)])
