"""Host (CPython): the `seq-attn` model (DESIGN §9) — its op list, its layers and `SeqModel`.

    x [B, T, C], lengths [B]
      -> patch_embed  (P steps -> one token of P·C values, Dense P·C -> E)   [B, S, E]
      -> pos_add      (+ pos[:S], learned [S, E])                            [B, S, E]
      [-> conv ...    (the conv stem, optional: 1-D convs over tokens)       [B, S', E]]
      -> L x ( attention (x + MHA(x), padded keys masked)                    [B, S, E]
               ff        (x + Dense(F->E)(relu(Dense(E->F)(x))), per token)  [B, S, E] )
      -> masked_pool  (mean over valid tokens)                               [B, E]
      -> dense        (E -> classes)                                         [B, classes]

No normalization layer (DESIGN §9: only if its device form were exact integer math). Padding
and the mask are defined in seqlayers.py: a token (patch) is valid iff it holds a valid step.

`SeqModel` is a `Sequential` (model.py): one flat `theta`/`grad` (float64 by default, float32 on
request), `decay_mask`, `ops`, `layers`, `state_dict()`/`load_state_dict()` with the file's
`p{i}.{name}` keys, so the training loop, optimizers and `save_model` treat it like iris-attn.
It adds lengths: `forward(x, training=False, lengths=None)` and `predict(x, lengths=None)`
(None = every step valid); `backward(dlogits)` is unchanged (the mask is in the caches).
`named_parameters()` gives the same arrays under readable names ("embed.W", "pos",
"block0.attn.Wq", "block0.ff.W1", "head.W"; the list is `param_names()`).
The positional embedding is excluded from weight decay (as ViT's `no_weight_decay`): decay would
shrink it towards zero, i.e. towards a model that cannot tell positions apart.

Op list (the contract with the quantizer, blob and device; proposed for docs/model-format.md):

- `patch_embed` {steps T, channels C, patch P, embed_dim E, bias}: params `W [E, P·C]`,
  `b [E]`; `[B,T,C] -> [B,S,E]`, `S = ceil(T/P)`; token `s` holds `x[s·P+p, c]` at `p·C+c`;
  padded steps read as 0.
- `pos_add` {tokens S, embed_dim E}: param `pos [S, E]`; `x + pos` (on the integer path it can
  fold into a per-token bias of the embedding).
- `conv` {channels C, filters F, kernel K, stride s, dilation d, groups g, relu, bias}:
  params `W [F, (C/g)·K]` (PyTorch's `[F, C/g, K]` flat), `b [F]`; `[B,S,C] -> [B,S',F]`,
  `S' = ceil(S/s)`, centred taps, tokens outside the valid ones read as 0 (seqlayers.py).
- `batch_norm` {channels, relu} (training only, `stem_norm`): params `gamma [C]`, `beta [C]`;
  after the conv stem's embedding and each conv, folded into them when training ends
  (`fold_batch_norm`): never in a model file, a blob or on the board.
- `attention` {embed_dim, num_heads, bias, residual: true, key_mask: true}: params as the
  existing `attention` op; `x + MHA(x)`, the scores of padded keys are -inf.
- `ff` {embed_dim E, hidden F, bias, residual: true}: params `W1 [F,E]`, `b1 [F]`, `W2 [E,F]`,
  `b2 [E]`; `x + relu(x @ W1.T + b1) @ W2.T + b2`, token by token.
- `masked_pool` {}: `[B,S,E] -> [B,E]`, mean over the `ceil(length/P)` valid tokens.
- `dense` {in, out, bias}: as today (the classifier head).

Both residual adds are two-input adds at two scales on the integer path (DESIGN §9). The lengths
are not part of the op list: they come with each window (the device takes `length` with `xq`).

Default sizes (`SeqAttnConfig`) are placeholders sized for the MAC budget (issue 11: <= 150k per
inference); the CLI picks real defaults by cross-validation on the TRAIN file. BasicMotions
(T=100, C=6) with P=10, E=16, H=2, L=2, F=32: 10 tokens, 57,184 MACs (`macs(ops)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tinyattn.learn.layers import Layer
from tinyattn.learn.seqlayers import (
    BN_EPS,
    BatchNorm,
    Conv1d,
    PatchEmbed,
    PosEmbed,
    SeqMask,
)
from tinyattn.learn.sequential import SEQ_KINDS as SEQ_OPS  # noqa: F401  (the sequence ops)
from tinyattn.learn.sequential import Sequential
from tinyattn.learn.sequential import seq_layer_from_op as seq_layer_from_op


@dataclass(frozen=True)
class SeqAttnConfig:
    """Architecture of `seq-attn`; sizes to be chosen by cross-validation on TRAIN only."""

    patch: int = 10  # P steps a token: 1 s of a 10 Hz IMU window, T=100 -> 10 tokens
    embed_dim: int = 16  # E: two heads of 8, as iris-attn's token width
    num_heads: int = 2  # H
    blocks: int = 2  # L residual attention + feed-forward blocks (0: the stem's tokens pooled)
    ff_dim: int = 32  # F = 2E hidden units of the feed-forward
    bias: bool = True  # every Dense and the attention projections have biases
    log_view: bool = False  # the input's log view (docs/quantization.md), floor fitted on TRAIN
    # the input's clip view (docs/quantization.md): values above this percentile of TRAIN's
    # are clipped to it (0: no clip; not with log_view)
    clip: float = 0.0
    # the stem: "patch" (the patch embedding alone) or "conv" (patch embedding to stem_width
    # channels, then per dilation a depthwise conv (stem_kernel, the first with stem_stride)
    # and a pointwise conv + ReLU, the last to embed_dim); docs/search.md "The conv stem"
    stem: str = "patch"
    stem_width: int = 8  # F of the conv stem's patch embedding and depthwise convs
    stem_kernel: int = 5  # K of its depthwise convs
    stem_dilations: tuple[int, ...] = (1, 2)  # one depthwise-separable conv per dilation
    stem_stride: int = 2  # stride of its first depthwise conv (tokens: ceil(S/stride))
    # conv stem: batch norm in training after its patch embedding and each conv (before the
    # conv's ReLU), folded into them when training ends (`fold_batch_norm`; docs/search.md
    # "The conv stem")
    stem_norm: bool = False

    def __post_init__(self) -> None:
        if self.stem not in STEMS:
            raise ValueError(f"stem {self.stem!r}: choose one of {', '.join(STEMS)}")
        if self.stem == "conv" and not (self.stem_dilations and min(
                self.stem_width, self.stem_kernel, self.stem_stride, *self.stem_dilations) >= 1):
            raise ValueError("conv stem: width, kernel, stride and dilations must be >= 1")
        if self.clip and not (50.0 < self.clip < 100.0 and not self.log_view):
            raise ValueError(f"clip {self.clip:g}: a percentile above 50 and below 100, and "
                             "not with the log view (one input view)")  # fmt: skip
        if self.stem_norm and not (self.stem == "conv" and self.bias):
            raise ValueError("stem_norm: a conv stem with biases (the batch norm folds into "
                             "them); use --stem conv")  # fmt: skip


STEMS = ("patch", "conv")


def default_max_steps(train_lengths: np.ndarray, patch: int) -> int:
    """The model's T for a TRAIN split: its longest window rounded up to a multiple of P, so
    the last patch is whole and slightly longer TEST windows still fit (JapaneseVowels: TRAIN
    7..26 steps, P=10 -> T=30 covers TEST's 29). Never computed from the TEST file; a window
    longer than T is classified on its last T steps (the long window rule,
    `floatref.fit_to_model`)."""
    longest = int(np.max(train_lengths))
    return -(-longest // patch) * patch


def seq_attn_ops(
    steps: int, channels: int, n_classes: int, config: SeqAttnConfig | None = None
) -> list[dict[str, Any]]:
    """Op list of `seq-attn` for windows of `steps` x `channels` (see the module docstring)."""
    c = config if config is not None else SeqAttnConfig()
    E, tokens = c.embed_dim, -(-steps // c.patch)
    F = c.stem_width if c.stem == "conv" else E  # width of the patch embedding
    ops: list[dict[str, Any]] = [
        {"op": "patch_embed", "steps": steps, "channels": channels, "patch": c.patch,
         "embed_dim": F, "bias": c.bias},
        {"op": "pos_add", "tokens": tokens, "embed_dim": F},
    ]  # fmt: skip
    if c.stem == "conv":
        norm = [{"op": "batch_norm", "channels": F, "relu": False}] if c.stem_norm else []
        ops += norm
        for j, d in enumerate(c.stem_dilations):
            out = E if j == len(c.stem_dilations) - 1 else F
            for conv in (
                {"op": "conv", "channels": F, "filters": F, "kernel": c.stem_kernel,
                 "stride": c.stem_stride if j == 0 else 1, "dilation": d, "groups": F,
                 "relu": False, "bias": c.bias},
                {"op": "conv", "channels": F, "filters": out, "kernel": 1, "stride": 1,
                 "dilation": 1, "groups": 1, "relu": True, "bias": c.bias},
            ):  # fmt: skip
                if c.stem_norm:  # conv, then the norm and the ReLU
                    ops += [{**conv, "relu": False},
                            {"op": "batch_norm", "channels": conv["filters"],
                             "relu": conv["relu"]}]  # fmt: skip
                else:
                    ops.append(conv)
    for _ in range(c.blocks):
        ops += [
            {"op": "attention", "embed_dim": E, "num_heads": c.num_heads, "bias": c.bias,
             "residual": True, "key_mask": True},
            {"op": "ff", "embed_dim": E, "hidden": c.ff_dim, "bias": c.bias, "residual": True},
        ]  # fmt: skip
    ops += [{"op": "masked_pool"}, {"op": "dense", "in": E, "out": n_classes, "bias": c.bias}]
    return ops


def param_names(ops: list[dict[str, Any]]) -> list[str]:
    """Readable prefix of each op's parameters: embed, pos, stem{j} (the convs), block{j}.attn,
    block{j}.ff, pool, head (the last dense); `p{i}.{name}` is `param_names(ops)[i] + "." +
    name`."""
    names, block, conv = [], 0, 0
    for i, op in enumerate(ops):
        kind = op["op"]
        if kind == "conv":
            names.append(f"stem{conv}")
            conv += 1
        elif kind == "batch_norm":
            names.append(f"norm{i}")
        elif kind == "attention":
            names.append(f"block{block}.attn")
        elif kind == "ff":
            names.append(f"block{block}.ff")
            block += 1
        else:
            last = "head" if i == len(ops) - 1 else f"dense{i}"
            short = {
                "patch_embed": "embed",
                "pos_add": "pos",
                "masked_pool": "pool",
                "dense": last,
            }
            names.append(short.get(kind, kind))
    return names


def token_steps(ops: list[dict[str, Any]]) -> int:
    """Steps a token stands for at the attention blocks: P times the strides of the convs."""
    steps = int(ops[0]["patch"])
    for op in ops:
        if op["op"] == "conv":
            steps *= int(op["stride"])
    return steps


def stem_text(ops: list[dict[str, Any]]) -> str:
    """The stem in words: `patch 10 -> 16` or `patch 8 -> 8, conv k5 s8 d1 dw, conv k1 ...`."""
    e = ops[0]
    parts = [f"patch {e['patch']} -> {e['embed_dim']}"]
    for op in ops:
        if op["op"] == "conv":
            dw = " dw" if int(op["groups"]) == int(op["channels"]) > 1 else ""
            relu = " relu" if op["relu"] else ""
            parts.append(f"conv k{op['kernel']} s{op['stride']} d{op['dilation']}{dw} -> "
                         f"{op['filters']}{relu}")  # fmt: skip
    return ", ".join(parts)


def macs(ops: list[dict[str, Any]]) -> int:
    """Multiply-accumulates of one full-length inference (what the device computes)."""
    total, S, width = 0, 1, 0
    for op in ops:
        kind = op["op"]
        if kind == "patch_embed":
            S = -(-int(op["steps"]) // int(op["patch"]))
            total += S * int(op["patch"]) * int(op["channels"]) * int(op["embed_dim"])
            width = int(op["embed_dim"])
        elif kind == "conv":
            S = -(-S // int(op["stride"]))
            width = int(op["filters"])
            cin = int(op["channels"]) // int(op["groups"])
            total += S * width * cin * int(op["kernel"])
        elif kind == "attention":
            E = int(op["embed_dim"])
            total += 4 * S * E * E + 2 * S * S * E  # Q, K, V, out projections; scores, ctx
        elif kind == "ff":
            total += 2 * S * int(op["embed_dim"]) * int(op["hidden"])
        elif kind == "reshape":  # a row model: its features become S tokens of E
            S, width = (int(v) for v in op["shape"])
        elif kind in ("masked_pool", "avgpool"):
            total += S * width
        elif kind == "dense":
            total += int(op["in"]) * int(op["out"])
    return total


class SeqModel(Sequential):
    """`seq-attn` as a Sequential: logits `[B, classes]` for windows `x [B, T, C]` + lengths."""

    def __init__(self, layers: list[Layer], ops: list[dict[str, Any]], dtype=np.float64) -> None:
        if not (layers and isinstance(layers[0], PatchEmbed)):
            raise ValueError("a sequence model starts with a patch_embed op")
        super().__init__(layers, ops)
        self.dtype = np.dtype(dtype)
        if self.dtype != self.theta.dtype:
            self._retype(self.dtype)
        self.embed = layers[0]
        self.names = param_names(ops)
        for layer in layers:  # no weight decay on the positional embedding
            if isinstance(layer, PosEmbed):
                start = self._offset(layer.pos)
                self.decay_mask[start : start + layer.pos.size] = 0.0

    def _offset(self, view: np.ndarray) -> int:
        return (view.ctypes.data - self.theta.ctypes.data) // self.theta.itemsize

    def _retype(self, dtype: np.dtype) -> None:
        """Move `theta`/`grad` and every layer's views to `dtype` (e.g. float32)."""
        theta, grad = self.theta.astype(dtype), np.zeros(self.grad.shape, dtype)
        offset = 0
        for layer in self.layers:
            values, grads = {}, {}
            for name, p in layer.params.items():
                span = slice(offset, offset + p.size)
                values[name] = theta[span].reshape(p.shape)
                grads[name] = grad[span].reshape(p.shape)
                offset += p.size
            layer.bind(values, grads)
        self.theta, self.grad = theta, grad

    def mask(self, x: np.ndarray, lengths: np.ndarray | None) -> SeqMask | None:
        """The padding mask of `x [B, T, C]` with `lengths [B]` (None: nothing padded)."""
        if lengths is not None and len(lengths) != len(x):
            raise ValueError(f"{len(lengths)} lengths for {len(x)} windows")
        return SeqMask.from_lengths(lengths, x.shape[1], self.embed.patch, self.dtype)

    def forward(
        self, x: np.ndarray, training: bool = False, lengths: np.ndarray | None = None
    ) -> np.ndarray:
        """Logits `[B, classes]` for normalized windows `x [B, T, C]` (T <= the model's steps)
        whose first `lengths [B]` steps are data (None: all)."""
        x = np.asarray(x, dtype=self.dtype)
        if x.ndim != 3:
            raise ValueError(f"expected windows [B, T, C], got shape {x.shape}")
        mask = self.mask(x, lengths)
        for layer in self.layers:
            if getattr(layer, "uses_mask", False):
                x = layer.forward(x, training, mask)
            else:
                x = layer.forward(x, training)
            if isinstance(layer, Conv1d) and mask is not None:
                mask = mask.strided(layer.stride)  # ceil(S_n/s) valid tokens from here
        return x

    def predict(self, x: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
        """Class indices `[B]` for normalized windows `x [B, T, C]` and their `lengths`."""
        return np.argmax(self.forward(x, lengths=lengths), axis=1)

    def named_parameters(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """`{"embed.W": (value, grad), "pos": ..., "block0.attn.Wq": ...}`: views, not copies."""
        out = {}
        for prefix, layer in zip(self.names, self.layers, strict=True):
            for name, value, grad in layer.collect_params():
                out[prefix if name == prefix else f"{prefix}.{name}"] = (value, grad)
        return out


def fold_batch_norm(model: SeqModel, x: np.ndarray, lengths: np.ndarray | None) -> SeqModel:
    """The model without its `batch_norm` ops, the same function in inference: each norm's
    statistics are those of the normalized windows `x [N, T, C]` with `lengths` (the training
    windows, one forward), and `gamma·(y - mu)/sqrt(var + eps) + beta` folds into the layer
    before it: `W·a`, `(b - mu)·a + beta` with `a = gamma/sqrt(var + eps)` (and the
    positional embedding between an embedding and its norm, `pos·a`); a norm's ReLU becomes
    that conv's. A model without norms is returned as it is."""
    norms = [layer for layer in model.layers if isinstance(layer, BatchNorm)]
    if not norms:
        return model
    for layer in norms:
        layer.collect = True
    try:
        model.forward(x, lengths=lengths)
    finally:
        for layer in norms:
            layer.collect = False
    ops = [dict(op) for op in model.ops if op["op"] != "batch_norm"]
    out = build_seq_from_ops(ops, dtype=model.dtype)
    kept = [layer for layer in model.layers if not isinstance(layer, BatchNorm)]
    for new, old in zip(out.layers, kept, strict=True):
        for (_, value, _), (_, target, _) in zip(old.collect_params(), new.collect_params(),
                                                 strict=True):  # fmt: skip
            target[...] = value
    pending: list[Layer] = []  # the layers since the last norm: embed (+ pos) or a conv
    j = 0  # index into out.layers
    for layer in model.layers:
        if not isinstance(layer, BatchNorm):
            pending.append(out.layers[j])
            j += 1
            continue
        a = layer.gamma.astype(np.float64) / np.sqrt(layer.var + BN_EPS)  # (F,)
        shift = layer.beta - layer.mean * a
        for target in pending:
            if isinstance(target, PosEmbed):
                target.params["pos"][...] *= a
            elif isinstance(target, (PatchEmbed, Conv1d)):
                target.params["W"][...] *= a[:, None]
                target.params["b"][...] = target.params["b"] * a + shift
                if isinstance(target, Conv1d):
                    target.relu = layer.relu
            else:
                raise ValueError(f"batch_norm after {type(target).__name__}: only after an "
                                 "embedding or a conv")  # fmt: skip
        pending = []
    for i, layer in enumerate(out.layers):  # the ops say the ReLUs the norms gave
        if isinstance(layer, Conv1d):
            out.ops[i]["relu"] = bool(layer.relu)
    return out


def build_seq_from_ops(ops: list[dict[str, Any]], seed: int = 0, dtype=np.float64) -> SeqModel:
    """A freshly initialized `SeqModel` for an op list (Xavier-uniform, zero biases)."""
    rng = np.random.default_rng(seed)
    return SeqModel([seq_layer_from_op(op, rng) for op in ops], [dict(op) for op in ops], dtype)


def build_seq_model(
    steps: int,
    channels: int,
    n_classes: int,
    config: SeqAttnConfig | None = None,
    seed: int = 0,
    dtype=np.float64,
) -> SeqModel:
    """`seq-attn` for windows of `steps` x `channels` and `n_classes` classes."""
    return build_seq_from_ops(seq_attn_ops(steps, channels, n_classes, config), seed, dtype)
