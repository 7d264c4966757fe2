# Host (CPython): the myattn op of the device runtime under the real MicroPython unix port.
"""MyAttn (opcode 6) on MicroPython, every kernel set (pure, native, viper), against
tinyattn.intmodel.intref (int8: every integer) and tinyattn.intmodel.floatref (float: within 1e-4):

- the PyTorch tutorial's sizes (32, 32, 32, 64, 32): a graph `Q ‖ K ‖ V` (2112 features) ->
  myattn explicit -> dense 32 -> 4, random weights, calibrated on random inputs. Its input
  alone is 2112 floats per row: this test runs under a 1 MiB heap (`TUTORIAL_HEAP`), not the
  board's 64 KiB. The loaded model takes ~90 KB (the normalization is 17 KB, and the float
  path keeps dequantized float32 weights and two 2112-wide activation buffers per path); the
  rest goes to the script's text rows: a 42 KB line split into 2112 strings and 2112 boxed
  floats per sample, which fragments a 512 KiB heap within a few rows;
- `iris-myattn` (`tinyattn train --model iris-myattn`, then `tinyattn export`, int8 and
  --float32) on all 150 Iris samples, as .mpy under the board-sized 64 KiB heap;
- `run_int8` allocates nothing (micropython.heap_lock around 100 calls), for both models;
- the loaded `iris-myattn` model fits the heap budget of the reference model.
"""

from __future__ import annotations

import numpy as np
import pytest
from device_support import (
    HEAP,
    HEAP_BUDGET,
    HEAP_LOCK,
    HEAP_MARGIN,
    MPY_HEAP,
    _cli,
    assert_parity,
    host_reference,
    iris_X,
    literals,
    needs_micropython,
    run_micropython,
    write_rows,
)
from synth_models import TUTORIAL, random_model, tutorial_myattn_ops

from tinyattn.intmodel.blob import blob_bytes
from tinyattn.intmodel.quantize import quantize

pytestmark = [pytest.mark.micropython, needs_micropython]

KERNELS = ("pure", "native", "viper")
TUTORIAL_HEAP = "1m"  # see the module docstring
TUTORIAL_F = TUTORIAL[0] + TUTORIAL[1] + TUTORIAL[2] * TUTORIAL[3]  # 2112

# argv: modules dir, blob, kernels, rows file. Prints the chosen kernel set, then per row
# [xq, int8 logits, run_int8's argmax, float logits, float argmax] (int8 entries None for a
# float32 blob). Each row is dropped before the next is read (a tutorial row is 2112 floats).
PARITY = """
import sys, gc
sys.path.insert(0, sys.argv[1])
from attention import Model
m = Model(sys.argv[2], kernels=sys.argv[3])
out = m.new_logits()
print(repr(m.kernels))
xq = m.quantize([0.0] * m.n_features) if m.quantized else None
for line in open(sys.argv[4]):
    x = [float(v) for v in line.split()]
    line = None
    if m.quantized:
        m.quantize(x, xq)
        p = m.run_int8(xq, out)
        print([list(xq), list(out), p, m.logits(x, "float"), m.predict(x, "float")])
    else:
        print([None, None, None, m.logits(x, "float"), m.predict(x)])
    x = None
    gc.collect()
"""


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory):
    """(blob path, rows path, X [8, 2112]) of the tutorial-size graph."""
    out = tmp_path_factory.mktemp("tutorial")
    model = random_model(tutorial_myattn_ops(), seed=5, n_features=TUTORIAL_F)
    rng = np.random.default_rng(5)
    X = model.norm_mean + model.norm_std * rng.normal(size=(256 + 8, TUTORIAL_F))
    blob = out / "tutorial.bin"
    blob.write_bytes(blob_bytes(quantize(model, X[:256])))
    return blob, write_rows(out / "rows.txt", X[256:]), X[256:]


@pytest.fixture(scope="module")
def iris_myattn(tmp_path_factory):
    """(int8 blob, float32 blob, rows path) of `iris-myattn` trained and exported by the CLI."""
    out = tmp_path_factory.mktemp("iris_myattn")
    npz, q8, f32 = out / "model.npz", out / "model.bin", out / "model_f32.bin"
    _cli("train", "--model", "iris-myattn", "--out", str(npz), "--quiet")
    _cli("export", "--model", str(npz), "--out", str(q8))
    _cli("export", "--model", str(npz), "--out", str(f32), "--float32")
    return q8, f32, write_rows(out / "iris.txt", iris_X())


@pytest.mark.parametrize("kernels", KERNELS)
def test_device_mp_myattn_tutorial_sizes_match_host_references(mpy, tutorial, kernels):
    blob, rows, X = tutorial
    head, *results = literals(
        run_micropython(PARITY, [mpy, str(blob), kernels, str(rows)], TUTORIAL_HEAP)
    )
    assert head == kernels
    assert_parity(results, blob.read_bytes(), X)


@pytest.mark.parametrize("kernels", KERNELS)
def test_device_mp_iris_myattn_all_samples_match_host_references(mpy, iris_myattn, kernels):
    q8, _, rows = iris_myattn
    head, *results = literals(run_micropython(PARITY, [mpy, str(q8), kernels, str(rows)]))
    assert head == kernels
    assert_parity(results, q8.read_bytes(), iris_X())


def test_device_mp_iris_myattn_float32_blob_matches_floatref(mpy, iris_myattn):
    _, f32, rows = iris_myattn
    head, *results = literals(run_micropython(PARITY, [mpy, str(f32), "auto", str(rows)]))
    assert head is None  # no int8 path in a float32 blob
    assert_parity(results, f32.read_bytes(), iris_X())


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("model", ["tutorial", "iris-myattn"])
def test_device_mp_myattn_run_int8_allocates_nothing_under_heap_lock(
    mpy, tutorial, iris_myattn, model, kernels
):
    if model == "tutorial":
        blob, rows, X = tutorial
        heap = TUTORIAL_HEAP
    else:
        blob, _, rows = iris_myattn
        X, heap = iris_X(), MPY_HEAP
    delta, control, out = literals(
        run_micropython(HEAP_LOCK, [mpy, str(blob), kernels, str(rows)], heap)
    )[0]
    assert delta == 0  # 100 calls left nothing on the heap
    assert control == "MemoryError"  # the lock does catch an allocating call (quantize)
    _, lq, _ = host_reference(blob.read_bytes(), X[:1])
    assert out == lq[0].tolist()  # the locked calls computed the right logits


def test_device_mp_iris_myattn_loaded_model_heap_within_budget(mpy, iris_myattn):
    used = int(run_micropython(HEAP, [mpy, str(iris_myattn[0]), "viper", "attention_viper",
                                      "attention_native"])[0])  # fmt: skip
    assert 0 < used <= HEAP_BUDGET - HEAP_MARGIN, f"model + buffers use {used} B"
