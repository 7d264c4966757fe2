"""Host (CPython): our Attention and iris-attn against PyTorch autograd (float64 oracle).

- `Attention` forward, input gradient and every parameter gradient equal
  `torch.nn.MultiheadAttention(batch_first=True)` with mapped weights (`in_proj_weight =
  [Wq; Wk; Wv]`, `in_proj_bias = [bq; bk; bv]`, `out_proj = (Wo, bo)`) to <= 1e-10.
- The whole `iris-attn` cross-entropy loss and its gradient with respect to every parameter and
  the input equal an autograd twin built from torch.nn.functional.linear, relu,
  MultiheadAttention, mean and cross_entropy.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tinyattn.learn.layers import Attention
from tinyattn.learn.losses import softmax_cross_entropy
from tinyattn.learn.model import build_model

torch = pytest.importorskip("torch", reason="PyTorch not installed; run 'make install-oracle'")

pytestmark = pytest.mark.oracle

TOL = 1e-10


def torch_mha(layer: Attention):
    """`nn.MultiheadAttention` holding a copy of `layer`'s weights (float64)."""
    mha = torch.nn.MultiheadAttention(
        layer.embed_dim, layer.num_heads, bias=layer.use_bias, batch_first=True,
        dtype=torch.float64,
    )  # fmt: skip
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.from_numpy(layer.Wqkv))
        mha.out_proj.weight.copy_(torch.from_numpy(layer.Wo))
        if layer.use_bias:
            mha.in_proj_bias.copy_(torch.from_numpy(layer.bqkv))
            mha.out_proj.bias.copy_(torch.from_numpy(layer.bo))
    return mha


@pytest.mark.parametrize(
    ("use_bias", "num_heads", "tokens", "batch"),
    list(itertools.product([True, False], [1, 2, 4], [1, 3, 6], [1, 5])),
)
def test_attention_matches_torch_multihead_attention(use_bias, num_heads, tokens, batch):
    rng = np.random.default_rng(1000 + 100 * num_heads + 10 * tokens + batch)
    E = 8
    layer = Attention(E, num_heads, use_bias, rng)
    if use_bias:
        layer.bqkv[...] = rng.normal(scale=0.5, size=3 * E)
        layer.bo[...] = rng.normal(scale=0.5, size=E)
    x = rng.normal(size=(batch, tokens, E))
    R = rng.normal(size=(batch, tokens, E))  # dL/dout for L = sum(out * R)

    out = layer.forward(x, training=True)
    dx = layer.backward(R)

    mha = torch_mha(layer)
    xt = torch.tensor(x, requires_grad=True)
    out_t, _ = mha(xt, xt, xt, need_weights=False)
    (out_t * torch.from_numpy(R)).sum().backward()

    assert np.abs(out - out_t.detach().numpy()).max() <= TOL
    assert np.abs(dx - xt.grad.numpy()).max() <= TOL
    assert np.abs(layer.gWqkv - mha.in_proj_weight.grad.numpy()).max() <= TOL
    assert np.abs(layer.gWo - mha.out_proj.weight.grad.numpy()).max() <= TOL
    if use_bias:
        assert np.abs(layer.gbqkv - mha.in_proj_bias.grad.numpy()).max() <= TOL
        assert np.abs(layer.gbo - mha.out_proj.bias.grad.numpy()).max() <= TOL


def test_iris_attn_loss_gradient_matches_autograd_twin():
    rng = np.random.default_rng(11)
    model = build_model("iris-attn", 4, 3, seed=11)
    model.theta[...] += rng.normal(scale=0.1, size=model.n_params)  # non-zero biases
    x, y = rng.normal(size=(7, 4)), rng.integers(0, 3, size=7)

    loss, dlogits = softmax_cross_entropy(model.forward(x, training=True), y)
    dx = model.backward(dlogits)

    dense1, _, reshape, attn, _, dense2 = model.layers
    leaves = {  # one autograd leaf per parameter tensor of ours, named p{i}.{name}
        f"p{i}.{name}": torch.tensor(value, requires_grad=True)
        for i, layer in enumerate(model.layers)
        for name, value, _ in layer.collect_params()
    }
    xt = torch.tensor(x, requires_grad=True)
    F = torch.nn.functional
    h = F.relu(F.linear(xt, leaves["p0.W"], leaves["p0.b"])).reshape(-1, *reshape.shape)
    a, _ = F.multi_head_attention_forward(
        h.transpose(0, 1), h.transpose(0, 1), h.transpose(0, 1), attn.embed_dim, attn.num_heads,
        None, torch.cat([leaves["p3.bq"], leaves["p3.bk"], leaves["p3.bv"]]),
        None, None, False, 0.0, leaves["p3.Wo"], leaves["p3.bo"], training=True,
        need_weights=False, use_separate_proj_weight=True,
        q_proj_weight=leaves["p3.Wq"], k_proj_weight=leaves["p3.Wk"],
        v_proj_weight=leaves["p3.Wv"],
    )  # fmt: skip  # (S, B, E), sequence-first
    logits = F.linear(a.mean(dim=0), leaves["p5.W"], leaves["p5.b"])
    loss_t = F.cross_entropy(logits, torch.from_numpy(y))
    loss_t.backward()

    assert abs(loss - loss_t.item()) <= TOL
    assert np.abs(dx - xt.grad.numpy()).max() <= TOL
    for i, layer in enumerate(model.layers):
        for name, _, grad in layer.collect_params():
            ref = leaves[f"p{i}.{name}"].grad.numpy()
            assert np.abs(grad - ref).max() <= TOL, f"p{i}.{name}"
