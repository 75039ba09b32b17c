"""The lifecycle parts a server process runs: the clock, the access tracker and the daemon."""

from __future__ import annotations

from lifecycle.daemon import LifecycleDaemon, LifecycleSettings
from lifecycle.tracker import AccessTracker
from tiering.clock import Clock
from tiering.store import ObjectStore


class Lifecycle:
    def __init__(
        self, store: ObjectStore, settings: LifecycleSettings, clock: Clock, *, run_daemon: bool
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.tracker = AccessTracker(store, clock=clock, half_life=settings.temperature.half_life_s)
        self.daemon = LifecycleDaemon(store, settings, self.tracker, clock)
        self.run_daemon = run_daemon

    async def start(self) -> None:
        await self.tracker.start()
        if self.run_daemon:
            await self.daemon.start()

    async def close(self) -> None:
        await self.daemon.close()
        await self.tracker.close()

    def record_access(self, bucket: str, key: str, version_id: str | None = None) -> None:
        self.tracker.record(bucket, key, version_id)
