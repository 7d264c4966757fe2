# Host (CPython): float references — float32 on a blob's dequantized weights, float64 on the npz.
"""Two float forwards over the same op list (docs/model-format.md, docs/quantization.md).

- `run_float(blob, X_raw)`: what the device float path computes, in float32, from a parsed
  `Blob` (or a `QuantModelSpec`): dequantized weights `W_q[o,i]·s_w[o]`, biases
  `b_q[o]·s_in·s_w[o]` (or the float32 weights of a float32 blob), input `(x - mean) / std`,
  softmax with `exp` after subtracting the row max. Returns real logits `[B, C]` float32.
- `forward_npz(model, x_norm, record)`: the trained model (a `ModelFile`,
  tinyattn.learn.model.load_model) in float64. `record` (a dict) collects every op's
  output and the attention internals q, k, v, ctx — what quantization calibrates on.

Sequence models (`seq-attn`, op 0 `patch_embed`; docs/quantization.md "Sequence models"): the
input is windows `X [B, T', C]` with `lengths [B]` (None: every step valid), normalized per
channel. Masking is **running on the valid tokens**: each window is computed on its first
`S_n = ceil(n/P)` tokens only, windows grouped by `S_n` (`seq_groups`), the last patch's steps
past `n` read as 0 — exactly the float model's masked attention and pooling.
- `seq_float_ops(model)`: the npz's seq ops as blob ops in float64 (`embed` with the positional
  embedding folded into its per-token bias `b[s] = b + pos[s]`, `res_attention`, `res_ff`,
  `masked_pool`, `dense`); `forward_seq(ops, x_norm, lengths, record)` runs such ops (float64
  for calibration: `record` gets each key's absmax over valid tokens), and `run_float` runs a
  seq blob's (dequantized) ops the same way in float32.

A rocket blob (op 0 `rocket`): its float path counts exactly what the int8 path counts — the
window on the input grid as the int8 path quantizes it (grid.quantize_seq_input), the same
integer transform — and its features are the unrounded `(count·2**15/npos - z)·M / 2**shift`
(float32), then the dense head in float32 (`rocket_features`).

References: DESIGN §3 (attention math), docs/quantization.md "Float path".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinyattn.data.windows import fit_to_model as fit_to_model
from tinyattn.data.windows import input_view, valid_lengths
from tinyattn.data.windows import normalize_windows as normalize_windows
from tinyattn.intmodel import blob_rocket
from tinyattn.intmodel.blob import MYATTN_EXPLICIT, Op, QuantModelSpec, seq_tokens
from tinyattn.intmodel.grid import quantize_seq_input
from tinyattn.learn.model import ModelFile

# ---------------------------------------------------------------------------------------------
# windows of a seq model: patches (valid lengths, the long window rule and per-channel
# normalization are host/data/windows.py's, importable here as before)


def seq_groups(lengths: np.ndarray, P: int) -> list[tuple[int, np.ndarray]]:
    """`[(S_n, window indices)]`: the windows grouped by their valid tokens `ceil(n/P)`."""
    S_n = -(-np.asarray(lengths, np.int64) // P)
    return [(int(k), np.flatnonzero(S_n == k)) for k in np.unique(S_n)]


def seq_patches(x: np.ndarray, lengths: np.ndarray, S_n: int, P: int) -> np.ndarray:
    """Tokens `[B, S_n, P·C]` of windows `x [B, T', C]` (steps past each length read as 0)."""
    B, T, C = x.shape
    tok = np.zeros((B, S_n * P, C), dtype=x.dtype)  # (B, S_n·P, C)
    keep = min(T, S_n * P)
    valid = np.arange(keep)[None, :, None] < np.asarray(lengths)[:, None, None]
    tok[:, :keep] = np.where(valid, x[:, :keep], 0)
    return tok.reshape(B, S_n, P * C)


def conv(x: np.ndarray, W: np.ndarray, b, ip: dict[str, int]) -> np.ndarray:
    """The conv op on tokens `x [B, S_n, C]`, every token valid: `[B, ceil(S_n/stride), F]`,
    `y[t, o] = act(b[o] + Σ_{j,c} W[o, c·K + j]·x[t·stride + j·dilation - pad, g(o)·C/g + c])`,
    a token outside `0..S_n-1` reading 0, `pad = (K-1)·dilation // 2` (docs/quantization.md)."""
    B, S, C = x.shape  # batch, valid tokens, channels
    K, s, d, g, F = (ip[n] for n in ("K", "stride", "dilation", "groups", "F"))
    pad = (K - 1) * d // 2
    S_out = -(-S // s)
    L = max((S_out - 1) * s + (K - 1) * d + 1, pad + S)
    xp = np.zeros((B, L, C), dtype=x.dtype)
    xp[:, pad : pad + S] = x
    span = (S_out - 1) * s + 1
    cols = np.stack([xp[:, j * d : j * d + span : s] for j in range(K)], axis=2)
    cols = cols.reshape(B, S_out, K, g, C // g)  # (B, S', K, g, C/g)
    Wg = W.reshape(g, F // g, C // g, K)
    y = np.einsum("btjgc,gocj->btgo", cols, Wg).reshape(B, S_out, F)
    if b is not None:
        y = y + b
    return np.maximum(y, 0) if ip["relu"] else y


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
    model: ModelFile, x_norm: np.ndarray, record: dict[str, np.ndarray] | None = None
) -> np.ndarray:
    """Float64 logits `[B, C]` for normalized rows `x_norm [B, 1, F]` or `[B, F]`.

    `record`, if given, receives `"{i}"` (output of op i) and, for attention ops,
    `"{i}.q"`, `"{i}.k"`, `"{i}.v"`, `"{i}.att"`, `"{i}.ctx"`; for myattn ops `"{i}.q"` (the
    query), `"{i}.scores"`, `"{i}.weights"`, `"{i}.applied"`.
    """
    x = np.asarray(x_norm, dtype=np.float64)
    B = x.shape[0]
    x = x.reshape(B, -1)  # a row is a window of one step: [B, 1, F] -> [B, F] (dense ops)
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


def forward_model(
    model: ModelFile, X_raw: np.ndarray, lengths: np.ndarray | None = None
) -> np.ndarray:
    """Float64 logits `[B, C]` of the trained model for raw samples: rows `[B, F]`, or windows
    `[B, T', C]` of at most its T steps (`fit_to_model`) with `lengths`."""
    if model.is_seq:  # the seq ops run as their blob ops (embed, res_attention, ...), masked
        return forward_seq(seq_float_ops(model), model.normalize(X_raw, lengths), lengths)
    if model.is_windows:  # seq-rocket: its own forward (the exact transform, then the head)
        return model.model.forward(model.normalize(X_raw, lengths), lengths=lengths)
    return forward_npz(model, model.normalize(X_raw))


def seq_float_ops(model: ModelFile) -> list[Op]:
    """The seq model's op list as float64 blob ops (`float32_spec` casts them to float32):
    patch_embed + pos_add -> embed (`b[s, o] = b[o] + pos[s, o]`); attention (residual) ->
    res_attention; ff -> res_ff; masked_pool; dense. iparams hold only the sizes."""
    ops_in, ops = model.ops, []
    if [op["op"] for op in ops_in[:2]] != ["patch_embed", "pos_add"]:
        raise ValueError(
            "a seq-attn model starts with patch_embed, pos_add (host/learn/seqmodel.py)"
        )
    e = ops_in[0]
    T, C, P, E = (int(e[n]) for n in ("steps", "channels", "patch", "embed_dim"))
    S = seq_tokens(T, P)
    pos = model.param(1, "pos")
    if pos is None or pos.shape != (S, E):
        raise ValueError(f"pos_add: pos must be [{S}, {E}] for T={T}, P={P}")
    b = model.param(0, "b")
    t = {"W": model.param(0, "W"), "b": pos + (b if b is not None else 0.0)}  # (S, E)
    ops.append(Op("embed", {"T": T, "C": C, "P": P, "E": E}, {}, t))
    width = E  # of the tokens; S and width change in the conv stem
    for i, op in enumerate(ops_in[2:], start=2):
        kind = op["op"]
        p = {n: model.param(i, n) for n in ("W", "b", "W1", "b1", "W2", "b2")}
        p.update({f"{w}{g}": model.param(i, f"{w}{g}") for w in "Wb" for g in "qkvo"})
        t = {role: v for role, v in p.items() if v is not None}
        if kind == "conv":
            names = ("channels", "filters", "kernel", "stride", "dilation", "groups", "relu")
            C_in, F, K, stride, dil, g, relu = (int(op[n]) for n in names)
            if C_in != width:
                raise ValueError(f"op {i} (conv): channels {C_in}, its input has {width}")
            ip = {"S": S, "C": C_in, "F": F, "K": K, "stride": stride, "dilation": dil,
                  "groups": g, "relu": relu, "has_bias": int("b" in t)}  # fmt: skip
            ops.append(Op("conv", ip, {}, t))
            S, width = -(-S // stride), F
        elif kind == "attention" and op.get("residual"):
            H = int(op["num_heads"])
            E = width
            ip = {"S": S, "E": E, "H": H, "has_bias": int("bq" in t)}
            ops.append(Op("res_attention", ip, {}, t))
        elif kind == "ff":
            ip = {"E": width, "F": int(op["hidden"]), "has_bias": int("b1" in t)}
            ops.append(Op("res_ff", ip, {}, t))
        elif kind == "masked_pool":
            ops.append(Op("masked_pool", {"S": S, "E": width}, {}, {}))
        elif kind == "dense":
            n_out, n_in = t["W"].shape
            ops.append(Op("dense", {"in": n_in, "out": n_out, "has_bias": int("b" in t)}, {}, t))
        elif kind == "relu":
            ops.append(Op("relu", {}, {}, {}))
        else:
            raise ValueError(
                f"op {i} ({kind}) has no seq blob opcode; a seq model has patch_embed, pos_add, "
                "conv, attention (residual), ff, masked_pool, dense (host/learn/seqmodel.py)"
            )
    return ops


def _seq_float_forward(ops, tok: np.ndarray, params, record, H_of) -> np.ndarray:
    """Float logits of one group of windows `tok [B, S_n, P·C]` (all tokens valid)."""
    x = tok
    for k, op in enumerate(ops):
        p = params(op)
        if op.kind == "embed":
            x = x @ p["W"].T + p["b"][: x.shape[1]]  # (B, S_n, E): bias + pos per token
        elif op.kind == "conv":
            x = conv(x, p["W"], p.get("b"), op.iparams)  # (B, ceil(S_n/stride), F)
        elif op.kind == "res_attention":
            a = attention(x, *(p.get(n) for n in ATT_PARAMS), H_of(op), record, f"{k}.")
            if record is not None:
                record[f"{k}.a"] = a
            x = x + a
        elif op.kind == "res_ff":
            h = np.maximum(x @ p["W1"].T + (p["b1"] if "b1" in p else 0), 0)  # (B, S_n, F)
            f = h @ p["W2"].T + (p["b2"] if "b2" in p else 0)  # (B, S_n, E)
            if record is not None:
                record.update({f"{k}.h": h, f"{k}.f": f})
            x = x + f
        elif op.kind == "masked_pool":
            x = x.mean(axis=1, dtype=x.dtype)  # (B, E): mean over the S_n valid tokens
        elif op.kind == "dense":
            x = x @ p["W"].T + (p["b"] if "b" in p else 0)
        elif op.kind == "relu":
            x = np.maximum(x, 0)
        else:
            raise ValueError(f"op {k} ({op.kind}) is not an op of a seq model")
        x = x.astype(tok.dtype, copy=False)
        if record is not None:
            record[str(k)] = x
    return x


ATT_PARAMS = ("Wq", "bq", "Wk", "bk", "Wv", "bv", "Wo", "bo")


def forward_seq(
    ops: list[Op],
    x_norm: np.ndarray,
    lengths: np.ndarray | None,
    absmax: dict[str, float] | None = None,
    params=lambda op: op.tensors,
) -> np.ndarray:
    """Float logits `[B, classes]` of seq ops for normalized windows `x_norm [B, T', C]`, each
    window on its first `ceil(n/P)` tokens; dtype of `x_norm`. `absmax`, if given, receives
    the largest |value| over valid tokens of every recorded tensor (keys as `forward_npz`'s,
    plus `"{k}.a"` the attention output, `"{k}.h"`/`"{k}.f"` the feed-forward's hidden and
    output) and `"input"`. `params(op)` gives an op's float weights by role."""
    T, P = ops[0].iparams["T"], ops[0].iparams["P"]
    n = valid_lengths(x_norm, lengths, T)
    out = None
    for S_n, idx in seq_groups(n, P):
        tok = seq_patches(x_norm[idx], n[idx], S_n, P)
        record: dict[str, np.ndarray] | None = {} if absmax is not None else None
        logits = _seq_float_forward(ops, tok, params, record, lambda op: op.iparams["H"])
        if out is None:
            out = np.zeros((len(n), logits.shape[1]), dtype=logits.dtype)
        out[idx] = logits
        if absmax is not None:
            record["input"] = tok
            for key, v in record.items():
                absmax[key] = max(absmax.get(key, 0.0), float(np.abs(v).max()))
    return out


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


def _dequantized_seq(op, quantized: bool) -> dict[str, np.ndarray]:
    """Float32 weights by role of one op of a seq blob (embed's `b [S, E]` per token)."""
    if op.kind == "embed":
        W, _ = dequantized(op, "", "s_in", quantized)
        b = op.tensors["b"].astype(np.float32)
        if quantized:
            b = b * (np.float32(op.fparams["s_in"]) * op.tensors["s"].astype(np.float32))
        return {"W": W, "b": b}
    groups = {"res_attention": "qkvo", "res_ff": "12", "dense": ("",), "conv": ("",)}.get(
        op.kind, ()
    )
    s_in = {"o": "s_ctx", "2": "s_h"}
    out = {}
    for g in groups:
        W, b = dequantized(op, g, s_in.get(g, "s_in"), quantized)
        out[f"W{g}"] = W
        if b is not None:
            out[f"b{g}"] = b
    return out


def rocket_features(blob: QuantModelSpec, X_raw: np.ndarray, lengths) -> np.ndarray:
    """The float features `[B, K]` (float32) of a rocket blob's op 0 on raw windows (a window
    longer than T: its last T steps), as the device's float program computes them."""
    op = blob.ops[0]
    ip, t = op.iparams, op.tensors
    X = np.asarray(X_raw)
    _, n, _ = fit_to_model(X, valid_lengths(X, lengths, X.shape[1]), ip["T"])
    xq = quantize_seq_input(blob, X, lengths).astype(np.int64)  # the int8 path's grid
    counts, n_pos = blob_rocket.counts(op, xq, n)
    ppv = np.where(n_pos > 0, counts * 32768.0 / np.maximum(n_pos, 1), 0.0)
    f = (ppv - t["z"]) * t["m"].astype(np.float64) / float(1 << ip["shift"])
    return f.astype(np.float32)


def run_float(
    blob: QuantModelSpec, X_raw: np.ndarray, lengths: np.ndarray | None = None
) -> np.ndarray:
    """Float32 real logits `[B, C]` of the blob's op list for raw rows `X_raw [B, 1, F]` or
    `[B, F]` (a seq blob: raw windows `[B, T', C]` with `lengths [B]`, None = all steps valid; a
    window longer than the model's T runs its last T steps, `fit_to_model`)."""
    q = blob.quantized
    if blob.ops[0].kind == "embed":
        mean, std = (np.asarray(v, dtype=np.float32) for v in (blob.norm_mean, blob.norm_std))
        X = np.asarray(X_raw)
        X, n, _ = fit_to_model(X, valid_lengths(X, lengths, X.shape[1]), blob.ops[0].iparams["T"])
        x = normalize_windows(X, n, mean, std, np.float32, blob.view)  # (B, T', C)
        weights = {id(op): _dequantized_seq(op, q) for op in blob.ops}
        return forward_seq(blob.ops, x, n, params=lambda op: weights[id(op)])
    ops = blob.ops
    if ops[0].kind == "rocket":  # K features, then a row model
        x, ops = rocket_features(blob, X_raw, lengths), ops[1:]
    else:
        mean = np.asarray(blob.norm_mean, dtype=np.float32)
        std = np.asarray(blob.norm_std, dtype=np.float32)
        raw = input_view(np.asarray(X_raw, dtype=np.float32), blob.view).astype(np.float32)
        x = (raw - mean) / std  # (B, 1, F) or (B, F)
    B = x.shape[0]
    x = x.reshape(B, -1)  # a row is a window of one step: [B, 1, F] -> [B, F] (dense ops)
    for op in ops:
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
