# Host (CPython): helpers of the emulated-board tests (test_emulated_pico, _cortex_m3).
"""The kernel sets and rows those tests check, the golden files they put on a board, the body of
a board fixture (skips with the reason when the board cannot start here), and the check of a
run's logits against the golden ones (the host integer reference's,
tools/make_trained_golden.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tools.emulated_boards import GOLDEN_RUNNER, EmulatedBoard, parse_golden, skip_reason, write_xq
from tools.make_trained_golden import GOLDEN, NAMES

KERNELS = ("thumb", "viper", "pure")
# (model, kernels) -> every n-th golden record is checked (Iris 150 rows, Wine 178,
# BasicMotions 80 windows, JapaneseVowels 640): CI's stated subsets, thumb the widest (the
# emulated boards are slow in wall time: pure BasicMotions is ~1 s a window on the Pico's clock,
# ~5 s of wall time). TINYATTN_EMULATED_ALL=1 checks every record with every set.
STRIDE = {
    ("iris", "thumb"): 1, ("iris", "viper"): 5, ("iris", "pure"): 25,
    ("wine", "thumb"): 1, ("wine", "viper"): 6, ("wine", "pure"): 30,
    ("basicmotions", "thumb"): 2, ("basicmotions", "viper"): 8, ("basicmotions", "pure"): 40,
    ("japanesevowels", "thumb"): 8, ("japanesevowels", "viper"): 64,
    ("japanesevowels", "pure"): 320,
}  # fmt: skip
if os.environ.get("TINYATTN_EMULATED_ALL"):
    STRIDE = dict.fromkeys(STRIDE, 1)


def golden(name: str) -> dict[str, np.ndarray]:
    """The golden file of model `name`: xq, logits_q (and steps of a seq model)."""
    with np.load(GOLDEN / f"{name}_int8.npz") as z:
        return {k: z[k] for k in z.files}


def golden_files(folder: Path) -> None:
    """name.bin of every golden model, name-kernels.xq with the records STRIDE checks, and the
    runner module, into folder."""
    for name in NAMES:
        g = golden(name)
        steps = g.get("steps", np.zeros(len(g["xq"]), np.int64))
        for kernels in KERNELS:
            every = STRIDE[(name, kernels)]
            write_xq(folder / f"{name}-{kernels}.xq", steps[::every], g["xq"][::every])
        (folder / f"{name}.bin").write_bytes((GOLDEN / f"{name}.bin").read_bytes())
    (folder / "golden_runner.py").write_text(GOLDEN_RUNNER)


def running_board(kind: str) -> Iterator[EmulatedBoard]:
    """Yield a started board of `kind`, stopped afterwards; skip when it cannot start here."""
    why = skip_reason(kind)
    if why:
        pytest.skip(why)
    board = EmulatedBoard(kind).start()
    try:
        yield board
    finally:
        board.stop()


def check_logits(out: str, name: str, kernels: str) -> None:
    """The runner's output `out` ran `kernels` and gave the golden logits on every
    STRIDE-th record."""
    rows, chosen, _ = parse_golden(out)
    assert chosen == kernels, out[-2000:]
    every = STRIDE[(name, kernels)]
    want = golden(name)["logits_q"][::every]
    assert sorted(rows) == list(range(len(want))), out[-2000:]
    for i, logits in enumerate(want):
        assert rows[i] == logits.tolist(), (name, kernels, i * every)
