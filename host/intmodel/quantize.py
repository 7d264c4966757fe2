# Host (CPython): post-training int8 quantization of a trained model -> QuantModelSpec.
"""Post-training quantization exactly as docs/quantization.md specifies.

- Weights: symmetric int8 per output channel, `s_w[o] = max|W[o,:]| / 127`; biases int32 at
  scale `s_in·s_w[o]`.
- Activations: one int8 scale per tensor, `s = absmax / 127`, calibrated with the float64
  model on the train split — every op's output and, inside attention, q, k, v, ctx and out;
  inside myattn the scores and one scale for the query and the applied values together.
  The logits use `absmax / 16383` in an int16 range.
- Requantization multipliers: per layer the **largest** shift in 1..30 for which every
  channel's `M = round(r·2**shift) < 2**15` and `max|acc|·M + 2**(shift-1) < 2**30` (the
  small-int budget), `max|acc|` being the worst case given the weights (`choose_shift`).
- The softmax exp table `exp_lut()` (uint16 `[2, 16]`).

All scales are rounded to float32 first (the blob stores them as f32); multipliers, biases and
weights are then computed in float64 from those rounded values, with `np.rint` (round half to
even) — only here, on the host: readers never round, they read integers.

`quantize(model, X_calib_raw)` gives the int8 `QuantModelSpec`; `float32_spec(model)` the
unquantized one (`tinyattn export --float32`).

`seq-rocket` models (docs/quantization.md "rocket"): the transform is integer already (its grid,
groups and biases go to the blob as they are); each feature's PPV is mapped onto int8 from its
range over the TRAIN windows (a zero point `z` at the middle, a multiplier so that the range
spans 255 steps, one shift for all), and the head's standardization and that mapping fold into
the int8 dense head (`quantize_rocket`).

Sequence models (`seq-attn`; docs/quantization.md "Sequence models"): `quantize(model, X_train,
lengths)` with the TRAIN windows `[N, T', C]` and their lengths. Scales are calibrated over
valid tokens only (each window run on its first `ceil(n/P)` tokens, `floatref.forward_seq`);
the positional embedding folds into the embedding's per-token int32 bias; each residual add
`y = x + a` gets `M_x`, `M_a` and one shared shift by the same budget rule (`choose_shift`
over both ratios); masked_pool's table `m[k-1] = rint(2**shift / k)`, one shift for every k.

References: docs/quantization.md; Jacob et al. 2018, "Quantization and Training of Neural
Networks for Efficient Integer-Arithmetic-Only Inference" (multiplier + shift); TFLite Micro
reference kernels (per-channel weights, int32 bias).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tinyattn.data.windows import model_view
from tinyattn.intmodel.blob import (
    F32,
    INT8_MAX,
    INT8_MIN,
    LOGIT_MAX,
    LOGIT_MIN,
    M_LIMIT,
    MYATTN_EXPLICIT,
    MYATTN_POOL,
    OP_LAYOUTS,
    OPCODES,
    SHIFT_MAX,
    SHIFT_MIN,
    Op,
    QuantModelSpec,
    softmax_diff_max,
)
from tinyattn.intmodel.floatref import (
    forward_npz,
    forward_seq,
    myattn_sizes,
    seq_float_ops,
)
from tinyattn.learn.model import ModelFile

BUDGET = 1 << 30  # small-int budget: every intermediate |v| < 2**30
Q_MAX = 127  # int8 activations and weights: s = absmax / 127
ROW_FLOOR = 1 / 256  # a weight row's range is at least this fraction of its layer's largest
LOGIT_Q_MAX = 16383  # logits: s_logit = absmax / 16383, stored in [-32768, 32767]
X_ABS_MAX = 128  # |x_q| <= 128 for any int8 input (the range includes -128)
Q14 = 1 << 14  # probabilities and exp values are Q14 fixed point
LUT_STEPS_PER_UNIT = 32  # softmax table index counts 1/32 of a real logit difference
LUT_SIZE = 256  # idx >= 256 gives exp = 0


class QuantizeError(ValueError):
    """The model cannot be quantized within the small-int budget (message names the layer)."""


def f32(x) -> float:
    """Round to float32 (the blob's storage) and back to a Python float."""
    return float(np.float32(x))


def activation_scale(absmax: float, q_max: int = Q_MAX) -> float:
    """Per-tensor scale `absmax / q_max` rounded to f32; an all-zero tensor gets `1 / q_max`."""
    absmax = float(absmax)
    if not math.isfinite(absmax):
        raise QuantizeError(f"calibration saw a non-finite activation ({absmax})")
    return f32((absmax if absmax > 0 else 1.0) / q_max)


def quantize_weights(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel symmetric int8: `(W_q [out,in] int8, s_w [out] float32)`.

    Each row's range is floored at 1/256 of the layer's largest (`ROW_FLOOR`; 1/127 if all of
    W is zero): a dead or near-dead row (weight decay drives some to ~1e-12) would otherwise
    get a scale so small that its bias, in units of `s_in·s_w`, leaves the small-int budget.
    Such a row's weights are negligible next to its neighbours', so the coarser grid costs
    nothing measurable.
    """
    W = np.asarray(W, dtype=np.float64)
    absmax = np.abs(W).max(axis=1)  # (out,)
    layer_max = absmax.max() if absmax.max() > 0 else 1.0
    s_w = (np.maximum(absmax, layer_max * ROW_FLOOR) / Q_MAX).astype(np.float32)  # (out,)
    W_q = np.clip(np.rint(W / s_w.astype(np.float64)[:, None]), -Q_MAX, Q_MAX)
    return W_q.astype(np.int8), s_w


def quantize_bias(b: np.ndarray, s_in: float, s_w: np.ndarray, what: str) -> np.ndarray:
    """`b_q[o] = round(b[o] / (s_in·s_w[o]))` as int32."""
    b_q = np.rint(np.asarray(b, dtype=np.float64) / (s_in * s_w.astype(np.float64)))
    if np.any(np.abs(b_q) >= BUDGET):
        raise QuantizeError(f"{what}: a bias is {np.abs(b_q).max():.0f} input steps, over 2**30")
    return b_q.astype(np.int32)


def choose_shift(r: np.ndarray, max_acc: np.ndarray, what: str) -> tuple[np.ndarray, int]:
    """`(M [n] int64, shift)`: the largest shift in 1..30 within the small-int budget.

    `r [n]` are the real multipliers, `max_acc [n]` the worst-case |accumulator| of each
    channel. Conditions (docs/quantization.md): `M = rint(r·2**shift) < 2**15` and
    `max_acc·M + 2**(shift-1) < 2**30` for every channel.
    """
    r = np.atleast_1d(np.asarray(r, dtype=np.float64))
    max_acc = np.atleast_1d(np.asarray(max_acc, dtype=np.int64))
    if np.any(r <= 0) or not np.all(np.isfinite(r)):
        raise QuantizeError(f"{what}: real multipliers must be finite and > 0, got {r}")
    if np.any(max_acc >= BUDGET):
        raise QuantizeError(
            f"{what}: the accumulator alone can reach {max_acc.max()} >= 2**30; the layer is too "
            "wide (or a bias too large) for the small-int budget"
        )
    for shift in range(SHIFT_MAX, SHIFT_MIN - 1, -1):
        M = np.rint(r * 2.0**shift)  # compared as floats first: a huge r would not cast
        if np.all(M < M_LIMIT):
            M = M.astype(np.int64)
            if np.all(max_acc * M + (1 << (shift - 1)) < BUDGET):
                return M, shift
    raise QuantizeError(
        f"{what}: no shift in 1..30 keeps M < 2**15 and max|acc|·M < 2**30 (real multiplier "
        f"up to {r.max():.4g}, max|acc| up to {max_acc.max()}); the scales are out of range — "
        "check the calibration data and the trained weights"
    )


# A real softmax multiplier at or above 255.5 sends every diff >= 1 past the table (idx =
# round(diff·r) >= 256, e = 0): the softmax is a hard max. Any r from there on gives the same
# probabilities, so the exporter stores at most this one (M / 2**shift = 1024 exactly).
SOFTMAX_R_MAX = 1024.0


def choose_softmax_shift(r: float, bound: int, what: str) -> tuple[int, int]:
    """`(M_sm, shift_sm)` of a softmax index `idx = round(diff·r)`, `0 <= diff <= bound`: the
    largest shift in 1..30 with `M < 2**15` and `bound·M + 2**(shift-1) < 2**30` (every diff's
    index computed; the rule of every model that exported before large score scales were
    handled, so their blobs are unchanged); if no shift keeps that, `r` is clipped at
    SOFTMAX_R_MAX and the largest shift with `M < 2**15` and `diff_max·M + 2**(shift-1) <
    2**30`, `diff_max = softmax_diff_max(bound, M, shift)` (the diffs whose index leaves the
    table are never multiplied) — always some shift <= 21 (docs/quantization.md)."""
    try:
        M, shift = choose_shift([r], [bound], what)
        return int(M[0]), shift
    except QuantizeError:
        if not (math.isfinite(r) and r > 0):
            raise
    r = min(r, SOFTMAX_R_MAX)
    for shift in range(SHIFT_MAX, SHIFT_MIN - 1, -1):
        M = int(np.rint(r * 2.0**shift))
        d = softmax_diff_max(bound, M, shift)
        if M < M_LIMIT and d < BUDGET and d * M + (1 << (shift - 1)) < BUDGET:
            return M, shift
    raise QuantizeError(
        f"{what}: no shift in 1..30 keeps M < 2**15 and diff_max·M < 2**30 "
        f"(diffs up to {bound}); the head is too wide for the small-int budget"
    )


def dense_max_acc(W_q: np.ndarray, b_q: np.ndarray | None) -> np.ndarray:
    """Worst-case |Σ_i x_q[i]·W_q[o,i] + b_q[o]| over all int8 inputs, per channel `[out]`."""
    acc = X_ABS_MAX * np.abs(W_q.astype(np.int64)).sum(axis=1)
    if b_q is not None:
        acc = acc + np.abs(b_q.astype(np.int64))
    return acc


def exp_lut() -> np.ndarray:
    """uint16 `[2, 16]`: `EXP_HI[a] = rint(2**14·exp(-a/2))`, `EXP_LO[b] = rint(2**14·exp(-b/32))`.

    Row 0 is EXP_HI, row 1 EXP_LO; `e = (EXP_HI[idx >> 4]·EXP_LO[idx & 15] + 2**13) >> 14`.
    """
    hi = [round(Q14 * math.exp(-16 * a / LUT_STEPS_PER_UNIT)) for a in range(16)]
    lo = [round(Q14 * math.exp(-b / LUT_STEPS_PER_UNIT)) for b in range(16)]
    return np.array([hi, lo], dtype=np.uint16)


@dataclass
class QuantDense:
    """One quantized projection: tensors by role suffix and its layer shift."""

    W: np.ndarray  # (out, in) int8
    b: np.ndarray | None  # (out,) int32
    s: np.ndarray  # (out,) float32
    m: np.ndarray  # (out,) int16
    shift: int


def quantize_dense(
    W: np.ndarray, b: np.ndarray | None, s_in: float, s_out: float, what: str
) -> QuantDense:
    """Weights, bias and multipliers of `y = x @ W.T + b` from scale `s_in` to `s_out`."""
    W_q, s_w = quantize_weights(W)
    b_q = None if b is None else quantize_bias(b, s_in, s_w, what)
    r = s_in * s_w.astype(np.float64) / s_out  # (out,)
    M, shift = choose_shift(r, dense_max_acc(W_q, b_q), what)
    return QuantDense(W_q, b_q, s_w, M.astype(np.int16), shift)


def _dense_tensors(qd: QuantDense, suffix: str = "") -> dict[str, np.ndarray]:
    t = {f"W{suffix}": qd.W, f"s{suffix}": qd.s, f"m{suffix}": qd.m}
    if qd.b is not None:
        t[f"b{suffix}"] = qd.b
    return t


def calibrate(model: ModelFile, X_raw: np.ndarray) -> dict[str, float]:
    """Per-tensor absmax of the float64 activations on `X_raw` (the train split).

    Keys: `"input"`, `"{i}"` (output of op i), `"{i}.q|k|v|att|ctx"` inside attention,
    `"{i}.q|scores|weights|applied"` inside myattn. The output of a dense layer followed by
    relu is calibrated on the relu's output (its positive range).
    """
    record: dict[str, np.ndarray] = {}
    x_norm = model.normalize(X_raw)
    forward_npz(model, x_norm, record)
    absmax = {"input": float(np.abs(x_norm).max())}
    for key, value in record.items():
        absmax[key] = float(np.abs(value).max())
    return absmax


def quantize(
    model: ModelFile, X_calib_raw: np.ndarray, lengths: np.ndarray | None = None
) -> QuantModelSpec:
    """The int8 `QuantModelSpec` of `model`, calibrated on raw features `X_calib_raw [N, F]`
    (a seq model: the TRAIN windows `[N, T', C]` and their `lengths [N]`)."""
    if model.is_seq:  # windows: token ops calibrated at valid steps, masked pooling
        return quantize_seq(model, X_calib_raw, lengths)
    if model.is_windows:  # seq-rocket: the transform as it is, the features and the head
        return quantize_rocket(model, X_calib_raw, lengths)
    absmax = calibrate(model, X_calib_raw)
    ops_in = model.ops
    n = len(ops_in)
    s_in_model = activation_scale(absmax["input"])
    s = s_in_model  # scale of the tensor flowing into the current op
    ops: list[Op] = []
    shape: tuple[int, ...] = (len(model.norm_mean),)
    for i, op in enumerate(ops_in):
        kind, last = op["op"], i == n - 1
        if kind == "dense":
            # Output scale: of the following relu's output if there is one, logits if last.
            calib_key = str(i + 1) if i + 1 < n and ops_in[i + 1]["op"] == "relu" else str(i)
            if last:
                s_out = activation_scale(absmax[calib_key], LOGIT_Q_MAX)
                act = (LOGIT_MIN, LOGIT_MAX)
            else:
                s_out = activation_scale(absmax[calib_key])
                act = (INT8_MIN, INT8_MAX)
            qd = quantize_dense(
                model.param(i, "W"), model.param(i, "b"), s, s_out, f"op {i} (dense)"
            )
            n_out, n_in = qd.W.shape
            ops.append(
                Op(
                    "dense",
                    {
                        "in": n_in,
                        "out": n_out,
                        "has_bias": int(qd.b is not None),
                        "shift": qd.shift,
                        "act_min": act[0],
                        "act_max": act[1],
                    },
                    {"s_in": s, "s_out": s_out},
                    _dense_tensors(qd),
                )
            )
            s = s_out
            shape = shape[:-1] + (n_out,)
        elif kind == "relu":
            ops.append(Op("relu", {}))
        elif kind == "reshape":
            if len(op["shape"]) != 2:
                raise QuantizeError(
                    f"op {i} (reshape): shape {op['shape']} — the blob reshapes to [S, E] only"
                )
            S, E = (int(d) for d in op["shape"])
            ops.append(Op("reshape", {"S": S, "E": E}))
            shape = (S, E)
        elif kind == "attention":
            ops.append(_quantize_attention(model, i, op, s, shape, absmax, last))
            s = ops[-1].fparams["s_out"]
        elif kind == "avgpool":
            S, E = shape
            M, shift = choose_shift([1.0 / S], [X_ABS_MAX * S], f"op {i} (avgpool)")
            ops.append(Op("avgpool", {"S": S, "E": E, "M": int(M[0]), "shift": shift}))
            shape = (E,)  # output scale = input scale
        elif kind == "myattn":
            # output scale: of the following relu's output if there is one (as for dense)
            out_key = str(i + 1) if i + 1 < n and ops_in[i + 1]["op"] == "relu" else str(i)
            ops.append(_quantize_myattn(model, i, op, s, shape, absmax, last, out_key))
            s = ops[-1].fparams["s_out"]
            shape = (ops[-1].iparams["out"],)
        else:
            raise QuantizeError(
                f"op {i} ({kind}) has no int8 kernel; exportable ops: dense, relu, reshape, "
                "attention, avgpool, myattn"
            )
    if not ops or ops[-1].kind != "dense":
        raise QuantizeError("the int8 path needs a dense layer last (it writes the logits)")
    return QuantModelSpec(
        quantized=True,
        class_names=model.class_names,
        norm_mean=model.norm_mean.astype(F32),
        norm_std=model.norm_std.astype(F32),
        view=model_view(model.ops),
        input_scale=s_in_model,
        logit_scale=s,
        ops=ops,
    )


def _quantize_attention(model, i, op, s_in, shape, absmax, last) -> Op:
    if last:
        raise QuantizeError(f"op {i} (attention) cannot be last: a dense layer writes logits")
    S, E = shape
    params = {f"{w}{p}": model.param(i, f"{w}{p}") for w in "Wb" for p in "qkvo"}
    params = {role: v for role, v in params.items() if v is not None}
    ip = {"S": S, "E": E, "H": int(op["num_heads"])}
    s_out = activation_scale(absmax[str(i)])
    return _quantize_attention_params(params, ip, s_in, s_out, absmax, i, f"op {i} (attention)")


def _quantize_attention_params(params, ip, s_in, s_out, absmax, i, what) -> Op:
    """The attention op's int8 parameters from float weights by role (`Wq`, `bq`, …),
    sizes `ip` (S, E, H), the input and output scales and the calibrated `"{i}.q|k|v|ctx"`."""
    S, E, H = ip["S"], ip["E"], ip["H"]
    D = E // H
    sc = {name: activation_scale(absmax[f"{i}.{name}"]) for name in ("q", "k", "v", "ctx")}
    sc["out"] = s_out
    proj = {}
    for p in "qkv":
        proj[p] = quantize_dense(params[f"W{p}"], params.get(f"b{p}"), s_in, sc[p], f"{what} W{p}")
    proj["o"] = quantize_dense(params["Wo"], params.get("bo"), sc["ctx"], sc["out"], f"{what} Wo")
    # idx = round(diff · s_q·s_k/sqrt(D) · 32), diff = max - score <= 2·D·2**14.
    r_sm = sc["q"] * sc["k"] / math.sqrt(D) * LUT_STEPS_PER_UNIT
    M_sm, shift_sm = choose_softmax_shift(r_sm, 2 * D * X_ABS_MAX * X_ABS_MAX, f"{what} softmax")
    # ctx = Σ_j p[j]·v[j,c] with p in Q14: |acc| <= 128·Σp <= 128·(2**14 + S).
    r_ctx = sc["v"] / Q14 / sc["ctx"]
    M_ctx, shift_ctx = choose_shift([r_ctx], [X_ABS_MAX * (Q14 + S)], f"{what} ctx")
    tensors: dict[str, np.ndarray] = {}
    for p in "qkvo":
        tensors.update(_dense_tensors(proj[p], p))
    tensors["lut"] = exp_lut()
    has_bias = int(proj["q"].b is not None)
    return Op(
        "attention",
        {
            "S": S,
            "E": E,
            "H": H,
            "has_bias": has_bias,
            "shift_q": proj["q"].shift,
            "shift_k": proj["k"].shift,
            "shift_v": proj["v"].shift,
            "shift_o": proj["o"].shift,
            "M_sm": M_sm,
            "shift_sm": shift_sm,
            "M_ctx": int(M_ctx[0]),
            "shift_ctx": shift_ctx,
        },
        {
            "s_in": s_in,
            "s_q": sc["q"],
            "s_k": sc["k"],
            "s_v": sc["v"],
            "s_ctx": sc["ctx"],
            "s_out": sc["out"],
        },
        tensors,
    )


def _myattn_iparams(op: dict, shape: tuple[int, ...], what: str) -> dict[str, int]:
    """mode and sizes of a model-file myattn op, checked against its input shape."""
    q, k, v1, v2 = myattn_sizes(op)
    mode = {"explicit": MYATTN_EXPLICIT, "pool": MYATTN_POOL}.get(op["mode"])
    want = (q + k + v1 * v2,) if mode == MYATTN_EXPLICIT else (v1, v2)
    if mode is None or shape != want:
        raise QuantizeError(
            f"{what}: mode {op['mode']!r} with sizes q, k, v1, v2 = {q}, {k}, {v1}, {v2} needs "
            f"input {list(want)}, the previous op gives {list(shape)}"
        )
    out = int(op["output_size"])
    return {"mode": mode, "q": q, "k": k, "v1": v1, "v2": v2, "out": out}


def _quantize_myattn(model, i, op, s_in, shape, absmax, last, out_key) -> Op:
    """MyAttn at int8 (docs/quantization.md "myattn"): the query Q (requantized input slice,
    or mean token) and the applied values share one scale `s_qa`, so `Q ‖ applied` is one
    int8 vector for attn_combine; the scores have their own; the weights are Q14."""
    what = f"op {i} (myattn)"
    if last:
        raise QuantizeError(f"{what} cannot be last: a dense layer writes logits")
    ip = _myattn_iparams(op, shape, what)
    explicit = ip["mode"] == MYATTN_EXPLICIT
    s_qa = activation_scale(max(absmax[f"{i}.q"], absmax[f"{i}.applied"]))
    s_sc = activation_scale(absmax[f"{i}.scores"])
    s_out = activation_scale(absmax[out_key])
    s_qk = s_in if explicit else s_qa  # Q ‖ K: the input's slice, or the mean token twice
    # Q = requant(sum of n rows of the input): n = 1 (explicit) or S tokens (pool, the mean).
    n = 1 if explicit else ip["v1"]
    M_q, shift_q = choose_shift([s_in / n / s_qa], [X_ABS_MAX * n], f"{what} query")
    Wa = quantize_dense(model.param(i, "Wa"), model.param(i, "ba"), s_qk, s_sc, f"{what} Wa")
    # idx = round(diff · s_sc · 32), diff = max - score <= 255 (int8 scores).
    M_sm, shift_sm = choose_softmax_shift(s_sc * LUT_STEPS_PER_UNIT, 255, f"{what} softmax")
    # applied = Σ_j p[j]·V[j,d] with p in Q14: |acc| <= 128·(2**14 + v1), as attention's ctx.
    M_ap, shift_ap = choose_shift(
        [s_in / Q14 / s_qa], [X_ABS_MAX * (Q14 + ip["v1"])], f"{what} applied"
    )
    Wc = quantize_dense(model.param(i, "Wc"), model.param(i, "bc"), s_qa, s_out, f"{what} Wc")
    tensors = {**_dense_tensors(Wa, "a"), **_dense_tensors(Wc, "c"), "lut": exp_lut()}
    return Op(
        "myattn",
        {
            **ip,
            "has_bias": int(Wa.b is not None),
            "M_q": int(M_q[0]),
            "shift_q": shift_q,
            "shift_a": Wa.shift,
            "M_sm": M_sm,
            "shift_sm": shift_sm,
            "M_ap": int(M_ap[0]),
            "shift_ap": shift_ap,
            "shift_c": Wc.shift,
        },
        {"s_in": s_in, "s_qk": s_qk, "s_sc": s_sc, "s_qa": s_qa, "s_out": s_out},
        tensors,
    )


def calibrate_seq(model: ModelFile, X_raw: np.ndarray, lengths=None) -> dict[str, float]:
    """Absmax over the valid tokens of raw windows `X_raw [N, T', C]` (the TRAIN windows):
    `"input"`, `"{k}"` (output of blob op k), `"{k}.q|k|v|ctx|a"` (res_attention; `a` is the
    attention output before the residual add), `"{k}.h|f"` (res_ff: relu output, Dense2
    output), keys by the blob op index (`seq_float_ops`)."""
    absmax: dict[str, float] = {}
    forward_seq(seq_float_ops(model), model.normalize(X_raw, lengths), lengths, absmax)
    return absmax


def quantize_residual_add(s_x: float, s_a: float, s_y: float, what: str) -> dict[str, int]:
    """`M_x, M_a, shift_add` of `y = x + a`: `M_x / 2**shift ≈ s_x / s_y`, `M_a / 2**shift ≈
    s_a / s_y`, the largest shift where both are < 2**15 and `128·M + 2**(shift-1) < 2**30`
    (`choose_shift` over the two ratios); their sum then stays in the budget too."""
    M, shift = choose_shift([s_x / s_y, s_a / s_y], [X_ABS_MAX, X_ABS_MAX], f"{what} add")
    if X_ABS_MAX * int(M.sum()) + (1 << (shift - 1)) >= BUDGET:  # pragma: no cover - M < 2**15
        raise QuantizeError(f"{what} add: 128·(M_x + M_a) leaves the small-int budget")
    return {"M_x": int(M[0]), "M_a": int(M[1]), "shift_add": shift}


def pool_multipliers(S: int, what: str) -> tuple[np.ndarray, int]:
    """masked_pool's `m [S]` int16, `m[k-1] = rint(2**shift / k)`, and the shift: the largest
    with every `m < 2**15` and `128·k·m[k-1] + 2**(shift-1) < 2**30` (k = 1 binds: 14)."""
    k = np.arange(1, S + 1)
    M, shift = choose_shift(1.0 / k, X_ABS_MAX * k, f"{what} table")
    return M.astype(np.int16), shift


def quantize_seq(model: ModelFile, X_raw: np.ndarray, lengths=None) -> QuantModelSpec:
    """The int8 spec of a seq model (ops embed, conv, res_attention, res_ff, masked_pool,
    dense)."""
    fops = seq_float_ops(model)
    absmax = calibrate_seq(model, X_raw, lengths)
    s_in_model = activation_scale(absmax["input"])
    s = s_in_model
    ops: list[Op] = []
    n = len(fops)
    for k, fop in enumerate(fops):
        ip, t, what, last = fop.iparams, fop.tensors, f"op {k} ({fop.kind})", k == n - 1
        if fop.kind == "embed":
            s_out = activation_scale(absmax[str(k)])
            W_q, s_w = quantize_weights(t["W"])
            b_q = np.stack([quantize_bias(b, s, s_w, what) for b in t["b"]])  # (S, E)
            acc = X_ABS_MAX * np.abs(W_q.astype(np.int64)).sum(axis=1) + np.abs(
                b_q.astype(np.int64)
            ).max(axis=0)
            M, shift = choose_shift(s * s_w.astype(np.float64) / s_out, acc, what)
            tensors = {"W": W_q, "b": b_q, "s": s_w, "m": M.astype(np.int16)}
            ops.append(Op("embed", {**ip, "shift": shift}, {"s_in": s, "s_out": s_out}, tensors))
            s = s_out
        elif fop.kind == "conv":  # per output channel as a dense; relu: the clamp [0, 127]
            s_out = activation_scale(absmax[str(k)])
            qd = quantize_dense(t["W"], t.get("b"), s, s_out, what)
            fparams = {"s_in": s, "s_out": s_out}
            ops.append(Op("conv", {**ip, "shift": qd.shift}, fparams, _dense_tensors(qd)))
            s = s_out
        elif fop.kind == "res_attention":
            if f"{k}.a" not in absmax:
                raise QuantizeError(f"{what}: no calibration data")
            s_a = activation_scale(absmax[f"{k}.a"])
            s_y = activation_scale(absmax[str(k)])
            att = _quantize_attention_params(t, ip, s, s_a, absmax, k, what)
            att.iparams.update(quantize_residual_add(s, s_a, s_y, what))
            att.fparams["s_y"] = s_y
            ops.append(Op("res_attention", att.iparams, att.fparams, att.tensors))
            s = s_y
        elif fop.kind == "res_ff":
            s_h = activation_scale(absmax[f"{k}.h"])
            s_f = activation_scale(absmax[f"{k}.f"])
            s_y = activation_scale(absmax[str(k)])
            d1 = quantize_dense(t["W1"], t.get("b1"), s, s_h, f"{what} W1")
            d2 = quantize_dense(t["W2"], t.get("b2"), s_h, s_f, f"{what} W2")
            add = quantize_residual_add(s, s_f, s_y, what)
            iparams = {
                **ip, "shift_1": d1.shift, "shift_2": d2.shift,
                "M_x": add["M_x"], "M_f": add["M_a"], "shift_add": add["shift_add"],
            }  # fmt: skip
            tensors = {**_dense_tensors(d1, "1"), **_dense_tensors(d2, "2")}
            fparams = {"s_in": s, "s_h": s_h, "s_f": s_f, "s_y": s_y}
            ops.append(Op("res_ff", iparams, fparams, tensors))
            s = s_y
        elif fop.kind == "masked_pool":
            m, shift = pool_multipliers(ip["S"], what)
            ops.append(Op("masked_pool", {**ip, "shift": shift}, {}, {"m": m}))
            # output scale = input scale
        elif fop.kind == "relu":
            ops.append(Op("relu", {}))
        elif fop.kind == "dense":
            key = str(k + 1) if k + 1 < n and fops[k + 1].kind == "relu" else str(k)
            s_out = activation_scale(absmax[key], LOGIT_Q_MAX if last else Q_MAX)
            act = (LOGIT_MIN, LOGIT_MAX) if last else (INT8_MIN, INT8_MAX)
            qd = quantize_dense(t["W"], t.get("b"), s, s_out, what)
            iparams = {**ip, "shift": qd.shift, "act_min": act[0], "act_max": act[1]}
            ops.append(Op("dense", iparams, {"s_in": s, "s_out": s_out}, _dense_tensors(qd)))
            s = s_out
    if ops[-1].kind != "dense":
        raise QuantizeError("the int8 path needs a dense layer last (it writes the logits)")
    return QuantModelSpec(
        quantized=True,
        class_names=model.class_names,
        norm_mean=model.norm_mean.astype(F32),
        norm_std=model.norm_std.astype(F32),
        view=model_view(model.ops),
        input_scale=s_in_model,
        logit_scale=s,
        ops=ops,
    )


Q15 = 1 << 15  # the rocket features' PPV fixed point
ROCKET_MIN_SPAN = 1 / 1024  # a feature's PPV range over TRAIN is taken as at least this


def quantize_rocket(model: ModelFile, X_raw: np.ndarray, lengths=None) -> QuantModelSpec:
    """The int8 spec of a `seq-rocket` model (op 0 rocket, op 1 dense): the rocket op's groups,
    channels and bias mantissas as they are; feature j's zero point `z = rint(mid_j·2**15)`
    and multiplier `M_j / 2**shift ≈ 255 / (span_j·2**15)` from its PPV range `[lo, hi]` over
    the TRAIN windows `X_raw [N, T', C]` (mid and span of that range, the span at least
    `ROCKET_MIN_SPAN`; one shift, the largest within the small-int budget with |p - z| <=
    2**15), so TRAIN's range spans 255 steps; the head `W (p - mean)/std + b` with
    `p = (f_q·2**shift / M + z) / 2**15` folded in: `W' = W·2**shift / (std·M·2**15)`,
    `b' = b + W (z/2**15 - mean)/std`, quantized as a dense layer from scale 1 (the int8
    features) to the logits' `absmax / 16383` over TRAIN."""
    op, head = model.ops
    layer = model.model.rocket
    p = layer.rocket_params()
    x = model.normalize(X_raw, lengths)
    F = layer.ppv(x, lengths)  # (N, K) TRAIN's PPVs
    lo, hi = F.min(axis=0), F.max(axis=0)
    span = np.maximum(hi - lo, ROCKET_MIN_SPAN)
    z = np.clip(np.rint((lo + hi) / 2 * Q15), 0, Q15).astype(np.int32)
    M, shift = choose_shift(255 / (span * Q15), np.full(p.size, Q15), "op 0 (rocket) features")
    M = np.maximum(M, 1)
    W, b = model.param(1, "W"), model.param(1, "b")  # (classes, K), (classes,)
    mean, std = layer.params["mean"], layer.params["std"]
    Wf = W / std * (2.0**shift / (M * Q15))
    bf = b + (W / std) @ (z / Q15 - mean)
    logits = model.model.forward(x, lengths=lengths)
    s_out = activation_scale(np.abs(logits).max(), LOGIT_Q_MAX)
    qd = quantize_dense(Wf, bf, 1.0, s_out, "op 1 (dense)")
    grp = np.column_stack([p.dilation, p.pad, p.taps, p.n_channels, p.n_features, p.bias_exp])
    rocket_op = Op(
        "rocket",
        {"T": int(op["steps"]), "C": int(op["channels"]), "P": int(op["pool"]),
         "N": int(op.get("positions", 0)), "bits": int(op["bits"]), "K": p.size,
         "G": p.n_groups, "L": len(p.channels), "shift": shift},
        {},
        {"grp": grp.astype(np.uint16), "ch": p.channels.astype(np.uint16),
         "b": p.bias.astype(np.int32), "z": z, "m": M.astype(np.int16)},
    )  # fmt: skip
    dense = Op(
        "dense",
        {"in": p.size, "out": int(head["out"]), "has_bias": 1, "shift": qd.shift,
         "act_min": LOGIT_MIN, "act_max": LOGIT_MAX},
        {"s_in": 1.0, "s_out": s_out},
        _dense_tensors(qd),
    )  # fmt: skip
    return QuantModelSpec(
        quantized=True,
        class_names=model.class_names,
        norm_mean=model.norm_mean.astype(F32),
        norm_std=model.norm_std.astype(F32),
        view=None,
        input_scale=f32(op["input_scale"]),
        logit_scale=s_out,
        ops=[rocket_op, dense],
    )


def _float32_op(kind: str, iparams: dict[str, int], tensors: dict[str, np.ndarray]) -> Op:
    """A float32-blob op: the given attributes, every other iparam of the layout (shifts,
    multipliers, act range) 0 and every fparam 1.0, as docs/blob-format.md defines it."""
    layout = OP_LAYOUTS[OPCODES[kind]]
    return Op(
        kind, {**dict.fromkeys(layout.iparams, 0), **iparams},
        dict.fromkeys(layout.fparams, 1.0), tensors,
    )  # fmt: skip


def _float32_tensors(model: ModelFile, i: int, groups: str) -> dict[str, np.ndarray]:
    """`W{g}` and, when present, `b{g}` of op i as float32 ("" for dense, "qkvo", "ac")."""
    tensors = {}
    for g in groups or ("",):
        tensors[f"W{g}"] = model.param(i, f"W{g}").astype(F32)
        if model.param(i, f"b{g}") is not None:
            tensors[f"b{g}"] = model.param(i, f"b{g}").astype(F32)
    return tensors


def float32_spec(model: ModelFile) -> QuantModelSpec:
    """The unquantized blob content: float32 weights, quantization parameters 0, scales 1.0.
    A `seq-rocket` model has none: its features are counts on its input grid."""
    if model.is_windows and not model.is_seq:
        raise QuantizeError("op 0 (rocket) has no float32 blob: its features are counts on "
                             "the input grid; export it without --float32")  # fmt: skip
    # a seq model's ops are its blob ops already (embed: bias + pos per token, res_attention,
    # res_ff, masked_pool, dense); a row model's op list maps op by op below
    ops = [
        _float32_op(op.kind, op.iparams, {r: v.astype(F32) for r, v in op.tensors.items()})
        for op in (seq_float_ops(model) if model.is_seq else [])
    ]
    shape: tuple[int, ...] = (len(model.norm_mean),)
    for i, op in enumerate([] if ops else model.ops):
        kind = op["op"]
        if kind == "dense":
            t = _float32_tensors(model, i, "")
            n_out, n_in = t["W"].shape
            ops.append(
                _float32_op("dense", {"in": n_in, "out": n_out, "has_bias": int("b" in t)}, t)
            )
            shape = shape[:-1] + (n_out,)
        elif kind == "relu":
            ops.append(_float32_op("relu", {}, {}))
        elif kind == "reshape":
            if len(op["shape"]) != 2:
                raise QuantizeError(f"op {i} (reshape): the blob reshapes to [S, E] only")
            shape = tuple(int(d) for d in op["shape"])
            ops.append(_float32_op("reshape", {"S": shape[0], "E": shape[1]}, {}))
        elif kind == "attention":
            S, E = shape
            t = _float32_tensors(model, i, "qkvo")
            ip = {"S": S, "E": E, "H": int(op["num_heads"]), "has_bias": int("bq" in t)}
            ops.append(_float32_op("attention", ip, t))
        elif kind == "avgpool":
            S, E = shape
            ops.append(_float32_op("avgpool", {"S": S, "E": E}, {}))
            shape = (E,)
        elif kind == "myattn":
            ip = _myattn_iparams(op, shape, f"op {i} (myattn)")
            t = _float32_tensors(model, i, "ac")
            ops.append(_float32_op("myattn", {**ip, "has_bias": int("ba" in t)}, t))
            shape = (ip["out"],)
        else:
            raise QuantizeError(f"op {i} ({kind}) has no blob opcode")
    return QuantModelSpec(
        quantized=False,
        class_names=model.class_names,
        norm_mean=model.norm_mean.astype(F32),
        norm_std=model.norm_std.astype(F32),
        view=model_view(model.ops),
        input_scale=1.0,
        logit_scale=1.0,
        ops=ops,
    )
