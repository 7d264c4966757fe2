# Host (CPython) and MicroPython: the trained models' int8 outputs, pinned across refactors.
"""tests/golden/trained/ (tools/dev/make_trained_golden.py) holds the blobs `tinyattn train` +
`export` gave for Iris, Wine, BasicMotions and JapaneseVowels, and their int8 path's `xq` and
integer logits on every row or window of the dataset (TRAIN and TEST; JapaneseVowels' 29-step
TEST window runs its last T = 26 steps). Integer arithmetic: the same on every machine, so
these are compared exactly — by the host reference, by the device runtime under CPython (pure
kernels), and under the MicroPython unix port with every kernel set (pure, native, viper) as
deployed (.mpy; the pure set on every 4th sample: its code is the one CPython runs on all).
A refactor of the readers, the kernels or their wiring that changes one logit fails here.
"""

from __future__ import annotations

import numpy as np
import pytest
from device_support import run_micropython

from tinyattn.tools.dev.make_trained_golden import GOLDEN, NAMES, outputs, samples

KERNELS = ("pure", "native", "viper")

# argv: modules dir, blob, kernels, rows file (per line: steps (0: a row), then the xq values).
# Prints each row's integer logits.
RUN = """
import sys
sys.path.insert(0, sys.argv[1])
from attention import Model
m = Model(sys.argv[2], kernels=sys.argv[3])
out = m.new_logits()
xq = m.quantize([0.0] * m.n_features)
for line in open(sys.argv[4]):
    v = line.split()
    n = int(v[0])
    for i in range(len(v) - 1):
        xq[i] = int(v[i + 1])
    m.run_int8(xq, out, n if n else None)
    print(" ".join([str(o) for o in out]))
"""


def _saved(name: str) -> dict[str, np.ndarray]:
    with np.load(GOLDEN / f"{name}_int8.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.mark.host
@pytest.mark.parametrize("name", NAMES)
def test_trained_golden_host_reference_unchanged(name):
    saved = _saved(name)
    now = outputs((GOLDEN / f"{name}.bin").read_bytes(), name)
    assert set(now) == set(saved)
    for key in saved:
        np.testing.assert_array_equal(now[key], saved[key], err_msg=f"{name} {key}")


@pytest.mark.host
@pytest.mark.parametrize(
    "name",  # JapaneseVowels' 370 windows of pure kernels under CPython: ~9 s, make test-slow
    [pytest.param(n, marks=pytest.mark.slow) if n == "japanesevowels" else n for n in NAMES],
)
def test_trained_golden_device_under_cpython_unchanged(attention, name):
    saved = _saved(name)
    m = attention.Model(str(GOLDEN / f"{name}.bin"), kernels="pure")
    X, lengths = samples(name)
    out = m.new_logits()
    for i in range(len(X)):
        x = X[i] if lengths is None else X[i, : lengths[i]]
        xq = m.quantize(x.reshape(-1).tolist())
        n = None if lengths is None else m.window_steps(x.reshape(-1).tolist())
        m.run_int8(xq, out, n)
        assert list(out) == saved["logits_q"][i].tolist(), (name, i)
        assert list(xq) == saved["xq"][i].tolist(), (name, i)


@pytest.mark.micropython
@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("name", NAMES)
def test_trained_golden_micropython_every_kernel_set_unchanged(mpy, tmp_path, name, kernels):
    """Every sample with the compiled kernel sets (native, viper); every 4th with the pure
    kernels, the Python code the device test under CPython runs on every sample."""
    saved = _saved(name)
    every = slice(None, None, 4 if kernels == "pure" else 1)
    xq, want = saved["xq"][every], saved["logits_q"][every]
    steps = saved.get("steps", np.zeros(len(saved["xq"]), np.int64))[every]
    rows = tmp_path / "xq.txt"
    rows.write_text("".join(f"{int(n)} {' '.join(map(str, x.tolist()))}\n"
                            for n, x in zip(steps, xq, strict=True)))  # fmt: skip
    got = run_micropython(RUN, [mpy, str(GOLDEN / f"{name}.bin"), kernels, str(rows)],
                          heap="1m", timeout=600)  # fmt: skip
    logits = np.array([[int(v) for v in line.split()] for line in got])
    np.testing.assert_array_equal(logits, want, err_msg=f"{name} {kernels}")
