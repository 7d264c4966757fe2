# Device (MicroPython; also runs unchanged under CPython): compiling a seq model into steps.
"""`build(blob, kernels, float_kernels)` of a seq model (op 0 embed; its other ops are dense,
relu, res_attention, res_ff and masked_pool, attention_ops_seq.place), called by
attention_build.build (this module registers its `buffers` and `build` in attention_build.KINDS
for opcode 7 when imported; attention.Model imports it for a seq blob): steps over buffers
allocated here once, as attention_build's, plus where the valid-token count goes.

- embed: dense over the S patches of P*C inputs with the per-token bias b[s, o] (bstride E);
  int8: the embed kernel (INT8[7]) on the window in an array('b') of its own, S*P*C bytes
  (attention.Model.run_int8 fills it with the load kernel, INT8[8]).
- res_attention: q, k, v projections, attn, the output projection a into the other ping-pong
  buffer, then `add` (x, a) in place into it: y = x + MHA(x).
- res_ff: Dense1 into the other buffer (int8: relu is the clamp [0, 127]; float: a relu
  step), Dense2 into the residual buffer r [S*E] (attention's q buffer), then `add` (r, x)
  in place into x (the same integers as x·M_x + f·M_f: the sum is exact before its one
  rounding).
- masked_pool: pool over the valid tokens, M = m[S_n - 1].

- conv: the conv kernel (INT8[9]; FLOAT[7] is the same kernel, run with shift 0) into the
  other buffer; its S_out and S_in count
  tokens, and every op after a conv of stride s sees ceil(S/s) of them.

Every parameter that counts tokens is written here for the full window (S tokens); `rows`
lists (p, index, unit, div) to set p[index] = ceil(S_n / div) * unit, `pools` (p, m, div) to
set p[2] = m[ceil(S_n / div) - 1], before a run on n steps (attention.Model.run_int8 /
run_float; S_n = ceil(n/P); div: the product of the strides of the convs before).

Load-time only, dropped with attention_build.
"""

import array

import attention_build
from attention_build import _zeros, dense_step, relu_into_dense


def buffers(ops, int8, flt, shared=False):
    """[(bufs, sc) or None, (bufs, sc) or None]: the buffers of the int8 program (when
    `int8`) and of the float one (when `flt`), as attention_build.buffers, from the ops'
    iparams alone; the float ones (the largest: the float input window) first.

    `shared` (int8 kernels that address their buffers as raw 32-bit words: viper's ptr32):
    the int8 program runs in the float program's arrays, all but its int8 input window (the
    two programs never run at once, and each writes every value it reads in a run); its
    logits are then float32-typed words, which attention.Model.run_int8 copies into `out` as
    bytes. 8.9 KB less for BasicMotions, 11.9 KB for JapaneseVowels."""
    e = ops[0].ip
    S = -(-e["T"] // e["P"])  # tokens of a full window, at the current op (a conv strides)
    width = [0, 0]  # of the ping-pong buffers (the input, S patches, is buffer 0 of float)
    SE = 0  # attention scratch: the largest S*E at an attention or res_ff op
    S_att = 0  # tokens at the attention ops (the scores)
    cur = 0
    for op in ops:
        ip = op.ip
        if op.code == 8 or op.code == 9:
            SE = max(SE, S * ip["E"])
            S_att = max(S_att, S)
        if op.code == 9:  # res_ff: Dense1's output [S, F] in the other buffer, in place after
            width[1 - cur] = max(width[1 - cur], S * ip["F"])
        elif op.code != 2:  # embed, conv, dense, res_attention, masked_pool: the other buffer
            cur = 1 - cur
            if op.code == 11:
                S = -(-S // ip["stride"])
            n = ip["E"] if op.code == 10 else S * (ip["out"] if op.code == 1 else
                                                   ip["F"] if op.code == 11 else ip["E"])
            width[cur] = max(width[cur], n)
    out = [None, None]
    for i, tc in ((1, "f"), (0, "i")):  # the float input (the largest) first
        if not (int8 if i == 0 else flt):
            continue
        n = -(-e["T"] // e["P"]) * e["P"] * e["C"]  # the input window (float buffer 0, int8
        # a buffer of its own)
        if i == 0 and shared and out[1] is not None:
            bufs, sc = out[1]
            out[0] = (bufs, sc[:6] + [_zeros("b", n)])
            continue
        bufs = (_zeros(tc, max(width[0], n if tc == "f" else 0)), _zeros(tc, width[1]))
        # attention scratch q, k, v, ctx [S*E], scores [2S]; res_ff's residual buffer r [S*E]
        # is q's memory (res_ff runs when no attention scratch is live: 1.3 KB less a program
        # for BasicMotions); int8: the input window, array('b') (the embed kernel reads int8)
        sc = [_zeros(tc, SE) for _ in range(4)]
        sc += [sc[0], _zeros(tc, 2 * S_att)]
        sc.append(_zeros("b", n) if tc == "i" else bufs[0])
        if tc == "f":  # embed's per-token float bias [S, E] (2 KB for JapaneseVowels): here,
            sc.append(_zeros("f", -(-e["T"] // e["P"]) * e["E"]))  # not in a split heap
        out[i] = (bufs, sc)
    return out


def build(blob, kernels, float_kernels, bufs):
    """(int8 program, or None when `kernels` is None, float program, or None when
    `float_kernels` is) of a seq model, each (steps, input buffer, output buffer, rows,
    pools), over `bufs` (buffers()); op by op, each op leaving blob.ops once both programs
    have its steps."""
    e = blob.ops[0].ip
    S = -(-e["T"] // e["P"])  # tokens of a full window
    progs = []
    for ks, int8, b in ((float_kernels, False, bufs[1]), (kernels, True, bufs[0])):
        if ks is not None:
            progs.append((ks, int8, b[0], b[1], [], [], []))
    bufs = None
    tokens = S  # S while the activation is the tokens [S, ·], 0 after masked_pool
    div = 1  # strides so far: S_n tokens of the embed are ceil(S_n/div) here
    size = e["C"]
    cur = 0
    ops = blob.ops
    for j in range(len(ops)):
        op = ops[j]
        ip = op.ip
        for ks, int8, bufs, sc, steps, rows, pools in progs:
            dense, relu, attn, pool, _, _, add = ks[:7]
            q, k, v, ctx, r, scores, window = sc[:7]
            x, y = bufs[cur], bufs[1 - cur]
            new = []  # (step, unit): p[0] counts tokens (unit per token), unit 0: it does not
            if op.code == 7:  # embed: int8 with the embed kernel on the int8 window
                st = dense_step(ks[7] if int8 else dense, op, "", window, y, S, -128, 127, int8,
                                ip["E"], None if int8 else sc[7])  # fmt: skip
                new.append((st, 1))
            elif op.code == 1:  # dense: per token, or the classifier after masked_pool
                n = size // ip["in"]
                new.append((dense_step(dense, op, "", x, y, n, ip["act_min"], ip["act_max"],
                                       int8), 1))  # fmt: skip
            elif op.code == 2:  # relu, in place (int8 after a dense: that dense's clamp)
                if not (int8 and relu_into_dense(steps, dense, x)):
                    new.append(((relu, x, None, None, None, None, array.array("i", [size])),
                                size // S if tokens else 0))  # fmt: skip
            elif op.code == 8:  # res_attention
                E, H = ip["E"], ip["H"]
                for g, dst in (("q", q), ("k", k), ("v", v)):
                    new.append((dense_step(dense, op, g, x, dst, S, -128, 127, int8), 1))
                p = [S, E, H, E // H]
                if int8:
                    p += [ip["M_sm"], ip["shift_sm"], ip["M_ctx"], ip["shift_ctx"]]
                    p += list(op.t["lut"])  # EXP_HI[16], EXP_LO[16]
                    p.append(ip["dmax_sm"])  # the largest diff whose index is computed
                new.append(((attn, q, k, v, ctx, scores, array.array("i", p)), 1))
                new.append((dense_step(dense, op, "o", ctx, y, S, -128, 127, int8), 1))
                p = [S * E] + ([ip["M_x"], ip["M_a"], ip["shift_add"]] if int8 else [])
                new.append(((add, x, y, None, None, None, array.array("i", p)), E))
            elif op.code == 9:  # res_ff, in place into x
                E, F = ip["E"], ip["F"]
                new.append((dense_step(dense, op, "1", x, y, S, 0, 127, int8), 1))
                if not int8:
                    new.append(((relu, y, None, None, None, None,
                                 array.array("i", [S * F])), F))  # fmt: skip
                new.append((dense_step(dense, op, "2", y, r, S, -128, 127, int8), 1))
                p = [S * E] + ([ip["M_f"], ip["M_x"], ip["shift_add"]] if int8 else [])
                new.append(((add, r, x, None, None, None, array.array("i", p)), E))
            elif op.code == 10:  # masked_pool
                p = [S, ip["E"]] + ([op.t["m"][S - 1], ip["shift"]] if int8 else [])
                st = (pool, x, y, None, None, None, array.array("i", p))
                new.append((st, 1))
                if int8:
                    pools.append((st[6], op.t["m"], div))
            elif op.code == 11:  # conv (attention_build_conv: loaded for a blob with one)
                __import__("attention_build_conv").step(ks, op, x, y, S, int8, div, steps, rows)
            for st, unit in new:
                steps.append(st)
                if tokens and unit:
                    rows.append((st[6], 0, unit, div))
        if op.code == 7:
            size = S * ip["E"]
        elif op.code == 11:  # a conv of stride s: ceil(S/s) tokens of F from here
            S = -(-S // ip["stride"])
            div *= ip["stride"]
            size = S * ip["F"]
        elif op.code == 1:
            size = size // ip["in"] * ip["out"]
        elif op.code == 10:
            size = ip["E"]
            tokens = 0
        if op.code != 2 and op.code != 9:  # the output is in the other buffer
            cur = 1 - cur
        ops[j] = op = ip = None
    out = [None, None]
    for _, int8, bufs, sc, steps, rows, pools in progs:
        out[0 if int8 else 1] = (tuple(steps), sc[6], bufs[cur], tuple(rows), tuple(pools))
    return out[0], out[1]


attention_build.KINDS[7] = (buffers, build)  # op 0 embed: a seq model
