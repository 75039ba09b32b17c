"""Gateway ↔ node signing: each signed request is unique, and a node accepts it once."""

from __future__ import annotations

from erasure import node_auth

SECRET = b"unit-cluster-secret"


def test_signatures_are_unique_and_still_check() -> None:
    a = node_auth.sign(SECRET, "GET", "/v1/drive/d1/hot/list")
    b = node_auth.sign(SECRET, "GET", "/v1/drive/d1/hot/list")
    assert a[node_auth.SIGNATURE_HEADER] != b[node_auth.SIGNATURE_HEADER]
    assert node_auth.check(SECRET, "GET", "/v1/drive/d1/hot/list", a) is None
    float(a[node_auth.DATE_HEADER])  # a plain number: a node of the previous version reads it


def test_a_replayed_signature_is_refused_within_the_window_and_forgotten_after() -> None:
    window = node_auth.ReplayWindow(window=60)
    assert window.first_use("sig-1", sent=1000.0, now=1000.0)
    assert not window.first_use("sig-1", sent=1000.0, now=1030.0)
    assert window.first_use("sig-2", sent=1031.0, now=1031.0)
    # Past the window the entry is dropped (check() refuses such a stale time by itself).
    assert window.first_use("sig-3", sent=1080.0, now=1080.0)
    assert "sig-1" not in window._seen and "sig-2" in window._seen
