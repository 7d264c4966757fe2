"""Host (CPython): the conv stem's batch norm (training only) and its fold into the convs.

`BatchNorm` against PyTorch's `batch_norm` over the valid tokens (float64 oracle, <= 1e-10),
the whole model's gradients against central differences, and `fold_batch_norm`: the folded
model (no norm op, the plain conv stem's ops) gives the norm model's logits, and `train_seq`
returns it, exportable to int8.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from test_layers_gradcheck import TOL, numeric_grad, rel_error
from test_seq_gradcheck import assert_padding_garbage_changes_nothing

from tinyattn.intmodel.quantize import quantize
from tinyattn.learn.losses import softmax_cross_entropy
from tinyattn.learn.seqlayers import BatchNorm, SeqMask
from tinyattn.learn.seqmodel import (
    SeqAttnConfig,
    build_seq_model,
    fold_batch_norm,
    macs,
    seq_attn_ops,
)
from tinyattn.learn.seqtrain import train_seq
from tinyattn.learn.train import TrainConfig, npz_model

NORM = SeqAttnConfig(patch=2, embed_dim=4, num_heads=2, blocks=1, ff_dim=6, stem="conv",
                     stem_width=3, stem_kernel=3, stem_stride=2, stem_dilations=(1, 2),
                     stem_norm=True)  # fmt: skip
ALONE = replace(NORM, blocks=0)
LENGTHS = np.array([9, 1, 6, 4])


def _model(seed: int, cfg: SeqAttnConfig = NORM, steps: int = 9):
    rng = np.random.default_rng(seed)
    model = build_seq_model(steps, 2, 3, cfg, seed=seed)
    model.theta[...] += rng.normal(scale=0.2, size=model.n_params)
    return model


def _collect(model, on: bool = True) -> None:
    for layer in model.layers:
        if isinstance(layer, BatchNorm):
            layer.collect = on


def test_norm_ops_sit_after_the_embedding_and_each_conv_and_cost_nothing():
    ops = seq_attn_ops(9, 2, 3, NORM)
    kinds = [op["op"] for op in ops]
    conv = ["conv", "batch_norm"]
    assert kinds == ["patch_embed", "pos_add", "batch_norm"] + conv * 4 + [
        "attention", "ff", "masked_pool", "dense"]  # fmt: skip
    assert [op["relu"] for op in ops if op["op"] == "batch_norm"] == [False] + [False, True] * 2
    assert not any(op["relu"] for op in ops if op["op"] == "conv")
    assert macs(ops) == macs(seq_attn_ops(9, 2, 3, replace(NORM, stem_norm=False)))
    with pytest.raises(ValueError, match="stem_norm: a conv stem with biases"):
        SeqAttnConfig(stem_norm=True)
    with pytest.raises(ValueError, match="stem_norm: a conv stem with biases"):
        replace(NORM, bias=False)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("relu", [False, True])
def test_batch_norm_matches_torch_over_the_valid_tokens(masked, relu):
    torch = pytest.importorskip("torch", reason="PyTorch not installed; run 'make install-oracle'")
    rng = np.random.default_rng(3 + masked + 2 * relu)
    layer = BatchNorm(5, relu)
    layer.gamma[...] = rng.uniform(0.5, 2.0, 5)
    layer.beta[...] = rng.normal(size=5)
    x = rng.normal(size=(4, 6, 5)) * 3 + 1
    mask = SeqMask.from_lengths(np.array([6, 1, 4, 2]), 6, 1) if masked else None
    R = rng.normal(size=x.shape)
    out = layer.forward(x, True, mask)
    dx = layer.backward(R)

    ok = np.ones((4, 6), bool) if mask is None else mask.tokens
    xt = torch.tensor(x, requires_grad=True)
    g = torch.tensor(layer.gamma, requires_grad=True)
    b = torch.tensor(layer.beta, requires_grad=True)
    sel = torch.from_numpy(ok)
    valid = xt[sel]  # (n, 5): the valid tokens
    y = torch.nn.functional.batch_norm(valid, None, None, g, b, training=True, eps=1e-5)
    if relu:
        y = torch.relu(y)
    (y * torch.from_numpy(R[ok])).sum().backward()
    assert np.abs(out[ok] - y.detach().numpy()).max() <= 1e-10
    assert np.abs(dx - xt.grad.numpy()).max() <= 1e-10
    assert np.abs(dx[~ok]).max(initial=0.0) == 0.0  # padded tokens get no gradient
    assert np.abs(layer.ggamma - g.grad.numpy()).max() <= 1e-10
    assert np.abs(layer.gbeta - b.grad.numpy()).max() <= 1e-10
    n = ok.sum()  # running statistics move 0.1 of the way, the variance unbiased (PyTorch's)
    assert np.allclose(layer.mean, 0.1 * x[ok].mean(axis=0), atol=1e-12)
    assert np.allclose(layer.var, 0.9 + 0.1 * x[ok].var(axis=0) * n / (n - 1), atol=1e-12)


@pytest.mark.parametrize("cfg", [NORM, ALONE], ids=["with-attention", "alone"])
def test_norm_model_gradients_match_central_differences(cfg):
    """As test_seq_gradcheck.model_gradient_errors, except that a bias a norm removes (the one
    before it, or a beta before a conv and its norm) has gradient 0: both ways ~0."""
    rng = np.random.default_rng(50)
    model = _model(50, cfg)
    _collect(model)  # the loss of the batch's own statistics, as training computes it
    x, y = rng.normal(size=(4, 9, 2)), rng.integers(0, 3, size=4)
    _, dlogits = softmax_cross_entropy(model.forward(x, True, LENGTHS), y)
    dx = model.backward(dlogits)
    analytic = {k: g.copy() for k, (_, g) in model.named_parameters().items()}

    def loss() -> float:
        return softmax_cross_entropy(model.forward(x, lengths=LENGTHS), y)[0]

    assert rel_error(dx, numeric_grad(loss, x)) < TOL
    model.grad[...] = numeric_grad(loss, model.theta)
    zero = []
    for key, (_, num) in model.named_parameters().items():
        if np.abs(num).max() < 1e-8:
            assert np.abs(analytic[key]).max() < 1e-12, key
            zero.append(key)
        else:
            assert rel_error(analytic[key], num) < TOL, key
    assert "embed.b" in zero and "stem0.b" in zero and "norm2.gamma" not in zero


@pytest.mark.parametrize("cfg", [NORM, ALONE], ids=["with-attention", "alone"])
def test_fold_gives_the_norm_models_logits_with_the_plain_stems_ops(cfg):
    rng = np.random.default_rng(7)
    model = _model(7, cfg, steps=12)
    assert_padding_garbage_changes_nothing(model)  # the norms' statistics skip padded tokens
    x = rng.normal(size=(6, 12, 2)) * 2
    lengths = np.array([12, 3, 7, 1, 9, 5])
    for _ in range(3):  # running statistics away from their start
        model.forward(x, True, lengths)
    folded = fold_batch_norm(model, x, lengths)
    _collect(model)
    want = model.forward(x, lengths=lengths)  # the norms on these windows' statistics
    got = folded.forward(x, lengths=lengths)
    assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max()
    plain = seq_attn_ops(12, 2, 3, replace(cfg, stem_norm=False))
    assert folded.ops == plain
    assert fold_batch_norm(folded, x, lengths) is folded  # nothing to fold
    assert_padding_garbage_changes_nothing(folded)


def test_train_seq_returns_the_folded_model_and_it_exports():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(24, 12, 2))
    X[:12, :, 0] += np.linspace(0, 2, 12)  # a class that rises
    y = np.repeat([0, 1], 12)
    lengths = rng.integers(4, 13, size=24)
    cfg = replace(ALONE, embed_dim=3)
    res = train_seq(X, lengths, y, 2, cfg, TrainConfig(epochs=5, batch_size=8, seed=1))
    assert [op["op"] for op in res.model.ops] == [
        op["op"] for op in seq_attn_ops(12, 2, 2, replace(cfg, stem_norm=False))]  # fmt: skip
    spec = quantize(npz_model(res, ["a", "b"]), X, lengths)
    assert [op.kind for op in spec.ops][:5] == ["embed", "conv", "conv", "conv", "conv"]
