# Device (MicroPython; also runs unchanged under CPython): compiling a blob's ops into steps.
"""Turn a checked Blob into the runtime's programs: `build(blob, kernels, int8)` returns a
tuple of steps `(kernel, a, b, c, d, e, p)` over array buffers allocated here once (ping-pong
activations, attention scratch), the input and the output buffer. int8: weights as stored
(W array('b'), b array('i'), M array('h')), requantization parameters in p. float: weights
dequantized into array('f') (`W_q[o,i]·s_w[o]`, `b_q[o]·s_in·s_w[o]`; a float32 blob's as
stored). Kernel calling conventions: attention_kernels.py.

Load-time only: attention.Model imports it to build and drops it again, like the reader.
"""

import array


def _zeros(tc, n):
    return array.array(tc, bytes(n * (1 if tc == "b" else 4)))


def build(blob, kernels, int8):
    """Compile the op list into steps `(kernel, a, b, c, d, e, p)` over buffers allocated
    here once. Returns (steps, input buffer, output buffer)."""
    dense, relu, attn, pool = kernels
    tc = "i" if int8 else "f"
    size = width = blob.n_features  # elements of the current / the widest activation
    att = seq = 0
    for op in blob.ops:
        if op.code == 1:  # dense
            size = size // op.ip["in"] * op.ip["out"]
        elif op.code == 4:  # attention
            att = max(att, op.ip["S"] * op.ip["E"])
            seq = max(seq, op.ip["S"])
        elif op.code == 5:  # avgpool
            size = op.ip["E"]
        width = max(width, size)
    bufs = (_zeros(tc, width), _zeros(tc, width))  # ping-pong activations
    if att:  # attention scratch: q, k, v, ctx [S*E] and scores/probabilities [2S]
        q, k, v, ctx, sc = (_zeros(tc, att), _zeros(tc, att), _zeros(tc, att), _zeros(tc, att),
                            _zeros(tc, 2 * seq))  # fmt: skip
    cur = 0
    size = blob.n_features
    steps = []
    for op in blob.ops:
        ip = op.ip
        x, y = bufs[cur], bufs[1 - cur]
        if op.code == 1:  # dense
            rows = size // ip["in"]
            steps.append(dense_step(dense, op, "", x, y, rows, ip["act_min"], ip["act_max"], int8))
            size = rows * ip["out"]
            cur = 1 - cur
        elif op.code == 2:  # relu, in place
            steps.append((relu, x, None, None, None, None, array.array("i", [size])))
        elif op.code == 4:  # attention: q, k, v projections, heads, output projection
            S, E, H = ip["S"], ip["E"], ip["H"]
            for g, dst in (("q", q), ("k", k), ("v", v)):
                steps.append(dense_step(dense, op, g, x, dst, S, -128, 127, int8))
            p = [S, E, H, E // H]
            if int8:
                p += [ip["M_sm"], ip["shift_sm"], ip["M_ctx"], ip["shift_ctx"]]
                p += list(op.t["lut"].data)  # EXP_HI[16], EXP_LO[16]
            steps.append((attn, q, k, v, ctx, sc, array.array("i", p)))
            steps.append(dense_step(dense, op, "o", ctx, y, S, -128, 127, int8))
            cur = 1 - cur
        elif op.code == 5:  # avgpool
            p = [ip["S"], ip["E"]] + ([ip["M"], ip["shift"]] if int8 else [])
            steps.append((pool, x, y, None, None, None, array.array("i", p)))
            size = ip["E"]
            cur = 1 - cur
        # 3 reshape: nothing to do, a flat row-major buffer is already [S, E].
        # 6 myattn (issue 7): the blob reader rejects it until its kernels and a step land here.
    return tuple(steps), bufs[0], bufs[cur]


def dense_step(kernel, op, g, x, y, rows, lo, hi, int8):
    """The step of one dense layer of `op` (tensor roles W+g, b+g, s+g, m+g)."""
    n_out, n_in = op.t["W" + g].shape
    w = op.t["W" + g].data
    bias = op.t.get("b" + g)
    if int8:
        b = bias.data if bias else _zeros("i", n_out)
        p = [rows, n_in, n_out, op.ip["shift_" + g if g else "shift"], lo, hi]
        return (kernel, x, y, w, b, op.t["m" + g].data, array.array("i", p))
    p = array.array("i", [rows, n_in, n_out])
    if "s" + g not in op.t:  # float32 blob: the weights as stored
        return (kernel, x, y, w, bias.data if bias else _zeros("f", n_out), None, p)
    # dequantize: W[o,i] = W_q[o,i]·s_w[o], b[o] = b_q[o]·s_in·s_w[o]
    s_w = op.t["s" + g].data
    s_in = op.fp["s_ctx" if g == "o" else "s_in"]
    wf = _zeros("f", n_out * n_in)
    bf = _zeros("f", n_out)
    for o in range(n_out):
        for i in range(n_in):
            wf[o * n_in + i] = w[o * n_in + i] * s_w[o]
        if bias:
            bf[o] = bias.data[o] * s_in * s_w[o]
    return (kernel, x, y, wf, bf, None, p)
