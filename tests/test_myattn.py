"""Host tests: MyAttn (concat-score attention) gradients and its PyTorch oracle (DESIGN §8)."""

from __future__ import annotations

import numpy as np
import pytest

from tinyattn.learn.myattn import AttnPool, MyAttn

TUTORIAL = (32, 32, 32, 64, 32)  # query, key, value1, value2, output sizes


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b) / np.maximum(1e-8, np.abs(a) + np.abs(b))))


def _numgrad(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar f() with respect to x (modified in place)."""
    g = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = x[i]
        x[i] = old + eps
        fp = f()
        x[i] = old - eps
        fm = f()
        x[i] = old
        g[i] = (fp - fm) / (2 * eps)
    return g


@pytest.mark.host
@pytest.mark.parametrize("B", [1, 3])
def test_myattn_gradients_match_central_differences(B: int) -> None:
    rng = np.random.default_rng(B)
    layer = MyAttn(3, 2, 4, 5, 3, rng=rng)
    for name in ("ba", "bc"):
        layer.params[name][...] = rng.normal(size=layer.params[name].shape)
    q, k, v = rng.normal(size=(B, 1, 3)), rng.normal(size=(B, 1, 2)), rng.normal(size=(B, 4, 5))
    c = rng.normal(size=(B, 1, 3))  # loss = sum(out * c)

    def loss() -> float:
        return float(np.sum(layer.attend(q, k, v)[0] * c))

    layer.attend(q, k, v, training=True)
    dq, dk, dv = layer.attend_backward(c)
    for name, value, grad in layer.collect_params():
        assert _rel_err(grad.copy(), _numgrad(loss, value)) < 1e-6, name
    for x, dx in ((q, dq), (k, dk), (v, dv)):
        assert _rel_err(dx, _numgrad(loss, x)) < 1e-6


@pytest.mark.host
def test_attnpool_gradients_match_central_differences() -> None:
    rng = np.random.default_rng(7)
    layer = AttnPool(tokens=4, embed_dim=6, output_size=5, rng=rng)
    x = rng.normal(size=(3, 4, 6))
    c = rng.normal(size=(3, 5))

    def loss() -> float:
        return float(np.sum(layer.forward(x) * c))

    layer.forward(x, training=True)
    dx = layer.backward(c)
    for name, value, grad in layer.collect_params():
        assert _rel_err(grad.copy(), _numgrad(loss, value)) < 1e-6, name
    assert _rel_err(dx, _numgrad(loss, x)) < 1e-6


@pytest.mark.host
def test_myattn_inference_keeps_no_cache() -> None:
    layer = MyAttn(*TUTORIAL)
    rng = np.random.default_rng(0)
    layer.attend(
        rng.normal(size=(1, 1, 32)), rng.normal(size=(1, 1, 32)), rng.normal(size=(1, 32, 64))
    )
    assert layer._cache is None


@pytest.mark.oracle
def test_myattn_matches_pytorch_tutorial_module() -> None:
    torch = pytest.importorskip("torch", reason="PyTorch not installed (make install-oracle)")
    nn, F = torch.nn, torch.nn.functional

    class TutorialAttn(nn.Module):  # the tutorial's module, verbatim apart from the names
        def __init__(self, query_size, key_size, value_size1, value_size2, output_size):
            super().__init__()
            self.attn = nn.Linear(query_size + key_size, value_size1)
            self.attn_combine = nn.Linear(query_size + value_size2, output_size)

        def forward(self, Q, K, V):
            attn_weights = F.softmax(self.attn(torch.cat((Q[0], K[0]), 1)), dim=1)
            attn_applied = torch.bmm(attn_weights.unsqueeze(0), V)
            output = torch.cat((Q[0], attn_applied[0]), 1)
            output = self.attn_combine(output).unsqueeze(0)
            return output, attn_weights

    torch.manual_seed(0)
    twin = TutorialAttn(*TUTORIAL).double()
    ours = MyAttn(*TUTORIAL)
    ours.params["Wa"][...] = twin.attn.weight.detach().numpy()
    ours.params["ba"][...] = twin.attn.bias.detach().numpy()
    ours.params["Wc"][...] = twin.attn_combine.weight.detach().numpy()
    ours.params["bc"][...] = twin.attn_combine.bias.detach().numpy()

    Q = torch.randn(1, 1, 32, dtype=torch.float64, requires_grad=True)
    K = torch.randn(1, 1, 32, dtype=torch.float64, requires_grad=True)
    V = torch.randn(1, 32, 64, dtype=torch.float64, requires_grad=True)
    out_t, w_t = twin(Q, K, V)
    c = torch.randn_like(out_t)
    (out_t * c).sum().backward()

    # The tutorial's batch axis is axis 1 of Q/K (Q[0] is [B, q]); with B = 1 it is also ours.
    out, w = ours.attend(Q.detach().numpy(), K.detach().numpy(), V.detach().numpy(), True)
    dq, dk, dv = ours.attend_backward(c.numpy())
    assert np.max(np.abs(out - out_t.detach().numpy())) <= 1e-10
    assert np.max(np.abs(w[:, 0, :] - w_t.detach().numpy())) <= 1e-10
    for ours_g, theirs in (
        (dq, Q.grad),
        (dk, K.grad),
        (dv, V.grad),
        (ours.grads["Wa"], twin.attn.weight.grad),
        (ours.grads["ba"], twin.attn.bias.grad),
        (ours.grads["Wc"], twin.attn_combine.weight.grad),
        (ours.grads["bc"], twin.attn_combine.bias.grad),
    ):
        assert np.max(np.abs(ours_g - theirs.numpy())) <= 1e-10
