"""The tier backend interface: the handful of methods every place that holds object bytes offers.

A backend stores immutable blobs addressed by a data id (never by an object key). The catalog
records what `DataWriter.finish()` returned (`StoredData`), so a reader never depends on how the
backend would place the blob *today* — only on where it was put.

Backends register themselves by kind (`register_backend`), so a new tier backend plugs in without
touching the gateway: the config names a kind, `create_backend` builds it.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

# StoredData is what every backend hands back; it lives with the other records the catalog keeps
# (tiering/records.py, compiled in the optional build: a GET builds one per segment).
from tiering.records import StoredData

if TYPE_CHECKING:
    from erasure import ErasurePool

# Blobs `TierBackend.delete_many` deletes concurrently (each deletes its pieces in parallel).
DELETES_AT_ONCE = 8


class BackendError(Exception):
    """Base of errors a backend raises; `tiering` maps them, `server` maps tiering's."""


class DataNotFound(BackendError):
    """The blob is gone (deleted by an overwrite that raced with a reader, or lost)."""


class DataUnavailable(BackendError):
    """The blob exists but cannot be read right now (too many shards or domains missing)."""


class CapacityExceeded(BackendError):
    """The backend has no room for the blob."""


class WriteQuorumLost(BackendError):
    """Too few healthy places to store the blob with the promised durability."""


@dataclass(frozen=True)
class DataFile:
    """One stored piece of a blob found on a backend's media (an erasure shard file on a domain).

    What `TierBackend.list_data` answers, for the consistency check (`tiering.fsck`) to compare
    with the catalog. `place`/`piece` name it the way the catalog's shard garbage does (domain,
    shard index), so an unreferenced one can be handed to the collector.
    """

    data_id: str
    place: str
    piece: int
    mtime: float
    size: int


@dataclass
class DataCheck:
    """What a backend found when asked whether one recorded blob is all where it says."""

    missing: list[tuple[int, str]] = field(default_factory=list)  # (piece, place) recorded, absent
    unreachable: list[tuple[int, str]] = field(default_factory=list)  # on offline places: unknown
    corrupt: list[int] = field(default_factory=list)  # pieces with bad checksums (verify only)
    lost: bool = False  # too few good pieces left to read the blob


class DataWriter(ABC):
    """Receives a blob's bytes in order; nothing is visible to readers until the catalog commits."""

    @abstractmethod
    async def write(self, chunk: bytes | memoryview) -> None:
        """Append bytes. May block the caller (not the event loop) while data is flushed."""

    @abstractmethod
    async def finish(self) -> StoredData:
        """Make everything written durable and return where it lives."""

    @abstractmethod
    async def abort(self) -> None:
        """Throw away what was written. Safe to call after a failure, and more than once."""


class DataReader(ABC):
    """An opened blob. Opening pins it: a later delete does not break a reader already open."""

    @abstractmethod
    def stream(self, start: int, end: int) -> AsyncIterator[bytes | memoryview]:
        """Yield the bytes [start, end) of the blob in order, in chunks of any size.

        A chunk may be a memoryview (a verified block handed on without a copy): consumers treat
        chunks as read-only bytes-like buffers.
        """

    @abstractmethod
    async def close(self) -> None:
        """Release what `open_reader` pinned."""


class TierBackend(ABC):
    """Where a tier keeps its bytes: memory, erasure-coded domains, an external S3 bucket, ..."""

    kind: str = ""

    @abstractmethod
    async def create_writer(self, data_id: str, size_hint: int | None = None) -> DataWriter:
        """Start a new blob. `size_hint` (when the client told us) lets the backend plan."""

    def write_whole(self, data_id: str, data: bytes) -> StoredData | None:
        """Store a whole blob durably in the calling worker thread — or None: use `create_writer`.

        The small-object fast path: the write and the catalog commit share one thread trip.
        Raises the same errors as a writer's `finish`. Blocking: never call it on the event loop.
        """
        return None

    # True where the backend takes time-ordered data ids (tiering/data_ids.py: they keep the
    # catalog's indexes writing one page per batch): only where nothing is derived from an id's
    # first characters — files' directories, which earlier versions compute too; an external S3
    # bucket's key-prefix partitions. Random ids elsewhere.
    time_ordered_ids = False

    # True where `write_wholes` is worth it: several small blobs then share the backend's flushes
    # (the small PUTs' committer, tiering/small_writes.py, batches only for such backends).
    batches_small_writes = False

    def write_wholes(self, blobs: list[tuple[str, bytes]]) -> list[StoredData | Exception]:
        """`write_whole` for several blobs at once, each durable on return: per blob its data or
        the error that failed it (a writer's `finish` errors). Only where `batches_small_writes`."""
        raise NotImplementedError

    @abstractmethod
    async def open_reader(self, stored: StoredData) -> DataReader:
        """Open a blob for reading; raise `DataNotFound` if it is gone."""

    def read_whole(self, stored: StoredData) -> bytes | memoryview | None:
        """The whole blob, read in the calling worker thread — or None: then use `open_reader`.

        The small-object fast path (one thread trip for lookup and read). A backend answers None
        whenever the read is not plain and healthy (degraded, remote, not at hand), so errors,
        repair and heal stay on the `open_reader` path. Blocking: never call it on the event loop.
        """
        return None

    def readable_now(self, stored: StoredData) -> bool:
        """False if the blob cannot be read as far as the backend knows without any I/O (too few
        of its shards on domains not known offline). A read asks it of every part in its range
        before the response's headers go out: a later part found unreadable only once the body
        streams can no longer get an error status, only a cut connection."""
        return True

    def read_at_hand(self, stored: StoredData) -> bytes | memoryview | None:
        """`read_whole` if the bytes are at hand: answered on the event loop without waiting for
        a disk, a lock or a network (None: the blob is not, or this backend cannot tell)."""
        return None

    @abstractmethod
    async def delete(self, stored: StoredData) -> None:
        """Remove a blob. Deleting what is already gone is not an error."""

    async def delete_many(self, blobs: Sequence[StoredData]) -> list[Exception | None]:
        """`delete` of several blobs (the garbage collector's batches), a few at a time; per blob
        None or the error that kept it. A backend that removes a batch more cheaply in one go
        (erasure-coded tiers: one thread trip per drive) overrides it."""
        at_once = asyncio.Semaphore(DELETES_AT_ONCE)

        async def one(stored: StoredData) -> Exception | None:
            async with at_once:
                try:
                    await self.delete(stored)
                except (BackendError, OSError) as exc:
                    return exc
                return None

        return list(await asyncio.gather(*(one(s) for s in blobs)))

    @abstractmethod
    async def exists(self, stored: StoredData) -> bool:
        """True while the blob can still be opened."""

    async def start(self) -> None:
        """Begin background work (e.g. sweeping abandoned temporary files)."""

    async def close(self) -> None:
        """Stop background work and release resources."""

    async def recent_data(self, since: float, until: float) -> list[StoredData]:
        """Blobs written in [since, until): candidates for the orphan sweep after a crash.

        A backend that cannot enumerate its blobs returns nothing (and leaks after a crash).
        """
        return []

    def judge_writers_elsewhere(self, elsewhere: Callable[[str], bool]) -> None:
        """Before `start`: the data ids whose writers are judged by the catalog's process table
        (a process on another host), not by a pid on this host, when `start` sweeps what dead
        writers left. A backend with no such sweep ignores it."""

    async def sweep_writes_of(self, writer: Callable[[str], bool]) -> int:
        """Remove what unfinished writes of data ids `writer` accepts left behind (temporary files
        of a process found dead); how many. A backend whose unfinished writes leave nothing that
        another process could tell apart returns 0."""
        return 0

    # Capability: `list_data` enumerates what the backend holds, so the consistency check can
    # find data no catalog row references. A backend that cannot answers with nothing listed.
    lists_data: bool = False

    async def list_data(self) -> tuple[list[DataFile], list[str]]:
        """Every stored piece, and the places that could not be listed (offline domains)."""
        return [], []

    async def still_stored(self, piece: DataFile) -> bool:
        """Is a piece `list_data` found still there? (A collector may have deleted it since.)"""
        return True

    async def check(self, stored: StoredData, *, verify: bool = False) -> DataCheck:
        """Is this recorded blob whole where the catalog says? `verify` also reads checksums."""
        return DataCheck(lost=not await self.exists(stored))

    def stats(self) -> dict[str, Any]:
        """Cheap numbers for status and metrics (bytes used, capacity, ...)."""
        return {}

    def erasure_pool(self) -> ErasurePool | None:
        """The erasure pool holding this tier's bytes on local failure domains, or None.

        Healing, rebalancing and drive administration work on a pool's domains and shards
        directly; a backend without such a pool (memory, plain files, a remote bucket) answers None.
        """
        return None

    def domains(self) -> list[dict[str, Any]]:
        """The drives (failure domains) under this backend, for admin, metrics and the status page.

        One dict per drive: `id`, `path`, `node`, `rack`, `zone`, `weight`, `state` (online |
        offline), `draining`, `health` (normal | full | failing: whether it takes new writes) and
        `health_detail` (why), `shards`, `used_bytes`, `free_bytes`, `total_bytes`. A backend
        without drives of its own answers [].
        """
        return []


BackendFactory = Callable[..., TierBackend]
_REGISTRY: dict[str, BackendFactory] = {}


def register_backend(kind: str) -> Callable[[BackendFactory], BackendFactory]:
    """Class decorator: make a backend constructible from config by its `kind` name."""

    def decorate(factory: BackendFactory) -> BackendFactory:
        _REGISTRY[kind] = factory
        return factory

    return decorate


def create_backend(kind: str, **options: Any) -> TierBackend:
    try:
        factory = _REGISTRY[kind]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise ValueError(f"unknown tier backend kind {kind!r} (known: {known})") from None
    return factory(**options)
