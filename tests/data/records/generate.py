"""Generate a corpus of real error records, written by real logging libraries and runtimes.

Each program beside this file (python/, java/, node/, rust/, go/, php/, ruby/, dotnet/) runs one
logging library or runtime through a few situations and prints, before each record, a separator
line
``=== tracehound-record <source>--<case> ===`` on the stream the record goes to. This module
runs every program whose tool is available, splits the output on those lines (dropping them)
and writes one file per record, byte for byte as the library wrote it:
``<source>--<case>.log`` (text) or ``<source>--<case>.json`` (one JSON line), plus
``manifest.json`` with the ground truth of every record. The ``samples/*.sample`` files (.NET
(Core) and ASP.NET Core: no runtime here) are hand-written and copied in as they are, marked
``generated: false``.

    from tests.data.records.generate import generate
    corpus = generate(tmp_path)          # Corpus(dir, records, skipped, versions)

    python tests/data/records/generate.py OUTDIR

A source whose tool is missing (no ``go`` on PATH, no logback jars, npm packages that could not
be installed, ...) is listed in ``Corpus.skipped`` with the reason, never dropped silently. A
program that runs but does not print the records declared here raises ``GenerateError``.

Compiled classes and binaries go to a cache directory: ``$TRACEHOUND_RECORDS_CACHE`` if set,
else ``OUTDIR/.build``. npm packages are installed (``npm ci``) into ``node/node_modules``.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SEPARATOR = re.compile(rb"^=== tracehound-record (?P<stem>[a-z0-9-]+--[a-z0-9-]+) ===\n", re.M)
JAVA_JARS = Path("/usr/share/java")
LOGBACK_JARS = ["slf4j-api.jar", "logback-classic.jar", "logback-core.jar"]
LOG4J2_JARS = ["log4j-api.jar", "log4j-core.jar"]
NPM_PACKAGES = ["pino", "winston"]
# Variables of the calling environment that would change what the programs print.
SCRUBBED_ENV = [
    "RUST_BACKTRACE", "RUST_LIB_BACKTRACE", "GOTRACEBACK", "GOFLAGS", "GODEBUG",
    "NODE_OPTIONS", "FORCE_COLOR", "NO_COLOR", "NODE_DISABLE_COLORS",
    "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH",
    "PYTHONSTARTUP", "PYTHONWARNINGS", "PYTHONPATH", "PYTHONDEVMODE", "PYTHONASYNCIODEBUG",
]  # fmt: skip


class GenerateError(RuntimeError):
    """A program ran but its output is not the records this module declares for it."""


@dataclass
class Corpus:
    dir: Path
    records: list[dict[str, Any]]
    skipped: dict[str, str]
    versions: dict[str, str] = field(default_factory=dict)


# ----------------------------------------------------------------------------- ground truth
# What a person reading each record would state. Conventions (see README.md):
# - exception_type: as printed; for a chain, the exception that propagated (Python: the last
#   one printed; Java/.NET: the outermost, first line; PHP: the last "Next"); root_cause_type is
#   then the innermost one. Rust and Go panics: "panic".
# - message: the exception's message as printed (None when it has none), or the log message
#   when the record carries no exception; log_message: the log call's own message beside an
#   exception.
# - level: the level's name as the library names it (pino 50 -> ERROR, 60 -> FATAL); a record
#   with no printed level (an uncaught exception or panic reported by the runtime) gets FATAL
#   when it ends the process, ERROR otherwise, and level_printed false.


def rec(
    fmt: str,
    level: str,
    exception_type: str | None = None,
    message: str | None = None,
    *,
    root_cause_type: str | None = None,
    log_message: str | None = None,
    level_printed: bool = True,
    is_error: bool | None = None,
) -> dict[str, Any]:
    if is_error is None:
        is_error = exception_type is not None or level in {"ERROR", "SEVERE", "CRITICAL", "FATAL"}
    return {
        "format": fmt,
        "is_error": is_error,
        "level": level,
        "level_printed": level_printed,
        "exception_type": exception_type,
        "root_cause_type": root_cause_type,
        "message": message,
        "log_message": log_message,
    }


CONNECT_TIMEOUT = (
    "HTTPSConnectionPool(host='api.stripe.com', port=443): Max retries exceeded with url: "
    "/v1/charges (Caused by ConnectTimeoutError(<urllib3.connection.HTTPSConnection object at "
    "0x7f3a2c1e9d50>, 'Connection to api.stripe.com timed out. (connect timeout=5)'))"
)
NPE_MAP_GET = (
    'Cannot invoke "java.lang.Integer.intValue()" because the return value of '
    '"java.util.Map.get(Object)" is null'
)
LOGURU_EXC = ("ZeroDivisionError", "division by zero")
LOGURU_LOG = "could not compute the basket average"

TRUTH: dict[str, dict[str, Any]] = {
    # Python stdlib logging (python/python_logging.py)
    "python-logging--info": rec("text", "INFO", message="started"),
    "python-logging--exception": rec(
        "text", "ERROR", "requests.exceptions.ConnectTimeout", CONNECT_TIMEOUT,
        log_message="charge request failed for order 42",
    ),
    "python-logging--chained": rec(
        "text", "ERROR", "shop.payments.PaymentError", "cannot settle order 42: bad amount",
        root_cause_type="ValueError", log_message="settlement failed",
    ),
    "python-logging--during-handling": rec(
        "text", "ERROR", "TypeError", "'NoneType' object is not subscriptable",
        root_cause_type="KeyError", log_message="could not resolve customer",
    ),
    "python-logging--error-no-trace": rec("text", "ERROR", message="payment failed for order 42"),
    # The interpreter's own report of an uncaught exception (python/python_uncaught.py)
    "python--uncaught": rec("text", "FATAL", "KeyError", "'sku-123'", level_printed=False),
    # structlog (python/structlog_json.py)
    "structlog--info": rec("json", "INFO", message="ok"),
    "structlog--exception": rec(
        "json", "ERROR", "ValueError", "invalid literal for int() with base 10: '12.50'",
        log_message="charge failed",
    ),
    "structlog--error-no-trace": rec("json", "ERROR", message="quota exceeded"),
    # python-json-logger (python/python_json_logger.py)
    "python-json-logger--info": rec("json", "INFO", message="inventory sync started"),
    "python-json-logger--exception": rec(
        "json", "ERROR", "ConnectionRefusedError", "[Errno 111] Connection refused",
        log_message="inventory sync failed",
    ),
    "python-json-logger--error-no-trace": rec(
        "json", "ERROR", message="stock below zero for sku-002"
    ),
    # loguru (python/loguru_records.py)
    "loguru--info": rec("text", "INFO", message="worker started"),
    "loguru--exception": rec("text", "ERROR", *LOGURU_EXC, log_message=LOGURU_LOG),
    "loguru--exception-plain": rec("text", "ERROR", *LOGURU_EXC, log_message=LOGURU_LOG),
    "loguru--error-no-trace": rec("text", "ERROR", message="quota exceeded for user 7"),
    "loguru--json-info": rec("json", "INFO", message="worker started"),
    "loguru--json-exception": rec("json", "ERROR", *LOGURU_EXC, log_message=LOGURU_LOG),
    "loguru--json-error-no-trace": rec("json", "ERROR", message="quota exceeded for user 7"),
    # java.util.logging, SimpleFormatter (java/JulRecords.java)
    "java-jul--info": rec("text", "INFO", message="order service started"),
    "java-jul--severe-with-cause": rec(
        "text", "SEVERE", "java.lang.IllegalStateException",
        "could not parse quantity for order 42",
        root_cause_type="java.lang.NumberFormatException", log_message="order placement failed",
    ),
    "java-jul--warning": rec("text", "WARNING", message="stock for sku-002 is low"),
    # logback (java/LogbackRecords.java, java/logback.xml)
    "logback--info": rec("text", "INFO", message="payment service started"),
    "logback--error-with-cause": rec(
        "text", "ERROR", "java.lang.IllegalStateException", "payment failed for order 42",
        root_cause_type="java.net.SocketTimeoutException",
        log_message="charge failed for order 42",
    ),
    "logback--warn": rec("text", "WARN", message="retrying charge for order 42 in 500 ms"),
    # Log4j 2 (java/Log4j2Records.java, java/log4j2.xml)
    "log4j2--info": rec("text", "INFO", message="inventory service started"),
    "log4j2--error-with-cause": rec(
        "text", "ERROR", "java.lang.IllegalStateException", "payment failed for order 43",
        root_cause_type="java.net.SocketTimeoutException",
        log_message="charge failed for order 43",
    ),
    "log4j2--error-extended": rec(
        "text", "ERROR", "java.lang.NullPointerException", NPE_MAP_GET,
        log_message="stock report failed",
    ),
    "log4j2--warn": rec("text", "WARN", message="stock for sku-002 is low: 1"),
    # The JVM's default uncaught-exception handler (java/RecordsMain.java)
    "jvm--uncaught-thread": rec(
        "text", "ERROR", "java.lang.NullPointerException", NPE_MAP_GET, level_printed=False
    ),
    "jvm--uncaught-main": rec(
        "text", "FATAL", "java.lang.ArrayIndexOutOfBoundsException",
        "Index 3 out of bounds for length 3", level_printed=False,
    ),
    # Node.js itself (node/console_error.js, node/uncaught.js)
    "node--console-error-cause": rec(
        "text", "ERROR", "Error", "could not load order 42", root_cause_type="TypeError",
        level_printed=False,
    ),
    "node--uncaught": rec(
        "text", "FATAL", "TypeError", "Cannot read properties of undefined (reading 'amount')",
        level_printed=False,
    ),
    # pino (node/pino_records.js). pino's err serializer appends the causes' messages to
    # err.message ("...: unknown sku sku-404"); the ground truth is that field as printed.
    "pino--info": rec("json", "INFO", message="checkout service started"),
    "pino--error-with-cause": rec(
        "json", "ERROR", "Error", "checkout failed for order 42: unknown sku sku-404",
        root_cause_type="RangeError", log_message="checkout failed",
    ),
    "pino--error-no-trace": rec("json", "ERROR", message="payment declined"),
    "pino--fatal": rec(
        "json", "FATAL", "Error", "connect ECONNREFUSED 127.0.0.1:5672",
        log_message="cannot reach the order queue, exiting",
    ),
    # winston (node/winston_records.js)
    "winston--info": rec("json", "INFO", message="payments service started"),
    "winston--error-stack": rec(
        "json", "ERROR", "TypeError", "Cannot read properties of null (reading 'amount')"
    ),
    "winston--error-no-trace": rec("json", "ERROR", message="refund rejected for order 42"),
    "winston--warn": rec("json", "WARN", message="gateway latency high"),
    # Rust panics (rust/src/panic.rs)
    "rust--panic": rec(
        "text", "FATAL", "panic", "quantity must be a number: ParseIntError { kind: InvalidDigit }",
        level_printed=False,
    ),
    "rust--panic-backtrace": rec(
        "text", "FATAL", "panic", "quantity must be a number: ParseIntError { kind: InvalidDigit }",
        level_printed=False,
    ),
    "rust--index-out-of-bounds": rec(
        "text", "FATAL", "panic", "index out of bounds: the len is 3 but the index is 7",
        level_printed=False,
    ),
    # Go runtime panics under `go run` (go/panic.go)
    "go--nil-map": rec(
        "text", "FATAL", "panic", "assignment to entry in nil map", level_printed=False
    ),
    "go--index-out-of-range": rec(
        "text", "FATAL", "panic", "runtime error: index out of range [5] with length 3",
        level_printed=False,
    ),
    # PHP's CLI logging to stderr (php/records.php)
    "php--uncaught-exception": rec(
        "text", "FATAL", "App\\Orders\\OrderNotFoundException", "Order 42 not found"
    ),
    "php--uncaught-chained": rec(
        "text", "FATAL", "App\\Orders\\StorageException", "could not load order 42",
        root_cause_type="UnexpectedValueException",
    ),
    "php--warning": rec("text", "WARNING", message='Undefined array key "coupon"'),
    # Ruby's report of an uncaught exception, and its Logger (ruby/records.rb)
    "ruby--uncaught-nil": rec(
        "text", "FATAL", "NoMethodError", "undefined method `lines' for nil:NilClass",
        level_printed=False,
    ),
    "ruby--uncaught-cause": rec(
        "text", "FATAL", "Shop::CheckoutError", 'could not parse quantity "4x2"',
        root_cause_type="ArgumentError", level_printed=False,
    ),
    "ruby--logger-error": rec(
        "text", "ERROR", "Shop::CheckoutError", 'could not parse quantity "4x2"'
    ),
    "ruby--logger-info": rec("text", "INFO", message="checkout service started"),
    # Mono's report of an unhandled exception, and an exception's ToString() written to
    # stderr (dotnet/Records.cs)
    "mono--unhandled-inner": rec(
        "text", "FATAL", "System.InvalidOperationException", "Order 42 could not be placed.",
        root_cause_type="System.NullReferenceException", level_printed=False,
    ),
    "mono--logged": rec(
        "text", "ERROR", "System.InvalidOperationException", "Order 43 could not be placed.",
        root_cause_type="System.NullReferenceException", level_printed=False,
    ),
    # Hand-written samples (samples/*.sample): no .NET (Core) runtime here.
    "dotnet--unhandled-inner": rec(
        "text", "FATAL", "System.InvalidOperationException", "Order 42 could not be placed.",
        root_cause_type="System.NullReferenceException", level_printed=False,
    ),
    "aspnetcore--unhandled-request": rec(
        "text", "ERROR", "System.InvalidOperationException", "Sequence contains no elements",
        log_message="An unhandled exception has occurred while executing the request.",
    ),
}  # fmt: skip


def source_of(stem: str) -> str:
    return stem.split("--", 1)[0]


def stems_of(*sources: str) -> list[str]:
    return [stem for stem in TRUTH if source_of(stem) in sources]


# ----------------------------------------------------------------------------- running


@dataclass
class Context:
    cache: Path
    env: dict[str, str]
    versions: dict[str, str]
    skipped: dict[str, str]


@dataclass
class Output:
    """What one program run printed: the stream carrying the records, and the other one."""

    records: bytes
    other: bytes


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    env = {k: v for k, v in env.items() if not k.startswith("LOGURU_")}
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONIOENCODING="utf-8", GOTOOLCHAIN="local")
    return env


def run(
    cmd: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    stream: str,
    returncode: int = 0,
    timeout: float = 120,
) -> Output:
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout
    )
    records, other = (
        (proc.stdout, proc.stderr) if stream == "stdout" else (proc.stderr, proc.stdout)
    )
    if proc.returncode != returncode:
        raise GenerateError(
            f"{' '.join(cmd)} exited {proc.returncode}, expected {returncode}\n"
            f"stdout:\n{proc.stdout.decode(errors='replace')}\n"
            f"stderr:\n{proc.stderr.decode(errors='replace')}"
        )
    return Output(records, other)


def split(output: bytes, what: str) -> dict[str, bytes]:
    """Cut a program's output at the separator lines (dropped) into {stem: record bytes}."""
    marks = list(SEPARATOR.finditer(output))
    if not marks:
        raise GenerateError(f"{what}: no separator line in its output:\n{output!r}")
    if marks[0].start() != 0:
        raise GenerateError(
            f"{what}: output before the first record: {output[: marks[0].start()]!r}"
        )
    records: dict[str, bytes] = {}
    for mark, after in zip(marks, [*marks[1:], None], strict=True):
        stem = mark["stem"].decode()
        if stem in records:
            raise GenerateError(f"{what}: record {stem} printed twice")
        records[stem] = output[mark.end() : after.start() if after else len(output)]
    return records


def expect(records: dict[str, bytes], stems: list[str], what: str) -> dict[str, bytes]:
    if sorted(records) != sorted(stems):
        raise GenerateError(f"{what}: printed records {sorted(records)}, expected {sorted(stems)}")
    return records


def only(output: Output, what: str) -> bytes:
    """The record stream, after checking that the other stream stayed empty."""
    if output.other.strip():
        raise GenerateError(f"{what}: unexpected output on its other stream: {output.other!r}")
    return output.records


def run_cases(
    command: list[str], cases: list[tuple[str, str, int]], *, cwd: Path, env: dict[str, str]
) -> dict[str, bytes]:
    """``command STEM CASE`` once per (stem, case, exit code), its records on stderr and
    nothing on stdout."""
    out: dict[str, bytes] = {}
    for stem, case, returncode in cases:
        output = run(
            [*command, stem, case], cwd=cwd, env=env, stream="stderr", returncode=returncode
        )
        out |= split(only(output, stem), stem)
    return out


def tool(name: str, *fallbacks: Path) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for path in fallbacks:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def publish(tmp: Path, final: Path) -> None:
    """Move a freshly built directory into place (another generate may have raced us)."""
    try:
        tmp.rename(final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not final.exists():
            raise


# ----------------------------------------------------------------------------- programs
Program = Callable[[Context], dict[str, bytes]]


def python_programs(ctx: Context) -> dict[str, bytes]:
    py = [sys.executable]
    ctx.versions["python"] = platform.python_version()
    out: dict[str, bytes] = {}
    jobs: list[tuple[str, str, str, int, str | None]] = [
        # (script, stream, source(s), returncode, required module)
        ("python_logging.py", "stderr", "python-logging", 0, None),
        ("python_uncaught.py", "stderr", "python", 1, None),
        ("structlog_json.py", "stdout", "structlog", 0, "structlog"),
        ("python_json_logger.py", "stderr", "python-json-logger", 0, "pythonjsonlogger"),
        ("loguru_records.py", "stderr", "loguru", 0, "loguru"),
    ]
    for script, stream, source, returncode, module in jobs:
        if module and importlib.util.find_spec(module) is None:
            ctx.skipped[source] = f"Python package {source} is not installed in {sys.executable}"
            continue
        if module:
            ctx.versions[source] = importlib.metadata.version(source)
        what = f"python/{script}"
        output = run(
            [*py, script], cwd=HERE / "python", env=ctx.env, stream=stream, returncode=returncode
        )
        out |= expect(split(only(output, what), what), stems_of(source), what)
    return out


def java_programs(ctx: Context) -> dict[str, bytes]:
    sources = ["java-jul", "jvm", "logback", "log4j2"]
    javac, java = tool("javac"), tool("java")
    if not javac or not java:
        for source in sources:
            ctx.skipped[source] = "no JDK: javac/java not on PATH (Debian: openjdk-17-jdk-headless)"
        return {}
    src = HERE / "java"
    files = sorted(src.glob("*.java"))
    jars: list[Path] = []
    programs = ["jul"]
    for source, needed in [("logback", LOGBACK_JARS), ("log4j2", LOG4J2_JARS)]:
        missing = [jar for jar in needed if not (JAVA_JARS / jar).is_file()]
        if missing:
            apt = "liblogback-java libslf4j-java" if source == "logback" else "liblog4j2-java"
            ctx.skipped[source] = (
                f"{', '.join(missing)} not in {JAVA_JARS} (Debian: apt-get install {apt})"
            )
            files = [f for f in files if f.name != f"{source.capitalize()}Records.java"]
        else:
            jars += [JAVA_JARS / jar for jar in needed]
            programs.append(source)
            ctx.versions[source] = version_from_jar(JAVA_JARS / needed[1])  # -classic, -core
            if source == "logback":
                ctx.versions["slf4j"] = version_from_jar(JAVA_JARS / "slf4j-api.jar")
    javac_version = subprocess.run([javac, "-version"], capture_output=True).stdout
    jar_ids = [f"{j}:{j.stat().st_size}:{j.stat().st_mtime_ns}" for j in jars]
    key = digest(javac_version, *(f.read_bytes() for f in files), *jar_ids)
    classes = ctx.cache / f"java-{key}"
    if not classes.is_dir():
        ctx.cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=ctx.cache, prefix="java-tmp-"))
        cp = ":".join(str(j) for j in jars)
        proc = subprocess.run(
            [javac, "-nowarn", "-encoding", "UTF-8", "-d", str(tmp / "classes"), "-cp", cp]
            + [str(f) for f in files],
            capture_output=True,
            env=ctx.env,
        )
        if proc.returncode:
            shutil.rmtree(tmp, ignore_errors=True)
            raise GenerateError(f"javac failed:\n{proc.stderr.decode(errors='replace')}")
        publish(tmp, classes)
    cp = ":".join([str(classes / "classes")] + [str(j) for j in jars])
    cmd = [
        java,
        "-XX:TieredStopAtLevel=1",
        "-Xshare:auto",
        "-Duser.language=en",
        "-Duser.country=US",
        "-Duser.timezone=UTC",
        f"-Dlogback.configurationFile={src / 'logback.xml'}",
        f"-Dlog4j2.configurationFile={src / 'log4j2.xml'}",
        "-cp",
        cp,
        "com.shop.orders.RecordsMain",
        *programs,
        "uncaught",
    ]
    output = run(cmd, cwd=src, env=ctx.env, stream="stderr", returncode=1)
    # stdout carries one line, java.version=..., and nothing else.
    info = dict(line.split("=", 1) for line in output.other.decode().splitlines() if line)
    ctx.versions["java"] = info.pop("java.version", "?")
    if info:
        raise GenerateError(f"java: unexpected stdout {output.other!r}")
    wanted = stems_of("java-jul", "jvm", *programs)
    return expect(split(output.records, "java/RecordsMain"), wanted, "java/RecordsMain")


def version_from_jar(jar: Path) -> str:
    """The Bundle-Version (else Implementation-Version) of the jar's manifest."""
    try:
        with zipfile.ZipFile(jar) as archive:
            manifest = archive.read("META-INF/MANIFEST.MF").decode(errors="replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return "?"
    for key in ("Bundle-Version", "Implementation-Version"):
        match = re.search(rf"^{key}: *(\S+)", manifest, re.M)
        if match:
            return match.group(1)
    return "?"


def npm_ready(
    node_dir: Path, env: dict[str, str], packages: Sequence[str] = NPM_PACKAGES
) -> str | None:
    """Install ``node_dir``'s node_modules from its lock when missing or stale; None when
    ready, else why it could not be installed."""
    lock = json.loads((node_dir / "package-lock.json").read_text())["packages"]

    def stale() -> bool:
        for name in packages:
            meta = node_dir / "node_modules" / name / "package.json"
            want = lock.get(f"node_modules/{name}", {}).get("version")
            if not meta.is_file() or json.loads(meta.read_text())["version"] != want:
                return True
        return False

    if not stale():
        return None
    npm = tool("npm")
    if not npm:
        return "npm not on PATH"
    fd = os.open(node_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # one installer at a time (parallel test workers)
        if not stale():
            return None
        try:
            proc = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=node_dir,
                env=env,
                capture_output=True,
                timeout=600,
            )
        except subprocess.TimeoutExpired:
            return "node_modules could not be installed: npm ci timed out after 600 s"
        if proc.returncode:
            lines = proc.stderr.decode(errors="replace").strip().splitlines()
            errors = [line for line in lines if line.startswith("npm error") and " at " not in line]
            why = " / ".join((errors or lines or [f"exit {proc.returncode}"])[:4])
            return f"node_modules could not be installed: npm ci failed: {why}"
        return None
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def node_programs(ctx: Context) -> dict[str, bytes]:
    node = tool("node")
    if not node:
        for source in ["node", *NPM_PACKAGES]:
            ctx.skipped[source] = "node not on PATH (Debian: nodejs; Node 20 or later)"
        return {}
    node_dir = HERE / "node"
    ctx.versions["node"] = (
        subprocess.run([node, "--version"], capture_output=True, text=True)
        .stdout.strip()
        .lstrip("v")
    )
    out: dict[str, bytes] = {}
    jobs = [("console_error.js", "stderr", 0), ("uncaught.js", "stderr", 1)]
    problem = npm_ready(node_dir, ctx.env)
    if problem:
        for name in NPM_PACKAGES:
            ctx.skipped[name] = problem
    else:
        jobs += [("pino_records.js", "stdout", 0), ("winston_records.js", "stdout", 0)]
        for name in NPM_PACKAGES:
            meta = node_dir / "node_modules" / name / "package.json"
            ctx.versions[name] = json.loads(meta.read_text())["version"]
    for script, stream, returncode in jobs:
        what = f"node/{script}"
        output = run(
            [node, script], cwd=node_dir, env=ctx.env, stream=stream, returncode=returncode
        )
        out |= split(only(output, what), what)
    wanted = stems_of("node") + [
        s for s in stems_of(*NPM_PACKAGES) if source_of(s) not in ctx.skipped
    ]
    return expect(out, wanted, "node/*.js")


def rust_programs(ctx: Context) -> dict[str, bytes]:
    rustc = tool("rustc", Path.home() / ".cargo" / "bin" / "rustc")
    if not rustc:
        ctx.skipped["rust"] = "rustc not on PATH nor in ~/.cargo/bin (rustup, or Debian: rustc)"
        return {}
    src = HERE / "rust"
    version = subprocess.run([rustc, "--version"], capture_output=True, text=True).stdout.strip()
    ctx.versions["rustc"] = version.removeprefix("rustc ")
    key = digest(version, (src / "src" / "panic.rs").read_bytes())
    binary = ctx.cache / f"rust-{key}" / "panic"
    if not binary.is_file():
        ctx.cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=ctx.cache, prefix="rust-tmp-"))
        # As a cargo dev build: debug info, file paths relative to the crate (src/panic.rs).
        flags = ["--edition", "2021", "-g", "-C", "opt-level=0"]
        proc = subprocess.run(
            [rustc, *flags, "-o", str(tmp / "panic"), "src/panic.rs"],
            cwd=src,
            env=ctx.env,
            capture_output=True,
        )
        if proc.returncode:
            shutil.rmtree(tmp, ignore_errors=True)
            raise GenerateError(f"rustc failed:\n{proc.stderr.decode(errors='replace')}")
        publish(tmp, binary.parent)
    out: dict[str, bytes] = {}
    for stem, case, backtrace in [
        ("rust--panic", "expect", None),
        ("rust--panic-backtrace", "expect", "1"),
        ("rust--index-out-of-bounds", "index", None),
    ]:
        env = dict(ctx.env)
        if backtrace:
            env["RUST_BACKTRACE"] = backtrace
        output = run([str(binary), stem, case], cwd=src, env=env, stream="stderr", returncode=101)
        out |= split(only(output, stem), stem)
    return expect(out, stems_of("rust"), "rust/src/panic.rs")


def go_programs(ctx: Context) -> dict[str, bytes]:
    go = tool("go", Path("/usr/local/go/bin/go"), Path("/usr/lib/go/bin/go"))
    if not go:
        ctx.skipped["go"] = "go not on PATH (Debian: apt-get install golang-go)"
        return {}
    ctx.versions["go"] = (
        subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, env=ctx.env)
        .stdout.strip()
        .removeprefix("go")
    )
    env = dict(ctx.env, GOCACHE=str(ctx.cache / "go-build"), GO111MODULE="on")
    # `go run` reports the program's exit status 2 as "exit status 2" and exits 1 itself.
    cases = [("go--nil-map", "nil-map", 1), ("go--index-out-of-range", "index", 1)]
    out = run_cases([go, "run", "panic.go"], cases, cwd=HERE / "go", env=env)
    return expect(out, stems_of("go"), "go/panic.go")


def php_programs(ctx: Context) -> dict[str, bytes]:
    php = tool("php")
    if not php:
        ctx.skipped["php"] = "php not on PATH (Debian: apt-get install php-cli)"
        return {}
    ctx.versions["php"] = subprocess.run(
        [php, "-n", "-r", "echo PHP_VERSION;"], capture_output=True, text=True
    ).stdout.strip()
    # No php.ini (-n): PHP's own defaults, which log to stderr in the CLI; errors not also
    # displayed on stdout, and frames without arguments, as production's php.ini has it.
    settings = ["-d", "display_errors=0", "-d", "log_errors=1", "-d", "html_errors=0"]
    settings += ["-d", "zend.exception_ignore_args=1"]
    cases = [
        ("php--uncaught-exception", "not-found", 255),
        ("php--uncaught-chained", "chained", 255),
        ("php--warning", "warning", 0),
    ]
    command = [php, "-n", *settings, "records.php"]
    out = run_cases(command, cases, cwd=HERE / "php", env=ctx.env)
    return expect(out, stems_of("php"), "php/records.php")


def ruby_programs(ctx: Context) -> dict[str, bytes]:
    ruby = tool("ruby")
    if not ruby:
        ctx.skipped["ruby"] = "ruby not on PATH (Debian: apt-get install ruby)"
        return {}
    ctx.versions["ruby"] = subprocess.run(
        [ruby, "-e", "print RUBY_VERSION"], capture_output=True, text=True
    ).stdout.strip()
    cases = [
        ("ruby--uncaught-nil", "nil", 1),
        ("ruby--uncaught-cause", "cause", 1),
        ("ruby--logger-error", "logger", 0),  # and ruby--logger-info after it
    ]
    out = run_cases([ruby, "-I", "lib", "records.rb"], cases, cwd=HERE / "ruby", env=ctx.env)
    return expect(out, stems_of("ruby"), "ruby/records.rb")


def mono_programs(ctx: Context) -> dict[str, bytes]:
    mcs, mono = tool("mcs"), tool("mono")
    if not mcs or not mono:
        ctx.skipped["mono"] = "mcs/mono not on PATH (Debian: apt-get install mono-mcs)"
        return {}
    src = HERE / "dotnet"
    version = subprocess.run([mono, "--version"], capture_output=True, text=True).stdout
    ctx.versions["mono"] = version.split("version ", 1)[-1].split(" ", 1)[0]
    files = sorted(src.rglob("*.cs"))
    key = digest(version, *(f.read_bytes() for f in files))
    exe = ctx.cache / f"mono-{key}" / "records.exe"
    if not exe.is_file():
        ctx.cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=ctx.cache, prefix="mono-tmp-"))
        # -debug writes the symbols (records.pdb) that put files and lines in the frames,
        # as a Debug build or a release with its .pdb does; paths as given, under the source.
        proc = subprocess.run(
            [mcs, "-debug", "-nologo", f"-out:{tmp / 'records.exe'}"]
            + [str(f.relative_to(src)) for f in files],
            cwd=src,
            env=ctx.env,
            capture_output=True,
        )
        if proc.returncode:
            shutil.rmtree(tmp, ignore_errors=True)
            raise GenerateError(f"mcs failed:\n{proc.stdout.decode(errors='replace')}")
        publish(tmp, exe.parent)
    cases = [("mono--unhandled-inner", "unhandled", 1), ("mono--logged", "logged", 0)]
    out = run_cases([mono, "--debug", str(exe)], cases, cwd=src, env=ctx.env)
    return expect(out, stems_of("mono"), "dotnet/Records.cs")


def samples(ctx: Context) -> dict[str, bytes]:
    out = {path.stem: path.read_bytes() for path in sorted((HERE / "samples").glob("*.sample"))}
    return expect(out, stems_of(*SAMPLE_SOURCES), "samples/")


PROGRAMS: list[Program] = [
    java_programs,
    node_programs,
    rust_programs,
    go_programs,
    php_programs,
    ruby_programs,
    mono_programs,
    python_programs,
    samples,
]
SAMPLE_SOURCES = {"dotnet", "aspnetcore"}
ORIGIN = {
    "python-logging": "python/python_logging.py",
    "python": "python/python_uncaught.py",
    "structlog": "python/structlog_json.py",
    "python-json-logger": "python/python_json_logger.py",
    "loguru": "python/loguru_records.py",
    "java-jul": "java/JulRecords.java",
    "jvm": "java/RecordsMain.java",
    "logback": "java/LogbackRecords.java",
    "log4j2": "java/Log4j2Records.java",
    "node": "node/console_error.js, node/uncaught.js",
    "pino": "node/pino_records.js",
    "winston": "node/winston_records.js",
    "rust": "rust/src/panic.rs",
    "go": "go/panic.go",
    "php": "php/records.php",
    "ruby": "ruby/records.rb",
    "mono": "dotnet/Records.cs",
}


# ----------------------------------------------------------------------------- entry point


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def check(stem: str, data: bytes) -> None:
    """One complete record, whose text still shows the ground truth declared for it."""
    truth = TRUTH[stem]
    if not data.strip():
        raise GenerateError(f"{stem}: empty record")
    if not data.endswith(b"\n"):
        raise GenerateError(f"{stem}: record does not end with a newline: {data[-80:]!r}")
    text = data.decode()
    if truth["format"] == "json":
        if data.count(b"\n") != 1:
            raise GenerateError(f"{stem}: a JSON record must be exactly one line: {data!r}")
        text = "\n".join(strings(json.loads(data)))
    for key in ("exception_type", "root_cause_type", "message", "log_message"):
        if truth[key] and truth[key] not in text:
            raise GenerateError(f"{stem}: ground truth {key}={truth[key]!r} not in the record")


def generate(outdir: Path, cache: Path | None = None) -> Corpus:
    """Run every available program and write one file per record plus manifest.json."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    cache_dir = cache or Path(os.environ.get("TRACEHOUND_RECORDS_CACHE") or outdir / ".build")
    versions: dict[str, str] = {}
    skipped: dict[str, str] = {}
    ctx = Context(
        cache=Path(cache_dir).resolve(), env=clean_env(), versions=versions, skipped=skipped
    )
    found: dict[str, bytes] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(PROGRAMS)) as pool:
        for records in pool.map(lambda program: program(ctx), PROGRAMS):
            found |= records

    produced = {source_of(stem) for stem in found}
    missing = {source_of(s) for s in TRUTH} - produced - set(skipped)
    if missing:  # never drop a source silently
        raise GenerateError(f"sources neither produced nor skipped: {sorted(missing)}")

    records: list[dict[str, Any]] = []
    for stem in sorted(found):
        data = found[stem]
        check(stem, data)
        truth = TRUTH[stem]
        name = f"{stem}.{'json' if truth['format'] == 'json' else 'log'}"
        (outdir / name).write_bytes(data)
        source, case = stem.split("--", 1)
        generated = source not in SAMPLE_SOURCES
        records.append(
            {
                "file": name,
                "source": source,
                "case": case,
                "generated": generated,
                "program": ORIGIN[source] if generated else f"samples/{stem}.sample",
                **truth,
            }
        )
    versions = dict(sorted(versions.items()))
    skipped = dict(sorted(skipped.items()))
    manifest = {"records": records, "skipped": skipped, "versions": versions}
    (outdir / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return Corpus(dir=outdir, records=records, skipped=skipped, versions=versions)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: generate.py OUTDIR", file=sys.stderr)
        return 2
    corpus = generate(Path(argv[0]))
    for record in corpus.records:
        print(f"{record['file']:45} {record['level']:8} {record['exception_type'] or '-'}")
    for source, reason in corpus.skipped.items():
        print(f"skipped {source}: {reason}")
    print(f"{len(corpus.records)} records in {corpus.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
