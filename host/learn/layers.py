"""Host (CPython): NumPy layers with forward and backward side by side (DESIGN §3).

Every layer computes `y = forward(x, training)` and, after a training forward, `dx = backward(dy)`,
which also writes the parameter gradients. Batch and heads are vectorized (no Python loop over
samples or heads). Caches needed only for backward are kept when `training=True` and dropped
otherwise, so inference keeps nothing.

Parameters live in `layer.params` (storage name -> array) with gradients of the same shape in
`layer.grads`; `collect_params()` returns the public `(name, value, grad)` groups named as in
`docs/model-format.md` (views into the storage, so an optimizer may update either in place).
`Sequential` (model.py) re-binds the storage to views of one flat vector with `bind`, so the
optimizer updates all parameters in a handful of NumPy calls.

Conventions: weights `[out, in]`, `y = x @ W.T + b`, `dx = dy @ W`, `dW = dy.T @ x`.

References:
- Vaswani et al. (2017), "Attention Is All You Need" — scaled dot-product, multi-head attention.
- PyTorch `torch.nn.MultiheadAttention` (packed `in_proj_weight = [Wq; Wk; Wv]`, the layout kept
  here as `Wqkv`) and `torch.nn.GELU(approximate="tanh")`.
- Glorot & Bengio (2010), Xavier-uniform initialization.
- karpathy/micrograd, karpathy/nanoGPT `model.py` (layout of forward/backward and names).
"""

from __future__ import annotations

import math

import numpy as np


def xavier_uniform(rng: np.random.Generator, n_out: int, n_in: int) -> np.ndarray:
    """Glorot-uniform `[n_out, n_in]`: U(-a, a) with `a = sqrt(6 / (n_in + n_out))`."""
    a = math.sqrt(6.0 / (n_in + n_out))
    return rng.uniform(-a, a, size=(n_out, n_in))


class Layer:
    """Base class: no parameters, forward/backward to be defined by subclasses."""

    def __init__(self) -> None:
        self.params: dict[str, np.ndarray] = {}  # storage name -> value
        self.grads: dict[str, np.ndarray] = {}  # storage name -> gradient (same shape)

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        raise NotImplementedError

    def backward(self, dy: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def collect_params(self) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """Public `(name, value, grad)` groups, named as in docs/model-format.md."""
        return [(name, self.params[name], self.grads[name]) for name in self.params]

    def bind(self, values: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None:
        """Swap the storage for `values`/`grads` (same shapes), e.g. views of a flat vector."""
        for name in self.params:
            values[name][...] = self.params[name]
            grads[name][...] = self.grads[name]
        self.params, self.grads = values, grads
        self._refresh()

    def _refresh(self) -> None:
        """Re-derive attribute shortcuts after `bind` (layers with parameters override)."""

    def _need_cache(self, cache):
        if cache is None:
            raise RuntimeError(
                f"{type(self).__name__}.backward called without a cache; "
                "run forward(x, training=True) first"
            )
        return cache


class Dense(Layer):
    """`y = x @ W.T + b` on the last axis: `[..., in] -> [..., out]`."""

    def __init__(
        self,
        n_in: int,
        n_out: int,
        use_bias: bool = True,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__()
        self.n_in, self.n_out, self.use_bias = n_in, n_out, use_bias
        rng = rng if rng is not None else np.random.default_rng(0)
        self.params["W"] = xavier_uniform(rng, n_out, n_in)  # (out, in)
        self.grads["W"] = np.zeros((n_out, n_in))
        if use_bias:
            self.params["b"] = np.zeros(n_out)  # (out,)
            self.grads["b"] = np.zeros(n_out)
        self._x: np.ndarray | None = None
        self._refresh()

    def _refresh(self) -> None:
        self.W, self.gW = self.params["W"], self.grads["W"]
        self.b = self.params.get("b")
        self.gb = self.grads.get("b")

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        y = x.reshape(-1, self.n_in) @ self.W.T  # (N, out), one BLAS call
        if self.use_bias:
            y += self.b
        self._x = x if training else None
        return y.reshape(*x.shape[:-1], self.n_out)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        x = self._need_cache(self._x)
        x2 = x.reshape(-1, self.n_in)  # (N, in)
        dy2 = dy.reshape(-1, self.n_out)  # (N, out)
        np.matmul(dy2.T, x2, out=self.gW)  # (out, in)
        if self.use_bias:
            np.sum(dy2, axis=0, out=self.gb)  # (out,)
        return (dy2 @ self.W).reshape(x.shape)  # (..., in)


_GELU_C = math.sqrt(2.0 / math.pi)


class ActivationLayer(Layer):
    """Elementwise activation: `relu`, `sigmoid`, `tanh` or `gelu` (tanh approximation)."""

    KINDS = ("relu", "sigmoid", "tanh", "gelu")

    def __init__(self, kind: str = "relu") -> None:
        super().__init__()
        if kind not in self.KINDS:
            raise ValueError(f"unknown activation {kind!r}; choose one of {', '.join(self.KINDS)}")
        self.kind = kind
        self._cache: tuple[np.ndarray, ...] | None = None

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        if self.kind == "relu":
            y = np.maximum(x, 0.0)
            cache = (y,)
        elif self.kind == "sigmoid":
            y = 0.5 * (1.0 + np.tanh(0.5 * x))  # = 1 / (1 + exp(-x)), without overflow
            cache = (y,)
        elif self.kind == "tanh":
            y = np.tanh(x)
            cache = (y,)
        else:  # gelu: 0.5 x (1 + tanh(c (x + 0.044715 x^3)))
            t = np.tanh(_GELU_C * (x + 0.044715 * x**3))
            y = 0.5 * x * (1.0 + t)
            cache = (x, t)
        self._cache = cache if training else None
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        cache = self._need_cache(self._cache)
        if self.kind == "relu":
            (y,) = cache
            return dy * (y > 0.0)
        if self.kind == "sigmoid":
            (y,) = cache
            return dy * y * (1.0 - y)
        if self.kind == "tanh":
            (y,) = cache
            return dy * (1.0 - y * y)
        x, t = cache
        du_dx = _GELU_C * (1.0 + 3.0 * 0.044715 * x * x)
        return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx)


class Attention(Layer):
    """Multi-head self-attention `[B, S, E] -> [B, S, E]` exactly as DESIGN §3.

    `Q = x @ Wq.T + bq` (same for K, V), head `h` is columns `h*D:(h+1)*D` with `D = E/H`,
    `A_h = softmax(Q_h K_h^T / sqrt(D))`, `ctx_h = A_h V_h`, `out = ctx @ Wo.T + bo`.
    Wq, Wk, Wv are stored packed as `Wqkv [3E, E]` (PyTorch's `in_proj_weight`) so Q, K and V
    come out of one matmul; `collect_params` exposes them as views named Wq, Wk, Wv.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        use_bias: bool = True,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(
                f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}; "
                "pick num_heads that divides embed_dim"
            )
        E = embed_dim
        self.embed_dim, self.num_heads, self.use_bias = E, num_heads, use_bias
        self.head_dim = E // num_heads  # D
        self.scale = 1.0 / math.sqrt(self.head_dim)
        rng = rng if rng is not None else np.random.default_rng(0)
        # Xavier-uniform per E x E matrix (the source library's init), zero biases.
        self.params["Wqkv"] = np.concatenate([xavier_uniform(rng, E, E) for _ in range(3)])
        self.params["Wo"] = xavier_uniform(rng, E, E)  # (E, E)
        self.grads["Wqkv"] = np.zeros((3 * E, E))
        self.grads["Wo"] = np.zeros((E, E))
        if use_bias:
            self.params["bqkv"] = np.zeros(3 * E)
            self.params["bo"] = np.zeros(E)
            self.grads["bqkv"] = np.zeros(3 * E)
            self.grads["bo"] = np.zeros(E)
        self._cache: tuple[np.ndarray, ...] | None = None
        self._refresh()

    def _refresh(self) -> None:
        self.Wqkv, self.gWqkv = self.params["Wqkv"], self.grads["Wqkv"]
        self.Wo, self.gWo = self.params["Wo"], self.grads["Wo"]
        self.bqkv, self.gbqkv = self.params.get("bqkv"), self.grads.get("bqkv")
        self.bo, self.gbo = self.params.get("bo"), self.grads.get("bo")

    def collect_params(self) -> list[tuple[str, np.ndarray, np.ndarray]]:
        E = self.embed_dim
        groups = []
        for i, name in enumerate("qkv"):
            rows = slice(i * E, (i + 1) * E)
            groups.append((f"W{name}", self.Wqkv[rows], self.gWqkv[rows]))
        groups.append(("Wo", self.Wo, self.gWo))
        if self.use_bias:
            for i, name in enumerate("qkv"):
                rows = slice(i * E, (i + 1) * E)
                groups.append((f"b{name}", self.bqkv[rows], self.gbqkv[rows]))
            groups.append(("bo", self.bo, self.gbo))
        return groups

    def forward(
        self, x: np.ndarray, training: bool = False, key_mask: np.ndarray | None = None
    ) -> np.ndarray:
        """`key_mask [B, S]` (bool, True = a real token; None = all real): a masked key gets
        score -inf before the softmax, so its weight is exactly 0 for every query. Each row
        needs at least one real key. Rows of masked queries are still computed (vectorized)."""
        B, S, E = x.shape  # batch, tokens, embedding
        H, D = self.num_heads, self.head_dim
        qkv = x.reshape(B * S, E) @ self.Wqkv.T  # (B*S, 3E), one BLAS call
        if self.use_bias:
            qkv += self.bqkv
        q, k, v = qkv.reshape(B, S, 3, H, D).transpose(2, 0, 3, 1, 4)  # 3 x (B, H, S, D) views
        att = q @ k.swapaxes(-1, -2)  # (B, H, S, S)
        att *= self.scale
        if key_mask is not None:
            att += np.where(key_mask, 0.0, -np.inf).astype(att.dtype)[:, None, None, :]
        att -= att.max(axis=-1, keepdims=True)
        np.exp(att, out=att)
        att /= att.sum(axis=-1, keepdims=True)  # softmax over keys
        ctx = (att @ v).transpose(0, 2, 1, 3).reshape(B * S, E)  # (B, S, H, D) -> (B*S, E)
        out = ctx @ self.Wo.T  # (B*S, E)
        if self.use_bias:
            out += self.bo
        self._cache = (x, q, k, v, att, ctx) if training else None
        return out.reshape(B, S, E)

    def backward(self, dout: np.ndarray) -> np.ndarray:
        x, q, k, v, att, ctx = self._need_cache(self._cache)
        B, S, E = dout.shape
        H, D = self.num_heads, self.head_dim
        dout2 = dout.reshape(B * S, E)
        np.matmul(dout2.T, ctx, out=self.gWo)  # (E, E)
        if self.use_bias:
            np.sum(dout2, axis=0, out=self.gbo)
        dctx = (dout2 @ self.Wo).reshape(B, S, H, D).transpose(0, 2, 1, 3)  # (B, H, S, D)

        dqkv = np.empty((B, S, 3, H, D), dtype=dout.dtype)
        dq, dk, dv = dqkv.transpose(2, 0, 3, 1, 4)  # 3 x (B, H, S, D) views into dqkv
        np.matmul(att.swapaxes(-1, -2), dctx, out=dv)  # dV = A^T dctx
        datt = dctx @ v.swapaxes(-1, -2)  # (B, H, S, S)  dA = dctx V^T
        # softmax backward: dS = A * (dA - rowsum(dA * A)) * scale
        dscore = datt - (datt * att).sum(axis=-1, keepdims=True)
        dscore *= att
        dscore *= self.scale
        np.matmul(dscore, k, out=dq)  # dQ = dS K
        np.matmul(dscore.swapaxes(-1, -2), q, out=dk)  # dK = dS^T Q

        dqkv2 = dqkv.reshape(B * S, 3 * E)
        np.matmul(dqkv2.T, x.reshape(B * S, E), out=self.gWqkv)  # (3E, E)
        if self.use_bias:
            np.sum(dqkv2, axis=0, out=self.gbqkv)
        return (dqkv2 @ self.Wqkv).reshape(B, S, E)


class GlobalAvgPool(Layer):
    """Mean over tokens: `[B, S, E] -> [B, E]`."""

    def __init__(self) -> None:
        super().__init__()
        self._tokens: int | None = None

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        self._tokens = x.shape[1] if training else None
        return x.mean(axis=1)  # (B, E)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        S = self._need_cache(self._tokens)
        return np.repeat((dy / S)[:, None, :], S, axis=1)  # (B, S, E)


class Reshape(Layer):
    """`[B, prod(shape)] -> [B, *shape]` (row-major, a view)."""

    def __init__(self, shape: tuple[int, ...] | list[int]) -> None:
        super().__init__()
        self.shape = tuple(int(n) for n in shape)
        self._in_shape: tuple[int, ...] | None = None

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        self._in_shape = x.shape if training else None
        return x.reshape(x.shape[0], *self.shape)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        return dy.reshape(self._need_cache(self._in_shape))
