"""The database layer's interface: what the catalog's modules need of a SQL database, and how one
is chosen by a location (a path, `sqlite:///path` or `postgresql://user:password@host:port/db`).

The catalog's queries are written once, in the SQL both engines accept, with `?` placeholders
(the PostgreSQL connection rewrites them). What differs between engines is said here, as a
few attributes of `Database` (the dialect), and nowhere else: the object upsert (SQLite's usage
triggers need `INSERT OR REPLACE`, see schema.py), the generation counter (a counter row in
SQLite, a SEQUENCE in PostgreSQL) and the two-argument maximum.

Transactions: `write()` is one transaction. On SQLite there is one writer, so a transaction never
conflicts; on PostgreSQL they run SERIALIZABLE (the isolation SQLite gives, which the catalog's
read-then-write methods rely on) and may fail with a serialization failure or deadlock, which
`retrying` answers by running the whole method again (`transaction` marks those methods).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import unquote, urlsplit

_T = TypeVar("_T")


# Statement parameters as the catalog passes them (what sqlite3 and psycopg both take).
Params = tuple[Any, ...] | list[Any]


class Cursor(Protocol):
    """What the catalog reads of a statement's result (sqlite3.Cursor has all of it)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...
    def close(self) -> None: ...


class Conn(Protocol):
    """A connection as the catalog's modules use it (sqlite3.Connection has all of it)."""

    def execute(self, sql: str, parameters: Params = ..., /) -> Cursor: ...
    def executemany(self, sql: str, parameters: Iterable[Params], /) -> Cursor: ...


class NotAtHand(Exception):
    """A read that might wait (see Database.row_at_hand): do it in a worker thread."""


class Database(ABC):
    """One catalog database: connections, transactions and the dialect's few differences."""

    dialect: str
    path: Path | None = None  # the SQLite file, None for a server database
    url: str
    greatest: str  # the two-argument maximum: SQLite's MAX(a, b), PostgreSQL's GREATEST(a, b)
    for_update: str  # the row lock a relaxed transaction takes on what it reads ("" on SQLite)
    # The lock a writer takes on its bucket's row (PostgreSQL: FOR KEY SHARE, what a foreign key
    # check takes): a bucket delete, which locks the row FOR UPDATE, waits for those writers and
    # then sees their objects, and a writer that comes after it finds the bucket gone.
    key_share: str

    @abstractmethod
    def reader(self) -> Conn:
        """A connection for reads outside a transaction (each statement sees committed data)."""

    def row_at_hand(self, sql: str, params: Params) -> Any:
        """The first row of a query (None: no row) answered without waiting — no disk read, no
        lock wait, no network — so that the event loop may ask it; NotAtHand when that cannot be
        promised now (then ask `reader()` from a worker thread). Here: never at hand."""
        raise NotAtHand()

    def listing_stamp(self) -> int | None:
        """A value that is different once anyone (any connection, any process) has committed a
        change to what a listing shows since an earlier call returned it (objects added, removed
        or with a listed column rewritten; a bucket removed); None where that cannot be told
        cheaply. Lets a listing page read ahead be served later only if nothing it shows changed
        in between (ListingReadahead). Here: cannot tell."""
        return None

    @abstractmethod
    def write(self, *, relaxed: bool = False, snapshot: bool = False) -> AbstractContextManager[Conn]:
        """One write transaction: committed (and durable) when the block ends, rolled back if it raises.

        `relaxed`: the caller locks what it reads (`for_update`) and needs no more isolation than
        that (PostgreSQL: READ COMMITTED instead of SERIALIZABLE; SQLite: the same transaction).
        `snapshot`: the caller writes every row it decides on, and locks its bucket (`key_share`):
        snapshot isolation catches every conflict it can meet (PostgreSQL: REPEATABLE READ, which
        fails a write to a row changed since the snapshot, without SERIALIZABLE's predicate locks)."""

    @abstractmethod
    def write_combined(self, fn: Callable[[Conn], _T], *, snapshot: bool = False) -> _T:
        """`fn(db)` in a write transaction, which the database may share with other callers'."""

    # True where `write_batch` shares one transaction and one flush among its pieces (SQLite's
    # group commit); elsewhere concurrent callers do better each in its own transaction.
    batches_writes = False

    def write_batch(self, fns: Sequence[Callable[[Conn], Any]]) -> list[tuple[Any, BaseException | None]]:
        """Each `fn(db)` in a write transaction, as `write_combined` would, but all from one caller
        (the small PUTs' committer): per piece (its result, None) or (None, the error it raised).
        A piece that raises is rolled back alone. Here: one after another."""
        done: list[tuple[Any, BaseException | None]] = []
        for fn in fns:
            try:
                done.append((self.write_combined(fn), None))
            except Exception as exc:
                done.append((None, exc))
        return done

    def retrying(self, fn: Callable[[], _T]) -> _T:
        """Run a whole catalog method, again if the database asks for it (PostgreSQL)."""
        return fn()

    @abstractmethod
    def next_generation(self, db: Conn) -> int:
        """The next value of the catalog-wide generation counter, inside `db`'s transaction."""

    @abstractmethod
    def upsert_object_sql(self, columns: str, placeholders: str) -> str:
        """INSERT that replaces the row of the same (bucket, key), keeping the usage counters right."""

    @abstractmethod
    def close(self) -> None: ...


def transaction(method: Callable[..., _T]) -> Callable[..., _T]:
    """Mark a catalog method that writes: on PostgreSQL it is run again after a serialization
    failure or deadlock (it must do nothing but catalog work, which is rolled back each time)."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> _T:
        database: Database = self._db
        return database.retrying(lambda: method(self, *args, **kwargs))

    return run


def is_postgresql_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def sqlite_path(location: str | Path) -> Path:
    """The file of a SQLite location: a path, or a `sqlite:///path` URL (four slashes: absolute)."""
    if isinstance(location, Path):
        return location
    if location.startswith("sqlite:"):
        parts = urlsplit(location)
        if parts.netloc:
            raise ValueError(
                f"catalog URL {location!r}: write sqlite:///relative/path or sqlite:////absolute/path"
            )
        return Path(unquote(parts.path[1:] if parts.path.startswith("/") else parts.path))
    if "://" in location:
        raise ValueError(f"catalog URL {location!r}: the scheme must be sqlite or postgresql")
    return Path(location)


def describe(location: str | Path) -> str:
    """A location as it may be logged: a URL's password masked."""
    text = str(location)
    if not is_postgresql_url(text):
        return text
    parts = urlsplit(text)
    if parts.password is None:
        return text
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def open_database(location: str | Path, *, durable: bool = True, pool_size: int = 8) -> Database:
    """The database at `location` (created and migrated to this code's schema if need be)."""
    if isinstance(location, str) and is_postgresql_url(location):
        from tiering.catalog.postgres import PostgresDatabase  # psycopg only where it is used

        return PostgresDatabase(location, pool_size=pool_size)
    from tiering.catalog.sqlite import SQLiteDatabase

    return SQLiteDatabase(sqlite_path(location), durable=durable)
