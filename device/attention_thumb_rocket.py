# Device (MicroPython on ARM only: Cortex-M0+/M3/M4/M7): the rocket op's hot loops in Thumb.
# ruff: noqa: F821  (r0..r11, label, data, ptr32 and the mnemonics are MicroPython builtins)
"""The rocket kernels of attention_kernels_rocket.py (op 0 rocket, docs/quantization.md
"rocket"), rocket_in and rocket, with their hot loops in Thumb assembler
(`@micropython.asm_thumb`): the window's scan and pooling, the shared sums and the
proportion-of-positive-values counts. Same results bit for bit (tests compare it with
the pure kernel on the emulated Pico and Cortex-M3: tests/test_emulated_pico.py,
tests/test_emulated_cortex_m3.py). The int8 path only (the float program runs the pure
kernels).

`rocket(xp, y, tab, ft, A, p)` (viper) takes the arguments of the pure kernel and:
1. writes every feature's threshold into y[f] (the bias mantissa b in this window's units,
   thr = b << (eb - e) saturated at +-(2**30 - 1), or b >> (e - eb));
2. fills _Q (below) and makes one call to `_groups`, which walks every group as the pure
   kernel does: at a new dilation d the shared sums A[t·C + c] = -sum_{j<9}
   xp[(M0 + t + (j-4)d)·C + c] (t < n', t % s = 0); the group's thresholds copied from y into
   A[S·C ..] and its counts zeroed; then per counted position t (t % s = 0, t0 <= t < n' - lo,
   lo = 0 for pad 1, 4d for pad 0; t0 the first multiple of s >= lo)
   conv = sum_{c in combo} 3·(xp[i + (i0-4)dC] + xp[i + (i1-4)dC] + xp[i + (i2-4)dC])
   + A[t·C + c], i = (M0 + t)·C + c, and y[f] += 1 for each feature whose threshold conv
   passes (signed: conv > thr);
3. turns each count into its feature as the pure kernel (the division by npos stays here).
`load(xq, x, -, -, -, p)` (viper): the int32 window's load, x[i] = xq[i] for i < p[0], 0
up to p[1] (attention_kernels_rocket.copy).
`rocket_in(x, xp, -, -, -, p)` (viper): the block exponent e of the window (the scan of
max |x| in `_top`), then `_pool`: xp[(M0 + t)·C + c] = sum_{k<P} (x[(tP + k)·C + c] +
2**e // 2) >> e (arithmetic shift) for t < n', and zeros for n' <= t < S.
Every intermediate stays within 2**30 (docs/quantization.md "rocket"), so 32-bit words and
signed compares hold it. Thumb-1 only (the ARMv6-M subset), as attention_thumb.py: `ldr` with
a register offset, `cmp` with a high register and the saves of r8..r11 are `data(2, …)`.

Imported by attention_build_rocket for the thumb kernel set on a Thumb port; where it cannot
import (no inline assembler, another arch), the viper kernels run.
"""

import array

import micropython

# _pool's parameters (byte offsets): 0 n', 4 4C (bytes of a step of x and of xp), 8 P, 12 the
# rounding 2**e // 2, 16 e, 20 4(P-1)C, 24 the end of xp's n' pooled steps; 28..36 saved
# r8..r10.
_W = array.array("i", [0] * 10)


# The block exponent's scan: r0 x, r1 its m values; returns max |x| (r2 the max so far).
@micropython.asm_thumb
def _top(r0, r1):
    lsl(r1, r1, 2)
    add(r1, r1, r0)  # x's end
    mov(r2, 0)
    cmp(r0, r1)
    bcs(TOPD)
    label(TOPL)
    ldr(r3, [r0, 0])
    add(r0, 4)
    cmp(r3, 0)
    bge(TOPP)
    neg(r3, r3)
    label(TOPP)
    cmp(r3, r2)
    ble(TOPS)
    mov(r2, r3)
    label(TOPS)
    cmp(r0, r1)
    bcc(TOPL)
    label(TOPD)
    mov(r0, r2)


# The pooling: r0 x's step t, channel c, r1 xp's (M0 + t)·C + c, r2 _W; xp[..] = sum_{k<P}
# (x[(tP + k)·C + c] + r) >> e: r3 e, r4 x's walker, r5 the sum, r6 the steps left of the
# pool, r7 a value; r8 the end of xp's row t, r9 r, r10 4C.
@micropython.asm_thumb
def _pool(r0, r1, r2):
    mov(r4, r8)
    str(r4, [r2, 28])
    mov(r4, r9)
    str(r4, [r2, 32])
    mov(r4, r10)
    str(r4, [r2, 36])
    ldr(r3, [r2, 16])  # e
    ldr(r4, [r2, 12])
    mov(r9, r4)  # r
    ldr(r4, [r2, 4])
    mov(r10, r4)  # 4C
    ldr(r4, [r2, 24])
    cmp(r1, r4)
    bcs(PEND)  # n' = 0
    label(PROW)
    mov(r4, r10)
    add(r4, r4, r1)
    mov(r8, r4)  # the end of xp's row
    label(PCH)
    mov(r4, r0)
    mov(r5, 0)
    ldr(r6, [r2, 8])  # P
    label(PK)
    ldr(r7, [r4, 0])
    data(2, 0x444F)  # add r7, r9: + r
    asr(r7, r3)
    add(r5, r5, r7)
    data(2, 0x4454)  # add r4, r10: the next step of the pool
    sub(r6, 1)
    bne(PK)
    str(r5, [r1, 0])
    add(r1, 4)
    add(r0, 4)
    data(2, 0x4541)  # cmp r1, r8
    bcc(PCH)
    ldr(r4, [r2, 20])
    add(r0, r0, r4)  # x's step t + 1 (past the pool's other P - 1 steps)
    ldr(r4, [r2, 24])
    cmp(r1, r4)
    bcc(PROW)
    label(PEND)
    ldr(r4, [r2, 28])
    mov(r8, r4)
    ldr(r4, [r2, 32])
    mov(r9, r4)
    ldr(r4, [r2, 36])
    mov(r10, r4)


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
    n = int(p[0])
    C = int(p[2])
    P = int(p[3])
    top = int(_top(x, n * P * C))  # the block exponent: the largest |x| of the window
    e = 0
    while (top >> e) >= 32768:
        e += 1
    p[8] = e
    w = ptr32(_W)
    w[0] = n
    w[1] = 4 * C
    w[2] = P
    w[3] = (one << e) >> 1
    w[4] = e
    w[5] = 4 * (P - 1) * C
    o = int(p[4]) * C  # pooled step t of channel c at xp[(M0 + t)·C + c]
    w[6] = int(xp) + 4 * (o + n * C)
    _pool(x, int(xp) + 4 * o, _W)
    for k in range(o + n * C, (int(p[4]) + int(p[1])) * C):  # the steps past the window read 0
        xp[k] = 0


# _groups's parameters and state (byte offsets): 0 the address of xp's pooled step 0 (past
# the M0 margin steps), 4 y's walker (the group's first feature), 8 tab's walker (the group's
# row), 12 A, 16 n', 20 4C (bytes of a step), 24 s, 28 groups left, 32 the dilation of the sums
# in A (0: none yet), 36 A's thresholds (A + 4 S C), 40 4sC (bytes between counted
# positions), 44 4(s-1)C, 48 the thresholds' end, 52 the positions' end (A + 4(n' - lo)C),
# 56..68 saved r8..r11.
_Q = array.array("i", [0] * 18)


# r0 = _Q. The sums (per new dilation d): r1 t, r3 4dC (a tap's bytes), r5 K = (xp's tap 0
# of (t, c)) - (A's (t, c)), constant for a dilation, r6 A's (t, c), r8 the end of A's row t,
# r0 the sum, r2 a tap, r4 the tap walker. The counts (per group): r8..r10 the three taps'
# byte offsets from A's (t, c) to xp's taps (the (i_k - 4)·4dC of the tap plus the constant
# xp - A of a position), r11 the end of the group's channels; r1 A's (t, 0), r0 conv, r5 the
# channel walker, then the thresholds' walker, r6 the counts' walker, r2..r4 scratch.
@micropython.asm_thumb
def _groups(r0):
    mov(r7, r0)
    mov(r4, r8)
    str(r4, [r7, 56])
    mov(r4, r9)
    str(r4, [r7, 60])
    mov(r4, r10)
    str(r4, [r7, 64])
    mov(r4, r11)
    str(r4, [r7, 68])

    label(GRP)  # the next group, while groups are left
    ldr(r4, [r7, 28])
    cmp(r4, 0)
    bne(G1)
    b(DONE)
    label(G1)
    sub(r4, 1)
    str(r4, [r7, 28])
    ldr(r6, [r7, 8])
    ldr(r1, [r6, 0])  # d
    ldr(r4, [r7, 32])
    cmp(r1, r4)
    bne(SUMS)
    b(THR)

    label(SUMS)  # a new dilation: A[t·C + c] = -sum_j xp[(M0 + t + (j-4)d)·C + c]
    str(r1, [r7, 32])
    ldr(r3, [r7, 20])
    mul(r3, r1)  # 4dC
    ldr(r5, [r7, 0])
    lsl(r4, r3, 2)
    sub(r5, r5, r4)  # xp's tap 0 of (0, 0)
    ldr(r6, [r7, 12])  # A's (0, 0)
    sub(r5, r5, r6)  # K
    mov(r1, 0)  # t
    ldr(r4, [r7, 16])
    cmp(r1, r4)
    bge(THR)  # n' = 0: no positions
    label(SROW)  # position t: its row of C sums
    ldr(r4, [r7, 20])
    add(r4, r4, r6)
    mov(r8, r4)  # the row's end
    label(SCH)
    add(r4, r6, r5)
    ldr(r0, [r4, 0])
    add(r4, r4, r3)
    ldr(r2, [r4, 0])
    add(r0, r0, r2)
    add(r4, r4, r3)
    ldr(r2, [r4, 0])
    add(r0, r0, r2)
    add(r4, r4, r3)
    ldr(r2, [r4, 0])
    add(r0, r0, r2)
    add(r4, r4, r3)
    ldr(r2, [r4, 0])
    add(r0, r0, r2)
    add(r4, r4, r3)
    ldr(r2, [r4, 0])
    add(r0, r0, r2)
    add(r4, r4, r3)
    ldr(r2, [r4, 0])
    add(r0, r0, r2)
    add(r4, r4, r3)
    ldr(r2, [r4, 0])
    add(r0, r0, r2)
    add(r4, r4, r3)
    ldr(r2, [r4, 0])
    add(r0, r0, r2)
    neg(r0, r0)
    str(r0, [r6, 0])
    add(r6, 4)
    data(2, 0x4546)  # cmp r6, r8
    bcc(SCH)
    ldr(r2, [r7, 24])
    add(r1, r1, r2)  # t += s
    ldr(r2, [r7, 16])
    cmp(r1, r2)
    bge(THR)
    ldr(r2, [r7, 44])
    add(r6, r6, r2)  # A's (t, 0)
    b(SROW)

    label(THR)  # the group's thresholds (y) into A[S·C ..], its counts zeroed
    ldr(r6, [r7, 8])
    ldr(r2, [r6, 24])  # nf
    lsl(r2, r2, 2)
    ldr(r5, [r7, 36])
    add(r2, r2, r5)
    str(r2, [r7, 48])  # the thresholds' end
    ldr(r4, [r7, 4])
    mov(r3, 0)
    label(TCP)
    ldr(r1, [r4, 0])
    str(r1, [r5, 0])
    str(r3, [r4, 0])
    add(r4, 4)
    add(r5, 4)
    cmp(r5, r2)
    bcc(TCP)

    # the taps' offsets: (i_k - 4)·4dC + (xp's pooled step 0 - A)
    ldr(r1, [r6, 0])  # d
    ldr(r3, [r7, 20])
    mul(r3, r1)  # 4dC
    ldr(r5, [r7, 0])
    ldr(r2, [r7, 12])
    sub(r5, r5, r2)  # xp - A
    ldr(r4, [r6, 8])
    sub(r4, 4)
    mul(r4, r3)
    add(r4, r4, r5)
    mov(r8, r4)
    ldr(r4, [r6, 12])
    sub(r4, 4)
    mul(r4, r3)
    add(r4, r4, r5)
    mov(r9, r4)
    ldr(r4, [r6, 16])
    sub(r4, 4)
    mul(r4, r3)
    add(r4, r4, r5)
    mov(r10, r4)
    ldr(r4, [r6, 20])  # nch
    lsl(r4, r4, 2)
    add(r4, r4, r6)
    add(r4, 32)
    mov(r11, r4)  # the channels' end
    # the positions: lo = 0 (pad 1) or 4d; t0 the first multiple of s >= lo
    mov(r0, 0)  # lo
    ldr(r4, [r6, 4])
    cmp(r4, 0)
    bne(LO)
    lsl(r0, r1, 2)
    label(LO)
    ldr(r2, [r7, 24])  # s
    mov(r3, 0)  # t0
    label(T0)
    cmp(r3, r0)
    bge(T0D)
    add(r3, r3, r2)
    b(T0)
    label(T0D)
    ldr(r4, [r7, 16])
    sub(r4, r4, r0)  # n' - lo
    cmp(r3, r4)
    bge(NEXT)  # no position counted
    ldr(r2, [r7, 20])
    ldr(r1, [r7, 12])
    mul(r4, r2)
    add(r4, r4, r1)
    str(r4, [r7, 52])  # the positions' end
    mul(r3, r2)
    add(r1, r1, r3)  # A's (t0, 0)

    label(POS)  # conv at position t (A's (t, 0) in r1)
    mov(r0, 0)
    mov(r5, r6)
    add(r5, 32)  # the group's channels
    label(CH)
    ldr(r2, [r5, 0])
    add(r5, 4)
    lsl(r2, r2, 2)
    add(r2, r2, r1)  # A's (t, c)
    mov(r3, r8)
    data(2, 0x58D3)  # ldr r3, [r2, r3]: tap i0
    mov(r4, r9)
    data(2, 0x5914)  # ldr r4, [r2, r4]: tap i1
    add(r3, r3, r4)
    mov(r4, r10)
    data(2, 0x5914)  # ldr r4, [r2, r4]: tap i2
    add(r3, r3, r4)
    lsl(r4, r3, 1)
    add(r3, r3, r4)  # 3 (the three taps)
    add(r0, r0, r3)
    ldr(r2, [r2, 0])  # the shared sum
    add(r0, r0, r2)
    data(2, 0x455D)  # cmp r5, r11
    bcc(CH)
    ldr(r5, [r7, 36])  # the thresholds
    ldr(r4, [r7, 48])
    ldr(r6, [r7, 4])  # the counts
    label(CMP)
    ldr(r3, [r5, 0])
    add(r5, 4)
    cmp(r0, r3)
    ble(SKIP)
    ldr(r3, [r6, 0])
    add(r3, 1)
    str(r3, [r6, 0])
    label(SKIP)
    add(r6, 4)
    cmp(r5, r4)
    bcc(CMP)
    ldr(r6, [r7, 8])
    ldr(r2, [r7, 40])
    add(r1, r1, r2)  # t += s
    ldr(r2, [r7, 52])
    cmp(r1, r2)
    bcc(POS)

    label(NEXT)  # y past the group's features, tab past its row
    ldr(r6, [r7, 8])
    ldr(r2, [r6, 24])
    lsl(r2, r2, 2)
    ldr(r4, [r7, 4])
    add(r4, r4, r2)
    str(r4, [r7, 4])
    mov(r4, r11)
    str(r4, [r7, 8])
    b(GRP)

    label(DONE)
    ldr(r4, [r7, 56])
    mov(r8, r4)
    ldr(r4, [r7, 60])
    mov(r9, r4)
    ldr(r4, [r7, 64])
    mov(r10, r4)
    ldr(r4, [r7, 68])
    mov(r11, r4)


@micropython.viper
def rocket(xp: ptr32, y: ptr32, tab: ptr32, ft: ptr32, A: ptr32, p: ptr32):
    one = 1
    sg = one << 31  # a word read through ptr32 is restored with (v ^ sg) - sg
    n = int(p[0])
    S = int(p[1])
    C = int(p[2])
    M0 = int(p[4])
    G = int(p[5])
    shift = int(p[7])
    e = int(p[8])
    cap = int(p[12])
    s = 1  # the positions' step (at most `cap` positions)
    if cap > 0 and n > 0:
        s = (n + cap - 1) // cap
    sat = 1073741823  # 2**30 - 1: past every convolution
    ti = 0
    f = 0
    for _g in range(G):  # every feature's threshold into y
        sh = int(tab[ti + 7]) - e  # the biases' exponent in this window's units
        for _j in range(int(tab[ti + 6])):
            b = (int(ft[3 * f]) ^ sg) - sg
            if sh <= 0:
                b = b >> (0 - sh)
            elif (0 - (sat >> sh)) <= b and b <= (sat >> sh):
                b = b << sh
            elif b > 0:
                b = sat
            else:
                b = 0 - sat
            y[f] = b
            f += 1
        ti += 8 + int(tab[ti + 5])
    q = ptr32(_Q)
    q[0] = int(xp) + 4 * M0 * C
    q[1] = int(y)
    q[2] = int(tab)
    q[3] = int(A)
    q[4] = n
    q[5] = 4 * C
    q[6] = s
    q[7] = G
    q[8] = 0
    q[9] = int(A) + 4 * S * C
    q[10] = 4 * s * C
    q[11] = 4 * (s - 1) * C
    _groups(_Q)
    rnd = one << (shift - 1)
    ti = 0
    f = 0
    for _g in range(G):  # the counts into features
        lo = 4 * int(tab[ti])
        if int(tab[ti + 1]):
            lo = 0
        t0 = (lo + s - 1) // s * s  # the first counted position
        npos = 0
        if n - lo > t0:
            npos = (n - lo - t0 + s - 1) // s
        for _j in range(int(tab[ti + 6])):
            z = (int(ft[3 * f + 1]) ^ sg) - sg
            M = (int(ft[3 * f + 2]) ^ sg) - sg
            c = 0
            if npos > 0:
                c = (int(y[f]) << 15) // npos
            v = ((c - z) * M + rnd) >> shift
            if v < -128:
                v = -128
            elif v > 127:
                v = 127
            y[f] = v
            f += 1
        ti += 8 + int(tab[ti + 5])
