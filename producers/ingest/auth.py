"""Credentials from request headers, compared in constant time."""

from __future__ import annotations

import secrets

from starlette.requests import Request


def same(given: str, expected: str) -> bool:
    """Constant-time comparison of a credential from a header (bytes: a non-ASCII header
    value is a mismatch, not an exception)."""
    return secrets.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def bearer_ok(request: Request, token: str | None) -> bool:
    """``Authorization: Bearer <token>`` (no token configured: every request)."""
    if token is None:
        return True
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and same(value.strip(), token)
