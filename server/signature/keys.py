"""HMAC helpers and the SigV4 signing-key cache.

Deriving a signing key costs four HMACs per request; the key only changes per (secret, day,
region, service), so a small LRU makes the hot path one HMAC (itself copied from one keyed once).
The cache is keyed by the secret itself (not the access key) so that a rotated secret can never
be served a stale key.
"""

from __future__ import annotations

import hashlib
import hmac
from functools import lru_cache

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def hmac_sha256(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).digest()


def hmac_sha256_hex(key: bytes, message: str) -> str:
    mac = _keyed(key).copy()
    # surrogateescape: header bytes that are not UTF-8 (see wire_text) are signed as themselves.
    mac.update(message.encode("utf-8", "surrogateescape"))
    return mac.hexdigest()


@lru_cache(maxsize=1024)
def _keyed(key: bytes) -> hmac.HMAC:
    """An HMAC-SHA256 keyed with `key` and nothing hashed yet, copied for each message: keying
    one costs more than the short message it then signs, and a signing key signs every request
    (and chunk) of its day. Only signing keys come here, cached themselves by `signing_key`."""
    return hmac.new(key, digestmod=hashlib.sha256)


def sha256_hex(data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    return hashlib.sha256(data).hexdigest()


@lru_cache(maxsize=1024)
def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request")."""
    k_date = hmac_sha256(("AWS4" + secret).encode("utf-8"), date)
    k_region = hmac_sha256(k_date, region)
    k_service = hmac_sha256(k_region, service)
    return hmac_sha256(k_service, "aws4_request")


def same(expected: str, provided: str) -> bool:
    """Constant-time comparison that never raises, whatever the client sent."""
    return hmac.compare_digest(
        expected.encode("utf-8", "surrogateescape"), provided.encode("utf-8", "surrogateescape")
    )
