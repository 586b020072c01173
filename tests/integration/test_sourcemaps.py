"""Minified JavaScript mapped back to the code: a shop bundled by the real esbuild, thrown in
Node, mapped through the maps tracehound found beside the bundles or was handed by CI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from shared.core import keys
from shared.core.domain import ErrorEvent
from shared.core.pipeline import sender_app
from shared.core.settings import Settings
from shared.devtools.eval import Case, SimulatorEmbedder, run_eval
from shared.groups.submit import Intake
from shared.index.bundles import find_maps
from shared.intake.events import parse_event
from shared.intake.sourcemap import parse_map
from shared.intake.sourcemap_store import catalog, put_maps
from shared.intake.symbolicate import MapCatalog, Symbolicator
from shared.intake.trace import with_trace
from shared.stack.localstack import LocalStack, tracehound_executable
from tests.data.sourcemaps import build

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Built:
    root: Path  # the checkout: src/, dist/ (build a, map beside), dist-b/ (build b)
    bundle_a: Path
    bundle_b: Path
    minified: dict[str, str]  # scenario -> what Node printed running build a
    minified_b: dict[str, str]
    original: dict[str, str]  # scenario -> what Node printed running src/ itself


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    why = build.ready()
    if why is not None:
        if os.environ.get("TRACEHOUND_REQUIRE_ALL_RECORDS"):
            pytest.fail(f"the source-map fixture cannot be built: {why}")
        pytest.skip(f"the source-map fixture cannot be built: {why}")
    root = build.copy_app(tmp_path_factory.mktemp("sourcemaps"))
    bundle_a = build.bundle(root, "dist")
    # A later build: other code in front moves every column and the hash in the name changes.
    bundle_b = build.bundle(
        root, "dist-b", "--sourcemap", "--banner:js=const buildInfo = { id: 'b', at: 2 };"
    )
    return Built(
        root,
        bundle_a,
        bundle_b,
        {s: build.throw(bundle_a, s) for s in build.SCENARIOS},
        {s: build.throw(bundle_b, s) for s in build.SCENARIOS},
        {s: build.throw(root / "src" / "index.js", s) for s in build.SCENARIOS},
    )


@pytest.fixture
def stored(built: Built, fresh_redis: redis.Redis) -> redis.Redis:
    """The checkout's maps stored as `tracehound index` stores them (release "": the tree)."""
    found = find_maps(built.root)
    assert not found.refused
    put_maps(fresh_redis, "shop", "", found.maps)
    return fresh_redis


def _app_frames(event: ErrorEvent, root: Path) -> list[tuple[str, int]]:
    """(repo path, line) of each frame in the app's own code, nearest the raise first."""
    assert event.trace is not None
    prefix = root.as_posix().lstrip("/") + "/"
    out = []
    for f in event.trace.frames:
        path = f.file.removeprefix("file://").lstrip("/").removeprefix(prefix)
        if path.startswith(("src/", "dist")) and f.line is not None:
            out.append((path, f.line))
    return out


def test_the_decoder_agrees_with_nodes_own_at_every_column(built: Built) -> None:
    """Node's module.SourceMap.findEntry (what --enable-source-maps uses) is the reference."""
    node = shutil.which("node")
    assert node is not None
    map_path = built.bundle_a.with_name(built.bundle_a.name + ".map")
    width = len(built.bundle_a.read_text().split("\n")[0]) + 5
    script = (
        "const {SourceMap}=require('node:module');"
        "const m=new SourceMap(JSON.parse(require('fs').readFileSync(process.argv[1],'utf8')));"
        "const out=[];for(let c=0;c<+process.argv[2];c++){const e=m.findEntry(0,c);"
        "out.push(e.originalSource===undefined?null:[e.originalSource,e.originalLine,"
        "e.originalColumn]);}console.log(JSON.stringify(out));"
    )
    done = subprocess.run(
        [node, "-e", script, str(map_path), str(width)], capture_output=True, text=True, check=True
    )
    theirs = json.loads(done.stdout)
    decoded = parse_map(map_path.read_bytes())
    ours = []
    for column in range(width):
        o = decoded.lookup(1, column + 1)
        ours.append(None if o is None else [o.source, o.line - 1, o.column - 1])
    # Node resolves sources to file:// URLs beside the map; ours are as the map writes them.
    theirs = [None if t is None else [t[0].rsplit("/src/", 1)[-1], t[1], t[2]] for t in theirs]
    ours = [None if o is None else [o[0].rsplit("src/", 1)[-1], o[1], o[2]] for o in ours]
    assert len(ours) == width > 1000
    assert ours == theirs


def test_minified_frames_land_on_the_original_file_and_line(
    built: Built, stored: redis.Redis
) -> None:
    symbolicator = Symbolicator(MapCatalog(stored))
    right = total = 0
    for scenario in build.SCENARIOS:
        minified = with_trace(
            ErrorEvent(service="shop", repo="shop", stacktrace=built.minified[scenario])
        )
        mapped = symbolicator.symbolicate(minified)
        assert mapped is not None, scenario
        got = _app_frames(with_trace(mapped), built.root)
        want = _app_frames(
            with_trace(
                ErrorEvent(service="shop", repo="shop", stacktrace=built.original[scenario])
            ),
            built.root,
        )
        assert len(_app_frames(minified, built.root)) == len(want) > 0  # one per original frame
        total += len(want)
        right += sum(g == w for g, w in zip(got, want, strict=False))
    assert total >= 25
    assert right / total >= 0.95, f"{right} of {total} frames mapped right"


def test_the_rewritten_trace_reads_like_nodes_own_mapped_one(
    built: Built, stored: redis.Redis
) -> None:
    event = with_trace(
        ErrorEvent(service="shop", repo="shop", stacktrace=built.minified["payment"])
    )
    mapped = Symbolicator(MapCatalog(stored)).symbolicate(event)
    assert mapped is not None
    lines = [ln.strip() for ln in mapped.stacktrace.splitlines()]
    assert lines[0] == "src/payments/gateway.js:18"  # the header, not the minified source line
    assert "at PaymentGateway.charge (src/payments/gateway.js:18:13)" in lines
    assert "at async placeOrder (src/checkout/checkout.js:17:19)" in lines
    assert "at PaymentGateway.authorize (src/payments/gateway.js:25:13)" in lines
    assert not any("index." in ln and ".js:1:" in ln for ln in lines)  # no minified frame left
    assert "PaymentDeclined: charge of 99999 cents declined" in lines


@pytest.fixture
def intake(fresh_redis: redis.Redis, private_redis_url: str) -> Iterator[Intake]:
    settings = Settings(redis_url=private_redis_url, incident_settle=0)
    app = sender_app(settings)
    yield Intake(app, fresh_redis, settings)
    app.close()


def test_two_builds_of_the_same_bug_are_one_group(
    built: Built, stored: redis.Redis, intake: Intake
) -> None:
    """A new build renames the bundle and moves every column: without maps each deploy would
    open a new group for the same bug."""
    texts = [
        (s, text) for s in build.SCENARIOS for text in (built.minified[s], built.minified_b[s])
    ]
    unmapped = intake.submit_many(
        [parse_event(text, service="unmapped", repo="none") for _, text in texts]
    )
    assert len({u.fingerprint for u in unmapped}) == 2 * len(build.SCENARIOS)  # what maps fix
    submitted = intake.submit_many(
        [parse_event(text, service="shop", repo="shop") for _, text in texts]
    )
    groups: dict[str, set[str]] = {}
    for (scenario, _), sub in zip(texts, submitted, strict=True):
        groups.setdefault(scenario, set()).add(sub.fingerprint)
    assert all(len(fps) == 1 for fps in groups.values()), groups
    assert len({next(iter(fps)) for fps in groups.values()}) == len(build.SCENARIOS)


def test_the_fix_file_ranks_the_same_for_the_minified_and_the_original_trace(
    built: Built, stored: redis.Redis, tmp_path: Path
) -> None:
    symbolicator = Symbolicator(MapCatalog(stored))
    cases = []
    for scenario in build.SCENARIOS:
        event = with_trace(
            ErrorEvent(service="shop", repo="shop", stacktrace=built.minified[scenario])
        )
        mapped = symbolicator.symbolicate(event)
        assert mapped is not None
        gold = (build.FAILS_IN[scenario],)
        cases.append(Case(f"{scenario}-minified", "shop", mapped.stacktrace, gold))
        cases.append(Case(f"{scenario}-raw", "shop", built.minified[scenario], gold))
        cases.append(Case(f"{scenario}-original", "shop", built.original[scenario], gold))
    report = run_eval(cases, built.root.parent, embedder=SimulatorEmbedder(), modes=["all"])
    rank = {}
    for row in report.cases:
        files = row["modes"]["all"]["files"]
        rank[row["id"]] = files.index(row["gold"][0]) + 1 if row["gold"][0] in files else 99
    for scenario in build.SCENARIOS:
        assert rank[f"{scenario}-minified"] == rank[f"{scenario}-original"], (scenario, rank)
        assert rank[f"{scenario}-original"] <= 2, rank  # in the message's first files
    # without the maps the minified trace names no file of the repo: the fix file ranks worse
    assert sum(rank[f"{s}-raw"] for s in build.SCENARIOS) > len(build.SCENARIOS), rank


def test_a_releases_maps_handed_over_by_ci_map_a_deployed_bundle(
    built: Built, fresh_redis: redis.Redis, private_redis_url: str, tmp_path: Path
) -> None:
    """CI hands over its build output per release (the maps are not deployed with the app);
    the service runs the bundle from its own path, and the SDK's event names the release."""
    maps_dir = tmp_path / "release-maps" / "dist"
    maps_dir.mkdir(parents=True)
    shutil.copy(built.bundle_a.with_name(built.bundle_a.name + ".map"), maps_dir)
    shutil.copy(built.bundle_a, maps_dir)
    env = {**os.environ, "TRACEHOUND_REDIS_URL": private_redis_url}
    cli = tracehound_executable()
    added = subprocess.run(
        [cli, "sourcemaps", "add", str(maps_dir), "--repo", "shop", "--release", "2.0.0"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "1 bundles of release '2.0.0'" in added.stdout
    listed = subprocess.run(
        [cli, "sourcemaps", "list", "--repo", "shop"], env=env, capture_output=True, text=True
    )
    assert listed.stdout.startswith("2.0.0  1 bundles  added ")

    deployed = built.minified["stock"].replace(
        built.bundle_a.parent.as_uri(), "file:///srv/shop/current/dist"
    )
    event = parse_event(deployed, service="shop", repo="shop")
    event = with_trace(event.model_copy(update={"attributes": {"release": "2.0.0"}}))
    mapped = Symbolicator(MapCatalog(fresh_redis)).symbolicate(event)
    assert mapped is not None
    frames = with_trace(mapped).trace
    assert frames is not None
    assert (frames.frames[0].file, frames.frames[0].line) == ("src/inventory/stock.js", 10)
    assert frames.frames[0].function == "Stock.reserve"

    empty = tmp_path / "nothing"
    empty.mkdir()
    refused = subprocess.run(
        [cli, "sourcemaps", "add", str(empty), "--repo", "shop", "--release", "2.0.1"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 1 and "no usable source map" in refused.stderr


def test_an_inline_map_in_the_bundle_is_found_too(built: Built, tmp_path: Path) -> None:
    root = build.copy_app(tmp_path)
    bundle = build.bundle(root, "public", "--sourcemap=inline")
    assert not list(bundle.parent.glob("*.map"))
    found = find_maps(root)
    origin = found.maps[f"public/{bundle.name}"].lookup(1, 1)
    assert origin is not None and origin.source.startswith("src/")


def test_index_maps_a_minified_trace_into_the_message_end_to_end(
    built: Built, stack: LocalStack
) -> None:
    """`tracehound index` of a checkout with its build output, then a minified trace: the
    message names the original file."""
    env = {**os.environ, **stack.env}
    cli = tracehound_executable()
    indexed = subprocess.run(
        [cli, "index", str(built.root), "--repo", "shop-js"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert indexed.returncode == 0, indexed.stderr
    assert "source maps: 2 bundles of the tree mapped for 'shop-js'" in indexed.stdout
    done = subprocess.run(
        [cli, "analyze", "-", "--service", "shop-js", "--repo", "shop-js", "--wait"],
        input=built.minified["discount"], env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "src/pricing/discounts.js" in done.stdout


def test_only_the_newest_releases_are_kept_and_their_maps_with_them(
    fresh_redis: redis.Redis,
) -> None:
    small = {"version": 3, "sources": ["src/a.js"], "names": [], "mappings": "AAAA"}
    for n in range(4):
        decoded = parse_map(json.dumps({**small, "sources": [f"src/a{n}.js"]}).encode())
        put_maps(fresh_redis, "shop", f"1.{n}", {"dist/a.js": decoded}, keep_releases=2)
    assert {b.release for b in catalog(fresh_redis, "shop")} == {"1.2", "1.3"}
    assert fresh_redis.hlen(keys.sourcemap_blobs("shop")) == 2  # the dropped releases' maps too
    event = with_trace(
        ErrorEvent(
            service="shop", repo="shop", stacktrace="Error: x\n    at f (/app/dist/a.js:1:1)"
        )
    )
    mapped = Symbolicator(MapCatalog(fresh_redis)).symbolicate(event)
    assert mapped is not None and "src/a3.js:1:1" in mapped.stacktrace  # the newest release's


def test_a_map_with_huge_paths_cannot_grow_a_trace_past_its_bound(
    fresh_redis: redis.Redis,
) -> None:
    long_path = "src/" + "d/" * 490 + "a.js"  # about 1,000 characters, a map's longest source
    small = {"version": 3, "sources": [long_path], "names": [], "mappings": "AAAA"}
    put_maps(fresh_redis, "shop", "", {"dist/a.js": parse_map(json.dumps(small).encode())})
    frames = "\n".join(f"    at f{i} (/app/dist/a.js:1:1)" for i in range(500))
    event = with_trace(ErrorEvent(service="shop", repo="shop", stacktrace=f"Error: x\n{frames}"))
    mapped = Symbolicator(MapCatalog(fresh_redis)).symbolicate(event)
    assert mapped is not None and long_path in mapped.stacktrace
    assert len(mapped.stacktrace) <= 64_000 < 500 * len(long_path)


def test_maps_stored_after_a_trace_was_seen_map_its_next_occurrence(
    built: Built, fresh_redis: redis.Redis
) -> None:
    """A deploy's maps arrive after its first errors: the next occurrence of the same trace is
    mapped, not the unmapped rewrite remembered for a storm."""
    symbolicator = Symbolicator(MapCatalog(fresh_redis, refresh_s=0))
    event = with_trace(ErrorEvent(service="shop", repo="shop", stacktrace=built.minified["cart"]))
    assert symbolicator.symbolicate(event) is None
    put_maps(fresh_redis, "shop", "", find_maps(built.root).maps)
    mapped = symbolicator.symbolicate(event)
    assert mapped is not None and "at new Cart (src/checkout/cart.js:6:15)" in mapped.stacktrace


def test_maps_stored_mid_storm_map_the_storms_next_events_at_intake(
    built: Built, fresh_redis: redis.Redis, intake: Intake
) -> None:
    """Intake prepares a storm's events once per shape (shared/groups/submit.py); a trace a
    map may change is not one of them, so the storm's events after the deploy's maps arrive
    are mapped."""
    intake.symbolicator = Symbolicator(MapCatalog(fresh_redis, refresh_s=0))

    def occurrence(i: int) -> ErrorEvent:
        return ErrorEvent(
            id=f"cart-{i}", service="shop", repo="shop", stacktrace=built.minified["cart"]
        )

    before = intake.submit_many([occurrence(i) for i in range(3)])
    put_maps(fresh_redis, "shop", "", find_maps(built.root).maps)
    after = intake.submit_many([occurrence(i) for i in range(3, 6)])
    assert len({s.fingerprint for s in before}) == len({s.fingerprint for s in after}) == 1
    assert before[0].fingerprint != after[0].fingerprint  # the mapped frames group it now
