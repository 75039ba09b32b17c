"""Map the namespace's errors (tiering) onto S3 errors: storage never speaks HTTP itself."""

from __future__ import annotations

from server import errors as s3
from tiering import errors as t


def to_s3_error(exc: t.TieringError) -> s3.S3Error:
    match exc:
        case t.BucketNotFound():
            return s3.NoSuchBucket(BucketName=exc.bucket)
        case t.BucketAlreadyExists(owned_by_caller=True):
            return s3.BucketAlreadyOwnedByYou(BucketName=exc.bucket)
        case t.BucketAlreadyExists():
            return s3.BucketAlreadyExists(BucketName=exc.bucket)
        case t.BucketNotEmpty():
            return s3.BucketNotEmpty(BucketName=exc.bucket)
        case t.DeleteMarkerCurrent():
            missing = s3.NoSuchKey(Key=exc.key)
            missing.response_headers = {"x-amz-delete-marker": "true", "x-amz-version-id": exc.version_id}
            return missing
        case t.ObjectNotFound():
            return s3.NoSuchKey(Key=exc.key)
        case t.ObjectLocked():
            return s3.AccessDenied("Access Denied because object protected by object lock.")
        case t.InvalidBucketState():
            return s3.InvalidBucketState(exc.why)
        case t.VersionNotFound():
            return s3.NoSuchVersion(Key=exc.key, VersionId=exc.version_id)
        case t.VersionIsDeleteMarker():
            refused = s3.MethodNotAllowed(ResourceType="DeleteMarker")
            refused.response_headers = {
                "x-amz-delete-marker": "true",
                "x-amz-version-id": exc.version_id,
                "allow": "DELETE",
            }
            return refused
        case t.UploadNotFound():
            return s3.NoSuchUpload(UploadId=exc.upload_id)
        case t.ConditionalConflict():  # a PreconditionFailed that lost a race: first
            return s3.ConditionalRequestConflict(Key=exc.key)
        case t.PreconditionFailed():
            return s3.PreconditionFailed(Condition=exc.condition)
        case t.InvalidPart():
            return s3.InvalidPart(PartNumber=exc.part_number)
        case t.InvalidPartOrder():
            return s3.InvalidPartOrder()
        case t.ChecksumTypeMismatch():
            return s3.InvalidRequest(
                f"The upload was created using the {exc.upload_type} checksum mode. "
                "The complete request must use the same checksum mode."
            )
        case t.ChecksumMismatch():
            return s3.BadDigest(
                f"The {exc.algorithm.lower()} you specified did not match the calculated checksum."
            )
        case t.PartTooSmall():
            return s3.EntityTooSmall(PartNumber=exc.part_number)
        case t.ObjectTooLarge():
            return s3.EntityTooLarge()
        case t.UnknownStorageClass():
            return s3.InvalidStorageClass(StorageClassRequested=exc.storage_class)
        # The tier's own words say which drives failed and why (the operator's first question).
        case t.CatalogUnavailable():
            return s3.CatalogUnavailable(
                "The namespace's database cannot be reached right now; retry shortly"
            )
        case t.TierUnavailable():
            return s3.ServiceUnavailable(
                f"The storage tier cannot take new data right now ({exc}); retry later"
            )
        case t.InsufficientCapacity():
            return s3.ServiceUnavailable(f"The tier has no capacity left for this object ({exc})")
        case t.ObjectArchived():
            return s3.InvalidObjectState(
                "The operation is not valid for the object's storage class", StorageClass="GLACIER"
            )
        case t.NotArchived():
            return s3.InvalidObjectState("Restore is not allowed for the object's current storage class")
        case t.RestoreInProgress():
            return s3.RestoreAlreadyInProgress()
        case t.ObjectDataLost():
            return s3.ObjectDataLost(Key=exc.key)
        case t.DataUnreadable():
            return s3.ServiceUnavailable(
                "The object's data cannot be read right now: too many of its shards are unavailable"
            )
        case t.SSECustomerKeyRequired():
            return s3.InvalidRequest(
                "The object was stored using a form of Server Side Encryption. "
                "The correct parameters must be provided to retrieve the object."
            )
        case t.SSECustomerKeyMismatch():
            return s3.AccessDenied("Access Denied")
        case t.SSENotApplicable():
            return s3.InvalidRequest("The encryption parameters are not applicable to this object.")
        case t.KmsKeyNotFound():
            return s3.KMSNotFoundException(f"Invalid keyId {exc.key_id}")
        case t.EncryptionKeyUnavailable():
            return s3.InternalError("The object's encryption key is not available on this server")
    return s3.InternalError()
