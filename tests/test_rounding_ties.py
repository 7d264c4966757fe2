# Host (CPython): exact rounding ties at every requantization site, host and device (issue 22).
"""Every requantization site rounds half up (towards +inf) by `(v + 2**(shift-1)) >> shift`
with an arithmetic shift, ties included (docs/quantization.md "Rounding at every site — ties").

Random data almost never lands `acc·M` exactly on a half (about 1 element in 32,768), so the
parity tests cannot tell a correct tie rule from a wrong one. Here each case is a small blob
built by hand (the real reader and the real op wiring, host and device) whose multipliers and
inputs put `acc·M + 2**(shift-1)` on exact ties at one site, positive and negative, and at the
saturation edges (126.5 / 127.5 / -127.5 / -128.5 of int8, ±32767.5 / -32768.5 of the int16
logits, 255.5 of the softmax index, where e becomes 0). Transparent ops (identity dense with
`M = 2, shift = 1`, a sum of one token) carry the site's output to the logits unchanged.

- `Formula`: docs/quantization.md's equations in plain Python ints, a second reader written
  from the docs, with a pluggable rounding per site; it logs every tie it meets.
- test_rounding_ties_cases_have_teeth: for each case and each site it claims, the formula meets
  positive (and, where the site can have them, negative) ties, at the edges it claims, and
  rounding that site half down (and half away from zero, and half to even) changes a logit:
  a reader that rounds a tie differently must fail the parity tests below.
- test_rounding_ties_host_intref_matches_formula: tinyattn.intmodel.intref.run_int8 on the
  blob equals the formula, every logit.
- test_rounding_ties_device_matches_formula: device/attention.py `Model.run_int8` under the
  MicroPython unix port with the pure, native and viper kernels equals the formula, every
  logit (one MicroPython process runs every case with every kernel set).
- test_rounding_ties_docs_table_names_every_site: the tie table of docs/quantization.md has a
  row for every site tested here.

Mutations, each in a copy of the repository, each failing tests here (issue 22 "Must show"):
round half down (`+ 2**(shift-1) - 1` for `+ 2**(shift-1)`) in the pure, native and viper
kernels at
- the residual add (`add`): device_matches_formula[res_attention-*, res_ff_add-*], 6 tests;
- dense (`dense`: every projection and the logits): device_matches_formula[dense, logits,
  attention_vo, attention_q, attention_k, myattn_query_applied, myattn_scores_softmax,
  res_ff_dense (each × 3 sets), embed-pure, embed-native], 26 tests;
- the softmax index (`softmax_q14`; viper's `attn` and `myattn`):
  device_matches_formula[attention_softmax-*, myattn_scores_softmax-*], 6 tests;
- pool (`pool`: avgpool and masked_pool): [avgpool-*, masked_pool-*, embed-*], 9 tests;
- attention's ctx (`attn`): [attention_ctx-*, attention_softmax-*], 6 tests;
- conv (`conv`): device_matches_formula[conv-*], 3 tests;
and alone: viper's `embed` kernel: [embed-viper]; the host's `intref.requant` and
`intref.residual_add`: host_intref_matches_formula[every case], 15 tests.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tinyattn.intmodel.blob import Op, QuantModelSpec, blob_bytes, pool_reciprocal, read_blob
from tinyattn.intmodel.intref import run_int8

REPO = Path(__file__).resolve().parent.parent
KERNELS = ("pure", "native", "viper")
INT8 = (-128, 127)
LOGITS = (-32768, 32767)
# docs/quantization.md, golden values of the softmax tables
EXP_HI = (16384, 9937, 6027, 3656, 2217, 1345, 816, 495, 300, 182, 110, 67, 41, 25, 15, 9)
EXP_LO = (16384, 15880, 15391, 14918, 14459, 14014, 13583, 13165, 12760, 12367, 11987, 11618,
          11261, 10914, 10578, 10253)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Rounding rules: the documented one and the ones a reader might pick instead


def half_up(v: int, shift: int) -> int:
    """The documented rule: `(v + 2**(shift-1)) >> shift`, floor shift: -2.5 -> -2, 2.5 -> 3."""
    return (v + (1 << (shift - 1))) >> shift


def half_down(v: int, shift: int) -> int:
    """Towards -inf: -2.5 -> -3, 2.5 -> 2 (the mutation of issue 22)."""
    return (v + (1 << (shift - 1)) - 1) >> shift


def half_away(v: int, shift: int) -> int:
    """Away from zero (C's `round`): -2.5 -> -3, 2.5 -> 3."""
    return half_up(v, shift) if v >= 0 else -half_up(-v, shift)


def half_even(v: int, shift: int) -> int:
    """To even (numpy.rint, the exporter's rule): -2.5 -> -2, 2.5 -> 2, 3.5 -> 4."""
    q, r = divmod(v, 1 << shift)
    return q + (2 * r > (1 << shift) or (2 * r == (1 << shift) and q & 1))


WRONG_RULES = {"half_down": half_down, "half_away": half_away, "half_even": half_even}


class Formula:
    """docs/quantization.md in Python ints: `logits(spec, xq, n)` runs the op list on one input
    (a seq blob: the window of n steps). `rules` maps a site ("dense", "attention.q", …) to a
    rounding function (default half_up); `ties` logs (site, v, shift) of every exact tie."""

    def __init__(self, rules: dict | None = None):
        self.rules = rules or {}
        self.ties: list[tuple[str, int, int]] = []

    def rnd(self, site: str, v: int, shift: int, lo=None, hi=None) -> int:
        if v % (1 << shift) == 1 << (shift - 1):
            self.ties.append((site, v, shift))
        r = self.rules.get(site, half_up)(v, shift)
        return r if lo is None else min(max(r, lo), hi)

    def dense(self, site, rows, W, b, m, shift, lo, hi, per_token=False):
        """y[r][o] = requant(Σ_i x[r][i]·W[o][i] + b[o] (b[r][o] per token), m[o], shift)."""
        out = []
        for r, x in enumerate(rows):
            y = []
            for o, w in enumerate(W):
                acc = sum(xi * wi for xi, wi in zip(x, w, strict=True))
                acc += (b[r][o] if per_token else b[o]) if b is not None else 0
                y.append(self.rnd(site, acc * m[o], shift, lo, hi))
            out.append(y)
        return out

    def softmax(self, site, scores, M_sm, sh_sm, lut):
        """Q14 probabilities: idx = round(diff·M_sm), e from the tables, p = round(e·2**14/sum)."""
        hi, lo = lut[:16], lut[16:]
        mx = max(scores)
        e = []
        for s in scores:
            idx = self.rnd(site, (mx - s) * M_sm, sh_sm)  # diff >= 0: no clamp, no negatives
            e.append(0 if idx >= 256 else (hi[idx >> 4] * lo[idx & 15] + (1 << 13)) >> 14)
        total = sum(e)
        return [((v << 14) + (total >> 1)) // total for v in e]

    def attention(self, site, x, ip, t):
        """Multi-head self-attention on tokens x [S][E] (docs "attention")."""
        proj = {}
        for g in "qkv":
            proj[g] = self.dense(f"{site}.{g}", x, t[f"W{g}"], t.get(f"b{g}"), t[f"m{g}"],
                                 ip[f"shift_{g}"], *INT8)  # fmt: skip
        q, k, v = proj["q"], proj["k"], proj["v"]
        S, E, H = len(x), ip["E"], ip["H"]
        D = E // H
        ctx = [[0] * E for _ in range(S)]
        for h in range(H):
            cols = range(h * D, h * D + D)
            for i in range(S):
                scores = [sum(q[i][c] * k[j][c] for c in cols) for j in range(S)]
                p = self.softmax(f"{site}.softmax", scores, ip["M_sm"], ip["shift_sm"], t["lut"])
                for c in cols:
                    acc = sum(p[j] * v[j][c] for j in range(S))
                    ctx[i][c] = self.rnd(f"{site}.ctx", acc * ip["M_ctx"], ip["shift_ctx"], *INT8)
        return self.dense(f"{site}.o", ctx, t["Wo"], t.get("bo"), t["mo"], ip["shift_o"], *INT8)

    def myattn(self, x, ip, t):
        """MyAttn, mode 0 on the flat input x [F], mode 1 on tokens x [S][E] (docs "myattn")."""
        q, k, v1, v2 = ip["q"], ip["k"], ip["v1"], ip["v2"]
        if ip["mode"] == 0:
            flat = x[0]
            sums = flat[:q]  # n = 1: Q is the input's first q values
            V = [flat[q + k + j * v2 : q + k + (j + 1) * v2] for j in range(v1)]
        else:
            sums = [sum(row[c] for row in x) for c in range(q)]
            V = x
        Q = [self.rnd("myattn.query", a * ip["M_q"], ip["shift_q"], *INT8) for a in sums]
        qk = x[0][: q + k] if ip["mode"] == 0 else Q + Q
        sc = self.dense("myattn.scores", [qk], t["Wa"], t.get("ba"), t["ma"], ip["shift_a"],
                        *INT8)[0]  # fmt: skip
        w = self.softmax("myattn.softmax", sc, ip["M_sm"], ip["shift_sm"], t["lut"])
        applied = []
        for d in range(v2):
            acc = sum(w[j] * V[j][d] for j in range(v1))
            applied.append(self.rnd("myattn.applied", acc * ip["M_ap"], ip["shift_ap"], *INT8))
        return self.dense("myattn.combine", [Q + applied], t["Wc"], t.get("bc"), t["mc"],
                          ip["shift_c"], *INT8)  # fmt: skip

    def conv(self, x, ip, t):
        """1-D conv over the valid tokens x [S_n][C] (docs "conv"): taps outside read 0."""
        K, st, dil, g = ip["K"], ip["stride"], ip["dilation"], ip["groups"]
        Cg, Fg, pad = ip["C"] // g, ip["F"] // g, (K - 1) * ip["dilation"] // 2
        lo = 0 if ip["relu"] else INT8[0]
        out = []
        for t_ in range(-(-len(x) // st)):
            y = []
            for o in range(ip["F"]):
                acc = t["b"][o] if "b" in t else 0
                for c in range(Cg):
                    for j in range(K):
                        i = t_ * st + j * dil - pad
                        if 0 <= i < len(x):
                            acc += x[i][(o // Fg) * Cg + c] * t["W"][o][c * K + j]
                y.append(self.rnd("conv", acc * t["m"][o], ip["shift"], lo, INT8[1]))
            out.append(y)
        return out

    def add(self, site, x, a, M_x, M_a, shift):
        """Residual add: clamp((x·M_x + a·M_a + 2**(shift-1)) >> shift), one rounding."""
        return [
            [
                self.rnd(site, xi * M_x + ai * M_a, shift, *INT8)
                for xi, ai in zip(xr, ar, strict=True)
            ]
            for xr, ar in zip(x, a, strict=True)
        ]

    def logits(self, spec: QuantModelSpec, xq: list[int], n: int = 1) -> list[int]:
        rows = [list(xq)]
        for op in spec.ops:
            ip = op.iparams
            t = {role: a.tolist() for role, a in op.tensors.items()}
            t["lut"] = [int(v) for v in op.tensors["lut"].ravel()] if "lut" in t else None
            if op.kind == "dense":
                rows = self.dense("dense", rows, t["W"], t.get("b"), t["m"], ip["shift"],
                                  ip["act_min"], ip["act_max"])  # fmt: skip
            elif op.kind == "reshape":
                flat = rows[0]
                rows = [flat[s * ip["E"] : (s + 1) * ip["E"]] for s in range(ip["S"])]
            elif op.kind == "attention":
                rows = self.attention("attention", rows, ip, t)
            elif op.kind == "avgpool":
                acc = [sum(r[c] for r in rows) for c in range(ip["E"])]
                rows = [[self.rnd("avgpool", a * ip["M"], ip["shift"], *INT8) for a in acc]]
            elif op.kind == "myattn":
                rows = self.myattn(rows, ip, t)
            elif op.kind == "embed":  # the first S_n = ceil(n/P) patches, per-token bias
                PC = ip["P"] * ip["C"]
                window = list(xq[: n * ip["C"]]) + [0] * (len(xq) - n * ip["C"])
                S_n = -(-n // ip["P"])
                rows = [window[s * PC : (s + 1) * PC] for s in range(S_n)]
                rows = self.dense("embed", rows, t["W"], t["b"], t["m"], ip["shift"], *INT8,
                                  per_token=True)  # fmt: skip
            elif op.kind == "res_attention":
                a = self.attention("res_attention", rows, ip, t)
                rows = self.add("res_attention.add", rows, a, ip["M_x"], ip["M_a"],
                                ip["shift_add"])  # fmt: skip
            elif op.kind == "res_ff":
                h = self.dense("res_ff.h", rows, t["W1"], t.get("b1"), t["m1"], ip["shift_1"],
                               0, 127)  # fmt: skip
                f = self.dense("res_ff.f", h, t["W2"], t.get("b2"), t["m2"], ip["shift_2"],
                               *INT8)  # fmt: skip
                rows = self.add("res_ff.add", rows, f, ip["M_x"], ip["M_f"], ip["shift_add"])
            elif op.kind == "conv":
                rows = self.conv(rows, ip, t)
            elif op.kind == "masked_pool":
                k = len(rows)
                acc = [sum(r[c] for r in rows) for c in range(ip["E"])]
                rows = [[self.rnd("masked_pool", a * t["m"][k - 1], ip["shift"], *INT8)
                         for a in acc]]  # fmt: skip
            else:
                raise ValueError(op.kind)
        return rows[0]


# ---------------------------------------------------------------------------------------------
# Blob builders: every scale 1.0 (the integer path never reads them), zero normalization


def ones(n: int) -> np.ndarray:
    return np.ones(n, np.float32)


def dense_op(W, b, m, shift, lo=INT8[0], hi=INT8[1]) -> Op:
    W = np.array(W, np.int8)
    t = {"W": W}
    if b is not None:
        t["b"] = np.array(b, np.int32)
    t |= {"s": ones(len(W)), "m": np.array(m, np.int16)}
    ip = {"in": W.shape[1], "out": W.shape[0], "has_bias": int(b is not None), "shift": shift,
          "act_min": lo, "act_max": hi}  # fmt: skip
    return Op("dense", ip, {"s_in": 1.0, "s_out": 1.0}, t)


def identity(n: int) -> Op:
    """The logits dense y = x: (2·x + 1) >> 1 is never a tie."""
    return dense_op(np.eye(n), None, [2] * n, 1, *LOGITS)


def proj(g: str, W, b, m) -> dict[str, np.ndarray]:
    return {f"W{g}": np.array(W, np.int8), f"b{g}": np.array(b, np.int32),
            f"s{g}": ones(len(W)), f"m{g}": np.array(m, np.int16)}  # fmt: skip


LUT = np.array([EXP_HI, EXP_LO], np.uint16)


def attention_op(kind, S, H, qkvo, M_sm, shift_sm, M_ctx, shift_ctx, add=None) -> Op:
    """qkvo: g -> (W, b, m, shift) for g in q, k, v, o; add: (M_x, M_a, shift_add)."""
    E = len(qkvo["q"][0])
    t = {}
    ip = {"S": S, "E": E, "H": H, "has_bias": 1}
    for g in "qkvo":
        W, b, m, shift = qkvo[g]
        t |= proj(g, W, b, m)
        ip[f"shift_{g}"] = shift
    t["lut"] = LUT
    ip |= {"M_sm": M_sm, "shift_sm": shift_sm, "M_ctx": M_ctx, "shift_ctx": shift_ctx}
    fp = dict.fromkeys(("s_in", "s_q", "s_k", "s_v", "s_ctx", "s_out"), 1.0)
    if add is not None:
        ip |= dict(zip(("M_x", "M_a", "shift_add"), add, strict=True))
        fp["s_y"] = 1.0
    return Op(kind, ip, fp, t)


def exact(n: int, W=None) -> tuple:
    """An exact projection (W, b = 0, m = 2, shift = 1): y = x·W, default W = I."""
    return (np.eye(n) if W is None else W, [0] * n, [2] * n, 1)


def spec(ops: list[Op], F: int) -> QuantModelSpec:
    C = ops[-1].iparams["out"]
    return QuantModelSpec(True, [f"c{i}" for i in range(C)], np.zeros(F, np.float32),
                          np.ones(F, np.float32), 1.0, 1.0, ops)  # fmt: skip


def embed_op(T, P, C, W, b, m, shift) -> Op:
    W = np.array(W, np.int8)
    t = {"W": W, "b": np.array(b, np.int32), "s": ones(len(W)), "m": np.array(m, np.int16)}
    ip = {"T": T, "C": C, "P": P, "E": len(W), "shift": shift}
    return Op("embed", ip, {"s_in": 1.0, "s_out": 1.0}, t)


def embed_identity(T: int, C: int) -> Op:
    """Patches of one step, y[s] = x[s] exactly (P = 1, W = I, b = 0, m = 2, shift = 1)."""
    return embed_op(T, 1, C, np.eye(C), np.zeros((T, C)), [2] * C, 1)


def conv_op(S, C, F, K, stride, dilation, groups, W, b, m, shift, relu=0) -> Op:
    t = {"W": np.array(W, np.int8), "b": np.array(b, np.int32), "s": ones(F),
         "m": np.array(m, np.int16)}  # fmt: skip
    ip = {"S": S, "C": C, "F": F, "K": K, "stride": stride, "dilation": dilation,
          "groups": groups, "relu": relu, "has_bias": 1, "shift": shift}  # fmt: skip
    return Op("conv", ip, {"s_in": 1.0, "s_out": 1.0}, t)


def masked_pool_op(S: int, E: int) -> Op:
    m = np.array([pool_reciprocal(k) for k in range(1, S + 1)], np.int16)
    return Op("masked_pool", {"S": S, "E": E, "shift": 14}, {}, {"m": m})


def avgpool_op(S: int, E: int, M: int, shift: int) -> Op:
    return Op("avgpool", {"S": S, "E": E, "M": M, "shift": shift})


def res_ff_op(E, F, W1, b1, m1, shift_1, W2, b2, m2, shift_2, M_x, M_f, shift_add) -> Op:
    t = proj("1", W1, b1, m1) | proj("2", W2, b2, m2)
    ip = {"E": E, "F": F, "has_bias": 1, "shift_1": shift_1, "shift_2": shift_2, "M_x": M_x,
          "M_f": M_f, "shift_add": shift_add}  # fmt: skip
    return Op("res_ff", ip, dict.fromkeys(("s_in", "s_h", "s_f", "s_y"), 1.0), t)


def myattn_op(mode, q, k, v1, v2, M_q, shift_q, a, M_sm, shift_sm, M_ap, shift_ap, c) -> Op:
    """a, c: (W, b, m, shift) of the score and the combine projections."""
    t = proj("a", *a[:3]) | proj("c", *c[:3])
    t["lut"] = LUT
    ip = {"mode": mode, "q": q, "k": k, "v1": v1, "v2": v2, "out": len(c[0]), "has_bias": 1,
          "M_q": M_q, "shift_q": shift_q, "shift_a": a[3], "M_sm": M_sm, "shift_sm": shift_sm,
          "M_ap": M_ap, "shift_ap": shift_ap, "shift_c": c[3]}  # fmt: skip
    fp = dict.fromkeys(("s_in", "s_qk", "s_sc", "s_qa", "s_out"), 1.0)
    return Op("myattn", ip, fp, t)


# ---------------------------------------------------------------------------------------------
# The cases: (spec, inputs [(xq, n)], {site: edges}) where edges is the set of saturation edges
# the site's ties must reach: "hi" (a tie at or above 126.5, or 32766.5 for the logits: the
# half-up result is the clamp's top or one past), "lo" (at or below -127.5 / -32767.5), "256"
# (the softmax index's 255.5 -> 256, where e becomes 0). "neg": the site also meets negative
# ties (not where they cannot exist: the softmax index's diff >= 0, the relu-clamped h).


def rows_of(values, F):
    return [([v] * F, 1) for v in values]


def case_dense():
    """op 0 dense, shift 8 (M = 128 is 1/2, M = 192 is 3/4), then the identity logits.
    ch0 x/2; ch1 (x+128)/2: 125 -> 126.5, 127 -> 127.5; ch2 (x-128)/2: -127 -> -127.5;
    ch3 3(2x-42)/4: x = -64 -> -127.5, -66 -> -130.5 (clamped), 1 -> -30 exact, 2 -> -28.5."""
    ops = [dense_op([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 2]], [0, 128, -128, -42],
                    [128, 128, 128, 192], 8), identity(4)]  # fmt: skip
    xs = rows_of([-128, -127, -125, -66, -64, -3, -1, 0, 1, 2, 3, 125, 127], 4)
    return spec(ops, 4), xs, {"dense": {"hi", "lo", "neg"}}


def case_logits():
    """The last dense (int16 logits), shift 2: ch0 (x+65408)/2: 125 -> 32766.5, 127 -> 32767.5;
    ch1 (x-65409)/2: -124 -> -32766.5, -126 -> -32767.5, -128 -> -32768.5 (clamped);
    ch2 (x0+x1)/4: sums 2 mod 4 tie, positive and negative."""
    ops = [dense_op([[1, 0], [1, 0], [1, 1]], [65408, -65409, 0], [2, 2, 1], 2, *LOGITS)]
    pairs = ((125, 0), (127, 1), (-124, 3), (-126, -1), (-128, -128), (1, 1), (-3, 1), (3, 3),
             (-5, -5), (0, 2), (-2, 0))  # fmt: skip
    xs = [([a, b], 1) for a, b in pairs]
    return spec(ops, 2), xs, {"dense": {"hi", "lo", "neg"}}


def case_avgpool():
    """avgpool of S = 2 tokens, M = 2**14, shift 15 (1/2): odd sums tie; 253 -> 126.5,
    255 -> 127.5, -255 -> -127.5."""
    ops = [Op("reshape", {"S": 2, "E": 2}), avgpool_op(2, 2, 1 << 14, 15), identity(2)]
    pairs = ((127, 126, 127, 127), (-128, -127, -1, 0), (1, 2, -2, -1), (3, 0, -3, 0),
             (5, -4, -128, -128), (-5, 4, 126, 1))  # fmt: skip
    xs = [([a, c, b, d], 1) for a, b, c, d in pairs]  # channel 0 sums a + b, channel 1 c + d
    return spec(ops, 4), xs, {"avgpool": {"hi", "lo", "neg"}}


def attention_blob(S, E, H, qkvo, M_sm, shift_sm, M_ctx, shift_ctx, pool_M=2):
    """reshape [S, E] -> attention -> avgpool (M = 2, shift = 1: the exact sum; M = 1 with S = 2
    and equal tokens: the token) -> the identity logits."""
    ops = [Op("reshape", {"S": S, "E": E}),
           attention_op("attention", S, H, qkvo, M_sm, shift_sm, M_ctx, shift_ctx),
           avgpool_op(S, E, pool_M, 1), identity(E)]  # fmt: skip
    return spec(ops, S * E)


def case_attention_vo():
    """S = 1 (p = 2**14, ctx = v exactly), E = 6, H = 2. v (shift 1): ch0 x/2, ch1 (x+128)/2,
    ch2 (x-128)/2, ch3-5 exact. o (shift 2, m = 4 exact, m = 2 is 1/2): ch0-2 exact, ch3 x/2,
    ch4 (x+256)/2: -3 -> 126.5, -1 -> 127.5; ch5 (x-256)/2: 1 -> -127.5, -1 -> -128.5."""
    z = np.zeros((6, 6))
    qkvo = {"q": (z, [0] * 6, [2] * 6, 1), "k": (z, [0] * 6, [2] * 6, 1),
            "v": (np.eye(6), [0, 128, -128, 0, 0, 0], [1, 1, 1, 2, 2, 2], 1),
            "o": (np.eye(6), [0, 0, 0, 0, 256, -256], [4, 4, 4, 2, 2, 2], 2)}  # fmt: skip
    s = attention_blob(1, 6, 2, qkvo, 2, 1, 1, 14)
    xs = rows_of([-128, -127, -125, -3, -1, 0, 1, 3, 125, 127], 6)
    return s, xs, {"attention.v": {"hi", "lo", "neg"}, "attention.o": {"hi", "lo", "neg"}}


def case_attention_ctx():
    """S = 2, q = k = 0: uniform p = 8192, acc = 8192·(v0 + v1); M_ctx = 1, shift 14: (v0+v1)/2:
    odd sums tie, 253 -> 126.5, 255 -> 127.5, -255 -> -127.5. avgpool M = 1: both tokens equal."""
    z = np.zeros((2, 2))
    qkvo = {"q": (z, [0, 0], [2, 2], 1), "k": (z, [0, 0], [2, 2], 1), "v": exact(2),
            "o": exact(2)}  # fmt: skip
    s = attention_blob(2, 2, 1, qkvo, 2, 1, 1, 14, pool_M=1)
    pairs = ((127, 126, -128, -127), (127, 127, 1, 0), (-1, 0, 2, 1), (-2, -1, 5, -2),
             (-3, 0, 0, 0))  # fmt: skip
    xs = [([a, c, b, d], 1) for a, b, c, d in pairs]  # channel 0 sums a + b, channel 1 c + d
    return s, xs, {"attention.ctx": {"hi", "lo", "neg"}}


def routed(q_m, q_shift, k_m, k_shift, M_sm, shift_sm, shift_ctx):
    """S = 2, E = 3, H = 1: token i = (a_i, b_i, c_i); q = (a, 0, 0), k = (b, 0, 0) (channel 0
    only), v = (0, 0, c): score_ij = q_i·k_j, ctx[i, 2] = requant(Σ_j p_ij c_j, 1, shift_ctx);
    the logits are (0, 0, ctx[0, 2] + ctx[1, 2])."""
    sel = {"q": [[1, 0, 0], [0, 0, 0], [0, 0, 0]], "k": [[0, 1, 0], [0, 0, 0], [0, 0, 0]]}
    qkvo = {"q": (sel["q"], [0] * 3, [q_m] * 3, q_shift),
            "k": (sel["k"], [0] * 3, [k_m] * 3, k_shift),
            "v": exact(3, [[0, 0, 0], [0, 0, 0], [0, 0, 1]]), "o": exact(3)}  # fmt: skip
    return attention_blob(2, 3, 1, qkvo, M_sm, shift_sm, 1, shift_ctx)


def token_rows(tokens):
    """[((a0, b0, c0), (a1, b1, c1)), …] -> flat xq rows of two tokens."""
    return [(list(t0) + list(t1), 1) for t0, t1 in tokens]


def case_attention_q():
    """q = a/2 (m = 1, shift 1): odd a tie, ±; k = b = (2, -2) exact; idx = diff exactly
    (M_sm = 2, shift 1): a q one lower moves diff by |k0 - k1| = 4. ctx shift 13 (2·Σ p·c)."""
    toks = (
        ((3, 2, 30), (-5, -2, -30)),
        ((-3, 2, 30), (5, -2, -10)),
        ((1, 2, 30), (-1, -2, 0)),
        ((7, 2, 10), (-7, -2, -30)),
        ((-11, 2, 25), (11, -2, -5)),
        ((9, 2, 30), (0, -2, 0)),
    )
    return routed(1, 1, 2, 1, 2, 1, 13), token_rows(toks), {"attention.q": {"neg"}}


def case_attention_k():
    """k = b/2: token 0's odd b ties, ±, token 1's even b is exact; q = a exact: a k0 one lower
    moves diff by |a_i|. ctx shift 13."""
    toks = (
        ((4, 3, 30), (1, -2, -10)),
        ((5, -3, 30), (-2, 2, -10)),
        ((6, 1, 30), (0, 0, 0)),
        ((3, 5, 10), (-1, -4, -30)),
        ((2, -11, 25), (0, 10, -5)),
    )
    return routed(2, 1, 1, 1, 2, 1, 13), token_rows(toks), {"attention.k": {"neg"}}


def case_attention_softmax():
    """idx = diff/2 (M_sm = 1, shift 1): odd diffs tie (diff >= 0: no negative ties), e.g.
    9 -> 4.5, 21 -> 10.5; diff = 7·73 = 511 -> 255.5 -> 256: e = 0 (half down: 255, e = 6),
    seen as ctx 0 (half down: 6·127 / 2**9 -> 1) in both rows. ctx shift 9 (32·Σ p·c); token
    1 has a = 0 (uniform p, ctx 0) except in the 511 row."""
    toks = (
        ((7, 73, 0), (7, 0, 127)),
        ((1, 9, 3), (0, 0, -3)),
        ((3, 3, -3), (0, 0, 3)),
        ((5, 1, 3), (0, 0, -3)),
        ((-3, 7, 3), (0, 0, -3)),
        ((1, 13, -3), (0, 0, 3)),
    )
    return routed(2, 1, 2, 1, 1, 1, 9), token_rows(toks), {"attention.softmax": {"256"}}


def case_myattn_query_applied():
    """mode 0 (explicit), q = k = v1 = v2 = 2: x = Q ‖ K ‖ V[0] ‖ V[1]. Wa = 0: uniform weights
    8192. Query M_q = 3, shift 1 (3x/2): odd x tie, 85 -> 127.5, -85 -> -127.5. applied
    M_ap = 1, shift 14: (V0 + V1)/2, 253 -> 126.5, 255 -> 127.5, -255 -> -127.5. combine:
    Q ‖ applied exactly (m = 2), then ch4 (Q0 + 128)/2 and ch5 (applied0 - 128)/2 (m = 1)."""
    Wc = np.vstack([np.eye(4), [[1, 0, 0, 0], [0, 0, 1, 0]]])
    c = (Wc, [0, 0, 0, 0, 128, -128], [2, 2, 2, 2, 1, 1], 1)
    a = (np.zeros((2, 4)), [0, 0], [2, 2], 1)
    ops = [myattn_op(0, 2, 2, 2, 2, 3, 1, a, 2, 1, 1, 14, c), identity(6)]
    xs = [(x, 1) for x in ([85, -85, 0, 0, 127, -128, 126, -127],
                           [1, -1, 0, 0, 127, 1, 127, 0],
                           [3, -3, 0, 0, -1, 2, 0, 1], [-1, 83, 0, 0, -3, 5, 0, -2],
                           [-127, 127, 0, 0, -128, 0, -127, 0])]  # fmt: skip
    sites = {"myattn.query": {"hi", "lo", "neg"}, "myattn.applied": {"hi", "lo", "neg"},
             "myattn.combine": {"hi", "lo", "neg"}}  # fmt: skip
    return spec(ops, 8), xs, sites


def case_myattn_scores_softmax():
    """mode 1 (pool), S = v1 = 2 tokens of E = 2: Q = the token sum (M_q = 2, shift 1, exact),
    scores (m = 1, shift 1): sc0 = Q0/2: odd tie, ±; sc1 = 2·Q1/2 = Q1 exact; idx = diff/2
    (M_sm = 1, shift 1): odd diffs tie; applied = Σ w·x / 2**10; combine Q ‖ applied exactly."""
    a = ([[1, 0, 0, 0], [0, 2, 0, 0]], [0, 0], [1, 1], 1)
    c = (np.eye(4), [0] * 4, [2] * 4, 1)
    ops = [Op("reshape", {"S": 2, "E": 2}),
           myattn_op(1, 2, 2, 2, 2, 2, 1, a, 1, 1, 1, 10, c), identity(4)]  # fmt: skip
    toks = (((3, 2), (0, -5)), ((-3, 1), (0, 6)), ((11, -1), (-4, 7)), ((-9, 3), (2, -7)),
            ((1, 0), (0, 5)), ((6, 1), (1, -4)))  # fmt: skip
    xs = [(list(t0) + list(t1), 1) for t0, t1 in toks]
    return spec(ops, 4), xs, {"myattn.scores": {"neg"}, "myattn.softmax": set()}


def case_embed():
    """T = 2, P = 1, C = 2, E = 4, shift 1, m = 1 (1/2): ch0 (x0 + b[s, 0])/2, ch1
    (x1 ± 128)/2, ch2 and ch3 bias only (the positional embedding): token 0 255/2 -> 127.5,
    -255/2 -> -127.5; token 1 -253/2 -> -126.5, 253/2 -> 126.5. n = 1: the token itself
    (masked_pool k = 1 is exact); n = 2: (y0 + y1)/2 by masked_pool."""
    W = [[1, 0], [0, 1], [0, 0], [0, 0]]
    b = [[0, 128, 255, -255], [1, -128, -253, 253]]
    ops = [embed_op(2, 1, 2, W, b, [1] * 4, 1), masked_pool_op(2, 4), identity(4)]
    xs = [([a, c, b_, d], n) for a, c, b_, d, n in (
        (3, 125, 0, 0, 1), (-3, 127, 0, 0, 1), (1, -127, 0, 0, 1), (-1, -1, 0, 0, 1),
        (3, 125, 2, 125, 2), (-3, 127, 0, -125, 2), (5, 1, -4, 127, 2))]  # fmt: skip
    return spec(ops, 2), xs, {"embed": {"hi", "lo", "neg"}}


def case_masked_pool():
    """T = 4 windows of n = 1..4 steps of C = E = 2 (embed exact): m = 16384, 8192, 5461, 4096,
    shift 14. n = 2: odd sums tie (253, 255, -255); n = 4: sums 2 mod 4 (506 -> 126.5,
    510 -> 127.5, -510 -> -127.5, ±6)."""
    ops = [embed_identity(4, 2), masked_pool_op(4, 2), identity(2)]
    w = [
        ([127, -128, 126, -127, 0, 0, 0, 0], 2), ([127, 1, 127, -2, 0, 0, 0, 0], 2),
        ([-1, 3, 0, 0, 0, 0, 0, 0], 2), ([127, -128, 127, -128, 127, -128, 125, -126], 4),
        ([127, -1, 127, -2, 127, -1, 127, -2], 4), ([1, -1, 2, -2, 3, -3, 0, 0], 4),
        ([5, -5, 0, 0, 0, 0, 0, 0], 1), ([9, -9, 0, 0, 1, 1, 0, 0], 3),
    ]  # fmt: skip
    return spec(ops, 2), w, {"masked_pool": {"hi", "lo", "neg"}}


def case_res_attention():
    """T = P = 1 (S = 1), C = E = 2: a = swap(x) (q = k = 0, v = x swapped, ctx and o exact);
    add M_x = 8192, M_a = 4096, shift 13: y_c = x_c + x_{1-c}/2: odd partner ties, 127 + 1/2 ->
    127.5, 127 - 1/2 -> 126.5, -127 - 1/2 -> -127.5, -128 - 1/2 -> -128.5."""
    z = np.zeros((2, 2))
    qkvo = {"q": (z, [0, 0], [2, 2], 1), "k": (z, [0, 0], [2, 2], 1),
            "v": exact(2, [[0, 1], [1, 0]]), "o": exact(2)}  # fmt: skip
    ops = [embed_identity(1, 2), attention_op("res_attention", 1, 1, qkvo, 2, 1, 1, 14,
                                              (8192, 4096, 13)),
           masked_pool_op(1, 2), identity(2)]  # fmt: skip
    xs = [([a, b], 1) for a, b in ((127, 1), (127, -1), (-127, -1), (-128, -1), (2, 1), (-2, -1),
                                   (1, 3), (-5, 7))]  # fmt: skip
    return spec(ops, 2), xs, {"res_attention.add": {"hi", "lo", "neg"}}


def case_res_ff_add():
    """T = P = 1, E = F = 2: h = relu(x), f = -swap(h) exactly; add M_x = 8192, M_f = 4096,
    shift 13: y_c = x_c - relu(x_{1-c})/2: 127 - 1/2 -> 126.5, -127 - 1/2 -> -127.5,
    -128 - 1/2 -> -128.5, 3 - 1/2 -> 2.5."""
    ops = [embed_identity(1, 2),
           res_ff_op(2, 2, np.eye(2), [0, 0], [2, 2], 1, [[0, -1], [-1, 0]], [0, 0], [2, 2], 1,
                     8192, 4096, 13),
           masked_pool_op(1, 2), identity(2)]  # fmt: skip
    xs = [([a, b], 1) for a, b in ((127, 1), (-127, 1), (-128, 1), (3, 1), (1, -3), (-2, 5),
                                   (7, 7))]  # fmt: skip
    return spec(ops, 2), xs, {"res_ff.add": {"hi", "lo", "neg"}}


def case_res_ff_dense():
    """T = P = 1, E = F = 3, y = f (M_x = 0, M_f = 2, shift 1). h (shift 2; m = 2 is 1/2, m = 4
    exact), clamp [0, 127]: ch0 (x+128)/2: 125 -> 126.5, 127 -> 127.5, -125 -> 1.5; ch1, ch2
    relu(x). f (shift 2): ch0 exact, ch1 (h-256)/2: 1 -> -127.5, 3 -> -126.5; ch2 (h+128)/2:
    125 -> 126.5, 127 -> 127.5. h's negative ties clamp to 0 either way (relu)."""
    ops = [embed_identity(1, 3),
           res_ff_op(3, 3, np.eye(3), [128, 0, 0], [2, 4, 4], 2, np.eye(3), [0, -256, 128],
                     [4, 2, 2], 2, 0, 2, 1),
           masked_pool_op(1, 3), identity(3)]  # fmt: skip
    xs = rows_of([-128, -127, -125, -1, 0, 1, 3, 5, 125, 127], 3)
    return spec(ops, 3), xs, {"res_ff.h": {"hi"}, "res_ff.f": {"hi", "lo", "neg"}}


def case_conv():
    """T = 3, P = 1, C = F = 2, a depthwise conv K = 3, stride 2, pad 1, m = 1, shift 1 (1/2):
    output 0 reads tokens -1 (nothing), 0, 1: ch0 (1 + x0[0] + x0[1])/2: 127 + 127 -> 127.5,
    -128 - 128 -> -127.5, 126 + 126 -> 126.5; ch1 (128 + x1[0] - x1[1])/2 (negative ties from
    x1[0] - x1[1] < -128). n = 1, 2: one output (masked_pool k = 1, exact); n = 3: a second
    output from tokens 1, 2 (and 3: nothing)."""
    ops = [embed_identity(3, 2), conv_op(3, 2, 2, 3, 2, 1, 2, [[1, 1, 1], [0, 1, -1]], [1, 128],
                                         [1, 1], 1),
           masked_pool_op(2, 2), identity(2)]  # fmt: skip
    xs = [([a0, a1, b0, b1, c0, c1], n) for a0, a1, b0, b1, c0, c1, n in (
        (127, -1, 127, 0, 0, 0, 2), (-128, -128, -128, 127, 0, 0, 2), (126, 5, 126, 2, 0, 0, 2),
        (2, -127, 0, 0, 0, 0, 1), (-4, 3, 0, 0, 0, 0, 1), (3, -100, 9, 60, -7, 2, 3),
        (-9, 17, 4, -20, 1, 5, 3))]  # fmt: skip
    return spec(ops, 2), xs, {"conv": {"hi", "lo", "neg"}}


CASES = {
    "dense": case_dense,
    "logits": case_logits,
    "avgpool": case_avgpool,
    "attention_vo": case_attention_vo,
    "attention_ctx": case_attention_ctx,
    "attention_q": case_attention_q,
    "attention_k": case_attention_k,
    "attention_softmax": case_attention_softmax,
    "myattn_query_applied": case_myattn_query_applied,
    "myattn_scores_softmax": case_myattn_scores_softmax,
    "embed": case_embed,
    "masked_pool": case_masked_pool,
    "res_attention": case_res_attention,
    "res_ff_add": case_res_ff_add,
    "res_ff_dense": case_res_ff_dense,
    "conv": case_conv,
}
SITES = sorted({site for make in CASES.values() for site in make()[2]})


def formula_logits(s: QuantModelSpec, xs, rules=None) -> tuple[list[list[int]], Formula]:
    f = Formula(rules)
    return [f.logits(s, xq, n) for xq, n in xs], f


def is_edge(site: str, v: int, shift: int, logits: bool) -> set[str]:
    """The edges a tie at v / 2**shift reaches: its half-up result at or past the clamp."""
    r = half_up(v, shift)
    top, bottom = (LOGITS[1], LOGITS[0] + 1) if logits else (INT8[1], INT8[0] + 1)
    edges = {"hi"} if r >= top else {"lo"} if r <= bottom else set()
    return edges | ({"256"} if site.endswith("softmax") and r == 256 else set())


# ---------------------------------------------------------------------------------------------
# Tests


@pytest.fixture(scope="module")
def cases():
    """name -> (spec, inputs, sites, blob bytes, formula logits)."""
    out = {}
    for name, make in CASES.items():
        s, xs, sites = make()
        out[name] = (s, xs, sites, blob_bytes(s), formula_logits(s, xs)[0])
    return out


@pytest.mark.parametrize("name", CASES)
def test_rounding_ties_cases_have_teeth(cases, name):
    """Each claimed site meets exact ties (positive; negative unless it cannot; at the claimed
    edges), and each other tie rule at that site alone changes some logit."""
    s, xs, sites, _, want = cases[name]
    _, f = formula_logits(s, xs)
    logits_site = len(s.ops) == 1  # the logits dense alone: its edges are int16
    for site, edges in sites.items():
        ties = [(v, sh) for st, v, sh in f.ties if st == site]
        assert any(v > 0 for v, _ in ties), f"{name}: no positive tie at {site}"
        if "neg" in edges:
            assert any(v < 0 for v, _ in ties), f"{name}: no negative tie at {site}"
        reached = set().union(*(is_edge(site, v, sh, logits_site) for v, sh in ties))
        assert edges - {"neg"} <= reached, f"{name}: {site} ties reach {reached}, not {edges}"
        for rule, fn in WRONG_RULES.items():
            if rule == "half_away" and "neg" not in edges:
                continue  # no negative tie there: away from zero is half up
            got, _ = formula_logits(s, xs, {site: fn})
            assert got != want, f"{name}: rounding {site} {rule} changes no logit"


@pytest.mark.parametrize("name", CASES)
def test_rounding_ties_host_intref_matches_formula(cases, name):
    _, xs, _, data, want = cases[name]
    blob = read_blob(data)
    seq = blob.ops[0].kind == "embed"
    xq = np.array([x for x, _ in xs], np.int64)
    got = run_int8(blob, xq, np.array([n for _, n in xs]) if seq else None)
    assert got.tolist() == want


# argv: device dir, then (blob path, inputs path) pairs. Per blob and kernel set, one line
# [kernels, [logits per input]]; inputs: one per line, n then the xq values.
DEVICE_RUN = """
import sys, array
sys.path.insert(0, sys.argv[1])
from attention import Model
args = sys.argv[2:]
for i in range(0, len(args), 2):
    rows = []
    for line in open(args[i + 1]):
        v = [int(s) for s in line.split()]
        rows.append((v[0], array.array("b", v[1:])))
    for ks in ("pure", "native", "viper"):
        m = Model(args[i], kernels=ks)
        out = m.new_logits()
        res = []
        for n, xq in rows:
            m.run_int8(xq, out, n)
            res.append(list(out))
        print([m.kernels, res])
"""


@pytest.fixture(scope="module")
def device_logits(cases, tmp_path_factory):
    """name -> {kernels: logits per input}, from one MicroPython process (.py sources)."""
    from device_support import device_tree

    from tinyattn.tools.vboard import find_micropython

    exe = find_micropython()
    if exe is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    d = tmp_path_factory.mktemp("ties")
    args = []
    for name, (_, xs, _, data, _) in cases.items():
        (d / f"{name}.bin").write_bytes(data)
        (d / f"{name}.txt").write_text("".join(f"{n} {' '.join(map(str, x))}\n" for x, n in xs))
        args += [str(d / f"{name}.bin"), str(d / f"{name}.txt")]
    proc = subprocess.run([exe, "-X", "heapsize=4m", "-c", DEVICE_RUN, str(device_tree()), *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [ast.literal_eval(line) for line in proc.stdout.splitlines()]
    assert len(lines) == len(cases) * len(KERNELS)
    out = {}
    for k, name in enumerate(cases):
        out[name] = dict(lines[k * len(KERNELS) : (k + 1) * len(KERNELS)])
        assert tuple(out[name]) == KERNELS  # each set loaded as asked, none fell back
    return out


@pytest.mark.micropython
@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("name", CASES)
def test_rounding_ties_device_matches_formula(cases, device_logits, name, kernels):
    want = cases[name][4]
    assert device_logits[name][kernels] == want


def test_rounding_ties_docs_table_names_every_site():
    """docs/quantization.md's tie table has a row for every site these cases test."""
    text = (REPO / "docs" / "quantization.md").read_text()
    section = text.split("### Rounding at every site — ties\n", 1)[1].split("\n#", 1)[0]
    table = "".join(line for line in section.splitlines() if line.startswith("| `"))
    for site in SITES:
        assert f"`{site}`" in table, f"no row for {site} in the tie table"
