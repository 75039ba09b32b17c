"""Streaming writes: buffer one stripe, encode it in a thread, append its k+m blocks concurrently.

Memory stays bounded by one stripe (k × block_size) plus the caller's chunk. A shard whose domain
fails mid-write is dropped and recorded as missing in the location (heal recreates it later);
the write fails only when fewer than the write quorum of shards are still alive.
"""

from __future__ import annotations

import asyncio
import errno
from typing import TYPE_CHECKING, Any

from erasure.codec import codec_for, encode_stripe
from erasure.errors import ErasureError, OutOfSpace, WriteQuorumError
from erasure.location import Location
from erasure.placement import place
from erasure.shard_format import ShardHeader
from erasure.shard_store import ShardFileWriter, check_data_id
from erasure.stripe import StripeLayout

if TYPE_CHECKING:
    from erasure.pool import ErasurePool


class PoolWriter:
    """Receives one blob's bytes in order. `finish()` returns the location dict; `abort()` discards."""

    def __init__(self, pool: ErasurePool, data_id: str, size_hint: int | None) -> None:
        self._pool = pool
        self.data_id = check_data_id(data_id)
        self.size_hint = size_hint
        self.size = 0
        self._buf = bytearray()
        self._loc: Location | None = None
        self._writers: dict[int, ShardFileWriter] = {}
        self._committed: list[ShardFileWriter] = []
        self._stripe = 0
        self._quorum = 0
        self._out_of_space = False
        self._state = "open"

    async def write(self, chunk: bytes | memoryview) -> None:
        self._check_open()
        self._buf += chunk
        self.size += len(chunk)
        # The pool's code may change meanwhile (a recode): a blob keeps the k it began with.
        stripe_bytes = (self._loc.k if self._loc is not None else self._pool.k) * self._pool.block_size
        try:
            # The pool keeps small_object_threshold <= one stripe, so a full stripe means erasure coding.
            while len(self._buf) >= stripe_bytes:
                if self._loc is None:
                    await self._begin("ec")
                data = bytes(self._buf[:stripe_bytes])
                del self._buf[:stripe_bytes]
                await self._flush(data, self._pool.block_size)
        except BaseException:
            await self.abort()
            raise

    async def finish(self) -> dict[str, Any]:
        self._check_open()
        try:
            if self._loc is None:
                await self._begin("replica" if self.size < self._pool.small_object_threshold else "ec")
            assert self._loc is not None
            geo = StripeLayout(self.size, self._loc.k, self._loc.block_size)
            data, pos = bytes(self._buf), 0
            self._buf = bytearray()
            for stripe in range(self._stripe, geo.stripe_count):
                length = geo.stripe_len(stripe)
                await self._flush(memoryview(data)[pos : pos + length], geo.block_len(stripe))
                pos += length
            await self._commit()
        except BaseException:
            await self.abort()
            raise
        self._state = "finished"
        return self._loc.to_dict()

    async def abort(self) -> None:
        """Discard everything written. A no-op after a successful finish: use the pool's delete then."""
        if self._state in ("finished", "aborted"):
            return
        self._state = "aborted"
        writers, self._writers = list(self._writers.values()), {}
        committed, self._committed = self._committed, []
        await asyncio.gather(*(asyncio.to_thread(w.discard) for w in writers), return_exceptions=True)
        await asyncio.gather(
            *(asyncio.to_thread(w.store.remove, w.header.data_id, w.header.index) for w in committed),
            return_exceptions=True,
        )

    # -- steps ------------------------------------------------------------------------------

    async def _begin(self, layout: str) -> None:
        pool = self._pool
        k = pool.k if layout == "ec" else 1
        width = k + pool.m
        self._quorum = pool.write_quorum_for(layout)
        domains = place(self.data_id, pool.topology, pool.spread_level, width)
        shards: list[str | None] = [d.id for d in domains] + [None] * (width - len(domains))
        self._loc = Location(layout, k, pool.m, pool.block_size, shards, set(range(len(domains), width)))
        self._check_quorum(len(domains))
        headers = [ShardHeader(self.data_id, layout, k, pool.m, i, pool.block_size, 0) for i in range(width)]
        results = await asyncio.gather(
            *(asyncio.to_thread(pool.store(d.id).create, headers[i]) for i, d in enumerate(domains)),
            return_exceptions=True,
        )
        self._writers = {i: r for i, r in enumerate(results) if isinstance(r, ShardFileWriter)}
        for i, result in enumerate(results):
            if isinstance(result, BaseException):
                self._note_failure(i, result)
        self._check_quorum(len(self._writers))

    async def _flush(self, data: bytes | memoryview, block_len: int) -> None:
        assert self._loc is not None
        codec = codec_for(self._loc.k, self._loc.m)
        frames = await asyncio.to_thread(encode_stripe, codec, data, self._stripe, block_len)
        live = list(self._writers.items())
        results = await asyncio.gather(
            *(asyncio.to_thread(w.append, self._stripe, *frames[i]) for i, w in live),
            return_exceptions=True,
        )
        await self._drop_failed(live, results)
        self._stripe += 1

    async def _commit(self) -> None:
        assert self._loc is not None
        loc = self._loc
        live = list(self._writers.items())
        results = await asyncio.gather(
            *(
                asyncio.to_thread(
                    w.commit, ShardHeader(self.data_id, loc.layout, loc.k, loc.m, i, loc.block_size, self.size)
                )
                for i, w in live
            ),
            return_exceptions=True,
        )
        self._writers = {}
        self._committed = [w for (_, w), r in zip(live, results, strict=True) if not isinstance(r, BaseException)]
        await self._drop_failed(live, results)

    async def _drop_failed(self, live: list[tuple[int, ShardFileWriter]], results: list[Any]) -> None:
        failed = [(i, w, r) for (i, w), r in zip(live, results, strict=True) if isinstance(r, BaseException)]
        for i, _, _ in failed:
            self._writers.pop(i, None)
        await asyncio.gather(*(asyncio.to_thread(w.discard) for _, w, _ in failed), return_exceptions=True)
        for i, _, error in failed:
            self._note_failure(i, error)
        self._check_quorum(len(self._writers) + len(self._committed))

    def _note_failure(self, index: int, error: BaseException) -> None:
        if not isinstance(error, ErasureError | OSError):
            raise error  # a bug, not a failed domain
        assert self._loc is not None
        self._loc.missing.add(index)
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            self._out_of_space = True

    def _check_quorum(self, alive: int) -> None:
        if alive >= self._quorum:
            return
        detail = f"{self.data_id}: only {alive} shard(s) writable, write quorum is {self._quorum}"
        raise OutOfSpace(detail) if self._out_of_space else WriteQuorumError(detail)

    def _check_open(self) -> None:
        if self._state != "open":
            raise ErasureError(f"writer for {self.data_id} is {self._state}")
