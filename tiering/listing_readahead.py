"""Read ahead in a listing a client is paging through: while it reads page N, read page N+1.

A client listing a large bucket (boto3's paginator, s3fs, rclone, a DataLoader's index) asks for
one page, reads it, and only then asks for the next: the catalog query of each page (a third of
a 1,000-key page's server time, bench/RESULTS.md) adds to every round trip. Once a client has
asked for a page after the first (so it is paging, not peeking), the next page is queried in a
background thread while this one travels, and the next request takes it instead of querying.

A page read ahead is served only if nothing a listing shows was committed to the catalog since
just before it was read (the catalog's listing stamp, taken before the query and again when the
page is taken; it counts objects added, removed or rewritten, not the leases and heartbeats that
commit all the time): a listing still shows every write acknowledged before it was asked for.
Anything else — a stale or expired page, a catalog that cannot tell (PostgreSQL) — and the page
is read as before.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

from tiering.records import ListPage

READAHEAD_SECONDS = 10.0  # a page read ahead and not asked for within this long is dropped
# Pages read ahead of the one a client asked for. With one, the next page's query began only when
# a request took its own page, so each query waited for the round trip around it (render, send,
# the client's next request) to start; with two the thread reads on meanwhile.
READAHEAD_DEPTH = 2
READAHEAD_PAGES = 16  # pages held at once (listings in progress), oldest dropped first
# After a page read ahead turned out stale, none is read ahead for this long: while writes keep
# coming (to any bucket: the stamp is the whole catalog's) reading ahead would be wasted work,
# and this bounds that waste to a page or so per listing per pause.
STALE_PAUSE_SECONDS = 0.1


class PageArgs(NamedTuple):
    bucket: str
    prefix: str
    delimiter: str
    start_after: str
    max_keys: int


class _Ahead(NamedTuple):
    stamp: int
    started: float
    page: Future[ListPage]


class ListingReadahead:
    """`page(args)` for listings; reads the following page ahead where the client is paging."""

    def __init__(
        self, read_page: Callable[[PageArgs], ListPage], listing_stamp: Callable[[], int | None]
    ) -> None:
        self._read_page = read_page
        self._listing_stamp = listing_stamp
        self._lock = threading.Lock()
        self._ahead: OrderedDict[PageArgs, _Ahead] = OrderedDict()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self._paused_until = 0.0  # monotonic: see STALE_PAUSE_SECONDS
        # Pages served by their request: read ahead and current ("used"), read ahead but
        # something it shows was committed since or it expired ("stale"), or read then ("read").
        self.counts = {"used": 0, "stale": 0, "read": 0}

    def page(self, args: PageArgs) -> ListPage:
        """One listing page (in a worker thread: it may query the catalog or wait for a read ahead)."""
        page = self._take(args)
        if page is None:
            page = self._read_page(args)
            self._count("read")
        else:
            self._count("used")
        # A request that continues a listing (a marker or token) is a client paging through it.
        if page.is_truncated and args.start_after and page.next_marker is not None:
            self._read_ahead(args._replace(start_after=page.next_marker))
        return page

    def _take(self, args: PageArgs) -> ListPage | None:
        with self._lock:
            ahead = self._ahead.pop(args, None)
        if ahead is None:
            return None
        if ahead.page.cancel():  # still queued behind other listings' pages: read it here instead
            return None
        try:
            page = ahead.page.result()  # being read: it is ahead of a query begun now
        except Exception:
            page = None  # the request's own query reports whatever is wrong
        fresh = time.monotonic() - ahead.started <= READAHEAD_SECONDS
        if page is None or not fresh or self._listing_stamp() != ahead.stamp:
            self._count("stale")
            self._paused_until = time.monotonic() + STALE_PAUSE_SECONDS
            return None
        return page

    def _count(self, outcome: str) -> None:
        with self._lock:
            self.counts[outcome] += 1

    def _read_ahead(self, args: PageArgs, depth: int = READAHEAD_DEPTH) -> None:
        """Read the page `args` ahead (unless it is already), then the `depth - 1` pages after it,
        each once the one before it is read (its last key is where the next one starts)."""
        if time.monotonic() < self._paused_until:
            return
        # Taken before the query: a commit after it, even one the query saw, makes the page stale.
        stamp = self._listing_stamp()
        if stamp is None:
            return
        with self._lock:
            if self._closed:
                return
            ahead = self._ahead.get(args)
            if ahead is None:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="listing-readahead")
                future = self._pool.submit(self._read_page, args)
                ahead = self._ahead[args] = _Ahead(stamp, time.monotonic(), future)
                while len(self._ahead) > READAHEAD_PAGES:
                    self._ahead.popitem(last=False)
        if depth > 1:  # outside the lock: on a page already read the callback runs right here
            ahead.page.add_done_callback(lambda read: self._read_after(read, args, depth - 1))

    def _read_after(self, read: Future[ListPage], args: PageArgs, depth: int) -> None:
        if read.cancelled() or read.exception() is not None:
            return
        page = read.result()
        if page.is_truncated and page.next_marker is not None:
            self._read_ahead(args._replace(start_after=page.next_marker), depth)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._ahead.clear()
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
