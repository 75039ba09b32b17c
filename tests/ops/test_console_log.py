"""The console of the README's trial command: one log format for every line, no access log.

`tierstore serve` used to mix uvicorn's format ("INFO:     Started server process"), bare
`tierstore: ...` prints, Python's logging default and a JSON line per request.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3
from botocore.config import Config

from server.config import DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY
from tests.conftest import START_TIMEOUT, free_port

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.-]+: \S")


def run_default_server(tmp_path: Path, **env: str) -> str:
    """`tierstore serve` with no TIERSTORE_* settings (default credentials), a few S3 requests,
    SIGTERM: everything it wrote on its console."""
    port = free_port()
    log_path = tmp_path / "console.log"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TIERSTORE_")}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "server.cli",
                "serve",
                "--data",
                str(tmp_path / "data"),
                "--listen",
                f"127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env={**clean, "PYTHONUNBUFFERED": "1", **env},
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while "tierstore: listening on" not in log_path.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        s3 = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{port}",
            aws_access_key_id=DEFAULT_ACCESS_KEY,
            aws_secret_access_key=DEFAULT_SECRET_KEY,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )
        s3.create_bucket(Bucket="trial")
        s3.put_object(Bucket="trial", Key="k", Body=b"hello")
        assert s3.get_object(Bucket="trial", Key="k")["Body"].read() == b"hello"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return log_path.read_text()


def test_the_trial_console_has_one_format_and_no_access_log(tmp_path: Path) -> None:
    console = run_default_server(tmp_path)
    lines = [line for line in console.splitlines() if line.strip()]
    assert any("INFO tierstore: listening on http://127.0.0.1:" in line for line in lines), console
    cores = len(os.sched_getaffinity(0))  # the default: one worker per usable core
    assert (f"workers: {cores} worker processes" if cores > 1 else "workers: 1 process") in console
    odd = [line for line in lines if not LINE.match(line)]
    assert not odd, f"lines in another format: {odd}"
    assert '"request_id"' not in console, "the access log is off by default"


def test_the_access_log_is_there_when_turned_on(tmp_path: Path) -> None:
    console = run_default_server(tmp_path, TIERSTORE_SERVER_ACCESS_LOG="true")
    lines = [line for line in console.splitlines() if line.strip()]
    access = [line for line in lines if line.startswith("{")]
    assert any('"operation":"PutObject"' in line for line in access), console
    assert all(LINE.match(line) for line in lines if not line.startswith("{")), console
