# Device (MicroPython; also runs unchanged under CPython): classify a live stream of steps.
"""A sliding window over a loaded Model: steps in, a decision every `hop` steps.

    from attention import Model
    from attention_stream import Stream
    s = Stream(Model("model.bin"), hop=10, smooth=3, threshold=0.6)  # reuse=True
    if s.push(step):                  # C numbers (one step); True when a decision was made
        print(s.label(), s.score, s.us)
    n = s.push_block(buf, k)          # k steps of C float32 little-endian in buf (a FIFO
                                      # read, a replay file): how many decisions were made

A ring holds the last T steps as int8, each value quantized once when it arrives. When the
ring is full (T steps) and then every `hop` steps, the ring is unrolled, oldest step first,
into the model's int8 input buffer and `Model.run_int8(xq, logits, T)` runs on it: a
decision is exactly run_int8 of that window (docs/stream.md). After construction nothing
here allocates: `push` and `push_block` run under `micropython.heap_lock()` (a step's float
objects are the caller's; their bits are read with struct.pack_into, never a float op).

Quantizing without floats: `Model.quantize` is `clamp(floor((x - mean)/std/s_in + 0.5))`, a
non-decreasing function of x. At construction, for each channel c and k in -127..127, the
smallest float32 x with quantize(x) >= k is found by asking `Model.quantize` itself (so its
arithmetic, single or double precision, is the reference), stored as an integer order key
of the float32's bits. A value's int8 is then the number of thresholds at or below its key,
minus 128: a binary search of 8 integer compares, equal to `Model.quantize(float32(x))` for
every float32 x. Values are read as float32 (what array('f'), a sensor on a
single-precision port and the replay file hold); NaN or inf raises ValueError, as quantize.
Tables: 255 (int16 hi, uint16 lo) order keys per channel, 1 KB per channel in 510-byte arrays.
A rocket model's wider grid (mean 0, std and s_in powers of two: docs/quantization.md) needs no
table: there u = x / 2**k_c exactly, so its ring (and xq) hold the model's own int32 values,
each clamp(floor(u + 0.5)) from the float32's sign, exponent and significand in integer shifts
(`_put_wide`), equal to `Model.quantize` as well; it streams without the patch reuse.

Decision fields (updated in place): `logits` (array('i'), real logits are logit_scale times
these), `cls` (its first argmax), `prob` (array('i') Q14, this decision's softmax),
`smoothed` (first argmax of the sum of the last `smooth` decisions' `prob`), `score` (that
class's mean Q14 probability over those decisions, 16384 = 1.0), `uncertain` (score below
`threshold`, given as a fraction, kept as round(threshold*16384)), `us` (µs of run_int8, or
of the patch reuse's work for the decision),
`decisions` (count). `on_decision(stream)` is called after each decision when given.

Patch reuse (a seq model whose T and `hop` are multiples of the patch size P; `reuse=False`
turns it off, and so does a heap with no free block for its sums: `self.reuse` says which):
every window then starts at a patch of the ring, so a patch's embed work is done once, not
once per window it is in. The embed (docs/quantization.md) is, for token s of a window
and output o, requant(acc[s, o] + b_q[s, o], M[o], shift, lo, hi), acc[s, o] = sum_i
xq[s*P*C + i] W_q[o, i]. acc depends on the patch alone: when a patch's P steps are in the ring,
its E sums go into rows j and S + j of `_sums` [2S, E] (j its ring slot: the window whose oldest
patch is k reads rows k..k+S-1 in one run). b_q[s] depends on the token's place, so a decision
requantizes all S*E (cheap) and then runs the rest of the network, run_tokens:
logits bit for bit those of run_int8 on the window. All of it runs on the model's own int8
kernels (pure, native or viper), `dense` with p = rows, n_in, n_out, shift, lo, hi, bstride:
- a patch's sums: the embed kernel on its P*C int8 with b = 0, M = 2, shift = 1 and the clamp
  at +-(2**30 - 1): (2v + 1) >> 1 = v, the identity on the sum (v within the exporter's
  small-int budget, as the embed's own);
- acc + b_q: dense with 1 input and 1 output per row (W = 1, M = 2, shift = 1), S*E rows;
- the requantization: dense with n_in = 0 (acc = b), in place, the embed's M, shift, lo, hi.
`us` then counts the sums of the patches that arrived since the last decision (timed as they
arrive) plus the requantization and run_tokens. Tables: 8*S*E bytes of sums.

Probabilities without floats (the host runs this same file under CPython, so host and board
agree on every integer): d_c = max(logits) - logits[c], clamped to 65535; u_c = (d_c*M) >> SH,
the difference in 1/64 of a bit of log2 (M / 2**SH = logit_scale / ln 2 * 64, M < 2**14,
from the float32 bits of logit_scale and round(2**40 / ln 2) in integers); e_c =
_EXP2[u & 63] >> (u >> 6) (0 from 15 bits on), _EXP2[f] = round(2**14 * 2**(-f/64));
prob[c] = (e_c << 14) // sum(e). Every product stays below 2**30 (a small int on 32-bit
ports).

References: DESIGN §12; emlearn-micropython's HAR example (window, hop, FIFO blocks); Edge
Impulse's continuous mode (a moving average over decisions); docs/quantization.md.
"""

import array
import math
import struct

try:
    from micropython import const
except ImportError:  # CPython

    def const(x):
        return x


try:
    from time import ticks_diff, ticks_us
except ImportError:  # CPython
    from time import perf_counter_ns

    def ticks_us():
        return perf_counter_ns() // 1000

    def ticks_diff(a, b):
        return a - b


_K = const(255)  # thresholds per channel (k = -127..127)
_BIG = const(0x3FFFFFFF)  # 2**30 - 1: the clamp of a sum (the largest small int, 32-bit ports)
_KEY_MAX = const(0x7F7FFFFF)  # order key of the largest finite float32
_INV_LN2_Q40 = 1586259972792  # round(2**40 / ln 2)
_EXP2 = (
    16384, 16208, 16033, 15860, 15689, 15520, 15353, 15188, 15024, 14862, 14702, 14544, 14387,
    14232, 14079, 13927, 13777, 13629, 13482, 13337, 13193, 13051, 12910, 12771, 12634, 12498,
    12363, 12230, 12098, 11968, 11839, 11711, 11585, 11460, 11337, 11215, 11094, 10975, 10856,
    10739, 10624, 10509, 10396, 10284, 10173, 10064, 9955, 9848, 9742, 9637, 9533, 9431, 9329,
    9228, 9129, 9031, 8933, 8837, 8742, 8648, 8555, 8463, 8371, 8281,
)  # fmt: skip  # round(2**14 * 2**(-f/64)), f = 0..63


def _zeros(typecode, n):
    """A zeroed array('h'/'H'/'i') of n items in one allocation: a range has a length, so
    the array is sized once, with no temporary bytes(n) beside it (after a model's load the
    largest free block may hold one copy, not two)."""
    a = array.array(typecode, range(n))
    for i in range(n):
        a[i] = 0
    return a


def _float(key):
    """The float32 whose order key is `key` (|key| <= _KEY_MAX), as a float."""
    bits = key if key >= 0 else 0x80000000 | -key
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _key(x):
    """The order key of float32(x): its bits, negated magnitude for a negative x."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    return bits if bits < 0x80000000 else -(bits & 0x7FFFFFFF)


def _smallest_key(k, guess, prev, found, c):
    """The smallest order key x in [prev, _KEY_MAX] with quantize(x) >= k, into found[c]; k
    is reached at _KEY_MAX at the latest, and quantize is monotone. A generator: it yields
    each key it probes and is sent that key's int8. The bracket (a, b], q(a) < k <= q(b),
    gallops from `guess` (> prev), then halves."""
    s = 1
    b = guess
    if (yield guess) >= k:
        a = max(guess - s, prev)
        while (yield a) >= k:
            if a == prev:  # k is reached at prev already
                found[c] = prev
                return
            b = a
            s *= 2
            a = max(a - s, prev)
    else:
        a = guess
        b = min(guess + s, _KEY_MAX)
        while (yield b) < k:
            a = b
            s *= 2
            b = min(b + s, _KEY_MAX)
    while b - a > 1:
        m = (a + b) // 2
        if (yield m) >= k:
            b = m
        else:
            a = m
    found[c] = b


def _log2(x):
    """k for a float32 x = 2**k (a positive normal power of two), else ValueError."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if bits & 0x807FFFFF or not 0 < bits >> 23 < 0xFF:
        raise ValueError("stream: a rocket model's scale %r is not a power of two" % x)
    return (bits >> 23) - 127


def logit_multiplier(logit_scale):
    """(M, SH): M / 2**SH = logit_scale / ln 2 * 64, M < 2**14 as large as SH <= 30 allows,
    in integers from the float32 bits of logit_scale (no port's float rounding in it)."""
    bits = struct.unpack("<I", struct.pack("<f", logit_scale))[0]
    e = (bits >> 23) & 0xFF
    if bits >> 31 or e == 0 or e == 0xFF:
        raise ValueError("stream: logit_scale %r is not a positive normal number" % logit_scale)
    mant = (bits & 0x7FFFFF) | 0x800000  # logit_scale = mant * 2**(e - 150)
    prod = mant * _INV_LN2_Q40  # logit_scale / ln 2 * 64 = prod * 2**(e - 150 - 40 + 6)
    for sh in range(30, -1, -1):
        k = 184 - e - sh  # M = round(prod / 2**k)
        m = (prod + (1 << (k - 1))) >> k if k > 0 else prod << -k
        if m < 16384:
            return max(m, 1), sh
    raise ValueError("stream: logit_scale %r is too large" % logit_scale)


def run_tokens(m, out):
    """Model m's run_int8 of a full window (T steps) from its embed output on: the steps after
    the embed step `m.embed` = (kernel, window, tokens, W_q, b_q, M, p), on the [S, E] tokens
    written into `tokens` with m's kernels (`m.int8_kernels`), here from the patch sums the
    Stream keeps. Seq models, int8. Returns the argmax; allocates nothing. (Here, not in
    Model: its bytecode stays off the heap while a model loads without a Stream.)"""
    if m._loadp[2] != m.steps:  # the token counts as the last run left them
        m._window(m.steps)
    run = m._tail1
    if run is not None and type(out) is array.array:  # thumb: the steps and the argmax in
        return run[0](run[1], 0, out, m._loadp)  # one call (no load: xq 0)
    return m._run8(m._tail8, out)


class Stream:
    """Sliding-window classification of a step stream over `model` (a loaded Model with int8
    weights): `hop` steps between decisions (>= 1), `smooth` decisions averaged (>= 1),
    `threshold` (0..1 or None) below which the smoothed decision is uncertain; `reuse`: the
    patch reuse where the windows allow it (then `self.reuse` is True)."""

    def __init__(self, model, hop, smooth=1, threshold=None, on_decision=None, reuse=True):
        if not model.quantized:
            raise ValueError("stream: the blob has float32 weights only; export it as int8")
        if hop < 1 or smooth < 1:
            raise ValueError("stream: hop and smooth must be >= 1 (got %r, %r)" % (hop, smooth))
        if threshold is not None and not 0 <= threshold <= 1:
            raise ValueError("stream: threshold must be in [0, 1], got %r" % (threshold,))
        self.model = model
        self.hop = hop
        self.smooth = smooth
        self.on_decision = on_decision
        T = model.steps
        C = model.n_features
        nc = model.n_classes
        self._thr_q = -1 if threshold is None else int(threshold * 16384 + 0.5)
        self._M, self._SH = logit_multiplier(model.logit_scale)
        code = getattr(model, "xq_typecode", "b")  # "b", or a rocket model's wider grid
        wide = code != "b"
        self._ring = _zeros(code, T * C) if wide else array.array("b", bytes(T * C))
        # the largest buffer first, while the heap has its largest free blocks; a heap too
        # fragmented for it streams without the patch reuse (the same decisions, slower)
        self.reuse = (reuse and not wide and model.seq and T % model.patch == 0
                      and hop % model.patch == 0)  # fmt: skip
        if self.reuse:
            try:
                self._patches(model)
            except MemoryError:
                self.reuse = False
        if not self.reuse:  # the model's quantize buffer: each decision fills it whole first
            self._xq = model._xq
        if wide:
            self._shift = self._powers(model)
            self._put = self._put_wide
        else:
            self._hi, self._lo = self._thresholds(model)
        self._f32 = bytearray(4 * C)
        self._hist = array.array("i", bytes(4 * smooth * nc))  # the last `smooth` probs
        self._acc = array.array("i", bytes(4 * nc))  # their sum
        self._e = array.array("i", bytes(4 * nc))
        self.logits = array.array("i", bytes(4 * nc))
        self.prob = array.array("i", bytes(4 * nc))
        self.reset()

    def reset(self):
        """Forget the window and the smoothing (a new recording, a gap in the stream)."""
        self._head = 0  # ring slot of the next step (the oldest one when full)
        self._filled = 0  # steps in the ring, up to T
        self._since = 0  # steps since the last decision
        self._slot = 0
        self._n_hist = 0
        self._us_sums = 0  # µs of the patch sums since the last decision
        for i in range(len(self._hist)):
            self._hist[i] = 0
        for c in range(len(self._acc)):
            self._acc[c] = 0
        self.cls = self.smoothed = -1
        self.score = 0
        self.uncertain = False
        self.us = 0
        self.decisions = 0

    def _patches(self, model):
        """The patch reuse's buffers and kernel parameters (module docstring)."""
        kernel, _, _, _, _, _, p = model.embed  # p: S, P*C, E, shift, lo, hi, E
        S = model.steps // model.patch
        n_in = p[1]
        E = p[2]
        self._P = model.patch
        self._sum = kernel  # the embed kernel: it reads the int8 ring
        self._dense = model.int8_kernels[0]
        self._sums = _zeros("i", 2 * S * E)  # [2S, E]: patch j's, rows j, S + j
        ring = memoryview(self._ring)
        acc = memoryview(self._sums)
        self._patch = [ring[j * n_in :] for j in range(S)]  # the P*C int8 of ring slot j
        self._rows = [acc[j * E :] for j in range(S)]  # the sums from row j on
        self._zero = array.array("i", bytes(4 * E))
        self._two = array.array("h", [2] * E)
        self._one = array.array("b", [1])
        self._p_sum = array.array("i", [1, n_in, E, 1, -_BIG, _BIG, 0])
        self._p_add = array.array("i", [S * E, 1, 1, 1, -_BIG, _BIG, 1])
        self._p_req = array.array("i", [S, 0, E, p[3], p[4], p[5], E])

    def _sum_patch(self):
        """The sums of the patch that ends at the ring's head (slot j), into rows j, S + j."""
        t0 = ticks_us()
        rows = self._rows
        S = len(rows)
        j = (self._head // self._P or S) - 1
        self._sum(self._patch[j], rows[j], self.model.embed[3], self._zero, self._two,
                  self._p_sum)  # fmt: skip
        acc = self._sums
        E = len(self._zero)
        a = j * E
        for i in range(a, a + E):
            acc[S * E + i] = acc[i]
        self._us_sums += ticks_diff(ticks_us(), t0)

    def _tokens(self):
        """The embed output of the window (oldest patch k) from the sums: tokens[s, o] =
        requant(acc[k + s, o] + b_q[s, o]), into the embed step's output buffer."""
        _, _, tokens, W, b, M, _ = self.model.embed
        dense = self._dense
        dense(self._rows[self._head // self._P], tokens, self._one, b, self._two, self._p_add)
        dense(tokens, tokens, W, tokens, M, self._p_req)

    @staticmethod
    def _thresholds(model):
        """Per channel the order keys of the smallest float32 x with quantize(x) >= k,
        k = -127..127, as (C array('h') high halves, C array('H') low halves): 510-byte
        blocks, which a heap fragmented by the model's load still has room for. The C
        channels are searched side by side: one model.quantize call probes a key of each (the
        Pico builds BasicMotions' tables in 1.4 s with 659 calls; one channel at a time took
        5.3 s, 6,374 calls)."""
        C = model.n_features
        step = [0.0] * C
        xq = array.array("b", bytes(C))  # exactly C: quantize pads nothing
        hi = [_zeros("h", _K) for _ in range(C)]
        lo = [_zeros("H", _K) for _ in range(C)]
        mean, std, view, _ = getattr(model, "_norm", (None, None, None, None))
        floor = view[1] if view and view[0] == 1 else None  # the log view's floor

        def q(keys):  # the int8 of every channel c at the float32 of order key keys[c]
            for c in range(C):
                step[c] = _float(keys[c])
            model.quantize(step, xq)
            return xq

        top = list(q([_KEY_MAX] * C))  # the int8 of the largest float32, per channel
        prev = [-_KEY_MAX] * C
        probes = [0] * C
        found = [0] * C
        for j in range(_K):
            k = j - 127
            live = []
            for c in range(C):
                if top[c] < k:  # never reached: above every finite float32
                    found[c] = _KEY_MAX + 1
                    continue
                guess = prev[c] + 1
                if mean is not None:
                    g = mean[c] + (k - 0.5) * model.input_scale * std[c]
                    if floor is not None:  # the log view's inverse, as a guess
                        g = floor[c] + math.exp(g) - 1.0 if 0 < g < 80 else floor[c]
                    if -3e38 < g < 3e38:
                        guess = max(_key(g), prev[c] + 1)
                guess = min(guess, _KEY_MAX)
                search = _smallest_key(k, guess, prev[c], found, c)
                probes[c] = next(search)
                live.append((c, search))
            while live:  # one quantize call answers the probe of every channel still searching
                got = q(probes)
                still = []
                for c, search in live:
                    try:
                        probes[c] = search.send(got[c])
                        still.append((c, search))
                    except StopIteration:
                        pass
                live = still
            for c in range(C):
                key = found[c]
                hi[c][j] = key >> 16
                lo[c][j] = key & 0xFFFF
                prev[c] = key if key <= _KEY_MAX else _KEY_MAX
        return hi, lo

    def _put(self, buf, off):
        """Quantize the C float32 little-endian values at buf[off:] into the ring's next slot."""
        hi = self._hi
        lo = self._lo
        ring = self._ring
        C = len(self._f32) >> 2
        w = self._head * C
        for c in range(C):
            b3 = buf[off + 3]
            h = (b3 << 8) | buf[off + 2]
            m = (buf[off + 1] << 8) | buf[off]
            if (h & 0x7F80) == 0x7F80:
                raise ValueError("stream: value %d of the step is NaN or inf" % c)
            if b3 & 0x80:  # negative: key = -(magnitude), split as floor(key / 65536), rest
                h &= 0x7FFF
                if m:
                    h = -h - 1
                    m = 65536 - m
                else:
                    h = -h
            a = 0
            b = _K
            hc = hi[c]
            lc = lo[c]
            while a < b:
                mid = (a + b) >> 1
                t = hc[mid]
                if t < h or (t == h and lc[mid] <= m):
                    a = mid + 1
                else:
                    b = mid
            ring[w + c] = a - 128
            off += 4
        w = self._head + 1
        self._head = 0 if w == self.model.steps else w

    @staticmethod
    def _powers(model):
        """A rocket model's grid: its blob has mean 0 and powers of two for std and s_in
        (docs/quantization.md), so u = x / 2**k_c exactly, k_c = log2(std[c] * s_in). Per
        channel 150 + k_c: a float32 x is m * 2**(e - 150) (m its 24-bit significand, e its
        biased exponent), so u = m / 2**(150 + k_c - e)."""
        mean, std, view, _ = model._norm
        if view and view[0]:
            raise ValueError("stream: a rocket model with an input view does not stream")
        k = _log2(model.input_scale)
        shift = array.array("i", bytes(4 * len(std)))
        for c in range(len(std)):
            if mean[c] != 0:
                raise ValueError("stream: a rocket model's mean must be 0 (channel %d)" % c)
            shift[c] = 150 + k + _log2(std[c])
        return shift

    def _put_wide(self, buf, off):
        """_put for a rocket model's grid: xq = clamp(floor(u + 0.5)), u = m / 2**n (_powers),
        from the float32's bits in integers, every value below 2**30 (Model.quantize's value:
        its u is exact too). n > 25: |u| < 1/4, 0; n <= -7: |u| >= 2**30, saturated."""
        shift = self._shift
        ring = self._ring
        hi = self.model._norm[3]
        C = len(shift)
        w = self._head * C
        for c in range(C):
            b3 = buf[off + 3]
            e = ((b3 & 0x7F) << 1) | (buf[off + 2] >> 7)
            if e == 255:
                raise ValueError("stream: value %d of the step is NaN or inf" % c)
            m = ((buf[off + 2] & 0x7F) << 16) | (buf[off + 1] << 8) | buf[off]
            if e:
                m |= 0x800000
            else:  # subnormal: m * 2**(1 - 150)
                e = 1
            if b3 & 0x80:
                m = -m
            n = shift[c] - e
            if n > 25:
                v = 0
            elif n > 0:
                v = (m + (1 << (n - 1))) >> n  # floor(u + 0.5): >> floors negatives too
            elif n > -7:
                v = m << -n
            else:
                v = m and (hi if m > 0 else -1 - hi)
            ring[w + c] = hi if v > hi else (-1 - hi if v < -1 - hi else v)
            off += 4
        w = self._head + 1
        self._head = 0 if w == self.model.steps else w

    def _advance(self):
        """Count the step just put; decide when the window is due. True on a decision."""
        T = self.model.steps
        if self.reuse and self._head % self._P == 0:  # a patch is complete
            self._sum_patch()
        if self._filled < T:
            self._filled += 1
            if self._filled < T:
                return False
        else:
            self._since += 1
            if self._since < self.hop:
                return False
        self._since = 0
        self._decide()
        return True

    def push(self, step):
        """One step: C numbers (read as float32). True when a decision was made."""
        f32 = self._f32
        for c in range(len(f32) >> 2):
            struct.pack_into("<f", f32, 4 * c, step[c])
        self._put(f32, 0)
        return self._advance()

    def push_block(self, buf, n):
        """n steps of C float32 little-endian values in `buf` (bytes-like, n*C*4 bytes).
        Returns the number of decisions made (at most one when n <= hop; the fields hold
        the last one; on_decision sees each)."""
        size = len(self._f32)
        if len(buf) < n * size or (n and not isinstance(buf[0], int)):
            raise ValueError("push_block: buf must hold n*C float32 as bytes (%d)" % (n * size))
        made = 0
        for i in range(n):
            self._put(buf, i * size)
            if self._advance():
                made += 1
        return made

    def _decide(self):
        m = self.model
        logits = self.logits
        if self.reuse:
            t0 = ticks_us()
            self._tokens()
            self.cls = run_tokens(m, logits)
            self.us = ticks_diff(ticks_us(), t0) + self._us_sums
            self._us_sums = 0
        else:
            T = m.steps
            C = m.n_features
            ring = self._ring
            xq = self._xq
            start = self._head * C  # the oldest step
            n = T * C
            j = 0
            for i in range(start, n):
                xq[j] = ring[i]
                j += 1
            for i in range(start):
                xq[j] = ring[i]
                j += 1
            t0 = ticks_us()
            self.cls = m.run_int8(xq, logits, T)
            self.us = ticks_diff(ticks_us(), t0)
        self._probabilities()
        self._smooth()
        self.decisions += 1
        if self.on_decision is not None:
            self.on_decision(self)

    def _probabilities(self):
        logits = self.logits
        e = self._e
        prob = self.prob
        M = self._M
        SH = self._SH
        nc = len(logits)
        top = logits[self.cls]
        total = 0
        for c in range(nc):
            d = top - logits[c]
            if d > 65535:
                d = 65535
            u = (d * M) >> SH
            e[c] = _EXP2[u & 63] >> (u >> 6) if u < 960 else 0
            total += e[c]
        for c in range(nc):
            prob[c] = (e[c] << 14) // total

    def _smooth(self):
        prob = self.prob
        hist = self._hist
        acc = self._acc
        nc = len(prob)
        w = self._slot * nc
        best = 0
        for c in range(nc):
            acc[c] += prob[c] - hist[w + c]
            hist[w + c] = prob[c]
            if acc[c] > acc[best]:
                best = c
        w = self._slot + 1
        self._slot = 0 if w == self.smooth else w
        if self._n_hist < self.smooth:
            self._n_hist += 1
        self.smoothed = best
        self.score = acc[best] // self._n_hist
        self.uncertain = self.score < self._thr_q

    def label(self):
        """The smoothed decision's class name, or "uncertain" (None before a decision)."""
        if self.smoothed < 0:
            return None
        return "uncertain" if self.uncertain else self.model.class_names[self.smoothed]
