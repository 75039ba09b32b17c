"""Overwrites racing reads: every GET returns one whole version, never a mix of two."""

from __future__ import annotations

import hashlib
import os
import threading
import time

from tests.conftest import ServerProcess, make_client

MiB = 1024 * 1024
VERSIONS = 4
SIZE = 3 * MiB  # several backend read chunks: a mixed answer would show in the MD5
DURATION = 4.0


def test_concurrent_puts_and_gets_see_whole_versions(server: ServerProcess, s3, bucket: str) -> None:
    bodies = [os.urandom(SIZE) for _ in range(VERSIONS)]
    digests = {hashlib.md5(b).hexdigest(): i for i, b in enumerate(bodies)}
    s3.put_object(Bucket=bucket, Key="hot", Body=bodies[0])
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []
    puts = [0]

    def writer(index: int) -> None:
        client = make_client(server.endpoint)
        try:
            while not stop.is_set():
                client.put_object(Bucket=bucket, Key="hot", Body=bodies[index])
                puts[0] += 1
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    def reader() -> None:
        client = make_client(server.endpoint)
        try:
            while not stop.is_set():
                got = client.get_object(Bucket=bucket, Key="hot")
                data = got["Body"].read()
                digest = hashlib.md5(data).hexdigest()
                assert len(data) == SIZE, f"short read: {len(data)}"
                assert digest in digests, "a GET returned bytes of no single version"
                assert got["ETag"] == f'"{digest}"', "the ETag names another version than the body"
                seen.append(digests[digest])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(1, VERSIONS)]
    threads += [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(DURATION)
    stop.set()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[0]
    assert puts[0] >= VERSIONS and len(seen) >= 10
    assert len(set(seen)) >= 2, "the readers never saw an overwrite: the race was not exercised"
