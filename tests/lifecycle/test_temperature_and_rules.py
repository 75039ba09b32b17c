"""Temperature, Intelligent-Tiering and S3 lifecycle rules against a real server on a test clock.

Every tier is asserted exactly: HEAD's x-tierstore-tier and `tierstore admin object --json` must
agree (Tiered.tier), and the storage class a client sees comes from HEAD.
"""

from __future__ import annotations

import datetime as dt
import re
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.conftest import ServerProcess, free_port
from tests.lifecycle.conftest import DAY, QUIET_DAEMON, KiB, Tiered, error_code, signed_request

# Quick promotion: 2 reads (decayed) → hot, 6 → gpu-direct.
FAST_HEAT = {"TIERSTORE_LIFECYCLE_PROMOTE_TO_HOT_HEAT": "2", "TIERSTORE_LIFECYCLE_PROMOTE_TO_GPU_HEAT": "6"}


@pytest.fixture(scope="module")
def ts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("temperature") / "data",
        free_port(),
        extra_args=["--test-clock"],
        env={**QUIET_DAEMON, **FAST_HEAT},
    )
    proc.start()
    yield Tiered(proc)
    proc.stop()


_n = iter(range(10_000))


@pytest.fixture
def bucket(ts: Tiered) -> Callable[[], str]:
    def make() -> str:
        name = f"temp-{next(_n)}"
        ts.s3.create_bucket(Bucket=name)
        return name

    return make


def moves(ts: Tiered, bucket: str, key: str) -> list[tuple[str, str, str]]:
    """(from, to, reason) oldest first."""
    return [(m["from_tier"], m["to_tier"], m["reason"]) for m in reversed(ts.obj(bucket, key)["moves"])]


# --- temperature ------------------------------------------------------------------------------


def test_unclassified_object_follows_its_temperature_through_all_readable_tiers(ts: Tiered, bucket) -> None:
    b = bucket()
    body = b"t" * 5000
    ts.s3.put_object(Bucket=b, Key="obj", Body=body)
    assert ts.tier(b, "obj") == "hot" and ts.storage_class(b, "obj") == "STANDARD"
    ts.run_pass()
    assert ts.tier(b, "obj") == "hot", "a fresh object stays where it was written"

    ts.advance(31)
    report = ts.run_pass()
    assert report["transitions"] >= 1
    assert ts.tier(b, "obj") == "warm"
    assert ts.storage_class(b, "obj") == "STANDARD", "temperature moves data, never the class a client sees"

    ts.heat_up(b, "obj", 3)  # heat ≥ 2 → back to hot
    ts.run_pass()
    assert ts.tier(b, "obj") == "hot"
    ts.run_pass()
    assert ts.tier(b, "obj") == "hot", "no flapping: a second pass leaves it"

    ts.heat_up(b, "obj", 6)  # heat ≥ 6 → gpu-direct
    ts.run_pass()
    assert ts.tier(b, "obj") == "gpu-direct"
    assert ts.get(b, "obj") == body

    ts.advance(0.1)  # 2.4 h idle > gpu_idle_seconds (1 h) → back to hot
    ts.run_pass()
    assert ts.tier(b, "obj") == "hot"
    assert ts.get(b, "obj") == body and ts.storage_class(b, "obj") == "STANDARD"
    assert moves(ts, b, "obj") == [
        ("hot", "warm", "temperature"),
        ("warm", "hot", "temperature"),
        ("hot", "gpu-direct", "temperature"),
        ("gpu-direct", "hot", "temperature"),
    ]


def test_explicit_storage_classes_stay_where_their_class_says(ts: Tiered, bucket) -> None:
    b = bucket()
    ts.s3.put_object(Bucket=b, Key="ia", Body=b"i" * 3000, StorageClass="STANDARD_IA")
    ts.s3.put_object(Bucket=b, Key="express", Body=b"e" * 3000, StorageClass="EXPRESS_ONEZONE")
    ts.s3.put_object(Bucket=b, Key="standard", Body=b"s" * 3000, StorageClass="STANDARD")
    assert [ts.tier(b, k) for k in ("ia", "express", "standard")] == ["warm", "gpu-direct", "hot"]
    ts.advance(31)  # idle: temperature would demote them all
    ts.heat_up(b, "ia", 8)  # hot: temperature would promote it to gpu-direct
    ts.run_pass()
    assert [ts.tier(b, k) for k in ("ia", "express", "standard")] == ["warm", "gpu-direct", "hot"]
    assert [ts.storage_class(b, k) for k in ("ia", "express", "standard")] == [
        "STANDARD_IA",
        "EXPRESS_ONEZONE",
        "STANDARD",
    ]
    # ... unless a rule moves them.
    ts.s3.put_bucket_lifecycle_configuration(
        Bucket=b,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "archive-ia",
                    "Filter": {"Prefix": "ia"},
                    "Status": "Enabled",
                    "Transitions": [{"Days": 1, "StorageClass": "GLACIER"}],
                }
            ]
        },
    )
    ts.run_pass()
    assert ts.tier(b, "ia") == "cold" and ts.storage_class(b, "ia") == "GLACIER"
    assert moves(ts, b, "ia") == [("warm", "cold", "lifecycle:archive-ia")]
    assert ts.tier(b, "express") == "gpu-direct" and ts.tier(b, "standard") == "hot"


def test_a_lifecycle_transition_is_not_undone_by_reads(ts: Tiered, bucket) -> None:
    """A rule gave the objects STANDARD_IA: from then on they are classed, and heat no longer moves
    them (as in S3, where reads never change an object's class). HEAD's class and tier agree."""
    b = bucket()
    bodies = {f"t{i}": bytes([65 + i]) * 4000 for i in range(3)}
    for key, body in bodies.items():
        ts.s3.put_object(Bucket=b, Key=key, Body=body)  # no class: temperature-managed until the rule
    ts.s3.put_bucket_lifecycle_configuration(
        Bucket=b,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "to-ia",
                    "Filter": {},
                    "Status": "Enabled",
                    "Transitions": [{"Days": 30, "StorageClass": "STANDARD_IA"}],
                }
            ]
        },
    )
    ts.advance(31)
    ts.run_pass()
    assert {k: (ts.tier(b, k), ts.storage_class(b, k)) for k in bodies} == {
        k: ("warm", "STANDARD_IA") for k in bodies
    }
    for _ in range(3):
        for key in bodies:
            ts.heat_up(b, key, 8)  # heat 8 ≥ 6: an unclassed object would climb to gpu-direct
        ts.run_pass()
        for key, body in bodies.items():
            assert (ts.tier(b, key), ts.storage_class(b, key)) == ("warm", "STANDARD_IA"), key
            assert ts.get(b, key) == body
    ts.advance(40)  # idle again, and later passes: still nothing moves
    ts.run_pass()
    for key in bodies:
        assert (ts.tier(b, key), ts.storage_class(b, key)) == ("warm", "STANDARD_IA"), key
        assert moves(ts, b, key) == [("hot", "warm", "lifecycle:to-ia")]


def test_bucket_tag_turns_temperature_off_for_unclassified_objects(ts: Tiered, bucket) -> None:
    off, on = bucket(), bucket()
    ts.s3.put_bucket_tagging(
        Bucket=off, Tagging={"TagSet": [{"Key": "tierstore:temperature", "Value": "off"}]}
    )
    for b in (off, on):
        ts.s3.put_object(Bucket=b, Key="k", Body=b"x" * 2000)
    ts.advance(31)
    ts.run_pass()
    assert ts.tier(off, "k") == "hot"
    assert ts.tier(on, "k") == "warm"
    ts.s3.delete_bucket_tagging(Bucket=off)
    ts.run_pass()
    assert ts.tier(off, "k") == "warm", "with the tag gone, temperature manages the bucket again"


def test_admin_object_reports_keys_with_any_characters(ts: Tiered, bucket) -> None:
    b = bucket()
    key = "dir/with space+plus&amp=eq%20/ü?.txt"
    ts.s3.put_object(Bucket=b, Key=key, Body=b"q" * 100, StorageClass="STANDARD_IA")
    info = ts.obj(b, key)
    assert (info["key"], info["tier"], info["storage_class"]) == (key, "warm", "STANDARD_IA")


# --- Intelligent-Tiering ----------------------------------------------------------------------


def test_intelligent_tiering_infrequent_access_archive_and_restore(ts: Tiered, bucket) -> None:
    b = bucket()
    big, small = b"B" * (200 * KiB), b"s" * (100 * KiB)
    ts.s3.put_object(Bucket=b, Key="big", Body=big, StorageClass="INTELLIGENT_TIERING")
    ts.s3.put_object(Bucket=b, Key="small", Body=small, StorageClass="INTELLIGENT_TIERING")
    assert ts.tier(b, "big") == "hot"
    ts.advance(29)
    ts.run_pass()
    assert ts.tier(b, "big") == "hot", "29 days idle is still frequent access"
    ts.advance(2)
    ts.run_pass()
    assert ts.tier(b, "big") == "warm"
    assert ts.tier(b, "small") == "hot", "objects under 128 KiB are not monitored: always frequent"
    for key in ("big", "small"):
        assert ts.storage_class(b, key) == "INTELLIGENT_TIERING"

    assert ts.get(b, "big") == big  # one access brings it back at the next pass
    ts.run_pass()
    assert ts.tier(b, "big") == "hot"

    ts.s3.put_bucket_intelligent_tiering_configuration(
        Bucket=b,
        Id="archive",
        IntelligentTieringConfiguration={
            "Id": "archive",
            "Status": "Enabled",
            "Tierings": [{"Days": 90, "AccessTier": "ARCHIVE_ACCESS"}],
        },
    )
    ts.advance(89)
    ts.run_pass()
    assert ts.tier(b, "big") == "warm", "89 days: infrequent, not archived yet"
    ts.advance(2)
    ts.run_pass()
    assert ts.tier(b, "big") == "cold"
    assert ts.tier(b, "small") == "hot"
    head = ts.s3.head_object(Bucket=b, Key="big")
    assert head["StorageClass"] == "INTELLIGENT_TIERING" and head["ArchiveStatus"] == "ARCHIVE_ACCESS"
    with pytest.raises(ClientError) as err:
        ts.get(b, "big")
    assert error_code(err.value) == "InvalidObjectState"
    assert (
        ts.s3.restore_object(Bucket=b, Key="big", RestoreRequest={"Days": 1})["ResponseMetadata"][
            "HTTPStatusCode"
        ]
        == 202
    )
    ts.run_pass()
    assert ts.get(b, "big") == big
    assert 'ongoing-request="false"' in ts.s3.head_object(Bucket=b, Key="big")["Restore"]


def test_intelligent_tiering_configuration_apis(ts: Tiered, bucket) -> None:
    b = bucket()
    s3 = ts.s3
    config = {
        "Id": "deep",
        "Filter": {"And": {"Prefix": "data/", "Tags": [{"Key": "t", "Value": "1"}]}},
        "Status": "Enabled",
        "Tierings": [
            {"Days": 90, "AccessTier": "ARCHIVE_ACCESS"},
            {"Days": 200, "AccessTier": "DEEP_ARCHIVE_ACCESS"},
        ],
    }
    s3.put_bucket_intelligent_tiering_configuration(
        Bucket=b, Id="deep", IntelligentTieringConfiguration=config
    )
    other = {"Id": "arch", "Status": "Disabled", "Tierings": [{"Days": 100, "AccessTier": "ARCHIVE_ACCESS"}]}
    s3.put_bucket_intelligent_tiering_configuration(
        Bucket=b, Id="arch", IntelligentTieringConfiguration=other
    )
    got = s3.get_bucket_intelligent_tiering_configuration(Bucket=b, Id="deep")[
        "IntelligentTieringConfiguration"
    ]
    assert got == config
    listed = s3.list_bucket_intelligent_tiering_configurations(Bucket=b)
    assert [c["Id"] for c in listed["IntelligentTieringConfigurationList"]] == ["arch", "deep"]
    assert listed["IntelligentTieringConfigurationList"][0] == other

    def refused(cfg: dict, id_: str | None = None) -> str:
        with pytest.raises(ClientError) as err:
            s3.put_bucket_intelligent_tiering_configuration(
                Bucket=b, Id=id_ or cfg["Id"], IntelligentTieringConfiguration=cfg
            )
        return error_code(err.value)

    assert (
        refused({"Id": "x", "Status": "Enabled", "Tierings": [{"Days": 10, "AccessTier": "ARCHIVE_ACCESS"}]})
        == "InvalidArgument"
    )
    assert (
        refused(
            {
                "Id": "x",
                "Status": "Enabled",
                "Tierings": [
                    {"Days": 200, "AccessTier": "ARCHIVE_ACCESS"},
                    {"Days": 190, "AccessTier": "DEEP_ARCHIVE_ACCESS"},
                ],
            }
        )
        == "InvalidArgument"
    )
    assert (
        refused({"Id": "x", "Status": "Enabled", "Tierings": [{"Days": 90, "AccessTier": "FROZEN"}]})
        == "MalformedXML"
    )
    assert (
        refused(
            {"Id": "x", "Status": "Enabled", "Tierings": [{"Days": 90, "AccessTier": "ARCHIVE_ACCESS"}]},
            id_="y",
        )
        == "InvalidArgument"
    )
    status, text = signed_request(ts.endpoint, "PUT", f"/{b}", "intelligent-tiering&id=x", b"<not-xml")
    assert status == 400 and "<Code>MalformedXML</Code>" in text

    s3.delete_bucket_intelligent_tiering_configuration(Bucket=b, Id="deep")
    with pytest.raises(ClientError) as err:
        s3.get_bucket_intelligent_tiering_configuration(Bucket=b, Id="deep")
    assert error_code(err.value) == "NoSuchConfiguration"
    with pytest.raises(ClientError) as err:
        s3.delete_bucket_intelligent_tiering_configuration(Bucket=b, Id="deep")
    assert error_code(err.value) == "NoSuchConfiguration"
    assert [
        c["Id"]
        for c in s3.list_bucket_intelligent_tiering_configurations(Bucket=b)[
            "IntelligentTieringConfigurationList"
        ]
    ] == ["arch"]


# --- S3 lifecycle rules -----------------------------------------------------------------------


def test_lifecycle_rules_transition_expire_and_abort_by_filter(ts: Tiered, bucket) -> None:
    b = bucket()
    s3 = ts.s3
    put = {
        "logs/a": (b"l" * 4000, None),
        "other/a": (b"o" * 4000, None),
        "tagged/a": (b"t" * 4000, "team=ml&keep=no"),
        "tagged/b": (b"t" * 4000, "team=web"),
        "sized/big": (b"g" * 50_000, None),
        "sized/small": (b"m" * 500, None),
        "sized/mid": (b"d" * 5000, None),
    }
    for key, (body, tags) in put.items():
        s3.put_object(Bucket=b, Key=key, Body=body, **({"Tagging": tags} if tags else {}))
    rules: dict[str, Any] = {
        "Rules": [
            {
                "ID": "logs",
                "Filter": {"Prefix": "logs/"},
                "Status": "Enabled",
                "Transitions": [
                    {"Days": 30, "StorageClass": "STANDARD_IA"},
                    {"Days": 60, "StorageClass": "GLACIER"},
                ],
            },
            {
                "ID": "ml-expire",
                "Filter": {"And": {"Prefix": "tagged/", "Tags": [{"Key": "team", "Value": "ml"}]}},
                "Status": "Enabled",
                "Expiration": {"Days": 10},
            },
            {
                "ID": "big-archive",
                "Filter": {"ObjectSizeGreaterThan": 10_000},
                "Status": "Enabled",
                "Transitions": [{"Days": 5, "StorageClass": "GLACIER"}],
            },
            {
                "ID": "tiny-expire",
                "Filter": {"ObjectSizeLessThan": 1000},
                "Status": "Enabled",
                "Expiration": {"Days": 5},
            },
            {
                "ID": "uploads",
                "Filter": {"Prefix": "mpu/"},
                "Status": "Enabled",
                "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 3},
            },
            {
                "ID": "disabled",
                "Filter": {"Prefix": "other/"},
                "Status": "Disabled",
                "Expiration": {"Days": 1},
            },
        ]
    }
    s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration=rules)
    got = s3.get_bucket_lifecycle_configuration(Bucket=b)["Rules"]
    assert {r["ID"]: r for r in got}["ml-expire"]["Filter"] == rules["Rules"][1]["Filter"]
    assert {r["ID"]: r for r in got}["logs"]["Transitions"] == rules["Rules"][0]["Transitions"]
    assert {r["ID"]: r for r in got}["big-archive"]["Filter"] == {"ObjectSizeGreaterThan": 10_000}
    assert {r["ID"]: r["Status"] for r in got} == {r["ID"]: r["Status"] for r in rules["Rules"]}
    upload = s3.create_multipart_upload(Bucket=b, Key="mpu/x")["UploadId"]
    keep_upload = s3.create_multipart_upload(Bucket=b, Key="elsewhere/x")["UploadId"]

    ts.run_pass()
    assert ts.tier(b, "sized/big") == "hot" and ts.tier(b, "logs/a") == "hot"

    ts.advance(4)  # uploads older than 3 days: aborted; nothing else due yet
    report = ts.run_pass()
    assert report["uploads_aborted"] >= 1
    ids = [u["UploadId"] for u in s3.list_multipart_uploads(Bucket=b).get("Uploads", [])]
    assert upload not in ids and keep_upload in ids
    assert ts.tier(b, "sized/big") == "hot"

    ts.advance(3)  # day 7: size rules due
    ts.run_pass()
    assert ts.tier(b, "sized/big") == "cold" and ts.storage_class(b, "sized/big") == "GLACIER"
    with pytest.raises(ClientError) as err:
        s3.head_object(Bucket=b, Key="sized/small")
    assert err.value.response["Error"]["Code"] == "404"
    assert ts.tier(b, "sized/mid") == "hot"

    ts.advance(5)  # day 12: the ml-tagged object expires, the web one stays
    ts.run_pass()
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=b, Prefix="tagged/").get("Contents", [])}
    assert keys == {"tagged/b"}

    ts.advance(20)  # day 32: logs/ → STANDARD_IA (the rule wins over temperature's warm)
    ts.run_pass()
    assert ts.tier(b, "logs/a") == "warm" and ts.storage_class(b, "logs/a") == "STANDARD_IA"
    assert ts.tier(b, "other/a") == "warm" and ts.storage_class(b, "other/a") == "STANDARD", (
        "a disabled rule does nothing; temperature still applies"
    )
    listed = {o["Key"]: o["StorageClass"] for o in s3.list_objects_v2(Bucket=b)["Contents"]}
    assert listed["logs/a"] == "STANDARD_IA" and listed["sized/big"] == "GLACIER"

    ts.advance(30)  # day 62: → GLACIER
    ts.run_pass()
    assert ts.tier(b, "logs/a") == "cold" and ts.storage_class(b, "logs/a") == "GLACIER"
    assert [m[2] for m in moves(ts, b, "logs/a")] == ["lifecycle:logs", "lifecycle:logs"]


def test_rule_gives_its_class_to_data_temperature_already_moved(ts: Tiered, bucket) -> None:
    """Temperature put the data on warm first; a STANDARD_IA rule must still change its class."""
    b = bucket()
    ts.s3.put_object(Bucket=b, Key="k", Body=b"w" * 3000)
    ts.advance(31)
    ts.run_pass()
    assert ts.tier(b, "k") == "warm" and ts.storage_class(b, "k") == "STANDARD"
    ts.s3.put_bucket_lifecycle_configuration(
        Bucket=b,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "ia",
                    "Filter": {},
                    "Status": "Enabled",
                    "Transitions": [{"Days": 30, "StorageClass": "STANDARD_IA"}],
                }
            ]
        },
    )
    ts.run_pass()
    assert ts.tier(b, "k") == "warm" and ts.storage_class(b, "k") == "STANDARD_IA"
    assert ts.get(b, "k") == b"w" * 3000
    ts.run_pass()
    assert ts.storage_class(b, "k") == "STANDARD_IA"


def test_transition_by_date(ts: Tiered, bucket) -> None:
    b = bucket()
    ts.s3.put_object(Bucket=b, Key="d", Body=b"d" * 2000, StorageClass="STANDARD_IA")
    now = ts.admin("clock", "show")["now"]
    midnight = dt.datetime.fromtimestamp((now // DAY + 3) * DAY, dt.UTC)
    ts.s3.put_bucket_lifecycle_configuration(
        Bucket=b,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "date",
                    "Filter": {"Prefix": ""},
                    "Status": "Enabled",
                    "Transitions": [{"Date": midnight, "StorageClass": "GLACIER"}],
                }
            ]
        },
    )
    rules = ts.s3.get_bucket_lifecycle_configuration(Bucket=b)["Rules"]
    assert rules[0]["Transitions"][0]["Date"] == midnight
    ts.advance(1)
    ts.run_pass()
    assert ts.tier(b, "d") == "warm"
    ts.advance(3)
    ts.run_pass()
    assert ts.tier(b, "d") == "cold" and ts.storage_class(b, "d") == "GLACIER"


def test_invalid_lifecycle_configurations_are_refused(ts: Tiered, bucket) -> None:
    b = bucket()
    s3 = ts.s3

    def refused(*rules: dict) -> str:
        with pytest.raises(ClientError) as err:
            s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration={"Rules": list(rules)})
        return error_code(err.value)

    base = {"ID": "r", "Filter": {"Prefix": ""}, "Status": "Enabled"}
    assert refused({**base, "Transitions": [{"Days": 5, "StorageClass": "STANDARD_IA"}]}) == "InvalidArgument"
    assert refused(base) == "InvalidArgument"  # no action
    assert refused({**base, "Expiration": {"Days": 0}}) == "InvalidArgument"
    assert (
        refused({**base, "Expiration": {"Days": 1}}, {**base, "Expiration": {"Days": 2}}) == "InvalidArgument"
    )
    assert (
        refused(
            {**base, "Transitions": [{"Days": 40, "StorageClass": "GLACIER"}], "Expiration": {"Days": 30}}
        )
        == "InvalidArgument"
    )
    assert (
        refused({**base, "Filter": {"ObjectSizeGreaterThan": 100, "Prefix": "x"}, "Expiration": {"Days": 3}})
        == "MalformedXML"
    )  # two predicates without <And>
    assert refused({**base, "Transitions": [{"Days": 40, "StorageClass": "NEARLINE"}]}) == "MalformedXML"
    assert (
        refused(
            {
                **base,
                "Filter": {"And": {"Prefix": "a", "Tags": [{"Key": "k", "Value": "v"}]}},
                "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2},
            }
        )
        == "InvalidArgument"
    )
    assert refused({**base, "NoncurrentVersionExpiration": {"NoncurrentDays": 0}}) == "InvalidArgument"
    status, text = signed_request(ts.endpoint, "PUT", f"/{b}", "lifecycle", b"<LifecycleConfiguration><Rule>")
    assert status == 400 and "<Code>MalformedXML</Code>" in text
    with pytest.raises(ClientError) as err:
        s3.get_bucket_lifecycle_configuration(Bucket=b)
    assert error_code(err.value) == "NoSuchLifecycleConfiguration", "refused documents are not stored"
    s3.put_bucket_lifecycle_configuration(
        Bucket=b, LifecycleConfiguration={"Rules": [{**base, "Expiration": {"Days": 3}}]}
    )
    s3.delete_bucket_lifecycle(Bucket=b)
    with pytest.raises(ClientError) as err:
        s3.get_bucket_lifecycle_configuration(Bucket=b)
    assert error_code(err.value) == "NoSuchLifecycleConfiguration"


# --- metrics ----------------------------------------------------------------------------------


def scrape(endpoint: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{endpoint}/_tierstore/metrics", timeout=30) as response:
        text = response.read().decode()
    return {
        m.group(1): float(m.group(2))
        for line in text.splitlines()
        if (m := re.match(r"^([a-zA-Z_:][\w:]*(?:\{[^}]*\})?) (\S+)$", line))
    }


def test_transition_and_restore_metrics_move(ts: Tiered, bucket) -> None:
    b = bucket()
    moved = 'tierstore_lifecycle_transitions_total{from_tier="warm",to_tier="cold"}'
    moved_bytes = 'tierstore_lifecycle_transition_bytes_total{from_tier="warm",to_tier="cold"}'
    before = scrape(ts.endpoint)
    ts.s3.put_object(Bucket=b, Key="m", Body=b"m" * 7000, StorageClass="STANDARD_IA")
    ts.s3.put_bucket_lifecycle_configuration(
        Bucket=b,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "g",
                    "Filter": {},
                    "Status": "Enabled",
                    "Transitions": [{"Days": 1, "StorageClass": "GLACIER"}],
                }
            ]
        },
    )
    ts.advance(2)
    ts.run_pass()
    assert ts.tier(b, "m") == "cold"
    after = scrape(ts.endpoint)
    assert after[moved] >= before.get(moved, 0) + 1
    assert after[moved_bytes] >= before.get(moved_bytes, 0) + 7000
    ts.s3.restore_object(Bucket=b, Key="m", RestoreRequest={"Days": 1})
    ts.run_pass()
    restored = scrape(ts.endpoint)
    assert restored["tierstore_mover_restores_total"] == before["tierstore_mover_restores_total"] + 1
    assert restored[moved] == after[moved], "a restore is not counted as a transition"
