"""``tracehound deploy``: a CI pipeline announces that a release went out.

The range's ends are resolved in the checkout (``v1.4.1..HEAD`` becomes two shas) and its
commits listed with ``git rev-list``, so a message can say whether a suspect commit came with
the deploy; then one ``POST /v1/deploys`` to ingest (producers/ingest/deploy_routes.py), with
the ingest token, retried on 5xx and connection errors (a pipeline step should not fail
because ingest restarted).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from shared.core.domain import DEPLOY_COMMITS_MAX
from shared.index.git import GitUnavailable, run_git

GIT_TIMEOUT_S = 20.0
ATTEMPTS = 4
BACKOFF_S = 1.0


class DeployRefused(Exception):
    """Ingest answered with a 4xx: retrying the same request cannot help."""


class IngestUnreachable(Exception):
    """Ingest did not answer (or answered 5xx) on every attempt."""


@dataclass(frozen=True)
class Commits:
    commit_from: str
    commit_to: str
    shas: list[str]  # empty when the range was too long to list
    note: str = ""  # why the list is empty, for the pipeline's log


def range_commits(root: Path, spec: str) -> Commits:
    """``from..to`` (or one commit) resolved in the checkout at ``root``, with the commits of
    the range, newest first (none past DEPLOY_COMMITS_MAX: a partial list would call a
    suspect commit older than the deploy when it is not). GitUnavailable when git cannot."""
    start, dots, end = spec.strip().partition("..")
    if dots and end.startswith("."):
        raise GitUnavailable("use from..to (the commits the deploy brought), not from...to")
    ends = [start, end] if dots else [start]
    resolved = [
        run_git(root, ["rev-parse", "--verify", "--end-of-options", f"{e}^{{commit}}"],
                timeout=GIT_TIMEOUT_S).strip()
        for e in ends
    ]  # fmt: skip
    if not dots:
        return Commits("", resolved[0], [resolved[0]])
    listed = run_git(
        root,
        ["rev-list", f"--max-count={DEPLOY_COMMITS_MAX + 1}", f"{resolved[0]}..{resolved[1]}"],
        timeout=GIT_TIMEOUT_S,
    ).split()
    if len(listed) > DEPLOY_COMMITS_MAX:
        note = f"more than {DEPLOY_COMMITS_MAX} commits in the range: sent without the list"
        return Commits(resolved[0], resolved[1], [], note)
    return Commits(resolved[0], resolved[1], listed)


def deploy_body(
    *,
    service: str,
    version: str,
    environment: str,
    commits: Commits | None,
    when: str | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"service": service, "version": version, "environment": environment}
    if commits is not None:
        body["range"] = (
            f"{commits.commit_from}..{commits.commit_to}"
            if commits.commit_from
            else commits.commit_to
        )
        body["commits"] = commits.shas
    if when:
        body["time"] = when
    return body


def announce(url: str, token: str | None, body: dict[str, Any]) -> dict[str, Any]:
    """POST the deploy; its reply (``id``, ``new``). DeployRefused on a 4xx, IngestUnreachable
    when every attempt failed."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    target = url.rstrip("/") + "/v1/deploys"
    last = ""
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(BACKOFF_S * 2 ** (attempt - 1))
        try:
            reply = httpx.post(target, json=body, headers=headers, timeout=10.0)
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
            continue
        if reply.status_code >= 500:
            last = f"HTTP {reply.status_code}: {reply.text[:200]}"
            continue
        if reply.status_code >= 400:
            raise DeployRefused(f"HTTP {reply.status_code}: {_error(reply)}")
        return dict(reply.json())
    raise IngestUnreachable(f"{target}: {last}")


def _error(reply: httpx.Response) -> str:
    try:
        return str(reply.json().get("error", ""))[:300]
    except ValueError:
        return reply.text[:300]
