# Host (CPython): issue 7's models deployed and checked over a serial link, with the real tools.
"""Serial tests of issue 7: train -> export -> flash (mpremote) -> parity (pyserial) on a fresh
virtual board each (the MicroPython unix port on a pseudo-terminal, 100 KiB heap), so the
session board that tests/test_serial_parity.py flashes keeps its blob.

- `iris-myattn` (MyAttn pooling head): all 150 Iris samples, int8 exact, float within 1e-4,
  argmax agreement 150/150.
- Wine through the CLI exactly as a user runs it: `tinyattn train --csv wine.csv --target
  cultivar [--model iris-myattn]`, `tinyattn export`, `tinyattn flash`, `tinyattn parity` —
  export and parity find the CSV from the model's meta; all 178 samples must pass.
  (`--dataset wine` trains the same model, byte for byte: tests/test_myattn_op.py.) The
  `iris-attn` model of 13 tokens is flashed with `--mpy` (flash's default): loaded from .py
  sources, whose compilation takes transient heap, it does not fit the 100 KiB board
  (MemoryError while building its float path). `iris-myattn` is flashed with `--py` to show
  the .py fallback works; on a 100 KiB board the sources compile (server.py and
  server_link.py) but the Wine model then does not load next to their compiled code ("not
  enough heap to load model.bin (runtime as .py)", measured 2026-12-01), so that case runs on
  a 160 KiB board (PY_HEAP, as tests/test_serial_seq.py's).
"""

from __future__ import annotations

import json

import pytest

from tinyattn import cli
from tinyattn.board.flash import flash
from tinyattn.board.parity import FLOAT_TOL, parity
from tinyattn.board.ports import VIRTUAL_HEAP
from tinyattn.data.tabular import load_dataset
from tinyattn.paths import REPO_DIR

PY_HEAP = "160k"  # a board that compiles the .py sources (docstring)

# in an empty working directory: flash (.mpy) compiles into build/mpy/ there, not the checkout
pytestmark = [pytest.mark.serial, pytest.mark.usefixtures("tmp_cwd")]


def _cli_json(capsys, *args: str) -> dict:
    assert cli.main(list(args)) == 0, args
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_serial_iris_myattn_parity_all_150_samples(vboard, tmp_path, capsys):
    npz, blob = tmp_path / "model.npz", tmp_path / "model.bin"
    _cli_json(capsys, "train", "--model", "iris-myattn", "--out", str(npz), "--quiet", "--json")
    exported = _cli_json(capsys, "export", "--model", str(npz), "--out", str(blob), "--json")
    assert [op["what"] for op in exported["layers"] if op["op"] == 3][0] == "myattn query mean"
    flash(vboard.port, blob, progress=False)
    data = load_dataset("iris")
    report = parity(vboard.port, blob, data.X, data.y, bench_n=0, progress=False)
    s = report["summary"]
    assert s["complete"] and s["answered"] == 150
    assert s["int8_exact"] == 150, [r for r in report["rows"] if not r.get("int8_exact")][:3]
    assert s["xq_match"] == 150 and s["argmax_agreement"] == 150
    assert s["float_max_abs_diff"] <= FLOAT_TOL
    assert s["passed"]


@pytest.mark.parametrize(
    ("model", "flash_args"),
    [
        ("iris-attn", ["--mpy"]),  # 13 tokens of 8: from .py sources it outgrows 100 KiB
        ("iris-myattn", ["--py"]),  # the .py fallback: compiled on a 160 KiB board (docstring)
    ],
)
def test_serial_wine_csv_train_export_flash_parity_all_178_samples(
    vboard_factory, tmp_path, capsys, model, flash_args
):
    vboard = vboard_factory(heap=PY_HEAP if "--py" in flash_args else VIRTUAL_HEAP)
    npz, blob = tmp_path / "wine.npz", tmp_path / "wine.bin"
    csv = REPO_DIR / "host" / "data" / "wine.csv"
    trained = _cli_json(capsys, "train", "--csv", str(csv), "--target", "cultivar",
                        "--model", model, "--out", str(npz), "--quiet", "--json")  # fmt: skip
    assert trained["dataset"] == "wine" and trained["n_test"] == 36
    assert trained["test_accuracy"] >= 0.94  # the fixed stratified split (seed 0, 20 %)
    exported = _cli_json(capsys, "export", "--model", str(npz), "--out", str(blob), "--json")
    assert exported["n_samples"] == 178 and exported["int8_test_accuracy"] >= 0.94
    args = ["flash", "--port", vboard.port, "--blob", str(blob), "--quiet", *flash_args]
    assert cli.main(args) == 0
    capsys.readouterr()
    assert (tmp_path / "build" / "mpy").is_dir() == ("--mpy" in flash_args)  # not the checkout
    ext = "mpy" if "--mpy" in flash_args else "py"
    on_board = {p.name for p in vboard.fs_dir.iterdir()}
    assert {f"attention.{ext}", f"server.{ext}"} <= on_board, on_board
    twin = "attention.py" if ext == "mpy" else "attention.mpy"  # would shadow or be shadowed
    assert twin not in on_board, on_board
    s = _cli_json(capsys, "parity", "--port", vboard.port, "--model", str(npz), "--blob",
                  str(blob), "--report", str(tmp_path / "parity.json"), "--bench", "0",
                  "--quiet", "--json")  # fmt: skip
    assert s["samples"] == s["answered"] == 178
    assert s["int8_exact"] == 178 and s["xq_match"] == 178 and s["argmax_agreement"] == 178
    assert s["float_max_abs_diff"] <= FLOAT_TOL
    assert s["passed"]
