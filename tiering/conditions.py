"""Conditional writes and deletes: what a caller requires of a key's current object.

S3's conditional writes (If-None-Match: * / If-Match: ETag on PutObject, CompleteMultipartUpload,
CopyObject) and conditional deletes (If-Match, x-amz-if-match-last-modified-time,
x-amz-if-match-size) are decided here, on the current object as one transaction of the catalog
reads it: the catalog calls `check` inside the transaction that commits (or deletes) the row, so
two writers racing on one key — in one gateway or in several on one database — can never both
see their condition hold. The store also calls `check` once before a write starts, on a plain
read, so that a condition that fails from the start is a 412 and one that fails only at the
commit — another writer won the race meanwhile — is a 409 (`ConditionalConflict`), as in S3.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiering.errors import ObjectNotFound, PreconditionFailed
from tiering.records import ObjectRecord


@dataclass(frozen=True)
class WriteCondition:
    """`if_match`: an ETag (unquoted) the current object must have, or "*" (any object);
    `if_none_match`: there must be no current object (If-None-Match: *)."""

    if_match: str | None = None
    if_none_match: bool = False

    def __init__(self, if_match: str | None = None, if_none_match: bool = False) -> None:
        # Written out, not generated: built once a PUT (see tiering/records.py on why).
        object.__setattr__(self, "if_match", if_match)
        object.__setattr__(self, "if_none_match", if_none_match)

    def __bool__(self) -> bool:
        return self.if_match is not None or self.if_none_match

    def check(self, bucket: str, key: str, current: ObjectRecord | None) -> None:
        """Raise PreconditionFailed (or ObjectNotFound: If-Match on no object) unless it holds."""
        if self.if_none_match and current is not None:
            raise PreconditionFailed("If-None-Match")
        if self.if_match is not None:
            if current is None:
                raise ObjectNotFound(bucket, key)
            if self.if_match != "*" and self.if_match != current.etag:
                raise PreconditionFailed("If-Match")


@dataclass(frozen=True)
class DeleteCondition:
    """What a conditional delete requires of the current object: its ETag (or "*": that it
    exists), its last-modified time (whole seconds, as the header and XML carry it), its size."""

    etag: str | None = None
    last_modified: int | None = None
    size: int | None = None

    def __bool__(self) -> bool:
        return self.etag is not None or self.last_modified is not None or self.size is not None

    def check(self, bucket: str, key: str, current: ObjectRecord | None) -> bool:
        """True: delete `current`; False: there is nothing to delete (and no error to give).

        As in S3: If-Match on no object is NoSuchKey; a time or size condition on no object
        holds (the delete answers 204, like any delete of a missing key).
        """
        if current is None:
            if self.etag is not None:
                raise ObjectNotFound(bucket, key)
            return False
        if self.etag is not None and self.etag != "*" and self.etag != current.etag:
            raise PreconditionFailed("If-Match")
        if self.last_modified is not None and self.last_modified != int(current.last_modified):
            raise PreconditionFailed("x-amz-if-match-last-modified-time")
        if self.size is not None and self.size != current.size:
            raise PreconditionFailed("x-amz-if-match-size")
        return True


def write_condition(if_match: str | None, if_none_match: str | None) -> WriteCondition:
    """The condition of If-Match / If-None-Match header values (an ETag quoted or not)."""
    return WriteCondition(
        if_match=None if if_match is None else if_match.strip().strip('"'),
        if_none_match=if_none_match is not None,
    )
