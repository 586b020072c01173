"""Order placement: builds the order, checks stock, prices it, stores it and notifies."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable

from shopapp.models import Customer, LineItem, Order, OrderStatus
from shopapp.notifications.email import EmailNotifier
from shopapp.repositories.order_repository import OrderRepository
from shopapp.services.inventory import Inventory
from shopapp.services.pricing import PricingEngine

log = logging.getLogger(__name__)


class OrderNotFoundError(LookupError):
    """No order with this id."""


class OrderService:
    """Application service behind the ``/orders`` endpoints."""

    def __init__(
        self,
        repository: OrderRepository,
        inventory: Inventory,
        pricing: PricingEngine,
        notifier: EmailNotifier,
        id_factory: Callable[[], str] | None = None,
    ) -> None:
        self._repository = repository
        self._inventory = inventory
        self._pricing = pricing
        self._notifier = notifier
        self._new_id = id_factory or (lambda: f"ord_{uuid.uuid4().hex[:12]}")

    def place_order(
        self,
        customer: Customer,
        items: Iterable[tuple[str, int]],
        coupon_code: str | None = None,
    ) -> Order:
        """Create, price and confirm an order from ``(sku, quantity)`` pairs."""
        lines = [
            LineItem(sku, quantity, unit_price_cents=self._inventory.unit_price_cents(sku))
            for sku, quantity in items
        ]
        order = Order(self._new_id(), customer, lines, coupon_code=coupon_code)
        self._inventory.check_availability(order.lines)

        breakdown = self._pricing.price_order(order)
        order.discount_cents = breakdown.discount_cents
        order.shipping_cents = breakdown.shipping_cents
        order.tax_cents = breakdown.tax_cents

        self._inventory.reserve(order.order_id, order.lines)
        order.status = OrderStatus.CONFIRMED
        self._repository.save(order)
        log.info("order %s confirmed, total %d cents", order.order_id, order.total_cents)
        self._notifier.send_order_confirmation(order)
        return order

    def get_order(self, order_id: str) -> Order:
        order = self._repository.get(order_id)
        if order is None:
            raise OrderNotFoundError(order_id)
        return order

    def cancel_order(self, order_id: str) -> Order:
        """Cancel a confirmed order and give its stock back; cancelling twice is a no-op."""
        order = self.get_order(order_id)
        if order.status is OrderStatus.CANCELLED:
            return order
        self._inventory.release(order.order_id)
        order.status = OrderStatus.CANCELLED
        self._repository.save(order)
        log.info("order %s cancelled", order.order_id)
        return order
