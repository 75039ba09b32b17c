"""On-disk format of one shard file, self-describing so a scrubber can verify a file on its own.

    [header: 512 bytes][frame 0][frame 1]...      frame s = [xxh3_64 of block s: 8 bytes LE][block s]

The header names the blob (data id, layout, k, m, shard index, block size, object size, stripe
count) and ends with its own checksum. Frames are fixed-stride (only the last one is shorter), so
block s of any shard is one `pread` at a computed offset — no index to read first.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

import xxhash

from erasure.checksum import CHECKSUM_SIZE
from erasure.errors import CorruptShard
from erasure.stripe import StripeLayout, layout_of

MAGIC = b"TSSH"
VERSION = 1
HEADER_SIZE = 512
_FIXED = struct.Struct("<4sBBHHHIQQH")  # magic ver layout k m index block_size size stripes id_len
_MAX_ID = HEADER_SIZE - _FIXED.size - CHECKSUM_SIZE
LAYOUT_CODES = {"ec": 0, "replica": 1}
_LAYOUT_NAMES = {v: k for k, v in LAYOUT_CODES.items()}


@dataclass(frozen=True)
class ShardHeader:
    data_id: str
    layout: str
    k: int
    m: int
    index: int
    block_size: int
    size: int

    def __init__(
        self, data_id: str, layout: str, k: int, m: int, index: int, block_size: int, size: int
    ) -> None:
        # Written out, not generated: built for every shard written or read (tiering/records.py
        # says why).
        object.__setattr__(self, "data_id", data_id)
        object.__setattr__(self, "layout", layout)
        object.__setattr__(self, "k", k)
        object.__setattr__(self, "m", m)
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "block_size", block_size)
        object.__setattr__(self, "size", size)

    @functools.cached_property  # frozen: the layout never changes; asked for many times a shard
    def geometry(self) -> StripeLayout:
        return layout_of(self.size, self.k, self.block_size)

    def pack(self) -> bytes:
        ident = self.data_id.encode()
        if len(ident) > _MAX_ID:
            raise ValueError(f"data id longer than {_MAX_ID} bytes")
        fixed = _FIXED.pack(
            MAGIC,
            VERSION,
            LAYOUT_CODES[self.layout],
            self.k,
            self.m,
            self.index,
            self.block_size,
            self.size,
            self.geometry.stripe_count,
            len(ident),
        )
        body = (fixed + ident).ljust(HEADER_SIZE - CHECKSUM_SIZE, b"\0")
        return body + xxhash.xxh3_64_digest(body)

    @classmethod
    def unpack(cls, raw: bytes | bytearray) -> ShardHeader:
        if len(raw) < HEADER_SIZE:
            raise CorruptShard("truncated shard header")
        body, digest = raw[: HEADER_SIZE - CHECKSUM_SIZE], raw[HEADER_SIZE - CHECKSUM_SIZE : HEADER_SIZE]
        if xxhash.xxh3_64_digest(body) != digest:
            raise CorruptShard("shard header checksum mismatch")
        magic, version, layout, k, m, index, block_size, size, stripes, id_len = _FIXED.unpack_from(body)
        if magic != MAGIC or version != VERSION or layout not in _LAYOUT_NAMES:
            raise CorruptShard("not a tierstore shard file (bad magic, version or layout)")
        data_id = body[_FIXED.size : _FIXED.size + id_len].decode()
        header = cls(data_id, _LAYOUT_NAMES[layout], k, m, index, block_size, size)
        if header.geometry.stripe_count != stripes:
            raise CorruptShard("shard header stripe count disagrees with its size")
        return header


def frame_offset(block_size: int, stripe: int) -> int:
    return HEADER_SIZE + stripe * (CHECKSUM_SIZE + block_size)


def file_size(header: ShardHeader) -> int:
    return _file_size(header.size, header.k, header.block_size)


@functools.lru_cache(maxsize=4096)  # a few sizes recur (small objects, full blocks): asked per shard
def _file_size(size: int, k: int, block_size: int) -> int:
    geo = StripeLayout(size, k, block_size)
    return HEADER_SIZE + geo.stripe_count * CHECKSUM_SIZE + geo.shard_bytes()
