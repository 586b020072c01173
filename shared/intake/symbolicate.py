"""Minified JavaScript frames turned back into the original files, lines and names, at intake.

``at m (https://cdn.example.com/static/main.3f9a1c.js:1:48211)`` names nothing in the repo.
When the repo has a map for that bundle (shared/intake/sourcemap_store.py: found by `tracehound
index` beside the built bundles, or handed over with `tracehound sourcemaps add --release`),
intake rewrites the frame as Node's ``--enable-source-maps`` would print it, ``at applyDiscount
(src/pricing/discounts.js:10:45)``, before the trace is read: grouping, retrieval, the code
windows and the code history all see the original code, and a new build (new bundle hashes,
new columns) does not open new groups.

Which map: the event's own release's (Sentry SDKs send ``release``), else the tree's, else the
newest release that has a bundle of that name; within one, the bundle whose path shares the
most trailing components with the frame's file. A function's original name is the name the map
gives the call site in the calling frame (what Sentry and Node do); without one, a method keeps
its property name (minifiers keep those) and a renamed one- or two-letter binding is dropped.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from shared.core.domain import ErrorEvent, Trace
from shared.core.memo import TextMemo
from shared.intake import sourcemap_store
from shared.intake.sourcemap_store import TREE, Bundle

if TYPE_CHECKING:  # numpy comes with them: loaded only when a JavaScript frame needs a map
    from shared.intake.sourcemap import DecodedMap, Origin

log = logging.getLogger(__name__)

REFRESH_S = 5.0  # how stale a repo's list of bundles may be (a deploy's maps show up within it)
CACHE_BYTES = 256 * 1024 * 1024  # decoded maps kept in memory, by their segments' size
MAX_FRAME_LINES = 512  # frames looked up per event
CODE_MAX_CHARS = 500  # an original source line put back under Node's header, at most
TEXT_MAX_CHARS = 64_000  # a rewritten trace, at most (or the original's length, if longer)
# A V8 frame line with its column: "    at [async ][new ]fn (loc:12:34)" or "    at loc:12:34".
_FRAME = re.compile(
    r"^(?P<lead>\s*at (?:async )?)(?:(?P<new>new )?(?P<func>.+?) \()?"
    r"(?P<loc>[^()\s]+?):(?P<line>\d+):(?P<column>\d+)(?P<close>\)?)(?P<tail> \{)?\s*$"
)
# Node's header of an uncaught exception: the location, the source line, a caret under the
# column (lib/internal/process/execution.js, decorateErrorStack).
_HEADER = re.compile(r"^(?P<loc>(?:file://|/|[A-Za-z]:\\)\S*?\.[cm]?js):(?P<line>\d+)$")
_CARET = re.compile(r"^(?P<pad>\s*)\^+\s*$")
_SCHEME = re.compile(r"^[a-zA-Z][\w+.-]*://[^/]*")
_JS = (".js", ".mjs", ".cjs")


def file_parts(file: str) -> list[str]:
    """A frame's file as path components: scheme, host, query and fragment dropped."""
    path = _SCHEME.sub("", file.split("?", 1)[0].split("#", 1)[0].replace("\\", "/"))
    return [p for p in path.split("/") if p and p != "."]


@dataclass(frozen=True)
class _Catalog:
    version: int
    by_name: dict[str, list[Bundle]]
    checked: float


class MapCatalog:
    """A repo's bundles and their decoded maps as this process last read them from Redis:
    the list re-read when its version moved (checked at most every ``refresh_s``), maps kept
    by digest up to ``cache_bytes``."""

    def __init__(
        self,
        r: redis.Redis,
        *,
        refresh_s: float = REFRESH_S,
        cache_bytes: int = CACHE_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.r, self.refresh_s, self.cache_bytes, self.clock = r, refresh_s, cache_bytes, clock
        self._catalogs: dict[str, _Catalog] = {}
        self._maps: OrderedDict[tuple[str, str], DecodedMap] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def _catalog(self, repo: str) -> _Catalog:
        now = self.clock()
        known = self._catalogs.get(repo)
        if known is not None and now - known.checked < self.refresh_s:
            return known
        version = sourcemap_store.catalog_version(self.r, repo)
        if known is not None and known.version == version:
            known = _Catalog(version, known.by_name, now)
        else:
            by_name: dict[str, list[Bundle]] = {}
            for b in sourcemap_store.catalog(self.r, repo):
                by_name.setdefault(b.path.rsplit("/", 1)[-1], []).append(b)
            known = _Catalog(version, by_name, now)
        self._catalogs[repo] = known
        return known

    def version(self, repo: str) -> int:
        """The version of the repo's list of maps this process reads (moves on every change)."""
        return self._catalog(repo).version

    def bundle(self, repo: str, file: str, release: str) -> Bundle | None:
        """The stored bundle a frame's file names, by the rules in the module doc."""
        parts = file_parts(file)
        if not parts or not parts[-1].endswith(_JS):
            return None
        candidates = self._catalog(repo).by_name.get(parts[-1])
        if not candidates:
            return None

        def rank(b: Bundle) -> tuple[int, int, int]:
            ours = b.path.split("/")
            common = 0
            while common < min(len(ours), len(parts)) and ours[-1 - common] == parts[-1 - common]:
                common += 1
            kind = 2 if release and b.release == release else 1 if b.release == TREE else 0
            return kind, common, b.added_ms

        return max(candidates, key=rank)

    def decoded(self, repo: str, bundle: Bundle) -> DecodedMap | None:
        key = (repo, bundle.digest)
        with self._lock:
            if key in self._maps:
                self._maps.move_to_end(key)
                return self._maps[key]
        found = sourcemap_store.load_map(self.r, repo, bundle.digest)
        if found is None:
            return None
        with self._lock:
            self._maps[key] = found
            self._bytes += found.segments.nbytes
            while self._bytes > self.cache_bytes and len(self._maps) > 1:
                _, dropped = self._maps.popitem(last=False)
                self._bytes -= dropped.segments.nbytes
        return found


@dataclass(frozen=True)
class _Hit:
    bundle: Bundle
    decoded: DecodedMap
    origin: Origin
    line: int  # the generated position looked up
    column: int


def _function(minified: str, hit: _Hit, caller: _Hit | None) -> str:
    """A mapped frame's function: its minified name's original (a method's receiver too:
    ``n.charge`` -> ``PaymentGateway.charge``), else the name the caller's call site has, else
    a method's property name (minifiers keep those), else nothing (a renamed binding)."""
    decoded, line, column = hit.decoded, hit.line, hit.column
    owner, _, method = minified.rpartition(".")
    if owner:
        original = decoded.original_name(line, column, owner)
        return f"{original}.{method}" if original else method
    if minified and (original := decoded.original_name(line, column, minified)):
        return original
    if caller is not None and caller.bundle == hit.bundle and caller.origin.name:
        return caller.origin.name
    return minified if len(minified) > 2 else ""


def may_map(trace: Trace | None) -> bool:
    """Whether a source map may map one of the trace's frames: a JavaScript frame with a
    column (else ``symbolicate`` reads nothing and changes nothing)."""
    frames = (*trace.frames, *trace.sdk_frames) if trace is not None else ()
    return any(f.column is not None and f.language == "javascript" for f in frames)


class Symbolicator:
    """Rewrites an event's minified JavaScript frames through its repo's source maps."""

    def __init__(self, catalog: MapCatalog) -> None:
        self.catalog = catalog
        # A storm repeats one minified trace thousands of times: rewritten once per version
        # of the repo's maps.
        self._texts: TextMemo[str | None] = TextMemo(size=1024)

    def _origin(self, repo: str, release: str, file: str, line: int, column: int) -> _Hit | None:
        bundle = self.catalog.bundle(repo, file, release)
        if bundle is None:
            return None
        decoded = self.catalog.decoded(repo, bundle)
        origin = decoded.lookup(line, column) if decoded is not None else None
        if decoded is None or origin is None or not origin.source:
            return None
        return _Hit(bundle, decoded, origin, line, column)

    def symbolicate(self, event: ErrorEvent) -> ErrorEvent | None:
        """``event`` with its minified frames mapped (trace text and the SDK's frames), or None
        when none of them is a bundle the repo has a map for (or Redis cannot say)."""
        if not may_map(event.trace):
            return None  # the common case: no JavaScript frame with a column, nothing read
        release = event.attributes.get("release")
        release = release if isinstance(release, str) else ""
        try:
            text_field = "stacktrace" if event.stacktrace else "message"
            text = getattr(event, text_field)
            version = self.catalog.version(event.repo)
            new_text = self._texts.get(
                text, (event.repo, release, version), lambda: self._text(event.repo, release, text)
            )
            new_frames = self._sdk_frames(event.repo, release, event.attributes.get("frames"))
        except redis.RedisError as exc:
            log.warning("sourcemap.unavailable", extra={"repo": event.repo, "error": str(exc)})
            return None
        if new_text is None and new_frames is None:
            return None
        update: dict[str, Any] = {}
        if new_text is not None:
            update[text_field] = new_text
        if new_frames is not None:
            update["attributes"] = {**event.attributes, "frames": new_frames}
        return event.model_copy(update=update)

    def _text(self, repo: str, release: str, text: str) -> str | None:
        lines = text.split("\n")
        hits: dict[int, _Hit] = {}
        looked = 0
        for i, line in enumerate(lines):
            m = _FRAME.match(line)
            if m is None or looked >= MAX_FRAME_LINES:
                continue
            looked += 1
            hit = self._origin(repo, release, m["loc"], int(m["line"]), int(m["column"]))
            if hit is not None:
                hits[i] = hit
        header = self._header(repo, release, lines)
        if not hits and header is None:
            return None
        out: list[str] = []
        skip = 0
        for i, line in enumerate(lines):
            if skip:
                skip -= 1
                continue
            if header is not None and i == header[0]:
                # As Node prints it with --enable-source-maps: the original line, if the map
                # carries its source, in place of the minified one, and the caret under it.
                _, hit = header
                out.append(f"{hit.origin.source}:{hit.origin.line}")
                code = hit.decoded.source_line(hit.origin.source, hit.origin.line)
                if code is not None and len(code) <= CODE_MAX_CHARS:
                    out += [code, " " * (hit.origin.column - 1) + "^"]
                skip = 2
                continue
            hit = hits.get(i)
            m = _FRAME.match(line) if hit is not None else None
            if hit is None or m is None:
                out.append(line)
                continue
            name = _function(m["func"] or "", hit, hits.get(i + 1))
            where = f"{hit.origin.source}:{hit.origin.line}:{hit.origin.column}"
            new = m["new"] if name else ""
            tail = m["tail"] or ""
            out.append(
                f"{m['lead']}{new or ''}{name} ({where}){tail}"
                if name
                else f"{m['lead']}{where}{tail}"
            )
        # Original paths may be longer than the bundle's: bounded like any trace
        return "\n".join(out)[: max(len(text), TEXT_MAX_CHARS)]

    def _header(self, repo: str, release: str, lines: Sequence[str]) -> tuple[int, _Hit] | None:
        """Node's uncaught-exception header (location, source line, caret), mapped."""
        for i in range(min(len(lines) - 2, 8)):
            m = _HEADER.match(lines[i])
            caret = _CARET.match(lines[i + 2]) if m else None
            if m and caret:
                hit = self._origin(repo, release, m["loc"], int(m["line"]), len(caret["pad"]) + 1)
                return (i, hit) if hit is not None else None
        return None

    def _sdk_frames(self, repo: str, release: str, raw: Any) -> list[dict[str, Any]] | None:
        """An SDK's frames (attributes["frames"], nearest the raise first) mapped."""
        if not isinstance(raw, list) or not raw:
            return None
        hits: list[_Hit | None] = []
        for f in raw[:MAX_FRAME_LINES]:
            ok = isinstance(f, dict) and isinstance(f.get("file"), str)
            line, column = (f.get("line"), f.get("column")) if ok else (None, None)
            if ok and isinstance(line, int) and isinstance(column, int):
                hits.append(self._origin(repo, release, f["file"], line, column))
            else:
                hits.append(None)
        if not any(hits):
            return None
        out: list[dict[str, Any]] = []
        for i, f in enumerate(raw):
            hit = hits[i] if i < len(hits) else None
            if hit is None:
                out.append(f)
                continue
            caller = hits[i + 1] if i + 1 < len(hits) else None
            name = _function(str(f.get("function") or ""), hit, caller)
            out.append(
                {**f, "file": hit.origin.source, "line": hit.origin.line,
                 "column": hit.origin.column, "function": name}
            )  # fmt: skip
        return out
