"""WSGI entry point of the shop API: wiring, routing and error handling.

Run locally with ``python -m shopapp.app``; production runs it under gunicorn as
``shopapp.app:application``.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import make_server

from shopapp.api.handlers import OrderHandlers
from shopapp.api.http import ApiError, Request, Response
from shopapp.config import Settings, load_settings
from shopapp.notifications.email import EmailNotifier
from shopapp.repositories.order_repository import InMemoryOrderRepository, OrderRepository
from shopapp.services.inventory import Inventory, Product
from shopapp.services.order_service import OrderService
from shopapp.services.pricing import PricingEngine

log = logging.getLogger("shopapp")

Handler = Callable[[Request], Response]

DEMO_CATALOGUE = [
    Product("MUG-BLUE", "Blue enamel mug", 1450, on_hand=120),
    Product("TEE-L", "Logo T-shirt, size L", 2200, on_hand=40),
    Product("STICKER-PACK", "Sticker pack", 350, on_hand=500),
]


class Application:
    """Routes requests to the order handlers and turns failures into JSON errors."""

    def __init__(
        self,
        settings: Settings | None = None,
        inventory: Inventory | None = None,
        repository: OrderRepository | None = None,
    ) -> None:
        self.settings = settings or load_settings()
        self.inventory = inventory or Inventory(DEMO_CATALOGUE)
        self.orders = OrderService(
            repository or InMemoryOrderRepository(),
            self.inventory,
            PricingEngine(self.settings),
            EmailNotifier(self.settings),
        )
        handlers = OrderHandlers(self.orders, self.settings)
        self._routes: dict[tuple[str, str], Handler] = {
            ("POST", "/orders"): handlers.create_order,
            ("GET", "/orders/"): handlers.get_order,
            ("DELETE", "/orders/"): handlers.cancel_order,
        }

    def _route(self, request: Request) -> Handler | None:
        prefix = "/orders" if request.path.rstrip("/") == "/orders" else "/orders/"
        if not request.path.startswith(prefix):
            return None
        return self._routes.get((request.method, prefix))

    def handle(self, request: Request) -> Response:
        """Serve one request; unexpected exceptions are logged with their stack and become 500."""
        route = self._route(request)
        if route is None:
            return Response(404, {"error": f"no route for {request.method} {request.path}"})
        request_id = request.request_id
        try:
            return route(request)
        except ApiError as exc:
            return Response(exc.status, {"error": exc.message, "request_id": request_id})
        except Exception as exc:
            log.error(
                "%s: %s",
                type(exc).__name__,
                exc,
                extra={
                    "request_id": request_id,
                    "path": request.path,
                    "stack": traceback.format_exc(),
                },
            )
            return Response(500, {"error": "internal server error", "request_id": request_id})

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        """WSGI interface."""
        length = int(environ.get("CONTENT_LENGTH") or 0)
        headers = {
            key[5:].replace("_", "-").lower(): value
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        request = Request(
            method=environ["REQUEST_METHOD"],
            path=environ.get("PATH_INFO", "/"),
            body=environ["wsgi.input"].read(length) if length else b"",
            headers=headers,
        )
        response = self.handle(request)
        start_response(response.status_line, [("Content-Type", "application/json")])
        return [response.body()]


def main(host: str = "127.0.0.1", port: int = 8080) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    with make_server(host, port, Application()) as server:
        log.info("shop-api listening on http://%s:%d", host, port)
        server.serve_forever()


if __name__ == "__main__":
    main()
