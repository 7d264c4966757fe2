# Device (MicroPython; also runs unchanged under CPython): pure-Python kernels (the reference).
"""The int8 and float kernels of the device runtime, plain Python: the reference that the
`@micropython.native` variant (attention_native.py, generated from this file when deploying:
tinyattn.board.native) and the viper int8 kernels (attention_viper.py) must match bit for bit
on the int8 path.

Every kernel is called as `k(a, b, c, d, e, p)`, p an array('i') of parameters, over buffers
attention.py allocates once at load. Flat index math, locals only, no slicing, no allocation;
the int8 kernels use integers only (docs/quantization.md; all |v| < 2**30 by the exporter's
small-int budget, so a board's small ints never turn into heap objects).

int8 (activations array('i'), W array('b'), b array('i'), M array('h')):
  dense  (x, y, W, b, M, p)  p = rows, n_in, n_out, shift, act_min, act_max, bstride
         y[r,o] = requant(sum_i x[r,i] W[o,i] + b[r*bstride + o], M[o], shift, act_min,
         act_max); bstride 0: one bias row for all rows, n_out: embed's per-token bias [S, E]
         (the patch embedding: row s = patch s, x[s*P*C : (s+1)*P*C], the positional
         embedding folded into b[s, o])
  relu   (y, -, -, -, -, p)  p = n: y = max(y, 0) in place
  attn   (q, k, v, ctx, sc, p)  p = S, E, H, D, M_sm, shift_sm, M_ctx, shift_ctx,
         EXP_HI[16], EXP_LO[16], dmax_sm; q, k, v, ctx [S*E]; sc [2S] scratch (scores, then
         e, p): one query row of scores at a time, never an S x S matrix; dmax_sm: the
         largest max - score whose softmax index is computed (larger: e = 0)
  pool   (x, y, -, -, -, p)  p = S, E, M, shift: y[e] = requant(sum_s x[s,e], M, shift)
  myquery (x, qa, qk, -, -, p)  p = n, q, dup, M_q, shift_q: MyAttn's query
         qa[c] = requant(sum_{s<n} x[s*q + c], M_q, shift_q) for c < q (n = 1: the input's
         first q values; n = S tokens: the mean token); dup: also qk[c] = qk[q + c] = qa[c]
  myattn (x, sc, qa, -, -, p)  p = v1, v2, vo, q, M_sm, shift_sm, M_ap, shift_ap,
         EXP_HI[16], EXP_LO[16], dmax_sm; scores in sc[0:v1] -> Q14 weights in sc[v1:2*v1];
         qa[q + d] = requant(sum_j w[j] x[vo + j*v2 + d], M_ap, shift_ap) (V inside x at vo)
  add    (x, y, -, -, -, p)  p = n, M_x, M_y, shift: the residual add of two int8 tensors at
         two scales, in place: y[i] = clamp((x[i] M_x + y[i] M_y + 2**(shift-1)) >> shift,
         -128, 127) (one rounding of the exact sum)
  load   (xq, x, -, -, -, p)  p = n, end: x[i] = xq[i] for i < n, 0 for n <= i < end: a seq
         model's window into its input buffer (array('b'), S*P*C), the last patch's tail zeroed
  conv   (x, y, W, b, M, p)  p = S_out, S_in, C, F, K, stride, dilation, C/groups,
         F/groups, pad, shift, act_min, act_max: a 1-D convolution over tokens
         x [S_in, C] -> y [S_out, F],
         y[t,o] = requant(b[o] + sum_{c<C/g} sum_{j<K} x[i, g(o)*C/g + c] W[o, c*K + j], M[o],
         shift, act_min, act_max), i = t*stride + j*dilation - pad, a term only for
         0 <= i < S_in (a token outside the valid ones reads 0), g(o) = o // (F/groups),
         pad = (K-1)*dilation // 2;
         the sum in the order of W's row (c, then j)
  INT8 ends with embed (dense on an int8 input buffer: here dense itself, any array will do;
  viper has its own), load and conv; FLOAT has the first seven's float versions and conv
  itself (shift 0). The rocket op's kernels live in attention_kernels_rocket.py.
float (array('f') buffers): the same shapes; dense_f (x, y, W, b, s, p) computes
y[r,o] = (sum_i x[r,i] W[o,i]) s[o] + b[r*bstride + o]: an int8 blob's W_q as stored (the
int8 program's own array) with its scales s_w, so no float copy of the weights exists, and b
dequantized (b_q s_in s_w); a float32 blob's W and b with s = 1. p = rows, n_in, n_out,
bstride (dense), n (relu), S, E, H, D (attn), S, E (pool), n, q, dup (myquery: the mean),
v1, v2, vo, q (myattn), n (add: y = x + y); conv with shift 0 is the float conv
(x, y, W, b, s, p): y[t,o] = (sum ...) s[o] + b[o], then max(., 0) when act_min is 0.

Sequence models (op 0 embed, docs/quantization.md "Masking"): every op runs on the S_n =
ceil(n/P) valid tokens only. attention.py writes S_n into the parameter arrays before the
steps run (array('i') stores of small ints allocate nothing): dense rows, relu and add n
(S_n times the row width), attn S, pool S and M (= masked_pool's m[S_n - 1]; the float pool
divides by S), conv S_out and S_in; after a conv of stride s the count is ceil(S_n/s). The
kernels themselves know nothing of padding (conv's S_in bounds its taps).

This file is the only hand-written copy of these kernels: attention_native.py is this file with
`@micropython.native` on each function (tests/test_native.py).
"""

import math


def dense(x, y, w, b, m, p):
    rows = p[0]
    n_in = p[1]
    n_out = p[2]
    shift = p[3]
    lo = p[4]
    hi = p[5]
    bstride = p[6]
    rnd = 1 << (shift - 1)
    xo = 0
    yo = 0
    bo = 0
    for _ in range(rows):
        wi = 0
        for o in range(n_out):
            acc = b[bo + o]
            for i in range(xo, xo + n_in):
                acc += x[i] * w[wi]
                wi += 1
            v = (acc * m[o] + rnd) >> shift  # round half up, arithmetic shift
            if v < lo:
                v = lo
            elif v > hi:
                v = hi
            y[yo + o] = v
        xo += n_in
        yo += n_out
        bo += bstride


def relu(y, _a, _b, _c, _d, p):
    for i in range(p[0]):
        if y[i] < 0:
            y[i] = 0


def softmax_q14(sc, n, p):
    """Integer softmax of the scores sc[0:n] into sc[n:2n], probabilities in Q14
    (docs/quantization.md): idx = requant(max - score) in steps of 1/32 (M_sm = p[4],
    shift_sm = p[5]); e = 2**14 exp(-idx/32) from EXP_HI (p[8:24]) and EXP_LO (p[24:40]), 0 past
    the table, and 0 without computing idx for a diff past dmax_sm (p[40]: idx >= 256 there);
    p = round(e * 2**14 / sum e). Shared by attn and myattn."""
    m_sm = p[4]
    sh_sm = p[5]
    dmax = p[40]
    r_sm = 1 << (sh_sm - 1)
    mx = sc[0]
    for j in range(1, n):
        if sc[j] > mx:
            mx = sc[j]
    total = 0
    for j in range(n):
        d = mx - sc[j]
        e = 0
        if d <= dmax:
            idx = (d * m_sm + r_sm) >> sh_sm
            if idx < 256:
                e = (p[8 + (idx >> 4)] * p[24 + (idx & 15)] + 8192) >> 14
        sc[n + j] = e
        total += e
    half = total >> 1
    for j in range(n, n + n):
        sc[j] = ((sc[j] << 14) + half) // total


def attn(q, k, v, ctx, sc, p):
    S = p[0]
    E = p[1]
    H = p[2]
    D = p[3]
    m_ctx = p[6]
    sh_ctx = p[7]
    r_ctx = 1 << (sh_ctx - 1)
    for h in range(H):
        c0 = h * D
        for i in range(S):
            qo = i * E + c0
            ko = c0
            for j in range(S):  # score[j] = q[i, head] . k[j, head]
                s = 0
                for c in range(D):
                    s += q[qo + c] * k[ko + c]
                sc[j] = s
                ko += E
            softmax_q14(sc, S, p)  # p[j] in Q14 at sc[S + j]
            for c in range(D):  # ctx[i, c] = requant(sum_j p[j] v[j, c])
                acc = 0
                vo = c0 + c
                for j in range(S, S + S):
                    acc += sc[j] * v[vo]
                    vo += E
                t = (acc * m_ctx + r_ctx) >> sh_ctx
                if t < -128:
                    t = -128
                elif t > 127:
                    t = 127
                ctx[qo + c] = t


def pool(x, y, _a, _b, _c, p):
    S = p[0]
    E = p[1]
    m = p[2]
    shift = p[3]
    rnd = 1 << (shift - 1)
    for c in range(E):
        acc = 0
        xi = c
        for _ in range(S):
            acc += x[xi]
            xi += E
        v = (acc * m + rnd) >> shift
        if v < -128:
            v = -128
        elif v > 127:
            v = 127
        y[c] = v


def myquery(x, qa, qk, _a, _b, p):
    n = p[0]
    q = p[1]
    dup = p[2]
    m = p[3]
    shift = p[4]
    rnd = 1 << (shift - 1)
    for c in range(q):  # Q[c] = requant(sum of column c over n rows of width q)
        acc = 0
        xi = c
        for _ in range(n):
            acc += x[xi]
            xi += q
        v = (acc * m + rnd) >> shift
        if v < -128:
            v = -128
        elif v > 127:
            v = 127
        qa[c] = v
        if dup:  # pool: K = Q, the score projection reads Q ‖ K from qk
            qk[c] = v
            qk[q + c] = v


def myattn(x, sc, qa, _a, _b, p):
    v1 = p[0]
    v2 = p[1]
    vo = p[2]
    q = p[3]
    m_ap = p[6]
    sh_ap = p[7]
    r_ap = 1 << (sh_ap - 1)
    softmax_q14(sc, v1, p)  # weights w[j] in Q14 at sc[v1 + j]
    for d in range(v2):  # applied[d] = requant(sum_j w[j] V[j, d]), after Q in qa
        acc = 0
        xi = vo + d
        for j in range(v1, v1 + v1):
            acc += sc[j] * x[xi]
            xi += v2
        t = (acc * m_ap + r_ap) >> sh_ap
        if t < -128:
            t = -128
        elif t > 127:
            t = 127
        qa[q + d] = t


def add(x, y, _a, _b, _c, p):
    n = p[0]
    m_x = p[1]
    m_y = p[2]
    shift = p[3]
    rnd = 1 << (shift - 1)
    for i in range(n):
        v = (x[i] * m_x + y[i] * m_y + rnd) >> shift
        if v < -128:
            v = -128
        elif v > 127:
            v = 127
        y[i] = v


def load(xq, x, _a, _b, _c, p):
    n = p[0]
    for i in range(n):
        x[i] = xq[i]
    for i in range(n, p[1]):
        x[i] = 0


def conv(x, y, w, b, m, p):
    S_out = p[0]
    S_in = p[1]
    C = p[2]
    F = p[3]
    K = p[4]
    st = p[5]
    dil = p[6]
    Cg = p[7]
    Fg = p[8]
    pad = p[9]
    shift = p[10]  # 0: the float path (m holds s_w, b the float bias)
    lo = p[11]
    hi = p[12]
    rnd = 1 << (shift - 1) if shift else 0
    yo = 0
    for t in range(S_out):
        i0 = t * st - pad
        wi = 0
        c0 = 0  # first input channel of output o's group
        n = 0  # outputs of this group done
        for o in range(F):
            acc = b[o] if shift else 0.0
            for c in range(c0, c0 + Cg):
                i = i0
                for _ in range(K):
                    if 0 <= i < S_in:
                        acc += x[i * C + c] * w[wi]
                    wi += 1
                    i += dil
            n += 1
            if n == Fg:
                n = 0
                c0 += Cg
            if shift:
                v = (acc * m[o] + rnd) >> shift  # round half up, arithmetic shift
                if v < lo:
                    v = lo
                elif v > hi:
                    v = hi
            else:  # float: (sum) s_w[o] + b[o], ReLU when act_min is 0
                v = acc * m[o] + b[o]
                if lo == 0 and v < 0.0:
                    v = 0.0
            y[yo + o] = v
        yo += F


def dense_f(x, y, w, b, s, p):
    rows = p[0]
    n_in = p[1]
    n_out = p[2]
    bstride = p[3]
    xo = 0
    yo = 0
    bo = 0
    for _ in range(rows):
        wi = 0
        for o in range(n_out):
            acc = 0.0
            for i in range(xo, xo + n_in):
                acc += x[i] * w[wi]
                wi += 1
            y[yo + o] = acc * s[o] + b[bo + o]
        xo += n_in
        yo += n_out
        bo += bstride


def relu_f(y, _a, _b, _c, _d, p):
    for i in range(p[0]):
        if y[i] < 0.0:
            y[i] = 0.0


def attn_f(q, k, v, ctx, sc, p):
    S = p[0]
    E = p[1]
    H = p[2]
    D = p[3]
    scale = 1.0 / math.sqrt(D)
    exp = math.exp
    for h in range(H):
        c0 = h * D
        for i in range(S):
            qo = i * E + c0
            ko = c0
            mx = 0.0
            for j in range(S):  # scaled scores, then softmax after subtracting the row max
                s = 0.0
                for c in range(D):
                    s += q[qo + c] * k[ko + c]
                s *= scale
                sc[j] = s
                s = sc[j]  # the stored (float32) value: the max must be one of them
                if j == 0 or s > mx:
                    mx = s
                ko += E
            total = 0.0
            for j in range(S):
                e = exp(sc[j] - mx)
                sc[S + j] = e
                total += e
            for j in range(S, S + S):
                sc[j] = sc[j] / total
            for c in range(D):
                acc = 0.0
                vo = c0 + c
                for j in range(S, S + S):
                    acc += sc[j] * v[vo]
                    vo += E
                ctx[qo + c] = acc


def pool_f(x, y, _a, _b, _c, p):
    S = p[0]
    E = p[1]
    for c in range(E):
        acc = 0.0
        xi = c
        for _ in range(S):
            acc += x[xi]
            xi += E
        y[c] = acc / S


def myquery_f(x, qa, qk, _a, _b, p):
    n = p[0]
    q = p[1]
    dup = p[2]
    for c in range(q):  # Q[c] = mean of column c over n rows of width q
        acc = 0.0
        xi = c
        for _ in range(n):
            acc += x[xi]
            xi += q
        v = acc / n
        qa[c] = v
        if dup:
            qk[c] = v
            qk[q + c] = v


def myattn_f(x, sc, qa, _a, _b, p):
    v1 = p[0]
    v2 = p[1]
    vo = p[2]
    q = p[3]
    exp = math.exp
    mx = sc[0]
    for j in range(1, v1):
        if sc[j] > mx:
            mx = sc[j]
    total = 0.0
    for j in range(v1):  # softmax after subtracting the max score
        e = exp(sc[j] - mx)
        sc[v1 + j] = e
        total += e
    for j in range(v1, v1 + v1):
        sc[j] = sc[j] / total
    for d in range(v2):
        acc = 0.0
        xi = vo + d
        for j in range(v1, v1 + v1):
            acc += sc[j] * x[xi]
            xi += v2
        qa[q + d] = acc


def add_f(x, y, _a, _b, _c, p):
    for i in range(p[0]):
        y[i] = x[i] + y[i]


INT8 = (dense, relu, attn, pool, myquery, myattn, add, dense, load, conv)  # 8th: embed
FLOAT = (dense_f, relu_f, attn_f, pool_f, myquery_f, myattn_f, add_f, conv)
