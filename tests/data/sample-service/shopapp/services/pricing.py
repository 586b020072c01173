"""Pricing engine: coupons, loyalty discounts, shipping and tax for an order.

All amounts are integer cents. Order-level discounts are spread over the order lines so that
invoices and refunds can show the discounted price of every unit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from shopapp.config import Settings
from shopapp.models import Coupon, Customer, LoyaltyTier, Order
from shopapp.utils.money import allocate, percent_of, round_half_up

log = logging.getLogger(__name__)

#: Extra discount granted to loyalty members, applied after any coupon.
LOYALTY_PERCENT_OFF: dict[LoyaltyTier, int] = {
    LoyaltyTier.BRONZE: 0,
    LoyaltyTier.SILVER: 3,
    LoyaltyTier.GOLD: 5,
}


class UnknownCouponError(ValueError):
    """The coupon code given with the order does not exist or has expired."""

    def __init__(self, code: str) -> None:
        super().__init__(f"unknown coupon code: {code}")
        self.code = code


@dataclass(frozen=True)
class PriceBreakdown:
    """What the customer pays, line by line summed up."""

    subtotal_cents: int
    discount_cents: int
    shipping_cents: int
    tax_cents: int

    @property
    def total_cents(self) -> int:
        return self.subtotal_cents - self.discount_cents + self.shipping_cents + self.tax_cents


class PricingEngine:
    """Computes the price breakdown of an order and writes line discounts onto it."""

    def __init__(self, settings: Settings, coupons: Mapping[str, Coupon] | None = None) -> None:
        self._settings = settings
        self._coupons = dict(settings.coupons if coupons is None else coupons)

    def price_order(self, order: Order) -> PriceBreakdown:
        """Price ``order``: coupon first, then loyalty discount, shipping, and tax last."""
        subtotal = order.subtotal_cents
        discount = 0
        if order.coupon_code:
            discount += self._apply_coupon(order, order.coupon_code)
        discount += self._loyalty_discount(order.customer, subtotal - discount)
        shipping = self._shipping_cost(subtotal - discount)
        tax = percent_of(subtotal - discount + shipping, self._settings.tax_rate_percent)
        breakdown = PriceBreakdown(subtotal, discount, shipping, tax)
        log.debug("priced order %s: %s", order.order_id, breakdown)
        return breakdown

    def _apply_coupon(self, order: Order, code: str) -> int:
        """Return the coupon discount for ``order`` and allocate it over the lines."""
        coupon = self._coupons.get(code.strip().upper())
        if coupon is None:
            raise UnknownCouponError(code)
        subtotal = order.subtotal_cents
        if subtotal < coupon.min_subtotal_cents:
            log.info("coupon %s not applied: subtotal %d below minimum", coupon.code, subtotal)
            return 0
        discount = percent_of(subtotal, coupon.percent_off) + coupon.amount_off_cents
        discount = min(discount, subtotal)
        self._allocate_discount(order, discount)
        return discount

    def _allocate_discount(self, order: Order, discount_cents: int) -> None:
        """Spread an order-level discount over the lines, proportionally to their subtotals.

        The per-unit discount is what the invoice prints next to each unit price.
        """
        shares = allocate(discount_cents, [line.subtotal_cents for line in order.lines])
        for line, share in zip(order.lines, shares, strict=True):
            line.discount_cents = share
            line.unit_discount_cents = round_half_up(share / line.quantity)

    def _loyalty_discount(self, customer: Customer, amount_cents: int) -> int:
        """Loyalty members get a tier-dependent percentage off; other customers get nothing."""
        if customer.loyalty_tier is None:
            return 0
        return percent_of(amount_cents, LOYALTY_PERCENT_OFF.get(customer.loyalty_tier, 0))

    def _shipping_cost(self, amount_cents: int) -> int:
        """Flat-rate shipping, free above the configured threshold."""
        if amount_cents >= self._settings.free_shipping_threshold_cents:
            return 0
        return self._settings.flat_shipping_cents
