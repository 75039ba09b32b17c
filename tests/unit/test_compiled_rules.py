"""What code in a compiled module may not do, checked on the source (setup.py's docstring says why).

The build refuses most of what mypyc cannot compile, but one rule fails only at run time, and
only on the compiled build: an exception re-raised implicitly after the coroutine suspended is
not the one that was caught. Checked here, so plain-Python runs catch it too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def compiled_sources() -> list[str]:
    """setup.py's COMPILED_MODULES, read without running setup.py."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMPILED_MODULES" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no COMPILED_MODULES")


# What suspends a coroutine.
SUSPENDS = (ast.Await, ast.AsyncFor, ast.AsyncWith)


def reraises_after_a_suspension(source: str) -> list[str]:
    """Where an async function may re-raise a caught exception implicitly after an await."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.AsyncWith):
                found.append(f"line {node.lineno}: async with (its exit awaits, then re-raises)")
            elif isinstance(node, ast.ExceptHandler):
                awaited = [n.lineno for stmt in node.body for n in ast.walk(stmt) if isinstance(n, SUSPENDS)]
                bare = [
                    n.lineno
                    for stmt in node.body
                    for n in ast.walk(stmt)
                    if isinstance(n, ast.Raise) and n.exc is None
                ]
                if awaited and any(line > min(awaited) for line in bare):
                    found.append(f"line {node.lineno}: bare raise after an await in an except block")
            elif isinstance(node, ast.Try | ast.TryStar) and node.finalbody:
                if any(isinstance(n, SUSPENDS) for stmt in node.finalbody for n in ast.walk(stmt)):
                    found.append(f"line {node.finalbody[0].lineno}: await in a finally block")
    return found


@pytest.mark.parametrize("path", compiled_sources())
def test_no_implicit_reraise_after_an_await(path: str) -> None:
    assert reraises_after_a_suspension((ROOT / path).read_text()) == []


@pytest.mark.parametrize(
    "source",
    [
        "async def f():\n    try:\n        await g()\n    except Exception:\n        await h()\n        raise\n",
        "async def f():\n    try:\n        await g()\n    finally:\n        await h()\n",
        "async def f():\n    async with lock:\n        await g()\n",
    ],
    ids=["bare-raise-after-await", "await-in-finally", "async-with"],
)
def test_the_check_finds_each_form(source: str) -> None:
    assert len(reraises_after_a_suspension(source)) == 1


@pytest.mark.parametrize(
    "source",
    [
        "async def f():\n    try:\n        await g()\n    except Exception as e:\n        await h()\n        raise e\n",
        "async def f():\n    try:\n        await g()\n    except Exception:\n        raise\n",
        "def f():\n    try:\n        g()\n    finally:\n        h()\n",
    ],
    ids=["named-raise", "raise-before-any-await", "not-async"],
)
def test_the_check_leaves_what_is_safe(source: str) -> None:
    assert reraises_after_a_suspension(source) == []
