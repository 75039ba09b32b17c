"""Encryption at rest: objects are sealed in authenticated chunks before any tier stores them.

`chunks` is the stored form, `keys` the key hierarchy (master / KMS / customer keys wrapping one
data key per object), `descriptor` what the catalog keeps. `tiering.store` uses them on write and
read; the S3 headers are the server's business (`server/encryption.py`).
"""

from tiering.encryption.descriptor import SSE_C, SSE_KMS, SSE_S3, EncryptionRequest, ObjectEncryption

__all__ = ["SSE_C", "SSE_KMS", "SSE_S3", "EncryptionRequest", "ObjectEncryption"]
