"""Runs last in tests/s3 (file order): whatever the tests above did, the server never crashed."""

from __future__ import annotations

from tests.conftest import ServerProcess


def test_server_log_has_no_traceback(server: ServerProcess, s3) -> None:
    # One more request, so that a server that died meanwhile fails here rather than passing.
    s3.list_buckets()
    log = server.log()
    assert "Traceback" not in log, log[log.find("Traceback") - 2000 :]
    assert "internal error" not in log
    assert server.proc is not None and server.proc.poll() is None
