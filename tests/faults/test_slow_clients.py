"""Slow and idle clients: a connection that never completes its request head, a body that stalls,
an idle keep-alive connection, and more connections than a process takes (server/http_protocol.py,
server/connection_limits.py).

Real servers with short timeouts (1-2 s, through the environment), raw sockets as the clients:
each test checks that the server lets go of the connection — the client sees it closed and the
server's file-descriptor count (/proc/<pid>/fd) goes back down — and that a stalled upload
leaves the namespace as it was. The waits are bounded well above the timeouts: they say "closed
at all", not "closed fast".
"""

from __future__ import annotations

import hashlib
import os
import resource
import selectors
import socket
import ssl
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import trustme
from botocore.config import Config
from botocore.exceptions import ClientError
from prometheus_client.parser import text_string_to_metric_families

from tests.clients.wire import parse_head, read_response, sign_v4
from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess, free_port

Spawn = Callable[..., ServerProcess]
TIMEOUT = 1  # seconds: the header, body idle and keep-alive timeouts of the `quick` server
CLOSE_LIMIT = 20.0  # how long a test waits for the server to close what it should close
FD_SLACK = 5  # the server may open a few files of its own meanwhile (catalog, logs)
HALF_HEAD = b"GET /_tierstore/health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow"
HEALTH = b"GET /_tierstore/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def short_timeouts(**more: str) -> dict[str, str]:
    return {
        "TIERSTORE_SERVER_HEADER_TIMEOUT_SECONDS": str(TIMEOUT),
        "TIERSTORE_SERVER_BODY_IDLE_TIMEOUT_SECONDS": str(TIMEOUT),
        "TIERSTORE_SERVER_KEEP_ALIVE_TIMEOUT_SECONDS": str(TIMEOUT),
        **more,
    }


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server with 1 s header, body idle and keep-alive timeouts."""
    # One process: `open_fds` counts the server's file descriptors by its pid.
    proc = ServerProcess(
        tmp_path_factory.mktemp("quick") / "data",
        free_port(),
        env=short_timeouts(),
        extra_args=["--workers", "1"],
    ).start()
    yield proc
    assert proc.stop() == 0, proc.log()


def client(server: ServerProcess) -> Any:
    # Retries on: with a 1 s keep-alive timeout, the server may close a pooled connection just
    # as botocore reuses it; that race is not what these tests are about.
    return boto3.client(
        "s3", endpoint_url=server.endpoint, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
        region_name=REGION, config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5}),
    )  # fmt: skip


def open_fds(server: ServerProcess) -> int:
    assert server.proc is not None
    return len(os.listdir(f"/proc/{server.proc.pid}/fd"))


def settled_fds(server: ServerProcess) -> int:
    """The server's fd count once no connection of an earlier step is left open."""
    deadline = time.monotonic() + CLOSE_LIMIT
    counts = [open_fds(server)]
    while time.monotonic() < deadline:
        time.sleep(TIMEOUT)
        counts.append(open_fds(server))
        if counts[-1] == counts[-2]:
            break
    return counts[-1]


def wait_for_fds(server: ServerProcess, at_most: int) -> int:
    deadline = time.monotonic() + CLOSE_LIMIT
    while (count := open_fds(server)) > at_most and time.monotonic() < deadline:
        time.sleep(0.2)
    return count


def connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=CLOSE_LIMIT)


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes; fails the test if it never does."""
    received = bytearray()
    sock.settimeout(CLOSE_LIMIT)
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for {CLOSE_LIMIT}s (received {bytes(received)!r})")
    except ConnectionResetError:
        pass  # closed with unread bytes of ours: a reset is a close too
    return bytes(received)


def parse_closed_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    assert b"\r\n\r\n" in raw, f"no response before the close: {raw!r}"
    head, _, body = raw.partition(b"\r\n\r\n")
    return parse_head(head, body)


def error_code(body: bytes) -> str | None:
    return ET.fromstring(body).findtext("Code")


def closed_by_limit(server: ServerProcess, reason: str) -> float:
    """`tierstore_http_connections_closed_total{reason=...}` from the server's /metrics."""
    with urllib.request.urlopen(f"{server.endpoint}/metrics", timeout=CLOSE_LIMIT) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "tierstore_http_connections_closed_total" and sample.labels == {
                "reason": reason
            }:
                return float(sample.value)
    raise AssertionError(f"no tierstore_http_connections_closed_total{{reason={reason!r}}} in /metrics")


def test_a_half_sent_or_silent_head_is_closed_without_an_answer(quick: ServerProcess) -> None:
    baseline = settled_fds(quick)
    before = closed_by_limit(quick, "header_timeout")
    half, silent = connect(quick), connect(quick)
    with half, silent:
        half.sendall(HALF_HEAD)
        assert read_until_closed(half) == b""
        assert read_until_closed(silent) == b""
    assert wait_for_fds(quick, baseline + FD_SLACK) <= baseline + FD_SLACK
    assert closed_by_limit(quick, "header_timeout") >= before + 2


@pytest.mark.parametrize("then", [HALF_HEAD, b"\r\n"], ids=["half-head", "blank-line"])
def test_a_later_request_on_a_kept_alive_connection_must_complete_its_head_too(
    quick: ServerProcess, then: bytes
) -> None:
    # Any bytes stop uvicorn's keep-alive timer; from then on the head timer must run.
    with connect(quick) as sock:
        sock.sendall(HEALTH)
        assert read_response(sock)[0] == 200
        sock.sendall(then)
        assert read_until_closed(sock) == b""


def test_hundreds_of_half_heads_are_all_closed(quick: ServerProcess) -> None:
    baseline = settled_fds(quick)
    sockets = []
    selector = selectors.DefaultSelector()
    try:
        for _ in range(500):
            sock = connect(quick)
            sockets.append(sock)
            sock.sendall(HALF_HEAD)
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        still_open = set(sockets)
        deadline = time.monotonic() + CLOSE_LIMIT
        while still_open and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.5):
                ready = key.fileobj
                assert isinstance(ready, socket.socket)
                try:
                    assert ready.recv(4096) == b"", "a half-sent head was answered"
                except ConnectionResetError:
                    pass
                selector.unregister(ready)
                still_open.discard(ready)
        assert not still_open, (
            f"{len(still_open)} of 500 half-head connections still open after {CLOSE_LIMIT}s"
        )
    finally:
        selector.close()
        for sock in sockets:
            sock.close()
    assert wait_for_fds(quick, baseline + FD_SLACK) <= baseline + FD_SLACK


def test_an_idle_keep_alive_connection_is_closed(quick: ServerProcess) -> None:
    with connect(quick) as sock:
        sock.sendall(HEALTH)
        status, headers, body = read_response(sock)
        assert (status, body) == (200, b"ok\n")
        assert "close" not in headers.get("connection", "")  # kept alive, then closed for idling
        assert read_until_closed(sock) == b""


def stalled_put(server: ServerProcess, path: str, declared: int, sent: bytes) -> socket.socket:
    """A signed PUT that declares `declared` bytes, sends `sent` of them and then nothing."""
    headers = sign_v4(
        "PUT", f"{server.endpoint}{path}", {"Content-Length": str(declared)}, "UNSIGNED-PAYLOAD"
    ).headers
    head = (
        f"PUT {path} HTTP/1.1\r\n"
        + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        + "\r\n"
    )
    sock = connect(server)
    sock.sendall(head.encode() + sent)
    return sock


def test_a_stalled_body_times_out_and_leaves_the_old_object(quick: ServerProcess) -> None:
    s3 = client(quick)
    s3.create_bucket(Bucket="stalled")
    s3.put_object(Bucket="stalled", Key="kept", Body=b"old value")
    baseline = settled_fds(quick)
    before = closed_by_limit(quick, "body_timeout")
    # Over a batch (1 MiB) sent, so that the upload has reached the tier before it stalls.
    overwrite = stalled_put(quick, "/stalled/kept", 8 << 20, os.urandom(3 << 19))
    new = stalled_put(quick, "/stalled/never", 1 << 20, b"x" * 1000)
    for sock in (overwrite, new):
        with sock:
            status, headers, body = parse_closed_response(read_until_closed(sock))
            assert (status, error_code(body)) == (400, "RequestTimeout")
            assert headers["connection"] == "close"
            assert headers["content-type"] == "application/xml"
            assert headers["x-amz-request-id"]
    assert s3.get_object(Bucket="stalled", Key="kept")["Body"].read() == b"old value"
    with pytest.raises(ClientError) as missing:
        s3.head_object(Bucket="stalled", Key="never")
    assert missing.value.response["Error"]["Code"] == "404"
    listed = s3.list_objects_v2(Bucket="stalled")["Contents"]
    assert [o["Key"] for o in listed] == ["kept"]
    assert closed_by_limit(quick, "body_timeout") == before + 2
    assert wait_for_fds(quick, baseline + FD_SLACK) <= baseline + FD_SLACK
    # A body that keeps coming, however slowly, is not cut: pauses shorter than the timeout,
    # longer than it in total.
    pieces = [os.urandom(1000) for _ in range(12)]
    with stalled_put(quick, "/stalled/slow", 12000, b"") as sock:
        for piece in pieces:
            time.sleep(TIMEOUT / 4)
            sock.sendall(piece)
        status, _, body = read_response(sock)
        assert status == 200, body
    stored = s3.get_object(Bucket="stalled", Key="slow")["Body"].read()
    assert hashlib.md5(stored).digest() == hashlib.md5(b"".join(pieces)).digest()


def test_past_max_connections_the_answer_is_slow_down(spawn: Spawn) -> None:
    server = spawn(
        extra_args=["--workers", "1"],  # max_connections is per process
        env={
            "TIERSTORE_SERVER_MAX_CONNECTIONS": "20",
            "TIERSTORE_SERVER_HEADER_TIMEOUT_SECONDS": "60",
            "TIERSTORE_SERVER_KEEP_ALIVE_TIMEOUT_SECONDS": "60",
        },
    )
    held = []
    try:
        for _ in range(20):  # the cap, each kept alive after a request
            sock = connect(server)
            held.append(sock)
            sock.sendall(HEALTH)
            assert read_response(sock)[0] == 200
        with connect(server) as refused:
            refused.sendall(HEALTH)
            status, headers, body = parse_closed_response(read_until_closed(refused))
        assert (status, error_code(body)) == (503, "SlowDown")
        assert headers["connection"] == "close"
        assert headers["content-type"] == "application/xml"
        for sock in held[:5]:
            sock.close()
        # Once connections close, new ones are served (the count goes down as the server sees the
        # closes; a new connection may still be refused meanwhile).
        deadline = time.monotonic() + CLOSE_LIMIT
        while True:
            with connect(server) as sock:
                sock.sendall(HEALTH)
                status = read_response(sock)[0]
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert status == 200
        for sock in held[5:]:  # still served: the cap never closes an admitted connection
            sock.sendall(HEALTH)
            assert read_response(sock)[0] == 200
        assert closed_by_limit(server, "refused") >= 1
    finally:
        for sock in held:
            sock.close()


@dataclass
class HttpsServer:
    server: ServerProcess
    context: ssl.SSLContext

    def connect(self) -> ssl.SSLSocket:
        return self.context.wrap_socket(connect(self.server), server_hostname="127.0.0.1")


@pytest.fixture(scope="module")
def https(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsServer]:
    """The `quick` server's timeouts over HTTPS, with a certificate from a throw-away CA."""
    root = tmp_path_factory.mktemp("https")
    ca = trustme.CA()
    cert, key, ca_path = root / "cert.pem", root / "key.pem", root / "ca.pem"
    issued = ca.issue_cert("127.0.0.1")
    issued.private_key_and_cert_chain_pem.write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_path))
    proc = ServerProcess(
        root / "data",
        free_port(),
        scheme="https",
        env=short_timeouts(),
        extra_args=["--tls-cert", str(cert), "--tls-key", str(key)],
    ).start()
    yield HttpsServer(proc, ssl.create_default_context(cafile=str(ca_path)))
    assert proc.stop() == 0, proc.log()


def read_until_tls_closed(sock: ssl.SSLSocket) -> bytes:
    try:
        return read_until_closed(sock)
    except ssl.SSLError:
        return b""  # dropped without a TLS close_notify: closed all the same


def test_https_closes_half_heads_too(https: HttpsServer) -> None:
    baseline = settled_fds(https.server)
    with https.connect() as half, https.connect() as silent:
        half.sendall(HALF_HEAD)
        assert read_until_tls_closed(half) == b""
        assert read_until_tls_closed(silent) == b""
    assert wait_for_fds(https.server, baseline + FD_SLACK) <= baseline + FD_SLACK


def test_an_idle_https_connection_is_let_go(https: HttpsServer) -> None:
    # The server's TLS close waits for the client's close_notify, which an idle client that
    # keeps its socket does not send: the server must not hold the connection's file meanwhile.
    baseline = settled_fds(https.server)
    idle = []
    try:
        for _ in range(10):
            sock = https.connect()
            idle.append(sock)
            sock.sendall(HEALTH)
            assert read_response(sock)[0] == 200
        assert wait_for_fds(https.server, baseline + FD_SLACK) <= baseline + FD_SLACK
    finally:
        for sock in idle:
            sock.close()


def test_workers_close_half_heads_too(spawn: Spawn) -> None:
    server = spawn(extra_args=["--workers", "2"], env=short_timeouts())
    sockets = [connect(server) for _ in range(4)]  # over both workers, most likely
    for sock in sockets:
        with sock:
            sock.sendall(HALF_HEAD)
            assert read_until_closed(sock) == b""


def test_the_open_file_limit_is_raised_to_fit_the_cap(spawn: Spawn) -> None:
    # A soft limit of 256 (many systems default to 1024) would refuse connections with EMFILE
    # long before a cap of 600; the server lifts it (up to the hard limit) when it starts.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 600 + 512:
        pytest.skip(f"hard open-file limit {hard} is too low for this test")
    # One process: its file limit is read from /proc/<pid>/limits.
    server = spawn(
        env={"TIERSTORE_SERVER_MAX_CONNECTIONS": "600"},
        extra_args=["--workers", "1"],
        open_files_soft_limit=256,
    )
    assert server.proc is not None
    limits = Path(f"/proc/{server.proc.pid}/limits").read_text()
    line = next(line for line in limits.splitlines() if line.startswith("Max open files"))
    assert int(line.split()[3]) >= 600 + 512, line
