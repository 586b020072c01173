"""Stock levels and catalogue prices, held in memory and refreshed from the warehouse feed."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from shopapp.models import LineItem

log = logging.getLogger(__name__)


class UnknownProductError(LookupError):
    """The SKU is not in the catalogue."""


class InsufficientStockError(RuntimeError):
    """Not enough units left to reserve an order line."""

    def __init__(self, sku: str, requested: int, available: int) -> None:
        super().__init__(f"{sku}: requested {requested}, only {available} in stock")
        self.sku = sku
        self.requested = requested
        self.available = available


@dataclass
class Product:
    """A catalogue entry: its price in cents and the units on hand."""

    sku: str
    name: str
    unit_price_cents: int
    on_hand: int


class Inventory:
    """Thread-safe catalogue with per-order stock reservations."""

    def __init__(self, products: Iterable[Product] = ()) -> None:
        self._products = {product.sku: product for product in products}
        self._reservations: dict[str, list[tuple[str, int]]] = {}
        self._lock = threading.Lock()

    def product(self, sku: str) -> Product:
        try:
            return self._products[sku]
        except KeyError:
            raise UnknownProductError(sku) from None

    def unit_price_cents(self, sku: str) -> int:
        """Current catalogue price of one unit of ``sku``."""
        return self.product(sku).unit_price_cents

    def check_availability(self, lines: Iterable[LineItem]) -> None:
        """Raise :class:`InsufficientStockError` if any line asks for more than is on hand."""
        for line in lines:
            available = self.product(line.sku).on_hand
            if line.quantity > available:
                raise InsufficientStockError(line.sku, line.quantity, available)

    def reserve(self, order_id: str, lines: Iterable[LineItem]) -> None:
        """Take the units of every line out of stock until the order ships or is cancelled."""
        with self._lock:
            reserved: list[tuple[str, int]] = []
            for line in lines:
                product = self.product(line.sku)
                if line.quantity > product.on_hand:
                    self._restore(reserved)
                    raise InsufficientStockError(line.sku, line.quantity, product.on_hand)
                product.on_hand -= line.quantity
                reserved.append((line.sku, line.quantity))
            self._reservations[order_id] = reserved
        log.info("reserved stock for order %s: %s", order_id, reserved)

    def release(self, order_id: str) -> None:
        """Put the units reserved by a cancelled order back on the shelf."""
        with self._lock:
            self._restore(self._reservations.pop(order_id, []))

    def _restore(self, reserved: list[tuple[str, int]]) -> None:
        for sku, quantity in reserved:
            self._products[sku].on_hand += quantity
