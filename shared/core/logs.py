"""Log output for the command line: an event name with its fields, and a repeating problem
said once, then at most once a minute with how often it repeated."""

from __future__ import annotations

import logging
import time

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


def _shown(value: object) -> str:
    text = str(value)
    return repr(text) if not text or any(c.isspace() for c in text) else text


class FieldsFormatter(logging.Formatter):
    """``WARNING producers.tailer tail.open_failed path=/var/log/app.log error='Permission…'``:
    the ``extra`` fields of a record follow its message as key=value."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = {
            k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")
        }
        if not fields:
            return line
        head, sep, rest = line.partition("\n")  # a traceback stays below the fields
        return f"{head} " + " ".join(f"{k}={_shown(v)}" for k, v in fields.items()) + sep + rest


def configure(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(FieldsFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


class Throttle:
    """Whether to log a problem keyed by ``key`` (a path, an error kind) now: the first time,
    then once per ``every`` seconds; ``allow`` returns how many were held back since."""

    def __init__(self, every: float = 60.0) -> None:
        self.every = every
        self._last: dict[str, tuple[float, int]] = {}

    def allow(self, key: str, now: float | None = None) -> int | None:
        now = time.monotonic() if now is None else now
        last = self._last.get(key)
        if last is not None and now - last[0] < self.every:
            self._last[key] = (last[0], last[1] + 1)
            return None
        self._last[key] = (now, 0)
        return last[1] if last else 0

    def forget(self, key: str) -> None:
        self._last.pop(key, None)
