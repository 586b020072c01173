"""A Redis that goes away in the instant after it hands a message out.

A TCP proxy on loopback in front of a real redis-server. It forwards everything; once armed,
at the next ``BRPOP`` answer carrying a message from ``queue`` (after ``skip`` such answers
let through) it cuts: before anything
else is forwarded, it drops every connection and refuses new ones for ``down_s`` seconds —
what a worker sees when Redis shuts down between serving its ``BRPOP`` and its next command
(or, with ``swallow``, before the answer was written at all).
Redis itself keeps running, so after the cut the worker finds everything as Redis left it:
the message off the queue and, unless the worker kept it, nowhere else. Used by
tests/integration/test_redis_hand_off.py; it reads only as much of the protocol as it needs
(the array of two bulk strings a ``BRPOP`` answers with).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field


@dataclass
class RedisCut:
    redis_port: int
    queue: str = ""
    down_s: float = 3.0
    # True: the answer never reaches the worker — Redis popped the message and shut down before
    # writing the reply (what Redis does when SIGTERM lands in that event-loop turn).
    swallow: bool = False
    skip: int = 0  # answers from ``queue`` let through before the one that is cut
    port: int = 0
    cuts: int = 0  # how many times it cut (at most once per ``arm``)
    _armed: bool = False
    _down_until: float = 0.0
    _socks: set[socket.socket] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> str:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True, name="redis-cut").start()
        return f"redis://127.0.0.1:{self.port}/0"

    def arm(self, queue: str, *, down_s: float = 3.0, swallow: bool = False, skip: int = 0) -> None:
        """Cut once, at the next message from ``queue`` after ``skip`` let through."""
        with self._lock:
            self.queue, self.down_s, self.swallow, self.skip = queue, down_s, swallow, skip
            self.cuts, self._armed = 0, True

    def disarm(self) -> None:
        with self._lock:
            self._armed = False

    def stop(self) -> None:
        self._stop.set()
        self._drop_all()
        if listener := getattr(self, "_listener", None):  # None: never started
            listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if time.monotonic() < self._down_until:
                client.close()  # Redis is "down": the connection ends at once
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.redis_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks.update((client, upstream))
            state = {"brpop": False}
            threading.Thread(target=self._up, args=(client, upstream, state), daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client, state), daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket, state: dict[str, bool]) -> None:
        """Client to Redis: note a BRPOP; forward nothing while cut."""
        while data := _recv(client):
            if b"BRPOP" in data.upper():
                state["brpop"] = True
            if not self._send(upstream, data):
                break
        self._close(client, upstream)

    def _down(self, upstream: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        """Redis to client: after a BRPOP's answer with a message from the queue, cut."""
        while data := _recv(upstream):
            if state["brpop"] and data.startswith(b"*2\r\n"):
                data = self._whole_reply(upstream, data)
                if _first_bulk(data) == self.queue.encode() and self._take_arm():
                    self._down_until = time.monotonic() + self.down_s
                    if not self.swallow:
                        client.sendall(data)  # the worker has the message; Redis let it go
                    self.cuts += 1
                    self._drop_all()
                    return
            state["brpop"] = state["brpop"] and not data.startswith((b"*2\r\n", b"*-1\r\n"))
            if not self._send(client, data):
                break
        self._close(client, upstream)

    def _send(self, sock: socket.socket, data: bytes) -> bool:
        if time.monotonic() < self._down_until:
            return False
        try:
            sock.sendall(data)
        except OSError:
            return False
        return True

    def _take_arm(self) -> bool:
        with self._lock:
            if self._armed and self.skip > 0:
                self.skip -= 1
                return False
            armed, self._armed = self._armed, False
            return armed

    @staticmethod
    def _whole_reply(sock: socket.socket, data: bytes) -> bytes:
        """Read until the two bulk strings of the array have arrived."""
        while _missing(data) > 0:
            more = _recv(sock)
            if not more:
                break
            data += more
        return data

    def _close(self, *socks: socket.socket) -> None:
        for s in socks:
            with self._lock:
                self._socks.discard(s)
            with contextlib.suppress(OSError):
                s.close()

    def _drop_all(self) -> None:
        with self._lock:
            socks, self._socks = list(self._socks), set()
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _bulks(data: bytes) -> tuple[list[bytes], int]:
    """The complete bulk strings of a ``*2`` reply so far, and the bytes still missing."""
    at, found = 4, list[bytes]()
    for _ in range(2):
        end = data.find(b"\r\n", at)
        if end < 0 or data[at : at + 1] != b"$":
            return found, 1
        size = int(data[at + 1 : end])
        start, stop = end + 2, end + 2 + size
        if len(data) < stop + 2:
            return found, stop + 2 - len(data)
        found.append(data[start:stop])
        at = stop + 2
    return found, 0


def _missing(data: bytes) -> int:
    return _bulks(data)[1]


def _first_bulk(data: bytes) -> bytes | None:
    found, _ = _bulks(data)
    return found[0] if found else None
