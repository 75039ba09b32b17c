"""Runs last in tests/clients_ml (file order): whatever the clients above sent, the server never crashed."""

from __future__ import annotations

from tests.conftest import ServerProcess


def test_server_log_has_no_traceback(server: ServerProcess, s3) -> None:
    s3.list_buckets()  # one more request: a server that died meanwhile fails here
    log = server.log()
    assert "Traceback" not in log, log[log.find("Traceback") - 2000 :]
    assert "internal error" not in log
    assert server.proc is not None and server.proc.poll() is None
