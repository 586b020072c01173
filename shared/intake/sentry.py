"""Sentry SDK payloads (envelopes and store events) read into the one event model.

A Sentry SDK pointed at ``tracehound ingest`` by its DSN sends envelopes: a JSON header line,
then items, each a JSON header line and a payload (``length`` bytes, else up to the next
newline). Items of type ``event`` are errors; every other type (transactions, sessions, client
reports, attachments, profiles, logs…) is dropped with a count, since the SDK would otherwise
retry or disable itself.

An event's exception chain (``exception.values``, the root cause first and the exception that
was thrown out last) is rendered as the trace text the rest of the pipeline reads
(shared/intake/frames.py, exceptions.py): Python's ``Traceback (most recent call last):`` for
Python events, Java's ``at pkg.Class.method(File.java:N)`` for JVM events, and Node's
``    at func (path:line:col)`` for the rest. The structured parts (release, environment, tags,
frames with ``in_app``, breadcrumbs) go into ``ErrorEvent.attributes``; the record then goes
through ``events.from_record`` like any other sent record.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

from shared.core.domain import ErrorEvent
from shared.intake.events import Ignored, from_record

MAX_FRAMES = 50  # frames kept in attributes (nearest the raise first); the trace keeps its own
MAX_BREADCRUMBS = 10  # the latest ones: what happened just before the error
MAX_TAGS = 50
MAX_FIELD_CHARS = 500  # one tag, breadcrumb message or code line
JVM_PLATFORMS = frozenset({"java", "kotlin", "scala", "groovy", "clojure"})


class EnvelopeError(ValueError):
    """The body is not a Sentry envelope (a 400: the SDK cannot fix it by retrying)."""


class TooManyItems(EnvelopeError):
    """More items than the record limit (a 413)."""


@dataclass(frozen=True)
class Item:
    type: str
    payload: bytes


@dataclass(frozen=True)
class Envelope:
    header: dict[str, Any]
    items: list[Item]

    @property
    def event_id(self) -> str:
        value = self.header.get("event_id")
        return value if isinstance(value, str) else ""


def _header(body: bytes, pos: int, where: str) -> tuple[dict[str, Any], int]:
    end = body.find(b"\n", pos)
    end = len(body) if end < 0 else end
    try:
        value = json.loads(body[pos:end] or b"{}")
    except (ValueError, RecursionError) as exc:
        raise EnvelopeError(f"{where}: not a JSON object line") from exc
    if not isinstance(value, dict):
        raise EnvelopeError(f"{where}: not a JSON object line")
    return value, end + 1


def parse_envelope(body: bytes, *, max_items: int) -> Envelope:
    """The envelope's header and items; a payload that is not where its header says is a 400."""
    if not body.strip():
        raise EnvelopeError("empty envelope")
    header, pos = _header(body, 0, "envelope header")
    items: list[Item] = []
    while pos < len(body):
        if body[pos : pos + 1] in (b"\n", b"\r"):  # blank lines between items
            pos += 1
            continue
        where = f"item {len(items)}"
        item_header, pos = _header(body, pos, f"{where} header")
        kind = item_header.get("type")
        if not isinstance(kind, str) or not kind:
            raise EnvelopeError(f"{where}: header has no 'type'")
        length = item_header.get("length")
        if length is not None:
            if not isinstance(length, int) or isinstance(length, bool) or length < 0:
                raise EnvelopeError(f"{where}: bad 'length' {length!r}")
            payload = body[pos : pos + length]
            if len(payload) < length:
                raise EnvelopeError(f"{where}: payload ends before its {length} bytes")
            pos += length
            if body[pos : pos + 1] == b"\n":
                pos += 1
        else:
            end = body.find(b"\n", pos)
            end = len(body) if end < 0 else end
            payload, pos = body[pos:end], end + 1
        items.append(Item(kind, payload))
        if len(items) > max_items:
            raise TooManyItems(f"more than {max_items} items in one envelope")
    return Envelope(header, items)


# --- one event -------------------------------------------------------------------------------


def _str(value: Any) -> str:
    if value is None or isinstance(value, dict | list):
        return ""
    return str(value)[:MAX_FIELD_CHARS]


def _values(container: Any) -> list[dict[str, Any]]:
    """``{"values": [...]}`` or a bare list (older SDKs), objects only."""
    values = container.get("values") if isinstance(container, dict) else container
    return [v for v in values if isinstance(v, dict)] if isinstance(values, list) else []


def _frames(exc: dict[str, Any]) -> list[dict[str, Any]]:
    """An exception's frames as the SDK sent them: outermost first, the raise last."""
    stack = exc.get("stacktrace")
    frames = stack.get("frames") if isinstance(stack, dict) else None
    return [f for f in frames if isinstance(f, dict)] if isinstance(frames, list) else []


def _path(frame: dict[str, Any]) -> str:
    return _str(frame.get("abs_path")) or _str(frame.get("filename")) or "<unknown>"


def _line(frame: dict[str, Any]) -> int:
    value = frame.get("lineno")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _exception_line(exc: dict[str, Any], qualified: bool = False) -> str:
    """``Type: value`` as the platform prints it; "" for a bare stack (no exception)."""
    name = _str(exc.get("type"))
    if not name:
        return ""
    module = _str(exc.get("module"))
    if qualified and module and "." not in name:
        name = f"{module}.{name}"
    value = exc.get("value")
    value = str(value)[:8000] if value not in (None, "") else ""
    return f"{name}: {value}" if value else name


def _python_trace(chain: list[dict[str, Any]]) -> str:
    """Python's own layout: the root cause first, each exception after its frames."""
    out: list[str] = []
    for i, exc in enumerate(chain):
        if i:
            # The cause's mechanism says how it was linked ("__cause__" or "__context__").
            mechanism = chain[i - 1].get("mechanism")
            source = mechanism.get("source") if isinstance(mechanism, dict) else None
            link = (
                "During handling of the above exception, another exception occurred:"
                if source == "__context__"
                else "The above exception was the direct cause of the following exception:"
            )
            out += ["", link, ""]
        frames = _frames(exc)
        if frames:
            out.append("Traceback (most recent call last):")
        for f in frames:
            function = _str(f.get("function")) or "<module>"
            out.append(f'  File "{_path(f)}", line {_line(f)}, in {function}')
            code = _str(f.get("context_line")).strip()
            if code:
                out.append(f"    {code}")
        if line := _exception_line(exc):
            out.append(line)
    return "\n".join(out)


def _innermost_first_trace(chain: list[dict[str, Any]], jvm: bool) -> str:
    """Java's and Node's layout: the thrown exception first, its causes after it."""
    out: list[str] = []
    for i, exc in enumerate(reversed(chain)):
        if line := _exception_line(exc, qualified=jvm):
            out.append(f"Caused by: {line}" if i else line)
        for f in reversed(_frames(exc)):
            function = _str(f.get("function")) or "<anonymous>"
            if jvm:
                module = _str(f.get("module"))
                qual = f"{module}.{function}" if module else function
                out.append(f"\tat {qual}({_str(f.get('filename')) or _path(f)}:{_line(f)})")
            else:
                col = f.get("colno") if isinstance(f.get("colno"), int) else 0
                out.append(f"    at {function} ({_path(f)}:{_line(f)}:{col})")
    return "\n".join(out)


def render_trace(chain: list[dict[str, Any]], platform: str) -> str:
    """The exception chain (root cause first, as Sentry orders ``exception.values``) as the
    trace text its platform prints."""
    if not chain:
        return ""
    if platform == "python":
        return _python_trace(chain)
    return _innermost_first_trace(chain, jvm=platform in JVM_PLATFORMS)


def frame_list(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chain's frames nearest the raise first (the thrown exception's, then its causes'),
    in-app ones only when there are any, as retrieval prefers them."""
    ordered = [f for exc in reversed(chain) for f in reversed(_frames(exc))]
    in_app = [f for f in ordered if f.get("in_app") is True]
    chosen = in_app or ordered
    out = []
    for f in chosen[:MAX_FRAMES]:
        frame: dict[str, Any] = {
            "file": _path(f),
            "line": _line(f) or None,
            "function": _str(f.get("function")),
            "module": _str(f.get("module")),
            "in_app": f.get("in_app") is True,
        }
        if code := _str(f.get("context_line")).strip():
            frame["code"] = code
        # a minified frame is mapped by its column (shared/intake/symbolicate.py)
        colno = f.get("colno")
        if isinstance(colno, int) and not isinstance(colno, bool) and colno > 0:
            frame["column"] = colno
        out.append(frame)
    return out


def _tags(value: Any) -> dict[str, str]:
    """Tags as a dict (SDKs send an object, or a list of ``[key, value]`` pairs)."""
    pairs: list[Any] = list(value.items()) if isinstance(value, dict) else value
    if not isinstance(pairs, list):
        return {}
    tags: dict[str, str] = {}
    for pair in pairs[:MAX_TAGS]:
        if isinstance(pair, list | tuple) and len(pair) == 2 and _str(pair[0]):
            tags[_str(pair[0])[:200]] = _str(pair[1])
    return tags


def _breadcrumbs(value: Any) -> list[dict[str, Any]]:
    """The latest few breadcrumbs, message and category only (their ``data`` often holds
    request bodies and URLs with tokens; what is kept is redacted by intake)."""
    crumbs = _values(value)[-MAX_BREADCRUMBS:]
    kept = []
    for crumb in crumbs:
        item = {
            k: _str(crumb.get(k))
            for k in ("timestamp", "type", "category", "level", "message")
            if _str(crumb.get(k))
        }
        if item:
            kept.append(item)
    return kept


def _message(event: dict[str, Any]) -> str:
    """The log message of a logged error (``logentry``, or ``message`` in older SDKs)."""
    for key in ("logentry", "message"):
        value = event.get(key)
        if isinstance(value, dict):
            text = value.get("formatted") or value.get("message")
            params = value.get("params")
            if not value.get("formatted") and isinstance(text, str) and params:
                # A format that does not fit its params: the template itself.
                with contextlib.suppress(TypeError, ValueError, KeyError):
                    text = text % tuple(params) if isinstance(params, list) else text % params
            if isinstance(text, str) and text.strip():
                return text
        elif isinstance(value, str) and value.strip():
            return value
    return ""


def _chain(event: dict[str, Any]) -> list[dict[str, Any]]:
    chain = _values(event.get("exception"))
    if chain:
        return chain
    # attach_stacktrace / a logged error without exc_info: the thread's stack, if any.
    stack = event.get("stacktrace")
    for thread in _values(event.get("threads")):
        if thread.get("crashed") or thread.get("current"):
            stack = stack or thread.get("stacktrace")
    if isinstance(stack, dict) and isinstance(stack.get("frames"), list) and stack["frames"]:
        return [{"type": "", "value": None, "stacktrace": stack}]
    return []


def event_from_sentry(
    event: dict[str, Any],
    *,
    service: str,
    repo: str,
    project: str,
    max_bytes: int,
    event_id: str = "",
) -> ErrorEvent | Ignored:
    """One Sentry event (an ``event`` item's payload, or a store request's body)."""
    platform = _str(event.get("platform")) or "other"
    chain = _chain(event)
    thrown = chain[-1] if chain and _str(chain[-1].get("type")) else None
    trace = render_trace(chain, platform)
    message = _message(event)
    if not message and thrown is not None and thrown.get("value") is not None:
        message = str(thrown["value"])
    # Not the event_id: it is the event's id already, and an attribute of its own would make
    # every event of a storm a shape of its own to intake (shared/groups/submit.py _prepare).
    attributes: dict[str, Any] = {
        "sentry": {"project": project, "platform": platform, "sdk": _sdk(event.get("sdk"))}
    }
    for key in ("release", "environment", "server_name", "logger", "transaction", "dist"):
        if text := _str(event.get(key)):
            attributes[key] = text
    if tags := _tags(event.get("tags")):
        attributes["tags"] = tags
    if frames := frame_list(chain):
        attributes["frames"] = frames
    if crumbs := _breadcrumbs(event.get("breadcrumbs")):
        attributes["breadcrumbs"] = crumbs
    if len(chain) > 1:
        attributes["exceptions"] = [_exception_line(e)[:MAX_FIELD_CHARS] for e in reversed(chain)]
    record: dict[str, Any] = {
        "service": service,
        "repo": repo,
        "level": _str(event.get("level")) or "error",
        "message": message,
        "attributes": attributes,
    }
    if trace:
        record["error"] = {"stack": trace}
        if thrown is not None:
            record["error"]["type"] = _str(thrown.get("type"))
    if event.get("timestamp") not in (None, ""):
        record["timestamp"] = event["timestamp"]
    if event_id or event.get("event_id"):
        record["id"] = event_id or _str(event.get("event_id"))
    return from_record(record, origin="sent", service=service, repo=repo, max_bytes=max_bytes)


def _sdk(value: Any) -> str:
    if not isinstance(value, dict):
        return ""
    return "/".join(p for p in (_str(value.get("name")), _str(value.get("version"))) if p)


# --- configuration ---------------------------------------------------------------------------


def auth_key(header: str) -> str:
    """``sentry_key`` out of an ``X-Sentry-Auth`` (or ``Authorization: Sentry …``) header."""
    text = header.strip()
    if text[:7].lower() == "sentry ":
        text = text[7:]
    for part in text.split(","):
        name, _, value = part.strip().partition("=")
        if name.strip() == "sentry_key":
            return value.strip()
    return ""


def project_target(projects: dict[str, str], project_id: str) -> tuple[str, str]:
    """(service, repo) of a DSN project: ``TRACEHOUND_SENTRY_PROJECTS`` maps an id to
    ``service`` or ``service:repo``; an id it does not name is its own service."""
    target = projects.get(project_id, project_id)
    service, _, repo = target.partition(":")
    return service, repo or service
