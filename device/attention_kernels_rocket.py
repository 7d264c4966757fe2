# Device (MicroPython; also runs unchanged under CPython): the rocket op's kernels (opcode 12).
"""The kernels of a rocket model (op 0 rocket: MiniRocket's transform, docs/quantization.md
"rocket"), steps `kernel(a, b, c, d, e, p)` as in attention_kernels.py. A module of its own,
imported only by a rocket model (attention_build_rocket, attention.Model for its window load),
so every other model's runtime stays as small as it was. They are the reference: the pure set
and every float program run them; the compiled sets run attention_viper_rocket's int8 ones
(and the thumb set attention_thumb_rocket's rocket).

int8 and float (the float flag p[11] set, buffers array('f')) share the code:
rocket_in (x, xp, s, -, -, p)  p as rocket's (below): the window x (n'·P·C values: the
       load zeroed the tail of the last pooled step) onto MiniRocket's pooled grid xp:
       the block exponent e (p[8]), the smallest e >= 0 with every |x| < 2**(15+e);
       xp[(M0 + t)·C + c] = sum_{k<P} (x[(tP + k)·C + c] + 2**e // 2) >> e for t < n',
       0 for n' <= t < S (xp's margins of M0 steps are never written: they stay 0);
       s None (int8: x is the int32 window) or array('f', [s_in]) (float: x is the
       normalized float window, each value first put on the grid, docs/quantization.md
       input equation, floor(u) + 1 if u - floor(u) >= 1/2, u = x / s_in, clamped to
       [lo, hi])
rocket (xp, y, tab, ft, A, p)  p = n', S, C, P, M0, G, K, shift, e, lo, hi, float flag,
       N; tab: per group d, pad, i0, i1, i2, nch, nf, eb, then its nch channels; ft: per
       feature b, z, M; A [S·C + max nf] scratch: per dilation the shared sum
       A[t·C + c] = -sum_{j<9} xp[(M0 + t + (j-4)d)·C + c] (t < n', t % s = 0), after it
       the group's thresholds thr = b << (eb - e) (saturated at +-(2**30 - 1)) or
       b >> (e - eb); the step s = ceil(n'/N) (1 when N = 0 or n' = 0); per group and
       position t, t % s = 0 (t < n' for pad 1, 4d <= t < n' - 4d for pad 0)
       conv = sum_{c in combo} 3·(xp[i + (i0-4)dC] + xp[i + (i1-4)dC] + xp[i + (i2-4)dC])
       + A[t·C + c], i = (M0 + t)·C + c, and y[f] counts conv > thr[f]; then, npos the
       positions counted, q = (count << 15) // npos (0 when npos = 0) and
       y[f] = clamp(((q - z) M + 2**(shift-1)) >> shift, -128, 127); float: y[f] =
       (count·2**15/npos - z)·M / 2**shift (docs/quantization.md "rocket")
copy  (xq, x, -, -, -, p)  p = n, end: the window load of an int32 input grid (the
       attention_kernels load; attention_viper's and attention_thumb's are typed for int8
       windows, attention_viper_rocket's and attention_thumb_rocket's for int32 ones): x[i] =
       xq[i] for i < n, 0 for n <= i < end. `load` (below) is the one attention.py takes.
"""

import math


def copy(xq, x, _a, _b, _c, p):
    n = p[0]
    for i in range(n):
        x[i] = xq[i]
    for i in range(n, p[1]):
        x[i] = 0


# the load attention.py takes for a rocket model's int32 window: attention_build_rocket points
# it at the one beside the int8 kernels it chose (this copy beside the pure set, a compiled
# module's beside a compiled set) as it builds the model, which takes it right after
load = copy


def _grid(f, s, lo, hi):
    """A normalized float on the input grid: floor(u) + 1 if u - floor(u) >= 1/2, u = f / s,
    clamped to [lo, hi] (exact in any float precision when s is a power of two)."""
    u = f / s
    if lo <= u < hi:
        q = math.floor(u)
        return q + 1 if u - q >= 0.5 else q
    return hi if u >= hi else lo


def rocket_in(x, xp, s, _a, _b, p):
    n = p[0]
    C = p[2]
    P = p[3]
    lo = p[9]
    hi = p[10]
    m = n * P * C
    top = 0
    for i in range(m):  # the block exponent: the largest |x| of the window
        v = x[i] if s is None else _grid(x[i], s[0], lo, hi)
        if v < 0:
            v = -v
        if v > top:
            top = v
    e = 0
    while top >> e >= 32768:
        e += 1
    p[8] = e
    r = (1 << e) >> 1
    o = p[4] * C  # pooled step t of channel c at xp[(M0 + t)·C + c]
    i = 0
    for _ in range(n):
        for c in range(C):
            acc = 0
            j = i + c
            for _ in range(P):
                v = x[j] if s is None else _grid(x[j], s[0], lo, hi)
                acc += (v + r) >> e
                j += C
            xp[o + c] = acc
        i += P * C
        o += C
    for k in range(o, (p[4] + p[1]) * C):  # the steps past the window read 0
        xp[k] = 0


def rocket(xp, y, tab, ft, A, p):
    n = p[0]
    C = p[2]
    M0 = p[4]
    shift = p[7]
    e = p[8]
    fl = p[11]
    s = (n + p[12] - 1) // p[12] if p[12] and n else 1  # the positions' step (at most N)
    rnd = 1 << (shift - 1)
    sat = 1073741823  # 2**30 - 1: past every convolution
    th = p[1] * C  # the group's thresholds, after the shared sums
    ti = 0
    f0 = 0
    dn = 0
    for _ in range(p[5]):
        d = tab[ti]
        nch = tab[ti + 5]
        nf = tab[ti + 6]
        dC = d * C
        o0 = (tab[ti + 2] - 4) * dC
        o1 = (tab[ti + 3] - 4) * dC
        o2 = (tab[ti + 4] - 4) * dC
        if d != dn:  # a new dilation: the shared sum of every channel
            dn = d
            t = 0
            while t < n:  # (a while: a range with a variable step is an object)
                for c in range(C):
                    i = (M0 + t - 4 * d) * C + c
                    v = 0
                    for _ in range(9):
                        v -= xp[i]
                        i += dC
                    A[t * C + c] = v
                t += s
        sh = tab[ti + 7] - e  # the biases' exponent in this window's units
        for j in range(nf):
            b = ft[3 * (f0 + j)]
            if sh <= 0:
                b >>= -sh
            elif -(sat >> sh) <= b <= sat >> sh:
                b <<= sh
            else:
                b = sat if b > 0 else -sat
            A[th + j] = b
            y[f0 + j] = 0
        lo = 0 if tab[ti + 1] else 4 * d
        t0 = (lo + s - 1) // s * s  # the first counted position
        ch = ti + 8
        t = t0
        while t < n - lo:
            base = (M0 + t) * C
            v = 0
            for q in range(ch, ch + nch):
                c = tab[q]
                i = base + c
                v += 3 * (xp[i + o0] + xp[i + o1] + xp[i + o2]) + A[t * C + c]
            for j in range(nf):
                if v > A[th + j]:
                    y[f0 + j] += 1
            t += s
        npos = (n - lo - t0 + s - 1) // s if n - lo > t0 else 0
        for f in range(f0, f0 + nf):
            z = ft[3 * f + 1]
            M = ft[3 * f + 2]
            if fl:  # float: the PPV in Q15, unrounded
                q = y[f] * 32768.0 / npos if npos > 0 else 0.0
                y[f] = (q - z) * M / (1 << shift)
                continue
            q = (y[f] << 15) // npos if npos > 0 else 0
            v = ((q - z) * M + rnd) >> shift
            if v < -128:
                v = -128
            elif v > 127:
                v = 127
            y[f] = v
        ti = ch + nch
        f0 += nf
