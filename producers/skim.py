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

- anywhere, any case: the level words ``err`` (also ``eror``, read as ``err`` with o→r),
  ``fatal``, ``crit``, ``severe``, ``emerg``, ``alert``, ``assert``;
- anywhere, as written: the one-letter levels `` E ``, `` F ``, `` A ``, ``E/``, ``F/``, ``A/``;
- at the start: a byte outside ``!``…``~`` or ``{`` or ``/``, ``E``/``F`` and a digit (klog);
- and each language's own (shared/intake/traces/: ``SKIM_HEADS`` at the start, ``SKIM_WORDS``
  as written, ``SKIM_FOLDED`` in any case): ``Traceback``, ``Exception``, ``Throwable``,
  ``panic``, ``goroutine ``, ``Caused by: ``, ``Stack trace:``, ``Unhandled``, ``node:``, a
  drive letter ``C:\\``, java.util.logging's ``INFO: `` level lines, ….

Only ASCII letters matter: the only non-ASCII characters whose ``lower()`` holds an ASCII letter
are U+0130 (``i`` and a combining dot, which no marker can span) and U+212A (``k``, in none).

Every line that is not quiet is fed. Of a run of quiet lines, those fed are the first ones
until the grouper holds a plain record (or nothing) — they may continue a trace — and the last
one when it may be the header of what follows (a logback line before its exception, a line
before indented ones: ``may_continue_plain``) or when the run ends the buffer (the next read
may continue it). Each line skipped would have been a one-line record intake ignores, closed by
the next line fed, and the grouper ends up exactly as if fed them all (same pending record and
start offset, so the tailer's checkpoints stay exact). A skipped line must be short enough that
neither the tailer nor the grouper cuts it: a cut line ends in a text of ours, and "… E …[line
truncated" holds a level the line did not (tests/unit/test_skim.py has one).

Markers are searched per window of whole lines with one search per word (a regex starting with
a literal is as fast as ``bytes.find``; an alternation of words would be ten times slower).
"""

from __future__ import annotations

import re

from producers.multiline import Grouper, Record, may_continue_plain
from shared.intake.traces import skim_markers

LINE_TRUNCATED = " …[line truncated by tracehound]"
WINDOW = 256 << 10  # bytes searched per pass: a window stays in the CPU cache across the passes

# Lower case, and "o" read as "r" so that a search for "err" also finds "eror".
_FOLD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZo", b"abcdefghijklmnrpqrstuvwxyzr")
# Each search starts with a literal, which the regex engine skips to as fast as bytes.find; one
# search finds the six level words with "er" in them (checking what precedes "er" only there).
_IN_FOLDED = tuple(
    re.compile(p)
    for p in (
        rb"er(?:r|(?<=sever)e|(?<=emer)g|(?<=aler)t|(?<=asser)t)",
        rb"fatal",
        rb"crit",
        *skim_markers("SKIM_FOLDED"),
    )
)
_AS_WRITTEN = tuple(
    re.compile(p)
    for p in (
        *skim_markers("SKIM_WORDS"),
        # The one-letter levels maybe_error looks for: " E " and "E/" (logcat, threadtime).
        rb"E(?:/|(?<= E) )",
        rb"F(?:/|(?<= F) )",
        rb"A(?:/|(?<= A) )",
    )
)
_HEAD = rb"(?:[^\x21-\x7e]|[{/]|[EF][0-9\x80-\xff]|" + b"|".join(skim_markers("SKIM_HEADS")) + rb")"
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
    for head in _NEXT_LINE_HEAD.finditer(buf, max(a - 1, 0), b):
        starts.add(head.start() + 1)
    folded = buf[a:b].translate(_FOLD)
    for text, lo, hi, patterns in ((buf, a, b, _AS_WRITTEN), (folded, 0, b - a, _IN_FOLDED)):
        for pattern in patterns:
            m = pattern.search(text, lo, hi)
            while m is not None:
                at = m.start()
                nl = text.rfind(b"\n", lo, at)
                starts.add(a + nl + 1 - lo if nl >= 0 else a)
                nl = text.find(b"\n", at, hi)  # the line is a candidate: on to the next one
                m = pattern.search(text, nl, hi) if nl >= 0 else None


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
    feeding every line would; records of one quiet line are left out (intake ignores them)."""
    # The grouper cuts a line over max_bytes / 4 encoded bytes; an undecodable byte encodes
    # as three (U+FFFD).
    short = min(max_line_bytes, grouper.max_bytes // 4 // 3)
    out: list[Record] = []
    alone: dict[int, int] = {}  # start -> end of the quiet lines fed, each maybe a record

    def text_of(start: int, end: int) -> str:
        raw = buf[start:end]
        if len(raw) > max_line_bytes:
            text = raw[:max_line_bytes].decode("utf-8", errors="replace").rstrip("\r")
            return text + LINE_TRUNCATED
        return raw.decode("utf-8", errors="replace").rstrip("\r")

    def feed(start: int, end: int, text: str | None = None) -> None:
        if text is None:
            if end - start <= short:  # a quiet line: alone, it is a record intake ignores
                alone[base + start] = base + end + 1
            text = text_of(start, end)
        out.extend(grouper.feed(text, base + start, base + end + 1, now))

    def quiet(p: int, e: int, *, keep_last: bool) -> None:
        """Quiet lines [p, e): fed until the grouper holds a plain record or nothing, then
        only the last one, and that only if what follows could make it a record's header."""
        while p < e and not grouper.plain_or_idle():
            nl = buf.find(b"\n", p, e)
            feed(p, nl)
            p = nl + 1
        if p >= e:
            return
        last = max(p, buf.rfind(b"\n", p, e - 1) + 1) if keep_last else e
        if not _all_short(buf, p, last, short):
            last = p  # a line something would cut: feed them all
        if last < e:
            while last < e:
                nl = buf.find(b"\n", last, e)
                feed(last, nl)
                last = nl + 1

    pos = lo
    for start in candidate_starts(buf, lo, hi):
        end = buf.find(b"\n", start, hi)
        text = text_of(start, end)
        if start > pos:
            quiet(pos, start, keep_last=may_continue_plain(text))
        feed(start, end, text)
        pos = end + 1
    if pos < hi:
        quiet(pos, hi, keep_last=True)  # the next read may go on with a record it starts
    return [r for r in out if alone.get(r.start) != r.end]


def _all_short(buf: bytes, p: int, e: int, limit: int) -> bool:
    """Whether every line in ``buf[p:e]`` (whole lines) is at most ``limit`` bytes long."""
    while p < e:
        nl = buf.rfind(b"\n", p, min(e, p + limit + 1))
        if nl < 0:
            return False
        p = nl + 1
    return True


__all__ = ["LINE_TRUNCATED", "candidate_starts", "group_lines"]
