"""The gpu-direct backend: blobs served from RAM, written through to a durable directory.

Reads of a cached blob touch no disk and decode nothing — the lowest-latency path in the
server. Every blob is also written (and fsync'd) to plain files before `finish()` returns, so a
restart loses nothing: after one, blobs are read from disk and cached again on first read.
The cache is an LRU bounded by `cache_bytes`; a blob larger than a quarter of it is not cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from tiering.backend import DataReader, DataWriter, StoredData, TierBackend, register_backend
from tiering.backends.local_files import LocalFilesBackend

SLICE = 1 << 20
DEFAULT_CACHE_BYTES = 1 << 30


class _MemoryReader(DataReader):
    def __init__(self, data: bytes | memoryview) -> None:
        self._data = data

    async def stream(self, start: int, end: int) -> AsyncIterator[bytes | memoryview]:
        # Views, not copies: the cached bytes are immutable, and a view keeps them alive even
        # if the blob is evicted while a response is still being sent.
        view = memoryview(self._data)
        for position in range(start, end, SLICE):
            yield view[position : min(position + SLICE, end)]

    async def close(self) -> None:
        self._data = b""


class _CachingWriter(DataWriter):
    def __init__(self, backend: MemoryBackend, inner: DataWriter, data_id: str) -> None:
        self._backend = backend
        self._inner = inner
        self._data_id = data_id
        self._buffer: bytearray | None = bytearray()

    async def write(self, chunk: bytes | memoryview) -> None:
        if self._buffer is not None:
            if len(self._buffer) + len(chunk) > self._backend.max_cached_blob:
                self._buffer = None  # too big to keep in RAM: disk only
            else:
                self._buffer += chunk
        await self._inner.write(chunk)

    async def finish(self) -> StoredData:
        stored = await self._inner.finish()
        if self._buffer is not None:
            self._backend.cache_put(self._data_id, bytes(self._buffer))
            self._buffer = None
        return stored

    async def abort(self) -> None:
        self._buffer = None
        await self._inner.abort()


@register_backend("memory")
class MemoryBackend(TierBackend):
    kind = "memory"

    def __init__(
        self, root: str | Path, cache_bytes: int = DEFAULT_CACHE_BYTES, fsync: bool = True, **_: Any
    ) -> None:
        self.durable = LocalFilesBackend(root, fsync=fsync)
        self.cache_bytes = int(cache_bytes)
        self.max_cached_blob = self.cache_bytes // 4
        self._cache: OrderedDict[str, bytes | memoryview] = OrderedDict()
        self._cached = 0
        self._lock = threading.Lock()  # cache_put also runs from reader threads
        self.hits = 0
        self.misses = 0

    def cache_put(self, data_id: str, data: bytes | memoryview) -> None:
        if len(data) > self.max_cached_blob:
            return
        with self._lock:
            if data_id in self._cache:
                return
            self._cache[data_id] = data
            self._cached += len(data)
            while self._cached > self.cache_bytes and self._cache:
                _, evicted = self._cache.popitem(last=False)
                self._cached -= len(evicted)

    def _cache_get(self, data_id: str) -> bytes | memoryview | None:
        with self._lock:
            data = self._cache.get(data_id)
            if data is not None:
                self._cache.move_to_end(data_id)
            return data

    async def create_writer(self, data_id: str, size_hint: int | None = None) -> DataWriter:
        return _CachingWriter(self, await self.durable.create_writer(data_id, size_hint), data_id)

    def write_whole(self, data_id: str, data: bytes) -> StoredData | None:
        stored = self.durable.write_whole(data_id, data)
        if stored is not None:
            self.cache_put(data_id, data)
        return stored

    async def open_reader(self, stored: StoredData) -> DataReader:
        data = self._cache_get(stored.data_id)
        if data is not None:
            self.hits += 1
            return _MemoryReader(data)
        self.misses += 1
        if stored.size <= self.max_cached_blob:
            # Read-through: load the whole (small enough) blob once, serve it from RAM after.
            reader = await self.durable.open_reader(stored)
            try:
                parts = [chunk async for chunk in reader.stream(0, stored.size)]
            finally:
                await reader.close()
            data = b"".join(parts)
            self.cache_put(stored.data_id, data)
            return _MemoryReader(data)
        return await self.durable.open_reader(stored)

    def read_whole(self, stored: StoredData) -> bytes | memoryview | None:
        # Runs in worker threads: the counters move under the cache lock.
        return self._read_through(stored, self.durable.read_whole)

    def read_at_hand(self, stored: StoredData) -> bytes | memoryview | None:
        # On the event loop: the lock guards dict updates only, and a miss reads through to the
        # durable tier only if its bytes are at hand too.
        return self._read_through(stored, self.durable.read_at_hand)

    def _read_through(
        self, stored: StoredData, read: Callable[[StoredData], bytes | memoryview | None]
    ) -> bytes | memoryview | None:
        """A cache hit, or the durable tier's bytes by `read` (cached for next time)."""
        data = self._cache_get(stored.data_id)
        if data is not None:
            with self._lock:
                self.hits += 1
            return data
        if stored.size > self.max_cached_blob:
            return None
        data = read(stored)
        if data is not None:
            with self._lock:
                self.misses += 1
            self.cache_put(stored.data_id, data)
        return data

    async def delete(self, stored: StoredData) -> None:
        with self._lock:
            data = self._cache.pop(stored.data_id, None)
            if data is not None:
                self._cached -= len(data)
        await self.durable.delete(stored)

    async def exists(self, stored: StoredData) -> bool:
        return await self.durable.exists(stored)

    async def start(self) -> None:
        await self.durable.start()

    async def recent_data(self, since: float, until: float) -> list[StoredData]:
        return await self.durable.recent_data(since, until)

    def stats(self) -> dict[str, Any]:
        return {
            **self.durable.stats(),
            "cache_bytes": self.cache_bytes,
            "cached_bytes": self._cached,
            "cached_blobs": len(self._cache),
            "cache_hits": self.hits,
            "cache_misses": self.misses,
        }
