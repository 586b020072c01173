"""The sample service as a small git history, built on demand (the demo and the tests index it).

``tests/data/sample-service`` lives inside tracehound's own repository, so it cannot be a git
repository of its own. ``build_sample_repo`` copies it and replays a scripted history whose last
state is exactly those files: the planted bug (``pricing.py`` line 91) arrives in one named
commit, the handler change that lets ``quantity: 0`` through in a later one, and an unrelated
docstring edit to ``pricing.py`` after both. Authors and dates are fixed, so the shas are the
same on every machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PRICING = "shopapp/services/pricing.py"
HANDLERS = "shopapp/api/handlers.py"
BUG_LINE = "            line.unit_discount_cents = round_half_up(share / line.quantity)\n"


@dataclass(frozen=True)
class Step:
    subject: str
    author: str
    email: str
    date: str
    # (path, text in the final files, text before this commit); the first step takes them all.
    edits: tuple[tuple[str, str, str], ...] = ()


BUG_SUBJECT = "Invoices: print the per-unit discount next to each unit price"

STEPS = (
    Step("Orders API: pricing, coupons and order placement", "Ana Lima", "ana@shop.example",
         "2026-09-01T10:00:00+00:00"),
    Step(BUG_SUBJECT, "Ben Ortiz", "ben@shop.example", "2026-10-14T16:20:00+00:00",
         ((PRICING, BUG_LINE, ""),)),
    Step("Orders: accept quantity 0 for an item removed from the cart", "Chen Wu",
         "chen@shop.example", "2026-11-03T09:45:00+00:00",
         ((HANDLERS, "quantity < 0 or", "quantity < 1 or"),
          (HANDLERS, "must be between 0 and", "must be between 1 and"))),
    Step("Shipping: say that shipping is free above the threshold", "Ana Lima",
         "ana@shop.example", "2026-11-20T11:05:00+00:00",
         ((PRICING, "Flat-rate shipping, free above the configured threshold.",
           "Flat-rate shipping."),)),
)  # fmt: skip


@dataclass(frozen=True)
class SampleRepo:
    path: Path
    shas: dict[str, str]  # subject -> sha

    @property
    def bug_commit(self) -> str:
        return self.shas[BUG_SUBJECT]


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.strip()


def build_sample_repo(source: Path, dest: Path) -> SampleRepo:
    """``dest`` (replaced) becomes a git checkout of ``source`` with the history of ``STEPS``."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(source, dest, copy_function=shutil.copyfile)  # no modes: stable trees
    finals = {path: (dest / path).read_text() for s in STEPS for path, _, _ in s.edits}

    def state(path: str, step: int) -> str:
        """``path`` as it was at ``step``: the final text with every later edit undone."""
        text = finals[path]
        for later in STEPS[step + 1 :]:
            for p, final, before in later.edits:
                text = text.replace(final, before, 1) if p == path else text
        return text

    _git(dest, "init", "-q", "-b", "main")
    shas: dict[str, str] = {}
    base = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    for i, step in enumerate(STEPS):
        for path in finals:
            (dest / path).write_text(state(path, i))
        env = base | {
            "GIT_AUTHOR_NAME": step.author,
            "GIT_AUTHOR_EMAIL": step.email,
            "GIT_AUTHOR_DATE": step.date,
            "GIT_COMMITTER_NAME": step.author,
            "GIT_COMMITTER_EMAIL": step.email,
            "GIT_COMMITTER_DATE": step.date,
        }
        _git(dest, "add", "-A", env=env)
        _git(dest, "commit", "-q", "-m", step.subject, env=env)
        shas[step.subject] = _git(dest, "rev-parse", "HEAD", env=env)
    _git(dest, "tag", "1.4.1", shas[STEPS[-1].subject])
    for path, text in finals.items():
        if (source / path).read_text() != text:
            raise AssertionError(f"the scripted history does not end at {source / path}")
    return SampleRepo(dest, shas)
