# Device (MicroPython; also runs unchanged under CPython): compiling a blob's ops into steps.
"""Turn a checked Blob into the runtime's programs: `build(blob, kernels, int8)` returns a
tuple of steps `(kernel, a, b, c, d, e, p)` over array buffers allocated here once (ping-pong
activations, attention, myattn and residual scratch), the input and the output buffer, and
the places where a seq model's valid-token count goes. A myattn op is four steps: its query
(myquery), the score projection Wa (dense), weights and applied values (myattn), the combine
projection Wc (dense). int8: weights as stored (W array('b'), b array('i'), M array('h')),
requantization parameters in p. float: weights dequantized into array('f')
(`W_q[o,i]·s_w[o]`, `b_q[o]·s_in·s_w[o]`; a float32 blob's as stored). Kernel calling
conventions: attention_kernels.py.

Seq models (op 0 embed): embed is dense over the S patches with the per-token bias (bstride
E); res_attention is attention's five steps, its output projection into the other ping-pong
buffer, then `add` (x, a) in place into it; res_ff is Dense1 (relu as the clamp [0, 127])
into the other buffer, Dense2 into the residual buffer r [S*E], then `add` (r, x) in place
into x (same integers: the sum is exact before its one rounding); masked_pool is pool. The
parameters that count tokens are written with S (the full window) here; `rows` lists
(p, index, unit) to set to S_n * unit and `pools` (p, m) to set p[2] = m[S_n - 1] before a
run on n steps (attention.Model.run_int8 / run_float).

Load-time only: attention.Model imports it to build and drops it again, like the reader.
"""

import array


def _zeros(tc, n):
    return array.array(tc, bytes(n * (1 if tc == "b" else 4)))


def window(blob):
    """(T, P, S) of a seq model (op 0 embed): steps, patch steps, tokens; (1, 1, 1) else."""
    ip = blob.ops[0].ip
    if blob.ops[0].code != 7:
        return 1, 1, 1
    return ip["T"], ip["P"], -(-ip["T"] // ip["P"])


def macs(blob):
    """Multiply-accumulates of one full-window inference (dense rows·in·out, attention
    4SE² + 2S²E, pools S·E; myattn its query, projections and weighted sum), as
    tinyattn.seqmodel.macs counts them."""
    total = 0
    rows = 1  # rows of the current activation (tokens after embed or reshape)
    for op in blob.ops:
        ip = op.ip
        if op.code == 1:
            total += rows * ip["in"] * ip["out"]
        elif op.code == 3:
            rows = ip["S"]
        elif op.code == 7:
            rows = -(-ip["T"] // ip["P"])
            total += rows * ip["P"] * ip["C"] * ip["E"]
        elif op.code == 4 or op.code == 8:
            total += 4 * ip["S"] * ip["E"] * ip["E"] + 2 * ip["S"] * ip["S"] * ip["E"]
        elif op.code == 9:
            total += 2 * rows * ip["E"] * ip["F"]
        elif op.code == 5 or op.code == 10:
            total += ip["S"] * ip["E"]
            rows = 1
        elif op.code == 6:
            n = ip["v1"] if ip["mode"] == 1 else 1
            total += n * ip["q"] + (ip["q"] + ip["k"]) * ip["v1"] + ip["v1"] * ip["v2"]
            total += (ip["q"] + ip["v2"]) * ip["out"]
            rows = 1
    return total


def build(blob, kernels, int8):
    """Compile the op list into steps `(kernel, a, b, c, d, e, p)` over buffers allocated
    here once. Returns (steps, input buffer, output buffer, rows, pools): the last two are
    the token-count parameters of a seq model (see the module docstring; empty tuples
    otherwise)."""
    dense, relu, attn, pool, myquery, myattn, add = kernels
    tc = "i" if int8 else "f"
    size = width = blob.n_features  # elements of the current / the widest activation
    att = n_tok = res = 0
    n_qk = n_sc = n_qa = 0  # myattn scratch: Q ‖ K (pool), scores + weights, Q ‖ applied
    for op in blob.ops:
        ip = op.ip
        if op.code == 1:  # dense
            size = size // ip["in"] * ip["out"]
        elif op.code == 4 or op.code == 8:  # attention, res_attention
            att = max(att, ip["S"] * ip["E"])
            n_tok = max(n_tok, ip["S"])
        elif op.code == 5 or op.code == 10:  # avgpool, masked_pool
            size = ip["E"]
        elif op.code == 7:  # embed: the input is the S patches of P*C values
            S = -(-ip["T"] // ip["P"])
            width = max(width, S * ip["P"] * ip["C"])
            size = S * ip["E"]
        elif op.code == 9:  # res_ff: hidden [S, F] in the other buffer, f [S, E] in r
            width = max(width, size // ip["E"] * ip["F"])
            res = max(res, size)
        elif op.code == 6:  # myattn
            n_qk = max(n_qk, 2 * ip["q"] if ip["mode"] == 1 else 1)
            n_sc = max(n_sc, 2 * ip["v1"])
            n_qa = max(n_qa, ip["q"] + ip["v2"])
            size = ip["out"]
        width = max(width, size)
    bufs = (_zeros(tc, width), _zeros(tc, width))  # ping-pong activations
    if att:  # attention scratch: q, k, v, ctx [S*E] and scores/probabilities [2S]
        q, k, v, ctx, sc = (_zeros(tc, att), _zeros(tc, att), _zeros(tc, att), _zeros(tc, att),
                            _zeros(tc, 2 * n_tok))  # fmt: skip
    if n_sc:
        qk, msc, qa = _zeros(tc, n_qk), _zeros(tc, n_sc), _zeros(tc, n_qa)
    r = _zeros(tc, res) if res else None  # res_ff's Dense2 output, for the residual add
    cur = 0
    size = blob.n_features
    steps = []
    rows_at = []  # (p, index, unit): p[index] = S_n * unit for a window of S_n tokens
    pools = []  # (p, m): p[2] = m[S_n - 1]
    tokens = 0  # S while the activation is a seq model's tokens [S, width], else 0

    def count(step, i, unit):  # a parameter counting tokens: S_n * unit on a short window
        if tokens:
            rows_at.append((step[6], i, unit))
        return step

    for op in blob.ops:
        ip = op.ip
        x, y = bufs[cur], bufs[1 - cur]
        if op.code == 1:  # dense
            rows = size // ip["in"]
            st = dense_step(dense, op, "", x, y, rows, ip["act_min"], ip["act_max"], int8)
            steps.append(count(st, 0, 1))
            size = rows * ip["out"]
            cur = 1 - cur
        elif op.code == 2:  # relu, in place
            st = (relu, x, None, None, None, None, array.array("i", [size]))
            steps.append(count(st, 0, size // tokens if tokens else 0))
        elif op.code == 4 or op.code == 8:  # (res_)attention: q, k, v, heads, projection o
            S, E, H = ip["S"], ip["E"], ip["H"]
            for g, dst in (("q", q), ("k", k), ("v", v)):
                steps.append(count(dense_step(dense, op, g, x, dst, S, -128, 127, int8), 0, 1))
            p = [S, E, H, E // H]
            if int8:
                p += [ip["M_sm"], ip["shift_sm"], ip["M_ctx"], ip["shift_ctx"]]
                p += list(op.t["lut"].data)  # EXP_HI[16], EXP_LO[16]
            steps.append(count((attn, q, k, v, ctx, sc, array.array("i", p)), 0, 1))
            steps.append(count(dense_step(dense, op, "o", ctx, y, S, -128, 127, int8), 0, 1))
            if op.code == 8:  # y = x + a: add (x, a) in place into a
                p = [S * E] + ([ip["M_x"], ip["M_a"], ip["shift_add"]] if int8 else [])
                steps.append(count((add, x, y, None, None, None, array.array("i", p)), 0, E))
            cur = 1 - cur
        elif op.code == 5 or op.code == 10:  # avgpool; masked_pool over the S_n valid tokens
            S = ip["S"]
            if int8:
                M = ip["M"] if op.code == 5 else op.t["m"].data[S - 1]
                p = [S, ip["E"], M, ip["shift"]]
            else:
                p = [S, ip["E"]]
            st = count((pool, x, y, None, None, None, array.array("i", p)), 0, 1)
            if tokens and int8:
                pools.append((st[6], op.t["m"].data))
            steps.append(st)
            size = ip["E"]
            tokens = 0
            cur = 1 - cur
        elif op.code == 7:  # embed: dense over the S patches, per-token bias b[s, o]
            tokens = -(-ip["T"] // ip["P"])
            steps.append(count(dense_step(dense, op, "", x, y, tokens, -128, 127, int8,
                                          ip["E"]), 0, 1))  # fmt: skip
            size = tokens * ip["E"]
            cur = 1 - cur
        elif op.code == 9:  # res_ff: h = relu(Dense1(x)) in y, f = Dense2(h) in r, x += f
            E = ip["E"]
            rows = size // E
            steps.append(count(dense_step(dense, op, "1", x, y, rows, 0, 127, int8), 0, 1))
            if not int8:  # the float path: relu, then Dense2
                st = (relu, y, None, None, None, None, array.array("i", [rows * ip["F"]]))
                steps.append(count(st, 0, ip["F"]))
            steps.append(count(dense_step(dense, op, "2", y, r, rows, -128, 127, int8), 0, 1))
            p = [size] + ([ip["M_f"], ip["M_x"], ip["shift_add"]] if int8 else [])
            steps.append(count((add, r, x, None, None, None, array.array("i", p)), 0, E))
        elif op.code == 6:  # myattn: query, scores = attn(Q ‖ K), weights and applied, combine
            pool_mode = ip["mode"] == 1
            n = ip["v1"] if pool_mode else 1  # rows summed into Q: the S tokens, or Q itself
            p = [n, ip["q"], 1 if pool_mode else 0] + ([ip["M_q"], ip["shift_q"]] if int8 else [])
            steps.append((myquery, x, qa, qk, None, None, array.array("i", p)))
            qk_in = qk if pool_mode else x  # explicit: Q ‖ K are the input's first q + k values
            steps.append(dense_step(dense, op, "a", qk_in, msc, 1, -128, 127, int8))
            vo = 0 if pool_mode else ip["q"] + ip["k"]  # where V starts in the input
            p = [ip["v1"], ip["v2"], vo, ip["q"]]
            if int8:
                p += [ip["M_sm"], ip["shift_sm"], ip["M_ap"], ip["shift_ap"]]
                p += list(op.t["lut"].data)  # EXP_HI[16], EXP_LO[16]
            steps.append((myattn, x, msc, qa, None, None, array.array("i", p)))
            steps.append(dense_step(dense, op, "c", qa, y, 1, -128, 127, int8))
            size = ip["out"]
            cur = 1 - cur
        # 3 reshape: nothing to do, a flat row-major buffer is already [S, E].
    return tuple(steps), bufs[0], bufs[cur], tuple(rows_at), tuple(pools)


# input scale of a projection, if not s_in: attention's o, myattn's a and c, res_ff's Dense2
_S_IN = {"o": "s_ctx", "a": "s_qk", "c": "s_qa", "2": "s_h"}


def dense_step(kernel, op, g, x, y, rows, lo, hi, int8, bstride=0):
    """The step of one dense layer of `op` (tensor roles W+g, b+g, s+g, m+g; g is "" for a
    dense op and embed, q/k/v/o in attention, a/c in myattn, 1/2 in res_ff). `bstride`: 0
    for one bias row, n_out for embed's per-token bias [S, n_out]."""
    n_out, n_in = op.t["W" + g].shape
    w = op.t["W" + g].data
    bias = op.t.get("b" + g)
    if int8:
        b = bias.data if bias else _zeros("i", n_out)
        p = [rows, n_in, n_out, op.ip["shift_" + g if g else "shift"], lo, hi, bstride]
        return (kernel, x, y, w, b, op.t["m" + g].data, array.array("i", p))
    p = array.array("i", [rows, n_in, n_out, bstride])
    if "s" + g not in op.t:  # float32 blob: the weights as stored
        return (kernel, x, y, w, bias.data if bias else _zeros("f", n_out), None, p)
    # dequantize: W[o,i] = W_q[o,i]·s_w[o], b[r,o] = b_q[r,o]·s_in·s_w[o]
    s_w = op.t["s" + g].data
    s_in = op.fp[_S_IN.get(g, "s_in")]
    wf = _zeros("f", n_out * n_in)
    bf = _zeros("f", len(bias.data) if bias else n_out)
    for o in range(n_out):
        for i in range(n_in):
            wf[o * n_in + i] = w[o * n_in + i] * s_w[o]
    if bias:
        for j in range(len(bf)):
            bf[j] = bias.data[j] * s_in * s_w[j % n_out]
    return (kernel, x, y, wf, bf, None, p)
