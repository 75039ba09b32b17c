"""The drive seam: what the erasure pool needs from one failure domain, and the two kinds of drive.

A `Drive` holds the shard files of one domain. `LocalDrive` (erasure.shard_store) is a directory
on this host; `RemoteDrive` (erasure.remote) is a directory on a `tierstore node`, reached over
HTTP. The pool, writer, reader, heal, rebalance and drive health talk to drives only through this
interface, so a stripe may mix both kinds. All methods are blocking: the pool calls them from
worker threads. Errors: FileNotFoundError for a shard that is not there, DomainOffline for a drive
that cannot be reached (an offline domain, a dead or hung node), CorruptShard for bad bytes,
other OSError for a failing drive.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from erasure.durability import FlushBarrier
from erasure.shard_format import ShardHeader
from erasure.topology import Domain


@dataclass(frozen=True)
class ShardEntry:
    """A committed shard file found on a drive (listing for scrub, fsck and the orphan sweep)."""

    data_id: str
    index: int
    mtime: float
    size: int


class ShardWriter(Protocol):
    """A shard being written: frames appended in stripe order, visible only once committed."""

    header: ShardHeader

    @property
    def drive(self) -> Drive: ...

    @property
    def stripes_written(self) -> int: ...

    def append(self, stripe: int, checksum: int, block: bytes | memoryview) -> None: ...

    def relocate(self, drive: Drive) -> ShardWriter:
        """The frames appended so far, on another drive (ShardUnreadable if they cannot be had)."""
        ...

    def publish(self, header: ShardHeader | None = None) -> FlushBarrier | None:
        """Make the shard visible; returns a barrier to wait on for durability (None: durable now)."""
        ...

    def committed(self) -> None: ...

    @property
    def replaced(self) -> int | None:
        """Once published: the size of the shard it replaced on its drive (the same data id and
        index: heal rewriting a damaged one in place), None where it added one. A drive's shard
        count counts it only in the second case."""
        ...

    def unpublish(self) -> None: ...

    def commit(self, header: ShardHeader | None = None) -> None: ...

    def discard(self) -> None: ...


class ShardReader(Protocol):
    """A committed shard opened for reading: its header, then checksum-verified blocks."""

    header: ShardHeader

    def read_block(self, stripe: int) -> bytes: ...

    def read_block_view(self, stripe: int) -> memoryview: ...

    def close(self) -> None: ...


class Drive(Protocol):
    domain: Domain

    @property
    def shard_count(self) -> int: ...  # committed shards on the drive (a status figure)

    @property
    def shard_bytes(self) -> int: ...

    def check_online(self) -> None: ...

    def create(self, header: ShardHeader) -> ShardWriter: ...

    def open(self, data_id: str, index: int) -> ShardReader: ...

    def has(self, data_id: str, index: int) -> bool: ...

    def remove(self, data_id: str, index: int) -> bool: ...

    def sweep_tmp(
        self, max_age: float = 3600.0, judged_elsewhere: Callable[[str], bool] | None = None
    ) -> int:
        """Remove temporary files untouched for `max_age` seconds, or whose writer (named by pid in
        the file name) is gone from this host — except, for the pid test, files of data ids
        `judged_elsewhere` accepts (their writer may run on another host: see `sweep_tmp_of`)."""
        ...

    def sweep_tmp_of(self, writer: Callable[[str], bool]) -> int:
        """Remove the temporary shard files of data ids `writer` accepts (those of a writer known
        dead); how many. A node's drive has none of a gateway's (the node discards a dropped stream)."""
        ...

    def scan(self) -> None: ...

    def list_shards(self) -> list[ShardEntry]: ...

    def verify_shard(self, data_id: str, index: int) -> ShardHeader:
        """Read every block of a shard where it lives; CorruptShard if one is bad. Its header."""
        ...

    def disk_usage(self) -> tuple[int, int] | None:
        """(free, total) bytes of the drive; None when not known now."""
        ...

    def probe_write(self) -> None:
        """A small write made durable and removed: raises OSError when the drive cannot take one."""
        ...


DriveFactory = Callable[[Domain], Drive]
