# Device (MicroPython; also runs unchanged under CPython): compiling a rocket model into steps.
"""`build(blob, kernels, float_kernels, bufs)` of a rocket model (op 0 rocket, opcode 12:
MiniRocket's transform, docs/quantization.md "rocket"), called by attention_build.build (this
module registers its `buffers` and `build` in attention_build.KINDS for opcode 12 when
imported; attention.Model imports it for a rocket blob): the rocket op's two steps, then the
ops after it (a row model on its K features: the dense head) built by attention_build itself.

- rocket_in (s = [s_in] for a float program's own float32 window; None: the int32 window of
  grid values, which the float program beside an int8 program reads too): the window onto
  the pooled grid xp (block exponent, P steps summed), with margins of M0 = 4·(the largest
  dilation) zero steps. At P = 1 the int32 window is xp's interior itself (a memoryview of
  its S·C values past the margin): rocket_in turns each value into its pooled step in place,
  (x + 2**e // 2) >> e, so the window is consumed by a run (its caller quantizes or loads it
  again before the next; 5.8 KB less for a window of 1,460 steps);
- rocket (float flag p[11]): the groups' convolutions, counts and features into the K
  features buffer the head reads.
The int8 program takes attention_thumb_rocket's (the hot loops in Thumb assembler) beside the
thumb set, attention_viper_rocket's beside another compiled set (viper, native; or thumb where
its rocket module cannot import) where the port has the viper emitter, else
attention_kernels_rocket's (the pure ones, which the float program always runs); and points
attention_kernels_rocket.load, the int32 window's load attention.py takes after the build, at
that module's.
Both steps share their parameter array p (rocket_in writes the exponent p[8]; p[0] = n', the
window's pooled steps, is set before each run through `rows`). The int32 window, xp and the
scratch A (the shared sums and a group's thresholds) serve both programs (they never run at
once, and each writes all it reads). The group and feature tables are packed once here: tab
(per group d, pad, i0, i1, i2, channels, features, bias exponent, then its channels) and ft
(per feature b, z, M).

Load-time only, dropped with attention_build.
"""

import array
import sys

import attention_build
import attention_kernels_rocket as _kr
from attention_build import _zeros


class _Tail:
    """The ops after the rocket op, as attention_build.build takes a blob: a row model of K
    features."""

    def __init__(self, ops, K):
        self.ops = ops
        self.n_features = K


def buffers(ops, int8, flt, shared=False):
    """[(window, tail buffers) or None, (…) or None] of the int8 and the float program: each
    its input window (S·P·C) and the buffers of the ops after the rocket op
    (attention_build.buffers on its K features). The window is the int8 program's int32 one
    for both: the float program reads the input grid too (attention.Model.run_float puts a
    window on it with quantize, as for the int8 path), so it needs no float32 window of its
    own (5.8 KB for a window of 1,460 steps); a float program alone (no int8 program) has one.
    At P = 1 the int32 window is None here: it is xp's interior, which `build` allocates
    (xp's margins come from the groups' dilations, which the op records do not give).
    `shared` is not used: the tails keep their own arrays."""
    ip = ops[0].ip
    n = -(-ip["T"] // ip["P"]) * ip["P"] * ip["C"]
    tail = attention_build.buffers(ops[1:], ip["K"], int8, flt)
    out = [None, None]
    win = None
    if tail[0] is not None:
        win = _zeros("i", n) if ip["P"] > 1 else None
        out[0] = (win, tail[0])
    if tail[1] is not None:
        out[1] = (_zeros("f", n) if tail[0] is None else win, tail[1])
    return out


def _tables(op):
    """(tab, ft, the largest dilation, the most features of a group) of the op's tensors."""
    t = op.t
    g, ch, b, z, m = t["grp"], t["ch"], t["b"], t["z"], t["m"]
    tab = array.array("i", range(len(g) + len(ch)))
    ft = array.array("i", range(3 * len(b)))
    ti = ci = 0
    dmax = nmax = 0
    for r in range(0, len(g), 8):
        for j in range(8):
            tab[ti + j] = g[r + j]
        dmax = max(dmax, g[r])
        nmax = max(nmax, g[r + 6])
        ti += 8
        for _ in range(g[r + 5]):
            tab[ti] = ch[ci]
            ti += 1
            ci += 1
    for f in range(len(b)):
        ft[3 * f] = b[f]
        ft[3 * f + 1] = z[f]
        ft[3 * f + 2] = m[f]
    return tab, ft, dmax, nmax


def _int8_kernels(kernels):
    """(rocket_in, rocket, load of the int32 window) of the int8 program beside the kernel set
    whose INT8 tuple is `kernels`: attention_thumb_rocket's beside the thumb set, the viper
    ones beside another compiled set (or the thumb set where its rocket module cannot
    import), the pure ones beside the pure set."""
    if kernels[0] is __import__("attention_kernels").dense:
        return _kr.rocket_in, _kr.rocket, _kr.copy
    th = sys.modules.get("attention_thumb")
    if th is not None and kernels is th.INT8:
        try:
            import attention_thumb_rocket as t

            return t.rocket_in, t.rocket, t.load
        except (ImportError, SyntaxError, ValueError):  # no inline assembler here
            pass
    try:
        import attention_viper_rocket as v

        return v.rocket_in, v.rocket, v.load
    except (ImportError, SyntaxError, ValueError):  # no viper emitter on this port
        pass
    return _kr.rocket_in, _kr.rocket, _kr.copy


def build(blob, kernels, float_kernels, bufs):
    """(int8 program, or None when `kernels` is None, float program, or None when
    `float_kernels` is) of a rocket model, each (steps, input window, output buffer, rows,
    pools): the rocket op's two steps, then the tail's."""
    op = blob.ops[0]
    ip = op.ip
    C, P, K = ip["C"], ip["P"], ip["K"]
    S = -(-ip["T"] // P)
    tab, ft, dmax, nmax = _tables(op)
    xp = _zeros("i", (S + 8 * dmax) * C)  # the pooled grid and its zero margins
    # the int8 program's window (the float program's too beside it): at P = 1 xp's interior
    win = None if bufs[0] is None else bufs[0][0]
    if bufs[0] is not None and P == 1:
        win = memoryview(xp)[4 * dmax * C : (4 * dmax + S) * C]
    A = _zeros("i", S * C + nmax)
    bits, G = ip["bits"], ip["G"]
    tail = _Tail(blob.ops[1:], K)
    tb = [None if b is None else b[1] for b in bufs]
    prog8, progf = attention_build.build(tail, kernels, float_kernels, tb)
    blob.ops[0] = op = None
    out = []
    for ks, prog, b, fl in ((kernels, prog8, bufs[0], 0), (float_kernels, progf, bufs[1], 1)):
        if ks is None:
            out.append(None)
            continue
        p = array.array("i", [S, S, C, P, 4 * dmax, G, K, ip["shift"], 0,
                              -(1 << (bits - 1)), (1 << (bits - 1)) - 1, fl, ip["N"]])  # fmt: skip
        # the float program on the int8 program's window reads grid values, as the int8 one
        x = b[0] if win is None else win  # win None: a float program alone, its own window
        s = None if win is not None else array.array("f", [blob.input_scale])
        if fl:
            k_in, k_roc = _kr.rocket_in, _kr.rocket
        else:  # and the int32 window's load attention.py takes right after this build
            k_in, k_roc, _kr.load = _int8_kernels(ks)
        steps = ((k_in, x, xp, s, None, None, p), (k_roc, xp, prog[1], tab, ft, A, p))
        out.append((steps + prog[0], x, prog[2], ((p, 0, 1, 1),), ()))
    return out[0], out[1]


attention_build.KINDS[12] = (buffers, build)  # op 0 rocket: MiniRocket's transform
