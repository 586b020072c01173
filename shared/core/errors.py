"""Error kinds that tell a stage whether retrying can help."""

from __future__ import annotations


class TracehoundError(Exception):
    """Base of tracehound's own errors."""


class TransientError(TracehoundError):
    """Timeouts, connection failures, 5xx, 429: retrying later can succeed."""

    def __init__(
        self, message: str, *, retry_after: float | None = None, maybe_done: bool = False
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        # The request may have been carried out although no answer came (a timeout, a reset
        # connection): before doing it again, look whether it was.
        self.maybe_done = maybe_done


class PermanentError(TracehoundError):
    """Bad input, 4xx, a model that is not pulled: retrying cannot help; say what to fix."""
