# Device (MicroPython only): the int8 kernels as @micropython.viper machine code.
# ruff: noqa: F821  (ptr8/ptr16/ptr32 and `int` casts are viper builtins)
"""Viper versions of the int8 kernels of attention_kernels.py: same signatures, same results
bit for bit (tests compare them on every Iris sample, on the MyAttn models and on seq-attn
windows of every length).

Viper integers are machine words: 64-bit on the unix port, 32-bit on boards, where they wrap
modulo 2**32. The exporter's small-int budget keeps every result |v| < 2**30. Typed-pointer
loads are unsigned: ptr8 gives 0..255 and, on 64-bit ports, ptr32 gives 0..2**32-1, so signed
values are restored with `(v ^ SIGN) - SIGN` (SIGN = 0x80 for bytes, the 32-bit sign bit for
words; a no-op on 32-bit ports, where the word is already signed).
`sg = one << 31` is computed at run time so the compiler does not fold it into a big-int
constant. M (array('h')) is 0..32767 and needs no fix-up.

Sums of int32 words skip the per-element fix-up: a word read unsigned is v + k*2**32, so
products and sums are right modulo 2**32 (also where a 64-bit product wraps modulo 2**64),
and as the true sum is within the budget, one `((acc & lo32) ^ sg) - sg` (lo32 = 0xFFFFFFFF;
identities on a 32-bit port) restores it exactly. Bytes (ptr8) still take theirs: v + 256 is
not v modulo 2**32. Speed: the emitter keeps only the first few locals in registers (three
on x64 and Thumb: here the first arguments; the rest live in the stack frame), so hot loops
walk typed pointers held in those argument variables (`x = ptr32(int(x) + 16)`), read with
constant offsets, four MACs per step with the rest after, and end on `int(x) != end` (an
address compared for equality: no signed/unsigned question on a 32-bit port).

Imported by attention.py when asked for (or by "auto"); on CPython, or a port without the
viper emitter, the import fails and attention.py falls back. Precompile with
`mpy-cross -march=<arch>` (x64 unix port, armv6m RP2040, xtensawin ESP32).
"""

import micropython


# dense and embed: for each output, acc = b[o] + x_row . W[o] with x and w walked by typed
# pointers (x, y, w are the first three locals, which the emitter keeps in registers: they are
# reused as the walkers), four MACs per step with constant offsets, then the n_in % 4 rest.
# W is read row after row, so w only restarts once per token row. dense reads x unsigned: the
# products and acc are right modulo 2**32 (a 64-bit port's zero-extended word is x + 2**32),
# and |acc| < 2**30 (the small-int budget), so one sign fix-up of acc restores it exactly.
@micropython.viper
def dense(x: ptr32, y: ptr32, w: ptr8, b: ptr32, m: ptr16, p: ptr32):
    one = 1
    sg = one << 31
    lo32 = sg | (sg - 1)  # 0xFFFFFFFF (-1 on a 32-bit port)
    rows = p[0]
    n_in = p[1]
    n_out = p[2]
    shift = p[3]
    lo = (p[4] ^ sg) - sg
    hi = (p[5] ^ sg) - sg
    bstep = p[6] << 2
    rnd = one << (shift - 1)
    xlen = n_in << 2  # bytes of a token row of x
    x4len = (n_in >> 2) << 4  # bytes of its whole groups of 4
    ystep = n_out << 2
    w0 = int(w)
    xrow = int(x)
    for _ in range(rows):
        w = ptr8(w0)
        for o in range(n_out):
            acc = b[o]
            x = ptr32(xrow)
            x4 = xrow + x4len
            while int(x) != x4:
                acc += (
                    x[0] * ((w[0] ^ 0x80) - 0x80)
                    + x[1] * ((w[1] ^ 0x80) - 0x80)
                    + x[2] * ((w[2] ^ 0x80) - 0x80)
                    + x[3] * ((w[3] ^ 0x80) - 0x80)
                )
                x = ptr32(int(x) + 16)
                w = ptr8(int(w) + 4)
            xend = xrow + xlen
            while int(x) != xend:
                acc += x[0] * ((w[0] ^ 0x80) - 0x80)
                x = ptr32(int(x) + 4)
                w = ptr8(int(w) + 1)
            acc = ((acc & lo32) ^ sg) - sg
            v = (acc * m[o] + rnd) >> shift
            if v < lo:
                v = lo
            elif v > hi:
                v = hi
            y[o] = v
        xrow += xlen
        y = ptr32(int(y) + ystep)
        b = ptr32(int(b) + bstep)


@micropython.viper
def embed(x: ptr8, y: ptr32, w: ptr8, b: ptr32, m: ptr16, p: ptr32):
    # dense over an int8 input buffer (a seq model's window, array('b')): x is a byte, so it
    # takes its own sign fix-up (x + 256 is not x modulo 2**32)
    one = 1
    sg = one << 31
    rows = p[0]
    n_in = p[1]
    n_out = p[2]
    shift = p[3]
    lo = (p[4] ^ sg) - sg
    hi = (p[5] ^ sg) - sg
    bstep = p[6] << 2
    rnd = one << (shift - 1)
    x4len = (n_in >> 2) << 2
    ystep = n_out << 2
    w0 = int(w)
    xrow = int(x)
    for _ in range(rows):
        w = ptr8(w0)
        for o in range(n_out):
            acc = (b[o] ^ sg) - sg
            x = ptr8(xrow)
            x4 = xrow + x4len
            while int(x) != x4:
                acc += (
                    ((x[0] ^ 0x80) - 0x80) * ((w[0] ^ 0x80) - 0x80)
                    + ((x[1] ^ 0x80) - 0x80) * ((w[1] ^ 0x80) - 0x80)
                    + ((x[2] ^ 0x80) - 0x80) * ((w[2] ^ 0x80) - 0x80)
                    + ((x[3] ^ 0x80) - 0x80) * ((w[3] ^ 0x80) - 0x80)
                )
                x = ptr8(int(x) + 4)
                w = ptr8(int(w) + 4)
            xend = xrow + n_in
            while int(x) != xend:
                acc += ((x[0] ^ 0x80) - 0x80) * ((w[0] ^ 0x80) - 0x80)
                x = ptr8(int(x) + 1)
                w = ptr8(int(w) + 1)
            v = (acc * m[o] + rnd) >> shift
            if v < lo:
                v = lo
            elif v > hi:
                v = hi
            y[o] = v
        xrow += n_in
        y = ptr32(int(y) + ystep)
        b = ptr32(int(b) + bstep)


@micropython.viper
def load(xq: ptr8, x: ptr8, _a, _b, _c, p: ptr32):
    n = p[0]
    for i in range(n):
        x[i] = xq[i]
    for i in range(n, p[1]):
        x[i] = 0


@micropython.viper
def relu(y: ptr32, _a, _b, _c, _d, p: ptr32):
    one = 1
    sg = one << 31
    for i in range(p[0]):
        if (y[i] ^ sg) - sg < 0:
            y[i] = 0


@micropython.viper
def attn(q: ptr32, k: ptr32, v: ptr32, ctx: ptr32, sc: ptr32, p: ptr32):
    # q, k, v (the register locals) are reused as walkers: q and k along a head's rows for the
    # scores, q over the probabilities and v down a head's columns for ctx. Sums are taken
    # modulo 2**32 and sign-fixed once, as dense's acc (ctx's in place in its output row).
    one = 1
    sg = one << 31
    lo32 = sg | (sg - 1)
    S = p[0]
    E = p[1]
    H = p[2]
    D = p[3]
    m_sm = p[4]
    sh_sm = p[5]
    m_ctx = p[6]
    sh_ctx = p[7]
    dmax = p[40]
    r_sm = one << (sh_sm - 1)
    r_ctx = one << (sh_ctx - 1)
    row = E << 2  # bytes of a token row of q, k, v, ctx
    dlen = D << 2  # bytes of a head's part of a row
    d4len = (D >> 2) << 4  # of its whole groups of 4
    qb = int(q)
    kb = int(k)
    vb = int(v)
    cb = int(ctx)
    pb = int(sc) + (S << 2)  # the probabilities, sc[S:2S]
    pend = pb + (S << 2)
    lut = ptr32(int(p) + 32)  # EXP_HI, EXP_LO: p[8:24], p[24:40]
    for h in range(H):
        c0 = h * dlen
        for i in range(S):
            qrow = qb + i * row + c0
            k = ptr32(kb + c0)
            mx = 0
            for j in range(S):  # sc[j] = q[i, head] . k[j, head]
                q = ptr32(qrow)
                q4 = qrow + d4len
                s = 0
                while int(q) != q4:
                    s += q[0] * k[0] + q[1] * k[1] + q[2] * k[2] + q[3] * k[3]
                    q = ptr32(int(q) + 16)
                    k = ptr32(int(k) + 16)
                qend = qrow + dlen
                while int(q) != qend:
                    s += q[0] * k[0]
                    q = ptr32(int(q) + 4)
                    k = ptr32(int(k) + 4)
                s = ((s & lo32) ^ sg) - sg
                sc[j] = s
                if j == 0 or s > mx:
                    mx = s
                k = ptr32(int(k) + row - dlen)  # k[j + 1, head]
            total = 0  # softmax_q14: sc[S + j], the Q14 probability of score j
            q = ptr32(pb)
            for j in range(S):
                d = mx - ((sc[j] ^ sg) - sg)
                e = 0
                if d <= dmax:  # past dmax_sm idx >= 256: e = 0, no product (pure's order)
                    idx = (d * m_sm + r_sm) >> sh_sm
                    if idx < 256:
                        e = (lut[idx >> 4] * lut[16 + (idx & 15)] + 8192) >> 14
                q[j] = e
                total += e
            half = total >> 1
            for j in range(S):
                q[j] = ((q[j] << 14) + half) // total
            # ctx[i, c] = requant(sum_j p[j] v[j, c]): the sums of 4 columns at a time (one
            # probability load per 4 MACs), then the D % 4 others, into ctx's row
            ctx = ptr32(cb + qrow - qb)
            col = vb + c0
            col4 = col + d4len
            while col != col4:
                a0 = 0
                a1 = 0
                a2 = 0
                a3 = 0
                v = ptr32(col)
                q = ptr32(pb)
                while int(q) != pend:
                    pj = q[0]
                    a0 += pj * v[0]
                    a1 += pj * v[1]
                    a2 += pj * v[2]
                    a3 += pj * v[3]
                    v = ptr32(int(v) + row)
                    q = ptr32(int(q) + 4)
                ctx[0] = a0
                ctx[1] = a1
                ctx[2] = a2
                ctx[3] = a3
                ctx = ptr32(int(ctx) + 16)
                col += 16
            while col != vb + c0 + dlen:
                a0 = 0
                v = ptr32(col)
                q = ptr32(pb)
                while int(q) != pend:
                    a0 += q[0] * v[0]
                    v = ptr32(int(v) + row)
                    q = ptr32(int(q) + 4)
                ctx[0] = a0
                ctx = ptr32(int(ctx) + 4)
                col += 4
            ctx = ptr32(cb + qrow - qb)
            for c in range(D):
                t = (((ctx[c] ^ sg) - sg) * m_ctx + r_ctx) >> sh_ctx
                if t < -128:
                    t = -128
                elif t > 127:
                    t = 127
                ctx[c] = t


@micropython.viper
def pool(x: ptr32, y: ptr32, _a, _b, _c, p: ptr32):
    # column c summed down the S tokens by pointer (stride E), modulo 2**32, sign-fixed once
    one = 1
    sg = one << 31
    lo32 = sg | (sg - 1)
    S = p[0]
    E = p[1]
    m = p[2]
    shift = p[3]
    rnd = one << (shift - 1)
    row = E << 2
    col = int(x)
    for c in range(E):
        acc = 0
        x = ptr32(col)
        for _ in range(S):
            acc += x[0]
            x = ptr32(int(x) + row)
        acc = ((acc & lo32) ^ sg) - sg
        v = (acc * m + rnd) >> shift
        if v < -128:
            v = -128
        elif v > 127:
            v = 127
        y[c] = v
        col += 4


@micropython.viper
def myquery(x: ptr32, qa: ptr32, qk: ptr32, _a, _b, p: ptr32):
    one = 1
    sg = one << 31
    n = p[0]
    q = p[1]
    dup = p[2]
    m = p[3]
    shift = p[4]
    rnd = one << (shift - 1)
    for c in range(q):
        acc = 0
        xi = c
        for _ in range(n):
            acc += (x[xi] ^ sg) - sg
            xi += q
        v = (acc * m + rnd) >> shift
        if v < -128:
            v = -128
        elif v > 127:
            v = 127
        qa[c] = v
        if dup:
            qk[c] = v
            qk[q + c] = v


@micropython.viper
def myattn(x: ptr32, sc: ptr32, qa: ptr32, _a, _b, p: ptr32):
    one = 1
    sg = one << 31
    v1 = p[0]
    v2 = p[1]
    vo = p[2]
    q = p[3]
    m_sm = p[4]
    sh_sm = p[5]
    m_ap = p[6]
    sh_ap = p[7]
    r_sm = one << (sh_sm - 1)
    r_ap = one << (sh_ap - 1)
    mx = (sc[0] ^ sg) - sg
    for j in range(1, v1):
        s = (sc[j] ^ sg) - sg
        if s > mx:
            mx = s
    total = 0
    dmax = p[40]
    for j in range(v1):
        d = mx - ((sc[j] ^ sg) - sg)
        e = 0
        if d <= dmax:  # past dmax_sm idx >= 256: e = 0, no product
            idx = (d * m_sm + r_sm) >> sh_sm
            if idx < 256:
                e = (p[8 + (idx >> 4)] * p[24 + (idx & 15)] + 8192) >> 14
        sc[v1 + j] = e
        total += e
    half = total >> 1
    for j in range(v1, v1 + v1):
        sc[j] = ((sc[j] << 14) + half) // total
    for d in range(v2):
        acc = 0
        xi = vo + d
        for j in range(v1, v1 + v1):
            acc += sc[j] * ((x[xi] ^ sg) - sg)
            xi += v2
        t = (acc * m_ap + r_ap) >> sh_ap
        if t < -128:
            t = -128
        elif t > 127:
            t = 127
        qa[q + d] = t


@micropython.viper
def add(x: ptr32, y: ptr32, _a, _b, _c, p: ptr32):
    # x and y walked by pointer; x*M_x + y*M_y modulo 2**32, sign-fixed once
    one = 1
    sg = one << 31
    lo32 = sg | (sg - 1)
    m_x = p[1]
    m_y = p[2]
    shift = p[3]
    rnd = one << (shift - 1)
    xend = int(x) + (p[0] << 2)
    while int(x) != xend:
        v = ((((x[0] * m_x + y[0] * m_y) & lo32) ^ sg) - sg + rnd) >> shift
        if v < -128:
            v = -128
        elif v > 127:
            v = 127
        y[0] = v
        x = ptr32(int(x) + 4)
        y = ptr32(int(y) + 4)


# conv: taps outside 0..S_in-1 skipped (a token outside the valid ones reads 0); the sum in
# W's row order, as the pure kernel; x read unsigned, one sign fix-up of acc (as dense)
@micropython.viper
def conv(x: ptr32, y: ptr32, w: ptr8, b: ptr32, m: ptr16, p: ptr32):
    one = 1
    sg = one << 31
    lo32 = sg | (sg - 1)
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
    shift = p[10]
    lo = (p[11] ^ sg) - sg
    hi = (p[12] ^ sg) - sg
    rnd = one << (shift - 1)
    yo = 0
    for t in range(S_out):
        i0 = t * st - pad
        wi = 0
        c0 = 0  # first input channel of output o's group
        n = 0  # outputs of this group done
        for o in range(F):
            acc = b[o]
            for c in range(c0, c0 + Cg):
                i = i0
                for _ in range(K):
                    if i >= 0 and i < S_in:
                        acc += x[i * C + c] * ((w[wi] ^ 0x80) - 0x80)
                    wi += 1
                    i += dil
            n += 1
            if n == Fg:
                n = 0
                c0 += Cg
            acc = ((acc & lo32) ^ sg) - sg
            v = (acc * m[o] + rnd) >> shift
            if v < lo:
                v = lo
            elif v > hi:
                v = hi
            y[yo + o] = v
        yo += F


INT8 = (dense, relu, attn, pool, myquery, myattn, add, embed, load, conv)
