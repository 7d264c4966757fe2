# Host (CPython): float references — float32 on a blob's dequantized weights, float64 on the npz.
"""Two float forwards over the same op list (docs/model-format.md, docs/quantization.md).

- `run_float(blob, X_raw)`: what the device float path computes, in float32, from a parsed
  `Blob` (or a `QuantModelSpec`): dequantized weights `W_q[o,i]·s_w[o]`, biases
  `b_q[o]·s_in·s_w[o]` (or the float32 weights of a float32 blob), input `(x - mean) / std`,
  softmax with `exp` after subtracting the row max. Returns real logits `[B, C]` float32.
- `load_npz(path)` / `forward_npz(model, x_norm, record)`: the trained model in float64, read
  straight from the `.npz` with `allow_pickle=False`. `record` (a dict) collects every op's
  output and the attention internals q, k, v, ctx — what quantization calibrates on.

References: DESIGN §3 (attention math), docs/quantization.md "Float path".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .blob import MYATTN_EXPLICIT, QuantModelSpec
from .model import read_npz

# ---------------------------------------------------------------------------------------------
# float64: the trained model straight from the npz


@dataclass
class NpzModel:
    """A trained model file: op list, float64 parameters `p{i}.{name}`, normalization, meta."""

    meta: dict[str, Any]
    params: dict[str, np.ndarray]  # "p{i}.{name}" -> float64 array
    norm_mean: np.ndarray  # (F,) float64
    norm_std: np.ndarray  # (F,) float64

    @property
    def ops(self) -> list[dict[str, Any]]:
        return self.meta["ops"]

    @property
    def class_names(self) -> list[str]:
        return list(self.meta["class_names"])

    def normalize(self, X: np.ndarray) -> np.ndarray:
        """Raw features `[B, F]` -> model input `(X - mean) / std` (float64)."""
        return (np.asarray(X, dtype=np.float64) - self.norm_mean) / self.norm_std

    def param(self, i: int, name: str) -> np.ndarray | None:
        return self.params.get(f"p{i}.{name}")


def load_npz(path: str | Path) -> NpzModel:
    """Read `docs/model-format.md` (checked by `model.read_npz`) as float64 arrays."""
    meta, norm_mean, norm_std, arrays = read_npz(path)
    norm_mean = norm_mean.astype(np.float64)
    norm_std = norm_std.astype(np.float64)
    params = {k: v.astype(np.float64) for k, v in arrays.items()}
    return NpzModel(meta, params, norm_mean, norm_std)


def softmax(z: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, subtracting the row max first (any float dtype)."""
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attention(x, Wq, bq, Wk, bk, Wv, bv, Wo, bo, num_heads, record=None, prefix=""):
    """Multi-head self-attention `[B,S,E] -> [B,S,E]` (DESIGN §3) in x's float dtype."""
    B, S, E = x.shape  # batch, tokens, embedding
    H = num_heads
    D = E // H  # head_dim
    q = x @ Wq.T + (bq if bq is not None else 0)  # (B, S, E)
    k = x @ Wk.T + (bk if bk is not None else 0)
    v = x @ Wv.T + (bv if bv is not None else 0)
    qh, kh, vh = (t.reshape(B, S, H, D).transpose(0, 2, 1, 3) for t in (q, k, v))  # (B,H,S,D)
    scale = x.dtype.type(1.0 / math.sqrt(D))
    att = softmax((qh @ kh.swapaxes(-1, -2)) * scale)  # (B, H, S, S)
    ctx = (att @ vh).transpose(0, 2, 1, 3).reshape(B, S, E)  # (B, S, E)
    out = ctx @ Wo.T + (bo if bo is not None else 0)  # (B, S, E)
    if record is not None:
        record.update(
            {
                f"{prefix}q": q,
                f"{prefix}k": k,
                f"{prefix}v": v,
                f"{prefix}att": att,
                f"{prefix}ctx": ctx,
            }
        )
    return out


def myattn(x, Wa, ba, Wc, bc, mode, sizes, record=None, prefix=""):
    """MyAttn (DESIGN §8) in x's float dtype: `[B, q+k+v1·v2]` (mode "explicit": Q ‖ K ‖ V)
    or `[B, S, E]` (mode "pool": Q = K = mean token, V = tokens) -> `[B, out]`."""
    q, k, v1, v2 = sizes
    B = x.shape[0]
    if mode == "explicit":
        Q = x[:, :q]  # (B, q)
        QK = x[:, : q + k]  # (B, q+k)
        V = x[:, q + k :].reshape(B, v1, v2)  # (B, v1, v2)
    else:
        Q = x.mean(axis=1, dtype=x.dtype)  # (B, E)
        QK = np.concatenate([Q, Q], axis=1)  # (B, 2E)
        V = x  # (B, S, E)
    scores = QK @ Wa.T + (ba if ba is not None else 0)  # (B, v1)
    weights = softmax(scores)  # (B, v1)
    applied = np.einsum("bj,bjd->bd", weights, V)  # (B, v2)
    out = np.concatenate([Q, applied], axis=1) @ Wc.T + (bc if bc is not None else 0)  # (B, out)
    if record is not None:
        record.update(
            {
                f"{prefix}q": Q,
                f"{prefix}scores": scores,
                f"{prefix}weights": weights,
                f"{prefix}applied": applied,
            }
        )
    return out


def myattn_sizes(op: dict[str, Any]) -> tuple[int, int, int, int]:
    """`(q, k, v1, v2)` of a model-file `myattn` op."""
    return tuple(int(op[n]) for n in ("query_size", "key_size", "value_size1", "value_size2"))


def forward_npz(
    model: NpzModel, x_norm: np.ndarray, record: dict[str, np.ndarray] | None = None
) -> np.ndarray:
    """Float64 logits `[B, C]` for normalized features `x_norm [B, F]`.

    `record`, if given, receives `"{i}"` (output of op i) and, for attention ops,
    `"{i}.q"`, `"{i}.k"`, `"{i}.v"`, `"{i}.att"`, `"{i}.ctx"`; for myattn ops `"{i}.q"` (the
    query), `"{i}.scores"`, `"{i}.weights"`, `"{i}.applied"`.
    """
    x = np.asarray(x_norm, dtype=np.float64)
    B = x.shape[0]
    for i, op in enumerate(model.ops):
        kind = op["op"]
        if kind == "dense":
            b = model.param(i, "b")
            x = x @ model.param(i, "W").T + (b if b is not None else 0.0)
        elif kind == "relu":
            x = np.maximum(x, 0.0)
        elif kind == "reshape":
            x = x.reshape(B, *op["shape"])
        elif kind == "attention":
            p = [model.param(i, n) for n in ("Wq", "bq", "Wk", "bk", "Wv", "bv", "Wo", "bo")]
            x = attention(x, *p, int(op["num_heads"]), record, prefix=f"{i}.")
        elif kind == "avgpool":
            x = x.mean(axis=1)
        elif kind == "myattn":
            p = [model.param(i, n) for n in ("Wa", "ba", "Wc", "bc")]
            x = myattn(x, *p, op["mode"], myattn_sizes(op), record, prefix=f"{i}.")
        else:
            raise ValueError(
                f"op {i} ({kind}) has no blob opcode; the exportable ops are dense, relu, "
                "reshape, attention, avgpool, myattn (docs/blob-format.md)"
            )
        if record is not None:
            record[str(i)] = x
    return x


# ---------------------------------------------------------------------------------------------
# float32: what the device float path computes from a blob


def dequantized(op, role: str, s_in_name: str, quantized: bool) -> tuple[np.ndarray, ...]:
    """Float32 `(W, b)` of one projection; `role` is "" (dense), "q"/"k"/"v"/"o" (attention)
    or "a"/"c" (myattn); `s_in_name` names the fparam of its input scale."""
    W = op.tensors[f"W{role}"]
    b = op.tensors.get(f"b{role}")
    if not quantized:
        return W.astype(np.float32), None if b is None else b.astype(np.float32)
    s_w = op.tensors[f"s{role}"].astype(np.float32)  # (out,)
    Wf = W.astype(np.float32) * s_w[:, None]
    bf = None
    if b is not None:
        bf = b.astype(np.float32) * (np.float32(op.fparams[s_in_name]) * s_w)
    return Wf, bf


def run_float(blob: QuantModelSpec, X_raw: np.ndarray) -> np.ndarray:
    """Float32 real logits `[B, C]` of the blob's op list for raw features `X_raw [B, F]`."""
    q = blob.quantized
    mean = np.asarray(blob.norm_mean, dtype=np.float32)
    std = np.asarray(blob.norm_std, dtype=np.float32)
    x = (np.asarray(X_raw, dtype=np.float32) - mean) / std  # (B, F)
    B = x.shape[0]
    for op in blob.ops:
        ip = op.iparams
        if op.kind == "dense":
            W, b = dequantized(op, "", "s_in", q)
            x = x @ W.T
            if b is not None:
                x = x + b
        elif op.kind == "relu":
            x = np.maximum(x, np.float32(0))
        elif op.kind == "reshape":
            x = x.reshape(B, ip["S"], ip["E"])
        elif op.kind == "attention":
            Wq, bq = dequantized(op, "q", "s_in", q)
            Wk, bk = dequantized(op, "k", "s_in", q)
            Wv, bv = dequantized(op, "v", "s_in", q)
            Wo, bo = dequantized(op, "o", "s_ctx", q)
            x = attention(x, Wq, bq, Wk, bk, Wv, bv, Wo, bo, ip["H"])
        elif op.kind == "avgpool":
            x = x.mean(axis=1, dtype=np.float32)
        elif op.kind == "myattn":
            Wa, ba = dequantized(op, "a", "s_qk", q)
            Wc, bc = dequantized(op, "c", "s_qa", q)
            mode = "explicit" if ip["mode"] == MYATTN_EXPLICIT else "pool"
            x = myattn(x, Wa, ba, Wc, bc, mode, (ip["q"], ip["k"], ip["v1"], ip["v2"]))
        else:
            raise ValueError(f"op {op.kind} is not implemented in the float reference")
        x = x.astype(np.float32, copy=False)
    return x
