"""The JSON replies of the HTTP routes.

Starlette's ``JSONResponse`` encodes with ``ensure_ascii=False`` and refuses NaN: a reply that
echoes a string from the request (an envelope item's type, a rejected record's error) holding a
lone surrogate (JSON's ``"\\ud800"`` escape decodes to one), or a float the sender wrote as
``NaN``, would raise while rendering and become a 500. ``JSONReply`` writes non-ASCII as
``\\u`` escapes (a lone surrogate too) and NaN as Python's json writes it.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse


class JSONReply(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")
