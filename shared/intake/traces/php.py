"""PHP's fatal errors: ``PHP Fatal error:  Uncaught …``, ``Stack trace:``, ``#0 …``, ``Next …``.

The line patterns the tailer's grouping (producers/multiline.py) and the exception scanner
(shared/intake/exceptions.py) read; its frames are not parsed yet.
"""

from __future__ import annotations

import re

language = "php"

START = re.compile(r"^(?:\[[^\]]*\] )?PHP Fatal error: ")
LINE = re.compile(r"^(?:Stack trace:$|#\d+ |Next \S)")

# What makes a line worth the tailer's grouper (producers/skim.py): a line starting with one of
# SKIM_HEADS, holding one of SKIM_WORDS as written or one of SKIM_FOLDED in any case.
SKIM_HEADS = (rb"Stack trace:",)
SKIM_WORDS: tuple[bytes, ...] = ()
SKIM_FOLDED: tuple[bytes, ...] = ()
# PHP: "PHP Fatal error:  Uncaught App\Payment\DeclinedException: msg in /app/x.php:12", then
# for each exception that wrapped it "Next App\Orders\StorageException: msg in /app/y.php:19".
NEXT = re.compile(r"^Next (?P<type>[\w\\]+)(?:: (?P<msg>.*?))? in \S+:\d+$")
FATAL = re.compile(
    r"^(?:\[[^\]]*\] )?PHP Fatal error:\s+(?:Uncaught (?P<type>[\w\\]+)(?:: (?P<msg>.*?))?"
    r"|(?P<fatal>.*?))(?: in \S+(?::\d+| on line \d+))?$"
)
