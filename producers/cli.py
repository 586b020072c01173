"""The ``tracehound`` command: run the stack (up/down), configure, run workers, index a repo,
analyze an error, demo."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO

import typer
from pydantic import ValidationError
from rich.console import Console

from shared.core import logs, queues
from shared.core.errors import PermanentError
from shared.core.settings import Settings, invalid_settings
from shared.core.telemetry import switch_off_telemetry
from shared.stack import stackfile

if TYPE_CHECKING:
    from rich.table import Table

    from shared.core.domain import Deploy

cli = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="tracehound: production errors in, Slack analyses out.",
)
vectors_cli = typer.Typer(
    no_args_is_help=True, help="The vector store: copy an index between stores."
)
cli.add_typer(vectors_cli, name="vectors")
sourcemaps_cli = typer.Typer(
    no_args_is_help=True,
    help="Source maps: minified JavaScript frames mapped back to the original code.",
)
cli.add_typer(sourcemaps_cli, name="sourcemaps")
err = Console(stderr=True)
out = Console()


DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Where `tracehound up` keeps its stack (default: TRACEHOUND_DATA_DIR, .tracehound).",
    ),
]


@cli.callback()
def root(data_dir: DataDirOption = None) -> None:
    """tracehound: production errors in, Slack analyses out."""
    if data_dir is not None:
        # The flag is the variable, for this command and what it starts (`worker` execs celery).
        os.environ["TRACEHOUND_DATA_DIR"] = str(data_dir)


def load_settings(data_dir: Path | None = None) -> Settings:
    """TRACEHOUND_* variables, then the state file of a running ``tracehound up`` stack in the
    data dir (its Redis, Chroma, simulators), then the defaults: an explicit variable wins."""
    explicit: dict[str, Any] = {"data_dir": data_dir} if data_dir else {}
    try:
        settings = Settings(**explicit)
        state, running = stackfile.live_state(settings.data_dir)
        if running:
            assert state is not None
            return Settings(**explicit | stackfile.settings_overrides(state, os.environ))
        if state is not None:
            err.print(
                f"[yellow]note:[/yellow] {stackfile.state_path(settings.data_dir)} is from a "
                f"stack that no longer runs (supervisor pid {state.supervisor_pid}); not used",
                highlight=False,
            )
        return settings
    except ValidationError as exc:
        problems = invalid_settings(exc)
        err.print(f"[red]invalid TRACEHOUND_* settings:[/red]\n{problems}", highlight=False)
        raise typer.Exit(2) from exc


@cli.command()
def up(
    data_dir: DataDirOption = None,
    ingest_port: Annotated[
        int, typer.Option(min=1, max=65535, help="Port of the HTTP ingest endpoint.")
    ] = 8080,
    simulate: Annotated[
        bool,
        typer.Option("--simulate", help="Use the Ollama and Slack simulators, not the real ones."),
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", help="Run in the background; return once it is ready.")
    ] = False,
    vector_store: Annotated[
        str | None,
        typer.Option(
            "--vector-store",
            help="chroma (a Chroma server of its own) or pgvector (TRACEHOUND_PG_URL, or else "
            "a bundled PostgreSQL with pgvector under the data dir); default "
            "TRACEHOUND_VECTOR_STORE.",
        ),
    ] = None,
) -> None:
    """Run the whole stack here, without Docker: Redis, Chroma, the workers and the ingest
    endpoint under one supervisor that restarts what dies; Ctrl-C or `tracehound down` stops it."""
    from shared.stack.up import UpOptions, run_detached, run_up

    # The supervisor's events (a child exited, restarted) are what its log is for.
    logs.configure(os.environ.get("TRACEHOUND_LOG_LEVEL", "INFO"))
    settings = load_settings(data_dir)
    store = vector_store or settings.vector_store
    if store not in ("chroma", "pgvector"):
        err.print(f"[red]error:[/red] --vector-store is chroma or pgvector, not {store!r}")
        raise typer.Exit(2)
    opts = UpOptions(
        settings.data_dir.resolve(),
        ingest_port,
        simulate,
        ollama_url=settings.ollama_url,
        models=(settings.embed_model, settings.llm_model),
        slack_listen=settings.slack_app_token is not None,
        vector_store=store,
        pg_url=settings.pg_url,
    )
    if not detach:
        raise typer.Exit(run_up(opts, err=err))
    argv = [sys.executable, "-m", "producers.cli", "up", "--data-dir", str(opts.data_dir)]
    argv += ["--ingest-port", str(ingest_port), *(["--simulate"] if simulate else [])]
    argv += ["--vector-store", store]
    raise typer.Exit(run_detached(argv, opts, err=err))


@cli.command()
def down(data_dir: DataDirOption = None) -> None:
    """Stop the stack `tracehound up` runs (workers finish their tasks first)."""
    from shared.stack.up import run_down

    raise typer.Exit(run_down(load_settings(data_dir).data_dir.resolve(), err=err))


@cli.command()
def config(
    egress: Annotated[
        bool,
        typer.Option(
            "--egress", help="Only the hosts tracehound contacts: role, address, setting, why."
        ),
    ] = False,
) -> None:
    """Print the effective settings (secrets masked), then every host they make tracehound
    contact."""
    from shared.core.egress import destinations

    settings = load_settings()
    state, running = stackfile.live_state(settings.data_dir)
    if running and state is not None:
        used = sorted(stackfile.settings_overrides(state, os.environ))
        if used:
            err.print(
                f"# from {stackfile.state_path(settings.data_dir)}: {', '.join(used)}",
                highlight=False,
                markup=False,
            )
    lines = [d.line() for d in destinations(settings, webhooks=_routing_webhooks(settings))]
    if egress:
        for line in lines:
            out.print(line, highlight=False, markup=False, soft_wrap=True)
        return
    for key, value in settings.masked().items():
        # Values are printed literally: "*.test.[jt]s" is a glob, not Rich markup.
        out.print(f"{key} = {json.dumps(value)}", highlight=False, markup=False, soft_wrap=True)
    # Comments, so a reader of the key = value lines above skips them.
    out.print(
        "# egress: every host tracehound contacts (tracehound config --egress)",
        highlight=False,
        markup=False,
    )
    for line in lines:
        out.print(f"#   {line}", highlight=False, markup=False, soft_wrap=True)


def _routing_webhooks(settings: Settings) -> list[str]:
    """The webhooks the routing file names (none without one); a bad file is said, not fatal:
    the worker refuses it at start."""
    from shared.notify.routing import RoutingError, load_routing

    try:
        return [r.route.webhook for r in load_routing(settings.routing).rules if r.route.webhook]
    except RoutingError as exc:
        err.print(f"[yellow]note:[/yellow] routing file not read: {exc}", highlight=False)
        return []


@cli.command()
def status() -> None:
    """Queue depths and consumers; the analysis backlog (groups waiting, the oldest's age);
    per model host: holder, loaded model, swaps, busy time; the processes of a `tracehound up`
    stack: pids, restarts, health."""
    import redis
    from rich.markup import escape
    from rich.table import Table

    from shared.core.persistence import persistence_warning
    from shared.core.pipeline import sender_app
    from shared.groups import deferred
    from shared.groups.deploys import DeployStore
    from shared.index.store_health import store_health
    from shared.models.hosts import host_status, known_hosts
    from shared.stack.up import child_health, stack_table

    settings = load_settings()
    state, running = stackfile.live_state(settings.data_dir)
    stack = state if running else None
    if stack is not None:
        redis_child = next((c for c in stack.children if c.name == "redis"), None)
        if redis_child is not None and child_health(redis_child, set()) != "ok":
            out.print(stack_table(stack, set()))
            err.print(f"[red]error:[/red] the stack's Redis does not answer ({redis_child.log})")
            raise typer.Exit(1)
    r = redis.Redis.from_url(settings.redis_url)
    warning = persistence_warning(r)
    if warning:
        err.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    app = sender_app(settings)
    try:
        active = app.control.inspect(timeout=1.0).active_queues() or {}
    finally:
        app.close()
    consumers: dict[str, list[str]] = {}
    for worker_name, qs in active.items():
        for q in qs:
            consumers.setdefault(q["name"], []).append(worker_name)
    if stack is not None:
        out.print(stack_table(stack, set(consumers)))
    table = Table("queue", "waiting", "consumers", title="queues")
    for q in queues.ALL_QUEUES:
        table.add_row(q, str(queues.depth(r, q)), ", ".join(sorted(consumers.get(q, []))) or "-")
    out.print(table)
    waiting = deferred.backlog(r)
    if waiting.waiting:
        out.print(
            f"analysis backlog: {waiting.waiting} new group(s) waiting for the model host, "
            f"the oldest for {waiting.oldest_age_s:.0f} s (incident members and groups over "
            "TRACEHOUND_MAX_NEW_GROUPS; analysed by count while the host is free)",
            highlight=False,
        )
    else:
        out.print("analysis backlog: empty", highlight=False)
    store = store_health(settings)
    if store.ok:
        out.print(
            f"vector store: {store.kind} at {store.where}: answers ({store.detail})",
            highlight=False,
            markup=False,
        )
    else:
        err.print(
            f"[yellow]warning:[/yellow] vector store: {store.kind} at {store.where} does not "
            f"answer ({escape(store.detail)}): analyses use keyword search only until it does",
            highlight=False,
        )
    hosts = Table(
        "host", "holder", "loaded model", "waiting", "swaps", "calls", "busy s", title="model hosts"
    )
    for host in known_hosts(r):
        st = host_status(r, host)
        holder = st["holder"]
        hosts.add_row(
            host,
            f"{holder['model']} (token {holder['token']}, {st['holders']} holding)"
            if holder
            else "-",
            st["loaded"] or "-",
            str(st["waiting"]),
            str(st["swaps"]),
            str(st["calls"]),
            str(st["busy_s"]),
        )
    out.print(hosts)
    out.print(deploys_table(DeployStore(r).recent(10)))


def deploys_table(recent: list[Deploy]) -> Table:
    """The newest deploys of every service (announced, or a release first seen in events)."""
    from datetime import UTC, datetime

    from rich.table import Table
    from rich.text import Text

    table = Table("when (UTC)", "service", "env", "version", "range", "commits", "source",
                  title="recent deploys")  # fmt: skip
    for d in recent:
        ends = f"{d.commit_from[:7]}..{d.commit_to[:7]}" if d.commit_from else d.commit_to[:7]
        table.add_row(  # names from outside as Text: "[red]" in a release is not markup
            datetime.fromtimestamp(d.time, UTC).strftime("%Y-%m-%d %H:%M"),
            Text(d.service),
            Text(d.environment or "-"),
            Text(d.version),
            ends or "-",
            str(len(d.commits)) if d.commits else "-",
            "announced" if d.source == "announced" else "release seen",
        )
    return table


@cli.command()
def worker(
    queues_: Annotated[str, typer.Option("--queues", "-Q", help="Comma-separated queues.")],
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-c")] = None,
    loglevel: Annotated[str, typer.Option("--loglevel", "-l")] = "INFO",
    name: Annotated[str | None, typer.Option("--name", "-n")] = None,
) -> None:
    """Start a Celery worker (model queues run at most two tasks at once, the default)."""
    wanted = [q.strip() for q in queues_.split(",") if q.strip()]
    unknown = sorted(set(wanted) - set(queues.ALL_QUEUES))
    if unknown or not wanted:
        err.print(f"[red]unknown queue(s) {unknown}; choose from {', '.join(queues.ALL_QUEUES)}")
        raise typer.Exit(2)
    model = set(wanted) & set(queues.MODEL_QUEUES)
    if model and concurrency is not None and not 1 <= concurrency <= queues.MODEL_SLOTS:
        err.print(
            f"[red]model queue(s) {sorted(model)} run at most {queues.MODEL_SLOTS} tasks at once "
            "(they share the model host's lease): use --concurrency "
            f"{queues.MODEL_SLOTS} or less (scale CPU queues instead)"
        )
        raise typer.Exit(2)
    c = (concurrency or queues.MODEL_SLOTS) if model else (concurrency or os.cpu_count() or 1)
    settings = load_settings()  # fail here, readably, rather than inside Celery
    state, running = stackfile.live_state(settings.data_dir)
    if running and state is not None:
        # Celery builds its Settings from the environment: hand it the stack's.
        for key, value in stackfile.settings_overrides(state, os.environ).items():
            os.environ[f"{stackfile.ENV_PREFIX}{key.upper()}"] = value
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers",
        "worker",
        "-Q",
        ",".join(wanted),
        "-c",
        str(c),
        "-l",
        loglevel,
        "-n",
        name or f"{'-'.join(wanted)}@%h",
    ]
    os.execv(sys.executable, argv)


@cli.command()
def index(
    path: Annotated[Path, typer.Argument(help="Repository root to index.")],
    repo: Annotated[str, typer.Option("--repo", help="Repository name (one index per repo).")],
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the workers.")] = 3600.0,
) -> None:
    """Index a repository: changed chunks are embedded, unchanged ones skipped, deleted removed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from shared.core.pipeline import sender_app
    from shared.index.history import HistoryBounds
    from shared.index.reindex import index_repository
    from shared.intake.redact import Redactor

    if not path.is_dir():
        err.print(
            f"[red]error:[/red] index path {str(path)!r} does not exist or is not a directory"
        )
        raise typer.Exit(2)
    settings = load_settings()
    app = sender_app(settings)
    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=not err.is_terminal,
    )
    with progress:
        task = progress.add_task(f"indexing {repo}", total=None)
        report = index_repository(
            app,
            path,
            repo,
            max_bytes=settings.max_file_bytes,
            timeout=timeout,
            on_total=lambda n: progress.update(task, total=n),
            on_done=lambda n: progress.advance(task, n),
            history=HistoryBounds.from_settings(settings) if settings.history else None,
            redact=Redactor.from_settings(
                settings.redact, settings.redact_extra, settings.redact_disable
            ).redact,
        )
    reasons = ", ".join(f"{n} {r}" for r, n in report.skip_reasons().items()) or "none"
    out.print(
        f"indexed {report.files} files ({report.chunks} chunks, {report.embedded} "
        f"embedded) into {repo!r}; skipped: {reasons}; removed: "
        f"{len(report.removed_files)} deleted files; history: {report.history}",
        highlight=False,
    )
    _store_maps(settings, repo, path, "")
    if report.failed:
        err.print(f"[red]{len(report.failed)} files failed:[/red]")
        for line in report.failed[:20]:
            err.print(f"  {line}", highlight=False)
        raise typer.Exit(1)


def _store_maps(settings: Settings, repo: str, directory: Path, release: str) -> int:
    """The source maps under ``directory`` stored as ``release``'s ("": the indexed tree's);
    what was stored and what was refused, said. Returns how many bundles have a map."""
    import redis

    from shared.index.bundles import find_maps
    from shared.intake.sourcemap_store import put_maps

    found = find_maps(directory)
    r = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=5, socket_timeout=30)
    try:
        stored = put_maps(r, repo, release, found.maps)
    finally:
        r.close()
    if stored or found.refused or release:
        what = f"release {release!r}" if release else "the tree"
        out.print(
            f"source maps: {stored} bundles of {what} mapped for {repo!r}"
            + (f"; {len(found.refused)} refused" if found.refused else ""),
            highlight=False,
            markup=False,
        )
    for path, why in found.refused[:20]:
        err.print(f"  {path}: {why}", highlight=False, markup=False)
    return stored


def read_bounded(f: BinaryIO, limit: int) -> bytes:
    """All of ``f`` up to ``limit`` bytes; past that its head and its tail (where a trace's
    exception is) around a marker, read in bounded memory whatever the input's size."""
    data = f.read(limit + 1)
    if len(data) <= limit:
        return data
    head, tail = data[: limit // 4], collections.deque([data[limit // 4 :]])
    kept, skipped = len(tail[0]), 0
    keep = limit - len(head)
    while chunk := f.read(1 << 20):
        tail.append(chunk)
        kept += len(chunk)
        while kept - len(tail[0]) >= keep:
            skipped += len(tail[0])
            kept -= len(tail.popleft())
    end = b"".join(tail)
    skipped += max(0, len(end) - keep)
    marker = f"\n…[{skipped} bytes not read by tracehound]…\n".encode()
    return head + marker + end[-keep:]


@cli.command()
def analyze(
    source: Annotated[
        str, typer.Argument(help="File with a trace or JSON event; - for stdin.")
    ] = "-",
    service: Annotated[str | None, typer.Option(help="Service that raised the error.")] = None,
    repo: Annotated[str | None, typer.Option(help="Indexed repo (default: the service).")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait and print the message.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait with --wait.")] = 600.0,
) -> None:
    """Enqueue an error (raw trace text or a JSON event) for analysis."""
    from shared.core.pipeline import sender_app
    from shared.groups.submit import intake_for
    from shared.intake.events import parse_event
    from shared.notify.notifiers import render_console

    settings = load_settings()
    try:
        if source == "-":
            raw = read_bounded(sys.stdin.buffer, settings.ingest_max_body_bytes)
        else:
            with open(source, "rb") as f:
                raw = read_bounded(f, settings.ingest_max_body_bytes)
    except OSError as exc:
        err.print(f"[red]error:[/red] cannot read {source}: {exc.strerror}")
        raise typer.Exit(2) from exc
    try:
        event = parse_event(
            raw.decode("utf-8", errors="replace"),
            service=service,
            repo=repo,
            max_bytes=settings.max_trace_bytes,
        )
    except PermanentError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    submitted = intake_for(settings, sender_app(settings)).submit(event)
    if submitted.duplicate and submitted.result is None:
        err.print(f"event {event.id} was counted before (same id): nothing added", highlight=False)
        return
    if submitted.result is None:
        err.print(
            f"event {event.id} is occurrence {submitted.count} of group "
            f"{submitted.fingerprint} in this window: counted; its message was already "
            "sent and shows the count",
            highlight=False,
        )
        return
    result = submitted.result
    err.print(
        f"enqueued event {event.id} (service {event.service}, repo {event.repo})", highlight=False
    )
    if not wait:
        return
    try:
        notification = result.get(timeout=timeout)
    except Exception as exc:
        err.print(f"[red]error:[/red] no message after {timeout:.0f}s: {type(exc).__name__}: {exc}")
        raise typer.Exit(1) from exc
    out.print(render_console(notification["blocks"]), highlight=False, markup=False)
    out.print(f"delivered to: {notification['destination']}", highlight=False)


@cli.command()
def ingest(
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    service: Annotated[
        str | None, typer.Option(help="Service for events that do not name one.")
    ] = None,
) -> None:
    """Serve POST /v1/events for log shippers (Vector, Fluent Bit), Sentry SDK envelopes
    (/api/<project>/envelope/) and OTLP logs (/v1/logs); /healthz and /readyz."""
    from producers.ingest.server import serve

    settings = load_settings()
    err.print(
        f"tracehound ingest listening on http://{host}:{port}/v1/events"
        + ("" if settings.ingest_token else " (no token: loopback only)"),
        highlight=False,
    )
    try:
        serve(settings, host=host, port=port, service=service)
    except PermanentError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc


@cli.command()
def token() -> None:
    """Print the ingest token shippers send as ``Authorization: Bearer …`` (the running stack's,
    or TRACEHOUND_INGEST_TOKEN): ``export TRACEHOUND_INGEST_TOKEN=$(tracehound token)``."""
    settings = load_settings()
    if settings.ingest_token is None:
        err.print(
            "no ingest token: start the stack (`tracehound up`) or set TRACEHOUND_INGEST_TOKEN"
        )
        raise typer.Exit(1)
    print(settings.ingest_token.get_secret_value())


def _ingest_url(settings: Settings) -> str:
    """The running stack's ingest address, else the default one."""
    state, running = stackfile.live_state(settings.data_dir)
    return state.ingest_url if running and state is not None else "http://127.0.0.1:8080"


@cli.command()
def dsn(
    project: Annotated[str, typer.Argument(help="The DSN's project id (names the service).")] = "1",
) -> None:
    """Print a Sentry DSN that reports to this stack's ingest (its DSN key, its address)."""
    settings = load_settings()
    keys = settings.sentry_key_values
    if not keys:
        err.print("no DSN key: start the stack (`tracehound up`) or set TRACEHOUND_SENTRY_KEYS")
        raise typer.Exit(1)
    scheme, _, host = _ingest_url(settings).partition("://")
    print(f"{scheme}://{keys[0]}@{host}/{project}")


@cli.command()
def deploy(
    service: Annotated[str, typer.Option(help="The service that was deployed.")],
    version: Annotated[str, typer.Option(help="Its release (as its errors name it).")],
    environment: Annotated[
        str, typer.Option("--env", help="Where it went (production, staging, …).")
    ] = "",
    commits: Annotated[
        str | None,
        typer.Option(
            "--range",
            help="The commits it brought, from..to (refs or shas: v1.4.1..HEAD), or one commit; "
            "listed from the checkout at --repo-dir.",
        ),
    ] = None,
    repo_dir: Annotated[Path, typer.Option(help="The checkout --range is read in.")] = Path("."),
    when: Annotated[
        str | None, typer.Option("--time", help="When it went out (ISO 8601; default: now).")
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            envvar="TRACEHOUND_INGEST_URL",
            help="Ingest's address (default: the running stack's, else http://127.0.0.1:8080).",
        ),
    ] = None,
) -> None:
    """Announce a deploy from a CI pipeline: a new error group's message then says how long
    after which deploy it was first seen, and whether its suspect commit came with it."""
    from producers.deploy import (
        DeployRefused,
        IngestUnreachable,
        announce,
        deploy_body,
        range_commits,
    )
    from shared.index.git import GitUnavailable

    settings = load_settings()
    found = None
    if commits:
        try:
            found = range_commits(repo_dir, commits)
        except GitUnavailable as exc:
            say = f"error: --range {commits!r} in {repo_dir}: {exc}"  # git's words: not markup
            err.print(say, highlight=False, markup=False)
            raise typer.Exit(2) from exc
        if found.note:
            err.print(f"warning: {found.note}", highlight=False, markup=False)
    url = url or _ingest_url(settings)
    token = settings.ingest_token.get_secret_value() if settings.ingest_token else None
    body = deploy_body(
        service=service, version=version, environment=environment, commits=found, when=when
    )
    try:
        reply = announce(url, token, body)
    except DeployRefused as exc:
        err.print(f"error: ingest refused the deploy: {exc}", highlight=False, markup=False)
        raise typer.Exit(1) from exc
    except IngestUnreachable as exc:
        err.print(f"error: ingest did not answer: {exc}", highlight=False, markup=False)
        raise typer.Exit(2) from exc
    listed = f", {len(found.shas)} commits" if found is not None and found.shas else ""
    out.print(
        f"deploy {reply.get('id')} of {service} {version}{listed}: "
        + ("recorded" if reply.get("new") else "already recorded"),
        highlight=False,
        markup=False,
    )


@cli.command()
def watch(
    path: Annotated[Path, typer.Argument(help="Repository root to watch.")],
    repo: Annotated[str, typer.Option("--repo", help="Repository name (one index per repo).")],
    polling: Annotated[
        bool, typer.Option("--polling", help="Poll instead of inotify (network, Docker mounts).")
    ] = False,
    include: Annotated[list[str] | None, typer.Option(help="Only paths matching (glob).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(help="Skip paths matching (glob).")] = None,
) -> None:
    """Keep the index in step with the source: reconcile, then re-index files as they change."""
    from producers.watcher import run

    if not path.is_dir():
        err.print(
            f"[red]error:[/red] watch path {str(path)!r} does not exist or is not a directory"
        )
        raise typer.Exit(2)
    settings = load_settings()
    err.print(f"watching {path} as {repo!r}" + (" (polling)" if polling else ""), highlight=False)
    try:
        run(settings, path, repo, polling=polling, include=include, exclude=exclude)
    except PermanentError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc


@cli.command()
def tail(
    patterns: Annotated[list[str], typer.Argument(help="Log files or globs ('**' allowed).")],
    service: Annotated[str, typer.Option(help="Service that writes these logs.")],
    repo: Annotated[str | None, typer.Option(help="Indexed repo (default: the service).")] = None,
    from_start: Annotated[
        bool, typer.Option("--from-start", help="Read files present at start from the top.")
    ] = False,
    state_dir: Annotated[Path | None, typer.Option(help="Where checkpoints are kept.")] = None,
) -> None:
    """Follow log files like tail -F and enqueue every error record (stack traces grouped)."""
    from producers.tailer import run

    settings = load_settings()
    err.print(f"tailing {' '.join(patterns)} for {service}", highlight=False)
    run(settings, patterns, service=service, repo=repo, from_start=from_start, state_dir=state_dir)


@cli.command("slack-listen")
def slack_listen() -> None:
    """Receive button presses from Slack over Socket Mode (TRACEHOUND_SLACK_APP_TOKEN, xapp-…):
    no public URL needed; each press is acked at once and applied by the notify worker."""
    from producers.slack_listen import run

    settings = load_settings()
    if settings.slack_app_token is None:
        err.print("[red]error:[/red] set TRACEHOUND_SLACK_APP_TOKEN (an xapp-… app-level token)")
        raise typer.Exit(2)
    err.print("listening for Slack actions over Socket Mode", highlight=False)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the client closes on the way out
        run(settings)


@cli.command("eval")
def eval_(
    cases: Annotated[
        list[Path] | None,
        typer.Option(help="Cases, one JSON object a line (bench format); repeat for more files."),
    ] = None,
    corpora: Annotated[
        Path | None,
        typer.Option(
            help="Holds each case's corpus as <pypi_name>-<pypi_version>/, or as "
            "<owner>__<name>@<commit[:12]>/ for a git case (benchmarks/cases/fetch_git_corpus.py)."
        ),
    ] = None,
    feedback: Annotated[
        bool,
        typer.Option(
            "--feedback",
            help="Measure the live index (Chroma + BM25 in Redis) on the team's Right file / "
            "Wrong file answers from Slack: Recall@k per service, thresholds suggested.",
        ),
    ] = False,
    export: Annotated[
        Path | None,
        typer.Option(help="With --feedback: also write the labelled cases here (JSON lines)."),
    ] = None,
    modes: Annotated[
        list[str] | None,
        typer.Option(
            "--modes",
            help="Modes to run (default: all base modes; +rerank with a backend; a mode "
            "+followup adds the simulated lookups, e.g. all+followup).",
        ),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write summary and per-case results here.")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N cases.")] = None,
    embedder: Annotated[
        str, typer.Option(help="simulator, or sentence-transformers (the eval extra).")
    ] = "simulator",
    max_seq_length: Annotated[
        int | None, typer.Option(help="Tokens read per text by the sentence-transformers model.")
    ] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Chunk-embedding cache (default DATA_DIR/eval-cache).")
    ] = None,
    cv: Annotated[
        str | None,
        typer.Option(
            "--cv",
            help="'repo': also choose the fusion constants by leave-one-repo-out and print "
            "in-sample and cross-validated scores side by side (with a +followup mode, the "
            "lookups' weight too).",
        ),
    ] = None,
    vector_store: Annotated[
        str,
        typer.Option(
            "--vector-store",
            help="Where the vector signal searches: memory (exact, the default), or chroma or "
            "pgvector (the configured server; each corpus written to it once), to compare the "
            "stores' approximate indexes on the same cases and embeddings.",
        ),
    ] = "memory",
    explain: Annotated[
        str | None,
        typer.Option(
            "--explain",
            help="A case id: print its first candidate files with every feature a learned "
            "ranker sees, and (with the eval extra) the scores of the ranker fit on the other "
            "repositories' cases.",
        ),
    ] = None,
    save_ranker: Annotated[
        Path | None,
        typer.Option(
            "--save-ranker",
            help="With --cv repo: write the learned ranker fit on every case here (a model "
            "for TRACEHOUND_RANKER_MODEL).",
        ),
    ] = None,
) -> None:
    """Measure retrieval on bug-localization cases: file-level Recall@1/3/5/10 and MRR per mode."""
    from shared.devtools.eval_command import EvalOptions, run_eval_command

    options = EvalOptions(
        cases=cases or [],
        corpora=corpora,
        feedback=feedback,
        export=export,
        modes=modes or [],
        json_out=json_out,
        limit=limit,
        embedder=embedder,
        max_seq_length=max_seq_length,
        cache_dir=cache_dir,
        cv=cv,
        vector_store=vector_store,
        explain=explain,
        save_ranker=save_ranker,
    )
    raise typer.Exit(run_eval_command(load_settings(), options, out=out, err=err))


@cli.command()
def demo(
    repo_path: Annotated[Path, typer.Option(help="Service to index.")] = Path(
        "tests/data/sample-service"
    ),
    error: Annotated[Path, typer.Option(help="Error to analyze.")] = Path(
        "tests/data/sample-error.txt"
    ),
) -> None:
    """Run everything locally: private Redis, Chroma and workers; index; analyze; print."""
    from shared.devtools.demo import run_demo

    settings = load_settings()
    raise typer.Exit(run_demo(settings, repo_path, error, console=out, err=err))


@vectors_cli.command("copy")
def vectors_copy(
    source: Annotated[str, typer.Option("--from", help="chroma or pgvector.")],
    target: Annotated[str, typer.Option("--to", help="chroma or pgvector.")],
    repo: Annotated[
        list[str] | None, typer.Option("--repo", help="Only this repo (repeatable); default all.")
    ] = None,
) -> None:
    """Copy indexed chunks with their vectors from one store to the other, without embedding
    again (TRACEHOUND_CHROMA_URL and TRACEHOUND_PG_URL say where each is). Run it again after
    an interruption: chunks are written by id. Then set TRACEHOUND_VECTOR_STORE to the target."""
    import redis

    from shared.core.errors import TracehoundError
    from shared.index.corpus import RedisCorpus
    from shared.index.transfer import copy_vectors
    from shared.index.vectors import open_vector_store

    kinds = ("chroma", "pgvector")
    if source not in kinds or target not in kinds or source == target:
        err.print("[red]error:[/red] --from and --to are chroma and pgvector, one each")
        raise typer.Exit(2)
    settings = load_settings()
    stores = [
        open_vector_store(settings.model_copy(update={"vector_store": k})) for k in (source, target)
    ]

    def progress(name: str, done: int) -> None:
        err.print(f"{name}: {done} chunks sent", highlight=False, markup=False)

    corpus = RedisCorpus(
        redis.Redis.from_url(settings.redis_url, socket_connect_timeout=5, socket_timeout=30)
    )
    try:
        copied = copy_vectors(
            stores[0], stores[1], repo or None, progress=progress, texts=corpus.texts
        )
    except (TracehoundError, redis.RedisError) as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from exc
    bad = 0
    for c in copied:
        same = c.target >= c.source
        bad += not same
        out.print(
            f"{c.repo}: {c.chunks} chunks copied; {source} holds {c.source}, {target} {c.target}"
            + ("" if same else "  (the target holds fewer: copy again)"),
            highlight=False,
            markup=False,
        )
    if not copied:
        err.print(f"nothing to copy: {source} holds no repo", highlight=False)
    raise typer.Exit(1 if bad else 0)


@sourcemaps_cli.command("add")
def sourcemaps_add(
    directory: Annotated[Path, typer.Argument(help="A build's output: bundles and their maps.")],
    repo: Annotated[str, typer.Option("--repo", help="The repo whose code the maps point into.")],
    release: Annotated[str, typer.Option("--release", help="The release the build deploys.")],
) -> None:
    """Hand over a release's source maps (from CI, before or as it deploys): minified frames of
    its bundles are mapped to the original files and lines from then on. No upload of the
    bundles themselves is needed; the maps stay in tracehound's Redis."""
    from shared.core.domain import one_line

    name = one_line(release, 128)
    if not name:
        err.print("[red]error:[/red] --release must name the release")
        raise typer.Exit(2)
    if not directory.is_dir():
        err.print(f"[red]error:[/red] {str(directory)!r} is not a directory", highlight=False)
        raise typer.Exit(2)
    if not _store_maps(load_settings(), repo, directory, name):
        err.print(f"[red]error:[/red] no usable source map under {str(directory)!r}")
        raise typer.Exit(1)


@sourcemaps_cli.command("list")
def sourcemaps_list(
    repo: Annotated[str, typer.Option("--repo", help="The repo whose maps to list.")],
) -> None:
    """The releases (and the indexed tree) with stored source maps, newest first."""
    from datetime import UTC, datetime

    import redis

    from shared.intake.sourcemap_store import catalog

    settings = load_settings()
    r = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=5, socket_timeout=30)
    releases: dict[str, tuple[int, int]] = {}
    for b in catalog(r, repo):
        count, at = releases.get(b.release, (0, 0))
        releases[b.release] = (count + 1, max(at, b.added_ms))
    if not releases:
        out.print(f"no source maps for {repo!r}", highlight=False, markup=False)
    for release, (count, at) in sorted(releases.items(), key=lambda kv: -kv[1][1]):
        when = datetime.fromtimestamp(at / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        out.print(
            f"{release or '(indexed tree)'}  {count} bundles  added {when}",
            highlight=False,
            markup=False,
        )


def main() -> None:
    # Before anything builds a client; what this command starts inherits it.
    switch_off_telemetry(os.environ)
    # Log lines carry their fields (path, error, event id): "tail.open_failed" alone says nothing.
    logs.configure(os.environ.get("TRACEHOUND_LOG_LEVEL", "WARNING"))
    cli()


if __name__ == "__main__":
    main()
