"""Host (CPython): the conv stem's float layer and model — gradients vs central differences,
padding.

`Conv1d` (seqlayers.py) with strides, dilations, groups (depthwise, grouped, full), with and
without ReLU and bias, on masked batches: every gradient equals central differences (float64,
as test_seq_gradcheck.py). A model with a conv stem: its whole gradient, garbage (even NaN) in
the padded steps changes no logit and no gradient bitwise, and padding a window further
changes neither beyond float64 rounding.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from test_seq_gradcheck import (
    _grads,
    assert_padding_garbage_changes_nothing,
    check_seq_layer,
    model_gradient_errors,
)

from tinyattn.learn.seqlayers import Conv1d, SeqMask
from tinyattn.learn.seqmodel import SeqAttnConfig, build_seq_model, macs, param_names

pytestmark = pytest.mark.host

CONV = SeqAttnConfig(patch=2, embed_dim=4, num_heads=2, blocks=1, ff_dim=6, stem="conv",
                     stem_width=3, stem_kernel=3, stem_dilations=(1, 2),
                     stem_stride=2)  # fmt: skip
ALONE = replace(CONV, blocks=0)  # the conv stem alone: its tokens go to the masked pool
LENGTHS = np.array([9, 1, 5, 3])  # full, one step, partly padded patches


@pytest.mark.parametrize(
    ("kernel", "stride", "dilation", "groups", "relu", "masked"),
    [
        (3, 1, 1, 1, True, False),
        (3, 2, 1, 1, False, True),
        (5, 1, 2, 6, False, True),  # depthwise, dilated
        (4, 3, 2, 2, True, True),  # grouped, even kernel, stride 3
        (1, 1, 1, 1, True, True),  # pointwise
    ],
)
def test_conv_gradients_match_central_differences(kernel, stride, dilation, groups, relu, masked):
    rng = np.random.default_rng(kernel * 10 + stride)
    layer = Conv1d(6, 6, kernel, stride, dilation, groups, relu, rng=rng)
    layer.b[...] = rng.normal(scale=0.3, size=6)
    x = rng.normal(size=(4, 9, 6))  # 9 tokens (steps with patch 1)
    mask = SeqMask.from_lengths(LENGTHS, 9, 1) if masked else None
    errors = check_seq_layer(layer, x, mask)
    assert set(errors) == {"x", "W", "b"}


def test_conv_without_bias_and_shape():
    rng = np.random.default_rng(3)
    layer = Conv1d(4, 2, 3, stride=2, use_bias=False, rng=rng)
    assert layer.forward(rng.normal(size=(2, 7, 4))).shape == (2, 4, 2)  # ceil(7/2)
    check_seq_layer(layer, rng.normal(size=(2, 7, 4)))
    with pytest.raises(ValueError, match="groups 3 must divide channels 4"):
        Conv1d(4, 6, 3, groups=3)


def test_strided_mask_counts_ceil():
    mask = SeqMask.from_lengths(np.array([9, 1, 5, 3]), 9, 2)  # tokens 5, 1, 3, 2
    m = mask.strided(2)
    assert m.tokens.sum(axis=1).tolist() == [3, 1, 2, 1]
    assert np.allclose(m.pool.sum(axis=1), 1.0)


def _model(seed: int, steps: int = 9, cfg: SeqAttnConfig = CONV):
    model = build_seq_model(steps, 2, 3, cfg, seed=seed)
    model.theta[...] += np.random.default_rng(seed).normal(scale=0.2, size=model.n_params)
    return model


def test_conv_stem_ops_names_and_macs():
    model = _model(1)
    kinds = [op["op"] for op in model.ops]
    assert kinds == ["patch_embed", "pos_add"] + ["conv"] * 4 + [
        "attention", "ff", "masked_pool", "dense"]  # fmt: skip
    assert param_names(model.ops)[2:6] == ["stem0", "stem1", "stem2", "stem3"]
    # S0 = 5 tokens of width 3, stride 2 -> 3 tokens; E = 4
    want = 5 * 2 * 2 * 3 + 3 * 3 * 3 + 3 * 3 * 3 + 3 * 3 * 3 + 3 * 4 * 3
    want += 4 * 3 * 16 + 2 * 9 * 4 + 2 * 3 * 4 * 6 + 3 * 4 + 4 * 3
    assert macs(model.ops) == want
    alone = _model(1, cfg=ALONE)
    assert [op["op"] for op in alone.ops] == kinds[:6] + ["masked_pool", "dense"]
    assert macs(alone.ops) == want - (4 * 3 * 16 + 2 * 9 * 4 + 2 * 3 * 4 * 6)


@pytest.mark.parametrize("cfg", [CONV, ALONE], ids=["with-attention", "alone"])
def test_conv_stem_model_gradients_match_central_differences(cfg):
    rng = np.random.default_rng(50)
    model = _model(50, cfg=cfg)
    x, y = rng.normal(size=(4, 9, 2)), rng.integers(0, 3, size=4)
    errors = model_gradient_errors(model, x, y, LENGTHS)
    assert {"stem0.W", "stem3.b"} <= set(errors)


@pytest.mark.parametrize("cfg", [CONV, ALONE], ids=["with-attention", "alone"])
def test_conv_stem_garbage_in_padding_changes_nothing_bitwise(cfg):
    assert_padding_garbage_changes_nothing(_model(60, steps=12, cfg=cfg))


@pytest.mark.parametrize(("patch", "stride"), list(itertools.product([1, 3], [1, 2, 3])))
def test_conv_stem_padding_further_changes_no_logit(patch, stride):
    rng = np.random.default_rng(70 + patch + stride)
    cfg = SeqAttnConfig(patch=patch, embed_dim=8, num_heads=2, blocks=1, ff_dim=16, stem="conv",
                        stem_width=4, stem_kernel=5, stem_dilations=(1, 2), stem_stride=stride)
    model = build_seq_model(24, 3, 4, cfg, seed=patch)
    model.theta[...] += rng.normal(scale=0.1, size=model.n_params)
    y = rng.integers(0, 4, size=3)
    short = rng.normal(size=(3, 10, 3))
    lengths = np.array([10, 4, 7])
    logits, grad = _grads(model, short, y, lengths)
    for T in (11, 16, 24):
        longer = rng.normal(size=(3, T, 3))
        longer[:, :10] = short
        logits2, grad2 = _grads(model, longer, y, lengths)
        assert np.abs(logits2 - logits).max() <= 1e-13 * np.abs(logits).max(), T
        assert np.abs(grad2 - grad).max() <= 1e-13 * np.abs(grad).max(), T


def _conv_blob(seed: int = 5):
    from seq_models import random_seq_case

    from tinyattn.intmodel.blob import blob_bytes, read_blob
    from tinyattn.intmodel.quantize import quantize

    cfg = SeqAttnConfig(patch=2, embed_dim=8, num_heads=2, blocks=1, ff_dim=8, stem="conv",
                        stem_width=4, stem_kernel=5, stem_dilations=(1, 3), stem_stride=3)
    npz, X, lengths, Xt, nt = random_seq_case(seed, 20, 2, 3, cfg, 60)
    return read_blob(blob_bytes(quantize(npz, X, lengths))), Xt, nt


def test_conv_stem_int8_padding_garbage_changes_no_logit():
    """The same windows padded with different garbage (huge values, NaN): identical int8
    logits, every integer (quantize_input zeroes past n; the conv taps read valid tokens)."""
    from tinyattn.intmodel.intref import quantize_input, run_int8

    blob, X, n = _conv_blob()
    ref = run_int8(blob, quantize_input(blob, X, n), n)
    rng = np.random.default_rng(1)
    pad = np.arange(X.shape[1])[None, :] >= n[:, None]
    for garbage in (rng.normal(0, 1e4, size=(int(pad.sum()), 2)), np.nan, -1e30):
        X2 = X.copy()
        X2[pad] = garbage
        assert np.array_equal(run_int8(blob, quantize_input(blob, X2, n), n), ref)


def test_conv_stem_long_window_runs_its_last_T_steps():
    """A window longer than T: the logits of its last T steps (the long window rule)."""
    from tinyattn.intmodel.intref import quantize_input, run_int8

    blob, X, _ = _conv_blob(6)
    rng = np.random.default_rng(2)
    longer = np.concatenate([rng.normal(0, 5, size=(len(X), 7, 2)), X], axis=1)  # 27 steps
    full = np.full(len(X), 20)
    want = run_int8(blob, quantize_input(blob, X, full), full)
    got_n = np.full(len(X), 27)
    assert np.array_equal(run_int8(blob, quantize_input(blob, longer, got_n), None), want)


@pytest.mark.parametrize("cfg", [CONV, ALONE], ids=["with-attention", "alone"])
def test_conv_stem_blob_macs_equal_the_model_macs_and_export_lists_each_conv(cfg):
    """export's MACs of the blob (the budget's figure after export) count the stem as
    seqmodel.macs does; its layer table has a row per conv."""
    from seq_models import random_seq_case

    from tinyattn.intmodel.blob import blob_bytes, read_blob
    from tinyattn.intmodel.export import blob_macs, layer_table
    from tinyattn.intmodel.quantize import quantize

    npz, X, lengths, _, _ = random_seq_case(2, 20, 2, 3, cfg, 1)
    blob = read_blob(blob_bytes(quantize(npz, X, lengths)))
    assert blob_macs(blob) == macs(npz.ops)
    convs = [r for r in layer_table(blob) if r["what"].startswith("conv")]
    assert len(convs) == 4 and convs[0]["what"] == "conv k3 s2 d1 g3 3->3"
