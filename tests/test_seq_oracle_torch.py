"""Host (CPython): the `seq-attn` layers and model against PyTorch autograd (float64 oracle).

- `PatchEmbed`, `ResidualAttention`, `FeedForward` and `MaskedAvgPool`: forward, input gradient
  and every parameter gradient equal a PyTorch twin (`torch.where` on padded steps +
  `F.pad` + `reshape` + `nn.Linear`; `x + nn.MultiheadAttention(batch_first=True,
  key_padding_mask=padded tokens)`; `x + Linear(relu(Linear(x)))`; a masked mean) to <= 1e-10,
  on batches with padded windows.
- The whole model's cross-entropy loss and its gradient with respect to the input and every
  parameter equal `SeqAttnTorch`, an `nn.Module` twin built from the same torch modules, with
  padding (garbage in the padded steps, which neither side may read).
`SeqAttnTorch` and the torch mask helpers live in tools/torch_twins.py (shared with
`tools/bench_train.py`, which times the twin's training: issue 11, must-show 7).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tinyattn.learn.losses import softmax_cross_entropy
from tinyattn.learn.seqlayers import (
    FeedForward,
    MaskedAvgPool,
    PatchEmbed,
    ResidualAttention,
    SeqMask,
)
from tinyattn.learn.seqmodel import SeqAttnConfig, build_seq_model

torch = pytest.importorskip("torch", reason="PyTorch not installed; run 'make install-oracle'")
from tinyattn.tools.torch_twins import (  # noqa: E402 (needs torch, skipped above without it)
    SeqAttnTorch,
    torch_masked_mean,
    torch_masks,
    torch_patches,
)

pytestmark = pytest.mark.oracle

TOL = 1e-10
F = torch.nn.functional


def _t(a: np.ndarray, grad: bool = False):
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


def _maxdiff(a: np.ndarray, b) -> float:
    return float(np.abs(a - (b.detach().numpy() if hasattr(b, "detach") else b)).max())


LENGTHS = np.array([11, 1, 6, 8, 3])


@pytest.mark.parametrize("patch", [1, 3, 4])
def test_patch_embed_matches_torch(patch):
    rng = np.random.default_rng(200 + patch)
    layer = PatchEmbed(11, 3, patch, 8, rng=rng)
    layer.b[...] = rng.normal(size=8)
    x = rng.normal(size=(5, 11, 3))
    mask = SeqMask.from_lengths(LENGTHS, 11, patch)
    R = rng.normal(size=(5, -(-11 // patch), 8))
    out = layer.forward(x, True, mask)
    dx = layer.backward(R)

    xt, W, b = _t(x, True), _t(layer.W, True), _t(layer.b, True)
    step_ok, _ = torch_masks(LENGTHS, 11, patch)
    out_t = F.linear(torch_patches(xt, step_ok, patch), W, b)
    (out_t * torch.from_numpy(R)).sum().backward()

    assert _maxdiff(out, out_t) <= TOL
    assert _maxdiff(dx, xt.grad) <= TOL
    assert _maxdiff(layer.gW, W.grad) <= TOL and _maxdiff(layer.gb, b.grad) <= TOL


@pytest.mark.parametrize(
    ("use_bias", "num_heads", "masked"),
    list(itertools.product([True, False], [1, 2, 4], [False, True])),
)
def test_residual_attention_matches_torch_mha_with_key_padding_mask(use_bias, num_heads, masked):
    rng = np.random.default_rng(300 + 10 * num_heads + masked)
    E, S, P = 8, 4, 3
    layer = ResidualAttention(E, num_heads, use_bias, rng)
    if use_bias:
        layer.bqkv[...] = rng.normal(scale=0.5, size=3 * E)
        layer.bo[...] = rng.normal(scale=0.5, size=E)
    x = rng.normal(size=(5, S, E))
    R = rng.normal(size=(5, S, E))
    mask = SeqMask.from_lengths(LENGTHS, 11, P) if masked else None
    out = layer.forward(x, True, mask)
    dx = layer.backward(R)

    mha = torch.nn.MultiheadAttention(E, num_heads, bias=use_bias, batch_first=True,
                                      dtype=torch.float64)  # fmt: skip
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.from_numpy(layer.Wqkv))
        mha.out_proj.weight.copy_(torch.from_numpy(layer.Wo))
        if use_bias:
            mha.in_proj_bias.copy_(torch.from_numpy(layer.bqkv))
            mha.out_proj.bias.copy_(torch.from_numpy(layer.bo))
    xt = _t(x, True)
    pad = ~torch_masks(LENGTHS, 11, P)[1] if masked else None
    a, _ = mha(xt, xt, xt, key_padding_mask=pad, need_weights=False)
    ((xt + a) * torch.from_numpy(R)).sum().backward()

    assert _maxdiff(out, xt + a) <= TOL
    assert _maxdiff(dx, xt.grad) <= TOL
    assert _maxdiff(layer.gWqkv, mha.in_proj_weight.grad) <= TOL
    assert _maxdiff(layer.gWo, mha.out_proj.weight.grad) <= TOL
    if use_bias:
        assert _maxdiff(layer.gbqkv, mha.in_proj_bias.grad) <= TOL
        assert _maxdiff(layer.gbo, mha.out_proj.bias.grad) <= TOL


@pytest.mark.parametrize("use_bias", [True, False])
def test_feed_forward_matches_torch(use_bias):
    rng = np.random.default_rng(400)
    layer = FeedForward(8, 16, use_bias, rng)
    if use_bias:
        layer.b1[...] = rng.normal(scale=0.5, size=16)
        layer.b2[...] = rng.normal(scale=0.5, size=8)
    x, R = rng.normal(size=(5, 4, 8)), rng.normal(size=(5, 4, 8))
    out = layer.forward(x, True)
    dx = layer.backward(R)

    xt, W1, W2 = _t(x, True), _t(layer.W1, True), _t(layer.W2, True)
    b1, b2 = (_t(layer.b1, True), _t(layer.b2, True)) if use_bias else (None, None)
    out_t = xt + F.linear(F.relu(F.linear(xt, W1, b1)), W2, b2)
    (out_t * torch.from_numpy(R)).sum().backward()

    assert _maxdiff(out, out_t) <= TOL and _maxdiff(dx, xt.grad) <= TOL
    assert _maxdiff(layer.gW1, W1.grad) <= TOL and _maxdiff(layer.gW2, W2.grad) <= TOL
    if use_bias:
        assert _maxdiff(layer.gb1, b1.grad) <= TOL and _maxdiff(layer.gb2, b2.grad) <= TOL


@pytest.mark.parametrize("masked", [False, True])
def test_masked_pool_matches_torch(masked):
    rng = np.random.default_rng(500)
    x, R = rng.normal(size=(5, 4, 8)), rng.normal(size=(5, 8))
    mask = SeqMask.from_lengths(LENGTHS, 11, 3) if masked else None
    layer = MaskedAvgPool()
    out = layer.forward(x, True, mask)
    dx = layer.backward(R)

    xt = _t(x, True)
    token_ok = torch_masks(LENGTHS if masked else [11] * 5, 11, 3)[1]
    out_t = torch_masked_mean(xt, token_ok)
    (out_t * torch.from_numpy(R)).sum().backward()
    assert _maxdiff(out, out_t) <= TOL and _maxdiff(dx, xt.grad) <= TOL


@pytest.mark.parametrize("patch", [1, 4, 5])
def test_seq_attn_loss_gradient_matches_torch_twin(patch):
    rng = np.random.default_rng(600 + patch)
    cfg = SeqAttnConfig(patch=patch, embed_dim=8, num_heads=2, blocks=2, ff_dim=16)
    model = build_seq_model(18, 3, 4, cfg, seed=patch)
    model.theta[...] += rng.normal(scale=0.1, size=model.n_params)  # non-zero biases
    x, y = rng.normal(size=(6, 18, 3)), rng.integers(0, 4, size=6)
    lengths = np.array([18, 1, 7, 12, 16, 4])
    x[np.arange(18)[None, :] >= lengths[:, None]] = 1e3  # garbage in the padded steps

    loss, dlogits = softmax_cross_entropy(model.forward(x, True, lengths), y)
    dx = model.backward(dlogits)

    twin = SeqAttnTorch(model)
    xt = _t(x, True)
    loss_t = F.cross_entropy(twin(xt, torch.from_numpy(lengths)), torch.from_numpy(y))
    loss_t.backward()

    assert abs(loss - loss_t.item()) <= TOL
    assert _maxdiff(dx, xt.grad) <= TOL
    ref = twin.named_grads()
    named = model.named_parameters()
    assert set(ref) == set(named)
    for key, (_, grad) in named.items():
        assert _maxdiff(grad, ref[key]) <= TOL, key
