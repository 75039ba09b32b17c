"""A client cannot forge a pack record: objects whose bytes are well-formed records naming another
object's data id are never indexed, even when a restart resyncs into them (erasure/pack.py keys
each record's header with a per-drive secret; see erasure/README.md)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from erasure.pack import encode_record
from erasure.shard_format import HEADER_SIZE, ShardHeader
from tests.conftest import ServerProcess, make_client
from tests.shards import Shard, shards_under

SIZE = 3000


def shards(data: Path) -> set[Shard]:
    return set(shards_under(data / "domains"))


def forged_records(attacker: set[Shard], victim_id: str) -> bytes:
    """For each of the victim's shard indexes, the attacker's own shard relabelled as the victim's,
    framed as a record in the public format of packs before keys (xxh32), and the same with the
    keyed magic and a guessed tag: all a client can build without a drive's key."""
    out = b""
    for shard in sorted(attacker, key=lambda s: s.index):
        raw = shard.read()
        header = dataclasses.replace(ShardHeader.unpack(raw[:HEADER_SIZE]), data_id=victim_id)
        legacy = encode_record(1, victim_id, shard.index, header.pack() + raw[HEADER_SIZE:])
        out += legacy + b"TSPK" + legacy[4:] + os.urandom(16)
    return out


@pytest.mark.parametrize("damage", ["header", "torn_tail"])
def test_a_forged_record_in_an_object_is_not_indexed_after_a_restart_resyncs_into_it(
    spawn: Callable[..., ServerProcess], tmp_path: Path, damage: str
) -> None:
    data = tmp_path / "data"
    server = spawn(data)
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="forge")
    victim_body, evil = os.urandom(SIZE), b"EVIL" * (SIZE // 4)

    def put(key: str, body: bytes) -> set[Shard]:
        before = shards(data)
        s3.put_object(Bucket="forge", Key=key, Body=body)
        return shards(data) - before

    victim = put("victim", victim_body)
    attacker = put("attacker", evil)
    assert victim and attacker and all(s.packed for s in victim | attacker)
    (victim_id,) = {s.data_id for s in victim}
    forger = put("forger", forged_records(attacker, victim_id))
    assert forger and all(s.packed for s in forger)
    server.stop()

    for shard in forger:  # the forger's record is the last of its pack: damage it, then restart
        with open(shard.file, "r+b") as f:
            if damage == "header":
                f.seek(shard.record_start)
                f.write(b"XXXX")  # its magic: the scan resyncs past it, into its payload
            else:
                f.truncate(shard.offset + shard.length - 10)  # a crash mid-append: a torn tail
    server = spawn(data)
    s3 = make_client(server.endpoint)
    for _ in range(5):  # every copy the reader may pick
        assert s3.get_object(Bucket="forge", Key="victim")["Body"].read() == victim_body
    # What the drives index after the restart (the same scan): the victim's own records only.
    for shard in shards(data):
        if shard.data_id == victim_id:
            assert b"EVIL" not in shard.read(), shard
