"""Generated logs for the tailer's equivalence tests: every kind of line the grouper and intake
treat differently, mixed at random (tests/unit/test_skim.py, tests/integration/test_tail_skim.py).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

DATA = Path(__file__).parent / "data"

INFO = "2026-11-30 10:00:00,123 INFO [shop.api] GET /orders/{n} 200 in 12ms user=4711 ok"

# Lines that look ordinary but are not (levels in every form maybe_error knows, words that
# only contain a level, line starts the grouper reads) and lines that only look special.
TRICKY = [
    "2026-11-30 10:00:01,000 ERROR [shop.api] payment failed for order {n}",
    "2026-11-30 10:00:01,000 WARNING [shop.api] slow query {n}",
    "2026-11-30T10:43:03.512Z error: request failed {n}",
    'level=error msg="db down" n={n}',
    "level=fail msg=x",
    "fail: Shop.Orders[1] could not place {n}",
    "[error] upstream timed out {n}",
    "<crit> disk full",
    "E/ActivityManager( 123): crash {n}",
    "11-30 10:00:00.123  123  456 E Tag: boom {n}",
    "E1130 10:00:00.000123   12345 server.go:42] failed {n}",
    "F1130 10:00:00.000123   12345 server.go:42] fatal {n}",
    "I1130 10:00:00.000123   12345 server.go:42] fine {n}",
    "E\u0661\u0662\u0663\u0664 arabic digits",
    "something E here",
    "an A grade",
    "path E/x",
    "stderr: nothing wrong {n}",
    "ALERTS: none",
    "assertion ok",
    "EMERGENCY drill",
    "SEVERE: boom {n}",
    "INFO: started {n}",
    "WARNING: careful",
    "FINEST: detail",
    "Nov 30, 2026 7:42:54 PM com.shop.Orders run",
    "Nov 30, 2026 7:42:54 PM com.shop.ErrorHandler run",
    "ZeroDivisionError: division by zero {n}",
    "java.lang.IllegalStateException: bad state {n}",
    'Exception in thread "main" java.lang.RuntimeException: x',
    "Caused by: java.io.IOException: y",
    "Caused by: com.shop.Oops: no keyword but the cause",
    "Wrapped by: com.shop.Outer: w",
    "Unhandled exception. oops",
    "kotlinx.coroutines.JobCancellationException: z",
    "java.lang.Throwable",
    "KeyboardInterrupt",
    "Traceback (most recent call last):",
    "+ Exception Group Traceback (most recent call last):",
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
    "panic: runtime error: index out of range [{n}]",
    "fatal error: all goroutines are asleep - deadlock!",
    "goroutine 1 [running]:",
    "main.main()",
    "exit status 2",
    "thread 'main' panicked at src/main.rs:4:5:",
    "thread 'main' (12) panicked at 'boom', src/main.rs:4:5",
    "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
    "stack backtrace:",
    "PHP Fatal error:  Uncaught Exception: nope in /app/x.php:3",
    "[30-Nov-2026 10:00:05 UTC] PHP Warning:  Undefined variable $x in /app/x.php on line 4",
    "Stack trace:",
    "#0 {main}",
    "Next App\\Orders\\StorageException: could not load order 42 in /app/y.php:19",
    "Unhandled exception. System.InvalidOperationException: nope",
    "Unhandled Exception: System.Exception: x",
    "/app/src/server.js:{n}",
    "C:\\app\\server.ts:12",
    "node:internal/process/task_queues:95",
    "file:///app/src/server.mjs:3",
    "  const id = req.user.id;",
    "                      ^",
    "Node.js v20.20.2",
    "    at main (/app/src/server.js:13:21)",
    "\tat com.shop.Orders.place(Orders.java:42)",
    '  File "/srv/app/x.py", line 3, in f',
    "    ^^^^^^",
    '> File "/srv/app/x.py", line 9, in g',
    "}",
    "{ not really json }",
    "{",
    "İstanbul CRİT CRİTİCAL",
    "\u212a kelvin",
    "\u00a0ERROR after a no-break space",
    "\u2028separator",
    "\x0cform feed ERROR",
    "\x1fcontrol",
    "ok\x00nul",
    "  indented continuation {n}",
    "+ plus line",
    "| group line",
    "+-+---------------- 1 ----------------",
    "... 3 more",
    "Suppressed: java.lang.Exception: s",
    "[cause]: Error: c",
    "created by main.main",
    "[signal SIGSEGV: segmentation violation]",
    "...additional frames elided...",
]

JSON_LINES = [
    {"level": "error", "message": "db down {n}", "service": "x"},
    {"level": "info", "message": "ok {n}"},
    {"level": 50, "msg": "pino error {n}"},
    {"severity": "ERROR", "message": "Traceback (most recent call last):\n  x\nValueError: v"},
    {"message": "no level {n}"},
    {"level": "error", "err": {"type": "TypeError", "stack": "TypeError: x\n    at f (a.js:1:1)"}},
]


def trace_lines() -> list[list[str]]:
    """Real traces and logs, each file as its lines."""
    files = sorted((DATA / "traces").glob("*.log")) + sorted(
        (DATA / "records" / "samples").glob("*.sample")
    )
    return [f.read_text(errors="replace").splitlines() for f in files]


def make_log(rng: random.Random, lines: int, *, long_line: int = 3000) -> bytes:
    """About ``lines`` lines of everything: INFO lines (most), slices of real traces, tricky
    lines, JSON lines, blank lines, huge lines, CRLF endings and bytes that are not UTF-8."""
    traces = trace_lines()
    out: list[bytes] = []
    n = 0
    while len(out) < lines:
        n += 1
        kind = rng.random()
        if kind < 0.55:
            new = [INFO.replace("{n}", str(n)).encode()]
        elif kind < 0.7:
            src = rng.choice(traces)
            a = rng.randrange(len(src))
            new = [s.encode() for s in src[a : a + rng.randint(1, 30)]]
        elif kind < 0.82:
            new = [rng.choice(TRICKY).replace("{n}", str(n)).encode()]
        elif kind < 0.85:  # java.util.logging: a header, its level line, perhaps a throwable
            new = [
                b"Nov 30, 2026 7:42:54 PM com.shop.Orders run",
                rng.choice([b"INFO: placed", b"WARNING: slow", b"SEVERE: failed"]),
                *rng.choice([[], [b"java.lang.IllegalStateException: x", b"\tat a.B.c(B.java:1)"]]),
            ]
        elif kind < 0.9:
            new = [json.dumps(rng.choice(JSON_LINES)).replace("{n}", str(n)).encode()]
        elif kind < 0.94:
            new = [rng.choice([b"", b" ", b"\t", b"\r", b"  \r"])]
        elif kind < 0.97:
            fill = rng.choice([b"x", b"ab ", b"\xff", b"\xc3\xa9", b"ERROR "])
            size = rng.randint(long_line // 2, long_line * 2)
            new = [rng.choice([b"", b"ERROR ", b"INFO ", b"  "]) + fill * (size // len(fill))]
        else:
            new = [bytes(rng.randrange(256) for _ in range(rng.randint(1, 60))).replace(b"\n", b"")]
        if rng.random() < 0.1:
            new = [ln + b"\r" for ln in new]
        out += new
    return b"\n".join(out) + b"\n"
