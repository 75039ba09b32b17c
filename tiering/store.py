"""The ObjectStore facade: the one namespace over all tiers that `server` and `lifecycle` use.

It turns "put these bytes under this key" into: stream to a tier backend while hashing (one pass)
→ data durable → one atomic catalog commit. Reads look the object up once, pin its blobs for the
duration of the read, and stream the byte range from the backend. Retired data (overwritten,
deleted, aborted) is deleted by a collector once no reader in this process still holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import logging
import os
import secrets
import shutil
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import ParamSpec, TypeVar

from tiering import domains, nodes
from tiering.backend import (
    BackendError,
    CapacityExceeded,
    DataNotFound,
    DataReader,
    DataUnavailable,
    DataWriter,
    StoredData,
    WriteQuorumLost,
)
from tiering.catalog import RETIRE_GRACE_SECONDS, Catalog
from tiering.catalog.versions import DeleteOutcome, VersionPage
from tiering.changes import ChangeSignal
from tiering.checksums import COMPOSITE, FULL_OBJECT, BodyDigests, combine_full_object, combine_part_checksums
from tiering.conditions import DeleteCondition, write_condition
from tiering.data_ids import new_data_id
from tiering.encryption import SSE_C, SSE_S3, EncryptionRequest, ObjectEncryption
from tiering.encryption.chunks import (
    HEADER_BYTES,
    ChunkAuthError,
    ChunkOpener,
    ChunkSealer,
    open_blob,
    parse_header,
    sealed_range,
    sealed_size,
)
from tiering.encryption.descriptor import BUCKET_DEFAULT
from tiering.encryption.keys import KeyService, KeySettings
from tiering.errors import (
    BucketNotFound,
    CatalogUnavailable,
    ChecksumMismatch,
    ChecksumTypeMismatch,
    ConditionalConflict,
    DataUnreadable,
    InsufficientCapacity,
    InvalidPart,
    InvalidPartOrder,
    MoveVerificationFailed,
    NotArchived,
    ObjectArchived,
    ObjectDataLost,
    ObjectNotFound,
    PartTooSmall,
    PreconditionFailed,
    RestoreInProgress,
    SSECustomerKeyRequired,
    SSENotApplicable,
    TieringError,
    TierUnavailable,
    UploadNotFound,
    VersionIsDeleteMarker,
    VersionNotFound,
)
from tiering.heat import decayed
from tiering.listing_readahead import ListingReadahead, PageArgs
from tiering.maintenance import Maintenance
from tiering.object_lock import LockConfiguration
from tiering.peers import (
    CHECKPOINT_INTERVAL,
    PROCESS_GRACE,
    PROCESS_HEARTBEAT,
    Checkpoint,
    LiveProcess,
    ProcessRegistry,
    ProcessRow,
    host_id,
    judged_elsewhere,
    locked_directory,
    owner_of,
)
from tiering.rebalance import Rebalancer
from tiering.records import (
    BucketRecord,
    ListPage,
    MoveRecord,
    ObjectMeta,
    ObjectRecord,
    PartRecord,
    RestoreState,
    Segment,
    UploadRecord,
)
from tiering.small_writes import MAX_BODY_BYTES as SMALL_WRITE_MAX_BYTES
from tiering.small_writes import SmallWrite, SmallWriteCommitter
from tiering.tiers import COLD, HOT, Tier, tier_for_storage_class

log = logging.getLogger("tierstore.tiering")

_Rendered = TypeVar("_Rendered")  # what a caller of `render_listing` makes of a page
_Committed = TypeVar("_Committed")  # what a pending write's commit returns (object or part record)
_P = ParamSpec("_P")
_R = TypeVar("_R")
_Result = TypeVar("_Result")
Throttle = Callable[[int], Awaitable[None]]  # awaited with each chunk's size: a mover's brake
HASH_BATCH = 1 << 20  # hash and write in 1 MiB pieces: few thread hops, bounded memory
# Below this, hashing a small body on the event loop costs less than a trip to a worker thread.
HASH_OFFLOAD_BYTES = 256 * 1024
MIN_PART_SIZE = 5 * 1024 * 1024
MAX_PARTS = 10_000
COLLECT_INTERVAL = 2.0
GARBAGE_BATCH = 256  # retired blobs taken from the catalog at a time
# Blobs written this long before the last checkpoint are surely committed or already collected.
ORPHAN_SLACK = 600.0
# With other processes alive, a blob they wrote may be in flight (not yet committed) for a while:
# orphans of a dead process are swept only once everything in its window is this old.
PEER_ORPHAN_AGE = 3600.0
# One survivor at a time sweeps a dead process (a lease per dead process); one that dies midway
# leaves it to another after this long.
ORPHAN_LEASE_TTL = 600.0
COLLECTOR_LEASE = "garbage-collector"
COLLECTOR_LEASE_TTL = 30.0
# How long a completed upload is remembered, so that a re-sent CompleteMultipartUpload (a client
# retrying after a timeout) gets the first answer again; after that it is NoSuchUpload, as on S3.
COMPLETED_UPLOAD_MEMORY = 24 * 3600.0
# Reads held longer than a third of the retire grace are published to the catalog (read_pins),
# checked every sixth of it, so that the collector — possibly in another worker — sees them well
# before the grace of a blob they still stream runs out. Shorter reads cost nothing: the grace
# covers them. A published pin is renewed while held and lapses if its process dies.
PIN_PUBLISH_AFTER = RETIRE_GRACE_SECONDS / 3
PIN_PUBLISH_INTERVAL = max(0.1, RETIRE_GRACE_SECONDS / 6)
PIN_TTL = max(10.0, 3 * RETIRE_GRACE_SECONDS)


def new_upload_id() -> str:
    """URL-safe, and never starting with "-": aws-cli (argparse) reads `--upload-id -AXR...` as a
    missing value, so one upload in 64 could not be continued from the command line."""
    while (upload_id := secrets.token_urlsafe(24)).startswith("-"):
        pass
    return upload_id


def _write_refused(tier: str, exc: BackendError) -> TieringError:
    if isinstance(exc, CapacityExceeded):
        return InsufficientCapacity(f"tier {tier}: {exc}")
    return TierUnavailable(f"tier {tier}: {exc}")


class PendingWrite:
    """Bytes on their way into a tier: hashed and written in one pass, invisible until committed.

    A body of at most `HASH_BATCH` bytes is held whole, hashed on the event loop when small, and
    written by the commit itself: one worker-thread trip stores it durably and then commits the
    catalog row (`TierBackend.write_whole`), instead of a trip for every step. A larger body goes
    on in batches: each is hashed in a thread while the backend writes it, and while the next one
    arrives (one batch in flight, so memory stays bounded and bytes stay in order).
    """

    def __init__(
        self,
        store: ObjectStore,
        tier: str,
        data_id: str,
        size_hint: int | None,
        checksum_algorithm: str | None,
        sealing: tuple[ObjectEncryption, bytes, int] | None = None,
    ) -> None:
        self._store = store
        # Encryption at rest: (descriptor, data key, part number). The body is hashed as it came
        # (ETag, checksums) and sealed in chunks before the backend sees a byte of it.
        self.encryption = sealing[0] if sealing else None
        self._data_key = sealing[1] if sealing else b""
        self._sealer = (
            ChunkSealer(sealing[1], sealing[0].object_id_bytes, sealing[2], sealing[0].chunk_size)
            if sealing
            else None
        )
        if sealing and size_hint is not None:
            size_hint = sealed_size(size_hint, sealing[0].chunk_size)
        self.tier = tier
        self._backend = store.tiers[tier].backend
        self._data_id = data_id
        self._size_hint = size_hint
        self._writer: DataWriter | None = None  # created once the body outgrows one batch
        self.digests = BodyDigests(checksum_algorithm)
        self._pieces: list[bytes | memoryview] = []
        self._buffered = 0
        self._size = 0
        self._inflight: asyncio.Task[None] | None = None  # the previous batch, being hashed and written
        self._whole: bytes | None = None  # a small body, hashed, waiting for the commit to store it
        self._whole_refused = False  # the backend has no `write_whole`: stream the small body too
        self._body_done = False
        self.received_at = 0.0  # when the body's last byte had arrived: orders racing part uploads
        self._stored: StoredData | None = None
        self._done = False

    async def write(self, chunk: bytes | memoryview) -> None:
        if not len(chunk):
            return
        self._pieces.append(_immutable(chunk))
        self._buffered += len(chunk)
        self._size += len(chunk)
        while self._buffered > HASH_BATCH:  # not >=: a body of exactly one batch stays whole
            await self._drain(HASH_BATCH)

    def _take(self, size: int) -> bytes | memoryview:
        """The first `size` buffered bytes, in one piece (copied only when they span several)."""
        parts: list[bytes | memoryview] = []
        need = size
        while need:
            piece = self._pieces[0]
            if len(piece) > need:
                view = memoryview(piece)
                self._pieces[0] = view[need:]
                piece = view[:need]
            else:
                del self._pieces[0]
            parts.append(piece)
            need -= len(piece)
        self._buffered -= size
        return parts[0] if len(parts) == 1 else b"".join(parts)  # b"" for size 0

    async def _drain(self, size: int | None = None) -> None:
        """Hand `size` (default: all) buffered bytes on to the backend writer; returns while they
        are still in flight. Batches are cut at multiples of `HASH_BATCH`, so that they line up
        with an erasure-coded tier's blocks, which then need no copy of their own."""
        if not self._buffered:
            return
        piece = self._take(self._buffered if size is None else size)
        await self._settle()
        if self._writer is None:
            self._writer = await self._backend.create_writer(self._data_id, self._size_hint)
        self._inflight = asyncio.ensure_future(self._pass_on(self._writer, piece))

    def _hash_and_seal(self, piece: bytes | memoryview) -> bytes:
        assert self._sealer is not None
        self.digests.update(piece)
        return self._sealer.feed(piece)

    async def _pass_on(self, writer: DataWriter, piece: bytes | memoryview) -> None:
        # Hashing (in a thread: hashlib and awscrt release the GIL) overlaps the backend write.
        try:
            if self._sealer is not None:
                # Hashing and sealing share one thread trip (AES-GCM releases the GIL too).
                await writer.write(await asyncio.to_thread(self._hash_and_seal, piece))
                return
            await asyncio.gather(asyncio.to_thread(self.digests.update, piece), writer.write(piece))
        except (WriteQuorumLost, CapacityExceeded) as exc:
            # The tier cannot take bytes now (no room, too few domains, remote bucket down): a 503.
            raise _write_refused(self.tier, exc) from exc

    async def _settle(self) -> None:
        """Wait for the batch in flight; its failure surfaces here."""
        task = self._inflight
        if task is None:
            return
        try:
            # Shielded: if our caller is cancelled, the batch still finishes; `abort` waits for it.
            await asyncio.shield(task)
        finally:
            if task.done():
                self._inflight = None

    async def end_body(self) -> None:
        """The body is complete: after this, `digests` are final (the data may not be durable yet)."""
        if self._body_done:
            return
        self.received_at = self._store.clock()
        if self._writer is None:
            body = bytes(self._take(self._buffered))
            if self._sealer is not None:
                sealer, plain = self._sealer, body

                def sealed() -> bytes:
                    return self._hash_and_seal(plain) + sealer.finish()

                body = await asyncio.to_thread(sealed) if len(body) >= HASH_OFFLOAD_BYTES else sealed()
            elif len(body) >= HASH_OFFLOAD_BYTES:
                await asyncio.to_thread(self.digests.update, body)
            else:
                self.digests.update(body)  # cheaper than a thread trip
            self._whole = body
        else:
            await self._drain()
            await self._settle()
            if self._sealer is not None:
                await self._writer.write(self._sealer.finish())  # the last, short chunk
        self._body_done = True

    async def seal(self) -> StoredData:
        """Make the data durable. After this, `digests` are final."""
        if self._stored is None:
            await self.end_body()
            if self._whole is None or await _finish_thread(self._store_whole) is None:
                # Streamed, or a small body that this backend cannot take whole: its writer.
                if self._writer is None:
                    assert self._whole is not None
                    self._writer = await self._backend.create_writer(self._data_id, len(self._whole))
                    await self._writer.write(self._whole)
                try:
                    self._stored = await self._writer.finish()
                except (WriteQuorumLost, CapacityExceeded) as exc:
                    raise _write_refused(self.tier, exc) from exc
        assert self._stored is not None
        return self._stored

    def _store_whole(self) -> StoredData | None:
        """Store the small body durably (blocking: in a worker thread); None if the backend cannot."""
        if self._stored is None and not self._whole_refused:
            assert self._whole is not None
            try:
                self._stored = self._backend.write_whole(self._data_id, self._whole)
            except (WriteQuorumLost, CapacityExceeded) as exc:
                raise _write_refused(self.tier, exc) from exc
            self._whole_refused = self._stored is None
        return self._stored

    @property
    def size(self) -> int:
        return self._size

    @property
    def etag(self) -> str:
        """The MD5 of the body, as S3 reports it — except under SSE-C and SSE-KMS, where S3's ETag
        is not the body's MD5 (it must not let anyone confirm a guess of the plaintext): then an
        opaque 128-bit MAC of that MD5 under the object's data key."""
        md5_hex = self.digests.md5_hex
        if self.encryption is None or self.encryption.mode == SSE_S3:
            return md5_hex
        return hmac.new(self._data_key, b"etag\0" + bytes.fromhex(md5_hex), hashlib.sha256).hexdigest()[:32]

    async def abort(self) -> None:
        if self._done:
            return
        self._done = True
        task, self._inflight = self._inflight, None
        if task is not None:
            await asyncio.wait([task])  # let the batch in flight end before discarding what it wrote
            if not task.cancelled():
                task.exception()  # retrieved: it is why we abort, or moot now
        if self._stored is not None:
            # Already durable: hand it to the collector rather than deleting under a reader.
            with contextlib.suppress(BackendError, OSError):
                await self._backend.delete(self._stored)
        elif self._writer is not None:
            with contextlib.suppress(BackendError, OSError):
                await self._writer.abort()

    async def _commit(self, commit: Callable[[StoredData], _Committed]) -> _Committed:
        """Durable data, then `commit(stored)` (a catalog write): one thread trip for a small body."""
        await self.end_body()

        def store_and_commit() -> _Committed | None:
            stored = self._store_whole() if self._stored is None else self._stored
            if stored is None:
                return None  # the backend cannot take the body whole: `seal` streams it first
            self._store.check_may_commit([stored.data_id])
            result = commit(stored)
            self._done = True  # committed: from now on the catalog owns the data, never abort it
            return result

        try:
            if self._whole is None:
                await self.seal()  # streamed: the writer's own trips make it durable
            result = await _finish_thread(store_and_commit)
            if result is None:
                await self.seal()
                result = await _finish_thread(store_and_commit)
        except BaseException:
            await self.abort()
            raise
        assert result is not None and self._stored is not None
        self._store.maintenance.note_write(self.tier, self._stored)
        return result

    async def commit_object(
        self,
        bucket: str,
        key: str,
        meta: ObjectMeta,
        *,
        if_match: str | None = None,
        if_none_match: str | None = None,
    ) -> ObjectRecord:
        def record_for(stored: StoredData) -> ObjectRecord:
            return ObjectRecord(
                bucket=bucket,
                key=key,
                size=self._size,
                etag=self.etag,
                last_modified=self._store.clock(),
                tier=self.tier,
                meta=meta if self.encryption is None else replace(meta, encryption=self.encryption.to_json()),
                segments=(Segment(stored),),
                checksum_algorithm=self.digests.checksum_algorithm,
                checksum=self.digests.checksum_b64,
            )

        committer = self._store.small_writes
        if committer is not None and self._backend.batches_small_writes and self._stored is None:
            await self.end_body()
            if self._whole is not None and len(self._whole) <= SMALL_WRITE_MAX_BYTES:
                write = SmallWrite(
                    self._backend, self._data_id, self._whole, record_for, if_match, if_none_match
                )
                with _conflict_if_conditional(bucket, key, if_match, if_none_match):
                    return await self._commit_batched(committer, write)

        def commit(stored: StoredData) -> ObjectRecord:
            with _conflict_if_conditional(bucket, key, if_match, if_none_match):
                return self._store.catalog.commit_object(
                    record_for(stored), if_match=if_match, if_none_match=if_none_match
                )

        return await self._commit(commit)

    async def _commit_batched(self, committer: SmallWriteCommitter, write: SmallWrite) -> ObjectRecord:
        """The whole small body stored and its row committed by the small-write committer, in one
        batch with the other PUTs waiting (tiering/small_writes.py), instead of a thread trip each."""
        try:
            try:
                record = await committer.commit(write)
            finally:
                self._stored = write.stored
                self._done = write.result is not None  # committed: the catalog owns the data, never abort it
        except (WriteQuorumLost, CapacityExceeded) as exc:
            await self.abort()
            raise _write_refused(self.tier, exc) from exc
        except BaseException:
            await self.abort()
            raise
        assert self._stored is not None
        self._store.maintenance.note_write(self.tier, self._stored)
        return record

    async def commit_part(self, upload: UploadRecord, part_number: int) -> PartRecord:
        """Record the part; if another upload of its number ended later on the wire, that one
        stays the part and this one's data is retired (its client saw its ETag all the same)."""

        def commit(stored: StoredData) -> PartRecord:
            part = PartRecord(
                part_number=part_number,
                size=self._size,
                etag=self.etag,
                last_modified=self.received_at,
                stored=stored,
                checksum=self.digests.checksum_b64,
            )
            self._store.catalog.put_part(upload.upload_id, part)
            return part

        return await self._commit(commit)


@contextlib.contextmanager
def _conflict_if_conditional(
    bucket: str, key: str, if_match: str | None, if_none_match: str | None
) -> Iterator[None]:
    """A conditional commit whose condition fails: the caller checked it when the write began
    (`ObjectStore.check_write_condition`), so another write won the race since (S3's 409)."""
    try:
        yield
    except (PreconditionFailed, ObjectNotFound) as exc:
        if if_match is None and if_none_match is None:
            raise
        raise ConditionalConflict(bucket, key) from exc


def _immutable(chunk: bytes | memoryview) -> bytes | memoryview:
    """A chunk safe to hold on to: a view of bytes as it is; of anything mutable, a copy."""
    if isinstance(chunk, bytes) or (isinstance(chunk, memoryview) and chunk.readonly):
        return chunk
    return bytes(chunk)


# The most a GET reads, verifies and copies on the event loop itself (`_open_at_hand`), when
# nothing can wait (catalog row and bytes in the page cache): all a GET reads whole (1 MiB).
# Measured (ErasurePool.read_at_hand, 4+2, packed, cached): 13 µs for 4 KiB, 44 µs for 112 KiB,
# 114 µs (P99 233) for 1 MiB — memory-speed work of the same order as sending those bytes, which
# the loop does anyway. The worker-thread trip it replaces cost more than the read itself: a 1 MiB
# GET took 1.12 ms of server CPU through a thread, 0.69 ms at hand (1.67x GETs/s at 16 clients,
# P99 0.62x; bench/RESULTS.md). Bigger objects stream, in threads.
AT_HAND_MAX_BYTES = 1 << 20


async def _finish_thread(fn: Callable[[], _Result]) -> _Result:
    """`fn()` in a worker thread. If we are cancelled meanwhile, the thread still runs on: wait for
    it before letting the cancellation through, so that `abort` (which runs next) sees what it
    stored or committed — and never deletes data that a committed catalog row names."""
    task = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        raise


@dataclass
class OpenedObject:
    """An object pinned for reading: its record and a way to stream any byte range of it.

    `tier` and `segments` say which copy is read: the object's own data, or the restored copy of
    an archived object.
    """

    record: ObjectRecord
    _store: ObjectStore
    tier: str = ""
    segments: tuple[Segment, ...] = ()
    # The whole object, when `open_object(read_up_to=...)` read it: bytes, or a read-only view of a
    # blob read straight into one buffer (erasure/whole_reads.py `_read_packed`).
    data: bytes | memoryview | None = None
    customer_key: bytes | None = None  # SSE-C: the key the request gave (checked)
    _data_key: bytes | None = None
    _closed: bool = False

    def __post_init__(self) -> None:
        if not self.tier:
            self.tier = self.record.tier
            self.segments = self.record.segments

    @property
    def encryption(self) -> ObjectEncryption | None:
        raw = self.record.meta.encryption
        return ObjectEncryption.from_json(raw) if raw is not None else None

    def data_key(self) -> bytes:
        """The object's data key (unwrapped once; blocking work is microseconds)."""
        if self._data_key is None:
            enc = self.encryption
            assert enc is not None
            if enc.mode == SSE_C and self.customer_key is None:
                raise SSECustomerKeyRequired()
            self._data_key = self._store.keys.data_key(enc, self.customer_key)
        return self._data_key

    async def stream(
        self, start: int, end: int, on_chunk: Throttle | None = None
    ) -> AsyncIterator[bytes | memoryview]:
        """Yield the object's bytes [start, end) across its segments (decrypted, if it is sealed)."""
        enc = self.encryption
        if enc is None or self.data is not None:
            async for chunk in self._stream(start, end, on_chunk, self.record.segment_sizes(self.segments)):
                yield chunk
            return
        key = self.data_key()
        async for chunk in self._stream(
            start, end, on_chunk, self.record.segment_sizes(self.segments), (enc, key)
        ):
            yield chunk

    async def stream_stored(
        self, start: int, end: int, on_chunk: Throttle | None = None
    ) -> AsyncIterator[bytes | memoryview]:
        """Yield the bytes [start, end) as the tiers store them (ciphertext of a sealed object):
        what a move copies, so that moving data never needs its keys."""
        async for chunk in self._stream(start, end, on_chunk, [s.stored.size for s in self.segments]):
            yield chunk

    async def _stream(
        self,
        start: int,
        end: int,
        on_chunk: Throttle | None,
        sizes: list[int],
        opening: tuple[ObjectEncryption, bytes] | None = None,
    ) -> AsyncIterator[bytes | memoryview]:
        if self.data is not None:
            if end > start:
                if on_chunk is not None:
                    await on_chunk(end - start)
                yield self.data[start:end]
            return
        if any(self._store.maintenance.is_lost(segment.stored.data_id) for segment in self.segments):
            # Heal found it unrecoverable: say so now (HEAD, which reads no bytes, still answers).
            raise ObjectDataLost(self.record.bucket, self.record.key)
        backend = self._store.tiers[self.tier].backend
        in_range: list[tuple[Segment, int, int]] = []  # (segment, its first byte, one past its last)
        offset = 0
        for segment, size in zip(self.segments, sizes, strict=True):
            if offset < end and offset + size > start:
                in_range.append((segment, offset, offset + size))
            offset += size

        # Every part, not only the first, before a byte goes out: the response's status is still
        # to be sent (the GET primes the first chunk), so an error is still an S3 error.
        def first_unreadable() -> Segment | None:
            return next((seg for seg, _, _ in in_range if not backend.readable_now(seg.stored)), None)

        # ~3 µs a part: a GET of thousands of parts checks them in a worker thread, not the loop.
        unreadable = first_unreadable() if len(in_range) <= 64 else await asyncio.to_thread(first_unreadable)
        if unreadable is not None:
            await self._raise_if_lost(unreadable)
            raise DataUnreadable(self.record.bucket, self.record.key, "too few shards on online domains")
        for segment, seg_start, seg_end in in_range:
            try:
                reader = await backend.open_reader(segment.stored)
            except DataNotFound as exc:
                raise DataUnreadable(self.record.bucket, self.record.key, "data missing") from exc
            except DataUnavailable as exc:
                await self._raise_if_lost(segment)
                raise DataUnreadable(self.record.bucket, self.record.key, str(exc)) from exc
            try:
                lo = max(start, seg_start) - seg_start
                hi = min(end, seg_end) - seg_start
                chunks = (
                    reader.stream(lo, hi) if opening is None else _opened(reader, segment, lo, hi, *opening)
                )
                async for chunk in chunks:
                    if on_chunk is not None:
                        await on_chunk(len(chunk))
                    yield chunk
            except (DataNotFound, DataUnavailable) as exc:
                if isinstance(exc, DataUnavailable):
                    await self._raise_if_lost(segment)
                raise DataUnreadable(self.record.bucket, self.record.key, str(exc)) from exc
            except ChunkAuthError as exc:
                # Bytes that do not authenticate are never served: the read fails instead.
                log.error(
                    "%s/%s: sealed data does not authenticate: %s", self.record.bucket, self.record.key, exc
                )
                raise DataUnreadable(self.record.bucket, self.record.key, str(exc)) from exc
            finally:
                await reader.close()

    async def _raise_if_lost(self, segment: Segment) -> None:
        """A read that failed: ObjectDataLost if some process's heal found the blob lost (the
        catalog's list; this process's own finding was answered before reading)."""
        maintenance = self._store.maintenance
        if await asyncio.to_thread(maintenance.lost_in_catalog, segment.stored.data_id):
            raise ObjectDataLost(self.record.bucket, self.record.key)

    def close(self) -> None:
        if not self._closed:  # a second close must not release another reader's pin
            self._closed = True
            self._store._unpin(self.segments)


async def _opened(
    reader: DataReader, segment: Segment, lo: int, hi: int, enc: ObjectEncryption, key: bytes
) -> AsyncIterator[bytes]:
    """Plaintext [lo, hi) of one sealed blob: reads and opens only the chunks that hold it."""
    first, sealed_lo, sealed_hi = sealed_range(lo, hi, segment.stored.size, enc.chunk_size)
    header = b""
    if sealed_lo > HEADER_BYTES:
        async for piece in reader.stream(0, HEADER_BYTES):
            header += piece
    else:
        sealed_lo = 0  # the header and the first chunk in one read
    opener: ChunkOpener | None = None
    skip, remaining = lo - first * enc.chunk_size, hi - lo

    def take(plain: bytes) -> bytes:
        nonlocal skip, remaining
        if skip:
            cut = min(skip, len(plain))
            plain, skip = plain[cut:], skip - cut
        plain = plain[:remaining]
        remaining -= len(plain)
        return plain

    async for piece in reader.stream(sealed_lo, sealed_hi):
        if opener is None:
            if len(header) < HEADER_BYTES:
                need = HEADER_BYTES - len(header)
                header += bytes(piece[:need])
                piece = piece[need:]
                if len(header) < HEADER_BYTES:
                    continue
            opener = ChunkOpener(
                key, enc.object_id_bytes, segment.part_number, parse_header(header), first, enc.chunk_size
            )
        plain = (
            await asyncio.to_thread(opener.feed, piece)
            if len(piece) >= HASH_OFFLOAD_BYTES
            else opener.feed(piece)
        )
        if plain := take(plain):
            yield plain
    if opener is None:
        opener = ChunkOpener(
            key, enc.object_id_bytes, segment.part_number, parse_header(header), first, enc.chunk_size
        )
    if plain := take(opener.finish()):
        yield plain
    if remaining:
        raise ChunkAuthError(f"sealed blob {segment.stored.data_id} ends early")


# How long a bucket's default encryption is taken from the cache without a change token to say
# otherwise (`ObjectStore.default_encryption`).
BUCKET_DEFAULTS_SECONDS = 1.0


class ObjectStore:
    """Buckets, objects and multipart uploads over the configured tiers."""

    def __init__(
        self,
        catalog: Catalog,
        tiers: dict[str, Tier],
        *,
        state_dir: Path | None = None,
        runtime_dir: Path | None = None,
        clock: Callable[[], float] = time.time,
        keys: KeyService | None = None,
    ) -> None:
        self.catalog = catalog
        self._keys = keys
        self.tiers = tiers
        self.clock = clock
        self.state_dir = state_dir
        # What this host's processes share but never need after a restart (the drive counters),
        # kept off the drives' file system where the server has such a place (server/runtime_dir.py).
        self.runtime_dir = runtime_dir if runtime_dir is not None else state_dir
        # Small GETs (`open_object(read_up_to=...)`) by where they were answered: on the event
        # loop ("at_hand") or in a worker thread ("thread"): tierstore_small_reads_total.
        self.small_reads: Counter[str] = Counter()
        # Listing pages, the next one read ahead while a client pages through a listing.
        self.listing = ListingReadahead(self._list_page, catalog.listing_stamp)
        self._pinned: Counter[str] = Counter()
        self._pinned_since: dict[str, float] = {}  # data id -> when this process first pinned it
        self._pins_published = False
        self._started_at = time.time()
        self._tasks: list[asyncio.Task[None]] = []
        self.maintenance = Maintenance(self)
        # Small PUTs stored and committed in batches by one thread, where the catalog batches
        # (SQLite): tiering/small_writes.py.
        self.small_writes = (
            SmallWriteCommitter(catalog, self.check_may_commit) if catalog.batches_writes else None
        )
        self.rebalancer = Rebalancer(self)  # runtime topology (domains table), rebalance and recode
        self.registry = ProcessRegistry(state_dir, self._started_at) if state_dir else None
        # Buckets, their configurations, users, domains, the clock changed: other processes on
        # this data directory catch up before their next request (tiering/changes.py).
        self.changes = ChangeSignal(state_dir)
        # bucket → (change token, monotonic time read, its default encryption): see
        # `default_encryption`.
        self._bucket_defaults: dict[str, tuple[bytes, float, EncryptionRequest | None]] = {}
        self.live_peers: list[Checkpoint] = []  # other processes on this data directory at start
        # This process's row in the catalog's process table (tiering.peers), from `start` on; its
        # id tags every data id made here, so that only what it wrote is swept if it dies.
        self.process: LiveProcess | None = None
        self._holder = f"{socket.gethostname()}:{os.getpid()}:{id(self)}"

    @property
    def keys(self) -> KeyService:
        """Keys for encryption at rest: the server passes its configured ones; a store built
        without (tools, unit tests) keeps an embedded keyring beside its catalog."""
        if self._keys is None:
            self._keys = KeyService(
                KeySettings(keyring_dir=self.state_dir / "encryption" if self.state_dir else None)
            )
        return self._keys

    # --- lifecycle of the store itself -------------------------------------------------------

    async def start(self) -> None:
        await self.rebalancer.load()  # domains added/drained/removed and codes changed at runtime
        rows = await asyncio.to_thread(self.catalog.process_rows)
        if self.runtime_dir is not None:
            # Shard counts of local drives, one per drive for every process on this host (workers).
            self.runtime_dir = await asyncio.to_thread(self._share_drive_counters, self.runtime_dir)
        for tier in self.tiers.values():
            tier.backend.judge_writers_elsewhere(judged_elsewhere(rows, host_id()))
            await tier.backend.start()
        if self.registry is not None:
            now = time.time()
            others = [c for c in await asyncio.to_thread(self.registry.scan) if c.running]
            self.live_peers = [c for c in others if c.alive(now)]
            await asyncio.to_thread(self.registry.heartbeat)
            for dead in others:
                if not dead.alive(now):
                    self._tasks.append(asyncio.create_task(self._sweep_after_crash(dead)))
        process = LiveProcess(self.catalog, self._started_at)
        await asyncio.to_thread(process.register)
        self.process = process
        self._tasks.append(asyncio.create_task(self._beat_forever()))
        # Domain states (offline/online) and drives' write health are shared through the catalog
        # with the other processes.
        await domains.load_domain_state(self, reset=not self.live_peers)
        self._tasks.append(asyncio.create_task(domains.follow_domain_state(self)))
        shared_health = domains.SharedDriveHealth(self)
        # Forgotten only when no process (on any host) is alive to have observed it.
        alone = not self.live_peers and not any(row.alive(time.time()) for row in rows)
        await asyncio.to_thread(shared_health.reset if alone else shared_health.sync)
        shared_health.attach()
        self._tasks.append(asyncio.create_task(domains.follow_drive_health(shared_health)))
        if any(d.address is not None for p in domains.erasure_pools(self).values() for d in p.topology):
            self._tasks.append(asyncio.create_task(nodes.follow_nodes(self)))  # drives on storage nodes
        self._tasks.append(asyncio.create_task(self._collect_forever()))
        self._tasks.append(asyncio.create_task(self._publish_pins_forever()))
        if self.registry is not None:
            self._tasks.append(asyncio.create_task(self._checkpoint_forever()))
        await self.maintenance.start()
        await self.rebalancer.start()

    async def close(self) -> None:
        await asyncio.to_thread(self.listing.close)  # waits for a page being read ahead
        await self.rebalancer.close()
        await self.maintenance.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self.small_writes is not None:
            await self.small_writes.close()
        for tier in self.tiers.values():
            await tier.backend.close()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.catalog.release_lease, COLLECTOR_LEASE, self._holder)
        if self._pins_published:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.catalog.publish_pins, self._holder, [], 0.0)
        if self.registry is not None:
            self.registry.remove()
            if self.runtime_dir is not None and self.runtime_dir != self.state_dir:
                await asyncio.to_thread(self._remove_drive_counters_if_last, self.runtime_dir)
        if self.process is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.process.close)
        self.catalog.close()

    def _share_drive_counters(self, runtime_dir: Path) -> Path:
        """Map the local drives' shared counter files (blocking: opens one file per drive); the
        runtime directory they are in.

        Under the runtime directory's lock, and with this process's checkpoint written first: a
        process of the same data directory stopping now either sees this one alive and leaves
        the files be, or removes them before this one creates them anew. Unlocked, it could
        unlink the files this one had just mapped, and the workers started later would count in
        other files than this process."""
        try:
            with locked_directory(runtime_dir):
                if self.registry is not None:
                    self.registry.heartbeat()
                # Not `parents`: a runtime directory removed since it was opened is not made again
                # here, without its owner file and with default permissions (server/runtime_dir.py).
                counters = runtime_dir / "drive-counters"
                counters.mkdir(exist_ok=True)
                for pool in domains.erasure_pools(self).values():
                    pool.share_counters(counters)
            return runtime_dir
        except FileNotFoundError:
            if runtime_dir.is_dir() or self.state_dir is None or runtime_dir == self.state_dir:
                raise
        # The last other process of this data directory removed the runtime directory as it
        # stopped, after the server had found it: the counters go where they are kept without one.
        log.warning("runtime directory %s vanished: drive counters kept in %s", runtime_dir, self.state_dir)
        return self._share_drive_counters(self.state_dir)

    def _remove_drive_counters_if_last(self, runtime_dir: Path) -> None:
        """The last process of this data directory to stop takes the drive counters along: in
        memory they would outlive it (the next start's scan sets them anew anyway)."""
        assert self.registry is not None
        with locked_directory(runtime_dir):
            if not any(c.alive(time.time()) for c in self.registry.scan()):
                shutil.rmtree(runtime_dir / "drive-counters", ignore_errors=True)

    # Crash detection (tiering.peers): each process keeps its own "running" checkpoint file with
    # a heartbeat, removed on an orderly close. Finding one whose process is gone means it died.
    async def _checkpoint_forever(self) -> None:
        assert self.registry is not None
        while True:
            await asyncio.sleep(CHECKPOINT_INTERVAL)
            await asyncio.to_thread(self.registry.heartbeat)

    def check_may_commit(self, data_ids: list[str]) -> None:
        """CatalogUnavailable (a 503, the client retries) unless blobs with these ids may be
        committed by this process now: see tiering.peers, fencing."""
        if self.process is not None and not all(self.process.may_commit(d) for d in data_ids):
            raise CatalogUnavailable(
                "this process's registration in the catalog lapsed (no heartbeat went through): "
                "what it wrote since may have been swept, so it is not committed"
            )

    async def _beat_forever(self) -> None:
        """Keep our row in the process table fresh, and sweep after processes whose row expired."""
        assert self.process is not None
        while True:
            await asyncio.sleep(PROCESS_HEARTBEAT)
            try:
                await asyncio.to_thread(self.process.beat)
                await self._sweep_dead_processes()
            except Exception:  # keep beating: a busy catalog must not end it
                log.exception("process heartbeat or orphan sweep failed")

    async def _sweep_dead_processes(self) -> None:
        """Sweep after every process, on any host, whose row has been expired PROCESS_GRACE:
        only unreferenced blobs tagged with its id, never a live process's in-flight writes."""
        assert self.process is not None
        for row in await asyncio.to_thread(self.catalog.process_rows):
            if row.id != self.process.id and row.expires + PROCESS_GRACE <= time.time():
                await self._sweep_dead_process(row)

    async def _sweep_dead_process(self, row: ProcessRow) -> None:
        now = time.time()
        lease = f"orphans:{row.id}"
        if not await asyncio.to_thread(
            self.catalog.acquire_lease, lease, self._holder, ORPHAN_LEASE_TTL, now
        ):
            return  # another survivor is on it
        try:
            if not await asyncio.to_thread(self.catalog.claim_process, row.id, now - PROCESS_GRACE):
                return  # it beat again: alive after all
            log.warning(
                "process %s (pid %d on %s) stopped beating %.0fs ago: sweeping what it left",
                row.id,
                row.pid,
                row.host,
                now - row.heartbeat,
            )
            # Its orphans were made durable before it died; their files' times come from the
            # drives' hosts: ORPHAN_SLACK either side covers their clocks and a slow commit.
            await self._sweep_orphans(row.heartbeat - ORPHAN_SLACK, now + ORPHAN_SLACK, owner=row.id)
            temporary = 0
            for tier in self.tiers.values():  # and the temporary files of its unfinished writes
                temporary += await tier.backend.sweep_writes_of(lambda data_id: owner_of(data_id) == row.id)
            log.info("process %s: %d temporary files of unfinished writes removed", row.id, temporary)
            await asyncio.to_thread(self.catalog.forget_process, row.id)
            await asyncio.to_thread(self.rebalancer.forget_writers_of, row.id)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.catalog.release_lease, lease, self._holder)

    async def _sweep_after_crash(self, dead: Checkpoint) -> None:
        """Sweep what a dead process may have left, then forget its checkpoint."""
        assert self.registry is not None
        since = dead.heartbeat - ORPHAN_SLACK
        # It wrote nothing after its next heartbeat was due; nor can it be younger than us.
        until = min(dead.heartbeat + 2 * CHECKPOINT_INTERVAL, self._started_at)
        if any(p.started is None or p.started < until for p in self.live_peers):
            # A live process wrote at that time too, and a blob of its may still be in flight
            # (durable, not yet committed): wait until all of that window is an hour old.
            delay = until + PEER_ORPHAN_AGE - time.time()
            if delay > 0:
                log.info("process %s died while others run: orphan sweep in %.0fs", dead.pid, delay)
                await asyncio.sleep(delay)
        await self._sweep_orphans(since, until)
        await asyncio.to_thread(self.registry.forget, dead)

    async def _sweep_orphans(self, since: float, until: float, owner: str | None = None) -> None:
        """After a crash: delete blobs written in [since, until) by `owner` (a process id; None:
        an earlier version's process, whose data ids carry none) that no catalog row names."""
        started = time.time()
        candidates: list[tuple[str, StoredData]] = []
        for name, tier in self.tiers.items():
            candidates += [
                (name, s)
                for s in await tier.backend.recent_data(since, until)
                if owner_of(s.data_id) == owner
            ]
        if not candidates:
            return
        removed = 0
        for name, stored in candidates:
            if not await asyncio.to_thread(self.catalog.is_referenced, stored.data_id):
                await self.tiers[name].backend.delete(stored)
                removed += 1
        log.info(
            "orphan sweep: %d candidates, %d removed in %.1fs",
            len(candidates),
            removed,
            time.time() - started,
        )

    async def _collect_forever(self) -> None:
        while True:
            try:
                # One collector per catalog at a time (several workers may share it): a lease.
                if await asyncio.to_thread(self._hold_collector_lease):
                    await self.collect_garbage_round()
            except Exception:  # keep collecting: one bad blob must not stop the collector
                log.exception("garbage collection pass failed")
            await asyncio.sleep(COLLECT_INTERVAL)

    async def collect_garbage_round(self, now: float | None = None) -> int:
        """Batches of `collect_garbage` while each one collects a whole batch (more are due), for a
        third of the collector's lease at most. One batch per interval drained a backlog at 128
        retired blobs a second at most: less than a burst of overwrites retires."""
        started = time.monotonic()
        total = 0
        while True:
            collected = await self.collect_garbage(now)
            total += collected
            if collected < GARBAGE_BATCH or time.monotonic() - started > COLLECTOR_LEASE_TTL / 3:
                return total

    def _hold_collector_lease(self) -> bool:
        now = time.time()
        if self.catalog.lease_holder(COLLECTOR_LEASE, now) not in (None, self._holder):
            return False  # a cheap read first: only the holder (or a taker) writes
        return self.catalog.acquire_lease(COLLECTOR_LEASE, self._holder, COLLECTOR_LEASE_TTL, now)

    async def collect_garbage(self, now: float | None = None) -> int:
        """Delete retired blobs whose grace has passed and that no reader (here or elsewhere) holds."""
        due = await asyncio.to_thread(
            self.catalog.due_garbage, time.time() if now is None else now, GARBAGE_BATCH
        )
        due = [(tier_name, stored) for tier_name, stored in due if not self._pinned[stored.data_id]]
        if due:
            # Pins expire by the wall clock, whatever `now` a test passes for the grace.
            elsewhere = await asyncio.to_thread(
                self.catalog.pinned_elsewhere, [stored.data_id for _, stored in due], time.time()
            )
            due = [(tier_name, stored) for tier_name, stored in due if stored.data_id not in elsewhere]
        await self._in_writer(self.catalog.forget_completed_uploads, time.time() - COMPLETED_UPLOAD_MEMORY)
        by_tier: dict[str, list[StoredData]] = {}
        for tier_name, stored in due:
            by_tier.setdefault(tier_name, []).append(stored)

        async def delete(tier_name: str, blobs: list[StoredData]) -> list[str]:
            """The data ids deleted (a tier no longer configured has nothing left to delete)."""
            tier = self.tiers.get(tier_name)
            if tier is None:
                return [stored.data_id for stored in blobs]
            try:
                failed = await tier.backend.delete_many(blobs)
            except (BackendError, OSError):
                failed = [BackendError("batch failed")] * len(blobs)
            for stored, error in zip(blobs, failed, strict=True):
                if error is not None:
                    log.warning(
                        "could not delete retired blob %s on %s: %s", stored.data_id, tier_name, error
                    )
            return [stored.data_id for stored, error in zip(blobs, failed, strict=True) if error is None]

        done = [d for ids in await asyncio.gather(*(delete(t, b) for t, b in by_tier.items())) for d in ids]
        if done:
            await self._in_writer(self.catalog.forget_garbage, done)
        return len(done)

    async def status(self) -> dict[str, object]:
        """Tiers with their usage and health, plus heal progress: `tierstore admin status`."""
        usage = await asyncio.to_thread(self.catalog.tier_usage)
        tiers = []
        for name, tier in self.tiers.items():
            stats = tier.backend.stats()
            objects, size = usage.get(name, (0, 0))
            entry: dict[str, object] = {
                "name": name,
                "backend": tier.config.backend,
                "objects": objects,
                "bytes": size,
                "media": tier.media.media,
            }
            if "domains" in stats:
                entry.update(
                    k=stats["k"],
                    m=stats["m"],
                    spread_level=stats["spread_level"],
                    domains=len(stats["domains"]),
                    domains_online=stats["online"],
                )
            tiers.append(entry)
        degraded = self.maintenance.progress.degraded
        return {
            "tiers": tiers,
            "degraded_objects": len(degraded),
            "lost_objects": len(await asyncio.to_thread(self.catalog.lost_blobs)),
            "heal": self.maintenance.progress.to_json(),
        }

    async def tier_report(self, half_life: float) -> list[dict[str, object]]:
        """Per tier: objects, bytes, capacity, media, and the decayed heat of its objects."""
        usage = await asyncio.to_thread(self.catalog.tier_usage)
        now = self.clock()
        report = []
        for name, tier in self.tiers.items():
            objects, size = usage.get(name, (0, 0))
            heats = await asyncio.to_thread(self.catalog.tier_heats, name)
            report.append(
                {
                    "name": name,
                    "backend": tier.config.backend,
                    "objects": objects,
                    "bytes": size,
                    "capacity_bytes": tier.config.capacity_bytes,
                    "media": asdict(tier.media),  # not `__dict__`: compiled, a dataclass has none
                    "heats": [decayed(h, at, now, half_life) for h, at in heats],
                }
            )
        return report

    # --- helpers ----------------------------------------------------------------------------

    async def _in_writer(self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def _read(self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await asyncio.to_thread(fn, *args, **kwargs)

    def _pin(self, segments: tuple[Segment, ...]) -> None:
        for segment in segments:
            data_id = segment.stored.data_id
            if not self._pinned[data_id]:
                self._pinned_since[data_id] = time.monotonic()
            self._pinned[data_id] += 1

    def _unpin(self, segments: tuple[Segment, ...]) -> None:
        for segment in segments:
            data_id = segment.stored.data_id
            self._pinned[data_id] -= 1
            if self._pinned[data_id] <= 0:
                del self._pinned[data_id]
                self._pinned_since.pop(data_id, None)

    async def _publish_pins_forever(self) -> None:
        while True:
            await asyncio.sleep(PIN_PUBLISH_INTERVAL)
            try:
                await self.publish_pins()
            except Exception:  # a busy catalog now and then must not end the publishing
                log.exception("publishing read pins failed")

    async def publish_pins(self) -> None:
        """Tell every process's collector which blobs this one has been reading for a while."""
        cutoff = time.monotonic() - PIN_PUBLISH_AFTER
        held = [data_id for data_id, since in self._pinned_since.items() if since <= cutoff]
        if held or self._pins_published:  # nothing to say, nothing written
            await self._in_writer(self.catalog.publish_pins, self._holder, held, time.time() + PIN_TTL)
            self._pins_published = bool(held)

    def tier_for(self, storage_class: str) -> str:
        tier = tier_for_storage_class(storage_class)
        if tier not in self.tiers:
            # A deployment without this tier keeps such data on hot rather than refusing it.
            return HOT if HOT in self.tiers else next(iter(self.tiers))
        return tier

    async def begin_write(
        self,
        tier: str,
        *,
        size_hint: int | None = None,
        checksum_algorithm: str | None = None,
        sealing: tuple[ObjectEncryption, bytes, int] | None = None,
    ) -> PendingWrite:
        # The backend writer is created when bytes arrive: a small body never needs one.
        ordered = self.tiers[tier].backend.time_ordered_ids
        data_id = self.process.new_data_id(ordered) if self.process is not None else new_data_id(ordered)
        return PendingWrite(self, tier, data_id, size_hint, checksum_algorithm, sealing)

    # --- buckets ----------------------------------------------------------------------------

    async def create_bucket(self, name: str, owner: str, region: str) -> BucketRecord:
        record = await self._in_writer(self.catalog.create_bucket, name, owner, region)
        self.changes.bump()
        return record

    async def delete_bucket(self, name: str) -> None:
        try:
            await self._in_writer(self.catalog.delete_bucket, name)
        finally:
            self.changes.bump()

    async def get_bucket(self, name: str) -> BucketRecord:
        return await self._read(self.catalog.get_bucket, name)

    async def list_buckets(
        self,
        owner: str | None = None,
        *,
        prefix: str = "",
        after: str = "",
        region: str | None = None,
        limit: int | None = None,
    ) -> list[BucketRecord]:
        return await self._read(
            self.catalog.list_buckets, owner, prefix=prefix, after=after, region=region, limit=limit
        )

    async def put_bucket_config(self, bucket: str, name: str, value: str | None) -> None:
        try:
            await self._in_writer(self.catalog.put_bucket_config, bucket, name, value)
        finally:
            self.changes.bump()

    async def bucket_configs_with_prefix(self, bucket: str, prefix: str) -> list[tuple[str, str]]:
        return await self._read(self.catalog.bucket_configs_with_prefix, bucket, prefix)

    async def get_bucket_config(self, bucket: str, name: str) -> str | None:
        await self.get_bucket(bucket)
        return await self._read(self.catalog.get_bucket_config, bucket, name)

    # --- objects ----------------------------------------------------------------------------

    async def begin_put(
        self,
        bucket: str,
        storage_class: str,
        *,
        size_hint: int | None = None,
        checksum_algorithm: str | None = None,
        encryption: EncryptionRequest | None = None,
    ) -> PendingWrite:
        """A new object's write; with `encryption`, sealed under a fresh data key. Without, the
        bucket's default encryption applies (read in the same thread trip as the bucket check)."""
        if encryption is None:
            encryption = await self.default_encryption(bucket)
        else:
            await self.get_bucket(bucket)  # fail fast, before any byte is stored
        sealing = None
        if encryption is not None:
            enc, data_key = self.keys.new_object(encryption)
            sealing = (enc, data_key, 0)
        return await self.begin_write(
            self.tier_for(storage_class),
            size_hint=size_hint,
            checksum_algorithm=checksum_algorithm,
            sealing=sealing,
        )

    async def default_encryption(self, bucket: str) -> EncryptionRequest | None:
        """The bucket's default encryption, NoSuchBucket if none; cached, as every PUT asks.

        Reading it took a thread trip and two catalog reads, about a tenth of a 4 KiB PUT's
        server CPU. Every change of buckets or their configuration, through any process on this
        data directory, writes a new change token (tiering/changes.py), which drops the entry;
        gateways on other hosts (a shared PostgreSQL catalog) see a change within
        BUCKET_DEFAULTS_SECONDS, as they see bucket policies (server/authorization.py). The
        commit checks the bucket again in its own transaction, so a deleted bucket never gets
        the object.
        """
        token, now = self.changes.token(), time.monotonic()
        cached = self._bucket_defaults.get(bucket)
        if cached is not None and cached[0] == token and now - cached[1] < BUCKET_DEFAULTS_SECONDS:
            return cached[2]
        encryption = await self._read(self.bucket_default_encryption, bucket)
        if len(self._bucket_defaults) > 10_000:
            self._bucket_defaults.clear()
        self._bucket_defaults[bucket] = (token, now, encryption)
        return encryption

    def bucket_default_encryption(self, bucket: str) -> EncryptionRequest | None:
        """The bucket's default encryption (blocking: in a worker thread); NoSuchBucket if none."""
        self.catalog.get_bucket(bucket)
        return EncryptionRequest.bucket_default(self.catalog.get_bucket_config(bucket, BUCKET_DEFAULT))

    async def head_object(self, bucket: str, key: str, version_id: str | None = None) -> ObjectRecord:
        """The current version (or the one named): DeleteMarkerCurrent / VersionIsDeleteMarker
        when that is a delete marker."""
        return await self._read(self.catalog.get_version, bucket, key, version_id)

    async def versioning(self, bucket: str) -> str:
        """The bucket's versioning state: "" (never versioned), "Enabled" or "Suspended"."""
        return await self._read(self.catalog.versioning, bucket)

    async def set_versioning(self, bucket: str, state: str) -> None:
        await self._in_writer(self.catalog.set_versioning, bucket, state)

    async def delete_version(
        self,
        bucket: str,
        key: str,
        version_id: str | None,
        *,
        bypass_governance: bool = False,
        condition: DeleteCondition | None = None,
    ) -> DeleteOutcome:
        """S3's DeleteObject: the visible object (a marker in a versioned bucket) or one version
        (ObjectLocked if Object Lock protects it; if `condition`, only if it holds:
        tiering/conditions.py)."""
        outcome = await self._in_writer(
            functools.partial(
                self.catalog.delete_object_version,
                bucket,
                key,
                version_id,
                bypass_governance=bypass_governance,
                condition=condition,
                now=self.clock(),  # retention is judged on the clock PUT's checks read
            )
        )
        assert outcome is not None  # None only with expected_generation
        return outcome

    async def list_versions(
        self,
        bucket: str,
        *,
        prefix: str,
        delimiter: str,
        key_marker: str,
        version_id_marker: str,
        max_keys: int,
    ) -> VersionPage:
        return await self._read(
            functools.partial(
                self.catalog.list_versions,
                bucket,
                prefix=prefix,
                delimiter=delimiter,
                key_marker=key_marker,
                version_id_marker=version_id_marker,
                max_keys=max_keys,
            )
        )

    async def object_lock_config(self, bucket: str) -> LockConfiguration | None:
        return await self._read(self.catalog.object_lock_config, bucket)

    async def set_object_lock_config(self, bucket: str, config: LockConfiguration) -> None:
        await self._in_writer(self.catalog.set_object_lock_config, bucket, config)

    async def set_lock(
        self,
        bucket: str,
        key: str,
        version_id: str | None,
        *,
        retention: tuple[str | None, float | None] | None = None,
        hold: bool | None = None,
        bypass_governance: bool = False,
    ) -> str:
        return await self._in_writer(
            functools.partial(
                self.catalog.set_lock,
                bucket,
                key,
                version_id,
                retention=retention,
                hold=hold,
                bypass_governance=bypass_governance,
                now=self.clock(),
            )
        )

    async def set_version_fields(
        self,
        bucket: str,
        key: str,
        version_id: str,
        *,
        tags: dict[str, str] | None = None,
        acl: str | None = None,
    ) -> None:
        await self._in_writer(
            functools.partial(self.catalog.set_version_fields, bucket, key, version_id, tags=tags, acl=acl)
        )

    async def check_write_condition(
        self, bucket: str, key: str, if_match: str | None, if_none_match: str | None
    ) -> None:
        """A conditional write's condition, on the key's object as it is now, before any byte is
        written: PreconditionFailed (412) or ObjectNotFound if it does not hold. The commit checks
        it again in its own transaction (the check that counts); failing only there, it is a
        ConditionalConflict (409)."""
        condition = write_condition(if_match, if_none_match)
        if not condition:
            return
        try:
            current: ObjectRecord | None = await self.head_object(bucket, key)
        except ObjectNotFound:
            current = None
        condition.check(bucket, key, current)

    async def open_object(
        self,
        bucket: str,
        key: str,
        *,
        allow_archived: bool = False,
        read_up_to: int = 0,
        customer_key: bytes | None = None,
        check_customer_key: bool = False,
        version_id: str | None = None,
    ) -> OpenedObject:
        """Look up and pin an object (its current version, or `version_id`); `close()` the result
        when the read is done.

        An archived (cold-tier) object is readable only through a finished, unexpired restore,
        unless `allow_archived` (the mover reading it to restore or transition it).
        With `read_up_to`, an object of at most that many bytes whose data reads cleanly comes
        back already in memory (`OpenedObject.data`), fetched in the same worker-thread trip as
        the lookup: for small GETs the thread hand-offs, not the reads, were the cost.
        With `check_customer_key` (a client's read), an object sealed with a customer key (SSE-C)
        needs `customer_key` and the right one, and no other object may be given one.
        """
        found = self._open_at_hand(bucket, key, read_up_to, customer_key, version_id)
        if read_up_to:
            self.small_reads["at_hand" if isinstance(found, OpenedObject) else "thread"] += 1
        if isinstance(found, OpenedObject):
            opened = found
        else:
            opened = await self._read(
                self._open,
                bucket,
                key,
                allow_archived,
                read_up_to,
                customer_key,
                check_customer_key,
                version_id,
                found,
            )
        self._pin(opened.segments)
        return opened

    def _open_at_hand(
        self, bucket: str, key: str, read_up_to: int, customer_key: bytes | None, version_id: str | None
    ) -> OpenedObject | ObjectRecord | None:
        """`_open` on the event loop, for the plain small GET — an unencrypted, single-part object
        of at most `read_up_to` (and AT_HAND_MAX_BYTES) bytes, not archived, whose catalog row and
        bytes can both be had without waiting (Catalog.version_at_hand, TierBackend.read_at_hand);
        for anything else `_open` runs in a worker thread, given the record when the row was at
        hand (a bigger object's, or one whose bytes were not): the thread then reads its bytes
        without looking the row up a second time (~10 % of a 1 MiB GET's server CPU). Under many
        concurrent GETs that thread trip, not the lookup or the read, was half of a 4 KiB GET's
        server CPU (the worker takes the GIL back from the busy loop after every SQLite step and
        pread): 1,256 -> 595 µs per GET at 16 clients (bench/RESULTS.md)."""
        if not read_up_to or customer_key is not None:
            return None
        record = self.catalog.version_at_hand(bucket, key, version_id)
        if record is None:
            return None
        if (
            record.size > min(read_up_to, AT_HAND_MAX_BYTES)
            or record.tier == COLD
            or record.meta.encryption is not None
            or len(record.segments) != 1
        ):
            return record
        tier = self.tiers.get(record.tier)
        data = tier.backend.read_at_hand(record.segments[0].stored) if tier is not None else None
        if data is None:
            return record
        opened = OpenedObject(record, self)
        opened.data = data
        return opened

    def _open(
        self,
        bucket: str,
        key: str,
        allow_archived: bool,
        read_up_to: int,
        customer_key: bytes | None = None,
        check_customer_key: bool = False,
        version_id: str | None = None,
        record: ObjectRecord | None = None,
    ) -> OpenedObject:
        """`open_object`'s lookup (and small read), in a worker thread; `record`: the version
        asked for, already looked up on the event loop (`_open_at_hand`)."""
        if record is None:
            record = self.catalog.get_version(bucket, key, version_id)
        opened = OpenedObject(record, self, customer_key=customer_key)
        enc = opened.encryption
        if check_customer_key:
            if enc is not None and enc.mode == SSE_C:
                opened.data_key()  # no key: SSECustomerKeyRequired; another key: SSECustomerKeyMismatch
            elif customer_key is not None:
                raise SSENotApplicable()
        if record.tier == COLD and not allow_archived:
            restore = record.restore
            if restore is None or restore.ongoing or restore.expiry <= self.clock():
                raise ObjectArchived(bucket, key)
            opened = OpenedObject(record, self, restore.tier, restore.segments)
        if record.size <= read_up_to and len(opened.segments) == 1:
            data = self.tiers[opened.tier].backend.read_whole(opened.segments[0].stored)
            if data is not None and enc is not None:
                try:
                    data = open_blob(
                        opened.data_key(),
                        enc.object_id_bytes,
                        opened.segments[0].part_number,
                        data,
                        enc.chunk_size,
                    )
                except ChunkAuthError:
                    data = None  # the streamed read says what is wrong (and never serves it)
            opened.data = data
        return opened

    async def delete_object(
        self, bucket: str, key: str, *, condition: DeleteCondition | None = None
    ) -> ObjectRecord | None:
        """Delete the key's object (if `condition`, only if it holds: tiering/conditions.py)."""
        return await self._in_writer(
            functools.partial(self.catalog.delete_object, bucket, key, condition=condition, now=self.clock())
        )

    async def delete_object_if(self, bucket: str, key: str, generation: int) -> bool:
        """Delete only the version a policy looked at (lifecycle expiration); False if it changed."""
        deleted = await self._in_writer(
            functools.partial(
                self.catalog.delete_object, bucket, key, expected_generation=generation, now=self.clock()
            )
        )
        return deleted is not None

    async def list_objects(
        self,
        bucket: str,
        *,
        prefix: str = "",
        delimiter: str = "",
        start_after: str = "",
        max_keys: int = 1000,
    ) -> ListPage:
        return await self._read(
            self.catalog.list_objects,
            bucket,
            prefix=prefix,
            delimiter=delimiter,
            start_after=start_after,
            max_keys=max_keys,
        )

    async def render_listing(
        self,
        render: Callable[[ListPage], _Rendered],
        bucket: str,
        *,
        prefix: str = "",
        delimiter: str = "",
        start_after: str = "",
        max_keys: int = 1000,
    ) -> _Rendered:
        """`render(page)` for one listing page, run in the worker thread that read the page: turning
        a thousand entries into a response is the bulk of a listing's work, and this way it stays
        off the event loop and costs no second thread hop."""

        def page_then_render() -> _Rendered:
            return render(self.listing.page(PageArgs(bucket, prefix, delimiter, start_after, max_keys)))

        return await asyncio.to_thread(page_then_render)

    def _list_page(self, args: PageArgs) -> ListPage:
        return self.catalog.list_objects(
            args.bucket,
            prefix=args.prefix,
            delimiter=args.delimiter,
            start_after=args.start_after,
            max_keys=args.max_keys,
        )

    async def replace_metadata(
        self, bucket: str, key: str, meta: ObjectMeta, *, if_etag: str | None
    ) -> ObjectRecord:
        return await self._in_writer(self.catalog.update_object_meta, bucket, key, meta, if_etag=if_etag)

    async def put_object_acl(self, bucket: str, key: str, acl: str) -> None:
        await self._in_writer(self.catalog.put_object_acl, bucket, key, acl)

    async def put_tags(self, bucket: str, key: str, tags: dict[str, str]) -> None:
        await self._in_writer(self.catalog.put_tags, bucket, key, tags)

    async def copy_data(
        self,
        source: OpenedObject,
        target: PendingWrite,
        start: int = 0,
        end: int | None = None,
    ) -> None:
        """Stream bytes of a pinned source object into a pending write (server-side copy)."""
        async for chunk in source.stream(start, source.record.size if end is None else end):
            await target.write(chunk)

    # --- moves between tiers (lifecycle, restore) ---------------------------------------------
    # The rule for every move: copy to the new tier, verify the copy, then compare-and-swap the
    # object's location in the catalog (skipped if the object changed meanwhile); the old data is
    # retired through the collector, which waits for readers that still hold it.

    async def _copy_segments(
        self, source: OpenedObject, tier: str, on_chunk: Throttle | None, verify: bool
    ) -> tuple[Segment, ...]:
        copied: list[Segment] = []
        offset = 0
        try:
            for segment in source.segments:
                size = segment.stored.size
                pending = await self.begin_write(tier, size_hint=size)
                try:
                    async for chunk in source.stream_stored(offset, offset + size, on_chunk):
                        await pending.write(chunk)
                    stored = await pending.seal()
                except BaseException:
                    await pending.abort()
                    raise
                copied.append(Segment(stored, segment.part_number, segment.etag, segment.checksum))
                if verify:
                    await self._verify_copy(tier, stored, pending.digests.md5_hex)
                offset += size
            self.check_may_commit([segment.stored.data_id for segment in copied])  # the caller commits next
        except BaseException:
            await self._discard(tier, copied)
            raise
        return tuple(copied)

    async def _verify_copy(self, tier: str, stored: StoredData, md5_hex: str) -> None:
        """Read the new copy back from its tier and compare it with what was written."""
        digest = hashlib.md5()
        reader = await self.tiers[tier].backend.open_reader(stored)
        try:
            async for chunk in reader.stream(0, stored.size):
                await asyncio.to_thread(digest.update, chunk)
        finally:
            await reader.close()
        if digest.hexdigest() != md5_hex:
            raise MoveVerificationFailed(f"copy {stored.data_id} on {tier} does not read back as written")

    async def _discard(self, tier: str, segments: list[Segment] | tuple[Segment, ...]) -> None:
        for segment in segments:
            with contextlib.suppress(BackendError, OSError):
                await self.tiers[tier].backend.delete(segment.stored)

    async def move_object(
        self,
        bucket: str,
        key: str,
        tier: str,
        *,
        reason: str,
        storage_class: str | None = None,
        expected_generation: int | None = None,
        on_chunk: Throttle | None = None,
        verify: bool = True,
    ) -> ObjectRecord | None:
        """Move an object's data to `tier`. None if there was nothing to do or it changed meanwhile."""
        if tier not in self.tiers:
            raise ValueError(f"no tier {tier!r}")
        source = await self.open_object(bucket, key, allow_archived=True)
        try:
            record = source.record
            if expected_generation is not None and record.generation != expected_generation:
                return None
            if record.tier == tier:
                if storage_class is None or storage_class == record.meta.storage_class:
                    return None
                copied = record.segments  # a rule's new class for data already on its tier: no copy
            else:
                copied = await self._copy_segments(source, tier, on_chunk, verify)
        finally:
            source.close()
        try:
            return await self._in_writer(
                self.catalog.commit_move,
                bucket,
                key,
                expected_generation=record.generation,
                tier=tier,
                segments=copied,
                storage_class=storage_class,
                now=self.clock(),
                reason=reason,
            )
        except (PreconditionFailed, ObjectNotFound):
            if copied is not record.segments:
                await self._discard(tier, copied)  # the object changed while we copied: keep its new state
            return None

    async def move_version(
        self,
        bucket: str,
        key: str,
        version_id: str,
        tier: str,
        *,
        storage_class: str,
        expected_generation: int,
        verify: bool = True,
        on_chunk: Throttle | None = None,
        reason: str = "noncurrent version",
    ) -> ObjectRecord | None:
        """Move a noncurrent version's data to `tier` (lifecycle's NoncurrentVersionTransition):
        copy, verify, compare-and-swap on the version's generation. None if it changed or went."""
        if tier not in self.tiers:
            raise ValueError(f"no tier {tier!r}")
        try:
            source = await self.open_object(bucket, key, allow_archived=True, version_id=version_id)
        except (ObjectNotFound, VersionNotFound, VersionIsDeleteMarker):
            return None
        try:
            record = source.record
            if record.generation != expected_generation or record.tier == tier:
                return None
            copied = await self._copy_segments(source, tier, on_chunk, verify)
        finally:
            source.close()
        try:
            return await self._in_writer(
                functools.partial(
                    self.catalog.move_version,
                    bucket,
                    key,
                    version_id,
                    expected_generation=expected_generation,
                    tier=tier,
                    segments=copied,
                    storage_class=storage_class,
                    now=self.clock(),
                    reason=reason,
                )
            )
        except PreconditionFailed:
            await self._discard(tier, copied)  # changed while we copied (or went): keep its state
            return None

    async def restripe_object(
        self,
        bucket: str,
        key: str,
        tier: str,
        *,
        needs: Callable[[StoredData], bool],
        on_chunk: Throttle | None = None,
    ) -> ObjectRecord | None:
        """Rewrite an object's data on its own tier with the tier's current code (after a recode),
        if `needs` says a segment wants it: copy → verify → compare-and-swap on the generation, like
        a move. None if there was nothing to do or the object changed meanwhile (copy discarded)."""
        try:
            source = await self.open_object(bucket, key, allow_archived=True)
        except (ObjectNotFound, BucketNotFound):
            return None  # deleted since the rebalancer planned it
        try:
            record = source.record
            if record.tier != tier or not any(needs(s.stored) for s in record.segments):
                return None
            copied = await self._copy_segments(source, tier, on_chunk, verify=True)
        finally:
            source.close()
        try:
            return await self._in_writer(
                self.catalog.commit_restripe,
                bucket,
                key,
                expected_generation=record.generation,
                segments=copied,
            )
        except (PreconditionFailed, ObjectNotFound):
            await self._discard(tier, copied)
            return None

    async def rewrap_keys(self, *, rotate: bool = True, batch: int = 500) -> dict[str, object]:
        """Master-key rotation: a new current key (`rotate`), then every SSE-S3 data key (objects
        and unfinished uploads) wrapped by an older one is re-wrapped by it. No object data is
        read or written; an object changed meanwhile was written under the new key anyway."""
        current = await asyncio.to_thread(self.keys.rotate) if rotate else self.keys.current_key_id
        rewrapped = skipped = 0
        cursor = ("", "")
        while True:
            page = await self._read(self.catalog.objects_after, cursor[0], cursor[1], batch)
            for record in page:
                raw = record.meta.encryption
                new = self.keys.rewrap(ObjectEncryption.from_json(raw)) if raw is not None else None
                if new is None:
                    continue
                if await self._in_writer(
                    self.catalog.set_encryption, record.bucket, record.key, record.generation, new.to_json()
                ):
                    rewrapped += 1
                else:
                    skipped += 1
            if len(page) < batch:
                break
            cursor = (page[-1].bucket, page[-1].key)
        upload_cursor = ""
        while True:
            uploads = await self._read(self.catalog.uploads_after, upload_cursor, batch)
            for upload in uploads:
                raw = upload.meta.encryption
                if raw is None:
                    continue
                new = self.keys.rewrap(ObjectEncryption.from_json(raw))
                if new is not None and await self._in_writer(
                    self.catalog.set_upload_encryption, upload.upload_id, raw, new.to_json()
                ):
                    rewrapped += 1
            if len(uploads) < batch:
                break
            upload_cursor = uploads[-1].upload_id
        log.info("encryption: master key %s current, %d data keys re-wrapped", current, rewrapped)
        return {"current_key_id": current, "rewrapped": rewrapped, "skipped_changed": skipped}

    async def record_accesses(
        self, accesses: dict[tuple[str, str, str], tuple[int, float]], half_life: float
    ) -> None:
        """Reads keyed by (bucket, key, version id or "" for the current version)."""
        await self._in_writer(self.catalog.record_accesses, accesses, half_life)

    async def objects_after(self, bucket: str, key: str, limit: int) -> list[ObjectRecord]:
        return await self._read(self.catalog.objects_after, bucket, key, limit)

    async def move_history(self, bucket: str, key: str) -> list[MoveRecord]:
        await self.head_object(bucket, key)
        return await self._read(self.catalog.moves_for, bucket, key)

    # --- restores of archived objects -----------------------------------------------------------

    async def request_restore(self, bucket: str, key: str, days: int, version_id: str | None = None) -> bool:
        """Ask for a readable copy of an archived object (its current version, or `version_id`,
        current or not) for `days`. True if one is already there.

        A new request is only recorded here (ongoing); the lifecycle daemon makes the copy.
        Asking again for a finished restore extends its expiry, as S3 does.
        """
        record = await self.head_object(bucket, key, version_id)
        if record.tier != COLD:
            raise NotArchived(bucket, key)
        # S3 rounds a restore's expiry up to the next midnight UTC.
        expiry = (int(self.clock() + days * 86400) // 86400 + 1) * 86400.0
        current = record.restore
        if current is not None and current.ongoing:
            raise RestoreInProgress(bucket, key)
        already = current is not None and current.expiry > self.clock()
        restore = (
            replace(current, expiry=expiry, days=days)
            if current is not None and already
            else RestoreState(ongoing=True, expiry=expiry, days=days)
        )
        await self._set_restore(record, restore)
        return already

    async def _set_restore(self, record: ObjectRecord, restore: RestoreState | None) -> None:
        """The catalog's compare-and-swap of the restore state of exactly this version."""
        await self._in_writer(
            functools.partial(
                self.catalog.set_restore,
                record.bucket,
                record.key,
                expected_generation=record.generation,
                restore=restore,
                now=self.clock(),
                version_id=record.version_id,
            )
        )

    async def complete_restore(
        self, record: ObjectRecord, tier: str, on_chunk: Throttle | None = None
    ) -> bool:
        """Copy an archived version to `tier` as its restored copy. False if it changed meanwhile."""
        assert record.restore is not None
        try:
            source = await self.open_object(
                record.bucket, record.key, allow_archived=True, version_id=record.version_id
            )
        except (ObjectNotFound, VersionNotFound, VersionIsDeleteMarker):
            return False  # deleted since the daemon looked
        try:
            if source.record.generation != record.generation:
                return False
            copied = await self._copy_segments(source, tier, on_chunk, verify=True)
        finally:
            source.close()
        done = RestoreState(
            ongoing=False, expiry=record.restore.expiry, days=record.restore.days, tier=tier, segments=copied
        )
        try:
            await self._set_restore(record, done)
        except (PreconditionFailed, ObjectNotFound):
            await self._discard(tier, copied)
            return False
        return True

    async def expire_restore(self, record: ObjectRecord) -> None:
        with contextlib.suppress(PreconditionFailed, ObjectNotFound):
            await self._set_restore(record, None)

    async def restored_versions(self, after: tuple[str, str, str], limit: int) -> list[ObjectRecord]:
        """Noncurrent versions with a restore asked for or made (the daemon's second scan)."""
        return await self._read(self.catalog.restored_versions, after, limit)

    # --- multipart uploads ------------------------------------------------------------------

    async def create_upload(
        self,
        bucket: str,
        key: str,
        meta: ObjectMeta,
        *,
        checksum_algorithm: str | None,
        owner: str,
        checksum_type: str | None = None,
        encryption: EncryptionRequest | None = None,
    ) -> UploadRecord:
        if encryption is None:
            encryption = await self.default_encryption(bucket)
        if encryption is not None:
            # One data key for the whole object; every part is its own sealed blob.
            meta = replace(meta, encryption=self.keys.new_object(encryption)[0].to_json())
        upload = UploadRecord(
            upload_id=new_upload_id(),
            bucket=bucket,
            key=key,
            initiated=self.clock(),
            tier=self.tier_for(meta.storage_class),
            meta=meta,
            checksum_algorithm=checksum_algorithm.upper() if checksum_algorithm else None,
            owner=owner,
            checksum_type=checksum_type if checksum_algorithm else None,
        )
        await self._in_writer(self.catalog.create_upload, upload)
        return upload

    async def get_upload(self, bucket: str, key: str, upload_id: str) -> UploadRecord:
        return await self._read(self.catalog.get_upload, bucket, key, upload_id)

    async def begin_part(
        self,
        upload: UploadRecord,
        *,
        size_hint: int | None,
        checksum_algorithm: str | None,
        part_number: int = 0,
        customer_key: bytes | None = None,
    ) -> PendingWrite:
        """A part's write; sealed under the upload's data key when the upload is encrypted
        (SSE-C: with the customer's key, which must be the upload's)."""
        sealing = None
        if upload.meta.encryption is not None:
            enc = ObjectEncryption.from_json(upload.meta.encryption)
            if enc.mode == SSE_C and customer_key is None:
                raise SSECustomerKeyRequired()
            if enc.mode != SSE_C and customer_key is not None:
                raise SSENotApplicable()
            sealing = (enc, await asyncio.to_thread(self.keys.data_key, enc, customer_key), part_number)
        elif customer_key is not None:
            raise SSENotApplicable()
        return await self.begin_write(
            upload.tier,
            size_hint=size_hint,
            checksum_algorithm=checksum_algorithm or upload.checksum_algorithm,
            sealing=sealing,
        )

    async def list_parts(
        self, upload: UploadRecord, *, marker: int = 0, limit: int = 1000
    ) -> list[PartRecord]:
        return await self._read(self.catalog.list_parts, upload.upload_id, marker=marker, limit=limit)

    async def list_uploads(
        self,
        bucket: str,
        *,
        prefix: str = "",
        key_marker: str = "",
        upload_id_marker: str = "",
        limit: int = 1000,
    ) -> list[UploadRecord]:
        return await self._read(
            self.catalog.list_uploads,
            bucket,
            prefix=prefix,
            key_marker=key_marker,
            upload_id_marker=upload_id_marker,
            limit=limit,
        )

    async def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        await self.get_bucket(bucket)
        await self._in_writer(self.catalog.abort_upload, bucket, key, upload_id)

    async def complete_upload(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        requested: list[tuple[int, str]],
        *,
        if_match: str | None = None,
        if_none_match: str | None = None,
        expected_checksum: tuple[str, str] | None = None,
        expected_checksum_type: str | None = None,
    ) -> ObjectRecord:
        """Assemble the listed parts (part number, ETag) into the visible object.

        A completion that is sent again (the client did not hear the first answer) gets the same
        object back while that object is still the key's current one; otherwise UploadNotFound.
        `expected_checksum` is the client's (algorithm, value) of the object's checksum: BadDigest
        (ChecksumMismatch) unless it is the assembled object's; `expected_checksum_type`, if given,
        must be the upload's (ChecksumTypeMismatch).
        """
        requested = [(number, etag.strip().strip('"')) for number, etag in requested]
        try:
            upload = await self.get_upload(bucket, key, upload_id)
            if expected_checksum_type is not None and upload.checksum_algorithm:
                if expected_checksum_type.upper() != (upload.checksum_type or COMPOSITE):
                    raise ChecksumTypeMismatch(upload.checksum_type or COMPOSITE)
            await self.check_write_condition(bucket, key, if_match, if_none_match)
            with _conflict_if_conditional(bucket, key, if_match, if_none_match):
                return await self._complete(upload, requested, if_match, if_none_match, expected_checksum)
        except (UploadNotFound, InvalidPart) as error:
            # Completed already (maybe just now, by a concurrent retry, or by another process,
            # which can also make the parts vanish under this one's look at them)?
            replay = await self._read(self.catalog.completed_upload, bucket, key, upload_id, requested)
            if replay is not None:
                return replay
            if isinstance(error, InvalidPart):
                # Parts missing because a concurrent completion took them, and its object is no
                # longer the key's current one (no replay): the upload is gone, NoSuchUpload — not
                # InvalidPart, which says this client listed parts it never uploaded.
                await self.get_upload(bucket, key, upload_id)
            raise

    async def _complete(
        self,
        upload: UploadRecord,
        requested: list[tuple[int, str]],
        if_match: str | None,
        if_none_match: str | None,
        expected_checksum: tuple[str, str] | None,
    ) -> ObjectRecord:
        if not requested:
            raise InvalidPart(0, "no parts given")
        numbers = [n for n, _ in requested]
        if numbers != sorted(numbers) or len(set(numbers)) != len(numbers):
            raise InvalidPartOrder("parts must be listed in ascending order")
        stored_parts = {p.part_number: p for p in await self.list_parts(upload, limit=MAX_PARTS)}
        chosen: list[PartRecord] = []
        for number, etag in requested:
            part = stored_parts.get(number)
            if part is None or etag != part.etag:
                raise InvalidPart(number, "not uploaded or ETag differs")
            chosen.append(part)
        for part in chosen[:-1]:
            if part.size < MIN_PART_SIZE:
                raise PartTooSmall(part.part_number, part.size)
        md5s = b"".join(bytes.fromhex(p.etag) for p in chosen)
        etag = f"{hashlib.md5(md5s).hexdigest()}-{len(chosen)}"
        checksum = None
        if upload.checksum_algorithm and all(p.checksum for p in chosen):
            if upload.checksum_type == FULL_OBJECT:
                checksum = combine_full_object(
                    upload.checksum_algorithm, [(p.checksum or "", p.size) for p in chosen]
                )
            else:
                checksum = combine_part_checksums(
                    upload.checksum_algorithm, [p.checksum or "" for p in chosen]
                )
        if expected_checksum is not None:
            algorithm, value = expected_checksum
            # A composite value may be given with or without its "-<parts>" suffix.
            if (
                algorithm != upload.checksum_algorithm
                or checksum is None
                or value.split("-")[0] != checksum.split("-")[0]
            ):
                raise ChecksumMismatch(algorithm)
        record = ObjectRecord(
            bucket=upload.bucket,
            key=upload.key,
            size=sum(p.size for p in chosen),
            etag=etag,
            last_modified=self.clock(),
            tier=upload.tier,
            meta=upload.meta,
            segments=tuple(Segment(p.stored, p.part_number, p.etag, p.checksum) for p in chosen),
            checksum_algorithm=upload.checksum_algorithm if checksum else None,
            checksum=checksum,
        )
        return await self._in_writer(
            self.catalog.complete_upload,
            upload,
            record,
            if_match=if_match,
            if_none_match=if_none_match,
            requested=requested,
        )


__all__ = [
    "BucketNotFound",
    "ObjectNotFound",
    "ObjectStore",
    "OpenedObject",
    "PendingWrite",
    "UploadNotFound",
]
