"""``tracehound eval``: what runs behind the command (producers/cli.py declares its options
and imports this module only when the command runs).

Retrieval measured on bug-localization cases (shared/devtools/eval.py), cross-validated by
repository (crossval.py), or on the team's own Right file / Wrong file answers
(feedback_eval.py); the tables and JSON it prints.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from rich.console import Console

from shared.core.errors import PermanentError, TransientError
from shared.core.settings import Settings
from shared.devtools.crossval import (
    DEPTHS,
    SYMBOL_CAPS,
    Collector,
    cv_json,
    followup_cv,
    leave_one_repo_out,
    render_repos,
)
from shared.devtools.crossval import render as render_cv
from shared.devtools.eval import (
    BASE_MODES,
    FOLLOWUP_SUFFIX,
    KS,
    LEARNED_MODE,
    MODE_SIGNALS,
    RERANK_SUFFIX,
    EmbeddingCache,
    base_mode,
    calibration_lines,
    language_table,
    load_cases,
    make_embedder,
    render_table,
    run_eval,
)
from shared.devtools.feedback_eval import run_feedback_eval
from shared.devtools.ranker import CaseRows, RankerCv, case_rows, preferred
from shared.devtools.ranker import explain as ranker_explain
from shared.devtools.ranker import fit_pairwise as ranker_fit
from shared.devtools.ranker import leave_one_repo_out as ranker_cv
from shared.index.corpus import RedisCorpus
from shared.index.vectors import open_vector_store
from shared.models.embedder import OllamaEmbedder
from shared.models.reranker import HttpReranker
from shared.notify import feedback
from shared.retrieve.hybrid import Fusion
from shared.retrieve.keywords import BM25Index
from shared.retrieve.priors import PathPrior
from shared.retrieve.ranker import LinearModel, load_model


@dataclass(frozen=True)
class EvalOptions:
    cases: list[Path]
    corpora: Path | None
    feedback: bool
    export: Path | None
    modes: list[str]
    json_out: Path | None
    limit: int | None
    embedder: str
    max_seq_length: int | None
    cache_dir: Path | None
    cv: str | None
    vector_store: str = "memory"  # or chroma, pgvector: the vector signal from that store
    explain: str | None = None  # a case id: its candidates' features and scores
    save_ranker: Path | None = None  # with cv: write the ranker fit on every case here


def run_eval_command(settings: Settings, opts: EvalOptions, *, out: Console, err: Console) -> int:
    """The command's work; its exit code (2: bad arguments or a failed run)."""
    if opts.feedback:
        return _eval_feedback(settings, opts.export, opts.json_out, out=out, err=err)
    if not opts.cases or opts.corpora is None:
        err.print("[red]error:[/red] --cases and --corpora are required (or use --feedback)")
        return 2
    reranker = _reranker(settings)
    wanted = [m for arg in (opts.modes or []) for m in arg.split(",") if m.strip()]
    if not wanted:
        wanted = list(BASE_MODES)
        if reranker is not None:
            wanted += [m + RERANK_SUFFIX for m in BASE_MODES]
    unknown = [m for m in wanted if base_mode(m) not in MODE_SIGNALS]
    if unknown:
        err.print(f"[red]unknown mode(s) {unknown}; choose from {', '.join(BASE_MODES)}")
        return 2
    if reranker is None and any(m.endswith(RERANK_SUFFIX) for m in wanted):
        err.print("[red]+rerank modes need TRACEHOUND_RERANK_BACKEND and TRACEHOUND_RERANK_URL")
        return 2
    try:
        case_list = [c for path in opts.cases for c in load_cases(path)][: opts.limit]
        counted = collections.Counter(c.id for c in case_list)
        repeated = sorted(i for i, n in counted.items() if n > 1)
        if repeated:
            raise ValueError(f"case ids in more than one place: {', '.join(repeated)}")
        if opts.explain and opts.explain not in counted:
            raise ValueError(f"--explain {opts.explain!r}: no such case among --cases")
        emb = make_embedder(opts.embedder, max_seq_length=opts.max_seq_length)
        ranker, wanted = _ranker_for(settings, wanted, opts, err)
    except (OSError, ValueError, PermanentError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        return 2
    if opts.cv not in (None, "repo"):
        err.print(f"[red]--cv {opts.cv}: only 'repo' (leave one repository out) is known")
        return 2
    if opts.save_ranker and not opts.cv:
        err.print("[red]--save-ranker needs --cv repo (the model is fit there)")
        return 2
    if (opts.cv or opts.explain) and "all" not in wanted:
        wanted.append("all")  # the signals the cross-validation re-fuses come from it
    collector = Collector(followup=any(m.endswith(FOLLOWUP_SUFFIX) for m in wanted))
    if opts.vector_store not in ("memory", "chroma", "pgvector"):
        err.print(f"[red]--vector-store {opts.vector_store}: memory, chroma or pgvector")
        return 2
    store = (
        None
        if opts.vector_store == "memory"
        else open_vector_store(settings.model_copy(update={"vector_store": opts.vector_store}))
    )
    cache = EmbeddingCache((opts.cache_dir or settings.data_dir / "eval-cache") / "vectors.sqlite")
    try:
        report = run_eval(
            case_list,
            opts.corpora,
            embedder=emb,
            modes=wanted,
            reranker=reranker,
            cache=cache,
            depth=settings.candidate_depth,
            rrf_k=settings.rrf_k,
            prior=PathPrior.from_settings(settings),
            shown=settings.top_k,
            on_event=lambda msg: err.print(msg, highlight=False),
            on_case=collector if opts.cv or opts.explain else None,
            collect_depth=max(*DEPTHS, settings.candidate_depth),
            collect_caps=SYMBOL_CAPS,
            followup_rounds=settings.analysis_rounds,
            followup_budget=settings.analysis_tool_chars,
            vector_store=store,
            ranker=ranker,
        )
    except (PermanentError, TransientError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        return 2
    finally:
        cache.close()
    _print_report(report, None if opts.cv else opts.json_out, out=out, err=err)
    return _print_after(settings, opts, collector, report.to_json(), out=out, err=err)


def _ranker_for(
    settings: Settings, wanted: list[str], opts: EvalOptions, err: Console
) -> tuple[LinearModel | None, list[str]]:
    """The model the learned mode orders with (none: that mode not asked for). With no model
    yet and --save-ranker, which writes one, the learned mode is left out instead of failing."""
    if not any(base_mode(m) == LEARNED_MODE for m in wanted):
        return None, wanted
    try:
        return load_model(settings.ranker_model), wanted
    except ValueError as exc:
        if not opts.save_ranker:
            raise
        err.print(f"the learned mode is left out: {exc}", highlight=False, markup=False)
        return None, [m for m in wanted if base_mode(m) != LEARNED_MODE]


def _print_after(
    settings: Settings,
    opts: EvalOptions,
    collector: Collector,
    summary: dict[str, Any],
    *,
    out: Console,
    err: Console,
) -> int:
    """What the collected signals show: the cross-validation, one case explained; the exit
    code (2: a ranker asked for with --save-ranker could not be fit)."""
    rc = 0
    if opts.cv:
        rc = _print_cv(settings, collector, summary, opts, out=out, err=err)
    if opts.explain:
        _print_explain(settings, collector, opts.explain, out=out, err=err)
    return rc


def _ranker_rows(settings: Settings, collector: Collector) -> list[CaseRows]:
    base = Fusion(rrf_k=settings.rrf_k)
    prior = PathPrior(settings.demote_paths, settings.demote_weight)
    return case_rows(collector.cases, base, prior, settings.candidate_depth)


def _print_explain(
    settings: Settings, collector: Collector, case_id: str, *, out: Console, err: Console
) -> None:
    """The case's first candidates with their features; with scikit-learn (the eval extra),
    scored by the kind of model the package ships (pairwise) fit on the other repositories'
    cases, as its fold would."""
    rows = _ranker_rows(settings, collector)
    [row] = [r for r in rows if r.case_id == case_id]
    model = None
    others = [r for r in rows if r.repo != row.repo]
    try:
        model = ranker_fit(others) if others else None
    except ImportError:
        err.print("no scikit-learn (the eval extra): features only, no learned scores")
    except ValueError as exc:
        err.print(f"no learned scores: {exc}", highlight=False, markup=False)
    if model is not None:
        out.print(
            f"scored by the pairwise ranker fit without {row.repo} ({len(others)} cases)",
            highlight=False,
        )
    out.print(ranker_explain(model, row))


def _eval_feedback(
    settings: Settings, export: Path | None, json_out: Path | None, *, out: Console, err: Console
) -> int:
    """``eval --feedback``: the team's labelled answers, searched on the live index."""
    r = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=5, socket_timeout=30)
    cases = feedback.load(r)
    if export:
        export.parent.mkdir(parents=True, exist_ok=True)
        export.write_text(feedback.as_lines(cases), "utf-8")
        err.print(f"wrote {len(cases)} cases to {export}", highlight=False)
    if not cases:
        err.print("no feedback yet: press Right file / Wrong file on a message first")
        return 1
    s = settings
    keywords = BM25Index(RedisCorpus(r))
    try:
        report = run_feedback_eval(
            cases,
            vectors=open_vector_store(s),
            keywords=keywords.current,
            embedder=OllamaEmbedder(
                s.embed_base_url, s.embed_model, timeout=s.embed_timeout, batch_size=1
            ),
            query_prefix=s.embed_query_prefix,
            reranker=_reranker(s),
            depth=s.candidate_depth,
            rrf_k=s.rrf_k,
            prior=PathPrior.from_settings(s),
            shown=s.top_k,
        )
    except PermanentError as exc:
        err.print(f"[red]error:[/red] {exc}")
        return 2
    _print_report(report, json_out, out=out, err=err, rows="service")  # a row per service
    return 0


def _print_report(
    report: Any, json_out: Path | None, *, out: Console, err: Console, rows: str = "mode"
) -> None:
    """An eval report's table, suggested thresholds and skipped cases; the JSON if asked."""
    table = render_table(report)
    table.columns[0].header = rows
    out.print(table)
    if len(report.by_language) > 1 and report.modes:
        out.print(language_table(report, "all" if "all" in report.modes else report.modes[0]))
    for line in calibration_lines(report):
        out.print(line, highlight=False)
    for skipped in report.skipped:
        err.print(f"skipped {skipped['id']}: {skipped['reason']}", highlight=False)
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report.to_json(), indent=1), "utf-8")
        err.print(f"wrote {json_out}", highlight=False)


def _reranker(settings: Settings) -> Any:
    return HttpReranker.from_settings(settings)


def _print_cv(
    settings: Settings,
    collector: Collector,
    summary: dict[str, Any],
    opts: EvalOptions,
    *,
    out: Console,
    err: Console,
) -> int:
    """The leave-one-repo-out tables (fusion, each repository, the follow-up mode); the JSON
    with every case's held-out scores, and the ranker fit on every case, if asked."""
    json_out = opts.json_out
    base = Fusion(rrf_k=settings.rrf_k)
    crossed = leave_one_repo_out(
        collector.cases, base, settings.demote_paths, settings.demote_weight,
        settings.candidate_depth,
    )  # fmt: skip
    rows = list(crossed.rows)
    learned: list[RankerCv] = []
    rc = 0
    ranker_rows = _ranker_rows(settings, collector)
    for pairwise in (False, True):
        try:
            learned.append(ranker_cv(ranker_rows, pairwise=pairwise))
        except (ImportError, ValueError) as exc:
            why = "needs scikit-learn (the eval extra)" if isinstance(exc, ImportError) else exc
            which = "pairwise" if pairwise else "learned"
            err.print(f"the {which} ranker is not scored: {why}", highlight=False, markup=False)
    for one in learned:
        rows += one.rows()
    if opts.save_ranker and not learned:
        rc = 2  # asked for a model, and none was written
    elif opts.save_ranker:
        # the plan's rule when both were scored, else the one that was
        shipped = preferred(*learned) if len(learned) == 2 else learned[0]
        opts.save_ranker.parent.mkdir(parents=True, exist_ok=True)
        opts.save_ranker.write_text(shipped.model.to_json(), "utf-8")
        err.print(
            f"wrote the {shipped.name} fit on every case to {opts.save_ranker} (held out, "
            "the pairwise model is kept only if its mean of Recall@1/3/5/10 and MRR is "
            "above the pointwise one's with Recall@5 not below)",
            highlight=False,
        )
    out.print(render_cv(crossed, rows))
    out.print(f"chosen on every case: {crossed.in_sample.label()}", highlight=False)
    out.print(render_repos(crossed))
    for repo, chosen in crossed.chosen.items():
        n = crossed.repos[repo]
        cases = f"{n} case{'s' if n != 1 else ''}"
        out.print(f"held out {repo} ({cases}): {chosen.label()}", highlight=False)
    if collector.followup:
        followed = followup_cv(collector.cases, crossed, settings.demote_paths)
        out.print(render_cv(crossed, followed.rows, "all+followup"))
        weights = ", ".join(f"{r} {w:g}" for r, w in followed.chosen.items())
        out.print(f"lookup weight chosen with each repository held out: {weights}")
    if json_out:
        cv = cv_json(crossed, collector.cases)
        for one in learned:
            cv = with_ranker(cv, one)
        summary = summary | {"cv": cv}
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(summary, indent=1), "utf-8")
        err.print(f"wrote {json_out}", highlight=False)
    return rc


def with_ranker(cv: dict[str, Any], learned: RankerCv) -> dict[str, Any]:
    """The cross-validation's JSON with a learned ranker's rows and each case's held-out scores
    (``learned_held_out``, or ``pairwise_held_out`` for the pairwise model) added."""
    names = [f"recall@{k}" for k in KS] + ["mrr"]
    rows = dict(cv["rows"]) | {
        label: dict(zip(names, m, strict=True)) for label, m in learned.rows()
    }
    key = f"{learned.name.split()[0]}_held_out"
    cases = [
        c | {key: dict(zip(names, m, strict=True))}
        for c, m in zip(cv["cases"], learned.held_out, strict=True)
    ]
    return cv | {"rows": rows, "cases": cases}
