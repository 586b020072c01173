"""A request's body as the routes read it: bounded in bytes and read time, decompressed
(gzip with every member, deflate, br) within the same bound."""

from __future__ import annotations

import asyncio
import gzip
import zlib

from starlette.requests import Request

from shared.intake.batch import BodyError


async def read_body(request: Request, limit: int, timeout: float = 30.0) -> bytes:
    """The request body, decompressed, refused with 413 once it passes ``limit`` bytes and with
    408 when it has not all arrived within ``timeout`` seconds."""
    raw = await read_raw(request, limit, timeout)
    return decoded(raw, request.headers.get("content-encoding", ""), limit)


async def read_raw(request: Request, limit: int, timeout: float = 30.0) -> bytes:
    """The body's bytes as sent (still compressed), bounded as ``read_body`` says."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyError(413, f"body of {declared} bytes exceeds the limit of {limit}")
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise BodyError(413, f"body exceeds the limit of {limit} bytes")
                chunks.append(chunk)
    except TimeoutError as exc:
        raise BodyError(408, f"the body did not arrive within {timeout:.0f} s") from exc
    return b"".join(chunks)


def decoded(body: bytes, content_encoding: str, limit: int) -> bytes:
    """``body`` decompressed as its Content-Encoding says, at most ``limit`` bytes."""
    encoding = content_encoding.strip().lower()
    if encoding in ("gzip", "x-gzip"):
        return inflate(body, limit, zlib.MAX_WBITS | 16, "gzip")
    if encoding == "deflate":
        return inflate(body, limit, zlib.MAX_WBITS, "deflate")
    if encoding == "br":  # the Python Sentry SDK's default when brotli is installed
        return _unbrotli(body, limit)
    return body


def inflate(body: bytes, limit: int, wbits: int, what: str) -> bytes:
    """Every member of a (possibly concatenated) compressed body, at most ``limit`` bytes."""
    out = bytearray()
    data = body
    try:
        while data:
            d = zlib.decompressobj(wbits=wbits)
            out += d.decompress(data, limit + 1 - len(out))
            if len(out) > limit or d.unconsumed_tail:
                raise BodyError(413, f"decompressed body exceeds the limit of {limit} bytes")
            if not d.eof:
                raise BodyError(400, f"bad {what} body: it ends before its compressed data does")
            data = d.unused_data
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise BodyError(400, f"bad {what} body: {exc}") from exc
    return bytes(out)


def _unbrotli(body: bytes, limit: int) -> bytes:
    """A brotli body, at most ``limit`` bytes: the output is bounded as it is produced, so a
    few kilobytes that expand to gigabytes stop at the limit."""
    import brotli

    d = brotli.Decompressor()
    try:
        out = bytearray(d.process(body, output_buffer_limit=limit + 1))
        while len(out) <= limit and not d.can_accept_more_data():
            more = d.process(b"", output_buffer_limit=limit + 1 - len(out))
            if not more:
                break
            out += more
        if len(out) > limit:
            raise BodyError(413, f"decompressed body exceeds the limit of {limit} bytes")
        if not d.is_finished():
            raise BodyError(400, "bad br body: it ends before its compressed data does")
    except brotli.error as exc:
        raise BodyError(400, f"bad br body: {exc}") from exc
    return bytes(out)
