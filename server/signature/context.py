"""The outcome of authentication: who signed, and how the body must be read."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal

AuthScheme = Literal["sigv4-header", "sigv4-query", "sigv2-header", "sigv2-query"]


class PayloadMode(enum.Enum):
    """How the request body is covered by the signature (from x-amz-content-sha256)."""

    __hash__ = object.__hash__  # not Enum's interpreted one: see server/operations.py

    SIGNED_SHA256 = "signed-sha256"  # header is the hex digest of the body: verify it
    UNSIGNED = "unsigned"  # UNSIGNED-PAYLOAD, presigned URLs, SigV2: body not covered
    STREAMING_SIGNED = "streaming-signed"  # STREAMING-AWS4-HMAC-SHA256-PAYLOAD
    STREAMING_SIGNED_TRAILER = "streaming-signed-trailer"  # ...-PAYLOAD-TRAILER
    STREAMING_UNSIGNED_TRAILER = "streaming-unsigned-trailer"  # STREAMING-UNSIGNED-PAYLOAD-TRAILER

    @property
    def is_streaming(self) -> bool:
        """True when the body is aws-chunked framed whatever Content-Encoding says."""
        return self in _STREAMING

    @property
    def has_chunk_signatures(self) -> bool:
        return self in (PayloadMode.STREAMING_SIGNED, PayloadMode.STREAMING_SIGNED_TRAILER)


_STREAMING = frozenset(
    {
        PayloadMode.STREAMING_SIGNED,
        PayloadMode.STREAMING_SIGNED_TRAILER,
        PayloadMode.STREAMING_UNSIGNED_TRAILER,
    }
)


@dataclass(frozen=True)
class AuthContext:
    """A verified request: the caller's identity plus what `PayloadReader` needs for the body."""

    access_key: str
    payload_mode: PayloadMode
    payload_sha256: str | None  # expected lower-case hex digest, only for SIGNED_SHA256
    scheme: AuthScheme = "sigv4-header"
    # The chunk-signature chain (SigV4 only): each chunk signs with the request's signing key
    # and scope, chained from the request's own signature (the "seed").
    signing_key: bytes | None = field(default=None, repr=False)
    scope: str | None = None  # "20130524/us-east-1/s3/aws4_request"
    amz_date: str | None = None  # "20130524T000000Z"
    seed_signature: str | None = None
    region: str | None = None

    def __init__(
        self,
        access_key: str,
        payload_mode: PayloadMode,
        payload_sha256: str | None,
        scheme: AuthScheme = "sigv4-header",
        signing_key: bytes | None = None,
        scope: str | None = None,
        amz_date: str | None = None,
        seed_signature: str | None = None,
        region: str | None = None,
    ) -> None:
        # Written out, not generated: built once a request (see tiering/records.py on why).
        object.__setattr__(self, "access_key", access_key)
        object.__setattr__(self, "payload_mode", payload_mode)
        object.__setattr__(self, "payload_sha256", payload_sha256)
        object.__setattr__(self, "scheme", scheme)
        object.__setattr__(self, "signing_key", signing_key)
        object.__setattr__(self, "scope", scope)
        object.__setattr__(self, "amz_date", amz_date)
        object.__setattr__(self, "seed_signature", seed_signature)
        object.__setattr__(self, "region", region)
