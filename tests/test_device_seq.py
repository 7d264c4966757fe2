# Host (CPython): the device runtime's seq-attn path (issue 11) under CPython, pure kernels.
"""`device/attention.py` on seq-attn blobs (op 0 embed; embed, res_attention, res_ff,
masked_pool, dense) against the host references, window by window:

- int8: the device's `quantize` gives the host's `xq` (per-channel normalization, zeros after
  the window) and `run_int8(xq, out, n)` the host intref's logits, every integer, on windows of
  random lengths `1 <= n <= T` (the model runs on the `S_n = ceil(n/P)` valid tokens);
- float: `run_float` within 1e-4 of floatref (int8 blob dequantized, and the float32 blob);
- padding invariance on the device: garbage in `xq` past the window, a longer window run
  before, or the same window inside a longer buffer change no logit;
- the API on windows (quantize's length checks, logits/predict/classify, n for non-seq
  models) and the readers: random mutations of seq blobs get the same verdict from the device
  and the host reader, and every budget site of the new ops binds at the same multiplier.

Models (`seq_cases()`, shared with tests/test_device_seq_mp.py): "bm", the BasicMotions model
(T=100, C=6, P=10, E=16, H=2, L=2, F=32) trained on TRAIN and quantized on its windows, run on
TEST windows cut at random lengths; "odd" (T=13 not a multiple of P=4, C=2, E=8, H=4, one
block, F=12, no biases) and "steps" (P=1: time steps are tokens, T=6, C=3, E=4, H=1, two
blocks, F=8), random-weight models quantized on random unequal-length windows; "hot" (T=24,
C=3, P=2, E=12, H=2, two blocks, F=8) with Wq, Wk, bq, bk scaled by 300: score scales past
the ones that once broke export (real softmax multiplier above 1e4), its softmax a hard
max; "conv" (a conv stem: T=23, C=2, P=2, width 6, depthwise k5 stride 3 and dilation 1,
then dilation 3, each with a pointwise conv + ReLU, E=8, H=2, F=12: 12 tokens strided to
4, their counts ceil(S_n/3)).
"""

from __future__ import annotations

import functools
import struct
import zlib

import numpy as np
import pytest
from seq_models import basicmotions_model, model_file, random_seq_case

from tinyattn.data.timeseries import load_ts_dataset
from tinyattn.intmodel.blob import (
    BUDGET,
    OP_LAYOUTS,
    BlobError,
    blob_bytes,
    budget_sites,
    read_blob,
    softmax_diff_max,
)
from tinyattn.intmodel.floatref import run_float
from tinyattn.intmodel.intref import quantize_input, run_int8
from tinyattn.intmodel.quantize import float32_spec, quantize
from tinyattn.learn.seqmodel import SeqAttnConfig

pytestmark = pytest.mark.host

FLOAT_TOL = 1e-4  # device float path vs floatref (float32 buffers both)


@functools.lru_cache(maxsize=1)
def seq_cases() -> dict[str, tuple[bytes, bytes, np.ndarray, np.ndarray]]:
    """name -> (int8 blob, float32 blob, raw test windows [N, T, C], lengths [N])."""
    model, mean, std, train = basicmotions_model()
    test = load_ts_dataset("basicmotions", "test")
    npz = model_file(model, mean, std, train.class_names)
    rng = np.random.default_rng(11)
    T = model.ops[0]["steps"]
    X = np.concatenate([test.X[:, :T], test.X[:, :T]])  # each TEST window full and cut
    n = np.concatenate([np.full(len(test.X), T), rng.integers(1, T + 1, size=len(test.X))])
    cases = {"bm": (npz, train.X, train.lengths, X, n)}
    odd = SeqAttnConfig(patch=4, embed_dim=8, num_heads=4, blocks=1, ff_dim=12, bias=False)
    cases["odd"] = random_seq_case(5, 13, 2, 3, odd, 60)
    steps = SeqAttnConfig(patch=1, embed_dim=4, num_heads=1, blocks=2, ff_dim=8, bias=True)
    cases["steps"] = random_seq_case(7, 6, 3, 2, steps, 40)
    hot = SeqAttnConfig(patch=2, embed_dim=12, num_heads=2, blocks=2, ff_dim=8)
    cases["hot"] = random_seq_case(3, 24, 3, 3, hot, 120, hot=300.0)
    conv = SeqAttnConfig(patch=2, embed_dim=8, num_heads=2, blocks=1, ff_dim=12, stem="conv",
                         stem_width=6, stem_kernel=5, stem_dilations=(1, 3), stem_stride=3)
    cases["conv"] = random_seq_case(9, 23, 2, 3, conv, 120)
    out = {}
    for name, (npz, Xc, lc, Xt, nt) in cases.items():
        q8 = blob_bytes(quantize(npz, Xc, lc))
        out[name] = (q8, blob_bytes(float32_spec(npz)), Xt, nt)
    return out


def host_window_reference(data: bytes, X: np.ndarray, n: np.ndarray):
    """(xq [N, S·P·C], int8 logits [N, K] or None, float logits [N, K]) of the host."""
    blob = read_blob(data)
    if not blob.quantized:
        return None, None, run_float(blob, X, n)
    xq = quantize_input(blob, X, n)
    return xq, run_int8(blob, xq, n), run_float(blob, X, n)


def window(X: np.ndarray, n: int) -> list[float]:
    """The first n steps of a raw window [T, C], flat row-major (what a board receives)."""
    return X[:n].reshape(-1).tolist()


@pytest.fixture(scope="module")
def cases():
    return seq_cases()


def _device_rows(m, X, n):
    out = m.new_logits()
    rows = []
    for x, k in zip(X, n, strict=True):
        f = window(x, int(k))
        if m.quantized:
            xq = m.quantize(f)
            pred = m.run_int8(xq, out, int(k))
            rows.append((list(xq), list(out), pred, m.logits(f, "float")))
        else:
            rows.append((None, None, None, m.logits(f, "float")))
    return rows


@pytest.mark.parametrize("name", ["bm", "odd", "steps", "hot", "conv"])
def test_device_seq_int8_bit_exact_on_windows_of_random_lengths(attention, cases, name):
    data, _, X, n = cases[name]
    m = attention.Model(data, kernels="pure")
    assert m.seq and (m.kernels, m.float_kernels) == ("pure", "pure")
    xq, lq, lf = host_window_reference(data, X, n)
    rows = _device_rows(m, X, n)
    for i, (dxq, dlq, dpred, dlf) in enumerate(rows):
        assert dxq == xq[i].tolist(), (name, i, n[i])
        assert dlq == lq[i].tolist(), (name, i, n[i])  # every integer
        assert dpred == int(np.argmax(lq[i])), i
        assert np.max(np.abs(np.array(dlf) - lf[i])) <= FLOAT_TOL, (name, i, dlf, lf[i])
    assert len(set(n.tolist())) >= min(m.steps, 25)  # many lengths (all of a short window)
    if name == "bm":  # the trained model is right, not merely consistent: 40/40 full windows
        labels = load_ts_dataset("basicmotions", "test").y
        full = [r[2] for r, k in zip(rows, n, strict=True) if k == m.steps]
        right = sum(int(p == y) for p, y in zip(full[:40], labels.tolist(), strict=True))
        assert right >= 34, right


@pytest.mark.parametrize("name", ["bm", "odd", "conv"])
def test_device_seq_float32_blob_matches_floatref(attention, cases, name):
    _, data, X, n = cases[name]
    m = attention.Model(data)
    assert m.seq and not m.quantized
    _, _, lf = host_window_reference(data, X, n)
    for i, (*_, dlf) in enumerate(_device_rows(m, X, n)):
        assert np.max(np.abs(np.array(dlf) - lf[i])) <= FLOAT_TOL, (name, i)


@pytest.mark.parametrize("name", ["odd", "conv"])
def test_device_seq_padding_never_changes_a_logit(attention, cases, name):
    """Garbage in xq past the window, the window inside a longer xq, a longer window run just
    before (stale buffers), and quantize into a reused buffer: identical logits."""
    data, _, X, n = cases[name]
    m = attention.Model(data, kernels="pure")
    rng = np.random.default_rng(2)
    out = m.new_logits()
    C = m.n_features
    for x, k in zip(X[:20], n[:20], strict=True):
        k = int(k)
        ref = m.logits(window(x, k))
        xq = m.quantize(window(x, k))
        assert len(xq) == m.input_len and not any(xq[k * C :])  # the tail reads as 0
        for i in range(k * C, len(xq)):
            xq[i] = int(rng.integers(-128, 128))
        m.run_int8(m.quantize(window(x, m.steps)), out)  # a full window first
        m.run_int8(xq, out, k)
        assert list(out) == ref  # the runtime pads the last patch itself
        m.run_int8(xq[: k * C], out, k)  # an xq of exactly the window
        assert list(out) == ref
        buf = m.quantize(window(x, m.steps))
        assert m.quantize(window(x, k), buf) is buf and list(buf) == list(m.quantize(window(x, k)))
    # padding a window further with zero-mean steps is a different window: n says which


def test_device_seq_quantize_and_run_validate_the_window(attention, cases):
    data, *_ = cases["odd"]
    m = attention.Model(data, kernels="pure")
    assert (m.steps, m.patch, m.n_features, m.input_len) == (13, 4, 2, 32)  # S = 4 patches of 4·2
    for bad in ([0.0] * 3, [0.0] * 27, []):  # not whole steps, or no step
        with pytest.raises(ValueError, match=rf"{len(bad)} numbers .* C = 2 .*T = 13"):
            m.quantize(bad)
        with pytest.raises(ValueError, match=rf"{len(bad)} numbers"):
            m.logits(bad, "float")
    with pytest.raises(ValueError, match="NaN"):
        m.quantize([1.0, 2.0, float("nan"), 0.0])
    xq, out = m.quantize([0.5] * 6), m.new_logits()
    for n in (0, 14):
        with pytest.raises(ValueError, match=rf"n = {n} steps, the model takes 1\.\.13"):
            m.run_int8(xq, out, n)
    with pytest.raises(ValueError, match="run_int8 needs xq of 26 int8"):
        m.run_int8(xq[:10], out)  # n = None: T steps
    with pytest.raises(ValueError, match="xq holds 4 int8, the window needs 6"):
        m.quantize([0.5] * 6, xq[:4])
    assert m.predict([0.5] * 6) == m.run_int8(xq, out, 3)
    assert m.classify([0.5] * 6) == m.class_names[m.predict([0.5] * 6)]


def test_device_seq_non_seq_models_take_n_none_or_1(attention, blobs_iris):
    m = attention.Model(blobs_iris, kernels="pure")
    assert (m.seq, m.steps, m.patch, m.input_len) == (False, 1, 1, 4)
    xq, out = m.quantize([5.1, 3.5, 1.4, 0.2]), m.new_logits()
    p = m.run_int8(xq, out)
    ref = list(out)
    assert m.run_int8(xq, out, 1) == p and list(out) == ref
    with pytest.raises(ValueError, match="the model takes 1..1"):
        m.run_int8(xq, out, 2)


@pytest.fixture(scope="module")
def blobs_iris():
    from synth_models import iris_synthetic

    model, X, _ = iris_synthetic(seed=1)
    return blob_bytes(quantize(model, X[model.meta["train"]["train_idx"]]))


# -- the readers: the device's verdict is the host's, word for word ---------------------------


def _verdicts(attention, data: bytes) -> tuple[str | None, str | None]:
    out = []
    for reader, error in ((read_blob, BlobError), (attention.read_blob, attention.BlobError)):
        try:
            reader(data, source="seq.bin")
            out.append(None)
        except error as exc:
            out.append(str(exc))
    return out[0], out[1]


def _recrc(data: bytearray) -> bytes:
    struct.pack_into("<I", data, len(data) - 4, zlib.crc32(bytes(data[:-4])))
    return bytes(data)


@pytest.mark.parametrize(("name", "which"), [("odd", 0), ("odd", 1), ("conv", 0), ("conv", 1)])
def test_device_seq_random_mutations_get_the_host_readers_verdict(attention, cases, name, which):
    ref = cases[name][which]  # int8, float32
    rng = np.random.default_rng(9 + which)
    rejected = 0
    for _ in range(300):
        data = bytearray(ref)
        for p in rng.integers(32, len(data) - 4, size=rng.choice([1, 2, 4])):
            data[p] = int(rng.integers(0, 256))
        host, device = _verdicts(attention, _recrc(data))
        assert device == host
        rejected += host is not None
    assert rejected > 40


@pytest.mark.parametrize(
    ("param", "value", "problem"),
    [
        ("groups", 4, "op 1 (conv): groups = 4 must divide C = 6 and F = 6"),
        ("relu", 2, "op 1 (conv): relu = 2, must be 0 or 1"),
        ("stride", 0, "op 1 (conv): stride = 0 out of range 1..65535"),
        ("K", 4, "shape mismatch in op 1 (conv): tensor"),
        ("S", 11, "shape mismatch in op 1 (conv): input shape [12, 6], op has S, C = 11, 6"),
        ("shift", 31, "op 1 (conv): shift = 31 out of range 1..30"),
    ],
)
def test_device_seq_edited_conv_refused_by_both_readers(attention, cases, param, value, problem):
    """A conv op's parameters edited (CRC fixed): both readers refuse with one message."""
    data = cases["conv"][0]
    at = _offsets(data)[1] + 4 * OP_LAYOUTS[11].iparams.index(param)
    bad = bytearray(data)
    struct.pack_into("<i", bad, at, value)
    host, device = _verdicts(attention, _recrc(bad))
    assert host is not None and problem in host, host
    assert device == host


def _offsets(data: bytes) -> list[int]:
    """Offset of the first iparam of every op record."""
    F, n_ops, names_len = struct.unpack_from("<H", data, 12)[0], data[16], data[28]
    pos = 32 + names_len + (-names_len) % 4 + 8 * F
    out = []
    for _ in range(n_ops):
        _, nt, ni, nf = data[pos : pos + 4]
        pos += 4 + 2 * nt
        pos += (-pos) % 4
        out.append(pos)
        pos += 4 * (ni + nf)
    return out


def test_device_seq_budget_sites_bind_at_the_same_multiplier_on_both_readers(attention, cases):
    """Every site of embed, conv, res_attention, res_ff and masked_pool: with M one above the
    largest the budget allows both readers refuse with the same message; at that largest both
    accept."""
    seen = set()
    for data in (cases["steps"][0], cases["conv"][0]):
        seen |= _budget_sites_bind(attention, data)
    assert {"embed", "res_attention", "res_ff", "conv"} <= seen


def _budget_sites_bind(attention, data: bytes) -> set[str]:
    blob = read_blob(data)
    entries = {e.name: e for e in blob.tensor_table}
    seen = set()
    for k, (op, at) in enumerate(zip(blob.ops, _offsets(data), strict=True)):
        for name, max_acc, _, shift in budget_sites(op):
            o = len(max_acc) - 1  # the last channel (masked_pool: k = S tokens)
            m_max = (BUDGET - 1 - (1 << (shift - 1))) // int(max_acc[o])
            if m_max >= 32767:
                continue  # the multiplier range binds first (e.g. the residual adds)
            if name == "M_sm":  # its max|acc| is diff_max(B, M, shift), shrinking as M grows:
                continue  # tests/test_budget.py tests that site at shift_sm 30
            if name[0] == "m":
                where, fmt = entries[f"{k}.{name}"].offset + 2 * o, "<h"
            else:
                where, fmt = at + 4 * OP_LAYOUTS[op.opcode].iparams.index(name), "<i"
            for M, ok in ((m_max, True), (m_max + 1, False)):
                b = bytearray(data)
                struct.pack_into(fmt, b, where, M)
                host, device = _verdicts(attention, _recrc(b))
                assert device == host, (k, name)
                assert (host is None) == ok, (k, name, host)
            seen.add(op.kind)
    return seen


def test_device_seq_kernel_table_documents_every_kernel(attention):
    """attention_kernels.py's docstring table names every kernel of INT8 and FLOAT (the add
    and the dense bias stride among them), and viper has every int8 kernel."""
    import attention_kernels as k

    doc = k.__doc__
    for f in k.INT8:
        assert f"\n  {f.__name__} " in doc, f.__name__
    assert "bstride" in doc and "add    (x, y" in doc and "S_n" in doc
    assert [f.__name__ for f in k.FLOAT[:7]] == [f.__name__ + "_f" for f in k.INT8[:7]]
    assert k.FLOAT[7] is k.conv  # the float conv: the same kernel, run with shift 0
    assert k.INT8[9] is k.conv


def _edited_pool_tables(data: bytes) -> list[tuple[bytes, str]]:
    """The blob with masked_pool's table edited, CRC fixed: (bytes, the expected problem) for
    m[1] one above rint(2**14 / 2), and for the shift 15 instead of 14."""
    blob = read_blob(data)
    k = next(i for i, op in enumerate(blob.ops) if op.kind == "masked_pool")
    at = next(e.offset for e in blob.tensor_table if e.name == f"{k}.m")
    entry = bytearray(data)
    struct.pack_into("<h", entry, at + 2, 8193)
    shift = bytearray(data)
    struct.pack_into("<i", shift, _offsets(data)[k] + 4 * 2, 15)  # iparams S, E, shift
    return [
        (_recrc(entry), f"op {k} (masked_pool): m[1] = 8193, must be rint(2**14 / 2) = 8192"),
        (_recrc(shift), f"op {k} (masked_pool): shift = 15, must be 14"),
    ]


def test_device_seq_edited_masked_pool_table_refused_by_both_readers(attention, cases):
    """An edited reciprocal table would silently change the mean: both readers refuse it with
    the same one-line message (docs/blob-format.md check 10)."""
    for name in ("bm", "steps"):
        for bad, problem in _edited_pool_tables(cases[name][0]):
            host, device = _verdicts(attention, bad)
            assert host is not None and problem in host
            assert device == host


def test_device_seq_long_window_runs_its_last_T_steps(attention, cases):
    """The long window rule on the device API: a window of m > T steps gives the logits,
    xq and class of its last T steps, on both paths, as the host references do on the window
    as given (intref/floatref apply `fit_to_model`); a NaN in the dropped steps is never read,
    one in the kept steps is named by its index in the window as given."""
    data, *_ = cases["odd"]  # T = 13, C = 2
    m = attention.Model(data, kernels="pure")
    blob = read_blob(data)
    rng = np.random.default_rng(3)
    for extra in (1, 5, 13, 40):
        w = rng.normal(size=(13 + extra, 2))  # (m, C)
        flat, tail = w.reshape(-1).tolist(), w[-13:].reshape(-1).tolist()
        assert m.window_steps(flat) == 13
        assert m.logits(flat) == m.logits(tail)
        assert list(m.quantize(flat)) == list(m.quantize(tail))
        assert m.logits(flat, "float") == m.logits(tail, "float")
        assert m.predict(flat) == m.predict(tail)
        xq = quantize_input(blob, w[None], np.array([len(w)]))
        assert list(m.quantize(flat)) == xq[0].tolist()
        assert m.logits(flat) == run_int8(blob, xq, np.array([13]))[0].tolist()
        ref = run_float(blob, w[None], np.array([len(w)]))[0]
        assert np.max(np.abs(np.array(m.logits(flat, "float")) - ref)) < FLOAT_TOL
    w = rng.normal(size=(20, 2))
    w[2, 1] = np.nan  # dropped: steps 0..6 of 20
    assert m.logits(w.reshape(-1).tolist()) == m.logits(w[-13:].reshape(-1).tolist())
    w[10, 1] = np.nan  # kept: feature 10·2 + 1 of the window as given
    with pytest.raises(ValueError, match=r"feature 21 is nan"):
        m.quantize(w.reshape(-1).tolist())
    with pytest.raises(ValueError, match=r"row 0: .*feature 21 is nan"):
        quantize_input(blob, w[None], np.array([20]))


def test_device_seq_hot_model_exports_past_the_full_softmax_budget(cases):
    """The "hot" model's softmax multipliers are clipped at 1024 (M_sm = 16384, shift 4):
    every diff >= 1 leaves the table, so no diff·M_sm is computed (diff_max 0) — a blob the
    rule 'every diff's index computed' (2·D·2**14·M < 2**30) could not hold."""
    blob = read_blob(cases["hot"][0])
    sm = [op.iparams for op in blob.ops if op.kind == "res_attention"]
    assert len(sm) == 2
    for ip in sm:
        D = ip["E"] // ip["H"]
        assert (ip["M_sm"], ip["shift_sm"]) == (16384, 4)
        assert 2 * D * 128 * 128 * ip["M_sm"] >= 1 << 30
        assert softmax_diff_max(2 * D * 128 * 128, ip["M_sm"], ip["shift_sm"]) == 0
