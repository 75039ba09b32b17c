"""The consistency check behind `tierstore admin fsck`: do the catalog and the stored bytes agree?

Three questions, asked of a live store (no need to stop it):
- **dangling**: a piece of a blob the catalog references (an object, a restore copy, a part of an
  unfinished upload) is not where the catalog says; **lost** when fewer than k pieces are left.
  With `verify`, every block's checksum is read too (**corrupt**).
- **orphans**: a stored piece no catalog row names. Not every unnamed piece is an orphan: a PUT
  in flight has durable shards before its catalog commit, a heal or rebalance writes the new
  shard before it swaps the location, and retired data waits out its readers' grace in the
  garbage tables. So only pieces older than `orphan_age` (default an hour: no write is pending
  that long) and in no garbage queue are orphans; the younger ones are only counted.
- pieces on offline domains are neither: they are reported as unreachable.

Order matters for a live store: the catalog is walked *before* the backends are listed, and a
piece is called an orphan only if, when we look at it, the catalog still does not reference its
blob. A blob committed meanwhile is young (not an orphan); one retired meanwhile sits in the
garbage table (not an orphan). A dangling piece is checked twice, the second time against the
catalog as it is then, so an object overwritten during the walk is not reported.

`repair` hands the orphans to the existing shard collector (catalog `shard_garbage`, removed by
`Rebalancer.collect_shard_garbage`, which spares any piece a location names again): it never
deletes referenced data, and no file is unlinked here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tiering.backend import BackendError, DataCheck, StoredData
from tiering.errors import TieringError

if TYPE_CHECKING:
    from tiering.store import ObjectStore

ORPHAN_AGE = 3600.0  # an unnamed piece younger than this may belong to a write in flight
LIST_LIMIT = 1000  # entries of each kind listed in a report (the counts are always complete)
PAGE = 256
MAX_COLLECT_BATCHES = 10_000  # of the shard collector's, for --repair: 2.5 million entries


@dataclass
class FsckReport:
    """What one check found; `to_json` is the admin API's answer."""

    verify: bool
    repair: bool
    orphan_age: float
    started: float = field(default_factory=time.time)
    seconds: float = 0.0
    blobs: int = 0  # referenced blobs checked
    pieces_referenced: int = 0
    pieces_listed: int = 0
    unreachable: int = 0  # referenced pieces on offline domains (not checked)
    young_unreferenced: int = 0  # unnamed pieces younger than orphan_age (writes in flight, sweeps due)
    queued_garbage: int = 0  # unnamed pieces already queued for a collector
    repaired: int = 0  # orphan pieces the collector removed
    dangling: list[dict[str, Any]] = field(default_factory=list)
    lost: list[dict[str, Any]] = field(default_factory=list)
    corrupt: list[dict[str, Any]] = field(default_factory=list)
    orphans: list[dict[str, Any]] = field(default_factory=list)
    offline_domains: list[str] = field(default_factory=list)
    unlisted_tiers: list[str] = field(default_factory=list)  # backends that cannot list their data

    @property
    def clean(self) -> bool:
        return not self.dangling and not self.lost and not self.corrupt and len(self.orphans) <= self.repaired

    def to_json(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "verify": self.verify,
            "repair": self.repair,
            "orphan_age": self.orphan_age,
            "started": self.started,
            "seconds": round(self.seconds, 3),
            "blobs": self.blobs,
            "pieces_referenced": self.pieces_referenced,
            "pieces_listed": self.pieces_listed,
            "unreachable": self.unreachable,
            "young_unreferenced": self.young_unreferenced,
            "queued_garbage": self.queued_garbage,
            "repaired": self.repaired,
            "counts": {
                "dangling": len(self.dangling),
                "lost": len(self.lost),
                "corrupt": len(self.corrupt),
                "orphans": len(self.orphans),
            },
            "dangling": self.dangling[:LIST_LIMIT],
            "lost": self.lost[:LIST_LIMIT],
            "corrupt": self.corrupt[:LIST_LIMIT],
            "orphans": self.orphans[:LIST_LIMIT],
            "offline_domains": self.offline_domains,
            "unlisted_tiers": self.unlisted_tiers,
        }


@dataclass(frozen=True)
class _Reference:
    """One blob the catalog references, and who references it."""

    tier: str
    stored: StoredData
    bucket: str
    key: str
    upload_id: str | None = None

    def owner(self) -> dict[str, Any]:
        owner = {"tier": self.tier, "bucket": self.bucket, "key": self.key, "data_id": self.stored.data_id}
        if self.upload_id:
            owner["upload_id"] = self.upload_id
        return owner


async def fsck(
    store: ObjectStore, *, verify: bool = False, repair: bool = False, orphan_age: float = ORPHAN_AGE
) -> FsckReport:
    """Check the catalog against every tier's stored data; with `repair`, collect the orphans."""
    report = FsckReport(verify=verify, repair=repair, orphan_age=orphan_age)
    named: dict[str, set[tuple[str, int]]] = {}  # data id -> (place, piece) the catalog names
    async for ref in _references(store):
        tier = store.tiers.get(ref.tier)
        if tier is None:
            continue
        named.setdefault(ref.stored.data_id, set()).update(_pieces(ref.stored))
        report.blobs += 1
        report.pieces_referenced += len(_pieces(ref.stored))
        check = await _check(tier.backend, ref.stored, verify)
        if check.missing or check.lost:
            # Confirm against the catalog as it is now: an overwrite during the walk is no fault.
            current = await asyncio.to_thread(store.catalog.stored_blob, ref.stored.data_id)
            if current is not None and current.location != ref.stored.location:
                check = await _check(tier.backend, current, verify)
            elif current is None and not await _still_referenced(store, ref):
                continue
        report.unreachable += len(check.unreachable)
        if check.lost:
            report.lost.append(ref.owner())
        for piece, place in check.missing:
            report.dangling.append({**ref.owner(), "shard": piece, "domain": place})
        if check.corrupt:
            report.corrupt.append({**ref.owner(), "shards": check.corrupt})
    await _find_orphans(store, report, named)
    if repair and report.orphans:
        report.repaired = await _collect(store, report.orphans)
    report.seconds = time.time() - report.started
    return report


async def _check(backend: Any, stored: StoredData, verify: bool) -> DataCheck:
    try:
        return await backend.check(stored, verify=verify)
    except BackendError:
        return DataCheck(lost=True)


def _pieces(stored: StoredData) -> set[tuple[str, int]]:
    shards = stored.location.get("shards") or []
    return {(place, piece) for piece, place in enumerate(shards) if place is not None}


async def _still_referenced(store: ObjectStore, ref: _Reference) -> bool:
    """Is this blob still part of its object or upload (a restore copy has no blobs-row lookup)?"""
    return await asyncio.to_thread(store.catalog.is_referenced, ref.stored.data_id) and any(
        r.stored.data_id == ref.stored.data_id for r in await _object_references(store, ref.bucket, ref.key)
    )


async def _object_references(store: ObjectStore, bucket: str, key: str) -> list[_Reference]:
    try:
        record = await store.head_object(bucket, key)
    except TieringError:  # gone meanwhile: nothing to compare with
        return []
    refs = [_Reference(record.tier, s.stored, bucket, key) for s in record.segments]
    if record.restore is not None:
        refs += [_Reference(record.restore.tier, s.stored, bucket, key) for s in record.restore.segments]
    return refs


async def _references(store: ObjectStore) -> AsyncIterator[_Reference]:
    """Every blob the catalog references: objects' data, restore copies, unfinished uploads' parts."""
    catalog = store.catalog
    bucket, key = "", ""
    while True:
        page = await asyncio.to_thread(catalog.objects_after, bucket, key, PAGE)
        if not page:
            break
        for record in page:
            for segment in record.segments:
                yield _Reference(record.tier, segment.stored, record.bucket, record.key)
            if record.restore is not None:
                for segment in record.restore.segments:
                    yield _Reference(record.restore.tier, segment.stored, record.bucket, record.key)
        bucket, key = page[-1].bucket, page[-1].key
    for b in await asyncio.to_thread(catalog.list_buckets):
        # Noncurrent versions keep their data (tiering.catalog.versions): it is checked too.
        cursor: tuple[str, int] | None = None
        while True:
            versions, cursor = await asyncio.to_thread(catalog.noncurrent_versions, b.name, cursor, PAGE)
            for version in versions:
                record = version.record
                for segment in record.segments:
                    yield _Reference(record.tier, segment.stored, record.bucket, record.key)
                if record.restore is not None:  # RestoreObject by versionId: the version's own copy
                    for segment in record.restore.segments:
                        yield _Reference(record.restore.tier, segment.stored, record.bucket, record.key)
            if cursor is None:
                break
        key_marker, upload_marker = "", ""
        while True:
            uploads = await asyncio.to_thread(
                catalog.list_uploads,
                b.name,
                key_marker=key_marker,
                upload_id_marker=upload_marker,
                limit=PAGE,
            )
            if not uploads:
                break
            for upload in uploads:
                for part in await asyncio.to_thread(catalog.list_parts, upload.upload_id):
                    yield _Reference(upload.tier, part.stored, upload.bucket, upload.key, upload.upload_id)
            key_marker, upload_marker = uploads[-1].key, uploads[-1].upload_id


async def _find_orphans(
    store: ObjectStore, report: FsckReport, named: dict[str, set[tuple[str, int]]]
) -> None:
    """Listed pieces that no reference names, older than the safe age and in no garbage queue."""
    catalog = store.catalog
    for name, tier in store.tiers.items():
        if not tier.backend.lists_data:
            report.unlisted_tiers.append(name)
            continue
        files, offline = await tier.backend.list_data()
        report.offline_domains += offline
        report.pieces_listed += len(files)
        now = time.time()
        for f in files:
            if (f.place, f.piece) in named.get(f.data_id, ()):
                continue
            if now - f.mtime < report.orphan_age:
                report.young_unreferenced += 1
                continue
            # Asked now, after the listing: a blob committed or retired since the walk counts.
            referenced = f.data_id in named or await asyncio.to_thread(catalog.is_referenced, f.data_id)
            if (f.place, f.piece) in await asyncio.to_thread(catalog.shard_garbage_of, f.data_id):
                report.queued_garbage += 1
                continue
            if referenced and f.data_id not in named:
                report.queued_garbage += 1  # retired (garbage table) or committed since the walk
                continue
            if not await tier.backend.still_stored(f):
                # Collected since the listing: the garbage collector deletes a retired blob's
                # pieces, then forgets its row, so a piece listed before and asked about after
                # looked unreferenced (hundreds of such "orphans" with a collection backlog).
                continue
            report.orphans.append(
                {
                    "tier": name,
                    "domain": f.place,
                    "data_id": f.data_id,
                    "shard": f.piece,
                    "size": f.size,
                    "age_s": round(now - f.mtime),
                    "referenced_blob": referenced,
                }
            )


async def _collect(store: ObjectStore, orphans: list[dict[str, Any]]) -> int:
    """Queue the orphans for the shard collector, due now, and let it run until they are gone."""
    entries = [(o["data_id"], o["tier"], o["domain"], int(o["shard"])) for o in orphans]
    await asyncio.to_thread(store.catalog.add_shard_garbage, entries, time.time())
    # The collector takes a bounded batch per call, oldest first, so other entries queued before
    # these (a heal's, a rebalance's) come first: batches until one settles nothing. (Stopping at
    # the first batch that deleted no file left the orphans queued behind entries whose files
    # were already gone.) Bounded: a queue that refills faster than it drains cannot hold fsck.
    for _ in range(MAX_COLLECT_BATCHES):
        if not await store.rebalancer.collect_shard_garbage():
            break
    # Collected = no longer queued (a piece on a domain that went offline meanwhile stays queued).
    collected = 0
    for data_id, _tier, domain, shard in entries:
        if (domain, shard) not in await asyncio.to_thread(store.catalog.shard_garbage_of, data_id):
            collected += 1
    return collected
