"""Money helpers. Every amount in the service is an integer number of cents."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal

_SYMBOLS = {"EUR": "\N{EURO SIGN}", "USD": "$", "GBP": "\N{POUND SIGN}"}


def to_cents(value: str | int | float | Decimal) -> int:
    """Convert a decimal amount such as ``"12.99"`` into cents (``1299``)."""
    amount = Decimal(str(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    return int(amount * 100)


def format_cents(cents: int, currency: str = "EUR") -> str:
    """Render cents for humans: ``format_cents(1299) == "€12.99"``."""
    sign = "-" if cents < 0 else ""
    whole, fraction = divmod(abs(cents), 100)
    return f"{sign}{_SYMBOLS.get(currency, currency + ' ')}{whole:,}.{fraction:02d}"


def round_half_up(value: float | Decimal) -> int:
    """Round a fractional number of cents to a whole cent, halves away from zero."""
    return int(Decimal(str(value)).quantize(Decimal("1"), rounding=ROUND_HALF_UP))


def percent_of(cents: int, percent: int | Decimal) -> int:
    """Return ``percent`` % of ``cents``, rounded half-to-even (banker's rounding)."""
    share = Decimal(cents) * Decimal(percent) / Decimal(100)
    return int(share.quantize(Decimal("1"), rounding=ROUND_HALF_EVEN))


def allocate(total_cents: int, weights: Sequence[int]) -> list[int]:
    """Split ``total_cents`` proportionally to ``weights`` without losing a cent.

    Uses the largest-remainder method: every share is floored, then the cents left over go
    to the shares with the largest remainders. With all weights at zero the whole amount
    goes to the first share.
    """
    if not weights:
        return []
    weight_sum = sum(weights)
    if weight_sum == 0:
        return [total_cents] + [0] * (len(weights) - 1)
    shares = [total_cents * weight // weight_sum for weight in weights]
    remainders = [total_cents * weight % weight_sum for weight in weights]
    leftover = total_cents - sum(shares)
    by_remainder = sorted(range(len(weights)), key=lambda index: remainders[index], reverse=True)
    for index in by_remainder[:leftover]:
        shares[index] += 1
    return shares
