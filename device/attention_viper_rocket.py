# Device (MicroPython only): the rocket op's int8 kernels as @micropython.viper machine code.
# ruff: noqa: F821  (ptr32 and `int` casts are viper builtins)
"""Viper versions of attention_kernels_rocket.py's copy (the int32 window's load,
attention_build_rocket's choice beside a compiled kernel set), rocket_in and rocket, the int8
path only (the float program runs the pure ones): same signatures, same results bit for bit
(the tests compare them on windows of every length, pooled and capped, with attention_viper's sign
rules: a word read through ptr32 is restored with `(v ^ sg) - sg`, sg = 2**31, a no-op on a
32-bit port). Every intermediate stays within 2**30 (docs/quantization.md "rocket": the
convolution bound, the saturated thresholds, the PPV numerator), so 32-bit words hold it.

Imported by attention_build_rocket for a rocket model whose int8 kernel set is compiled
(viper, native; thumb takes rocket_in here and rocket from attention_thumb_rocket); on a port
without the viper emitter the import fails and the pure kernels run.
"""

import micropython


@micropython.viper
def load(xq: ptr32, x: ptr32, _a, _b, _c, p: ptr32):
    n = int(p[0])
    for i in range(n):
        x[i] = xq[i]
    for i in range(n, int(p[1])):
        x[i] = 0


@micropython.viper
def rocket_in(x: ptr32, xp: ptr32, _s, _a, _b, p: ptr32):
    one = 1
    sg = one << 31
    n = int(p[0])
    C = int(p[2])
    P = int(p[3])
    top = 0
    for i in range(n * P * C):  # the block exponent: the largest |x| of the window
        v = (int(x[i]) ^ sg) - sg
        if v < 0:
            v = 0 - v
        if v > top:
            top = v
    e = 0
    while (top >> e) >= 32768:
        e += 1
    p[8] = e
    r = (one << e) >> 1
    o = int(p[4]) * C  # pooled step t of channel c at xp[(M0 + t)·C + c]
    i = 0
    for _t in range(n):
        for c in range(C):
            acc = 0
            j = i + c
            for _k in range(P):
                acc += (((int(x[j]) ^ sg) - sg) + r) >> e
                j += C
            xp[o + c] = acc
        i += P * C
        o += C
    for k in range(o, (int(p[4]) + int(p[1])) * C):  # the steps past the window read 0
        xp[k] = 0


@micropython.viper
def rocket(xp: ptr32, y: ptr32, tab: ptr32, ft: ptr32, A: ptr32, p: ptr32):
    one = 1
    sg = one << 31
    n = int(p[0])
    C = int(p[2])
    M0 = int(p[4])
    shift = int(p[7])
    e = int(p[8])
    cap = int(p[12])
    s = 1  # the positions' step (at most `cap` positions)
    if cap > 0 and n > 0:
        s = (n + cap - 1) // cap
    rnd = one << (shift - 1)
    sat = 1073741823  # 2**30 - 1: past every convolution
    th = int(p[1]) * C  # the group's thresholds, after the shared sums
    ti = 0
    f0 = 0
    dn = 0
    for _g in range(int(p[5])):
        d = int(tab[ti])
        nch = int(tab[ti + 5])
        nf = int(tab[ti + 6])
        dC = d * C
        o0 = (int(tab[ti + 2]) - 4) * dC
        o1 = (int(tab[ti + 3]) - 4) * dC
        o2 = (int(tab[ti + 4]) - 4) * dC
        if d != dn:  # a new dilation: the shared sum of every channel
            dn = d
            t = 0
            while t < n:
                for c in range(C):
                    i = (M0 + t - 4 * d) * C + c
                    v = 0
                    for _j in range(9):
                        v -= (int(xp[i]) ^ sg) - sg
                        i += dC
                    A[t * C + c] = v
                t += s
        sh = int(tab[ti + 7]) - e  # the biases' exponent in this window's units
        for j in range(nf):
            b = (int(ft[3 * (f0 + j)]) ^ sg) - sg
            if sh <= 0:
                b = b >> (0 - sh)
            elif (0 - (sat >> sh)) <= b and b <= (sat >> sh):
                b = b << sh
            elif b > 0:
                b = sat
            else:
                b = 0 - sat
            A[th + j] = b
            y[f0 + j] = 0
        lo = 4 * d
        if int(tab[ti + 1]):
            lo = 0
        t0 = (lo + s - 1) // s * s  # the first counted position
        ch = ti + 8
        t = t0
        while t < n - lo:
            base = (M0 + t) * C
            v = 0
            for q in range(ch, ch + nch):
                c = int(tab[q])
                i = base + c
                g = ((int(xp[i + o0]) ^ sg) - sg) + ((int(xp[i + o1]) ^ sg) - sg)
                g += (int(xp[i + o2]) ^ sg) - sg
                v += 3 * g + ((int(A[t * C + c]) ^ sg) - sg)
            for j in range(nf):
                if v > ((int(A[th + j]) ^ sg) - sg):
                    y[f0 + j] = int(y[f0 + j]) + 1
            t += s
        npos = 0
        if n - lo > t0:
            npos = (n - lo - t0 + s - 1) // s
        for f in range(f0, f0 + nf):
            z = (int(ft[3 * f + 1]) ^ sg) - sg
            M = (int(ft[3 * f + 2]) ^ sg) - sg
            q = 0
            if npos > 0:
                q = (int(y[f]) << 15) // npos
            v = ((q - z) * M + rnd) >> shift
            if v < -128:
                v = -128
            elif v > 127:
                v = 127
            y[f] = v
        ti = ch + nch
        f0 += nf
