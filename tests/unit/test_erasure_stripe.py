"""Stripe arithmetic and the codec, as properties: any object, any range, any m lost blocks."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from erasure.checksum import block_checksum
from erasure.codec import Codec, encode_stripe, rebuild_blocks
from erasure.shard_format import HEADER_SIZE, ShardHeader
from erasure.stripe import StripeLayout, split_stripe


@st.composite
def layouts_and_ranges(draw: st.DrawFn) -> tuple[StripeLayout, int, int]:
    layout = StripeLayout(
        size=draw(st.integers(0, 5000)), k=draw(st.integers(1, 8)), block_size=draw(st.integers(1, 300))
    )
    start = draw(st.integers(0, layout.size))
    end = draw(st.integers(start, layout.size))
    return layout, start, end


def stripe_blocks(data: bytes, layout: StripeLayout, stripe: int) -> list[bytes]:
    base = layout.stripe_start(stripe)
    chunk = data[base : base + layout.stripe_len(stripe)]
    return [bytes(b) for b in split_stripe(chunk, layout.k, layout.block_len(stripe))]


@given(layouts_and_ranges())
def test_locate_covers_the_range_exactly_and_in_order(case: tuple[StripeLayout, int, int]) -> None:
    layout, start, end = case
    data = random.Random(layout.size).randbytes(layout.size)
    pieces = layout.locate(start, end)
    out = bytearray()
    expected_offset = start
    for piece in pieces:
        assert piece.block_len == layout.block_len(piece.stripe) <= layout.block_size
        blocks = stripe_blocks(data, layout, piece.stripe)
        for part in piece.blocks:
            assert 0 <= part.start < part.end <= piece.block_len
            assert part.offset == expected_offset
            out += blocks[part.shard][part.start : part.end]
            expected_offset += part.end - part.start
    assert bytes(out) == data[start:end]


@given(st.integers(0, 10**9), st.integers(1, 20), st.integers(1, 1 << 20))
def test_stripes_account_for_every_byte(size: int, k: int, block_size: int) -> None:
    layout = StripeLayout(size, k, block_size)
    if layout.stripe_count:
        last = layout.stripe_count - 1
        assert last * layout.stripe_bytes + layout.stripe_len(last) == size
        assert 0 < layout.stripe_len(last) <= k * layout.block_len(last) < layout.stripe_len(last) + k
        assert layout.shard_bytes() == last * block_size + layout.block_len(last)


@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(1, 8),
    m=st.integers(0, 4),
    block_len=st.integers(1, 200),
    fill=st.floats(0.01, 1.0),
    seed=st.integers(0, 2**32),
)
def test_encode_then_drop_any_m_decodes_to_the_input(
    k: int, m: int, block_len: int, fill: float, seed: int
) -> None:
    rng = random.Random(seed)
    data = rng.randbytes(max(1, int(k * block_len * fill)))
    codec = Codec(k, m)
    frames = encode_stripe(codec, data, stripe=3, block_len=block_len)
    assert all(cs == block_checksum(b, 3, i) for i, (cs, b) in enumerate(frames))
    survivors = rng.sample(range(k + m), k)  # any m of the k+m are lost
    data_blocks = rebuild_blocks(codec, {i: frames[i][1] for i in survivors}, list(range(k)))
    assert b"".join(bytes(data_blocks[i]) for i in range(k))[: len(data)] == data
    lost = [i for i in range(k + m) if i not in survivors]
    rebuilt = rebuild_blocks(codec, {i: frames[i][1] for i in survivors}, lost)
    assert all(bytes(rebuilt[i]) == bytes(frames[i][1]) for i in lost)


def test_checksum_depends_on_position() -> None:
    block = b"x" * 100
    assert len({block_checksum(block, s, i) for s in range(3) for i in range(3)}) == 9


def test_header_round_trip_and_corruption() -> None:
    header = ShardHeader("abc-123", "ec", 4, 2, 5, 1 << 20, 123456789)
    raw = header.pack()
    assert len(raw) == HEADER_SIZE and ShardHeader.unpack(raw) == header
    broken = bytearray(raw)
    broken[10] ^= 1
    with pytest.raises(Exception, match="checksum"):
        ShardHeader.unpack(bytes(broken))


def test_locate_rejects_out_of_range() -> None:
    with pytest.raises(ValueError):
        StripeLayout(10, 2, 4).locate(5, 11)
