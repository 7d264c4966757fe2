"""Host (CPython): analytic backward vs float64 central differences for every layer and the model.

Each check perturbs every element of every parameter and of the input by ±h and compares
`(L(+h) - L(-h)) / 2h` with the backward pass, where `L = sum(forward(x) * R)` for a fixed random
`R` (so every output element gets a distinct weight) or, for the whole model, the cross-entropy
loss. Error measure per tensor: `max|analytic - numeric| / max(max|analytic|, max|numeric|)`,
required below 1e-6 (central differences with h = 1e-6 are accurate to ~1e-9 here).

One gradient is zero in exact arithmetic: the attention key bias `bk` (adding the same vector to
every key adds a constant to each query's row of scores, which the softmax ignores). Its numeric
estimate is pure rounding noise, so a ratio is meaningless there; the test asserts instead that
the analytic gradient is zero (< 1e-12) and the numeric one is noise-sized (< 1e-7).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tinyattn.learn.layers import ActivationLayer, Attention, Dense, GlobalAvgPool, Layer, Reshape
from tinyattn.learn.losses import softmax_cross_entropy
from tinyattn.learn.model import build_model

pytestmark = pytest.mark.host

H_STEP = 1e-6
TOL = 1e-6


def rel_error(analytic: np.ndarray, numeric: np.ndarray) -> float:
    scale = max(np.abs(analytic).max(), np.abs(numeric).max(), 1e-300)
    return float(np.abs(analytic - numeric).max() / scale)


def numeric_grad(loss_fn, array: np.ndarray) -> np.ndarray:
    """Central differences of `loss_fn()` with respect to `array`, perturbed in place."""
    grad = np.empty_like(array)
    flat, gflat = array.reshape(-1), grad.reshape(-1)  # views (array is contiguous)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + H_STEP
        up = loss_fn()
        flat[i] = old - H_STEP
        down = loss_fn()
        flat[i] = old
        gflat[i] = (up - down) / (2 * H_STEP)
    return grad


def check_layer(
    layer: Layer, x: np.ndarray, seed: int = 0, zero_grads: frozenset[str] = frozenset()
) -> dict[str, float]:
    """Relative errors of d(sum(y * R))/d(input and every parameter); all must be < TOL.

    `zero_grads` names parameters whose exact gradient is 0 (checked in absolute terms)."""
    R = np.random.default_rng(seed).normal(size=layer.forward(x).shape)
    y = layer.forward(x, training=True)
    dx = layer.backward(R.copy())
    analytic = {name: g.copy() for name, _, g in layer.collect_params()}

    def loss() -> float:
        return float(np.sum(layer.forward(x) * R))

    errors = {"x": rel_error(dx, numeric_grad(loss, x))}
    for name, value, _ in layer.collect_params():
        if not value.flags.c_contiguous:  # perturb through the contiguous storage view
            raise AssertionError(f"{name} is not contiguous")
        numeric = numeric_grad(loss, value)
        if name in zero_grads:
            assert np.abs(analytic[name]).max() < 1e-12, f"{name}: analytic gradient not zero"
            assert np.abs(numeric).max() < 1e-7, f"{name}: numeric gradient not zero"
            errors[name] = 0.0
        else:
            errors[name] = rel_error(analytic[name], numeric)
    assert y.shape == R.shape
    bad = {k: v for k, v in errors.items() if not v < TOL}
    assert not bad, f"gradient check failed: {bad}"
    return errors


@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("shape", [(5, 3), (2, 4, 3)])
def test_dense_gradients_match_central_differences(use_bias, shape):
    rng = np.random.default_rng(1)
    layer = Dense(3, 6, use_bias, rng)
    if use_bias:
        layer.b[...] = rng.normal(size=6)
    errors = check_layer(layer, rng.normal(size=shape))
    assert set(errors) == ({"x", "W", "b"} if use_bias else {"x", "W"})


@pytest.mark.parametrize("kind", ActivationLayer.KINDS)
def test_activation_gradients_match_central_differences(kind):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 7))
    x += np.sign(x) * 0.05  # keep ReLU's inputs away from its kink at 0
    check_layer(ActivationLayer(kind), x)


@pytest.mark.parametrize(
    ("use_bias", "num_heads", "tokens", "batch"),
    list(itertools.product([True, False], [1, 2, 4], [1, 3, 6], [1, 5])),
)
def test_attention_gradients_match_central_differences(use_bias, num_heads, tokens, batch):
    rng = np.random.default_rng(100 * num_heads + 10 * tokens + batch)
    embed_dim = 4
    layer = Attention(embed_dim, num_heads, use_bias, rng)
    if use_bias:  # non-zero biases so their gradients are exercised in context
        layer.bqkv[...] = rng.normal(scale=0.5, size=3 * embed_dim)
        layer.bo[...] = rng.normal(scale=0.5, size=embed_dim)
    x = rng.normal(size=(batch, tokens, embed_dim))
    errors = check_layer(layer, x, zero_grads=frozenset({"bk"}))
    names = {"x", "Wq", "Wk", "Wv", "Wo"} | ({"bq", "bk", "bv", "bo"} if use_bias else set())
    assert set(errors) == names


def test_avgpool_gradients_match_central_differences():
    check_layer(GlobalAvgPool(), np.random.default_rng(3).normal(size=(3, 5, 4)))


def test_reshape_gradients_match_central_differences():
    layer = Reshape([4, 2])
    x = np.random.default_rng(4).normal(size=(3, 8))
    assert layer.forward(x).shape == (3, 4, 2)
    check_layer(layer, x)


def test_loss_gradient_matches_central_differences():
    rng = np.random.default_rng(5)
    logits, y = rng.normal(size=(6, 3)) * 3, rng.integers(0, 3, size=6)
    _, dlogits = softmax_cross_entropy(logits, y)
    numeric = numeric_grad(lambda: softmax_cross_entropy(logits, y)[0], logits)
    assert rel_error(dlogits, numeric) < TOL


def test_iris_attn_model_gradients_match_central_differences():
    rng = np.random.default_rng(6)
    model = build_model("iris-attn", 4, 3, seed=6)
    model.theta[...] += rng.normal(scale=0.1, size=model.n_params)  # non-zero biases too
    x, y = rng.normal(size=(5, 4)), rng.integers(0, 3, size=5)
    _, dlogits = softmax_cross_entropy(model.forward(x, training=True), y)
    dx = model.backward(dlogits)
    analytic = model.grad.copy()

    def loss() -> float:
        return softmax_cross_entropy(model.forward(x), y)[0]

    assert rel_error(dx, numeric_grad(loss, x)) < TOL
    numeric = numeric_grad(loss, model.theta)  # every parameter of every layer
    model.grad[...] = numeric  # lay the numeric gradient out through the layers' views
    for i, layer in enumerate(model.layers):
        for name, _, num in layer.collect_params():
            start = (num.ctypes.data - model.grad.ctypes.data) // model.grad.itemsize
            ana = analytic[start : start + num.size].reshape(num.shape)
            if name == "bk":
                assert np.abs(ana).max() < 1e-12 and np.abs(num).max() < 1e-7
            else:
                assert rel_error(ana, num) < TOL, f"p{i}.{name}: {rel_error(ana, num):.2e}"


def test_inference_forward_keeps_no_caches():
    rng = np.random.default_rng(7)
    model = build_model("iris-attn", 4, 3)
    model.forward(rng.normal(size=(2, 4)), training=True)
    model.forward(rng.normal(size=(2, 4)), training=False)
    for layer in model.layers:
        cached = [v for k, v in vars(layer).items() if k.startswith("_") and v is not None]
        assert not cached, f"{type(layer).__name__} kept {len(cached)} cache(s) in inference"
        with pytest.raises(RuntimeError, match="training=True"):
            layer.backward(np.zeros((2, 3)))
