"""Bucket names and on-disk paths stay with administrators: /metrics and status.json show others totals.

/metrics needs no credentials and status.json answers any loopback client (or, in
`authenticated` mode, any signed user), so neither may name another user's buckets, the keys
of lost objects or where the data lives on disk — unless `[metrics] per_bucket` says the
scrape may, or the request is signed by an administrator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.config import load_config
from tests.conftest import ACCESS_KEY, SECRET_KEY, ServerProcess, free_port, make_client
from tests.ops.conftest import QUIET_DAEMON, Ops, http


def _tierstore_cmd() -> list[str]:
    script = Path(sys.executable).with_name("tierstore")
    return [str(script)] if script.exists() else [sys.executable, "-m", "server.cli"]


def add_user(server: ServerProcess, name: str) -> tuple[str, str]:
    """`tierstore admin user add NAME` (not an administrator): its access key and secret key."""
    env = {**os.environ, "TIERSTORE_ACCESS_KEY": ACCESS_KEY, "TIERSTORE_SECRET_KEY": SECRET_KEY}
    done = subprocess.run(
        [*_tierstore_cmd(), "admin", "user", "add", name, "--endpoint", server.endpoint, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    user = json.loads(done.stdout)
    assert user["admin"] is False
    return user["access_key"], user["secret_key"]


def assert_private(text: str, bucket: str, data_dir: Path) -> None:
    assert bucket not in text, "a bucket name leaked"
    assert 'bucket="' not in text, "a bucket label leaked"
    assert str(data_dir.resolve()) not in text and str(data_dir) not in text, "an on-disk path leaked"


def status_json(server: ServerProcess, **sign: Any) -> dict[str, Any]:
    reply = http(f"{server.endpoint}/_tierstore/status.json", **sign)
    assert reply.status == 200, reply.text
    return json.loads(reply.body)


@pytest.fixture(scope="module")
def user_keys(ops: Ops) -> tuple[str, str]:
    return add_user(ops.server, "viewer")


def test_unsigned_scrapes_have_no_bucket_names_or_paths(ops: Ops, traffic: dict[str, Any]) -> None:
    for path in ("/metrics", "/_tierstore/metrics"):
        reply = http(f"{ops.endpoint}{path}")
        assert reply.status == 200
        assert "tierstore_tier_bytes" in reply.text and "tierstore_bucket_" not in reply.text
        assert_private(reply.text, traffic["bucket"], ops.server.data_dir)


def test_an_administrators_scrape_has_bucket_series(
    ops: Ops, traffic: dict[str, Any], user_keys: tuple[str, str]
) -> None:
    admin = http(f"{ops.endpoint}/_tierstore/metrics", sign=True)
    assert admin.status == 200
    assert f'tierstore_bucket_bytes{{bucket="{traffic["bucket"]}",tier="warm"}} 300000.0' in admin.text
    assert str(ops.server.data_dir) not in admin.text  # no paths in metrics at all
    # A signed user who is no administrator gets the totals only; a bad signature, nothing.
    user = http(f"{ops.endpoint}/_tierstore/metrics", sign=True, keys=user_keys)
    assert user.status == 200 and "tierstore_tier_bytes" in user.text
    assert_private(user.text, traffic["bucket"], ops.server.data_dir)
    forged = http(f"{ops.endpoint}/_tierstore/metrics", sign=True, keys=(user_keys[0], "wrong-secret"))
    assert forged.status == 403 and traffic["bucket"] not in forged.text


def test_status_json_shows_buckets_and_paths_only_to_administrators(
    ops: Ops, traffic: dict[str, Any], user_keys: tuple[str, str]
) -> None:
    for view in (status_json(ops.server), status_json(ops.server, sign=True, keys=user_keys)):
        assert_private(json.dumps(view), traffic["bucket"], ops.server.data_dir)
        assert "buckets" not in view and "lost" not in view["heal"] and view["administrator"] is False
        assert view["bucket_count"] >= 1 and view["heal"]["lost_objects"] == 0  # totals stay
        assert len(view["domains"]) > 0 and all("path" not in d for d in view["domains"])
    full = status_json(ops.server, sign=True)
    assert full["administrator"] is True
    assert traffic["bucket"] in [b["name"] for b in full["buckets"]]
    assert all(d["path"].startswith(str(ops.server.data_dir)) for d in full["domains"])
    assert full["heal"]["lost"] == []


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """per_bucket on (an operator's choice), status page for signed requests only."""
    env = {
        **QUIET_DAEMON,
        "TIERSTORE_METRICS_PER_BUCKET": "true",
        "TIERSTORE_SERVER_STATUS_PAGE": "authenticated",
    }
    proc = ServerProcess(tmp_path_factory.mktemp("per-bucket") / "data", free_port(), env=env).start()
    yield proc
    proc.stop()


def test_per_bucket_setting_puts_bucket_series_in_the_unsigned_scrape(open_server: ServerProcess) -> None:
    s3 = make_client(open_server.endpoint)
    s3.create_bucket(Bucket="tenant-a")
    s3.put_object(Bucket="tenant-a", Key="k", Body=b"x" * 1000)
    scrape = http(f"{open_server.endpoint}/metrics")
    assert scrape.status == 200
    assert 'tierstore_bucket_objects{bucket="tenant-a",tier="hot"} 1.0' in scrape.text
    # The status page still keeps names to administrators, and in this mode refuses the unsigned.
    assert http(f"{open_server.endpoint}/_tierstore/status.json").status == 403
    user_keys = add_user(open_server, "viewer")
    view = status_json(open_server, sign=True, keys=user_keys)
    assert_private(json.dumps(view), "tenant-a", open_server.data_dir)
    assert view["bucket_count"] == 1
    assert [b["name"] for b in status_json(open_server, sign=True)["buckets"]] == ["tenant-a"]


def test_per_bucket_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert load_config().metrics_per_bucket is False
    toml = tmp_path / "tierstore.toml"
    toml.write_text("[metrics]\nper_bucket = true\n")
    assert load_config(toml).metrics_per_bucket is True
    monkeypatch.setenv("TIERSTORE_METRICS_PER_BUCKET", "false")
    assert load_config(toml).metrics_per_bucket is False
