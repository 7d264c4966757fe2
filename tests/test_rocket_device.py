# Host (CPython) + MicroPython unix port: the rocket models' integer path, host against device.
"""The seq-rocket cases of tests/rocket_models.py (one channel and three, equal and unequal
lengths, pooling with T % P != 0, levels over six decades, JapaneseVowels) on the device
runtime: under CPython with the pure kernels, and under the MicroPython unix port with every
kernel set (pure, native, viper: the runtime as .mpy), window by window against the host
references:

- `xq` (int32, the 30-bit grid) identical to intref's, the int8 logits identical to intref's
  (every integer), the float logits within 1e-4 of floatref's (the float path counts what the
  int8 path counts: only its head is float);
- padding invariance on the board: garbage past the window in xq changes no logit (windows
  come in random length order through the same buffers);
- `run_int8` allocates nothing under `micropython.heap_lock()`;
- the float program reads the int8 program's window (one int32 window, no float32 one).
"""

from __future__ import annotations

import numpy as np
import pytest
from device_support import literals, needs_micropython, run_micropython
from rocket_models import rocket_cases
from test_device_seq import FLOAT_TOL, host_window_reference
from test_device_seq_mp import PARITY_HEAP, SEQ_HEAP, SEQ_HEAP_LOCK, SEQ_PARITY, write_windows

from tinyattn.intmodel.blob import read_blob

NAMES = ("uni", "multi", "pooled", "capped", "jv")


def _device_rows(m, X, n):
    """(xq, int8 logits, logits with garbage past the window, float logits) per window."""
    out = m.new_logits()
    junk = m.quantize([0.0] * m.n_features)
    rows = []
    for x, k in zip(X, n, strict=True):
        w = x[: int(k)].reshape(-1).tolist()
        xq = m.quantize(w)
        m.run_int8(xq, out, int(k))
        lq = list(out)
        for i in range(len(junk)):
            junk[i] = (i * 7919 + int(k)) % (1 << 29) - (1 << 28)
        for i in range(int(k) * m.n_features):
            junk[i] = xq[i]
        m.run_int8(junk, out, int(k))
        rows.append((list(xq), lq, list(out), m.logits(w, "float")))
    return rows


@pytest.mark.host
@pytest.mark.parametrize("name", NAMES)
def test_rocket_device_cpython_int8_bit_exact_and_padding_invariant(attention, name):
    data, X, n = rocket_cases()[name]
    m = attention.Model(data, kernels="pure")
    assert m.seq and m.xq_typecode == "i" and m.steps == read_blob(data).ops[0].iparams["T"]
    assert m._xf is m._x8  # the float program reads the int8 window: no float32 window
    xq, lq, lf = host_window_reference(data, X, n)
    assert xq.dtype == np.int32 and np.abs(xq).max() > 2**20  # the wide grid in use
    for i, (dxq, dlq, djunk, dlf) in enumerate(_device_rows(m, X, n)):
        assert dxq == xq[i].tolist(), (i, n[i])
        assert dlq == lq[i].tolist(), (i, n[i])  # every integer
        assert djunk == dlq, (i, n[i])  # garbage past the window changed nothing
        assert np.max(np.abs(np.array(dlf) - lf[i])) <= FLOAT_TOL, (i, dlf, lf[i])


@pytest.mark.host
def test_rocket_cases_cover_the_integer_path():
    """The cases do exercise what they are for: several block exponents in one batch,
    pooling, both pad modes, several channels and groups of several features."""
    from tinyattn.intmodel import blob_rocket
    from tinyattn.learn import rocket

    for name in NAMES:
        data, X, n = rocket_cases()[name]
        op = read_blob(data).ops[0]
        g = op.tensors["grp"]
        assert set(g[:, 1].tolist()) == {0, 1}, name
        assert g[:, 6].max() > 1 or name == "capped", name
    capped = rocket_cases()["capped"]
    assert read_blob(capped[0]).ops[0].iparams["N"] == 7 and capped[2].max() > 2 * 7
    op = read_blob(rocket_cases()["pooled"][0]).ops[0]
    xq, _, _ = host_window_reference(rocket_cases()["pooled"][0], *rocket_cases()["pooled"][1:])
    _, _, e = rocket.prepare(xq.reshape(len(xq), -1, 2), rocket_cases()["pooled"][2], 3)
    assert op.iparams["P"] == 3 and op.iparams["T"] % 3 and len(set(e.tolist())) >= 3
    assert read_blob(rocket_cases()["multi"][0]).ops[0].tensors["grp"][:, 5].max() > 1
    assert blob_rocket.params(op).size == op.iparams["K"]


@pytest.mark.host
def test_thumb_rocket_arithmetic_shortcuts_are_exact():
    """The two shortcuts of device/attention_thumb_rocket.py (its docstring), exhaustively:
    a PPV's quotient (count << 15) // npos as (count·m mod 2**32) >> 16 with m = (2**31 - 1)
    // npos + 1, for every npos in 1..256 and count in 0..npos (the product below 2**32); and
    the shared sum from a grid of 3·xp, (sum of nine 3·xp taps mod 2**32)·3**-1 mod 2**32,
    the sum of the nine xp taps, where the nine 3·xp taps wrap past 2**31. The bound matters:
    at npos = 301 the product is off for some count (the kernel divides past 256)."""
    for npos in range(1, 257):
        m = (2**31 - 1) // npos + 1
        c = np.arange(npos + 1, dtype=np.int64)
        assert (c * m).max() < 2**32
        assert np.array_equal(((c * m) & 0xFFFFFFFF) >> 16, (c << 15) // npos), npos
    c = np.arange(302, dtype=np.int64)
    m = (2**31 - 1) // 301 + 1
    assert not np.array_equal(((c * m) & 0xFFFFFFFF) >> 16, (c << 15) // 301)

    inv3 = 0xAAAAAAAB
    assert (3 * inv3) & 0xFFFFFFFF == 1
    rng = np.random.default_rng(0)
    bound = 2**30 // 12  # P·2**15 at the conv bound of one channel (docs/quantization.md)
    taps = rng.integers(-bound, bound + 1, size=(10_000, 9))
    taps[:100] = bound  # nine taps at the bound: 27·bound passes 2**31
    taps[100:200] = -bound
    wrapped = (3 * taps).sum(axis=1) & 0xFFFFFFFF
    assert ((3 * taps[:100]).sum(axis=1) >= 2**31).all()
    got = (wrapped * inv3) & 0xFFFFFFFF
    got = np.where(got >= 2**31, got - 2**32, got)
    assert np.array_equal(got, taps.sum(axis=1))


@pytest.fixture(scope="module")
def blobs(tmp_path_factory):
    d = tmp_path_factory.mktemp("rocket")
    out = {}
    for name in NAMES:
        data, X, n = rocket_cases()[name]
        (d / f"{name}.bin").write_bytes(data)
        out[name] = (d / f"{name}.bin", X, n, write_windows(d / f"{name}.txt", X, n))
    return out


@pytest.mark.micropython
@needs_micropython
@pytest.mark.parametrize("kernels", ["pure", "native", "viper"])
@pytest.mark.parametrize("name", NAMES)
def test_rocket_device_mp_int8_bit_exact_and_padding_invariant(mpy, blobs, name, kernels):
    path, X, n, rows = blobs[name]
    head, *out = literals(
        run_micropython(SEQ_PARITY, [mpy, str(path), kernels, str(rows)], PARITY_HEAP,
                        timeout=600)  # fmt: skip
    )
    assert head[0] == kernels
    xq, lq, lf = host_window_reference(path.read_bytes(), X, n)
    assert len(out) == len(X)
    for i, (dxq, dlq, dpred, same, dlf) in enumerate(out):
        assert dxq == xq[i].tolist(), (i, n[i])
        assert dlq == lq[i].tolist(), (i, n[i])
        assert dpred == int(np.argmax(lq[i])), i
        assert same, (i, n[i])
        assert np.max(np.abs(np.array(dlf) - lf[i])) <= FLOAT_TOL, (i, dlf, lf[i])


@pytest.mark.micropython
@needs_micropython
@pytest.mark.parametrize("kernels", ["pure", "viper"])
@pytest.mark.parametrize(("name", "steps"), [("multi", 17), ("pooled", 20)])
def test_rocket_device_mp_run_int8_allocates_nothing(mpy, blobs, tmp_path, kernels, name, steps):
    path, X, _, _ = blobs[name]
    rows = write_windows(tmp_path / "w.txt", X[:1], [steps])
    rows.write_text(rows.read_text().split(" ", 1)[1])  # HEAP_LOCK's rows: the values only
    delta, control, out = literals(
        run_micropython(SEQ_HEAP_LOCK, [mpy, str(path), kernels, str(rows)], SEQ_HEAP)
    )[0]
    assert delta == 0 and control == "MemoryError"
    _, lq, _ = host_window_reference(path.read_bytes(), X[:1], np.array([steps]))
    assert out == lq[0].tolist()
