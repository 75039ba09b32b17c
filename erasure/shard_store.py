"""Shard files on one domain directory: the local `Drive` (see erasure/drive.py). Synchronous by
design: the pool calls it from worker threads (and a `tierstore node` serves it over HTTP).

Layout under a domain:  <xx>/<yy>/<data_id>.<shard>  where xxyy are the first hex digits of the
data id's xxh3 hash (uniform fan-out even for time-ordered ids), and .tmp/ for files being written.
A shard becomes visible only whole: written to .tmp/, fsync'd, renamed into place, directory fsync'd.
Readers keep their file descriptor, so a concurrent delete or heal-rename never breaks them (POSIX).
Every call first checks the domain state: an offline domain behaves as unreachable.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import xxhash

from erasure.checksum import CHECKSUM_SIZE, block_checksum
from erasure.drive import Drive, DriveFactory, ShardEntry, ShardReader, ShardWriter
from erasure.drive_counters import SharedCounters
from erasure.durability import FlushBarrier, barrier_for, start_writeback
from erasure.errors import CorruptShard, DomainOffline, ErasureError, ShardUnreadable
from erasure.pack import PackedRecord, PackSet
from erasure.shard_format import HEADER_SIZE, ShardHeader, file_size, frame_offset
from erasure.topology import Domain

TMP_DIR = ".tmp"
WRITEBACK_BYTES = 1 << 20  # start writing a shard to disk every this many bytes
PROBE_BYTES = 4096  # a drive-health probe write
_DATA_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")
# Several processes may write to one domain (`tierstore serve --workers N`, a lifecycle process):
# a temporary file's name ends in ".p<pid>.tmp", so that a sweep removes only what a dead writer
# left (or what no one touched for `max_age`), never a live writer's file.
_STARTED = time.time()
_TMP_OWNER = re.compile(r".*\.p([0-9]+)\.tmp")


def tmp_owner_tag() -> str:
    """The writer tag for this process's temporary files (`<name>.p<pid>.tmp`)."""
    return f"p{os.getpid()}"


def tmp_owner_dead(name: str, mtime: float) -> bool:
    """True when the temporary file `name` was written by a process that no longer exists.

    A pid reused by another process reads as alive: the file then waits for the age limit.
    """
    match = _TMP_OWNER.fullmatch(name)
    if match is None:
        return False  # no owner recorded (an older version): only the age limit applies
    pid = int(match.group(1))
    if pid == os.getpid():
        return mtime < _STARTED  # an earlier process with this pid (a container's restarted pid 1)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # exists (EPERM: another user's process)
    return False


def check_data_id(data_id: str) -> str:
    """Data ids become file names: allow only a safe alphabet (they are generated, never user keys)."""
    if not _DATA_ID.fullmatch(data_id):
        raise ValueError(f"invalid data id {data_id!r}")
    return data_id


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalDrive:
    """A drive that is a directory on this host."""

    def __init__(self, domain: Domain, pack_threshold: int = 0) -> None:
        self.domain = domain
        # Opt-in (a tier's pack_threshold_bytes): shards up to this size go to pack files.
        self.packs: PackSet | None = PackSet(domain.path, pack_threshold) if pack_threshold > 0 else None
        self._lock = threading.Lock()
        self._active_tmp: set[str] = set()
        self._count = 0
        self._bytes = 0
        self._shared: SharedCounters | None = None  # share_counters: one count for all processes
        self._barrier: FlushBarrier | None = None
        self._barrier_known = False
        self._tmp_dir_made = False

    @property
    def shard_count(self) -> int:
        return self._shared.read()[0] if self._shared is not None else self._count

    @property
    def shard_bytes(self) -> int:
        return self._shared.read()[1] if self._shared is not None else self._bytes

    def share_counters(self, path: Path) -> None:
        """Keep the shard count and bytes in `path` (erasure/drive_counters.py), which every
        process on this host writing to this drive updates; the next scan sets them."""
        self._shared = SharedCounters(path)

    @property
    def barrier(self) -> FlushBarrier | None:
        """The group-flush barrier of this domain's filesystem (None: fsync each file)."""
        if not self._barrier_known:
            self._barrier = barrier_for(self.domain.path)
            self._barrier_known = True
        return self._barrier

    # -- addressing -------------------------------------------------------------------------

    def path_for(self, data_id: str, index: int) -> Path:
        fan = xxhash.xxh3_64_hexdigest(check_data_id(data_id).encode())
        return self.domain.path / fan[:2] / fan[2:4] / f"{data_id}.{index}"

    def check_online(self) -> None:
        if not self.domain.online:
            raise DomainOffline(f"domain {self.domain.id} is offline")

    # -- operations -------------------------------------------------------------------------

    def create(self, header: ShardHeader) -> ShardWriter:
        self.check_online()
        # A whole blob's header has its size: a shard too big to pack starts as a file, rather
        # than being held in memory first and copied out when it spills (a streamed one: size 0).
        if self.packs is not None and file_size(header) <= self.packs.threshold:
            return PackingWriter(self, self.packs, header)
        return ShardFileWriter(self, header)

    def open(self, data_id: str, index: int) -> ShardReader:
        """Open a committed shard; FileNotFoundError if absent, CorruptShard if its header is bad."""
        self.check_online()
        if self.packs is not None:
            rec = self.packs.lookup(data_id, index, refresh=False)
            if rec is None and not self.path_for(data_id, index).is_file():
                rec = self.packs.lookup(data_id, index)  # another process may have packed it
            if rec is not None:
                return PackedShardReader(self, self.packs, rec, data_id, index)
        return ShardFileReader(self, self.path_for(data_id, index), data_id, index)

    def open_at_hand(self, data_id: str, index: int) -> ShardReader | None:
        """A packed shard whose record is already indexed and in the page cache, opened without
        waiting for anything; None otherwise (use `open` from a worker thread)."""
        if not self.domain.online or self.packs is None:
            return None
        raw = self.packs.read_at_hand(data_id, index)
        if raw is None:
            return None
        try:
            return PackedShardReader.from_bytes(self, self.packs, raw, data_id, index)
        except CorruptShard:
            return None  # `open` looks again (another worker's heal) and says what is wrong

    def read_packed_into(
        self, data_id: str, index: int, buffers: Sequence[memoryview], at_hand: bool
    ) -> bool:
        """A packed shard's record scattered over `buffers` (`PackSet.read_into`), unverified;
        False if this drive is offline, packs nothing, or cannot (then `open` the shard)."""
        if not self.domain.online or self.packs is None:
            return False
        return self.packs.read_into(data_id, index, buffers, at_hand)

    def has(self, data_id: str, index: int) -> bool:
        self.check_online()
        if self.packs is not None and self.packs.lookup(data_id, index, refresh=False) is not None:
            return True
        if self.path_for(data_id, index).is_file():
            return True
        return self.packs is not None and self.packs.lookup(data_id, index) is not None

    def remove(self, data_id: str, index: int) -> bool:
        self.check_online()
        removed = False
        if self.packs is not None:
            size = self.packs.remove(data_id, index)
            if size >= 0:
                self._account(-1, -size)
                removed = True
        path = self.path_for(data_id, index)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return removed
        self._account(-1, -size)
        return True

    def remove_many(self, shards: Sequence[tuple[str, int]]) -> int:
        """`remove` of several shards at once (the garbage collector's batch): the packed ones with
        one write of tombstones, the drive's counters updated once. How many were removed."""
        self.check_online()
        sizes = self.packs.remove_many(shards) if self.packs is not None else [-1] * len(shards)
        count = total = 0
        for (data_id, index), size in zip(shards, sizes, strict=True):
            if size >= 0:
                count, total = count + 1, total + size
            # A shard file too, as `remove` looks for (a packed shard has none: one failed stat).
            path = self.path_for(data_id, index)
            try:
                size = path.stat().st_size
                path.unlink()
            except FileNotFoundError:
                continue
            count, total = count + 1, total + size
        if count:
            self._account(-count, -total)
        return count

    def sweep_tmp(
        self, max_age: float = 3600.0, judged_elsewhere: Callable[[str], bool] | None = None
    ) -> int:
        """Remove temporary files of dead writers, or untouched for `max_age` seconds (abandoned).

        A writer is judged dead by its pid on this host, which is right for the processes of one
        host (and for a node, the only writer of its drives) but means nothing for a gateway on
        another host sharing the drive: for data ids `judged_elsewhere` accepts (written by a
        process in the catalog's process table) only the age applies here; the table decides."""
        self.check_online()
        tmp = self.domain.path / TMP_DIR
        removed = 0
        cutoff = time.time() - max_age
        try:
            entries = list(os.scandir(tmp))
        except FileNotFoundError:
            return 0
        for entry in entries:
            with self._lock:
                active = entry.name in self._active_tmp
            if active:
                continue
            try:
                mtime = entry.stat().st_mtime
                elsewhere = judged_elsewhere is not None and judged_elsewhere(entry.name.rsplit(".", 4)[0])
                if mtime <= cutoff or (not elsewhere and tmp_owner_dead(entry.name, mtime)):
                    os.unlink(entry.path)
                    removed += 1
            except FileNotFoundError:
                pass
        return removed

    def sweep_tmp_of(self, writer: Callable[[str], bool]) -> int:
        """Remove temporary shard files (`<data id>.<index>.<token>.<tag>.tmp`) whose data id
        `writer` accepts: a writer that the caller knows is dead, on whatever host it ran."""
        self.check_online()
        removed = 0
        try:
            entries = list(os.scandir(self.domain.path / TMP_DIR))
        except FileNotFoundError:
            return 0
        for entry in entries:
            parts = entry.name.rsplit(".", 4)
            if len(parts) != 5 or parts[4] != "tmp" or not writer(parts[0]):
                continue
            with self._lock:
                active = entry.name in self._active_tmp
            if active:
                continue  # ours, open: never (the caller's writer is not us)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed += 1
        return removed

    def scan(self) -> None:
        """Recount committed shards (at start; afterwards commits and removals keep the counters)."""
        self.check_online()
        count = total = 0
        for top in os.scandir(self.domain.path):
            if not top.is_dir() or top.name == TMP_DIR:
                continue
            for mid in os.scandir(top.path):
                if mid.is_dir():
                    for entry in os.scandir(mid.path):
                        count += 1
                        total += entry.stat().st_size
        if self.packs is not None:
            packed = self.packs.entries()
            count += len(packed)
            total += sum(rec.length for _, _, rec in packed)
        if self._shared is not None:
            self._shared.set(count, total)
            return
        with self._lock:
            self._count, self._bytes = count, total

    def list_shards(self) -> list[ShardEntry]:
        """Every committed shard file (not temporary files being written)."""
        self.check_online()
        shards = []
        for top in _subdirs(self.domain.path):
            for sub in _subdirs(top):
                for entry in os.scandir(sub):
                    data_id, _, index = entry.name.rpartition(".")
                    if not data_id or not index.isdigit():
                        continue
                    try:
                        stat = entry.stat()
                    except FileNotFoundError:
                        continue  # deleted while we looked
                    shards.append(ShardEntry(data_id, int(index), stat.st_mtime, stat.st_size))
        if self.packs is not None:
            for data_id, index_n, rec in self.packs.entries():
                try:
                    mtime = os.stat(self.packs.dir / rec.pack).st_mtime
                except FileNotFoundError:
                    continue  # compacted away while we looked; its records live on in another pack
                shards.append(ShardEntry(data_id, index_n, mtime, rec.length))
        return shards

    def verify_shard(self, data_id: str, index: int) -> ShardHeader:
        """Read every block of a shard back (checksums verified); CorruptShard if one is bad."""
        reader = self.open(data_id, index)
        try:
            for stripe in range(reader.header.geometry.stripe_count):
                reader.read_block_view(stripe)
            return reader.header
        finally:
            reader.close()

    def disk_usage(self) -> tuple[int, int] | None:
        usage = shutil.disk_usage(self.domain.path)
        return usage.free, usage.total

    def probe_write(self) -> None:
        tmp = self.domain.path / TMP_DIR
        path = tmp / f"health-probe.{secrets.token_hex(4)}.{tmp_owner_tag()}.tmp"
        tmp.mkdir(exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def _account(self, files: int, size: int) -> None:
        if self._shared is not None:
            self._shared.add(files, size)
            return
        with self._lock:
            self._count += files
            self._bytes += size

    def _tmp_path(self, header: ShardHeader) -> Path:
        name = f"{header.data_id}.{header.index}.{secrets.token_hex(6)}.{tmp_owner_tag()}.tmp"
        with self._lock:
            self._active_tmp.add(name)
        return self.domain.path / TMP_DIR / name

    def _release_tmp(self, path: Path) -> None:
        with self._lock:
            self._active_tmp.discard(path.name)


class ShardFileWriter:
    """Appends frames to a temporary shard file; `commit` makes it visible atomically.

    `header` may already be final (the whole blob is known): `commit()` then rewrites nothing.
    """

    def __init__(self, store: LocalDrive, header: ShardHeader) -> None:
        self.store, self.header = store, header
        self._lock = threading.Lock()
        self._tmp = store._tmp_path(header)
        if not store._tmp_dir_made:  # one mkdir per domain and process, not one per shard
            self._tmp.parent.mkdir(exist_ok=True)
            store._tmp_dir_made = True
        self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._next_stripe = 0
        self._written = 0
        self._unflushed = 0  # bytes written since writeback was last started
        self._final: Path | None = None
        self.replaced: int | None = None  # see ShardWriter.replaced
        try:
            self._write_all([header.pack()])
        except BaseException:
            self.discard()
            raise

    def append(self, stripe: int, checksum: int, block: bytes | memoryview) -> None:
        with self._lock:
            self.store.check_online()
            if stripe != self._next_stripe:
                raise ValueError(
                    f"shard frames must be appended in order: got {stripe}, want {self._next_stripe}"
                )
            self._write_all([checksum.to_bytes(CHECKSUM_SIZE, "little"), block])
            self._next_stripe += 1
            if self._unflushed >= WRITEBACK_BYTES:
                # A large shard starts going to disk while the rest arrives: the flush at commit
                # then waits for the tail only, not for the whole file.
                start_writeback(self._fd, self._written - self._unflushed, self._unflushed)
                self._unflushed = 0

    @property
    def drive(self) -> Drive:
        return self.store

    @property
    def stripes_written(self) -> int:
        """Frames appended whole so far."""
        return self._next_stripe

    def relocate(self, drive: Drive) -> ShardWriter:
        """A new writer on `store` holding the frames appended here so far; this one is left as is.

        For a drive that failed mid-write (full, remounted read-only): its temporary file is
        read back — its bytes are whole up to the last complete frame, usually still in the page
        cache — so a streamed shard can go on elsewhere without the bytes already sent. Raises
        ShardUnreadable when this file cannot be read back, OSError when `store`'s drive fails.
        """
        with self._lock:
            stripes = self._next_stripe
            end = frame_offset(self.header.block_size, stripes)
            try:
                src = os.open(self._tmp, os.O_RDONLY)
            except OSError as exc:
                raise ShardUnreadable(f"{self._tmp}: {exc}") from exc
        try:
            moved = drive.create(self.header)
            try:
                # Frame by frame, so that the new drive may be of any kind (a remote one too).
                # Frames sit at a fixed stride; only the file's last one may hold a shorter block.
                for stripe in range(stripes):
                    pos = frame_offset(self.header.block_size, stripe)
                    try:
                        frame = os.pread(src, min(CHECKSUM_SIZE + self.header.block_size, end - pos), pos)
                    except OSError as exc:
                        raise ShardUnreadable(f"{self._tmp}: {exc}") from exc
                    if len(frame) <= CHECKSUM_SIZE:
                        raise ShardUnreadable(f"{self._tmp}: short read at {pos}")
                    moved.append(
                        stripe,
                        int.from_bytes(frame[:CHECKSUM_SIZE], "little"),
                        memoryview(frame)[CHECKSUM_SIZE:],
                    )
            except BaseException:
                moved.discard()
                raise
        finally:
            os.close(src)
        return moved

    def publish(self, header: ShardHeader | None = None) -> FlushBarrier | None:
        """Rewrite the header if given, rename the file into place; not yet durable.

        Returns the barrier to wait on for durability; None when the file and its directory
        were fsync'd here already (no syncfs on this platform).
        """
        with self._lock:
            self.store.check_online()
            if header is not None:
                self.header = header
                os.pwrite(self._fd, header.pack(), 0)
            barrier = self.store.barrier
            if barrier is None:
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1
            final = self.store.path_for(self.header.data_id, self.header.index)
            try:
                self.replaced = os.stat(final).st_size
            except FileNotFoundError:
                self.replaced = None
            try:
                os.replace(self._tmp, final)
            except FileNotFoundError:  # the first shard in this fan-out directory
                final.parent.mkdir(parents=True, exist_ok=True)
                if barrier is None:
                    _fsync_dir(final.parent.parent)
                os.replace(self._tmp, final)
            self._final = final
            self.store._release_tmp(self._tmp)
        if barrier is None:
            _fsync_dir(final.parent)
        return barrier

    def committed(self) -> None:
        """Count the shard once `publish` and its flush are done (a replaced one only its size)."""
        _account_replacing(self.store, self.replaced, file_size(self.header))

    def unpublish(self) -> None:
        """Remove a published shard whose flush failed (never raises: a failure path)."""
        if self._final is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._final)
                if self.replaced is not None:  # the shard it replaced went with it
                    self.store._account(-1, -self.replaced)

    def commit(self, header: ShardHeader | None = None) -> None:
        """Rewrite the header (the size is final only now), rename into place, wait until durable."""
        barrier = self.publish(header)
        if barrier is not None:
            # Outside the lock: many writers wait on one filesystem flush (see erasure/durability.py).
            try:
                barrier.wait()
            except OSError:
                self.unpublish()
                raise
        self.committed()

    def discard(self) -> None:
        """Close and remove the temporary file; never raises (used on failure paths)."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            try:
                os.unlink(self._tmp)
            except OSError:
                pass  # already committed or gone; an offline domain's tmp is swept later
            self.store._release_tmp(self._tmp)

    def _write_all(self, parts: list[bytes | memoryview]) -> None:
        total = sum(len(p) for p in parts)
        written = os.writev(self._fd, parts)  # one system call for a frame (checksum + block)
        if written != total:
            self._write_rest(parts, written)
        self._written += total
        self._unflushed += total

    def _write_rest(self, parts: list[bytes | memoryview], skip: int) -> None:
        """Finish a short writev one part at a time."""
        for part in parts:
            view = memoryview(part)
            if skip >= len(view):
                skip -= len(view)
                continue
            view, skip = view[skip:], 0
            while view:
                written = os.write(self._fd, view)
                if written <= 0:
                    raise OSError(errno.EIO, "short write")
                view = view[written:]


def commit_shards(writers: Sequence[tuple[ShardWriter, ShardHeader | None]]) -> list[BaseException | None]:
    """Commit several shards from one thread: publish each, then wait for every drive's flush at once.

    Per shard: None when it is durable, or the error that failed it (its file is removed then).
    Blocking: call it from a worker thread.
    """
    return settle_shards(publish_shards(writers))


@dataclass
class PublishedShards:
    """Shards made visible whose drives' flushes are still to be waited for (`settle_shards`)."""

    writers: list[ShardWriter]
    results: list[BaseException | None]  # per shard: None, or the error that failed its publish
    barriers: dict[int, tuple[FlushBarrier, list[int]]]  # id(barrier) -> (barrier, shards behind it)


def publish_shards(writers: Sequence[tuple[ShardWriter, ShardHeader | None]]) -> PublishedShards:
    """The first half of `commit_shards`: publish each shard (a failed one is discarded)."""
    published = PublishedShards([w for w, _ in writers], [None] * len(writers), {})
    for n, (writer, header) in enumerate(writers):
        try:
            barrier = writer.publish(header)
        except Exception as exc:  # one drive's failure is that shard's, not the blob's
            _publish_failed(published, n, exc)
            continue
        _behind(published, n, barrier)
    return published


def publish_shards_many(blobs: Sequence[Sequence[ShardWriter]]) -> list[PublishedShards]:
    """`publish_shards` for several blobs' shards at once (headers final): the packed shards bound
    for one drive go to its packs in one write (`PackSet.append_many`) instead of one each."""
    published = [PublishedShards(list(writers), [None] * len(writers), {}) for writers in blobs]
    by_packs: dict[int, tuple[PackSet, list[tuple[PublishedShards, int, PackingWriter, bytes]]]] = {}
    for blob in published:
        for n, writer in enumerate(blob.writers):
            try:
                if isinstance(writer, PackingWriter) and writer.batchable:
                    entry = (blob, n, writer, writer.record_payload())
                    writer.note_replaced()
                    by_packs.setdefault(id(writer.packs), (writer.packs, []))[1].append(entry)
                else:
                    _behind(blob, n, writer.publish(None))
            except Exception as exc:  # one drive's failure is that shard's, not the blob's
                _publish_failed(blob, n, exc)
    for packs, entries in by_packs.values():
        appended = packs.append_many(
            [(w.header.data_id, w.header.index, payload) for _, _, w, payload in entries]
        )
        for (blob, n, writer, _), record in zip(entries, appended, strict=True):
            if isinstance(record, OSError):
                _publish_failed(blob, n, record)
            else:
                _behind(blob, n, writer.appended())
    return published


def _account_replacing(store: LocalDrive, replaced: int | None, size: int) -> None:
    """Count a committed shard of `size` bytes on `store`: one more shard, or, where it replaced
    one of `replaced` bytes (the same data id and index), the same count and the difference."""
    if replaced is None:
        store._account(1, size)
    else:
        store._account(0, size - replaced)


def _behind(published: PublishedShards, n: int, barrier: FlushBarrier | None) -> None:
    """Shard `n` is published; `barrier` (if any) makes it durable."""
    if barrier is not None:
        published.barriers.setdefault(id(barrier), (barrier, []))[1].append(n)


def _publish_failed(published: PublishedShards, n: int, error: BaseException) -> None:
    writer = published.writers[n]
    writer.discard()
    writer.unpublish()
    published.results[n] = error


def settle_shards(
    published: PublishedShards, tickets: dict[int, int] | None = None
) -> list[BaseException | None]:
    """The second half of `commit_shards`: wait until every published shard is durable.

    `tickets` (by id of barrier) were requested after the last publish of several blobs, which
    then share one flush per drive (`ErasurePool.write_blobs`); missing ones are requested here.
    """
    results = published.results
    # A ticket covers only what was written before it was asked for: ask each drive once, after
    # the last publish, then wait. Drives flush in parallel; shards on one drive share a flush.
    tickets = tickets or {}
    waits = [
        (barrier, tickets[key] if key in tickets else barrier.request(), members)
        for key, (barrier, members) in published.barriers.items()
    ]
    for barrier, ticket, members in waits:
        try:
            barrier.wait(ticket)
        except OSError as exc:
            for n in members:
                published.writers[n].unpublish()
                results[n] = exc
    for n, writer in enumerate(published.writers):
        if results[n] is None:
            writer.committed()
    return results


class ShardFileReader:
    """An open shard file: verified header, then verified blocks by stripe number."""

    def __init__(self, store: LocalDrive, path: Path, data_id: str, index: int) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._fd = os.open(path, os.O_RDONLY)
        try:
            self.header = ShardHeader.unpack(os.pread(self._fd, HEADER_SIZE, 0))
            if self.header.data_id != data_id or self.header.index != index:
                raise CorruptShard(f"{path} holds {self.header.data_id}.{self.header.index}")
        except BaseException:
            os.close(self._fd)
            raise

    def read_block(self, stripe: int) -> bytes:
        """Block `stripe` of this shard, checksum-verified (CorruptShard if it is not intact)."""
        return bytes(self.read_block_view(stripe))

    def read_block_view(self, stripe: int) -> memoryview:
        """`read_block` without copying the block out of the frame just read (a view into it).

        The streaming reader's path: a large GET would otherwise copy every byte once more, and
        on a busy box memory bandwidth, not the disk, is what a large read spends.
        """
        geo = self.header.geometry
        length = geo.block_len(stripe)
        with self._lock:
            self.store.check_online()
            if self._fd < 0:
                raise ErasureError("shard reader is closed")
            raw = os.pread(self._fd, CHECKSUM_SIZE + length, frame_offset(geo.block_size, stripe))
        if len(raw) != CHECKSUM_SIZE + length:
            raise CorruptShard(f"shard {self.header.index} truncated at stripe {stripe}")
        block = memoryview(raw)[CHECKSUM_SIZE:]
        if int.from_bytes(raw[:CHECKSUM_SIZE], "little") != block_checksum(block, stripe, self.header.index):
            raise CorruptShard(f"shard {self.header.index} block {stripe} checksum mismatch")
        return block

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


class PackingWriter:
    """A shard bound for a pack: frames kept in memory; past the threshold it becomes a file.

    Only shards whose whole file fits `packs.threshold` are packed, so what is held here is small.
    """

    def __init__(self, store: LocalDrive, packs: PackSet, header: ShardHeader) -> None:
        self.store, self.packs, self.header = store, packs, header
        # (checksum, block) per stripe: the block as the caller gave it when it cannot change
        # (bytes, a read-only view), so that its bytes are copied once, into the record.
        self._frames: list[tuple[bytes, bytes | memoryview]] = []
        self._size = HEADER_SIZE
        self._file: ShardFileWriter | None = None
        self._published = False
        self._replaced: int | None = None  # the length of the live record this one supersedes

    @property
    def drive(self) -> Drive:
        return self.store

    @property
    def stripes_written(self) -> int:
        return self._file.stripes_written if self._file is not None else len(self._frames)

    def append(self, stripe: int, checksum: int, block: bytes | memoryview) -> None:
        if self._file is not None:
            self._file.append(stripe, checksum, block)
            return
        self.store.check_online()
        if stripe != len(self._frames):
            raise ValueError(
                f"shard frames must be appended in order: got {stripe}, want {len(self._frames)}"
            )
        if not (isinstance(block, bytes) or (isinstance(block, memoryview) and block.readonly)):
            block = bytes(block)  # a view of a mutable buffer: its owner may reuse it (a reader's)
        self._frames.append((checksum.to_bytes(CHECKSUM_SIZE, "little"), block))
        self._size += CHECKSUM_SIZE + len(block)
        if self._size > self.packs.threshold:
            self._spill()

    def _spill(self) -> None:
        """Too big to pack: go on as an ordinary shard file."""
        writer = ShardFileWriter(self.store, self.header)
        try:
            for stripe, (checksum, block) in enumerate(self._frames):
                writer.append(stripe, int.from_bytes(checksum, "little"), block)
        except BaseException:
            writer.discard()
            raise
        self._file, self._frames = writer, []

    def relocate(self, drive: Drive) -> ShardWriter:
        if self._file is not None:
            return self._file.relocate(drive)
        moved = drive.create(self.header)
        try:
            for stripe, (checksum, block) in enumerate(self._frames):
                moved.append(stripe, int.from_bytes(checksum, "little"), block)
        except BaseException:
            moved.discard()
            raise
        return moved

    def publish(self, header: ShardHeader | None = None) -> FlushBarrier | None:
        if self._file is not None:
            return self._file.publish(header)
        if header is not None:
            self.header = header
        barrier = self.store.barrier
        payload = self.record_payload()
        self.note_replaced()
        self.packs.append(self.header.data_id, self.header.index, payload, barrier)
        return self.appended()

    def note_replaced(self) -> None:
        """Just before its record is appended: does it supersede a live one (heal rewriting a
        damaged shard in place)? Then committing it adds no shard to the drive's count."""
        old = self.packs.lookup(self.header.data_id, self.header.index, refresh=False)
        self._replaced = None if old is None else old.length

    @property
    def replaced(self) -> int | None:
        return self._file.replaced if self._file is not None else self._replaced

    @property
    def batchable(self) -> bool:
        """Still in memory, on a drive whose flush barrier will make it durable: it may be
        appended together with other shards (`publish_shards_many`)."""
        return self._file is None and self.store.barrier is not None

    def record_payload(self) -> bytes:
        """What its pack record holds: the header, then the frames."""
        self.store.check_online()
        return b"".join([self.header.pack(), *itertools.chain.from_iterable(self._frames)])

    def appended(self) -> FlushBarrier | None:
        """Its record is in the pack (by `publish` or by `publish_shards_many`)."""
        self._published = True
        return self.store.barrier

    def committed(self) -> None:
        if self._file is not None:
            self._file.committed()
        else:
            _account_replacing(self.store, self._replaced, file_size(self.header))

    def unpublish(self) -> None:
        if self._file is not None:
            self._file.unpublish()
        elif self._published:
            with contextlib.suppress(OSError):
                removed = self.packs.remove(self.header.data_id, self.header.index) >= 0
                if removed and self._replaced is not None:  # the record it superseded is gone too
                    self.store._account(-1, -self._replaced)

    def commit(self, header: ShardHeader | None = None) -> None:
        barrier = self.publish(header)
        if barrier is not None:
            try:
                barrier.wait()
            except OSError:
                self.unpublish()
                raise
        self.committed()

    def discard(self) -> None:
        if self._file is not None:
            self._file.discard()
        self._frames = []


class PackedShardReader:
    """A packed shard: its whole record read with one pread, then served like a shard file.

    The record's own checksum is not what decides: a damaged record is read like a damaged shard
    file — its header and every block checked on their own — so one bad block costs one block
    (rebuilt on the fly, rewritten by heal), never the whole shard, exactly as for a file.
    """

    def __init__(
        self,
        store: LocalDrive,
        packs: PackSet,
        rec: PackedRecord | None,
        data_id: str,
        index: int,
        *,
        raw: bytes | bytearray | None = None,
    ) -> None:
        self.store = store
        self._packs = packs
        self._data_id = data_id
        self._index = index
        self._rec: PackedRecord | None = rec
        if raw is not None:  # read already (from_bytes)
            self._looked_again = True
            self._check(raw)
            return
        assert rec is not None
        self._looked_again = False
        try:
            self._load(rec)
        except CorruptShard:
            if not self._superseded(rec):
                raise

    @classmethod
    def from_bytes(
        cls, store: LocalDrive, packs: PackSet, raw: bytes | bytearray, data_id: str, index: int
    ) -> PackedShardReader:
        """A reader of a record already read (`PackSet.read_at_hand`). It never looks again on
        damage (that reads the packs: blocking): CorruptShard, and the caller reads in a thread."""
        return cls(store, packs, None, data_id, index, raw=raw)

    def _load(self, rec: PackedRecord) -> None:
        self._rec = rec
        self._check(self._packs.read(rec), rec)

    def _check(self, raw: bytes | bytearray, rec: PackedRecord | None = None) -> None:
        self._raw = raw  # a bytearray only when read at hand: this reader's own, never changed
        if rec is not None and len(self._raw) != rec.length:
            raise CorruptShard(
                f"packed shard {self._data_id}.{self._index} in {rec.pack} at {rec.offset}: truncated"
            )
        self.header = ShardHeader.unpack(self._raw[:HEADER_SIZE])
        if self.header.data_id != self._data_id or self.header.index != self._index:
            where = f"{rec.pack} at {rec.offset}" if rec is not None else "a record read at hand"
            raise CorruptShard(f"{where} holds {self.header.data_id}.{self.header.index}")

    def _superseded(self, rec: PackedRecord | None) -> bool:
        """Damage found: has another process replaced the record meanwhile? Under `--workers N`
        one worker's heal rewrites a damaged shard as a new record (after a tombstone of the old),
        which this process's index learns of only when it reads the packs again: look once, and
        read the new record if there is one. True: loaded from it."""
        if self._looked_again or rec is None:
            return False
        self._looked_again = True
        fresh = self._packs.lookup_fresh(self._data_id, self._index)
        if fresh is None or (fresh.pack, fresh.offset) == (rec.pack, rec.offset):
            return False
        self._load(fresh)
        return True

    def read_block(self, stripe: int) -> bytes:
        return bytes(self.read_block_view(stripe))

    def read_block_view(self, stripe: int) -> memoryview:
        self.store.check_online()
        geo = self.header.geometry
        length = geo.block_len(stripe)
        at = frame_offset(geo.block_size, stripe)
        raw = memoryview(self._raw)[at : at + CHECKSUM_SIZE + length]
        if len(raw) != CHECKSUM_SIZE + length:
            raise CorruptShard(f"shard {self.header.index} truncated at stripe {stripe}")
        block = raw[CHECKSUM_SIZE:]
        if int.from_bytes(raw[:CHECKSUM_SIZE], "little") != block_checksum(block, stripe, self.header.index):
            if self._superseded(self._rec):
                return self.read_block_view(stripe)
            raise CorruptShard(f"shard {self.header.index} block {stripe} checksum mismatch")
        return block

    def frame(self, stripe: int) -> bytes:
        """Frame `stripe` as stored, checksum and block, unverified (a node's answer; the gateway checks)."""
        geo = self.header.geometry
        at = frame_offset(geo.block_size, stripe)
        return bytes(self._raw[at : at + CHECKSUM_SIZE + geo.block_len(stripe)])

    def close(self) -> None:
        self._raw = b""


def _subdirs(path: Path) -> list[Path]:
    """Fan-out directories (two hex characters) under a domain or a fan-out directory."""
    try:
        return [Path(e.path) for e in os.scandir(path) if e.is_dir() and len(e.name) == 2]
    except FileNotFoundError:
        return []


def local_drive(domain: Domain) -> Drive:
    """The default drive factory: every domain is a directory on this host."""
    return LocalDrive(domain)


def packed_local_drive(pack_threshold: int) -> DriveFactory:
    """A drive factory for local drives that pack shards up to `pack_threshold` bytes (0: off)."""

    def factory(domain: Domain) -> Drive:
        return LocalDrive(domain, pack_threshold)

    return factory


ShardStore = LocalDrive  # the name the local drive had before the seam
