# Device (MicroPython; also runs under CPython): the tinyattn serial server.
"""Newline-delimited JSON over the serial console: one request line in, one reply line out.

Started from the raw REPL (`import server; server.run()`); the host's parity tool talks to it
with pyserial. Every request is a JSON object with an optional `id` that the reply echoes; a
bad request gets `{"ok": false, "error": "..."}` and the loop goes on. Only `exit` (or Ctrl-C)
returns to the REPL. The protocol is specified in docs/protocol.md; its framing (line reader,
CRC field, replies) is server_link.py, which a training session (server_train.py) uses
without this module.
"""

import array
import gc
import sys

try:
    import micropython
except ImportError:  # CPython
    micropython = None

import server_link as _link
from server_link import (  # noqa: F401  (the protocol's names, as the host and tests use them)
    MAX_LINE,
    PROTOCOL,
    RUNTIME_VERSION,
    LineReader,
    Payload,
    RequestError,
    line_buffer,
    ticks_diff,
    ticks_us,
    write_reply,
)

_heap = _link.heap
MAX_BATCH = 16  # samples per JSON batch request (a 100 KiB heap builds the reply comfortably)
MAX_BATCH_B64 = 64  # samples per base64 batch (server_b64.py; one array a field)
MAX_BENCH = 10000  # iterations per bench request
_BIG = 1e30  # |feature| above this is rejected (inf, huge); NaN fails `f == f`


def _platform():
    impl = sys.implementation
    return {
        "platform": sys.platform,
        "implementation": impl.name,
        "version": ".".join(str(v) for v in impl.version[:3]),
        "machine": getattr(impl, "_machine", ""),
    }


def _features(model, value):
    """Validate one input: a list of n_features finite numbers (bool is not a number); for a
    sequence model a window of n >= 1 steps, n*C numbers row-major [n, C] (n > T: the model
    runs its last T steps, the long window rule)."""
    if getattr(model, "seq", False):
        C = model.n_features
        if not isinstance(value, list):
            raise RequestError("features must be a list of n*%d numbers (a window)" % C)
        if len(value) % C or not len(value):
            raise RequestError(
                "features: a window is n*%d numbers with n >= 1 steps, got %d numbers"
                % (C, len(value))
            )
    else:
        if not isinstance(value, list):
            raise RequestError("features must be a list of %d numbers" % model.n_features)
        if len(value) != model.n_features:
            raise RequestError(
                "features: expected %d numbers, got %d" % (model.n_features, len(value))
            )
    for f in value:
        if isinstance(f, bool) or not isinstance(f, (int, float)):
            raise RequestError("features must be numbers, got %s" % type(f).__name__)
        if not (f == f) or f > _BIG or f < -_BIG:
            raise RequestError("features must be finite numbers (got NaN, inf or > 1e30)")
    return value


def _steps(model, features):
    """Steps n the model runs of a validated input: len // C for a sequence model, at most T
    (the last T steps of a longer window), None (run_int8's default) for any other."""
    return model.window_steps(features) if getattr(model, "seq", False) else None


def _xq_buffer(model, state=None):
    """The input buffer of quantize/run_int8: the model's own (input_len values of its
    xq_typecode: int8, or int32 for a wider input grid), allocated once with it."""
    return model._xq


def _path(req):
    path = req.get("path", "both" if getattr(_state["model"], "quantized", True) else "float")
    if path not in ("int8", "float", "both"):
        raise RequestError("path must be 'int8', 'float' or 'both'")
    if path != "float" and not getattr(_state["model"], "quantized", True):
        raise RequestError("this blob has float32 weights only: use path 'float'")
    return path


# the loaded model and its buffers (the line buffer is server_link.shared_line())
_state = {"model": None, "out": None, "blob": None, "f32": None}


def _blob_identity(path):
    """{"blob_crc", "blob_size"} of the model file: its own trailing CRC-32 field (over every
    byte before it, docs/blob-format.md), read from the file's last 4 bytes, not recomputed."""
    if not isinstance(path, str):  # the blob's bytes (tests)
        tail, size = bytes(path[-4:]), len(path)
    else:
        try:
            with open(path, "rb") as f:
                size = f.seek(0, 2)
                f.seek(max(size - 4, 0))
                tail = f.read(4)
        except OSError:
            return {"blob_crc": None, "blob_size": None}
    if len(tail) < 4:
        return {"blob_crc": None, "blob_size": size}
    return {"blob_crc": tail[0] | tail[1] << 8 | tail[2] << 16 | tail[3] << 24, "blob_size": size}


def _runtime_kind():
    """"mpy" when the runtime was imported from .mpy files, "py" when compiled at import."""
    mod = sys.modules.get("attention")
    name = getattr(mod, "__file__", "") or ""
    return "mpy" if name.endswith(".mpy") else "py"


def _infer_one(model, features, path):
    """-> (pred, xq list or None, int8 logits list or None, float logits list or None).
    A window's xq is its n*C valid values (the rest of the buffer is padding)."""
    xq = logits_q = logits_f = None
    pred = -1
    if path != "float":
        q = model.quantize(features, _xq_buffer(model))
        out = _state["out"]
        steps = _steps(model, features)
        # read before the run: a rocket model's window at P = 1 is consumed by it
        xq = [q[i] for i in range(len(features) if steps is None else steps * model.n_features)]
        pred = model.run_int8(q, out, steps)
        logits_q = list(out)
    if path != "int8":
        try:
            logits_f = list(model.logits(features, path="float"))
        except (ValueError, ArithmeticError) as exc:  # non-finite logits: said, no class
            raise RequestError(str(exc)) from None
        if path == "float":
            best = 0
            for c in range(1, len(logits_f)):
                if logits_f[c] > logits_f[best]:
                    best = c
            pred = best
    return pred, xq, logits_q, logits_f


def _op_info(model, req):
    free, alloc = _heap()
    info = {
        "protocol": PROTOCOL,
        "format_version": model.format_version,
        "n_features": model.n_features,
        "n_classes": model.n_classes,
        "classes": list(model.class_names),
        "quantized": model.quantized,
        "ops": list(model.op_names),
        "free_heap": free,
        "alloc_heap": alloc,
        "max_line": _link.max_line(),
        "max_batch": MAX_BATCH,
        "max_batch_b64": MAX_BATCH_B64,
        "encodings": ["json", "b64"],
        "runtime_version": RUNTIME_VERSION,
        "runtime": _runtime_kind(),
        "kernels": getattr(model, "kernels", None),
        "float_kernels": getattr(model, "float_kernels", None),
        "seq": getattr(model, "seq", False),
        "steps": getattr(model, "steps", 1),
        "patch": getattr(model, "patch", 1),
    }
    info.update(_state["blob"] or {})
    info.update(_platform())
    return info


def _op_infer(model, req):
    pred, xq, lq, lf = _infer_one(model, _features(model, req.get("features")), _path(req))
    rep = {"pred": pred, "class": model.class_names[pred]}
    if xq is not None:
        rep["xq"] = xq
        rep["logits_q"] = lq
    if lf is not None:
        rep["logits"] = lf
    return rep


def _op_batch(model, req):
    if req.get("enc") == "b64":  # imported on first use: not resident while the model loads
        return __import__("server_b64").batch(model, req, _state, _path, _xq_buffer,
                                              RequestError)  # fmt: skip
    if req.get("enc", "json") != "json":
        raise RequestError("enc must be 'json' or 'b64'")
    samples = req.get("samples")
    if not isinstance(samples, list) or not samples:
        raise RequestError("samples must be a non-empty list of feature lists")
    if len(samples) > MAX_BATCH:
        raise RequestError("at most %d samples per batch, got %d" % (MAX_BATCH, len(samples)))
    path = _path(req)
    for s in samples:  # validate all first: a batch is answered whole or not at all
        _features(model, s)
    preds, xqs, lqs, lfs = [], [], [], []
    for s in samples:
        pred, xq, lq, lf = _infer_one(model, s, path)
        preds.append(pred)
        if xq is not None:
            xqs.append(xq)
            lqs.append(lq)
        if lf is not None:
            lfs.append(lf)
    rep = {"n": len(samples), "pred": preds}
    if xqs:
        rep["xq"] = xqs
        rep["logits_q"] = lqs
    if lfs:
        rep["logits"] = lfs
    return rep


def _op_bench(model, req):
    n = req.get("n", 100)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_BENCH:
        raise RequestError("n must be an integer from 1 to %d" % MAX_BENCH)
    path = req.get("path", "int8")
    if path not in ("int8", "float"):
        raise RequestError("bench path must be 'int8' or 'float'")
    features = req.get("features")
    if features is not None:
        features = _features(model, features)
    elif getattr(model, "seq", False):  # a full window of T steps, zeros (no boxed floats)
        features = _zero_window(model.steps * model.n_features)
    else:
        features = [0.0] * model.n_features
    return _bench(model, features, path, n)


def _zero_window(n):
    """n float32 zeros: in the line buffer when they fit (its request is parsed by now; a
    BasicMotions window is 2.4 KB, a block a small heap may not have once the model is
    loaded), else an array of their own."""
    line = _link.shared_line(make=False)
    if line is None or line[0] is None or 4 * n > len(line[1]):
        return array.array("f", bytes(4 * n))
    window = memoryview(line[0])[:n]
    for i in range(n):
        window[i] = 0.0
    return window


def _bench(model, features, path, n):
    """Time n inferences; heap bytes per call from micropython.mem_total() where the port has
    it (allocations counted whether or not the GC frees them), else from gc.mem_alloc() with
    the GC off for the int8 path (which allocates nothing, so the heap cannot fill)."""
    out = _state["out"]
    steps = _steps(model, features)
    # a rocket model at P = 1 consumes its window in place: the runs after the first read its
    # pooled values (e = 0), the same loops
    if path == "int8":
        xq = model.quantize(features, _xq_buffer(model))
        model.run_int8(xq, out, steps)
    else:
        model.logits(features, path="float")
    mem_total = getattr(micropython, "mem_total", None) if micropython else None
    use_gc = mem_total is None and path == "int8" and hasattr(gc, "mem_alloc")
    gc.collect()
    if use_gc:
        gc.disable()
    a0 = mem_total() if mem_total else gc.mem_alloc() if use_gc else 0
    t0 = ticks_us()
    if path == "int8":
        for _ in range(n):
            model.run_int8(xq, out, steps)
    else:
        for _ in range(n):
            model.logits(features, path="float")
    dt = ticks_diff(ticks_us(), t0)
    a1 = mem_total() if mem_total else gc.mem_alloc() if use_gc else 0
    if use_gc:
        gc.enable()
    rep = {"n": n, "path": path, "us_per_inference": dt / n}
    rep["heap_bytes_per_call"] = (a1 - a0) / n if (mem_total or use_gc) else None
    return rep


_OPS = {"info": _op_info, "infer": _op_infer, "batch": _op_batch, "bench": _op_bench}


# the training ops (server_train.py), imported on the first one
_TRAIN_OPS = ("train_info", "train_put", "train_commit", "train_epoch", "train_get", "train_end")


def _route(op):
    """The function serving `op` (server_link.handle_line's route)."""
    fn = _OPS.get(op) if isinstance(op, str) else None
    if fn is None and op in _TRAIN_OPS:  # not any "train_*": no import for a junk name
        fn = __import__("server_train").handle  # on the first training op (docs/protocol.md)
    if fn is None:
        raise RequestError("unknown op %r; ops: info infer batch bench exit train_*" % (op,))
    return fn


def handle_line(model, line, payload=None):
    """One request line -> (reply dict, keep_running), served by this module's ops."""
    return _link.handle_line(_route, model, line, payload)


def run(model_path="model.bin", stdin=None, stdout=None, loaded=None):
    """Serve until an `exit` request (or Ctrl-C). Prints a banner line first. `loaded`: a
    list holding the line buffer the host's start command allocated first (an array('f') of
    line_size() bytes for the model, in one piece at the bottom of the heap while it is
    whole), then the Model
    of model_path, or the exception loading it raised, loaded before this module was imported
    (docs/protocol.md: the load is the heap's peak, 13 KB less without this module's
    bytecode); taken out of the list, so the REPL's global holds no model once the server
    stops. A training session is server_train.run, without this module."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    _state["model"] = None  # free a previous run's model (and its buffers) before loading
    _state["f32"] = None
    if micropython is not None:  # and the compact batches' code (imported again on use)
        sys.modules.pop("server_b64", None)
    gc.collect()
    model = loaded.pop() if loaded and len(loaded) > 1 else None
    if loaded:
        _link.shared_line(loaded.pop(), make=False)
    try:
        if model is not None:
            if isinstance(model, Exception):
                raise model
        else:
            from attention import Model  # here: a training session never needs it

            model = Model(model_path)
        gc.collect()
        # the line buffer after the model unless the start command allocated it first: loading
        # is the heap's peak (the reader modules and the parsed tensors at once), 4 KB less then
        # is what lets a Wine model load in 100 KiB from .py sources
        values = getattr(model, "steps", 1) * model.n_features  # one sample, whole
        reader = LineReader(stdin, MAX_LINE, _link.shared_line(size=_link.line_size(values)))
    except MemoryError:
        model = None
        gc.collect()
        write_reply(
            stdout,
            {
                "banner": "tinyattn-server",
                "protocol": PROTOCOL,
                "ok": False,
                "error": "not enough heap to load %s (runtime as .%s); flash the runtime "
                "precompiled ('tinyattn flash' deploys .mpy unless --py), or a smaller model"
                % (model_path, _runtime_kind()),
            },
        )
        return
    except (OSError, ValueError, ImportError) as exc:
        write_reply(
            stdout,
            {
                "banner": "tinyattn-server",
                "protocol": PROTOCOL,
                "ok": False,
                "error": "cannot load %s: %s" % (model_path, exc),
            },
        )
        return
    _state["model"] = model
    _state["out"] = model.new_logits()
    _state["blob"] = _blob_identity(model_path)
    write_reply(
        stdout,
        {
            "banner": "tinyattn-server",
            "protocol": PROTOCOL,
            "ok": True,
            "format_version": model.format_version,
            "n_features": model.n_features,
            "n_classes": model.n_classes,
            "blob_crc": _state["blob"]["blob_crc"],
        },
    )
    _link.serve(_route, model, reader, stdout)
