"""The supervisor of ``tracehound up``: starts the local stack's processes in order, restarts one
that dies (backoff, capped), reports each change, and stops them in order."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shared.stack.children import ChildSpec, Proc, spawn, start
from shared.stack.stackfile import ChildState

log = logging.getLogger(__name__)

# A child that ran this long before exiting was not crash-looping: its next restart is quick.
STABLE_AFTER = 30.0
BACKOFF_FIRST = 1.0
BACKOFF_CAP = 30.0
WARM_STOP_TIMEOUT = 60.0  # a worker finishes its task; one killed after is redelivered (acks_late)


def restart_delay(
    quick_exits: int, first: float = BACKOFF_FIRST, cap: float = BACKOFF_CAP
) -> float:
    """Seconds before the next start after ``quick_exits`` consecutive exits soon after a
    start: 1, 2, 4 … capped, so a crash loop neither spins nor gives up."""
    return min(cap, first * 2 ** max(0, quick_exits - 1))


@dataclass
class Child:
    spec: ChildSpec
    proc: Proc | None = None
    started: float = 0.0  # monotonic
    restarts: int = 0
    quick_exits: int = 0
    last_exit: int | None = None
    restart_at: float | None = None  # monotonic

    def state(self, log_dir: Path, now: float, wall: float) -> ChildState:
        running = self.proc is not None and self.proc.alive()
        restart_at = None
        if self.restart_at is not None:
            restart_at = wall + max(0.0, self.restart_at - now)
        return ChildState(
            name=self.spec.name,
            pid=self.proc.popen.pid if self.proc is not None else None,
            state="running" if running else ("restarting" if restart_at else "stopped"),
            restarts=self.restarts,
            quick_exits=self.quick_exits,
            last_exit=self.last_exit,
            restart_at=restart_at,
            log=str(log_dir / f"{self.spec.name}.log"),
            argv0=self.spec.argv[0],
            url=self.spec.url,
            health_url=self.spec.health_url,
            queues=self.spec.queues,
        )


class Supervisor:
    """Children of one stack; ``tend`` is called in a loop from the main thread (children are
    armed to die with it, which Linux ties to the spawning thread)."""

    def __init__(
        self,
        log_dir: Path,
        on_change: Callable[[], None] = lambda: None,
        *,
        stable_after: float = STABLE_AFTER,
        first: float = BACKOFF_FIRST,
        cap: float = BACKOFF_CAP,
    ) -> None:
        self.log_dir = log_dir
        self.children: list[Child] = []
        self.on_change = on_change
        self.stable_after, self.first, self.cap = stable_after, first, cap

    def start(self, spec: ChildSpec) -> Child:
        """Start ``spec`` and wait until it is ready (raises with its log's tail if not)."""
        child = Child(spec, start(spec, self.log_dir, die_with_parent=True), time.monotonic())
        self.children.append(child)
        assert child.proc is not None
        log.info("up.child_started", extra={"child": spec.name, "pid": child.proc.popen.pid})
        self.on_change()
        return child

    def tend(self) -> None:
        """Notice exits, and start again those whose backoff is over."""
        now = time.monotonic()
        changed = False
        for child in self.children:
            if child.proc is not None and not child.proc.alive():
                changed = True
                self._exited(child, now)
            elif child.proc is None and child.restart_at is not None and now >= child.restart_at:
                changed = True
                self._restart(child, now)
        if changed:
            self.on_change()

    def _exited(self, child: Child, now: float) -> None:
        assert child.proc is not None
        code = child.proc.popen.returncode
        quick = now - child.started < self.stable_after
        child.quick_exits = child.quick_exits + 1 if quick else 1
        delay = restart_delay(child.quick_exits, self.first, self.cap)
        child.last_exit, child.proc, child.restart_at = code, None, now + delay
        fields = {"child": child.spec.name, "returncode": code, "restart_in": delay}
        if child.quick_exits >= 3:
            log.error("up.child_crash_loop", extra=fields | {"quick_exits": child.quick_exits})
        else:
            log.warning("up.child_exited", extra=fields)

    def _restart(self, child: Child, now: float) -> None:
        # No readiness wait: the other children are tended meanwhile, and a child that is not
        # ready is what its health in ``tracehound status`` shows.
        spec = child.spec
        child.proc = spawn(
            spec.name,
            spec.argv,
            self.log_dir,
            env=spec.env,
            die_with_parent=True,
            user=spec.user,
            stop_signal=spec.stop_signal,
        )
        child.started, child.restart_at = now, None
        child.restarts += 1
        log.warning(
            "up.child_restarted",
            extra={"child": spec.name, "pid": child.proc.popen.pid, "restarts": child.restarts},
        )

    def states(self) -> list[ChildState]:
        now, wall = time.monotonic(), time.time()
        return [c.state(self.log_dir, now, wall) for c in self.children]

    def stop_all(self, warm_timeout: float = WARM_STOP_TIMEOUT) -> None:
        """Consumers first (workers warm, all at once; then the ingest), then the services
        they use, last started first."""
        for child in self.children:
            child.restart_at = None
        live = [c for c in self.children if c.proc is not None]
        workers = [c for c in live if c.spec.queues]
        for c in workers:
            assert c.proc is not None
            c.proc.terminate(warm=True)
        rest = [c for c in reversed(live) if not c.spec.queues]
        for c in workers:
            assert c.proc is not None
            c.proc.wait_or_kill(warm_timeout)
            log.info("up.child_stopped", extra={"child": c.spec.name})
        for c in rest:
            assert c.proc is not None
            c.proc.stop(15.0)
            log.info("up.child_stopped", extra={"child": c.spec.name})
        self.on_change()
