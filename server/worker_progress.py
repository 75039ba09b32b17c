"""Background progress of every worker, so that `admin status`, `admin heal` and `admin lifecycle`
answer the same whichever worker takes the request.

Heal-queue draining, scrub passes, lifecycle passes and the mover run in whichever worker holds
the lease or claimed the queue entry, and what they did (passes, shards healed, blobs found
degraded or lost, moves) is that worker's memory. Under a supervisor each worker writes it to
`<state dir>/progress/<pid>.json` — once a second, after every admin command before it answers,
and whenever a worker asks (`sync_all`: a request file every worker answers within ~50 ms, which
an admin answer and a /metrics scrape wait for) — and an admin answer merges the files of the
live workers with its own, fresh state.
(A worker that died leaves its file; it is skipped, then removed.) A single process has no peers:
its answers are its own state, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("tierstore.workers")

DIRECTORY = "progress"
PUBLISH_INTERVAL = 1.0  # seconds


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ProgressBoard:
    """This worker's entry on the board (`publish`) and the other live workers' (`peers`)."""

    def __init__(self, state_dir: Path, snapshot: Callable[[], dict[str, Any]]) -> None:
        self.directory = state_dir / DIRECTORY
        self.directory.mkdir(parents=True, exist_ok=True)
        self.snapshot = snapshot  # {"heal": {...}, "lifecycle": {...}} of this process, now
        self.path = self.directory / f"{os.getpid()}.json"
        # The once-a-second publisher and an admin command's publish write from worker threads at
        # once: one at a time (both through one temporary file, the second's rename found it gone
        # and the admin command answered 500), and never an older snapshot over a newer one.
        self._lock = threading.Lock()
        self._taken = 0  # snapshots taken (on the loop), numbering them
        self._written = 0  # the number of the one on the board

    def publish(self) -> None:
        """Call on the event loop (the snapshot reads what the loop changes); the write is small."""
        self._write(*self._take())

    async def publish_async(self) -> None:
        taken = self._take()  # on the loop, then written off it
        await asyncio.to_thread(self._write, *taken)

    def _take(self) -> tuple[int, dict[str, Any]]:
        self._taken += 1
        return self._taken, self.snapshot()

    def _write(self, number: int, snapshot: dict[str, Any]) -> None:
        with self._lock:
            if number < self._written:
                return  # a newer snapshot is on the board already
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(snapshot))
            os.replace(tmp, self.path)
            self._written = number

    def peers(self) -> list[dict[str, Any]]:
        """Blocking: the other live workers' last entries."""
        found = []
        for path in self.directory.glob("*.json"):
            if path == self.path or not path.stem.isdigit():
                continue
            if not _alive(int(path.stem)):
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            with contextlib.suppress(OSError, ValueError):
                found.append(json.loads(path.read_text()))
        return found

    def withdraw(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()

    async def run_forever(self) -> None:
        try:
            while True:
                try:
                    await self.publish_async()
                except Exception:  # noqa: BLE001 - the next second tries again
                    log.exception("publishing this worker's progress failed")
                await asyncio.sleep(PUBLISH_INTERVAL)
        finally:
            self.withdraw()


SUMMED_HEAL = ("passes", "bytes_checked", "shards_healed", "corrupt_blocks_found", "relocated")


def merge_heal(own: dict[str, Any], others: list[dict[str, Any]]) -> dict[str, Any]:
    """One heal report for all workers: counts summed, damage found by any worker counted once,
    the figures of the pass running now (or of the last one to finish)."""
    reports = [own, *others]
    merged = dict(own)
    for key in SUMMED_HEAL:
        merged[key] = sum(r.get(key, 0) for r in reports)
    merged["running"] = any(r.get("running") for r in reports)
    current = max(reports, key=lambda r: (bool(r.get("running")), r.get("pass_started") or 0.0))
    for key in ("pass_started", "pass_finished", "blobs_total", "blobs_checked"):
        merged[key] = current.get(key)
    lost = {entry["data_id"]: entry for r in reports for entry in r.get("lost", [])}
    degraded = {data_id for r in reports for data_id in r.get("degraded", [])} - set(lost)
    merged["lost"] = [lost[data_id] for data_id in sorted(lost)]
    merged["lost_objects"] = len(lost)
    merged.pop("degraded", None)  # ids: only for merging
    merged["degraded_objects"] = len(degraded)
    return merged


def merge_lifecycle(own: dict[str, Any], others: list[dict[str, Any]]) -> dict[str, Any]:
    """One lifecycle status for all workers: passes and mover counts summed, the latest pass."""
    reports = [own, *others]
    merged = dict(own)
    merged["passes"] = sum(r.get("passes", 0) for r in reports)
    merged["running"] = any(r.get("running") for r in reports)
    finished = [r["last_pass"] for r in reports if r.get("last_pass")]
    merged["last_pass"] = max(finished, key=lambda p: p.get("finished") or 0.0) if finished else None
    # Turned away by a lease only if every worker was (one of them may hold it).
    if any(r.get("lease") is None for r in reports):
        merged["lease"] = None
    mover: dict[str, Any] = {
        key: sum(r["mover"].get(key, 0) for r in reports)
        for key in ("queued", "active", "skipped", "failed", "restores")
    }
    moves: dict[tuple[str, str], list[int]] = {}
    for r in reports:
        for move in r["mover"].get("moves", []):
            totals = moves.setdefault((move["from"], move["to"]), [0, 0])
            totals[0] += move["count"]
            totals[1] += move["bytes"]
    mover["moves"] = [
        {"from": f, "to": t, "count": n, "bytes": size} for (f, t), (n, size) in sorted(moves.items())
    ]
    merged["mover"] = mover
    return merged


# --- `admin lifecycle run --wait` with several workers ---------------------------------------------
#
# One worker holds the lifecycle lease; a pass asked of another would be skipped ("the lease is
# held by pid N"), and each worker buffers the accesses it served for up to two seconds before
# they reach the catalog. So the worker that takes the request posts it on the board; every
# worker flushes its access tracker and acknowledges; the lease holder, once all live workers
# acknowledged, runs the pass and posts its report, which the asking worker returns.

#
# Requests, acknowledgements and reports are files in a directory of their own, `requests/`
# beside the board's entries: a worker looks every RUN_POLL seconds, and a look is one `stat` of
# that directory while it is unchanged (a listing every look was some 40 directory opens a
# second per idle worker, and the board's entries, rewritten every second, change their own
# directory all the time).

RUN_POLL = 0.05  # seconds between looks for posted requests
ACK_TIMEOUT = 10.0  # a worker that does not acknowledge in this long is not waited for
REQUESTS = "requests"
# File systems stamp a directory's mtime with a coarse clock: a file added within the same tick as
# the change already seen leaves it as it was. So a directory changed this recently is listed
# again at every look, whatever its mtime.
RECENT_NS = 1_000_000_000


class LifecycleRuns:
    def __init__(self, board: ProgressBoard) -> None:
        self.board = board
        self.directory = board.directory / REQUESTS
        self.directory.mkdir(exist_ok=True)
        self._handled: set[str] = set()  # requests answered, while their files are there
        self._listed_mtime: int | None = None  # the directory's mtime at the last listing

    def live_pids(self) -> set[int]:
        """Blocking: this worker and the other live ones on the board."""
        pids = {os.getpid()}
        for path in self.board.directory.glob("*.json"):
            if path.stem.isdigit() and _alive(int(path.stem)):
                pids.add(int(path.stem))
        return pids

    def post(self) -> str:
        request = os.urandom(8).hex()
        (self.directory / f"run.{request}.request").write_text(str(os.getpid()))
        return request

    async def wait_done(self, request: str, holder_pid: int) -> dict[str, Any] | None:
        """The report the holder posted; None if it died first (the caller runs the pass)."""
        done = self.directory / f"run.{request}.done"
        while not done.exists():
            if not _alive(holder_pid):
                return None
            await asyncio.sleep(RUN_POLL)
        result: dict[str, Any] = json.loads(done.read_text())
        return result

    async def wait_acks(self, request: str, kind: str = "run") -> None:
        """Until every live worker answered `request` (at most ACK_TIMEOUT)."""
        deadline = time.monotonic() + ACK_TIMEOUT
        while time.monotonic() < deadline:
            acked = {int(p.name.rsplit(".", 1)[1]) for p in self.directory.glob(f"{kind}.{request}.ack.*")}
            if await asyncio.to_thread(self.live_pids) <= acked:
                return
            await asyncio.sleep(RUN_POLL)

    async def sync_all(self) -> None:
        """Until every live worker has mirrored its metrics and published its progress as of now
        (at most ACK_TIMEOUT): an admin answer or a scrape then counts what every worker did."""
        request = os.urandom(8).hex()
        path = self.directory / f"sync.{request}.request"
        await asyncio.to_thread(path.write_text, str(os.getpid()))
        try:
            await self.wait_acks(request, kind="sync")
        finally:
            await asyncio.to_thread(self.forget, request, "sync")

    def forget(self, request: str, kind: str = "run") -> None:
        for path in self.directory.glob(f"{kind}.{request}.*"):
            with contextlib.suppress(OSError):
                path.unlink()

    async def watch(
        self,
        flush: Callable[[], Any],
        holds_lease: Callable[[], Any],
        run_pass: Callable[[], Any],
        refresh: Callable[[], Any],
    ) -> None:
        """Every worker: answer posted requests — a sync (`refresh`: mirror the metrics, publish
        the progress), a lifecycle run (flush, acknowledge; the lease holder runs the pass)."""
        while True:
            await asyncio.sleep(RUN_POLL)
            try:
                posted = self._posted()
                if posted is None:
                    continue
                for kind, request in posted:
                    if request in self._handled:
                        continue
                    self._handled.add(request)
                    if kind == "sync":
                        await refresh()
                        ack = self.directory / f"sync.{request}.ack.{os.getpid()}"
                        await asyncio.to_thread(ack.write_text, "")
                        continue
                    try:
                        asker = int((self.directory / f"run.{request}.request").read_text() or 0)
                    except (OSError, ValueError):
                        continue  # answered and cleared meanwhile
                    await self._answer(request, asker, flush, holds_lease, run_pass)
            except Exception:  # noqa: BLE001 - the next request is tried again
                log.exception("answering a lifecycle run request failed")

    def _posted(self) -> list[tuple[str, str]] | None:
        """The requests posted now, syncs first: (kind, request id); None when the directory is
        as it was at the last listing (nothing new can be there)."""
        try:
            mtime = os.stat(self.directory).st_mtime_ns
        except FileNotFoundError:  # removed under us (a cleaned state directory): nothing posted
            self.directory.mkdir(parents=True, exist_ok=True)
            return None
        if mtime == self._listed_mtime and time.time_ns() - mtime >= RECENT_NS:
            return None
        self._listed_mtime = mtime
        names = os.listdir(self.directory)
        # Forget the requests whose files are gone (cleared once answered): the set stays small.
        self._handled &= {name.split(".")[1] for name in names if name.count(".") >= 2}
        posted = []
        for name in names:
            kind, _, rest = name.partition(".")
            request, _, suffix = rest.partition(".")
            if suffix == "request" and kind in ("sync", "run"):
                posted.append((kind, request))
        return sorted(posted, key=lambda kr: kr[0] != "sync")

    async def _answer(
        self,
        request: str,
        asker: int,
        flush: Callable[[], Any],
        holds_lease: Callable[[], Any],
        run_pass: Callable[[], Any],
    ) -> None:
        await flush()
        (self.directory / f"run.{request}.ack.{os.getpid()}").write_text("")
        if asker == os.getpid() or not await holds_lease():
            return  # the asker runs its own pass; a worker without the lease has no pass to run
        await self.wait_acks(request)
        report = await run_pass()
        tmp = self.directory / f"run.{request}.tmp"
        tmp.write_text(json.dumps({"pass": report.to_json()}))
        os.replace(tmp, self.directory / f"run.{request}.done")
