"""Domain types passed between producers and stages; JSON only at the task boundary."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

NAME_MAX_CHARS = 128  # a service or repo name
TYPE_MAX_CHARS = 256  # an exception type
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]+")


def one_line(value: str, limit: int) -> str:
    """``value`` on one line (line breaks and control characters as spaces), at most ``limit``
    characters; a longer one keeps a digest of the whole, so two long names stay apart. A
    name from outside can neither break out of a prompt's fence nor grow a key unbounded."""
    # Most names are already so (every event has two or three): printable text holds no line
    # break, control character or whitespace but the ASCII space, so with no space at its ends
    # and none doubled, the general path below would give it back unchanged.
    if (
        len(value) <= limit
        and value.isprintable()
        and "  " not in value
        and value[:1] != " "
        and value[-1:] != " "
    ):
        return value
    return _flattened(value, limit)


def _flattened(value: str, limit: int) -> str:
    flat = " ".join(_CONTROL.sub(" ", value).split())
    if len(flat) <= limit:
        return flat
    digest = hashlib.sha1(value.encode("utf-8", "replace")).hexdigest()[:8]
    return flat[: limit - 9] + "…" + digest


def required_name(value: str) -> str:
    """A name from outside on one line and bounded (``one_line``); refused when nothing is
    left of it."""
    name = one_line(value, NAME_MAX_CHARS)
    if not name:
        raise ValueError("must name something: it was empty or only control characters")
    return name


def encodable(value: Any) -> Any:
    """``value`` with every string (keys too, in nested dicts and lists) encodable as UTF-8 (a
    lone surrogate, which JSON's ``"\\ud800"`` escape decodes to, becomes ``?``) and every
    integer past 64 bits as its digits, so the event can be stored, queued and sent on."""
    if isinstance(value, str):
        if value.isascii():  # a flag CPython keeps on the string: no pass over it
            return value
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "replace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {encodable(k): encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encodable(v) for v in value]
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        return str(value)  # past 64 bits: JSON encoders (orjson) refuse the number
    return value


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class Frame:
    """One stack frame as the trace wrote it (or the error SDK reported it)."""

    file: str
    line: int | None
    function: str = ""
    module: str = ""  # Java/Kotlin package-qualified class, Go package path; else ""
    language: str = "python"
    code: str = ""  # the source line the trace printed under the frame, if any
    column: int | None = None  # 1-based, where the trace prints one (JavaScript's)


@dataclass(frozen=True)
class Printed:
    """One exception line of a trace: its type as printed and its message."""

    type: str
    message: str
    cause_first: bool  # Python and PHP: printed after its cause (else before its causes)
    group: bool = False  # a Python ExceptionGroup header line


def chain_of(printed: tuple[Printed, ...]) -> tuple[str, ...]:
    """Exception types outermost first, root cause last (what grouping hashes)."""
    cause_first = [p.type for p in printed if p.cause_first]
    other = [p.type for p in printed if not p.cause_first]
    return (*reversed(cause_first), *other)


def reported_of(printed: tuple[Printed, ...]) -> Printed | None:
    """The exception an event names: the outermost one, thrown out of the code that failed.

    Python's is printed last (after "During handling…" and "The above exception…"), PHP's in
    its last ``Next``; Java's, Kotlin's, Node's, .NET's, Go's and Rust's first, before their
    causes. A Python exception group is named by its top-level group line. Python and PHP
    lines win over other lines of the same text (a log header saying "…Error: x" is not it).
    """
    if not printed:
        return None
    groups = [p for p in printed if p.group]
    if groups:
        return groups[0]
    cause_first = [p for p in printed if p.cause_first]
    return cause_first[-1] if cause_first else printed[0]


def root_cause_of(printed: tuple[Printed, ...]) -> Printed | None:
    """The innermost exception: the cause the others wrapped (Python's and PHP's is printed
    first, the other languages' last). Incidents are formed on it: when the database goes
    away, every endpoint fails with its own stack and outer exception, and the same
    ``OperationalError: could not connect`` underneath."""
    found = [p for p in printed if not p.group]
    if not found:
        return None
    cause_first = [p for p in found if p.cause_first]
    return cause_first[0] if cause_first else found[-1]


class Trace(Frozen):
    """What intake read from an event's trace, once (shared/intake/trace.py): its frames and
    the exceptions it printed. Every later stage reads this, in whichever process it runs,
    and never parses the trace text again."""

    frames: tuple[Frame, ...] = ()  # as the text printed them, nearest the raise first
    sdk_frames: tuple[Frame, ...] = ()  # the error SDK's own (in-app ones), when it sent them
    printed: tuple[Printed, ...] = ()  # exception lines in the order printed

    def code_frames(self) -> tuple[Frame, ...]:
        """The frames retrieval and analysis follow into the code: the SDK's when it reported
        them (structured, with their module), else the text's."""
        return self.sdk_frames or self.frames

    def chain(self) -> tuple[str, ...]:
        return chain_of(self.printed)

    def reported(self) -> Printed | None:
        return reported_of(self.printed)

    def root_cause(self) -> Printed | None:
        return root_cause_of(self.printed)


class ErrorEvent(Frozen):
    """One error from a service: what producers normalise everything to."""

    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    service: str
    repo: str
    message: str = ""
    exception_type: str | None = None
    stacktrace: str = ""
    level: str = "ERROR"
    timestamp: datetime = Field(default_factory=lambda: datetime.now(UTC))
    attributes: dict[str, Any] = Field(default_factory=dict)
    # Set by intake (shared/intake/trace.py) from the redacted text; None: not read yet.
    trace: Trace | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _encodable(cls, value: Any) -> Any:
        return encodable(value)

    @field_validator("service", "repo")
    @classmethod
    def _name(cls, value: str) -> str:
        return required_name(value)

    @field_validator("exception_type")
    @classmethod
    def _type(cls, value: str | None) -> str | None:
        return one_line(value, TYPE_MAX_CHARS) or None if value is not None else None


class Chunk(Frozen):
    """A line range of one source file, as stored in both indexes."""

    id: str
    repo: str
    path: str
    start_line: int
    end_line: int
    language: str
    content_hash: str
    text: str
    # Qualified name(s) the chunk defines ("Cart.total", "a, b"); "" for module-level code
    # and for languages chunked by line windows.
    symbol: str = ""

    def metadata(self) -> dict[str, str | int]:
        meta: dict[str, str | int] = {
            "repo": self.repo,
            "path": self.path,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "language": self.language,
            "content_hash": self.content_hash,
        }
        if self.symbol:  # Chroma metadata values must not be None
            meta["symbol"] = self.symbol
        return meta

    @classmethod
    def from_metadata(cls, chunk_id: str, text: str, meta: Mapping[str, Any]) -> Chunk:
        """The chunk a vector store kept as its id, text and ``metadata()``."""
        return cls(
            id=chunk_id,
            repo=str(meta["repo"]),
            path=str(meta["path"]),
            start_line=int(meta["start_line"]),
            end_line=int(meta["end_line"]),
            language=str(meta.get("language", "")),
            content_hash=str(meta.get("content_hash", "")),
            text=text,
            symbol=str(meta.get("symbol", "")),
        )


class ChunkHit(Frozen):
    """A chunk returned by one retriever, or fused."""

    chunk_id: str
    path: str
    start_line: int
    end_line: int
    text: str
    score: float


class Candidate(Frozen):
    """One file proposed as the failure's location, with its best chunks."""

    path: str
    score: float
    chunks: list[ChunkHit]
    rerank_score: float | None = None  # relevance in 0..1, whatever the rerank server's scale

    @property
    def lines(self) -> str:
        best = self.chunks[0]
        return f"{best.start_line}-{best.end_line}"


class Hypothesis(Frozen):
    cause: str = Field(description="What probably went wrong, in one or two sentences.")
    confidence: float = Field(ge=0.0, le=1.0)
    evidence: list[str] = Field(description='Code locations as "path:start-end".')


class FileRef(Frozen):
    path: str
    start_line: int = Field(ge=0)
    end_line: int = Field(ge=0)
    reason: str = ""


class AnalysisReply(Frozen):
    """What the LLM must return; its JSON schema is sent as Ollama's ``format``."""

    summary: str = Field(description="One line: what failed and where.")
    hypotheses: list[Hypothesis] = Field(description="Root-cause hypotheses, most likely first.")
    suggested_fix: str
    relevant_files: list[FileRef]
    confidence: float = Field(ge=0.0, le=1.0)


class Analysis(AnalysisReply):
    """The validated reply plus how it was obtained."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    model: str = ""
    degraded: bool = False
    degraded_reason: str | None = None
    raw_text: str | None = None
    # What the model looked up with its tools ("read pricing.py:40-95"), for the footnote;
    # the code it was shown beyond the candidates (frame windows, tool results), which it may
    # cite; and the indexed chunks tool results came from (a cached analysis is reused only
    # while they are all still indexed: shared/analyze/cache.py).
    lookups: list[str] = Field(default_factory=list)
    read: list[FileRef] = Field(default_factory=list)
    read_chunks: list[str] = Field(default_factory=list)


class Commit(Frozen):
    """One commit as the message shows it (author and subject are untrusted text)."""

    sha: str
    author: str
    time: int  # author time, epoch seconds
    subject: str


class BlameRange(Frozen):
    """Lines ``start``..``end`` of the indexed file were last changed by ``sha``, where they
    began at line ``orig_start`` of that commit's version of the file."""

    start: int
    end: int
    sha: str
    orig_start: int


class Hunk(Frozen):
    """One diff hunk of a commit to a file; ``start``..``end`` on the commit's new side."""

    sha: str
    start: int
    end: int
    text: str


class FileHistory(Frozen):
    """A file's recent history as the indexer saw it (shared/index/history.py): the commits
    that last changed its lines within the time bound, most recent first, and their hunks."""

    path: str
    commits: list[Commit] = Field(default_factory=list)
    ranges: list[BlameRange] = Field(default_factory=list)
    hunks: list[Hunk] = Field(default_factory=list)


class CodeVersion(Frozen):
    """Which commit a repository was indexed at; ``commit`` is None with the ``reason``."""

    commit: str | None = None
    tags: list[str] = Field(default_factory=list)
    shallow: bool = False
    partial: bool = False  # the time budget ran out before every recent file was read
    reason: str = ""


class RepoHistory(Frozen):
    """What the indexer records for a repository: its commit and its files' recent history."""

    version: CodeVersion
    files: list[FileHistory] = Field(default_factory=list)


class CitedHistory(Frozen):
    """The most recent commits that touched one cited ``path:start-end``."""

    location: str
    commits: list[Commit]


class StageVisit(Frozen):
    stage: str
    queue: str
    worker: str
    at: datetime = Field(default_factory=lambda: datetime.now(UTC))


class GroupRef(Frozen):
    """Which error group and window an analysis is for (see shared/groups/store.py)."""

    fingerprint: str
    window_start: int  # ms, Redis time


class Posted(Frozen):
    """A message already in Slack (or the console file), which a re-analysis rewrites."""

    channel: str | None
    ts: str


class Fallback(StrEnum):
    """Why a stage fell back, as policy reads it: the second chance (notify/policy.py) and
    the host check before it (models/health.py). The note written beside it is for people."""

    EMBED_HOST = "embed_host"  # the query could not be embedded: keyword search only
    RERANK_HOST = "rerank_host"  # the rerank server was out of reach: fused order
    RERANK_REFUSED = "rerank_refused"  # it answered and refused: its host is up
    NO_RERANKER = "no_reranker"  # none configured: fused order, nothing to wait for
    LLM_HOST = "llm_host"  # the chat model failed: a degraded analysis


# A model host that was out of reach: the message gets one more analysis when it answers.
HOST_DOWN = frozenset({Fallback.EMBED_HOST, Fallback.RERANK_HOST, Fallback.LLM_HOST})

# The words of the notes those stages write, in one place.
EMBED_FAILED = "embedding: failed"
RERANK_UNAVAILABLE = "rerank: unavailable"
# The rerank server answered and refused (a pair over its batch, a bad request): its host is
# up, so no second chance waits for it to "answer again".
RERANK_REFUSED = "rerank: refused"
NO_RERANK_BACKEND = "no rerank backend configured"


class Evidence(Frozen):
    """How well retrieval supports its files, judged before the LLM reads them
    (shared/retrieve/evidence.py)."""

    own_frames: int = 0  # chunks at frames of the trace in the indexed repo's own code
    overlap: float = 0.0  # share of the query's identifiers found in the top file
    weak: bool = False
    reason: str = ""  # why it is weak, for the prompt and the logs


DEPLOY_COMMITS_MAX = 1000  # commits a deploy lists, at most (a CI range of a long-lived branch)
_SHA = re.compile(r"^[0-9a-f]{7,64}$")


class Deploy(Frozen):
    """A release of a service that went out: announced (``POST /v1/deploys``, ``tracehound
    deploy``) or seen (the first event that named a release no deploy had named)."""

    service: str
    environment: str = ""  # "" when not said: matches every environment
    version: str
    commit_from: str = ""  # the range it brought: commit_from..commit_to ("" when not said)
    commit_to: str = ""
    commits: tuple[str, ...] = ()  # the commits of that range (``git rev-list from..to``)
    time: float  # seconds since the epoch
    source: Literal["announced", "release"] = "announced"

    @field_validator("service", "version")
    @classmethod
    def _named(cls, value: str) -> str:
        return required_name(value)

    @field_validator("environment")
    @classmethod
    def _environment(cls, value: str) -> str:
        return one_line(value, NAME_MAX_CHARS)

    @field_validator("commit_from", "commit_to")
    @classmethod
    def _sha(cls, value: str) -> str:
        value = value.strip().lower()
        if value and not _SHA.match(value):
            raise ValueError("must be a commit sha (7 to 64 hex digits)")
        return value

    @field_validator("commits")
    @classmethod
    def _shas(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(value) > DEPLOY_COMMITS_MAX:
            raise ValueError(f"at most {DEPLOY_COMMITS_MAX} commits")
        shas = tuple(v.strip().lower() for v in value)
        if bad := next((v for v in shas if not _SHA.match(v)), None):
            raise ValueError(f"not a commit sha: {bad[:80]!r}")
        return shas

    @field_validator("time")
    @classmethod
    def _time(cls, value: float) -> float:
        if not 0 < value < 1e11:  # finite, after 1970 and before the year 5138
            raise ValueError("must be seconds since the epoch")
        return value


class DeployNote(Frozen):
    """The deploy a new group came after, and which of its suspect commits that deploy
    brought (shared/groups/deploys.py)."""

    deploy: Deploy
    after_s: float  # the group was first seen this long after the deploy
    suspects_in: tuple[str, ...] = ()  # suspect commits the deploy brought
    suspects_out: tuple[str, ...] = ()  # suspect commits it did not (older ones)


_SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,20}$")


class Recalled(Frozen):
    """A group analysed before whose error reads like this one's (shared/groups/memory.py).
    Its fields come from Redis and Slack: each is checked or clipped here, and escaped where
    shown."""

    fingerprint: str
    score: float
    title: str
    service: str = ""
    repo: str = ""
    first_seen_ms: int = 0
    file: str = ""  # the file on-call confirmed for it ("" when none was)
    resolved_by: str = ""  # a Slack user id, or ""
    resolved_at_ms: int = 0
    commit: str = ""  # the commit its repo's index held when it was resolved
    link: str = ""  # its message's permalink (https), when Slack gave one

    @field_validator("title", "service", "repo", "file")
    @classmethod
    def _clip(cls, value: str) -> str:
        return one_line(value, 300)

    @field_validator("resolved_by")
    @classmethod
    def _user(cls, value: str) -> str:
        return value if _SLACK_USER.match(value) else ""

    @field_validator("commit")
    @classmethod
    def _commit(cls, value: str) -> str:
        value = value.strip().lower()
        return value if _SHA.match(value) else ""

    @field_validator("link")
    @classmethod
    def _link(cls, value: str) -> str:
        ok = value.startswith("https://") and len(value) <= 500 and not _CONTROL.search(value)
        return value if ok and " " not in value else ""


class Investigation(Frozen):
    """The payload that travels down the analysis chain, growing one stage at a time."""

    event: ErrorEvent
    group: GroupRef | None = None
    revises: Posted | None = None  # a second analysis that rewrites this message in place
    # "Analyze again" from Slack: the action's id. Such a run skips the window's one-analysis
    # claim and the analysis cache, and rewrites the message once per action.
    rerun: str | None = None
    query: str = ""
    query_frames: tuple[Frame, ...] = ()  # the frames the query names (the trace's, not parsed)
    query_vector: list[float] | None = None
    memory_vector: list[float] | None = None  # the error's signature (shared/groups/memory.py)
    candidates: list[Candidate] = Field(default_factory=list)
    evidence: Evidence | None = None
    analysis: Analysis | None = None
    notes: list[str] = Field(default_factory=list)
    fallbacks: list[Fallback] = Field(default_factory=list)
    trail: list[StageVisit] = Field(default_factory=list)
    # Filled by analyze from what the indexer recorded (shared/analyze/history.py).
    code_version: CodeVersion | None = None
    history: list[CitedHistory] = Field(default_factory=list)
    # Filled before delivery from the recorded deploys (shared/groups/deploys.py).
    deploy: DeployNote | None = None
    # Filled by retrieve: the group analysed before that this one reads like.
    recalled: Recalled | None = None

    def visited(self, stage: str, queue: str, worker: str) -> Investigation:
        return self.model_copy(
            update={"trail": [*self.trail, StageVisit(stage=stage, queue=queue, worker=worker)]}
        )

    def noted(self, note: str) -> Investigation:
        return self.model_copy(update={"notes": [*self.notes, note]})

    def fell_back(self, why: Fallback, note: str) -> Investigation:
        """A stage fell back: ``why`` for policy, ``note`` for the message."""
        return self.model_copy(
            update={"notes": [*self.notes, note], "fallbacks": [*self.fallbacks, why]}
        )


class Notification(Frozen):
    """What was sent (or printed): the message and where it went."""

    event_id: str
    destination: str
    channel: str | None = None
    ts: str | None = None
    text: str
    blocks: list[dict[str, Any]]
    notes: list[str] = Field(default_factory=list)
    top_files: list[str] = Field(default_factory=list)
    trail: list[StageVisit] = Field(default_factory=list)
    analysis: Analysis | None = None
