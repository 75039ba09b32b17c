"""setuptools' build backend, asking for mypyc too when the compiled build is wanted.

pyproject.toml names this module as the build backend (`backend-path = ["deploy"]`) so that
`TIERSTORE_COMPILE=1 pip install -e .` needs nothing installed beforehand: pip fetches mypy into
the isolated build environment only then, and plain installs stay as light as before (setup.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  # every hook setuptools provides, unchanged

# The mypy release the lint pins (pyproject.toml, test extra): mypyc comes with it.
_COMPILER = ["mypy==2.4.1"]
# Set while setuptools lists its requirements (read by setup.py).
LISTING_REQUIREMENTS = "TIERSTORE_LISTING_BUILD_REQUIREMENTS"


def _with_compiler(setuptools_requires: Callable[[], list[str]]) -> list[str]:
    if os.environ.get("TIERSTORE_COMPILE") != "1":
        return setuptools_requires()
    # setuptools runs setup.py to list its own requirements, before mypy is there to import:
    # setup.py leaves the extensions out while this is set.
    os.environ[LISTING_REQUIREMENTS] = "1"
    try:
        return setuptools_requires() + _COMPILER
    finally:
        del os.environ[LISTING_REQUIREMENTS]


def get_requires_for_build_wheel(config_settings: Any = None) -> list[str]:
    return _with_compiler(lambda: _setuptools.get_requires_for_build_wheel(config_settings))


def get_requires_for_build_editable(config_settings: Any = None) -> list[str]:
    return _with_compiler(lambda: _setuptools.get_requires_for_build_editable(config_settings))
