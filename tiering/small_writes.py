"""Small PUTs committed in batches by one thread: one flush of the drives and one catalog
transaction (one WAL fsync) for all the PUTs that arrived while the previous batch committed.

Why a thread of its own: a small PUT used to take a worker-thread trip of its own — append its
shards to three packs, wait for the drives' flush, commit its catalog row, wait for the WAL's
fsync. Sixteen PUTs at once were sixteen threads taking turns on the GIL after every system call
and every condition wait: 128 futex calls per PUT, half of the server's CPU outside Python
(bench/RESULTS.md, "Where a 4 KiB PUT's server time goes"). Here the event loop queues each PUT,
one thread writes the whole batch, waits for one flush per drive and commits every row in one
transaction, and the event loop is woken once per batch to answer them all.

Only where both sides batch: a backend whose `batches_small_writes` (erasure-coded tiers: packs)
and a catalog whose database `batches_writes` (SQLite's group commit). Elsewhere — PostgreSQL,
which runs concurrent transactions itself; memory, files and remote tiers — a PUT keeps its own
worker-thread trip (tiering/store.py, `PendingWrite`).

Durability and isolation are the same as the single PUT's: a PUT is answered only after its
shards are flushed and its row's commit is fsync'd; each row commits in its own savepoint, so one
that fails (a failed condition, a bucket deleted meanwhile) fails alone.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from tiering.backend import StoredData, TierBackend
from tiering.catalog import Catalog
from tiering.errors import TierUnavailable
from tiering.records import ObjectRecord

# The largest body the committer takes. Small bodies are what it is for (their cost is the
# hand-offs it saves); a larger one keeps its own worker-thread trip, where its erasure coding
# and hashing (which let go of the GIL) run in parallel with other PUTs' instead of one by one
# in this thread. 128 KiB: ImageNet-sized images; every shard of such a body is packed (the pack
# files' default threshold, erasure/pack.py, is larger).
MAX_BODY_BYTES = 128 << 10

# The most PUTs one batch takes (16 MiB of bodies at most); the rest wait for the next one.
MAX_BATCH = 128


@dataclass(eq=False)
class SmallWrite:
    """One PUT's whole body and how to make its catalog row; the committer fills in the rest."""

    backend: TierBackend
    data_id: str
    body: bytes
    record_for: Callable[[StoredData], ObjectRecord]  # called in the committer's thread
    if_match: str | None = None
    if_none_match: str | None = None
    stored: StoredData | None = None  # durable data (the writer discards it if the commit failed)
    result: ObjectRecord | None = None  # committed: the catalog owns the data from now on
    error: BaseException | None = None
    _future: asyncio.Future[None] | None = field(default=None, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    _answered: bool = field(default=False, repr=False)  # the batch is over (set on the loop's thread)


class SmallWriteCommitter:
    """The thread that commits queued `SmallWrite`s in batches (started by the first one)."""

    def __init__(self, catalog: Catalog, check_may_commit: Callable[[list[str]], None]) -> None:
        self._catalog = catalog
        self._check_may_commit = check_may_commit
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._queue: list[SmallWrite] = []
        # Not `_thread`: the compiled build (setup.py) makes it a C field named `__thread`, a C keyword.
        self._committer_thread: threading.Thread | None = None
        self._closed = False
        self.batches = 0  # batches committed, and the writes in them: their ratio is the batching
        self.writes = 0

    async def commit(self, write: SmallWrite) -> ObjectRecord:
        """Store and commit `write`; its error if either failed. If the caller is cancelled, the
        batch still runs: wait for it, so that the caller then sees what was stored or committed."""
        loop = asyncio.get_running_loop()
        write._loop, write._future = loop, loop.create_future()
        with self._lock:
            if self._closed:  # the server is stopping: this PUT is retried elsewhere or later (503)
                raise TierUnavailable("the server is shutting down")
            self._queue.append(write)
            if self._committer_thread is None:
                self._committer_thread = threading.Thread(target=self._run, name="small-writes", daemon=True)
                self._committer_thread.start()
            self._ready.notify()
        # The future itself is awaited, not a shield of it (a shield is an outer future, two
        # callbacks and seven interpreted calls per PUT): a cancellation of the caller cancels it,
        # and the batch's answer then comes on a fresh one, below.
        try:
            await write._future
        except asyncio.CancelledError as exc:  # waited for outside the handler: see setup.py
            cancelled = exc
        else:
            if write.error is not None:
                raise write.error
            assert write.result is not None
            return write.result
        if not write._answered:  # `_resolve` sets the future it finds then (on this loop's thread)
            write._future = loop.create_future()
            await write._future
        raise cancelled

    async def close(self) -> None:
        """Commit what is queued, then stop the thread."""
        with self._lock:
            self._closed = True
            self._ready.notify()
            thread = self._committer_thread
        if thread is not None:
            await asyncio.to_thread(thread.join)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._ready.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            try:
                self._commit(batch)
            except BaseException as exc:  # a bug, not a PUT's failure: every PUT of the batch hears it
                for write in batch:
                    if write.error is None and write.result is None:
                        write.error = exc
            finally:
                self.batches += 1
                self.writes += len(batch)
                _answer(batch)

    def _commit(self, batch: list[SmallWrite]) -> None:
        # The bodies: every blob of one backend written and published, then one flush per drive.
        by_backend: dict[int, list[SmallWrite]] = {}
        for write in batch:
            by_backend.setdefault(id(write.backend), []).append(write)
        for writes in by_backend.values():
            stored = writes[0].backend.write_wholes([(w.data_id, w.body) for w in writes])
            for write, data in zip(writes, stored, strict=True):
                if isinstance(data, StoredData):
                    write.stored = data
                else:
                    write.error = data
        # The rows: one transaction (each in its own savepoint), one fsync of the WAL.
        ready: list[tuple[SmallWrite, ObjectRecord]] = []
        for write in batch:
            if write.stored is None:
                continue
            try:
                self._check_may_commit([write.data_id])
                ready.append((write, write.record_for(write.stored)))
            except Exception as exc:
                write.error = exc
        committed = self._catalog.commit_objects([(r, w.if_match, w.if_none_match) for w, r in ready])
        for (write, _), outcome in zip(ready, committed, strict=True):
            if isinstance(outcome, ObjectRecord):
                write.result = outcome
            else:
                write.error = outcome


def _answer(batch: list[SmallWrite]) -> None:
    """Wake each event loop once for all its writes of the batch (from the committer's thread)."""
    by_loop: dict[int, tuple[asyncio.AbstractEventLoop, list[SmallWrite]]] = {}
    for write in batch:
        assert write._loop is not None
        by_loop.setdefault(id(write._loop), (write._loop, []))[1].append(write)
    for loop, writes in by_loop.values():
        try:
            loop.call_soon_threadsafe(_resolve, writes)
        except RuntimeError:  # that loop is closed: nobody waits any more
            pass


def _resolve(writes: list[SmallWrite]) -> None:
    for write in writes:
        write._answered = True
        if write._future is not None and not write._future.done():
            write._future.set_result(None)
