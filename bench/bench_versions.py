"""ListObjectVersions pages/s at scale: the catalog's merged index scan over N versions.

Fills a SQLite catalog (or, with --catalog URL, a PostgreSQL one) with `--keys` keys of
`--versions` versions each (the current one in `objects`, the rest in `object_versions`, written
in bulk with SQL: what a million PUTs leave behind, without a million PUTs), then times pages of
1000 from the start, the middle and the end of the listing (KeyMarker + VersionIdMarker), with
and without a delimiter.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_versions.py --keys 250000 --versions 4

`--put-list` instead measures what versioning costs a client, in one run against one real server
(`tierstore serve`, default configuration; bench/servers.py): 4 KiB PUTs and ListObjectsV2 pages
in a versioned and an unversioned bucket, interleaved round by round so both see the same machine.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_versions.py --put-list --keys 1000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tiering.catalog import Catalog
from tiering.catalog.versions import VERSION_COLUMNS, new_version_id


def fill(catalog: Catalog, keys: int, versions: int) -> list[str]:
    names = [f"run{n % 97:02d}/step{n:08d}.pt" for n in range(keys)]
    db = catalog._db
    with db.write() as conn:
        seq = 0
        rows_current = []
        rows_old = []
        for name in names:
            for _ in range(versions - 1):
                seq += 1
                rows_old.append(
                    ("b", name, new_version_id(), seq, 0, 1.0, seq, 10, "e", 1.0, "hot", "{}", "{}", None, None, "[]",
                     0, 0, 0, 0, None, "STANDARD")
                )  # fmt: skip
            rows_current.append(("b", name, seq + 1, 10, "e", 1.0, "hot", "{}", "{}", new_version_id()))
        conn.executemany(
            f"INSERT INTO object_versions ({VERSION_COLUMNS}) VALUES ({','.join('?' * 22)})", rows_old
        )
        conn.executemany(
            "INSERT INTO objects (bucket, key, generation, size, etag, last_modified, tier, meta, tags, "
            "segments, version_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, '[]', ?)",
            rows_current,
        )
    return sorted(names)


def put_list(keys: int, rounds: int, lists: int) -> None:
    """Median 4 KiB PUT and ListObjectsV2 (1000-key page) times, versioned vs unversioned."""
    import boto3
    from botocore.config import Config

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from servers import Tierstore

    server = Tierstore().start()
    try:
        s3 = boto3.client(
            "s3", endpoint_url=server.endpoint, region_name="us-east-1",
            aws_access_key_id=server.access_key, aws_secret_access_key=server.secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )  # fmt: skip
        buckets = {"unversioned": "bench-plain", "versioned": "bench-versioned"}
        for name in buckets.values():
            s3.create_bucket(Bucket=name)
        s3.put_bucket_versioning(Bucket=buckets["versioned"], VersioningConfiguration={"Status": "Enabled"})
        body = os.urandom(4096)
        puts: dict[str, list[float]] = {label: [] for label in buckets}
        # Every round overwrites every key: the versioned bucket ends with `rounds` versions a key.
        for _ in range(rounds):
            for n in range(keys):
                for label, name in buckets.items():
                    began = time.perf_counter()
                    s3.put_object(Bucket=name, Key=f"ckpt/step{n:06d}.pt", Body=body)
                    puts[label].append(time.perf_counter() - began)
        listed: dict[str, list[float]] = {label: [] for label in buckets}
        for _ in range(lists):
            for label, name in buckets.items():
                began = time.perf_counter()
                page = s3.list_objects_v2(Bucket=name, MaxKeys=1000)
                listed[label].append(time.perf_counter() - began)
                assert page["KeyCount"] == min(keys, 1000)
        for title, samples in (("4 KiB PUT", puts), ("ListObjectsV2 page", listed)):
            plain = statistics.median(samples["unversioned"]) * 1000
            versioned = statistics.median(samples["versioned"]) * 1000
            print(
                f"{title:>18}: unversioned {plain:7.2f} ms, versioned {versioned:7.2f} ms "
                f"(median of {len(samples['versioned'])}; ratio {versioned / plain:.2f})"
            )
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=250_000)
    parser.add_argument("--versions", type=int, default=4)
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument("--catalog", default="")
    parser.add_argument("--put-list", action="store_true", help="PUT and LIST cost through a real server")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lists", type=int, default=50)
    args = parser.parse_args()
    if args.put_list:
        put_list(args.keys, args.rounds, args.lists)
        return
    location: str | Path = args.catalog or Path(tempfile.mkdtemp()) / "catalog.db"
    catalog = Catalog(location, durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    catalog.set_versioning("b", "Enabled")
    started = time.perf_counter()
    names = fill(catalog, args.keys, args.versions)
    print(f"filled {args.keys * args.versions:,} versions in {time.perf_counter() - started:.1f} s")
    for label, index in (("start", 0), ("middle", len(names) // 2), ("end", len(names) - 300)):
        for delimiter in ("", "/"):
            marker = names[index - 1] if index else ""
            began = time.perf_counter()
            for _ in range(args.pages):
                page = catalog.list_versions("b", key_marker=marker, delimiter=delimiter, max_keys=1000)
            seconds = (time.perf_counter() - began) / args.pages
            print(
                f"{label:>6} delimiter={delimiter!r:5}: {1 / seconds:7.1f} pages/s "
                f"({seconds * 1000:.1f} ms, {len(page.entries)} entries, {len(page.common_prefixes)} prefixes)"
            )
    catalog.close()


if __name__ == "__main__":
    main()
