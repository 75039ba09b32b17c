"""Memory stays bounded under many large concurrent uploads: bodies are streamed, never held.

The test never holds a body either: each upload is generated piece by piece and hashed as it
is sent, and the server's resident set size is sampled from /proc while the uploads run.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ServerProcess, make_client
from tests.faults.conftest import MiB, StreamingPut, pattern, pattern_md5

Spawn = Callable[..., ServerProcess]
RSS_LIMIT = 600 * MiB


# These tests read the memory of the server's process by its pid: one process, not a supervisor.
ONE_PROCESS = ["--workers", "1"]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


class RssSampler(threading.Thread):
    def __init__(self, pid: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak = 0
        self.samples = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except (FileNotFoundError, ProcessLookupError):
                return
            self.samples += 1
            time.sleep(self.interval)


def concurrent_uploads(spawn: Spawn, count: int, size: int, timeout: float) -> int:
    server = spawn(extra_args=ONE_PROCESS)
    assert server.proc is not None
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="mem")
    sampler = RssSampler(server.proc.pid)
    sampler.start()
    uploads = [StreamingPut(server, f"/mem/obj-{i:02d}", seed=100 + i, size=size) for i in range(count)]
    for upload in uploads:
        upload.start()
    deadline = time.monotonic() + timeout
    for upload in uploads:
        upload.join(max(deadline - time.monotonic(), 1))
    sampler.done.set()
    sampler.join()
    assert not any(u.is_alive() for u in uploads), "uploads did not finish in time"
    for upload in uploads:
        assert upload.error is None, upload.error
        assert upload.status == 200, upload.reply
    listed = {o["Key"]: o for o in s3.list_objects_v2(Bucket="mem")["Contents"]}
    assert len(listed) == count
    for i, upload in enumerate(uploads):
        entry = listed[f"obj-{i:02d}"]
        assert (entry["Size"], entry["ETag"]) == (size, f'"{upload.md5.hexdigest()}"')
    assert sampler.samples > 10
    print(f"\npeak server RSS with {count} x {size // MiB} MiB uploads: {sampler.peak / MiB:.0f} MiB")
    assert sampler.peak < RSS_LIMIT, f"peak RSS {sampler.peak / MiB:.0f} MiB"
    return sampler.peak


def test_32_concurrent_64mib_uploads_stay_under_600mib(spawn: Spawn) -> None:
    concurrent_uploads(spawn, 32, 64 * MiB, timeout=180)


@pytest.mark.soak
def test_32_concurrent_1gib_uploads_stay_under_600mib(spawn: Spawn) -> None:
    concurrent_uploads(spawn, 32, 1024 * MiB, timeout=3600)


def minor_faults(pid: int) -> int:
    """Page faults the process has taken that needed no disk read (/proc/PID/stat, field 10)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7])


def test_large_gets_reuse_block_buffers_instead_of_faulting_in_new_pages(spawn: Spawn) -> None:
    """A streamed GET allocates a buffer per 1 MiB block; the server keeps those on its heap.

    Left to glibc's defaults, each block's buffer was a fresh mapping: one page fault per 4 KiB
    streamed (plus zeroing and an unmap), a quarter of the server's CPU on large GETs.
    """
    server = spawn(extra_args=ONE_PROCESS)
    assert server.proc is not None
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="faults")
    size = 32 * MiB
    s3.put_object(Bucket="faults", Key="big", Body=b"".join(pattern(7, size)))
    expected = pattern_md5(7, size)

    def get_all() -> None:
        body = s3.get_object(Bucket="faults", Key="big")["Body"]
        digest = hashlib.md5()
        for chunk in iter(lambda: body.read(MiB), b""):
            digest.update(chunk)
        assert digest.hexdigest() == expected

    for _ in range(4):  # warm-up: the heaps grow to what a GET needs
        get_all()
    before = minor_faults(server.proc.pid)
    gets = 4
    for _ in range(gets):
        get_all()
    faults = minor_faults(server.proc.pid) - before
    pages = gets * size // 4096
    print(f"\n{faults} minor page faults in the server for {gets} GETs of {size // MiB} MiB ({pages} pages)")
    # Before: ~1 fault per page (31k here); after: ~0.1 (what is left: other allocations, new arenas).
    assert faults < pages // 3, f"{faults} page faults for {pages} pages streamed"


def test_memory_a_burst_of_large_gets_used_goes_back_to_the_kernel(spawn: Spawn) -> None:
    """Block buffers stay on the heap while data streams (above), but not for ever after a burst:
    the server hands free heap memory back every few seconds (server/malloc_tuning.py)."""
    server = spawn(extra_args=ONE_PROCESS)
    assert server.proc is not None
    s3 = make_client(server.endpoint, max_pool_connections=32)
    s3.create_bucket(Bucket="burst")
    size = 64 * MiB
    s3.put_object(Bucket="burst", Key="big", Body=b"".join(pattern(9, size)))

    def get_all() -> None:
        body = s3.get_object(Bucket="burst", Key="big")["Body"]
        while body.read(MiB):
            pass

    get_all()
    baseline = rss_bytes(server.proc.pid)
    readers = [threading.Thread(target=get_all) for _ in range(32)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(120)
    after_burst = rss_bytes(server.proc.pid)
    deadline = time.monotonic() + 30
    while rss_bytes(server.proc.pid) > baseline + 64 * MiB and time.monotonic() < deadline:
        time.sleep(0.5)
    settled = rss_bytes(server.proc.pid)
    print(
        f"\nserver RSS: {baseline / MiB:.0f} MiB before 32 concurrent 64 MiB GETs, "
        f"{after_burst / MiB:.0f} MiB right after, {settled / MiB:.0f} MiB later"
    )
    assert settled <= baseline + 64 * MiB, f"{settled / MiB:.0f} MiB kept (was {baseline / MiB:.0f} MiB)"
