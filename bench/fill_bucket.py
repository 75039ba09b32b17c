"""Fill a bucket with N zero-byte objects straight through the catalog (benchmark setup, not a tool).

    .venv/bin/python bench/fill_bucket.py --data DATA_DIR --bucket NAME --keys 1000000 [--start 0]

Reaching a million keys through S3 PUTs takes hours on a small box (~130 PUT/s: each one is a
catalog commit with an fsync). A zero-byte object has no data on any tier, so this commits them in
batches with `Catalog.create_empty_objects` instead: the same rows a 0-byte PUT writes, tens of
thousands per transaction. The bucket must already exist (create it over S3, so that it has the
right owner); the server may be running meanwhile: the catalog is SQLite in WAL mode and serves
readers in other processes while this writes. Keys are bench_peers' LIST keys, `list/%07d`, so
bench_peers' listing checks (order, count, first and last page) apply to the result; keys that
exist already are left as they are.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tiering.catalog import Catalog  # noqa: E402
from tiering.records import ObjectMeta  # noqa: E402
from tiering.tiers import tier_for_storage_class  # noqa: E402

BATCH = (
    50_000  # keys per transaction: big enough that commits are noise, small enough to hold the lock briefly
)


def list_key(i: int) -> str:
    return f"list/{i:07d}"  # bench_peers.list_key


def catalog_path(data_dir: Path) -> Path:
    """Where `tierstore serve --data DATA_DIR` keeps its catalog in the default configuration."""
    return data_dir / "catalog" / "catalog.db"


def fill(
    catalog: Path | str,
    bucket: str,
    keys: int,
    *,
    start: int = 0,
    key: Callable[[int], str] = list_key,
    storage_class: str = "STANDARD",
) -> dict[str, Any]:
    """Create zero-byte objects key(start) .. key(start + keys - 1) in `bucket`; returns what it did."""
    store = Catalog(catalog)
    meta = ObjectMeta(storage_class=storage_class)
    tier = tier_for_storage_class(storage_class)
    created = 0
    t0 = time.perf_counter()
    try:
        for lo in range(start, start + keys, BATCH):
            hi = min(lo + BATCH, start + keys)
            created += store.create_empty_objects(
                bucket, map(key, range(lo, hi)), tier=tier, meta=meta, now=time.time()
            )
    finally:
        store.close()
    seconds = time.perf_counter() - t0
    return {
        "keys": keys,
        "created": created,
        "fill_s": round(seconds, 1),
        "keys_per_s": round(keys / seconds),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, help="the server's --data directory (its SQLite catalog)")
    ap.add_argument(
        "--catalog",
        metavar="URL",
        default=os.environ.get("TIERSTORE_CATALOG_URL"),
        help="the server's catalog URL instead (postgresql://...; default $TIERSTORE_CATALOG_URL)",
    )
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--start", type=int, default=0, help="number of the first key")
    args = ap.parse_args()
    if args.catalog:
        print(fill(args.catalog, args.bucket, args.keys, start=args.start))
        return 0
    if args.data is None:
        raise SystemExit("say where the catalog is: --data DIR (SQLite) or --catalog URL")
    path = catalog_path(args.data)
    if not path.exists():
        raise SystemExit(f"no catalog at {path}: start `tierstore serve --data {args.data}` once first")
    print(fill(path, args.bucket, args.keys, start=args.start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
