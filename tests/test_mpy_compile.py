# Host (CPython) + mpy-cross: flash's compile step reuses what it compiled before in the process.
"""`tinyattn.board.flash.compile_mpy` runs mpy-cross once per source, arch and content in a
process: a second flash (another board of a fleet, a resumed on-board run) writes the bytes
compiled before; a changed source, another arch or another mpy-cross compiles again."""

from __future__ import annotations

import subprocess

import pytest

from tinyattn.board import flash as flash_mod
from tinyattn.tools.vboard import find_mpy_cross

pytestmark = pytest.mark.skipif(find_mpy_cross() is None, reason="mpy-cross not installed")


def _counting_run(monkeypatch) -> list[list[str]]:
    calls: list[list[str]] = []
    run = subprocess.run

    def counted(cmd, *args, **kwargs):
        calls.append(list(cmd))
        return run(cmd, *args, **kwargs)

    monkeypatch.setattr(flash_mod.subprocess, "run", counted)
    return calls


def test_mpy_compile_once_per_source_arch_and_content(tmp_path, monkeypatch):
    monkeypatch.setattr(flash_mod, "_COMPILED", {})
    calls = _counting_run(monkeypatch)
    src = tmp_path / "src" / "cachedmod.py"
    src.parent.mkdir()
    src.write_text("def f(x):\n    return x + 1\n")
    first = flash_mod.compile_mpy([src], "x64", tmp_path / "a")[0].read_bytes()
    assert len(calls) == 1
    again = flash_mod.compile_mpy([src], "x64", tmp_path / "b")
    assert len(calls) == 1 and again[0].read_bytes() == first  # no mpy-cross run
    assert again[0] == tmp_path / "b" / "cachedmod.mpy"
    assert not list((tmp_path / "b").glob("*.tmp"))
    flash_mod.compile_mpy([src], None, tmp_path / "c")  # bytecode only: another output
    assert len(calls) == 2 and "-march=x64" not in calls[-1]
    src.write_text("def f(x):\n    return x + 2\n")
    changed = flash_mod.compile_mpy([src], "x64", tmp_path / "a")[0].read_bytes()
    assert len(calls) == 3 and changed != first


def test_mpy_compile_failure_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(flash_mod, "_COMPILED", {})
    src = tmp_path / "broken.py"
    src.write_text("def f(:\n")
    for _ in range(2):  # the second attempt runs mpy-cross again and fails the same way
        with pytest.raises(flash_mod.CLIError, match="mpy-cross failed on broken.py"):
            flash_mod.compile_mpy([src], "x64", tmp_path / "out")
    assert flash_mod._COMPILED == {} and not list((tmp_path / "out").iterdir())
