"""Host (CPython): the sequence layers of `seq-attn` (DESIGN §9), forward and backward together.

A window `x [B, T, C]` (T time steps of C channels) with valid lengths `[B]` becomes tokens,
is embedded, mixed by residual attention and feed-forward blocks and pooled:

    PatchEmbed     [B, T, C] -> [B, S, E]  patches of P steps (P·C values), one shared Dense
    PosEmbed       [B, S, E] -> [B, S, E]  x + pos[:S], a learned `pos [S_max, E]`
    Conv1d         [B, S, C] -> [B, S', F] 1-D convolution over tokens (kernel K, stride s,
                                           dilation d, groups g, optional ReLU), S' = ceil(S/s)
    BatchNorm      [B, S, F] -> [B, S, F]  training only: batch norm over the valid tokens
                                           (optional ReLU), folded into the layer before it
                                           when training ends (`seqmodel.fold_batch_norm`)
    ResidualAttention          -> [B, S, E]  x + Attention(x), padded keys masked (layers.py)
    FeedForward    [B, S, E] -> [B, S, E]  x + relu(x @ W1.T + b1) @ W2.T + b2, token-wise
    MaskedAvgPool  [B, S, E] -> [B, E]     mean over the valid tokens only

Padding (the mask, `SeqMask`; lengths always count from step 0):
- step `t` of window `b` is valid iff `t < lengths[b]`; steps from `lengths[b]` on are padding,
  whatever they hold (zeros, garbage, even NaN);
- token `s` is the patch of steps `s·P … s·P+P-1`, flattened row-major (value `p·C + c` is
  `x[b, s·P+p, c]`); `S = ceil(T/P)`, the last patch zero-filled past `T`. A token is valid iff
  it holds at least one valid step (`s·P < lengths[b]`), so window `b` has `ceil(lengths[b]/P)`
  valid tokens, always the first ones;
- padded steps are read as 0 (the input is selected, not multiplied: NaN stays out), so a
  partly padded patch sees its valid steps and zeros;
- a padded token is never a key (its score is -inf before the softmax: weight exactly 0) and
  never pooled (weight 0). Its own row is still computed, vectorized, from zeros and the
  parameters only; its gradient is exactly 0, so it changes neither a logit nor a gradient.
`mask = None` means every step of the window is valid (the fast path: no selects).

Convolution over tokens (the conv stem, `Conv1d`): output token `t` reads input tokens
`t·s + j·d - pad` (j = 0..K-1, `pad = (K-1)·d // 2`, centred); a token outside the valid ones
(index < 0, or >= the window's valid tokens) reads as 0 (selected, as a padded step). So a
window of `S_n` valid tokens has `ceil(S_n/s)` valid outputs, which depend on valid tokens
only; `SeqMask.strided(s)` is the mask after the conv (`ceil(ceil(n/P)/s) = ceil(n/(P·s))`).

Each layer keeps its backward cache only after `forward(x, training=True)`, as in layers.py.
Layers with `uses_mask = True` take `forward(x, training, mask)`; `SeqModel` (seqmodel.py) builds
the mask once per batch and hands it to them.

References: Dosovitskiy et al. (2021), "An Image is Worth 16x16 Words" (patch embedding, learned
positional embedding); Nie et al. (2023), "A Time Series is Worth 64 Words" (PatchTST: patches of
time steps as tokens); Vaswani et al. (2017) (residual attention + feed-forward blocks, key
padding mask); karpathy/nanoGPT `model.py`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from tinyattn.learn.layers import Attention, Dense, Layer, xavier_uniform

POS_INIT_STD = 0.02  # learned positional embedding ~ N(0, 0.02²), as ViT / BERT


class SeqMask(NamedTuple):
    """Which steps and tokens of a padded batch are real (see the module docstring)."""

    steps: np.ndarray  # (B, T) bool, t < length
    tokens: np.ndarray  # (B, S) bool, s·P < length
    pool: np.ndarray  # (B, S) float, tokens / number of valid tokens (the pooling weights)

    @classmethod
    def from_lengths(
        cls, lengths: np.ndarray | None, steps: int, patch: int, dtype=np.float64
    ) -> SeqMask | None:
        """The mask of windows of `steps` steps with `lengths [B]` valid steps (1..steps);
        None when `lengths` is None or every window is full (nothing to mask)."""
        if lengths is None:
            return None
        lengths = np.asarray(lengths)
        if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer):
            raise ValueError(f"lengths must be a 1-D integer array, got {lengths.dtype} "
                             f"{lengths.shape}")  # fmt: skip
        if lengths.size and (lengths.min() < 1 or lengths.max() > steps):
            raise ValueError(
                f"lengths must lie in 1..{steps} (the window's steps), got "
                f"{lengths.min()}..{lengths.max()}; a window needs at least one valid step"
            )
        if np.all(lengths == steps):
            return None
        tokens = -(-steps // patch)  # S
        step_ok = np.arange(steps) < lengths[:, None]  # (B, T)
        token_ok = np.arange(tokens) * patch < lengths[:, None]  # (B, S)
        count = -(-lengths // patch)  # (B,) valid tokens
        pool = token_ok / count[:, None].astype(dtype)  # (B, S)
        return cls(step_ok, token_ok, pool.astype(dtype, copy=False))

    def strided(self, stride: int) -> SeqMask:
        """The mask after a conv of stride `stride`: `ceil(S_n/stride)` valid tokens."""
        if stride == 1:
            return self
        count = -(-self.tokens.sum(axis=1) // stride)  # (B,) valid tokens after the conv
        S = -(-self.tokens.shape[1] // stride)
        token_ok = np.arange(S) < count[:, None]  # (B, S')
        pool = (token_ok / count[:, None]).astype(self.pool.dtype)
        return SeqMask(self.steps, token_ok, pool)


class PatchEmbed(Dense):
    """`[B, T, C] -> [B, S, E]`: patches of P steps (`P·C` values) through one shared Dense.

    `W [E, P·C]`, `b [E]`. `T` may be shorter than the `steps` the layer was built for (a shorter
    window: fewer tokens); it is zero-filled to `S·P` when `P` does not divide it.
    """

    uses_mask = True

    def __init__(
        self,
        steps: int,
        channels: int,
        patch: int,
        embed_dim: int,
        use_bias: bool = True,
        rng: np.random.Generator | None = None,
    ) -> None:
        if not 1 <= patch <= steps:
            raise ValueError(f"patch {patch} must lie in 1..{steps} (the window's steps)")
        super().__init__(patch * channels, embed_dim, use_bias, rng)
        self.steps, self.channels, self.patch = steps, channels, patch
        self.tokens = -(-steps // patch)  # S_max
        self._in: tuple[tuple[int, ...], SeqMask | None] | None = None

    def patches(self, x: np.ndarray, mask: SeqMask | None = None) -> np.ndarray:
        """`[B, T, C] -> [B, S, P·C]` token values (a view when nothing is masked or padded)."""
        B, T, C = x.shape  # batch, steps, channels
        if T > self.steps or C != self.channels:
            raise ValueError(
                f"window of shape [{T}, {C}], the model takes at most {self.steps} steps of "
                f"{self.channels} channels"
            )
        P = self.patch
        S = -(-T // P)  # tokens
        if mask is None and S * P == T:
            return x.reshape(B, S, P * C)
        tok = np.zeros((B, S * P, C), dtype=x.dtype)
        if mask is None:
            tok[:, :T] = x
        else:
            np.copyto(tok[:, :T], x, where=mask.steps[:, :, None])  # padded steps stay 0
        return tok.reshape(B, S, P * C)

    def forward(
        self, x: np.ndarray, training: bool = False, mask: SeqMask | None = None
    ) -> np.ndarray:
        self._in = (x.shape, mask) if training else None
        return super().forward(self.patches(x, mask), training)  # (B, S, E)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        shape, mask = self._need_cache(self._in)
        B, T, C = shape
        dx = super().backward(dy).reshape(B, -1, C)[:, :T]  # (B, T, C)
        if mask is not None:
            dx = dx * mask.steps[:, :, None]  # padded steps do not reach the output
        return dx


def conv_out_tokens(tokens: int, stride: int) -> int:
    """Output tokens of a conv of `stride` over `tokens` input tokens: ceil(tokens/stride)."""
    return -(-tokens // stride)


class Conv1d(Layer):
    """`[B, S, C] -> [B, ceil(S/s), F]`: a 1-D convolution over tokens (see the module
    docstring), `y[t, o] = act(b[o] + Σ_{j, c} W[o, c, j]·x[t·s + j·d - pad, g(o)·C/g + c])`.

    `W [F, C/g, K]` as PyTorch's `conv1d` (stored flat `[F, (C/g)·K]`, value `c·K + j`),
    `b [F]`; `groups = C = F` is a depthwise conv, `K = 1` a pointwise one. Xavier-uniform
    weights over fan-in `(C/g)·K` and fan-out `(F/g)·K`, zero biases.
    """

    uses_mask = True

    def __init__(
        self,
        channels: int,
        filters: int,
        kernel: int,
        stride: int = 1,
        dilation: int = 1,
        groups: int = 1,
        relu: bool = True,
        use_bias: bool = True,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__()
        if min(channels, filters, kernel, stride, dilation, groups) < 1:
            raise ValueError("conv: channels, filters, kernel, stride, dilation, groups >= 1")
        if channels % groups or filters % groups:
            raise ValueError(
                f"conv: groups {groups} must divide channels {channels} and filters {filters}"
            )
        rng = rng if rng is not None else np.random.default_rng(0)
        C, F, K, g = channels, filters, kernel, groups
        self.channels, self.filters, self.kernel = C, F, K
        self.stride, self.dilation, self.groups = stride, dilation, groups
        self.relu, self.use_bias = relu, use_bias
        self.pad = (K - 1) * dilation // 2
        a = math.sqrt(6.0 / ((C // g) * K + (F // g) * K))
        self.params["W"] = rng.uniform(-a, a, size=(F, (C // g) * K))  # (F, C/g·K)
        if use_bias:
            self.params["b"] = np.zeros(F)
        self.grads = {name: np.zeros_like(p) for name, p in self.params.items()}
        self._cache: tuple | None = None
        self._refresh()

    def _refresh(self) -> None:
        self.W, self.gW = self.params["W"], self.grads["W"]
        self.b, self.gb = self.params.get("b"), self.grads.get("b")

    def _taps(self, S: int) -> tuple[int, int]:
        """(S_out, padded length): input index i sits at i + pad of the zero-padded input."""
        S_out = conv_out_tokens(S, self.stride)
        need = (S_out - 1) * self.stride + (self.kernel - 1) * self.dilation + 1
        return S_out, max(need, self.pad + S)

    def forward(
        self, x: np.ndarray, training: bool = False, mask: SeqMask | None = None
    ) -> np.ndarray:
        B, S, C = x.shape  # batch, tokens, channels
        if C != self.channels:
            raise ValueError(f"conv: {C} input channels, the layer takes {self.channels}")
        K, s, d, g, F = self.kernel, self.stride, self.dilation, self.groups, self.filters
        S_out, L = self._taps(S)
        xp = np.zeros((B, L, C), dtype=x.dtype)  # zero-padded input, padded tokens read 0
        if mask is None:
            xp[:, self.pad : self.pad + S] = x
        else:
            np.copyto(xp[:, self.pad : self.pad + S], x, where=mask.tokens[:, :S, None])
        xp = xp.reshape(B, L, g, C // g)
        y = np.zeros((B, S_out, g, F // g), dtype=np.result_type(x, self.W))
        for j in range(K):  # tap by tap: no [B, S', K, C] copy of the input
            y += _tap(xp[:, j * d : j * d + (S_out - 1) * s + 1 : s], self._Wj(j))
        y = y.reshape(B, S_out, F)
        if self.use_bias:
            y += self.b
        if self.relu:
            np.maximum(y, 0.0, out=y)
        self._cache = (x.shape, xp, y, mask) if training else None
        return y

    def _Wj(self, j: int) -> np.ndarray:
        """Tap j's weights as `[g, C/g, F/g]` (a view of W)."""
        g, F, C, K = self.groups, self.filters, self.channels, self.kernel
        return self.W.reshape(g, F // g, C // g, K)[..., j].transpose(0, 2, 1)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        shape, xp, y, mask = self._need_cache(self._cache)
        B, S, C = shape
        K, s, d, g, F = self.kernel, self.stride, self.dilation, self.groups, self.filters
        S_out = dy.shape[1]
        if self.relu:
            dy = dy * (y > 0.0)
        if self.use_bias:
            np.sum(dy, axis=(0, 1), out=self.gb)
        dyg = dy.reshape(B, S_out, g, F // g)  # (B, S', g, F/g)
        gW = self.gW.reshape(g, F // g, C // g, K)  # a view: written tap by tap
        dxp = np.zeros(xp.shape, dtype=dy.dtype)  # (B, L, g, C/g)
        span = (S_out - 1) * s + 1
        for j in range(K):
            xj = xp[:, j * d : j * d + span : s]
            gW[..., j] = _tap_grad_w(xj, dyg)
            dxp[:, j * d : j * d + span : s] += _tap(dyg, self._Wj(j).transpose(0, 2, 1))
        dx = dxp.reshape(B, -1, C)[:, self.pad : self.pad + S]
        if mask is not None:
            dx = dx * mask.tokens[:, :S, None]  # padded tokens do not reach the output
        return dx


def _tap(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """`out[b, t, g, o] = Σ_c x[b, t, g, c]·w[g, c, o]`: one tap of a grouped conv (and its
    input gradient, with w's last two axes swapped). One matrix product over all groups'
    tokens when there is one group; a broadcast product when a group has one channel
    (depthwise, or a 1-channel input); per group otherwise."""
    B, S, g, c = x.shape
    if g == 1:
        return (x.reshape(B * S, c) @ w[0]).reshape(B, S, 1, -1)
    if c == 1:
        return x * w[:, 0]
    return np.einsum("btgc,gco->btgo", x, w)


def _tap_grad_w(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """`gw[g, o, c] = Σ_{b,t} dy[b, t, g, o]·x[b, t, g, c]`: one tap's weight gradient."""
    B, S, g, c = x.shape
    if g == 1:
        return (dy.reshape(B * S, -1).T @ x.reshape(B * S, c))[None]
    return np.einsum("btgo,btgc->goc", dy, x)


BN_EPS = 1e-5  # batch norm's variance epsilon (PyTorch's)
BN_MOMENTUM = 0.1  # its running statistics: r <- (1 - m)·r + m·batch (PyTorch's)


class BatchNorm(Layer):
    """`[B, S, F] -> [B, S, F]`: `act(gamma·(x - mu)/sqrt(var + eps) + beta)` per channel.

    Training: `mu`, `var` (biased) over the batch's valid tokens (a padded token neither counts
    nor receives a gradient), and the running statistics move towards them; otherwise the
    running statistics (`mean`, `var`, not parameters: the model file never holds this layer).
    `collect = True`: the batch's own statistics become the running ones and are used (one
    forward over all the training windows gives their exact statistics before the fold).
    `gamma [F]` (init 1), `beta [F]` (init 0); neither decays (1-D, as biases).
    """

    uses_mask = True

    def __init__(self, channels: int, relu: bool = False) -> None:
        super().__init__()
        self.channels, self.relu = channels, relu
        self.params["gamma"] = np.ones(channels)
        self.params["beta"] = np.zeros(channels)
        self.grads = {name: np.zeros_like(p) for name, p in self.params.items()}
        self.mean, self.var = np.zeros(channels), np.ones(channels)
        self.collect = False
        self._cache: tuple | None = None
        self._refresh()

    def _refresh(self) -> None:
        self.gamma, self.ggamma = self.params["gamma"], self.grads["gamma"]
        self.beta, self.gbeta = self.params["beta"], self.grads["beta"]

    def forward(
        self, x: np.ndarray, training: bool = False, mask: SeqMask | None = None
    ) -> np.ndarray:
        B, S, F = x.shape
        if F != self.channels:
            raise ValueError(f"batch_norm: {F} channels, the layer takes {self.channels}")
        w = None if mask is None else mask.tokens[:, :S].reshape(-1).astype(x.dtype)  # (B·S,)
        if training or self.collect:
            x2 = x.reshape(-1, F)
            n = B * S if w is None else float(w.sum())
            # a padded token weighs 0 (it holds finite values, see above): one pass a sum
            mu = (x2.sum(axis=0) if w is None else w @ x2) / n
            xc = x - mu
            sq = np.square(xc).reshape(-1, F)
            var = (sq.sum(axis=0) if w is None else w @ sq) / n
            if self.collect:
                self.mean[...], self.var[...] = mu, var
            else:
                m = BN_MOMENTUM
                unbiased = var * (n / max(n - 1.0, 1.0))
                self.mean[...] = (1 - m) * self.mean + m * mu
                self.var[...] = (1 - m) * self.var + m * unbiased
        else:
            mu, var = self.mean.astype(x.dtype), self.var.astype(x.dtype)
            xc = x - mu
        inv = 1.0 / np.sqrt(var + BN_EPS)
        xhat = xc * inv
        y = self.gamma * xhat + self.beta
        if self.relu:
            np.maximum(y, 0.0, out=y)
        self._cache = (xhat, inv, w, n, y) if training else None
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        xhat, inv, w, n, y = self._need_cache(self._cache)
        B, S, F = dy.shape
        if self.relu:
            dy = dy * (y > 0.0)
        if w is not None:
            dy = dy * w.reshape(B, S, 1)  # a padded token's output reaches no logit
        dy2, xhat2 = dy.reshape(-1, F), xhat.reshape(-1, F)
        np.sum(dy2, axis=0, out=self.gbeta)
        self.ggamma[...] = np.einsum("ij,ij->j", dy2, xhat2)
        # dx = inv·(dxhat - (Σ dxhat + xhat·Σ dxhat·xhat)/n), dxhat = gamma·dy: both sums are
        # gamma times the two gradients just summed
        dx = (dy - (xhat * self.ggamma + self.gbeta) / n) * (self.gamma * inv)
        if w is not None:
            dx = dx * w.reshape(B, S, 1)
        return dx


class PosEmbed(Layer):
    """`[B, S, E] -> [B, S, E]`: `x + pos[:S]`, a learned positional embedding `pos [S_max, E]`."""

    def __init__(self, tokens: int, embed_dim: int, rng: np.random.Generator | None = None):
        super().__init__()
        rng = rng if rng is not None else np.random.default_rng(0)
        self.tokens, self.embed_dim = tokens, embed_dim
        self.params["pos"] = rng.normal(scale=POS_INIT_STD, size=(tokens, embed_dim))
        self.grads["pos"] = np.zeros((tokens, embed_dim))
        self._S: int | None = None
        self._refresh()

    def _refresh(self) -> None:
        self.pos, self.gpos = self.params["pos"], self.grads["pos"]

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        S = x.shape[1]  # tokens of this batch, <= S_max
        self._S = S if training else None
        return x + self.pos[:S]

    def backward(self, dy: np.ndarray) -> np.ndarray:
        S = self._need_cache(self._S)
        np.sum(dy, axis=0, out=self.gpos[:S])  # (S, E)
        self.gpos[S:] = 0.0
        return dy


class ResidualAttention(Attention):
    """`[B, S, E] -> [B, S, E]`: `x + Attention(x)` with padded tokens masked as keys."""

    uses_mask = True

    def forward(
        self, x: np.ndarray, training: bool = False, mask: SeqMask | None = None
    ) -> np.ndarray:
        out = super().forward(x, training, None if mask is None else mask.tokens)
        out += x
        return out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        dx = super().backward(dout)
        dx += dout
        return dx


class FeedForward(Layer):
    """`[B, S, E] -> [B, S, E]`: `x + relu(x @ W1.T + b1) @ W2.T + b2`, token by token.

    `W1 [F, E]`, `b1 [F]`, `W2 [E, F]`, `b2 [E]`; Xavier-uniform weights, zero biases.
    """

    def __init__(
        self,
        embed_dim: int,
        hidden: int,
        use_bias: bool = True,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__()
        rng = rng if rng is not None else np.random.default_rng(0)
        E, F = embed_dim, hidden
        self.embed_dim, self.hidden, self.use_bias = E, F, use_bias
        self.params["W1"] = xavier_uniform(rng, F, E)  # (F, E)
        self.params["W2"] = xavier_uniform(rng, E, F)  # (E, F)
        if use_bias:
            self.params["b1"] = np.zeros(F)
            self.params["b2"] = np.zeros(E)
        self.grads = {name: np.zeros_like(p) for name, p in self.params.items()}
        self._cache: tuple[np.ndarray, np.ndarray] | None = None
        self._refresh()

    def _refresh(self) -> None:
        p, g = self.params, self.grads
        self.W1, self.W2, self.gW1, self.gW2 = p["W1"], p["W2"], g["W1"], g["W2"]
        self.b1, self.b2, self.gb1, self.gb2 = p.get("b1"), p.get("b2"), g.get("b1"), g.get("b2")

    def collect_params(self) -> list[tuple[str, np.ndarray, np.ndarray]]:
        names = ("W1", "b1", "W2", "b2") if self.use_bias else ("W1", "W2")
        return [(n, self.params[n], self.grads[n]) for n in names]

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        E = self.embed_dim
        x2 = x.reshape(-1, E)  # (N, E), N = B*S tokens
        h = x2 @ self.W1.T  # (N, F)
        if self.use_bias:
            h += self.b1
        np.maximum(h, 0.0, out=h)  # relu
        y = h @ self.W2.T  # (N, E)
        if self.use_bias:
            y += self.b2
        y += x2  # residual
        self._cache = (x2, h) if training else None
        return y.reshape(x.shape)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        x2, h = self._need_cache(self._cache)
        dy2 = dy.reshape(-1, self.embed_dim)  # (N, E)
        np.matmul(dy2.T, h, out=self.gW2)  # (E, F)
        dh = dy2 @ self.W2  # (N, F)
        dh *= h > 0.0  # relu backward (h is the relu output)
        np.matmul(dh.T, x2, out=self.gW1)  # (F, E)
        if self.use_bias:
            np.sum(dy2, axis=0, out=self.gb2)
            np.sum(dh, axis=0, out=self.gb1)
        dx = dh @ self.W1  # (N, E)
        dx += dy2  # residual
        return dx.reshape(dy.shape)


class MaskedAvgPool(Layer):
    """`[B, S, E] -> [B, E]`: mean over the valid tokens of each window (all when unmasked)."""

    uses_mask = True

    def __init__(self) -> None:
        super().__init__()
        self._cache: tuple[int, np.ndarray | None] | None = None

    def forward(
        self, x: np.ndarray, training: bool = False, mask: SeqMask | None = None
    ) -> np.ndarray:
        S = x.shape[1]  # tokens
        if mask is None:
            w, y = None, x.mean(axis=1)  # (B, E)
        else:
            w = mask.pool  # (B, S)
            y = (w[:, None, :] @ x)[:, 0]  # (B, E), one batched matmul
        self._cache = (S, w) if training else None
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        S, w = self._need_cache(self._cache)
        if w is None:
            return np.repeat((dy / S)[:, None, :], S, axis=1)  # (B, S, E)
        return w[:, :, None] * dy[:, None, :]  # (B, S, E), zero on padded tokens
