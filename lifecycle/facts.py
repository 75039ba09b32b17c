"""What a policy may look at, and what it may decide.

Policies (rules.py, intelligent_tiering.py, temperature.py) are pure functions from these facts
and a time to an `Action` or a tier name. The daemon builds the facts from the catalog, asks, and
applies the answer; nothing in a policy touches storage, the clock or the network.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

DAY = 86400.0


@dataclass(frozen=True)
class ObjectFacts:
    """One object as a policy sees it. All times are unix seconds."""

    key: str
    size: int
    tags: Mapping[str, str]
    storage_class: str  # the class S3 reports: STANDARD, STANDARD_IA, INTELLIGENT_TIERING, GLACIER, ...
    tier: str  # where the data is now: "gpu-direct" | "hot" | "warm" | "cold"
    created: float  # last_modified: creation or last overwrite
    last_access: float  # last GET/PUT/Copy (HEAD, LIST and tagging do not count)
    heat: float  # decayed access score, see temperature.py
    # When `heat` was last brought up to date. The catalog keeps it apart from last_access because a
    # sweep may decay and store heat without an access; None means "as of last_access".
    heat_at: float | None = None
    # Did the writer name the class (x-amz-storage-class)? A lifecycle transition's class counts
    # as named too, but the catalog need not say so: a class other than STANDARD was given by someone.
    storage_class_explicit: bool = False

    @property
    def last_touched(self) -> float:
        """The start of the object's idle time: a PUT is an access even if last_access was never set."""
        return max(self.created, self.last_access)

    def idle_s(self, now: float) -> float:
        return max(0.0, now - self.last_touched)


@dataclass(frozen=True)
class UploadFacts:
    """An incomplete multipart upload."""

    key: str
    initiated: float


class ActionKind(enum.Enum):
    TRANSITION = "transition"
    EXPIRE = "expire"


@dataclass(frozen=True)
class Action:
    """A decision for the daemon: move the object to `storage_class`, or delete it."""

    kind: ActionKind
    storage_class: str | None = None  # the target class, for TRANSITION only
    rule_id: str = ""  # the lifecycle rule or Intelligent-Tiering configuration that decided it
    reason: str = ""  # short words for logs and metrics
