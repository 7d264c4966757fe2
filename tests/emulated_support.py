# Host (CPython): helpers of the emulated-board tests (test_emulated_pico, _cortex_m3).
"""The kernel sets and rows those tests check, the golden files they put on a board, the body of
a board fixture (skips with the reason when the board cannot start here), and the check of a
run's logits against the golden ones (the host integer reference's,
tools/dev/make_trained_golden.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tinyattn.tools.emulated_boards import (
    GOLDEN,
    GOLDEN_RUNNER,
    NAMES,
    EmulatedBoard,
    parse_golden,
    skip_reason,
    write_xq,
)  # fmt: skip

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
# seconds a board's run of one model (Pico) or of every model (Cortex-M3) may take: every
# record is hours of wall time for pure JapaneseVowels (640 windows, ~7 s each on the Pico)
TIMEOUT = {"pico": 900, "cortex-m3": 1200}
if os.environ.get("TINYATTN_EMULATED_ALL"):
    STRIDE = dict.fromkeys(STRIDE, 1)
    TIMEOUT = dict.fromkeys(TIMEOUT, 4 * 3600)


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


def rocket_case(folder: Path) -> np.ndarray:
    """A rocket model (tests/rocket_models.py's pooled case: two channels, three pooled steps
    a step, levels over six decades, so the block exponent varies) as rocket.bin, 12 windows
    of random lengths as rocket-KERNELS.xq (int32 records); returns the host integer
    reference's logits [12, K]."""
    from rocket_models import rocket_cases

    from tinyattn.intmodel.blob import read_blob
    from tinyattn.intmodel.intref import quantize_input, run_int8

    raw, X, n = rocket_cases()["pooled"]
    X, n = X[:12], n[:12]
    blob = read_blob(raw)
    xq = quantize_input(blob, X, n)
    (folder / "rocket.bin").write_bytes(raw)
    for kernels in KERNELS:
        write_xq(folder / f"rocket-{kernels}.xq", n, xq, wide=True)
    return run_int8(blob, xq, n)


def conv_case(folder: Path) -> np.ndarray:
    """A conv-stem model (random weights; tests/test_device_seq.py's "conv" shape: depthwise k5
    stride 3, dilations 1 and 3, pointwise convs, then attention) as conv.bin, 24 windows of
    random lengths as conv-KERNELS.xq in folder; returns the host integer reference's logits
    [24, K] (every record is checked with every kernel set: thumb runs the convs with viper's
    kernel between its fused assembler steps)."""
    from seq_models import random_seq_case

    from tinyattn.intmodel.blob import blob_bytes, read_blob
    from tinyattn.intmodel.intref import quantize_input, run_int8
    from tinyattn.intmodel.quantize import quantize
    from tinyattn.learn.seqmodel import SeqAttnConfig

    conv = SeqAttnConfig(patch=2, embed_dim=8, num_heads=2, blocks=1, ff_dim=12, stem="conv",
                         stem_width=6, stem_kernel=5, stem_dilations=(1, 3), stem_stride=3)
    npz, Xc, lc, Xt, nt = random_seq_case(9, 23, 2, 3, conv, 24)
    raw = blob_bytes(quantize(npz, Xc, lc))
    blob = read_blob(raw)
    xq = quantize_input(blob, Xt, nt)
    (folder / "conv.bin").write_bytes(raw)
    for kernels in KERNELS:
        write_xq(folder / f"conv-{kernels}.xq", nt, xq)
    return run_int8(blob, xq, nt)

