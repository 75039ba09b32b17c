"""Ranged, streaming reads with on-the-fly reconstruction.

Opening a blob opens its k data shards (all of them when one is unavailable), which pins them: a
delete or heal that races with the read unlinks or replaces names, never the open files. Parity
shards are opened only on the degraded path; the catalog's retire grace keeps a replaced blob's
files on disk long enough for that. A range reads only the data
blocks that cover it (no decoding on the healthy path). When a domain is down, a file is gone or a
block fails its checksum, the reader fetches further blocks until it holds k, decodes in a worker
thread, keeps streaming, and asks the pool to heal the blob. With fewer than k good blocks in a
stripe it raises DataLost — it never yields bytes it could not verify.

Shards on storage nodes (remote drives) are opened and read in parallel, one thread per shard
(a round trip each, not a disk seek), and opening is hedged: k+1 shards are asked for and the
first k to answer are used, so one hung or slow node costs nothing while the others answer. A
shard whose opening is still in flight is not asked for again on the degraded path.

A shard whose block read fails with an I/O error or timeout is set aside, not closed: when a
stripe cannot be completed from the other shards, each set-aside shard is tried again (up to
`RETRIES_PER_SHARD` times in one read) before DataLost. A read that already sent its headers has
no way left to answer but a cut connection, so a node that was merely slow for one request (a
timeout under load) must not turn into a lost stripe while it answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING

from erasure.codec import Buffer, Codec, codec_for, rebuild_blocks
from erasure.drive import Drive, ShardReader
from erasure.errors import CorruptShard, DataLost, DataNotFound, DomainOffline, ErasureError
from erasure.location import Location
from erasure.stripe import StripeLayout, StripeSlice
from erasure.whole_reads import CORRUPT, MISSING, OFFLINE, close_all, on_nodes, unreachable

if TYPE_CHECKING:
    from erasure.pool import ErasurePool

HEDGE_GRACE = 0.05  # seconds a hedged open waits for a slower data shard once k shards are open
# TIERSTORE_HEDGED_READS=0 opens only k shards (a hung node then costs its timeout before the
# others are tried): the baseline bench/bench_cluster.py measures hedging against.
HEDGED = os.environ.get("TIERSTORE_HEDGED_READS", "1").strip().lower() not in ("0", "false", "no", "off")
# How often one read tries a shard again after an I/O error or timeout, when the stripe has no
# other way to reach k blocks. Bounded: a node that is really gone costs at most this many timeouts.
RETRIES_PER_SHARD = 2


async def open_shards(
    pool: ErasurePool, data_id: str, loc: Location, size: int, wanted: Iterable[int] | None = None
) -> tuple[dict[int, ShardReader], dict[int, str]]:
    """Open the shards of a blob that can be opened (all, or `wanted`): (index → file, index → why not).

    One worker-thread trip opens them all: on a small-object GET the thread hand-offs, not the
    opens, were the cost.
    """
    indexes = range(loc.width) if wanted is None else sorted(set(wanted))
    problems = unreachable(pool, loc, indexes)
    tries: list[tuple[int, Drive]] = []
    for i in indexes:
        domain_id = loc.shards[i]
        store = pool.store(domain_id) if domain_id is not None and i not in problems else None
        if store is not None:  # placed on a known domain: `_unreachable` left it out of `problems`
            tries.append((i, store))

    def open_all() -> list[ShardReader | BaseException]:
        out: list[ShardReader | BaseException] = []
        for i, store in tries:
            try:
                out.append(store.open(data_id, i))
            except Exception as exc:  # sorted out below, per shard
                out.append(exc)
        return out

    if any(store.domain.address is not None for _, store in tries):  # on nodes: in parallel
        results: list[ShardReader | BaseException] = list(
            await asyncio.gather(
                *(asyncio.to_thread(store.open, data_id, i) for i, store in tries), return_exceptions=True
            )
        )
    else:
        results = await asyncio.to_thread(open_all) if tries else []
    files: dict[int, ShardReader] = {}
    for (i, _), result in zip(tries, results, strict=True):
        _sort_opened(i, result, loc, size, files, problems)
    return files, problems


def _sort_opened(
    i: int,
    result: ShardReader | BaseException,
    loc: Location,
    size: int,
    files: dict[int, ShardReader],
    problems: dict[int, str],
) -> None:
    """File an opening's outcome: into `files` when usable, else its reason into `problems`."""
    if not isinstance(result, BaseException):
        h = result.header
        if (h.k, h.m, h.block_size, h.size) == (loc.k, loc.m, loc.block_size, size):
            files[i] = result
            return
        result.close()
        problems[i] = CORRUPT
    elif isinstance(result, FileNotFoundError):
        problems[i] = MISSING
    elif isinstance(result, CorruptShard):
        problems[i] = CORRUPT
    elif isinstance(result, DomainOffline | OSError | ErasureError):
        problems[i] = OFFLINE
    else:
        raise result


async def open_hedged(
    pool: ErasurePool,
    data_id: str,
    loc: Location,
    size: int,
) -> tuple[dict[int, ShardReader], dict[int, str], set[int]]:
    """Open k+1 reachable shards at once (data shards first) and return once k are open or all
    have answered: (files, problems, indexes still opening). Those late openings run on; what they
    open is dropped (a remote shard reader holds nothing to close)."""
    problems = unreachable(pool, loc, range(loc.width))
    candidates = [i for i in range(loc.width) if i not in problems][: loc.k + 1 if HEDGED else loc.k]
    tasks: dict[asyncio.Future[ShardReader], int] = {}
    for i in candidates:
        store = pool.store(loc.shards[i] or "")
        if store is None:
            problems[i] = OFFLINE
            continue
        tasks[asyncio.ensure_future(asyncio.to_thread(store.open, data_id, i))] = i
    files: dict[int, ShardReader] = {}
    pending = set(tasks)
    while pending and len(files) < loc.k:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            _sort_opened(tasks[task], task.exception() or task.result(), loc, size, files, problems)
    if pending and any(tasks[t] < loc.k for t in pending):
        # k are open but a data shard is not: a moment more saves decoding every stripe.
        done, pending = await asyncio.wait(pending, timeout=HEDGE_GRACE)
        for task in done:
            _sort_opened(tasks[task], task.exception() or task.result(), loc, size, files, problems)
    for task in pending:
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no warning
    return files, problems, {tasks[t] for t in pending}


class PoolReader:
    """An opened blob. `stream(start, end)` yields its bytes; `close()` releases the files."""

    def __init__(
        self,
        pool: ErasurePool,
        data_id: str,
        loc: Location,
        size: int,
        files: dict[int, ShardReader],
        problems: dict[int, str],
    ) -> None:
        self._pool, self.data_id, self._loc, self.size = pool, data_id, loc, size
        self._files = files
        # Shards set aside after an I/O error or timeout, with the retries each has had (see above).
        self._set_aside: dict[int, tuple[ShardReader, int]] = {}
        self._geo = StripeLayout(size, loc.k, loc.block_size)
        self._codec: Codec = codec_for(loc.k, loc.m)
        self._heal_requested = False
        self._spares: asyncio.Future[None] | None = None
        self._opening: set[int] = set()  # hedged openings still in flight: not asked for again
        self._parallel = on_nodes(pool, loc)
        if problems:
            self._request_heal(f"shards unavailable at open: {sorted(problems)}")

    @classmethod
    async def open(cls, pool: ErasurePool, data_id: str, loc: Location, size: int) -> PoolReader:
        opening: set[int] = set()
        if on_nodes(pool, loc):
            files, problems, opening = await open_hedged(pool, data_id, loc, size)
            if len(files) < loc.k:  # the hedge was not enough: try every other shard
                rest = [
                    i for i in range(loc.width) if i not in files and i not in problems and i not in opening
                ]
                more, more_problems = await open_shards(pool, data_id, loc, size, rest)
                files.update(more)
                problems.update(more_problems)
                problems.update(dict.fromkeys(opening, OFFLINE))  # in flight still: too slow to wait for
        else:
            # The healthy path needs only the k data shards (a systematic code: no decoding); the
            # others are opened only when one of those is missing, offline or corrupt.
            files, problems = await open_shards(pool, data_id, loc, size, range(loc.k))
            if problems:
                more, more_problems = await open_shards(pool, data_id, loc, size, range(loc.k, loc.width))
                files.update(more)
                problems.update(more_problems)
            else:
                # Parity on a down domain is noticed without touching a file, so the read still
                # queues the blob for heal (a missing parity *file* is the scrubber's to find).
                problems.update(unreachable(pool, loc, range(loc.k, loc.width)))
        if len(files) < loc.k:
            await asyncio.to_thread(close_all, list(files.values()))
            if not files and all(p == MISSING for i, p in problems.items() if i not in loc.missing):
                raise DataNotFound(f"no shard of {data_id} exists")
            raise DataLost(data_id, f"only {len(files)} of {loc.width} shards reachable, need {loc.k}")
        reader = cls(pool, data_id, loc, size, files, problems)
        reader._opening = opening
        return reader

    async def stream(self, start: int, end: int) -> AsyncIterator[Buffer]:
        plan = self._geo.locate(start, end)
        # Read one stripe ahead so disk latency overlaps the consumer's sending.
        ahead: asyncio.Task[dict[int, Buffer]] | None = None
        try:
            for n, piece in enumerate(plan):
                current = ahead or asyncio.ensure_future(self._stripe_blocks(piece))
                ahead = asyncio.ensure_future(self._stripe_blocks(plan[n + 1])) if n + 1 < len(plan) else None
                blocks = await current
                for part in piece.blocks:
                    block = blocks[part.shard]
                    whole = part.start == 0 and part.end == len(block)
                    yield block if whole else block[part.start : part.end]
        finally:
            if ahead is not None:
                ahead.cancel()
                with contextlib.suppress(BaseException):
                    await ahead

    async def close(self) -> None:
        if self._spares is not None:
            # Let an opening in flight finish, so the files it opens are closed here too.
            with contextlib.suppress(BaseException):
                await self._spares
        files, self._files = list(self._files.values()), {}
        files += [f for i, (f, _) in self._set_aside.items() if all(f is not g for g in files)]
        self._set_aside = {}
        if files:
            await asyncio.to_thread(close_all, files)

    # -- one stripe -------------------------------------------------------------------------

    async def _stripe_blocks(self, piece: StripeSlice) -> dict[int, Buffer]:
        """The data blocks `piece` needs, read directly or rebuilt from any k good blocks."""
        needed = [b.shard for b in piece.blocks]
        good: dict[int, Buffer] = {}
        await self._read_into(good, needed, piece.stripe)
        if all(i in good for i in needed):
            return good
        if any(i not in good and i not in self._opening for i in needed):  # not merely slow: damaged
            self._request_heal(f"degraded read of stripe {piece.stripe}")
        await self._open_spares()
        spare = [i for i in range(self._loc.width) if i not in needed]
        while len(good) < self._loc.k:
            batch = [i for i in spare if i in self._files][: self._loc.k - len(good)]
            if not batch:
                batch = self._take_back_set_aside(good, self._loc.k - len(good))
            if not batch:
                raise DataLost(
                    self.data_id, f"only {len(good)} good blocks, need {self._loc.k}", piece.stripe
                )
            spare = [i for i in spare if i not in batch]
            await self._read_into(good, batch, piece.stripe)
        return await asyncio.to_thread(rebuild_blocks, self._codec, good, needed)

    def _take_back_set_aside(self, good: dict[int, Buffer], wanted: int) -> list[int]:
        """Up to `wanted` set-aside shards with retries left, back among the open files for one more try."""
        back: list[int] = []
        for i, (f, tries) in list(self._set_aside.items()):
            if len(back) < wanted and i not in good and i not in self._files and tries < RETRIES_PER_SHARD:
                self._files[i] = f
                self._set_aside[i] = (f, tries + 1)
                back.append(i)
        return back

    async def _open_spares(self) -> None:
        """Open the shards not opened yet (parity, on the degraded path), once.

        Stripes are read one ahead, so two may ask at once: both await the same opening.
        """
        if self._spares is None:
            self._spares = asyncio.ensure_future(self._do_open_spares())
        await asyncio.shield(self._spares)

    async def _do_open_spares(self) -> None:
        missing = [
            i
            for i in range(self._loc.width)
            if i not in self._files and i not in self._opening and i not in self._set_aside
        ]
        if missing:
            more, _ = await open_shards(self._pool, self.data_id, self._loc, self.size, missing)
            self._files.update(more)

    async def _read_into(self, good: dict[int, Buffer], shards: list[int], stripe: int) -> None:
        opened = [(i, self._files[i]) for i in shards if i in self._files]

        def read_all() -> list[memoryview | BaseException]:
            # One thread trip per stripe: small blocks come from the page cache faster than a
            # trip per block could hand them over.
            out: list[memoryview | BaseException] = []
            for _, f in opened:
                try:
                    out.append(f.read_block_view(stripe))
                except Exception as exc:
                    out.append(exc)
            return out

        if self._parallel and len(opened) > 1:  # blocks on nodes: one round trip each, at once
            results: list[memoryview | BaseException] = list(
                await asyncio.gather(
                    *(asyncio.to_thread(f.read_block_view, stripe) for _, f in opened), return_exceptions=True
                )
            )
        else:
            results = await asyncio.to_thread(read_all) if opened else []
        for (i, f), result in zip(opened, results, strict=True):
            if isinstance(result, memoryview):
                good[i] = result
            elif isinstance(result, CorruptShard):
                continue  # only this block is bad; the shard's other blocks may be fine
            elif isinstance(result, ErasureError | OSError):
                # The domain went away under us, or was slow for once: stop using this shard, but
                # keep it for a retry in case the stripe cannot be completed without it.
                if self._files.pop(i, None) is not None:
                    _, tries = self._set_aside.get(i, (f, 0))
                    self._set_aside[i] = (f, tries)
            else:
                raise result

    def _request_heal(self, reason: str) -> None:
        if not self._heal_requested:
            self._heal_requested = True
            self._pool.request_heal(self.data_id, self._loc.to_dict(), self.size, reason)
