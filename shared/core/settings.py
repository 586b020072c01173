"""The one settings object: every TRACEHOUND_* variable, built at entry points and passed down."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

# Tests, docs, examples and config: rarely where a production fix lands, so retrieval weighs
# them down (shared/retrieve/priors.py says why). gitignore syntax, on repo-relative paths.
DEFAULT_DEMOTE: tuple[str, ...] = (
    # tests
    "test/",
    "tests/",
    "testing/",
    "__tests__/",
    "spec/",
    "test_*.py",
    "*_test.py",
    "conftest.py",
    "*_test.go",
    "*.test.[jt]s",
    "*.spec.[jt]s",
    "*Test.java",
    "*Tests.java",
    # documentation, examples, benchmarks
    "doc/",
    "docs/",
    "examples/",
    "example/",
    "benchmarks/",
    "asv_benchmarks/",
    "*.rst",
    "*.md",
    "*.txt",
    "CHANGELOG*",
    "CHANGES*",
    "HISTORY*",
    # packaging and configuration
    "setup.py",
    "*.cfg",
    "*.ini",
    "*.toml",
    "*.yml",
    "*.yaml",
    "*.json",
)
DEFAULT_DEMOTE_WEIGHT = 0.15  # chosen by leave-one-repo-out (README, *Cross-validated*)


RerankBackend = Literal["none", "llamacpp", "vllm", "jina", "cohere", "tei", "ollama"]


class Settings(BaseSettings):
    """Effective configuration; ``tracehound config`` prints it with secrets masked."""

    model_config = SettingsConfigDict(env_prefix="TRACEHOUND_", extra="ignore", frozen=True)

    # --- infrastructure ---
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", description="Celery broker, result backend, keyword index."
    )
    chroma_url: str | None = Field(
        "http://127.0.0.1:8000",
        description="Chroma server; required whenever more than one process writes the index.",
    )
    chroma_path: Path | None = Field(
        None, description="Local PersistentClient path, single-process mode only (no chroma_url)."
    )
    vector_store: Literal["chroma", "pgvector"] = Field(
        "chroma",
        description="Where code vectors live: `chroma` (a Chroma server, TRACEHOUND_CHROMA_URL) "
        "or `pgvector` (PostgreSQL with the pgvector extension, TRACEHOUND_PG_URL; the "
        "`pgvector` extra).",
    )
    pg_url: str | None = Field(
        None,
        description="PostgreSQL with pgvector for TRACEHOUND_VECTOR_STORE=pgvector, e.g. "
        "postgresql://tracehound:secret@db:5432/tracehound; tracehound creates and migrates its "
        "own tables (th_schema, th_repos, th_vec_*).",
    )
    data_dir: Path = Field(
        Path(".tracehound"),
        description="Console notifier's file, demo state, the `tracehound up` stack "
        "(`--data-dir`).",
    )

    # --- models ---
    ollama_url: str = Field(
        "http://127.0.0.1:11434",
        description="Ollama; the embed and LLM roles' host unless TRACEHOUND_EMBED_URL or "
        "TRACEHOUND_LLM_URL names another.",
    )
    embed_model: str = Field("nomic-embed-text", description="The embedding model (embed role).")
    llm_model: str = Field("qwen2.5-coder:7b", description="The chat model (LLM role).")
    # nomic-embed-text is trained with these task prefixes; set both to "" for other models.
    embed_query_prefix: str = Field(
        "search_query: ", description="nomic's task prefix for queries; empty for other models."
    )
    embed_document_prefix: str = Field(
        "search_document: ",
        description="nomic's task prefix for indexed chunks; empty for other models.",
    )
    embed_batch_size: int = Field(
        32, ge=1, le=512, description="Texts per embedding request (/api/embed)."
    )
    bulk_embed_chunks: int = Field(
        128,
        ge=1,
        le=5000,
        description="Chunks one index drain embeds and stores at once (several files' worth); "
        "an error's query waits for at most one drain on the embed worker.",
    )
    llm_num_ctx: int = Field(
        16384,
        ge=2048,
        description="The chat model's context window in tokens, sent with every call (a change "
        "makes Ollama reload the model). Prompts are fitted to it less the reply's 2048: at "
        "16384 the error, about 16 kB of code and the tool rounds fit; qwen2.5-coder:7b holds "
        "32768.",
    )
    llm_temperature: float = Field(0.1, description="The chat model's sampling temperature.")
    embed_url: str | None = Field(None, description="Ollama for embeddings; default ollama_url.")
    llm_url: str | None = Field(None, description="Ollama for the LLM; default ollama_url.")
    rerank_backend: RerankBackend = Field(
        "none",
        description="Rerank server API: llamacpp, vllm, jina, cohere, tei, ollama; none: the "
        "fused order, no rerank.",
    )
    rerank_url: str | None = Field(
        None, description="Rerank server; required with a rerank backend."
    )
    rerank_model: str = Field(
        "bge-reranker-v2-m3", description="Model the rerank server is asked for."
    )
    rerank_api_key: SecretStr | None = Field(
        None, description="Bearer token sent to the rerank server (hosted rerankers)."
    )
    rerank_max_tokens: int = Field(
        2048,
        ge=64,
        description="Tokens of one query+file pair the rerank server takes: llama.cpp's "
        "-ub/--ubatch-size (512 unless set; the README's command sets 2048), vLLM's "
        "max_model_len. Files are cut to fit; a server that refuses a pair as too large "
        "teaches the worker its real size.",
    )
    rerank_batch_size: int = Field(
        32,
        ge=1,
        description="Files per request to TEI: its --max-client-batch-size (32 by default).",
    )

    # --- timeouts (seconds) and retries ---
    embed_timeout: float = Field(60.0, description="Seconds: timeout of every embedding call.")
    rerank_timeout: float = Field(30.0, description="Seconds: timeout of every rerank call.")
    llm_timeout: float = Field(300.0, description="Seconds: timeout of every chat model call.")
    chroma_timeout: float = Field(30.0, description="Seconds: timeout of every Chroma call.")
    pg_timeout: float = Field(
        30.0, gt=0, description="Seconds: connect and statement timeout of every pgvector call."
    )
    slack_timeout: float = Field(30.0, description="Seconds: timeout of every Slack call.")
    stage_max_retries: int = Field(3, ge=0, description="Retries of a transient stage failure.")
    redelivery_after: int = Field(
        30,
        ge=10,
        description="Seconds after which a task held by a worker that died is handed out again "
        "(live workers renew what they hold every quarter of it).",
    )
    retry_backoff_max: int = Field(60, ge=1, description="Cap of the exponential retry delay.")

    # --- model hosts: one model active per machine, under a Redis lease ---
    host_leases: bool = Field(True, description="Off: every model worker calls its host freely.")
    lease_ttl: float = Field(15.0, gt=0.5, description="A dead holder's lease expires after this.")
    lease_max_tasks: int | None = Field(
        None,
        ge=1,
        description="Fairness: tasks per hold when others wait, if set; by default host time "
        "alone bounds a hold (TRACEHOUND_LEASE_MAX_SECONDS).",
    )
    lease_max_seconds: float = Field(30.0, gt=0, description="Fairness: seconds per hold likewise.")
    lease_idle_release: float = Field(1.0, gt=0, description="Release when no task follows.")

    metrics_port: int | None = Field(
        None, description="Serve Prometheus /metrics from each worker on this port."
    )
    metrics_host: str = Field(
        "127.0.0.1",
        description="Address /metrics listens on: loopback unless a scraper on another host "
        "needs it (compose sets 0.0.0.0 inside its network).",
    )
    metrics_max_services: int = Field(
        50,
        ge=1,
        description="Distinct service names a process labels its error counts with; later "
        "ones are counted as `other` (senders choose the names).",
    )
    task_events: bool = Field(
        False,
        description="Workers publish Celery task events from the start (Flower turns them on "
        "by itself); each costs a Redis PUBLISH per task state.",
    )

    # --- retrieval ---
    # 100 (from 50): the leave-one-repo-out choice in every fold on 76 dev cases, and the
    # choice on all 112 (README, *Cross-validated*).
    candidate_depth: int = Field(
        100, ge=1, le=1000, description="Retrieval depth: candidates per retriever."
    )
    top_k: int = Field(5, ge=1, le=50, description="Files kept after rerank.")
    rrf_k: int = Field(60, ge=1, description="Reciprocal rank fusion's constant k.")
    demote_paths: list[str] = Field(
        default_factory=lambda: list(DEFAULT_DEMOTE),
        description="gitignore patterns of tests, docs, examples: rarely where a fix lands.",
    )
    demote_weight: float = Field(
        DEFAULT_DEMOTE_WEIGHT, ge=0, le=1, description="Their files' score is multiplied by this."
    )

    # The learned ranker beat the cross-validated fusion held out (every cut, 112 dev cases,
    # all-MiniLM-L6-v2: docs/benchmarks.md, *Learned ranker*), the plan's condition to be the
    # default (benchmarks/cases/README.md); on all 199 it still does on the mean and at R@5
    # (*Every case together*).
    ranker: Literal["learned", "fusion"] = Field(
        "learned",
        description="How the fused files are ordered: `learned` (a logistic regression over "
        "each file's signals, shared/retrieve/ranker.py) or `fusion` (the weighted reciprocal "
        "rank sum alone, the reference it falls back to).",
    )
    ranker_model: Path | None = Field(
        None,
        description="A ranker model of your own (`tracehound eval … --cv repo --save-ranker "
        "FILE`); default: the one shipped, fit on the dev cases with all-MiniLM-L6-v2.",
    )

    keyword_cache: bool = Field(
        True,
        description="Keep keyword segments as files that every retrieving process on the "
        "machine maps and shares (off: each process holds its own copy).",
    )
    keyword_cache_dir: Path | None = Field(
        None, description="Where those files live (default: DATA_DIR/keyword-cache)."
    )

    # --- indexing ---
    chunk_lines: int = Field(60, ge=5, description="Chunking: lines of one window.")
    chunk_overlap: int = Field(10, ge=0, description="Chunking: lines two windows share.")
    chunk_max_chars: int = Field(
        6000, ge=200, description="Characters of one chunk; a longer one is cut with a marker."
    )
    max_file_bytes: int = Field(
        1_000_000, ge=1, description="Larger files are not indexed (skipped with a log line)."
    )
    max_trace_bytes: int = Field(
        64_000,
        ge=1000,
        description="Longer traces are trimmed, keeping the head and the tail, with a marker.",
    )
    # --- code history (shared/index/history.py): read from git by index and watch ---
    history: bool = Field(True, description="Record git history when indexing a checkout.")
    history_since_days: int = Field(
        90, ge=1, description="Commits older than HEAD's time minus this are not read."
    )
    history_max_files: int = Field(200, ge=0, description="Recently changed files read, at most.")
    history_max_commits: int = Field(5, ge=1, le=50, description="Commits kept per file.")
    history_git_timeout: float = Field(10.0, gt=0, description="Seconds per git call.")
    history_budget: float = Field(60.0, gt=0, description="Seconds for a whole history read.")
    history_hunk_chars: int = Field(1500, ge=200, description="A diff hunk is clipped to this.")

    # --- HTTP ingest ---
    ingest_token: SecretStr | None = Field(
        None, description="Bearer token log shippers must send to POST /v1/events."
    )
    ingest_max_body_bytes: int = Field(
        10_000_000,
        ge=1000,
        description="HTTP ingest body limit, also after decompression; more is a 413.",
    )
    ingest_max_records: int = Field(
        10_000, ge=1, description="Records per request; more is a 413 (split the batch)."
    )
    ingest_max_backlog: int = Field(
        500,
        ge=1,
        description="Messages waiting for the intake worker (each one request's batch, or up to "
        "16 queued together) past which POST /v1/events answers 503 with Retry-After (shippers "
        "retry) instead of letting the backlog grow.",
    )
    ingest_linger: float = Field(
        0.005,
        ge=0,
        le=1,
        description="Seconds a checked batch waits for others to share its intake message while "
        "messages wait for the intake worker (none wait: it is queued at once). The worker's "
        "consumer pays three Redis round trips per message, whatever it holds: in a storm of "
        "100-event requests, a message each was the bottleneck. 0: no wait (requests that "
        "arrive while the last message is on its way to Redis still share the next one).",
    )
    ingest_max_lag: float = Field(
        1.2,
        ge=0,
        description="Seconds a batch accepted now would wait for the intake worker (the queue "
        "over the busy workers' pace, or how long they took nothing while batches waited) past "
        "which POST /v1/events answers 503 with Retry-After (shippers retry): what is accepted "
        "is counted within about this on any machine. Keep it above Retry-After (1 s), or the "
        "queue runs dry while shippers wait. 0: no bound but TRACEHOUND_INGEST_MAX_BACKLOG.",
    )
    ingest_read_timeout: float = Field(
        30.0, gt=0, description="Seconds a request body may take to arrive; then a 408."
    )
    max_deferred: int = Field(
        5000,
        ge=1,
        description="Groups that may wait in the deferred backlog; past it the least frequent "
        "are dropped (their events stay counted).",
    )
    deferred_ttl: float = Field(
        3600.0,
        gt=0,
        description="Seconds a group may wait in the deferred backlog before it is dropped.",
    )
    service_repos: Annotated[dict[str, list[str]], NoDecode] = Field(
        default_factory=dict,
        description="Which indexed repos each service's records may name "
        "('shop-api=shop,billing-*=billing|billing-legacy', or JSON): when set, a record "
        "naming a repo its service may not gets the service's first repo (its own name when it "
        "has none). Unset: a record names any repo. The producers' own --repo and the Sentry "
        "project map are configuration, not claims.",
    )
    ingest_allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Web origins (https://app.example.com, comma-separated) whose pages may "
        "send to ingest, for a browser Sentry SDK; a request from any other page is refused.",
    )
    ingest_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host names ingest answers to (comma-separated); none set: localhost, "
        "127.0.0.1 and ::1 when it listens on loopback (DNS rebinding), any otherwise.",
    )
    sentry_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="DSN public keys Sentry SDKs may send (comma-separated). None set: with "
        "an ingest token the Sentry routes refuse every key (a DSN is often public: it is "
        "never the token); without one (loopback only) any key is accepted.",
    )
    sentry_projects: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="DSN project id -> service or service:repo ('1=shop-api,2=billing:bill', "
        "or a JSON object); with a map, an id not named in it is refused; without one, an "
        "id is its own service.",
    )
    sentry_upstream: str | None = Field(
        None,
        description="A Sentry (or GlitchTip, Bugsink) that gets every Sentry request tracehound "
        "took, unchanged, from a queue in Redis after the SDK's answer: a base URL "
        "(https://sentry.example.com; the SDK's own project id and key go on) or a DSN "
        "(https://<key>@o1.ingest.sentry.io/42; that project and key instead).",
    )
    sentry_upstream_max_bytes: int = Field(
        100_000_000,
        ge=100_000,
        description="Bytes of requests waiting in Redis for the upstream Sentry; past it the "
        "oldest are dropped (counted and logged). At least TRACEHOUND_INGEST_MAX_BODY_BYTES.",
    )
    sentry_upstream_timeout: float = Field(
        10.0, gt=0, description="Seconds: timeout of every request to the upstream Sentry."
    )

    # --- grouping, dedup, safety ---
    group_window: float = Field(
        1800.0, gt=0, description="Seconds: repeats of a group inside it only count."
    )
    deploy_window: float = Field(
        86400.0,
        gt=0,
        description="Seconds: a new group's message names the deploy of its service it came "
        "after when the group was first seen within this long of it (the error's own release "
        "is matched first; see `tracehound deploy`).",
    )
    memory: bool = Field(
        True,
        description="A new group's message names the group analysed before that its error "
        "reads like (exception chain and in-app frames, embedded): who resolved it and the "
        "file on-call confirmed.",
    )
    memory_threshold: float = Field(
        0.95,
        gt=0,
        le=1,
        description="Cosine at which a group analysed before counts as the same bug. Measured "
        "with all-MiniLM-L6-v2 by `python benchmarks/incident_memory.py` on labelled pairs "
        "built from the dev cases: false links 2.3% and 0.0%, recall 0.73 and 0.80 on its two "
        "halves. Another embed model needs its own measurement.",
    )
    memory_days: int = Field(
        90, ge=1, description="Days a delivered group is remembered for `memory`."
    )
    group_update_interval: float = Field(
        60.0, gt=0, description="Seconds between count updates / thread replies per group."
    )
    incident_window: float = Field(
        300.0,
        ge=0,
        description="Seconds: new groups with the same root cause (innermost exception type "
        "and normalized message) inside it form one incident: one Slack message, its most "
        "frequent group analysed first, the rest later by count, threaded under it. 0: off.",
    )
    incident_settle: float = Field(
        3.0,
        ge=0,
        le=20,
        description="Seconds a new incident waits for its groups' counts before its first "
        "analysis starts (the most frequent group's); every error with a root cause may open "
        "one, so this delays a lone error's message too. 0: the first group at once.",
    )
    max_new_groups: int = Field(
        20,
        ge=0,
        description="New analyses started per service per TRACEHOUND_NEW_GROUPS_WINDOW; new "
        "groups over it are counted and wait in the backlog (analysed later, by count, while "
        "the model host is free). 0: no cap.",
    )
    max_new_groups_total: int = Field(
        60,
        ge=0,
        description="New analyses started for all services together per window: naming new "
        "services does not buy more (the ingest credential's cap). 0: no cap.",
    )
    new_groups_window: float = Field(
        600.0, gt=0, description="Seconds: the window of TRACEHOUND_MAX_NEW_GROUPS."
    )
    dedup_ttl: int = Field(
        3600,
        ge=60,
        description="Seconds an event id is remembered: a replay or a shipper's retry within "
        "it counts once (about 150 bytes of Redis per event). Shorter in a storm: see "
        "TRACEHOUND_DEDUP_MAX_IDS.",
    )
    dedup_max_ids: int = Field(
        2_000_000,
        ge=0,
        description="About how many event ids are remembered at a time (150 bytes of Redis "
        "each: 300 MB): in a storm an id is kept this many divided by the ids stored per second "
        "over the last ten seconds, when "
        "that is shorter than TRACEHOUND_DEDUP_TTL. A replay older than that counts again. 0: "
        "no bound.",
    )
    dedup_min_ttl: int = Field(
        60,
        ge=1,
        description="Seconds an event id is remembered however hard the storm: a replay "
        "(a tailer's restart, a shipper's retry) within it still counts once.",
    )
    grouping_config: Path | None = Field(
        None, description="JSON/YAML: per-service in-app path prefixes and custom rules."
    )
    redact: bool = Field(True, description="Redact secrets before embedding, LLM and Slack.")
    redact_extra: list[str] = Field(
        default_factory=list, description="More regexes whose matches are redacted."
    )
    redact_disable: list[str] = Field(
        default_factory=list, description="Names of built-in redaction rules to turn off."
    )

    # --- notification ---
    slack_bot_token: SecretStr | None = Field(
        None, description="Bot token: post with chat.postMessage (needs TRACEHOUND_SLACK_CHANNEL)."
    )
    slack_channel: str | None = Field(
        None,
        description="Channel the bot posts to (an ID, C…; a name is resolved once); where a "
        "message no routing rule matches goes.",
    )
    slack_webhook_url: SecretStr | None = Field(
        None, description="Or an incoming webhook instead of the bot token."
    )
    slack_base_url: str = Field(
        "https://slack.com/api/",
        description="Slack Web API base URL (the Slack simulator stands in for it in tests).",
    )
    slack_app_token: SecretStr | None = Field(
        None,
        description="App-level token (xapp-…, scope connections:write): `tracehound "
        "slack-listen` receives button presses over Socket Mode, no public URL needed.",
    )
    slack_signing_secret: SecretStr | None = Field(
        None,
        description="The Slack app's signing secret: ingest serves POST /slack/actions (the "
        "app's Request URL) and refuses unsigned, wrongly signed or replayed requests.",
    )
    routing: Path | None = Field(
        None,
        description="TOML (or YAML) routing file: service and path globs -> channel or "
        "webhook and owners (shared/notify/routing.py); checked when a worker starts.",
    )
    slack_rerun_interval: float = Field(
        300.0,
        ge=0,
        description='Seconds between two "Analyze again" runs of one group (each is a fresh, '
        "uncached LLM call): a press within it is answered, not run.",
    )
    slack_pace: float = Field(
        1.0, ge=0, description="Seconds between messages to one channel (Slack allows ~1/s)."
    )
    slack_thread_only: bool = Field(
        False, description="A recurrence after the window replies in the first message's thread."
    )
    repo_url_template: str | None = Field(
        None,
        description="Link files: e.g. https://github.com/acme/{repo}/blob/main/{path}"
        "#L{start}-L{end}",
    )
    reanalyze_after: float = Field(
        60.0,
        gt=0,
        description="Seconds between checks whether the model host answers again, for a "
        "message that degraded because it did not (then analysed again, updated in place).",
    )
    min_relevance: float = Field(
        0.2, ge=0, le=1, description="Best rerank score below this: no strongly relevant code."
    )
    language: str = Field(
        "en",
        pattern=r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$",
        description="Language of the analysis' prose and of the message's fixed strings "
        "(`en`, `ko` translated; other codes: prose only).",
    )
    analysis_rounds: int = Field(
        3,
        ge=0,
        le=10,
        description="Tool rounds the model may use to read more code before answering "
        "(search_code, read_file, find_symbol, file_history); 0: one call, no tools.",
    )
    analysis_tool_chars: int = Field(
        6000,
        ge=0,
        description="Characters of tool results one analysis may read; cut to a third of the "
        "context window's room for the prompt when that is smaller.",
    )
    min_overlap: float = Field(
        0.2,
        ge=0,
        le=1,
        description="Without a reranker and with no frame of the trace in the indexed code: "
        "the top file must hold this share of the error's identifiers, or the evidence is weak "
        "(`tracehound eval` suggests it).",
    )
    notify_file: Path | None = Field(
        None, description="Console notifier's JSON-lines file; default DATA_DIR/notifications.jsonl"
    )

    @field_validator("service_repos", mode="before")
    @classmethod
    def _parse_service_repos(cls, value: Any) -> Any:
        """``shop-api=shop,billing-*=billing|billing-legacy`` or a JSON object."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("{"):
            loaded = json.loads(text)
            return {k: [v] if isinstance(v, str) else v for k, v in loaded.items()}
        mapping: dict[str, list[str]] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            service, sep, repos = part.partition("=")
            names = [r.strip() for r in repos.split("|") if r.strip()]
            if not sep or not service.strip() or not names:
                raise ValueError(f"TRACEHOUND_SERVICE_REPOS: {part!r} is not service=repo|repo")
            mapping[service.strip()] = names
        return mapping

    def repos_of(self, service: str) -> list[str] | None:
        """The repos ``service`` may name (its first entry whose glob matches it); None when no
        mapping is set (any)."""
        if not self.service_repos:
            return None
        for pattern, repos in self.service_repos.items():
            if fnmatch.fnmatchcase(service, pattern):
                return repos
        return []

    @field_validator("ingest_allowed_origins", "ingest_allowed_hosts", mode="before")
    @classmethod
    def _split_names(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("sentry_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [k.strip() for k in value.split(",") if k.strip()]
        return value

    @field_validator("sentry_projects", mode="before")
    @classmethod
    def _parse_projects(cls, value: Any) -> Any:
        """``1=shop-api,2=billing:billing-repo`` or ``{"1": "shop-api"}``."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("{"):
            return json.loads(text)
        projects: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            project, sep, target = part.partition("=")
            if not sep or not project.strip() or not target.strip():
                raise ValueError(f"TRACEHOUND_SENTRY_PROJECTS: {part!r} is not id=service")
            projects[project.strip()] = target.strip()
        return projects

    @field_validator("sentry_upstream")
    @classmethod
    def _check_upstream(cls, value: str | None) -> str | None:
        """An http(s) URL with a host; a DSN (a key before the host) ends in its project id."""
        if not value:
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("TRACEHOUND_SENTRY_UPSTREAM: an http(s) URL or DSN with a host")
        if parts.username and not parts.path.rstrip("/").rpartition("/")[2]:
            raise ValueError("TRACEHOUND_SENTRY_UPSTREAM: a DSN ends in its project id")
        return value.strip()

    @property
    def sentry_key_values(self) -> list[str] | None:
        """The keys a Sentry SDK may authenticate with: none with an ingest token and no key
        set (never the token), None (any) with neither (loopback only)."""
        if self.sentry_keys:
            return [k.get_secret_value() for k in self.sentry_keys]
        return [] if self.ingest_token else None

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.chunk_overlap >= self.chunk_lines:
            raise ValueError("chunk_overlap must be smaller than chunk_lines")
        if self.slack_bot_token and not self.slack_channel:
            raise ValueError("TRACEHOUND_SLACK_BOT_TOKEN needs TRACEHOUND_SLACK_CHANNEL")
        if self.sentry_upstream and self.sentry_upstream_max_bytes < self.ingest_max_body_bytes:
            raise ValueError(
                "TRACEHOUND_SENTRY_UPSTREAM_MAX_BYTES must hold one request of "
                "TRACEHOUND_INGEST_MAX_BODY_BYTES"
            )
        if self.rerank_backend != "none" and not self.rerank_url:
            raise ValueError(f"rerank backend {self.rerank_backend!r} needs TRACEHOUND_RERANK_URL")
        return self

    @property
    def slack_actions(self) -> bool:
        """Messages carry buttons: a bot token posts them and a Slack app receives presses."""
        return bool(self.slack_bot_token and (self.slack_app_token or self.slack_signing_secret))

    @property
    def embed_base_url(self) -> str:
        return self.embed_url or self.ollama_url

    @property
    def llm_base_url(self) -> str:
        return self.llm_url or self.ollama_url

    @property
    def keyword_cache_path(self) -> Path | None:
        if not self.keyword_cache:
            return None
        return self.keyword_cache_dir or self.data_dir / "keyword-cache"

    @property
    def notifications_path(self) -> Path:
        return self.notify_file or self.data_dir / "notifications.jsonl"

    def masked(self) -> dict[str, Any]:
        """Settings as plain values with secrets and URL passwords masked, for printing."""
        out: dict[str, Any] = {}
        for name, value in self.model_dump().items():
            if isinstance(value, SecretStr):
                value = "********" if value.get_secret_value() else ""
            elif isinstance(value, list) and any(isinstance(v, SecretStr) for v in value):
                value = ["********"] * len(value)
            elif isinstance(value, str):
                value = mask_url_password(value)
            elif isinstance(value, Path):
                value = str(value)
            out[name] = value
        return out


_URL_USERINFO = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<info>[^@]*)@")


def mask_url_password(url: str) -> str:
    """``redis://:secret@host`` -> ``redis://:****@host``; a bare ``token@host`` is masked too."""

    def hide(m: re.Match[str]) -> str:
        user, sep, _ = m["info"].partition(":")
        return f"{m['scheme']}{user}:****@" if sep else f"{m['scheme']}****@"

    return _URL_USERINFO.sub(hide, url)


def invalid_settings(exc: ValidationError) -> str:
    """One line per rejected setting, named as the variable that sets it; never the value
    (it may be a token)."""
    prefix = Settings.model_config.get("env_prefix", "")
    return "\n".join(
        f"  {(prefix + '_'.join(map(str, e['loc']))).upper() if e['loc'] else 'settings'}: "
        f"{e['msg']}"
        for e in exc.errors(include_input=False)
    )
