"""Header values between the wire's bytes and text: what clients sign, store and read back.

HTTP header values are bytes. ASGI hands them over as bytes and Starlette decodes them as
latin-1, one character per byte, so a `str` header value here is the wire bytes in disguise:
`value.encode("latin-1")` gives back exactly what the client sent. Clients that send non-ASCII
(botocore encodes a header's text as UTF-8) sign that UTF-8 *text*, so the signature code reads
the bytes as UTF-8 (`wire_text`), and user metadata is stored as that text.

On the way out S3 never puts raw non-ASCII bytes in a header: user metadata that is not plain
printable ASCII is returned RFC 2047-encoded (`=?UTF-8?Q?caf=C3=A9?=`), which mail-header
decoders (Python's `email.header`, newer SDKs) turn back into the text. AWS documents it:
"Values of such headers are character decoded as per RFC 2047 before storing and encoded as per
RFC 2047 to make them mail-safe before returning" (S3 user guide, user-defined metadata).
"""

from __future__ import annotations

import base64
import email.errors
import unicodedata
from email.header import decode_header, make_header

# Printable ASCII that a Q encoded-word may carry as itself (RFC 2047 5(3)): not "=", "?", "_"
# (they delimit or mean a space), nor a space (written "_").
_Q_SAFE = frozenset(range(0x21, 0x7F)) - {ord("="), ord("?"), ord("_")}


def wire_text(value: str) -> str:
    """A header value as the text its sender meant: the wire bytes read as UTF-8.

    Bytes that are not UTF-8 survive as surrogates (`surrogateescape`), so encoding the result
    the same way gives the wire bytes back. A value that is not latin-1 was never wire bytes
    (a caller built the headers itself) and is returned as it is.
    """
    try:
        raw = value.encode("latin-1")
    except UnicodeEncodeError:
        return value
    if raw.isascii():
        return value
    return raw.decode("utf-8", "surrogateescape")


def _is_plain(text: str) -> bool:
    """Printable ASCII (and tabs): S3 returns such a value as it is."""
    return all(" " <= ch <= "~" or ch == "\t" for ch in text)


def decode_rfc2047(text: str) -> str:
    """Decode any RFC 2047 encoded-words in `text` (S3 does before storing metadata).

    A value that only looks like an encoded-word (bad base64, unknown charset) is kept as sent.
    """
    if "=?" not in text:
        return text
    try:
        return str(make_header(decode_header(text)))
    except (email.errors.HeaderParseError, LookupError, UnicodeError, ValueError):
        return text


def encode_rfc2047(text: str) -> str:
    """`text` made header-safe the way S3 returns metadata: as is when plain ASCII, else one
    UTF-8 encoded-word; Q-encoding (readable) unless the text holds control characters, which
    are base64-encoded ("B")."""
    if _is_plain(text) and "=?" not in text:
        return text
    data = text.encode("utf-8", "surrogateescape")
    if any(unicodedata.category(ch).startswith("C") for ch in text):
        return f"=?UTF-8?B?{base64.b64encode(data).decode('ascii')}?="
    encoded = "".join(
        "_" if byte == 0x20 else chr(byte) if byte in _Q_SAFE else f"={byte:02X}" for byte in data
    )
    return f"=?UTF-8?Q?{encoded}?="


def metadata_text(value: str) -> str:
    """A user-metadata header value as the text S3 stores: UTF-8 bytes read as UTF-8 (other bytes
    as latin-1, one character each), then RFC 2047 encoded-words decoded."""
    try:
        raw = value.encode("latin-1")
    except UnicodeEncodeError:
        raw = None
    text = value
    if raw is not None and not raw.isascii():
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = value
    return decode_rfc2047(text)
