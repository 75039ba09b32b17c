"""S3 errors: one class per S3 error code, rendered to XML in one place.

The class name *is* the S3 error code (as in Swift's s3api), the HTTP status and the default
message are class attributes. Anything in `server/` may raise these; `tiering`'s own errors are
mapped onto them in `server/error_map.py`, so storage never speaks HTTP.
"""

from __future__ import annotations

from xml.sax.saxutils import escape


class S3Error(Exception):
    """Base of every error that reaches an S3 client."""

    status: int = 500
    message: str = "We encountered an internal error. Please try again."
    # Headers the error answer carries (a delete marker's x-amz-delete-marker and version id).
    response_headers: dict[str, str] = {}  # noqa: RUF012 - replaced per instance, never mutated

    def __init__(self, message: str | None = None, **fields: str | int | None) -> None:
        super().__init__(message or self.message)
        self.detail = message or self.message
        # Extra XML elements AWS includes for some codes (BucketName, Key, Condition, ...).
        self.fields = {k: v for k, v in fields.items() if v is not None}

    @property
    def code(self) -> str:
        return type(self).__name__

    def extra_headers(self) -> dict[str, str]:
        return dict(self.response_headers)

    def to_xml(self, resource: str = "", request_id: str = "") -> bytes:
        parts = [
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error>',
            f"<Code>{self.code}</Code>",
            f"<Message>{escape(self.detail)}</Message>",
        ]
        for name, value in self.fields.items():
            parts.append(f"<{name}>{escape(str(value))}</{name}>")
        if resource:
            parts.append(f"<Resource>{escape(resource)}</Resource>")
        if request_id:
            parts.append(f"<RequestId>{request_id}</RequestId>")
        parts.append("</Error>")
        # A field may echo request bytes that are not UTF-8 (kept as surrogates, e.g. in a
        # CanonicalRequest): show them escaped rather than fail the error answer itself.
        return "".join(parts).encode("utf-8", "backslashreplace")


# --- 3xx / 4xx: the client's request ---------------------------------------------------------


class NotModified(S3Error):
    status = 304
    message = "Not Modified"

    def __init__(self, headers: dict[str, str] | None = None) -> None:
        super().__init__()
        # A 304 still names the representation it is about: ETag, Last-Modified (RFC 9110 15.4.5).
        self.headers = dict(headers or {})

    def extra_headers(self) -> dict[str, str]:
        return dict(self.headers)


class BadDigest(S3Error):
    status = 400
    message = "The Content-MD5 or checksum value that you specified did not match what we received."


class InvalidDigest(S3Error):
    status = 400
    message = "The Content-MD5 or checksum value that you specified is not valid."


class XAmzContentSHA256Mismatch(S3Error):
    status = 400
    message = "The provided 'x-amz-content-sha256' header does not match what was computed."


class EntityTooSmall(S3Error):
    status = 400
    message = "Your proposed upload is smaller than the minimum allowed object size."


class EntityTooLarge(S3Error):
    status = 400
    message = "Your proposed upload exceeds the maximum allowed object size."


class IncompleteBody(S3Error):
    status = 400
    message = "You did not provide the number of bytes specified by the Content-Length HTTP header."


class InvalidArgument(S3Error):
    status = 400
    message = "Invalid Argument"


class InvalidBucketName(S3Error):
    status = 400
    message = "The specified bucket is not valid."


class InvalidPart(S3Error):
    status = 400
    message = (
        "One or more of the specified parts could not be found. The part may not have been "
        "uploaded, or the specified entity tag may not match the part's entity tag."
    )


class InvalidPartOrder(S3Error):
    status = 400
    message = "The list of parts was not in ascending order. Parts must be ordered by part number."


class InvalidRequest(S3Error):
    status = 400
    message = "Invalid Request"


class BadRequest(S3Error):
    """A request the HTTP parser could not read: S3 answers this (code and message) and closes."""

    status = 400
    message = "An error occurred when parsing the HTTP request."


class InvalidStorageClass(S3Error):
    status = 400
    message = "The storage class you specified is not valid."


class InvalidLocationConstraint(S3Error):
    status = 400
    message = "The specified location-constraint is not valid."


class IllegalLocationConstraintException(S3Error):
    status = 400
    message = "The unspecified location constraint is incompatible for the region specific endpoint."


class KeyTooLongError(S3Error):
    status = 400
    message = "Your key is too long."


class MalformedXML(S3Error):
    status = 400
    message = "The XML you provided was not well-formed or did not validate against our published schema."


class MetadataTooLarge(S3Error):
    status = 400
    message = "Your metadata headers exceed the maximum allowed metadata size."


class MissingContentLength(S3Error):
    status = 411
    message = "You must provide the Content-Length HTTP header."


class MissingSecurityHeader(S3Error):
    status = 400
    message = "Your request is missing a required header."


class InvalidTag(S3Error):
    status = 400
    message = "The tag provided was not a valid tag."


class AuthorizationHeaderMalformed(S3Error):
    status = 400
    message = "The authorization header is malformed."


class AuthorizationQueryParametersError(S3Error):
    status = 400
    message = "Error parsing the X-Amz-Credential parameter."


class InvalidEncryptionAlgorithmError(S3Error):
    status = 400
    message = "The encryption request you specified is not valid."


class KMSNotFoundException(S3Error):
    """AWS's code is "KMS.NotFoundException": a dot no class name can hold (see `code`)."""

    status = 400
    message = "Invalid keyId"

    @property
    def code(self) -> str:
        return "KMS.NotFoundException"


class TooManyParts(S3Error):
    status = 400
    message = "You have attempted to upload more than the maximum number of parts."


class InvalidObjectState(S3Error):
    status = 403
    message = "The operation is not valid for the object's storage class."


class ObjectDataLost(S3Error):
    """Not an AWS code (AWS never admits losing data): the object exists, its bytes are gone for good.

    410 Gone, because a retry cannot help and the status must say so: SDKs retry 500, 502, 503 and
    504 (botocore's `_retry.json` and `retries/standard.py` also 509 and throttling codes), so the
    S3-ish 503 made every client retry a lost object until it gave up. The non-retried 5xx codes
    all mean something else (501 NotImplemented, 507 Insufficient Storage), and a 403 would read
    as a permissions or archive problem. RFC 9110: 410 is "no longer available at the origin
    server and this condition is likely to be permanent". The key still lists and HEAD still
    answers, so the loss stays visible rather than looking like a deletion (that is 404).
    """

    status = 410
    message = "The object's data is lost: too few of its erasure-coded shards survive to rebuild it."


class AccessDenied(S3Error):
    status = 403
    message = "Access Denied"


class InvalidAccessKeyId(S3Error):
    status = 403
    message = "The AWS Access Key Id you provided does not exist in our records."


class SignatureDoesNotMatch(S3Error):
    status = 403
    message = (
        "The request signature we calculated does not match the signature you provided. "
        "Check your key and signing method."
    )


class RequestTimeTooSkewed(S3Error):
    status = 403
    message = "The difference between the request time and the server's time is too large."


class MissingAuthenticationToken(S3Error):
    status = 403
    message = "Request is missing Authentication Token"


class NoSuchBucket(S3Error):
    status = 404
    message = "The specified bucket does not exist"


class NoSuchKey(S3Error):
    status = 404
    message = "The specified key does not exist."


class NoSuchUpload(S3Error):
    status = 404
    message = (
        "The specified upload does not exist. The upload ID may be invalid, or the upload may "
        "have been aborted or completed."
    )


class NoSuchVersion(S3Error):
    status = 404
    message = "The specified version does not exist."


class NoSuchTagSet(S3Error):
    status = 404
    message = "The TagSet does not exist"


class NoSuchLifecycleConfiguration(S3Error):
    status = 404
    message = "The lifecycle configuration does not exist"


class NoSuchBucketPolicy(S3Error):
    status = 404
    message = "The bucket policy does not exist"


class NoSuchCORSConfiguration(S3Error):
    status = 404
    message = "The CORS configuration does not exist"


class ServerSideEncryptionConfigurationNotFoundError(S3Error):
    status = 404
    message = "The server side encryption configuration was not found"


class MethodNotAllowed(S3Error):
    status = 405
    message = "The specified method is not allowed against this resource."


class BucketAlreadyOwnedByYou(S3Error):
    status = 409
    message = "Your previous request to create the named bucket succeeded and you already own it."


class BucketAlreadyExists(S3Error):
    status = 409
    message = "The requested bucket name is not available."


class BucketNotEmpty(S3Error):
    status = 409
    message = "The bucket you tried to delete is not empty"


class OperationAborted(S3Error):
    status = 409
    message = "A conflicting conditional operation is currently in progress against this resource."


class ConditionalRequestConflict(S3Error):
    status = 409
    message = "A conflicting operation occurred. Retry the request."


class PreconditionFailed(S3Error):
    status = 412
    message = "At least one of the pre-conditions you specified did not hold"


class InvalidRange(S3Error):
    status = 416
    message = "The requested range is not satisfiable"


class RequestTimeout(S3Error):
    status = 400
    message = (
        "Your socket connection to the server was not read from or written to within the timeout period."
    )


# --- 5xx: ours ----------------------------------------------------------------------------------


class InternalError(S3Error):
    status = 500
    message = "We encountered an internal error. Please try again."


class NotImplemented(S3Error):  # noqa: A001 - the S3 error code is literally "NotImplemented"
    status = 501
    message = "A header or operation you provided implies functionality that is not implemented."


class ServiceUnavailable(S3Error):
    status = 503
    message = "Reduce your request rate."


class CatalogUnavailable(ServiceUnavailable):
    """503 ServiceUnavailable while the catalog database cannot be reached, with Retry-After:
    S3's clients (boto3, aws-cli) retry it, and by then the database may be back."""

    RETRY_AFTER_SECONDS = 1

    @property
    def code(self) -> str:
        return "ServiceUnavailable"

    def extra_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.RETRY_AFTER_SECONDS)}


class SlowDown(S3Error):
    status = 503
    message = "Please reduce your request rate."


class NoSuchPublicAccessBlockConfiguration(S3Error):
    status = 404
    message = "The public access block configuration was not found"


class InvalidBucketState(S3Error):
    status = 409
    message = "The request is not valid with the current state of the bucket."


class NoSuchObjectLockConfiguration(S3Error):
    status = 404
    message = "The specified object does not have a ObjectLock configuration"


class ObjectLockConfigurationNotFoundError(S3Error):
    status = 404
    message = "Object Lock configuration does not exist for this bucket"


class OwnershipControlsNotFoundError(S3Error):
    status = 404
    message = "The bucket ownership controls were not found"


class NoSuchConfiguration(S3Error):
    status = 404
    message = "The specified configuration does not exist."


class InvalidPartNumber(S3Error):
    status = 416
    message = "The requested partnumber is not satisfiable"


class RestoreAlreadyInProgress(S3Error):
    status = 409
    message = "Object restore is already in progress"


# --- authorization: policies, ACLs, ownership controls (server.access) -------------------------------


class MalformedPolicy(S3Error):
    status = 400
    message = "Policies must be valid JSON and the first byte must be '{'"


class MalformedACLError(S3Error):
    status = 400
    message = "The XML you provided was not well-formed or did not validate against our published schema"


class AccessControlListNotSupported(S3Error):
    status = 400
    message = "The bucket does not allow ACLs"


class InvalidBucketAclWithObjectOwnership(S3Error):
    status = 400
    message = "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting"


class UnresolvableGrantByEmailAddress(S3Error):
    status = 400
    message = "The email address you provided does not match any account on record."


class UnexpectedContent(S3Error):
    status = 400
    message = "This request does not support content"
