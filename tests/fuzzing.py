"""Hypothesis settings shared by the property tests (tests/unit/test_properties_*.py).

By default a bounded, repeatable run that CI can afford: a fixed number of examples per test,
derandomized (the same examples every run), no example database, no deadline (the machines are
shared and slow). `TIERSTORE_FUZZ=soak` (which `pytest --soak` sets) turns each into a long random
search: `TIERSTORE_FUZZ_FACTOR` (default 50) times the examples, fresh ones every run.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SOAK = os.environ.get("TIERSTORE_FUZZ", "") == "soak"
SOAK_FACTOR = int(os.environ.get("TIERSTORE_FUZZ_FACTOR", "50"))


def fuzz(examples: int) -> settings:
    """Settings for a property test worth `examples` examples in the bounded run."""
    return settings(
        max_examples=examples * SOAK_FACTOR if SOAK else examples,
        derandomize=not SOAK,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        print_blob=True,
    )
