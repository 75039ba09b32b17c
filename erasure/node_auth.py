"""Gateway ↔ node request signing: HMAC-SHA256 under a cluster secret shared by every process.

A request carries its time and the SHA-256 of its body, and a signature over
    method \\n path?query \\n time \\n body-sha256
so a node can refuse a forged, altered or stale request before it touches anything. A shard write
streams a body whose hash is not known when the headers go out: it is signed with the body hash
`STREAMING`, and its last record carries a MAC (under the same secret, chained to the header
signature) over the SHA-256 of every body byte before it. The node writes such a shard to a
temporary file and makes it visible only after that MAC checks out, so a stream altered or cut
short on the way leaves nothing behind.

Replays: the request time carries microseconds and three random digits (still a plain number, so
a node of the previous version checks it as before), which makes each signature unique; a node
remembers the signatures it accepted within the clock window (`ReplayWindow`) and refuses one
seen again. TLS is optional (`tierstore node --tls-cert/--tls-key`, see remote.py): the signatures apply over it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time

DATE_HEADER = "x-tierstore-date"
BODY_HEADER = "x-tierstore-content-sha256"
SIGNATURE_HEADER = "x-tierstore-signature"
STREAMING = "STREAMING"
MAX_SKEW = 60.0  # seconds a request's time may differ from the node's clock
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
MAC_SIZE = 32


def signature(secret: bytes, method: str, target: str, date: str, body_sha256: str) -> str:
    text = "\n".join((method.upper(), target, date, body_sha256)).encode()
    return hmac.new(secret, text, hashlib.sha256).hexdigest()


def sign(
    secret: bytes, method: str, target: str, body: bytes | None = None, *, streaming: bool = False
) -> dict[str, str]:
    """The headers that authenticate a request."""
    date = f"{time.time():.6f}{secrets.randbelow(1000):03d}"  # unique: see ReplayWindow
    body_sha = STREAMING if streaming else hashlib.sha256(body or b"").hexdigest()
    return {
        DATE_HEADER: date,
        BODY_HEADER: body_sha,
        SIGNATURE_HEADER: signature(secret, method, target, date, body_sha),
    }


def check(
    secret: bytes, method: str, target: str, headers: dict[str, str], now: float | None = None
) -> str | None:
    """Why a request's headers do not authenticate it (None: they do). Compared in constant time."""
    date, body_sha, sig = headers.get(DATE_HEADER), headers.get(BODY_HEADER), headers.get(SIGNATURE_HEADER)
    if not date or not body_sha or not sig:
        return "unsigned request"
    try:
        sent = float(date)
    except ValueError:
        return "bad request time"
    if abs((time.time() if now is None else now) - sent) > MAX_SKEW:
        return "stale request time"
    if not hmac.compare_digest(signature(secret, method, target, date, body_sha), sig):
        return "bad signature"
    return None


class ReplayWindow:
    """The signatures a node accepted within the last MAX_SKEW seconds: each is accepted once.

    Older ones need no memory, since `check` refuses their time anyway. Pruned as it goes: one
    entry per request of the last window (a few MB at thousands of requests per second)."""

    def __init__(self, window: float = MAX_SKEW) -> None:
        self.window = window
        self._seen: dict[str, float] = {}  # signature → its request time; insertion order ≈ time
        self._lock = threading.Lock()

    def first_use(self, signature_hex: str, sent: float, now: float | None = None) -> bool:
        """Record this signature; False if it was seen already (a replay)."""
        now = time.time() if now is None else now
        with self._lock:
            while self._seen:
                oldest, when = next(iter(self._seen.items()))
                if now - when <= self.window:
                    break
                del self._seen[oldest]
            if signature_hex in self._seen:
                return False
            self._seen[signature_hex] = max(sent, now - self.window)
            return True


def trailer_mac(secret: bytes, request_signature: str, body_sha256: bytes) -> bytes:
    """The MAC that ends a streamed body: over its hash, chained to the request's signature."""
    return hmac.new(secret, request_signature.encode() + body_sha256, hashlib.sha256).digest()
