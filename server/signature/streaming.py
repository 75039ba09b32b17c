"""The SigV4 chunk-signature chain of aws-chunked uploads.

Each chunk is signed with the request's signing key over the previous signature, so chunks can
be neither reordered, dropped nor replaced; the chain starts at the request's own ("seed")
signature. The trailer section is signed the same way, chained to the final empty chunk.
"""

from __future__ import annotations

from collections.abc import Mapping

from server.signature.keys import EMPTY_SHA256, hmac_sha256_hex, sha256_hex

PAYLOAD_ALGORITHM = "AWS4-HMAC-SHA256-PAYLOAD"
TRAILER_ALGORITHM = "AWS4-HMAC-SHA256-TRAILER"


def chunk_string_to_sign(amz_date: str, scope: str, previous_signature: str, chunk_sha256: str) -> str:
    return "\n".join((PAYLOAD_ALGORITHM, amz_date, scope, previous_signature, EMPTY_SHA256, chunk_sha256))


def chunk_signature(
    signing_key: bytes, amz_date: str, scope: str, previous_signature: str, chunk_sha256: str
) -> str:
    """Signature of one chunk whose data hashes to `chunk_sha256` (hex)."""
    return hmac_sha256_hex(
        signing_key, chunk_string_to_sign(amz_date, scope, previous_signature, chunk_sha256)
    )


def canonical_trailers(trailers: Mapping[str, str]) -> str:
    """Each trailer as `name:value` plus a newline, sorted by name, as the SDKs sign them."""
    return "".join(f"{name}:{trailers[name]}\n" for name in sorted(trailers))


def trailer_signature(
    signing_key: bytes, amz_date: str, scope: str, previous_signature: str, trailers: Mapping[str, str]
) -> str:
    """Signature of the trailer section (x-amz-trailer-signature), chained to the final chunk."""
    string_to_sign = "\n".join(
        (TRAILER_ALGORITHM, amz_date, scope, previous_signature, sha256_hex(canonical_trailers(trailers)))
    )
    return hmac_sha256_hex(signing_key, string_to_sign)
