"""The mover: carries out tier moves and restores, throttled by bytes/s and concurrency.

Each move is `ObjectStore.move_object`, or `move_version` for a noncurrent version (copy → verify
→ compare-and-swap → retire later); the mover only decides how many run at once and how fast
bytes flow, and keeps the numbers that `admin tiers` and the metrics show.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from tiering.errors import TieringError
from tiering.records import ObjectRecord
from tiering.store import ObjectStore

log = logging.getLogger("tierstore.lifecycle")


class TokenBucket:
    """Byte-rate limiter: `take(n)` waits until n bytes fit in the rate (0 = unlimited)."""

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = rate
        self.burst = burst if burst is not None else max(rate, 1 << 20)
        self._tokens = self.burst
        self._last = time.monotonic()

    async def take(self, amount: int) -> None:
        if self.rate <= 0:
            return
        while True:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            if self._tokens >= amount or self._tokens >= self.burst:
                self._tokens -= amount
                return
            await asyncio.sleep((amount - self._tokens) / self.rate)


@dataclass(frozen=True)
class MoveOrder:
    bucket: str
    key: str
    tier: str
    reason: str
    generation: int
    size: int
    storage_class: str | None = None
    version_id: str | None = None  # a noncurrent version (moved by its id); None: the key's current one


@dataclass
class MoverStats:
    moves: Counter[tuple[str, str]] = field(default_factory=Counter)  # (from, to) → count
    bytes: Counter[tuple[str, str]] = field(default_factory=Counter)
    skipped: int = 0  # object changed while copying: CAS refused, copy discarded
    failed: int = 0
    restores: int = 0
    queued: int = 0
    active: int = 0


class Mover:
    def __init__(self, store: ObjectStore, *, concurrency: int = 4, bytes_per_second: float = 0.0) -> None:
        self.store = store
        self.concurrency = max(1, concurrency)
        self.throttle = TokenBucket(bytes_per_second)
        self.stats = MoverStats()
        self._slots = asyncio.Semaphore(self.concurrency)
        self.pending: Counter[str] = Counter()  # target tier → moves queued or running

    async def run(self, orders: list[MoveOrder]) -> None:
        """Carry out a batch of moves, at most `concurrency` at a time."""
        self.stats.queued += len(orders)
        for order in orders:
            self.pending[order.tier] += 1
        await asyncio.gather(*(self._one(order) for order in orders))

    async def _one(self, order: MoveOrder) -> None:
        async with self._slots:
            self.stats.queued -= 1
            self.stats.active += 1
            try:
                source = await self.store.head_object(order.bucket, order.key, order.version_id)
                if order.version_id is not None:
                    moved = await self.store.move_version(
                        order.bucket,
                        order.key,
                        order.version_id,
                        order.tier,
                        storage_class=order.storage_class or source.meta.storage_class,
                        expected_generation=order.generation,
                        on_chunk=self.throttle.take,
                        reason=f"{order.reason} (noncurrent version)",
                    )
                else:
                    moved = await self.store.move_object(
                        order.bucket,
                        order.key,
                        order.tier,
                        reason=order.reason,
                        storage_class=order.storage_class,
                        expected_generation=order.generation,
                        on_chunk=self.throttle.take,
                    )
                if moved is None:
                    self.stats.skipped += 1
                else:
                    self.stats.moves[(source.tier, order.tier)] += 1
                    self.stats.bytes[(source.tier, order.tier)] += moved.size
            except TieringError as exc:
                self.stats.failed += 1
                log.warning("move of %s/%s to %s failed: %s", order.bucket, order.key, order.tier, exc)
            except Exception:
                self.stats.failed += 1
                log.exception("move of %s/%s to %s failed", order.bucket, order.key, order.tier)
            finally:
                self.stats.active -= 1
                self.pending[order.tier] -= 1
                if self.pending[order.tier] <= 0:
                    del self.pending[order.tier]

    async def restore(self, record: ObjectRecord, tier: str) -> None:
        async with self._slots:
            try:
                if await self.store.complete_restore(record, tier, on_chunk=self.throttle.take):
                    self.stats.restores += 1
            except Exception:
                self.stats.failed += 1
                log.exception("restore of %s/%s failed", record.bucket, record.key)
