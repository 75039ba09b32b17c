"""The compiled build's bookkeeping (server/compiled_build.py): which modules an extension
replaces, and a source edited after its build caught before anything runs the old code."""

from __future__ import annotations

import os
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from server import cli, compiled_build


def _tree(root: Path) -> tuple[Path, Path]:
    source = root / "erasure" / "writer.py"
    source.parent.mkdir(parents=True)
    source.write_text("# the source\n")
    extension = source.with_name("writer" + EXTENSION_SUFFIXES[0])
    extension.write_bytes(b"\x7fELF")
    (root / "server").mkdir()
    (root / "server" / "app.py").write_text("# plain Python: no extension beside it\n")
    (root / ("1a2b__mypyc" + EXTENSION_SUFFIXES[0])).write_bytes(b"")  # the shared runtime, not a module
    return source, extension


def test_plain_tree_has_no_compiled_modules(tmp_path: Path) -> None:
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "app.py").write_text("")
    assert compiled_build.compiled_modules(tmp_path) == []
    assert compiled_build.stale_modules(tmp_path) == [] and compiled_build.stale_message(tmp_path) is None
    assert compiled_build.describe(tmp_path) == "plain Python"


def test_extension_names_the_module_it_replaces(tmp_path: Path) -> None:
    source, extension = _tree(tmp_path)
    os.utime(source, (1_000, 1_000))
    os.utime(extension, (2_000, 2_000))  # built after the source was last written
    assert compiled_build.compiled_modules(tmp_path) == ["erasure.writer"]
    assert compiled_build.stale_modules(tmp_path) == []
    assert compiled_build.describe(tmp_path) == "1 module compiled (setup.py)"


def test_source_edited_after_the_build_is_stale(tmp_path: Path) -> None:
    source, extension = _tree(tmp_path)
    os.utime(extension, (2_000, 2_000))
    os.utime(source, (3_000, 3_000))  # edited or checked out since
    assert compiled_build.stale_modules(tmp_path) == ["erasure.writer"]


def test_serve_refuses_a_stale_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source, extension = _tree(tmp_path)
    os.utime(extension, (2_000, 2_000))
    os.utime(source, (3_000, 3_000))
    monkeypatch.setattr(compiled_build, "ROOT", tmp_path)
    assert cli.main(["serve", "--data", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert "erasure.writer" in err and "TIERSTORE_COMPILE=1 pip install -e ." in err
    assert not (tmp_path / "data").exists()  # refused before anything started
    # A storage node runs the same (compiled) drive code: refused too.
    node = ["node", "--data-catalog", str(tmp_path / "c"), "--listen", "127.0.0.1:1", "--name", "n1"]
    assert cli.main([*node, "--data", str(tmp_path / "node-data")]) == 2
    assert "compiled modules older than their source: erasure.writer" in capsys.readouterr().err
