# Host (CPython): `tinyattn flash` copies only what differs from the board's files.
"""A flash reads the board's files back first (size + SHA-256 on the board) and copies only
those that differ (host/board/flash.py), on a virtual board:
- a new blob for the same runtime copies the blob alone, and parity passes with it;
- a runtime file damaged on the board is copied again, byte for byte, and a *.new copy an
  interrupted flash left beside a file kept as it is goes;
- a flash of what the board holds copies nothing and still verifies every file;
- the listing says which file was copied and which kept.
"""

from __future__ import annotations

import pytest

from tinyattn import cli
from tinyattn.board import flash as flash_mod
from tinyattn.board.parity import parity
from tinyattn.data.tabular import load_dataset

pytestmark = [pytest.mark.serial, pytest.mark.usefixtures("tmp_cwd")]


def _copied(summary: dict) -> set[str]:
    return {name for name, info in summary["files"].items() if info["copied"]}


def test_flash_copies_only_the_files_that_differ(vboard, reference_model, tmp_path, capsys):
    old = reference_model["blob"]
    new = tmp_path / "f32.bin"
    assert cli.main(["export", "--model", str(reference_model["npz"]), "--out", str(new),
                     "--float32"]) == 0  # fmt: skip
    first = flash_mod.flash(vboard.port, old, progress=False)
    assert _copied(first) == set(first["files"])  # a fresh board: every file
    runtime = sorted(set(first["files"]) - {"model.bin"})
    assert len(runtime) > 10

    again = flash_mod.flash(vboard.port, new, progress=False)
    assert _copied(again) == {"model.bin"}
    assert (vboard.fs_dir / "model.bin").read_bytes() == new.read_bytes()
    iris = load_dataset("iris")
    s = parity(vboard.port, new, iris.X[::5], iris.y[::5], path="float", timeout=2.0,
               bench_n=0, progress=False)["summary"]  # fmt: skip
    assert s["passed"] and s["answered"] == 30, s

    damaged = vboard.fs_dir / runtime[0]
    good = damaged.read_bytes()
    damaged.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    leftover = vboard.fs_dir / f"{runtime[1]}.new"  # an interrupted flash's staged copy
    leftover.write_bytes(b"staged before")
    capsys.readouterr()
    assert cli.main(["flash", "--port", vboard.port, "--blob", str(new)]) == 0
    out, err = capsys.readouterr()
    assert damaged.read_bytes() == good and not leftover.exists()
    n = len(first["files"])
    assert f"copying 1 of {n} files ({len(good)} B) in one session; {n - 1} already" in err, err
    lines = {line.split()[0]: line for line in out.splitlines() if "sha256" in line}
    assert lines[runtime[0]].endswith("copied, verified"), lines
    assert all(lines[name].endswith("kept, verified") for name in lines if name != runtime[0])
    assert f"(1 copied, {n - 1} already there)" in out, out

    same = flash_mod.flash(vboard.port, new, progress=False)
    assert _copied(same) == set() and len(same["files"]) == n
