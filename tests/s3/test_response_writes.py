"""How responses reach the wire (server/http_protocol.py): a small response's head and body
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
from xml.etree import ElementTree

import pytest

from tests.clients.wire import EMPTY_SHA256, read_response, sign_v4
from tests.conftest import ServerProcess

# struct tcp_info (linux/tcp.h): tcpi_data_segs_in, after the fields that come before it.
TCPI_DATA_SEGS_IN_OFFSET = 152
WAIT = 10.0  # seconds a reply may take before the test calls it missing
CLOSE_WAIT = 3.0  # seconds a close may take (the session server closes a stray head after 10)


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


def _responses(sock: socket.socket, methods: list[str]) -> list[tuple[int, dict[str, str], bytes]]:
    """The responses to `methods`' requests, read in order off one buffered stream (pipelined
    answers may share a segment, so no read may take bytes of the next one)."""
    stream = sock.makefile("rb")
    answers = []
    for method in methods:
        status_line = stream.readline()
        assert status_line.startswith(b"HTTP/1.1 "), f"not a status line: {status_line!r}"
        headers = {}
        while (line := stream.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        length = 0 if method == "HEAD" else int(headers.get("content-length", "0"))
        answers.append((int(status_line.split()[1]), headers, stream.read(length)))
    return answers


def _closed_by_server(sock: socket.socket) -> bool:
    """The server closed the connection at once: a read returns end of file within CLOSE_WAIT (an
    open connection times out, well before the server's own header timeout could close it)."""
    sock.settimeout(CLOSE_WAIT)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_pipelined_requests_are_answered_in_order(server: ServerProcess, bucket: str) -> None:
    payload = os.urandom(70_000)  # past the read pause's high-water mark (64 KiB)
    requests = [
        ("PUT", _request(server, "PUT", f"/{bucket}/piped", payload) + payload),
        ("GET", _request(server, "GET", f"/{bucket}/piped")),
        ("HEAD", _request(server, "HEAD", f"/{bucket}/piped")),
        ("GET", _request(server, "GET", f"/{bucket}/not-there")),
        ("DELETE", _request(server, "DELETE", f"/{bucket}/piped")),
        ("GET", _request(server, "GET", f"/{bucket}/piped")),
    ]
    with _connect(server) as sock:
        sock.sendall(b"".join(request for _, request in requests))  # all before any answer
        answers = _responses(sock, [method for method, _ in requests])
    assert [status for status, _, _ in answers] == [200, 200, 200, 404, 204, 404]
    assert answers[0][1]["etag"] == f'"{hashlib.md5(payload).hexdigest()}"'
    assert answers[1][2] == payload
    assert answers[2][1]["content-length"] == str(len(payload))
    assert b"<Code>NoSuchKey</Code>" in answers[3][2] and b"<Code>NoSuchKey</Code>" in answers[5][2]


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /\x01bad HTTP/1.1\r\nHost: x\r\n\r\n",  # a control byte in the URL
        b"abcdefg\r\n\r\n",  # no request line at all
        b"GET / HTTP/1.1\r\nHost x\r\n\r\n",  # a header line without a colon
    ],
    ids=["url", "request-line", "header"],
)
def test_a_malformed_request_gets_s3s_bad_request_and_the_connection_closes(
    server: ServerProcess, request_bytes: bytes
) -> None:
    """What S3 answers bytes that are not HTTP: 400 `BadRequest` in XML (an SDK parses the code),
    not a web server's plain-text 400; then the connection closes."""
    with _connect(server) as sock:
        sock.sendall(request_bytes)
        status, headers, body = read_response(sock)
        assert (status, headers["connection"], headers["content-type"]) == (400, "close", "application/xml")
        error = ElementTree.fromstring(body)
        assert error.findtext("Code") == "BadRequest"
        assert error.findtext("Message") == "An error occurred when parsing the HTTP request."
        assert error.findtext("RequestId") == headers["x-amz-request-id"]
        assert _closed_by_server(sock)


def test_bytes_after_pipelined_requests_are_answered_after_them(
    server: ServerProcess, s3: Any, bucket: str
) -> None:
    """Garbage behind whole requests (pipelined, sent before any answer): those requests are
    answered whole and in order, a large GET streaming meanwhile, and only then the BadRequest,
    and the connection closes. Written when the garbage was read, the 400 landed inside the
    GET's body and the close cut the rest off."""
    payload = os.urandom(8 * 1024 * 1024)  # still streaming out when the garbage is parsed
    s3.put_object(Bucket=bucket, Key="streamed", Body=payload)
    requests = [
        ("GET", _request(server, "GET", f"/{bucket}/streamed")),
        ("HEAD", _request(server, "HEAD", f"/{bucket}/streamed")),
    ]
    with _connect(server) as sock:
        sock.sendall(b"".join(request for _, request in requests) + b"GET /\x01bad HTTP/1.1\r\n\r\n")
        answers = _responses(sock, [*(method for method, _ in requests), "GET"])
        assert [status for status, _, _ in answers] == [200, 200, 400]
        assert answers[0][2] == payload
        assert answers[1][1]["content-length"] == str(len(payload))
        assert answers[2][1]["connection"] == "close"
        assert ElementTree.fromstring(answers[2][2]).findtext("Code") == "BadRequest"
        assert _closed_by_server(sock)


def test_a_put_whose_chunked_body_turns_malformed_stores_nothing(
    server: ServerProcess, s3: Any, bucket: str
) -> None:
    """A signed PUT whose body breaks HTTP's chunked framing halfway: the client hears BadRequest,
    the connection closes, and the key keeps what it held (no part of the new body is committed)."""
    s3.put_object(Bucket=bucket, Key="kept", Body=b"old body")
    url = f"{server.endpoint}/{bucket}/kept"
    sent = sign_v4("PUT", url, {"Transfer-Encoding": "chunked"}, "UNSIGNED-PAYLOAD").headers
    head = f"PUT /{bucket}/kept HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in sent.items())
    with _connect(server) as sock:
        sock.sendall(head.encode() + b"\r\n" + b"5\r\nnew b\r\n")
        sock.sendall(b"zz-not-a-chunk-size\r\nody\r\n0\r\n\r\n")
        status, headers, body = read_response(sock)
        assert (status, headers["connection"]) == (400, "close")
        assert ElementTree.fromstring(body).findtext("Code") == "BadRequest"
        assert _closed_by_server(sock)
    assert s3.get_object(Bucket=bucket, Key="kept")["Body"].read() == b"old body"


def test_the_client_ends_keep_alive_with_http_1_0_or_connection_close(
    server: ServerProcess, s3: Any, bucket: str
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"kept")
    for version, extra in (("HTTP/1.0", {}), ("HTTP/1.1", {"Connection": "close"})):
        with _connect(server) as sock:
            request = _request(server, "GET", f"/{bucket}/k", b"", **extra).replace(
                b"HTTP/1.1", version.encode(), 1
            )
            sock.sendall(request)
            status, headers, body = read_response(sock)
            assert (status, body, headers["connection"]) == (200, b"kept", "close"), version
            assert _closed_by_server(sock), version


def test_a_kept_alive_connection_serves_request_after_request(server: ServerProcess, bucket: str) -> None:
    with _connect(server) as sock:
        for index in range(50):
            payload = os.urandom(index * 1_000)
            sock.sendall(_request(server, "PUT", f"/{bucket}/kept-{index}", payload) + payload)
            status, headers, _ = read_response(sock)
            assert status == 200 and "connection" not in headers
            sock.sendall(_request(server, "GET", f"/{bucket}/kept-{index}"))
            assert read_response(sock)[2] == payload
