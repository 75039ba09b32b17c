"""A background lifecycle pass paces its scan (`[lifecycle] scan_share`): it works that share of the
time and sleeps the rest between pages, so that over millions of objects it does not take a core
from the requests. A pass somebody waits for (`admin lifecycle run --wait`) never pauses, and one
under way when it is asked for stops pausing."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lifecycle.daemon import MAX_PAUSE_SECONDS
from tests.lifecycle.conftest import Tiered

OBJECTS = 900  # two pages of the daemon's scan (500 objects each): one pause between them


def _duration(report: dict[str, Any]) -> float:
    return float(report["finished"] - report["started"])


def _next_background_pass(ts: Tiered, after: float, timeout: float = 120.0) -> dict[str, Any]:
    """The first pass that started after `after` (wall clock), once it has finished."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        report = ts.admin("lifecycle", "status")["last_pass"]
        if report and report["started"] > after:
            return dict(report)
        time.sleep(0.2)
    raise AssertionError(f"no background pass finished within {timeout:.0f} s")


def test_background_passes_pause_between_pages_and_an_asked_for_pass_does_not(
    spawn: Callable[..., Tiered],
) -> None:
    # One process: the passes and their reports are that process's daemon's. At 0.1 % every pause
    # is the longest there is (a page takes over 5 ms), so a caller kept waiting for one shows.
    ts = spawn(
        env={"TIERSTORE_LIFECYCLE_INTERVAL_SECONDS": "1", "TIERSTORE_LIFECYCLE_SCAN_SHARE": "0.001"},
        extra_args=["--workers", "1"],
    )
    ts.s3.create_bucket(Bucket="paced")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: ts.s3.put_object(Bucket="paced", Key=f"k{n:05d}", Body=b"x"), range(OBJECTS)))

    asked = ts.run_pass()  # unpaced, whatever runs in the background
    assert asked["scanned"] == OBJECTS
    background = _next_background_pass(ts, after=asked["finished"])
    assert background["scanned"] == OBJECTS
    # Paced, its scan pauses after each page; it takes well over four times the unpaced one.
    assert _duration(background) > 4 * _duration(asked), (background, asked)

    # Asked for while a background pass is pausing: that pause ends at once, and the asked-for pass
    # follows at full speed — far sooner than the pause would have ended.
    deadline = time.monotonic() + 60
    while not ts.admin("lifecycle", "status")["running"]:
        assert time.monotonic() < deadline, "no background pass started"
        time.sleep(0.05)
    started = time.monotonic()
    again = ts.run_pass()
    waited = time.monotonic() - started
    assert again["scanned"] == OBJECTS
    assert waited < MAX_PAUSE_SECONDS / 2, (waited, background)


def test_the_scan_of_noncurrent_versions_is_paced_too(spawn: Callable[..., Tiered]) -> None:
    """A versioned bucket's noncurrent versions are scanned page by page after the objects: those
    pages pause like the object scan's (a bucket of millions of versions took a core for its whole
    scan before). One key, 900 noncurrent versions: one object page, two version pages."""
    ts = spawn(
        env={"TIERSTORE_LIFECYCLE_INTERVAL_SECONDS": "1", "TIERSTORE_LIFECYCLE_SCAN_SHARE": "0.001"},
        extra_args=["--workers", "1"],
    )
    ts.s3.create_bucket(Bucket="paced-versions")
    ts.s3.put_bucket_versioning(Bucket="paced-versions", VersioningConfiguration={"Status": "Enabled"})
    # One writer: concurrent PUTs of one key in a versioned bucket drew InternalError on the
    # PostgreSQL catalog (a known leftover, not what this test is about).
    for _ in range(OBJECTS + 1):
        ts.s3.put_object(Bucket="paced-versions", Key="k", Body=b"x")

    asked = ts.run_pass()
    background = _next_background_pass(ts, after=asked["finished"])
    # Each version page works over 5 ms, so at 0.1 % its pause is the 5 s cap: two of them, on top
    # of the object page's. Unpaced version pages left the object page's pause alone (< 5 s).
    assert _duration(background) > 2 * MAX_PAUSE_SECONDS, (background, asked)
    assert _duration(asked) < MAX_PAUSE_SECONDS, asked
