"""Per-block checksums: xxh3_64, seeded with the block's (stripe, shard) position.

The seed makes a block that landed at the wrong place (misdirected write, swapped file) fail
verification just like flipped bits do, at no extra cost.
"""

from __future__ import annotations

import xxhash

CHECKSUM_SIZE = 8


def block_checksum(block: bytes | memoryview, stripe: int, shard: int) -> int:
    return xxhash.xxh3_64_intdigest(block, seed=((stripe & 0xFFFF_FFFF_FFFF) << 16) | (shard & 0xFFFF))
