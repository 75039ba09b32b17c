"""tiering.encryption: the sealed-chunk framing and the key hierarchy, without a server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tiering.encryption import SSE_C, SSE_KMS, SSE_S3, EncryptionRequest
from tiering.encryption.chunks import (
    CHUNK_SIZE,
    HEADER_BYTES,
    ChunkAuthError,
    ChunkOpener,
    ChunkSealer,
    open_blob,
    parse_header,
    plaintext_size,
    sealed_range,
    sealed_size,
)
from tiering.encryption.keys import KeyService, KeySettings
from tiering.errors import (
    EncryptionKeyUnavailable,
    KmsKeyNotFound,
    SSECustomerKeyMismatch,
    SSECustomerKeyRequired,
)


def seal(key: bytes, oid: bytes, part: int, data: bytes, step: int = 10_000) -> bytes:
    sealer = ChunkSealer(key, oid, part)
    out = b"".join(sealer.feed(data[i : i + step]) for i in range(0, len(data), step))
    return out + sealer.finish()


@pytest.mark.parametrize("size", [0, 1, CHUNK_SIZE - 1, CHUNK_SIZE, CHUNK_SIZE + 1, 5 * CHUNK_SIZE + 3])
def test_sizes_round_trip_and_match(size: int) -> None:
    key, oid = os.urandom(32), os.urandom(16)
    data = os.urandom(size)
    blob = seal(key, oid, 0, data)
    assert len(blob) == sealed_size(size) and plaintext_size(len(blob)) == size
    assert open_blob(key, oid, 0, blob) == data


def test_a_range_opens_only_its_chunks() -> None:
    key, oid = os.urandom(32), os.urandom(16)
    data = os.urandom(4 * CHUNK_SIZE + 100)
    blob = seal(key, oid, 7, data)
    lo, hi = CHUNK_SIZE + 5, 3 * CHUNK_SIZE + 1
    first, s_lo, s_hi = sealed_range(lo, hi, len(blob))
    opener = ChunkOpener(key, oid, 7, parse_header(blob[:HEADER_BYTES]), first)
    plain = opener.feed(blob[s_lo:s_hi]) + opener.finish()
    start = lo - first * CHUNK_SIZE
    assert plain[start : start + hi - lo] == data[lo:hi]


def test_tampered_swapped_or_misplaced_chunks_do_not_open() -> None:
    key, oid = os.urandom(32), os.urandom(16)
    data = os.urandom(3 * CHUNK_SIZE)
    blob = bytearray(seal(key, oid, 1, data))
    flipped = bytearray(blob)
    flipped[HEADER_BYTES + CHUNK_SIZE + 50] ^= 1
    with pytest.raises(ChunkAuthError):
        open_blob(key, oid, 1, bytes(flipped))
    step = CHUNK_SIZE + 16
    swapped = (
        blob[:HEADER_BYTES]
        + blob[HEADER_BYTES + step : HEADER_BYTES + 2 * step]
        + blob[HEADER_BYTES : HEADER_BYTES + step]
        + blob[HEADER_BYTES + 2 * step :]
    )
    with pytest.raises(ChunkAuthError):
        open_blob(key, oid, 1, bytes(swapped))
    with pytest.raises(ChunkAuthError):  # another part of the object
        open_blob(key, oid, 2, bytes(blob))
    with pytest.raises(ChunkAuthError):  # another object
        open_blob(key, os.urandom(16), 1, bytes(blob))
    with pytest.raises(ChunkAuthError):  # cut short
        open_blob(key, oid, 1, bytes(blob[:-10]))


def test_two_blobs_of_one_key_never_share_a_nonce() -> None:
    key, oid = os.urandom(32), os.urandom(16)
    a, b = seal(key, oid, 1, b"x" * 100), seal(key, oid, 1, b"x" * 100)
    assert parse_header(a[:HEADER_BYTES]) != parse_header(b[:HEADER_BYTES]) and a != b


def test_key_service_wraps_checks_and_rotates(tmp_path: Path) -> None:
    keys = KeyService(KeySettings(keyring_dir=tmp_path, kms_key_ids=["k1"]))
    enc, data_key = keys.new_object(EncryptionRequest(SSE_S3))
    assert data_key.hex() not in repr(enc.to_json()) and keys.data_key(enc) == data_key
    first = keys.current_key_id
    second = keys.rotate()
    assert second != first
    rewrapped = keys.rewrap(enc)
    assert rewrapped is not None and rewrapped.key_id == second and keys.data_key(rewrapped) == data_key
    # A new process on the same keyring reads both keys (the old one until re-wrapped).
    again = KeyService(KeySettings(keyring_dir=tmp_path, kms_key_ids=["k1"]))
    assert again.current_key_id == second and again.data_key(enc) == data_key
    kms, kms_key = keys.new_object(EncryptionRequest(SSE_KMS, kms_key_id="k1"))
    assert again.data_key(kms) == kms_key and kms.key_id == "k1"
    with pytest.raises(KmsKeyNotFound):
        keys.new_object(EncryptionRequest(SSE_KMS, kms_key_id="nope"))
    customer = os.urandom(32)
    sse_c, c_key = keys.new_object(EncryptionRequest(SSE_C, customer_key=customer))
    assert keys.data_key(sse_c, customer) == c_key
    with pytest.raises(SSECustomerKeyRequired):
        keys.data_key(sse_c)
    with pytest.raises(SSECustomerKeyMismatch):
        keys.data_key(sse_c, os.urandom(32))
    # A keyring that lost the key: the object is not readable here (and says why).
    elsewhere = KeyService(KeySettings(keyring_dir=tmp_path / "other"))
    with pytest.raises(EncryptionKeyUnavailable):
        elsewhere.data_key(enc)
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in tmp_path.rglob("*.key"))
