"""Runtime settings for the shop API, read from ``SHOP_*`` environment variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from shopapp.models import Coupon

#: Coupons known to every environment. Marketing adds seasonal ones through ``SHOP_COUPONS``.
DEFAULT_COUPONS: dict[str, Coupon] = {
    "WELCOME10": Coupon(code="WELCOME10", percent_off=10),
    "SPRING5": Coupon(code="SPRING5", amount_off_cents=500, min_subtotal_cents=3000),
    "STAFF25": Coupon(code="STAFF25", percent_off=25),
}


@dataclass(frozen=True)
class Settings:
    """Validated configuration shared by the handlers and the services."""

    environment: str = "development"
    currency: str = "EUR"
    tax_rate_percent: int = 20
    free_shipping_threshold_cents: int = 5000
    flat_shipping_cents: int = 495
    max_line_quantity: int = 99
    email_enabled: bool = False
    smtp_host: str = "localhost"
    smtp_port: int = 25
    sender_address: str = "orders@shop.example"
    order_store_path: str = "var/orders.json"
    coupons: Mapping[str, Coupon] = field(default_factory=lambda: dict(DEFAULT_COUPONS))


def _parse_bool(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _parse_coupons(value: str) -> dict[str, Coupon]:
    """Parse ``CODE:percent`` pairs, e.g. ``SHOP_COUPONS="BLACKFRIDAY:30,XMAS:15"``."""
    coupons: dict[str, Coupon] = {}
    for chunk in filter(None, (part.strip() for part in value.split(","))):
        code, _, percent = chunk.partition(":")
        coupons[code.upper()] = Coupon(code=code.upper(), percent_off=int(percent or 0))
    return coupons


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build :class:`Settings` from the environment, falling back to the defaults."""
    env = os.environ if environ is None else environ
    coupons = dict(DEFAULT_COUPONS)
    coupons.update(_parse_coupons(env.get("SHOP_COUPONS", "")))
    return Settings(
        environment=env.get("SHOP_ENV", "development"),
        currency=env.get("SHOP_CURRENCY", "EUR"),
        tax_rate_percent=int(env.get("SHOP_TAX_RATE_PERCENT", "20")),
        free_shipping_threshold_cents=int(env.get("SHOP_FREE_SHIPPING_CENTS", "5000")),
        flat_shipping_cents=int(env.get("SHOP_FLAT_SHIPPING_CENTS", "495")),
        max_line_quantity=int(env.get("SHOP_MAX_LINE_QUANTITY", "99")),
        email_enabled=_parse_bool(env.get("SHOP_EMAIL_ENABLED", "false")),
        smtp_host=env.get("SHOP_SMTP_HOST", "localhost"),
        smtp_port=int(env.get("SHOP_SMTP_PORT", "25")),
        sender_address=env.get("SHOP_SENDER_ADDRESS", "orders@shop.example"),
        order_store_path=env.get("SHOP_ORDER_STORE", "var/orders.json"),
        coupons=coupons,
    )
