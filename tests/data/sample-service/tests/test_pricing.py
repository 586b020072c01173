"""Unit tests of the pricing engine.

Run from the service root: ``python -m unittest discover -s tests``.
"""

from __future__ import annotations

import unittest

from shopapp.config import Settings
from shopapp.models import Customer, LineItem, LoyaltyTier, Order
from shopapp.services.pricing import PricingEngine, UnknownCouponError
from shopapp.utils.money import allocate, percent_of


def make_order(
    *lines: LineItem, coupon: str | None = None, tier: LoyaltyTier | None = None
) -> Order:
    customer = Customer("c-1", "ada@example.com", "Ada", loyalty_tier=tier)
    return Order("ord_test", customer, list(lines), coupon_code=coupon)


class PricingEngineTest(unittest.TestCase):
    def setUp(self) -> None:
        self.engine = PricingEngine(Settings())

    def test_price_without_discount_adds_shipping_and_tax(self) -> None:
        breakdown = self.engine.price_order(make_order(LineItem("MUG-BLUE", 2, 1450)))
        self.assertEqual(breakdown.subtotal_cents, 2900)
        self.assertEqual(breakdown.discount_cents, 0)
        self.assertEqual(breakdown.shipping_cents, 495)
        self.assertEqual(breakdown.tax_cents, percent_of(2900 + 495, 20))

    def test_coupon_discount_is_allocated_over_lines(self) -> None:
        order = make_order(
            LineItem("MUG-BLUE", 2, 1450), LineItem("TEE-L", 1, 2200), coupon="welcome10"
        )
        breakdown = self.engine.price_order(order)
        self.assertEqual(breakdown.discount_cents, 510)
        self.assertEqual(sum(line.discount_cents for line in order.lines), 510)
        self.assertEqual(order.lines[0].unit_discount_cents, 145)

    def test_loyalty_discount_for_gold_members(self) -> None:
        order = make_order(LineItem("TEE-L", 3, 2200), tier=LoyaltyTier.GOLD)
        self.assertEqual(self.engine.price_order(order).discount_cents, 330)

    def test_free_shipping_above_threshold(self) -> None:
        order = make_order(LineItem("TEE-L", 3, 2200))
        self.assertEqual(self.engine.price_order(order).shipping_cents, 0)

    def test_unknown_coupon_is_rejected(self) -> None:
        with self.assertRaises(UnknownCouponError):
            self.engine.price_order(make_order(LineItem("MUG-BLUE", 1, 1450), coupon="NOPE"))


class AllocateTest(unittest.TestCase):
    def test_allocate_keeps_every_cent(self) -> None:
        self.assertEqual(allocate(100, [1, 1, 1]), [34, 33, 33])

    def test_allocate_with_zero_weights(self) -> None:
        self.assertEqual(allocate(10, [0, 0]), [10, 0])


if __name__ == "__main__":
    unittest.main()
