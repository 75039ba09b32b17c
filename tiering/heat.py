"""Access temperature arithmetic: an exponentially decayed count of accesses.

heat(now) = heat(then) × 2^-(now - then)/half_life, plus 1 per access. The catalog stores the heat
and the time it was last brought up to date; readers decay it to "now" when they look.
"""

from __future__ import annotations

DEFAULT_HALF_LIFE = 86400.0  # heat halves per day without access


def decayed(heat: float, since: float, now: float, half_life: float = DEFAULT_HALF_LIFE) -> float:
    if heat <= 0.0 or now <= since:
        return max(heat, 0.0)
    return heat * 0.5 ** ((now - since) / half_life)


def bump(
    heat: float, since: float, now: float, half_life: float = DEFAULT_HALF_LIFE, weight: float = 1.0
) -> float:
    return decayed(heat, since, now, half_life) + weight
