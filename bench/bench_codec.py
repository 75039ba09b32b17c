"""Codec throughput: our stripe path (split + zfec + per-block checksums) against raw zfec.

    .venv/bin/python bench/bench_codec.py [--k 4 --m 2 --block-size 1048576 --mib 64 --repeat 5]

Both sides run in the same process over the same buffers. "encode" is what a PUT pays per stripe;
"degraded decode" is what a GET pays when m data shards are missing: ours also verifies the
checksum of every block it uses, as a real read does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import zfec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from erasure.checksum import block_checksum  # noqa: E402
from erasure.codec import Codec, encode_stripe, rebuild_blocks  # noqa: E402


def timed(fn: Callable[[], None], repeat: int, nbytes: int) -> float:
    """Median MB/s over `repeat` runs."""
    rates = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        rates.append(nbytes / (time.perf_counter() - t0) / 1e6)
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--m", type=int, default=2)
    parser.add_argument("--block-size", type=int, default=1 << 20)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    k, m, bs = args.k, args.m, args.block_size
    stripe_bytes = k * bs
    stripes = max(1, (args.mib << 20) // stripe_bytes)
    data = [os.urandom(stripe_bytes) for _ in range(stripes)]
    nbytes = stripes * stripe_bytes
    codec = Codec(k, m)
    raw_enc, raw_dec = zfec.Encoder(k, k + m), zfec.Decoder(k, k + m)
    parity_nums = tuple(range(k, k + m))

    def split(buf: bytes) -> tuple[memoryview, ...]:
        view = memoryview(buf)
        return tuple(view[i * bs : (i + 1) * bs] for i in range(k))

    def raw_encode() -> None:
        for buf in data:
            raw_enc.encode(split(buf), parity_nums)

    def our_encode() -> None:
        for s, buf in enumerate(data):
            encode_stripe(codec, buf, s, bs)

    # Degraded: the first m data shards are gone; decode from the k survivors.
    encoded = [encode_stripe(codec, buf, s, bs) for s, buf in enumerate(data)]
    survivors = tuple(range(m, k + m))

    def raw_decode() -> None:
        for frames in encoded:
            raw_dec.decode(tuple(frames[i][1] for i in survivors), survivors)

    def our_decode() -> None:
        for s, frames in enumerate(encoded):
            good = {}
            for i in survivors:
                checksum, block = frames[i]
                if block_checksum(block, s, i) != checksum:
                    raise AssertionError("checksum mismatch")
                good[i] = block
            rebuild_blocks(codec, good, list(range(k)))

    print(f"k={k} m={m} block={bs} stripes={stripes} ({nbytes / 2**20:.0f} MiB), median of {args.repeat}")
    for label, ours, raw in (("encode", our_encode, raw_encode), ("degraded decode", our_decode, raw_decode)):
        ours_rate, raw_rate = timed(ours, args.repeat, nbytes), timed(raw, args.repeat, nbytes)
        print(
            f"{label:16s} ours {ours_rate:8.0f} MB/s   raw zfec {raw_rate:8.0f} MB/s   ratio {ours_rate / raw_rate:5.2f}"
        )


if __name__ == "__main__":
    main()
