# Host (CPython): the seq-attn integer path — quantizer, integer and float references (issue 11).
"""A `seq-attn` model trained in the test (fixed seed, default `SeqAttnConfig`) on BasicMotions
TRAIN, quantized on the TRAIN windows and run on the TEST file by `intref.run_int8`:
- int8 logits within a stated tolerance of the float64 model, argmax agreement, accuracy;
- the float32 blob path (`floatref.run_float`) and the float32 blob (`--float32`);
- padding invariance on the integer path: a window padded further, or with garbage (even NaN)
  past its length, gives identical int8 logits; running on `S_n` tokens equals the float
  model's masked attention and pooling (unequal lengths);
- input quantization per channel, the tail of the last patch zeroed, too-long windows refused;
- masked_pool's table, the residual add's multipliers and the budget of each new op.
"""

from __future__ import annotations

import numpy as np
import pytest
from seq_models import train_seq

from tinyattn.data.timeseries import load_ts_dataset, standardize_windows
from tinyattn.intmodel.blob import BUDGET, blob_bytes, budget_sites, read_blob
from tinyattn.intmodel.floatref import (
    fit_to_model,
    forward_seq,
    run_float,
    seq_float_ops,
)
from tinyattn.intmodel.intref import quantize_input, run_int8
from tinyattn.intmodel.quantize import (
    float32_spec,
    pool_multipliers,
    quantize,
    quantize_residual_add,
)
from tinyattn.learn.model import ModelFile
from tinyattn.learn.seqmodel import SeqAttnConfig, build_seq_model, default_max_steps

pytestmark = pytest.mark.host


def _npz(model, mean, std, class_names) -> ModelFile:
    meta = {"ops": model.ops, "class_names": list(class_names)}
    return ModelFile.from_params(meta, model.state_dict(), mean, std)


@pytest.fixture(scope="module")
def bm():
    """BasicMotions: a model trained on TRAIN (seed 0, 60 epochs, ~0.2 s), its blob, TEST."""
    train, test = load_ts_dataset("basicmotions", "train"), load_ts_dataset("basicmotions", "test")
    model, mean, std = train_seq(train.X, train.lengths, train.y, train.n_classes, epochs=60)
    npz = _npz(model, mean, std, train.class_names)
    blob = read_blob(blob_bytes(quantize(npz, train.X, train.lengths)))
    return model, npz, blob, train, test


def test_seq_int8_logits_close_to_float_on_basicmotions(bm):
    """Int8 logits (times logit_scale) within 5 % of the float logits' range, argmax equal on
    every TEST window, and int8 accuracy equal to float accuracy (>= 0.85)."""
    model, npz, blob, _, test = bm
    x = standardize_windows(test.X, test.lengths, npz.norm_mean, npz.norm_std)
    ref = model.forward(x, lengths=test.lengths)  # (40, 4) float64
    logits = run_int8(blob, quantize_input(blob, test.X, test.lengths), test.lengths)
    err = np.abs(logits * blob.logit_scale - ref).max()
    assert err <= 0.05 * np.abs(ref).max(), (err, np.abs(ref).max())
    assert np.array_equal(logits.argmax(1), ref.argmax(1))
    acc_f, acc_q = np.mean(ref.argmax(1) == test.y), np.mean(logits.argmax(1) == test.y)
    assert acc_q == acc_f >= 0.85


def test_seq_float_paths_match_the_model(bm):
    """floatref's float64 seq forward equals the model; the float32 blob within 1e-4 of it;
    the int8 blob's dequantized float32 path agrees on the argmax."""
    model, npz, blob, _, test = bm
    x = standardize_windows(test.X, test.lengths, npz.norm_mean, npz.norm_std)
    ref = model.forward(x, lengths=test.lengths)
    ours = forward_seq(seq_float_ops(npz), npz.normalize(test.X), test.lengths)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-10)
    f32 = read_blob(blob_bytes(float32_spec(npz)))
    assert not f32.quantized and [op.kind for op in f32.ops] == [op.kind for op in blob.ops]
    np.testing.assert_allclose(run_float(f32, test.X, test.lengths), ref, atol=1e-4 * 50)
    deq = run_float(blob, test.X, test.lengths)
    assert np.array_equal(deq.argmax(1), ref.argmax(1))


def test_seq_int8_padding_invariance(bm):
    """A window padded further (more steps after it) or with garbage (values, NaN) past its
    length gives identical int8 logits; so do the xq of the shorter and the longer form."""
    *_, blob, _, test = bm
    rng = np.random.default_rng(3)
    X = test.X[:8, :67]  # 67 valid steps of 100: 7 tokens, the last one 3 steps + 7 of tail
    n = np.full(8, 67)
    base = run_int8(blob, quantize_input(blob, X, n), n)
    garbage = test.X[:8].copy()
    garbage[:, 67:] = rng.normal(0, 1e3, size=garbage[:, 67:].shape)
    garbage[0, 80, 2] = np.nan
    xq = quantize_input(blob, garbage, n)
    assert not xq[:, 67 * 6 :].any()  # the tail of patch 6 and every later patch read as 0
    np.testing.assert_array_equal(xq, quantize_input(blob, X, n))
    np.testing.assert_array_equal(run_int8(blob, xq, n), base)
    # the integer path ignores whatever xq holds past the valid tokens (never computed)
    xq[:, 70 * 6 :] = rng.integers(-128, 128, size=xq[:, 70 * 6 :].shape)
    np.testing.assert_array_equal(run_int8(blob, xq, n), base)


def test_seq_masking_equals_the_float_model_on_unequal_lengths():
    """JapaneseVowels (7..26 steps): int8 on S_n tokens agrees with the float model's masked
    forward on every TEST window; longer ones run their last T steps (the long window rule),
    the same whether the caller cuts them (`fit_to_model`) or the reference does."""
    train, test = (load_ts_dataset("japanesevowels", s) for s in ("train", "test"))
    cfg = SeqAttnConfig(patch=3)
    T = default_max_steps(train.lengths, cfg.patch)
    assert T == 27 and test.lengths.max() == 29 > T
    model, mean, std = train_seq(train.X, train.lengths, train.y, 9, cfg, epochs=15)
    npz = _npz(model, mean, std, train.class_names)
    blob = read_blob(blob_bytes(quantize(npz, train.X, train.lengths)))
    with pytest.raises(ValueError, match=r"window \d+ has 29 steps, the model takes 1..27"):
        run_int8(blob, quantize_input(blob, test.X, test.lengths), test.lengths)  # xq: <= T
    X, n, cut = fit_to_model(test.X, test.lengths, T)
    assert cut == int(np.sum(test.lengths > T)) > 0
    long = int(np.argmax(test.lengths))
    np.testing.assert_array_equal(X[long, :T], test.X[long, 29 - T : 29])  # the last T steps
    np.testing.assert_array_equal(quantize_input(blob, test.X, test.lengths),
                                  quantize_input(blob, X, n))  # fmt: skip
    ref = model.forward(standardize_windows(X, n, mean, std), lengths=n)
    ours = forward_seq(seq_float_ops(npz), npz.normalize(X, n), n)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-10)
    logits = run_int8(blob, quantize_input(blob, X, n), n)
    assert np.mean(logits.argmax(1) == ref.argmax(1)) >= 0.97
    err = np.abs(logits * blob.logit_scale - ref).max()
    assert err <= 0.08 * np.abs(ref).max(), err


def test_seq_input_quantization_per_channel():
    """xq[t·C + c] uses mean[c], std[c]; n need not be a multiple of P."""
    model = build_seq_model(10, 3, 2, SeqAttnConfig(patch=4, embed_dim=8, ff_dim=8), seed=1)
    mean, std = np.array([1.0, -2.0, 10.0]), np.array([0.5, 2.0, 4.0])
    npz = _npz(model, mean, std, ["a", "b"])
    rng = np.random.default_rng(0)
    X = rng.normal(mean, std, size=(20, 10, 3))
    blob = read_blob(blob_bytes(quantize(npz, X)))
    assert blob.ops[0].tensors["b"].shape == (3, 8)  # S = ceil(10/4) tokens
    x = X[:1, :5]  # 5 steps: tokens 0, 1 (steps 4..7, only 4 valid)
    xq = quantize_input(blob, x, np.array([5]))
    assert xq.shape == (1, 12 * 3)
    s = float(np.float32(blob.input_scale))
    m32, s32 = (np.asarray(v, np.float32).astype(np.float64) for v in (mean, std))
    want = np.clip(np.floor((x[0] - m32) / s32 / s + 0.5), -128, 127).ravel()
    np.testing.assert_array_equal(xq[0, :15], want)
    assert not xq[0, 15:].any()
    with pytest.raises(ValueError, match="feature 4 is nan"):
        bad = x.copy()
        bad[0, 1, 1] = np.nan
        quantize_input(blob, bad, np.array([5]))


def test_seq_pool_table_and_residual_add_multipliers():
    m, shift = pool_multipliers(10, "pool")
    assert shift == 14 and m[0] == 16384
    np.testing.assert_array_equal(m, np.rint(16384 / np.arange(1, 11)).astype(np.int16))
    add = quantize_residual_add(0.02, 0.05, 0.04, "block")
    r = np.array([add["M_x"], add["M_a"]]) / 2.0 ** add["shift_add"]
    np.testing.assert_allclose(r, [0.5, 1.25], rtol=1e-4)
    assert max(add["M_x"], add["M_a"]) < 2**15 <= 2 * max(add["M_x"], add["M_a"])
    assert 128 * (add["M_x"] + add["M_a"]) + (1 << (add["shift_add"] - 1)) < BUDGET


def test_seq_exported_blob_passes_every_budget_site(bm):
    """The quantizer's choice leaves every site of every new op inside the budget."""
    *_, blob, _, _ = bm
    kinds = [op.kind for op in blob.ops]
    assert kinds == ["embed"] + ["res_attention", "res_ff"] * 2 + ["masked_pool", "dense"]
    for op in blob.ops:
        for _, max_acc, M, shift in budget_sites(op):
            assert np.all(max_acc * M + (1 << (shift - 1)) < BUDGET)
