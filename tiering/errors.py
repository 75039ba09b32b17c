"""Errors of the namespace. They say what is wrong in storage terms; `server` maps them to S3."""

from __future__ import annotations


class TieringError(Exception):
    """Base of every error the ObjectStore raises on purpose."""


class BucketNotFound(TieringError):
    def __init__(self, bucket: str) -> None:
        super().__init__(f"bucket {bucket!r} does not exist")
        self.bucket = bucket


class BucketAlreadyExists(TieringError):
    def __init__(self, bucket: str, *, owned_by_caller: bool) -> None:
        super().__init__(f"bucket {bucket!r} exists")
        self.bucket = bucket
        self.owned_by_caller = owned_by_caller


class BucketNotEmpty(TieringError):
    def __init__(self, bucket: str) -> None:
        super().__init__(f"bucket {bucket!r} is not empty")
        self.bucket = bucket


class ObjectNotFound(TieringError):
    def __init__(self, bucket: str, key: str) -> None:
        super().__init__(f"no object {key!r} in bucket {bucket!r}")
        self.bucket = bucket
        self.key = key


class UploadNotFound(TieringError):
    def __init__(self, upload_id: str) -> None:
        super().__init__(f"no multipart upload {upload_id!r}")
        self.upload_id = upload_id


class PreconditionFailed(TieringError):
    """A conditional write found the object in another state than the caller required."""

    def __init__(self, condition: str) -> None:
        super().__init__(f"precondition {condition} failed")
        self.condition = condition


class ConditionalConflict(PreconditionFailed):
    """A conditional write's condition held when it began, but another write to the key
    committed first and its commit found the condition no longer true (S3: 409)."""

    def __init__(self, bucket: str, key: str) -> None:
        super().__init__("concurrent write")
        self.args = (f"a concurrent write to {key!r} in bucket {bucket!r} won the race",)
        self.bucket = bucket
        self.key = key


class InvalidPart(TieringError):
    def __init__(self, part_number: int, reason: str) -> None:
        super().__init__(f"part {part_number}: {reason}")
        self.part_number = part_number


class InvalidPartOrder(TieringError):
    pass


class ChecksumMismatch(TieringError):
    """The whole-object checksum a client gave at completion is not the assembled object's."""

    def __init__(self, algorithm: str) -> None:
        super().__init__(f"the {algorithm} checksum given does not match the object")
        self.algorithm = algorithm


class ChecksumTypeMismatch(TieringError):
    """A completion names another checksum type than the upload was created with."""

    def __init__(self, upload_type: str) -> None:
        super().__init__(f"the upload was created with the {upload_type} checksum type")
        self.upload_type = upload_type


class PartTooSmall(TieringError):
    def __init__(self, part_number: int, size: int) -> None:
        super().__init__(f"part {part_number} is {size} bytes, below the 5 MiB minimum")
        self.part_number = part_number


class ObjectTooLarge(TieringError):
    pass


class DataUnreadable(TieringError):
    """The object's bytes cannot be read now (its data is lost or too many shards are down)."""

    def __init__(self, bucket: str, key: str, reason: str) -> None:
        super().__init__(f"{bucket}/{key}: {reason}")
        self.bucket = bucket
        self.key = key


class ObjectDataLost(TieringError):
    """Heal found the object's data unrecoverable (fewer than k shards left anywhere): no retry helps."""

    def __init__(self, bucket: str, key: str) -> None:
        super().__init__(f"{bucket}/{key}: its data is lost")
        self.bucket = bucket
        self.key = key


class InsufficientCapacity(TieringError):
    pass


class UnknownStorageClass(TieringError):
    def __init__(self, storage_class: str) -> None:
        super().__init__(f"unknown storage class {storage_class!r}")
        self.storage_class = storage_class


class ObjectArchived(TieringError):
    """The object's data is in the archive tier: it must be restored before it can be read."""

    def __init__(self, bucket: str, key: str) -> None:
        super().__init__(f"{bucket}/{key} is archived")
        self.bucket = bucket
        self.key = key


class NotArchived(TieringError):
    """RestoreObject on an object that is not in the archive tier."""

    def __init__(self, bucket: str, key: str) -> None:
        super().__init__(f"{bucket}/{key} is not archived")
        self.bucket = bucket
        self.key = key


class RestoreInProgress(TieringError):
    def __init__(self, bucket: str, key: str) -> None:
        super().__init__(f"a restore of {bucket}/{key} is already in progress")
        self.bucket = bucket
        self.key = key


class MoveVerificationFailed(TieringError):
    """A copy made for a tier move did not read back as written; the move is abandoned."""


class TierUnavailable(TieringError):
    """A tier cannot store new data right now (too few failure domains up, remote unreachable)."""


class CatalogUnavailable(TieringError):
    """The catalog database cannot be reached right now (PostgreSQL down or restarting, its
    connections exhausted): nothing was decided, the client should retry shortly."""


# --- encryption at rest -----------------------------------------------------------------------


class SSECustomerKeyRequired(TieringError):
    """The object is encrypted with a customer key (SSE-C) and none was given."""

    def __init__(self) -> None:
        super().__init__("the object is encrypted with a customer-provided key")


class SSECustomerKeyMismatch(TieringError):
    """The customer key given is not the one the object was encrypted with."""

    def __init__(self) -> None:
        super().__init__("the customer-provided key does not match the object's")


class SSENotApplicable(TieringError):
    """A customer key was given for an object that is not encrypted with one."""

    def __init__(self) -> None:
        super().__init__("the object is not encrypted with a customer-provided key")


class KmsKeyNotFound(TieringError):
    def __init__(self, key_id: str) -> None:
        super().__init__(f"no KMS key {key_id!r}")
        self.key_id = key_id


class EncryptionKeyUnavailable(TieringError):
    """A stored object's wrapping key is missing from the keyring (or does not unwrap its data
    key): the operator's configuration lost a master key. The data is intact, not readable here."""


class DeleteMarkerCurrent(ObjectNotFound):
    """The key's current version is a delete marker: it reads as missing, and says so."""

    def __init__(self, bucket: str, key: str, version_id: str) -> None:
        super().__init__(bucket, key)
        self.version_id = version_id


class VersionNotFound(TieringError):
    def __init__(self, bucket: str, key: str, version_id: str) -> None:
        super().__init__(f"no version {version_id!r} of {key!r} in bucket {bucket!r}")
        self.bucket = bucket
        self.key = key
        self.version_id = version_id


class VersionIsDeleteMarker(TieringError):
    """A read named a delete marker by its version id: a marker has no data to read."""

    def __init__(self, bucket: str, key: str, version_id: str) -> None:
        super().__init__(f"version {version_id!r} of {key!r} in bucket {bucket!r} is a delete marker")
        self.bucket = bucket
        self.key = key
        self.version_id = version_id


class ObjectLocked(TieringError):
    """A version under Object Lock retention or legal hold: it cannot be deleted (or its
    retention shortened) by this request."""

    def __init__(self, bucket: str, key: str, version_id: str, why: str) -> None:
        super().__init__(f"version {version_id!r} of {key!r} in bucket {bucket!r} is locked: {why}")
        self.bucket = bucket
        self.key = key
        self.version_id = version_id
        self.why = why


class InvalidBucketState(TieringError):
    def __init__(self, bucket: str, why: str) -> None:
        super().__init__(why)
        self.bucket = bucket
        self.why = why
