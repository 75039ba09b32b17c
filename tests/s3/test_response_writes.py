"""How responses reach the wire (server/coalesced_writes.py): a small response's head and body
leave in one write, so the client receives them in one TCP segment; a response without a body
and a `100 Continue` are not held back.

Raw keep-alive sockets against the session's real server; segments are counted by the client's
kernel (`TCP_INFO`'s data segments in), so this is what a client really receives, not what the
server believes it sent.
"""

from __future__ import annotations

import hashlib
import os
import socket
import struct
import sys
from typing import Any

import pytest

from tests.clients.wire import EMPTY_SHA256, read_response, sign_v4
from tests.conftest import ServerProcess

# struct tcp_info (linux/tcp.h): tcpi_data_segs_in, after the fields that come before it.
TCPI_DATA_SEGS_IN_OFFSET = 152
WAIT = 10.0  # seconds a reply may take before the test calls it missing


def _connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=WAIT)


def _data_segments_in(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    if len(info) < TCPI_DATA_SEGS_IN_OFFSET + 4:
        pytest.skip("this kernel's TCP_INFO has no data segment counts")
    return int(struct.unpack_from("I", info, TCPI_DATA_SEGS_IN_OFFSET)[0])


def _request(server: ServerProcess, method: str, path: str, body: bytes = b"", **headers: str) -> bytes:
    url = f"{server.endpoint}{path}"
    payload_hash = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
    sent = sign_v4(method, url, {"Content-Length": str(len(body)), **headers}, payload_hash).headers
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{name}: {value}\r\n" for name, value in sent.items())
    return head.encode() + b"\r\n"


@pytest.mark.skipif(sys.platform != "linux", reason="TCP_INFO's layout is Linux's")
def test_a_small_get_arrives_in_one_segment(server: ServerProcess, s3: Any, bucket: str) -> None:
    payload = os.urandom(4096)
    s3.put_object(Bucket=bucket, Key="small", Body=payload)
    with _connect(server) as sock:
        # A first exchange settles the connection (the handshake's and the first ACK's segments).
        sock.sendall(_request(server, "GET", f"/{bucket}/small"))
        assert read_response(sock)[2] == payload
        segments = []
        for _ in range(5):
            before = _data_segments_in(sock)
            sock.sendall(_request(server, "GET", f"/{bucket}/small"))
            status, headers, body = read_response(sock)
            assert (status, body) == (200, payload)
            segments.append(_data_segments_in(sock) - before)
    # Head and body written separately arrive as two segments (the server sends with TCP_NODELAY).
    assert segments == [1] * 5, f"data segments per 4 KiB GET response: {segments}"


def test_responses_without_a_body_are_not_held_back(server: ServerProcess, s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x" * 100)
    with _connect(server) as sock:
        # Each answer must come on its own: a head held for a body that never follows would leave
        # the client waiting (the socket times out after WAIT seconds).
        sock.sendall(_request(server, "HEAD", f"/{bucket}/k"))
        status, headers, _ = read_response(sock, bodiless=True)
        assert (status, headers["content-length"]) == (200, "100")
        sock.sendall(_request(server, "DELETE", f"/{bucket}/k"))
        assert read_response(sock)[0] == 204
        sock.sendall(_request(server, "HEAD", f"/{bucket}/k"))
        assert read_response(sock, bodiless=True)[0] == 404
        sock.sendall(_request(server, "GET", f"/{bucket}/k"))
        status, _, body = read_response(sock)
        assert status == 404 and b"<Code>NoSuchKey</Code>" in body


def test_100_continue_comes_before_the_body_is_sent(server: ServerProcess, bucket: str) -> None:
    payload = os.urandom(10_000)
    with _connect(server) as sock:
        sock.sendall(_request(server, "PUT", f"/{bucket}/continued", payload, Expect="100-continue"))
        # The client sends no body until the interim answer comes.
        interim = b""
        while not interim.endswith(b"\r\n\r\n"):
            chunk = sock.recv(1)
            assert chunk, "connection closed before 100 Continue"
            interim += chunk
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(payload)
        status, headers, _ = read_response(sock)
        assert status == 200
        assert headers["etag"] == f'"{hashlib.md5(payload).hexdigest()}"'
        sock.sendall(_request(server, "GET", f"/{bucket}/continued"))
        assert read_response(sock)[2] == payload
