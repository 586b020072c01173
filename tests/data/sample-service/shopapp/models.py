"""Domain models of the orders service: customers, order lines, coupons and orders."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


class OrderStatus(enum.StrEnum):
    """Lifecycle of an order, as stored by the repository."""

    PENDING = "pending"
    CONFIRMED = "confirmed"
    CANCELLED = "cancelled"


class LoyaltyTier(enum.StrEnum):
    """Loyalty programme tiers; customers who never joined have no tier."""

    BRONZE = "bronze"
    SILVER = "silver"
    GOLD = "gold"


@dataclass(frozen=True)
class Customer:
    """The buyer of an order."""

    customer_id: str
    email: str
    name: str
    loyalty_tier: LoyaltyTier | None = None


@dataclass(frozen=True)
class Coupon:
    """A coupon code: a percentage, a fixed amount, or both, above a minimum subtotal."""

    code: str
    percent_off: int = 0
    amount_off_cents: int = 0
    min_subtotal_cents: int = 0


@dataclass
class LineItem:
    """One product line of an order; money amounts are integer cents."""

    sku: str
    quantity: int
    unit_price_cents: int
    discount_cents: int = 0
    unit_discount_cents: int = 0

    @property
    def subtotal_cents(self) -> int:
        return self.quantity * self.unit_price_cents

    @property
    def total_cents(self) -> int:
        return self.subtotal_cents - self.discount_cents


@dataclass
class Order:
    """An order with its lines and the price breakdown filled in by the pricing engine."""

    order_id: str
    customer: Customer
    lines: list[LineItem]
    coupon_code: str | None = None
    status: OrderStatus = OrderStatus.PENDING
    discount_cents: int = 0
    shipping_cents: int = 0
    tax_cents: int = 0
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def subtotal_cents(self) -> int:
        return sum(line.subtotal_cents for line in self.lines)

    @property
    def total_cents(self) -> int:
        return self.subtotal_cents - self.discount_cents + self.shipping_cents + self.tax_cents

    def to_dict(self) -> dict[str, Any]:
        """Serialise the order for API responses and the JSON order store."""
        return {
            "order_id": self.order_id,
            "customer_id": self.customer.customer_id,
            "status": str(self.status),
            "coupon": self.coupon_code,
            "lines": [
                {
                    "sku": line.sku,
                    "quantity": line.quantity,
                    "unit_price_cents": line.unit_price_cents,
                    "discount_cents": line.discount_cents,
                }
                for line in self.lines
            ],
            "subtotal_cents": self.subtotal_cents,
            "discount_cents": self.discount_cents,
            "shipping_cents": self.shipping_cents,
            "tax_cents": self.tax_cents,
            "total_cents": self.total_cents,
            "created_at": self.created_at.isoformat(),
        }
