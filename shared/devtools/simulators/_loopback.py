"""Shared HTTP plumbing of the loopback test-double servers (server, handler base, lifecycle).

The simulators in this package (:mod:`~shared.devtools.simulators.ollama`,
:mod:`~shared.devtools.simulators.slack`) each serve a real HTTP/1.1 server on loopback
from a daemon thread. This module holds what they have in common:

- :class:`LoopbackServer`: a ``ThreadingHTTPServer`` with a large backlog, no reverse DNS
  lookup on bind, quiet errors while closing, and tracking of open connections so ``stop()``
  can drop kept-alive clients.
- :class:`BaseHandler`: TCP_NODELAY, no access log, every method dispatched to the
  simulator's ``_handle``, chunked/plain request bodies, and ``send_bytes``/``send_json``/
  ``send_text`` with a once-only completion hook run before the last reply bytes are written.
- :class:`LoopbackSimulator`: start/stop (restart on the same port), context manager, ``port``/
  ``url``, the thread-safe request log, and :func:`run_until_signal` for the ``main()``\\ s.
"""

from __future__ import annotations

import contextlib
import copy
import json
import signal
import socket
import socketserver
import sys
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any, ClassVar, Self

JSON_CONTENT_TYPE = "application/json; charset=utf-8"


class LoopbackServer(ThreadingHTTPServer):
    """The HTTP server of one simulator; ``sim`` is the simulator that answers requests."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # socketserver's default backlog of 5 resets bursts of clients

    def __init__(
        self, address: tuple[str, int], sim: LoopbackSimulator, handler: type[BaseHandler]
    ) -> None:
        self.sim = sim
        self.closing = False
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls getfqdn(), a reverse DNS lookup that can stall; skip it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if self.closing or isinstance(sys.exc_info()[1], OSError):
            return  # client went away or the simulator is stopping
        super().handle_error(request, client_address)

    def drop_connections(self) -> None:
        with self.connections_lock:
            connections = list(self.connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class BaseHandler(BaseHTTPRequestHandler):
    """Request handler base: every method goes to ``server.sim._handle(self)``."""

    protocol_version = "HTTP/1.1"
    server: LoopbackServer
    server_version = "LoopbackSimulator/0"
    text_content_type = "text/plain; charset=utf-8"
    json_separators: tuple[str, str] | None = None  # None: json.dumps' default
    on_complete: Callable[[int], None] | None = None

    def version_string(self) -> str:
        return self.server_version

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without TCP_NODELAY, Nagle plus the
        # client's delayed ACK adds ~40 ms to every response.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.connections_lock:
                self.server.connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _dispatch(self) -> None:
        self.server.sim._handle(self)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _dispatch

    def read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline(65537).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline(65537)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _common_headers(self) -> None:
        if self.server.closing:
            self.close_connection = True
            self.send_header("Connection", "close")

    def mark_complete(self, status: int) -> None:
        """Run the completion hook once, before the last bytes of the reply are written, so a
        client that has its answer always sees the log entry and state already updated."""
        hook, self.on_complete = self.on_complete, None
        if hook is not None:
            hook(status)

    def send_bytes(
        self, status: int, data: bytes, content_type: str, headers: Mapping[str, str] | None = None
    ) -> int:
        self.mark_complete(status)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self._common_headers()
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        return status

    def send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> int:
        data = json.dumps(payload, ensure_ascii=False, separators=self.json_separators).encode(
            "utf-8"
        )
        return self.send_bytes(status, data, JSON_CONTENT_TYPE, headers)

    def send_text(
        self,
        status: int,
        text: str,
        headers: Mapping[str, str] | None = None,
        *,
        content_type: str | None = None,
    ) -> int:
        return self.send_bytes(
            status, text.encode("utf-8"), content_type or self.text_content_type, headers
        )


class LoopbackSimulator:
    """Lifecycle and request log of a simulator served by a :class:`LoopbackServer`.

    Subclasses set ``handler_class``, ``display_name`` (for errors) and ``thread_name`` and
    implement ``_handle(handler)``. Log entries are dicts with at least ``"path"``; append them
    with :meth:`_record` while holding ``_lock``.
    """

    handler_class: ClassVar[type[BaseHandler]] = BaseHandler
    display_name: ClassVar[str] = "LoopbackSimulator"
    thread_name: ClassVar[str] = "loopback-simulator"

    def __init__(self, *, host: str, port: int) -> None:
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._log: list[dict[str, Any]] = []
        self._next_id = 1
        self._server: LoopbackServer | None = None
        self._thread: threading.Thread | None = None

    def _handle(self, h: Any) -> None:
        raise NotImplementedError

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError(f"{self.display_name} already started")
        server = LoopbackServer((self._host, self._port), self, self.handler_class)
        self._server = server
        self._port = server.server_port  # a restart after stop() comes back on the same port
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{self.thread_name}:{server.server_port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        server.closing = True
        server.shutdown()
        server.drop_connections()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> Self:
        return self.start() if self._server is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError(f"{self.display_name} is not started")
        return self._server.server_port

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    # -------------------------------------------------------------- request log

    def _record(self, entry: dict[str, Any]) -> None:
        """Number ``entry`` and append it to the log; the caller holds ``_lock``."""
        entry["id"] = self._next_id
        self._next_id += 1
        self._log.append(entry)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Copies of the log entries, in arrival order (control ``/_sim/*`` calls excluded)."""
        with self._lock:
            return copy.deepcopy(self._log)

    def requests_to(self, path: str) -> list[dict[str, Any]]:
        return [entry for entry in self.requests if entry["path"] == path]

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()


def run_until_signal(sim: LoopbackSimulator) -> int:
    """Start ``sim``, print its URL, serve until SIGTERM/SIGINT, stop it; returns 0."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    sim.start()
    try:
        print(sim.url, flush=True)
        while not stop.wait(0.2):
            pass
    finally:
        sim.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
