# Device (MicroPython; also runs unchanged under CPython): compiling a seq model into steps.
"""`build(blob, kernels, int8)` of a seq model (op 0 embed; its other ops are dense, relu,
res_attention, res_ff and masked_pool, attention_ops_seq.place), called by
attention_build.build: steps over buffers allocated here once, as attention_build's, plus
where the valid-token count goes.

- embed: dense over the S patches of P*C inputs with the per-token bias b[s, o] (bstride E).
- res_attention: q, k, v projections, attn, the output projection a into the other ping-pong
  buffer, then `add` (x, a) in place into it: y = x + MHA(x).
- res_ff: Dense1 into the other buffer (int8: relu is the clamp [0, 127]; float: a relu
  step), Dense2 into the residual buffer r [S*E], then `add` (r, x) in place into x (the same
  integers as x·M_x + f·M_f: the sum is exact before its one rounding).
- masked_pool: pool over the valid tokens, M = m[S_n - 1].

Every parameter that counts tokens is written here for the full window (S tokens); `rows`
lists (p, index, unit) to set p[index] = S_n * unit, `pools` (p, m) to set p[2] = m[S_n - 1],
before a run on n steps (attention.Model.run_int8 / run_float; S_n = ceil(n/P)).

Load-time only, dropped with attention_build.
"""

import array

from attention_build import _zeros, dense_step


def build(blob, kernels, int8):
    """(steps, input buffer, output buffer, rows, pools) of a seq model."""
    dense, relu, attn, pool, _, _, add = kernels
    tc = "i" if int8 else "f"
    e = blob.ops[0].ip
    S = -(-e["T"] // e["P"])  # tokens of a full window
    width = S * e["P"] * e["C"]  # the input: S patches
    E = H = F = 0
    for op in blob.ops:
        ip = op.ip
        if op.code == 1:
            width = max(width, S * ip["out"])
        elif op.code == 9:
            F = max(F, ip["F"])
            width = max(width, S * ip["F"])
        if "E" in ip:
            E = max(E, ip["E"])
    bufs = (_zeros(tc, width), _zeros(tc, width))  # ping-pong activations
    att = S * E  # attention scratch q, k, v, ctx [S*E], scores [2S]; res_ff's r [S*E]
    q, k, v, ctx, r = [_zeros(tc, att) for _ in range(5)]
    sc = _zeros(tc, 2 * S)
    steps = []
    rows = []
    pools = []
    tokens = S  # S while the activation is the tokens [S, ·], 0 after masked_pool
    size = e["C"]
    cur = 0
    for op in blob.ops:
        ip = op.ip
        x, y = bufs[cur], bufs[1 - cur]
        new = []  # (step, unit): p[0] counts tokens (unit per token), unit 0: it does not
        if op.code == 7:  # embed
            new.append((dense_step(dense, op, "", x, y, S, -128, 127, int8, ip["E"]), 1))
            size = S * ip["E"]
        elif op.code == 1:  # dense: per token, or the classifier after masked_pool
            n = size // ip["in"]
            new.append((dense_step(dense, op, "", x, y, n, ip["act_min"], ip["act_max"], int8),
                        1))  # fmt: skip
            size = n * ip["out"]
        elif op.code == 2:  # relu, in place
            new.append(((relu, x, None, None, None, None, array.array("i", [size])),
                        size // S if tokens else 0))  # fmt: skip
        elif op.code == 8:  # res_attention
            E, H = ip["E"], ip["H"]
            for g, dst in (("q", q), ("k", k), ("v", v)):
                new.append((dense_step(dense, op, g, x, dst, S, -128, 127, int8), 1))
            p = [S, E, H, E // H]
            if int8:
                p += [ip["M_sm"], ip["shift_sm"], ip["M_ctx"], ip["shift_ctx"]]
                p += list(op.t["lut"].data)  # EXP_HI[16], EXP_LO[16]
            new.append(((attn, q, k, v, ctx, sc, array.array("i", p)), 1))
            new.append((dense_step(dense, op, "o", ctx, y, S, -128, 127, int8), 1))
            p = [S * E] + ([ip["M_x"], ip["M_a"], ip["shift_add"]] if int8 else [])
            new.append(((add, x, y, None, None, None, array.array("i", p)), E))
        elif op.code == 9:  # res_ff, in place into x
            E, F = ip["E"], ip["F"]
            new.append((dense_step(dense, op, "1", x, y, S, 0, 127, int8), 1))
            if not int8:
                new.append(((relu, y, None, None, None, None, array.array("i", [S * F])), F))
            new.append((dense_step(dense, op, "2", y, r, S, -128, 127, int8), 1))
            p = [S * E] + ([ip["M_f"], ip["M_x"], ip["shift_add"]] if int8 else [])
            new.append(((add, r, x, None, None, None, array.array("i", p)), E))
        elif op.code == 10:  # masked_pool
            p = [S, ip["E"]] + ([op.t["m"].data[S - 1], ip["shift"]] if int8 else [])
            st = (pool, x, y, None, None, None, array.array("i", p))
            new.append((st, 1))
            if int8:
                pools.append((st[6], op.t["m"].data))
            size = ip["E"]
        for st, unit in new:
            steps.append(st)
            if tokens and unit:
                rows.append((st[6], 0, unit))
        if op.code == 10:
            tokens = 0
        if op.code != 2 and op.code != 9:  # the output is in the other buffer
            cur = 1 - cur
    return tuple(steps), bufs[0], bufs[cur], tuple(rows), tuple(pools)
