"""The embedded catalog database: SQLite (WAL) in one file, with group commit.

Threading: SQLite calls block, so the async facade (`tiering.store`) runs them in threads. All
writes go through one connection (SQLite has one writer anyway, and a single writer connection
makes group commit possible); reads use one connection per reader thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from tiering.catalog.database import Conn, Database, NotAtHand, Params
from tiering.catalog.residency import WatchedFile
from tiering.catalog.schema import migrate_sqlite

_T = TypeVar("_T")

RESIDENCY_CHECK_INTERVAL = 1.0  # seconds between two checks that the catalog's files are cached
WAL_HEADER_BYTES, WAL_FRAME_HEADER_BYTES = 32, 24  # SQLite's WAL format
_KEEP_CACHED_BYTES = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
# The WAL's group-commit flush: data and size, not timestamps (as SQLite's own WAL syncs on Linux:
# strace shows fdatasync); fsync would also write the WAL's new mtime, a journal commit of its
# own. macOS has no fdatasync: fsync there.
_sync_data: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


# Generations one write transaction reserves at once (`SqliteDatabase.next_generation`).
GENERATION_BLOCK = 32


class _Combined:
    """One caller's work in a combined write transaction, and what became of it."""

    __slots__ = ("fn", "result", "error", "sequence", "done")

    def __init__(self, fn: Callable[[Conn], Any]) -> None:
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None
        self.sequence = 0
        self.done = False


class SQLiteDatabase(Database):
    """The embedded catalog: one file, one writer connection, per-thread readers."""

    dialect = "sqlite"
    greatest = "MAX"
    for_update = ""  # one writer: every write transaction is serializable anyway
    key_share = ""

    def __init__(self, path: Path, *, durable: bool = True) -> None:
        self.path = path
        self._file = path
        self.url = f"sqlite:///{path}"
        self.durable = durable
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._write_lock = threading.Lock()
        # Writers of other processes (the workers of `serve --workers N`, the lifecycle daemon,
        # the admin CLI) queue on this file's lock rather than in SQLite's busy handler, which
        # polls with sleeps of up to 100 ms: two workers committing small PUTs spent their P99
        # there (206 ms, max 751 ms, where one process had 68 ms). flock wakes the next waiter
        # the moment the holder lets go, and costs two system calls when nobody waits.
        self._writers_fd = os.open(f"{path}-writers.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        # Opened and migrated under every process's writers' lock: the workers of `serve` open
        # a new catalog at the same moment, and SQLite answers the loser of the switch to WAL
        # mode "database is locked" at once (no busy handler there; a worker died of it).
        with self._writing():
            self._writer = self._connect()
            migrate_sqlite(self._writer, str(path))
        # Group commit: transactions are written to the WAL without an fsync each; a committer
        # then waits until the WAL is fsync'd past its commit, and one fsync serves every
        # commit that arrived meanwhile. Durable on return, like synchronous=FULL, but concurrent
        # small PUTs share the disk flush instead of queueing for one each.
        self._sync = threading.Condition()
        self._committed = 0  # commits written to the WAL by this process
        self._synced = 0  # commits known to be on disk
        self._syncing = False
        self.fsyncs = 0
        self._wal_fd = os.open(f"{path}-wal", os.O_RDONLY) if durable else -1
        self._queue_lock = threading.Lock()
        # Generations reserved by the open write transaction and not handed out yet (see
        # `next_generation`); emptied whenever a transaction begins or anything is rolled back.
        self._generations: list[int] = []
        self._queued: list[_Combined] = []  # work waiting for `_write_combined`'s next batch
        # The event loop's lookups (`row_at_hand`): its connection, its thread, the cache check.
        self._at_hand: sqlite3.Connection | None = None
        self._at_hand_thread: int | None = None  # the first thread that asks: the event loop's
        self._resident = False
        self._residency_due = 0.0
        self._closed = False
        # `listing_stamp`'s connection (one shared by every thread, never writing).
        self._stamp_conn: sqlite3.Connection | None = None
        self._stamp_lock = threading.Lock()
        # Database, -shm and WAL, each through one descriptor kept open (see WatchedFile).
        self._watched = tuple(WatchedFile(Path(f"{path}{tail}")) for tail in ("", "-shm", "-wal"))

    # --- connections ------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._file, isolation_level=None, check_same_thread=False, timeout=30)
        if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            conn.execute("PRAGMA journal_mode=WAL")  # once per catalog: the first writer's open
        # NORMAL: SQLite syncs the WAL only around checkpoints; `_make_durable` fsyncs it after
        # each commit (grouped), so an acknowledged write still survives power loss.
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def row_at_hand(self, sql: str, params: Params) -> Any:
        """See Database.row_at_hand: on the one thread that asks it (the event loop's), while the
        catalog's files are all in the page cache (checked each second by another thread: see
        tiering/catalog/residency.py), on a connection that never waits for a lock."""
        now = time.monotonic()
        if now >= self._residency_due:
            self._residency_due = now + RESIDENCY_CHECK_INTERVAL
            threading.Thread(target=self._check_residency, name="catalog-residency", daemon=True).start()
        if self._at_hand_thread is None:
            self._at_hand_thread = threading.get_ident()
        conn = self._at_hand
        if conn is None or not self._resident or threading.get_ident() != self._at_hand_thread:
            raise NotAtHand()
        try:
            return conn.execute(sql, params).fetchone()
        except sqlite3.Error as exc:  # busy (busy_timeout 0), or worse: the thread path says what
            raise NotAtHand() from exc

    def listing_stamp(self) -> int | None:
        """The listing change counter (schema version 7: triggers on `objects` and `buckets` count
        what a listing shows). Not PRAGMA data_version, which counts every commit: leases and
        heartbeats commit twice a second on an idle server, and every one of them made a page
        read ahead useless."""
        with self._stamp_lock:
            if self._closed:
                return None
            if self._stamp_conn is None:
                self._stamp_conn = self._connect()
                self._stamp_conn.execute("PRAGMA query_only=1")
            row = self._stamp_conn.execute("SELECT changes FROM listing_changes WHERE id = 1").fetchone()
            return int(row[0])

    def _check_residency(self) -> None:
        """Are the database, its WAL and its shared index all cached? (in a thread: mincore
        walks the page tables). Also opens the at-hand connection, which reads the schema."""
        try:
            if self._at_hand is None and not self._closed:
                conn = sqlite3.connect(self._file, isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA query_only=1")
                conn.execute("PRAGMA busy_timeout=0")
                conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone()
                self._at_hand = conn
            db, shm, wal = self._watched
            wal_bytes = self._wal_in_use()
            # What is missing is read back in (each file, even after one fails) — unless the
            # catalog would take over a quarter of the memory: then only looked at.
            keep = os.path.getsize(self._file) + wal_bytes <= _KEEP_CACHED_BYTES
            cached = [
                db.keep_cached() if keep else db.fully_cached(),
                shm.keep_cached() if keep else shm.fully_cached(),
                wal.keep_cached(wal_bytes) if keep else wal.fully_cached(wal_bytes),
            ]
            self._resident = all(cached)
        except (OSError, sqlite3.Error):
            self._resident = False

    def _wal_in_use(self) -> int:
        """The bytes of the WAL a reader may read now: its header and the frames up to the last
        valid one (the WAL index's mxFrame; frames past it are left from before the last reset
        and never read). From the shared index's header: u16 page size at 14 (1: 65536), u32
        mxFrame at 16, native byte order (sqlite3/src/wal.c, WalIndexHdr)."""
        header = self._watched[1].pread(20, 0)  # never open() and close() it: see WatchedFile
        if len(header) < 20:
            return 1 << 62  # no index yet: the whole file
        page_size, frames = struct.unpack_from("=HI", header, 14)
        page_size = 65536 if page_size == 1 else page_size
        return WAL_HEADER_BYTES + frames * (WAL_FRAME_HEADER_BYTES + page_size)

    def reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            conn.execute("PRAGMA query_only=1")
            self._local.conn = conn
        return conn

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """This process's write lock, then every process's."""
        with self._write_lock, self._other_processes_wait():
            yield

    @contextmanager
    def _other_processes_wait(self) -> Iterator[None]:
        """The lock file's lock (see `_writers_fd`); take it with `_write_lock` held."""
        fcntl.flock(self._writers_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._writers_fd, fcntl.LOCK_UN)

    @contextmanager
    def write(self, *, relaxed: bool = False, snapshot: bool = False) -> Iterator[Conn]:
        with self._writing():
            conn = self._writer
            self._begin(conn)
            try:
                yield conn
            except BaseException:
                self._roll_back(conn, "ROLLBACK")
                raise
            conn.execute("COMMIT")
            sequence = self._count_commit()
        if self.durable:
            self._make_durable(sequence)

    def _count_commit(self) -> int:
        with self._sync:
            self._committed += 1
            return self._committed

    def write_combined(self, fn: Callable[[Conn], _T], *, snapshot: bool = False) -> _T:
        """`fn(db)` in a write transaction, possibly shared with other threads' (flat combining).

        With many small PUTs committing at once, taking turns on the write lock was the cost:
        each holder needs the GIL back after every SQLite call, so sixteen commits queued behind
        one another for many switch intervals each. Here a committer queues its work; whoever
        holds the write lock runs everything queued in one transaction (a piece that raises is
        rolled back alone and its caller gets the error: `_run_combined`).
        The others find their work done when they get the lock. Durability is unchanged: each
        caller still waits for the WAL fsync that covers the shared commit.
        """
        ((result, error),) = self.write_batch([fn])
        if error is not None:
            raise error
        return result

    batches_writes = True

    def write_batch(self, fns: Sequence[Callable[[Conn], Any]]) -> list[tuple[Any, BaseException | None]]:
        """See Database.write_batch: every piece queued at once, so one combined transaction (and
        one WAL fsync) takes them all, with whatever other threads queued meanwhile."""
        ops = [_Combined(fn) for fn in fns]
        if not ops:
            return []
        with self._queue_lock:
            self._queued.extend(ops)
        with self._write_lock:
            if not ops[0].done:  # queued together: whoever combined one of them took them all
                with self._queue_lock:
                    batch, self._queued = self._queued, []
                with self._other_processes_wait():
                    self._run_combined(batch)
        if self.durable:
            self._make_durable(max(op.sequence for op in ops))
        return [(op.result, op.error) for op in ops]

    def _run_combined(self, batch: list[_Combined]) -> None:
        """Run queued work in one transaction (the write lock is held).

        First all pieces straight through; only if one raises is the transaction rolled back and
        run again with each piece in a savepoint of its own (so that one that fails fails alone).
        Almost every batch commits the first way, two statements per piece fewer: each statement
        lets go of the GIL and waits to get it back from the busy event loop."""
        conn = self._writer
        try:
            self._begin(conn)
            if len(batch) == 1 or not self._run_straight(conn, batch):
                self._run_pieces(conn, batch)
            conn.execute("COMMIT")
        except BaseException as exc:  # BEGIN or COMMIT failed (I/O error, disk full): nothing landed
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._roll_back(conn, "ROLLBACK")
            for op in batch:
                op.error = op.error or exc
        sequence = self._count_commit()
        for op in batch:
            op.sequence = sequence
            op.done = True

    def _run_straight(self, conn: sqlite3.Connection, batch: list[_Combined]) -> bool:
        """Every piece in the open transaction, no savepoints; False (all rolled back, the
        transaction open again) if one raised."""
        for op in batch:
            try:
                op.result = op.fn(conn)
            except Exception:
                self._roll_back(conn, "ROLLBACK")
                self._begin(conn)
                for piece in batch:
                    piece.result = None
                return False
        return True

    def _run_pieces(self, conn: sqlite3.Connection, batch: list[_Combined]) -> None:
        for op in batch:
            conn.execute("SAVEPOINT piece")
            try:
                op.result = op.fn(conn)
            except BaseException as exc:
                self._roll_back(conn, "ROLLBACK TO piece")
                op.error = exc
            conn.execute("RELEASE piece")

    def _make_durable(self, sequence: int) -> None:
        """Return once commit number `sequence` is on disk; one caller fsyncs for all waiting."""
        with self._sync:
            while self._synced < sequence:
                if self._syncing:
                    self._sync.wait()
                    continue
                self._syncing = True
                target = self._committed
                self._sync.release()
                try:
                    _sync_data(self._wal_fd)
                finally:
                    self._sync.acquire()
                    self._syncing = False
                    self._sync.notify_all()
                self.fsyncs += 1
                self._synced = max(self._synced, target)

    def close(self) -> None:
        with self._write_lock:
            self._writer.close()
            self._closed = True
            at_hand, self._at_hand = self._at_hand, None
            if at_hand is not None:
                at_hand.close()
            with self._stamp_lock:
                if self._stamp_conn is not None:
                    self._stamp_conn.close()
                    self._stamp_conn = None
            for watched in self._watched:
                watched.close()
            if self._wal_fd >= 0:
                os.close(self._wal_fd)
                self._wal_fd = -1
            if self._writers_fd >= 0:
                os.close(self._writers_fd)
                self._writers_fd = -1

    # --- the dialect ------------------------------------------------------------------------

    def _begin(self, conn: sqlite3.Connection) -> None:
        self._generations.clear()
        conn.execute("BEGIN IMMEDIATE")

    def _roll_back(self, conn: sqlite3.Connection, statement: str) -> None:
        """ROLLBACK, or ROLLBACK TO a savepoint: a reservation of generations may be undone with it."""
        self._generations.clear()
        conn.execute(statement)

    def next_generation(self, db: Conn) -> int:
        """Reserved a block at a time (GENERATION_BLOCK) for the rest of the write transaction:
        a batch of small PUTs commits in one, and each statement lets go of the GIL and waits to
        get it back from the busy event loop. The values a transaction leaves unused are gaps;
        committed generations still grow with the commit order (each transaction reserves its
        own block, after the last one committed)."""
        if not self._generations:
            row = db.execute(
                "UPDATE counters SET value = value + ? WHERE name = 'generation' RETURNING value",
                (GENERATION_BLOCK,),
            ).fetchone()
            last = int(row[0])
            self._generations = list(range(last, last - GENERATION_BLOCK, -1))  # popped from the end
        return self._generations.pop()

    def upsert_object_sql(self, columns: str, placeholders: str) -> str:
        # INSERT OR REPLACE, never ON CONFLICT DO UPDATE: see USAGE_SCHEMA (schema.py).
        return f"INSERT OR REPLACE INTO objects ({columns}) VALUES ({placeholders})"
