"""User-facing message catalogues. English is built in; French comes from the legacy module."""

from __future__ import annotations

EN_MESSAGES: dict[str, str] = {
    "greeting": "Hello",
    "order_confirmed": "Your order is confirmed",
    "subtotal": "Subtotal",
    "discount": "Discount",
    "shipping": "Shipping",
    "total": "Total",
}


def get_messages(language: str) -> dict[str, str]:
    """Return the catalogue for ``language``, falling back to English for unknown keys."""
    if language.lower().startswith("fr"):
        from shopapp.locale.legacy_fr import MESSAGES

        return {**EN_MESSAGES, **MESSAGES}
    return dict(EN_MESSAGES)
