"""A tier backend that keeps blobs in an external S3 bucket: a cloud bucket, or another tierstore.

This is how the cold tier becomes "a remote cloud bucket": each blob is one remote object named
`<prefix><data_id>` (never the user's key, so nothing about the namespace leaks to the remote).

Writes stream with bounded memory: a writer buffers at most one part (`part_size`, default
16 MiB). A blob smaller than one part is a single PutObject at `finish()`; a larger one becomes a
remote multipart upload, one part uploaded each time the buffer fills. Every upload carries a
Content-MD5 so the remote refuses bytes damaged on the way. `finish()` returns only after the
remote acknowledged the whole object, so the catalog commit that follows never points at bytes
the remote does not hold.

Reads HEAD the blob once when opened (a missing blob fails before any byte is sent) and then
stream ranged GETs in 1 MiB reads, pinned to the ETag seen at open (If-Match). A GET that breaks
mid-body is resumed from where it stopped.

boto3 is blocking: every call runs in a worker thread (`asyncio.to_thread`) through one client
per backend (botocore clients are thread-safe) whose connection pool is sized for concurrency.
Timeouts and retries are bounded, so a remote that is down makes requests fail in seconds with
`DataUnavailable` (reads) or `WriteQuorumLost` (writes) instead of hanging them.

Options (a `[tiers.<name>]` table with `backend = "s3"`):

    endpoint = "https://s3.eu-west-1.amazonaws.com"   # empty: AWS's default for `region`
    bucket = "my-archive"                             # must exist
    access_key = "..."        # empty: boto3's default chain (AWS_* env vars, profile, instance role)
    secret_key = "..."
    region = "us-east-1"
    prefix = "tierstore/"     # key prefix inside the remote bucket
    addressing_style = "path" # or "virtual" / "auto"
    part_size = 16777216      # bytes per remote part (at least 5 MiB)
    verify_tls = true         # false, or the path of a CA bundle
    connect_timeout = 5       # seconds
    read_timeout = 60         # seconds
    max_attempts = 3          # per remote call, retries included ("standard" retry mode)

A crash mid-upload can leave an incomplete multipart upload on the remote; give the remote bucket
an AbortIncompleteMultipartUpload lifecycle rule for `prefix` to reclaim that space.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from tiering.backend import (
    BackendError,
    CapacityExceeded,
    DataNotFound,
    DataReader,
    DataUnavailable,
    DataWriter,
    StoredData,
    TierBackend,
    WriteQuorumLost,
    register_backend,
)

log = logging.getLogger("tierstore.tiering.s3")

T = TypeVar("T")

MiB = 1 << 20
READ_CHUNK = MiB
DEFAULT_PART_SIZE = 16 * MiB
MIN_PART_SIZE = 5 * MiB  # S3's floor for every part but the last
MAX_PARTS = 10_000
MAX_POOL_CONNECTIONS = 32
READ_RESUMES = 3  # a ranged GET that breaks mid-body is resumed this many times

_NOT_FOUND = frozenset({"NoSuchKey", "NotFound", "404", "PreconditionFailed", "412"})
_NO_ROOM = frozenset(
    {"EntityTooLarge", "QuotaExceeded", "XMinioStorageFull", "InsufficientStorage", "StorageFull"}
)


def _as_bool_or_path(value: Any) -> bool | str:
    if isinstance(value, bool):
        return value
    text = str(value).strip()
    if text.lower() in ("1", "true", "yes", "on", ""):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    return text  # a CA bundle


def _error_code(exc: ClientError) -> tuple[str, int]:
    error = exc.response.get("Error", {})
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return str(error.get("Code") or status), status


def translate(exc: Exception, what: str, *, writing: bool = False) -> BackendError:
    """The backend error for a botocore failure (`what` names the blob for the message)."""
    if isinstance(exc, ClientError):
        code, status = _error_code(exc)
        message = f"remote S3 {code} ({status}) on {what}"
        if writing:
            if code in _NO_ROOM or status == 507:
                return CapacityExceeded(message)
            return WriteQuorumLost(message)
        if code in _NOT_FOUND or status in (404, 412):
            return DataNotFound(message)
        return DataUnavailable(message)
    message = f"remote S3 unreachable on {what}: {exc}"
    return WriteQuorumLost(message) if writing else DataUnavailable(message)


def _md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


class _RemoteWriter(DataWriter):
    """Buffers one part at a time; the first full part starts a remote multipart upload."""

    def __init__(self, backend: S3RemoteBackend, data_id: str, part_size: int) -> None:
        self._backend = backend
        self._data_id = data_id
        self._key = backend.key_for(data_id)
        self._part_size = part_size
        self._buffer = bytearray()
        self._size = 0
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self._closed = False

    async def write(self, chunk: bytes | memoryview) -> None:
        if self._closed:
            raise WriteQuorumLost(f"write to finished or aborted blob {self._data_id}")
        self._buffer += chunk
        self._size += len(chunk)
        while len(self._buffer) >= self._part_size:
            part = bytes(self._buffer[: self._part_size])
            del self._buffer[: self._part_size]
            try:
                await self._upload_part(part)
            except BaseException:
                await self.abort()  # no incomplete upload left behind on the remote
                raise

    async def _upload_part(self, data: bytes) -> None:
        backend = self._backend
        if self._upload_id is None:
            created = await backend.call(
                lambda: backend.client.create_multipart_upload(Bucket=backend.bucket, Key=self._key),
                self._key,
                writing=True,
            )
            self._upload_id = str(created["UploadId"])
        number = len(self._parts) + 1
        if number > MAX_PARTS:
            raise CapacityExceeded(f"blob {self._data_id} needs more than {MAX_PARTS} remote parts")
        upload_id = self._upload_id

        def upload() -> dict[str, Any]:
            return backend.client.upload_part(
                Bucket=backend.bucket,
                Key=self._key,
                UploadId=upload_id,
                PartNumber=number,
                Body=data,
                ContentLength=len(data),
                ContentMD5=_md5_b64(data),
            )

        reply = await backend.call(upload, self._key, writing=True)
        self._parts.append({"PartNumber": number, "ETag": reply["ETag"]})
        backend.bytes_written += len(data)

    async def finish(self) -> StoredData:
        if self._closed:
            raise WriteQuorumLost(f"blob {self._data_id} already finished or aborted")
        backend = self._backend
        try:
            if self._upload_id is None:
                data, self._buffer = bytes(self._buffer), bytearray()

                def put() -> dict[str, Any]:
                    return backend.client.put_object(
                        Bucket=backend.bucket,
                        Key=self._key,
                        Body=data,
                        ContentLength=len(data),
                        ContentMD5=_md5_b64(data),
                    )

                reply = await backend.call(put, self._key, writing=True)
                backend.bytes_written += len(data)
            else:
                if self._buffer:
                    last, self._buffer = bytes(self._buffer), bytearray()
                    await self._upload_part(last)
                upload_id, parts = self._upload_id, list(self._parts)
                reply = await backend.call(
                    lambda: backend.client.complete_multipart_upload(
                        Bucket=backend.bucket,
                        Key=self._key,
                        UploadId=upload_id,
                        MultipartUpload={"Parts": parts},
                    ),
                    self._key,
                    writing=True,
                )
        except BaseException:
            await self.abort()
            raise
        self._closed = True
        self._upload_id = None
        backend.blobs_written += 1
        etag = str(reply.get("ETag", "")).strip('"')
        return StoredData(
            self._data_id, self._size, {"bucket": backend.bucket, "key": self._key, "etag": etag}
        )

    async def abort(self) -> None:
        self._closed = True
        self._buffer = bytearray()
        upload_id, self._upload_id = self._upload_id, None
        if upload_id is None:
            return
        backend = self._backend
        try:
            await backend.call(
                lambda: backend.client.abort_multipart_upload(
                    Bucket=backend.bucket, Key=self._key, UploadId=upload_id
                ),
                self._key,
            )
        except DataNotFound:
            pass  # NoSuchUpload: already gone
        except BackendError as exc:
            log.warning(
                "could not abort remote multipart upload of %s (left for the bucket's lifecycle rule): %s",
                self._key,
                exc,
            )


class _RemoteReader(DataReader):
    def __init__(self, backend: S3RemoteBackend, bucket: str, key: str, etag: str) -> None:
        self._backend = backend
        self._bucket = bucket
        self._key = key
        self._etag = etag

    def _get(self, start: int, end: int) -> Any:
        extra = {"IfMatch": self._etag} if self._etag else {}
        reply = self._backend.client.get_object(
            Bucket=self._bucket, Key=self._key, Range=f"bytes={start}-{end - 1}", **extra
        )
        return reply["Body"]

    async def stream(self, start: int, end: int) -> AsyncIterator[bytes]:
        backend = self._backend
        position = start
        resumes = 0
        while position < end:
            body = await backend.call(functools.partial(self._get, position, end), self._key)
            try:
                while position < end:
                    try:
                        chunk = await asyncio.to_thread(body.read, min(READ_CHUNK, end - position))
                    except (BotoCoreError, OSError) as exc:
                        if resumes >= READ_RESUMES:
                            raise translate(exc, self._key) from exc
                        resumes += 1
                        log.info("remote GET of %s broke at byte %d, resuming: %s", self._key, position, exc)
                        break
                    if not chunk:
                        raise DataNotFound(f"remote blob {self._key} shorter than recorded")
                    position += len(chunk)
                    backend.bytes_read += len(chunk)
                    yield chunk
            finally:
                with contextlib.suppress(Exception):
                    body.close()

    async def close(self) -> None:
        pass


@register_backend("s3")
class S3RemoteBackend(TierBackend):
    """Blobs as objects `<prefix><data_id>` in one bucket of an external S3 endpoint."""

    kind = "s3"

    def __init__(
        self,
        endpoint: str = "",
        bucket: str = "",
        access_key: str = "",
        secret_key: str = "",
        region: str = "us-east-1",
        prefix: str = "tierstore/",
        addressing_style: str = "path",
        part_size: int | str = DEFAULT_PART_SIZE,
        verify_tls: bool | str = True,
        connect_timeout: float | str = 5.0,
        read_timeout: float | str = 60.0,
        max_attempts: int | str = 3,
        name: str = "",
        **_: Any,
    ) -> None:
        if not bucket:
            raise ValueError(f"tier {name or '?'}: backend 's3' needs a bucket")
        self.endpoint = str(endpoint)
        self.bucket = str(bucket)
        self.prefix = str(prefix)
        self.region = str(region) or "us-east-1"
        self.name = name
        self.part_size = max(int(part_size), MIN_PART_SIZE)
        config = Config(
            region_name=self.region,
            signature_version="s3v4",
            s3={"addressing_style": str(addressing_style) or "path"},
            retries={"mode": "standard", "max_attempts": max(int(max_attempts), 1)},
            max_pool_connections=MAX_POOL_CONNECTIONS,
            connect_timeout=float(connect_timeout),
            read_timeout=float(read_timeout),
            # Content-MD5 protects every upload; trailing checksums are not spoken by every
            # S3-compatible remote.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        session = boto3.session.Session()
        self.client = session.client(
            "s3",
            endpoint_url=self.endpoint or None,
            aws_access_key_id=str(access_key) or None,
            aws_secret_access_key=str(secret_key) or None,
            verify=_as_bool_or_path(verify_tls),
            config=config,
        )
        self.reachable: bool | None = None
        self.bytes_written = 0
        self.bytes_read = 0
        self.blobs_written = 0
        self.errors = 0
        self._probe: asyncio.Task[None] | None = None

    def key_for(self, data_id: str) -> str:
        return f"{self.prefix}{data_id}"

    def _where(self, stored: StoredData) -> tuple[str, str]:
        location = stored.location or {}
        return str(location.get("bucket") or self.bucket), str(
            location.get("key") or self.key_for(stored.data_id)
        )

    async def call(self, action: Callable[[], T], what: str, *, writing: bool = False) -> T:
        """Run one blocking boto3 call in a worker thread, mapping its failures."""
        try:
            return await asyncio.to_thread(action)
        except (ClientError, BotoCoreError) as exc:
            self.errors += 1
            raise translate(exc, what, writing=writing) from exc

    # --- TierBackend ----------------------------------------------------------------------

    async def create_writer(self, data_id: str, size_hint: int | None = None) -> DataWriter:
        part_size = self.part_size
        if size_hint and size_hint > part_size * MAX_PARTS:
            part_size = -(-size_hint // MAX_PARTS)
        return _RemoteWriter(self, data_id, part_size)

    async def open_reader(self, stored: StoredData) -> DataReader:
        bucket, key = self._where(stored)
        head = await self.call(lambda: self.client.head_object(Bucket=bucket, Key=key), key)
        if int(head.get("ContentLength", -1)) != stored.size:
            raise DataNotFound(f"remote blob {key} is {head.get('ContentLength')} bytes, not {stored.size}")
        return _RemoteReader(self, bucket, key, str(head.get("ETag", "")))

    async def delete(self, stored: StoredData) -> None:
        bucket, key = self._where(stored)
        try:
            await self.call(lambda: self.client.delete_object(Bucket=bucket, Key=key), key)
        except DataNotFound:
            pass

    async def exists(self, stored: StoredData) -> bool:
        bucket, key = self._where(stored)
        try:
            await self.call(lambda: self.client.head_object(Bucket=bucket, Key=key), key)
        except DataNotFound:
            return False
        return True

    async def start(self) -> None:
        # In the background: a remote that is down must not hold up (or crash) the server.
        self._probe = asyncio.create_task(self._check_reachable())

    async def _check_reachable(self) -> None:
        try:
            await self.call(lambda: self.client.head_bucket(Bucket=self.bucket), self.bucket)
        except BackendError as exc:
            self.reachable = False
            log.warning(
                "tier %s: remote S3 bucket %r at %s is not reachable (%s); writes to and reads from "
                "this tier will fail until it is",
                self.name,
                self.bucket,
                self.endpoint or "AWS",
                exc,
            )
            return
        self.reachable = True
        log.info(
            "tier %s: remote S3 bucket %r at %s is reachable", self.name, self.bucket, self.endpoint or "AWS"
        )

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._probe
            self._probe = None
        await asyncio.to_thread(self.client.close)

    async def recent_data(self, since: float, until: float) -> list[StoredData]:
        """Remote blobs under `prefix` last modified in [since, until) (by the remote's clock)."""

        def scan() -> list[StoredData]:
            found: list[StoredData] = []
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            ):
                for obj in page.get("Contents", []):
                    if since <= obj["LastModified"].timestamp() < until:
                        data_id = obj["Key"][len(self.prefix) :]
                        location = {
                            "bucket": self.bucket,
                            "key": obj["Key"],
                            "etag": str(obj.get("ETag", "")).strip('"'),
                        }
                        found.append(StoredData(data_id, int(obj["Size"]), location))
            return found

        return await self.call(scan, self.prefix)

    def stats(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint or "aws",
            "bucket": self.bucket,
            "prefix": self.prefix,
            "region": self.region,
            "part_size": self.part_size,
            "reachable": self.reachable,
            "bytes_written": self.bytes_written,
            "bytes_read": self.bytes_read,
            "blobs_written": self.blobs_written,
            "errors": self.errors,
        }
