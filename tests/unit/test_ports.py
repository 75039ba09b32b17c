"""The ports tests start servers on (tests/ports.py): outside the kernel's ephemeral range, where
no outgoing connection can take one between the check and the server's bind."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests import ports

RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def test_ports_come_from_below_the_ephemeral_range_and_are_free() -> None:
    if not RANGE_FILE.exists():
        pytest.skip("no ephemeral port range to read (not Linux)")
    low = int(RANGE_FILE.read_text().split()[0])
    if low - 10_000 < 8 * 500:
        pytest.skip(f"no room below the ephemeral range ({low})")
    got = [ports.free_port() for _ in range(20)]
    assert len(set(got)) == 20
    assert all(10_000 <= port < low for port in got), (low, got)
    for port in got:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_skipped() -> None:
    first = ports.free_port()
    if ports._ports is None:
        pytest.skip("no room below the ephemeral range: ports come from the kernel")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first + 1 if first + 1 in ports._ports else first))
        taken.listen()
        in_use = taken.getsockname()[1]
        ports._next = ports._ports.index(in_use)  # the next one counted would be the bound port
        assert ports.free_port() != in_use
