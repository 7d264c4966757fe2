# Host (CPython): tests of quantization and the integer reference (docs/quantization.md).
"""Golden vectors for requantization rounding, the exp table and the integer softmax (each
commented with its hand arithmetic); the multiplier/shift rule; the small-int budget on every
Iris sample and on random int8 inputs; the vectorized integer reference against a scalar
loop transcription of the doc; the float32 reference; and the int8 accuracy gates.
"""

from __future__ import annotations

import array
import copy
import math
import subprocess
import warnings

import numpy as np
import pytest
from synth_models import iris_attn_ops, iris_synthetic, random_model

from tinyattn.intmodel.blob import Op, QuantModelSpec, read_blob, softmax_diff_max
from tinyattn.intmodel.blob import blob_bytes as to_bytes
from tinyattn.intmodel.floatref import forward_npz, run_float
from tinyattn.intmodel.intref import (
    SmallIntBudgetError,
    quantize_input,
    requant,
    run_int8,
    softmax_q14,
)
from tinyattn.intmodel.quantize import (
    QuantizeError,
    choose_shift,
    choose_softmax_shift,
    exp_lut,
    float32_spec,
    quantize,
    quantize_weights,
)

pytestmark = pytest.mark.host


# ---------------------------------------------------------------------------------------------
# golden vectors (hand-checkable)

REQUANT_GOLDEN = [
    # acc,  M, shift, expected   hand arithmetic: (acc*M + 2**(shift-1)) >> shift, floor shift
    (5, 1, 1, 3),  # (5 + 1) >> 1 = 3: 2.5 rounds half up to 3
    (-5, 1, 1, -2),  # (-5 + 1) >> 1 = -4 >> 1 = -2: -2.5 rounds half up to -2
    (-6, 1, 1, -3),  # (-6 + 1) >> 1 = floor(-2.5) = -3: -3.0 exactly
    (-7, 1, 1, -3),  # (-7 + 1) >> 1 = -3: -3.5 rounds half up to -3
    (7, 3, 2, 5),  # (21 + 2) >> 2 = 23 >> 2 = 5: 5.25 -> 5
    (-7, 3, 2, -5),  # (-21 + 2) >> 2 = floor(-19 / 4) = -5: -5.25 -> -5
    (10, 3, 2, 8),  # (30 + 2) >> 2 = 8: 7.5 -> 8
    (-10, 3, 2, -7),  # (-30 + 2) >> 2 = -7: -7.5 -> -7
    (-11, 3, 2, -8),  # (-33 + 2) >> 2 = floor(-7.75) = -8: -8.25 -> -8
    (12345, 20000, 22, 59),  # 246900000 / 4194304 = 58.87 -> (246900000 + 2097152) >> 22 = 59
    (-12345, 20000, 22, -59),  # -58.87 -> (-246900000 + 2097152) >> 22 = floor(-58.37) = -59
    (1000, 1, 1, 127),  # 500 saturates at 127
    (-1000, 1, 1, -128),  # -500 saturates at -128
]


@pytest.mark.parametrize(("acc", "M", "shift", "expected"), REQUANT_GOLDEN)
def test_quantize_requant_golden_rounding(acc, M, shift, expected):
    got = requant(np.array([acc], dtype=np.int64), M, shift, -128, 127, "golden")
    assert int(got[0]) == expected


def test_quantize_requant_matches_python_ints_on_many_values():
    """NumPy int64 `>>` and Python's `>>` both floor: same results as the device (Python ints)."""
    rng = np.random.default_rng(0)
    acc = rng.integers(-(2**15), 2**15, size=2000)
    for M, shift in ((1, 1), (16384, 16), (12345, 20), (32767, 15)):
        got = requant(acc, M, shift, -32768, 32767, "random")
        want = [min(max((int(a) * M + (1 << (shift - 1))) >> shift, -32768), 32767) for a in acc]
        assert got.tolist() == want


def test_quantize_requant_budget_violation_raises():
    # 100000 * 16384 = 1638400000 >= 2**30 = 1073741824
    with pytest.raises(SmallIntBudgetError, match="acc·M"):
        requant(np.array([100_000]), 16384, 16, -128, 127, "too big")


# EXP_HI[a] = round(2**14 exp(-a/2)): 16384, 16384 e^-0.5 = 9937.4, e^-1 -> 6027.3, ...
EXP_HI = [16384, 9937, 6027, 3656, 2217, 1345, 816, 495, 300, 182, 110, 67, 41, 25, 15, 9]
# EXP_LO[b] = round(2**14 exp(-b/32)): 16384, 16384 e^-1/32 = 15879.9, e^-2/32 -> 15391.3, ...
EXP_LO = [16384, 15880, 15391, 14918, 14459, 14014, 13583, 13165,
          12760, 12367, 11987, 11618, 11261, 10914, 10578, 10253]  # fmt: skip


def test_quantize_exp_lut_golden():
    lut = exp_lut()
    assert lut.dtype == np.uint16 and lut.shape == (2, 16)
    assert lut[0].tolist() == EXP_HI
    assert lut[1].tolist() == EXP_LO
    # and each entry is the nearest integer to its definition
    for a in range(16):
        assert abs(lut[0, a] - 16384 * math.exp(-a / 2)) <= 0.5
        assert abs(lut[1, a] - 16384 * math.exp(-a / 32)) <= 0.5


def test_quantize_integer_softmax_golden():
    lut = exp_lut()
    # M_sm = 1, shift_sm = 1: idx = (diff + 1) >> 1.
    # scores [10, 10, 0]: diff [0, 0, 10] -> idx [0, 0, 5]
    # e = [16384, 16384, (16384 * EXP_LO[5] + 8192) >> 14 = 14014], sum = 46782
    # p[0] = (16384 << 14 + 23391) // 46782 = 268458847 // 46782 = 5738
    # p[2] = (14014 << 14 + 23391) // 46782 = 229628767 // 46782 = 4908
    # diff_max = ceil(511·2**0 / 1) - 1 = 510: every diff here gets its index computed
    p = softmax_q14(np.array([[10, 10, 0]]), 1, 1, lut, 510, "golden")
    assert p.tolist() == [[5738, 5738, 4908]]
    # scores [100, 26, -500] with M_sm = 1, shift_sm = 1: diff [0, 74, 600] -> idx [0, 37, 300]
    # idx 37 = 2*16 + 5: e = (EXP_HI[2] * EXP_LO[5] + 8192) >> 14 = (84462378 + 8192) >> 14 = 5155
    # (2**14 exp(-37/32) = 5155.45); idx 300 >= 256 -> e = 0; sum = 21539
    # p = (e << 14 + 10769) // 21539 = [12463, 3921, 0]
    p = softmax_q14(np.array([[100, 26, -500]]), 1, 1, lut, 510, "golden")
    assert p.tolist() == [[12463, 3921, 0]]
    # the same with diff_max = 73 (as if diff 74 already left the table): diff 74 and 600 skip
    # their index, e = 0: sum = 16384, p = [16384, 0, 0]
    p = softmax_q14(np.array([[100, 26, -500]]), 1, 1, lut, 73, "golden")
    assert p.tolist() == [[16384, 0, 0]]


def test_softmax_diff_max_is_the_first_diff_past_the_table_less_one():
    """diff_max + 1 is the smallest diff with idx = (diff·M + 2**(shift-1)) >> shift >= 256,
    for every M and shift (so skipping larger diffs changes no e), capped by the bound."""
    for shift in (1, 2, 5, 13, 22, 30):
        for M in (1, 2, 3, 255, 256, 511, 512, 1000, 16384, 32767):
            d = softmax_diff_max(1 << 40, M, shift)
            assert ((d + 1) * M + (1 << (shift - 1))) >> shift >= 256
            assert (d * M + (1 << (shift - 1))) >> shift < 256 or d == 0
    assert softmax_diff_max(1 << 40, 16384, 4) == 0  # r = 1024: any diff >= 1 leaves
    assert softmax_diff_max(262144, 1, 13) == 262144  # the bound binds
    assert softmax_diff_max(255, 0, 5) == 255  # M = 0: idx 0 always


def test_quantize_input_equation_golden():
    spec = _tiny_spec(norm_mean=[1.0, -2.0], norm_std=[0.5, 4.0], input_scale=0.25)
    # (x - mean) / std / s_in + 0.5, floored, clamped:
    #  x = [1.0, -2.0]     -> [0/0.5/0.25 + .5 = 0.5, 0/4/0.25 + .5 = 0.5] -> [0, 0]
    #  x = [1.0625, -1.5]  -> [0.0625/0.5/0.25 + .5 = 1.0, 0.5/4/0.25 + .5 = 1.0] -> [1, 1]
    #  x = [0.9375, -2.5]  -> [-0.0625/0.5/0.25 + .5 = 0, -0.5/4/0.25 + .5 = 0] -> [0, 0]
    #  x = [0.90625, 30]   -> [-0.09375/0.5/0.25 + .5 = -0.25, 32/4/0.25 + .5 = 32.5] -> [-1, 32]
    #  x = [0, 1000]       -> [-1/0.5/0.25 + .5 = -7.5, 1002/4/0.25 + .5 = 1002.5] -> [-8, 127]
    #  x = [-100, -1000] -> clamped to -128, -128
    X = [
        [1.0, -2.0],
        [1.0625, -1.5],
        [0.9375, -2.5],
        [0.90625, 30.0],
        [0.0, 1000.0],
        [-100.0, -1000.0],
    ]
    xq = quantize_input(spec, np.array(X))
    assert xq.dtype == np.int8
    assert xq.tolist() == [[0, 0], [1, 1], [0, 0], [-1, 32], [-8, 127], [-128, -128]]


def _tiny_spec(norm_mean, norm_std, input_scale) -> QuantModelSpec:
    return QuantModelSpec(
        quantized=True,
        class_names=["a", "b"],
        norm_mean=np.array(norm_mean, np.float32),
        norm_std=np.array(norm_std, np.float32),
        input_scale=input_scale,
        logit_scale=1.0,
        ops=[
            Op("dense", {"in": 2, "out": 2, "has_bias": 0, "shift": 1, "act_min": -32768,
                         "act_max": 32767}, {"s_in": input_scale, "s_out": 1.0},
               {"W": np.eye(2, dtype=np.int8), "s": np.ones(2, np.float32),
                "m": np.full(2, 2, np.int16)}),
        ],
    )  # fmt: skip


def test_quantize_tiny_dense_by_hand():
    """y = requant(x @ I, M=2, shift=1) = x exactly (2x + 1) >> 1."""
    spec = _tiny_spec([0.0, 0.0], [1.0, 1.0], 1.0)
    read_blob(to_bytes(spec))  # a valid blob
    xq = np.array([[3, -128], [127, -1]], dtype=np.int8)
    assert run_int8(spec, xq).tolist() == [[3, -128], [127, -1]]


# ---------------------------------------------------------------------------------------------
# the multiplier / shift rule


def test_quantize_choose_shift_is_largest_within_budget():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(1, 6))
        r = np.exp(rng.uniform(-14, 3, size=n))
        max_acc = rng.integers(1, 2**20, size=n)
        try:
            M, shift = choose_shift(r, max_acc, "random")
        except QuantizeError:
            assert np.all(max_acc * np.rint(r * 2) + 1 >= 2**30) or np.any(np.rint(r * 2) >= 2**15)
            continue

        def ok(s, r=r, max_acc=max_acc):
            m = np.rint(r * 2.0**s).astype(np.int64)
            return np.all(m < 2**15) and np.all(max_acc * m + 2 ** (s - 1) < 2**30)

        assert ok(shift) and M.tolist() == np.rint(r * 2.0**shift).astype(int).tolist()
        assert shift == 30 or not any(ok(s) for s in range(shift + 1, 31))


def test_quantize_choose_shift_fails_naming_the_layer():
    with pytest.raises(QuantizeError, match="op 7 \\(dense\\)"):
        choose_shift([1e6], [1000], "op 7 (dense)")


def test_quantize_weights_per_channel():
    W = np.array([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [3.0, 1.5, -0.75], [1e-12, 0.0, 0.0]])
    W_q, s_w = quantize_weights(W)
    assert W_q.dtype == np.int8 and s_w.dtype == np.float32
    assert np.abs(W_q[0]).max() == 127 and np.abs(W_q[2]).max() == 127
    # zero and near-dead rows: range floored at 1/256 of the layer's largest (3.0)
    assert W_q[1].tolist() == [0, 0, 0] and W_q[3].tolist() == [0, 0, 0]
    assert s_w[1] == s_w[3] == np.float32(3.0 / 256 / 127)
    np.testing.assert_allclose(W_q * s_w[:, None], W, atol=s_w.max() / 2 + 1e-12)
    assert W_q[0].tolist() == [64, -127, 32]  # 0.5/1*127 = 63.5 -> 64 (rint: 63.5 -> 64, even)


# ---------------------------------------------------------------------------------------------
# the small-int budget (asserted by the integer reference on every intermediate)


@pytest.fixture(scope="module")
def iris_synth():
    model, X, y = iris_synthetic(seed=1)
    spec = quantize(model, X[model.meta["train"]["train_idx"]])
    return model, X, y, read_blob(to_bytes(spec))


def test_quantize_budget_holds_on_all_150_iris_samples(iris_synth):
    model, X, _, blob = iris_synth
    xq = quantize_input(blob, X)
    assert xq.shape == (150, 4)
    logits = run_int8(blob, xq)  # raises SmallIntBudgetError on any |v| >= 2**30
    assert logits.shape == (150, 3) and logits.dtype == np.int64


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_quantize_budget_holds_on_random_int8_inputs(seed):
    """Random models (also with large weights and biases), random and extreme int8 inputs."""
    rng = np.random.default_rng(seed)
    model = random_model(iris_attn_ops(), seed=seed)
    for key in model.params:  # stretch the weights: bigger accumulators, smaller multipliers
        model.params[key] *= rng.uniform(0.5, 20.0)
    X_calib = model.norm_mean + model.norm_std * rng.normal(size=(64, 4))
    blob = read_blob(to_bytes(quantize(model, X_calib)))
    xq = rng.integers(-128, 128, size=(512, 4)).astype(np.int8)
    extremes = np.array(np.meshgrid(*[[-128, 0, 127]] * 4)).reshape(4, -1).T.astype(np.int8)
    run_int8(blob, np.concatenate([xq, extremes]))


def test_quantize_budget_violation_is_detected(iris_synth):
    """The assertion can fail: a multiplier made too large for its accumulator trips it."""
    blob = copy.deepcopy(iris_synth[3])
    blob.ops[0].tensors["m"] = np.full_like(blob.ops[0].tensors["m"], 32767)
    blob.ops[0].iparams["shift"] = 1
    with pytest.raises(SmallIntBudgetError, match="op 0 \\(dense\\)"):
        run_int8(blob, np.full((1, 4), 127, np.int8))


def _scalar_int8(blob, xq_row) -> list[int]:
    """docs/quantization.md transcribed literally with Python ints (as the device runs it)."""

    def rq(acc, M, shift, lo, hi):
        return min(max((acc * M + (1 << (shift - 1))) >> shift, lo), hi)

    def dense(rows, W, b, m, shift, lo, hi):
        out = []
        for x in rows:
            out.append([rq(sum(int(x[i]) * int(W[o, i]) for i in range(W.shape[1]))
                           + (int(b[o]) if b is not None else 0), int(m[o]), shift, lo, hi)
                        for o in range(W.shape[0])])  # fmt: skip
        return out

    x = [list(map(int, xq_row))]
    for op in blob.ops:
        ip, t = op.iparams, op.tensors
        if op.kind == "dense":
            x = dense(x, t["W"], t.get("b"), t["m"], ip["shift"], ip["act_min"], ip["act_max"])
        elif op.kind == "relu":
            x = [[max(v, 0) for v in row] for row in x]
        elif op.kind == "reshape":
            flat = [v for row in x for v in row]
            x = [flat[s * ip["E"] : (s + 1) * ip["E"]] for s in range(ip["S"])]
        elif op.kind == "attention":
            S, E, H = ip["S"], ip["E"], ip["H"]
            D = E // H
            q, k, v = (dense(x, t[f"W{p}"], t.get(f"b{p}"), t[f"m{p}"], ip[f"shift_{p}"],
                             -128, 127) for p in "qkv")  # fmt: skip
            hi, lo = [int(a) for a in t["lut"][0]], [int(a) for a in t["lut"][1]]
            ctx = [[0] * E for _ in range(S)]
            for h in range(H):
                cols = range(h * D, h * D + D)
                for i in range(S):
                    score = [sum(q[i][c] * k[j][c] for c in cols) for j in range(S)]
                    m = max(score)
                    e = []
                    for j in range(S):
                        idx = ((m - score[j]) * ip["M_sm"] + (1 << (ip["shift_sm"] - 1))) >> ip[
                            "shift_sm"
                        ]
                        e.append(0 if idx >= 256 else (hi[idx >> 4] * lo[idx & 15] + 8192) >> 14)
                    total = sum(e)
                    p = [((ej << 14) + (total >> 1)) // total for ej in e]
                    for c in cols:
                        acc = sum(p[j] * v[j][c] for j in range(S))
                        ctx[i][c] = rq(acc, ip["M_ctx"], ip["shift_ctx"], -128, 127)
            x = dense(ctx, t["Wo"], t.get("bo"), t["mo"], ip["shift_o"], -128, 127)
        elif op.kind == "avgpool":
            x = [[rq(sum(row[e] for row in x), ip["M"], ip["shift"], -128, 127)
                  for e in range(ip["E"])]]  # fmt: skip
    return x[0]


def test_quantize_intref_matches_scalar_transcription(iris_synth):
    _, X, _, blob = iris_synth
    xq = quantize_input(blob, X)
    rows = list(range(0, 150, 7))
    logits = run_int8(blob, xq[rows])
    for r, row in enumerate(rows):
        assert logits[r].tolist() == _scalar_int8(blob, xq[row])


# ---------------------------------------------------------------------------------------------
# float references


def test_quantize_float32_blob_reference_matches_float64(iris_synth):
    model, X, _, _ = iris_synth
    blob = read_blob(to_bytes(float32_spec(model)))
    want = forward_npz(model, model.normalize(X))
    got = run_float(blob, X)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_quantize_dequantized_float_reference_close_to_int8(iris_synth):
    model, X, _, blob = iris_synth
    f = run_float(blob, X)  # dequantized weights, float activations
    q = run_int8(blob, quantize_input(blob, X)) * blob.logit_scale
    ref = forward_npz(model, model.normalize(X))
    span = np.abs(ref).max()
    assert np.abs(f - ref).max() < 0.02 * span  # weight rounding only
    assert np.abs(q - ref).max() < 0.05 * span  # + activation rounding


def test_quantize_forward_matches_host_model_layers(tmp_path):
    """Our float64 forward (read straight from the npz) equals tinyattn.learn.model's
    Sequential.
    """
    from synth_models import save_npz

    from tinyattn.learn import model as model_mod

    model, X, _ = iris_synthetic(seed=4)
    path = save_npz(tmp_path / "m.npz", model)
    mf = model_mod.load_model(path)
    np.testing.assert_allclose(
        forward_npz(model, model.normalize(X)),
        mf.model.forward(mf.normalize(X)),
        rtol=1e-12,
        atol=1e-12,
    )


# ---------------------------------------------------------------------------------------------
# accuracy gates


def test_quantize_int8_argmax_agrees_with_float_on_synthetic_iris(iris_synth):
    """A random-weight model has tiny logit margins; int8 still agrees on nearly every sample."""
    model, X, _, blob = iris_synth
    q = run_int8(blob, quantize_input(blob, X)).argmax(axis=1)
    f = forward_npz(model, model.normalize(X)).argmax(axis=1)
    assert np.sum(q == f) >= 145


# ---------------------------------------------------------------------------------------------
# inputs the equations leave open: non-finite features, argmax ties (docs/quantization.md)

NON_FINITE = [  # (row, feature, value) -> the message both sides give
    (0, 0, float("nan"), "features must be finite numbers, not NaN or inf (feature 0 is nan)"),
    (1, 1, float("inf"), "features must be finite numbers, not NaN or inf (feature 1 is inf)"),
    (1, 0, -float("inf"), "features must be finite numbers, not NaN or inf (feature 0 is -inf)"),
]


def _three_class_spec() -> QuantModelSpec:
    """logits = [x0, x1, x1] (identity rows, M = 2, shift = 1): classes 1 and 2 always tie."""
    spec = _tiny_spec([0.0, 0.0], [1.0, 1.0], 1.0)
    spec.class_names = ["a", "b", "c"]
    op = spec.ops[0]
    op.iparams["out"] = 3
    op.tensors = {"W": np.array([[1, 0], [0, 1], [0, 1]], np.int8),
                  "s": np.ones(3, np.float32), "m": np.full(3, 2, np.int16)}  # fmt: skip
    return spec


def test_quantize_input_non_finite_feature_is_a_value_error_on_host_and_device(attention):
    """One rule (docs/quantization.md, "Input quantization"): a NaN or infinite feature is a
    ValueError naming it, the same words on the host reference (which adds the row of its
    batch) and on the device; a finite feature that overflows the arithmetic saturates."""
    spec = _tiny_spec([1.0, -2.0], [0.5, 4.0], 0.25)
    model = attention.Model(to_bytes(spec), kernels="pure")
    for row, i, value, message in NON_FINITE:
        X = np.ones((2, 2))
        X[row, i] = value
        with pytest.raises(ValueError) as host:
            quantize_input(spec, X)
        assert str(host.value) == f"row {row}: {message}"
        with pytest.raises(ValueError) as device:
            model.quantize(X[row].tolist())
        assert str(device.value) == message
    huge = [[1e308, -1e308]]  # finite: (x - mean)/std/s_in overflows to ±inf and saturates
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from an invalid cast
        assert quantize_input(spec, np.array(huge)).tolist() == [[127, -128]]
    assert list(model.quantize(huge[0])) == [127, -128]


@pytest.mark.micropython
def test_quantize_input_non_finite_feature_rule_on_micropython(tmp_path):
    from device_support import DEVICE_DIR, find

    if find("micropython") is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    path = tmp_path / "tiny.bin"
    path.write_bytes(to_bytes(_tiny_spec([1.0, -2.0], [0.5, 4.0], 0.25)))
    script = (
        "import sys\nsys.path.insert(0, sys.argv[1])\nimport attention\n"
        "m = attention.Model(sys.argv[2])\n"
        "for x in ([float('nan'), 1.0], [1.0, float('inf')], [-float('inf'), 1.0],"
        " [1e308, -1e308]):\n"
        "    try:\n        print(list(m.quantize(x)))\n"
        "    except ValueError as e:\n        print(e)\n"
    )
    proc = subprocess.run([find("micropython"), "-c", script, str(DEVICE_DIR), str(path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.stdout.splitlines() == [m for *_, m in NON_FINITE] + ["[127, -128]"], proc.stderr


def test_quantize_argmax_ties_take_the_first_maximum_on_host_and_device(attention):
    """Tie rule (docs/quantization.md): the prediction is the first class with the largest
    logit, on both paths; numpy's argmax (the host's) and the device's loops agree."""
    spec = _three_class_spec()
    model = attention.Model(to_bytes(spec), kernels="pure")
    out = model.new_logits()
    for xq, first in (([0, 0], 0), ([3, 3], 0), ([2, 5], 1), ([-4, -9], 0), ([-9, -4], 1)):
        logits = run_int8(spec, np.array([xq], np.int8))[0]
        assert int(np.argmax(logits)) == first, logits
        assert model.run_int8(array.array("b", xq), out) == first
        assert model.predict([float(v) for v in xq], "float") == first  # mean 0, std 1, s_in 1
        assert int(np.argmax(run_float(read_blob(to_bytes(spec)), np.array([xq], float)))) == first


def test_quantize_softmax_of_large_score_scales_exports():
    """The scales that once ended a search in an error (real multiplier 1.052e4, D = 6:
    diff up to 196608): the full budget has no shift, the clipped multiplier does (r >= 255.5
    is a hard max whatever r), and a small r keeps the full-budget choice, unchanged."""
    with pytest.raises(QuantizeError, match="no shift in 1..30"):
        choose_shift([1.052e4], [196608], "op 3 (res_attention) softmax")
    assert choose_softmax_shift(1.052e4, 196608, "op 3 softmax") == (16384, 4)
    M, shift = choose_shift([0.37], [196608], "softmax")
    assert choose_softmax_shift(0.37, 196608, "softmax") == (int(M[0]), shift)
    # the middle: r = 300 with D = 64 (diff up to 2**21) has no full-budget shift either;
    # clipped to r = 300 it is not (300 < 1024), and diff_max = 0 (idx(1) = 300 >= 256)
    M, shift = choose_softmax_shift(300.0, 1 << 21, "softmax")
    assert M / 2**shift == 300.0 and softmax_diff_max(1 << 21, M, shift) == 0
