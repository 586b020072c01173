"""Mapping HTTP failures of model servers onto TransientError / PermanentError."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from shared.core.errors import PermanentError, TransientError


def error_text(response: httpx.Response) -> str:
    """The server's own error message (Ollama and most servers send ``{"error": ...}``)."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(body, dict):
        err = body.get("error") or body.get("message") or body.get("detail")
        if isinstance(err, dict):
            err = err.get("message")
        if err:
            return str(err)
    return response.text[:300]


def check(
    response: httpx.Response,
    what: str,
    *,
    not_found: Callable[[httpx.Response], PermanentError] | None = None,
    refused: type[PermanentError] = PermanentError,
) -> httpx.Response:
    """Raise the right error kind for a failed response; return it when it succeeded
    (``refused``: the kind for a 4xx other than a 404 given to ``not_found``)."""
    if response.is_success:
        return response
    detail = f"{what}: HTTP {response.status_code}: {error_text(response)}"
    if response.status_code == 404 and not_found is not None:
        raise not_found(response)
    if response.status_code in (408, 425, 429) or response.status_code >= 500:
        retry_after = response.headers.get("Retry-After")
        raise TransientError(
            detail,
            retry_after=float(retry_after) if retry_after and retry_after.isdigit() else None,
        )
    raise refused(detail)


def json_body(response: httpx.Response, what: str) -> Any:
    """The parsed body; a 200 with HTML from a proxy is a clear error, not a crash."""
    try:
        return response.json()
    except ValueError as exc:
        raise PermanentError(f"{what}: expected JSON, got {response.text[:120]!r}") from exc


def post_json(
    client: httpx.Client,
    url: str,
    body: object,
    what: str,
    *,
    not_found: Callable[[httpx.Response], PermanentError] | None = None,
    headers: dict[str, str] | None = None,
    refused: type[PermanentError] = PermanentError,
) -> httpx.Response:
    """POST with connection failures and timeouts turned into TransientError."""
    try:
        response = client.post(url, json=body, headers=headers)
    except httpx.TimeoutException as exc:
        raise TransientError(f"{what}: timed out ({type(exc).__name__}) at {url}") from exc
    except httpx.TransportError as exc:
        raise TransientError(f"{what}: cannot reach {url} ({exc})") from exc
    return check(response, what, not_found=not_found, refused=refused)
