"""Keys for encryption at rest: master keys (SSE-S3), a local KMS key store (SSE-KMS), customer
keys (SSE-C), and the per-object data keys they wrap.

Every object gets a fresh random 256-bit data key. The data key never touches disk in the clear:
the catalog keeps it wrapped (AES key wrap, RFC 3394) by
- SSE-S3: the current master key, named by its id (a hash of the key, so it names without telling);
- SSE-KMS: the local KMS key the client named (or the built-in `aws/s3`);
- SSE-C: the customer's own key, which is never stored — only a salted HMAC of it, to tell a wrong
  key (403) from a damaged object.

Master keys come from the operator (`[encryption] master_key_file` or `master_key_env`) or, for a
local trial, from an embedded keyring generated once under `<data_dir>/encryption/` (0600).
Rotation makes a new key current and re-wraps data keys (`tierstore admin encryption rotate`);
the object data is never rewritten, and keys stay in the keyring by id so that objects not yet
re-wrapped stay readable.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import hashlib
import hmac
import logging
import os
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap

from tiering.encryption.descriptor import SSE_C, SSE_KMS, SSE_S3, EncryptionRequest, ObjectEncryption
from tiering.errors import (
    EncryptionKeyUnavailable,
    KmsKeyNotFound,
    SSECustomerKeyMismatch,
    SSECustomerKeyRequired,
)

log = logging.getLogger("tierstore.tiering")

KEY_BYTES = 32
DEFAULT_KMS_KEY = "aws/s3"  # what S3 uses for aws:kms without a key id (the AWS managed key)


def key_id(key: bytes) -> str:
    """A master key's public name: a hash of it (no way back to the key)."""
    return hashlib.sha256(b"tierstore-master-key-id\0" + key).hexdigest()[:16]


def decode_key(text: str, where: str) -> bytes:
    """A 256-bit key written as base64 or 64 hex digits."""
    text = text.strip()
    try:
        key = bytes.fromhex(text) if len(text) == 2 * KEY_BYTES else base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        raise ValueError(f"{where}: not a base64 or hex key") from None
    if len(key) != KEY_BYTES:
        raise ValueError(f"{where}: a master key is {KEY_BYTES} bytes (base64 or hex), got {len(key)}")
    return key


def _write_secret(path: Path, key: bytes) -> None:
    """Create `path` holding the key, readable by its owner only (0600 before any byte is in it).

    Written under a temporary name and linked into place, so another process never reads a
    half-written key; FileExistsError if `path` is there already (another process won)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(base64.b64encode(key).decode() + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@dataclass
class KeySettings:
    """Where the keys come from (`[encryption]` of the server's config)."""

    keyring_dir: Path | None = None  # the embedded keyring (and the local KMS keys)
    master_key_file: str = ""
    master_key_env: str = ""
    previous_key_files: list[str] = field(default_factory=list)
    kms_key_ids: list[str] = field(default_factory=list)


class KeyService:
    """Data keys for new objects and for reading stored ones. Thread-safe (used from workers)."""

    def __init__(self, settings: KeySettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._masters: dict[str, bytes] = {}
        self._current = ""
        self._configured = False  # the operator names the current key: rotation only re-wraps
        self._kms: dict[str, bytes] = {}
        self._current_stamp = 0
        self._load()

    # --- master keys -----------------------------------------------------------------------

    @property
    def _master_dir(self) -> Path | None:
        return self.settings.keyring_dir / "master-keys" if self.settings.keyring_dir else None

    def _load(self) -> None:
        s = self.settings
        self._load_keyring()
        for path in s.previous_key_files:
            self._add_master(decode_key(Path(path).read_text(), path))
        configured: bytes | None = None
        if s.master_key_env:
            value = os.environ.get(s.master_key_env)
            if not value:
                raise ValueError(f"encryption.master_key_env: variable {s.master_key_env} is not set")
            configured = decode_key(value, f"environment variable {s.master_key_env}")
        elif s.master_key_file:
            configured = decode_key(Path(s.master_key_file).read_text(), s.master_key_file)
        if configured is not None:
            self._configured = True
            self._current = self._add_master(configured)
        elif not self._current:
            with self._keyring_lock():
                self._load_keyring()  # another worker of this data directory may have made it
                if not self._current:
                    self._current = self._generate_master()
        for name in [DEFAULT_KMS_KEY, *s.kms_key_ids]:
            self._kms[name] = self._kms_material(name)

    def _load_keyring(self) -> None:
        directory = self._master_dir
        if directory is None or not directory.is_dir():
            return
        for path in sorted(directory.glob("*.key")):
            self._add_master(decode_key(path.read_text(), str(path)))
        current = directory / "current"
        if current.exists():
            name = current.read_text().strip()
            if name in self._masters:
                self._current = name

    @contextlib.contextmanager
    def _keyring_lock(self) -> Iterator[None]:
        """Serialise key generation between the processes of one data directory (workers start
        together: without it each would make its own first key)."""
        directory = self._master_dir
        if directory is None:
            yield
            return
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(directory / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _add_master(self, key: bytes) -> str:
        name = key_id(key)
        self._masters[name] = key
        return name

    def _generate_master(self) -> str:
        """A new random master key in the embedded keyring, made current."""
        key = secrets.token_bytes(KEY_BYTES)
        name = self._add_master(key)
        directory = self._master_dir
        if directory is not None:
            _write_secret(directory / f"{name}.key", key)
            tmp = directory / "current.tmp"
            tmp.write_text(name + "\n")
            os.replace(tmp, directory / "current")
            log.info(
                "encryption: generated master key %s in %s (set [encryption] master_key_file "
                "or master_key_env to bring your own)",
                name,
                directory,
            )
        return name

    @property
    def current_key_id(self) -> str:
        return self._current_now()

    def _current_now(self) -> str:
        """The current key, re-read when another process of this data directory rotated it (a
        stat per call: the `current` file's mtime says whether anything changed)."""
        directory = self._master_dir
        if self._configured or directory is None:
            return self._current
        try:
            stamp = (directory / "current").stat().st_mtime_ns
        except OSError:
            return self._current
        if stamp != self._current_stamp:
            with self._lock:
                self._load_keyring()
                self._current_stamp = stamp
        return self._current

    def rotate(self) -> str:
        """Make a new master key current (the embedded keyring), or re-read the configured one;
        the caller then re-wraps data keys (`rewrap`). Returns the current key's id."""
        with self._lock, self._keyring_lock():
            if not self._configured:
                self._current = self._generate_master()
            return self._current

    def _master(self, name: str) -> bytes:
        with self._lock:
            key = self._masters.get(name)
            if key is None:
                self._load_keyring()  # another process may have rotated meanwhile
                key = self._masters.get(name)
        if key is None:
            raise EncryptionKeyUnavailable(f"master key {name} is not in the keyring")
        return key

    # --- the local KMS ---------------------------------------------------------------------

    def _kms_material(self, name: str) -> bytes:
        """A KMS key's material: generated once per key id in the keyring directory."""
        directory = self.settings.keyring_dir
        if directory is None:
            return secrets.token_bytes(KEY_BYTES)
        path = directory / "kms" / (hashlib.sha256(name.encode()).hexdigest()[:24] + ".key")
        if not path.exists():
            try:
                _write_secret(path, secrets.token_bytes(KEY_BYTES))
                log.info("encryption: created local KMS key %s", name)
            except FileExistsError:
                pass  # another worker made it first
        return decode_key(path.read_text(), str(path))

    def kms_key(self, requested: str | None) -> str:
        """The KMS key id a request names (its own id or an ARN ending in key/<id> or alias/<id>)."""
        if not requested:
            return DEFAULT_KMS_KEY
        name = requested
        if requested.startswith("arn:"):
            _, _, tail = requested.partition(":key/")
            name = tail or requested.split(":")[-1]
        if name not in self._kms:
            raise KmsKeyNotFound(requested)
        return name

    # --- data keys -------------------------------------------------------------------------

    def new_object(self, request: EncryptionRequest) -> tuple[ObjectEncryption, bytes]:
        """A fresh data key for one object, and the descriptor its catalog record keeps."""
        data_key = secrets.token_bytes(KEY_BYTES)
        object_id = secrets.token_hex(16)
        if request.mode == SSE_S3:
            name = self._current_now()
            wrapped = aes_key_wrap(self._master(name), data_key)
            enc = ObjectEncryption(SSE_S3, object_id, _b64(wrapped), name)
        elif request.mode == SSE_KMS:
            name = self.kms_key(request.kms_key_id)
            wrapped = aes_key_wrap(self._kms[name], data_key)
            enc = ObjectEncryption(SSE_KMS, object_id, _b64(wrapped), name, bucket_key=request.bucket_key)
        elif request.mode == SSE_C:
            assert request.customer_key is not None
            salt = secrets.token_bytes(16)
            check = hmac.new(salt, request.customer_key, hashlib.sha256).digest()
            wrapped = aes_key_wrap(request.customer_key, data_key)
            enc = ObjectEncryption(SSE_C, object_id, _b64(wrapped), "", key_check=_b64(salt + check))
        else:
            raise ValueError(f"unknown encryption mode {request.mode!r}")
        return enc, data_key

    def data_key(self, enc: ObjectEncryption, customer_key: bytes | None = None) -> bytes:
        """Unwrap an object's data key. SSE-C needs the customer's key (checked first)."""
        wrapped = base64.b64decode(enc.wrapped_key)
        if enc.mode == SSE_C:
            if customer_key is None:
                raise SSECustomerKeyRequired()
            raw = base64.b64decode(enc.key_check)
            salt, check = raw[:16], raw[16:]
            if not hmac.compare_digest(hmac.new(salt, customer_key, hashlib.sha256).digest(), check):
                raise SSECustomerKeyMismatch()
            wrapping = customer_key
        elif enc.mode == SSE_KMS:
            wrapping = self._kms.get(enc.key_id) or b""
            if not wrapping:
                raise EncryptionKeyUnavailable(f"KMS key {enc.key_id} is not configured")
        else:
            wrapping = self._master(enc.key_id)
        try:
            return aes_key_unwrap(wrapping, wrapped)
        except InvalidUnwrap:
            raise EncryptionKeyUnavailable("the object's data key does not unwrap") from None

    def rewrap(self, enc: ObjectEncryption) -> ObjectEncryption | None:
        """The descriptor with its data key wrapped by the current master key; None if it is
        already (or is not SSE-S3: KMS and customer keys are not ours to rotate)."""
        if enc.mode != SSE_S3 or enc.key_id == self._current:
            return None
        data_key = self.data_key(enc)
        wrapped = aes_key_wrap(self._master(self._current), data_key)
        return ObjectEncryption(
            SSE_S3, enc.object_id, _b64(wrapped), self._current, chunk_size=enc.chunk_size
        )


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()
