"""The concurrency proof: objects move between all four tiers while clients read and overwrite them.

Client threads read and overwrite objects for the whole run. Each key has one writer, which logs
every version's MD5 *before* sending it and marks it acknowledged when the PUT returns. A read
must return a version that was acknowledged when the read started or a later one — never an older
version, never bytes no writer sent (a torn read). Meanwhile the test drives about a thousand
objects through every tier: idle → warm (temperature), heated → gpu-direct, idle → hot, a rule →
cold (GLACIER), restores, and idle → warm again, with lifecycle passes while the load runs.
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from botocore.exceptions import ClientError

from tests.conftest import make_client
from tests.lifecycle.conftest import KiB, Tiered, error_code

LIVE, ARCHIVE = 800, 200  # objects the clients read and overwrite / objects a rule archives
WRITERS, READERS = 2, 3
ENV = {
    "TIERSTORE_LIFECYCLE_PROMOTE_TO_HOT_HEAT": "2",
    "TIERSTORE_LIFECYCLE_PROMOTE_TO_GPU_HEAT": "3",
    "TIERSTORE_LIFECYCLE_MOVER_CONCURRENCY": "8",
}
BUCKET = "load"


def body_for(key: str, version: int) -> bytes:
    size = 256 * KiB if hash(key) % 10 == 0 else random.randint(1, 6) * KiB
    head = f"{key}#{version}#".encode()
    return head + os.urandom(size - len(head))


@dataclass
class History:
    """Per key: MD5s in write order; how many of them are acknowledged."""

    versions: dict[str, list[str]] = field(default_factory=dict)
    acked: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sending(self, key: str, md5: str) -> None:
        with self.lock:
            self.versions.setdefault(key, []).append(md5)

    def acknowledged(self, key: str, md5: str) -> None:
        with self.lock:
            self.acked[key] = self.versions[key].index(md5) + 1

    def floor(self, key: str) -> int:
        with self.lock:
            return self.acked.get(key, 0)

    def allowed(self, key: str, floor: int) -> list[str]:
        """What a read that started at `floor` may return: the version acknowledged then, or later."""
        with self.lock:
            return self.versions[key][max(floor - 1, 0) :]

    def last(self, key: str) -> str:
        with self.lock:
            return self.versions[key][self.acked[key] - 1]


@dataclass
class Load:
    endpoint: str
    keys: list[str]
    archive_keys: list[str]
    history: History
    stop: threading.Event = field(default_factory=threading.Event)
    failures: list[str] = field(default_factory=list)
    wrong_reads: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def writer(self, index: int) -> None:
        s3 = make_client(self.endpoint)
        mine = [k for i, k in enumerate(self.keys) if i % WRITERS == index]
        version = 1_000
        while not self.stop.is_set():
            key = random.choice(mine)
            version += 1
            body = body_for(key, version)
            md5 = hashlib.md5(body).hexdigest()
            self.history.sending(key, md5)
            try:
                etag = s3.put_object(Bucket=BUCKET, Key=key, Body=body)["ETag"].strip('"')
            except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
                self.failures.append(f"PUT {key}: {exc!r}")
                continue
            if etag != md5:
                self.wrong_reads.append(f"PUT {key}: etag {etag} != {md5}")
            self.history.acknowledged(key, md5)
            self.counts["put"] += 1

    def reader(self) -> None:
        s3 = make_client(self.endpoint)
        while not self.stop.is_set():
            archived = random.random() < 0.1
            key = random.choice(self.archive_keys if archived else self.keys)
            floor = self.history.floor(key)
            ranged = random.random() < 0.2
            try:
                if ranged:
                    got = s3.get_object(Bucket=BUCKET, Key=key, Range="bytes=0-1023")["Body"].read()
                else:
                    got = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
            except ClientError as exc:
                if archived and error_code(exc) == "InvalidObjectState":
                    self.counts["archived"] += 1  # cold and not restored: the answer S3 gives
                    continue
                self.failures.append(f"GET {key}: {exc!r}")
                continue
            except Exception as exc:  # noqa: BLE001
                self.failures.append(f"GET {key}: {exc!r}")
                continue
            self.counts["get"] += 1
            if ranged:
                # A range cannot be hashed against whole versions; its header names the version.
                name = got.split(b"#", 2)
                if len(got) != 1024 or name[0] != key.encode():
                    self.wrong_reads.append(f"GET {key} range: {got[:40]!r}")
                continue
            md5 = hashlib.md5(got).hexdigest()
            if md5 not in self.history.allowed(key, floor):
                self.wrong_reads.append(
                    f"GET {key}: {md5} not among versions acknowledged since the read began"
                )

    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self.writer, args=(i,), daemon=True) for i in range(WRITERS)]
        threads += [threading.Thread(target=self.reader, daemon=True) for _ in range(READERS)]
        for thread in threads:
            thread.start()
        return threads


def put_all(ts: Tiered, keys: list[str], history: History) -> None:
    def work(chunk: list[str]) -> None:
        s3 = make_client(ts.endpoint)
        for key in chunk:
            body = body_for(key, 0)
            md5 = hashlib.md5(body).hexdigest()
            history.sending(key, md5)
            s3.put_object(Bucket=BUCKET, Key=key, Body=body)
            history.acknowledged(key, md5)

    threads = [threading.Thread(target=work, args=(keys[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_reads_and_overwrites_stay_correct_while_objects_move_between_all_tiers(
    spawn: Callable[..., Tiered],
) -> None:
    ts = spawn(env=ENV)
    ts.s3.create_bucket(Bucket=BUCKET)
    keys = [f"live/{i:04d}" for i in range(LIVE)]
    archive_keys = [f"arch/{i:04d}" for i in range(ARCHIVE)]
    history = History()
    put_all(ts, keys + archive_keys, history)
    ts.s3.put_bucket_lifecycle_configuration(
        Bucket=BUCKET,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "archive",
                    "Filter": {"Prefix": "arch/"},
                    "Status": "Enabled",
                    "Transitions": [{"Days": 40, "StorageClass": "GLACIER"}],
                }
            ]
        },
    )

    load = Load(ts.endpoint, keys, archive_keys, history)
    threads = load.start()
    seen: Counter[str] = Counter()  # most objects seen on each tier after a pass

    def lifecycle_pass() -> dict:
        report = ts.run_pass()
        for name, tier in ts.tiers().items():
            seen[name] = max(seen[name], int(tier["objects"]))
        return report

    try:
        time.sleep(1)
        ts.advance(31)
        lifecycle_pass()  # idle a month: hot → warm, everything
        heated = random.sample(keys, 150) + archive_keys[:20]
        s3 = make_client(ts.endpoint)
        for key in heated:
            for _ in range(3):
                s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        lifecycle_pass()  # heated: warm → gpu-direct
        # Day 41.5: the rule archives arch/ (due 40 days after creation, rounded up to midnight UTC as
        # S3 does: at most day 41, whatever the time of day), gpu-direct objects idle → hot.
        ts.advance(10.5)
        lifecycle_pass()
        restored = archive_keys[100:150]
        for key in restored:
            assert (
                ts.s3.restore_object(Bucket=BUCKET, Key=key, RestoreRequest={"Days": 1})["ResponseMetadata"][
                    "HTTPStatusCode"
                ]
                == 202
            )
        lifecycle_pass()  # restored copies made while clients read them
        for key in random.sample(keys, 100):
            for _ in range(3):
                s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        lifecycle_pass()
        ts.advance(31)
        lifecycle_pass()  # everything idle again → warm; restored copies expire
    finally:
        load.stop.set()
        for thread in threads:
            thread.join(60)

    assert not load.failures, load.failures[:10]
    assert not load.wrong_reads, load.wrong_reads[:10]
    assert load.counts["get"] > 500 and load.counts["put"] > 100, load.counts

    status = ts.admin("lifecycle", "status")
    moved = sum(m["count"] for m in status["mover"]["moves"])
    assert moved >= 1_000, status["mover"]
    pairs = {(m["from"], m["to"]) for m in status["mover"]["moves"]}
    for pair in [("hot", "warm"), ("warm", "gpu-direct"), ("gpu-direct", "hot"), ("warm", "cold")]:
        assert pair in pairs, pairs
    assert status["mover"]["restores"] >= len(restored)
    assert all(seen[t] > 0 for t in ("gpu-direct", "hot", "warm", "cold")), seen
    assert status["mover"]["failed"] == 0

    # At rest: the last acknowledged write of every key, on the tier policy says.
    ts.advance(31)
    lifecycle_pass()
    assert ts.run_pass()["transitions"] == 0, "settled: a further pass moves nothing"
    s3 = make_client(ts.endpoint)
    for key in keys:
        got = s3.get_object(Bucket=BUCKET, Key=key)
        assert hashlib.md5(got["Body"].read()).hexdigest() == history.last(key), key
        assert got["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"] == "warm", key
    for key in archive_keys:
        head = s3.head_object(Bucket=BUCKET, Key=key)
        assert head["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"] == "cold", key
        assert head["StorageClass"] == "GLACIER" and "Restore" not in head, key
        assert head["ETag"].strip('"') == history.last(key), key
    tiers = ts.tiers()
    assert tiers["warm"]["objects"] == LIVE and tiers["cold"]["objects"] == ARCHIVE
