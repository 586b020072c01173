"""``tracehound demo``: the whole pipeline on this machine, end to end, then torn down."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from shared.core.egress import destinations
from shared.core.pipeline import sender_app
from shared.core.settings import Settings
from shared.devtools.sample_history import BUG_SUBJECT, build_sample_repo
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.groups.submit import intake_for
from shared.index.history import HistoryBounds
from shared.index.reindex import index_repository
from shared.intake.events import parse_event
from shared.models.health import has_model, ollama_models
from shared.notify.notifiers import render_console
from shared.stack.localstack import README_UBATCH, local_stack

DEMO_REPO = "sample-service"
DEMO_SERVICE = "shop-api"


def stack_fields(env: Mapping[str, str]) -> dict[str, str]:
    """The TRACEHOUND_* variables of ``env`` as Settings field names."""
    prefix = "TRACEHOUND_"
    return {k.removeprefix(prefix).lower(): v for k, v in env.items() if k.startswith(prefix)}


def run_demo(
    settings: Settings, repo_path: Path, error_file: Path, *, console: Console, err: Console
) -> int:
    if not repo_path.is_dir() or not error_file.is_file():
        err.print(
            f"[red]demo needs {repo_path} and {error_file}: run it from the repository root[/red]"
        )
        return 2
    workdir = (settings.data_dir / "demo").resolve()
    env: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        models = ollama_models(settings.ollama_url)
        if models is None:
            sim = OllamaSimulator(
                models=[settings.embed_model, settings.llm_model, settings.rerank_model],
                rerank_ubatch=README_UBATCH,
            )
            sim.start()
            stack.callback(sim.stop)
            env |= {
                "TRACEHOUND_OLLAMA_URL": sim.url,
                "TRACEHOUND_RERANK_BACKEND": "llamacpp",
                "TRACEHOUND_RERANK_URL": sim.url,
            }
            err.print(
                Panel(
                    f"No Ollama answers at {settings.ollama_url}.\nUSING THE OLLAMA SIMULATOR "
                    f"({sim.url}): hashed-token embeddings, lexical rerank and a canned analysis "
                    "that cites the best candidate. No real model runs.\nSet TRACEHOUND_OLLAMA_URL "
                    "to a real Ollama for a real analysis.",
                    title="SIMULATED MODELS",
                    style="bold yellow",
                )
            )
        else:
            missing = [
                m for m in (settings.embed_model, settings.llm_model) if not has_model(models, m)
            ]
            if missing:
                err.print(
                    f"[red]the Ollama at {settings.ollama_url} lacks "
                    f"{', '.join(missing)}: run "
                    + "; ".join(f"`ollama pull {m}`" for m in missing)
                    + "[/red]"
                )
                return 1
            err.print(f"using the Ollama at {settings.ollama_url}")
        err.print(f"starting private redis-server, chroma and workers under {workdir} …")
        localstack = stack.enter_context(local_stack(workdir, env))
        # What the workers run with: the private Redis and Chroma, the simulator if used.
        worker_settings = Settings(**settings.model_dump() | stack_fields(localstack.env))
        err.print("the stack contacts these hosts and no others (tracehound config --egress):")
        for destination in destinations(worker_settings):
            err.print(f"  {destination.line()}", highlight=False, markup=False, soft_wrap=True)
        localstack.start_workers()
        app = sender_app(Settings(redis_url=localstack.env["TRACEHOUND_REDIS_URL"]))
        stack.callback(app.close)
        # A checkout with a history, the planted bug arriving in one commit (see the module).
        sample = build_sample_repo(repo_path, workdir / "sample-service")
        err.print(f"indexing {repo_path} (as a git history in {sample.path}) as {DEMO_REPO!r} …")
        report = index_repository(
            app,
            sample.path,
            DEMO_REPO,
            max_bytes=settings.max_file_bytes,
            timeout=600,
            history=HistoryBounds.from_settings(settings),
        )
        err.print(
            f"indexed {report.files} files, {report.chunks} chunks ({report.embedded} "
            f"embedded); skipped: {report.skipped_summary()}; history: {report.history}",
            markup=False,
            highlight=False,
        )
        event = parse_event(
            error_file.read_text(errors="replace"),
            service=DEMO_SERVICE,
            repo=DEMO_REPO,
            max_bytes=settings.max_trace_bytes,
        )
        err.print(f"analyzing {error_file} (event {event.id}) …")
        submitted = intake_for(worker_settings, app).submit(event)
        assert submitted.result is not None  # a fresh private Redis: the group is new
        notification = submitted.result.get(timeout=900)
        console.print(
            Panel(
                Text(render_console(notification["blocks"]).rstrip()),
                title="Slack message",
                expand=False,
            )
        )
        console.print(
            f"delivered to: {notification['destination']}; the chain crossed: "
            + " → ".join(f"{v['stage']}[{v['queue']}]" for v in notification["trail"]),
            highlight=False,
            markup=False,
        )
        console.print(
            f"the planted bug came in with commit {sample.bug_commit[:7]} ({BUG_SUBJECT})",
            highlight=False,
            markup=False,
        )
    return 0
