"""Each language's trace grammar, one module each: the line patterns the tailer's grouping
(producers/multiline.py), its fast skim (producers/skim.py: ``SKIM_HEADS``, ``SKIM_WORDS``,
``SKIM_FOLDED``) and the exception scanner (shared/intake/exceptions.py) read, and the frame
line reader.

A module names its ``language``, whether it prints the innermost frame last
(``innermost_last``: Python) or first (the others), the substrings a text holds when it has
one of its frames (``TEXT_MARKS``; none: tried on every text), and reads one frame line:
``frame(lines, i) -> Frame | None``; a language that prints an exception's causes after it
(the JVM's ``Caused by:``, Ruby's cause) says where one starts: ``starts_cause(line)``.
Adding a language is one module here, listed in ``GRAMMARS``, and its tests. Only intake
parses (shared/intake/trace.py): later stages read the event's ``Trace``, and import-linter
keeps them out of this package.
"""

from __future__ import annotations

from shared.core.domain import Frame
from shared.intake.traces import dotnet, go, jvm, node, php, python, ruby, rust

# Tried in this order on every line; no two read the same line.
GRAMMARS = (python, jvm, node, go, rust, php, dotnet, ruby)


def skim_markers(kind: str) -> tuple[bytes, ...]:
    """Every language's skim markers of ``kind`` (``SKIM_HEADS``, ``SKIM_WORDS`` or
    ``SKIM_FOLDED``), each once, in the order of ``GRAMMARS``."""
    return tuple(dict.fromkeys(m for lang in GRAMMARS for m in getattr(lang, kind)))


def parse_frames(text: str) -> list[Frame]:
    """Frames of every trace in ``text``, nearest the raise first.

    Python prints the innermost frame last; the others print it first, and a Java
    ``Caused by:`` section (or Ruby's cause) is the deeper cause, so its frames come before
    those above it. PHP and .NET print the deeper exception first already.
    """
    # Only the grammars whose file marks the text holds read its lines (a substring test
    # per grammar instead of its patterns on every line).
    grammars = [g for g in GRAMMARS if not g.TEXT_MARKS or any(m in text for m in g.TEXT_MARKS)]
    causes = [g.starts_cause for g in grammars if hasattr(g, "starts_cause")]
    lines = text.replace("\r\n", "\n").split("\n")
    innermost_last: list[Frame] = []
    blocks: list[list[Frame]] = [[]]  # innermost-first languages, one block per cause
    for i, raw in enumerate(lines):
        if blocks[-1]:
            for starts in causes:
                if starts(raw):
                    blocks.append([])
                    break
        for grammar in grammars:
            found = grammar.frame(lines, i)
            if found is not None:
                (innermost_last if grammar.innermost_last else blocks[-1]).append(found)
                break
    ordered: list[Frame] = []
    for block in reversed(blocks):
        ordered.extend(block)
    ordered.extend(reversed(innermost_last))
    return ordered
