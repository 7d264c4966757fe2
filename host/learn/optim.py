"""Host (CPython): optimizers over one flat parameter vector — Adam(W) and SGD with momentum.

Both update `theta` in place from `grad` (same shape, usually the flat views made by
`Sequential`), with buffers allocated once, so a step is a handful of NumPy calls whatever the
number of layers. `decay_mask` (1.0 for weights, 0.0 for biases) selects what weight decay acts
on. The learning rate can be passed per step (`step(lr)`) for schedules.

- `Adam`: Kingma & Ba (2015), "Adam: A Method for Stochastic Optimization", bias-corrected
  moments; weight decay is decoupled as in Loshchilov & Hutter (2019), "Decoupled Weight Decay
  Regularization" (AdamW) — the same update as `torch.optim.AdamW`.
- `SGD`: heavy-ball momentum with L2 weight decay added to the gradient, the same update as
  `torch.optim.SGD(momentum=..., weight_decay=...)`.
"""

from __future__ import annotations

import math

import numpy as np


class Adam:
    """Adam, decoupled decay: `theta <- theta (1 - lr wd mask) - lr m_hat / (sqrt(v_hat)+eps)`."""

    def __init__(
        self,
        theta: np.ndarray,
        grad: np.ndarray,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decay_mask: np.ndarray | None = None,
    ) -> None:
        if theta.shape != grad.shape:
            raise ValueError(f"theta {theta.shape} and grad {grad.shape} differ in shape")
        self.theta, self.grad = theta, grad
        self.lr, self.eps, self.weight_decay = lr, eps, weight_decay
        self.beta1, self.beta2 = betas
        self.decay_mask = np.ones_like(theta) if decay_mask is None else decay_mask
        self.m = np.zeros_like(theta)  # first moment
        self.v = np.zeros_like(theta)  # second moment
        self._tmp = np.empty_like(theta)
        self.t = 0

    def step(self, lr: float | None = None) -> None:
        lr = self.lr if lr is None else lr
        b1, b2, g, tmp = self.beta1, self.beta2, self.grad, self._tmp
        self.t += 1
        if self.weight_decay:
            np.multiply(self.decay_mask, lr * self.weight_decay, out=tmp)
            tmp *= self.theta
            self.theta -= tmp
        self.m *= b1
        np.multiply(g, 1.0 - b1, out=tmp)
        self.m += tmp
        self.v *= b2
        np.multiply(g, g, out=tmp)
        tmp *= 1.0 - b2
        self.v += tmp
        step_size = lr / (1.0 - b1**self.t)
        np.sqrt(self.v, out=tmp)
        tmp /= math.sqrt(1.0 - b2**self.t)
        tmp += self.eps
        np.divide(self.m, tmp, out=tmp)
        tmp *= step_size
        self.theta -= tmp


class SGD:
    """SGD with momentum: `buf <- mu buf + (g + wd mask theta)`, `theta <- theta - lr buf`."""

    def __init__(
        self,
        theta: np.ndarray,
        grad: np.ndarray,
        lr: float = 1e-2,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        decay_mask: np.ndarray | None = None,
    ) -> None:
        if theta.shape != grad.shape:
            raise ValueError(f"theta {theta.shape} and grad {grad.shape} differ in shape")
        self.theta, self.grad = theta, grad
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.decay_mask = np.ones_like(theta) if decay_mask is None else decay_mask
        self.buf = np.zeros_like(theta)  # velocity
        self._tmp = np.empty_like(theta)
        self.t = 0

    def step(self, lr: float | None = None) -> None:
        lr = self.lr if lr is None else lr
        d = self._tmp
        d[...] = self.grad
        if self.weight_decay:
            d += self.weight_decay * self.decay_mask * self.theta
        if self.momentum:
            if self.t == 0:
                self.buf[...] = d  # torch initializes the buffer with the first gradient
            else:
                self.buf *= self.momentum
                self.buf += d
            d = self.buf
        self.t += 1
        self.theta -= lr * d
