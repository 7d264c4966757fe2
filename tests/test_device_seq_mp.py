# Host (CPython): the device runtime's seq-attn path under the MicroPython unix port (issue 11).
"""seq-attn blobs on MicroPython, every kernel set (pure, native, viper), the runtime as .mpy
(mpy-cross -march=x64), against the host references window by window (the models and windows
of tests/test_device_seq.py: the trained BasicMotions model on TEST windows full and cut at
random lengths, two random-weight models with T % P != 0 and P = 1, and one with a conv stem):

- int8 logits identical to intref's, every integer, and `xq` identical to the host's; float
  logits within 1e-4 of floatref; padding invariance on the board (the same window with
  garbage past it in xq gives the same logits; windows come in random length order, so a
  short one always follows longer ones through the same buffers);
- `run_int8(xq, out, n)` on a window shorter than T allocates nothing under
  `micropython.heap_lock()` (tests/device_support.HEAP_LOCK with the step count passed on);
- the BasicMotions model (T=100, C=6, P=10, E=16, H=2, L=2, F=32) loaded with its buffers
  holds <= 48 KiB of heap and loads in `-X heapsize=100k` (the issue's board) with both
  programs (the float one is built at load, its buffers allocated right after the op records
  and, with viper's int8 kernels, shared by the int8 program), and its float path runs there.
"""

from __future__ import annotations

import numpy as np
import pytest
from device_support import (
    HEAP,
    HEAP_LOCK,
    KERNEL_MODULES,
    literals,
    needs_micropython,
    run_micropython,
)
from test_device_seq import FLOAT_TOL, host_window_reference, seq_cases

pytestmark = [pytest.mark.micropython, needs_micropython]

KERNELS = ("pure", "native", "viper")
PARITY_HEAP = "1m"  # parity scripts parse 600-value text windows: heap for the text, not the model
BOARD_HEAP = "100k"  # issue 11, Must show 6: -X heapsize=100k, runtime as .mpy
# the heap-lock and heap-held runs of every kernel set: pure and native int8 programs have
# buffers of their own (only viper's share the float program's), ~6 KB more than viper's
SEQ_HEAP = "160k"
SEQ_HEAP_BUDGET = 48 * 1024  # loaded BasicMotions model + buffers

# argv: modules dir, blob, kernels, windows file (per line: n, then the n*C raw values).
# Prints [kernels, float kernels, T, P, input_len], then per window [xq, int8 logits, argmax,
# same logits with garbage past the window in xq, float logits].
SEQ_PARITY = """
import sys
sys.path.insert(0, sys.argv[1])
from attention import Model
m = Model(sys.argv[2], kernels=sys.argv[3])
out = m.new_logits()
print([m.kernels, m.float_kernels, m.steps, m.patch, m.input_len])
xq = m.quantize([0.0] * m.n_features)
junk = m.quantize([0.0] * m.n_features)
for line in open(sys.argv[4]):
    v = line.split()
    n = int(v[0])
    x = [float(s) for s in v[1:]]
    if not m.quantized:
        print([None, None, None, None, m.logits(x, "float")])
        continue
    m.quantize(x, xq)
    p = m.run_int8(xq, out, n)
    lq = list(out)
    for i in range(len(junk)):
        junk[i] = (i * 37 + n) % 256 - 128
    for i in range(n * m.n_features):
        junk[i] = xq[i]
    m.run_int8(junk, out, n)
    print([list(xq), lq, p, list(out) == lq, m.logits(x, "float")])
"""

# HEAP_LOCK of the Iris tests, with the window's step count passed on to run_int8
SEQ_HEAP_LOCK = HEAP_LOCK.replace(
    "xq = m.quantize(x)\n", "xq = m.quantize(x)\nsteps = len(x) // m.n_features\n"
).replace("m.run_int8(xq, out)", "m.run_int8(xq, out, steps)")
assert "m.run_int8(xq, out, steps)" in SEQ_HEAP_LOCK and "steps = len" in SEQ_HEAP_LOCK


def write_windows(path, X, n):
    lines = []
    for x, k in zip(X, n, strict=True):
        vals = x[: int(k)].reshape(-1).tolist()
        lines.append(" ".join([str(int(k))] + [repr(float(v)) for v in vals]) + "\n")
    path.write_text("".join(lines))
    return path


@pytest.fixture(scope="module")
def blobs(tmp_path_factory):
    """name -> (int8 blob path, float32 blob path, X, n, windows file)."""
    d = tmp_path_factory.mktemp("seq")
    out = {}
    for name, (q8, f32, X, n) in seq_cases().items():
        (d / f"{name}.bin").write_bytes(q8)
        (d / f"{name}_f32.bin").write_bytes(f32)
        rows = write_windows(d / f"{name}.txt", X, n)
        out[name] = (d / f"{name}.bin", d / f"{name}_f32.bin", X, n, rows)
    return out


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("name", ["bm", "odd", "steps", "hot", "conv"])
def test_device_seq_mp_int8_bit_exact_and_padding_invariant(mpy, blobs, name, kernels):
    q8, _, X, n, rows = blobs[name]
    head, *out = literals(
        run_micropython(SEQ_PARITY, [mpy, str(q8), kernels, str(rows)], PARITY_HEAP, timeout=600)
    )
    assert head[:2] == [kernels, "pure" if kernels == "pure" else "native"]
    xq, lq, lf = host_window_reference(q8.read_bytes(), X, n)
    assert len(out) == len(X)
    for i, (dxq, dlq, dpred, same, dlf) in enumerate(out):
        assert dxq == xq[i].tolist(), (i, n[i])
        assert dlq == lq[i].tolist(), (i, n[i])  # every integer
        assert dpred == int(np.argmax(lq[i])), i
        assert same, (i, n[i])  # garbage past the window changed nothing
        assert np.max(np.abs(np.array(dlf) - lf[i])) <= FLOAT_TOL, (i, dlf, lf[i])


@pytest.mark.parametrize("name", ["bm", "odd", "conv"])
def test_device_seq_mp_float32_blob_matches_floatref(mpy, blobs, name):
    _, f32, X, n, rows = blobs[name]
    head, *out = literals(
        run_micropython(SEQ_PARITY, [mpy, str(f32), "auto", str(rows)], PARITY_HEAP, timeout=600)
    )
    assert head[0] is None and head[1] == "native"
    _, _, lf = host_window_reference(f32.read_bytes(), X, n)
    for i, row in enumerate(out):
        assert np.max(np.abs(np.array(row[4]) - lf[i])) <= FLOAT_TOL, i


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize(("name", "n"), [("bm", 37), ("conv", 13)])
def test_device_seq_mp_run_int8_allocates_nothing_under_heap_lock(
    mpy, blobs, tmp_path, kernels, name, n
):
    # bm: 4 valid tokens of 10, the last one 7 steps and 3 of padding; conv: 7 patch tokens,
    # 3 after the stride
    q8, _, X, _, _ = blobs[name]
    rows = write_windows(tmp_path / "w.txt", X[:1], [n])
    rows.write_text(rows.read_text().split(" ", 1)[1])  # HEAP_LOCK's rows: the values only
    delta, control, out = literals(
        run_micropython(SEQ_HEAP_LOCK, [mpy, str(q8), kernels, str(rows)], SEQ_HEAP)
    )[0]
    assert delta == 0  # 100 calls left nothing on the heap
    assert control == "MemoryError"  # the lock does catch an allocating call (quantize)
    _, lq, _ = host_window_reference(q8.read_bytes(), X[:1], np.array([n]))
    assert out == lq[0].tolist()  # the locked calls computed the right logits


@pytest.mark.parametrize("kernels", KERNELS)
def test_device_seq_mp_basicmotions_model_heap_within_48k(mpy, blobs, kernels):
    q8 = blobs["bm"][0]
    used = int(run_micropython(HEAP, [mpy, str(q8), kernels, *KERNEL_MODULES[kernels]],
                               SEQ_HEAP)[0])  # fmt: skip
    print(f"BasicMotions model + buffers, {kernels}: {used} B")
    assert 0 < used <= SEQ_HEAP_BUDGET, f"model + buffers use {used} B"


# HEAP, then one run_float and one run_int8 on a window of 10 steps: the heap held by the
# model after loading, after the float path ran (it builds nothing: its program came with the
# load), the free heap and both paths' argmax
HEAP_FLOAT = HEAP.replace(
    "print(gc.mem_alloc() - a)",
    "loaded = gc.mem_alloc() - a\nx = [0.5] * (10 * m.n_features)\n"
    "pf = m.run_float(x, [0.0] * m.n_classes)\n"
    "p8 = m.run_int8(m.quantize(x), m.new_logits(), 10)\n"
    "x = None\ngc.collect()\nprint(loaded, gc.mem_alloc() - a, gc.mem_free(), pf, p8)",
)


def test_device_seq_mp_basicmotions_model_loads_in_a_100k_heap(mpy, blobs):
    """Must show 6: the runtime as .mpy loads the BasicMotions model in `-X heapsize=100k`
    with both programs within 48 KiB, and running the float path adds nothing to it."""
    q8 = blobs["bm"][0]
    args = [mpy, str(q8), "viper", *KERNEL_MODULES["viper"]]
    loaded, with_float, free, _, _ = (
        int(v) for v in run_micropython(HEAP_FLOAT, args, BOARD_HEAP)[0].split()
    )
    print(f"BasicMotions: {loaded} B loaded in 100k (both programs), {with_float} B after a "
          f"float run, {free} B free")  # fmt: skip
    # after the runs: the script's own new globals (its dict grows), no program built
    assert 0 < loaded <= SEQ_HEAP_BUDGET and with_float - loaded <= 1024


def test_device_seq_mp_basicmotions_float_path_runs_in_a_100k_heap(mpy, blobs):
    """The float path right after loading in 100k (viper: the int8 program runs in the float
    program's buffers): both paths on one window give the host's classes."""
    q8, _, X, _, _ = blobs["bm"]
    args = [mpy, str(q8), "viper", *KERNEL_MODULES["viper"]]
    _, _, _, pf, p8 = (int(v) for v in run_micropython(HEAP_FLOAT, args, BOARD_HEAP)[0].split())
    x = np.full((1, X.shape[1], X.shape[2]), 0.5)
    _, lq, lf = host_window_reference(q8.read_bytes(), x, np.array([10]))
    assert (pf, p8) == (int(np.argmax(lf[0])), int(np.argmax(lq[0])))


# argv: modules dir, blob paths. Each blob's reader verdict: None or the BlobError's text.
REJECT = """
import sys
sys.path.insert(0, sys.argv[1])
import attention
for path in sys.argv[2:]:
    try:
        attention.Model(path)
        print(repr(None))
    except attention.BlobError as e:
        print(repr(str(e)))
"""


def test_device_seq_mp_edited_masked_pool_table_refused_as_on_the_host(mpy, tmp_path):
    """MicroPython's reader refuses an edited masked_pool table (an entry, the shift) with the
    host reader's message, word for word."""
    from test_device_seq import _edited_pool_tables

    from tinyattn.intmodel.blob import BlobError, read_blob

    paths, want = [], []
    for i, (bad, problem) in enumerate(_edited_pool_tables(seq_cases()["steps"][0])):
        path = tmp_path / f"pool{i}.bin"
        path.write_bytes(bad)
        with pytest.raises(BlobError) as exc:
            read_blob(bad, source=str(path))
        assert problem in str(exc.value)
        paths.append(str(path))
        want.append(str(exc.value))
    got = [eval(line) for line in run_micropython(REJECT, [mpy, *paths], heap=BOARD_HEAP)]
    assert got == want


@pytest.mark.parametrize(("T", "P"), [(361, 6), (1460, 8)])  # PickupGestureWiimoteZ, ACSF1
def test_device_seq_mp_conv_stem_alone_heap_within_the_search_estimate(mpy, tmp_path, T, P):
    """The heap estimate of a conv stem alone (no attention block) bounds the loaded model
    measured under MicroPython (.mpy, viper), at the stem-alone
    candidates' sizes of the two long-window development problems (an untrained model: the
    blob's size and buffers do not depend on the weights' values)."""
    from tinyattn.board.heap import features, model_heap
    from tinyattn.data.windows import Windows
    from tinyattn.intmodel.blob import blob_bytes
    from tinyattn.learn import search as S
    from tinyattn.learn.seqmodel import SeqAttnConfig

    arch = SeqAttnConfig(patch=P, embed_dim=8, num_heads=2, blocks=0, ff_dim=16, stem="conv",
                         stem_width=8, stem_stride=1, stem_dilations=(2, 4))  # fmt: skip
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, T, 1))
    data = Windows("w", X, np.full(6, T), np.arange(6) % 3, ["a", "b", "c"])
    blob = tmp_path / "alone.bin"
    blob.write_bytes(blob_bytes(S.shape_spec(data, arch)))
    est = model_heap(features(blob.read_bytes()), stream=False)
    used = int(run_micropython(HEAP, [mpy, str(blob), "viper", *KERNEL_MODULES["viper"]],
                               "512k")[0])  # fmt: skip
    assert 0 < used <= est, (used, est)
