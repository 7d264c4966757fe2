"""Host (CPython): softmax cross-entropy, numerically stable, with its gradient.

`loss = -mean_b log softmax(logits_b)[y_b]` computed as `logsumexp(z) - z[y]` on `z = logits -
max(logits)`, so no `exp` overflows and no `log(0)` occurs. The gradient with respect to the
logits is `(softmax(z) - onehot(y)) / B`.

Reference: Goodfellow, Bengio, Courville, "Deep Learning" (2016), §6.2.2.3 and §4.1 (softmax,
log-sum-exp).
"""

from __future__ import annotations

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of `[B, C]` (subtracts the row max first)."""
    z = logits - logits.max(axis=-1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=-1, keepdims=True)
    return z


def softmax_cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy of `logits [B, C]` for int labels `y [B]`: (loss, dlogits)."""
    B = logits.shape[0]
    rows = np.arange(B)
    z = logits - logits.max(axis=1, keepdims=True)  # (B, C), max entry 0
    p = np.exp(z)
    total = p.sum(axis=1, keepdims=True)  # (B, 1), >= 1
    loss = float(np.log(total[:, 0]).sum() - z[rows, y].sum()) / B
    p /= total  # softmax
    p[rows, y] -= 1.0
    p /= B
    return loss, p  # dlogits (B, C)
