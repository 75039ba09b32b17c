"""ListObjects v1 / v2 (and ListObjectVersions) against a listing computed here in Python.

Every (prefix, delimiter) case is paged with MaxKeys 1..3 and the pages, merged, must equal the
model: keys in UTF-8 byte order (= code point order: Python's own str order), common prefixes
rolled up, IsTruncated exactly on the pages that are not last.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import count
from typing import Any
from urllib.parse import unquote_plus
from xml.etree import ElementTree

import pytest

from tests.conftest import make_client

KEYS = [
    "a", "a/", "a/b", "a/b/c", "a/b/d", "a/c", "a//x", "a/b/c/d/e", "aa",
    "b-1", "b-2-x", "b::", "b::one", "b::two::three", "b:single",
    "c d/e f", "c%2F", "c+plus", "c:colon",
    "photos/2024/jan/1.jpg", "photos/2024/feb/2.jpg", "photos/2025/x.jpg", "photos/readme",
    # Beyond the BMP and around the surrogate range: UTF-16 order differs from UTF-8 order here.
    "z\uFFFD", "z\U0001F600", "z\uE000", "z\u00e9", "ze", "z\U00010000", "z\uFF5E/x", "z\uD7FF",
    "日本/語", "日本語",
    "ctl\x01char", "tab\there", "new\nline",
]  # fmt: skip

_buckets = count()


def expected(
    keys: list[str], prefix: str = "", delimiter: str = "", after: str = ""
) -> list[tuple[str, str]]:
    """The listing S3 defines: ("k", key) and ("p", common prefix) entries in order."""
    out: list[tuple[str, str]] = []
    for key in sorted(keys):
        if not key.startswith(prefix) or key <= after:
            continue
        if delimiter:
            cut = key.find(delimiter, len(prefix))
            if cut >= 0:
                common = key[: cut + len(delimiter)]
                if common > after and ("p", common) not in out:
                    out.append(("p", common))
                continue
        out.append(("k", key))
    return out


@pytest.fixture(scope="module")
def listed_bucket(server, s3) -> Iterator[str]:
    name = f"listing-{os.getpid()}-{next(_buckets)}"
    s3.create_bucket(Bucket=name)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda k: s3.put_object(Bucket=name, Key=k, Body=k.encode()), KEYS))
    yield name
    for key in KEYS:  # one by one: XML 1.0 cannot carry "\x01", so DeleteObjects cannot name it
        s3.delete_object(Bucket=name, Key=key)
    s3.delete_bucket(Bucket=name)


def _entries(page: dict[str, Any]) -> list[tuple[str, str]]:
    merged = [("k", o["Key"]) for o in page.get("Contents", [])]
    merged += [("p", p["Prefix"]) for p in page.get("CommonPrefixes", [])]
    return sorted(merged, key=lambda e: e[1])


def pages_v2(s3, bucket: str, max_keys: int, **params: str) -> list[list[tuple[str, str]]]:
    pages = []
    token: str | None = None
    while True:
        extra = {"ContinuationToken": token} if token else {}
        page = s3.list_objects_v2(Bucket=bucket, MaxKeys=max_keys, **params, **extra)
        entries = _entries(page)
        assert page["KeyCount"] == len(entries)
        assert page["MaxKeys"] == max_keys
        assert len(entries) <= max_keys
        pages.append(entries)
        if not page["IsTruncated"]:
            assert "NextContinuationToken" not in page
            return pages
        assert entries, "a truncated page must not be empty"
        token = page["NextContinuationToken"]
        assert len(pages) < 100


def pages_v1(s3, bucket: str, max_keys: int, **params: str) -> list[list[tuple[str, str]]]:
    pages = []
    marker = ""
    while True:
        page = s3.list_objects(Bucket=bucket, MaxKeys=max_keys, Marker=marker, **params)
        entries = _entries(page)
        assert len(entries) <= max_keys
        assert page["Marker"] == marker
        pages.append(entries)
        if not page["IsTruncated"]:
            return pages
        if params.get("Delimiter"):
            # With a delimiter the next marker may be a common prefix: S3 must say which.
            assert page["NextMarker"] == entries[-1][1]
            marker = page["NextMarker"]
        else:
            marker = page.get("NextMarker") or page["Contents"][-1]["Key"]
        assert len(pages) < 100


CASES = [
    ("", ""),
    ("", "/"),
    ("a", "/"),
    ("a/", "/"),
    ("a/b/", "/"),
    ("photos/", "/"),
    ("photos/2024/", "/"),
    ("b", "::"),  # a multi-character delimiter
    ("", "-"),
    ("", "b"),
    ("z", ""),
    ("z", "/"),
    ("c", " "),
    ("日本", "/"),
    ("nomatch", "/"),
]


@pytest.mark.parametrize(("prefix", "delimiter"), CASES)
def test_listing_matches_model_across_pages(s3, listed_bucket, prefix: str, delimiter: str) -> None:
    want = expected(KEYS, prefix, delimiter)
    params = {"Prefix": prefix, "Delimiter": delimiter}
    full = pages_v2(s3, listed_bucket, 1000, **params)
    assert full == [want]
    for max_keys in (1, 2, 3):
        pages = pages_v2(s3, listed_bucket, max_keys, **params)
        assert [e for page in pages for e in page] == want, max_keys
        assert all(len(page) == max_keys for page in pages[:-1])
        pages = pages_v1(s3, listed_bucket, max_keys, **params)
        assert [e for page in pages for e in page] == want, max_keys


@pytest.mark.parametrize(
    ("prefix", "delimiter", "after"),
    [
        ("", "", "b"),
        ("", "/", "a/"),
        ("", "/", "a/b"),
        ("photos/", "/", "photos/2024/"),
        ("", "", "z\uffff"),
        ("a", "", "zzz"),
        ("", "/", ""),
    ],
)
def test_start_after(s3, listed_bucket, prefix: str, delimiter: str, after: str) -> None:
    page = s3.list_objects_v2(Bucket=listed_bucket, Prefix=prefix, Delimiter=delimiter, StartAfter=after)
    assert _entries(page) == expected(KEYS, prefix, delimiter, after)
    if after:
        assert page["StartAfter"] == after
    v1 = s3.list_objects(Bucket=listed_bucket, Prefix=prefix, Delimiter=delimiter, Marker=after)
    assert _entries(v1) == expected(KEYS, prefix, delimiter, after)


def test_utf8_binary_order(s3, listed_bucket) -> None:
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=listed_bucket, Prefix="z")["Contents"]]
    assert keys == sorted(keys, key=lambda k: k.encode("utf-8"))
    # U+FFFD sorts before U+10000 in UTF-8 (and code points), after it in UTF-16.
    assert keys.index("z\ufffd") < keys.index("z\U00010000") < keys.index("z\U0001f600")
    assert keys.index("z\ud7ff") < keys.index("z\ue000") < keys.index("z\uff5e/x")


def test_paginators(s3, listed_bucket) -> None:
    for operation in ("list_objects", "list_objects_v2"):
        paginator = s3.get_paginator(operation)
        pages = paginator.paginate(Bucket=listed_bucket, Delimiter="/", PaginationConfig={"PageSize": 2})
        assert [e for page in pages for e in _entries(page)] == expected(KEYS, "", "/")


def test_max_keys_zero(s3, listed_bucket) -> None:
    page = s3.list_objects_v2(Bucket=listed_bucket, MaxKeys=0)
    assert page["KeyCount"] == 0
    assert "Contents" not in page
    assert page["MaxKeys"] == 0


def test_fetch_owner(s3, listed_bucket) -> None:
    without = s3.list_objects_v2(Bucket=listed_bucket, MaxKeys=1)["Contents"][0]
    assert "Owner" not in without
    with_owner = s3.list_objects_v2(Bucket=listed_bucket, MaxKeys=1, FetchOwner=True)["Contents"][0]
    assert with_owner["Owner"]["ID"]
    # v1 always names the owner.
    assert s3.list_objects(Bucket=listed_bucket, MaxKeys=1)["Contents"][0]["Owner"]["ID"]


def test_contents_fields(s3, listed_bucket) -> None:
    entry = s3.list_objects_v2(Bucket=listed_bucket, Prefix="photos/readme")["Contents"][0]
    assert entry["Key"] == "photos/readme"
    assert entry["Size"] == len(b"photos/readme")
    assert entry["StorageClass"] == "STANDARD"
    assert entry["ETag"] == s3.head_object(Bucket=listed_bucket, Key="photos/readme")["ETag"]


def _raw_list(raw, bucket: str, query: str) -> ElementTree.Element:
    response = raw("GET", f"/{bucket}", query=query)
    assert response.status_code == 200, response.content
    root = ElementTree.fromstring(response.content)
    for element in root.iter():
        element.tag = element.tag.rsplit("}", 1)[-1]
    return root


def test_encoding_type_url(raw, listed_bucket) -> None:
    for query in ("list-type=2&encoding-type=url", "encoding-type=url"):
        root = _raw_list(raw, listed_bucket, query)
        assert root.findtext("EncodingType") == "url"
        texts = [e.text or "" for e in root.iter("Key")]
        for text in texts:
            assert text.isascii() and " " not in text and "\x01" not in text and "\n" not in text, text
        assert sorted(unquote_plus(t) for t in texts) == sorted(KEYS)
    root = _raw_list(raw, listed_bucket, "list-type=2&encoding-type=url&delimiter=%20&prefix=c")
    assert [e.text for e in root.iter("Prefix")][1:] == ["c%20"]
    assert root.findtext("Delimiter") == "%20"


def test_encoding_type_url_covers_every_key_element(raw, listed_bucket) -> None:
    """S3 encodes every element that holds a key or part of one, not only Key and Prefix:
    v1 Prefix, Delimiter, Marker, NextMarker; v2 Prefix, Delimiter, StartAfter."""
    v1 = _raw_list(raw, listed_bucket, "encoding-type=url&prefix=c%20&marker=c%20d&delimiter=%20&max-keys=1")
    assert [v1.findtext(name) for name in ("Prefix", "Marker", "Delimiter")] == ["c%20", "c%20d", "%20"]
    v1 = _raw_list(raw, listed_bucket, "encoding-type=url&prefix=c&marker=c%20&delimiter=%2B&max-keys=1")
    assert v1.findtext("IsTruncated") == "true"
    assert v1.findtext("NextMarker") == "c%20d/e%20f"
    v2 = _raw_list(
        raw, listed_bucket, "list-type=2&encoding-type=url&prefix=c%20&start-after=c%20%2B&delimiter=%2B"
    )
    assert [v2.findtext(name) for name in ("Prefix", "StartAfter", "Delimiter")] == ["c%20", "c%20%2B", "%2B"]


def test_invalid_encoding_type(raw, listed_bucket, error_code) -> None:
    response = raw("GET", f"/{listed_bucket}", query="list-type=2&encoding-type=base64")
    assert response.status_code == 400
    assert error_code(response) == "InvalidArgument"


def test_list_object_versions_pages(s3, listed_bucket) -> None:
    seen: list[str] = []
    pages = s3.get_paginator("list_object_versions").paginate(
        Bucket=listed_bucket, PaginationConfig={"PageSize": 3}
    )
    for page in pages:
        for version in page.get("Versions", []):
            assert version["VersionId"] == "null"
            assert version["IsLatest"] is True
            seen.append(version["Key"])
        assert page.get("DeleteMarkers", []) == []
    assert seen == sorted(KEYS)
    grouped = s3.list_object_versions(Bucket=listed_bucket, Prefix="photos/", Delimiter="/")
    assert [p["Prefix"] for p in grouped["CommonPrefixes"]] == ["photos/2024/", "photos/2025/"]
    assert [v["Key"] for v in grouped["Versions"]] == ["photos/readme"]


def test_more_than_1000_keys(server, s3, bucket) -> None:
    keys = [f"k{i:05d}" for i in range(1003)]
    clients = [make_client(server.endpoint) for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        # Empty objects on the memory-speed tier: this test is about listing, not about writing.
        list(
            pool.map(
                lambda ik: clients[ik[0] % 4].put_object(
                    Bucket=bucket, Key=ik[1], Body=b"", StorageClass="EXPRESS_ONEZONE"
                ),
                enumerate(keys),
            )
        )
    default = s3.list_objects_v2(Bucket=bucket)
    assert default["KeyCount"] == 1000 and default["IsTruncated"] is True
    capped = s3.list_objects_v2(Bucket=bucket, MaxKeys=5000)
    assert capped["MaxKeys"] == 1000 and capped["KeyCount"] == 1000
    rest = s3.list_objects_v2(Bucket=bucket, ContinuationToken=capped["NextContinuationToken"])
    assert [o["Key"] for o in rest["Contents"]] == keys[1000:]
    assert rest["IsTruncated"] is False
    v1 = s3.list_objects(Bucket=bucket, MaxKeys=1001)
    assert len(v1["Contents"]) == 1000 and v1["IsTruncated"] is True
    all_keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for o in page["Contents"]
    ]
    assert all_keys == keys
    versions = s3.list_object_versions(Bucket=bucket)
    assert len(versions["Versions"]) == 1000 and versions["IsTruncated"] is True
    assert versions["NextKeyMarker"] == keys[999]
    for start in range(0, len(keys), 1000):
        s3.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[start : start + 1000]], "Quiet": True}
        )
