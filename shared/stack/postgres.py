"""A private PostgreSQL with pgvector, from the pgserver wheel (PostgreSQL 16, pgvector 0.6).

For ``tracehound up --vector-store pgvector`` and the pgvector store's tests, where no server
with the extension is at hand (Debian's archive here has none for the machine's PostgreSQL
15). Only the wheel's binaries are used: ``initdb`` once on a data directory, then
``postgres`` as a child like Redis and Chroma (on loopback, a port of its own, no Unix
socket), stopped, killed and started again where it was. PostgreSQL refuses to run as root;
started as root, it runs as an unprivileged system user of its own (``SERVER_USER``), which
owns the data directory.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
from pathlib import Path

from shared.stack.children import ChildSpec, Proc, free_port, start

SERVER_USER = "tracehound-pg"
DATABASE = "postgres"


def bin_dir() -> Path:
    """The directory of the wheel's PostgreSQL programs (found, not imported: pgserver's import
    sets up its own server management, which is not used here)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the bundled PostgreSQL comes with the pgserver extra: "
            "pip install 'tracehound[pgserver]' (or set TRACEHOUND_PG_URL to a PostgreSQL "
            "with pgvector)"
        )
    found = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (found / "postgres").exists():
        raise RuntimeError(f"no postgres program in {found}: a pgserver this code does not know")
    return found


def server_user() -> str | None:
    """Who the server runs as: None (this user) unless this is root, then ``SERVER_USER``,
    created as a system user when missing."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        subprocess.run(
            [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVER_USER],
            check=True,
            capture_output=True,
        )
    return SERVER_USER


def init_cluster(pgdata: Path) -> None:
    """``initdb`` on ``pgdata`` unless it holds a cluster already: trust authentication (it
    listens on loopback only), UTF-8, superuser ``postgres``."""
    if (pgdata / "PG_VERSION").exists():
        return
    user = server_user()
    pgdata.mkdir(parents=True, exist_ok=True)
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(pgdata, entry.pw_uid, entry.pw_gid)
        _traversable(pgdata.parent)
    pgdata.chmod(0o700)
    done = subprocess.run(
        [
            str(bin_dir() / "initdb"),
            "-D",
            str(pgdata),
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "-U",
            "postgres",
        ],
        user=user,
        group=pwd.getpwnam(user).pw_gid if user else None,
        extra_groups=[] if user else None,
        cwd="/",
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed on {pgdata}:\n{done.stdout}\n{done.stderr}")


def postgres_url(port: int) -> str:
    return f"postgresql://postgres@127.0.0.1:{port}/{DATABASE}"


def postgres_spec(pgdata: Path, port: int) -> ChildSpec:
    """The server on ``pgdata`` (``init_cluster`` first), on loopback at ``port``."""
    url = postgres_url(port)
    argv = (
        str(bin_dir() / "postgres"),
        "-D",
        str(pgdata),
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        "-k",
        "",  # no Unix socket: a long data path would not fit one
        "-c",
        "max_connections=200",  # a worker process keeps one connection
    )
    return ChildSpec(
        "postgres",
        argv,
        url,
        ready=lambda: postgres_answers(url),
        ready_timeout=60,
        user=server_user(),
        stop_signal=signal.SIGINT,  # fast shutdown: SIGTERM would wait for every client to leave
    )


def postgres_answers(url: str) -> bool:
    import psycopg

    with psycopg.connect(url, connect_timeout=2) as conn:
        return conn.execute("SELECT 1").fetchone() == (1,)


def _traversable(path: Path) -> None:
    """Let the server user reach ``path`` (search permission up the tree, as pgserver does)."""
    for p in (path, *path.parents):
        mode = p.stat().st_mode
        if not mode & 0o001:
            p.chmod(mode | 0o001)


def start_postgres(workdir: Path, port: int | None = None) -> tuple[Proc, str]:
    """A private server on ``workdir/postgres``; ``port`` to start it again where it was."""
    pgdata = workdir / "postgres"
    init_cluster(pgdata)
    if server_user() is not None:
        # Again at every start: another pytest session resets /tmp/pytest-of-<user> to 0700,
        # and a server started again after that could not reach its directory.
        _traversable(pgdata.parent)
    spec = postgres_spec(pgdata, port or free_port())
    assert spec.url is not None
    return start(spec, workdir / "logs"), spec.url
