# Device (MicroPython only): the pure kernels compiled to machine code (@micropython.native).
"""A verbatim copy of attention_kernels.py with `@micropython.native` on every kernel: same
results, less interpreter overhead. Imported by attention.py only when asked for (or by
"auto"); on CPython, or a port without the native emitter, the import fails and attention.py
falls back. Edit attention_kernels.py first, then copy: tests/test_device_cpython.py checks
that the two files differ only in these decorators.
"""

import math

import micropython


@micropython.native
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


@micropython.native
def relu(y, _a, _b, _c, _d, p):
    for i in range(p[0]):
        if y[i] < 0:
            y[i] = 0


@micropython.native
def softmax_q14(sc, n, p):
    """Integer softmax of the scores sc[0:n] into sc[n:2n], probabilities in Q14
    (docs/quantization.md): idx = requant(max - score) in steps of 1/32 (M_sm = p[4],
    shift_sm = p[5]); e = 2**14 exp(-idx/32) from EXP_HI (p[8:24]) and EXP_LO (p[24:40]), 0 past
    the table; p = round(e * 2**14 / sum e). Shared by attn and myattn."""
    m_sm = p[4]
    sh_sm = p[5]
    r_sm = 1 << (sh_sm - 1)
    mx = sc[0]
    for j in range(1, n):
        if sc[j] > mx:
            mx = sc[j]
    total = 0
    for j in range(n):
        idx = ((mx - sc[j]) * m_sm + r_sm) >> sh_sm
        e = 0
        if idx < 256:
            e = (p[8 + (idx >> 4)] * p[24 + (idx & 15)] + 8192) >> 14
        sc[n + j] = e
        total += e
    half = total >> 1
    for j in range(n, n + n):
        sc[j] = ((sc[j] << 14) + half) // total


@micropython.native
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


@micropython.native
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


@micropython.native
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


@micropython.native
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


@micropython.native
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


@micropython.native
def load(xq, x, _a, _b, _c, p):
    n = p[0]
    for i in range(n):
        x[i] = xq[i]
    for i in range(n, p[1]):
        x[i] = 0


@micropython.native
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


@micropython.native
def relu_f(y, _a, _b, _c, _d, p):
    for i in range(p[0]):
        if y[i] < 0.0:
            y[i] = 0.0


@micropython.native
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


@micropython.native
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


@micropython.native
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


@micropython.native
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


@micropython.native
def add_f(x, y, _a, _b, _c, p):
    for i in range(p[0]):
        y[i] = x[i] + y[i]


INT8 = (dense, relu, attn, pool, myquery, myattn, add, dense, load)  # 8th: embed
FLOAT = (dense_f, relu_f, attn_f, pool_f, myquery_f, myattn_f, add_f)
