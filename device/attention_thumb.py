# Device (MicroPython on ARM only: Cortex-M0+/M3/M4/M7): the int8 kernels in Thumb assembler.
# ruff: noqa: F821  (r0..r8, label, data and the mnemonics are inline-assembler builtins)
"""The int8 kernels of attention_kernels.py in Thumb assembler (`@micropython.asm_thumb`): same
results bit for bit (tests compare them with the host's integer reference on the trained golden
models on the emulated Pico and Cortex-M3 boards: tests/test_emulated_pico.py,
tests/test_emulated_cortex_m3.py).

Thumb-1 only (the ARMv6-M subset), so one file serves a Cortex-M0+ (RP2040) and every ARMv7-M
(Cortex-M3/M4/M7). The assembler has no mnemonic for some Thumb-1 instructions; they are
emitted with `data(2, …)`: `sxtb`, `push {lr}` / `pop {pc}`, and `cmp`/`add` with a high
register (r8..r12, which every kernel saves and restores).

One call per inference. A call into Python code costs ~20-45 µs on the Pico's clock (a bytecode
or viper function and its argument conversion: as much as ~300-600 int8 MACs), so every kernel
lives in one assembler function, `_run(words, xq, out, lp)`, which walks a program: a header of
6 words (the address of _A, of x, 1 when x holds int32 words (dense's input) else 0 (int8:
embed's), of y, nc, the step count), then per step 7 words, the kernel's code (_DENSE … _RELU)
and the addresses of the step's six buffers (0 for None). `fuse(prog)` (called by attention.py
once at load) turns each run of a model's assembler steps into one such program; `whole()` makes
a program of every step the model's whole int8 inference: with xq (not 0) `_run` first loads
lp[0] int8 of it into x (a word at a time when both are word-aligned; zeros up to lp[1], as
viper's load), and with out (not 0) it ends by copying y's nc logits into out and returns
their argmax (the first maximum), so run_int8 makes one call. Such a model gets a run_int8 of
its own (`setup`, `_checked`): the method's checks in native code, ~20 µs where the method's
bytecode took ~115 (a third of Iris). A kernel of INT8 called by itself (the stream's embed)
runs as a one-step program (`_one`). `_run` loads a step's first three buffers into r0..r2
and the other three into _A[0..2], points r3 at _A and branches to the kernel, which keeps its
loop state in _A's words (byte offsets below; 116 and 120 are the program's walker and end).

- dense / embed (code 0 / 4; embed's input is int8 too): a row of up to 16 inputs four
  outputs per pass over it (DEQUAD, EMQUAD: one x load for four MACs, W walked down its
  column), then two per pass (one x load for two MACs: ldr/ldrb + 2 x (ldrb + sxtb + muls +
  adds), four inputs per loop step; a longer row's every pass), the last output of an odd
  n_out alone; then the requant of the four, the pair (DERQ2) or the one (DERQ) (acc M[o] +
  2**(shift-1)) >> shift (arithmetic), clamped to [act_min, act_max]. The 32-bit product is
  exact by the small-int budget (docs/quantization.md), as viper's.
- attn (1): per head and query row: the S scores (a head of 4 dimensions, E = 4 H as the
  search's grid makes them: q's four in registers and one row of k a step; any other: two rows
  of k at a time, the last of an odd S alone), their max, the softmax
  of attention_kernels.softmax_q14 (the same idx, table product and rounding, the products of
  the 256 idx in a table built once from the model's EXP_HI, EXP_LO; e = 0 without the
  product past dmax_sm, where d M_sm may not fit 32 bits), ctx four columns at a time, each
  requantized into [-128, 127]. The probability p = ((e << 14) + (sum >> 1)) // sum
  is an exact floor division without a divide instruction (ARMv6-M has none): R = 2**30 // sum
  once per row (bit-serial, 17 steps: 2**14 <= sum < 2**30), then per entry
  q0 = ((N >> 14) R) >> 16 <= N // sum (both floors round down; N < 2**30 and sum >= 2**14
  keep the product below 2**32) and q0 is raised while N - q0 sum >= sum (at most three
  steps: q0 >= N / sum - 3).
- add (2), pool (3), relu (5): the residual add's requant per element; the column sums and
  their requant; max(y, 0).
- conv (6; the conv stem, depthwise and pointwise: one grouped kernel): a pointwise conv (K 1,
  stride 1, no pad, one group) runs as dense's rows; a depthwise one channel by channel, the
  outputs whose five taps lie inside the window (the same run in every channel) with the
  weights in registers (DWF), the others with a bound a tap; any other, per output row and
  output, the group's channels times the taps inside the window (one unsigned compare a
  tap). Each output then dense's requant.
- myquery, myattn (MyAttn models), load (the window copy, when the program is not whole): the
  viper kernels, each a step of its own between the fused runs of assembler steps.

Imported by attention.py for kernels="thumb" (and first by "auto") on a Thumb port only
(sys.implementation._mpy arch: armv6m, armv7m, armv7em*); elsewhere, or without the emitter,
attention.py falls back to viper. Precompile with `mpy-cross -march=armv6m`
(runs on every Cortex-M) or the board's own arch.
"""

import array

import micropython
from attention_viper import load, myattn, myquery
from micropython import const

# the running kernel's buffers 4..6 ([0..2]) and loop state (byte offsets in the comments below)
# [32..38]: a pointwise conv's parameters as dense's, [40..71]: a depthwise conv's state (CV)
# [72..199]: attn's exp table e(idx), idx < 256, uint16 (byte 288 on), and [200..231] the
# EXP_HI, EXP_LO it was built from (byte 800 on)
_A = array.array("i", [0] * 232)
_ONE = array.array("i", [0] * 13)  # a one-step program (the header, then its step)


# The kernels, each entered with r3 = _A and left with pop {pc}; then the runner.
# dense (DE), embed (EM): r0 x, r1 y, r2 W, _A[0..2] = b, M, p. High registers hold what the
# requant of every output reads (r8 _A, r9 M's walker, r10 y's walker, r11 rnd, r12 shift;
# saved at 84..100); r7 walks W row o + 1. Scratch: 12 xrow, 20 W, 24 rows left, 28 xlen,
# 32 x4len, 36 n_out, 40 x4end, 48 act_min, 52 act_max, 56 bstep, 60 brow, 64 bptr,
# 72 outputs left, 76 n_in, 80 xend.
# attn (AT): r0 q, r1 k, r2 v, _A[0..2] = ctx, sc, p. Scratch: 12 q, 16 k, 20 v, 24 S, 28 row
# (E*4), 32 dlen (D*4), 36 d4len, 40 heads left, 44 c0, 48 query rows left, 52 qrow, 56 M_sm,
# 60 shift_sm, 64 r_sm, 68 M_ctx, 72 shift_ctx, 76 r_ctx, 80 max, 84 dmax_sm, 88 R, 92 ctx out,
# 96 pb (the probabilities, sc + S*4), 100 pend, 104 saved r8, 108 col, 112 col end. A query
# row's scores and softmax keep their loop state in r8..r12 and lr (saved on entry: r9..r12
# pushed, lr by push {lr}), not in _A: ~20 % fewer cycles for heads of 4 dimensions.
# add (AD): r0 x, r1 y, p = n, M_x, M_y, shift. pool (PO): r0 x [S, E], r1 y [E],
# p = S, E, M, shift. relu (RE): r1 y, p = n.
@micropython.asm_thumb
def _run(r0, r1, r2, r3):
    bl(RUN)  # the runner is last: it falls into the epilogue

    label(DE)
    data(2, 0xB500)  # push {lr}
    mov(r7, r3)
    mov(r4, r8)
    str(r4, [r7, 84])  # r8, restored at the end
    mov(r4, r9)
    str(r4, [r7, 88])  # r9, restored at the end
    mov(r4, r10)
    str(r4, [r7, 92])  # r10, restored at the end
    mov(r4, r11)
    str(r4, [r7, 96])  # r11, restored at the end
    mov(r4, r12)
    str(r4, [r7, 100])  # r12, restored at the end
    mov(r8, r7)  # _A
    str(r0, [r7, 12])  # xrow
    mov(r10, r1)  # y
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
    ldr(r4, [r6, 8])
    str(r4, [r7, 36])  # n_out
    ldr(r4, [r6, 12])
    mov(r12, r4)  # shift
    sub(r4, 1)
    mov(r5, 1)
    lsl(r5, r4)
    mov(r11, r5)  # rnd
    ldr(r4, [r6, 16])
    str(r4, [r7, 48])  # act_min
    ldr(r4, [r6, 20])
    str(r4, [r7, 52])  # act_max
    ldr(r4, [r6, 24])
    lsl(r4, r4, 2)
    str(r4, [r7, 56])  # bstep
    ldr(r4, [r7, 0])
    str(r4, [r7, 60])  # brow
    label(DEROW)
    mov(r7, r8)
    ldr(r5, [r7, 12])
    ldr(r4, [r7, 32])
    add(r4, r4, r5)
    str(r4, [r7, 40])  # x4end
    ldr(r4, [r7, 28])
    add(r4, r4, r5)
    str(r4, [r7, 80])  # xend
    ldr(r4, [r7, 60])
    str(r4, [r7, 64])  # bptr = brow
    ldr(r4, [r7, 4])
    mov(r9, r4)  # mptr = M
    ldr(r4, [r7, 36])
    str(r4, [r7, 72])  # outputs left
    ldr(r2, [r7, 20])  # w = W (its rows follow each other)
    cmp(r4, 4)
    blt(DENOQUAD)
    ldr(r5, [r7, 76])
    cmp(r5, 16)  # four outputs a pass for a row of up to 16 inputs (DEQUAD)
    bgt(DENOQUAD)
    b(DEQUAD)
    label(DENOQUAD)
    cmp(r4, 2)
    bge(DEPAIR)
    b(DESINGLE)
    label(DEPAIR)  # two outputs: acc0 r0 (W row o at r2), acc1 r6 (row o + 1 at r7)
    mov(r7, r8)
    ldr(r1, [r7, 12])
    ldr(r3, [r7, 40])
    ldr(r4, [r7, 64])
    ldr(r0, [r4, 0])
    ldr(r6, [r4, 4])
    add(r4, 8)
    str(r4, [r7, 64])
    ldr(r5, [r7, 76])
    add(r7, r2, r5)
    cmp(r1, r3)
    beq(DEPREST)
    label(DEP4)
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
    bne(DEP4)
    label(DEPREST)
    mov(r4, r8)
    ldr(r3, [r4, 80])  # xend
    cmp(r1, r3)
    beq(DEPREQ)
    label(DEP1)
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
    bne(DEP1)
    label(DEPREQ)
    mov(r2, r7)  # W row o + 2
    bl(DERQ2)
    mov(r7, r8)
    ldr(r4, [r7, 72])
    sub(r4, 2)
    str(r4, [r7, 72])
    cmp(r4, 2)
    blt(DENOPAIR)
    b(DEPAIR)
    label(DENOPAIR)
    cmp(r4, 0)
    beq(DEROWEND)
    label(DESINGLE)  # the last output of an odd n_out
    mov(r7, r8)
    ldr(r1, [r7, 12])
    ldr(r3, [r7, 80])
    ldr(r4, [r7, 64])
    ldr(r0, [r4, 0])
    add(r4, 4)
    str(r4, [r7, 64])
    label(DES1)
    ldr(r4, [r1, 0])
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r0, r0, r5)
    add(r1, 4)
    add(r2, 1)
    cmp(r1, r3)
    bne(DES1)
    bl(DERQ)
    label(DEROWEND)
    mov(r7, r8)
    ldr(r4, [r7, 80])
    str(r4, [r7, 12])  # xrow = xend
    ldr(r4, [r7, 60])
    ldr(r5, [r7, 56])
    add(r4, r4, r5)
    str(r4, [r7, 60])  # brow += bstride
    ldr(r4, [r7, 24])
    sub(r4, 1)
    str(r4, [r7, 24])
    beq(DEDONE)
    b(DEROW)
    label(DERQ)  # r0 = clamp((r0 M[o] + rnd) >> shift) into y[o]; M and y advance
    mov(r4, r9)
    ldrh(r5, [r4, 0])  # M[o] (0..32767)
    add(r4, 2)
    mov(r9, r4)
    mul(r0, r5)
    data(2, 0x4458)  # add r0, r11 (rnd)
    mov(r4, r12)
    asr(r0, r4)
    mov(r3, r8)
    ldr(r4, [r3, 48])
    cmp(r0, r4)
    bge(DERQLO)
    mov(r0, r4)
    label(DERQLO)
    ldr(r4, [r3, 52])
    cmp(r0, r4)
    ble(DERQHI)
    mov(r0, r4)
    label(DERQHI)
    mov(r4, r10)
    str(r0, [r4, 0])
    add(r4, 4)
    mov(r10, r4)
    bx(lr)
    label(DERQ2)  # DERQ of a pair in one call: r0 into y[o], r6 into y[o + 1]; keeps r2
    mov(r4, r9)
    ldrh(r5, [r4, 0])  # M[o]
    ldrh(r3, [r4, 2])  # M[o + 1]
    add(r4, 4)
    mov(r9, r4)
    mul(r0, r5)
    mul(r6, r3)
    data(2, 0x4458)  # add r0, r11 (rnd)
    data(2, 0x445E)  # add r6, r11
    mov(r4, r12)
    asr(r0, r4)
    asr(r6, r4)
    mov(r3, r8)
    ldr(r4, [r3, 48])  # act_min
    cmp(r0, r4)
    bge(DERQ2L0)
    mov(r0, r4)
    label(DERQ2L0)
    cmp(r6, r4)
    bge(DERQ2L1)
    mov(r6, r4)
    label(DERQ2L1)
    ldr(r4, [r3, 52])  # act_max
    cmp(r0, r4)
    ble(DERQ2H0)
    mov(r0, r4)
    label(DERQ2H0)
    cmp(r6, r4)
    ble(DERQ2H1)
    mov(r6, r4)
    label(DERQ2H1)
    mov(r4, r10)
    str(r0, [r4, 0])
    str(r6, [r4, 4])
    add(r4, 8)
    mov(r10, r4)
    bx(lr)
    label(DEDONE)
    mov(r7, r8)
    ldr(r4, [r7, 100])
    mov(r12, r4)
    ldr(r4, [r7, 96])
    mov(r11, r4)
    ldr(r4, [r7, 92])
    mov(r10, r4)
    ldr(r4, [r7, 88])
    mov(r9, r4)
    ldr(r4, [r7, 84])
    mov(r8, r4)
    data(2, 0xBD00)  # pop {pc}
    # Four outputs a pass (a row of n_in <= 16: as many inputs again cost the walk below about
    # what the pass saves), entered from DEROW with r7 = _A, r2 = W row o: acc0..3 in r0, r3,
    # r6, r7; x[j] loaded once for the four, W walked down the column (r2 += n_in in r8, the
    # runner's _A and shift pushed) and back to the next (lr = 1 - 3 n_in), two inputs a loop
    # step (an odd row enters at the second), r12 the x row's end. Then DERQ2's requant of the
    # four, M, rnd and shift loaded once. Then the pairs (DEPAIR), or the last output, if any.
    label(DEQUAD)
    ldr(r1, [r7, 12])  # x row
    mov(r4, r12)
    push({r4, r7})  # shift, _A
    ldr(r4, [r7, 80])
    mov(r12, r4)  # xend
    ldr(r5, [r7, 76])
    mov(r8, r5)  # n_in: W's next row
    lsl(r4, r5, 1)
    add(r4, r4, r5)
    mov(r5, 1)
    sub(r4, r5, r4)
    data(2, 0x46A6)  # mov lr, r4: 1 - 3 n_in, from row o + 3 to row o's next column
    ldr(r4, [r7, 64])  # bptr
    ldr(r0, [r4, 0])
    ldr(r3, [r4, 4])
    ldr(r6, [r4, 8])
    mov(r5, r4)
    add(r5, 16)
    str(r5, [r7, 64])
    ldr(r7, [r4, 12])
    data(2, 0x4561)  # cmp r1, r12: no inputs (acc = b: the stream's requant, n_in 0)
    beq(DEQJE)
    mov(r5, r8)
    lsr(r5, r5, 1)  # carry: n_in odd
    bcc(DEQJ)
    sub(r1, 4)  # an odd row enters at the loop's second input
    b(DEQJ2)
    label(DEQJ)  # two inputs a loop step
    ldr(r4, [r1, 0])
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)  # sxtb r5, r5
    mul(r5, r4)
    add(r0, r0, r5)
    data(2, 0x4442)  # add r2, r8: row o + 1
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r3, r3, r5)
    data(2, 0x4442)  # row o + 2
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r6, r6, r5)
    data(2, 0x4442)  # row o + 3
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r7, r7, r5)
    data(2, 0x4472)  # add r2, lr: row o, the next column
    label(DEQJ2)
    ldr(r4, [r1, 4])
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)  # sxtb r5, r5
    mul(r5, r4)
    add(r0, r0, r5)
    data(2, 0x4442)  # add r2, r8: row o + 1
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r3, r3, r5)
    data(2, 0x4442)  # row o + 2
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r6, r6, r5)
    data(2, 0x4442)  # row o + 3
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r7, r7, r5)
    data(2, 0x4472)  # add r2, lr: row o, the next column
    add(r1, 8)
    data(2, 0x4561)  # cmp r1, r12
    bne(DEQJ)
    label(DEQJE)
    data(2, 0x4442)  # r2 = row o + 1: row o + 4 is three rows on
    data(2, 0x4442)
    data(2, 0x4442)
    pop({r4, r5})
    mov(r12, r4)  # shift
    mov(r8, r5)  # _A
    mov(r4, r9)
    ldrh(r1, [r4, 0])  # M[o]
    ldrh(r5, [r4, 2])
    mul(r0, r1)
    mul(r3, r5)
    ldrh(r1, [r4, 4])
    ldrh(r5, [r4, 6])
    mul(r6, r1)
    mul(r7, r5)
    add(r4, 8)
    mov(r9, r4)
    data(2, 0x4458)  # add r0, r11 (rnd)
    data(2, 0x445B)  # add r3, r11
    data(2, 0x445E)  # add r6, r11
    data(2, 0x445F)  # add r7, r11
    mov(r4, r12)
    asr(r0, r4)
    asr(r3, r4)
    asr(r6, r4)
    asr(r7, r4)
    mov(r5, r8)
    ldr(r4, [r5, 48])  # act_min
    cmp(r0, r4)
    bge(DEQL0)
    mov(r0, r4)
    label(DEQL0)
    cmp(r3, r4)
    bge(DEQL1)
    mov(r3, r4)
    label(DEQL1)
    cmp(r6, r4)
    bge(DEQL2)
    mov(r6, r4)
    label(DEQL2)
    cmp(r7, r4)
    bge(DEQL3)
    mov(r7, r4)
    label(DEQL3)
    ldr(r4, [r5, 52])  # act_max
    cmp(r0, r4)
    ble(DEQH0)
    mov(r0, r4)
    label(DEQH0)
    cmp(r3, r4)
    ble(DEQH1)
    mov(r3, r4)
    label(DEQH1)
    cmp(r6, r4)
    ble(DEQH2)
    mov(r6, r4)
    label(DEQH2)
    cmp(r7, r4)
    ble(DEQH3)
    mov(r7, r4)
    label(DEQH3)
    mov(r4, r10)
    str(r0, [r4, 0])
    str(r3, [r4, 4])
    str(r6, [r4, 8])
    str(r7, [r4, 12])
    add(r4, 16)
    mov(r10, r4)
    mov(r7, r8)
    ldr(r4, [r7, 72])
    sub(r4, 4)
    str(r4, [r7, 72])  # outputs left
    cmp(r4, 4)
    blt(DEQ3)
    b(DEQUAD)
    label(DEQ3)
    cmp(r4, 2)
    blt(DEQ1)
    b(DEPAIR)
    label(DEQ1)
    cmp(r4, 0)
    beq(DEQ0)
    b(DESINGLE)
    label(DEQ0)
    b(DEROWEND)

    label(AT)
    data(2, 0xB500)  # push {lr}
    mov(r4, r9)
    push({r4})
    mov(r4, r10)
    push({r4})
    mov(r4, r11)
    push({r4})
    mov(r4, r12)
    push({r4})
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
    mov(r5, r6)
    add(r5, 128)
    ldr(r4, [r5, 32])
    str(r4, [r7, 84])  # dmax_sm = p[40]
    mov(r4, 0)
    str(r4, [r7, 44])  # c0 = 0
    # the exp table at _A + 288: e(idx) = (EXP_HI[idx >> 4] EXP_LO[idx & 15] + 2**13) >> 14,
    # as softmax_q14's product; rebuilt when p's EXP_HI, EXP_LO (p[8:40]) differ from the
    # copy it was built from (_A + 800: every model's are the same, so once a boot)
    add(r6, 32)  # p[8:40]
    mov(r1, r7)
    add(r1, 255)
    add(r1, 255)
    add(r1, 255)
    add(r1, 35)  # _A + 800
    mov(r2, 0)
    label(ATKEY)
    ldr(r4, [r6, 0])
    ldr(r5, [r1, 0])
    cmp(r4, r5)
    bne(ATBUILD)
    add(r6, 4)
    add(r1, 4)
    add(r2, 4)
    cmp(r2, 128)
    bne(ATKEY)
    b(ATHEAD)
    label(ATBUILD)
    sub(r6, r6, r2)
    sub(r1, r1, r2)
    mov(r2, 0)
    label(ATKCOPY)
    ldr(r4, [r6, 0])
    str(r4, [r1, 0])
    add(r6, 4)
    add(r1, 4)
    add(r2, 4)
    cmp(r2, 128)
    bne(ATKCOPY)
    sub(r6, 128)  # EXP_HI
    mov(r0, r7)
    add(r0, 255)
    add(r0, 33)  # the table: _A + 288
    mov(r2, 0)  # idx
    label(ATBUILDE)
    lsr(r4, r2, 4)
    lsl(r4, r4, 2)
    add(r4, r4, r6)
    ldr(r5, [r4, 0])  # EXP_HI[idx >> 4]
    lsl(r4, r2, 28)
    lsr(r4, r4, 26)
    add(r4, r4, r6)
    ldr(r4, [r4, 64])  # EXP_LO[idx & 15]
    mul(r5, r4)
    mov(r4, 1)
    lsl(r4, r4, 13)
    add(r5, r5, r4)
    asr(r5, r5, 14)
    strh(r5, [r0, 0])
    add(r0, 2)
    add(r2, 1)
    cmp(r2, 255)
    ble(ATBUILDE)
    label(ATHEAD)
    ldr(r4, [r7, 24])
    str(r4, [r7, 48])  # query rows left = S
    ldr(r4, [r7, 12])
    ldr(r5, [r7, 44])
    add(r4, r4, r5)
    str(r4, [r7, 52])  # qrow = q + c0
    label(ATQROW)
    mov(r8, r7)
    ldr(r4, [r7, 32])
    cmp(r4, 16)
    bne(ATQGEN)
    # scores of a head of 4 dimensions (E = 4 H, the grid's heads): q[i, head] in r0, r1, r3,
    # r6, one row of k a step (r2), the scores' walker r7 up to r10, r9 k's row stride, r12
    # their max
    ldr(r4, [r7, 52])
    ldr(r0, [r4, 0])
    ldr(r1, [r4, 4])
    ldr(r3, [r4, 8])
    ldr(r6, [r4, 12])
    ldr(r4, [r7, 28])
    mov(r9, r4)
    ldr(r4, [r7, 96])
    mov(r10, r4)
    mov(r4, 1)
    lsl(r4, r4, 31)
    mov(r12, r4)  # max = -2**31, below or at every score
    ldr(r4, [r7, 16])
    ldr(r5, [r7, 44])
    add(r2, r4, r5)  # k[0, head]
    ldr(r7, [r7, 4])  # sc
    label(ATS4)
    ldr(r5, [r2, 0])
    mul(r5, r0)
    ldr(r4, [r2, 4])
    mul(r4, r1)
    add(r5, r5, r4)
    ldr(r4, [r2, 8])
    mul(r4, r3)
    add(r5, r5, r4)
    ldr(r4, [r2, 12])
    mul(r4, r6)
    add(r5, r5, r4)
    data(2, 0xC720)  # stmia r7!, {r5}: sc[j]
    mov(r4, r12)
    cmp(r5, r4)
    ble(ATS4N)
    mov(r12, r5)
    label(ATS4N)
    data(2, 0x444A)  # add r2, r9: k[j + 1, head]
    data(2, 0x4557)  # cmp r7, r10
    bne(ATS4)
    b(ATSEND)
    label(ATQGEN)
    # scores: sc[j] = q[i, head] . k[j, head], two rows of k at a time (j at r2, j + 1 at r7),
    # the last of an odd S alone; their max. r3 q's whole groups of 4 end, r8 _A, r9 q's head,
    # r10 its end, r11 the scores' walker, r12 their max, lr from a row's head end to the next
    # row's head
    ldr(r1, [r7, 52])
    mov(r9, r1)  # q[i, head]
    ldr(r4, [r7, 32])
    add(r4, r4, r1)
    mov(r10, r4)  # its end
    ldr(r3, [r7, 36])
    add(r3, r3, r1)  # its whole groups of 4 end
    ldr(r4, [r7, 28])
    ldr(r5, [r7, 32])
    sub(r4, r4, r5)
    data(2, 0x46A6)  # mov lr, r4: row - dlen
    ldr(r4, [r7, 4])
    mov(r11, r4)  # the scores' walker: sc
    mov(r4, 1)
    lsl(r4, r4, 31)
    mov(r12, r4)  # max = -2**31, below or at every score
    ldr(r4, [r7, 16])
    ldr(r5, [r7, 44])
    add(r2, r4, r5)  # k[0, head]
    label(ATSJ)
    mov(r5, r8)
    ldr(r5, [r5, 96])  # the scores' end
    mov(r4, r11)
    sub(r5, r5, r4)  # bytes of scores left
    cmp(r5, 4)
    bgt(ATKPAIR)
    beq(ATONE)
    b(ATSEND)
    label(ATKPAIR)
    mov(r5, r8)
    ldr(r5, [r5, 28])
    add(r7, r2, r5)  # k[j + 1, head]
    mov(r1, r9)
    mov(r0, 0)
    mov(r6, 0)
    cmp(r1, r3)
    beq(ATP1)
    label(ATP4)
    ldr(r4, [r1, 0])
    ldr(r5, [r2, 0])
    mul(r5, r4)
    add(r0, r0, r5)
    ldr(r5, [r7, 0])
    mul(r5, r4)
    add(r6, r6, r5)
    ldr(r4, [r1, 4])
    ldr(r5, [r2, 4])
    mul(r5, r4)
    add(r0, r0, r5)
    ldr(r5, [r7, 4])
    mul(r5, r4)
    add(r6, r6, r5)
    ldr(r4, [r1, 8])
    ldr(r5, [r2, 8])
    mul(r5, r4)
    add(r0, r0, r5)
    ldr(r5, [r7, 8])
    mul(r5, r4)
    add(r6, r6, r5)
    ldr(r4, [r1, 12])
    ldr(r5, [r2, 12])
    mul(r5, r4)
    add(r0, r0, r5)
    ldr(r5, [r7, 12])
    mul(r5, r4)
    add(r6, r6, r5)
    add(r1, 16)
    add(r2, 16)
    add(r7, 16)
    cmp(r1, r3)
    bne(ATP4)
    label(ATP1)
    data(2, 0x4551)  # cmp r1, r10: q's head done
    beq(ATP2)
    label(ATP1L)
    ldr(r4, [r1, 0])
    ldr(r5, [r2, 0])
    mul(r5, r4)
    add(r0, r0, r5)
    ldr(r5, [r7, 0])
    mul(r5, r4)
    add(r6, r6, r5)
    add(r1, 4)
    add(r2, 4)
    add(r7, 4)
    data(2, 0x4551)  # cmp r1, r10
    bne(ATP1L)
    label(ATP2)
    mov(r4, r11)
    str(r0, [r4, 0])
    str(r6, [r4, 4])
    add(r4, 8)
    mov(r11, r4)
    mov(r5, r12)
    cmp(r0, r5)
    ble(ATPN0)
    mov(r5, r0)
    label(ATPN0)
    cmp(r6, r5)
    ble(ATPN1)
    mov(r5, r6)
    label(ATPN1)
    mov(r12, r5)
    mov(r2, r7)
    data(2, 0x4472)  # add r2, lr: k[j + 2, head]
    b(ATSJ)
    label(ATONE)
    mov(r1, r9)
    mov(r0, 0)
    label(ATO1)
    ldr(r4, [r1, 0])
    ldr(r5, [r2, 0])
    mul(r4, r5)
    add(r0, r0, r4)
    add(r1, 4)
    add(r2, 4)
    data(2, 0x4551)  # cmp r1, r10
    bne(ATO1)
    mov(r4, r11)
    str(r0, [r4, 0])
    mov(r5, r12)
    cmp(r0, r5)
    ble(ATSEND)
    mov(r12, r0)
    label(ATSEND)
    # softmax_q14: e[j] at pb[j], their sum (r3). r6 the scores' walker, r7 their max, r1 the
    # exp table; r9 M_sm, r10 r_sm, r11 shift_sm, r12 dmax_sm, lr pb (the scores' end)
    mov(r7, r8)
    ldr(r4, [r7, 56])
    mov(r9, r4)
    ldr(r4, [r7, 64])
    mov(r10, r4)
    ldr(r4, [r7, 60])
    mov(r11, r4)
    mov(r5, r12)
    str(r5, [r7, 80])  # max
    ldr(r4, [r7, 84])
    mov(r12, r4)
    ldr(r2, [r7, 96])
    mov(r4, r2)
    data(2, 0x46A6)  # mov lr, r4
    ldr(r6, [r7, 4])
    mov(r1, r7)
    add(r1, 255)
    add(r1, 33)  # the exp table: _A + 288
    mov(r7, r5)
    mov(r3, 0)
    label(ATEJ)
    ldr(r4, [r6, 0])
    sub(r0, r7, r4)  # d = max - score >= 0
    mov(r5, 0)
    mov(r4, r12)
    cmp(r0, r4)
    bhi(ATEZ)  # d > dmax_sm: e = 0, no product (it may not fit 32 bits; idx >= 256 there)
    mov(r4, r9)
    mul(r0, r4)
    data(2, 0x4450)  # add r0, r10
    mov(r4, r11)
    asr(r0, r4)  # idx >= 0
    cmp(r0, 255)
    bgt(ATEZ)  # e = 0 past the table
    add(r4, r0, r0)
    data(2, 0x5B0D)  # ldrh r5, [r1, r4]: e(idx)
    label(ATEZ)
    str(r5, [r2, 0])
    add(r3, r3, r5)
    add(r6, 4)
    add(r2, 4)
    data(2, 0x4576)  # cmp r6, lr
    bne(ATEJ)
    mov(r7, r8)
    # R = 2**30 // sum, bit-serial (the quotient bit is the carry after cmp/sub): the last 17
    # of the 32 steps (sum >= 2**14, its max's e: the first 15 give quotient bits 0 and leave
    # the remainder 2**13 and the dividend's bits all shifted out)
    mov(r0, 0)
    mov(r1, 1)
    lsl(r1, r1, 13)
    mov(r2, 0)
    mov(r4, 17)
    label(ATRD)
    lsl(r0, r0, 1)
    adc(r1, r1)
    cmp(r1, r3)
    bcc(ATRD1)
    sub(r1, r1, r3)
    label(ATRD1)
    adc(r2, r2)
    sub(r4, 1)
    bne(ATRD)
    str(r2, [r7, 88])
    # p[j] = ((e << 14) + half) // sum
    ldr(r2, [r7, 96])
    lsr(r6, r3, 1)  # half
    ldr(r5, [r7, 88])  # R
    ldr(r7, [r7, 100])  # pend (r8 _A)
    label(ATPJ)
    ldr(r0, [r2, 0])
    mov(r1, 0)
    cmp(r0, 0)
    beq(ATPDONE)  # e = 0: p = half // sum = 0
    lsl(r0, r0, 14)
    add(r0, r0, r6)  # N
    lsr(r1, r0, 14)
    mul(r1, r5)
    lsr(r1, r1, 16)  # q0 <= N // sum
    mov(r4, r1)
    mul(r4, r3)
    sub(r0, r0, r4)  # N - q0 sum >= 0
    label(ATPFIX)
    cmp(r0, r3)
    bcc(ATPDONE)
    sub(r0, r0, r3)
    add(r1, 1)
    b(ATPFIX)
    label(ATPDONE)
    str(r1, [r2, 0])
    add(r2, 4)
    cmp(r2, r7)
    bne(ATPJ)
    mov(r7, r8)
    # ctx[i, c] = requant(sum_j p[j] v[j, c]), four columns at a time (r0, r3, r5, r6), then
    # one at a time; r8 pend, r9 the row stride, r10 _A (r7 holds a product)
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
    ldr(r4, [r7, 28])
    mov(r9, r4)  # row
    mov(r10, r7)
    label(ATCC)
    mov(r7, r10)
    ldr(r2, [r7, 108])
    ldr(r4, [r7, 112])
    sub(r4, r4, r2)  # bytes of the columns left
    cmp(r4, 12)
    bgt(ATQUAD)
    cmp(r4, 0)
    bne(ATSINGLE)
    b(ATCDONE)
    label(ATQUAD)
    ldr(r1, [r7, 96])
    mov(r0, 0)
    mov(r3, 0)
    mov(r5, 0)
    mov(r6, 0)
    label(ATCJ4)
    ldr(r4, [r1, 0])
    ldr(r7, [r2, 0])
    mul(r7, r4)
    add(r0, r0, r7)
    ldr(r7, [r2, 4])
    mul(r7, r4)
    add(r3, r3, r7)
    ldr(r7, [r2, 8])
    mul(r7, r4)
    add(r5, r5, r7)
    ldr(r7, [r2, 12])
    mul(r7, r4)
    add(r6, r6, r7)
    data(2, 0x444A)  # add r2, r9
    add(r1, 4)
    data(2, 0x4541)  # cmp r1, r8
    bne(ATCJ4)
    mov(r7, r10)  # ATREQ of the four (r0, r3, r5, r6), its parameters loaded once
    ldr(r4, [r7, 68])  # M_ctx
    mul(r0, r4)
    mul(r3, r4)
    mul(r5, r4)
    mul(r6, r4)
    ldr(r4, [r7, 76])  # r_ctx
    add(r0, r0, r4)
    add(r3, r3, r4)
    add(r5, r5, r4)
    add(r6, r6, r4)
    ldr(r4, [r7, 72])  # shift_ctx
    asr(r0, r4)
    asr(r3, r4)
    asr(r5, r4)
    asr(r6, r4)
    mov(r4, 127)
    cmp(r0, r4)
    ble(ATQH0)
    mov(r0, r4)
    label(ATQH0)
    cmp(r3, r4)
    ble(ATQH1)
    mov(r3, r4)
    label(ATQH1)
    cmp(r5, r4)
    ble(ATQH2)
    mov(r5, r4)
    label(ATQH2)
    cmp(r6, r4)
    ble(ATQH3)
    mov(r6, r4)
    label(ATQH3)
    mvn(r4, r4)  # -128
    cmp(r0, r4)
    bge(ATQL0)
    mov(r0, r4)
    label(ATQL0)
    cmp(r3, r4)
    bge(ATQL1)
    mov(r3, r4)
    label(ATQL1)
    cmp(r5, r4)
    bge(ATQL2)
    mov(r5, r4)
    label(ATQL2)
    cmp(r6, r4)
    bge(ATQL3)
    mov(r6, r4)
    label(ATQL3)
    ldr(r4, [r7, 92])  # ctx out
    str(r0, [r4, 0])
    str(r3, [r4, 4])
    str(r5, [r4, 8])
    str(r6, [r4, 12])
    add(r4, 16)
    str(r4, [r7, 92])
    ldr(r4, [r7, 108])
    add(r4, 16)
    str(r4, [r7, 108])
    b(ATCC)
    label(ATSINGLE)
    ldr(r1, [r7, 96])
    mov(r0, 0)
    label(ATCJ1)
    ldr(r4, [r1, 0])
    ldr(r5, [r2, 0])
    mul(r5, r4)
    add(r0, r0, r5)
    data(2, 0x444A)  # add r2, r9
    add(r1, 4)
    data(2, 0x4541)  # cmp r1, r8
    bne(ATCJ1)
    bl(ATREQ)
    ldr(r4, [r7, 108])
    add(r4, 4)
    str(r4, [r7, 108])
    b(ATCC)
    # requant r0 with M_ctx, shift_ctx into [-128, 127], store at ctx out and advance it
    # (uses r4 and r7 = _A only)
    label(ATREQ)
    mov(r7, r10)
    ldr(r4, [r7, 68])
    mul(r0, r4)
    ldr(r4, [r7, 76])
    add(r0, r0, r4)
    ldr(r4, [r7, 72])
    asr(r0, r4)
    mov(r4, 127)
    cmp(r0, r4)
    ble(ATRQHI)
    mov(r0, r4)
    label(ATRQHI)
    mvn(r4, r4)  # -128
    cmp(r0, r4)
    bge(ATRQLO)
    mov(r0, r4)
    label(ATRQLO)
    ldr(r4, [r7, 92])
    str(r0, [r4, 0])
    add(r4, 4)
    str(r4, [r7, 92])
    bx(lr)
    label(ATCDONE)
    ldr(r4, [r7, 52])
    ldr(r5, [r7, 28])
    add(r4, r4, r5)
    str(r4, [r7, 52])  # next query row
    ldr(r4, [r7, 48])
    sub(r4, 1)
    str(r4, [r7, 48])
    beq(ATNEXTH)
    b(ATQROW)
    label(ATNEXTH)
    ldr(r4, [r7, 44])
    ldr(r5, [r7, 32])
    add(r4, r4, r5)
    str(r4, [r7, 44])  # c0 += D
    ldr(r4, [r7, 40])
    sub(r4, 1)
    str(r4, [r7, 40])
    beq(ATDONE)
    b(ATHEAD)
    label(ATDONE)
    ldr(r4, [r7, 104])
    mov(r8, r4)
    pop({r4})
    mov(r12, r4)
    pop({r4})
    mov(r11, r4)
    pop({r4})
    mov(r10, r4)
    pop({r4})
    mov(r9, r4)
    data(2, 0xBD00)  # pop {pc}

    label(AD)
    data(2, 0xB500)  # push {lr}
    ldr(r2, [r3, 8])  # p
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
    beq(ADEND)
    label(ADLOOP)
    ldr(r4, [r0, 0])
    mul(r4, r6)
    ldr(r5, [r1, 0])
    mul(r5, r7)
    add(r4, r4, r5)
    data(2, 0x4444)  # add r4, r8
    asr(r4, r2)
    mov(r5, 127)
    cmp(r4, r5)
    ble(ADHIOK)
    mov(r4, r5)
    label(ADHIOK)
    mvn(r5, r5)  # -128
    cmp(r4, r5)
    bge(ADLOOK)
    mov(r4, r5)
    label(ADLOOK)
    str(r4, [r1, 0])
    add(r0, 4)
    add(r1, 4)
    cmp(r0, r3)
    bne(ADLOOP)
    label(ADEND)
    pop({r4})
    mov(r8, r4)
    data(2, 0xBD00)  # pop {pc}

    label(PO)
    data(2, 0xB500)  # push {lr}
    ldr(r2, [r3, 8])  # p
    mov(r7, r8)
    push({r7})
    ldr(r3, [r2, 4])
    lsl(r3, r3, 2)  # row = E * 4
    add(r7, r1, r3)
    mov(r8, r7)  # y end
    label(POCOL)
    mov(r4, r0)
    ldr(r6, [r2, 0])
    mul(r6, r3)
    add(r6, r6, r0)  # the column's end
    mov(r5, 0)
    label(POSUM)
    ldr(r7, [r4, 0])
    add(r5, r5, r7)
    add(r4, r4, r3)
    cmp(r4, r6)
    bne(POSUM)
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
    ble(POHIOK)
    mov(r5, r7)
    label(POHIOK)
    mvn(r7, r7)
    cmp(r5, r7)
    bge(POLOOK)
    mov(r5, r7)
    label(POLOOK)
    str(r5, [r1, 0])
    add(r1, 4)
    add(r0, 4)
    data(2, 0x4541)  # cmp r1, r8
    bne(POCOL)
    pop({r7})
    mov(r8, r7)
    data(2, 0xBD00)  # pop {pc}

    label(EM)
    data(2, 0xB500)  # push {lr}
    mov(r7, r3)
    mov(r4, r8)
    str(r4, [r7, 84])  # r8, restored at the end
    mov(r4, r9)
    str(r4, [r7, 88])  # r9, restored at the end
    mov(r4, r10)
    str(r4, [r7, 92])  # r10, restored at the end
    mov(r4, r11)
    str(r4, [r7, 96])  # r11, restored at the end
    mov(r4, r12)
    str(r4, [r7, 100])  # r12, restored at the end
    mov(r8, r7)  # _A
    str(r0, [r7, 12])  # xrow
    mov(r10, r1)  # y
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
    ldr(r4, [r6, 8])
    str(r4, [r7, 36])  # n_out
    ldr(r4, [r6, 12])
    mov(r12, r4)  # shift
    sub(r4, 1)
    mov(r5, 1)
    lsl(r5, r4)
    mov(r11, r5)  # rnd
    ldr(r4, [r6, 16])
    str(r4, [r7, 48])  # act_min
    ldr(r4, [r6, 20])
    str(r4, [r7, 52])  # act_max
    ldr(r4, [r6, 24])
    lsl(r4, r4, 2)
    str(r4, [r7, 56])  # bstep
    ldr(r4, [r7, 0])
    str(r4, [r7, 60])  # brow
    label(EMROW)
    mov(r7, r8)
    ldr(r5, [r7, 12])
    ldr(r4, [r7, 32])
    add(r4, r4, r5)
    str(r4, [r7, 40])  # x4end
    ldr(r4, [r7, 28])
    add(r4, r4, r5)
    str(r4, [r7, 80])  # xend
    ldr(r4, [r7, 60])
    str(r4, [r7, 64])  # bptr = brow
    ldr(r4, [r7, 4])
    mov(r9, r4)  # mptr = M
    ldr(r4, [r7, 36])
    str(r4, [r7, 72])  # outputs left
    ldr(r2, [r7, 20])  # w = W (its rows follow each other)
    cmp(r4, 4)
    blt(EMNOQUAD)
    ldr(r5, [r7, 76])
    cmp(r5, 16)  # four outputs a pass for a row of up to 16 inputs (EMQUAD)
    bgt(EMNOQUAD)
    b(EMQUAD)
    label(EMNOQUAD)
    cmp(r4, 2)
    bge(EMPAIR)
    b(EMSINGLE)
    label(EMPAIR)  # two outputs: acc0 r0 (W row o at r2), acc1 r6 (row o + 1 at r7)
    mov(r7, r8)
    ldr(r1, [r7, 12])
    ldr(r3, [r7, 40])
    ldr(r4, [r7, 64])
    ldr(r0, [r4, 0])
    ldr(r6, [r4, 4])
    add(r4, 8)
    str(r4, [r7, 64])
    ldr(r5, [r7, 76])
    add(r7, r2, r5)
    cmp(r1, r3)
    beq(EMPREST)
    label(EMP4)
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
    bne(EMP4)
    label(EMPREST)
    mov(r4, r8)
    ldr(r3, [r4, 80])  # xend
    cmp(r1, r3)
    beq(EMPREQ)
    label(EMP1)
    ldrb(r4, [r1, 0])
    data(2, 0xB264)  # sxtb r4, r4
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
    bne(EMP1)
    label(EMPREQ)
    mov(r2, r7)  # W row o + 2
    bl(DERQ2)
    mov(r7, r8)
    ldr(r4, [r7, 72])
    sub(r4, 2)
    str(r4, [r7, 72])
    cmp(r4, 2)
    blt(EMNOPAIR)
    b(EMPAIR)
    label(EMNOPAIR)
    cmp(r4, 0)
    beq(EMROWEND)
    label(EMSINGLE)  # the last output of an odd n_out
    mov(r7, r8)
    ldr(r1, [r7, 12])
    ldr(r3, [r7, 80])
    ldr(r4, [r7, 64])
    ldr(r0, [r4, 0])
    add(r4, 4)
    str(r4, [r7, 64])
    label(EMS1)
    ldrb(r4, [r1, 0])
    data(2, 0xB264)  # sxtb r4, r4
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r0, r0, r5)
    add(r1, 1)
    add(r2, 1)
    cmp(r1, r3)
    bne(EMS1)
    bl(DERQ)
    label(EMROWEND)
    mov(r7, r8)
    ldr(r4, [r7, 80])
    str(r4, [r7, 12])  # xrow = xend
    ldr(r4, [r7, 60])
    ldr(r5, [r7, 56])
    add(r4, r4, r5)
    str(r4, [r7, 60])  # brow += bstride
    ldr(r4, [r7, 24])
    sub(r4, 1)
    str(r4, [r7, 24])
    beq(EMDONE)
    b(EMROW)
    label(EMDONE)
    mov(r7, r8)
    ldr(r4, [r7, 100])
    mov(r12, r4)
    ldr(r4, [r7, 96])
    mov(r11, r4)
    ldr(r4, [r7, 92])
    mov(r10, r4)
    ldr(r4, [r7, 88])
    mov(r9, r4)
    ldr(r4, [r7, 84])
    mov(r8, r4)
    data(2, 0xBD00)  # pop {pc}
    # EMQUAD: DEQUAD's four outputs a pass, x[j] an int8
    label(EMQUAD)
    ldr(r1, [r7, 12])  # x row
    mov(r4, r12)
    push({r4, r7})  # shift, _A
    ldr(r4, [r7, 80])
    mov(r12, r4)  # xend
    ldr(r5, [r7, 76])
    mov(r8, r5)  # n_in: W's next row
    lsl(r4, r5, 1)
    add(r4, r4, r5)
    mov(r5, 1)
    sub(r4, r5, r4)
    data(2, 0x46A6)  # mov lr, r4: 1 - 3 n_in, from row o + 3 to row o's next column
    ldr(r4, [r7, 64])  # bptr
    ldr(r0, [r4, 0])
    ldr(r3, [r4, 4])
    ldr(r6, [r4, 8])
    mov(r5, r4)
    add(r5, 16)
    str(r5, [r7, 64])
    ldr(r7, [r4, 12])
    data(2, 0x4561)  # cmp r1, r12: no inputs (acc = b: the stream's requant, n_in 0)
    beq(EMQJE)
    mov(r5, r8)
    lsr(r5, r5, 1)  # carry: n_in odd
    bcc(EMQJ)
    sub(r1, 1)  # an odd row enters at the loop's second input
    b(EMQJ2)
    label(EMQJ)  # two inputs a loop step
    ldrb(r4, [r1, 0])
    data(2, 0xB264)  # sxtb r4, r4
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)  # sxtb r5, r5
    mul(r5, r4)
    add(r0, r0, r5)
    data(2, 0x4442)  # add r2, r8: row o + 1
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r3, r3, r5)
    data(2, 0x4442)  # row o + 2
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r6, r6, r5)
    data(2, 0x4442)  # row o + 3
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r7, r7, r5)
    data(2, 0x4472)  # add r2, lr: row o, the next column
    label(EMQJ2)
    ldrb(r4, [r1, 1])
    data(2, 0xB264)  # sxtb r4, r4
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)  # sxtb r5, r5
    mul(r5, r4)
    add(r0, r0, r5)
    data(2, 0x4442)  # add r2, r8: row o + 1
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r3, r3, r5)
    data(2, 0x4442)  # row o + 2
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r6, r6, r5)
    data(2, 0x4442)  # row o + 3
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)
    mul(r5, r4)
    add(r7, r7, r5)
    data(2, 0x4472)  # add r2, lr: row o, the next column
    add(r1, 2)
    data(2, 0x4561)  # cmp r1, r12
    bne(EMQJ)
    label(EMQJE)
    data(2, 0x4442)  # r2 = row o + 1: row o + 4 is three rows on
    data(2, 0x4442)
    data(2, 0x4442)
    pop({r4, r5})
    mov(r12, r4)  # shift
    mov(r8, r5)  # _A
    mov(r4, r9)
    ldrh(r1, [r4, 0])  # M[o]
    ldrh(r5, [r4, 2])
    mul(r0, r1)
    mul(r3, r5)
    ldrh(r1, [r4, 4])
    ldrh(r5, [r4, 6])
    mul(r6, r1)
    mul(r7, r5)
    add(r4, 8)
    mov(r9, r4)
    data(2, 0x4458)  # add r0, r11 (rnd)
    data(2, 0x445B)  # add r3, r11
    data(2, 0x445E)  # add r6, r11
    data(2, 0x445F)  # add r7, r11
    mov(r4, r12)
    asr(r0, r4)
    asr(r3, r4)
    asr(r6, r4)
    asr(r7, r4)
    mov(r5, r8)
    ldr(r4, [r5, 48])  # act_min
    cmp(r0, r4)
    bge(EMQL0)
    mov(r0, r4)
    label(EMQL0)
    cmp(r3, r4)
    bge(EMQL1)
    mov(r3, r4)
    label(EMQL1)
    cmp(r6, r4)
    bge(EMQL2)
    mov(r6, r4)
    label(EMQL2)
    cmp(r7, r4)
    bge(EMQL3)
    mov(r7, r4)
    label(EMQL3)
    ldr(r4, [r5, 52])  # act_max
    cmp(r0, r4)
    ble(EMQH0)
    mov(r0, r4)
    label(EMQH0)
    cmp(r3, r4)
    ble(EMQH1)
    mov(r3, r4)
    label(EMQH1)
    cmp(r6, r4)
    ble(EMQH2)
    mov(r6, r4)
    label(EMQH2)
    cmp(r7, r4)
    ble(EMQH3)
    mov(r7, r4)
    label(EMQH3)
    mov(r4, r10)
    str(r0, [r4, 0])
    str(r3, [r4, 4])
    str(r6, [r4, 8])
    str(r7, [r4, 12])
    add(r4, 16)
    mov(r10, r4)
    mov(r7, r8)
    ldr(r4, [r7, 72])
    sub(r4, 4)
    str(r4, [r7, 72])  # outputs left
    cmp(r4, 4)
    blt(EMQ3)
    b(EMQUAD)
    label(EMQ3)
    cmp(r4, 2)
    blt(EMQ1)
    b(EMPAIR)
    label(EMQ1)
    cmp(r4, 0)
    beq(EMQ0)
    b(EMSINGLE)
    label(EMQ0)
    b(EMROWEND)

    label(RE)
    data(2, 0xB500)  # push {lr}
    ldr(r2, [r3, 8])  # p
    ldr(r3, [r2, 0])
    lsl(r3, r3, 2)
    add(r3, r3, r1)  # y end
    cmp(r1, r3)
    beq(REEND)
    mov(r5, 0)
    label(RELOOP)
    ldr(r4, [r1, 0])
    cmp(r4, 0)
    bge(REPOS)
    str(r5, [r1, 0])
    label(REPOS)
    add(r1, 4)
    cmp(r1, r3)
    bne(RELOOP)
    label(REEND)
    data(2, 0xBD00)  # pop {pc}

    # conv (CV): r0 x [S_in, C] int32, r1 y [S_out, F], r2 W int8 [F, Cg, K], _A[0..2] = b, M, p
    # (attention_kernels.conv: grouped, so depthwise and pointwise alike). Per output row t and
    # output o: acc = b[o] + the sum over its group's Cg channels c and K taps of x[i, c] W
    # (i = t st - pad + k dil; a tap outside 0 <= i < S_in, one unsigned compare, adds
    # nothing), then dense's requant. r8 = dil C*4 (x's step a tap), r9 = dil; saved at
    # 108, 112. Scratch: 12 x, 16 y's walker, 20 W's walker, 24 b's, 28 M's, 32 rows left,
    # 36 i0, 40 outputs left, 44 c0*4 (the group's first channel), 48 outputs of the group
    # done, 52 channels left, 56 c*4, 60 W, 64 S_in, 68 C*4, 72 F, 76 K, 80 st, 84 Cg, 88 Fg,
    # 92 shift, 96 act_min, 100 act_max, 104 rnd.
    # A pointwise conv (one tap, one group, stride 1, no padding) is a dense over the S_out
    # rows: its parameters as dense's (rows, n_in, n_out, shift, act_min, act_max, bstride 0)
    # in _A[32..38], _A[2] pointed at them, and the dense kernel runs it (bit for bit the same
    # sums and requant; 2.5-4x fewer cycles a MAC than the grouped loop below).
    label(CV)
    data(2, 0xB500)  # push {lr}
    ldr(r6, [r3, 8])  # p
    ldr(r4, [r6, 16])
    cmp(r4, 1)  # K
    bne(CVGEN)
    ldr(r4, [r6, 20])
    cmp(r4, 1)  # stride
    bne(CVGEN)
    ldr(r4, [r6, 36])
    cmp(r4, 0)  # pad
    bne(CVGEN)
    ldr(r4, [r6, 28])  # Cg
    ldr(r5, [r6, 8])  # C
    cmp(r4, r5)
    bne(CVGEN)
    mov(r5, r3)
    add(r5, 128)  # dense's p
    ldr(r4, [r6, 0])
    str(r4, [r5, 0])  # rows = S_out
    ldr(r4, [r6, 8])
    str(r4, [r5, 4])  # n_in = C
    ldr(r4, [r6, 12])
    str(r4, [r5, 8])  # n_out = F
    ldr(r4, [r6, 40])
    str(r4, [r5, 12])  # shift
    ldr(r4, [r6, 44])
    str(r4, [r5, 16])  # act_min
    ldr(r4, [r6, 48])
    str(r4, [r5, 20])  # act_max
    mov(r4, 0)
    str(r4, [r5, 24])  # bstride
    str(r5, [r3, 8])
    bl(DE)
    data(2, 0xBD00)  # pop {pc}
    # A depthwise conv (Cg = Fg = 1) channel by channel, its state in _A[40..71] (base r7 =
    # _A + 160: 0..12 saved r8..r11, 16 b[o], 28 W's row, 32 M[o], 36 rnd, 40 shift,
    # 44 act_min, 48 act_max, 56 F*4, 60 st, 64 st C*4, 72 channels left, 76 b's walker, 80 M's
    # walker, 84 x's column, 88 y's column, 92 S_out, 96 -pad, 100 K, 104 4 dil, 108 the
    # step from an output's taps to the next's, 112 i0 past the last output, 116/120 r6/r1
    # while an output is bounded, DWF's next tap 0 and first i0); r8 = dil C*4, r9 = dil,
    # r10 = S_in, r11 = K. The outputs whose five taps are inside the window (all but the
    # edges) run them unrolled without bounds, their sums in one pass and their requant in a
    # second: ~70 cycles an output, against ~190 in the grouped loop below.
    label(CVGEN)
    ldr(r4, [r6, 28])
    cmp(r4, 1)  # Cg
    bne(CVNDW)
    ldr(r4, [r6, 32])
    cmp(r4, 1)  # Fg
    beq(CVDW)
    label(CVNDW)
    b(CVGRP)  # (the depthwise code is past a conditional branch's reach)
    label(CVDW)
    mov(r7, r3)
    add(r7, 160)
    mov(r4, r8)
    str(r4, [r7, 0])
    mov(r4, r9)
    str(r4, [r7, 4])
    mov(r4, r10)
    str(r4, [r7, 8])
    mov(r4, r11)
    str(r4, [r7, 12])
    ldr(r4, [r3, 0])
    str(r4, [r7, 76])  # b's walker
    ldr(r4, [r3, 4])
    str(r4, [r7, 80])  # M's walker
    str(r2, [r7, 28])  # W's row 0
    str(r1, [r7, 88])  # y's column 0
    ldr(r4, [r6, 0])
    str(r4, [r7, 92])  # S_out
    ldr(r4, [r6, 4])
    mov(r10, r4)  # S_in
    ldr(r4, [r6, 16])
    str(r4, [r7, 100])
    mov(r11, r4)  # K
    ldr(r5, [r6, 8])
    lsl(r5, r5, 2)  # C*4
    ldr(r4, [r6, 24])
    mov(r9, r4)  # dil
    mul(r4, r5)
    mov(r8, r4)  # dil C*4
    ldr(r4, [r6, 20])
    str(r4, [r7, 60])  # st
    mul(r4, r5)
    str(r4, [r7, 64])  # st C*4
    ldr(r4, [r6, 36])
    mov(r2, 0)
    sub(r4, r2, r4)
    str(r4, [r7, 96])  # -pad
    mul(r4, r5)
    add(r4, r4, r0)
    str(r4, [r7, 84])  # x's column 0: x - pad C*4
    ldr(r4, [r6, 12])
    str(r4, [r7, 72])  # channels = F
    lsl(r4, r4, 2)
    str(r4, [r7, 56])  # F*4
    ldr(r4, [r6, 40])
    str(r4, [r7, 40])  # shift
    sub(r4, 1)
    mov(r5, 1)
    lsl(r5, r4)
    str(r5, [r7, 36])  # rnd
    ldr(r4, [r6, 44])
    str(r4, [r7, 44])  # act_min
    ldr(r4, [r6, 48])
    str(r4, [r7, 48])  # act_max
    mov(r4, r9)
    lsl(r4, r4, 2)
    str(r4, [r7, 104])  # 4 dil: the last tap's index from the first's
    ldr(r4, [r7, 100])
    mov(r5, r8)
    mul(r4, r5)
    ldr(r5, [r7, 64])
    sub(r5, r5, r4)
    str(r5, [r7, 108])  # st C*4 - K dil C*4: from past an output's last tap to the next's first
    ldr(r4, [r7, 92])
    ldr(r5, [r7, 60])
    mul(r4, r5)
    ldr(r5, [r7, 96])
    add(r4, r4, r5)
    str(r4, [r7, 112])  # i0 past the last output: S_out st - pad
    ldr(r4, [r7, 92])
    cmp(r4, 0)
    bne(DWOUT)
    b(DWDONE)
    label(DWOUT)
    mov(r4, r9)
    str(r4, [r7, 20])  # dil
    mov(r4, r10)
    str(r4, [r7, 24])  # S_in
    ldr(r1, [r7, 96])  # the outputs whose taps are all inside the window (DWT's test), the
    ldr(r5, [r7, 92])  # same run of them in every channel: their count, for DWF
    mov(r6, 0)
    label(DWN)
    data(2, 0x4551)  # cmp r1, r10
    bcs(DWN1)
    ldr(r4, [r7, 104])
    add(r4, r4, r1)
    data(2, 0x4554)  # cmp r4, r10
    bcs(DWN1)
    add(r6, 1)
    label(DWN1)
    ldr(r4, [r7, 60])
    add(r1, r1, r4)  # i0 += st
    sub(r5, 1)
    bne(DWN)
    ldr(r4, [r7, 56])
    mul(r4, r6)
    str(r4, [r7, 68])  # their y span: n F*4
    ldr(r4, [r7, 60])
    mul(r4, r6)
    str(r4, [r7, 124])  # their i0 span: n st
    label(DWC)  # channel o: r1 i0, r2 W's row, r3 tap 0's address, r6 y's walker
    ldr(r4, [r7, 76])
    ldr(r5, [r4, 0])
    add(r4, 4)
    str(r4, [r7, 76])
    str(r5, [r7, 16])  # b[o]
    ldr(r4, [r7, 80])
    ldrh(r5, [r4, 0])
    str(r5, [r7, 32])  # M[o]
    add(r4, 2)
    str(r4, [r7, 80])
    ldr(r1, [r7, 96])  # i0 = -pad
    ldr(r3, [r7, 84])
    add(r4, r3, 4)
    str(r4, [r7, 84])  # the next channel's column
    ldr(r6, [r7, 88])
    add(r4, r6, 4)
    str(r4, [r7, 88])
    ldr(r2, [r7, 28])
    label(DWT)  # output row t
    ldr(r0, [r7, 16])  # acc = b[o]
    mov(r4, r11)
    cmp(r4, 5)  # five taps (the stem's) all inside the window: unrolled, no bounds
    bne(DWG)
    data(2, 0x4551)  # cmp r1, r10: the first tap outside?
    bcs(DWG)
    ldr(r4, [r7, 104])
    add(r4, r4, r1)
    data(2, 0x4554)  # cmp r4, r10: the last tap outside?
    bcs(DWG)
    b(DWF)  # the first of the channel's run of inside outputs: DWF runs them all
    label(DWR)  # requant (acc M + rnd) >> shift, clamped
    ldr(r4, [r7, 32])
    mul(r0, r4)
    ldr(r4, [r7, 36])
    add(r0, r0, r4)
    ldr(r4, [r7, 40])
    asr(r0, r4)
    ldr(r4, [r7, 44])
    cmp(r0, r4)
    bge(DWLO)
    mov(r0, r4)
    label(DWLO)
    ldr(r4, [r7, 48])
    cmp(r0, r4)
    ble(DWHI)
    mov(r0, r4)
    label(DWHI)
    str(r0, [r6, 0])
    ldr(r4, [r7, 56])
    add(r6, r6, r4)  # y's next row
    ldr(r4, [r7, 60])
    add(r1, r1, r4)  # i0 += st
    ldr(r4, [r7, 108])
    add(r3, r3, r4)  # the next output's tap 0
    label(DWTN)
    ldr(r4, [r7, 112])
    cmp(r1, r4)
    bne(DWT)
    ldr(r4, [r7, 28])
    ldr(r5, [r7, 100])
    add(r4, r4, r5)
    str(r4, [r7, 28])  # W's next row
    ldr(r4, [r7, 72])
    sub(r4, 1)
    str(r4, [r7, 72])
    beq(DWDONE)
    b(DWC)
    label(DWG)  # an output with a tap outside the window (or K != 5): a bound a tap
    str(r1, [r7, 120])
    str(r6, [r7, 116])
    mov(r6, r11)  # taps
    label(DWK)
    data(2, 0x4551)  # cmp r1, r10: i < 0 or i >= S_in (unsigned)
    bcs(DWS)
    ldr(r4, [r3, 0])
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)  # sxtb r5, r5
    mul(r5, r4)
    add(r0, r0, r5)
    label(DWS)
    add(r2, 1)
    data(2, 0x4449)  # add r1, r9 (i += dil)
    data(2, 0x4443)  # add r3, r8
    sub(r6, 1)
    bne(DWK)
    ldr(r2, [r7, 28])
    ldr(r1, [r7, 120])
    ldr(r6, [r7, 116])
    b(DWR)
    # The channel's run of outputs whose five taps are inside the window (n of them: 68, 124),
    # entered at its first with r0 = b[o], in two passes. Accumulate: the weights in r1, r2, r5,
    # r6, r7 (the state base pushed), r9 b[o], r10 y's walker, r11 the run's y end, r12 F*4 (the
    # runner's r12 saved at 52), lr the step from tap 4 to the next output's tap 0; each
    # output's int32 sum goes to its y word. Requant: y's words again, in place, with M, rnd,
    # shift, act_min and act_max held in r1, r2, r5, r6, r4 (one pass reloaded them from the
    # state an output). Then r9..r12 back and on to the tail (the next tap 0 kept at 116).
    label(DWF)
    str(r1, [r7, 120])  # i0 of the run's first output
    mov(r4, r12)
    str(r4, [r7, 52])
    mov(r9, r0)  # b[o]
    mov(r10, r6)
    ldr(r4, [r7, 68])
    add(r4, r4, r6)
    mov(r11, r4)
    ldr(r4, [r7, 56])
    mov(r12, r4)
    ldr(r4, [r7, 108])
    data(2, 0x4444)  # add r4, r8: st C*4 - 4 dil C*4
    data(2, 0x46A6)  # mov lr, r4
    push({r7})
    ldrb(r1, [r2, 0])
    data(2, 0xB249)  # sxtb r1, r1
    ldrb(r5, [r2, 2])
    data(2, 0xB26D)  # sxtb r5, r5
    ldrb(r6, [r2, 3])
    data(2, 0xB276)  # sxtb r6, r6
    ldrb(r7, [r2, 4])
    data(2, 0xB27F)  # sxtb r7, r7
    ldrb(r2, [r2, 1])
    data(2, 0xB252)  # sxtb r2, r2
    label(DWFT)
    mov(r0, r9)  # acc = b[o]
    ldr(r4, [r3, 0])
    mul(r4, r1)
    add(r0, r0, r4)
    data(2, 0x4443)  # add r3, r8
    ldr(r4, [r3, 0])
    mul(r4, r2)
    add(r0, r0, r4)
    data(2, 0x4443)
    ldr(r4, [r3, 0])
    mul(r4, r5)
    add(r0, r0, r4)
    data(2, 0x4443)
    ldr(r4, [r3, 0])
    mul(r4, r6)
    add(r0, r0, r4)
    data(2, 0x4443)
    ldr(r4, [r3, 0])
    mul(r4, r7)
    add(r0, r0, r4)
    data(2, 0x4473)  # add r3, lr: the next output's tap 0
    mov(r4, r10)
    str(r0, [r4, 0])  # the sum, requantized by the next pass
    data(2, 0x44E2)  # add r10, r12: y's next row
    data(2, 0x45DA)  # cmp r10, r11
    bne(DWFT)
    pop({r7})
    str(r3, [r7, 116])  # the tap 0 past the run
    ldr(r4, [r7, 68])
    mov(r3, r11)
    sub(r3, r3, r4)  # y of the run's first output
    ldr(r1, [r7, 32])  # M[o]
    ldr(r2, [r7, 36])  # rnd
    ldr(r5, [r7, 40])  # shift
    ldr(r6, [r7, 44])  # act_min
    ldr(r4, [r7, 48])  # act_max
    label(DWFQ)  # requant (acc M + rnd) >> shift, clamped, as DWR
    ldr(r0, [r3, 0])
    mul(r0, r1)
    add(r0, r0, r2)
    asr(r0, r5)
    cmp(r0, r6)
    bge(DWFLO)
    mov(r0, r6)
    label(DWFLO)
    cmp(r0, r4)
    ble(DWFHI)
    mov(r0, r4)
    label(DWFHI)
    str(r0, [r3, 0])
    data(2, 0x4463)  # add r3, r12: y's next row
    data(2, 0x455B)  # cmp r3, r11
    bne(DWFQ)
    mov(r6, r3)  # y's walker past the run
    ldr(r3, [r7, 116])
    ldr(r1, [r7, 120])
    ldr(r4, [r7, 124])
    add(r1, r1, r4)  # i0 past the run
    ldr(r2, [r7, 28])
    ldr(r4, [r7, 52])
    mov(r12, r4)
    ldr(r4, [r7, 20])
    mov(r9, r4)  # dil
    ldr(r4, [r7, 24])
    mov(r10, r4)  # S_in
    ldr(r4, [r7, 100])
    mov(r11, r4)  # K
    b(DWTN)
    label(DWDONE)
    ldr(r4, [r7, 0])
    mov(r8, r4)
    ldr(r4, [r7, 4])
    mov(r9, r4)
    ldr(r4, [r7, 8])
    mov(r10, r4)
    ldr(r4, [r7, 12])
    mov(r11, r4)
    data(2, 0xBD00)  # pop {pc}
    label(CVGRP)
    mov(r7, r3)
    mov(r4, r8)
    str(r4, [r7, 108])
    mov(r4, r9)
    str(r4, [r7, 112])
    str(r0, [r7, 12])
    str(r1, [r7, 16])
    str(r2, [r7, 60])
    ldr(r6, [r7, 8])  # p
    ldr(r4, [r6, 0])
    str(r4, [r7, 32])  # S_out
    ldr(r4, [r6, 4])
    str(r4, [r7, 64])  # S_in
    ldr(r4, [r6, 8])
    lsl(r4, r4, 2)
    str(r4, [r7, 68])  # C*4
    ldr(r4, [r6, 12])
    str(r4, [r7, 72])  # F
    ldr(r4, [r6, 16])
    str(r4, [r7, 76])  # K
    ldr(r4, [r6, 20])
    str(r4, [r7, 80])  # st
    ldr(r4, [r6, 24])
    mov(r9, r4)  # dil
    ldr(r5, [r7, 68])
    mul(r4, r5)
    mov(r8, r4)  # dil C*4
    ldr(r4, [r6, 28])
    str(r4, [r7, 84])  # Cg
    ldr(r4, [r6, 32])
    str(r4, [r7, 88])  # Fg
    ldr(r4, [r6, 36])
    mov(r5, 0)
    sub(r4, r5, r4)
    str(r4, [r7, 36])  # i0 = -pad
    ldr(r4, [r6, 40])
    str(r4, [r7, 92])  # shift
    sub(r4, 1)
    mov(r5, 1)
    lsl(r5, r4)
    str(r5, [r7, 104])  # rnd
    ldr(r4, [r6, 44])
    str(r4, [r7, 96])  # act_min
    ldr(r4, [r6, 48])
    str(r4, [r7, 100])  # act_max
    ldr(r4, [r7, 32])
    cmp(r4, 0)
    beq(CVDONE)
    label(CVT)  # output row t
    ldr(r4, [r7, 60])
    str(r4, [r7, 20])
    ldr(r4, [r7, 0])
    str(r4, [r7, 24])
    ldr(r4, [r7, 4])
    str(r4, [r7, 28])
    ldr(r4, [r7, 72])
    str(r4, [r7, 40])
    mov(r4, 0)
    str(r4, [r7, 44])
    str(r4, [r7, 48])
    label(CVO)  # output o
    ldr(r4, [r7, 24])
    ldr(r0, [r4, 0])  # acc = b[o]
    add(r4, 4)
    str(r4, [r7, 24])
    ldr(r4, [r7, 44])
    str(r4, [r7, 56])  # c = c0
    ldr(r4, [r7, 84])
    str(r4, [r7, 52])  # Cg channels
    ldr(r2, [r7, 20])
    label(CVC)  # channel c: r1 i, r3 x[i, c]'s address, r6 taps left, r7 S_in
    ldr(r1, [r7, 36])
    ldr(r3, [r7, 68])
    mul(r3, r1)
    ldr(r4, [r7, 12])
    add(r3, r3, r4)
    ldr(r4, [r7, 56])
    add(r3, r3, r4)
    ldr(r6, [r7, 76])
    ldr(r7, [r7, 64])
    label(CVK)
    cmp(r1, r7)
    bcs(CVSKIP)  # i < 0 or i >= S_in (unsigned)
    ldr(r4, [r3, 0])
    ldrb(r5, [r2, 0])
    data(2, 0xB26D)  # sxtb r5, r5
    mul(r5, r4)
    add(r0, r0, r5)
    label(CVSKIP)
    add(r2, 1)
    data(2, 0x4449)  # add r1, r9 (i += dil)
    data(2, 0x4443)  # add r3, r8
    sub(r6, 1)
    bne(CVK)
    mov(r7, r12)  # _A
    ldr(r4, [r7, 56])
    add(r4, 4)
    str(r4, [r7, 56])
    ldr(r4, [r7, 52])
    sub(r4, 1)
    str(r4, [r7, 52])
    bne(CVC)
    str(r2, [r7, 20])
    ldr(r4, [r7, 48])  # the group: after Fg outputs, the next Cg channels
    add(r4, 1)
    ldr(r5, [r7, 88])
    cmp(r4, r5)
    bne(CVNG)
    mov(r4, 0)
    ldr(r5, [r7, 44])
    ldr(r6, [r7, 84])
    lsl(r6, r6, 2)
    add(r5, r5, r6)
    str(r5, [r7, 44])
    label(CVNG)
    str(r4, [r7, 48])
    ldr(r4, [r7, 28])
    ldrh(r5, [r4, 0])  # M[o]
    add(r4, 2)
    str(r4, [r7, 28])
    mul(r0, r5)
    ldr(r4, [r7, 104])
    add(r0, r0, r4)
    ldr(r4, [r7, 92])
    asr(r0, r4)
    ldr(r4, [r7, 96])
    cmp(r0, r4)
    bge(CVLO)
    mov(r0, r4)
    label(CVLO)
    ldr(r4, [r7, 100])
    cmp(r0, r4)
    ble(CVHI)
    mov(r0, r4)
    label(CVHI)
    ldr(r4, [r7, 16])
    str(r0, [r4, 0])
    add(r4, 4)
    str(r4, [r7, 16])
    ldr(r4, [r7, 40])
    sub(r4, 1)
    str(r4, [r7, 40])
    beq(CVROW)
    b(CVO)
    label(CVROW)
    ldr(r4, [r7, 36])
    ldr(r5, [r7, 80])
    add(r4, r4, r5)
    str(r4, [r7, 36])  # i0 += st
    ldr(r4, [r7, 32])
    sub(r4, 1)
    str(r4, [r7, 32])
    beq(CVDONE)
    b(CVT)
    label(CVDONE)
    ldr(r4, [r7, 108])
    mov(r8, r4)
    ldr(r4, [r7, 112])
    mov(r9, r4)
    data(2, 0xBD00)  # pop {pc}

    # the runner: r0 the program's words, r1 xq (0: no load), r2 out (0: none), r3 load's n, end
    label(RUN)
    mov(r4, r12)
    push({r4})
    ldr(r4, [r0, 0])
    mov(r12, r4)  # _A (every kernel keeps r12 or restores it)
    push({r0, r2})  # words and out, for the end
    cmp(r1, 0)
    beq(WALK)
    ldr(r2, [r0, 4])  # x
    ldr(r5, [r3, 0])
    add(r5, r5, r1)  # the end of xq's n values
    ldr(r6, [r3, 4])  # x's end (zeros from n on)
    ldr(r4, [r0, 8])
    cmp(r4, 0)
    bne(LDW)
    add(r6, r6, r2)
    mov(r4, r1)
    orr(r4, r2)
    lsl(r4, r4, 30)
    bne(LDB)  # xq or x not word-aligned: byte by byte
    sub(r7, r5, r1)
    lsr(r7, r7, 2)
    lsl(r7, r7, 2)
    add(r7, r7, r1)  # the end of xq's whole words
    label(LDB4)  # int8 x (embed's input): four bytes a word, then the rest, then zeros
    cmp(r1, r7)
    beq(LDB)
    ldr(r4, [r1, 0])
    str(r4, [r2, 0])
    add(r1, 4)
    add(r2, 4)
    b(LDB4)
    label(LDB)
    cmp(r1, r5)
    beq(LDBZ)
    ldrb(r4, [r1, 0])
    strb(r4, [r2, 0])
    add(r1, 1)
    add(r2, 1)
    b(LDB)
    label(LDBZ)
    mov(r4, 0)
    label(LDBZ1)
    cmp(r2, r6)
    bcs(WALK)
    strb(r4, [r2, 0])
    add(r2, 1)
    b(LDBZ1)
    label(LDW)  # int32 x (dense's input): n sign-extended words, then zeros
    lsl(r6, r6, 2)
    add(r6, r6, r2)
    label(LDW1)
    cmp(r1, r5)
    beq(LDWZ)
    ldrb(r4, [r1, 0])
    data(2, 0xB264)  # sxtb r4, r4
    str(r4, [r2, 0])
    add(r1, 1)
    add(r2, 4)
    b(LDW1)
    label(LDWZ)
    mov(r4, 0)
    label(LDWZ1)
    cmp(r2, r6)
    bcs(WALK)
    str(r4, [r2, 0])
    add(r2, 4)
    b(LDWZ1)
    label(WALK)
    mov(r7, r12)
    ldr(r4, [r0, 20])  # steps
    mov(r5, 28)
    mul(r4, r5)
    add(r0, 24)
    str(r0, [r7, 116])
    add(r0, r0, r4)
    str(r0, [r7, 120])
    label(STEP)
    mov(r7, r12)
    ldr(r6, [r7, 116])
    ldr(r4, [r7, 120])
    cmp(r6, r4)
    beq(EXIT)
    ldr(r0, [r6, 4])
    ldr(r1, [r6, 8])
    ldr(r2, [r6, 12])
    ldr(r4, [r6, 16])
    str(r4, [r7, 0])
    ldr(r4, [r6, 20])
    str(r4, [r7, 4])
    ldr(r4, [r6, 24])
    str(r4, [r7, 8])
    ldr(r4, [r6, 0])  # the kernel's code
    add(r6, 28)
    str(r6, [r7, 116])
    mov(r3, r7)
    cmp(r4, 0)
    bne(C0)
    bl(DE)
    b(STEP)
    label(C0)
    cmp(r4, 1)
    bne(C1)
    bl(AT)
    b(STEP)
    label(C1)
    cmp(r4, 2)
    bne(C2)
    bl(AD)
    b(STEP)
    label(C2)
    cmp(r4, 3)
    bne(C3)
    bl(PO)
    b(STEP)
    label(C3)
    cmp(r4, 4)
    bne(C4)
    bl(EM)
    b(STEP)
    label(C4)
    cmp(r4, 5)
    bne(C5)
    bl(RE)
    b(STEP)
    label(C5)
    cmp(r4, 6)
    bne(C6)
    bl(CV)
    b(STEP)
    label(C6)
    b(STEP)
    label(EXIT)  # out: y's nc logits copied, r0 their argmax (the first maximum)
    pop({r2, r3})  # r2 words, r3 out
    mov(r0, 0)
    cmp(r3, 0)
    beq(DONE)
    ldr(r1, [r2, 12])  # y
    ldr(r4, [r2, 16])
    mov(r2, r3)  # out
    mov(r3, r4)  # nc
    ldr(r5, [r1, 0])
    str(r5, [r2, 0])
    mov(r6, 1)
    label(OUT)
    cmp(r6, r3)
    beq(DONE)
    lsl(r4, r6, 2)
    add(r7, r4, r1)
    ldr(r7, [r7, 0])
    add(r4, r4, r2)
    str(r7, [r4, 0])
    cmp(r7, r5)
    ble(OUTN)
    mov(r5, r7)
    mov(r0, r6)
    label(OUTN)
    add(r6, 1)
    b(OUT)
    label(DONE)
    pop({r4})
    mov(r12, r4)


# The kernels' codes in a program (the order of _run's dispatch)
_DENSE = const(0)
_ATTN = const(1)
_ADD = const(2)
_POOL = const(3)
_EMBED = const(4)
_RELU = const(5)
_CONV = const(6)


# one step called by itself (a kernel of INT8 called directly, e.g. by the stream's embed):
# a one-step program in _ONE, run by _run
@micropython.viper
def _one(code: int, x: ptr8, y: ptr8, c: ptr8, d: ptr8, e: ptr8, p: ptr8):
    s = ptr32(_ONE)
    s[0] = int(ptr32(_A))
    s[5] = 1
    s[6] = code
    s[7] = int(x)
    s[8] = int(y)
    s[9] = int(c)
    s[10] = int(d)
    s[11] = int(e)
    s[12] = int(p)
    _run(_ONE, 0, 0, 0)


def dense(x, y, w, b, m, p):
    _one(_DENSE, x, y, w, b, m, p)


def embed(x, y, w, b, m, p):
    _one(_EMBED, x, y, w, b, m, p)


def attn(q, k, v, ctx, sc, p):
    _one(_ATTN, q, k, v, ctx, sc, p)


def add(x, y, _a, _b, _c, p):
    _one(_ADD, x, y, 0, 0, 0, p)


def pool(x, y, _a, _b, _c, p):
    _one(_POOL, x, y, 0, 0, 0, p)


def relu(y, _a, _b, _c, _d, p):
    _one(_RELU, 0, y, 0, 0, 0, p)


def conv(x, y, w, b, m, p):
    _one(_CONV, x, y, w, b, m, p)


def _program(words, _b, _c, _d, _e, _f):
    # a fused step (fuse): its program run in one call
    _run(words, 0, 0, 0)


@micropython.viper
def _addr(x: ptr8) -> int:
    return int(x)


_CODES = {dense: _DENSE, attn: _ATTN, add: _ADD, pool: _POOL, embed: _EMBED, relu: _RELU,
          conv: _CONV}  # fmt: skip


def fuse(prog):
    """prog with each run of consecutive assembler steps as one step: a program of (code,
    buffer addresses) words that _run walks in one call (a call into the assembler costs
    ~20 µs on the Pico: Iris has 8 steps). A step whose kernel is not an assembler one (conv,
    myquery, myattn: viper) stays a step of its own between the runs. The buffers stay
    referenced by the run's steps (kept in the fused step) and never move."""
    out = []
    run = []
    for step in prog:
        if step[0] in _CODES:
            run.append(step)
        else:
            if run:
                out.append(_fused(run))
                run = []
            out.append(step)
    if run:
        out.append(_fused(run))
    return out


def _fused(run):
    """One step that runs the assembler steps `run` in one call to _run: its words are a
    header (_A, x, x's kind, y, nc: set by whole(); the step count) and 7 words a step."""
    words = array.array("I", [_addr(_A), 0, 0, 0, 0, len(run)] + [0] * (7 * len(run)))
    i = 6
    for st in run:
        words[i] = _CODES[st[0]]
        for j in range(1, 7):
            words[i + j] = 0 if st[j] is None else _addr(st[j])
        i += 7
    return (_program, words, run, None, None, None, None)


def setup(m):
    """A Model's int8 programs for this set, here so that a board without it never loads the
    code: the steps fused (`fuse`), and where every step is an assembler one, the program as
    one call (`whole`: the load, the steps and the argmax; m._run1, and m._tail1 for
    the Stream's run_tokens of a seq model), which m.run_int8 then makes (`_checked`)."""
    m._prog8 = fuse(m._prog8)
    m._run1 = whole(m._prog8, m._x8, m._y8, m.n_classes, not m.seq)
    if m.seq:
        m._tail8 = fuse(m._tail8)
        m._tail1 = whole(m._tail8, m._x8, m._y8, m.n_classes, False)
    if m._run1 is not None:
        if m.seq:
            m._window(m.steps)  # the counts of a full window: _loadp[2] is a valid n from now
        m.run_int8 = _checked(m, type(m).run_int8)


def _checked(m, run_int8):
    """Model m's run_int8 as an instance attribute (it shadows the method): the common call,
    arrays of the model's sizes on the n steps of the last run (n None: T), straight into the
    one call, with the method's checks compiled by the native emitter; any other call goes to
    the method (`run_int8`), which checks it, raises, or sets the counts for a new n. On the
    Pico's clock the method's bytecode before the call costs ~115 µs, a third of Iris; this
    ~20 µs. A closure over one tuple: a call with at most 5 arguments and cells allocates
    nothing (more: MicroPython copies them to the heap). The program and the load's sizes go
    to the assembler as addresses (ints pass as they are; an array is looked up as a buffer,
    ~1.5 µs each); m keeps both arrays."""
    lp = m._loadp
    st = (_run, _addr(m._run1[1]), lp, _addr(lp), m.steps, m.input_len, m.n_classes, m,
          run_int8, array.array, len, type)  # fmt: skip

    @micropython.native
    def run(xq, out, n=None):
        call, words, lp, lp_at, T, nx, nc, m, run_int8, arr, n_of, type_of = st
        if n is None:
            n = T
        # lp[2]: the n the counts are set for (1..T); xq of input_len >= n*C int8
        if n == lp[2] and type_of(xq) is arr and type_of(out) is arr and n_of(xq) == nx:
            if n_of(out) >= nc:
                return call(words, xq, out, lp_at)
        return run_int8(m, xq, out, n)

    return run


def whole(prog, x, y, nc, x_words):
    """The fused program `prog` as one call when it is one fused step (every step an assembler
    one): (run, words), where run(words, xq, out, lp) loads lp[0] int8 of xq into x (int32
    words if x_words, else int8) with zeros up to lp[1], runs the steps, copies y's nc
    int32 logits into out and returns their argmax (the first maximum). Else None."""
    if len(prog) != 1 or prog[0][0] is not _program:
        return None
    words = prog[0][1]
    words[1] = _addr(x)
    words[2] = 1 if x_words else 0
    words[3] = _addr(y)
    words[4] = nc
    return (_run, words)


INT8 = (dense, relu, attn, pool, myquery, myattn, add, embed, load, conv)
