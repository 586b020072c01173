"""Ruby's errors: ``app/models/order.rb:12:in 'save': message (NoMethodError)``, then one
``\tfrom path:line:in 'caller'`` per frame, innermost first (ruby's eval_error.c).

Ruby 3.3 and before quote the method as ``\\`save'``, 3.4 as ``'Order#save'``. An exception
raised while another was handled prints that cause after its own frames, headed by the same
kind of first line: a cause is deeper, so its frames come before those above it
(``starts_cause``). Rails and the Logger print backtrace lines alone, one a line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared.core.domain import Frame

language = "ruby"
innermost_last = False
TEXT_MARKS = (".rb:", ".rake:", ".erb:", ".haml:", ".slim:")  # else no Ruby frame

# The line patterns the tailer's grouping (producers/multiline.py) and the exception scanner
# (shared/intake/exceptions.py) read: a first line (message and class), and any frame line —
# "\tfrom …", or bare as the Logger prints a backtrace under its own line.
START = re.compile(r"^\S[^:\s]*\.rb:\d+:in [`'][^']*': .* \([A-Z][\w:]*\)$")
LINE = re.compile(r"^\s*(?:from )?\S+\.(?:rb|rake|erb|haml|slim):\d+:in [`']")
# "app/x.rb:3:in `save': undefined method 'name' for nil (NoMethodError)"
EXCEPTION = re.compile(r"^\S+:\d+:in [`'][^']*': (?P<msg>.*) \((?P<type>[A-Z][\w:]*)\)$")
# The Logger's default format with an exception (logger.rb Formatter#msg2str): its message and
# class on the record's line, its backtrace on the lines below.
# "E, [2026-12-03T10:00:00.123456 #42] ERROR -- app: could not parse (Shop::CheckoutError)"
LOGGER_EXCEPTION = re.compile(
    r"^[DIWEFA], \[[^\]]*\] +[A-Z]+ -- [^:]*: (?P<msg>.*) \((?P<type>[A-Z][\w:]*)\)$"
)

# What makes a line worth the tailer's grouper (producers/skim.py): a line starting with one of
# SKIM_HEADS, holding one of SKIM_WORDS as written or one of SKIM_FOLDED in any case.
SKIM_HEADS: tuple[bytes, ...] = ()
SKIM_WORDS = (rb".rb:",)
SKIM_FOLDED: tuple[bytes, ...] = ()

_FRAME = re.compile(
    r"^\s*(?:from )?(?P<file>[^\s:][^:]*\.(?:rb|rake|erb|haml|slim)):(?P<line>\d+)"
    r":in [`'](?P<func>[^`']*)'(?P<rest>: .*)?$"
)
# "block (2 levels) in save", "rescue in save", "ensure in save" -> save;
# 3.4's "Order#save", "Order.create", "block in Order#save" -> Order, save
_WRAPPED = re.compile(r"^(?:(?:block(?: \(\d+ levels\))?|rescue|ensure) in )+")
_OWNER = re.compile(r"^(?P<owner>[A-Z][\w:]*)[#.](?P<name>.+)$")


def starts_cause(line: str) -> bool:
    """A first line (with its message and class) after a trace's frames: a cause's."""
    m = _FRAME.match(line)
    return m is not None and bool(m["rest"]) and not line.lstrip().startswith("from ")


def frame(lines: Sequence[str], i: int) -> Frame | None:
    """The frame line ``i`` of ``lines`` names, if it is one of Ruby's."""
    m = _FRAME.match(lines[i].rstrip())
    if m is None:
        return None
    name = _WRAPPED.sub("", m["func"])
    owner = ""
    if o := _OWNER.match(name):
        owner, name = o["owner"], o["name"]
    return Frame(m["file"], int(m["line"]), name, module=owner, language=language)
