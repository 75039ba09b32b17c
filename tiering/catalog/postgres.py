"""The shared catalog database: PostgreSQL through psycopg 3 and a connection pool.

Many gateways (and their lifecycle daemons) use one such database: it is what makes their
namespace one. Its SQL stays within what PostgreSQL 15+ and the PostgreSQL-compatible distributed
databases (CockroachDB, YugabyteDB) accept (schema.py says how); coordination between processes
is done with rows (leases with an expiry, settings, read pins), never advisory locks, and nothing
depends on LISTEN/NOTIFY.

Transactions are SERIALIZABLE: the catalog's methods read, decide and write (a conditional PUT,
a mover's compare-and-swap on the generation), which is correct only if no other transaction
slipped in between — on SQLite the single writer gives that for free. A transaction that
PostgreSQL aborts for a conflict (serialization failure, deadlock; CockroachDB's restarts are the
same SQLSTATE 40001) is run again from the start by `retrying`, a few times, with a short random
backoff. Reads outside a transaction run in autocommit, each statement on a pooled connection.

Faults: a database that cannot be reached (refused, restarting, pool exhausted) raises
`CatalogUnavailable`, which the S3 layer answers with 503 and Retry-After — never a wrong answer.
A statement that failed before COMMIT was sent is retried once on a fresh connection (a
restart drops every pooled connection; the first use of each finds out); a failure at COMMIT is
not retried here, because its outcome is unknown: the client retries the whole (idempotent)
request instead.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
import psycopg.errors
from psycopg_pool import ConnectionPool

from tiering.catalog.database import Conn, Database, describe
from tiering.catalog.schema import migrate_postgres
from tiering.errors import CatalogUnavailable

_T = TypeVar("_T")

RETRIES = 60  # conflicts in a row before giving up (each retry waits a little longer: ~8 s in all)
CONNECT_TIMEOUT = 5  # seconds to open a connection
POOL_TIMEOUT = 5.0  # seconds a statement waits for a pooled connection before the catalog is "unavailable"
# What PostgreSQL (SQLSTATE 40001, 40P01, 40000) and CockroachDB (40001) ask to be run again.
# (psycopg derives SerializationFailure and DeadlockDetected from OperationalError, not from
# TransactionRollback, so each is named.)
CONFLICTS = (
    psycopg.errors.SerializationFailure,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.TransactionRollback,
)


@functools.lru_cache(maxsize=1024)
def _translate(sql: str) -> str:
    """The catalog's `?` placeholders in psycopg's `%s` style (a literal % doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


class _Rows:
    """A statement's result, fetched whole (a page of a listing at most: a few thousand rows)."""

    __slots__ = ("_rows", "_at", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self._at = 0
        self.rowcount = rowcount

    def fetchone(self) -> Any:
        if self._at >= len(self._rows):
            return None
        self._at += 1
        return self._rows[self._at - 1]

    def fetchall(self) -> list[Any]:
        rest = self._rows[self._at :]
        self._at = len(self._rows)
        return rest

    def __iter__(self) -> Iterator[Any]:
        while self._at < len(self._rows):
            self._at += 1
            yield self._rows[self._at - 1]

    def close(self) -> None:
        self._at = len(self._rows)


def _run(conn: psycopg.Connection[Any], sql: str, args: Any) -> _Rows:
    cursor = conn.execute(_translate(sql), args)
    return _Rows(cursor.fetchall() if cursor.description is not None else [], cursor.rowcount)


class _Transaction:
    """The connection of one write transaction, as the catalog's modules use it."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, sql: str, args: Any = (), /) -> _Rows:
        return _run(self._conn, sql, args)

    def executemany(self, sql: str, args: Iterable[Any], /) -> _Rows:
        cursor = self._conn.cursor()
        cursor.executemany(_translate(sql), list(args))
        return _Rows([], cursor.rowcount)


class _Reader:
    """Reads outside a transaction: each statement on a connection borrowed from the pool."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._database = database

    def execute(self, sql: str, args: Any = (), /) -> _Rows:
        for attempt in (0, 1):
            try:
                with self._database.pool.connection() as conn:
                    return _run(conn, sql, args)
            except psycopg.OperationalError as exc:
                # A read is safe to repeat: once more on a fresh connection (a restarted database
                # leaves every pooled connection broken), then the database is unavailable.
                if attempt:
                    raise CatalogUnavailable(str(exc).strip() or type(exc).__name__) from exc
        raise AssertionError("unreachable")

    def executemany(self, sql: str, args: Iterable[Any], /) -> _Rows:
        raise TypeError("the reader does not write")


class _RetrySafe(Exception):
    """The database failed before COMMIT was sent: nothing was written, the method may run again."""

    def __init__(self, cause: psycopg.OperationalError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class PostgresDatabase(Database):
    dialect = "postgresql"
    greatest = "GREATEST"
    for_update = " FOR UPDATE"
    key_share = " FOR KEY SHARE"

    def __init__(self, url: str, *, pool_size: int = 8) -> None:
        self.url = url
        self.where = describe(url)
        self.conflicts = 0  # transactions run again after a conflict (for benchmarks and tests)
        self.pool: ConnectionPool[Any] = ConnectionPool(
            url,
            min_size=1,
            max_size=max(2, pool_size),
            open=False,
            timeout=POOL_TIMEOUT,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT, "application_name": "tierstore"},
            name="tierstore-catalog",
        )
        try:
            self.pool.open(wait=True, timeout=30)
        except psycopg.OperationalError as exc:
            self.pool.close()
            raise CatalogUnavailable(f"cannot connect to the catalog database {self.where}: {exc}") from exc
        with self.pool.connection() as conn:
            migrate_postgres(conn, self.where)
        self._reader = _Reader(self)

    def reader(self) -> Conn:
        return self._reader

    @contextmanager
    def write(self, *, relaxed: bool = False, snapshot: bool = False) -> Iterator[Conn]:
        isolation = "READ COMMITTED" if relaxed else "REPEATABLE READ" if snapshot else "SERIALIZABLE"
        try:
            with self.pool.connection() as conn:
                conn.execute(f"BEGIN ISOLATION LEVEL {isolation}")
                try:
                    yield _Transaction(conn)
                except BaseException:
                    if not conn.closed:
                        try:
                            conn.execute("ROLLBACK")
                        except psycopg.Error:
                            pass
                    raise
                try:
                    conn.execute("COMMIT")
                except CONFLICTS:
                    raise  # PostgreSQL rolled it back: retried by `retrying`
                except psycopg.OperationalError as exc:
                    # Lost while committing: it may or may not have landed. Not retried here.
                    raise CatalogUnavailable(f"the catalog database failed during a commit: {exc}") from exc
        except CONFLICTS:
            raise
        except psycopg.OperationalError as exc:
            raise _RetrySafe(exc) from exc

    def write_combined(self, fn: Callable[[Conn], _T], *, snapshot: bool = False) -> _T:
        # PostgreSQL runs concurrent transactions itself: nothing to combine.
        with self.write(snapshot=snapshot) as db:
            return fn(db)

    def retrying(self, fn: Callable[[], _T]) -> _T:
        lost_connection = False
        for attempt in range(RETRIES):
            try:
                return fn()
            except CONFLICTS:
                self.conflicts += 1
                # Serialization failure or deadlock: another transaction won; run again after a
                # short random wait, so that those that collided do not collide again.
                time.sleep(random.uniform(0, min(0.002 * 2 ** min(attempt, 7), 0.25)))
            except _RetrySafe as exc:
                if lost_connection:
                    raise CatalogUnavailable(
                        str(exc.cause).strip() or "the catalog database is unreachable"
                    ) from exc
                lost_connection = True
        raise CatalogUnavailable(f"the catalog stayed too busy: {RETRIES} conflicting transactions in a row")

    def next_generation(self, db: Conn) -> int:
        return int(db.execute("SELECT nextval('generation_seq')").fetchone()[0])

    def upsert_object_sql(self, columns: str, placeholders: str) -> str:
        # An upsert fires the UPDATE trigger for a replaced row: the usage counters stay right.
        names = [c.strip() for c in columns.split(",")]
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in names if c not in ("bucket", "key"))
        return (
            f"INSERT INTO objects ({columns}) VALUES ({placeholders}) "
            f"ON CONFLICT (bucket, key) DO UPDATE SET {updates}"
        )

    def close(self) -> None:
        self.pool.close()
