"""Host (CPython): `seq-attn` layers and model — gradients vs central differences, padding.

Gradient checks as in test_layers_gradcheck.py (float64, central differences with h = 1e-6,
`L = sum(forward(x) * R)` per layer, cross-entropy for the whole model; error per tensor
`max|analytic - numeric| / max(max|analytic|, max|numeric|)` < 1e-6), here with padding masks:
every batch mixes full windows, partly padded patches and windows of one valid step. The
attention key bias `bk` has an exactly-zero gradient (see that file) and is checked as such.

Padding never changes a logit: garbage (even NaN) in the padded steps gives bitwise identical
logits and parameter gradients; padding a window further (a longer array, more padded steps,
more padded tokens) gives the same logits and gradients to float64 rounding (sums run over more
exact zeros, which may regroup the additions: <= 1e-13 relative).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_layers_gradcheck import TOL, numeric_grad, rel_error

from tinyattn.learn.layers import Layer
from tinyattn.learn.losses import softmax_cross_entropy
from tinyattn.learn.seqlayers import (
    FeedForward,
    MaskedAvgPool,
    PatchEmbed,
    PosEmbed,
    ResidualAttention,
    SeqMask,
)
from tinyattn.learn.seqmodel import SeqAttnConfig, build_seq_model, param_names, seq_attn_ops

pytestmark = pytest.mark.host

SMALL = SeqAttnConfig(patch=3, embed_dim=4, num_heads=2, blocks=2, ff_dim=6)


def check_seq_layer(
    layer: Layer,
    x: np.ndarray,
    mask: SeqMask | None = None,
    seed: int = 0,
    zero_grads: frozenset[str] = frozenset(),
) -> dict[str, float]:
    """Relative errors of d(sum(y * R))/d(input and every parameter); all must be < TOL."""

    def fwd(training: bool = False) -> np.ndarray:
        if getattr(layer, "uses_mask", False):
            return layer.forward(x, training, mask)
        return layer.forward(x, training)

    R = np.random.default_rng(seed).normal(size=fwd().shape)
    fwd(training=True)
    dx = layer.backward(R.copy())
    analytic = {name: g.copy() for name, _, g in layer.collect_params()}

    def loss() -> float:
        return float(np.sum(fwd() * R))

    errors = {"x": rel_error(dx, numeric_grad(loss, x))}
    for name, value, _ in layer.collect_params():
        numeric = numeric_grad(loss, value)
        if name in zero_grads:
            assert np.abs(analytic[name]).max() < 1e-12, f"{name}: analytic gradient not zero"
            assert np.abs(numeric).max() < 1e-7, f"{name}: numeric gradient not zero"
            errors[name] = 0.0
        else:
            errors[name] = rel_error(analytic[name], numeric)
    bad = {k: v for k, v in errors.items() if not v < TOL}
    assert not bad, f"gradient check failed: {bad}"
    return errors


LENGTHS = np.array([7, 1, 5, 3])  # full, one step, partly padded patches (P = 2, 3)


@pytest.mark.parametrize(("patch", "masked"), list(itertools.product([1, 2, 3, 7], [False, True])))
def test_patch_embed_gradients_match_central_differences(patch, masked):
    rng = np.random.default_rng(10 + patch)
    layer = PatchEmbed(7, 3, patch, 5, rng=rng)
    layer.b[...] = rng.normal(size=5)
    x = rng.normal(size=(4, 7, 3))
    mask = SeqMask.from_lengths(LENGTHS, 7, patch) if masked else None
    errors = check_seq_layer(layer, x, mask)
    assert set(errors) == {"x", "W", "b"}


def test_patch_embed_shorter_window_gradients_match_central_differences():
    rng = np.random.default_rng(12)
    layer = PatchEmbed(9, 2, 4, 3, rng=rng)  # S_max = 3; a 6-step window has 2 tokens
    x = rng.normal(size=(2, 6, 2))
    check_seq_layer(layer, x, SeqMask.from_lengths(np.array([6, 5]), 6, 4))


def test_pos_embed_gradients_match_central_differences():
    rng = np.random.default_rng(13)
    layer = PosEmbed(5, 4, rng)
    check_seq_layer(layer, rng.normal(size=(3, 5, 4)))
    check_seq_layer(layer, rng.normal(size=(3, 2, 4)))  # fewer tokens: pos[2:] gets 0
    assert not layer.gpos[2:].any()


@pytest.mark.parametrize(
    ("use_bias", "num_heads", "masked"),
    list(itertools.product([True, False], [1, 2], [False, True])),
)
def test_residual_attention_gradients_match_central_differences(use_bias, num_heads, masked):
    rng = np.random.default_rng(20 + num_heads)
    layer = ResidualAttention(4, num_heads, use_bias, rng)
    if use_bias:
        layer.bqkv[...] = rng.normal(scale=0.5, size=12)
        layer.bo[...] = rng.normal(scale=0.5, size=4)
    x = rng.normal(size=(4, 3, 4))  # 3 tokens of P = 3 steps: LENGTHS 7, 1, 5, 3
    mask = SeqMask.from_lengths(LENGTHS, 7, 3) if masked else None
    errors = check_seq_layer(layer, x, mask, zero_grads=frozenset({"bk"}))
    assert {"x", "Wq", "Wk", "Wv", "Wo"} <= set(errors)


@pytest.mark.parametrize("use_bias", [True, False])
def test_feed_forward_gradients_match_central_differences(use_bias):
    rng = np.random.default_rng(30)
    layer = FeedForward(4, 6, use_bias, rng)
    if use_bias:
        layer.b1[...] = rng.normal(scale=0.5, size=6)
        layer.b2[...] = rng.normal(scale=0.5, size=4)
    errors = check_seq_layer(layer, rng.normal(size=(3, 5, 4)))
    assert set(errors) == {"x", "W1", "W2"} | ({"b1", "b2"} if use_bias else set())


@pytest.mark.parametrize("masked", [False, True])
def test_masked_pool_gradients_match_central_differences(masked):
    rng = np.random.default_rng(40)
    mask = SeqMask.from_lengths(LENGTHS, 7, 2) if masked else None
    check_seq_layer(MaskedAvgPool(), rng.normal(size=(4, 4, 3)), mask)


def _perturbed_model(seed: int, steps: int = 7, channels: int = 2, classes: int = 3):
    model = build_seq_model(steps, channels, classes, SMALL, seed=seed)
    model.theta[...] += np.random.default_rng(seed).normal(scale=0.2, size=model.n_params)
    return model


def model_gradient_errors(model, x, y, lengths) -> dict[str, float]:
    """Relative errors of the model's analytic gradients (input `x` and every named
    parameter) against central differences of its loss; asserts each is below TOL. Keys
    bias `.bk` (softmax-invariant) must be ~0 both ways instead."""
    _, dlogits = softmax_cross_entropy(model.forward(x, True, lengths), y)
    dx = model.backward(dlogits)
    analytic = {k: g.copy() for k, (_, g) in model.named_parameters().items()}

    def loss() -> float:
        return softmax_cross_entropy(model.forward(x, lengths=lengths), y)[0]

    errors = {"x": rel_error(dx, numeric_grad(loss, x))}
    model.grad[...] = numeric_grad(loss, model.theta)  # laid out through the views
    for key, (_, num) in model.named_parameters().items():
        if key.endswith(".bk"):
            assert np.abs(analytic[key]).max() < 1e-12 and np.abs(num).max() < 1e-7
        else:
            errors[key] = rel_error(analytic[key], num)
    bad = {k: v for k, v in errors.items() if not v < TOL}
    assert not bad, f"gradient check failed: {bad}"
    return errors


def test_seq_attn_model_gradients_match_central_differences():
    rng = np.random.default_rng(50)
    model = _perturbed_model(50)
    x, y = rng.normal(size=(4, 7, 2)), rng.integers(0, 3, size=4)
    errors = model_gradient_errors(model, x, y, LENGTHS)
    assert len(errors) == 1 + 3 + 2 * (8 - 1 + 4) + 2  # x, embed W b, pos; blocks; head


def _grads(model, x, y, lengths):
    logits = model.forward(x, True, lengths)
    model.backward(softmax_cross_entropy(logits, y)[1])
    return logits, model.grad.copy()


def test_garbage_in_padding_changes_nothing_bitwise():
    assert_padding_garbage_changes_nothing(_perturbed_model(60, steps=12))


def assert_padding_garbage_changes_nothing(model) -> None:
    """Logits and gradients of `model` (12 steps of 2 channels, 3 classes) are bitwise the same
    whatever the padded steps hold: zeros, huge values, NaN, inf."""
    rng = np.random.default_rng(60)
    x, y = rng.normal(size=(5, 12, 2)), rng.integers(0, 3, size=5)
    lengths = np.array([12, 1, 5, 9, 7])
    logits, grad = _grads(model, x, y, lengths)
    pad = np.arange(12)[None, :] >= lengths[:, None]  # (B, T) padded steps
    huge = rng.normal(scale=1e6, size=(int(pad.sum()), 2))
    for garbage in (0.0, huge, np.nan, np.inf):
        x2 = x.copy()
        x2[pad] = garbage
        logits2, grad2 = _grads(model, x2, y, lengths)
        assert np.array_equal(logits, logits2), garbage
        assert np.array_equal(grad, grad2), garbage


@pytest.mark.parametrize("patch", [1, 3, 4])
def test_padding_further_changes_no_logit_or_gradient(patch):
    rng = np.random.default_rng(70 + patch)
    cfg = SeqAttnConfig(patch=patch, embed_dim=8, num_heads=2, blocks=2, ff_dim=16)
    model = build_seq_model(24, 3, 4, cfg, seed=patch)
    model.theta[...] += rng.normal(scale=0.1, size=model.n_params)
    y = rng.integers(0, 4, size=3)
    short = rng.normal(size=(3, 10, 3))
    lengths = np.array([10, 4, 7])
    logits, grad = _grads(model, short, y, lengths)
    for T in (11, 16, 24):  # more padded steps, then more padded tokens
        longer = rng.normal(size=(3, T, 3))  # garbage everywhere past the lengths
        longer[:, :10] = short
        logits2, grad2 = _grads(model, longer, y, lengths)
        assert np.abs(logits2 - logits).max() <= 1e-13 * np.abs(logits).max(), T
        assert np.abs(grad2 - grad).max() <= 1e-13 * np.abs(grad).max(), T


def test_full_lengths_equal_no_lengths():
    rng = np.random.default_rng(80)
    model = _perturbed_model(80)
    x = rng.normal(size=(3, 7, 2))
    full = model.forward(x, lengths=np.array([7, 7, 7]))
    assert np.array_equal(full, model.forward(x))


def test_lengths_are_checked():
    model = _perturbed_model(81)
    x = np.zeros((2, 7, 2))
    with pytest.raises(ValueError, match="1..7"):
        model.forward(x, lengths=np.array([0, 7]))
    with pytest.raises(ValueError, match="2 windows"):
        model.forward(x, lengths=np.array([3]))
    with pytest.raises(ValueError, match="at most 7 steps of 2 channels"):
        model.forward(np.zeros((2, 8, 2)))


def test_float32_model_trains_in_float32_and_matches_float64():
    rng = np.random.default_rng(90)
    m64 = build_seq_model(12, 3, 4, SMALL, seed=9)
    m32 = build_seq_model(12, 3, 4, SMALL, seed=9, dtype=np.float32)
    assert m32.theta.dtype == np.float32 and np.allclose(m32.theta, m64.theta, atol=1e-7)
    x, y, lengths = rng.normal(size=(5, 12, 3)), rng.integers(0, 4, size=5), np.arange(8, 13)
    logits32, grad32 = _grads(m32, x, y, lengths)
    logits64, grad64 = _grads(m64, x, y, lengths)
    assert logits32.dtype == np.float32 and grad32.dtype == np.float32
    for layer in m32.layers:
        assert all(g.dtype == np.float32 for _, _, g in layer.collect_params())
    assert np.abs(logits32 - logits64).max() < 1e-5
    assert np.abs(grad32 - grad64).max() < 1e-5 * np.abs(grad64).max()


def test_state_dict_names_and_round_trip():
    model = _perturbed_model(100)
    state = model.state_dict()
    ops = seq_attn_ops(7, 2, 3, SMALL)
    assert [op["op"] for op in ops] == ["patch_embed", "pos_add"] + ["attention", "ff"] * 2 + [
        "masked_pool", "dense",
    ]  # fmt: skip
    assert param_names(ops)[:4] == ["embed", "pos", "block0.attn", "block0.ff"]
    named = model.named_parameters()
    assert list(named)[:4] == ["embed.W", "embed.b", "pos", "block0.attn.Wq"]
    assert "block1.ff.W2" in named and "head.W" in named
    assert np.array_equal(state["p1.pos"], named["pos"][0])
    fresh = build_seq_model(7, 2, 3, SMALL, seed=1)
    fresh.load_state_dict(state)
    x = np.random.default_rng(0).normal(size=(2, 7, 2))
    assert np.array_equal(fresh.forward(x, lengths=np.array([7, 2])),
                          model.forward(x, lengths=np.array([7, 2])))  # fmt: skip


def test_pos_embedding_has_no_weight_decay():
    model = build_seq_model(7, 2, 3, SMALL)
    pos = model.named_parameters()["pos"][0]
    start = (pos.ctypes.data - model.theta.ctypes.data) // model.theta.itemsize
    assert not model.decay_mask[start : start + pos.size].any()
    W = model.named_parameters()["block0.ff.W1"][0]
    start = (W.ctypes.data - model.theta.ctypes.data) // model.theta.itemsize
    assert model.decay_mask[start : start + W.size].all()


def test_inference_forward_keeps_no_caches():
    rng = np.random.default_rng(110)
    model = build_seq_model(7, 2, 3, SMALL)
    x, lengths = rng.normal(size=(2, 7, 2)), np.array([7, 3])
    model.forward(x, training=True, lengths=lengths)
    model.forward(x, training=False, lengths=lengths)
    for layer in model.layers:
        cached = [v for k, v in vars(layer).items() if k.startswith("_") and v is not None]
        assert not cached, f"{type(layer).__name__} kept {len(cached)} cache(s) in inference"
        with pytest.raises(RuntimeError, match="training=True"):
            layer.backward(np.zeros((2, 3)))
