"""Loopback ports for the servers the tests start (tierstore, storage nodes, PostgreSQL).

Binding to port 0 and handing the port back, as tests did, takes it from the kernel's ephemeral
range, which is also where every outgoing connection gets its local port: between the hand-back
and the server's own bind, any connection on the machine (a test's client, a server's call to a
node) may take it, and the server fails with "Address already in use" (seen in CI's cluster pass,
tests/node_cluster.py). Ports here come from below that range, where the kernel hands out none by
itself. Each pytest process (an xdist worker) counts through a slice of its own, from a random
place in it (two sessions side by side rarely meet), and skips a port something is bound to now.
Where the range leaves no room below it, the old way is the fallback. The benchmarks' servers
(bench/servers.py) take their ports here too.
"""

from __future__ import annotations

import os
import random
import socket
import threading

_EPHEMERAL = "/proc/sys/net/ipv4/ip_local_port_range"
_SPAN = 12_000  # ports below the ephemeral range used here
SLICES = 8  # one per xdist worker (gw0, gw1, ...: modulo this; tests/conftest.py starts no more)
_MIN_SLICE = 500


def _slice() -> range | None:
    """This process's ports, or None where there is no room below the ephemeral range."""
    try:
        with open(_EPHEMERAL) as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    start = max(low - _SPAN, 10_000)
    size = (low - start) // SLICES
    if size < _MIN_SLICE:
        return None
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) % SLICES if worker[2:].isdigit() else 0
    return range(start + index * size, start + (index + 1) * size)


_lock = threading.Lock()
_ports: range | None = None
_next = -1  # where this process counts from: drawn at its first call (its worker id is known then)


def is_free(port: int) -> bool:
    """Nothing is bound to `port` on 127.0.0.1 right now (bench/servers.py asks this too)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nothing is bound to now, outside the kernel's ephemeral range if it can be."""
    global _next, _ports
    with _lock:
        if _next < 0:
            _ports = _slice()
            _next = random.randrange(len(_ports)) if _ports is not None else 0
        if _ports is not None:
            for _ in range(len(_ports)):
                port = _ports[_next % len(_ports)]
                _next += 1
                if is_free(port):
                    return port
    with socket.socket() as s:  # no room below the range, or every port of the slice taken
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
