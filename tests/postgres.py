"""A real PostgreSQL server for the tests: Debian's `postgresql` package, started in a temporary
directory on a free loopback port, one per test session, a fresh database per tierstore server.

`initdb` and `pg_ctl` refuse to run as root, so as root the server runs as the unprivileged
`postgres` user (the package creates it) in a directory it owns. Without the package, tests that
need PostgreSQL skip with the reason (`unavailable()`).
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests import ports

USER = "tierstore"  # the database superuser initdb creates (trust authentication on loopback)


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def unavailable() -> str | None:
    """Why PostgreSQL tests cannot run here (None: they can)."""
    if _bin_dir() is None:
        return "PostgreSQL is not installed (apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run PostgreSQL as"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    return None


class PostgresServer:
    """One PostgreSQL server in its own directory.

    It listens on loopback; a test that runs a process in a network namespace of its own adds
    the host-side address of a link into that namespace (`listen`) and the addresses its clients
    come from (`clients`, CIDR blocks trusted like loopback).
    """

    def __init__(self, listen: Sequence[str] = ("127.0.0.1",), clients: Sequence[str] = ()) -> None:
        bin_dir = _bin_dir()
        assert bin_dir is not None, unavailable()
        self.bin = bin_dir
        # Not under pytest's tmp dir: as root, that is private to root, and the server runs as postgres.
        self.root = Path(tempfile.mkdtemp(prefix="tierstore-pg-"))
        self.data = self.root / "data"
        self.port = ports.free_port()
        self.listen = ",".join(listen)
        self._user: str | None = None
        if os.geteuid() == 0:
            self._user = "postgres"
            shutil.chown(self.root, "postgres", "postgres")
        self._databases = 0
        self._lock = threading.Lock()
        self._run(
            "initdb", "-D", str(self.data), "-U", USER, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"
        )
        with open(self.data / "pg_hba.conf", "a") as hba:  # initdb trusts loopback only
            for block in clients:
                hba.write(f"host all all {block} trust\n")
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        result = subprocess.run(
            [str(self.bin / tool), *args],
            user=self._user,
            capture_output=True,
            text=True,
            cwd=self.root,
            timeout=120,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{tool} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}\n{self.log()}"
            )

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def start(self) -> None:
        # fsync off: a test machine's power is not what these tests are about (a restart, even an
        # immediate one, loses nothing the kernel holds); it makes the suite's commits cheap.
        options = (
            f"-p {self.port} -c listen_addresses={self.listen} -k {self.root} -c max_connections=400 "
            "-c fsync=off -c full_page_writes=off -c shared_buffers=64MB"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop it: `fast` (clients disconnected, clean shutdown) or `immediate` (as a crash)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def url(self, database: str, host: str = "127.0.0.1") -> str:
        return f"postgresql://{USER}@{host}:{self.port}/{database}"

    def create_database(self, prefix: str = "tierstore") -> str:
        """A new empty database; its URL."""
        import psycopg

        with self._lock:
            self._databases += 1
            name = f"{prefix}_{os.getpid()}_{self._databases}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def sql(self, database_url: str, statement: str, args: Any = ()) -> list[Any]:
        import psycopg

        with psycopg.connect(database_url, autocommit=True) as conn:
            cursor = conn.execute(statement, args)
            return cursor.fetchall() if cursor.description else []

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.root, ignore_errors=True)


_session: PostgresServer | None = None
_session_lock = threading.Lock()


def session_server() -> PostgresServer:
    """The test session's server, started on first use and removed when the session ends."""
    global _session
    with _session_lock:
        if _session is None:
            _session = PostgresServer()
            atexit.register(_session.destroy)
        return _session


_by_data_dir: dict[Path, str] = {}


def database_for(data_dir: Path) -> str:
    """The catalog database of the tierstore server whose data is in `data_dir`: a fresh one the
    first time, the same one when that server restarts (or starts through a link to that directory)."""
    data_dir = data_dir.resolve()
    with _session_lock:
        url = _by_data_dir.get(data_dir)
    if url is None:
        url = session_server().create_database()
        with _session_lock:
            url = _by_data_dir.setdefault(data_dir, url)
    return url
