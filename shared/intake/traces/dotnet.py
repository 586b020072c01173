""".NET's exceptions (C#, F#, VB): ``Exception.ToString()`` and Mono's report of one.

The type and message, `` ---> `` and each inner exception on the same line, then frames
innermost first: the inner exception's, ``--- End of inner exception stack trace ---``, the
outer's (so the print order is nearest the raise first). A frame has a place only when the
build shipped its symbols (a ``.pdb``): .NET prints
``   at Shop.Gateway.Charge(Int32 amount) in /src/Shop/Gateway.cs:line 42`` (runtime
src/libraries/System.Private.CoreLib/src/System/Diagnostics/StackTrace.cs), Mono
``  at Shop.Gateway.Charge (System.Int32 amount) [0x0000c] in /src/Shop/Gateway.cs:42`` (its
place is ``<filename unknown>:0`` or ``<mvid>:0`` without symbols: no frame then).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared.core.domain import Frame

language = "csharp"
innermost_last = False
TEXT_MARKS = (".cs:", ".fs:", ".vb:")  # a text without one has no .NET frame

# .NET prints the inner exception on the same line: "System.A: outer ---> System.B: inner".
INNER = re.compile(r" ---> (?=(?:[A-Za-z_][\w]*\.)+[A-Z]\w*(?:Exception|Error)\b)")
# What precedes an exception line's type: "Unhandled exception. System.X: y", " ---> System.X:
# y" (an inner exception), or an indent (the console logger indents the exception under its
# header) before a dotted type.
EXCEPTION_PREFIX = r"Unhandled [Ee]xception\.? |\s*---> |[ ]{2,}(?=[A-Za-z_$][\w$]*\.)"

# What makes a line worth the tailer's grouper (producers/skim.py): a line starting with one of
# SKIM_HEADS, holding one of SKIM_WORDS as written or one of SKIM_FOLDED in any case.
SKIM_HEADS = (rb"Unhandled",)
SKIM_WORDS: tuple[bytes, ...] = ()
SKIM_FOLDED: tuple[bytes, ...] = ()

_FRAME = re.compile(
    r"^\s*at (?P<qual>[^\s(][^(]*?) ?\([^()]*\)(?: \[0x[0-9a-f]+\])?"
    r" in (?P<file>[^<>\s][^<>]*?\.(?P<ext>cs|fs|vb)):(?:line )?(?P<line>\d+)\s*$"
)
_LANGUAGES = {"cs": "csharp", "fs": "fsharp", "vb": "vb"}
# Compiler-made names around the method a frame runs in: "<PlaceAsync>d__3.MoveNext" (an
# async state machine), "<>c.<Main>b__0_0" (a lambda in Main), "<Main>g__Local|0_0".
_GENERATED = re.compile(r"<(?P<name>\w+)>\w*(?:\|[\w]+)?(?:\.MoveNext)?$")
# Mono reports an unhandled exception twice: "Unhandled Exception:" and its trace, then the
# same again after "[ERROR] FATAL UNHANDLED EXCEPTION: " (Mono 6.8, tests/data/records): the
# tailer keeps both in one record, and the trace is read from the first.
MONO_REPEAT = re.compile(r"^\[ERROR\] FATAL UNHANDLED EXCEPTION: ", re.MULTILINE)


def unrepeated(text: str) -> str:
    """``text`` without Mono's second report of the same unhandled exception."""
    first = text.find("Unhandled Exception:")
    m = MONO_REPEAT.search(text, first) if first >= 0 else None
    return text[: m.start()] if m else text


def frame(lines: Sequence[str], i: int) -> Frame | None:
    """The frame line ``i`` of ``lines`` names, if it is one of .NET's with a place."""
    m = _FRAME.match(lines[i])
    if m is None:
        return None
    qual = m["qual"]
    generated = _GENERATED.search(qual)
    if generated:  # Ns.Type.<Method>d__3.MoveNext -> Ns.Type, Method
        owner = qual[: generated.start()].rstrip(".")
        owner = owner.removesuffix("+<>c").removesuffix(".<>c")
        module, function = owner, generated["name"]
    else:
        module, _, function = qual.rpartition(".")
    return Frame(m["file"], int(m["line"]), function, module=module, language=_LANGUAGES[m["ext"]])
