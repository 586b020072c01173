"""Each language's trace grammar, one module each: the line patterns the tailer's grouping
(producers/multiline.py), its fast skim (producers/skim.py: ``SKIM_HEADS``, ``SKIM_WORDS``,
``SKIM_FOLDED``) and the exception scanner (shared/intake/exceptions.py) read, and for the
languages whose frames are parsed (python, jvm, node, go; not yet rust, php, dotnet) the frame
line reader.

A frame module names its ``language``, whether it prints the innermost frame last
(``innermost_last``: Python) or first (the JVM, Node, Go), and reads one frame line:
``frame(lines, i) -> Frame | None``. Adding a language is one module here, listed in
``LANGUAGES`` (and in ``GRAMMARS`` when it has frames), and its tests. Only intake parses
(shared/intake/trace.py): later stages read the event's ``Trace``, and import-linter keeps them
out of this package.
"""

from __future__ import annotations

from shared.core.domain import Frame
from shared.intake.traces import dotnet, go, jvm, node, php, python, rust

GRAMMARS = (python, jvm, node, go)  # tried in this order on every line
LANGUAGES = (python, jvm, node, go, rust, php, dotnet)


def skim_markers(kind: str) -> tuple[bytes, ...]:
    """Every language's skim markers of ``kind`` (``SKIM_HEADS``, ``SKIM_WORDS`` or
    ``SKIM_FOLDED``), each once, in the order of ``LANGUAGES``."""
    return tuple(dict.fromkeys(m for lang in LANGUAGES for m in getattr(lang, kind)))


def parse_frames(text: str) -> list[Frame]:
    """Frames of every trace in ``text``, nearest the raise first.

    Python prints the innermost frame last; Java, Node and Go print it first, and a Java
    ``Caused by:`` section is the deeper cause, so its frames come before those above it.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    innermost_last: list[Frame] = []
    blocks: list[list[Frame]] = [[]]  # innermost-first languages, one block per "Caused by"
    for i, raw in enumerate(lines):
        if jvm.starts_cause(raw) and blocks[-1]:
            blocks.append([])
            continue
        for grammar in GRAMMARS:
            found = grammar.frame(lines, i)
            if found is not None:
                (innermost_last if grammar.innermost_last else blocks[-1]).append(found)
                break
    ordered: list[Frame] = []
    for block in reversed(blocks):
        ordered.extend(block)
    ordered.extend(reversed(innermost_last))
    return ordered
