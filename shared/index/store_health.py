"""Whether the vector store answers, cheaply, for ``tracehound status`` and ingest's /readyz.

Neither loads the store's client library for this: Chroma is asked over HTTP for its heartbeat,
PostgreSQL for its version, pgvector's and tracehound's schema's. A store that does not answer
does not stop errors from coming in (retrieval goes keyword-only and says so), so it is
reported, not fatal.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from shared.core.settings import Settings

TIMEOUT_S = 2.0


@dataclass(frozen=True)
class StoreHealth:
    kind: str  # chroma, pgvector
    where: str  # the URL, password masked
    ok: bool
    detail: str  # versions when it answers, the reason when not

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "where": self.where, "ok": self.ok, "detail": self.detail}


def store_health(settings: Settings) -> StoreHealth:
    if settings.vector_store == "pgvector":
        return _pgvector(settings.pg_url)
    return _chroma(settings)


def _chroma(settings: Settings) -> StoreHealth:
    if not settings.chroma_url:
        where = f"local path {settings.chroma_path}"
        return StoreHealth("chroma", where, True, "in-process (single-process mode)")
    url = settings.chroma_url.rstrip("/")
    try:
        r = httpx.get(f"{url}/api/v2/heartbeat", timeout=TIMEOUT_S)
        r.raise_for_status()
    except httpx.HTTPError as exc:
        return StoreHealth("chroma", url, False, f"{type(exc).__name__}: {exc}")
    return StoreHealth("chroma", url, True, "heartbeat answered")


def _pgvector(url: str | None) -> StoreHealth:
    if not url:
        return StoreHealth("pgvector", "-", False, "TRACEHOUND_PG_URL is not set")
    where = mask_password(url)
    try:
        import psycopg
    except ImportError:
        return StoreHealth(
            "pgvector", where, False, "psycopg missing: pip install 'tracehound[pgvector]'"
        )
    try:
        with psycopg.connect(url, connect_timeout=int(TIMEOUT_S), autocommit=True) as conn:
            server = conn.execute("SHOW server_version").fetchone()
            ext = conn.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
            ).fetchone()
            schema = conn.execute("SELECT to_regclass('th_schema')").fetchone()
            version = (
                conn.execute("SELECT version FROM th_schema").fetchone()
                if schema and schema[0]
                else None
            )
            repos = (
                # Indexed repos only: incident memory's vectors (shared/groups/memory.py) sit
                # under a name with a line break, which no repo's name has.
                conn.execute(
                    "SELECT count(*) FROM th_repos WHERE strpos(repo, chr(10)) = 0"
                ).fetchone()
                if version and version[0]
                else (0,)
            )
    except psycopg.Error as exc:
        return StoreHealth("pgvector", where, False, f"{type(exc).__name__}: {exc}".strip())
    detail = (
        f"PostgreSQL {server[0] if server else '?'}, "
        + (f"pgvector {ext[0]}" if ext else "pgvector not installed yet")
        + f", schema {version[0] if version else 0}, {repos[0] if repos else 0} repo(s)"
    )
    return StoreHealth("pgvector", where, True, detail)


def mask_password(url: str) -> str:
    """``url`` with its password (if any) replaced by ***."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
