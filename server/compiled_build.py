"""Which of tierstore's modules run compiled (setup.py's optional mypyc build), and which are stale.

The compiled build leaves each compiled module's extension beside its source, and Python imports
the extension first: a source edited (or checked out) after the build would silently not run.
`tierstore serve` and the test suite refuse to start on such a tree and say how to rebuild.
"""

from __future__ import annotations

from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("server", "tiering", "erasure", "lifecycle")
REBUILD = (
    "rebuild (TIERSTORE_COMPILE=1 pip install -e .) or go back to plain Python "
    "(find server tiering erasure lifecycle -name '*.so' -delete; rm -f ./*__mypyc.*.so)"
)


def _extensions(root: Path | None) -> list[tuple[str, Path, Path]]:
    """(module name, extension, source) of every compiled module under the packages."""
    root = root or ROOT
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.so")):
            suffix = next((s for s in EXTENSION_SUFFIXES if path.name.endswith(s)), None)
            if suffix is None:
                continue
            source = path.with_name(path.name[: -len(suffix)] + ".py")
            found.append((".".join(source.relative_to(root).with_suffix("").parts), path, source))
    return found


def compiled_modules(root: Path | None = None) -> list[str]:
    """Dotted names of the modules this tree runs compiled ([] for plain Python)."""
    return [name for name, _, _ in _extensions(root)]


def stale_modules(root: Path | None = None) -> list[str]:
    """Compiled modules whose source changed after they were built."""
    return [
        name
        for name, extension, source in _extensions(root)
        if source.exists() and source.stat().st_mtime > extension.stat().st_mtime
    ]


def describe(root: Path | None = None) -> str:
    """The build in a few words, for logs and reports."""
    count = len(compiled_modules(root))
    return f"{count} module{'' if count == 1 else 's'} compiled (setup.py)" if count else "plain Python"


def stale_message(root: Path | None = None) -> str | None:
    """Why this tree must not run (compiled modules older than their source), or None."""
    stale = stale_modules(root)
    return f"compiled modules older than their source: {', '.join(stale)}; {REBUILD}" if stale else None
