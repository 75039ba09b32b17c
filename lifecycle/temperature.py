"""Access temperature: where an object's heat says it should live, and whom to evict first.

Heat is an exponentially decayed count of accesses (the arithmetic lives in `tiering.heat`, next
to the catalog that stores it). This module turns heat and idle time into a desired tier among the
instantly readable ones — gpu-direct, hot, warm — and never touches cold: archiving is for
lifecycle rules and Intelligent-Tiering, restoring for an explicit restore.

Which objects temperature moves at all (`temperature_managed`), as in S3, where reads never change
an object's class: INTELLIGENT_TIERING objects, and objects without a class of their own — written
without x-amz-storage-class and never given one by a lifecycle transition (S3 reports STANDARD).
An object whose class the writer named or a lifecycle rule set stays on that class's tier, so
HEAD's StorageClass and x-tierstore-tier agree; only lifecycle rules move it. Capacity watermarks
evict only temperature-managed objects too: moving a classed object would make HEAD report a
class whose tier does not hold the data.

Every threshold has hysteresis against its opposite, so the daemon's moves settle instead of
flapping: what desired_tier sends somewhere, it does not send back until the facts change.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from lifecycle.facts import ObjectFacts
from tiering import heat as heat_math

GPU_DIRECT, HOT, WARM, COLD = "gpu-direct", "hot", "warm", "cold"
DEFAULT_BOUNDS = (0.1, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
UNCLASSED = "STANDARD"  # what S3 reports for an object written without a class


@dataclass(frozen=True)
class TemperaturePolicy:
    half_life_s: float = 86400.0  # heat halves per day without access
    promote_to_gpu: float = 20.0  # heat at/above → gpu-direct (if it fits)
    promote_to_hot: float = 2.0  # heat at/above (and on warm) → hot
    demote_after_idle_s: float = 30 * 86400  # idle this long on hot/gpu-direct → warm
    gpu_idle_s: float = 3600.0  # idle this long on gpu-direct → hot

    def __post_init__(self) -> None:
        if self.half_life_s <= 0:
            raise ValueError("half_life_s must be positive")
        # gpu-direct is the hotter of the two: promoting to it must need at least what staying hot does.
        if not 0 < self.promote_to_hot <= self.promote_to_gpu:
            raise ValueError("need 0 < promote_to_hot <= promote_to_gpu")
        if self.gpu_idle_s <= 0 or self.demote_after_idle_s <= 0:
            raise ValueError("idle thresholds must be positive")


def decayed(heat: float, since: float, now: float, half_life_s: float) -> float:
    """`heat` as it was at `since`, decayed to `now`."""
    return heat_math.decayed(heat, since, now, half_life_s)


def bump(heat: float, last_update: float, now: float, half_life_s: float, weight: float = 1.0) -> float:
    """Decay to `now`, then count one access of `weight`."""
    return heat_math.bump(heat, last_update, now, half_life_s, weight)


def current_heat(obj: ObjectFacts, now: float, half_life_s: float) -> float:
    since = obj.heat_at if obj.heat_at is not None else obj.last_access
    return decayed(obj.heat, since, now, half_life_s)


def temperature_managed(obj: ObjectFacts, manage_unclassified: bool = True) -> bool:
    """May heat (and watermarks) move this object? See the module doc. `manage_unclassified`: the
    server's and the bucket's say on objects without a class (tag tierstore:temperature=off)."""
    if obj.storage_class == "INTELLIGENT_TIERING":
        return True
    if obj.storage_class_explicit or obj.storage_class != UNCLASSED:
        return False  # named by the writer, or given by a lifecycle transition
    return manage_unclassified


def desired_tier(obj: ObjectFacts, policy: TemperaturePolicy, now: float) -> str | None:
    """The tier temperature wants `obj` on, or None to stay. Only among gpu-direct, hot and warm."""
    heat = current_heat(obj, now, policy.half_life_s)
    idle = obj.idle_s(now)
    if obj.tier == GPU_DIRECT:
        if idle >= policy.demote_after_idle_s:
            return WARM  # idle long enough for warm: one move, not two passes via hot
        return HOT if idle >= policy.gpu_idle_s or heat < policy.promote_to_hot else None
    if obj.tier not in (HOT, WARM):
        return None  # cold, or a tier we do not know: not ours to move
    # The idle guards mirror the demotion rules, so a promoted object is not demoted at once.
    if heat >= policy.promote_to_gpu and idle < policy.gpu_idle_s:
        return GPU_DIRECT
    if obj.tier == WARM:
        return HOT if heat >= policy.promote_to_hot and idle < policy.demote_after_idle_s else None
    return WARM if idle >= policy.demote_after_idle_s else None


def coldest_first(objs: Iterable[ObjectFacts], now: float, half_life_s: float) -> list[ObjectFacts]:
    """Eviction order under watermark pressure: lowest heat, then longest idle, then key (stable)."""
    return sorted(objs, key=lambda o: (current_heat(o, now, half_life_s), o.last_touched, o.key))


@dataclass(frozen=True)
class Watermarks:
    high: float = 0.90  # above this share of capacity, start evicting
    low: float = 0.75  # ... until back down to this share

    def __post_init__(self) -> None:
        if not 0.0 <= self.low <= self.high <= 1.0:
            raise ValueError("need 0 <= low <= high <= 1")


def over_high_watermark(used: int, capacity: int, wm: Watermarks) -> bool:
    return capacity > 0 and used > wm.high * capacity


def bytes_to_free(used: int, capacity: int, wm: Watermarks) -> int:
    """How much to move off a tier to bring it down to the low watermark (0 if already there)."""
    target = int(wm.low * max(capacity, 0))  # floor: freeing a byte too many beats one too few
    return max(0, used - target)


def heat_histogram(heats: Iterable[float], bounds: Iterable[float] = DEFAULT_BOUNDS) -> dict[str, int]:
    """Cumulative counts by upper bound, Prometheus style: {"0.1": n, ..., "50": n, "+Inf": total}.

    Keys are `le` labels, so the result feeds a histogram metric as it is.
    """
    edges = tuple(float(b) for b in bounds)
    if any(a >= b for a, b in zip(edges, edges[1:], strict=False)):
        raise ValueError("bounds must increase strictly")
    per_bucket = [0] * (len(edges) + 1)
    for h in heats:  # one pass: the daemon may feed it every object of a tier
        per_bucket[bisect.bisect_left(edges, h)] += 1
    labels = [f"{edge:g}" for edge in edges] + ["+Inf"]
    return dict(zip(labels, itertools.accumulate(per_bucket), strict=True))
