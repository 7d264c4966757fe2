# Device (MicroPython; also runs under CPython): compact batches of the tinyattn server.
"""`batch` with `enc: "b64"` (docs/protocol.md, Compact batches), imported by server.py on the
first such request: its bytecode is not resident while the model loads (the heap's peak).

A sequence model's sample is a window of n steps of C channels (device/attention.py; n > T:
the last T steps run, and the reply's xq holds those): the
request gives `lengths` (n per window) and one payload of sum(n)*C values, window after window.
Windows are read in place, as memoryview slices of one array('f') allocated on first use and
reused: no lists of boxed floats (a 600-value window's exhausted a 100 KiB heap). On a board
the payload arrives as a Payload (server.LineReader cut it out of the line): it is decoded in
place in the line buffer and the windows are read there, so a window allocates no block of
its size.
"""

import array
from binascii import a2b_base64, b2a_base64

MAX_BATCH_B64 = 64  # as server.MAX_BATCH_B64
_BIG = 1e30  # as server._BIG


def _b64(data, what, RequestError):
    """The bytes of a base64 field: a str decoded into new bytes, or a Payload (server.py: the
    field left in the line buffer) decoded in place, its bytes a view of that buffer."""
    if not isinstance(data, str):
        if not hasattr(data, "decode"):
            raise RequestError("%s must be a base64 string" % what)
    try:
        if isinstance(data, str):
            return a2b_base64(data)
        data.decode()
        return data.bytes()
    except ValueError:
        raise RequestError("%s is not valid base64" % what) from None


def _text(arr):
    """base64 text of an array's bytes (b2a_base64 ends it with a newline: dropped)."""
    return b2a_base64(arr).decode().rstrip()


def _lengths(req, n, model, RequestError):
    """The windows' steps: `lengths` (n integers >= 1; above T: the model runs the last T)
    for a sequence model, every window T steps when absent; None for any other model, which
    takes no lengths."""
    lengths = req.get("lengths")
    if not getattr(model, "seq", False):
        if lengths is not None:
            raise RequestError("lengths is for sequence models; this model takes samples")
        return None
    T = model.steps
    if lengths is None:
        return [T] * n
    if not isinstance(lengths, list) or len(lengths) != n:
        raise RequestError("lengths must be a list of n = %d step counts" % n)
    for v in lengths:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise RequestError("lengths: each window has 1 or more steps, got %r" % (v,))
    return lengths


def _f32_array(state, raw):
    """`raw` float32 bytes in one array('f') kept and reused (a window decoded into lists of
    boxed floats exhausted a 100 KiB heap): the first request's array is a copy of its bytes;
    a later request that fits is copied into it through a bytes view of the array (uctypes on
    MicroPython, memoryview.cast on CPython), a longer one replaces it."""
    buf = state.get("f32")
    if buf is not None and buf[1] is not None and len(raw) <= len(buf[1]):
        buf[1][0 : len(raw)] = raw
        return buf[0]
    buf = None
    state["f32"] = None
    arr = array.array("f", raw)
    try:
        import uctypes

        view = uctypes.bytearray_at(uctypes.addressof(arr), len(raw))
    except ImportError:
        try:
            view = memoryview(arr).cast("B")
        except (AttributeError, TypeError):
            view = None
    state["f32"] = (arr, view)
    return arr


def batch(model, req, state, get_path, xq_buffer, RequestError):
    """A batch as little-endian arrays in base64 (docs/protocol.md, Compact batches): `n`
    samples of `n_features` values each, as float32 raw features (`f32`) or as int8 model
    input (`xq`, int8 path only). A sequence model's samples are windows: `lengths` gives
    each one's steps n_k (default T), the payload holds sum(n_k)*C values, window after
    window. The reply carries `pred` as a JSON list and `xq` (int8, each window's n_k*C
    values), `logits_q` (int32), `logits` (float32) as base64 arrays, row-major. Decoding
    allocates the request's bytes; windows are read in place (memoryview slices of one reused
    array('f')), and the int8 kernel (`run_int8`) allocates nothing."""
    n = req.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_BATCH_B64:
        raise RequestError("n must be an integer from 1 to %d" % MAX_BATCH_B64)
    path = get_path(req)
    C = model.n_features
    tc = getattr(model, "xq_typecode", "b")  # the model input: int8, or int32 (a wider grid)
    lengths = _lengths(req, n, model, RequestError)
    total = C * (sum(lengths) if lengths is not None else n)  # values in the payload
    f32 = req.get("f32")
    given_xq = req.get("xq")
    if (f32 is None) == (given_xq is None):
        raise RequestError("a b64 batch carries exactly one of 'f32' and 'xq'")
    what = "n %d x %d" % (n, C) if lengths is None else "%d steps x %d" % (total // C, C)
    if f32 is not None:
        raw = _b64(f32, "f32", RequestError)
        if len(raw) != 4 * total:
            raise RequestError(
                "f32: expected %d bytes (%s float32), got %d" % (4 * total, what, len(raw))
            )
        # a Payload's floats are read where they were decoded (the line buffer); a str's go
        # into the array kept for them
        x = _f32_array(state, raw) if isinstance(f32, str) else f32.floats(total)
        raw = None
        for i in range(total):  # validate all first: a batch is answered whole or not at all
            f = x[i]
            if not (f == f) or f > _BIG or f < -_BIG:
                raise RequestError("features must be finite numbers (got NaN, inf or > 1e30)")
        mv = memoryview(x)
    else:
        if path != "int8":
            raise RequestError("an 'xq' batch runs the int8 path only: send path 'int8'")
        if lengths is not None and max(lengths) > model.steps:
            raise RequestError("lengths: an 'xq' window has 1 to %d steps" % model.steps)
        x = _b64(given_xq, "xq", RequestError)  # str: bytes; Payload: its in-place bytes
        if tc != "b":  # a wider grid: int32 values (a copy of the bytes, little-endian)
            if len(x) != 4 * total:
                raise RequestError("xq: expected %d int32 (%s), got %d bytes"
                                   % (total, what, len(x)))  # fmt: skip
            x = array.array(tc, bytes(x))
        x = array.array("b", x) if isinstance(given_xq, str) and tc == "b" else x  # see below
        if len(x) != total:
            raise RequestError("xq: expected %d int8 (%s), got %d" % (total, what, len(x)))
    nc = model.n_classes
    out = state["out"]
    preds = []
    xq_all = lq_all = lf_all = None
    used = total  # xq values in the reply: each window's last T steps at most
    if lengths is not None:
        T = model.steps
        used = 0
        for v in lengths:
            used += C * (v if v <= T else T)
    if path != "float":
        xq_all = array.array(tc, bytes(used * (1 if tc == "b" else 4)))
        lq_all = array.array("i", bytes(4 * n * nc))
        xq = xq_buffer(model, state)
    if path != "int8":
        lf_all = array.array("f", bytes(4 * n * nc))
        lf = array.array("f", bytes(4 * nc))
    base = 0
    at = 0  # in xq_all
    for k in range(n):
        steps = lengths[k] if lengths is not None else None
        nf = C * steps if lengths is not None else C
        window = mv[base : base + nf] if f32 is not None else None
        if steps is not None and steps > model.steps:
            steps = model.steps  # the long window rule: quantize reads the last T steps
        nq = C * steps if steps is not None else C
        pred = -1
        if path != "float":
            if f32 is not None:
                model.quantize(window, xq)
            else:  # a Payload's bytes are unsigned: int8 is v - 256 for v > 127
                for i in range(nf):
                    v = x[base + i]
                    xq[i] = v - 256 if v > 127 and tc == "b" else v
            for i in range(nq):  # before the run: a rocket window at P = 1 is consumed by it
                xq_all[at + i] = xq[i]
            pred = model.run_int8(xq, out, steps)
            for c in range(nc):
                lq_all[k * nc + c] = out[c]
        if path != "int8":
            best = model.run_float(window, lf)
            if path == "float":
                pred = best
            for c in range(nc):
                lf_all[k * nc + c] = lf[c]
        window = None
        preds.append(pred)
        base += nf
        at += nq
    rep = {"n": n, "enc": "b64", "pred": preds}
    if xq_all is not None:
        rep["xq"] = _text(xq_all)
        rep["logits_q"] = _text(lq_all)
    if lf_all is not None:
        rep["logits"] = _text(lf_all)
    return rep
