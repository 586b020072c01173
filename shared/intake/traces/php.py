"""PHP's fatal errors: ``PHP Fatal error:  Uncaught …``, ``Stack trace:``, ``#0 …``, ``Next …``.

The line patterns the tailer's grouping (producers/multiline.py) and the exception scanner
(shared/intake/exceptions.py) read; its frames are not parsed yet.
"""

from __future__ import annotations

import re

language = "php"

START = re.compile(r"^(?:\[[^\]]*\] )?PHP Fatal error: ")
LINE = re.compile(r"^(?:Stack trace:$|#\d+ |Next \S)")
# PHP: "PHP Fatal error:  Uncaught App\Payment\DeclinedException: msg in /app/x.php:12", then
# for each exception that wrapped it "Next App\Orders\StorageException: msg in /app/y.php:19".
NEXT = re.compile(r"^Next (?P<type>[\w\\]+)(?:: (?P<msg>.*?))? in \S+:\d+$")
FATAL = re.compile(
    r"^(?:\[[^\]]*\] )?PHP Fatal error:\s+(?:Uncaught (?P<type>[\w\\]+)(?:: (?P<msg>.*?))?"
    r"|(?P<fatal>.*?))(?: in \S+(?::\d+| on line \d+))?$"
)
