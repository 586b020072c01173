"""Order storage: an in-memory repository for tests and a JSON-file one for small deployments."""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Protocol

from shopapp.models import Order


class OrderRepository(Protocol):
    """What the order service needs from a store."""

    def save(self, order: Order) -> None: ...

    def get(self, order_id: str) -> Order | None: ...

    def list_for_customer(self, customer_id: str) -> list[Order]: ...


class InMemoryOrderRepository:
    """Keeps orders in a dict; the default for tests and local runs."""

    def __init__(self) -> None:
        self._orders: dict[str, Order] = {}
        self._lock = threading.Lock()

    def save(self, order: Order) -> None:
        with self._lock:
            self._orders[order.order_id] = order

    def get(self, order_id: str) -> Order | None:
        return self._orders.get(order_id)

    def list_for_customer(self, customer_id: str) -> list[Order]:
        orders = [o for o in self._orders.values() if o.customer.customer_id == customer_id]
        return sorted(orders, key=lambda order: order.created_at)


class JsonFileOrderRepository(InMemoryOrderRepository):
    """In-memory repository that also writes a JSON snapshot of every order on save.

    The snapshot is append-only history for the finance export; orders are not read back
    from it, so a restart starts with an empty cache.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self._path = Path(path)

    def save(self, order: Order) -> None:
        super().save(order)
        self._write_snapshot()

    def _write_snapshot(self) -> None:
        """Write atomically: temp file in the same directory, then rename over the old one."""
        self._path.parent.mkdir(parents=True, exist_ok=True)
        payload = {order_id: order.to_dict() for order_id, order in self._orders.items()}
        fd, tmp_name = tempfile.mkstemp(dir=self._path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2, sort_keys=True)
        os.replace(tmp_name, self._path)
