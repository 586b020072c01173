"""Minimal request/response types so the handlers do not depend on a web framework."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any


@dataclass
class Request:
    """An incoming HTTP request, already read from the WSGI environ."""

    method: str
    path: str
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def request_id(self) -> str:
        """The id set by the load balancer, or a fresh one for direct calls."""
        return self.headers.get("x-request-id") or f"req-{uuid.uuid4().hex[:10]}"


@dataclass
class Response:
    """A JSON response."""

    status: int
    payload: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def status_line(self) -> str:
        return f"{self.status} {HTTPStatus(self.status).phrase}"

    def body(self) -> bytes:
        return json.dumps(self.payload, separators=(",", ":")).encode("utf-8")


class ApiError(Exception):
    """An error reported to the client with its own status code, not a server failure."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
