# Device (MicroPython on ARM only: Cortex-M0+/M3/M4/M7): the rocket op's hot loops in Thumb.
# ruff: noqa: F821  (r0..r11, label, data, ptr32 and the mnemonics are MicroPython builtins)
"""The rocket kernels of attention_kernels_rocket.py (op 0 rocket, docs/quantization.md
"rocket"), rocket_in and rocket, with their hot loops in Thumb assembler
(`@micropython.asm_thumb`): the window's scan and pooling, the shared sums and the
proportion-of-positive-values counts. Same results bit for bit (tests compare it with
the pure kernel on the emulated Pico and Cortex-M3: tests/test_emulated_pico.py,
tests/test_emulated_cortex_m3.py). The int8 path only (the float program runs the pure
kernels).

This module's pooled grid holds 3·xp (the pure kernel's xp times the kernel's weight 3, which
every convolution applies to its three taps), so a position's conv is three loads and the
shared sum: conv = sum_{c in combo} (X[i + (i0-4)dC] + X[i + (i1-4)dC] + X[i + (i2-4)dC]) +
A[t·C + c], X = 3·xp, i = (M0 + t)·C + c, the same value as the pure kernel's.

`rocket(xp, y, tab, ft, A, p)` (viper) takes the arguments of the pure kernel, fills _Q
(below) and makes one call to `_groups`, which walks every group as the pure kernel does:
1. at a new dilation d the shared sums A[t·C + c] = -sum_{j<9} xp[(M0 + t + (j-4)d)·C + c]
   (t < n', t % s = 0), each the sum of nine X taps times 3**-1 mod 2**32 (exact: the sum is
   3 times one that fits 32 bits); then the counted positions of a pad-0 group at this d (t0
   the first multiple of s >= 4d, npos those of t0 <= t < n' - 4d) and m (below) of its npos;
2. the group's thresholds from ft's biases into A[S·C ..] (thr = b << (eb - e) saturated at
   +-(2**30 - 1), or b >> (e - eb)) and its counts y zeroed;
3. per counted position t (t % s = 0, t0 <= t < n' - lo, lo = 0 for pad 1, 4d for pad 0)
   its conv, and y[f] += 1 for each feature whose threshold conv passes (signed: conv >
   thr). A group of one channel (every group of univariate data) keeps the taps' offsets, the
   positions' walker and end in registers, and with one or two features their thresholds and
   counts too;
4. each count into its feature: q = (count << 15) // npos (0 when npos = 0), then
   clamp(((q - z) M + 2**(shift-1)) >> shift, -128, 127). For npos <= 256, q = (count·m) >> 16
   with m = (2**31 - 1) // npos + 1, unsigned: c·m/2**16 = c·2**15/npos + c·ε/(npos·2**16),
   0 <= ε < npos, and c·ε < 2**16 for c <= npos <= 256, so the floor is the quotient's (a
   host test checks every npos and count); past 256, 16 steps of restoring division.
`load(xq, x, -, -, -, p)` (viper, its copy `_copy`): the int32 window's load, x[i] = xq[i]
for i < p[0], 0 up to p[1] (attention_kernels_rocket.copy).
`rocket_in(x, xp, -, -, -, p)` (viper): the block exponent e of the window (the scan of
max |x| in `_top`), then `_shift` (P = 1) or `_pool`: X[(M0 + t)·C + c] = 3·sum_{k<P}
(x[(tP + k)·C + c] + 2**e // 2) >> e (arithmetic shift) for t < n', and zeros for n' <= t <
S.
Every intermediate of the pure kernel stays within 2**30 (docs/quantization.md "rocket"), so
32-bit words and signed compares hold it; X and three of its taps are at most 9/12 of the
conv's bound, and a sum of nine X taps that passes 2**31 wraps, which the product by 3**-1
mod 2**32 undoes. Thumb-1 only (the ARMv6-M subset), as attention_thumb.py: `ldr` and
`str` with a register offset, and `add` and `cmp` with a high register, are `data(2, …)`.

Imported by attention_build_rocket for the thumb kernel set on a Thumb port; where it cannot
import (no inline assembler, another arch), the viper kernels run.
"""

import array

import micropython

GRID = 3  # the pooled grid holds 3·xp (above)

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


# The pooling: r0 x's step t, channel c, r1 xp's (M0 + t)·C + c, r2 _W; xp[..] = 3·sum_{k<P}
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
    lsl(r7, r5, 1)
    add(r5, r5, r7)  # 3·
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


# The window's copy: r0 xq, r1 x, r2 the words.
# The pooling at P = 1: r0 x, r1 xp's first pooled value, r2 the values, r3 e; xp[k] =
# 3·((x[k] + 2**e // 2) >> e) (the same words when x is xp's interior).
@micropython.asm_thumb
def _shift(r0, r1, r2, r3):
    mov(r4, 1)
    lsl(r4, r3)
    lsr(r4, r4, 1)  # 2**e // 2
    cmp(r2, 0)
    beq(SHD)
    label(SHL)
    ldr(r5, [r0, 0])
    add(r0, 4)
    add(r5, r5, r4)
    asr(r5, r3)
    lsl(r6, r5, 1)
    add(r5, r5, r6)  # 3·
    str(r5, [r1, 0])
    add(r1, 4)
    sub(r2, 1)
    bne(SHL)
    label(SHD)


@micropython.asm_thumb
def _copy(r0, r1, r2):
    cmp(r2, 0)
    beq(CPD)
    label(CPL)
    ldr(r3, [r0, 0])
    add(r0, 4)
    str(r3, [r1, 0])
    add(r1, 4)
    sub(r2, 1)
    bne(CPL)
    label(CPD)


@micropython.viper
def load(xq: ptr32, x: ptr32, _a, _b, _c, p: ptr32):
    n = int(p[0])
    _copy(xq, x, n)
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
    if P == 1:
        _shift(x, int(xp) + 4 * o, n * C, e)
    else:
        _pool(x, int(xp) + 4 * o, _W)
    for k in range(o + n * C, (int(p[4]) + int(p[1])) * C):  # the steps past the window read 0
        xp[k] = 0


# _groups's parameters and state (byte offsets): 0 the address of xp's pooled step 0 (past
# the M0 margin steps), 4 y's walker (the group's first feature), 8 tab's walker (the group's
# row), 12 A, 16 n', 20 4C (bytes of a step), 24 s, 28 groups left, 32 the dilation of the sums
# in A (0: none yet), 36 A's thresholds (A + 4 S C), 40 4sC (bytes between counted
# positions), 44 4(s-1)C, 48 the thresholds' end, 52 the positions' end, 56..68 saved
# r8..r11, 72 ft's walker (the group's first feature), 76 e, 80 shift, 84 2**(shift-1), 88 t0
# and 92 npos of a pad-0 group of the dilation in A, 96 npos of a pad-1 group, 100 npos of
# the group, 104 saved r12, 108 m of a pad-1 group's npos, 112 of a pad-0 group's at this d,
# 116 of the group's (m = (2**31 - 1) // npos + 1 for 1 <= npos <= 256, else 0).
_Q = array.array("i", [0] * 30)


# r0 = _Q, kept in r7 (in r12 while a one-channel group's positions run).
# The sums (per new dilation d): r1 t, r3 4dC (a tap's bytes), r5 K = (xp's tap 0 of (t, c)) -
# (A's (t, c)), constant for a dilation, r6 A's (t, c), r8 the end of A's row t, r0 the sum,
# r2 a tap, r4 the tap walker, r9 3**-1 mod 2**32; then the counted positions of a pad-0
# group at this d and their m.
# A group: its thresholds from ft's biases into A[S·C ..] and its counts y zeroed; then its
# positions. Every position of a group of one channel (the univariate data's every group):
# r1 A's (t, c), r2..r4 the three taps' byte offsets from it to xp's taps, r8 4sC, r9 the
# end, r0 conv, r7 scratch; one feature: r5 its threshold, r6 its count, four positions a
# pass; two: r5 and r10 the thresholds, r6 and r4 the counts, r11 tap i2's offset; more:
# r10..r11 the thresholds and their end, r5 their walker, r6 the counts' offset from it
# (y - thresholds).
# A group of more channels: r8..r10 the taps' offsets, r11 the end of the group's channels,
# r1 A's (t, 0), r0 conv, r5 the channel walker, then the thresholds' walker, r6 the counts'
# walker, r2..r4 scratch. Last, the counts into features: q = (count·m) >> 16 (r6 m), or
# where m = 0 (npos > 256) by 16 steps of restoring division (count <= npos: the quotient
# has 16 bits), then clamp(((q - z) M + 2**(shift-1)) >> shift, -128, 127).
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
    mov(r4, r12)
    str(r4, [r7, 104])

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
    mov(r2, 0xAA)
    lsl(r2, r2, 8)
    add(r2, 0xAA)
    lsl(r2, r2, 8)
    add(r2, 0xAA)
    lsl(r2, r2, 8)
    add(r2, 0xAB)
    mov(r9, r2)  # 3**-1 mod 2**32
    mov(r1, 0)  # t
    ldr(r4, [r7, 16])
    cmp(r1, r4)
    bge(DIL)  # n' = 0: no positions
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
    mov(r2, r9)
    mul(r0, r2)  # the nine taps of xp (exact: 3 is invertible mod 2**32)
    neg(r0, r0)
    str(r0, [r6, 0])
    add(r6, 4)
    data(2, 0x4546)  # cmp r6, r8
    bcc(SCH)
    ldr(r2, [r7, 24])
    add(r1, r1, r2)  # t += s
    ldr(r2, [r7, 16])
    cmp(r1, r2)
    bge(DIL)
    ldr(r2, [r7, 44])
    add(r6, r6, r2)  # A's (t, 0)
    b(SROW)

    label(DIL)  # a pad-0 group's positions at this d: t0 the first multiple of s >= 4d,
    ldr(r6, [r7, 8])  # npos of t0 <= t < n' - 4d
    ldr(r1, [r6, 0])
    lsl(r1, r1, 2)  # lo = 4d
    ldr(r2, [r7, 24])  # s
    ldr(r4, [r7, 16])
    sub(r4, r4, r1)  # n' - lo
    mov(r3, r1)
    cmp(r2, 1)
    beq(D0D)  # s = 1: t0 = lo
    mov(r3, 0)
    label(D0)
    cmp(r3, r1)
    bge(D0D)
    add(r3, r3, r2)
    b(D0)
    label(D0D)
    str(r3, [r7, 88])
    mov(r0, 0)
    cmp(r3, r4)
    bge(D1D)
    sub(r0, r4, r3)  # s = 1: npos = n' - lo - t0
    cmp(r2, 1)
    beq(D1D)
    mov(r0, 0)
    label(D1)
    add(r3, r3, r2)
    add(r0, 1)
    cmp(r3, r4)
    blt(D1)
    label(D1D)
    str(r0, [r7, 92])
    mov(r5, 0)  # m = (2**31 - 1) // npos + 1 when 1 <= npos <= 256, else 0
    cmp(r0, 0)
    beq(DM)
    mov(r1, 1)
    lsl(r1, r1, 8)
    cmp(r0, r1)
    bgt(DM)
    mov(r6, 0)
    mov(r4, 31)
    label(DML)
    lsl(r6, r6, 1)
    add(r6, 1)
    lsl(r5, r5, 1)
    cmp(r6, r0)
    blt(DMS)
    sub(r6, r6, r0)
    add(r5, 1)
    label(DMS)
    sub(r4, 1)
    bne(DML)
    add(r5, 1)
    label(DM)
    str(r5, [r7, 112])

    label(THR)  # thr = b << (eb - e) saturated at +-(2**30 - 1), or b >> (e - eb); counts 0
    ldr(r6, [r7, 8])
    ldr(r2, [r6, 24])  # nf
    lsl(r2, r2, 2)
    ldr(r5, [r7, 36])
    add(r2, r2, r5)
    str(r2, [r7, 48])  # the thresholds' end
    ldr(r3, [r6, 28])
    ldr(r4, [r7, 76])
    sub(r3, r3, r4)  # sh = eb - e
    ldr(r4, [r7, 72])  # ft's walker
    ldr(r1, [r7, 4])  # y's walker
    label(TL)
    ldr(r0, [r4, 0])  # b
    add(r4, 12)
    cmp(r3, 0)
    bgt(TPOS)
    neg(r6, r3)
    asr(r0, r6)
    b(TST)
    label(TPOS)
    mov(r6, 1)
    lsl(r6, r6, 30)
    sub(r6, 1)  # sat
    lsr(r6, r3)  # sat >> sh
    cmp(r0, r6)
    bgt(TSATP)
    neg(r6, r6)
    cmp(r0, r6)
    blt(TSATN)
    lsl(r0, r3)
    b(TST)
    label(TSATP)
    mov(r0, 1)
    lsl(r0, r0, 30)
    sub(r0, 1)
    b(TST)
    label(TSATN)
    mov(r0, 1)
    lsl(r0, r0, 30)
    sub(r0, 1)
    neg(r0, r0)
    label(TST)
    str(r0, [r5, 0])
    mov(r0, 0)
    str(r0, [r1, 0])
    add(r5, 4)
    add(r1, 4)
    cmp(r5, r2)
    bcc(TL)

    # the taps' offsets: (i_k - 4)·4dC + (xp's pooled step 0 - A)
    ldr(r6, [r7, 8])
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
    # the positions: t0 and npos of the group's pad
    mov(r3, 0)
    ldr(r0, [r7, 96])
    ldr(r2, [r7, 108])
    ldr(r4, [r6, 4])
    cmp(r4, 0)
    bne(PADD)
    ldr(r3, [r7, 88])
    ldr(r0, [r7, 92])
    ldr(r2, [r7, 112])
    label(PADD)
    str(r0, [r7, 100])
    str(r2, [r7, 116])
    cmp(r0, 0)
    bne(P1)
    b(FEAT)  # no position counted
    label(P1)
    ldr(r2, [r7, 20])
    mul(r3, r2)
    ldr(r1, [r7, 12])
    add(r1, r1, r3)  # A's (t0, 0)
    ldr(r2, [r7, 40])
    mul(r0, r2)
    add(r0, r0, r1)
    str(r0, [r7, 52])  # the positions' end
    ldr(r4, [r6, 20])
    cmp(r4, 1)
    beq(ONE)
    b(POS)

    label(ONE)  # a group of one channel c: A's (t, c) walks, the taps in registers
    ldr(r0, [r6, 32])
    lsl(r0, r0, 2)
    add(r1, r1, r0)
    ldr(r5, [r7, 52])
    add(r5, r5, r0)
    mov(r2, r8)
    mov(r3, r9)
    mov(r4, r10)
    mov(r9, r5)  # the end
    ldr(r5, [r7, 40])
    mov(r8, r5)  # 4sC
    mov(r12, r7)
    ldr(r0, [r6, 24])
    cmp(r0, 1)
    beq(F1SET)
    cmp(r0, 2)
    bne(F2SET)
    b(F22SET)
    label(F1SET)
    ldr(r5, [r7, 36])
    ldr(r5, [r5, 0])  # the threshold
    mov(r6, 0)  # the count
    ldr(r0, [r7, 100])  # npos positions, four a pass: the first pass takes npos % 4
    lsr(r0, r0, 1)
    bcs(F1ODD)
    lsr(r0, r0, 1)
    bcs(F1C)
    b(F1A)
    label(F1ODD)
    lsr(r0, r0, 1)
    bcs(F1B)
    b(F1D)
    label(F1A)
    data(2, 0x5888)  # ldr r0, [r1, r2]: tap i0
    data(2, 0x58CF)  # ldr r7, [r1, r3]: tap i1
    add(r0, r0, r7)
    data(2, 0x590F)  # ldr r7, [r1, r4]: tap i2
    add(r0, r0, r7)
    ldr(r7, [r1, 0])  # the shared sum
    add(r0, r0, r7)
    cmp(r0, r5)
    ble(F1AS)
    add(r6, 1)
    label(F1AS)
    data(2, 0x4441)  # add r1, r8: t += s
    label(F1B)
    data(2, 0x5888)  # ldr r0, [r1, r2]: tap i0
    data(2, 0x58CF)  # ldr r7, [r1, r3]: tap i1
    add(r0, r0, r7)
    data(2, 0x590F)  # ldr r7, [r1, r4]: tap i2
    add(r0, r0, r7)
    ldr(r7, [r1, 0])  # the shared sum
    add(r0, r0, r7)
    cmp(r0, r5)
    ble(F1BS)
    add(r6, 1)
    label(F1BS)
    data(2, 0x4441)  # add r1, r8: t += s
    label(F1C)
    data(2, 0x5888)  # ldr r0, [r1, r2]: tap i0
    data(2, 0x58CF)  # ldr r7, [r1, r3]: tap i1
    add(r0, r0, r7)
    data(2, 0x590F)  # ldr r7, [r1, r4]: tap i2
    add(r0, r0, r7)
    ldr(r7, [r1, 0])  # the shared sum
    add(r0, r0, r7)
    cmp(r0, r5)
    ble(F1CS)
    add(r6, 1)
    label(F1CS)
    data(2, 0x4441)  # add r1, r8: t += s
    label(F1D)
    data(2, 0x5888)  # ldr r0, [r1, r2]: tap i0
    data(2, 0x58CF)  # ldr r7, [r1, r3]: tap i1
    add(r0, r0, r7)
    data(2, 0x590F)  # ldr r7, [r1, r4]: tap i2
    add(r0, r0, r7)
    ldr(r7, [r1, 0])  # the shared sum
    add(r0, r0, r7)
    cmp(r0, r5)
    ble(F1DS)
    add(r6, 1)
    label(F1DS)
    data(2, 0x4441)  # add r1, r8: t += s
    data(2, 0x4549)  # cmp r1, r9
    bcc(F1A)
    mov(r7, r12)
    ldr(r0, [r7, 4])
    str(r6, [r0, 0])
    b(FEAT)

    label(F22SET)  # two features: r5, r10 the thresholds, r6, r4 the counts, r11 tap i2
    mov(r11, r4)
    ldr(r5, [r7, 36])
    ldr(r4, [r5, 4])
    mov(r10, r4)
    ldr(r5, [r5, 0])
    mov(r6, 0)
    mov(r4, 0)
    label(F22)
    data(2, 0x5888)  # ldr r0, [r1, r2]: tap i0
    data(2, 0x58CF)  # ldr r7, [r1, r3]: tap i1
    add(r0, r0, r7)
    mov(r7, r11)
    data(2, 0x59CF)  # ldr r7, [r1, r7]: tap i2
    add(r0, r0, r7)
    ldr(r7, [r1, 0])
    add(r0, r0, r7)
    cmp(r0, r5)
    ble(F22A)
    add(r6, 1)
    label(F22A)
    data(2, 0x4550)  # cmp r0, r10
    ble(F22B)
    add(r4, 1)
    label(F22B)
    data(2, 0x4441)  # add r1, r8
    data(2, 0x4549)  # cmp r1, r9
    bcc(F22)
    mov(r7, r12)
    ldr(r0, [r7, 4])
    str(r6, [r0, 0])
    str(r4, [r0, 4])
    b(FEAT)

    label(F2SET)
    ldr(r5, [r7, 36])
    mov(r10, r5)  # the thresholds
    ldr(r6, [r7, 48])
    mov(r11, r6)  # their end
    ldr(r6, [r7, 4])
    sub(r6, r6, r5)  # the counts' offset from the thresholds
    label(F2)
    data(2, 0x5888)  # ldr r0, [r1, r2]: tap i0
    data(2, 0x58CF)  # ldr r7, [r1, r3]: tap i1
    add(r0, r0, r7)
    data(2, 0x590F)  # ldr r7, [r1, r4]: tap i2
    add(r0, r0, r7)
    ldr(r7, [r1, 0])
    add(r0, r0, r7)
    mov(r5, r10)
    label(F2C)
    ldr(r7, [r5, 0])
    cmp(r0, r7)
    ble(F2S)
    data(2, 0x59AF)  # ldr r7, [r5, r6]: its count
    add(r7, 1)
    data(2, 0x51AF)  # str r7, [r5, r6]
    label(F2S)
    add(r5, 4)
    data(2, 0x455D)  # cmp r5, r11
    bcc(F2C)
    data(2, 0x4441)  # add r1, r8
    data(2, 0x4549)  # cmp r1, r9
    bcc(F2)
    mov(r7, r12)
    b(FEAT)

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

    label(FEAT)  # the counts into features
    ldr(r6, [r7, 8])
    ldr(r2, [r6, 24])  # nf
    lsl(r2, r2, 2)
    ldr(r1, [r7, 4])  # y's walker
    add(r2, r2, r1)  # its end
    ldr(r4, [r7, 72])  # ft's walker
    ldr(r3, [r7, 100])  # npos
    ldr(r6, [r7, 116])  # m
    label(FL)
    ldr(r0, [r1, 0])  # the count
    mov(r5, 0)  # q
    cmp(r3, 0)
    beq(FQ)
    cmp(r6, 0)
    beq(FLONG)
    mul(r0, r6)
    lsr(r5, r0, 16)  # q = (count·m) >> 16, exact for npos <= 256
    b(FQ)
    label(FLONG)
    cmp(r0, r3)
    blt(FD0)
    sub(r0, r0, r3)
    mov(r5, 1)
    label(FD0)
    mov(r6, 15)  # m is 0 here: r6 counts the 15 steps
    label(FDL)
    lsl(r0, r0, 1)
    lsl(r5, r5, 1)
    cmp(r0, r3)
    blt(FDS)
    sub(r0, r0, r3)
    add(r5, 1)
    label(FDS)
    sub(r6, 1)
    bne(FDL)
    label(FQ)
    ldr(r0, [r4, 4])  # z
    sub(r5, r5, r0)
    ldr(r0, [r4, 8])  # M
    mul(r5, r0)
    ldr(r0, [r7, 84])
    add(r5, r5, r0)
    ldr(r0, [r7, 80])
    asr(r5, r0)
    mov(r0, 127)
    cmp(r5, r0)
    ble(FC1)
    mov(r5, r0)
    label(FC1)
    mvn(r0, r0)  # -128
    cmp(r5, r0)
    bge(FC2)
    mov(r5, r0)
    label(FC2)
    str(r5, [r1, 0])
    add(r1, 4)
    add(r4, 12)
    cmp(r1, r2)
    bcc(FL)

    # NEXT: y and ft past the group's features, tab past its row
    str(r1, [r7, 4])
    str(r4, [r7, 72])
    ldr(r6, [r7, 8])
    ldr(r4, [r6, 20])
    lsl(r4, r4, 2)
    add(r4, r4, r6)
    add(r4, 32)
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
    ldr(r4, [r7, 104])
    mov(r12, r4)


@micropython.viper
def rocket(xp: ptr32, y: ptr32, tab: ptr32, ft: ptr32, A: ptr32, p: ptr32):
    one = 1
    n = int(p[0])
    C = int(p[2])
    shift = int(p[7])
    cap = int(p[12])
    s = 1  # the positions' step (at most `cap` positions)
    if cap > 0 and n > 0:
        s = (n + cap - 1) // cap
    q = ptr32(_Q)
    q[0] = int(xp) + 4 * int(p[4]) * C
    q[1] = int(y)
    q[2] = int(tab)
    q[3] = int(A)
    q[4] = n
    q[5] = 4 * C
    q[6] = s
    q[7] = int(p[5])
    q[8] = 0
    q[9] = int(A) + 4 * int(p[1]) * C
    q[10] = 4 * s * C
    q[11] = 4 * (s - 1) * C
    q[18] = int(ft)
    q[19] = int(p[8])
    q[20] = shift
    q[21] = one << (shift - 1)
    D = (n + s - 1) // s  # a pad-1 group's positions: 0 <= t < n'
    q[24] = D
    m = 0
    if 1 <= D and D <= 256:
        m = ((one << 31) - 1) // D + 1
    q[27] = m
    _groups(_Q)
