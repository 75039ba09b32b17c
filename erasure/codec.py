"""Systematic k+m Reed-Solomon (zfec; its encoding by ISA-L where installed), plus the CPU-heavy
per-stripe steps built on it.

Everything here is synchronous and CPU-bound: async callers run it via `asyncio.to_thread`
(zfec releases the GIL, so stripes of different requests encode in parallel).
A k=1 codec is plain repetition: that is how the small-object replica layout reuses every
read, write and heal path without a special case.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import zfec

from erasure import isal
from erasure.checksum import block_checksum
from erasure.stats import timed
from erasure.stripe import split_stripe

Buffer = bytes | memoryview


class Codec:
    def __init__(self, k: int, m: int) -> None:
        if k < 1 or m < 0 or k + m > 256:
            raise ValueError(f"unsupported code k={k} m={m} (need k>=1, m>=0, k+m<=256)")
        self.k, self.m = k, m
        self._parity_nums = tuple(range(k, k + m))
        self._encoder = zfec.Encoder(k, k + m) if k > 1 and m > 0 else None
        self._decoder = zfec.Decoder(k, k + m) if k > 1 and m > 0 else None
        # The same parity from ISA-L where it is installed (erasure/isal.py): ~50x faster.
        self._fast = isal.IsalEncoder(k, m, self._encoder) if self._encoder and isal.AVAILABLE else None

    @property
    def width(self) -> int:
        return self.k + self.m

    def encode(self, data_blocks: Sequence[Buffer]) -> list[Buffer]:
        """The m parity blocks of k equal-length data blocks."""
        if len(data_blocks) != self.k:
            raise ValueError(f"need {self.k} data blocks, got {len(data_blocks)}")
        if self.m == 0:
            return []
        if self._encoder is None:  # k == 1: repetition
            return [data_blocks[0]] * self.m
        with timed("encode", len(data_blocks[0]) * self.k):
            if self._fast is not None:
                return list(self._fast.encode(data_blocks))
            return list(self._encoder.encode(tuple(data_blocks), self._parity_nums))

    def decode(self, blocks: Mapping[int, Buffer]) -> list[Buffer]:
        """The k data blocks from any k of the k+m blocks (shard index → block)."""
        if all(i in blocks for i in range(self.k)):
            return [blocks[i] for i in range(self.k)]
        if len(blocks) < self.k:
            raise ValueError(f"need {self.k} blocks to decode, got {len(blocks)}")
        if self._decoder is None:  # k == 1: any copy is the data
            return [next(iter(blocks.values()))]
        nums = tuple(sorted(blocks)[: self.k])
        with timed("decode", len(blocks[nums[0]]) * self.k):
            return list(self._decoder.decode(tuple(blocks[i] for i in nums), nums))


@functools.lru_cache(maxsize=64)
def codec_for(k: int, m: int) -> Codec:
    return Codec(k, m)


def encode_stripe(codec: Codec, data: Buffer, stripe: int, block_len: int) -> list[tuple[int, Buffer]]:
    """Split one stripe, compute parity and checksum every block: (checksum, block) per shard index."""
    return encode_blocks(codec, split_stripe(data, codec.k, block_len), stripe)


def encode_blocks(codec: Codec, data_blocks: Sequence[Buffer], stripe: int) -> list[tuple[int, Buffer]]:
    """Like `encode_stripe` for a stripe already cut into k equal blocks (no copy to split it)."""
    blocks = [*data_blocks, *codec.encode(data_blocks)]
    return [(block_checksum(b, stripe, i), b) for i, b in enumerate(blocks)]


def rebuild_blocks(codec: Codec, good: Mapping[int, Buffer], wanted: Sequence[int]) -> dict[int, Buffer]:
    """Recreate the `wanted` shard blocks of one stripe from any k good ones."""
    data = codec.decode(good)
    need_parity = [i for i in wanted if i >= codec.k and i not in good]
    parity = dict(zip(codec._parity_nums, codec.encode(data), strict=True)) if need_parity else {}
    out: dict[int, Buffer] = {}
    for i in wanted:
        out[i] = good[i] if i in good else (data[i] if i < codec.k else parity[i])
    return out
