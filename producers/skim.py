"""Grouping a buffer of log lines fast: only lines near a candidate go through the Grouper.

Sits inside the tailer's read (producers/tailer.py), in front of producers/multiline.py: the
same records come out as if every line were fed to ``Grouper.feed`` (tests/unit/test_skim.py
compares both on generated logs), minus records that cannot become an event.

A **quiet** line is one that, fed to a grouper holding nothing or a plain record, closes that
record and starts a plain one-line record of its own that intake ignores: it starts with a
printable ASCII character other than ``{`` (so it is neither blank, indented, JSON, a Node
``/app/x.js:12`` header, nor non-UTF-8 at its start), and it holds none of the markers below.
The markers are what makes ``Grouper`` (multiline.py's start states and continuation regexes),
``has_stack`` (shared/intake/exceptions.py) and ``maybe_error`` (shared/intake/levels.py, the
test ``from_input`` makes before reading a level) see anything in a line, or a cheaper superset:

- anywhere, any case: ``err`` (also ``eror``, read as ``err`` with o→r), ``fatal``, ``crit``,
  ``severe``, ``panic``, ``emerg``, ``alert``, ``assert``;
- anywhere, as written: ``Exception``, ``Throwable``, ``Traceback``, `` E ``, `` F ``, `` A ``,
  ``E/``, ``F/``, ``A/``;
- at the start: a byte outside ``!``…``~`` or ``{`` or ``/``, ``E``/``F`` and a digit (klog),
  ``goroutine ``, ``Caused by: ``, ``Wrapped by: ``, ``Stack trace:``, ``Unhandled``,
  ``node:``, ``file:``, a drive letter ``C:\\``, java.util.logging's ``INFO: `` level lines.

Only ASCII letters matter: the only non-ASCII characters whose ``lower()`` holds an ASCII letter
are U+0130 (``i`` and a combining dot, which no marker can span) and U+212A (``k``, in none).

Every line that is not quiet is fed. Of a run of quiet lines, those fed are the first ones
until the grouper holds a plain record (or nothing) — they may continue a trace — and the last
one, which may be the first line of what follows (a logback header before its exception). The
lines skipped between would each have been a one-line record intake ignores, and feeding the
last one leaves the grouper exactly as feeding them all would (same pending record and start
offset, so the tailer's checkpoints stay exact). A skipped line must be short enough that
neither the tailer nor the grouper cuts it (a cut line ends in a marker text of ours).
"""

from __future__ import annotations

import re

from producers.multiline import Grouper, Record

LINE_TRUNCATED = " …[line truncated by tracehound]"
WINDOW = 256 << 10  # bytes searched per pass: a window stays in the CPU cache across the passes

# Lower case, and "o" read as "r" so that one search for "err" also finds "eror".
_FOLD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZo", b"abcdefghijklmnrpqrstuvwxyzr")
_FOLDED_WORDS = (b"err", b"fatal", b"crit", b"severe", b"panic", b"emerg", b"alert", b"assert")
_WORDS = (b"Exception", b"Throwable", b"Traceback")
# The one-letter levels maybe_error looks for (" E ", "E/", logcat and threadtime forms).
_LETTER = bytes.maketrans(b"EFA", b"\x01\x01\x01")
_LETTER_FORMS = (b" \x01 ", b"\x01/")
_HEAD = (
    rb"(?:[^\x21-\x7e]|[{/]|[EF][0-9\x80-\xff]|goroutine |Caused by: |Wrapped by: |Stack trace:"
    rb"|Unhandled|node:|file:|[A-Za-z]:\\|(?:WARNING|INFO|CONFIG|FINE\w*): )"
)
_LINE_HEAD = re.compile(_HEAD)
# A lookahead: matching an empty line's newline must not hide the line after it.
_NEXT_LINE_HEAD = re.compile(rb"\n(?=" + _HEAD + rb")")


def candidate_starts(buf: bytes, lo: int, hi: int) -> list[int]:
    """Sorted start offsets of the lines of ``buf[lo:hi]`` that are not quiet. ``lo`` is a line
    start and ``hi`` just after a newline."""
    starts: set[int] = set()
    if lo < hi and _LINE_HEAD.match(buf, lo):
        starts.add(lo)
    a = lo
    while a < hi:
        b = buf.rfind(b"\n", a, min(hi, a + WINDOW)) + 1
        if b <= a:  # one line longer than the window
            b = buf.find(b"\n", a, hi) + 1 or hi
        _search(buf, a, b, starts)
        a = b
    return sorted(starts)


def _search(buf: bytes, a: int, b: int, starts: set[int]) -> None:
    """Add the start of every line of ``buf[a:b]`` (whole lines) that holds a marker."""
    for m in _NEXT_LINE_HEAD.finditer(buf, max(a - 1, 0), b):
        starts.add(m.start() + 1)
    window = buf[a:b]
    for text, words in (
        (window.translate(_FOLD), _FOLDED_WORDS),
        (window, _WORDS),
        (window.translate(_LETTER), _LETTER_FORMS),
    ):
        for word in words:
            i = text.find(word)
            while i >= 0:
                starts.add(a + text.rfind(b"\n", 0, i) + 1)
                nl = text.find(b"\n", i)
                i = text.find(word, nl) if nl >= 0 else -1


def group_lines(
    grouper: Grouper,
    buf: bytes,
    lo: int,
    hi: int,
    *,
    base: int,
    now: float,
    max_line_bytes: int,
) -> list[Record]:
    """The records ``grouper`` closes while reading the lines of ``buf[lo:hi]`` (``lo`` a line
    start, ``hi`` just after a newline, ``buf[0]`` at file offset ``base``), leaving it as
    feeding every line would; records made of quiet lines only are left out."""
    # The grouper cuts a line over max_bytes / 4 encoded bytes; an undecodable byte encodes
    # as three (U+FFFD).
    short = min(max_line_bytes, grouper.max_bytes // 4 // 3)
    out: list[Record] = []

    def feed(start: int, end: int) -> None:
        raw = buf[start:end]
        if len(raw) > max_line_bytes:
            text = raw[:max_line_bytes].decode("utf-8", errors="replace").rstrip("\r")
            text += LINE_TRUNCATED
        else:
            text = raw.decode("utf-8", errors="replace").rstrip("\r")
        out.extend(grouper.feed(text, base + start, base + end + 1, now))

    def quiet(p: int, e: int) -> None:
        while p < e and not grouper.plain_or_idle():
            nl = buf.find(b"\n", p, e)
            feed(p, nl)
            p = nl + 1
        if p >= e:
            return
        last = max(p, buf.rfind(b"\n", p, e - 1) + 1)
        if not _all_short(buf, p, last, short):
            while p < e:
                nl = buf.find(b"\n", p, e)
                feed(p, nl)
                p = nl + 1
            return
        feed(last, e - 1)

    pos = lo
    for start in candidate_starts(buf, lo, hi):
        if start > pos:
            quiet(pos, start)
        end = buf.find(b"\n", start, hi)
        feed(start, end)
        pos = end + 1
    if pos < hi:
        quiet(pos, hi)
    return out


def _all_short(buf: bytes, p: int, e: int, limit: int) -> bool:
    """Whether every line in ``buf[p:e]`` (whole lines) is at most ``limit`` bytes long."""
    while p < e:
        nl = buf.rfind(b"\n", p, min(e, p + limit + 1))
        if nl < 0:
            return False
        p = nl + 1
    return True


__all__ = ["LINE_TRUNCATED", "candidate_starts", "group_lines"]
