# Host (CPython): the integer reference — the exact int8-path results the device must reproduce.
"""NumPy int64 implementation of docs/quantization.md, vectorized over the batch.

- `quantize_input(blob, X_raw) -> xq int8 [B, F]`: the input equation (float64 on the blob's
  float32 mean, std and s_in), outside the integer kernel.
- `run_int8(blob, xq) -> logits int64 [B, C]`: runs the blob's op list with integers only.
  Real logits are `logits · blob.logit_scale`.

Sequence blobs (op 0 `embed`, docs/quantization.md "Sequence models"): `quantize_input(blob,
X_raw, lengths)` takes raw windows `[B, T', C]` and gives the flat `xq [B, S·P·C]` (channel
`i % C`'s mean and std; zero from step `n` to the end of the last valid patch and beyond);
`run_int8(blob, xq, lengths)` runs each window on its first `S_n = ceil(n/P)` tokens only
(windows grouped by `S_n`), as the device does with `run_int8(xq, out, n)`. A rocket blob (op
0 `rocket`, docs/quantization.md "rocket") takes its windows the same way, on its wider input
grid (`bits`: int32 xq), and computes its K int8 features from them (`rocket`), then the ops
after it as a row model's.

Every intermediate the device computes — products, every partial sum (in either order of
adding the bias), `acc·M`, `acc·M + half`, softmax differences, table products, sums and
numerators — is checked against the small-int budget `|v| < 2**30`; a violation raises
`SmallIntBudgetError` (an AssertionError, raised explicitly so `python -O` keeps it).

References: docs/quantization.md (the equations), docs/blob-format.md (the op records).
"""

from __future__ import annotations

import numpy as np

from tinyattn.intmodel import blob_rocket
from tinyattn.intmodel.blob import (
    MYATTN_EXPLICIT,
    SOFTMAX_DIFF_INT8,
    WINDOW_OPS,
    QuantModelSpec,
    seq_tokens,
    softmax_diff_max,
)
from tinyattn.intmodel.floatref import seq_groups, valid_lengths
from tinyattn.intmodel.grid import quantize_flat, quantize_seq_input

BUDGET = 1 << 30
LUT_SIZE = 256
Q14_SHIFT = 14


class SmallIntBudgetError(AssertionError):
    """An intermediate of the integer path reached |v| >= 2**30."""


def check_budget(v: np.ndarray, what: str) -> np.ndarray:
    """Raise `SmallIntBudgetError` unless every element of `v` has `|v| < 2**30`."""
    v = np.asarray(v)
    if v.size and (v.max() >= BUDGET or v.min() <= -BUDGET):
        worst = int(max(v.max(), -v.min()))
        raise SmallIntBudgetError(f"small-int budget broken in {what}: |v| = {worst} >= 2**30")
    return v


def requant(acc: np.ndarray, M, shift: int, lo: int, hi: int, what: str) -> np.ndarray:
    """`clamp((acc·M + (1 << (shift-1))) >> shift, lo, hi)`; M broadcasts over the last axis.

    Input: int64 `acc` with |acc·M| < 2**30 (checked). Rounding: half up (towards +inf),
    the same for negative values, because `>>` is an arithmetic (floor) shift.
    """
    prod = check_budget(acc * np.asarray(M, dtype=np.int64), f"{what}: acc·M")
    t = check_budget(prod + (1 << (shift - 1)), f"{what}: acc·M + half")
    return np.clip(t >> shift, lo, hi)


def accumulate(terms: np.ndarray, axis: int, what: str, bias: np.ndarray | None = None):
    """Σ over `axis` of int64 `terms`, checking every partial sum (bias first or last)."""
    check_budget(terms, f"{what}: products")
    partial = np.cumsum(terms, axis=axis)
    check_budget(partial, f"{what}: partial sums")
    acc = np.take(partial, -1, axis=axis)
    if bias is None:
        return acc
    if axis not in (-1, terms.ndim - 1):
        raise ValueError("a bias is added only when summing over the last axis (dense)")
    bias = bias.astype(np.int64)  # (out,) or per token (S, out): the axes before the summed one
    check_budget(partial + bias[..., None], f"{what}: partial sums with the bias first")
    return check_budget(acc + bias, f"{what}: accumulator")


def dense(x: np.ndarray, W: np.ndarray, b, M: np.ndarray, shift: int, lo: int, hi: int, what):
    """`y_q[..., o] = requant(Σ_i x_q[..., i]·W_q[o, i] + b_q[o], M[o], shift, lo, hi)`."""
    terms = x[..., None, :].astype(np.int64) * W.astype(np.int64)  # (..., out, in)
    acc = accumulate(terms, -1, what, b)  # (..., out)
    return requant(acc, M.astype(np.int64), shift, lo, hi, what)


def softmax_q14(score: np.ndarray, M_sm: int, shift_sm: int, lut: np.ndarray, diff_max: int,
                what: str):  # fmt: skip
    """Integer softmax over the last axis: probabilities in Q14 (docs/quantization.md). The
    index is computed for `diff <= diff_max` only (`blob.softmax_diff_max`): a larger diff has
    `idx >= 256`, so `e = 0` without its product `diff·M_sm`."""
    m = score.max(axis=-1, keepdims=True)
    diff = check_budget(m - score, f"{what}: max - score")  # >= 0
    inside = diff <= diff_max
    prod = check_budget(np.where(inside, diff, 0) * M_sm, f"{what}: diff·M_sm")
    idx = check_budget(prod + (1 << (shift_sm - 1)), f"{what}: diff·M_sm + half") >> shift_sm
    exp_hi, exp_lo = lut[0].astype(np.int64), lut[1].astype(np.int64)
    safe = np.minimum(idx, LUT_SIZE - 1)
    pair = check_budget(exp_hi[safe >> 4] * exp_lo[safe & 15], f"{what}: EXP_HI·EXP_LO")
    e = np.where(inside & (idx < LUT_SIZE), (pair + (1 << 13)) >> Q14_SHIFT, 0)
    total = np.cumsum(e, axis=-1)
    check_budget(total, f"{what}: partial sums of e")
    total = total[..., -1:]  # (..., 1), >= 2**14
    num = check_budget((e << Q14_SHIFT) + (total >> 1), f"{what}: p numerator")
    return num // total


def attention(x: np.ndarray, op, what: str) -> np.ndarray:
    """Integer multi-head self-attention `[B, S, E] -> [B, S, E]` (docs/quantization.md)."""
    ip, t = op.iparams, op.tensors
    B, S, E = x.shape  # batch, tokens, embedding
    H = ip["H"]
    D = E // H  # head_dim
    proj = {}
    for p in "qkv":
        proj[p] = dense(
            x, t[f"W{p}"], t.get(f"b{p}"), t[f"m{p}"], ip[f"shift_{p}"], -128, 127, f"{what} {p}"
        )  # (B, S, E)
    qh, kh, vh = (proj[p].reshape(B, S, H, D).transpose(0, 2, 1, 3) for p in "qkv")  # (B,H,S,D)
    terms = qh[:, :, :, None, :] * kh[:, :, None, :, :]  # (B, H, S_i, S_j, D)
    score = accumulate(terms, -1, f"{what} scores")  # (B, H, S, S)
    dmax = softmax_diff_max(2 * D * 128 * 128, ip["M_sm"], ip["shift_sm"])  # diff <= 2·D·2**14
    p = softmax_q14(score, ip["M_sm"], ip["shift_sm"], t["lut"], dmax, f"{what} softmax")
    terms = p[..., None] * vh[:, :, None, :, :]  # (B, H, S_i, S_j, D)
    acc = accumulate(terms, -2, f"{what} ctx")  # (B, H, S, D)
    ctx = requant(acc, ip["M_ctx"], ip["shift_ctx"], -128, 127, f"{what} ctx")
    ctx = ctx.transpose(0, 2, 1, 3).reshape(B, S, E)  # (B, S, E)
    return dense(ctx, t["Wo"], t.get("bo"), t["mo"], ip["shift_o"], -128, 127, f"{what} out")


def myattn(x: np.ndarray, op, what: str) -> np.ndarray:
    """Integer MyAttn `[B, q+k+v1·v2]` (mode 0) or `[B, S, E]` (mode 1) -> `[B, out]`
    (docs/quantization.md "myattn")."""
    ip, t = op.iparams, op.tensors
    B = x.shape[0]  # batch
    q, k, v1, v2 = ip["q"], ip["k"], ip["v1"], ip["v2"]
    if ip["mode"] == MYATTN_EXPLICIT:
        acc = x[:, :q]  # (B, q): Q is the input's first q values, a sum over one row
        qk = x[:, : q + k]  # (B, q+k) at s_in
        V = x[:, q + k :].reshape(B, v1, v2)  # (B, v1, v2)
    else:
        acc = accumulate(x, 1, f"{what} query")  # (B, E): sum over the S tokens
        V = x  # (B, S, E)
    Q = requant(acc, ip["M_q"], ip["shift_q"], -128, 127, f"{what} query")  # (B, q) at s_qa
    if ip["mode"] != MYATTN_EXPLICIT:
        qk = np.concatenate([Q, Q], axis=1)  # (B, 2E): K = Q, at s_qa
    scores = dense(
        qk, t["Wa"], t.get("ba"), t["ma"], ip["shift_a"], -128, 127, f"{what} scores"
    )  # (B, v1) at s_sc
    dmax = softmax_diff_max(SOFTMAX_DIFF_INT8, ip["M_sm"], ip["shift_sm"])
    p = softmax_q14(scores, ip["M_sm"], ip["shift_sm"], t["lut"], dmax, f"{what} softmax")
    terms = p[:, :, None] * V  # (B, v1, v2)
    acc = accumulate(terms, 1, f"{what} applied")  # (B, v2)
    applied = requant(acc, ip["M_ap"], ip["shift_ap"], -128, 127, f"{what} applied")
    qa = np.concatenate([Q, applied], axis=1)  # (B, q+v2) at s_qa
    return dense(qa, t["Wc"], t.get("bc"), t["mc"], ip["shift_c"], -128, 127, f"{what} out")


def residual_add(x, y, M_x: int, M_y: int, shift: int, what: str) -> np.ndarray:
    """`clamp((x·M_x + y·M_y + (1 << (shift-1))) >> shift, -128, 127)`: two int8 tensors at
    two scales to the output scale, one rounding of the exact sum (docs/quantization.md)."""
    px = check_budget(x * M_x, f"{what}: x·M_x")
    py = check_budget(y * M_y, f"{what}: y·M_y")
    t = check_budget(px + py, f"{what}: x·M_x + y·M_y")
    t = check_budget(t + (1 << (shift - 1)), f"{what}: sum + half")
    return np.clip(t >> shift, -128, 127)


def conv(x: np.ndarray, op, what: str) -> np.ndarray:
    """Integer conv over tokens `x [B, S_n, C]` (every token valid) -> `[B, ceil(S_n/stride),
    F]`: `y[t, o] = requant(b[o] + Σ_{c, j} x[t·stride + j·dilation - pad, g(o)·C/g + c]·
    W[o, c·K + j], m[o], shift, lo, 127)`, lo = 0 with relu (else -128), a token outside
    `0..S_n-1` adding nothing; partial sums in the order of W's row (docs/quantization.md)."""
    ip, t = op.iparams, op.tensors
    B, S, C = x.shape  # batch, valid tokens, channels
    K, s, d, g, F = (ip[n] for n in ("K", "stride", "dilation", "groups", "F"))
    pad = (K - 1) * d // 2
    S_out = -(-S // s)
    L = max((S_out - 1) * s + (K - 1) * d + 1, pad + S)
    xp = np.zeros((B, L, C), np.int64)
    xp[:, pad : pad + S] = x
    span = (S_out - 1) * s + 1
    cols = np.stack([xp[:, j * d : j * d + span : s] for j in range(K)], axis=2)  # (B,S',K,C)
    cols = cols.reshape(B, S_out, K, g, C // g).transpose(0, 1, 3, 4, 2)  # (B, S', g, C/g, K)
    cols = cols.reshape(B, S_out, g, C // g * K)[:, :, np.arange(F) // (F // g)]  # (B,S',F,n)
    acc = accumulate(cols * t["W"].astype(np.int64), -1, what, t.get("b"))  # (B, S', F)
    return requant(acc, t["m"].astype(np.int64), ip["shift"], 0 if ip["relu"] else -128, 127,
                   what)  # fmt: skip


def rocket(op, xq: np.ndarray, lengths: np.ndarray, what: str) -> np.ndarray:
    """The rocket op on grid windows `xq [B, S·P·C]` of `lengths` steps -> int8 features
    `[B, K]`: the counts (blob_rocket.counts: block exponent, pooling, convolutions and
    thresholds), `q = (count << 15) // npos` (0 without positions), `requant(q - z, m,
    shift, -128, 127)` (docs/quantization.md "rocket")."""
    ip, t = op.iparams, op.tensors
    check_budget(t["b"].astype(np.int64), f"{what}: bias")
    record: dict[str, int] = {}
    counts, n_pos = blob_rocket.counts(op, xq, lengths, record)
    check_budget(np.array([record.get("conv", 0)]), f"{what}: convolution")
    num = check_budget(counts << 15, f"{what}: count << 15")
    q = np.where(n_pos > 0, num // np.maximum(n_pos, 1), 0)
    return requant(q - t["z"].astype(np.int64), t["m"].astype(np.int64), ip["shift"], -128,
                   127, what)  # fmt: skip


def seq_op(x: np.ndarray, op, what: str) -> np.ndarray:
    """One op of a seq blob on `x [B, S_n, ·]`, every token valid (the first S_n tokens)."""
    ip, t = op.iparams, op.tensors
    if op.kind == "embed":
        b = t["b"][: x.shape[1]]  # (S_n, E): per-token bias (dense bias + position)
        return dense(x, t["W"], b, t["m"], ip["shift"], -128, 127, what)
    if op.kind == "conv":
        return conv(x, op, what)
    if op.kind == "res_attention":
        a = attention(x, op, what)
        return residual_add(x, a, ip["M_x"], ip["M_a"], ip["shift_add"], f"{what} add")
    if op.kind == "res_ff":
        h = dense(x, t["W1"], t.get("b1"), t["m1"], ip["shift_1"], 0, 127, f"{what} h")
        f = dense(h, t["W2"], t.get("b2"), t["m2"], ip["shift_2"], -128, 127, f"{what} f")
        return residual_add(x, f, ip["M_x"], ip["M_f"], ip["shift_add"], f"{what} add")
    if op.kind == "masked_pool":
        S_n = x.shape[1]
        acc = accumulate(x, 1, what)  # (B, E): sum over the S_n valid tokens
        return requant(acc, int(t["m"][S_n - 1]), ip["shift"], -128, 127, what)
    if op.kind == "dense":
        return dense(
            x, t["W"], t.get("b"), t["m"], ip["shift"], ip["act_min"], ip["act_max"], what
        )
    if op.kind == "relu":
        return np.maximum(x, 0)
    raise ValueError(f"{what} cannot run in a seq model")


def quantize_input(
    blob: QuantModelSpec, X_raw: np.ndarray, lengths: np.ndarray | None = None
) -> np.ndarray:
    """`xq = clamp(floor((x - mean) / std / s_in + 0.5), -128, 127)` as int8 `[B, F]`.

    Float64 arithmetic on the blob's float32 `mean`, `std`, `s_in` (as MicroPython's unix port).
    A NaN or infinite feature raises ValueError `row r: features must be finite numbers, not
    NaN or inf (feature i is nan)`: the device's message after `row r: ` (docs/quantization.md).
    A finite feature that overflows the arithmetic saturates like any other.
    A seq blob's windows go through `quantize_seq_input` (windows `[B, T', C]`).
    """
    if blob.ops and blob.ops[0].kind in WINDOW_OPS:
        return quantize_seq_input(blob, X_raw, lengths)
    X = np.asarray(X_raw, dtype=np.float64)
    if X.ndim == 3 and X.shape[1] == 1:  # a row is a window of one step: [B, 1, F] -> [B, F]
        X = X[:, 0, :]
    if X.ndim != 2 or X.shape[1] != blob.n_features:
        raise ValueError(f"X has shape {X.shape}, the blob expects [B, {blob.n_features}]")
    mean = np.asarray(blob.norm_mean, dtype=np.float32).astype(np.float64)
    std = np.asarray(blob.norm_std, dtype=np.float32).astype(np.float64)
    return quantize_flat(X, mean, std, blob.input_scale, blob.view)


def run_seq_int8(blob: QuantModelSpec, xq: np.ndarray, lengths=None) -> np.ndarray:
    """Integer logits `[B, classes]` of a seq blob for `xq [B, S·P·C]` and `lengths [B]`
    (steps; None = all T): window b runs on its first `ceil(n/P)` tokens only."""
    e = blob.ops[0].iparams
    T, C, P = e["T"], e["C"], e["P"]
    x = np.asarray(xq)
    width = seq_tokens(T, P) * P * C
    if x.ndim != 2 or x.shape[1] != width:
        raise ValueError(f"xq has shape {x.shape}, the blob expects [B, S·P·C] = [B, {width}]")
    if x.min(initial=0) < -128 or x.max(initial=0) > 127:
        raise ValueError("xq must be int8 values in [-128, 127]")
    n = valid_lengths(x[:, :, None], lengths, T) if lengths is not None else None
    n = np.full(len(x), T, np.int64) if n is None else n
    out = np.zeros((len(x), blob.n_classes), np.int64)
    for S_n, idx in seq_groups(n, P):
        h = x[idx, : S_n * P * C].astype(np.int64).reshape(len(idx), S_n, P * C)
        for k, op in enumerate(blob.ops):
            h = seq_op(h, op, f"op {k} ({op.kind})")
        out[idx] = h
    return out


def _rocket_input(blob: QuantModelSpec, xq: np.ndarray, lengths) -> np.ndarray:
    """The int8 features `[B, K]` of a rocket blob's op 0 for `xq [B, S·P·C]`."""
    ip = blob.ops[0].iparams
    T, C, P = ip["T"], ip["C"], ip["P"]
    x = np.asarray(xq)
    width = seq_tokens(T, P) * P * C
    if x.ndim != 2 or x.shape[1] != width:
        raise ValueError(f"xq has shape {x.shape}, the blob expects [B, S·P·C] = [B, {width}]")
    lo, hi = -(1 << (ip["bits"] - 1)), (1 << (ip["bits"] - 1)) - 1
    if x.min(initial=0) < lo or x.max(initial=0) > hi:
        raise ValueError(f"xq must be values of the input grid, in [{lo}, {hi}]")
    n = valid_lengths(x[:, :, None], lengths, T) if lengths is not None else None
    n = np.full(len(x), T, np.int64) if n is None else n
    return rocket(blob.ops[0], x, n, "op 0 (rocket)")


def run_int8(blob: QuantModelSpec, xq: np.ndarray, lengths=None) -> np.ndarray:
    """Integer logits `[B, C]` int64 for int8 inputs `xq [B, F]`; asserts the budget.
    A seq blob: `xq [B, S·P·C]` from `quantize_input` and the windows' `lengths [B]`."""
    if not blob.quantized:
        raise ValueError("this blob holds float32 weights only (exported with --float32)")
    if blob.ops and blob.ops[0].kind == "embed":
        return run_seq_int8(blob, xq, lengths)
    ops = list(enumerate(blob.ops))
    if blob.ops and blob.ops[0].kind == "rocket":  # K int8 features, then a row model
        x = _rocket_input(blob, xq, lengths)
        ops = ops[1:]
    else:
        x = np.asarray(xq)
        if x.ndim != 2 or x.shape[1] != blob.n_features:
            raise ValueError(f"xq has shape {x.shape}, the blob expects [B, {blob.n_features}]")
        if x.min(initial=0) < -128 or x.max(initial=0) > 127:
            raise ValueError("xq must be int8 values in [-128, 127]")
        x = x.astype(np.int64)
    B = x.shape[0]
    for k, op in ops:
        ip, t = op.iparams, op.tensors
        what = f"op {k} ({op.kind})"
        if op.kind == "dense":
            x = dense(
                x, t["W"], t.get("b"), t["m"], ip["shift"], ip["act_min"], ip["act_max"], what
            )
        elif op.kind == "relu":
            x = np.maximum(x, 0)
        elif op.kind == "reshape":
            x = x.reshape(B, ip["S"], ip["E"])
        elif op.kind == "attention":
            x = attention(x, op, what)
        elif op.kind == "avgpool":
            acc = accumulate(x, 1, what)  # (B, E)
            x = requant(acc, ip["M"], ip["shift"], -128, 127, what)
        elif op.kind == "myattn":
            x = myattn(x, op, what)
        else:
            raise ValueError(f"{what} is not implemented in the integer reference")
    return x
