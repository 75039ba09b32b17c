"""What code in a compiled module may not do, checked on the source (setup.py's docstring says why).

The build refuses most of what mypyc cannot compile, but one rule fails only at run time, and
only on the compiled build: a coroutine that suspends inside an `except` or `finally` block
resumes with another frame's exception state, which its re-raise (or the next exception's
context) then takes. Checked here, so plain-Python runs catch it too.
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


def suspends_while_handling(source: str) -> list[str]:
    """Where an async function may suspend while an exception is being handled."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.AsyncWith):
                found.append(f"line {node.lineno}: async with (its exit awaits, then re-raises)")
            elif isinstance(node, ast.ExceptHandler):
                if any(isinstance(n, SUSPENDS) for stmt in node.body for n in ast.walk(stmt)):
                    found.append(f"line {node.lineno}: await in an except block")
            elif isinstance(node, ast.Try | ast.TryStar) and node.finalbody:
                if any(isinstance(n, SUSPENDS) for stmt in node.finalbody for n in ast.walk(stmt)):
                    found.append(f"line {node.finalbody[0].lineno}: await in a finally block")
    return found


@pytest.mark.parametrize("path", compiled_sources())
def test_no_suspension_while_handling_an_exception(path: str) -> None:
    assert suspends_while_handling((ROOT / path).read_text()) == []


@pytest.mark.parametrize(
    "source",
    [
        "async def f():\n    try:\n        await g()\n    except Exception:\n        await h()\n        raise\n",
        "async def f():\n    try:\n        await g()\n    except Exception as e:\n        await h()\n        raise e\n",
        "async def f():\n    try:\n        await g()\n    finally:\n        await h()\n",
        "async def f():\n    async with lock:\n        await g()\n",
    ],
    ids=["bare-raise", "named-raise", "await-in-finally", "async-with"],
)
def test_the_check_finds_each_form(source: str) -> None:
    assert len(suspends_while_handling(source)) == 1


@pytest.mark.parametrize(
    "source",
    [
        "async def f():\n    try:\n        await g()\n    except Exception as e:\n        failure = e\n"
        "    else:\n        return\n    await h()\n    raise failure\n",
        "async def f():\n    try:\n        await g()\n    except Exception:\n        raise\n",
        "def f():\n    try:\n        g()\n    finally:\n        h()\n",
    ],
    ids=["cleanup-after-the-handler", "no-await-in-the-handler", "not-async"],
)
def test_the_check_leaves_what_is_safe(source: str) -> None:
    assert suspends_while_handling(source) == []
