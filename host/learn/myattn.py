"""Host (CPython): the concat-score attention "MyAttn" (DESIGN §8), forward and backward.

From the PyTorch seq2seq tutorial's attention decoder, generalized to a batch B:

    scores  = attn(Q ‖ K)                     # Linear(q + k -> v1): (B, v1)
    weights = softmax(scores)                 # over v1:               (B, v1)
    applied = weights @ V                     # bmm with V (B, v1, v2): (B, v2)
    output  = attn_combine(Q ‖ applied)       # Linear(q + v2 -> out): (B, out)

with `Q (B,1,q)`, `K (B,1,k)`, `V (B,v1,v2)`; returns `(output (B,1,out), weights (B,1,v1))`.
Weights `[out, in]`, `y = x @ W.T + b` as everywhere (PyTorch's `Linear` layout).

`AttnPool` puts MyAttn in a Sequential model as an attention-pooling head over S tokens:
`Q = K = mean token`, `V = tokens` (so q = k = v2 = E and v1 = S), `[B,S,E] -> [B,out]` (the
op's mode "pool"). `MyAttnFlat` takes the tutorial's three inputs as one flat row
`Q ‖ K ‖ V`, `[B, q + k + v1·v2] -> [B,out]` (mode "explicit"). Both are the `myattn` op of
docs/model-format.md.

References: PyTorch tutorial "Translation with a Sequence to Sequence Network and Attention"
(AttnDecoderRNN: `attn`, `attn_combine`); Bahdanau et al. (2015).
"""

from __future__ import annotations

import numpy as np

from tinyattn.learn.layers import Layer, xavier_uniform


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class MyAttn(Layer):
    """Concat-score attention with explicit Q, K, V (the tutorial's module)."""

    def __init__(
        self,
        query_size: int,
        key_size: int,
        value_size1: int,
        value_size2: int,
        output_size: int,
        rng: np.random.Generator | None = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.q_size, self.k_size = query_size, key_size
        self.v1, self.v2, self.out_size = value_size1, value_size2, output_size
        rng = rng if rng is not None else np.random.default_rng(0)
        shapes = {
            "Wa": (value_size1, query_size + key_size),
            "ba": (value_size1,),
            "Wc": (output_size, query_size + value_size2),
            "bc": (output_size,),
        }
        if not bias:  # both linears without a bias (the tutorial's have one)
            del shapes["ba"], shapes["bc"]
        for name, shape in shapes.items():
            self.params[name] = xavier_uniform(rng, *shape) if len(shape) == 2 else np.zeros(shape)
            self.grads[name] = np.zeros(shape)
        self._cache: tuple | None = None

    def attend(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, training: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """`q (B,1,q)`, `k (B,1,k)`, `v (B,v1,v2)` -> `(out (B,1,out), weights (B,1,v1))`."""
        p = self.params
        q0, k0 = q[:, 0, :], k[:, 0, :]  # (B, q), (B, k)
        qk = np.concatenate([q0, k0], axis=1)  # (B, q+k)
        w = _softmax(qk @ p["Wa"].T + p.get("ba", 0.0))  # (B, v1)
        applied = np.einsum("bj,bjd->bd", w, v)  # (B, v2)
        qa = np.concatenate([q0, applied], axis=1)  # (B, q+v2)
        out = qa @ p["Wc"].T + p.get("bc", 0.0)  # (B, out)
        self._cache = (qk, w, v, qa) if training else None
        return out[:, None, :], w[:, None, :]

    def attend_backward(self, dout: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`dout (B,1,out)` -> `(dq (B,1,q), dk (B,1,k), dv (B,v1,v2))`; fills param grads."""
        qk, w, v, qa = self._need_cache(self._cache)
        p, g = self.params, self.grads
        d = dout[:, 0, :]  # (B, out)
        np.matmul(d.T, qa, out=g["Wc"])  # (out, q+v2)
        if "bc" in g:
            np.sum(d, axis=0, out=g["bc"])
        dqa = d @ p["Wc"]  # (B, q+v2)
        dq0, dapplied = dqa[:, : self.q_size], dqa[:, self.q_size :]
        dw = np.einsum("bd,bjd->bj", dapplied, v)  # (B, v1)
        dv = np.einsum("bj,bd->bjd", w, dapplied)  # (B, v1, v2)
        ds = w * (dw - np.sum(dw * w, axis=1, keepdims=True))  # softmax backward (B, v1)
        np.matmul(ds.T, qk, out=g["Wa"])  # (v1, q+k)
        if "ba" in g:
            np.sum(ds, axis=0, out=g["ba"])
        dqk = ds @ p["Wa"]  # (B, q+k)
        dq = dq0 + dqk[:, : self.q_size]
        dk = dqk[:, self.q_size :]
        return dq[:, None, :], dk[:, None, :], dv


class AttnPool(MyAttn):
    """MyAttn as a pooling head: `Q = K = mean over tokens`, `V = tokens`; `[B,S,E] -> [B,out]`."""

    def __init__(
        self,
        tokens: int,
        embed_dim: int,
        output_size: int,
        rng: np.random.Generator | None = None,
        bias: bool = True,
    ) -> None:
        super().__init__(embed_dim, embed_dim, tokens, embed_dim, output_size, rng, bias)

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        m = x.mean(axis=1, keepdims=True)  # (B, 1, E)
        out, self.weights = self.attend(m, m, x, training)
        return out[:, 0, :]  # (B, out)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        dq, dk, dv = self.attend_backward(dy[:, None, :])
        return dv + (dq + dk) / dv.shape[1]  # mean's gradient spreads 1/S to every token


class MyAttnFlat(MyAttn):
    """MyAttn on one flat row per sample, `x = Q ‖ K ‖ V` (V row-major `[v1, v2]`):
    `[B, q + k + v1·v2] -> [B, out]`."""

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        B = x.shape[0]
        q, k = self.q_size, self.k_size
        v = x[:, q + k :].reshape(B, self.v1, self.v2)  # (B, v1, v2)
        out, self.weights = self.attend(x[:, None, :q], x[:, None, q : q + k], v, training)
        return out[:, 0, :]  # (B, out)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        dq, dk, dv = self.attend_backward(dy[:, None, :])
        return np.concatenate([dq[:, 0, :], dk[:, 0, :], dv.reshape(len(dv), -1)], axis=1)
