"""Small pieces several handler families share."""

from __future__ import annotations

import hashlib

from server.context import S3Request
from server.errors import BadDigest, EntityTooLarge, InvalidArgument
from server.http_semantics import content_md5
from server.xml_io import Value
from tiering.small_writes import MAX_BODY_BYTES as SMALL_WRITE_MAX_BYTES
from tiering.store import PendingWrite

MAX_PUT_SIZE = 5 * 1024**3  # the largest single PUT or part, as on AWS
# A plain body declared this small is read in one piece (`PayloadReader.read_whole`): the most
# the small-PUT committer takes, which holds it whole either way.
WHOLE_BODY_BYTES = SMALL_WRITE_MAX_BYTES


def owner_of(req: S3Request) -> tuple[str, str]:
    """(canonical id, display name) of the caller: a stable id derived from the access key."""
    key = req.auth.access_key
    return hashlib.sha256(key.encode()).hexdigest(), key


def owner_xml(req: S3Request) -> list[tuple[str, Value]]:
    owner_id, name = owner_of(req)
    return [("ID", owner_id), ("DisplayName", name)]


def int_param(req: S3Request, name: str, default: int, *, low: int = 0, high: int | None = None) -> int:
    raw = req.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgument(
            f"Provided {name} not an integer or within integer range", ArgumentName=name, ArgumentValue=raw
        ) from None
    if value < low:
        raise InvalidArgument(
            f"Argument {name} must be an integer between {low} and 2147483647",
            ArgumentName=name,
            ArgumentValue=raw,
        )
    return min(value, high) if high is not None else value


def version_param(req: S3Request) -> str | None:
    """The `versionId` a request names (None: the current version)."""
    version = req.query.get("versionId")
    if version == "":
        raise InvalidArgument(
            "Version id cannot be the empty string", ArgumentName="versionId", ArgumentValue=""
        )
    return version


def version_headers(version_id: str, named: bool = False) -> dict[str, str]:
    """x-amz-version-id of an answer about a version: every version of a versioned bucket has
    one; a bucket never versioned has only "null", said only when the request named it."""
    return {"x-amz-version-id": version_id} if version_id != "null" or named else {}


async def receive_body(req: S3Request, pending: PendingWrite) -> None:
    """Stream the request body into a pending write and check every digest the client declared.

    Raises before anything is committed, so a failed check leaves the old state intact.
    """
    declared_md5 = content_md5(req.headers)
    payload = req.payload()
    whole = await payload.read_whole(WHOLE_BODY_BYTES)
    if whole is not None:
        await pending.write(whole)
    else:
        async for chunk in payload:
            if pending.size + len(chunk) > MAX_PUT_SIZE:
                raise EntityTooLarge(ProposedSize=pending.size + len(chunk), MaxSizeAllowed=MAX_PUT_SIZE)
            await pending.write(chunk)
    # Digests are final here; the data is made durable by the commit, after these checks.
    await pending.end_body()
    digests = pending.digests
    if declared_md5 is not None and declared_md5 != digests.md5_hex:
        raise BadDigest(ExpectedDigest=declared_md5, CalculatedDigest=digests.md5_hex)
    algorithm = digests.checksum_algorithm
    if algorithm:
        name = f"x-amz-checksum-{algorithm.lower()}"
        expected = req.header(name) or payload.trailers.get(name)
        if expected is not None and expected.strip() != digests.checksum_b64:
            raise BadDigest(f"The {algorithm} you specified did not match the calculated checksum.")
