"""Pure stripe arithmetic: how an object's bytes map onto stripes, blocks and shards.

An object of `size` bytes is cut into stripes of k × block_size bytes. Within a stripe the bytes
are laid out contiguously over the k data blocks (block b holds stripe bytes [b·L, (b+1)·L)).
Every stripe but the last has blocks of `block_size`; the last stripe's blocks are shrunk to
ceil(tail / k) bytes and only that is zero-padded, so a 1.5 MiB object does not cost k+m full
1 MiB blocks. Shard i of an object holds block i of every stripe, in stripe order.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BlockSlice:
    """Bytes [start, end) of data block `shard` of a stripe; they are object bytes [offset, offset+end-start)."""

    shard: int
    start: int
    end: int
    offset: int


@dataclass(frozen=True)
class StripeSlice:
    stripe: int
    block_len: int
    blocks: tuple[BlockSlice, ...]


@dataclass(frozen=True)
class StripeLayout:
    size: int
    k: int
    block_size: int
    # Worked out once: every shard written, read or counted asks for them, some many times.
    stripe_bytes: int = field(init=False, repr=False, compare=False)
    stripe_count: int = field(init=False, repr=False, compare=False)

    def __init__(self, size: int, k: int, block_size: int) -> None:
        # Written out, as tiering/records.py's are: a dataclass's generated __init__ is interpreted
        # even in the compiled build (setup.py), and every shard written or read builds a layout.
        if size < 0 or k < 1 or block_size < 1:
            raise ValueError(f"bad layout: size={size} k={k} block_size={block_size}")
        stripe_bytes = k * block_size
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "k", k)
        object.__setattr__(self, "block_size", block_size)
        object.__setattr__(self, "stripe_bytes", stripe_bytes)
        object.__setattr__(self, "stripe_count", -(-size // stripe_bytes))

    def stripe_start(self, stripe: int) -> int:
        return stripe * self.stripe_bytes

    def stripe_len(self, stripe: int) -> int:
        """Object bytes in `stripe` (not counting padding)."""
        self._check(stripe)
        return min(self.stripe_bytes, self.size - self.stripe_start(stripe))

    def block_len(self, stripe: int) -> int:
        """Length of every block (data and parity) of `stripe`."""
        length = self.stripe_len(stripe)
        return self.block_size if length == self.stripe_bytes else -(-length // self.k)

    def shard_bytes(self) -> int:
        """Payload bytes one shard holds (sum of its block lengths)."""
        if self.stripe_count == 0:
            return 0
        return (self.stripe_count - 1) * self.block_size + self.block_len(self.stripe_count - 1)

    def locate(self, start: int, end: int) -> list[StripeSlice]:
        """The stripes and data-block slices that hold object bytes [start, end), in order."""
        if not 0 <= start <= end <= self.size:
            raise ValueError(f"range [{start}, {end}) outside object of {self.size} bytes")
        out: list[StripeSlice] = []
        if start == end:
            return out
        first, last = start // self.stripe_bytes, (end - 1) // self.stripe_bytes
        for stripe in range(first, last + 1):
            base = self.stripe_start(stripe)
            blen = self.block_len(stripe)
            lo = max(start, base) - base
            hi = min(end, base + self.stripe_len(stripe)) - base
            blocks = []
            for shard in range(lo // blen, (hi - 1) // blen + 1):
                b_lo = max(lo, shard * blen) - shard * blen
                b_hi = min(hi, (shard + 1) * blen) - shard * blen
                blocks.append(BlockSlice(shard, b_lo, b_hi, base + shard * blen + b_lo))
            out.append(StripeSlice(stripe, blen, tuple(blocks)))
        return out

    def _check(self, stripe: int) -> None:
        if not 0 <= stripe < self.stripe_count:
            raise IndexError(f"stripe {stripe} outside 0..{self.stripe_count - 1}")


@functools.lru_cache(maxsize=4096)
def layout_of(size: int, k: int, block_size: int) -> StripeLayout:
    """`StripeLayout(size, k, block_size)`, shared: it is immutable, and a small GET asks for it once
    per shard header and once more to join the blocks (a dataclass built each time cost ~3 µs; a
    few sizes recur: small objects, full blocks)."""
    return StripeLayout(size, k, block_size)


def split_stripe(data: bytes | memoryview, k: int, block_len: int) -> list[memoryview]:
    """Cut one stripe's bytes into k blocks of `block_len`, zero-padding the tail (copies only then)."""
    if len(data) > k * block_len:
        raise ValueError("stripe data longer than k blocks")
    if len(data) < k * block_len:
        data = bytes(data) + bytes(k * block_len - len(data))
    view = memoryview(data)
    return [view[i * block_len : (i + 1) * block_len] for i in range(k)]
