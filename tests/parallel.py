"""How the suite spreads over pytest-xdist's processes (pyproject's addopts: `-n auto --dist loadfile`).

Run serially, the whole suite took 40 of CI's 90 minutes on a slow 2-core machine (2026-12-07),
mostly waiting: for servers to start, for a heal, a lease, a kill. Its files are independent:
each test starts its servers on free ports of its own process's slice (tests/ports.py), and each
process its own PostgreSQL server (tests/postgres.py) and session servers (tests/conftest.py).
So files go to processes whole (`loadfile`: a module's fixtures start once), except where files
share one process's state on purpose:

- tests/clients_ml: its last file (test_zz_ml_server_log.py) reads the log of the session server
  every ML client in the folder talked to, so the folder runs in one process, in file order.
"""

from __future__ import annotations

import os

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadFileScheduling

from tests import ports

# Folders whose files must run in one process, in order (see above).
ONE_PROCESS_FOLDERS = ("tests/clients_ml/",)


def worker_count() -> int:
    """`-n auto`: a process per core this process may run on, no more than the port slices."""
    return max(1, min(len(os.sched_getaffinity(0)), ports.SLICES))


class FolderAwareFileScheduling(LoadFileScheduling):
    """`--dist loadfile`, with each of ONE_PROCESS_FOLDERS one unit of work instead of a file each."""

    def _split_scope(self, nodeid: str) -> str:
        for folder in ONE_PROCESS_FOLDERS:
            if nodeid.startswith(folder):
                return folder
        return super()._split_scope(nodeid)


def make_scheduler(config: pytest.Config, log: Producer) -> LoadFileScheduling | None:
    """Our scheduling for `--dist loadfile`; any other mode is xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    return FolderAwareFileScheduling(config, log)
