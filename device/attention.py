# Device (MicroPython; also runs unchanged under CPython): tinyattn inference on a board.
"""Load `model.bin` and classify, on an integer-only int8 path or a float path.

    m = Model("model.bin")            # or Model(blob_bytes), Model(path, kernels="pure")
    m.classify([5.1, 3.5, 1.4, 0.2])  # -> "setosa": raw measurements, the blob normalizes
    xq = m.quantize(features)         # -> array('b'); allocates (floats are heap objects)
    out = m.new_logits()              # caller-owned array('i') of n_classes
    m.run_int8(xq, out)               # -> argmax; allocates nothing

Sequence models (op 0 embed, seq-attn; op 0 rocket, MiniRocket's transform): the input is a
window of n steps of C channels,
`features[t*C + c]` for t < n, 1 <= n <= T (`m.steps`; `m.n_features` is C); a longer
window is classified on its last T steps (the long window rule). quantize takes the n*C
values and fills xq (of m.input_len = S*P*C int8, zero after the window), and the caller
passes the step count on: `m.run_int8(xq, out, m.window_steps(features))` (n=None: the full
window of T steps). Every op then runs on the S_n = ceil(n/P) valid tokens
only, so padding never changes a logit. A non-seq model is a window of one step (T = P = 1).
A rocket model's input grid is wider than int8 (op 0's `bits`, up to 30): its xq is an
array('i') (`m.xq_typecode`), the rest is the same; its float path reads that grid too
(run_float quantizes the window into the int8 program's window: docs/quantization.md "rocket").

The op list of the blob is compiled at load into steps `(kernel, a, b, c, d, e, p)` over
array buffers allocated once; `run_int8` / `run_float` only walk the steps. int8: docs/
quantization.md bit for bit with Python ints. float: the same ops on dequantized weights
(`W_q·s_w`, `b_q·s_in·s_w`) in array('f'), softmax with math.exp.

Files on the board (each module small enough for MicroPython to compile in a small heap):
- attention.py: this API (always resident). attention_crc.py: CRC-32 for a port without
  binascii.crc32 (imported only there).
- attention_blob.py, attention_tensors.py, attention_ops.py: the blob reader, three phases
  (header/CRC/sections/op records; tensor table/data; op tensors/params/shape chain and the
  small-int budget), every MUST of docs/blob-format.md, BlobError messages as the host
  reader's. attention_build.py:
  op list -> steps and buffers. Load-time only: imported while loading and dropped again, so
  their bytecode does not stay in the heap (MicroPython; CPython keeps them).
- attention_kernels.py: pure-Python kernels, the reference (needed for the float path too
  unless attention_native.py is there).
- attention_native.py / attention_viper.py / attention_thumb.py: optional accelerated kernels,
  imported only when chosen. attention_native.py is generated from attention_kernels.py when
  deploying (tinyattn.board.native: `tinyattn flash` adds it; a `mip` install has viper and
  pure); attention_thumb.py (Thumb assembler) imports on ARM Cortex-M ports only.
  `kernels="auto"` takes thumb, else viper, else native, else pure (see
  `kernels_available()`); all give identical int8 results.
On a 64 KiB heap deploy them as .mpy (`mpy-cross -march=<arch>`): compiling the .py sources
at import needs transient heap on top (about 60 KB on the 64-bit unix port).

References: docs/blob-format.md, docs/quantization.md, DESIGN §6; MicroPython's "Maximising
MicroPython speed" (buffers, locals, native/viper); TFLite Micro's reference kernels.
"""

import array
import gc as _gc
import math
import sys

try:  # crc32: the readers' (api.crc32); attention_crc's table version on a port without it
    from binascii import crc32  # noqa: F401
except ImportError:  # a port built without binascii.crc32
    from attention_crc import crc32  # noqa: F401

REMEDY = "re-run 'make export' and 'make flash'"
# load-time modules: imported by read_blob / Model to load a blob, then dropped again
_READER = ("attention_blob", "attention_tensors", "attention_ops", "attention_ops_seq",
           "attention_ops_conv", "attention_ops_rocket", "attention_build", "attention_build_seq",
           "attention_build_conv", "attention_build_rocket")  # fmt: skip
# kernel set -> module holding its INT8 (and FLOAT) kernel tuples; "auto" takes the first
# of _ORDER that imports
_MODULES = {"pure": "attention_kernels", "native": "attention_native", "viper": "attention_viper",
            "thumb": "attention_thumb"}  # fmt: skip
_ORDER = ("thumb", "viper", "native", "pure")
# int8 sets that address their buffers as raw 32-bit words (typed pointers, machine code)
_RAW = ("viper", "thumb")
_loaded = {}
# thumb's one call takes xq and out as raw memory: arrays only (a list goes the Python way)
_ARRAY = array.array
_MICROPYTHON = sys.implementation.name == "micropython"
# a Thumb port (sys.implementation._mpy arch bits 10..13: armv6m .. armv7emdp): where the
# thumb set can import (elsewhere it is not even compiled: a .py import would cost heap)
_THUMB = 4 <= (getattr(sys.implementation, "_mpy", 0) >> 10) & 0x0F <= 8
# imported from .mpy: importing a module needs no compile heap, so a load-time module is
# imported just for its phase (from .py, compiling one late, beside the tensors, costs more)
_MPY = (globals().get("__file__") or "").endswith(".mpy")


class BlobError(ValueError):
    """A blob that cannot be used; the message names the problem and the fix."""


class Tensor:
    """A tensor of the blob: dtype code, shape tuple, name, flat data array."""

    def __init__(self, dtype, shape, name, data):
        self.dtype = dtype
        self.shape = shape
        self.name = name
        self.data = data


class Op:
    """An op of the blob: opcode, name, ip / fp (parameters by name), t (role -> Tensor)."""

    def __init__(self, code, name, ip, fp):
        self.code = code
        self.name = name
        self.ip = ip
        self.fp = fp
        self.t = {}


def _viewed(view, c, f):
    """Feature f of channel c through the blob's input view (docs/quantization.md "Input
    view"): the log view `log(1 + f - floor)` above the floor, else 0; the clip view f
    clipped to [lo, hi]."""
    if view[0] == 1:
        f -= view[1][c]
        return math.log(1.0 + f) if f > 0 else 0.0
    lo = view[1][c]
    hi = view[2][c]
    return lo if f < lo else hi if f > hi else f


class Blob:
    """A parsed blob: header fields, class_names, mean / std (array('f')), ops ([Op]); view
    None (raw input), (1, floor) for the log view or (2, lo, hi) for the clip view, each an
    array('f') of F."""

    def __init__(self, version, quantized, F, C, s_in, s_logit, names, mean, std, view, ops):
        self.version = version
        self.quantized = quantized
        self.n_features = F
        self.n_classes = C
        self.input_scale = s_in
        self.logit_scale = s_logit
        self.class_names = names
        self.mean = mean
        self.std = std
        self.view = view
        self.ops = ops
        self.bufs = None  # the programs' buffers, when read_blob allocated them (buffers=)


def blob_error(source, problem, remedy=REMEDY):
    """BlobError("<source>: <problem>; <remedy>"), the host reader's message shape."""
    return BlobError("%s: %s; %s" % (source, problem, remedy))


def read_blob(src, source="blob", lean=False, buffers=None):
    """Parse and check a blob (bytes-like, or a file path): every MUST of docs/blob-format.md.
    Returns a Blob; raises BlobError naming the problem. Three phases, each in its own module
    imported for the call only and dropped again unless imported before (on a small board
    the bytecode of one phase and the parsed tensors share the heap, never all of it):
    attention_blob (header, CRC, sections, op records), attention_tensors (tensor table and
    data), attention_ops (each op's tensors and parameters, shapes from F to C, the small-int
    budget). Each op's `t` maps a role to a Tensor; `lean` (what Model loads): straight to the
    tensor's data array, with `op.shape` (W role -> its shape), and no Tensor objects or
    names left in the heap. `buffers` (what Model passes): (int8, float, shared), the
    programs to allocate buffers for right after the op records (attention_build.buffers;
    MicroPython only), before the tensors and the later phases' bytecode split the heap; as
    `blob.bufs`."""
    loaded = [name for name in _READER if name in sys.modules]
    try:
        path = None
        if isinstance(src, str):
            _load("attention_blob")  # compile it (from .py) before the file takes heap
            path = source = src
            src = _read_file(path)
        mv = memoryview(src)
        src = None
        api = sys.modules[__name__]  # the phases get this module's names from their caller
        blob, ops, n_tensors, pos, end, tables = _call(
            "attention_blob", "read_records", (api, mv, source)
        )
        _forget(loaded)
        if buffers:
            which = (buffers[0] and blob.quantized,) + tuple(buffers[1:])  # float32: no int8
            blob.bufs = _buffers([op for op, _ in ops], blob.n_features, which)
            _forget(loaded)
        if not _MPY:
            _load("attention_ops")  # compiled while little is parsed (.mpy: for its phase)
        args = (api, mv, source, pos, end, n_tensors, tables[1], 0 if path else None)
        table, crc = _call("attention_tensors", "read_tensors", args)
        if path:  # the file's bytes go before the tensors' arrays come (read again)
            mv = path
        args = (api, mv, table, tables[1], source, crc)
        mv = table = None
        # .mpy: attention_ops comes back after the tensors' data (~10 KB less at that peak)
        _forget(loaded + ([] if _MPY else ["attention_ops"]) + ["attention_tensors"])
        tensors = _call("attention_tensors", "read_data", args)
        args = None
        _forget(loaded + ["attention_ops"])
        args = (api, blob, ops, tensors, tables, source, lean)
        ops = tensors = None
        blob.ops = _call("attention_ops", "check_ops", args)
        return blob
    except (BlobError, MemoryError, OSError, ImportError):  # unreadable file, missing module
        raise
    except Exception as exc:  # a check missed something: still a ValueError naming the blob
        raise blob_error(source, "malformed blob (%r)" % (exc,)) from None
    finally:
        _forget(loaded)


def _buffers(ops, n_features, which):
    """attention_build.buffers(ops, n_features, *which), or None when the records (not checked
    yet: attention_ops does that next) do not give sizes the heap holds; then build
    allocates them after the checks. MicroPython only (the heap's layout is the point)."""
    if not _MICROPYTHON:
        return None
    try:
        if ops[0].code in (7, 12):  # a window model: its builders register in attention_build
            _load("attention_build")  # first, as ever (the heap's layout is the point)
            _load("attention_build_seq" if ops[0].code == 7 else "attention_build_rocket")
        return _call("attention_build", "buffers", (ops, n_features) + tuple(which))
    except MemoryError:
        _gc.collect()
        return None
    except Exception:  # records the checks will refuse, with their own message
        return None


def _read_file(path):
    # the file in one allocation of its exact size (read() grows its buffer step by step,
    # leaving a trail of freed copies in a small heap)
    with open(path, "rb") as f:
        n = f.seek(0, 2)
        f.seek(0)
        buf = bytearray(n)
        mv = memoryview(buf)
        got = 0
        while got < n:
            k = f.readinto(mv[got:])
            if not k:
                return buf[:got]  # shrank while read: the size check names it
            got += k
    return buf


def _load(name):
    __import__(name)


def _call(module, func, args):
    # a call in its own frame: no stale reference to the module stays on read_blob's stack
    return getattr(__import__(module), func)(*args)


def _forget(keep):
    """Drop the load-time modules not in `keep` from sys.modules (and so from the heap) and
    collect. MicroPython only: CPython has the memory, and re-importing would cost time."""
    if not _MICROPYTHON:
        return
    for name in _READER:
        if name not in keep and name in sys.modules:
            del sys.modules[name]
    _gc.collect()


def _kernel_module(name):
    """The kernel module of set `name`, or None when it cannot be imported here."""
    if name == "thumb" and not _THUMB:
        return None
    if name not in _loaded:
        try:
            _loaded[name] = __import__(_MODULES[name])
        except MemoryError:
            raise
        except Exception:  # absent, CPython (no `micropython`), no emitter, wrong .mpy arch
            _loaded[name] = None
    return _loaded[name]


def kernels_available():
    """Names of the kernel sets that import on this interpreter, fastest first (imports
    them all; Model(kernels="auto") imports only what it uses)."""
    return [name for name in _ORDER if _kernel_module(name) is not None]


def _zeros(tc, n):
    return array.array(tc, bytes(n * (1 if tc == "b" else 4)))


class Model:
    """A loaded blob, ready to run. `src`: a file path or the blob's bytes.

    `kernels`: "auto", "pure", "native", "viper" or "thumb". Attributes: n_features, n_classes,
    class_names, quantized, op_names, format_version, input_scale, logit_scale, kernels (the
    int8 set chosen), float_kernels; seq (op 0 reads a window: embed or rocket), steps (T) and
    patch (P) of the input window (1 and 1 for a non-seq model), input_len (the int8 input
    buffer: n_features, or S*P*C), xq_typecode (its array type: 'b', or 'i' for an input
    grid wider than 8 bits); a seq model with int8 weights also int8_kernels (the INT8 tuple
    of the set) and embed (its embed step, for the Stream's run_tokens, attention_stream.py).
    """

    # thumb's whole programs as one call (attention_thumb.setup); class attributes, so other
    # sets add nothing to a model's attribute table (its growth is the load's heap peak)
    _run1 = _tail1 = None

    def __init__(self, src, kernels="auto"):
        if kernels != "auto" and kernels not in _MODULES:
            raise ValueError("kernels must be 'auto', 'pure', 'native', 'viper' or 'thumb'")
        # both programs' buffers come right after the op records (read_blob's `buffers`),
        # while the heap has its large spans; with viper's or thumb's int8 kernels (raw words)
        # a seq model's int8 program shares the float program's (attention_build_seq): asked
        # for before the kernels are imported (the reader first: on a board native code takes
        # heap too), and undone below when the set chosen is not one of those
        shared = _MICROPYTHON and (kernels == "auto" or kernels in _RAW)
        blob = read_blob(src, lean=True, buffers=(True, True, shared))
        if kernels == "auto":
            for kernels in _ORDER:
                if _kernel_module(kernels) is not None:
                    break
        if _kernel_module(kernels) is None:
            raise ValueError(
                "kernels %r not available here (available: %s)"
                % (kernels, ", ".join(kernels_available()))
            )
        if shared and kernels not in _RAW and blob.bufs is not None and blob.ops[0].code == 7:
            blob.bufs[0] = None  # the int8 program gets buffers of its own (build allocates)
        shared = shared and kernels in _RAW
        # float path: native when the int8 set is accelerated and native imports
        float_set = "pure" if kernels == "pure" or _kernel_module("native") is None else "native"
        self.format_version = blob.version
        self.quantized = blob.quantized
        self.n_features = blob.n_features
        self.n_classes = blob.n_classes
        self.class_names = blob.class_names
        self.input_scale = blob.input_scale
        self.logit_scale = blob.logit_scale
        self.op_names = [op.name for op in blob.ops]
        # op 0 embed or rocket: input windows of n <= T steps
        self.seq = blob.ops[0].code in (7, 12)
        blob_code = blob.ops[0].code
        bits = blob.ops[0].ip.get("bits", 8)  # the input grid (docs/quantization.md)
        self.xq_typecode = "b" if bits <= 8 else "i"
        self.kernels = kernels if blob.quantized else None
        self.float_kernels = float_set
        # view None: the raw values; the grid's bounds -1 - hi .. hi
        self._norm = (blob.mean, blob.std, blob.view, (1 << (bits - 1)) - 1)
        self._prog8 = self._x8 = None
        self._loadp = None  # the int8 path's load sizes (None: float32 weights only)
        loaded = [name for name in _READER if name in sys.modules]
        try:
            mod = __import__("attention_build")
            self.steps, self.patch, S = mod.window(blob)  # T, P, S; 1, 1, 1 for non-seq
            self.input_len = S * self.patch * blob.n_features  # xq: the S patches of P*C
            build = mod.build
            mod = None
            if _MICROPYTHON:
                _gc.collect()
            if self.seq:  # its builder module registers in attention_build
                _load("attention_build_seq" if blob.ops[0].code == 7 else "attention_build_rocket")
            # both programs now, over the buffers read_blob allocated (blob.bufs; None: build
            # allocates them): a float program built on run_float's first call found no span
            # for its 2.4 KB window in a 100 KiB heap after the reader and the server
            words = blob.bufs is not None  # read_blob allocated them (shared if asked)
            prog8, progf = build(blob, _kernel_module(kernels).INT8 if blob.quantized else None,
                                 _kernel_module(float_set).FLOAT, blob.bufs)  # fmt: skip
            self._progf, self._xf, self._yf, self._rowsf, _ = progf
            if not blob.quantized:  # float32 weights: the float program is the model
                return
            blob = progf = None
            self._prog8, self._x8, self._y8, self._rows8, self._pools8 = prog8
            prog8 = None
            # the window's load: n*C int8, zeros to `end`; [2]: the n the counts are set for
            self._loadp = array.array("i", [self.n_features] * 2 + [0 if self.seq else 1])
            if self.seq:  # its window goes into its int8 buffer with the load kernel
                self.int8_kernels = _kernel_module(kernels).INT8
                self._load = self.int8_kernels[8]
                if bits > 8:  # a wider grid's window (int32, a rocket model): its load
                    self._load = __import__("attention_kernels_rocket").load
                self.embed = self._prog8[0]  # the Stream's run_tokens starts after it
                self._tail8 = self._prog8[1:]
            if kernels == "thumb":  # whole programs in one call (attention_thumb.setup)
                _kernel_module(kernels).setup(self)
            # int8 logits in float32-typed words (shared buffers): copied out as bytes
            self._words = shared and self.seq and words
            self._outp = array.array("i", [4 * self.n_classes] * 2)
            # quantize's buffer: a seq model's is its int8 program's input window itself (its
            # type and input_len; run_int8's load then copies each value onto itself and pads
            # with the zeros quantize wrote, and no step writes that window): 5.4 KB less for
            # a PLAID rocket model; a rocket model on an 8-bit grid has an int32 window
            alias = self.seq and (blob_code == 7 or self.xq_typecode == "i")
            self._xq = self._x8 if alias else _zeros(self.xq_typecode, self.input_len)
            self._out = _zeros("i", self.n_classes)
        finally:
            build = None
            _forget(loaded)

    def new_logits(self):
        """A zeroed array('i') of n_classes: the `out` of run_int8."""
        return _zeros("i", self.n_classes)

    def window_steps(self, features):
        """Steps n the model runs of raw `features` (a window of m steps, m*C values): m, or
        T for a longer window, which is classified on its last T steps (the long window
        rule, docs/quantization.md; quantize and run_float read them from offset (m-T)*C).
        Non-seq models take exactly n_features values (n = 1). ValueError naming the
        length otherwise."""
        C = self.n_features
        n = len(features)
        if not self.seq:
            if n != C:
                raise ValueError("features: expected %d numbers, got %d" % (C, n))
            return 1
        if n % C or n < C:
            raise ValueError(
                "features: %d numbers is not a window of n >= 1 steps of C = %d channels "
                "(n*C numbers, row-major [n, C]; n > T = %d: the last T steps)"
                % (n, C, self.steps)
            )
        return n // C if n // C <= self.steps else self.steps

    def quantize(self, features, xq=None):
        """Raw features -> int8 model input, `clamp(floor((x - mean)/std/s_in + 0.5))`, the
        rounding computed as `floor(u)`, plus 1 when `u - floor(u) >= 0.5` (u = (x - mean)/
        std/s_in): the same value, and exact in single precision too for the wide grid of a
        rocket model, whose scales are powers of two (docs/quantization.md).

        Returns `xq` filled in, or a new one if None: an array (`xq_typecode`) of input_len
        (n_features, or for a seq model the S*P*C values of a full window, whose entries
        after the n*C of `features` are set to 0). A NaN or infinite feature raises
        ValueError `features must be finite numbers, not NaN or inf (feature i is nan)`, as
        the host reference (docs/quantization.md); a finite one saturates. A seq model
        normalizes feature i by channel i % C.
        """
        nf = self.window_steps(features) * self.n_features
        first = len(features) - nf  # a window longer than T: its last T steps
        if xq is None:
            xq = _zeros(self.xq_typecode, self.input_len)
        elif len(xq) < nf:
            raise ValueError("quantize: xq holds %d int8, the window needs %d" % (len(xq), nf))
        mean, std, view, hi = self._norm
        s_in = self.input_scale
        lo = -1 - hi
        C = self.n_features
        c = 0
        for i in range(nf):
            f = features[first + i]
            if f - f != 0:  # inf - inf and nan - nan are nan
                raise ValueError(
                    "features must be finite numbers, not NaN or inf (feature %d is %r)"
                    % (first + i, f)
                )
            if view:
                f = _viewed(view, c, f)
            u = (f - mean[c]) / std[c] / s_in
            c += 1
            if c == C:
                c = 0
            if lo <= u < hi:  # False for NaN
                q = math.floor(u)
                xq[i] = q + 1 if u - q >= 0.5 else q  # half up
                continue
            f = features[first + i]  # saturated or NaN: only a finite feature may saturate
            if f - f != 0:  # inf - inf and nan - nan are nan
                raise ValueError(
                    "features must be finite numbers, not NaN or inf (feature %d is %r)"
                    % (first + i, float(f))
                )
            xq[i] = hi if u >= hi else lo  # below lo - 1/2 (and up to lo) rounds to lo
        for i in range(nf, len(xq)):  # the padded steps read as 0 (the channel mean)
            xq[i] = 0
        return xq

    def _tokens(self, n, rows):
        """Valid tokens S_n = ceil(n/P) of a window of n steps, written into the token-count
        parameters of the float program; returns S_n*P*C, the end of the last patch."""
        S_n = (n + self.patch - 1) // self.patch
        for p, i, unit, div in rows:
            p[i] = (S_n + div - 1) // div * unit
        return S_n * self.patch * self.n_features

    def run_int8(self, xq, out, n=None):
        """Integer-only inference: int8 `xq` -> integer logits in the caller's `out`
        (array('i') of n_classes; real logit = out[c] * logit_scale). Returns the argmax
        (first maximum). Allocates no heap memory.

        `xq`: array('b') of n_features; for a seq model its first n*C values (the window of
        `n` steps, 1 <= n <= T; None: T), the rest is not read (the runtime pads the last
        patch with 0 itself); a rocket model's is an array('i') (`xq_typecode`). A non-seq
        model takes n = None or 1."""
        p = self._loadp
        if p is None:
            raise ValueError("this blob has float32 weights only: use path 'float'")
        if n is None:
            n = self.steps
        elif not 1 <= n <= self.steps:
            raise ValueError("run_int8: n = %r steps, the model takes 1..%d" % (n, self.steps))
        nf = n * self.n_features
        if len(xq) < nf or len(out) < self.n_classes or (len(xq) != nf and not self.seq):
            raise ValueError("run_int8 needs xq of %d int8 and out of %d int32"
                             % (nf, self.n_classes))  # fmt: skip
        if p[2] != n:  # a seq model's counts for n steps (as the last run left them: a loop
            self._window(n)  # per step costs ~0.3 ms on a Pico)
        run = self._run1
        if run is not None and type(xq) is _ARRAY and type(out) is _ARRAY:
            return run[0](run[1], xq, out, p)  # thumb: load, steps, logits, argmax in one call
        if self.seq:  # the window, zeros to the end of its last patch
            self._load(xq, self._x8, None, None, None, p)
        else:  # the n_features values
            x = self._x8
            for i in range(nf):
                x[i] = xq[i]
        return self._run8(self._prog8, out)

    def _window(self, n):
        """The load's sizes (n*C values, zeros to the end of the last patch) and the token
        counts of the int8 program (S_n = ceil(n/P) valid tokens; ceil(S_n/div) after convs
        of strides div) for a window of n steps; then p[2] = n."""
        S_n = (n + self.patch - 1) // self.patch
        for p, i, unit, div in self._rows8:
            p[i] = (S_n + div - 1) // div * unit
        for p, m, div in self._pools8:
            p[2] = m[(S_n + div - 1) // div - 1]
        p = self._loadp
        p[0] = n * self.n_features
        p[1] = S_n * self.patch * self.n_features
        p[2] = n

    def _run8(self, prog, out):
        # one unpacking opcode per step, not seven subscripts (x, y, c, p reuse this frame's
        # locals: the frame, allocated per call, stays small)
        nc = self.n_classes
        for kernel, x, y, c, d, e, p in prog:
            kernel(x, y, c, d, e, p)
        y = self._y8
        if self._words:  # raw int32 words in a float32-typed array: copied as bytes
            self.int8_kernels[8](y, out, None, None, None, self._outp)  # load: bytes
        else:
            for c in range(nc):
                out[c] = y[c]
        best = 0
        for c in range(nc):
            if out[c] > out[best]:
                best = c
        return best

    def run_float(self, features, out):
        """Float inference on dequantized weights: raw features (n_features values, or for a
        seq model a window of n*C, n >= 1; n > T: its last T steps) -> float logits in `out`
        (array('f') or list of n_classes). Returns the argmax. Allocates (floats).
        A NaN or infinite feature raises ValueError, as quantize; a logit that is not finite
        (float32 overflow: features too large for the float path) OverflowError, never a
        class."""
        n = self.window_steps(features)
        x = self._xf
        if x is self._x8:  # a rocket model: its float program reads the int8 window's grid
            if self._loadp[2] != n:
                self._window(n)
            self._load(self.quantize(features, self._xq), x, None, None, None, self._loadp)
            self._tokens(n, self._rowsf)
        else:
            nf = n * self.n_features
            first = len(features) - nf  # a window longer than T: its last T steps
            mean, std, view, _ = self._norm
            C = self.n_features
            c = 0
            for i in range(nf):
                f = features[first + i]
                if f - f != 0:  # inf - inf and nan - nan are nan
                    raise ValueError(
                        "features must be finite numbers, not NaN or inf (feature %d is %r)"
                        % (first + i, f)
                    )
                if view:
                    f = _viewed(view, c, f)
                x[i] = (f - mean[c]) / std[c]
                c += 1
                if c == C:
                    c = 0
            for i in range(nf, self._tokens(n, self._rowsf)):
                x[i] = 0.0
        for st in self._progf:
            st[0](st[1], st[2], st[3], st[4], st[5], st[6])
        y = self._yf
        best = 0
        for c in range(self.n_classes):
            v = y[c]
            if v - v != 0:
                raise OverflowError(
                    "float path: logit %d is %r (float32 overflow: the features are too large "
                    "for the float path; use the int8 path or scale them)" % (c, v)
                )
            out[c] = v
            if v > y[best]:
                best = c
        return best

    def logits(self, features, path="int8"):
        """Logits of raw `features` as a list: integers on the int8 path (real logits are
        `logit_scale` times these), floats on the float path."""
        if path == "int8":
            n = self.window_steps(features)
            self.run_int8(self.quantize(features, self._xq), self._out, n)
            return list(self._out)
        if path == "float":
            out = [0.0] * self.n_classes
            self.run_float(features, out)
            return out
        raise ValueError("path must be 'int8' or 'float', got %r" % (path,))

    def predict(self, features, path=None):
        """Class index of raw `features` (int8 path when the blob is quantized)."""
        if path is None:
            path = "int8" if self.quantized else "float"
        if path == "int8":
            n = self.window_steps(features)
            return self.run_int8(self.quantize(features, self._xq), self._out, n)
        if path == "float":
            return self.run_float(features, [0.0] * self.n_classes)
        raise ValueError("path must be 'int8' or 'float', got %r" % (path,))

    def classify(self, features, path=None):
        """Class name of raw `features`."""
        return self.class_names[self.predict(features, path)]
