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



# The rocket kernel of a compiled set against the pure one (attention_kernels_rocket.rocket)
# on the board: rocket_kernel_cases() writes the cases as rocket_kernel.cases (int32 words,
# little-endian: per case the lengths of p, tab, ft, xp, x and A, then p, tab, ft, xp, x) and
# ROCKET_KERNEL_RUNNER as rocket_kernel_runner.py; go(module) prints "R k same e y..." per
# case, `same` when the module's rocket_in (e and xp, from the window x) and rocket (y, on the
# case's xp) equal the pure kernels' (a module whose grid holds GRID·xp, the thumb one's 3·xp:
# its rocket_in's grid equals GRID times the pure one's, and its rocket runs on GRID·xp).
ROCKET_KERNEL_RUNNER = """
import array
import attention_kernels_rocket as P


def _words(f, n):
    a = array.array("i", [0] * n)
    f.readinto(a)
    return a


def go(module):
    M = __import__(module)
    k = 0
    with open("rocket_kernel.cases", "rb") as f:
        while True:
            h = _words(f, 6)
            if h[0] == 0:
                break
            p, tab, ft, xp, x = (_words(f, h[i]) for i in range(5))
            gm = getattr(M, "GRID", 1)  # the module's pooled grid holds gm·xp (thumb: 3·xp)
            out = []
            for mod, g in ((P, 1), (M, gm)):
                q = array.array("i", p)
                X = array.array("i", [g * v for v in xp])  # rocket_in's output over it
                mod.rocket_in(x, X, None, None, None, q)
                y = array.array("i", [0] * p[6])
                mod.rocket(array.array("i", [g * v for v in xp]), y, tab, ft,
                           array.array("i", [0] * h[5]), q)
                out.append((q[8], [v * (gm // g) for v in X], list(y)))
            print("R", k, out[0] == out[1], out[1][0], out[1][2][:8])
            k += 1
"""


def rocket_kernel_cases(folder: Path, count: int = 60, seed: int = 42) -> int:
    """`count` random calls of the rocket kernel (docs/quantization.md "rocket") as
    rocket_kernel.cases in folder, with the runner; returns the count. Each case: 1-4
    channels, pooled (P 1-4, so |xp| < P 2**15), a positions cap N (0 or below n'), groups
    of pad 0 and 1 at several dilations in any order (a dilation again after another: its
    shared sums again), combinations of 1..C channels, 1-6 features, windows as short as one
    step (n' < 9d: no position counted for pad 0), bias exponents and mantissas that
    saturate at +-(2**30 - 1) or shift right, half the thresholds among the convolutions,
    and every value of xp (margins too) random, a tenth of them at the bounds
    +-(P 2**15 - 1); every fifth case on values -1..1 with thresholds there (ties); and a
    window x for rocket_in of levels up to 2**(1..29) (block exponents 0..14), a twentieth
    at the negative bound."""
    rng = np.random.default_rng(seed)
    cases = []
    for k in range(count):
        C = int(rng.integers(1, 5))
        P = int(rng.integers(1, 5))
        S = int(rng.integers(1, 40))
        n = int(rng.integers(1, S + 1)) if k % 4 else S
        N = 0 if k % 3 == 0 else int(rng.integers(1, n + 1))
        dils = sorted({int(d) for d in rng.integers(1, 12, size=int(rng.integers(1, 4)))})
        G = int(rng.integers(1, 7))
        e = int(rng.integers(0, 4))
        small = k % 5 == 0  # xp in -1..1 and thresholds there: conv = thr ties (not counted)
        top = 1 if small else P * 2**15 - 1
        shift = int(rng.integers(12, 24))
        mq = 1 << (shift - 8)  # |(q - z) M| >> shift below ~128: features rarely saturate
        tab, ft, nmax = [], [], 0
        for _ in range(G):
            d = int(rng.choice(dils))
            taps = sorted(rng.choice(9, 3, replace=False).tolist())
            nch = int(rng.integers(1, C + 1))
            nf = int(rng.integers(1, 7))
            eb = int(rng.integers(0, 31)) if k % 2 else e + int(rng.integers(-1, 3))
            eb = max(eb, 0)
            tab += [d, int(rng.integers(0, 2)), *taps, nch, nf, eb]
            tab += sorted(rng.choice(C, nch, replace=False).tolist())
            nmax = max(nmax, nf)
            for _ in range(nf):
                if rng.random() < 0.5:  # anywhere: saturated or shifted past every conv
                    b = int(rng.integers(-(2**30) + 1, 2**30)) >> int(rng.integers(0, 31))
                else:  # a threshold among the convolutions (or the small values' ties)
                    thr = int(rng.integers(-1, 2) if small else rng.normal(0, top * nch))
                    b = thr >> (eb - e) if eb >= e else thr << (e - eb)
                ft += [b, int(rng.integers(0, 32769)), int(rng.integers(-mq, mq + 1))]
        xp = rng.integers(-top, top + 1, size=(S + 8 * max(dils)) * C)
        edge = rng.random(xp.shape) < 0.1
        xp[edge] = rng.choice([-top, top], int(edge.sum()))
        p = [n, S, C, P, 4 * max(dils), G, len(ft) // 3, shift, e, -(2**29), 2**29 - 1, 0, N]
        big = 2 ** int(rng.integers(1, 30))  # the window: levels up to 2**29 (e 0..14)
        x = rng.integers(-big + 1, big, size=S * P * C)
        x[rng.random(x.shape) < 0.05] = -big + 1
        parts = (p, tab, ft, xp, x)
        cases.append(np.concatenate([[len(a) for a in parts] + [S * C + nmax], *parts]))
    cases.append(np.zeros(6))  # the end
    (folder / "rocket_kernel.cases").write_bytes(np.concatenate(cases).astype("<i4").tobytes())
    (folder / "rocket_kernel_runner.py").write_text(ROCKET_KERNEL_RUNNER)
    return count
