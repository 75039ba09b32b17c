"""S3 XML in and out.

Out: documents are built from nested (name, value) pairs — value a string, number, bool, None
(element left out) or a list of pairs (child elements) — and serialised in one pass.
In: request bodies are parsed with defusedxml (no entity expansion), namespace-agnostic, and
every malformed document becomes MalformedXML.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import time
from collections.abc import Iterable
from typing import Union
from xml.etree.ElementTree import Element
from xml.sax.saxutils import escape

from defusedxml import ElementTree as SafeET

from server.errors import MalformedXML

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
MAX_XML_BODY = 2 * 1024 * 1024  # a DeleteObjects of 1000 long keys fits; anything bigger is abuse

Value = Union[str, int, float, bool, None, "list[tuple[str, Value]]"]


def _render(name: str, value: Value, out: list[str]) -> None:
    if value is None:
        return
    if isinstance(value, list):
        out.append(f"<{name}>")
        for child_name, child_value in value:
            _render(child_name, child_value, out)
        out.append(f"</{name}>")
        return
    if isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = escape(str(value))
    out.append(f"<{name}>{text}</{name}>")


def document(
    root: str, children: Iterable[tuple[str, Value]], *, namespace: str | None = S3_NS, trailer: str = ""
) -> bytes:
    """The document `<root>children trailer</root>`; `trailer` is XML already serialised (and
    escaped) by the caller: a listing renders its thousand entries in bulk, not as pairs."""
    ns = f' xmlns="{namespace}"' if namespace else ""
    out = ['<?xml version="1.0" encoding="UTF-8"?>\n', f"<{root}{ns}>"]
    for name, value in children:
        _render(name, value, out)
    out.append(trailer)
    out.append(f"</{root}>")
    return "".join(out).encode()


def escape_text(text: str) -> str:
    """`escape` for element text, without the call layers: str.replace hands back the same string
    when there is nothing to replace, so the usual key costs three scans."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# iso_time runs once per listed key. A timestamp is split into whole seconds and milliseconds; the
# milliseconds come from a table and the seconds from a dict (a page's keys were mostly written
# within seconds of each other: one lookup instead of a cached call and two joins), whose misses
# are made from the hour (cached) and minute:second (a table).
_MINUTE_SECOND = [f"{m:02d}:{s:02d}" for m in range(60) for s in range(60)]
_MILLIS = [f".{ms:03d}Z" for ms in range(1000)]
_ISO_SECONDS: dict[int, str] = {}
_ISO_SECONDS_MAX = 65536  # emptied when full: a plain dict lookup is the point, not an LRU


@functools.lru_cache(maxsize=8192)
def _iso_hour(hours: int) -> str:
    t = time.gmtime(hours * 3600)
    return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:"


def iso_time(timestamp: float) -> str:
    """S3's XML timestamp form: 2024-01-02T03:04:05.000Z (milliseconds truncated, not rounded)."""
    seconds = int(timestamp)
    whole = _ISO_SECONDS.get(seconds)
    if whole is None:
        if len(_ISO_SECONDS) >= _ISO_SECONDS_MAX:
            _ISO_SECONDS.clear()
        whole = _ISO_SECONDS[seconds] = _iso_hour(seconds // 3600) + _MINUTE_SECOND[seconds % 3600]
    return whole + _MILLIS[int((timestamp - seconds) * 1000)]


def http_date(timestamp: float) -> str:
    """RFC 7231 date for Last-Modified and friends (whole seconds: the format has no fraction)."""
    return _http_date_seconds(math.floor(timestamp))


@functools.lru_cache(maxsize=4096)  # every GET and HEAD formats one; hot objects repeat theirs
def _http_date_seconds(seconds: int) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")


def _strip_ns(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse(body: bytes, expected_root: str | None = None) -> Element:
    if not body.strip():
        raise MalformedXML()
    try:
        root = SafeET.fromstring(body)
    except Exception:  # defusedxml raises several types; all mean the same to a client
        raise MalformedXML() from None
    for element in root.iter():
        element.tag = _strip_ns(element.tag)
    if expected_root is not None and root.tag != expected_root:
        raise MalformedXML()
    return root


def child_text(element: Element, name: str, default: str | None = None) -> str | None:
    child = element.find(name)
    if child is None:
        return default
    return child.text or ""
