"""Access tracking: every GET (and copy source read) warms its object — batched, not per request.

Reads are counted in memory and folded into the catalog's heat and last-access columns every
`flush_interval` seconds in one transaction, so a GET never costs a catalog write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from tiering.heat import DEFAULT_HALF_LIFE
from tiering.store import ObjectStore

log = logging.getLogger("tierstore.lifecycle")


class AccessTracker:
    def __init__(
        self,
        store: ObjectStore,
        *,
        clock: Callable[[], float],
        flush_interval: float = 2.0,
        half_life: float = DEFAULT_HALF_LIFE,
        max_pending: int = 100_000,
    ) -> None:
        self.store = store
        self.clock = clock
        self.flush_interval = flush_interval
        self.half_life = half_life
        self.max_pending = max_pending
        # (bucket, key, version id): "" for a read through the key, else the version read by id.
        self._pending: dict[tuple[str, str, str], tuple[int, float]] = {}
        self._task: asyncio.Task[None] | None = None
        self.flushed = 0

    def record(self, bucket: str, key: str, version_id: str | None = None) -> None:
        """One read; by `version_id` it warms that version (a noncurrent one has heat of its own)."""
        slot = (bucket, key, version_id or "")
        count, _ = self._pending.get(slot, (0, 0.0))
        self._pending[slot] = (count + 1, self.clock())
        if len(self._pending) >= self.max_pending:
            # Bounded memory under a flood of distinct keys: flush early rather than grow.
            asyncio.get_running_loop().create_task(self.flush())

    async def flush(self) -> None:
        if not self._pending:
            return
        batch, self._pending = self._pending, {}
        await self.store.record_accesses(batch, self.half_life)
        self.flushed += len(batch)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval)
            try:
                await self.flush()
            except Exception:
                log.exception("flushing access heat failed")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):
            await self.flush()
