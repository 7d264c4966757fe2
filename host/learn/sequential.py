"""Host (CPython): `Sequential`, layers applied in order over one flat parameter vector, and
`layer_from_op`, the layer of each op of docs/model-format.md (rows' ops and the sequence ops of
host/learn/seqmodel.py alike).

`Sequential` keeps all parameters in one flat float64 vector `theta` (and gradients in `grad`),
each layer's arrays being views into it, so an optimizer step is a few vectorized calls.
The model kinds build on it (host/learn/model.py: iris-attn, iris-myattn; host/learn/seqmodel.py:
`SeqModel`, seq-attn); this module imports neither.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyattn.learn.layers import ActivationLayer, Attention, Dense, GlobalAvgPool, Layer, Reshape
from tinyattn.learn.myattn import AttnPool, MyAttnFlat
from tinyattn.learn.seqlayers import (
    BatchNorm,
    Conv1d,
    FeedForward,
    MaskedAvgPool,
    PatchEmbed,
    PosEmbed,
    ResidualAttention,
)

SEQ_KINDS = ("patch_embed", "pos_add", "conv", "ff", "masked_pool")  # + residual "attention"
MYATTN_MODES = ("explicit", "pool")  # the blob's mode 0, 1


def seq_layer_from_op(op: dict[str, Any], rng: np.random.Generator) -> Layer:
    """One layer for a sequence op (`SEQ_OPS`, or `attention` with `residual: true`)."""
    kind = op.get("op")
    try:
        bias = bool(op.get("bias", True))
        if kind == "patch_embed":
            steps, channels, patch = int(op["steps"]), int(op["channels"]), int(op["patch"])
            return PatchEmbed(steps, channels, patch, int(op["embed_dim"]), bias, rng)
        if kind == "pos_add":
            return PosEmbed(int(op["tokens"]), int(op["embed_dim"]), rng)
        if kind == "conv":
            sizes = (int(op[n]) for n in ("channels", "filters", "kernel", "stride", "dilation",
                                          "groups"))  # fmt: skip
            return Conv1d(*sizes, relu=bool(op["relu"]), use_bias=bias, rng=rng)
        if kind == "attention" and op.get("residual"):
            return ResidualAttention(int(op["embed_dim"]), int(op["num_heads"]), bias, rng)
        if kind == "ff":
            if not op.get("residual", True):
                raise ValueError(f"op {op}: only the residual feed-forward exists")
            return FeedForward(int(op["embed_dim"]), int(op["hidden"]), bias, rng)
        if kind == "masked_pool":
            return MaskedAvgPool()
        if kind == "batch_norm":  # training only, never in a model file (seqmodel.py)
            return BatchNorm(int(op["channels"]), bool(op["relu"]))
        if kind == "dense":
            return Dense(int(op["in"]), int(op["out"]), bias, rng)
    except KeyError as exc:
        raise ValueError(f"op {op}: missing attribute {exc}; see host/learn/seqmodel.py") from None
    raise ValueError(f"op {kind!r} is not a sequence op ({op}); see host/learn/seqmodel.py")


def _myattn_layer(op: dict[str, Any], rng: np.random.Generator) -> Layer:
    mode = op["mode"]
    names = ("query_size", "key_size", "value_size1", "value_size2", "output_size")
    q, k, v1, v2, out = (int(op[n]) for n in names)
    bias = bool(op.get("bias", True))
    if mode == "pool":
        if not q == k == v2:
            raise ValueError(
                f"op {op}: mode 'pool' sets Q = K = mean token, so query_size, key_size and "
                "value_size2 must all equal the token width"
            )
        return AttnPool(v1, q, out, rng, bias)
    if mode == "explicit":
        return MyAttnFlat(q, k, v1, v2, out, rng, bias)
    raise ValueError(f"op {op}: mode {mode!r}, expected one of {', '.join(MYATTN_MODES)}")


def layer_from_op(op: dict[str, Any], rng: np.random.Generator) -> Layer:
    """One layer for one op dict (`docs/model-format.md`)."""
    kind = op.get("op")
    if kind in SEQ_KINDS or (kind == "attention" and op.get("residual")):
        return seq_layer_from_op(op, rng)
    try:
        if kind == "dense":
            return Dense(int(op["in"]), int(op["out"]), bool(op.get("bias", True)), rng)
        if kind in ActivationLayer.KINDS:
            return ActivationLayer(kind)
        if kind == "reshape":
            return Reshape(op["shape"])
        if kind == "attention":
            E, H = int(op["embed_dim"]), int(op["num_heads"])
            return Attention(E, H, bool(op.get("bias", True)), rng)
        if kind == "avgpool":
            return GlobalAvgPool()
        if kind == "myattn":
            return _myattn_layer(op, rng)
    except KeyError as exc:
        raise ValueError(f"op {op}: missing attribute {exc}; see docs/model-format.md") from None
    raise ValueError(f"unknown op {kind!r} in {op}; see docs/model-format.md for the op names")


class Sequential:
    """Layers applied in order; parameters in one flat vector (`theta`, `grad`)."""

    def __init__(self, layers: list[Layer], ops: list[dict[str, Any]]) -> None:
        self.layers, self.ops = layers, ops
        storage = [(layer, name) for layer in layers for name in layer.params]
        sizes = [layer.params[name].size for layer, name in storage]
        self.theta = np.empty(sum(sizes))  # (P,) all parameters
        self.grad = np.zeros(sum(sizes))  # (P,) their gradients
        self.decay_mask = np.zeros(sum(sizes))  # 1.0 on weight matrices, 0.0 on biases
        offset = 0
        for layer in layers:
            values, grads = {}, {}
            for name, p in layer.params.items():
                span = slice(offset, offset + p.size)
                values[name] = self.theta[span].reshape(p.shape)
                grads[name] = self.grad[span].reshape(p.shape)
                self.decay_mask[span] = 1.0 if p.ndim == 2 else 0.0
                offset += p.size
            layer.bind(values, grads)

    @property
    def n_params(self) -> int:
        return self.theta.size

    def forward(
        self, x: np.ndarray, training: bool = False, lengths: np.ndarray | None = None
    ) -> np.ndarray:
        """Logits `[B, C]` for normalized rows `x [B, 1, F]` or `[B, F]` (float64); `lengths`
        as a `SeqModel` takes them, unused: a row is a window of one step, nothing is padded."""
        x = x.reshape(len(x), -1)  # a row is a window of one step: [B, 1, F] -> [B, F] (dense)
        for layer in self.layers:
            x = layer.forward(x, training)
        return x

    def backward(self, dlogits: np.ndarray) -> np.ndarray:
        """Fill `grad` from `dlogits [B, C]` after a training forward; returns `dx [B, F]`."""
        d = dlogits
        for layer in reversed(self.layers):
            d = layer.backward(d)
        return d

    def predict(self, x: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
        """Class indices `[B]` for normalized rows `x [B, 1, F]` or `[B, F]` (`lengths` unused)."""
        return np.argmax(self.forward(x), axis=1)

    def state_dict(self) -> dict[str, np.ndarray]:
        """`{"p{i}.{name}": array}` as in docs/model-format.md (copies)."""
        return {
            f"p{i}.{name}": value.copy()
            for i, layer in enumerate(self.layers)
            for name, value, _ in layer.collect_params()
        }

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Copy `p{i}.{name}` arrays into the parameters; shapes and names must match exactly."""
        expected = set()
        for i, layer in enumerate(self.layers):
            for name, value, _ in layer.collect_params():
                key = f"p{i}.{name}"
                expected.add(key)
                if key not in state:
                    raise ValueError(f"parameter {key} missing; the file does not match its ops")
                if state[key].shape != value.shape:
                    raise ValueError(
                        f"parameter {key} has shape {state[key].shape}, ops say {value.shape}"
                    )
                value[...] = state[key]
        extra = set(state) - expected
        if extra:
            raise ValueError(f"unexpected parameters {sorted(extra)}; the ops do not use them")
