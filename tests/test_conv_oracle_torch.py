"""Host (CPython): the conv stem's `Conv1d` against PyTorch autograd (float64 oracle).

`torch.nn.functional.conv1d` with `groups`, `dilation`, `stride` and the centred zero padding
(`F.pad` left `(K-1)·d // 2`, right up to `ceil(S/s)` outputs), on inputs whose padded tokens
are selected to 0 (`torch.where`): forward, input gradient and parameter gradients <= 1e-10.
"""

from __future__ import annotations

import numpy as np
import pytest

from tinyattn.learn.seqlayers import Conv1d, SeqMask

torch = pytest.importorskip("torch", reason="PyTorch not installed; run 'make install-oracle'")

pytestmark = pytest.mark.oracle

TOL = 1e-10
F = torch.nn.functional
LENGTHS = np.array([11, 1, 6, 8, 3])


def _maxdiff(a: np.ndarray, b) -> float:
    return float(np.abs(a - b.detach().numpy()).max())


@pytest.mark.parametrize(
    ("channels", "filters", "kernel", "stride", "dilation", "groups", "relu"),
    [
        (3, 5, 3, 1, 1, 1, True),
        (4, 4, 5, 2, 2, 4, False),  # depthwise, dilated, strided
        (4, 6, 4, 3, 1, 2, True),  # grouped, even kernel
        (6, 2, 1, 1, 1, 1, True),  # pointwise
        (2, 2, 7, 4, 3, 2, False),
    ],
)
def test_conv_matches_torch_conv1d(channels, filters, kernel, stride, dilation, groups, relu):
    rng = np.random.default_rng(kernel * 7 + stride)
    layer = Conv1d(channels, filters, kernel, stride, dilation, groups, relu, rng=rng)
    layer.b[...] = rng.normal(scale=0.3, size=filters)
    x = rng.normal(size=(5, 11, channels))
    mask = SeqMask.from_lengths(LENGTHS, 11, 1)
    S_out = -(-11 // stride)
    R = rng.normal(size=(5, S_out, filters))
    out = layer.forward(x, True, mask)
    dx = layer.backward(R)

    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    W = torch.tensor(layer.W.reshape(filters, channels // groups, kernel), requires_grad=True)
    b = torch.tensor(layer.b, requires_grad=True)
    ok = torch.from_numpy(mask.tokens)[:, :, None]
    xin = torch.where(ok, xt, torch.zeros(())).transpose(1, 2)  # (B, C, S)
    left = (kernel - 1) * dilation // 2
    right = max(0, (S_out - 1) * stride + (kernel - 1) * dilation + 1 - left - 11)
    y = F.conv1d(F.pad(xin, (left, right)), W, b, stride=stride, dilation=dilation,
                 groups=groups)[:, :, :S_out].transpose(1, 2)  # fmt: skip
    if relu:
        y = torch.relu(y)
    (y * torch.from_numpy(R)).sum().backward()

    assert out.shape == tuple(y.shape)
    assert _maxdiff(out, y) <= TOL
    assert _maxdiff(dx, xt.grad) <= TOL
    assert _maxdiff(layer.gW, W.grad.reshape(filters, -1)) <= TOL
    assert _maxdiff(layer.gb, b.grad) <= TOL
