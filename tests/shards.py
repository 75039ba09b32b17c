"""Shards on disk as a fault test sees them: shard files and records in pack files alike.

Small shards live as records in pack files by default (erasure/pack.py), bigger ones as files of
their own (erasure/shard_store.py). Fault tests that corrupt, remove or count shards go through
`shards_under()` so that the fault lands on the real bytes either way:

- `corrupt(at)` flips a byte of the shard's bytes (the file's, or the record's payload in its
  pack): a reader finds the checksum wrong, fsck --verify reports it, heal rewrites it.
- `destroy()` removes the shard's bytes: a file is unlinked; a record is overwritten with zeros,
  header and payload, so that the drive's next scan of the pack (a restart) skips it and a server
  running now finds it corrupt when it reads it. (A running server's index still lists the record
  until then: tests that need "absent" to a live server restart it, or turn packs off.)

The record layout is read with erasure.pack's own scanner, the one a drive rebuilds its index
with, and replayed the same way (a later record supersedes an earlier one; a tombstone removes the record it
names, whichever of the two is met first).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import xxhash

from erasure.pack import PACK_DIR, load_pack_key, read_target, record_header_size, scan_pack

PACK_KIND_PUT = 1


@dataclass(frozen=True)
class Shard:
    domain: Path  # the drive's directory
    data_id: str
    index: int
    file: Path  # the shard file, or the pack holding the record
    offset: int  # of the shard's bytes in `file` (0 for a shard file)
    length: int
    record_start: int = -1  # where the record begins in its pack (-1: a shard file)

    @property
    def packed(self) -> bool:
        return self.record_start >= 0

    @property
    def domain_id(self) -> str:
        """The domain id of the embedded layout (<tier>-<node>-<drive>, or <tier>-<node> for one drive)."""
        return "-".join(self.domain.parts[-3:])

    def read(self) -> bytes:
        with open(self.file, "rb") as f:
            f.seek(self.offset)
            return f.read(self.length)

    def corrupt(self, at: int = -50, mask: int = 0xFF) -> None:
        """Flip the bits of `mask` in byte `at` of the shard's bytes (negative: from its end)."""
        pos = self.offset + (at if at >= 0 else self.length + at)
        with open(self.file, "r+b") as f:
            f.seek(pos)
            byte = f.read(1)[0]
            f.seek(pos)
            f.write(bytes([byte ^ mask]))

    def overwrite(self, data: bytes, at: int = 0) -> None:
        with open(self.file, "r+b") as f:
            f.seek(self.offset + at)
            f.write(data)

    def destroy(self) -> None:
        """The shard's bytes are gone: the file unlinked, or the whole record zeroed in its pack."""
        if not self.packed:
            self.file.unlink()
            return
        with open(self.file, "r+b") as f:
            f.seek(self.record_start)
            f.write(b"\0" * (self.offset + self.length - self.record_start))


def _pack_shards(domain: Path) -> list[Shard]:
    packs = domain / PACK_DIR
    try:
        names = sorted(n for n in os.listdir(packs) if n.endswith(".tsp"))
    except FileNotFoundError:
        return []
    live: dict[tuple[str, int], Shard] = {}
    killed: set[tuple[str, int]] = set()  # (pack, payload offset) named by a tombstone
    pack_key = load_pack_key(packs, create=False)
    for name in names:
        path = packs / name
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue  # compacted away since the listing: its records live on in a newer pack
        try:
            records, _ = scan_pack(fd, key=pack_key)
            starts: dict[int, int] = {}  # the record's header: keyed, or legacy (a pack written before keys)
            targets: dict[int, tuple[str, int] | None] = {}
            for kind, data_id, _, rec in records:
                keyed = os.pread(fd, 4, rec.offset - record_header_size(data_id, True)) == b"TSPK"
                starts[rec.offset] = rec.offset - record_header_size(data_id, keyed)
                if kind != PACK_KIND_PUT:
                    targets[rec.offset] = read_target(fd, rec)
        finally:
            os.close(fd)
        for kind, data_id, index, rec in records:
            key = (data_id, index)
            current = live.get(key)
            if kind == PACK_KIND_PUT:
                if (name, rec.offset) not in killed:
                    live[key] = Shard(
                        domain, data_id, index, path, rec.offset, rec.length, starts[rec.offset]
                    )
                continue
            target = targets[rec.offset]
            if target is None:  # a tombstone that names no record: whatever the key names now
                live.pop(key, None)
                continue
            killed.add(target)
            if current is not None and (current.file.name, current.offset) == target:
                del live[key]
    return list(live.values())


def _file_shards(domain: Path) -> list[Shard]:
    found = []
    for top in domain.iterdir():
        if not top.is_dir() or len(top.name) != 2:
            continue
        for mid in top.iterdir():
            if not mid.is_dir():
                continue
            for path in mid.iterdir():
                data_id, _, index = path.name.rpartition(".")
                if not (data_id and index.isdigit()):
                    continue
                try:
                    size = path.stat().st_size
                except FileNotFoundError:
                    continue  # removed since the listing
                found.append(Shard(domain, data_id, int(index), path, 0, size))
    return found


def domains_under(root: Path) -> list[Path]:
    """Drive directories under `root`: those holding shard fan-out directories or a pack directory."""
    found = set()
    for packs in root.rglob(PACK_DIR):
        found.add(packs.parent)
    for path in root.rglob("*"):
        if path.is_file() and ".tmp" not in path.parts and PACK_DIR not in path.parts:
            data_id, _, index = path.name.rpartition(".")
            if (
                data_id
                and index.isdigit()
                and len(path.parent.name) == 2
                and len(path.parent.parent.name) == 2
            ):
                found.add(path.parents[2])
    return sorted(found)


def shards_under(root: Path, data_id: str | None = None) -> list[Shard]:
    """Every committed shard under `root` (a data dir, a tier's or a node's directory), packed or not."""
    found = []
    for domain in domains_under(root):
        found += _file_shards(domain) + _pack_shards(domain)
    if data_id is not None:
        found = [s for s in found if s.data_id == data_id]
    return sorted(found, key=lambda s: (s.data_id, s.index, str(s.domain)))


def count_shards(root: Path) -> int:
    return len(shards_under(root))


def plant(beside: Shard, data_id: str, age: float) -> Path:
    """A copy of a real shard file under a data id no catalog row names, `age` seconds old: an
    orphan, as a crash between writing a shard and committing its row leaves one."""
    fan = xxhash.xxh3_64_hexdigest(data_id.encode())
    path = beside.domain / fan[:2] / fan[2:4] / f"{data_id}.0"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(beside.read())
    os.utime(path, (time.time() - age, time.time() - age))
    return path
