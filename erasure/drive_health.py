"""Which drives of a pool can take writes right now: `normal`, `full` or `failing`.

A drive that is out of space, or that keeps failing writes (read-only remount, I/O errors), is
still *online* — its shards can be read — but placement must stop choosing it, or every stripe
that lands there loses a shard and a share of PUTs misses the write quorum. So each pool keeps a
`DriveHealth`:

- `full`: free space below `reserve_bytes` (seen by statvfs), or a write failed with ENOSPC/EDQUOT.
  Re-probed by statvfs; normal again once free space is above the reserve *and* has grown by a
  reserve since the drive was marked — a drive that refused one large shard while it still had
  room would otherwise flap between full and normal at every probe.
- `failing`: `failing_after_errors` writes in a row failed with another error. Re-probed by a small
  write + fsync + delete on the drive; normal again when that passes.

Every `reprobe_seconds` the pool re-checks (a statvfs per drive, a probe write per failing drive).
Each change of state is logged once, with the errno that caused it — not once per failed write.
Every process sharing the drives (workers, gateways, a lifecycle process) holds the same state:
a change one of them observes goes to `on_change` (tiering/domains.py records it in the catalog)
and the others take it up with `adopt`.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from erasure.drive import Drive
from erasure.errors import ErasureError
from erasure.shard_store import local_drive
from erasure.topology import Domain

log = logging.getLogger("tierstore.erasure.drives")

_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True)
class DriveHealthSettings:
    """The `[drives]` config table."""

    reserve_bytes: int = 1 << 30  # a drive with less free space than this is `full`
    failing_after_errors: int = 3  # this many failed writes in a row make a drive `failing`
    reprobe_seconds: float = 10.0  # how often marked drives (and every drive's free space) are checked

    def __post_init__(self) -> None:
        if self.reserve_bytes < 0 or self.failing_after_errors < 1 or self.reprobe_seconds <= 0:
            raise ValueError(
                "drives: need reserve_bytes >= 0, failing_after_errors >= 1, reprobe_seconds > 0"
            )


class DriveCondition(StrEnum):
    NORMAL = "normal"
    FULL = "full"
    FAILING = "failing"


def describe_error(error: BaseException) -> str:
    """`ENOSPC (No space left on device)` for an OSError, the message otherwise."""
    if isinstance(error, OSError) and error.errno is not None:
        name = errno.errorcode.get(error.errno, str(error.errno))
        return f"{name} ({error.strerror or os.strerror(error.errno)})"
    return str(error) or type(error).__name__


def is_out_of_space(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in _FULL_ERRNOS


@dataclass
class _Drive:
    condition: DriveCondition = DriveCondition.NORMAL
    detail: str = ""  # why it is marked: the errno, or the free space seen
    errors_in_a_row: int = 0
    free_when_marked: int | None = None  # `full`: free bytes when marked, or at the first probe after ENOSPC


class DriveHealth:
    """The write health of one pool's drives. Thread-safe: writers report from worker threads."""

    def __init__(
        self,
        pool_name: str,
        settings: DriveHealthSettings | None = None,
        drive_of: Callable[[Domain], Drive] = local_drive,
    ) -> None:
        self.pool_name = pool_name
        self._drive_of = drive_of  # probes go through the drive seam (a drive may be on a node)
        self.settings = settings or DriveHealthSettings()
        self._lock = threading.Lock()
        self._drives: dict[str, _Drive] = {}
        # Told of each change of state observed here (any thread), to share it; not of adopted ones.
        self.on_change: Callable[[str, DriveCondition, str], None] | None = None

    # -- questions ---------------------------------------------------------------------------

    def condition(self, domain_id: str) -> DriveCondition:
        with self._lock:
            drive = self._drives.get(domain_id)
            return drive.condition if drive else DriveCondition.NORMAL

    def detail(self, domain_id: str) -> str:
        with self._lock:
            drive = self._drives.get(domain_id)
            return drive.detail if drive else ""

    def writable(self, domain_id: str) -> bool:
        """False while the drive is marked full or failing: placement skips it."""
        return self.condition(domain_id) is DriveCondition.NORMAL

    # -- reports from writers ----------------------------------------------------------------

    def write_failed(self, domain: Domain, error: BaseException) -> None:
        """A shard write on `domain` failed with `error` (an OSError: the drive's fault)."""
        if is_out_of_space(error):
            self._mark(domain.id, DriveCondition.FULL, describe_error(error))
            return
        with self._lock:
            drive = self._drives.setdefault(domain.id, _Drive())
            drive.errors_in_a_row += 1
            reached = drive.errors_in_a_row >= self.settings.failing_after_errors
        if reached:
            self._mark(
                domain.id,
                DriveCondition.FAILING,
                f"{describe_error(error)}, {self.settings.failing_after_errors} writes in a row failed",
            )

    def write_succeeded(self, domain_id: str) -> None:
        with self._lock:
            drive = self._drives.get(domain_id)
            if drive is not None:
                drive.errors_in_a_row = 0

    # -- probes (blocking: call from a worker thread) ----------------------------------------

    def check(self, domains: Iterable[Domain]) -> None:
        """Re-probe: free space on every online drive, a probe write on every failing one."""
        for domain in domains:
            if not domain.online:
                continue
            if self.condition(domain.id) is DriveCondition.FAILING:
                self._probe_write(domain)
            if self.condition(domain.id) is not DriveCondition.FAILING:
                self._check_space(domain)

    def _check_space(self, domain: Domain) -> None:
        try:
            usage = self._drive_of(domain).disk_usage()
        except OSError as exc:
            self._failed_probe(domain, exc)
            return
        except ErasureError:
            return  # unreachable now (a node down): its liveness, not its health
        if usage is None:
            return
        free = usage[0]
        reserve = self.settings.reserve_bytes
        if self.condition(domain.id) is not DriveCondition.FULL:
            if free < reserve:
                self._mark(
                    domain.id,
                    DriveCondition.FULL,
                    f"{free} bytes free, below the reserve of {reserve}",
                    free=free,
                )
            return
        with self._lock:
            drive = self._drives[domain.id]
            if drive.free_when_marked is None:
                drive.free_when_marked = free
            recovered = free >= reserve and free >= drive.free_when_marked + reserve
        if recovered:
            self._mark(domain.id, DriveCondition.NORMAL, f"{free} bytes free")

    def _probe_write(self, domain: Domain) -> None:
        """A small file written, fsync'd and removed: what a shard write needs from the drive."""
        try:
            self._drive_of(domain).probe_write()
        except ErasureError:
            return  # unreachable now: try again at the next re-probe
        except OSError as exc:
            self._failed_probe(domain, exc)
            return
        self._mark(domain.id, DriveCondition.NORMAL, "a probe write passed")

    def _failed_probe(self, domain: Domain, error: OSError) -> None:
        if self.condition(domain.id) is DriveCondition.NORMAL:
            self._mark(domain.id, DriveCondition.FAILING, describe_error(error))

    # -- state changes -----------------------------------------------------------------------

    def adopt(self, domain_id: str, condition: DriveCondition, detail: str) -> bool:
        """Take up a state another process observed; True if it changed here. Re-probes go on
        as for a state observed here (the first probe of a full drive measures its free space)."""
        with self._lock:
            drive = self._drives.setdefault(domain_id, _Drive())
            if drive.condition is condition:
                return False
            drive.condition = condition
            drive.detail = detail if condition is not DriveCondition.NORMAL else ""
            drive.free_when_marked = None
            drive.errors_in_a_row = 0
        log.info(
            "drive %s (%s), as another process found: %s (%s)", domain_id, self.pool_name, condition, detail
        )
        return True

    def _mark(self, domain_id: str, condition: DriveCondition, detail: str, free: int | None = None) -> None:
        with self._lock:
            drive = self._drives.setdefault(domain_id, _Drive())
            changed = drive.condition is not condition
            drive.condition = condition
            if condition is DriveCondition.NORMAL:
                drive.errors_in_a_row = 0
                drive.detail = ""
            elif changed:
                drive.detail = detail
                # After ENOSPC (free None) the first probe measures it, once the failed shard is gone.
                drive.free_when_marked = free
        if not changed:
            return
        if self.on_change is not None:
            self.on_change(domain_id, condition, detail)
        if condition is DriveCondition.NORMAL:
            log.warning("drive %s (%s) is back to normal: %s", domain_id, self.pool_name, detail)
        else:
            log.error(
                "drive %s (%s) is %s: %s; placement skips it until a re-probe passes",
                domain_id,
                self.pool_name,
                condition.value,
                detail,
            )
