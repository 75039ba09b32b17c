"""The stored form of an encrypted blob: a small header, then independently sealed chunks.

    blob  = header || seal(chunk 0) || seal(chunk 1) || ...
    header = b"TSE1" || nonce prefix (8 random bytes, fresh for every blob)
    seal(chunk i) = AES-256-GCM(data key, nonce = prefix || i (4 bytes), plaintext ≤ chunk size,
                                aad = b"tierstore-sse" || object id || part number || i)

Why this shape:
- Every chunk is authenticated on its own, so a ranged GET decrypts only the chunks it touches
  and a flipped byte fails exactly the chunk that holds it (never wrong plaintext).
- The nonce prefix is per blob, not per object: two uploads of one multipart part number share
  the object's data key, and a nonce must never repeat under one key. Keeping the prefix in the
  blob's own header (rather than in the catalog's part rows) also keeps the ciphertext movable as
  it is: a tier move copies the blob byte for byte and nothing in the catalog needs rewriting.
- The object id and part number in the AAD bind a chunk to its place: chunks of another object
  (another key) or of another part of this one fail authentication; the index forbids reordering.
  Truncation is caught by size: the catalog records each blob's stored size and the object's size.

Sizes are exact functions of each other: all chunks but the last are full, so a blob of S stored
bytes holds `plaintext_size(S)` bytes and a range of plaintext maps onto whole sealed chunks.
"""

from __future__ import annotations

import os
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAGIC = b"TSE1"
PREFIX_BYTES = 8
HEADER_BYTES = len(MAGIC) + PREFIX_BYTES
TAG_BYTES = 16
CHUNK_SIZE = 64 * 1024
AAD_LABEL = b"tierstore-sse"


class ChunkAuthError(Exception):
    """A sealed chunk does not authenticate: wrong key, tampered or misplaced bytes."""


def sealed_size(plaintext: int, chunk_size: int = CHUNK_SIZE) -> int:
    chunks = -(-plaintext // chunk_size)
    return HEADER_BYTES + plaintext + chunks * TAG_BYTES


def plaintext_size(stored: int, chunk_size: int = CHUNK_SIZE) -> int:
    body = stored - HEADER_BYTES
    full, rest = divmod(body, chunk_size + TAG_BYTES)
    if body < 0 or 0 < rest <= TAG_BYTES:
        raise ChunkAuthError(f"{stored} bytes is no sealed blob's size")
    return full * chunk_size + (rest - TAG_BYTES if rest else 0)


def _nonce(prefix: bytes, index: int) -> bytes:
    return prefix + struct.pack(">I", index)


def _aad(object_id: bytes, part_number: int, index: int) -> bytes:
    return AAD_LABEL + object_id + struct.pack(">IQ", part_number, index)


class ChunkSealer:
    """Encrypts a plaintext stream fed in any pieces; emits the header and then whole chunks.

    Not thread-safe; a caller may run `feed` in a worker thread (one at a time, in order).
    """

    def __init__(
        self, key: bytes, object_id: bytes, part_number: int = 0, chunk_size: int = CHUNK_SIZE
    ) -> None:
        self._aead = AESGCM(key)
        self._object_id = object_id
        self._part = part_number
        self._chunk = chunk_size
        self._prefix = os.urandom(PREFIX_BYTES)
        self._index = 0
        self._pending = bytearray()
        self._header_sent = False

    def _header(self) -> bytes:
        if self._header_sent:
            return b""
        self._header_sent = True
        return MAGIC + self._prefix

    def _seal(self, plain: bytes | bytearray | memoryview) -> bytes:
        # Slices of the caller's buffer go in as they are: AESGCM takes any bytes-like object.
        sealed = self._aead.encrypt(
            _nonce(self._prefix, self._index), plain, _aad(self._object_id, self._part, self._index)
        )
        self._index += 1
        if self._index >= 1 << 32:
            raise ValueError("blob too large for one nonce prefix")
        return sealed

    def feed(self, data: bytes | memoryview) -> bytes:
        """Seal every chunk that `data` completes; keep the rest for the next call."""
        out = [self._header()]
        view = memoryview(data)
        if self._pending:
            need = self._chunk - len(self._pending)
            self._pending += view[:need]
            view = view[need:]
            if len(self._pending) < self._chunk:
                return b"".join(out)
            out.append(self._seal(self._pending))
            self._pending = bytearray()
        whole = len(view) - len(view) % self._chunk
        for start in range(0, whole, self._chunk):
            out.append(self._seal(view[start : start + self._chunk]))
        self._pending += view[whole:]
        return b"".join(out)

    def finish(self) -> bytes:
        """The last (short) chunk, and the header if nothing was emitted yet."""
        out = self._header()
        if self._pending:
            out += self._seal(self._pending)
            self._pending = bytearray()
        return out


def sealed_range(start: int, end: int, stored: int, chunk_size: int = CHUNK_SIZE) -> tuple[int, int, int]:
    """For plaintext [start, end): (first chunk index, stored start, stored end) of the chunks
    that hold it."""
    first = start // chunk_size
    last = -(-end // chunk_size)
    step = chunk_size + TAG_BYTES
    return first, HEADER_BYTES + first * step, min(stored, HEADER_BYTES + last * step)


def parse_header(header: bytes) -> bytes:
    """The blob's nonce prefix."""
    if len(header) != HEADER_BYTES or header[: len(MAGIC)] != MAGIC:
        raise ChunkAuthError("not a sealed blob")
    return header[len(MAGIC) :]


class ChunkOpener:
    """Decrypts consecutive sealed chunks of one blob, starting at chunk `first`."""

    def __init__(
        self,
        key: bytes,
        object_id: bytes,
        part_number: int,
        prefix: bytes,
        first: int,
        chunk_size: int = CHUNK_SIZE,
    ) -> None:
        self._aead = AESGCM(key)
        self._object_id = object_id
        self._part = part_number
        self._prefix = prefix
        self._index = first
        self._step = chunk_size + TAG_BYTES
        self._pending = bytearray()

    def feed(self, data: bytes | memoryview) -> bytes:
        """Open every sealed chunk that `data` completes (whole chunks straight from `data`; only
        a chunk split between two pieces is gathered in a buffer)."""
        view = memoryview(data)
        out = []
        if self._pending:
            need = self._step - len(self._pending)
            self._pending += view[:need]
            view = view[need:]
            if len(self._pending) < self._step:
                return b""
            out.append(self._open(memoryview(self._pending)))
            self._pending = bytearray()
        whole = len(view) - len(view) % self._step
        out += [self._open(view[i : i + self._step]) for i in range(0, whole, self._step)]
        self._pending += view[whole:]
        return b"".join(out)

    def finish(self) -> bytes:
        """The last, short chunk (if the range ends the blob)."""
        if not self._pending:
            return b""
        if len(self._pending) <= TAG_BYTES:
            raise ChunkAuthError("truncated chunk")
        out = self._open(memoryview(self._pending))
        self._pending = bytearray()
        return out

    def _open(self, sealed: memoryview) -> bytes:
        try:
            plain = self._aead.decrypt(
                _nonce(self._prefix, self._index), sealed, _aad(self._object_id, self._part, self._index)
            )
        except InvalidTag:
            raise ChunkAuthError(f"chunk {self._index} does not authenticate") from None
        self._index += 1
        return plain


def open_blob(
    key: bytes, object_id: bytes, part_number: int, blob: bytes | memoryview, chunk_size: int = CHUNK_SIZE
) -> bytes:
    """A whole sealed blob's plaintext (the small-object path); `blob` may be a view of it."""
    plaintext_size(len(blob), chunk_size)  # a size no sealer makes is corrupt
    prefix = parse_header(bytes(blob[:HEADER_BYTES]))  # bytes: the nonces are built from it
    opener = ChunkOpener(key, object_id, part_number, prefix, 0, chunk_size)
    return opener.feed(memoryview(blob)[HEADER_BYTES:]) + opener.finish()
