"""Object Lock as a pure library: a version's lock, a bucket's default retention, and the rules
for deleting a version or changing its retention (no I/O; the catalog applies them inside the
transaction that deletes or changes, so no race lets a locked version go).

S3's rules kept here:
- A version is locked while its retain-until date is in the future (GOVERNANCE or COMPLIANCE) or
  while a legal hold is on. Locked versions cannot be deleted; a DELETE without a version id
  only adds a delete marker, which is allowed.
- GOVERNANCE yields to a caller allowed to bypass it (`x-amz-bypass-governance-retention`);
  COMPLIANCE and legal holds yield to nobody.
- COMPLIANCE retention can only be extended, never shortened, removed or turned into GOVERNANCE;
  GOVERNANCE can be shortened or removed only with the bypass.
- A bucket's default retention (mode + Days or Years) applies to every new version that names none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

GOVERNANCE = "GOVERNANCE"
COMPLIANCE = "COMPLIANCE"
MODES = (GOVERNANCE, COMPLIANCE)
DAY = 86400.0
CONFIG_NAME = "object-lock"  # the bucket configuration document
# The longest default retention a bucket may set. AWS documents Days and Years as positive
# integers and names no maximum; ours keeps every retain-until date a version can get a real date
# (a default of 10^30 days overflowed the date math and answered 500) and matches the bound of a
# restore's Days (server/handlers/lifecycle_api.py).
MAX_DEFAULT_DAYS = 36500
MAX_DEFAULT_YEARS = 100


@dataclass(frozen=True)
class LockConfiguration:
    """A bucket's Object Lock configuration: enabled, with an optional default retention."""

    mode: str | None = None
    days: int | None = None
    years: int | None = None

    def to_json(self) -> str:
        return json.dumps({"enabled": True, "mode": self.mode, "days": self.days, "years": self.years})

    @classmethod
    def from_json(cls, raw: str) -> LockConfiguration:
        value = json.loads(raw)
        return cls(value.get("mode"), value.get("days"), value.get("years"))

    def default_lock(self, created: float) -> dict[str, Any] | None:
        """The retention a new version gets when it names none."""
        if self.mode is None:
            return None
        span = (self.days or 0) * DAY + (self.years or 0) * 365 * DAY
        return {"mode": self.mode, "until": created + span}


def default_period_refused(days: str | None, years: str | None) -> str | None:
    """Why a DefaultRetention period (the Days or Years text, exactly one given) is refused, or
    None: a positive integer in plain ASCII digits, at most MAX_DEFAULT_DAYS / MAX_DEFAULT_YEARS."""
    text = (days if days is not None else years or "").strip()
    significant = text.lstrip("0")
    if not text.isascii() or not text.isdigit() or not significant:
        return "Default retention period must be a positive integer value."
    limit, unit = (MAX_DEFAULT_DAYS, "days") if days is not None else (MAX_DEFAULT_YEARS, "years")
    # Compared by length first: int() of thousands of digits is refused by Python itself.
    if len(significant) > len(str(limit)) or int(significant) > limit:
        return f"Default retention period is too large: at most {limit} {unit}."
    return None


def with_default(
    lock: dict[str, Any] | None, config: LockConfiguration | None, created: float
) -> dict[str, Any] | None:
    """A new version's lock: what its writer asked for, else the bucket's default retention."""
    if config is None or (lock and lock.get("mode")):
        return lock
    default = config.default_lock(created)
    if default is None:
        return lock
    return {**(lock or {}), **default}


def why_locked(lock: dict[str, Any] | None, now: float, *, bypass_governance: bool) -> str | None:
    """Why this version may not be deleted now (None: it may)."""
    if not lock:
        return None
    if lock.get("hold"):
        return "legal hold"
    until = lock.get("until")
    if until is not None and until > now:
        mode = lock.get("mode")
        if mode == COMPLIANCE or not bypass_governance:
            return f"{mode} retention"
    return None


def retention_change_refused(
    old: dict[str, Any] | None, mode: str | None, until: float | None, now: float, *, bypass_governance: bool
) -> str | None:
    """Why this retention change is refused (None: allowed). `mode`/`until` None: remove it."""
    if not old or old.get("until") is None or old["until"] <= now:
        return None  # nothing in force: any new retention may be set
    old_mode, old_until = old.get("mode"), float(old["until"])
    extends = mode == old_mode and until is not None and until >= old_until
    if old_mode == COMPLIANCE:
        return None if extends else "COMPLIANCE retention can only be extended"
    if extends or mode == COMPLIANCE and until is not None and until >= old_until:
        return None
    return None if bypass_governance else "shortening GOVERNANCE retention needs the bypass"
