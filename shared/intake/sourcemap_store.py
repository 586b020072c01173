"""A repo's source maps in Redis: which bundle each belongs to, per release, decoded once.

Two kinds of map reach it: the ones `tracehound index` finds beside the built bundles of the
repo's tree (release ""), replaced at every index run; and a release's, handed over by CI with
`tracehound sourcemaps add --release R DIR` (shared/index/bundles.py finds them in DIR). The
newest ``keep_releases`` releases are kept; a map shared by releases is stored once.

th:sourcemaps:{repo}        "<release>\\n<bundle path>" -> {"map": digest, "at": ms}; "~version"
th:sourcemaps:{repo}:blobs  digest -> the decoded map (DecodedMap.to_blob)
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import redis

from shared.core import keys

if TYPE_CHECKING:  # numpy comes with it: loaded only when a map is read or written
    from shared.intake.sourcemap import DecodedMap

log = logging.getLogger(__name__)

VERSION_FIELD = "~version"
KEEP_RELEASES = 50
TREE = ""  # the release of the maps found in the indexed tree


@dataclass(frozen=True)
class Bundle:
    """A generated file whose map is stored: its path (relative to the tree or the release's
    directory), the release it came with ("" for the tree's), its map's digest."""

    path: str
    release: str
    digest: str
    added_ms: int


def put_maps(
    r: redis.Redis,
    repo: str,
    release: str,
    maps: Mapping[str, DecodedMap],
    *,
    keep_releases: int = KEEP_RELEASES,
) -> int:
    """Store ``maps`` (bundle path -> its decoded map) as ``release``'s, replacing what that
    release had; older releases past ``keep_releases`` and maps no bundle uses any more are
    dropped. Returns how many bundles the release has now."""
    catalog_key, blobs_key = keys.sourcemaps(repo), keys.sourcemap_blobs(repo)
    # strictly after every release already stored: "newest" never rests on a tie of clocks
    now = max([int(time.time() * 1000), *(b.added_ms + 1 for b in catalog(r, repo))])
    blobs = {}
    fields = {}
    for path, decoded in maps.items():
        blob = decoded.to_blob()
        digest = hashlib.sha256(blob).hexdigest()[:32]
        blobs[digest] = blob
        fields[f"{release}\n{path}"] = json.dumps({"map": digest, "at": now})
    if blobs:  # maps first: a catalog entry never names a missing one
        r.hset(blobs_key, mapping=cast(Any, blobs))
    old = [f for f in _fields(r, catalog_key) if f.split("\n", 1)[0] == release]
    pipe = r.pipeline(transaction=True)
    stale = [f for f in old if f not in fields]
    if stale:
        pipe.hdel(catalog_key, *stale)
    if fields:
        pipe.hset(catalog_key, mapping=cast(Any, fields))
    pipe.hincrby(catalog_key, VERSION_FIELD, 1)
    pipe.execute()
    _prune(r, repo, keep_releases)
    return len(fields)


def _fields(r: redis.Redis, key: str) -> list[str]:
    return [f.decode() if isinstance(f, bytes) else f for f in r.hkeys(key) if f != VERSION_FIELD]


def _prune(r: redis.Redis, repo: str, keep_releases: int) -> None:
    """Releases past the newest ``keep_releases`` (the tree's always stays), then maps that no
    remaining bundle names."""
    bundles = catalog(r, repo)
    newest: dict[str, int] = {}
    for b in bundles:
        if b.release != TREE:
            newest[b.release] = max(newest.get(b.release, 0), b.added_ms)
    dropped = set(sorted(newest, key=lambda rel: newest[rel], reverse=True)[keep_releases:])
    catalog_key, blobs_key = keys.sourcemaps(repo), keys.sourcemap_blobs(repo)
    if dropped:
        pipe = r.pipeline(transaction=True)
        pipe.hdel(catalog_key, *(f"{b.release}\n{b.path}" for b in bundles if b.release in dropped))
        pipe.hincrby(catalog_key, VERSION_FIELD, 1)
        pipe.execute()
    used = {b.digest for b in bundles if b.release not in dropped}
    unused = [d for d in _fields(r, blobs_key) if d not in used]
    if unused:
        r.hdel(blobs_key, *unused)


def catalog(r: redis.Redis, repo: str) -> list[Bundle]:
    """Every bundle with a stored map, as the catalog holds them now."""
    found: list[Bundle] = []
    for raw_field, raw_value in r.hgetall(keys.sourcemaps(repo)).items():
        field = raw_field.decode() if isinstance(raw_field, bytes) else raw_field
        if field == VERSION_FIELD or "\n" not in field:
            continue
        release, path = field.split("\n", 1)
        try:
            value = json.loads(raw_value)
            found.append(Bundle(path, release, str(value["map"]), int(value["at"])))
        except (ValueError, KeyError, TypeError):
            continue  # a field no tracehound wrote: ignored, never fatal
    return found


def catalog_version(r: redis.Redis, repo: str) -> int:
    raw = r.hget(keys.sourcemaps(repo), VERSION_FIELD)
    return int(raw) if raw is not None else 0


def load_map(r: redis.Redis, repo: str, digest: str) -> DecodedMap | None:
    """A stored map, or None when it is gone or unreadable (said in the log)."""
    from shared.intake.sourcemap import DecodedMap, SourceMapError

    blob = r.hget(keys.sourcemap_blobs(repo), digest)
    if not isinstance(blob, bytes):
        return None
    try:
        return DecodedMap.from_blob(blob)
    except SourceMapError:
        log.warning("sourcemap.unreadable", extra={"repo": repo, "map": digest})
        return None
