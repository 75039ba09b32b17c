"""A terminal progress bar for the admin CLI's long waits (heal, restore, drain, rebalance)."""

from __future__ import annotations

import sys


def progress_bar(label: str, done: int, total: int, *, final: bool = False) -> None:
    """One self-overwriting line on a terminal: [#######.....]  58%  label  (n/total)."""
    if not sys.stderr.isatty():
        return
    width = 30
    fraction = min(1.0, done / total) if total else 1.0
    filled = int(width * fraction)
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {fraction:4.0%}  {label}  ({done}/{total})")
    if final:
        sys.stderr.write("\n")
    sys.stderr.flush()
