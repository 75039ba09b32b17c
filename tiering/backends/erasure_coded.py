"""Tier backend over an `erasure.ErasurePool`: k+m shards on local failure domains.

A thin adapter: it translates `StoredData` to the pool's (data id, location, size), and erasure
errors to `tiering.backend` errors. All storage logic lives in `erasure`.

Config (`TierConfig.options` for kind "erasure"): either `pool=` an ErasurePool, or
`root`, `nodes`, `drives_per_node` (directories root/<name>/n<i>/d<j>), and the pool's `k`, `m`,
`spread_level`, `block_size`, `write_quorum`, `small_object_threshold`, `drive_health`
(`erasure.drive_health.DriveHealthSettings`: when a drive counts as full or failing), and
`pack_threshold_bytes` (shards up to this size go to pack files; default 512 KiB, 0: off).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import erasure
from erasure import ErasurePool, HealResult, PoolReader, PoolWriter, default_layout
from erasure.drive import DriveFactory
from erasure.drive_health import DriveHealthSettings
from erasure.pack import DEFAULT_PACK_THRESHOLD
from erasure.pool import DEFAULT_BLOCK_SIZE, DEFAULT_SMALL_OBJECT_THRESHOLD
from erasure.remote import DEFAULT_TIMEOUT, remote_drive_factory
from erasure.shard_store import local_drive, packed_local_drive
from erasure.topology import LEVELS, Domain, Topology
from tiering.backend import (
    BackendError,
    CapacityExceeded,
    DataCheck,
    DataFile,
    DataNotFound,
    DataReader,
    DataUnavailable,
    DataWriter,
    StoredData,
    TierBackend,
    WriteQuorumLost,
    register_backend,
)

T = TypeVar("T")


def translate(error: erasure.ErasureError) -> BackendError:
    """The tiering error for an erasure error (order matters: OutOfSpace is a WriteQuorumError)."""
    if isinstance(error, erasure.DataNotFound):
        return DataNotFound(str(error))
    if isinstance(error, erasure.OutOfSpace):
        return CapacityExceeded(str(error))
    if isinstance(error, erasure.WriteQuorumError):
        return WriteQuorumLost(str(error))
    return DataUnavailable(str(error))  # DataLost, offline domains, corrupt shards, ...


async def _call(action: Callable[[], Awaitable[T]]) -> T:
    try:
        return await action()
    except erasure.ErasureError as error:
        raise translate(error) from error


class _Writer(DataWriter):
    def __init__(self, writer: PoolWriter) -> None:
        self._writer = writer

    async def write(self, chunk: bytes | memoryview) -> None:
        await _call(lambda: self._writer.write(chunk))

    async def finish(self) -> StoredData:
        location = await _call(self._writer.finish)
        return StoredData(self._writer.data_id, self._writer.size, location)

    async def abort(self) -> None:
        await self._writer.abort()


class _Reader(DataReader):
    def __init__(self, reader: PoolReader) -> None:
        self._reader = reader

    async def stream(self, start: int, end: int) -> AsyncIterator[bytes | memoryview]:
        try:
            async for chunk in self._reader.stream(start, end):
                yield chunk
        except erasure.ErasureError as error:
            raise translate(error) from error

    async def close(self) -> None:
        await self._reader.close()


def _fitting_level(name: str, topology: Topology, level: str, width: int) -> str:
    """The spread level, or the widest level under it with `width` groups — said in the log.

    A tier wider than the nodes (8+3 over 6 nodes) still runs, on distinct drives; losing a node
    may then cost such a stripe more than one shard.
    """
    for candidate in LEVELS[LEVELS.index(level) :]:
        if len(topology.groups(candidate)) >= width:
            if candidate != level:
                logging.getLogger("tierstore.nodes").warning(
                    "tier %s: %d shards but only %d %ss: spreading over %ss instead",
                    name,
                    width,
                    len(topology.groups(level)),
                    level,
                    candidate,
                )
            return candidate
    return level


@register_backend("erasure")
class ErasureCodedBackend(TierBackend):
    kind = "erasure"

    def __init__(
        self,
        pool: ErasurePool | None = None,
        *,
        name: str = "erasure",
        root: str | Path | None = None,
        nodes: int = 1,
        drives_per_node: int = 6,
        k: int = 4,
        m: int = 2,
        spread_level: str = "drive",
        block_size: int = DEFAULT_BLOCK_SIZE,
        write_quorum: int | None = None,
        small_object_threshold: int = DEFAULT_SMALL_OBJECT_THRESHOLD,
        domains: list[dict[str, Any]] | None = None,
        drive_health: DriveHealthSettings | None = None,
        remote_domains: list[dict[str, Any]] | None = None,
        cluster_secret: bytes = b"",
        node_timeout: float = DEFAULT_TIMEOUT,
        node_ca: str | None = None,
        pack_threshold_bytes: int = DEFAULT_PACK_THRESHOLD,
        pack_compact_seconds: float = 60.0,
        **_: Any,
    ) -> None:
        factory: DriveFactory = (
            packed_local_drive(pack_threshold_bytes) if pack_threshold_bytes else local_drive
        )
        topology: Topology | None = None
        if pool is None and remote_domains:
            # On storage nodes (tiering.nodes): one domain per node drive, reached over HTTP.
            topology = Topology(
                Domain(
                    id=d["id"],
                    path=Path(d["path"]),
                    node=d["node"],
                    rack=d.get("rack", "rack1"),
                    zone=d.get("zone", "zone1"),
                    weight=float(d.get("weight", 1.0)),
                    address=d["address"],
                )
                for d in remote_domains
            )
            factory = remote_drive_factory(cluster_secret, node_timeout, node_ca)
            spread_level = _fitting_level(name, topology, spread_level, k + m)
        elif pool is None:
            if domains:
                topology = Topology(
                    Domain(
                        id=d["id"],
                        path=Path(d["path"]),
                        node=d.get("node", d["id"]),
                        rack=d.get("rack", "rack1"),
                        zone=d.get("zone", "zone1"),
                        weight=float(d.get("weight", 0.0)),
                    )
                    for d in domains
                )
                for domain in topology:
                    domain.path.mkdir(parents=True, exist_ok=True)
            elif root is None:
                raise ValueError("erasure backend needs pool=, domains= or root=")
            else:
                topology = default_layout(Path(root), name, nodes, drives_per_node)
        if pool is None:
            assert topology is not None
            pool = ErasurePool(
                name,
                topology,
                k,
                m,
                spread_level=spread_level,
                block_size=block_size,
                write_quorum=write_quorum or None,
                small_object_threshold=small_object_threshold,
                drive_health=drive_health,
                drive_factory=factory,
            )
        self.pool = pool
        self._judged_elsewhere: Callable[[str], bool] | None = None  # judge_writers_elsewhere
        pool.pack_compact_seconds = pack_compact_seconds

    def erasure_pool(self) -> ErasurePool:
        return self.pool

    async def create_writer(self, data_id: str, size_hint: int | None = None) -> DataWriter:
        return _Writer(await self.pool.create_writer(data_id, size_hint))

    def write_whole(self, data_id: str, data: bytes) -> StoredData | None:
        try:
            location = self.pool.write_blob(data_id, data)
        except erasure.ErasureError as error:
            raise translate(error) from error
        return StoredData(data_id, len(data), location)

    batches_small_writes = True
    # Shards are found through the packs' index and spread over directories by a hash of the id.
    time_ordered_ids = True

    def write_wholes(self, blobs: list[tuple[str, bytes]]) -> list[StoredData | Exception]:
        results: list[StoredData | Exception] = []
        for (data_id, data), written in zip(blobs, self.pool.write_blobs(blobs), strict=True):
            if isinstance(written, erasure.ErasureError):
                error = translate(written)
                error.__cause__ = written
                results.append(error)
            else:
                results.append(
                    written if isinstance(written, Exception) else StoredData(data_id, len(data), written)
                )
        return results

    async def open_reader(self, stored: StoredData) -> DataReader:
        reader = await _call(lambda: self.pool.open_reader(stored.data_id, stored.location, stored.size))
        return _Reader(reader)

    def read_whole(self, stored: StoredData) -> bytes | memoryview | None:
        return self.pool.read_healthy(stored.data_id, stored.location, stored.size)

    def readable_now(self, stored: StoredData) -> bool:
        try:
            return self.pool.readable_now(stored.location)
        except ValueError:  # not an erasure location: the read says what is wrong with it
            return True

    def read_at_hand(self, stored: StoredData) -> bytes | memoryview | None:
        return self.pool.read_at_hand(stored.data_id, stored.location, stored.size)

    async def delete(self, stored: StoredData) -> None:
        await _call(lambda: self.pool.delete(stored.data_id, stored.location))

    async def delete_many(self, blobs: Sequence[StoredData]) -> list[Exception | None]:
        """All of a batch's shards in one thread trip per drive (`ErasurePool.delete_many`)."""
        failed = await self.pool.delete_many([(s.data_id, s.location) for s in blobs])
        return [None if error is None else BackendError(str(error)) for error in failed]

    async def exists(self, stored: StoredData) -> bool:
        return await _call(lambda: self.pool.exists(stored.data_id, stored.location))

    async def heal(self, stored: StoredData) -> tuple[HealResult, StoredData]:
        """Verify and repair a blob; record the returned StoredData when `result.changed`."""
        result = await _call(lambda: self.pool.heal(stored.data_id, stored.location, stored.size))
        return result, StoredData(stored.data_id, stored.size, result.location)

    async def recent_data(self, since: float, until: float) -> list[StoredData]:
        """Blobs with shard files written in [since, until) (the orphan sweep after a crash)."""
        found = await asyncio.to_thread(self.pool.recent_shards, since, until)
        return [StoredData(data_id, loc.pop("size"), loc) for data_id, loc in found.items()]

    async def sweep_writes_of(self, writer: Callable[[str], bool]) -> int:
        return await self.pool.sweep_tmp_of(writer)

    lists_data = True

    async def list_data(self) -> tuple[list[DataFile], list[str]]:
        """Every committed shard file on the online domains, and the offline domains' ids."""
        files: list[DataFile] = []
        offline: list[str] = []
        for domain in self.pool.topology:
            if not domain.online:
                offline.append(domain.id)
                continue
            try:
                shards = await asyncio.to_thread(self.pool.list_shards, domain.id)
            except (erasure.ErasureError, OSError):
                offline.append(domain.id)  # went offline (or unreadable) while we looked
                continue
            files += [DataFile(s.data_id, s.domain, s.index, s.mtime, s.size) for s in shards]
        return files, offline

    async def still_stored(self, piece: DataFile) -> bool:
        drive = self.pool.store(piece.place)
        if drive is None:
            return False
        try:
            return await asyncio.to_thread(drive.has, piece.data_id, piece.piece)
        except (erasure.ErasureError, OSError):
            return True  # cannot tell: judged as listed

    async def check(self, stored: StoredData, *, verify: bool = False) -> DataCheck:
        """Shard files where the location says; with `verify`, every block's checksum too."""
        location = stored.location
        present = await asyncio.to_thread(self.pool.shards_present, stored.data_id, location)
        shards = location.get("shards") or []
        found = DataCheck(
            missing=[(i, shards[i]) for i, ok in present.items() if ok is False],
            unreachable=[(i, shards[i]) for i, ok in present.items() if ok is None],
        )
        readable = sum(1 for ok in present.values() if ok)
        # Shards on offline domains may come back: lost only when even they could not make k.
        found.lost = readable + len(found.unreachable) < int(location.get("k", 1))
        if verify and not found.lost and not found.unreachable:
            result = await _call(lambda: self.pool.verify(stored.data_id, location, stored.size))
            found.corrupt = [i for i in result.damaged if i not in present or present[i]]
            found.lost = found.lost or result.lost
        return found

    def judge_writers_elsewhere(self, elsewhere: Callable[[str], bool]) -> None:
        self._judged_elsewhere = elsewhere

    async def start(self) -> None:
        # Several processes may share these domains (workers, a lifecycle process, gateways on
        # other hosts): sweep only the temporary shards whose writer died (a SIGKILL mid-upload),
        # or untouched for an hour. A writer on another host is judged by the catalog's process
        # table (tiering.peers), never by its pid here (`judge_writers_elsewhere`).
        await self.pool.start(tmp_max_age=3600.0, judged_elsewhere=self._judged_elsewhere)

    async def close(self) -> None:
        await self.pool.close()

    def stats(self) -> dict[str, Any]:
        return self.pool.status()

    def domains(self) -> list[dict[str, Any]]:
        return list(self.pool.status()["domains"])
