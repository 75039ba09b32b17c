"""Streaming writes: each stripe is encoded and appended in a worker thread while the next arrives.

One thread hop per stripe: the thread encodes it and appends its k+m blocks one after another
(zfec, xxhash and os.write release the GIL, so this overlaps the caller receiving and hashing the
next bytes). At most one stripe is in flight, so memory stays bounded by two stripes
(k × block_size each) plus the caller's chunk, and frames reach every shard in order.

A blob still wholly buffered at `finish()` — every small object — is placed, created, written and
committed in a single hop: a few small files and one shared filesystem flush, not a dozen hops.
`write_blob` does the same from a thread the caller already runs in (no hop of its own).

Placement skips drives marked full or failing (drive_health.py). A shard whose drive fails anyway
is retried on another writable drive before the quorum is judged: first in a group (at the pool's
spreading level) that holds no shard of this blob, else on another drive of the failed drive's own
group — never where two shards would share a group. Mid-stream, the frames already written are
copied from the failed drive's temporary file (`ShardWriter.relocate`); a whole blob held in
memory is simply written again. Every failure is reported to the pool's `DriveHealth`, and the
location records where each shard actually landed. A shard with nowhere left to go (or one that
fails at the final flush of a streamed blob, when its bytes are no longer at hand) is dropped and
recorded as missing (heal recreates it later); the write fails only when fewer than the write
quorum of shards are still alive, with an error naming each failed drive and why.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from erasure.codec import Buffer, Codec, codec_for, encode_blocks
from erasure.drive import Drive, ShardWriter
from erasure.drive_health import describe_error, is_out_of_space
from erasure.durability import FlushBarrier
from erasure.errors import ErasureError, OutOfSpace, ShardUnreadable, WriteQuorumError
from erasure.location import Location
from erasure.placement import PlacementMemo, place
from erasure.shard_format import ShardHeader
from erasure.shard_store import PublishedShards, check_data_id, commit_shards, publish_shards, settle_shards
from erasure.stripe import StripeLayout, split_stripe

if TYPE_CHECKING:
    from erasure.pool import ErasurePool
    from erasure.topology import Domain

Failures = dict[int, BaseException]  # shard index → why that shard was dropped
# Called (in the worker thread) when shard `index` failed with `error`; `old` is its open file, if
# any. Returns the shard's writer on another drive, or None when it is dropped.
Rescue = Callable[[int, BaseException, ShardWriter | None], ShardWriter | None]
T = TypeVar("T")


class PoolWriter:
    """Receives one blob's bytes in order. `finish()` returns the location dict; `abort()` discards."""

    def __init__(
        self,
        pool: ErasurePool,
        data_id: str,
        size_hint: int | None,
        *,
        placed_by: str | None = None,
        memo: PlacementMemo | None = None,
    ) -> None:
        self._pool = pool
        self.data_id = check_data_id(data_id)
        self.size_hint = size_hint
        # The id placement ranks domains by: this blob's own, or the first blob's of a batch
        # written together (`ErasurePool.write_blobs`), recorded in the location then.
        self._placed_by = placed_by if placed_by != data_id else None
        self._placement_key = placed_by or data_id
        self._memo = memo  # the batch's placements, shared with its other writers
        self.size = 0
        self._pending: deque[memoryview] = deque()  # bytes received, not yet part of a stripe
        self._pending_bytes = 0
        self._inflight: asyncio.Task[None] | None = None  # the previous stripe, being written
        self._loc: Location | None = None
        self._writers: dict[int, ShardWriter] = {}
        self._committed: list[ShardWriter] = []
        self._stripe = 0
        self._quorum = 0
        self._out_of_space = False
        self._failed: list[str] = []  # "<drive> <why>" for each failed shard write, for the error
        self._tried: set[str] = set()  # drives that failed for this blob: never retried on
        self._header_size = 0
        self._state = "open"
        self._placed_on: list[str] = []  # domains this writer holds a placement on (see ErasurePool)
        # A whole blob between `stage_blob` and `end_blob`: (its bytes, its published shards, their
        # indexes, the shards lost while writing).
        self._staged: tuple[Buffer, PublishedShards, list[int], Failures] | None = None
        # Before that, between `prepare_blob` and `publish_prepared`: (its bytes, its shards by
        # index, not yet published, the shards lost while writing).
        self._prepared: tuple[Buffer, list[tuple[int, ShardWriter]], Failures] | None = None

    async def write(self, chunk: bytes | memoryview) -> None:
        self._check_open()
        if not len(chunk):
            return
        # Held until its stripe is written: bytes (or a read-only view) as they are; a view of a
        # mutable buffer is copied, since its owner may reuse it.
        if not (isinstance(chunk, bytes) or (isinstance(chunk, memoryview) and chunk.readonly)):
            chunk = bytes(chunk)
        self._pending.append(memoryview(chunk))
        self._pending_bytes += len(chunk)
        self.size += len(chunk)
        # The pool's code may change meanwhile (a recode): a blob keeps the k it began with.
        stripe_bytes = (self._loc.k if self._loc is not None else self._pool.k) * self._pool.block_size
        try:
            # The pool keeps small_object_threshold <= one stripe, so a full stripe means erasure coding.
            while self._pending_bytes >= stripe_bytes:
                if self._loc is None:
                    await self._begin()
                assert self._loc is not None
                blocks = [self._take(self._pool.block_size) for _ in range(self._loc.k)]
                await self._settle()  # one stripe in flight at a time: bounded memory, frames in order
                self._inflight = asyncio.ensure_future(self._flush(blocks))
        except BaseException as exc:  # cleaned up outside the handler: see setup.py
            failure = exc
        else:
            return
        await self.abort()
        raise failure

    async def finish(self) -> dict[str, Any]:
        self._check_open()
        try:
            await self._settle()
            if self._loc is None:
                await _blocking(self._write_whole, self._take(self.size))
            else:
                await self._finish_stream()
        except BaseException as exc:  # cleaned up outside the handler: see setup.py
            failure = exc
        else:
            self._state = "finished"
            self._release_placement()
            assert self._loc is not None
            return self._loc.to_dict()
        await self.abort()
        raise failure

    def write_blob(self, data: Buffer) -> dict[str, Any]:
        """The whole blob at once, instead of `write`s and `finish`: blocking, for a worker thread.

        Places, creates, writes and commits every shard in the calling thread (small objects: one
        thread trip does it all). Returns the location; on failure nothing is left behind.
        """
        self.stage_blob(data)
        return self.end_blob()

    def stage_blob(self, data: Buffer) -> list[FlushBarrier]:
        """The first half of `write_blob`: place, create, write and publish every shard, without
        waiting for the drives' flushes. Returns the barriers to request tickets from; `end_blob`
        must follow (several blobs staged first share one flush: `ErasurePool.write_blobs`)."""
        self.prepare_blob(data)
        return self.publish_prepared(publish_shards([(w, None) for w in self.prepared_shards()]))

    def prepare_blob(self, data: Buffer) -> None:
        """`stage_blob` up to publishing: place, create and write every shard. Then the caller
        publishes `prepared_shards()` (with other blobs': `publish_shards_many`) and hands the
        outcome to `publish_prepared`; or `abort_prepared`."""
        self._check_open()
        if self.size:
            raise ErasureError(f"writer for {self.data_id} already has streamed bytes")
        self.size = len(data)
        try:
            self._prepare_whole(data)
        except BaseException:
            self._abort_whole()
            raise

    def prepared_shards(self) -> list[ShardWriter]:
        assert self._prepared is not None
        return [w for _, w in self._prepared[1]]

    def publish_prepared(self, published: PublishedShards) -> list[FlushBarrier]:
        """The prepared shards were published (`published`): returns the barriers to request tickets from."""
        assert self._prepared is not None
        data, order, lost = self._prepared
        self._prepared = None
        self._writers.clear()
        self._staged = (data, published, [i for i, _ in order], lost)
        return [barrier for barrier, _ in published.barriers.values()]

    def abort_prepared(self) -> None:
        self._prepared = None
        self._abort_whole()

    def end_blob(self, tickets: dict[int, int] | None = None) -> dict[str, Any]:
        """The second half of `write_blob`: wait until the shards are durable (`tickets`, by id of
        barrier, if requested already), write again elsewhere any whose flush failed; the location."""
        try:
            self._settle_whole(tickets)
        except BaseException:
            self._abort_whole()
            raise
        self._state = "finished"
        self._release_placement()
        assert self._loc is not None
        return self._loc.to_dict()

    def _abort_whole(self) -> None:
        self._state = "aborted"
        self._release_placement()
        staged, self._staged = self._staged, None
        if staged is not None:  # published, not yet settled: take them back too
            settle_shards(staged[1])
            self._committed.extend(
                w for w, error in zip(staged[1].writers, staged[1].results, strict=True) if error is None
            )
        _discard(list(self._writers.values()), self._committed)

    async def abort(self) -> None:
        """Discard everything written. A no-op after a successful finish: use the pool's delete then."""
        if self._state in ("finished", "aborted"):
            return
        self._state = "aborted"
        self._release_placement()
        task, self._inflight = self._inflight, None
        if task is not None:
            await asyncio.wait([task])  # its thread may still be appending: let it end first
            if not task.cancelled():
                task.exception()  # retrieved: it is why we abort, or moot now
        writers, self._writers = list(self._writers.values()), {}
        committed, self._committed = self._committed, []
        await asyncio.to_thread(_discard, writers, committed)

    # -- steps ------------------------------------------------------------------------------

    def _place(self, layout: str) -> list[Domain]:
        """Choose the domains and record the location; raises if too few are available."""
        pool = self._pool
        k = pool.k if layout == "ec" else 1
        width = k + pool.m
        self._quorum = pool.write_quorum_for(layout)
        choose = place if self._memo is None else self._memo.place
        with pool.placing():
            domains = choose(
                self._placement_key, pool.topology, pool.spread_level, width, usable=pool.writable
            )
            self._placed_on = pool.hold_placement([d.id for d in domains])
        shards: list[str | None] = [d.id for d in domains] + [None] * (width - len(domains))
        missing = set(range(len(domains), width))
        self._loc = Location(layout, k, pool.m, pool.block_size, shards, missing, self._placed_by)
        self._check_quorum(len(domains))
        return domains

    def _release_placement(self) -> None:
        placed, self._placed_on = self._placed_on, []
        self._pool.release_placement(placed)

    def _targets(self, domains: list[Domain], size: int) -> list[tuple[int, Drive, ShardHeader]]:
        self._header_size = size  # what a shard opened on a replacement drive starts with
        return self._targets_at(dict(enumerate(domains)), size)

    def _targets_at(self, domains: dict[int, Domain], size: int) -> list[tuple[int, Drive, ShardHeader]]:
        loc = self._loc
        assert loc is not None
        targets = []
        for i, domain in domains.items():
            store = self._pool.store(domain.id)
            assert store is not None  # placement only returns domains of the pool's topology
            targets.append(
                (i, store, ShardHeader(self.data_id, loc.layout, loc.k, loc.m, i, loc.block_size, size))
            )
        return targets

    async def _begin(self) -> None:
        """Streaming an erasure-coded blob: create its shard files (sizes are rewritten at the end)."""
        targets = self._targets(self._place("ec"), 0)
        self._drop(await _blocking(_create, targets, self._writers, self._rescue))

    async def _flush(self, blocks: list[Buffer]) -> None:
        assert self._loc is not None
        codec = codec_for(self._loc.k, self._loc.m)
        stripe, self._stripe = self._stripe, self._stripe + 1
        # Nothing else touches the writers while a stripe is in flight (see `_settle`).
        self._drop(await _blocking(_append, codec, blocks, stripe, self._writers, self._rescue))

    async def _settle(self) -> None:
        """Wait for the stripe in flight; its failure (write quorum lost, a bug) surfaces here."""
        task = self._inflight
        if task is None:
            return
        try:
            # Shielded: if our caller is cancelled, the thread still runs; `abort` waits for it.
            await asyncio.shield(task)
        finally:
            if task.done():
                self._inflight = None

    def _write_whole(self, data: Buffer) -> None:
        """The whole blob is at hand: place, create, write and commit every shard (blocking)."""
        self._prepare_whole(data)
        self.publish_prepared(publish_shards([(w, None) for w in self.prepared_shards()]))
        self._settle_whole()

    def _prepare_whole(self, data: Buffer) -> None:
        pool = self._pool
        layout = "replica" if self.size < pool.small_object_threshold else "ec"
        targets = self._targets(self._place(layout), self.size)
        loc = self._loc
        assert loc is not None
        codec = codec_for(loc.k, loc.m)
        geo = StripeLayout(self.size, loc.k, loc.block_size)
        lost = _write_frames(targets, codec, data, geo, self._writers, self._rescue)
        # Still in `_writers` until published: an abort discards them from there.
        self._prepared = (data, list(self._writers.items()), lost)

    def _settle_whole(self, tickets: dict[int, int] | None = None) -> None:
        assert self._staged is not None and self._loc is not None
        data, published, indexes, lost = self._staged
        self._staged = None
        loc = self._loc
        codec = codec_for(loc.k, loc.m)
        geo = StripeLayout(self.size, loc.k, loc.block_size)
        unflushed: Failures = {}
        shards = list(zip(indexes, published.writers, strict=True))
        _sort_out(shards, settle_shards(published, tickets), self._committed, unflushed)
        # A shard that failed at its flush is written again, whole, on another drive: the bytes are at hand.
        while unflushed:
            retry = []
            for i, error in unflushed.items():
                self._fail(i, error)
                target = self._replacement(i)
                if target is None:
                    lost[i] = error
                    continue
                loc.shards[i] = target.id
                retry.extend(self._targets_at({i: target}, self.size))
            lost_again, unflushed = _write_blob(
                retry, codec, data, geo, self._writers, self._committed, self._rescue
            )
            lost.update(lost_again)
        self._written()
        self._drop(lost)

    async def _finish_stream(self) -> None:
        """Append the last (short) stripe, rewrite the headers with the size, commit: one hop."""
        loc = self._loc
        assert loc is not None
        geo = StripeLayout(self.size, loc.k, loc.block_size)
        tail = self._take(self._pending_bytes)
        block_len = geo.block_len(self._stripe) if self._stripe < geo.stripe_count else 0
        headers = {
            i: ShardHeader(self.data_id, loc.layout, loc.k, loc.m, i, loc.block_size, self.size)
            for i in self._writers
        }
        lost, unflushed = await _blocking(
            _finish,
            codec_for(loc.k, loc.m),
            tail,
            self._stripe,
            block_len,
            self._writers,
            headers,
            self._committed,
            self._rescue,
        )
        # A shard that failed at its final flush cannot be moved: its bytes are no longer at hand.
        for i, error in unflushed.items():
            self._fail(i, error)
        self._written()
        self._drop(lost | unflushed)

    def _take(self, size: int) -> Buffer:
        """The next `size` buffered bytes: a view when one chunk holds them, else one copy.

        Taken a block at a time: a caller writing block-sized chunks (PendingWrite's batches)
        costs no copy at all.
        """
        parts: list[memoryview] = []
        need = size
        while need:
            piece = self._pending.popleft()
            if len(piece) > need:
                self._pending.appendleft(piece[need:])
                piece = piece[:need]
            parts.append(piece)
            need -= len(piece)
        self._pending_bytes -= size
        if len(parts) == 1:
            return parts[0]
        return b"".join(parts)

    def _drop(self, lost: Failures) -> None:
        """Record shards given up on (already reported, files discarded); check the write quorum."""
        assert self._loc is not None
        for i in lost:
            self._writers.pop(i, None)
            self._loc.missing.add(i)
        self._check_quorum(len(self._writers) + len(self._committed))

    # -- a failed shard: report it, move it ---------------------------------------------------

    def _fail(self, index: int, error: BaseException) -> None:
        """Shard `index` failed on the drive the location names for it: tell the pool's drive health."""
        if not isinstance(error, ErasureError | OSError):
            raise error  # a bug, not a failed domain
        loc = self._loc
        assert loc is not None
        domain_id = loc.shards[index]
        domain = self._pool.topology.get(domain_id) if domain_id else None
        if domain is None:
            return
        self._tried.add(domain.id)
        if isinstance(error, OSError):
            self._pool.health.write_failed(domain, error)
        if is_out_of_space(error):
            self._out_of_space = True
            why = f"full ({describe_error(error).split(' ', 1)[0]})"
        elif isinstance(error, OSError):
            why = describe_error(error)
        else:
            why = f"({error})"
        self._failed.append(f"{domain.id} {why}")

    def _replacement(self, index: int) -> Domain | None:
        """Another writable drive for shard `index`, keeping the blob's shards in distinct groups.

        First a group no shard of this blob uses; else another drive of the failed shard's own
        group (the failure freed it). Drives that already failed for this blob are not retried.
        """
        pool, loc = self._pool, self._loc
        assert loc is not None
        level = pool.spread_level
        taken = set()
        for j, domain_id in loc.present():
            domain = pool.topology.get(domain_id)
            if j != index and domain is not None:
                taken.add(domain.label(level))
        current = pool.topology.get(loc.shards[index] or "")
        own = {current.label(level)} if current is not None else set()

        def usable(domain: Domain) -> bool:
            return domain.id not in self._tried and pool.writable(domain)

        for exclude in (taken | own, taken):
            with pool.placing():
                found = place(
                    self._placement_key, pool.topology, level, 1, exclude_groups=exclude, usable=usable
                )
                if found:
                    # Held like the first placement, so a drain that began meanwhile waits for it too.
                    self._placed_on += pool.hold_placement([found[0].id])
                    return found[0]
        return None

    def _rescue(self, index: int, error: BaseException, old: ShardWriter | None) -> ShardWriter | None:
        """Blocking (a `Rescue`): report the failure, then open shard `index` on another drive —
        with the frames `old` holds so far — or None when no drive is left (or `old` is unreadable)."""
        loc = self._loc
        assert loc is not None
        try:
            self._fail(index, error)
            while (target := self._replacement(index)) is not None:
                loc.shards[index] = target.id
                store = self._pool.store(target.id)
                assert store is not None
                header = ShardHeader(
                    self.data_id, loc.layout, loc.k, loc.m, index, loc.block_size, self._header_size
                )
                try:
                    return old.relocate(store) if old is not None else store.create(header)
                except ShardUnreadable:
                    return None  # the failed drive cannot give back what it holds: the shard is lost
                except (ErasureError, OSError) as exc:
                    self._fail(index, exc)
            return None
        finally:
            if old is not None:
                old.discard()

    def _written(self) -> None:
        """Tell drive health about the drives that took their shard (a success ends an error run)."""
        for writer in self._committed:
            self._pool.health.write_succeeded(writer.drive.domain.id)

    def _check_quorum(self, alive: int) -> None:
        if alive >= self._quorum:
            return
        loc = self._loc
        width = loc.width if loc is not None else self._quorum
        if self._failed:
            detail = (
                f"{width - alive} of {width} shards failed: {', '.join(self._failed)}; "
                f"write quorum is {self._quorum}"
            )
        else:
            detail = f"only {alive} of {width} shards could be placed, write quorum is {self._quorum}"
        skipped = self._pool.unwritable()
        if skipped:
            detail += f" (skipped: {', '.join(skipped)})"
        raise OutOfSpace(detail) if self._out_of_space else WriteQuorumError(detail)

    def _check_open(self) -> None:
        if self._state != "open":
            raise ErasureError(f"writer for {self.data_id} is {self._state}")


# -- blocking steps, each run in one worker thread ----------------------------------------------
# They update the writer's `writers` (open shard files) and `committed` (durable ones) in place,
# so that `abort` finds every file to remove even when the request was cancelled mid-step. Per
# shard, a failure is caught and returned (that domain's problem, not the blob's); the event loop
# then decides about the write quorum.


async def _blocking(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread. If we are cancelled meanwhile, the thread still runs on:
    wait for it before letting the cancellation through, so that nothing touches the shard
    files after `abort` (which runs next) has cleaned them up."""
    task = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError as exc:  # waited for outside the handler: see setup.py
        cancelled = exc
    await asyncio.wait([task])
    raise cancelled


def _create(
    targets: list[tuple[int, Drive, ShardHeader]],
    writers: dict[int, ShardWriter],
    rescue: Rescue,
) -> Failures:
    """Open every shard file; one that fails is opened elsewhere by `rescue`. Returns the shards lost."""
    lost: Failures = {}
    for i, store, header in targets:
        try:
            writers[i] = store.create(header)
        except Exception as exc:
            moved = rescue(i, exc, None)
            if moved is None:
                lost[i] = exc
            else:
                writers[i] = moved
    return lost


def _append(
    codec: Codec,
    blocks: Sequence[Buffer],
    stripe: int,
    writers: dict[int, ShardWriter],
    rescue: Rescue,
) -> Failures:
    """Encode one stripe (its k data blocks) and append its frames. A shard that fails moves to
    another drive (`rescue`) and the frame is appended there; one with nowhere to go is discarded
    and left out of `writers`. Returns the shards lost."""
    frames = encode_blocks(codec, blocks, stripe)
    lost: Failures = {}
    for i, writer in list(writers.items()):
        while True:  # bounded: each rescue rules out the drive that failed
            try:
                writer.append(stripe, *frames[i])
                break
            except Exception as exc:
                moved = rescue(i, exc, writer)  # discards `writer`
                if moved is None:
                    del writers[i]
                    lost[i] = exc
                    break
                writers[i] = writer = moved
                if moved.stripes_written > stripe:
                    break  # the frame was whole before the failure: it moved with the rest
    return lost


def _commit(
    writers: dict[int, ShardWriter],
    headers: dict[int, ShardHeader] | None,
    committed: list[ShardWriter],
    failures: Failures,
) -> None:
    """Commit every open shard (moving it from `writers` to `committed` once durable)."""
    order = list(writers.items())
    writers.clear()
    results = commit_shards([(w, headers[i] if headers is not None else None) for i, w in order])
    _sort_out(order, results, committed, failures)


def _sort_out(
    shards: list[tuple[int, ShardWriter]],
    results: list[BaseException | None],
    committed: list[ShardWriter],
    failures: Failures,
) -> None:
    """Durable shards to `committed`, the others' errors to `failures` (by shard index)."""
    for (i, writer), error in zip(shards, results, strict=True):
        if error is None:
            committed.append(writer)
        else:
            failures[i] = error


def _write_frames(
    targets: list[tuple[int, Drive, ShardHeader]],
    codec: Codec,
    data: Buffer,
    geo: StripeLayout,
    writers: dict[int, ShardWriter],
    rescue: Rescue,
) -> Failures:
    """Create every shard with its final header and append all stripes; returns the shards lost."""
    lost = _create(targets, writers, rescue)
    view, pos = memoryview(data), 0
    for stripe in range(geo.stripe_count):
        length = geo.stripe_len(stripe)
        blocks = split_stripe(view[pos : pos + length], codec.k, geo.block_len(stripe))
        lost.update(_append(codec, blocks, stripe, writers, rescue))
        pos += length
    return lost


def _write_blob(
    targets: list[tuple[int, Drive, ShardHeader]],
    codec: Codec,
    data: Buffer,
    geo: StripeLayout,
    writers: dict[int, ShardWriter],
    committed: list[ShardWriter],
    rescue: Rescue,
) -> tuple[Failures, Failures]:
    """Create every shard with its final header, append all stripes, commit.

    Returns (shards lost, already reported; shards whose flush failed, not yet reported)."""
    lost = _write_frames(targets, codec, data, geo, writers, rescue)
    unflushed: Failures = {}
    _commit(writers, None, committed, unflushed)
    return lost, unflushed


def _finish(
    codec: Codec,
    tail: Buffer,
    stripe: int,
    block_len: int,
    writers: dict[int, ShardWriter],
    headers: dict[int, ShardHeader],
    committed: list[ShardWriter],
    rescue: Rescue,
) -> tuple[Failures, Failures]:
    """Append the last stripe (if the size left one) and commit every shard with its final header.

    Returns (shards lost, already reported; shards whose flush failed, not yet reported)."""
    lost = (
        _append(codec, split_stripe(tail, codec.k, block_len), stripe, writers, rescue) if block_len else {}
    )
    unflushed: Failures = {}
    _commit(writers, headers, committed, unflushed)
    return lost, unflushed


def _discard(writers: list[ShardWriter], committed: list[ShardWriter]) -> None:
    for writer in writers:
        writer.discard()
    for writer in committed:
        with contextlib.suppress(ErasureError, OSError):
            writer.drive.remove(writer.header.data_id, writer.header.index)
