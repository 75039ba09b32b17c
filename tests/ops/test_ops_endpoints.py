"""/metrics, /_tierstore/health, /_tierstore/status.json and the access log on a live server."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from botocore.exceptions import ClientError
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from server.app import authenticate_request
from server.credentials import StaticCredentials
from server.status import OpsEndpoints
from tests.conftest import ACCESS_KEY, SECRET_KEY
from tests.ops.conftest import Ops, http


def test_unsigned_metrics_is_a_scrape_and_signed_is_list_objects(ops: Ops) -> None:
    scrape = http(f"{ops.endpoint}/metrics")
    assert scrape.status == 200 and scrape.headers["content-type"].startswith("text/plain")
    assert "# TYPE tierstore_tier_bytes gauge" in scrape.text
    assert http(f"{ops.endpoint}/_tierstore/metrics").text.count("# TYPE tierstore_") > 20

    ops.s3.create_bucket(Bucket="metrics")
    ops.s3.put_object(Bucket="metrics", Key="cpu.csv", Body=b"1,2,3")
    try:
        listed = http(f"{ops.endpoint}/metrics", sign=True)
        assert (
            listed.status == 200
            and "<ListBucketResult" in listed.text
            and "<Key>cpu.csv</Key>" in listed.text
        )
        assert [o["Key"] for o in ops.s3.list_objects_v2(Bucket="metrics")["Contents"]] == ["cpu.csv"]
        # Virtual-hosted style: metrics.localhost/metrics is the key "metrics", never a scrape.
        anonymous = http(f"{ops.endpoint}/metrics", headers={"Host": f"metrics.localhost:{ops.server.port}"})
        assert anonymous.status == 403 and "AccessDenied" in anonymous.text
        # A presigned URL carries its signature in the query: still S3.
        url = ops.s3.generate_presigned_url("list_objects", Params={"Bucket": "metrics"})
        assert "<Key>cpu.csv</Key>" in http(url).text
    finally:
        ops.s3.delete_object(Bucket="metrics", Key="cpu.csv")
        ops.s3.delete_bucket(Bucket="metrics")


def test_bytes_in_out_and_time_to_first_byte_are_counted(ops: Ops) -> None:
    bucket = "ops-bytes"
    ops.s3.create_bucket(Bucket=bucket)
    body = b"b" * 250_000
    before = ops.metrics()
    ops.s3.put_object(Bucket=bucket, Key="k", Body=body)
    assert ops.s3.get_object(Bucket=bucket, Key="k")["Body"].read() == body
    part = ops.s3.create_multipart_upload(Bucket=bucket, Key="mp")
    ops.s3.upload_part(Bucket=bucket, Key="mp", UploadId=part["UploadId"], PartNumber=1, Body=b"p" * 70_000)
    ops.s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=part["UploadId"])
    after = ops.metrics()

    def delta(name: str) -> float:
        return after.get(name, 0) - before.get(name, 0)

    assert 250_000 <= delta('tierstore_s3_received_bytes_total{operation="PutObject"}') < 260_000
    assert 70_000 <= delta('tierstore_s3_received_bytes_total{operation="UploadPart"}') < 80_000
    assert delta('tierstore_s3_sent_bytes_total{operation="GetObject"}') == 250_000
    assert delta('tierstore_s3_time_to_first_byte_seconds_count{operation="GetObject"}') == 1
    assert delta('tierstore_s3_requests_total{operation="PutObject",status="200"}') == 1
    assert after["tierstore_http_requests_in_flight"] >= 1  # the scrape itself
    ops.s3.delete_object(Bucket=bucket, Key="k")
    ops.s3.delete_bucket(Bucket=bucket)


def access_lines(ops: Ops) -> list[dict[str, Any]]:
    lines = []
    for line in ops.server.log().splitlines():
        if line.startswith("{") and '"request_id"' in line:
            lines.append(json.loads(line))
    return lines


def wait_for_line(ops: Ops, request_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        found = [entry for entry in access_lines(ops) if entry["request_id"] == request_id]
        if found:
            assert len(found) == 1
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no access log line for {request_id}")


def test_access_log_has_one_json_line_per_request(ops: Ops) -> None:
    bucket = "ops-access-log"
    ops.s3.create_bucket(Bucket=bucket)
    put = ops.s3.put_object(Bucket=bucket, Key="secret/key.bin", Body=b"z" * 1234)
    line = wait_for_line(ops, put["ResponseMetadata"]["RequestId"])
    assert line["method"] == "PUT" and line["operation"] == "PutObject" and line["bucket"] == bucket
    assert line["status"] == 200 and line["bytes_in"] == 1234 and line["bytes_out"] == 0
    assert line["remote_addr"] == "127.0.0.1" and line["error_code"] is None
    assert 0 < line["duration_ms"] < 30_000
    assert "secret/key.bin" not in json.dumps(line), "keys stay out of the access log"

    with pytest.raises(ClientError) as missing:
        ops.s3.get_object(Bucket=bucket, Key="nope")
    line = wait_for_line(ops, missing.value.response["ResponseMetadata"]["RequestId"])
    assert line["status"] == 404 and line["error_code"] == "NoSuchKey" and line["operation"] == "GetObject"
    assert line["bytes_out"] > 0  # the XML error document

    got = ops.s3.get_object(Bucket=bucket, Key="secret/key.bin")
    got["Body"].read()
    line = wait_for_line(ops, got["ResponseMetadata"]["RequestId"])
    assert line["bytes_out"] == 1234 and line["status"] == 200
    ops.s3.delete_object(Bucket=bucket, Key="secret/key.bin")
    ops.s3.delete_bucket(Bucket=bucket)


def test_health_answers_without_credentials(ops: Ops) -> None:
    reply = http(f"{ops.endpoint}/_tierstore/health")
    assert reply.status == 200 and reply.text == "ok\n"
    assert http(f"{ops.endpoint}/_tierstore/health", method="HEAD").status == 200


def test_status_json_shows_tiers_domains_heal_and_moves(ops: Ops, traffic: dict[str, Any]) -> None:
    reply = http(f"{ops.endpoint}/_tierstore/status.json")
    assert reply.status == 200 and reply.headers["content-type"] == "application/json"
    status = json.loads(reply.body)
    tiers = {t["name"]: t for t in status["tiers"]}
    assert list(tiers) == ["gpu-direct", "hot", "warm", "cold"]
    assert tiers["warm"]["objects"] >= 1 and tiers["warm"]["bytes"] >= 300_000
    assert tiers["gpu-direct"]["capacity_bytes"] == 4 << 30
    assert 0 < tiers["warm"]["fill"] < 1
    assert tiers["gpu-direct"]["heat_mean"] > 1  # read three times just now
    assert tiers["warm"]["power_watts"] == pytest.approx(tiers["warm"]["bytes"] * 11 / 8 / 1e12 * 4.0)
    assert tiers["hot"]["domains"] == tiers["hot"]["domains_online"] == 16 and tiers["hot"]["k"] == 4
    assert len([d for d in status["domains"] if d["tier"] == "cold"]) == 16
    assert status["heal"]["passes"] >= 1 and status["heal"]["lost_objects"] == 0
    mover = status["lifecycle"]["mover"]
    assert {"from": "hot", "to": "warm"} in [{"from": m["from"], "to": m["to"]} for m in mover["moves"]]
    assert "active" in mover and "queued" in mover
    # Bucket names are for administrators (tests/ops/test_bucket_privacy.py): sign as one.
    status = json.loads(http(f"{ops.endpoint}/_tierstore/status.json", sign=True).body)
    buckets = {b["name"]: b for b in status["buckets"]}
    assert buckets[traffic["bucket"]]["tiers"]["warm"] == 300_000
    assert buckets[traffic["bucket"]]["power_watts"] > 0


def test_per_tier_and_per_bucket_power_and_energy_metrics(ops: Ops, traffic: dict[str, Any]) -> None:
    m = ops.metrics(admin=True)  # per bucket series: an administrator's scrape
    warm_bytes = m['tierstore_tier_bytes{tier="warm"}']
    assert m['tierstore_tier_power_watts{tier="warm"}'] == pytest.approx(warm_bytes * 11 / 8 / 1e12 * 4.0)
    assert m[f'tierstore_bucket_bytes{{bucket="{traffic["bucket"]}",tier="warm"}}'] == 300_000
    assert m[f'tierstore_bucket_power_watts{{bucket="{traffic["bucket"]}"}}'] > 0
    moved = m['tierstore_lifecycle_transition_bytes_total{from_tier="hot",to_tier="warm"}']
    joules = m['tierstore_lifecycle_transition_energy_joules_total{from_tier="hot",to_tier="warm"}']
    assert joules == pytest.approx(moved / 1e9 * (3.5 + 32.0))
    assert m['tierstore_mover_moves_total{from_tier="hot",to_tier="warm"}'] >= 1
    assert m['tierstore_tier_heat_count{tier="gpu-direct"}'] >= 1
    assert m['tierstore_tier_capacity_bytes{tier="gpu-direct"}'] == 4 << 30


def fake_request(client: str, headers: dict[str, str] | None = None, query: str = "") -> Request:
    return Request(
        {
            "type": "http",
            "method": "GET",
            "path": "/_tierstore/status.json",
            "raw_path": b"/_tierstore/status.json",
            "query_string": query.encode(),
            "client": (client, 40000),
            "server": ("127.0.0.1", 9000),
            "headers": [
                (k.lower().encode(), v.encode()) for k, v in (headers or {"host": "127.0.0.1:9000"}).items()
            ],
        }
    )


def endpoints(mode: str) -> OpsEndpoints:
    gateway = SimpleNamespace(
        config=SimpleNamespace(status_page=mode, virtual_host_domains=["localhost"]),
        credentials=StaticCredentials({ACCESS_KEY: SECRET_KEY}),
        max_skew=timedelta(minutes=15),
    )
    gateway.authenticate_request = lambda request: authenticate_request(
        request, gateway.credentials, gateway.max_skew
    )
    return OpsEndpoints(gateway)  # type: ignore[arg-type]


@pytest.mark.parametrize("client", ["127.0.0.1", "127.8.9.10", "::1"])
def test_loopback_status_page_admits_loopback_clients(client: str) -> None:
    assert endpoints("loopback")._refused(fake_request(client)) is None


@pytest.mark.parametrize("client", ["10.0.0.7", "192.168.1.20", "2001:db8::1", "172.17.0.1"])
def test_loopback_status_page_refuses_other_clients(client: str) -> None:
    refused = endpoints("loopback")._refused(fake_request(client))
    assert refused is not None and refused.status_code == 403


def test_authenticated_and_off_status_page_modes() -> None:
    refused = endpoints("authenticated")._refused(fake_request("127.0.0.1"))
    assert refused is not None and refused.status_code == 403
    off = endpoints("off")._refused(fake_request("127.0.0.1"))
    assert off is not None and off.status_code == 404


def test_access_log_and_status_page_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from server.config import load_config

    monkeypatch.delenv("TIERSTORE_SERVER_ACCESS_LOG", raising=False)
    assert load_config().access_log is False and load_config().status_page == "loopback"
    monkeypatch.setenv("TIERSTORE_SERVER_ACCESS_LOG", "true")
    monkeypatch.setenv("TIERSTORE_SERVER_STATUS_PAGE", "authenticated")
    config = load_config()
    assert config.access_log is True and config.status_page == "authenticated"
    monkeypatch.setenv("TIERSTORE_SERVER_STATUS_PAGE", "public")
    with pytest.raises(ValueError, match="status_page"):
        load_config()


@pytest.mark.parametrize("enabled", [True, False])
def test_request_observer_counts_bytes_and_logs_only_when_enabled(enabled: bool) -> None:
    import asyncio
    import logging

    from server.metrics import Metrics
    from server.request_observer import RequestObserver

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        scope["state"]["operation"] = "PutObject"
        scope["state"]["bucket"] = "b"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-amz-request-id", b"R1")]})
        await send({"type": "http.response.body", "body": b"x" * len(message["body"]), "more_body": False})

    store = SimpleNamespace(tiers={}, catalog=None, maintenance=None)
    metrics = Metrics(store)  # type: ignore[arg-type]
    observer = RequestObserver(app, metrics, access_log_enabled=enabled)
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect()
    logging.getLogger("tierstore.access").addHandler(handler)
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"abc", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "PUT", "path": "/b/k", "client": ("127.0.0.1", 1), "headers": []}
    try:
        asyncio.run(observer(scope, receive, send))
    finally:
        logging.getLogger("tierstore.access").removeHandler(handler)
    assert sent[-1]["body"] == b"xxx"
    for counter in (metrics.received, metrics.sent):
        (family,) = counter.collect()
        totals = {s.labels["operation"]: s.value for s in family.samples if s.name.endswith("_total")}
        assert totals == {"PutObject": 3}
    if enabled:
        (record,) = records
        line = json.loads(record.getMessage())
        assert line["request_id"] == "R1" and line["bytes_in"] == 3 and line["bucket"] == "b"
    else:
        assert records == []
