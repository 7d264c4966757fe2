# Host (CPython): hand-made seq-attn blob specs for the blob, budget and device tests.
"""`seq_spec(quantized, seed, T, P, pool_shift)`: a small seq blob spec built by hand (random
int8 weights and biases, every multiplier half the largest its budget site allows), independent
of the quantizer: by default T=10 steps, C=3 channels, P=4 (S=3 tokens, the last patch half
padding), E=8, H=2, F=12, 4 classes; ops embed, res_attention, res_ff, masked_pool, dense.
The float32 variant (`quantized=False`) has float weights and zero/one parameters.
"""

from __future__ import annotations

import numpy as np

from tinyattn.blob import BUDGET, Op, QuantModelSpec, budget_sites

T, C, P, E, H, F, K = 10, 3, 4, 8, 2, 12, 4
S = -(-T // P)


def _fit_multipliers(op: Op) -> Op:
    """Set every multiplier of `op` to half the largest the budget allows (<= 32767)."""
    for name, max_acc, _, shift in budget_sites(op):
        m = np.minimum(32767, (BUDGET - 1 - (1 << (shift - 1))) // max_acc) // 2
        if name[0] == "m":
            op.tensors[name] = m.astype(np.int16)
        else:
            op.iparams[name] = int(m[0])
    return op


def seq_spec(
    quantized: bool = True, seed: int = 0, T: int = T, P: int = P, pool_shift: int = 20
) -> QuantModelSpec:
    rng = np.random.default_rng(seed)
    S = -(-T // P)

    def w(*shape):
        if quantized:
            return rng.integers(-127, 128, size=shape).astype(np.int8)
        return rng.normal(0, 0.3, size=shape).astype(np.float32)

    def b(*shape):
        if quantized:
            return rng.integers(-3000, 3000, size=shape).astype(np.int32)
        return rng.normal(0, 0.1, size=shape).astype(np.float32)

    def qt(role_w, role_b, n_out, n_in, g=""):
        t = {f"W{g}": w(n_out, n_in), f"b{g}": b(n_out)}
        if quantized:
            t[f"s{g}"] = np.full(n_out, 0.01, np.float32)
            t[f"m{g}"] = np.ones(n_out, np.int16)
        return t

    sh = 20 if quantized else 0
    one = (lambda v: v) if quantized else (lambda v: 1.0)
    ops = []
    t = {"W": w(E, P * C), "b": b(S, E)}
    if quantized:
        t |= {"s": np.full(E, 0.01, np.float32), "m": np.ones(E, np.int16)}
    ops.append(Op("embed", {"T": T, "C": C, "P": P, "E": E, "shift": sh},
                  {"s_in": one(0.05), "s_out": one(0.1)}, t))  # fmt: skip
    t = {}
    for g in "qkvo":
        t |= qt("W", "b", E, E, g)
    if quantized:
        t["lut"] = np.array(
            [[int(round(16384 * np.exp(-i * 2.0))) for i in range(16)],
             [int(round(16384 * np.exp(-i / 8.0))) for i in range(16)]], np.uint16)  # fmt: skip
    ip = dict(S=S, E=E, H=H, has_bias=1, shift_q=sh, shift_k=sh, shift_v=sh, shift_o=sh,
              M_sm=1, shift_sm=sh, M_ctx=1, shift_ctx=sh, M_x=1, M_a=1, shift_add=sh)  # fmt: skip
    if not quantized:
        ip = {n: (v if n in ("S", "E", "H", "has_bias") else 0) for n, v in ip.items()}
    fp = {n: one(0.1) for n in ("s_in", "s_q", "s_k", "s_v", "s_ctx", "s_out", "s_y")}
    ops.append(Op("res_attention", ip, fp, t))
    t = qt("W", "b", F, E, "1") | qt("W", "b", E, F, "2")
    ip = dict(E=E, F=F, has_bias=1, shift_1=sh, shift_2=sh, M_x=1, M_f=1, shift_add=sh)
    if not quantized:
        ip = {n: (v if n in ("E", "F", "has_bias") else 0) for n, v in ip.items()}
    ops.append(Op("res_ff", ip, {n: one(0.1) for n in ("s_in", "s_h", "s_f", "s_y")}, t))
    t = {"m": np.ones(S, np.int16)} if quantized else {}
    ops.append(Op("masked_pool", {"S": S, "E": E, "shift": pool_shift if quantized else 0}, {}, t))
    t = qt("W", "b", K, E)
    ops.append(Op("dense", {"in": E, "out": K, "has_bias": 1, "shift": sh,
                            "act_min": -32768 if quantized else 0,
                            "act_max": 32767 if quantized else 0},
                  {"s_in": one(0.1), "s_out": one(0.2)}, t))  # fmt: skip
    if quantized:
        ops = [_fit_multipliers(op) for op in ops]
    return QuantModelSpec(
        quantized=quantized,
        class_names=[f"class{i}" for i in range(K)],
        norm_mean=rng.normal(size=C).astype(np.float32),
        norm_std=rng.uniform(0.5, 2, size=C).astype(np.float32),
        input_scale=0.05 if quantized else 1.0,
        logit_scale=0.2 if quantized else 1.0,
        ops=ops,
    )
