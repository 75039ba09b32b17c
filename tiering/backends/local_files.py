"""A tier backend that keeps each blob as one plain file in a directory.

The simplest backend that is still crash-safe: a blob is written to `tmp/`, fsync'd, renamed
into its fan-out directory and the directory fsync'd, all before `finish()` returns — so the
catalog commit that follows never points at bytes that could vanish. Used for single-directory
tiers and as the reference the erasure-coded backend is benchmarked against.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, BinaryIO

from erasure.shard_store import tmp_owner_dead, tmp_owner_tag
from tiering.backend import (
    DataNotFound,
    DataReader,
    DataWriter,
    StoredData,
    TierBackend,
    register_backend,
)

READ_CHUNK = 1 << 20  # large reads keep syscalls and thread hops per byte low
WRITE_BUFFER = 1 << 20


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(tmp: Path, final: Path, sync: bool) -> None:
    """Rename a complete temporary file into place (durably, with `sync`)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    os.rename(tmp, final)
    if sync:
        _fsync_dir(final.parent)


class _FileWriter(DataWriter):
    def __init__(self, backend: LocalFilesBackend, data_id: str) -> None:
        self._backend = backend
        self._data_id = data_id
        self._tmp = backend.tmp_dir / f"{data_id}.{tmp_owner_tag()}.tmp"  # the writer's pid: see sweep
        self._file: BinaryIO | None = None
        self._size = 0
        self._buffer = bytearray()

    async def _open(self) -> BinaryIO:
        if self._file is None:
            self._file = await asyncio.to_thread(open, self._tmp, "wb")
        return self._file

    async def write(self, chunk: bytes | memoryview) -> None:
        self._buffer += chunk
        self._size += len(chunk)
        if len(self._buffer) >= WRITE_BUFFER:
            await self._flush()

    async def _flush(self) -> None:
        if not self._buffer:
            return
        f = await self._open()
        data, self._buffer = bytes(self._buffer), bytearray()
        await asyncio.to_thread(f.write, data)

    async def finish(self) -> StoredData:
        await self._flush()
        f = await self._open()
        final = self._backend.path_for(self._data_id)
        sync = self._backend.fsync

        def seal() -> None:
            f.flush()
            if sync:
                os.fsync(f.fileno())
            f.close()
            _publish(self._tmp, final, sync)

        await asyncio.to_thread(seal)
        self._file = None
        return StoredData(self._data_id, self._size, {})

    async def abort(self) -> None:
        f, self._file = self._file, None

        def discard() -> None:
            if f is not None:
                f.close()
            self._tmp.unlink(missing_ok=True)

        await asyncio.to_thread(discard)


class _FileReader(DataReader):
    def __init__(self, f: BinaryIO) -> None:
        self._file = f

    async def stream(self, start: int, end: int) -> AsyncIterator[bytes]:
        f = self._file
        position = start
        while position < end:
            n = min(READ_CHUNK, end - position)
            chunk = await asyncio.to_thread(os.pread, f.fileno(), n, position)
            if not chunk:
                raise DataNotFound("blob shorter than recorded")
            position += len(chunk)
            yield chunk

    async def close(self) -> None:
        self._file.close()


@register_backend("files")
class LocalFilesBackend(TierBackend):
    """One file per blob under `root/<id[:2]>/<id[2:4]>/<id>`."""

    kind = "files"

    def __init__(self, root: str | Path, fsync: bool = True, **_: Any) -> None:
        self.root = Path(root)
        self.fsync = fsync
        self.tmp_dir = self.root / "tmp"
        self.tmp_dir.mkdir(parents=True, exist_ok=True)

    def path_for(self, data_id: str) -> Path:
        return self.root / data_id[:2] / data_id[2:4] / data_id

    async def create_writer(self, data_id: str, size_hint: int | None = None) -> DataWriter:
        return _FileWriter(self, data_id)

    def write_whole(self, data_id: str, data: bytes) -> StoredData | None:
        tmp = self.tmp_dir / f"{data_id}.{tmp_owner_tag()}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            _publish(tmp, self.path_for(data_id), self.fsync)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return StoredData(data_id, len(data), {})

    async def open_reader(self, stored: StoredData) -> DataReader:
        try:
            f = await asyncio.to_thread(open, self.path_for(stored.data_id), "rb")
        except FileNotFoundError:
            raise DataNotFound(stored.data_id) from None
        return _FileReader(f)

    def read_whole(self, stored: StoredData) -> bytes | memoryview | None:
        try:
            with open(self.path_for(stored.data_id), "rb") as f:
                data = f.read(stored.size + 1)
        except OSError:
            return None
        return data if len(data) == stored.size else None

    async def delete(self, stored: StoredData) -> None:
        await asyncio.to_thread(self.path_for(stored.data_id).unlink, True)

    async def exists(self, stored: StoredData) -> bool:
        return await asyncio.to_thread(self.path_for(stored.data_id).exists)

    async def start(self) -> None:
        # Other processes may be writing here (workers): remove only what a dead writer left,
        # or what nobody touched for an hour.
        def sweep() -> None:
            cutoff = time.time() - 3600.0
            for leftover in self.tmp_dir.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    mtime = leftover.stat().st_mtime
                    if mtime <= cutoff or tmp_owner_dead(leftover.name, mtime):
                        leftover.unlink(missing_ok=True)

        await asyncio.to_thread(sweep)

    async def recent_data(self, since: float, until: float) -> list[StoredData]:
        """Blobs written in [since, until) (for the orphan sweep after an unclean shutdown)."""

        def scan() -> list[StoredData]:
            found: list[StoredData] = []
            for top in self.root.iterdir():
                if top.name == "tmp" or not top.is_dir():
                    continue
                for sub in top.iterdir():
                    for entry in os.scandir(sub):
                        st = entry.stat()
                        if since <= st.st_mtime < until:
                            found.append(StoredData(entry.name, st.st_size, {}))
            return found

        return await asyncio.to_thread(scan)

    def stats(self) -> dict[str, Any]:
        usage = os.statvfs(self.root)
        return {
            "path": str(self.root),
            "free_bytes": usage.f_bavail * usage.f_frsize,
            "total_bytes": usage.f_blocks * usage.f_frsize,
            "checked_at": time.time(),
        }
