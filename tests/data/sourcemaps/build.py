"""The source-map fixture: a small Node shop (app/src) bundled and minified by esbuild, thrown.

``ready()`` installs esbuild from npm (app/package-lock.json) into app/node_modules, once.
``bundle(work, name, *flags)`` bundles app/src into ``work/name/`` with content-hashed names
(``index.KPLLBV66.js`` and its map), as a release build would; ``throw(script, scenario)``
runs one of the shop's failing orders under Node and returns what Node printed on stderr.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.data.records.generate import npm_ready, tool

APP = Path(__file__).resolve().parent / "app"
SCENARIOS = ("discount", "stock", "payment", "parse", "cart")
# The file whose code each scenario's order fails in (what a fix would change).
FAILS_IN = {
    "discount": "src/pricing/discounts.js",
    "stock": "src/inventory/stock.js",
    "payment": "src/payments/gateway.js",
    "parse": "src/util/parse.js",
    "cart": "src/checkout/cart.js",
}


def ready() -> str | None:
    """None when node and esbuild can run, else why not."""
    if not tool("node"):
        return "node not on PATH (Debian: nodejs)"
    return npm_ready(APP, dict(os.environ), ["esbuild"])


def copy_app(work: Path) -> Path:
    """The app's sources (no node_modules, no build) under ``work``: what a checkout holds."""
    root = work / "shop"
    shutil.copytree(APP / "src", root / "src")
    shutil.copy(APP / "package.json", root / "package.json")
    return root


def bundle(root: Path, out: str, *flags: str) -> Path:
    """``root``/src bundled into ``root``/``out`` (minified, hashed names, a map beside each
    bundle unless ``flags`` say otherwise); the bundle's path."""
    esbuild = APP / "node_modules" / ".bin" / "esbuild"
    subprocess.run(
        [
            str(esbuild), "src/index.js", "--bundle", "--minify", "--platform=node",
            "--format=esm", f"--outdir={out}", "--entry-names=[name].[hash]", "--log-level=warning",
            *(flags or ("--sourcemap",)),
        ],
        cwd=root, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    [built] = (root / out).glob("index.*.js")
    return built


def throw(script: Path, scenario: str, *node_flags: str) -> str:
    """What Node prints when ``script`` places the scenario's failing order (uncaught)."""
    node = tool("node")
    assert node is not None
    done = subprocess.run(
        [node, *node_flags, str(script), scenario],
        cwd=script.parent, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0, f"{scenario} did not fail: {done.stdout}"
    return done.stderr
