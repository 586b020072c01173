"""Handlers for the ``/orders`` endpoints: parse and validate JSON, call the order service."""

from __future__ import annotations

import json
from typing import Any

from shopapp.api.http import ApiError, Request, Response
from shopapp.config import Settings
from shopapp.models import Customer, LoyaltyTier
from shopapp.services.inventory import InsufficientStockError, UnknownProductError
from shopapp.services.order_service import OrderNotFoundError, OrderService
from shopapp.services.pricing import UnknownCouponError


class OrderHandlers:
    """``POST /orders`` places an order; ``GET /orders/<id>`` and ``DELETE`` read and cancel."""

    def __init__(self, orders: OrderService, settings: Settings) -> None:
        self._orders = orders
        self._settings = settings

    def create_order(self, request: Request) -> Response:
        payload = _parse_json(request.body)
        customer = _parse_customer(payload.get("customer"))
        items = [_parse_item(item, self._settings.max_line_quantity) for item in payload["items"]]
        if not items:
            raise ApiError(400, "an order needs at least one item")
        try:
            order = self._orders.place_order(customer, items, coupon_code=payload.get("coupon"))
        except UnknownCouponError as exc:
            raise ApiError(422, str(exc)) from exc
        except UnknownProductError as exc:
            raise ApiError(422, f"unknown product: {exc}") from exc
        except InsufficientStockError as exc:
            raise ApiError(409, str(exc)) from exc
        return Response(201, order.to_dict(), {"Location": f"/orders/{order.order_id}"})

    def get_order(self, request: Request) -> Response:
        try:
            order = self._orders.get_order(_order_id_from_path(request.path))
        except OrderNotFoundError as exc:
            raise ApiError(404, f"order not found: {exc}") from exc
        return Response(200, order.to_dict())

    def cancel_order(self, request: Request) -> Response:
        try:
            order = self._orders.cancel_order(_order_id_from_path(request.path))
        except OrderNotFoundError as exc:
            raise ApiError(404, f"order not found: {exc}") from exc
        return Response(200, order.to_dict())


def _parse_json(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body or b"{}")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"invalid JSON body: {exc}") from exc
    if not isinstance(payload, dict) or not isinstance(payload.get("items"), list):
        raise ApiError(400, "body must be an object with an 'items' list")
    return payload


def _parse_customer(data: Any) -> Customer:
    if not isinstance(data, dict) or not data.get("id") or not data.get("email"):
        raise ApiError(400, "customer needs an 'id' and an 'email'")
    tier = data.get("loyalty_tier")
    try:
        loyalty_tier = LoyaltyTier(tier) if tier else None
    except ValueError as exc:
        raise ApiError(400, f"unknown loyalty tier: {tier}") from exc
    return Customer(str(data["id"]), str(data["email"]), str(data.get("name", "")), loyalty_tier)


def _parse_item(item: Any, max_quantity: int) -> tuple[str, int]:
    """Validate one ``{"sku": ..., "quantity": ...}`` entry of the order body."""
    if not isinstance(item, dict) or not isinstance(item.get("sku"), str):
        raise ApiError(400, "every item needs a 'sku'")
    quantity = item.get("quantity", 1)
    if not isinstance(quantity, int) or quantity < 0 or quantity > max_quantity:
        raise ApiError(400, f"quantity of {item['sku']} must be between 0 and {max_quantity}")
    return item["sku"], quantity


def _order_id_from_path(path: str) -> str:
    order_id = path.rstrip("/").rsplit("/", 1)[-1]
    if not order_id.startswith("ord_"):
        raise ApiError(404, f"no such resource: {path}")
    return order_id
