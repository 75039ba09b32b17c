"""A whole small blob read at once: the GET path of objects up to a stripe or so.

`read_at_hand` (on the event loop, when every data shard is a packed record whose bytes are in the
page cache) and `read_healthy` (in a worker thread) read the k data shards straight into one
buffer, verify every block and hand back the blob's bytes, or None when anything is unusual: then
the streaming reader (erasure/reader.py) opens the blob, reconstructs what it must and queues the
heal. A module of its own, apart from the streaming reader's async generator, so that the compiled
build (setup.py) compiles it: it runs once per small GET.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from erasure.checksum import CHECKSUM_SIZE, block_checksum
from erasure.codec import Buffer
from erasure.drive import Drive, ShardReader
from erasure.errors import CorruptShard, ErasureError
from erasure.location import Location
from erasure.pack import MAX_READ_BUFFERS
from erasure.shard_format import HEADER_SIZE, ShardHeader
from erasure.shard_store import LocalDrive
from erasure.stripe import layout_of

if TYPE_CHECKING:
    from erasure.pool import ErasurePool

# Why a shard is not readable; "offline" and "unplaced" do not prove the blob was deleted.
OFFLINE, MISSING, CORRUPT, UNPLACED = "offline", "missing", "corrupt", "unplaced"


def on_nodes(pool: ErasurePool, loc: Location) -> bool:
    """Does any shard of this blob live on a storage node (a remote drive)?"""
    return any(
        d is not None and d.address is not None for d in map(pool.topology.get, filter(None, loc.shards))
    )


def read_healthy(pool: ErasurePool, data_id: str, loc: Location, size: int) -> Buffer | None:
    """The whole blob from its k data shards, read in the calling (worker) thread; None unless healthy.

    The small-object GET path: one thread trip instead of an open, a read and a close trip each.
    Anything unusual — a data shard offline, unplaced, missing, of the wrong geometry or failing its
    checksum — answers None, and the caller opens a `PoolReader`, which reconstructs and queues the
    heal. So this path never decides what is lost; it only skips work when nothing is.
    A parity shard on a down domain also answers None: the reader queues the blob for heal.
    Shards on storage nodes answer None too: the reader's hedged, parallel opening serves them
    better than one thread asking each node in turn (a hung node would cost its full timeout).
    """
    return _read_whole(pool, data_id, loc, size, lambda store, i: store.open(data_id, i))


def read_at_hand(pool: ErasurePool, data_id: str, loc: Location, size: int) -> Buffer | None:
    """`read_healthy` on the event loop: the whole blob when every data shard is a packed record
    that reads without waiting (indexed, its pack open, its bytes in the page cache: see
    `PackSet.read_at_hand`) and checks out; None otherwise — read it in a thread then."""
    return _read_whole(
        pool,
        data_id,
        loc,
        size,
        lambda store, i: store.open_at_hand(data_id, i) if isinstance(store, LocalDrive) else None,
        at_hand=True,
    )


def _read_whole(
    pool: ErasurePool,
    data_id: str,
    loc: Location,
    size: int,
    open_shard: Callable[[Drive, int], ShardReader | None],
    at_hand: bool = False,
) -> Buffer | None:
    """The blob from its k data shards opened by `open_shard` (None: give up); None on anything unusual."""
    if unreachable(pool, loc, range(loc.width)) or on_nodes(pool, loc):
        return None
    scattered = _read_packed(pool, data_id, loc, size, at_hand)
    if scattered is not None:
        return scattered
    files: list[ShardReader] = []
    try:
        for i in range(loc.k):
            domain_id = loc.shards[i]
            store = pool.store(domain_id) if domain_id else None
            assert store is not None  # placed and on a known, online domain: checked above
            f = open_shard(store, i)
            if f is None:
                return None
            files.append(f)
            h = f.header
            if (h.k, h.m, h.block_size, h.size) != (loc.k, loc.m, loc.block_size, size):
                return None  # before the next shard is opened: it may be as wrong
        return _join_blocks(files, loc, size)
    except (ErasureError, OSError):
        return None
    finally:
        close_all(files)


def _read_packed(
    pool: ErasurePool, data_id: str, loc: Location, size: int, at_hand: bool
) -> memoryview | None:
    """The blob read straight into one buffer when its k data shards are packed records on this
    host's drives: each record's blocks scattered by one preadv to where they belong in the blob
    (stripe s, block i at s × stripe_bytes + i × block_len: the data blocks of a stripe are its
    bytes in order, padding only at the end), the header and the block checksums to scratch
    buffers, then all of it verified. A read-only view of the blob; None when anything differs
    (a shard in a file, not indexed here yet, short, damaged or superseded by another worker's
    heal): then the shards are opened one by one, which sorts all of that out.

    Against opening each shard: no record buffer per shard and no join — a 1 MiB GET's bytes are
    copied once (from the page cache), not twice, and no reader objects are built."""
    geo = layout_of(size, loc.k, loc.block_size)
    stripes = geo.stripe_count
    if stripes == 0 or 1 + 2 * stripes > MAX_READ_BUFFERS:  # a header, then a checksum and a block a stripe
        return None
    last = geo.block_len(stripes - 1)
    blob = bytearray((stripes - 1) * geo.stripe_bytes + loc.k * last)
    out = memoryview(blob)
    head = bytearray(HEADER_SIZE)
    sums = memoryview(bytearray(stripes * CHECKSUM_SIZE))
    for i in range(loc.k):
        domain_id = loc.shards[i]
        store = pool.store(domain_id) if domain_id else None
        if not isinstance(store, LocalDrive):
            return None
        blocks = []
        for s in range(stripes):
            at, length = s * geo.stripe_bytes + i * geo.block_len(s), geo.block_len(s)
            blocks.append(out[at : at + length])
        buffers = [memoryview(head)]
        for s, block in enumerate(blocks):
            buffers += [sums[s * CHECKSUM_SIZE : (s + 1) * CHECKSUM_SIZE], block]
        read = store.read_packed_into(data_id, i, buffers, at_hand)
        if not read or not _is_header_of(head, data_id, i, loc, size):
            return None
        for s, block in enumerate(blocks):
            stored = int.from_bytes(sums[s * CHECKSUM_SIZE : (s + 1) * CHECKSUM_SIZE], "little")
            if stored != block_checksum(block, s, i):
                return None
    return out[:size].toreadonly()


def _is_header_of(raw: bytearray, data_id: str, index: int, loc: Location, size: int) -> bool:
    """The shard header in `raw` is intact and names this shard of this blob, as `loc` places it."""
    try:
        h = ShardHeader.unpack(raw)
    except CorruptShard:
        return False
    expected = (data_id, index, loc.k, loc.m, loc.block_size, size)
    return (h.data_id, h.index, h.k, h.m, h.block_size, h.size) == expected


def _join_blocks(files: list[ShardReader], loc: Location, size: int) -> bytes | None:
    """The blob's bytes from its opened data shards (headers already checked against `loc`).

    Views of the verified blocks, joined: the blob's bytes are copied once here, not once per
    block and then again by the join (a 1 MiB GET is memory-bandwidth bound on a busy box)."""
    parts: list[memoryview] = []
    for piece in layout_of(size, loc.k, loc.block_size).locate(0, size):
        for part in piece.blocks:
            block = files[part.shard].read_block_view(piece.stripe)
            whole = part.start == 0 and part.end == len(block)
            parts.append(block if whole else block[part.start : part.end])
    return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)


def unreachable(pool: ErasurePool, loc: Location, indexes: Iterable[int]) -> dict[int, str]:
    """Shards that cannot be read for placement reasons alone (no I/O)."""
    out: dict[int, str] = {}
    for i in indexes:
        domain_id = loc.shards[i]
        store = pool.store(domain_id) if domain_id else None
        if i in loc.missing or domain_id is None:
            out[i] = UNPLACED
        elif store is None or not store.domain.online:
            out[i] = OFFLINE
    return out


def close_all(files: Iterable[ShardReader]) -> None:
    for f in files:
        f.close()
