# Device (MicroPython; also runs unchanged under CPython): compiling a blob's ops into steps.
"""Turn a checked Blob into the runtime's programs: `build(blob, int8_kernels, float_kernels)`
returns the int8 and the float program, each a tuple of steps `(kernel, a, b, c, d, e, p)`
over array buffers allocated here once (ping-pong activations, attention and myattn scratch),
the input and the output buffer, and the places where a seq model's valid-token count goes
(empty here). A myattn op is four steps: its query (myquery), the score projection Wa
(dense), weights and applied values (myattn), the combine projection Wc (dense); an int8
relu after a dense is that dense's clamp (relu_into_dense), not a step. int8:
weights as stored (W array('b'), b array('i'), M array('h')), requantization parameters in
p. float: the int8 weights as stored with their scales s_w (dense_f scales each dot product:
`(x·W_q[o])·s_w[o] + b[r,o]`, `b = b_q·s_in·s_w`), so the float program holds no copy of the
weights; a float32 blob's as stored (scales 1). Kernel calling conventions:
attention_kernels.py. The blob is read lean (attention.read_blob): op.t maps a role to its
data array, op.shape a W role to its shape. A seq model (op 0 embed) is built by
attention_build_seq, which registers its `buffers` and `build` in KINDS here when
attention.Model imports it for one (a non-seq model's heap never holds it; this module never
names it).

Load-time only: attention.Model imports it to build and drops it again, like the reader.
"""

import array
import sys

_MICROPYTHON = sys.implementation.name == "micropython"
# model kind (op 0's opcode) -> (buffers, build) of the module that builds it: registered by
# that module when imported (attention_build_seq for 7, embed; attention_build_rocket for 12)
KINDS = {}


def _zeros(tc, n):
    """A zeroed array of n items. MicroPython: allocated whole from a range (an 'b' one wraps
    there), then cleared: array(tc, bytes(k)) would allocate the bytes first, a transient of
    the same size whose hole splits a small heap (loading BasicMotions failed in 100 KiB on
    2.4 KB buffers that way)."""
    if not _MICROPYTHON:
        return array.array(tc, bytes(n * (1 if tc == "b" else 4)))
    a = array.array(tc, range(n))
    for i in range(n):
        a[i] = 0
    return a


def window(blob):
    """(T, P, S) of a model whose op 0 reads a window (embed: steps, patch steps, tokens;
    rocket: steps, pooled steps, pooled length); (1, 1, 1) else."""
    ip = blob.ops[0].ip
    if "T" not in ip or "P" not in ip:
        return 1, 1, 1
    return ip["T"], ip["P"], -(-ip["T"] // ip["P"])


def buffers(ops, n_features, int8, flt, shared=False):
    """Every buffer of the int8 program (array('i'), when `int8`) and of the float one
    (array('f'), when `flt`): [(bufs, sc) or None, (bufs, sc) or None], bufs the ping-pong
    activations, sc the scratch (attention_build_seq.buffers for a seq model). The sizes come
    from the ops' iparams alone, so attention.read_blob can allocate them right after the op
    records, while the heap still has its large free spans: the tensors and the reader's
    bytecode, which come and go after, then no longer split them (on a 100 KiB board the float
    program's 2.4 KB window found no span when allocated after the reader). `shared`: a seq
    model's int8 program in the float one's arrays (attention_build_seq.buffers; viper)."""
    if ops[0].code in KINDS:  # a seq model (op 0 embed)
        return KINDS[ops[0].code][0](ops, int8, flt, shared)
    if ops[0].code in (7, 12):
        raise ValueError("a model whose op 0 reads a window needs its builder imported")
    size = n_features  # elements of the current activation
    width = [size, 0]  # of the ping-pong buffers: the input is in buffer 0
    cur = att = seq = 0
    n_qk = n_sc = n_qa = 0  # myattn scratch: Q ‖ K (pool), scores + weights, Q ‖ applied
    for op in ops:
        ip = op.ip
        if op.code == 1:  # dense
            size = size // ip["in"] * ip["out"]
        elif op.code == 4:  # attention
            att = max(att, ip["S"] * ip["E"])
            seq = max(seq, ip["S"])
        elif op.code == 5:  # avgpool
            size = ip["E"]
        elif op.code == 6:  # myattn
            n_qk = max(n_qk, 2 * ip["q"] if ip["mode"] == 1 else 1)
            n_sc = max(n_sc, 2 * ip["v1"])
            n_qa = max(n_qa, ip["q"] + ip["v2"])
            size = ip["out"]
        if op.code in (1, 4, 5, 6):  # the output goes to the other buffer
            cur = 1 - cur
            width[cur] = max(width[cur], size)
    out = [None, None]
    for i, tc in ((0, "i"), (1, "f")):
        if not (int8 if i == 0 else flt):
            continue
        bufs = (_zeros(tc, width[0]), _zeros(tc, width[1]))  # ping-pong activations
        # attention scratch: q, k, v, ctx [S*E] and scores/probabilities [2S]; myattn's
        sc = [None] * 8
        if att:
            sc[:5] = [_zeros(tc, att) for _ in range(4)] + [_zeros(tc, 2 * seq)]
        if n_sc:
            sc[5:] = [_zeros(tc, n_qk), _zeros(tc, n_sc), _zeros(tc, n_qa)]
        out[i] = (bufs, sc)
    return out


def build(blob, kernels, float_kernels, bufs=None):
    """Compile the op list into both programs in one pass: (int8 program, or None when the
    int8 kernel tuple `kernels` is None, float program, or None when `float_kernels` is).
    A program is (steps, input buffer, output buffer, rows, pools); rows and pools are the
    token-count parameters of a seq model (attention_build_seq.build, which this calls for
    one), empty tuples for any other.

    Heap: every buffer of both programs first (`bufs`, from buffers() at the op records, or
    allocated here), then each op's steps, after which the op leaves blob.ops (its dicts, and
    the tensors no step holds, are garbage from then on)."""
    if bufs is None:
        bufs = buffers(blob.ops, blob.n_features, kernels is not None, float_kernels is not None)
    elif kernels is not None and bufs[0] is None:  # shared ones refused (no viper): its own
        bufs[0] = buffers(blob.ops, blob.n_features, True, False)[0]
    if blob.ops[0].code in KINDS:  # a seq model (op 0 embed)
        return KINDS[blob.ops[0].code][1](blob, kernels, float_kernels, bufs)
    progs = []
    for ks, int8, b in ((kernels, True, bufs[0]), (float_kernels, False, bufs[1])):
        if ks is not None:
            progs.append((ks, int8, b[0], b[1], []))
    bufs = None
    cur = 0
    size = blob.n_features
    ops = blob.ops
    for j in range(len(ops)):
        op = ops[j]
        ip = op.ip
        for ks, int8, bufs, sc, steps in progs:
            dense, relu, attn, pool, myquery, myattn, _ = ks[:7]
            q, k, v, ctx, scores, qk, msc, qa = sc
            x, y = bufs[cur], bufs[1 - cur]
            if op.code == 1:  # dense
                rows = size // ip["in"]
                steps.append(dense_step(dense, op, "", x, y, rows, ip["act_min"], ip["act_max"],
                                        int8))  # fmt: skip
            elif op.code == 2:  # relu, in place (int8 after a dense: that dense's clamp)
                if not (int8 and relu_into_dense(steps, dense, x)):
                    steps.append((relu, x, None, None, None, None, array.array("i", [size])))
            elif op.code == 4:  # attention: q, k, v projections, heads, output projection
                S, E, H = ip["S"], ip["E"], ip["H"]
                for g, dst in (("q", q), ("k", k), ("v", v)):
                    steps.append(dense_step(dense, op, g, x, dst, S, -128, 127, int8))
                p = [S, E, H, E // H]
                if int8:
                    p += [ip["M_sm"], ip["shift_sm"], ip["M_ctx"], ip["shift_ctx"]]
                    p += list(op.t["lut"])  # EXP_HI[16], EXP_LO[16]
                    p.append(ip["dmax_sm"])  # the largest diff whose index is computed
                steps.append((attn, q, k, v, ctx, scores, array.array("i", p)))
                steps.append(dense_step(dense, op, "o", ctx, y, S, -128, 127, int8))
            elif op.code == 5:  # avgpool
                p = [ip["S"], ip["E"]] + ([ip["M"], ip["shift"]] if int8 else [])
                steps.append((pool, x, y, None, None, None, array.array("i", p)))
            elif op.code == 6:  # myattn: query, scores = attn(Q ‖ K), weights, applied, combine
                pool_mode = ip["mode"] == 1
                n = ip["v1"] if pool_mode else 1  # rows summed into Q: the S tokens, or Q
                p = [n, ip["q"], 1 if pool_mode else 0]
                if int8:
                    p += [ip["M_q"], ip["shift_q"]]
                steps.append((myquery, x, qa, qk, None, None, array.array("i", p)))
                qk_in = qk if pool_mode else x  # explicit: Q ‖ K are the input's first q + k
                steps.append(dense_step(dense, op, "a", qk_in, msc, 1, -128, 127, int8))
                vo = 0 if pool_mode else ip["q"] + ip["k"]  # where V starts in the input
                p = [ip["v1"], ip["v2"], vo, ip["q"]]
                if int8:
                    p += [ip["M_sm"], ip["shift_sm"], ip["M_ap"], ip["shift_ap"]]
                    p += list(op.t["lut"])  # EXP_HI[16], EXP_LO[16]
                    p.append(ip["dmax_sm"])  # the largest diff whose index is computed
                steps.append((myattn, x, msc, qa, None, None, array.array("i", p)))
                steps.append(dense_step(dense, op, "c", qa, y, 1, -128, 127, int8))
            # 3 reshape: nothing to do, a flat row-major buffer is already [S, E].
        if op.code == 1:
            size = size // ip["in"] * ip["out"]
        elif op.code == 5:
            size = ip["E"]
        elif op.code == 6:
            size = ip["out"]
        if op.code in (1, 4, 5, 6):
            cur = 1 - cur
        ops[j] = op = ip = None
    out = [None, None]
    for _, int8, bufs, _, steps in progs:
        out[0 if int8 else 1] = (tuple(steps), bufs[0], bufs[cur], (), ())
    return out[0], out[1]


def relu_into_dense(steps, dense, x):
    """int8: when the last step is a dense writing `x` with act_max >= 0, a relu on x becomes
    its clamp, relu(clamp(v, lo, hi)) = clamp(v, max(lo, 0), hi): sets lo, returns True (no
    relu step, one call less per run)."""
    if not steps or steps[-1][0] is not dense or steps[-1][2] is not x:
        return False
    p = steps[-1][6]
    if p[5] < 0:
        return False
    p[4] = max(p[4], 0)
    return True


# input scale of a projection, if not s_in: attention's o, myattn's a and c, res_ff's Dense2
_S_IN = {"o": "s_ctx", "a": "s_qk", "c": "s_qa", "2": "s_h"}


def dense_step(kernel, op, g, x, y, rows, lo, hi, int8, bstride=0, into=None):
    """The step of one dense layer of `op` (tensor roles W+g, b+g, s+g, m+g; g is "" for a
    dense op and embed, q/k/v/o in attention, a/c in myattn, 1/2 in res_ff). `bstride`: 0
    for one bias row, n_out for embed's per-token bias [S, n_out]. `into`: the float
    bias array to fill when it has the size (allocated with the buffers: embed's [S, E])."""
    w = op.t["W" + g]
    n_out, n_in = op.shape["W" + g]
    bias = op.t.get("b" + g)
    if int8:
        b = bias if bias else _zeros("i", n_out)
        p = [rows, n_in, n_out, op.ip["shift_" + g if g else "shift"], lo, hi, bstride]
        return (kernel, x, y, w, b, op.t["m" + g], array.array("i", p))
    p = array.array("i", [rows, n_in, n_out, bstride])
    if "s" + g not in op.t:  # float32 blob: the weights as stored, scales 1
        b = bias if bias else _zeros("f", n_out)
        return (kernel, x, y, w, b, array.array("f", [1.0] * n_out), p)
    # an int8 blob: W_q as stored (shared with the int8 program) times s_w[o] in the kernel;
    # b[r,o] = b_q[r,o]·s_in·s_w[o]
    s_w = op.t["s" + g]
    s_in = op.fp[_S_IN.get(g, "s_in")]
    n = len(bias) if bias else n_out
    bf = into if into is not None and len(into) == n else _zeros("f", n)
    if bias:
        for j in range(len(bf)):
            bf[j] = bias[j] * s_in * s_w[j % n_out]
    return (kernel, x, y, w, bf, s_w, p)
