"""The metrics endpoint and the admin CLI against a live server."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests import node_cluster, support
from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess, catalog_kind


def scrape(server: ServerProcess) -> dict[str, float]:
    """A scrape signed by an administrator: it has the per bucket series too."""
    url = f"{server.endpoint}/_tierstore/metrics"
    signed = AWSRequest(method="GET", url=url, data=b"")
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(signed)
    request = urllib.request.Request(url, headers=dict(signed.headers.items()))
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r"^([a-zA-Z_:][\w:]*(?:\{[^}]*\})?) (\S+)$", line)
        if match:
            values[match.group(1)] = float(match.group(2))
    return values


def admin(server: ServerProcess, *args: str) -> Any:
    return support.admin(server.endpoint, *args, timeout=120)


def test_request_and_tier_metrics_move_with_traffic(server: ServerProcess, s3, bucket: str) -> None:
    before = scrape(server)
    key = 'tierstore_s3_requests_total{operation="PutObject",status="200"}'
    s3.put_object(Bucket=bucket, Key="m/one", Body=b"x" * 200_000)
    after = scrape(server)
    assert after[key] == before.get(key, 0) + 1
    assert (
        after['tierstore_tier_bytes{tier="hot"}']
        >= before.get('tierstore_tier_bytes{tier="hot"}', 0) + 200_000
    )
    assert after['tierstore_ec_bytes_total{op="encode"}'] > before.get(
        'tierstore_ec_bytes_total{op="encode"}', 0
    )
    # Per-bucket usage comes from the catalog's counters, fresh at every scrape (no longer cached).
    bucket_bytes = f'tierstore_bucket_bytes{{bucket="{bucket}",tier="hot"}}'
    assert after[bucket_bytes] == before.get(bucket_bytes, 0) + 200_000


def test_small_gets_are_answered_at_hand_and_read_every_overwrite(
    server: ServerProcess, s3, bucket: str
) -> None:
    """A small GET whose catalog row and bytes are in memory is answered on the event loop, with
    no worker-thread trip (tiering/store.py `_open_at_hand`): the metric says where each went. It
    must still read each overwrite the moment it was acknowledged. The SQLite catalog answers at
    hand once its files are checked cached (each second); PostgreSQL never does (a network), nor
    do shards on storage nodes (--cluster)."""
    expected = catalog_kind() == "sqlite" and not node_cluster.cluster_mode()
    at_hand = 'tierstore_small_reads_total{path="at_hand"}'
    thread = 'tierstore_small_reads_total{path="thread"}'
    before = scrape(server)

    def overwrite_and_read(n: int) -> None:
        body = f"version {n} ".encode() * (n % 7 + 1)
        s3.put_object(Bucket=bucket, Key="small/k", Body=body)
        assert s3.get_object(Bucket=bucket, Key="small/k")["Body"].read() == body

    for n in range(40):
        overwrite_and_read(n)
    deadline = time.monotonic() + 20  # the first check of the catalog's files may still be due
    while expected and scrape(server).get(at_hand, 0) <= before.get(at_hand, 0):
        assert time.monotonic() < deadline, "no small GET was answered at hand"
        overwrite_and_read(n := n + 1)
    after = scrape(server)
    answered = after[at_hand] + after[thread] - before.get(at_hand, 0) - before.get(thread, 0)
    assert answered >= 1  # this gateway answered some of them (a cluster run alternates gateways)
    if not expected:
        assert after[at_hand] == before.get(at_hand, 0)


def test_gets_up_to_a_mebibyte_are_answered_at_hand_and_exact(server: ServerProcess, s3, bucket: str) -> None:
    """Objects read whole (up to 1 MiB: erasure-coded, every data shard a packed record) are
    answered at hand too, once cached, and byte-exact after every overwrite."""
    if catalog_kind() != "sqlite" or node_cluster.cluster_mode():
        pytest.skip("only the SQLite catalog on local drives answers at hand")
    at_hand = 'tierstore_small_reads_total{path="at_hand"}'
    before = scrape(server).get(at_hand, 0)
    rng = random.Random(9)
    for n in range(6):
        body = rng.randbytes((1 << 20) - n * 100_003)  # 1 MiB down to ~500 KB: padded last blocks
        s3.put_object(Bucket=bucket, Key="mebibyte/k", Body=body)
        for _ in range(3):
            assert s3.get_object(Bucket=bucket, Key="mebibyte/k")["Body"].read() == body
    deadline = time.monotonic() + 20  # the first check of the catalog's files may still be due
    while scrape(server).get(at_hand, 0) <= before:
        assert time.monotonic() < deadline, "no 1 MiB GET was answered at hand"
        assert s3.get_object(Bucket=bucket, Key="mebibyte/k")["Body"].read() == body


def test_a_listing_paged_through_reads_ahead_and_still_shows_every_write(
    server: ServerProcess, s3, bucket: str
) -> None:
    """Once a client asks for a page after the first, the next page is read ahead while it reads
    this one (tiering/listing_readahead.py) — and served only if nothing it shows changed since: a
    key put and a key deleted in the next page's range after it was read ahead show in it. On
    PostgreSQL (which cannot tell cheaply) nothing is read ahead."""
    expected = catalog_kind() == "sqlite"
    keys = [f"ahead/{n:04d}" for n in range(450)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: s3.put_object(Bucket=bucket, Key=key, Body=b"x"), keys))
    used, stale = (
        'tierstore_listing_pages_total{source="used"}',
        'tierstore_listing_pages_total{source="stale"}',
    )
    before = scrape(server)

    def page(token: str | None) -> dict[str, Any]:
        extra = {"ContinuationToken": token} if token else {}
        return s3.list_objects_v2(Bucket=bucket, Prefix="ahead/", MaxKeys=100, **extra)

    seen: list[str] = []
    token = None
    for number in range(5):
        answer = page(token)
        seen += [entry["Key"] for entry in answer.get("Contents", [])]
        token = answer.get("NextContinuationToken")
        if number == 1:
            # Page 3 (keys 200-299) is being read ahead: change it once that read is surely done.
            time.sleep(1.0)
            s3.put_object(Bucket=bucket, Key="ahead/0250.5", Body=b"new")
            s3.delete_object(Bucket=bucket, Key="ahead/0260")
            keys = sorted([*keys, "ahead/0250.5"])
            keys.remove("ahead/0260")
        if number == 2:
            time.sleep(0.5)  # after a stale page none is read ahead for a moment (writes coming)
    assert token is None  # 450 keys: five pages of 100
    assert seen == keys

    # Page 3 read ahead was stale (the writes); pages 4 and 5 were read ahead while their page
    # before travelled (one of them at least: an earlier test's restore may finish meanwhile).
    # Another worker's counts reach a scrape within a second (server/metrics_workers.py).
    def grew(name: str, after: dict[str, float]) -> bool:
        return after.get(name, 0) > before.get(name, 0)

    deadline = time.monotonic() + 5
    while True:
        after = scrape(server)
        counted = grew(stale, after) and grew(used, after)
        if counted or not expected or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    # Background changes on the shared server (an earlier test's restores or lifecycle moves
    # finishing) can make both of those pages stale too: more passes then, each page still
    # checked, until one read-ahead page is served (bounded).
    passes = 0
    while expected and not grew(used, after) and passes < 10:
        passes += 1
        token, again = None, []
        for _ in range(5):
            answer = page(token)
            again += [entry["Key"] for entry in answer.get("Contents", [])]
            token = answer.get("NextContinuationToken")
        assert again == keys
        time.sleep(1.2)  # another worker's counts reach a scrape within a second
        after = scrape(server)
    counted = grew(stale, after) and grew(used, after)
    assert counted == expected, {
        name: (before.get(name, 0), after.get(name, 0))
        for name in (used, stale, 'tierstore_listing_pages_total{source="read"}')
    }


def test_small_puts_are_stored_and_committed_in_batches(server: ServerProcess, s3, bucket: str) -> None:
    """On the SQLite catalog every small PUT goes through the small-write committer (one thread
    stores and commits whole batches: tiering/small_writes.py): concurrent PUTs all land
    byte-exact, and of concurrent create-only PUTs of one key exactly one wins. PostgreSQL runs
    each PUT in its own transaction instead."""
    expected = catalog_kind() == "sqlite"
    batched = "tierstore_small_writes_batched_total"
    before = scrape(server)
    bodies = {f"batched/{n}": os.urandom(n * 37 % 5000 + 1) for n in range(64)}

    def put(item: tuple[str, bytes]) -> None:
        s3.put_object(Bucket=bucket, Key=item[0], Body=item[1])

    def create_once(n: int) -> int:
        try:
            s3.put_object(Bucket=bucket, Key="batched/once", Body=f"writer {n}".encode(), IfNoneMatch="*")
        except ClientError as exc:
            return int(exc.response["ResponseMetadata"]["HTTPStatusCode"])
        return 200

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, bodies.items()))
        statuses = list(pool.map(create_once, range(8)))
    assert statuses.count(200) == 1 and set(statuses) <= {200, 409, 412}, statuses
    for key, body in bodies.items():
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
    after = scrape(server)
    went = after.get(batched, 0) - before.get(batched, 0)
    if not expected:
        assert went == 0
    elif node_cluster.cluster_mode():
        assert went >= 1  # the clients alternate between two gateways: this one saw some of them
    else:
        assert went >= len(bodies) + 1  # and the winner (a loser may be refused before its body)
        batches = "tierstore_small_write_batches_total"
        assert 1 <= after[batches] - before.get(batches, 0) <= went


def test_domain_offline_shows_in_metrics_status_and_domains(server: ServerProcess) -> None:
    up = 'tierstore_domain_up{domain="hot-n3-d1",node="n3",tier="hot"}'
    assert scrape(server)[up] == 1
    changed = admin(server, "domain", "offline", "hot-n3")
    assert changed["domains"] == ["hot-n3-d1", "hot-n3-d2"]
    try:
        assert scrape(server)[up] == 0
        states = {d["id"]: d["state"] for d in admin(server, "domains")}
        assert states["hot-n3-d1"] == states["hot-n3-d2"] == "offline"
        hot = next(t for t in admin(server, "status")["tiers"] if t["name"] == "hot")
        assert hot["domains_online"] == hot["domains"] - 2
    finally:
        admin(server, "domain", "online", "hot-n3")
    assert scrape(server)[up] == 1


def test_unknown_domain_and_unauthenticated_admin_are_refused(server: ServerProcess) -> None:
    env = {**os.environ, "TIERSTORE_ACCESS_KEY": ACCESS_KEY, "TIERSTORE_SECRET_KEY": "wrong"}
    bad = subprocess.run(
        [sys.executable, "-m", "server.cli", "admin", "--endpoint", server.endpoint, "status"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert bad.returncode != 0 and "SignatureDoesNotMatch" in bad.stderr
    env["TIERSTORE_SECRET_KEY"] = SECRET_KEY
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "server.cli",
            "admin",
            "--endpoint",
            server.endpoint,
            "domain",
            "offline",
            "nope",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert missing.returncode != 0 and "NoSuchDomain" in missing.stderr
