# Device (MicroPython on ARM only: Cortex-M0+/M3/M4/M7): the int8 kernels in Thumb assembler.
# ruff: noqa: F821  (r0..r8, label, data and the mnemonics are inline-assembler builtins)
"""The int8 kernels of attention_kernels.py as `@micropython.asm_thumb` machine code: same
signatures, same results bit for bit (tests compare them on the trained golden models, every
row or window, on the emulated Pico and Cortex-M3 boards).

Thumb-1 only (the ARMv6-M subset), so one file serves a Cortex-M0+ (RP2040) and every ARMv7-M
(Cortex-M3/M4/M7). Instructions the assembler has no mnemonic for are emitted with `data(2, …)`:
`sxtb`, and `cmp`/`add` with r8. Only low registers and r8 are used (r8 is saved and restored).

Why whole kernels in assembler: a call into an asm_thumb function costs ~15 µs on the Pico's
clock (argument conversion), as much as ~190 int8 MACs, so a kernel called per output or per
attention row would spend its time in calls. Each kernel here is one call per step: a small
viper shim writes the addresses of its 4th..6th buffers into `_A` (the assembler takes four
arguments, r0..r3) and calls the assembler, which keeps its loop state in `_A` too.

- dense / embed: per output acc = b[o] + x_row . W[o] (four MACs per step, then n_in % 4),
  then requant: (acc M[o] + 2**(shift-1)) >> shift (arithmetic), clamped to [act_min, act_max]
  — the 32-bit product is exact by the small-int budget (docs/quantization.md), as viper's.
  A MAC is ldr/ldrb + sxtb + muls + adds.
- attn: per head and query row: the S scores (dot products of D words, four per step), the
  softmax of attention_kernels.softmax_q14 (the same idx, table product and rounding), and ctx
  two columns at a time. The probability p = ((e << 14) + (sum >> 1)) // sum is an exact floor
  division without a divide instruction: R = 2**30 // sum once per row (bit-serial), then per
  entry q0 = ((N >> 14) R) >> 16 <= N // sum (both floors round down; N < 2**30 and
  sum >= 2**14 keep the product below 2**32) and q0 is raised while N - q0 sum >= sum (at most
  three steps: q0 >= N / sum - 3).
- relu, pool, myquery, myattn, add, load: the viper kernels (attention_viper.py): they are a
  small share of a model's time (pool: S·E additions; add: one requant per element).

Imported by attention.py for kernels="thumb" (and first by "auto"): on a port that is not a
Thumb one (sys.implementation._mpy arch: armv6m, armv7m, armv7em*), or without the emitter, the
import fails and attention.py falls back to viper. Precompile with `mpy-cross -march=armv6m`
(runs on every Cortex-M) or the board's own arch.
"""

import array
import sys

import micropython
from attention_viper import load, myattn, myquery, relu

if not 4 <= (getattr(sys.implementation, "_mpy", 0) >> 10) & 0x0F <= 8:
    raise ImportError("attention_thumb: not a Thumb (Cortex-M) port")

# loop state of the running kernel: [0..2] the shim's buffer addresses, then scratch words
_A = array.array("i", [0] * 32)


# --- dense: r0 x (int32 rows), r1 y, r2 W (int8), r3 _A = [b, M, p, scratch...]; two outputs
# at a time (one x load for two MACs; W row o + 1 is n_in bytes on), the last of an odd n_out
# alone. _A lives in r8 (r7 walks W row o + 1). Scratch (byte offsets in _A): 12 xrow, 16 y,
# 20 W, 24 rows left, 28 xlen, 32 x4len, 36 n_out, 40 shift, 44 rnd, 48 act_min, 52 act_max,
# 56 bstep, 60 brow, 64 bptr, 68 mptr, 72 outputs left, 76 n_in, 80 xend, 84 saved r8
@micropython.asm_thumb
def _dense(r0, r1, r2, r3):
    mov(r7, r3)
    mov(r4, r8)
    str(r4, [r7, 84])  # r8, restored at the end
    mov(r8, r7)  # _A lives in r8
    str(r0, [r7, 12])  # xrow
    str(r1, [r7, 16])  # y
    str(r2, [r7, 20])  # W
    ldr(r6, [r7, 8])  # p
    ldr(r4, [r6, 0])
    str(r4, [r7, 24])  # rows
    ldr(r4, [r6, 4])  # n_in
    str(r4, [r7, 76])  # bytes of a W row
    lsl(r5, r4, 2)
    str(r5, [r7, 28])  # xlen
    lsr(r4, r4, 2)
    lsl(r4, r4, 4)
    str(r4, [r7, 32])  # x4len: the whole groups of 4
    ldr(r5, [r7, 12])
    ldr(r4, [r7, 28])
    add(r4, r4, r5)
    str(r4, [r7, 80])  # xend
    ldr(r4, [r6, 8])
    str(r4, [r7, 36])  # n_out
    ldr(r4, [r6, 12])
    str(r4, [r7, 40])  # shift
    sub(r4, 1)
    mov(r5, 1)
    lsl(r5, r4)
    str(r5, [r7, 44])  # rnd
    ldr(r4, [r6, 16])
    str(r4, [r7, 48])  # act_min
    ldr(r4, [r6, 20])
    str(r4, [r7, 52])  # act_max
    ldr(r4, [r6, 24])
    lsl(r4, r4, 2)
    str(r4, [r7, 56])  # bstep
    ldr(r4, [r7, 0])
    str(r4, [r7, 60])  # brow
    label(ROW)
    mov(r7, r8)
    ldr(r4, [r7, 60])
    str(r4, [r7, 64])  # bptr = brow
    ldr(r4, [r7, 4])
    str(r4, [r7, 68])  # mptr = M
    ldr(r4, [r7, 36])
    str(r4, [r7, 72])  # outputs left
    ldr(r2, [r7, 20])  # w = W (its rows follow each other)
    cmp(r4, 2)
    bge(PAIR)
    b(SINGLE)
    label(PAIR)  # two outputs: acc0 r0 (W row o at r2), acc1 r6 (row o + 1 at r7)
    mov(r7, r8)
    ldr(r1, [r7, 12])
    ldr(r3, [r7, 32])
    add(r3, r3, r1)
    ldr(r4, [r7, 64])
    ldr(r0, [r4, 0])
    ldr(r6, [r4, 4])
    add(r4, 8)
    str(r4, [r7, 64])
    ldr(r5, [r7, 76])
    add(r7, r2, r5)
    cmp(r1, r3)
    beq(PREST)
    label(P4)
    ldr(r4, [r1, 0])
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)  # sxtb r5, r5
    mul(r5, r4)
    add(r0, r0, r5)
    ldrb(r5, [r7, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r6, r6, r5)
    ldr(r4, [r1, 4])
    ldrb(r5, [r2, 1])
    data(2, 0xB26D)  # sxtb r5, r5
    mul(r5, r4)
    add(r0, r0, r5)
    ldrb(r5, [r7, 1])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r6, r6, r5)
    ldr(r4, [r1, 8])
    ldrb(r5, [r2, 2])
    data(2, 0xB26D)  # sxtb r5, r5
    mul(r5, r4)
    add(r0, r0, r5)
    ldrb(r5, [r7, 2])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r6, r6, r5)
    ldr(r4, [r1, 12])
    ldrb(r5, [r2, 3])
    data(2, 0xB26D)  # sxtb r5, r5
    mul(r5, r4)
    add(r0, r0, r5)
    ldrb(r5, [r7, 3])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r6, r6, r5)
    add(r1, 16)
    add(r2, 4)
    add(r7, 4)
    cmp(r1, r3)
    bne(P4)
    label(PREST)
    mov(r4, r8)
    ldr(r3, [r4, 80])  # xend
    cmp(r1, r3)
    beq(PREQ)
    label(P1)
    ldr(r4, [r1, 0])
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r0, r0, r5)
    ldrb(r5, [r7, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r6, r6, r5)
    add(r1, 4)
    add(r2, 1)
    add(r7, 1)
    cmp(r1, r3)
    bne(P1)
    label(PREQ)
    mov(r2, r7)  # W row o + 2
    bl(RQ)
    mov(r0, r6)
    bl(RQ)
    mov(r7, r8)
    ldr(r4, [r7, 72])
    sub(r4, 2)
    str(r4, [r7, 72])
    cmp(r4, 2)
    blt(NOPAIR)
    b(PAIR)
    label(NOPAIR)
    cmp(r4, 0)
    beq(ROWEND)
    label(SINGLE)  # the last output of an odd n_out
    mov(r7, r8)
    ldr(r1, [r7, 12])
    ldr(r3, [r7, 80])
    ldr(r4, [r7, 64])
    ldr(r0, [r4, 0])
    add(r4, 4)
    str(r4, [r7, 64])
    label(S1)
    ldr(r4, [r1, 0])
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r0, r0, r5)
    add(r1, 4)
    add(r2, 1)
    cmp(r1, r3)
    bne(S1)
    bl(RQ)
    label(ROWEND)
    mov(r7, r8)
    ldr(r4, [r7, 80])
    str(r4, [r7, 12])  # xrow = xend
    ldr(r5, [r7, 28])
    add(r4, r4, r5)
    str(r4, [r7, 80])
    ldr(r4, [r7, 60])
    ldr(r5, [r7, 56])
    add(r4, r4, r5)
    str(r4, [r7, 60])  # brow += bstride
    ldr(r4, [r7, 24])
    sub(r4, 1)
    str(r4, [r7, 24])
    beq(DONE)
    b(ROW)
    label(RQ)  # requant r0 into y[o], y advances (uses r3..r5)
    mov(r3, r8)
    ldr(r4, [r3, 68])
    ldrh(r5, [r4, 0])  # M[o] (0..32767)
    add(r4, 2)
    str(r4, [r3, 68])
    mul(r0, r5)
    ldr(r4, [r3, 44])
    add(r0, r0, r4)
    ldr(r4, [r3, 40])
    asr(r0, r4)
    ldr(r4, [r3, 48])
    cmp(r0, r4)
    bge(RQLO)
    mov(r0, r4)
    label(RQLO)
    ldr(r4, [r3, 52])
    cmp(r0, r4)
    ble(RQHI)
    mov(r0, r4)
    label(RQHI)
    ldr(r4, [r3, 16])
    str(r0, [r4, 0])
    add(r4, 4)
    str(r4, [r3, 16])
    bx(lr)
    label(DONE)
    mov(r7, r8)
    ldr(r4, [r7, 84])
    mov(r8, r4)
    mov(r0, 0)


# --- embed: dense over an int8 input buffer (a seq model's window): x is a byte too
@micropython.asm_thumb
def _embed(r0, r1, r2, r3):
    mov(r7, r3)
    mov(r4, r8)
    str(r4, [r7, 84])  # r8, restored at the end
    mov(r8, r7)  # _A lives in r8
    str(r0, [r7, 12])  # xrow
    str(r1, [r7, 16])  # y
    str(r2, [r7, 20])  # W
    ldr(r6, [r7, 8])  # p
    ldr(r4, [r6, 0])
    str(r4, [r7, 24])  # rows
    ldr(r4, [r6, 4])  # n_in
    str(r4, [r7, 76])  # bytes of a W row
    str(r4, [r7, 28])  # xlen
    lsr(r4, r4, 2)
    lsl(r4, r4, 2)
    str(r4, [r7, 32])  # x4len: the whole groups of 4
    ldr(r5, [r7, 12])
    ldr(r4, [r7, 28])
    add(r4, r4, r5)
    str(r4, [r7, 80])  # xend
    ldr(r4, [r6, 8])
    str(r4, [r7, 36])  # n_out
    ldr(r4, [r6, 12])
    str(r4, [r7, 40])  # shift
    sub(r4, 1)
    mov(r5, 1)
    lsl(r5, r4)
    str(r5, [r7, 44])  # rnd
    ldr(r4, [r6, 16])
    str(r4, [r7, 48])  # act_min
    ldr(r4, [r6, 20])
    str(r4, [r7, 52])  # act_max
    ldr(r4, [r6, 24])
    lsl(r4, r4, 2)
    str(r4, [r7, 56])  # bstep
    ldr(r4, [r7, 0])
    str(r4, [r7, 60])  # brow
    label(ROW)
    mov(r7, r8)
    ldr(r4, [r7, 60])
    str(r4, [r7, 64])  # bptr = brow
    ldr(r4, [r7, 4])
    str(r4, [r7, 68])  # mptr = M
    ldr(r4, [r7, 36])
    str(r4, [r7, 72])  # outputs left
    ldr(r2, [r7, 20])  # w = W (its rows follow each other)
    cmp(r4, 2)
    bge(PAIR)
    b(SINGLE)
    label(PAIR)  # two outputs: acc0 r0 (W row o at r2), acc1 r6 (row o + 1 at r7)
    mov(r7, r8)
    ldr(r1, [r7, 12])
    ldr(r3, [r7, 32])
    add(r3, r3, r1)
    ldr(r4, [r7, 64])
    ldr(r0, [r4, 0])
    ldr(r6, [r4, 4])
    add(r4, 8)
    str(r4, [r7, 64])
    ldr(r5, [r7, 76])
    add(r7, r2, r5)
    cmp(r1, r3)
    beq(PREST)
    label(P4)
    ldrb(r4, [r1, 0])
    data(2, 0xB264)  # sxtb r4, r4
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)  # sxtb r5, r5
    mul(r5, r4)
    add(r0, r0, r5)
    ldrb(r5, [r7, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r6, r6, r5)
    ldrb(r4, [r1, 1])
    data(2, 0xB264)  # sxtb r4, r4
    ldrb(r5, [r2, 1])
    data(2, 0xB26D)  # sxtb r5, r5
    mul(r5, r4)
    add(r0, r0, r5)
    ldrb(r5, [r7, 1])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r6, r6, r5)
    ldrb(r4, [r1, 2])
    data(2, 0xB264)  # sxtb r4, r4
    ldrb(r5, [r2, 2])
    data(2, 0xB26D)  # sxtb r5, r5
    mul(r5, r4)
    add(r0, r0, r5)
    ldrb(r5, [r7, 2])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r6, r6, r5)
    ldrb(r4, [r1, 3])
    data(2, 0xB264)  # sxtb r4, r4
    ldrb(r5, [r2, 3])
    data(2, 0xB26D)  # sxtb r5, r5
    mul(r5, r4)
    add(r0, r0, r5)
    ldrb(r5, [r7, 3])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r6, r6, r5)
    add(r1, 4)
    add(r2, 4)
    add(r7, 4)
    cmp(r1, r3)
    bne(P4)
    label(PREST)
    mov(r4, r8)
    ldr(r3, [r4, 80])  # xend
    cmp(r1, r3)
    beq(PREQ)
    label(P1)
    ldrb(r4, [r1, 0])
    data(2, 0xB264)
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r0, r0, r5)
    ldrb(r5, [r7, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r6, r6, r5)
    add(r1, 1)
    add(r2, 1)
    add(r7, 1)
    cmp(r1, r3)
    bne(P1)
    label(PREQ)
    mov(r2, r7)  # W row o + 2
    bl(RQ)
    mov(r0, r6)
    bl(RQ)
    mov(r7, r8)
    ldr(r4, [r7, 72])
    sub(r4, 2)
    str(r4, [r7, 72])
    cmp(r4, 2)
    blt(NOPAIR)
    b(PAIR)
    label(NOPAIR)
    cmp(r4, 0)
    beq(ROWEND)
    label(SINGLE)  # the last output of an odd n_out
    mov(r7, r8)
    ldr(r1, [r7, 12])
    ldr(r3, [r7, 80])
    ldr(r4, [r7, 64])
    ldr(r0, [r4, 0])
    add(r4, 4)
    str(r4, [r7, 64])
    label(S1)
    ldrb(r4, [r1, 0])
    data(2, 0xB264)
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r0, r0, r5)
    add(r1, 1)
    add(r2, 1)
    cmp(r1, r3)
    bne(S1)
    bl(RQ)
    label(ROWEND)
    mov(r7, r8)
    ldr(r4, [r7, 80])
    str(r4, [r7, 12])  # xrow = xend
    ldr(r5, [r7, 28])
    add(r4, r4, r5)
    str(r4, [r7, 80])
    ldr(r4, [r7, 60])
    ldr(r5, [r7, 56])
    add(r4, r4, r5)
    str(r4, [r7, 60])  # brow += bstride
    ldr(r4, [r7, 24])
    sub(r4, 1)
    str(r4, [r7, 24])
    beq(DONE)
    b(ROW)
    label(RQ)  # requant r0 into y[o], y advances (uses r3..r5)
    mov(r3, r8)
    ldr(r4, [r3, 68])
    ldrh(r5, [r4, 0])  # M[o] (0..32767)
    add(r4, 2)
    str(r4, [r3, 68])
    mul(r0, r5)
    ldr(r4, [r3, 44])
    add(r0, r0, r4)
    ldr(r4, [r3, 40])
    asr(r0, r4)
    ldr(r4, [r3, 48])
    cmp(r0, r4)
    bge(RQLO)
    mov(r0, r4)
    label(RQLO)
    ldr(r4, [r3, 52])
    cmp(r0, r4)
    ble(RQHI)
    mov(r0, r4)
    label(RQHI)
    ldr(r4, [r3, 16])
    str(r0, [r4, 0])
    add(r4, 4)
    str(r4, [r3, 16])
    bx(lr)
    label(DONE)
    mov(r7, r8)
    ldr(r4, [r7, 84])
    mov(r8, r4)
    mov(r0, 0)


# --- attn: r0 q, r1 k, r2 v, r3 _A = [ctx, sc, p, scratch...]
# scratch (byte offsets): 12 q, 16 k, 20 v, 24 S, 28 row (E*4), 32 dlen (D*4), 36 d4len,
# 40 heads left, 44 c0 (bytes), 48 query rows left, 52 qrow, 56 M_sm, 60 shift_sm, 64 r_sm,
# 68 M_ctx, 72 shift_ctx, 76 r_ctx, 80 mx, 84 sum, 88 R = 2**30 // sum, 92 ctx out,
# 96 pb (the probabilities, sc + S*4), 100 pend, 104 saved r8, 108 col, 112 col end
@micropython.asm_thumb
def _attn(r0, r1, r2, r3):
    mov(r7, r3)
    str(r0, [r7, 12])
    str(r1, [r7, 16])
    str(r2, [r7, 20])
    mov(r4, r8)
    str(r4, [r7, 104])
    ldr(r6, [r7, 8])  # p
    ldr(r4, [r6, 0])
    str(r4, [r7, 24])  # S
    lsl(r4, r4, 2)
    ldr(r5, [r7, 4])
    add(r5, r5, r4)
    str(r5, [r7, 96])  # pb = sc + S
    add(r5, r5, r4)
    str(r5, [r7, 100])  # pend
    ldr(r4, [r6, 4])
    lsl(r4, r4, 2)
    str(r4, [r7, 28])  # row
    ldr(r4, [r6, 8])
    str(r4, [r7, 40])  # heads left = H
    ldr(r4, [r6, 12])
    lsl(r5, r4, 2)
    str(r5, [r7, 32])  # dlen
    lsr(r4, r4, 2)
    lsl(r4, r4, 4)
    str(r4, [r7, 36])  # d4len
    ldr(r4, [r6, 16])
    str(r4, [r7, 56])  # M_sm
    ldr(r4, [r6, 20])
    str(r4, [r7, 60])  # shift_sm
    sub(r4, 1)
    mov(r5, 1)
    lsl(r5, r4)
    str(r5, [r7, 64])  # r_sm
    ldr(r4, [r6, 24])
    str(r4, [r7, 68])  # M_ctx
    ldr(r4, [r6, 28])
    str(r4, [r7, 72])  # shift_ctx
    sub(r4, 1)
    mov(r5, 1)
    lsl(r5, r4)
    str(r5, [r7, 76])  # r_ctx
    mov(r4, 0)
    str(r4, [r7, 44])  # c0 = 0
    label(HEAD)
    ldr(r4, [r7, 24])
    str(r4, [r7, 48])  # query rows left = S
    ldr(r4, [r7, 12])
    ldr(r5, [r7, 44])
    add(r4, r4, r5)
    str(r4, [r7, 52])  # qrow = q + c0
    label(QROW)
    # scores: sc[j] = q[i, head] . k[j, head], their max
    ldr(r4, [r7, 16])
    ldr(r5, [r7, 44])
    add(r2, r4, r5)  # k[0, head]
    ldr(r6, [r7, 4])  # sc
    label(SJ)
    ldr(r1, [r7, 52])
    ldr(r3, [r7, 36])
    add(r3, r3, r1)
    mov(r0, 0)
    cmp(r1, r3)
    beq(S1)
    label(S4)
    ldr(r4, [r1, 0])
    ldr(r5, [r2, 0])
    mul(r4, r5)
    add(r0, r0, r4)
    ldr(r4, [r1, 4])
    ldr(r5, [r2, 4])
    mul(r4, r5)
    add(r0, r0, r4)
    ldr(r4, [r1, 8])
    ldr(r5, [r2, 8])
    mul(r4, r5)
    add(r0, r0, r4)
    ldr(r4, [r1, 12])
    ldr(r5, [r2, 12])
    mul(r4, r5)
    add(r0, r0, r4)
    add(r1, 16)
    add(r2, 16)
    cmp(r1, r3)
    bne(S4)
    label(S1)
    ldr(r4, [r7, 52])
    ldr(r3, [r7, 32])
    add(r3, r3, r4)
    cmp(r1, r3)
    beq(S2)
    label(S1L)
    ldr(r4, [r1, 0])
    ldr(r5, [r2, 0])
    mul(r4, r5)
    add(r0, r0, r4)
    add(r1, 4)
    add(r2, 4)
    cmp(r1, r3)
    bne(S1L)
    label(S2)
    str(r0, [r6, 0])
    ldr(r4, [r7, 4])
    cmp(r6, r4)
    beq(SETMX)  # the first score sets the max
    ldr(r4, [r7, 80])
    cmp(r0, r4)
    ble(NOMX)
    label(SETMX)
    str(r0, [r7, 80])
    label(NOMX)
    ldr(r4, [r7, 28])
    ldr(r5, [r7, 32])
    sub(r4, r4, r5)
    add(r2, r2, r4)  # k[j + 1, head]
    add(r6, 4)
    ldr(r4, [r7, 96])
    cmp(r6, r4)
    bne(SJ)
    # softmax_q14: e[j] at pb[j], their sum
    ldr(r6, [r7, 4])
    ldr(r2, [r7, 96])
    mov(r3, 0)
    ldr(r1, [r7, 8])
    add(r1, 32)  # EXP_HI = p[8:24]; EXP_LO 64 bytes on
    label(EJ)
    ldr(r0, [r7, 80])
    ldr(r4, [r6, 0])
    sub(r0, r0, r4)
    ldr(r4, [r7, 56])
    mul(r0, r4)
    ldr(r4, [r7, 64])
    add(r0, r0, r4)
    ldr(r4, [r7, 60])
    asr(r0, r4)  # idx >= 0
    mov(r5, 0)
    cmp(r0, 255)
    bgt(EZ)  # e = 0 past the table
    lsr(r4, r0, 4)
    lsl(r4, r4, 2)
    add(r4, r4, r1)
    ldr(r5, [r4, 0])  # EXP_HI[idx >> 4]
    mov(r4, 15)
    and_(r4, r0)
    lsl(r4, r4, 2)
    add(r4, r4, r1)
    ldr(r4, [r4, 64])  # EXP_LO[idx & 15]
    mul(r5, r4)
    mov(r4, 1)
    lsl(r4, r4, 13)
    add(r5, r5, r4)
    asr(r5, r5, 14)
    label(EZ)
    str(r5, [r2, 0])
    add(r3, r3, r5)
    add(r6, 4)
    add(r2, 4)
    ldr(r4, [r7, 96])
    cmp(r6, r4)
    bne(EJ)
    # R = 2**30 // sum, bit-serial (32 steps; the quotient bit is the carry after cmp/sub)
    mov(r0, 1)
    lsl(r0, r0, 30)
    mov(r1, 0)
    mov(r2, 0)
    mov(r4, 32)
    label(RD)
    lsl(r0, r0, 1)
    adc(r1, r1)
    cmp(r1, r3)
    bcc(RD1)
    sub(r1, r1, r3)
    label(RD1)
    adc(r2, r2)
    sub(r4, 1)
    bne(RD)
    str(r2, [r7, 88])
    # p[j] = ((e << 14) + half) // sum
    ldr(r2, [r7, 96])
    lsr(r6, r3, 1)  # half
    label(PJ)
    ldr(r0, [r2, 0])
    lsl(r0, r0, 14)
    add(r0, r0, r6)  # N
    lsr(r1, r0, 14)
    ldr(r4, [r7, 88])
    mul(r1, r4)
    lsr(r1, r1, 16)  # q0 <= N // sum
    mov(r4, r1)
    mul(r4, r3)
    sub(r0, r0, r4)  # N - q0 sum >= 0
    label(PFIX)
    cmp(r0, r3)
    bcc(PDONE)
    sub(r0, r0, r3)
    add(r1, 1)
    b(PFIX)
    label(PDONE)
    str(r1, [r2, 0])
    add(r2, 4)
    ldr(r4, [r7, 100])
    cmp(r2, r4)
    bne(PJ)
    # ctx[i, c] = requant(sum_j p[j] v[j, c]), two columns at a time
    ldr(r4, [r7, 52])
    ldr(r5, [r7, 12])
    sub(r4, r4, r5)
    ldr(r5, [r7, 0])
    add(r4, r4, r5)
    str(r4, [r7, 92])  # ctx out = ctx + (qrow - q)
    ldr(r4, [r7, 20])
    ldr(r5, [r7, 44])
    add(r4, r4, r5)
    str(r4, [r7, 108])  # col = v + c0
    ldr(r5, [r7, 32])
    add(r5, r5, r4)
    str(r5, [r7, 112])  # col end
    ldr(r4, [r7, 100])
    mov(r8, r4)  # pend
    label(CC)
    ldr(r2, [r7, 108])
    ldr(r4, [r7, 112])
    sub(r4, r4, r2)
    cmp(r4, 4)
    bgt(PAIR)
    beq(SINGLE)
    b(CDONE)
    label(PAIR)
    ldr(r1, [r7, 96])
    ldr(r3, [r7, 28])
    mov(r0, 0)
    mov(r6, 0)
    label(CJ2)
    ldr(r4, [r1, 0])
    ldr(r5, [r2, 0])
    mul(r5, r4)
    add(r0, r0, r5)
    ldr(r5, [r2, 4])
    mul(r5, r4)
    add(r6, r6, r5)
    add(r2, r2, r3)
    add(r1, 4)
    data(2, 0x4541)  # cmp r1, r8
    bne(CJ2)
    bl(REQ)
    mov(r0, r6)
    bl(REQ)
    ldr(r4, [r7, 108])
    add(r4, 8)
    str(r4, [r7, 108])
    b(CC)
    label(SINGLE)
    ldr(r1, [r7, 96])
    ldr(r3, [r7, 28])
    mov(r0, 0)
    label(CJ1)
    ldr(r4, [r1, 0])
    ldr(r5, [r2, 0])
    mul(r5, r4)
    add(r0, r0, r5)
    add(r2, r2, r3)
    add(r1, 4)
    data(2, 0x4541)  # cmp r1, r8
    bne(CJ1)
    bl(REQ)
    b(CDONE)
    # requant r0 with M_ctx, shift_ctx into [-128, 127], store at ctx out and advance it
    label(REQ)
    ldr(r4, [r7, 68])
    mul(r0, r4)
    ldr(r4, [r7, 76])
    add(r0, r0, r4)
    ldr(r4, [r7, 72])
    asr(r0, r4)
    mov(r4, 127)
    cmp(r0, r4)
    ble(RQHI)
    mov(r0, r4)
    label(RQHI)
    mvn(r4, r4)  # -128
    cmp(r0, r4)
    bge(RQLO)
    mov(r0, r4)
    label(RQLO)
    ldr(r4, [r7, 92])
    str(r0, [r4, 0])
    add(r4, 4)
    str(r4, [r7, 92])
    bx(lr)
    label(CDONE)
    ldr(r4, [r7, 52])
    ldr(r5, [r7, 28])
    add(r4, r4, r5)
    str(r4, [r7, 52])  # next query row
    ldr(r4, [r7, 48])
    sub(r4, 1)
    str(r4, [r7, 48])
    beq(NEXTH)
    b(QROW)
    label(NEXTH)
    ldr(r4, [r7, 44])
    ldr(r5, [r7, 32])
    add(r4, r4, r5)
    str(r4, [r7, 44])  # c0 += D
    ldr(r4, [r7, 40])
    sub(r4, 1)
    str(r4, [r7, 40])
    beq(DONE)
    b(HEAD)
    label(DONE)
    ldr(r4, [r7, 104])
    mov(r8, r4)
    mov(r0, 0)


# --- add: r0 x, r1 y, r2 p = n, M_x, M_y, shift: y[i] = clamp((x M_x + y M_y + rnd) >> shift)
@micropython.asm_thumb
def _add(r0, r1, r2):
    mov(r4, r8)
    push({r4})
    ldr(r3, [r2, 0])
    lsl(r3, r3, 2)
    add(r3, r3, r0)  # x end
    ldr(r6, [r2, 4])  # M_x
    ldr(r7, [r2, 8])  # M_y
    ldr(r2, [r2, 12])  # shift
    sub(r2, 1)
    mov(r4, 1)
    lsl(r4, r2)
    mov(r8, r4)  # rnd
    add(r2, 1)
    cmp(r0, r3)
    beq(END)
    label(LOOP)
    ldr(r4, [r0, 0])
    mul(r4, r6)
    ldr(r5, [r1, 0])
    mul(r5, r7)
    add(r4, r4, r5)
    data(2, 0x4444)  # add r4, r8
    asr(r4, r2)
    mov(r5, 127)
    cmp(r4, r5)
    ble(HIOK)
    mov(r4, r5)
    label(HIOK)
    mvn(r5, r5)  # -128
    cmp(r4, r5)
    bge(LOOK)
    mov(r4, r5)
    label(LOOK)
    str(r4, [r1, 0])
    add(r0, 4)
    add(r1, 4)
    cmp(r0, r3)
    bne(LOOP)
    label(END)
    pop({r4})
    mov(r8, r4)
    mov(r0, 0)


# --- pool: r0 x [S, E], r1 y [E], r2 p = S, E, M, shift: y[c] = requant(sum_s x[s, c])
@micropython.asm_thumb
def _pool(r0, r1, r2):
    mov(r7, r8)
    push({r7})
    ldr(r3, [r2, 4])
    lsl(r3, r3, 2)  # row = E * 4
    add(r7, r1, r3)
    mov(r8, r7)  # y end
    label(COL)
    mov(r4, r0)
    ldr(r6, [r2, 0])
    mul(r6, r3)
    add(r6, r6, r0)  # the column's end
    mov(r5, 0)
    label(SUM)
    ldr(r7, [r4, 0])
    add(r5, r5, r7)
    add(r4, r4, r3)
    cmp(r4, r6)
    bne(SUM)
    ldr(r7, [r2, 8])
    mul(r5, r7)
    ldr(r6, [r2, 12])
    sub(r6, 1)
    mov(r7, 1)
    lsl(r7, r6)
    add(r5, r5, r7)
    add(r6, 1)
    asr(r5, r6)
    mov(r7, 127)
    cmp(r5, r7)
    ble(HIOK)
    mov(r5, r7)
    label(HIOK)
    mvn(r7, r7)
    cmp(r5, r7)
    bge(LOOK)
    mov(r5, r7)
    label(LOOK)
    str(r5, [r1, 0])
    add(r1, 4)
    add(r0, 4)
    data(2, 0x4541)  # cmp r1, r8
    bne(COL)
    pop({r7})
    mov(r8, r7)
    mov(r0, 0)


@micropython.viper
def dense(x, y, w, b: ptr32, m: ptr16, p: ptr32):
    a = ptr32(_A)
    a[0] = int(b)
    a[1] = int(m)
    a[2] = int(p)
    _dense(x, y, w, _A)


@micropython.viper
def embed(x, y, w, b: ptr32, m: ptr16, p: ptr32):
    a = ptr32(_A)
    a[0] = int(b)
    a[1] = int(m)
    a[2] = int(p)
    _embed(x, y, w, _A)


@micropython.viper
def attn(q, k, v, ctx: ptr32, sc: ptr32, p: ptr32):
    a = ptr32(_A)
    a[0] = int(ctx)
    a[1] = int(sc)
    a[2] = int(p)
    _attn(q, k, v, _A)


@micropython.viper
def add(x, y, _a, _b, _c, p):
    _add(x, y, p)


@micropython.viper
def pool(x, y, _a, _b, _c, p):
    _pool(x, y, p)


INT8 = (dense, relu, attn, pool, myquery, myattn, add, embed, load)
