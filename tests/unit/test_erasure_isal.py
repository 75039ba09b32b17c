"""ISA-L's encoding (erasure/isal.py) against zfec's: the same parity, byte for byte, so that shards
written with either decode with zfec. Where the library is not installed, zfec encodes and the
comparisons skip (CI installs it: .ci/run)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import zfec

from erasure import isal
from erasure.codec import Codec, rebuild_blocks

needs_isal = pytest.mark.skipif(not isal.AVAILABLE, reason="ISA-L (libisal.so.2) is not installed")


@needs_isal
@pytest.mark.parametrize(("k", "m"), [(2, 1), (3, 2), (4, 2), (6, 3), (8, 4), (10, 4), (12, 6)])
@pytest.mark.parametrize("length", [1, 15, 16, 33, 4096, 65_537, 262_144])
def test_isal_parity_is_zfecs(k: int, m: int, length: int) -> None:
    rng = random.Random(k * 1000 + m * 100 + length)
    blocks = [rng.randbytes(length) for _ in range(k)]
    expected = zfec.Encoder(k, k + m).encode(tuple(blocks), tuple(range(k, k + m)))
    encoder = isal.IsalEncoder(k, m, zfec.Encoder(k, k + m))
    assert encoder.encode(blocks) == list(expected)
    # Views (how the writer hands over a stripe's blocks) give the same bytes.
    whole = b"".join(blocks)
    views = [memoryview(whole)[i * length : (i + 1) * length] for i in range(k)]
    assert encoder.encode(views) == list(expected)


@needs_isal
def test_the_codec_encodes_with_isal_and_zfec_decodes_what_it_wrote() -> None:
    """Any k data or parity blocks of an ISA-L-encoded stripe rebuild the others through zfec."""
    codec = Codec(4, 2)
    assert codec._fast is not None
    rng = random.Random(7)
    data = [rng.randbytes(10_000) for _ in range(4)]
    parity = codec.encode(data)
    blocks = dict(enumerate([*data, *parity]))
    for lost in [(0, 1), (2, 5), (3, 4), (0, 5)]:
        good = {i: b for i, b in blocks.items() if i not in lost}
        assert rebuild_blocks(codec, good, list(lost)) == {i: blocks[i] for i in lost}


@needs_isal
def test_isal_refuses_blocks_of_unequal_length() -> None:
    encoder = isal.IsalEncoder(2, 1, zfec.Encoder(2, 3))
    with pytest.raises(ValueError, match="equal lengths"):
        encoder.encode([b"ab", b"abc"])
    assert encoder.encode([b"", b""]) == [b""]


def test_tierstore_isal_0_switches_it_off() -> None:
    """The switch (for a comparison, or a library misbehaving): zfec encodes then."""
    code = (
        "from erasure import isal; from erasure.codec import Codec; print(isal.AVAILABLE, Codec(4, 2)._fast)"
    )
    env = {**os.environ, "TIERSTORE_ISAL": "0"}
    repo = Path(__file__).resolve().parents[2]  # `erasure` importable whatever pytest's cwd
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=repo, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "None"]
