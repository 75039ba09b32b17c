"""Pack files: small shards appended to a few large files instead of a file each (the default).

A tier's `pack_threshold_bytes` (default 512 KiB; 0 turns packs off) gives its local drives a
`PackSet`. A shard whose whole file (header + frames) is at most that many bytes is written as one
record appended to the drive's open pack, instead of a file of its own: a small-object PUT then
creates no file and no directory entry, and a flood of 4 KiB objects leaves a handful of files
instead of millions.

    <domain>/.packs/pack-<ns>-p<pid>-<tok>.tsp      records, appended only

    <domain>/.packs/pack.key                       the drive's record key (32 random bytes, 0600)

    record = [fixed: magic kind id_len index length payload_xxh3][data id][tag of the above][payload]

The tag is BLAKE2b-128 keyed with the drive's own secret (magic `TSPK`), so bytes a client
uploaded cannot pass for a record header: a scan that resyncs past a damaged header or a torn tail
and lands inside a payload (user bytes) never indexes what it finds there without the key. Packs
written before keys (magic `TSPR`, an unkeyed xxh32) are still read, but only record after record
from the start of the pack, never by resyncing; compaction migrates them (it copies every live
record of a legacy pack into the open, keyed pack).

`payload` is exactly the bytes the shard file would hold, so a packed shard reads and verifies
like a file (header, then checksummed frames). `kind` 2 is a tombstone (a removed shard); its
payload names the record it removes (that record's pack and payload offset).

Why a tombstone names its record: several processes append to one drive (`--workers N`), each to
its own packs, and a scan replays packs in name order, which is not the order in which their
records were written. A tombstone that removed "whatever (data id, shard) names now" was undone
when a scan met it before the record it removed (its pack's name sorted first): the removed shard
came back at the next start, or to anyone reading the packs. A named record is removed whichever
is read first. For the same reason a record that replaces one already there (heal rewriting a
damaged shard) is preceded by a tombstone of the old one. Tombstones without a payload (written
before this) still remove whatever the key names when met.

- Self-describing records: the drive's index (data id, shard) -> (pack, offset, length) lives in
  memory and is rebuilt by reading the packs when the drive is first used; nothing outside the
  drive (not the catalog, not the location record) knows a shard is packed, so heal, scrub,
  verify, rebalance, drain and fsck reach packed shards through the same `Drive` calls.
- Crash safety: a record is appended whole with one write and made durable by the filesystem's
  group flush (erasure/durability.py: writers arriving during a flush share the next one) before
  the catalog names it. A torn tail (short record, bad header) ends the scan of that pack, a
  damaged header in the middle is skipped to the next whole record. Opening the index reads
  record headers only; a damaged payload is found by its reader, block by block as in a shard
  file (shard_store.PackedShardReader), and heal writes a fresh record that supersedes it.
- Each process appends only to packs it created (its pid is in the name), one open pack at a time,
  rotated at `rotate_bytes`. Other processes' records are found by refreshing the index on a miss.
- Big records (a payload of at least DIRECT_MIN_PAYLOAD: the shards of 1 MiB objects) go to a
  second open pack of the process, written with O_DIRECT from an aligned buffer: each record starts
  on a DIRECT_ALIGN boundary and zeros pad it to the next (scans skip them); the file only grows,
  by whole blocks past its end. Their bytes skip the page cache: no freshly allocated cache pages
  to copy into, and a burst of big PUTs does not push out what small GETs read. A replacement
  stays in the active pack (see `append`); a filesystem that refuses O_DIRECT gets them there too.
- Dead space: removals append a tombstone and lower the pack's live bytes. `compact()` copies the
  live records of a mostly dead pack into the open pack (throttled), repoints the index only where
  it still names the old record (compare-and-swap), and unlinks the old pack; its descriptor is
  closed only after a grace period so a read that looked the record up just before still works.
  A copy is a PUT record a scan would index, so a removal or replacement in this process while it
  waits for the swap tombstones it at once: a kill before the swap must not bring the shard back.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import hmac
import mmap
import os
import secrets
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import xxhash

from erasure.durability import FlushBarrier

PACK_DIR = ".packs"
# The default on every erasure-coded tier and storage node: a shard file (512-byte header + frames)
# up to 512 KiB is packed. That covers every replica-layout object (< 64 KiB) and the shards of
# striped objects up to about k x 512 KiB (2 MiB at 4+2): the ImageNet-sized blobs a training set
# is made of, and the 1 MiB objects of tokenized shards and checkpoints' small tensors. From 128
# KiB (objects up to ~512 KiB) to 512 KiB: 1 MiB PUTs +17 %, GETs +8 % (bench/RESULTS.md), as
# six appends to open packs replace six files created, renamed and flushed. A packing writer
# holds its shards in memory until it publishes them, no more than the one stripe (k x 1 MiB
# blocks) every writer already holds while it codes.
DEFAULT_PACK_THRESHOLD = 512 << 10
DEFAULT_ROTATE_BYTES = 256 << 20
RETIRE_GRACE = 30.0  # seconds a compacted pack's descriptor stays open for readers in flight
KEY_FILE = "pack.key"
KEY_BYTES = 32
_MAGIC = b"TSPK"  # keyed records
_LEGACY_MAGIC = b"TSPR"  # records written before keys: an unkeyed xxh32 of the header
_PUT, _DEL = 1, 2
_TARGET = struct.Struct("<Q")  # a tombstone's payload: the removed record's payload offset, then its pack
_FIXED = struct.Struct("<4sBBHIQ")  # magic kind id_len index payload_length payload_xxh3
_CHECK = struct.Struct("<I")  # legacy
_TAG_BYTES = 16
# preadv2's "fail with EAGAIN rather than wait for the disk" (Linux); without it nothing reads at hand.
_RWF_NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None)
_MAX_WRITE_RECORDS = 512  # two buffers each (head, payload): IOV_MAX, 1024 on Linux
MAX_READ_BUFFERS = 1024  # the most one preadv takes (IOV_MAX on Linux)
# Records whose payload is at least this big go to a pack written with O_DIRECT (`_append_direct`),
# each starting on a DIRECT_ALIGN boundary: a 1 MiB object's six 256 KiB shards. Written through the
# page cache, their bytes were copied into freshly allocated cache pages — measured on our benchmark
# VM at up to 2-4 ms of CPU per MiB, a third of a 1 MiB PUT's server CPU (its free page reporting,
# the likely cause, is not proven: bench/RESULTS.md) — pages that then push out what GETs read. Below it the
# alignment padding (up to 4 KiB a record: 6 % at 64 KiB) weighs more against a smaller copy; the
# threshold is a judgement, not a measurement.
DIRECT_MIN_PAYLOAD = 64 << 10
DIRECT_ALIGN = 4096  # the largest logical block size of the disks we run on (4Kn); 512 also aligns
_O_DIRECT: int = getattr(os, "O_DIRECT", 0)


def _tag(key: bytes, head: bytes) -> bytes:
    return hashlib.blake2b(head, key=key, digest_size=_TAG_BYTES).digest()


def load_pack_key(pack_dir: Path, create: bool = True) -> bytes | None:
    """The drive's record key, made (random, 0600, durable) the first time; None if there is none
    (or no pack folder). A key that cannot be made raises the drive's OSError (EROFS, ENOSPC).

    Made in a temporary file, flushed, then linked into place: the link is atomic and fails if
    another process linked its key first, so every process of a drive ends up with the same key.
    """
    path = pack_dir / KEY_FILE
    for _ in range(2):
        try:
            key = path.read_bytes()
        except FileNotFoundError:
            key = b""
        except OSError:
            return None
        if len(key) == KEY_BYTES:
            return key
        if key or not create:
            return None  # a damaged key: no record can be trusted, none is written
        tmp = pack_dir / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, secrets.token_bytes(KEY_BYTES))
                os.fsync(fd)
            finally:
                os.close(fd)
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
            os.unlink(tmp)
            dfd = os.open(pack_dir, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, FileNotFoundError):
                return None  # no pack folder: nothing to read, and the writer makes the folder first
            # A read-only or full drive: it reads its packs and writes none. The errno goes up to
            # the writer, so that drive health says why (EROFS, ENOSPC), not just "no key".
            raise
    return None


# A record waiting for its pack write: (item, data id, index, payload, head, payload digest).
_Pending = tuple[int, str, int, bytes, bytes, int]


@dataclass(frozen=True, slots=True)  # one per packed shard, all in memory: no __dict__ (~40 B each)
class PackedRecord:
    pack: str
    offset: int  # of the payload
    length: int
    digest: int  # xxh3_64 of the payload, checked when it is read

    def __init__(self, pack: str, offset: int, length: int, digest: int) -> None:
        # Written out, not generated: one per shard appended or indexed (tiering/records.py says why).
        object.__setattr__(self, "pack", pack)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "length", length)
        object.__setattr__(self, "digest", digest)

    def intact(self, payload: bytes) -> bool:
        return len(payload) == self.length and xxhash.xxh3_64_intdigest(payload) == self.digest


def encode_record(kind: int, data_id: str, index: int, payload: bytes, key: bytes | None = None) -> bytes:
    """A record tagged with the drive's `key` (None: the legacy unkeyed format, for tests of old packs)."""
    return record_head(kind, data_id, index, payload, key)[0] + payload


def record_head(
    kind: int, data_id: str, index: int, payload: bytes, key: bytes | None = None
) -> tuple[bytes, int]:
    """What a record holds before its payload (fixed fields, data id, tag), and the payload's
    digest. Appends write the two side by side (`pwritev`) rather than joined: a 1 MiB object's
    six 256 KiB shards are not copied once more just to put a header in front of each."""
    ident = data_id.encode()
    digest = xxhash.xxh3_64_intdigest(payload)
    magic = _LEGACY_MAGIC if key is None else _MAGIC
    head = _FIXED.pack(magic, kind, len(ident), index, len(payload), digest) + ident
    check = _CHECK.pack(xxhash.xxh32_intdigest(head)) if key is None else _tag(key, head)
    return head + check, digest


def encode_target(rec: PackedRecord) -> bytes:
    """A tombstone's payload: which record it removes."""
    return _TARGET.pack(rec.offset) + rec.pack.encode()


def read_target(fd: int, rec: PackedRecord) -> tuple[str, int] | None:
    """The (pack, payload offset) a tombstone record removes; None for an unnamed (older) or
    damaged one, which removes whatever its key names when it is met."""
    if rec.length <= _TARGET.size:
        return None
    payload = os.pread(fd, rec.length, rec.offset)
    if not rec.intact(payload):
        return None
    try:
        return payload[_TARGET.size :].decode(), _TARGET.unpack_from(payload)[0]
    except UnicodeDecodeError:
        return None


def record_header_size(data_id: str, keyed: bool) -> int:
    return _FIXED.size + len(data_id.encode()) + (_TAG_BYTES if keyed else _CHECK.size)


def _record_at(
    fd: int, pos: int, size: int, key: bytes | None, legacy: bool
) -> tuple[int, str, int, PackedRecord, int] | None:
    """The whole record at `pos` (kind, data id, index, record, where it ends), None if none is.

    A keyed record needs the drive's `key`; a legacy (unkeyed) one is accepted only where `legacy`
    says `pos` is where the previous whole record ended, never where a resync landed.
    """
    if pos + _FIXED.size > size:
        return None
    fixed = os.pread(fd, _FIXED.size, pos)
    magic, kind, id_len, index, length, digest = _FIXED.unpack(fixed)
    if kind not in (_PUT, _DEL):
        return None
    if magic == _MAGIC and key is not None:
        check_size = _TAG_BYTES
    elif magic == _LEGACY_MAGIC and legacy:
        check_size = _CHECK.size
    else:
        return None
    rest = os.pread(fd, id_len + check_size, pos + _FIXED.size)
    if len(rest) != id_len + check_size:
        return None
    head = fixed + rest[:id_len]
    if key is not None and check_size == _TAG_BYTES:
        if not hmac.compare_digest(rest[id_len:], _tag(key, head)):
            return None
    elif _CHECK.unpack(rest[id_len:])[0] != xxhash.xxh32_intdigest(head):
        return None
    payload_at = pos + _FIXED.size + id_len + check_size
    if payload_at + length > size:
        return None  # the payload never made it whole
    try:
        data_id = rest[:id_len].decode()
    except UnicodeDecodeError:
        return None
    # Payloads are not read here (a restart must not read every small object): a damaged one is
    # found by its reader, which checks `digest`.
    return kind, data_id, index, PackedRecord("", payload_at, length, digest), payload_at + length


def _next_magic(fd: int, pos: int, size: int) -> int | None:
    """The next offset after `pos` where a keyed record's magic appears (a damaged header is skipped)."""
    chunk = 1 << 20
    at = pos + 1
    while at < size:
        raw = os.pread(fd, chunk + len(_MAGIC) - 1, at)
        hit = raw.find(_MAGIC)
        if hit >= 0:
            return at + hit
        at += chunk
    return None


def _align_up(n: int, to: int = DIRECT_ALIGN) -> int:
    return -(-n // to) * to


def _zero_gap_end(fd: int, pos: int, size: int) -> int | None:
    """Where the zeros that pad a direct pack's record up to the next DIRECT_ALIGN boundary end,
    if `pos` (just past a record) starts such a gap; None otherwise (aligned, or not zeros)."""
    end = min(_align_up(pos), size)
    if end <= pos:
        return None
    gap = os.pread(fd, end - pos, pos)
    return end if len(gap) == end - pos and not gap.strip(b"\0") else None


class _AlignedBuffers:
    """Page-aligned scratch buffers for O_DIRECT writes (anonymous maps), kept for reuse: a fresh
    map's pages cost a fault each on first touch, a kept one's are warm."""

    def __init__(self, keep: int = 4) -> None:
        self._keep = keep
        self._free: list[mmap.mmap] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> mmap.mmap:
        with self._lock:
            for n, buf in enumerate(self._free):
                if len(buf) >= size:
                    return self._free.pop(n)
        return mmap.mmap(-1, _align_up(size, 1 << 20))

    def give(self, buf: mmap.mmap) -> None:
        with self._lock:
            if len(self._free) < self._keep:
                self._free.append(buf)
                return
        buf.close()


_DIRECT_BUFFERS = _AlignedBuffers()


def scan_pack(
    fd: int, start: int = 0, resync: bool = True, key: bytes | None = None
) -> tuple[list[tuple[int, str, int, PackedRecord]], int]:
    """Records of a pack from `start`: [(kind, data id, index, record)], and where whole records end.

    A record that is short or whose header does not check is skipped: scanning resumes at the next
    keyed record found after it (a damaged header in the middle), else ends there (a torn tail, or
    the last record of a live appender, half written right now: read on from there later). Only a
    keyed record is taken where a resync lands: it may be inside a payload, and user bytes cannot
    carry a valid tag without the drive's key. Before skipping, the spot is read again: a keyed
    record after it was appended after it, so a record that was half written is whole by now.
    Without `key` (or without `resync`) the scan ends at the first record that does not check.
    """
    size = os.fstat(fd).st_size
    found: list[tuple[int, str, int, PackedRecord]] = []
    pos = start
    after_gap = False
    while pos < size:
        # Past a gap only a keyed record is taken, as where a resync lands: zeros where a header
        # was (damage) must not let a legacy record be read out of the next record's payload.
        legacy = not after_gap
        record = _record_at(fd, pos, size, key, legacy)
        if record is None and key is not None and (gap_end := _zero_gap_end(fd, pos, size)) is not None:
            pos, after_gap = gap_end, True  # a direct pack's padding up to its next record
            continue
        after_gap = False
        probe = pos
        while record is None:
            nxt = _next_magic(fd, probe, size) if resync and key is not None else None
            if nxt is None:
                return found, pos
            probe = nxt
            record = _record_at(fd, probe, size, key, legacy=False)
            if record is not None:
                record = _record_at(fd, pos, size, key, legacy) or record
        kind, data_id, index, rec, pos = record
        found.append((kind, data_id, index, rec))
    return found, pos


class PackSet:
    """The packs of one local drive: an index in memory, one open pack for this process's appends."""

    def __init__(self, root: Path, threshold: int, rotate_bytes: int = DEFAULT_ROTATE_BYTES) -> None:
        self.dir = root / PACK_DIR
        self.threshold = threshold
        self.rotate_bytes = rotate_bytes
        # Payloads at least this big are written with O_DIRECT (None: never; so too once this
        # drive's filesystem refuses O_DIRECT).
        self.direct_min: int | None = DIRECT_MIN_PAYLOAD if _O_DIRECT else None
        self._lock = threading.RLock()
        self._index: dict[tuple[str, int], PackedRecord] = {}
        self._fds: dict[str, int] = {}
        self._scanned: dict[str, int] = {}  # pack -> offset up to which it has been indexed
        self._size: dict[str, int] = {}  # pack -> bytes of whole records
        self._live: dict[str, int] = {}  # pack -> payload bytes still indexed
        self._active: str | None = None
        # This process's open pack for big records (`_append_direct`) and its O_DIRECT descriptor
        # (reads go through the pack's ordinary one in `_fds`, from the page cache).
        self._direct: str | None = None
        self._direct_fd: int | None = None
        self._key: bytes | None = None  # the drive's record key (None: this drive cannot write)
        self._legacy: set[str] = set()  # packs written before keys: compaction migrates them
        # Payload offsets of records removed by a tombstone naming them, per pack: a record met
        # after its tombstone (in a pack that sorts later) is never indexed.
        self._killed: dict[str, set[int]] = {}
        self._retired: list[tuple[float, int]] = []  # (when, fd) to close after the grace
        # Compaction's copies not yet swapped in, by key. A removal or a replacement meanwhile
        # tombstones the copy at once: were the process killed before the swap, a scan would
        # otherwise index the copy (a PUT record met after the original) and bring the shard back.
        self._copies: dict[tuple[str, int], PackedRecord] = {}
        self._loaded = False

    # -- index ------------------------------------------------------------------------------

    def _load(self) -> None:
        if not self._loaded:
            # A drive that is full (or read-only) may refuse even a directory: it must stay
            # readable all the same, so the pack directory is made again when a pack is.
            with contextlib.suppress(OSError):
                self.dir.mkdir(exist_ok=True)
            self._key = load_pack_key(self.dir, create=False)  # made with the first pack
            self._loaded = True
            self.refresh()

    def refresh(self) -> None:
        """Index records appended since the last look (other processes' packs, new packs)."""
        with self._lock:
            try:
                names = sorted(n for n in os.listdir(self.dir) if n.endswith(".tsp"))
            except FileNotFoundError:
                names = []
            if names and self._key is None:
                self._key = load_pack_key(self.dir, create=False)  # another process made it since
            for name in names:
                if name in (self._active, self._direct):
                    continue  # ours: indexed as we append
                fd = self._fd(name)
                if fd is None:
                    continue
                start = self._scanned.get(name, 0)
                if start == 0 and os.pread(fd, len(_LEGACY_MAGIC), 0) == _LEGACY_MAGIC:
                    self._legacy.add(name)
                # Skipping a damaged header is safe even in a live appender's pack: only a keyed
                # record is taken past it, and the spot is read again once a later record is seen.
                found, end = scan_pack(fd, start, key=self._key)
                self._scanned[name] = end
                self._size[name] = end
                for kind, data_id, index, rec in found:
                    named = PackedRecord(name, rec.offset, rec.length, rec.digest)
                    target = read_target(fd, named) if kind == _DEL else None
                    self._apply(kind, data_id, index, named, target)

    def _apply(
        self, kind: int, data_id: str, index: int, rec: PackedRecord, target: tuple[str, int] | None = None
    ) -> None:
        """Replay one record. A tombstone naming its record (`target`) removes that record only,
        whether it was met before or after it; an unnamed one removes what the key names now."""
        key = (data_id, index)
        current = self._index.get(key)
        if kind == _PUT:
            if rec.offset in self._killed.get(rec.pack, ()):
                return  # its tombstone was met first (in a pack whose name sorts before this one)
        elif target is not None:
            self._killed.setdefault(target[0], set()).add(target[1])
            if current is None or (current.pack, current.offset) != target:
                return  # it removes a record already replaced, or one not met yet
        if current is not None:
            del self._index[key]
            self._live[current.pack] = self._live.get(current.pack, 0) - current.length
        if kind == _PUT:
            self._index[key] = rec
            self._live[rec.pack] = self._live.get(rec.pack, 0) + rec.length

    def _fd(self, name: str) -> int | None:
        fd = self._fds.get(name)
        if fd is None:
            try:
                fd = os.open(self.dir / name, os.O_RDWR)
            except FileNotFoundError:
                return None
            self._fds[name] = fd
        return fd

    def lookup(self, data_id: str, index: int, refresh: bool = True) -> PackedRecord | None:
        with self._lock:
            self._load()
            rec = self._index.get((data_id, index))
            if rec is None and refresh:
                self.refresh()
                rec = self._index.get((data_id, index))
            return rec

    def lookup_fresh(self, data_id: str, index: int) -> PackedRecord | None:
        """The record as of now, other processes' appends included (a hit may be stale: another
        worker's heal may have superseded a damaged record since this index last looked)."""
        with self._lock:
            self._load()
            self.refresh()
            return self._index.get((data_id, index))

    def entries(self) -> list[tuple[str, int, PackedRecord]]:
        with self._lock:
            self._load()
            self.refresh()
            return [(d, i, rec) for (d, i), rec in self._index.items()]

    def read(self, rec: PackedRecord) -> bytes:
        """The payload of a record: one pread."""
        with self._lock:
            fd = self._fd(rec.pack)
        if fd is None:
            raise FileNotFoundError(rec.pack)
        return os.pread(fd, rec.length, rec.offset)

    def read_into(self, data_id: str, index: int, buffers: Sequence[memoryview], at_hand: bool) -> bool:
        """Scatter a record's payload over `buffers` (whose lengths add up to the record's) with
        one preadv: a whole small blob's blocks land straight where the reader wants them, not in
        a record's buffer that is then copied out. False, and nothing to rely on in `buffers`,
        when this index does not know the record (the caller opens the shard then: that looks for
        other processes' appends and for a file), its length differs, or the read comes up short.
        `at_hand`: as `read_at_hand` — no lock, and only bytes in the page cache (RWF_NOWAIT).
        Nothing is verified here: the caller checks the shard header and every block checksum.
        """
        if len(buffers) > MAX_READ_BUFFERS:
            return False
        if at_hand:
            rec, fd = self._known_at_hand(data_id, index)
            flags = _RWF_NOWAIT or 0  # a record known at hand implies the flag exists
        else:
            with self._lock:
                self._load()
                rec = self._index.get((data_id, index))
                fd = self._fd(rec.pack) if rec is not None else None
            flags = 0
        if rec is None or fd is None or sum(len(b) for b in buffers) != rec.length:
            return False
        try:
            return os.preadv(fd, buffers, rec.offset, flags) == rec.length
        except OSError:  # EAGAIN: not cached (at hand); the opened shard's read says what is wrong
            return False

    def _known_at_hand(self, data_id: str, index: int) -> tuple[PackedRecord | None, int | None]:
        """The record and its open pack's descriptor, if this index already knows both and reads
        at hand are possible here (RWF_NOWAIT); (None, None) otherwise. Without the lock, which
        an append holds across its fdatasync and every thread-path read takes: under 64 concurrent
        GETs, waiting for it (or giving up when it was taken) sent most GETs back to threads. One
        dict lookup is atomic under the GIL; a change racing it makes a miss (the thread path then)
        or reads a record replaced a moment ago, whose pack stays open (RETIRE_GRACE) and whose
        bytes are verified like any — as `read` would."""
        rec = self._index.get((data_id, index)) if self._loaded and _RWF_NOWAIT is not None else None
        fd = self._fds.get(rec.pack) if rec is not None else None
        return (rec, fd) if fd is not None else (None, None)

    def read_at_hand(self, data_id: str, index: int) -> bytearray | None:
        """A record's payload if reading it cannot wait: this index already knows the record, its
        pack is open, and the bytes are in the page cache (preadv2 with RWF_NOWAIT). None otherwise: then `lookup` and `read` from a worker thread.
        For the event loop's small GETs: a thread trip cost more than the read (see tiering/store.py).
        """
        rec, fd = self._known_at_hand(data_id, index)
        if rec is None or fd is None:
            return None
        buf = bytearray(rec.length)
        try:
            got = os.preadv(fd, [buf], rec.offset, _RWF_NOWAIT or 0)  # known at hand: it exists
        except OSError:  # EAGAIN: not cached; EOPNOTSUPP: no such flag here
            return None
        # The buffer itself (nobody else holds it), not a bytes copy of it: a 112 KiB GET's four
        # records were copied once more here only to change their type.
        return buf if got == rec.length else None

    def stats(self) -> dict[str, int]:
        with self._lock:
            self._load()
            return {
                "packs": len(self._size),
                "records": len(self._index),
                "pack_bytes": sum(self._size.values()),
                "live_bytes": sum(self._live.values()),
            }

    # -- appends ----------------------------------------------------------------------------

    def append(self, data_id: str, index: int, payload: bytes, barrier: FlushBarrier | None) -> PackedRecord:
        """Append a shard's bytes; visible now, durable once `barrier` flushed (fdatasync if None).

        A record it replaces (heal rewriting a damaged one) gets a tombstone first: a scan may meet
        the two in either order (another process's pack), and must keep this one. Both go to the
        active pack, the new record after its tombstone, never to the direct pack: that may sort
        before the replaced record's pack, and a scan meeting new, old, then the tombstone would
        keep neither."""
        with self._lock:
            self._load()
            old = self._index.get((data_id, index))
            if old is None:
                return self._append_new(data_id, index, payload, barrier is None)
            self._append(_DEL, data_id, index, encode_target(old), False)
            self._drop_copy((data_id, index))
            return self._append(_PUT, data_id, index, payload, barrier is None)

    def _append_new(self, data_id: str, index: int, payload: bytes, sync: bool) -> PackedRecord:
        """A record of a shard this drive does not hold: a big one to the direct pack if it can."""
        if self._goes_direct(payload):
            rec = self._append_direct(data_id, index, payload, sync)
            if rec is not None:
                return rec
        return self._append(_PUT, data_id, index, payload, sync)

    def append_many(self, items: Sequence[tuple[str, int, bytes]]) -> list[PackedRecord | OSError]:
        """`append` of several shards that a flush barrier will make durable (a batch of small
        PUTs): the records bound for one pack go to it in one write. A write per record was one
        journalled update of the pack's size each, and while another process's flush commits the
        filesystem journal each such update waits for it. Per item its record, or the OSError
        that failed it (nothing of a failed item is indexed)."""
        results: list[PackedRecord | OSError | None] = [None] * len(items)
        with self._lock:
            try:
                self._load()
                key = self._writing_key()
            except OSError as exc:
                return [exc] * len(items)
            batch: list[_Pending] = []
            pending = 0  # bytes of `batch`, bound for the active pack
            for n, (data_id, index, payload) in enumerate(items):
                old = self._index.get((data_id, index))
                if old is None and self._goes_direct(payload):
                    try:
                        results[n] = self._append_new(data_id, index, payload, False)
                    except OSError as exc:
                        results[n] = exc
                    continue
                if old is not None:  # a replacement (heal): its tombstone first, as `append` writes it
                    self._write_batch(batch, results)
                    batch, pending = [], 0
                    try:
                        self._append(_DEL, data_id, index, encode_target(old), False)
                        self._drop_copy((data_id, index))
                        results[n] = self._append(_PUT, data_id, index, payload, False)
                    except OSError as exc:
                        results[n] = exc
                    continue
                head, digest = record_head(_PUT, data_id, index, payload, key)
                size = len(head) + len(payload)
                name = self._active
                if len(batch) == _MAX_WRITE_RECORDS:  # within one writev's limit (see the constant)
                    self._write_batch(batch, results)
                    batch, pending = [], 0
                if name is None or (
                    self._size[name] + pending + size > self.rotate_bytes and self._size[name] + pending > 0
                ):
                    self._write_batch(batch, results)
                    batch, pending = [], 0
                    try:
                        self._open_new()
                    except OSError as exc:
                        results[n] = exc
                        continue
                batch.append((n, data_id, index, payload, head, digest))
                pending += size
            self._write_batch(batch, results)
        return [r if r is not None else OSError("not appended") for r in results]

    def _write_batch(
        self,
        batch: list[_Pending],
        results: list[PackedRecord | OSError | None],
        kind: int = _PUT,
        targets: Sequence[tuple[str, int] | None] = (),
    ) -> None:
        """Write `batch`'s records (all of `kind`; tombstones with their `targets`) at the end of
        the active pack in one write, then index them."""
        if not batch:
            return
        name = self._active
        assert name is not None
        start = self._size[name]
        buffers = [part for *_, payload, head, _ in batch for part in (head, payload)]
        total = sum(len(b) for b in buffers)
        try:
            written = os.pwritev(self._fds[name], buffers, start)
            if written != total:
                raise OSError(f"short write to pack {name}")
        except OSError as exc:
            # The size stays where it was: the next append overwrites whatever part got there.
            for n, *_ in batch:
                results[n] = exc
            return
        self._size[name] = self._scanned[name] = start + total
        offset = start
        for at, (n, data_id, index, payload, head, digest) in enumerate(batch):
            offset += len(head) + len(payload)
            rec = PackedRecord(name, offset - len(payload), len(payload), digest)
            self._apply(kind, data_id, index, rec, targets[at] if targets else None)
            results[n] = rec

    def remove(self, data_id: str, index: int) -> int:
        """Drop a shard with a tombstone naming its record (not flushed: a lost one leaves an
        orphan the sweep finds)."""
        with self._lock:
            rec = self.lookup(data_id, index)
            if rec is not None and self._unlinked(rec.pack):
                # Compacted away by another process: its record lives on in that process's pack.
                self.refresh()
                rec = self._index.get((data_id, index))
            if rec is None:
                return -1
            self._append(_DEL, data_id, index, encode_target(rec), False)
            self._drop_copy((data_id, index))
            return rec.length

    def remove_many(self, keys: Sequence[tuple[str, int]]) -> list[int]:
        """`remove` of several shards (the garbage collector's batch): their tombstones go to the
        active pack in one write, and the other processes' packs are read again once at most.
        One thread trip and one lock per drive for a batch: removing shard by shard, each in a
        trip of its own, cost the collector more CPU than the PUT that retired the blob had.
        Per key the removed record's length; -1 if there was none (or its tombstone failed)."""
        sizes = [-1] * len(keys)
        with self._lock:
            self._load()
            found: list[tuple[int, str, int, PackedRecord]] = []
            missing: list[int] = []
            unlinked: dict[str, bool] = {}
            seen: set[tuple[str, int]] = set()
            for n, (data_id, index) in enumerate(keys):
                if (data_id, index) in seen:
                    continue  # named twice: removed (and counted) once
                seen.add((data_id, index))
                rec = self._index.get((data_id, index))
                if rec is not None:
                    if rec.pack not in unlinked:
                        unlinked[rec.pack] = self._unlinked(rec.pack)
                    if unlinked[rec.pack]:  # compacted away by another process: look again below
                        rec = None
                if rec is None:
                    missing.append(n)
                else:
                    found.append((n, data_id, index, rec))
            if missing:
                self.refresh()  # written by another process since this index last looked
                for n in missing:
                    data_id, index = keys[n]
                    rec = self._index.get((data_id, index))
                    if rec is not None:
                        found.append((n, data_id, index, rec))
            try:
                key = self._writing_key()
            except OSError:
                return sizes
            results: list[PackedRecord | OSError | None] = [None] * len(keys)
            batch: list[_Pending] = []
            targets: list[tuple[str, int] | None] = []
            pending = 0
            for n, data_id, index, rec in found:
                payload = encode_target(rec)
                head, digest = record_head(_DEL, data_id, index, payload, key)
                size = len(head) + len(payload)
                name = self._active
                if len(batch) == _MAX_WRITE_RECORDS:  # within one writev's limit, as in `append_many`
                    self._write_batch(batch, results, _DEL, targets)
                    batch, targets, pending = [], [], 0
                if name is None or (
                    self._size[name] + pending + size > self.rotate_bytes and self._size[name] + pending > 0
                ):
                    self._write_batch(batch, results, _DEL, targets)
                    batch, targets, pending = [], [], 0
                    try:
                        self._open_new()
                    except OSError:
                        continue  # left behind (-1), as a failed `remove` leaves it: an orphan for fsck
                batch.append((n, data_id, index, payload, head, digest))
                targets.append((rec.pack, rec.offset))
                pending += size
            self._write_batch(batch, results, _DEL, targets)
            for n, data_id, index, rec in found:
                if isinstance(results[n], PackedRecord):
                    self._drop_copy((data_id, index))
                    sizes[n] = rec.length
        return sizes

    def _drop_copy(self, key: tuple[str, int]) -> None:
        """The record under `key` was removed or replaced: so is compaction's copy of it, if any."""
        copy = self._copies.pop(key, None)
        if copy is not None:
            self._append(_DEL, key[0], key[1], encode_target(copy), False)

    def _unlinked(self, name: str) -> bool:
        fd = self._fds.get(name)
        try:
            return fd is None or os.fstat(fd).st_nlink == 0
        except OSError:
            return True

    def _append(self, kind: int, data_id: str, index: int, payload: bytes, sync: bool) -> PackedRecord:
        with self._lock:
            self._load()
            head, digest = record_head(kind, data_id, index, payload, self._writing_key())
            size = len(head) + len(payload)
            name = self._active
            if name is None or self._size[name] + size > self.rotate_bytes and self._size[name] > 0:
                name = self._open_new()
            fd = self._fds[name]
            start = self._size[name]
            written = os.pwritev(fd, [head, payload], start)
            if written != size:
                raise OSError(f"short write to pack {name}")
            self._size[name] = self._scanned[name] = start + size
            rec = PackedRecord(name, start + len(head), len(payload), digest)
            target = None
            if kind == _DEL and len(payload) > _TARGET.size:
                target = (payload[_TARGET.size :].decode(), _TARGET.unpack_from(payload)[0])
            self._apply(kind, data_id, index, rec, target)
            if sync:
                os.fdatasync(fd)
            return rec

    def _goes_direct(self, payload: bytes) -> bool:
        return self.direct_min is not None and len(payload) >= self.direct_min

    def _append_direct(self, data_id: str, index: int, payload: bytes, sync: bool) -> PackedRecord | None:
        """Append a big record to this process's direct pack with O_DIRECT: its bytes go from an
        aligned buffer to the disk, not through freshly allocated page-cache pages (see
        DIRECT_MIN_PAYLOAD). The record starts on a DIRECT_ALIGN boundary and is followed by zeros
        up to the next one, which scans skip. Only ever written past the end of the file, so no
        read can have cached a page of it before it was whole. Durable as any record: `sync`, or
        the drive's flush barrier (the pack's new size is metadata the flush writes).
        None when the filesystem refuses O_DIRECT: this drive writes buffered from then on."""
        with self._lock:
            head, digest = record_head(_PUT, data_id, index, payload, self._writing_key())
            size = len(head) + len(payload)
            padded = _align_up(size)
            name = self._direct
            if name is None or self._size[name] + padded > self.rotate_bytes and self._size[name] > 0:
                name = self._open_direct()
                if name is None:
                    return None
            fd = self._direct_fd
            assert fd is not None
            start = self._size[name]
            buf = _DIRECT_BUFFERS.take(padded)
            try:
                with memoryview(buf) as view:
                    view[: len(head)] = head
                    view[len(head) : size] = payload
                    view[size:padded] = bytes(padded - size)
                    written = os.pwrite(fd, view[:padded], start)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise  # the size stays: the next append overwrites whatever part got there
                self._stop_direct()  # alignment refused: nothing was written
                return None
            finally:
                _DIRECT_BUFFERS.give(buf)
            if written != padded:
                raise OSError(f"short write to pack {name}")
            self._size[name] = self._scanned[name] = start + padded
            rec = PackedRecord(name, start + len(head), len(payload), digest)
            self._apply(_PUT, data_id, index, rec)
            if sync:
                os.fdatasync(fd)
            return rec

    def _open_direct(self) -> str | None:
        """A new direct pack (this process's, as `_open_new`'s), or None if O_DIRECT is refused."""
        self._close_direct()
        name = self._new_pack_name()
        path = self.dir / name
        self.dir.mkdir(exist_ok=True)
        try:
            direct_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_DIRECT, 0o644)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # created before O_DIRECT was refused
            self._stop_direct()
            return None
        try:
            self._track_new(name, os.open(path, os.O_RDWR))  # reads go through the page cache
        except BaseException:
            os.close(direct_fd)
            raise
        self._direct, self._direct_fd = name, direct_fd
        return name

    def _close_direct(self) -> None:
        """Stop appending to the direct pack (it stays indexed and readable)."""
        if self._direct_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._direct_fd)
        self._direct = self._direct_fd = None

    def _stop_direct(self) -> None:
        self._close_direct()
        self.direct_min = None

    def _writing_key(self) -> bytes:
        if self._key is None:
            # The folder may be missing: a drive that was read-only or full when this process
            # started could not make it; the first write after it recovers makes folder and key.
            self.dir.mkdir(parents=True, exist_ok=True)
            self._key = load_pack_key(self.dir)
        if self._key is None:
            raise OSError(f"no record key in {self.dir} (read-only drive or a damaged {KEY_FILE})")
        return self._key

    @staticmethod
    def _new_pack_name() -> str:
        return f"pack-{time.time_ns():020d}-p{os.getpid()}-{secrets.token_hex(4)}.tsp"  # names sort by age

    def _open_new(self) -> str:
        name = self._new_pack_name()
        self.dir.mkdir(exist_ok=True)
        self._track_new(name, os.open(self.dir / name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644))
        self._active = name
        return name

    def _track_new(self, name: str, fd: int) -> None:
        """Index a pack this process just made (empty): its descriptor, sizes and live bytes."""
        self._fds[name] = fd
        self._size[name] = self._scanned[name] = 0
        self._live.setdefault(name, 0)

    def rotate(self) -> None:
        with self._lock:
            self._active = None
            self._close_direct()

    # -- compaction -------------------------------------------------------------------------

    def compact(self, min_dead_ratio: float = 0.5, bytes_per_second: float = 64 << 20) -> int:
        """Rewrite packs at least `min_dead_ratio` dead, and legacy (unkeyed) packs whatever their
        dead share (a migration: their records come back keyed); returns the bytes of packs removed."""
        self._close_retired()
        with self._lock:
            self._load()
            self.refresh()
            victims = [
                name
                for name, size in self._size.items()
                if size > 0
                and (1 - self._live.get(name, 0) / size >= min_dead_ratio or name in self._legacy)
                and self._ours_or_orphan(name)
            ]
        reclaimed = 0
        for name in victims:
            reclaimed += self._compact_one(name, bytes_per_second)
        return reclaimed

    def _ours_or_orphan(self, name: str) -> bool:
        """Compact only this process's packs or those of a process that is gone (never a live appender)."""
        from erasure.shard_store import tmp_owner_dead  # the same pid test as temporary files

        pid_tag = name.split("-")[2]
        return pid_tag == f"p{os.getpid()}" or tmp_owner_dead(f"x.{pid_tag}.tmp", time.time())

    def _compact_one(self, name: str, bytes_per_second: float) -> int:
        with self._lock:
            if name == self._active:
                self._active = None  # stop appending to it; new records go to a fresh pack
            if name == self._direct:
                self._close_direct()
            fd = self._fd(name)
            if fd is None:
                return 0
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # one compactor per pack across processes
            except OSError:
                return 0
            live = [(key, rec) for key, rec in self._index.items() if rec.pack == name]
            # Its tombstones of records in other packs still have work to do: a scan that met such
            # a record with no tombstone anywhere would bring it back. They are copied too.
            found, _ = scan_pack(fd, key=self._key)
            tombstones = [
                (data_id, index, encode_target(PackedRecord(target[0], target[1], 0, 0)))
                for kind, data_id, index, rec in found
                if kind == _DEL
                and (target := read_target(fd, PackedRecord(name, rec.offset, rec.length, rec.digest)))
                and target[0] != name
                and (self.dir / target[0]).exists()
            ]
        for data_id, index, payload in tombstones:
            with self._lock:
                self._append(_DEL, data_id, index, payload, False)
        moved: list[tuple[tuple[str, int], PackedRecord, PackedRecord]] = []
        began = time.monotonic()
        copied = 0
        try:
            for key, rec in live:
                payload = os.pread(fd, rec.length, rec.offset)
                if not rec.intact(payload):
                    continue  # damaged: left where it is for heal to rewrite (the pack stays meanwhile)
                new = self._copy(key, rec, payload)
                if new is None:
                    continue  # removed or replaced since the list was taken
                moved.append((key, rec, new))
                copied += rec.length
                ahead = copied / bytes_per_second - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)  # throttled: compaction must not starve foreground writes
        except BaseException:
            with self._lock, contextlib.suppress(OSError):  # best effort: the copies must not come back
                for key, _, new in moved:
                    if self._copies.get(key) == new:
                        del self._copies[key]
                        self._append(_DEL, key[0], key[1], encode_target(new), False)
            raise
        with self._lock:
            for new_name in {new.pack for _, _, new in moved}:
                os.fdatasync(self._fds[new_name])
            self.refresh()  # tombstones other processes wrote while we copied
            # Verify the copies, then repoint only records nobody replaced or removed meanwhile;
            # a copy not taken is removed by name, so that no later scan indexes it.
            for key, old, new in moved:
                if self._copies.get(key) != new:
                    continue  # removed or replaced meanwhile: its copy is tombstoned already
                del self._copies[key]
                if self._index.get(key) == old and new.intact(self.read(new)):
                    self._index[key] = new
                    self._live[name] -= old.length
                    self._live[new.pack] = self._live.get(new.pack, 0) + new.length
                else:
                    self._append(_DEL, key[0], key[1], encode_target(new), False)
            if any(rec.pack == name for rec in self._index.values()):
                return 0  # something could not move (a corrupt record waits for heal)
            size = self._size.pop(name, 0)
            self._live.pop(name, None)
            self._scanned.pop(name, None)
            self._killed.pop(name, None)
            del self._fds[name]
            self._legacy.discard(name)
            os.unlink(self.dir / name)
            self._retired.append((time.monotonic(), fd))
            return size

    def _copy(self, key: tuple[str, int], rec: PackedRecord, payload: bytes) -> PackedRecord | None:
        """Append a live record's payload without touching the index (compaction swaps it in later);
        None if `rec` is no longer the key's record (a copy of it would be nobody's)."""
        with self._lock:
            if self._index.get(key) != rec:
                return None
            record = encode_record(_PUT, key[0], key[1], payload, self._writing_key())  # re-tagged
            name = self._active
            if name is None or self._size[name] + len(record) > self.rotate_bytes and self._size[name] > 0:
                name = self._open_new()
            start = self._size[name]
            if os.pwrite(self._fds[name], record, start) != len(record):
                raise OSError(f"short write to pack {name}")
            self._size[name] = self._scanned[name] = start + len(record)
            copy = PackedRecord(
                name, start + len(record) - len(payload), len(payload), xxhash.xxh3_64_intdigest(payload)
            )
            self._copies[key] = copy
            return copy

    def _close_retired(self, grace: float = RETIRE_GRACE) -> None:
        with self._lock:
            now = time.monotonic()
            keep = []
            for when, fd in self._retired:
                if now - when >= grace:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                else:
                    keep.append((when, fd))
            self._retired = keep
