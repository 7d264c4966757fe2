# Device (MicroPython; also runs under CPython): the tinyattn serial server.
"""Newline-delimited JSON over the serial console: one request line in, one reply line out.

Started from the raw REPL (`import server; server.run()`); the host's parity tool talks to it
with pyserial. Every request is a JSON object with an optional `id` that the reply echoes; a
bad request gets `{"ok": false, "error": "..."}` and the loop goes on. Only `exit` (or Ctrl-C)
returns to the REPL. The protocol is specified in docs/protocol.md.
"""

import array
import gc
import json
import sys

try:
    import micropython
except ImportError:  # CPython
    micropython = None

try:
    from time import ticks_diff, ticks_us
except ImportError:  # CPython
    from time import perf_counter_ns

    def ticks_us():
        return perf_counter_ns() // 1000

    def ticks_diff(a, b):
        return a - b


from binascii import a2b_base64

try:
    from binascii import crc32
except ImportError:  # a port built without binascii.crc32
    from attention import crc32

try:
    from micropython import const
except ImportError:  # CPython
    const = lambda x: x  # noqa: E731

PROTOCOL = 1
RUNTIME_VERSION = "0.1.0"  # device/package.json "version"
MAX_LINE = 4096  # bytes; longer request lines are rejected (the host splits batches to fit)
MAX_BATCH = 16  # samples per JSON batch request (a 100 KiB heap builds the reply comfortably)
MAX_BATCH_B64 = 64  # samples per base64 batch (server_b64.py; one array a field)
MAX_BENCH = 10000  # iterations per bench request
_BIG = 1e30  # |feature| above this is rejected (inf, huge); NaN fails `f == f`


class RequestError(Exception):
    """A request the server understood to be wrong: becomes an error reply."""


def _heap():
    if hasattr(gc, "mem_free"):
        gc.collect()
        return gc.mem_free(), gc.mem_alloc()
    return None, None


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
    sequence model a window of n steps, n*C numbers row-major [n, C] with 1 <= n <= T."""
    if getattr(model, "seq", False):
        C, T = model.n_features, model.steps
        if not isinstance(value, list):
            raise RequestError("features must be a list of n*%d numbers (a window)" % C)
        if len(value) % C or not 1 <= len(value) // C <= T:
            raise RequestError(
                "features: a window is n*%d numbers with 1 <= n <= %d steps, got %d numbers"
                % (C, T, len(value))
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
    """Steps n of a validated input: len // C for a sequence model, None (run_int8's default)
    for any other."""
    return len(features) // model.n_features if getattr(model, "seq", False) else None


def _xq_buffer(model, state=None):
    """The int8 input buffer of quantize/run_int8 (the model's input_len), allocated once."""
    state = _state if state is None else state
    n = getattr(model, "input_len", model.n_features)
    xq = state["xq"]
    if xq is None or len(xq) != n:
        xq = state["xq"] = array.array("b", bytes(n))
    return xq


def _path(req):
    path = req.get("path", "both" if getattr(_state["model"], "quantized", True) else "float")
    if path not in ("int8", "float", "both"):
        raise RequestError("path must be 'int8', 'float' or 'both'")
    if path != "float" and not getattr(_state["model"], "quantized", True):
        raise RequestError("this blob has float32 weights only: use path 'float'")
    return path


# the line buffer (line_buffer()) stays across runs: allocated once, before the first model
_state = {"model": None, "out": None, "blob": None, "xq": None, "f32": None, "line": None}


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
        pred = model.run_int8(q, out, _steps(model, features))
        xq = [q[i] for i in range(len(features))]
        logits_q = list(out)
    if path != "int8":
        logits_f = list(model.logits(features, path="float"))
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
        "max_line": MAX_LINE,
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
    line = _state["line"]
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


_CRC_TAG = ',"crc":'
_CRC_TAG_B = b',"crc":'
# the training session's ops (server_train._OPS), imported on the first one
_TRAIN_OPS = ("train_info", "train_put", "train_commit", "train_epoch", "train_get", "train_end")


def _covered(line, at):
    """The bytes of line[:at], without a copy where the port allows (MicroPython: a str has
    the buffer protocol; for an ASCII line char and byte offsets agree)."""
    try:
        view = memoryview(line)
    except TypeError:  # CPython
        return line[:at].encode()
    return view[:at] if len(view) == len(line) else line[:at].encode()


def unframe(line):
    """Check the optional integrity field: `{...,"crc":N}` where N is the CRC-32 of the line
    up to (not including) `,"crc":`. A corrupted request is refused, not computed. Returns
    whether the line carries the field: it is then the object's last member, which
    handle_line drops after parsing (the line is parsed as it came: a 3 KB window's line is
    not copied again)."""
    at = line.rfind(_CRC_TAG)
    if at < 0 or not line.endswith("}"):
        return False
    try:
        want = int(line[at + len(_CRC_TAG) : -1])
    except ValueError:
        raise RequestError("bad crc field") from None
    if crc32(_covered(line, at)) != want:
        raise RequestError("crc mismatch: request corrupted on the link, resend it")
    if line.find('"crc"', 0, at) >= 0:  # another crc key before the field
        raise RequestError("bad crc field")
    return True


_OOM_LINE = "\x01"  # marker: the request line could not be decoded for lack of heap
_LONG_LINE = "\x02"  # marker: the request line was longer than MAX_LINE
# compact payloads (docs/protocol.md): a base64 field of at least _CUT characters stays in the
# line buffer (a Payload) and the rest of the line becomes the request's JSON text
_PAYLOAD_TAGS = (b'"f32":"', b'"xq":"', b'"b64":"')
_CUT = const(256)
_CHUNK = const(256)  # base64 characters decoded at a time (-> 192 bytes)


def line_buffer(size):
    """(floats, buf): `size` bytes of heap in one piece, seen as float32 (an array('f'), or a
    memoryview cast to 'f' on CPython) and as a bytearray over the same memory: the request
    line, then a compact batch's float32 payload decoded in place (Payload). MicroPython: the
    array allocated whole (from a range: no transient copy), `uctypes.bytearray_at` its bytes;
    floats is None where neither uctypes nor memoryview.cast exists (payloads then become
    bytes of their own)."""
    try:
        import uctypes

        floats = array.array("f", range(size // 4))
        return floats, uctypes.bytearray_at(uctypes.addressof(floats), size)
    except ImportError:
        buf = bytearray(size)
        try:
            return memoryview(buf).cast("f"), buf
        except AttributeError:
            return None, buf


class Payload:
    """A compact request's base64 field, left where it arrived: characters [a, b) of the line
    buffer (LineReader). `decode()` writes its bytes in place at the start of the same buffer
    (the rest of the line was copied out first; 4 characters give 3 bytes, so every write lands
    behind the characters still to read), a chunk of _CHUNK characters at a time: serving a
    3.3 KB window line allocates no block larger than 192 bytes for it."""

    def __init__(self, key, floats, buf, a, b):
        self.key = key
        self._floats = floats
        self._buf = buf
        self._a = a
        self._b = b
        self.n = -1  # bytes decoded

    def decode(self):
        """Decode in place; returns the number of bytes. ValueError: not base64."""
        if self.n >= 0:
            return self.n
        buf, a, b = self._buf, self._a, self._b
        if (b - a) % 4:
            raise ValueError("base64 length")
        mv = memoryview(buf)
        w = 0
        for i in range(a, b, _CHUNK):
            chunk = a2b_base64(mv[i : min(i + _CHUNK, b)])
            k = len(chunk)
            buf[w : w + k] = chunk
            w += k
            chunk = None
        self.n = w
        return w

    def floats(self, n):
        """The first n decoded float32 values, in place (a memoryview of the line buffer)."""
        return memoryview(self._floats)[:n]

    def bytes(self):
        """The decoded bytes, in place (unsigned: a memoryview of the line buffer)."""
        return memoryview(self._buf)[: self.n]


def _ascii(data):
    """str of a line's bytes; bytes damaged on the link (not UTF-8) become "?" (the line, and so
    its id, is kept; its CRC then fails and the host resends at once)."""
    try:
        return str(data, "utf-8")
    except UnicodeError:
        pass
    data = bytearray(data)
    for i in range(len(data)):
        if data[i] > 127:
            data[i] = 63
    return data.decode()


class LineReader:
    """Bounded line reader over the console: bytes go into one buffer allocated once (or given:
    line_buffer()), so a long or endless line cannot exhaust the heap. A line longer than
    `max_line` is consumed to its newline and returned as a marker that `handle_line` rejects
    as too long. A line carrying a long base64 payload (`f32`, `xq`, `b64`) is returned without
    it (that field's value empty, the CRC field checked and recomputed for the shorter text),
    the payload left in the buffer as `self.payload` (a Payload; None for other lines)."""

    def __init__(self, stream, max_line, buf=None):
        raw = getattr(stream, "buffer", stream)
        self._readinto = getattr(raw, "readinto", None)
        self._readline = stream.readline
        self._floats, self._buf = buf or line_buffer(max_line)
        self._one = bytearray(1)
        self.payload = None

    def readline(self):
        """The next line as str without its newline; None at EOF."""
        self.payload = None
        if self._readinto is None:  # a text stream without a buffer (CPython tests)
            line = self._readline()
            return line if line else None
        buf, one, readinto = self._buf, self._one, self._readinto
        n = 0
        size = len(buf)
        while True:
            if not readinto(one):
                return None
            c = one[0]
            if c == 10:
                break
            if n < size:
                buf[n] = c
            n += 1
        if n > size:
            return _LONG_LINE
        while n and buf[n - 1] in (13, 32):  # "\r\n" from a terminal
            n -= 1
        try:
            line = self._cut(n) if self._floats is not None and n > _CUT else None
            return line if line is not None else _ascii(memoryview(buf)[:n])
        except MemoryError:  # a fragmented heap has no n-byte block: refuse, keep serving
            self.payload = None
            gc.collect()
            try:  # keep the id (`{"id":N,` first) so the host halves the batch at once
                return _OOM_LINE + bytes(buf[: min(n, 24)]).decode()
            except (MemoryError, UnicodeError):
                return _OOM_LINE

    def _cut(self, n):
        """The line's text without its long base64 field (self.payload), or None when it has
        none. A CRC field that matches the whole line is replaced by the CRC of the text
        returned (what unframe checks); one that does not is left as it is, so unframe
        refuses the line as damaged."""
        buf = self._buf
        for tag in _PAYLOAD_TAGS:
            a = buf.find(tag, 0, n)
            if a >= 0:
                break
        else:
            return None
        a += len(tag)
        b = buf.find(b'"', a, n)
        if b - a < _CUT:  # no closing quote (b = -1), or short: the line as it is
            return None
        mv = memoryview(buf)
        text = None
        at = buf.rfind(_CRC_TAG_B, b, n)
        if at >= 0 and buf[n - 1] == 125:  # "}"
            try:
                want = int(bytes(mv[at + len(_CRC_TAG_B) : n - 1]))
            except ValueError:
                want = -1
            if crc32(mv[:at]) == want:
                text = bytes(mv[:a]) + bytes(mv[b:at])
                text += _CRC_TAG_B + str(crc32(text)).encode() + b"}"
        if text is None:
            text = bytes(mv[:a]) + bytes(mv[b:n])
        self.payload = Payload(tag[1:-3].decode(), self._floats, buf, a, b)
        return _ascii(text)


def _put(stream, text, crc):
    stream.write(text)
    return crc32(text.encode(), crc)


def write_reply(stream, obj):
    """Write `obj` as one framed JSON line, piece by piece: a batch reply is never built as
    one big string (a 100 KiB heap, fragmented by the float path, may not have 2 KB in one
    block); a bytes or memoryview value (base64 text: nothing to escape) is written as a JSON
    string, _CHUNK characters at a time. The CRC is carried along the pieces: same bytes,
    same CRC as `unframe` checks."""
    crc = _put(stream, "{", 0)
    sep = ""
    for key in obj:
        crc = _put(stream, sep + json.dumps(key) + ": ", crc)
        sep = ", "
        value = obj[key]
        if isinstance(value, list) and value and isinstance(value[0], list):
            crc = _put(stream, "[", crc)
            for i in range(len(value)):
                crc = _put(stream, (", " if i else "") + json.dumps(value[i]), crc)
            crc = _put(stream, "]", crc)
        elif isinstance(value, (bytes, memoryview)):  # base64 text: a string, in pieces
            crc = _put(stream, '"', crc)
            view = memoryview(value)
            for i in range(0, len(value), _CHUNK):
                crc = _put(stream, str(view[i : i + _CHUNK], "ascii"), crc)
            crc = _put(stream, '"', crc)
        else:
            crc = _put(stream, json.dumps(value), crc)
    stream.write(_CRC_TAG + str(crc) + "}\n")


def _salvage_id(line):
    """The id of a request that failed its CRC or JSON parse, when the line still starts with
    `{"id":N,` (the host always puts it first), so the host can resend at once."""
    if not line.startswith('{"id":'):
        return None
    end = line.find(",", 6)
    try:
        return int(line[6:end]) if end > 6 else None
    except ValueError:
        return None


def handle_line(model, line, payload=None):
    """One request line -> (reply dict, keep_running). Never raises for bad input. `payload`:
    the long base64 field LineReader cut out of the line (line has it as ""), which the
    request gets back as that Payload."""
    rid = None
    try:
        if line == _LONG_LINE or len(line) > MAX_LINE:
            raise RequestError("request line longer than %d bytes" % MAX_LINE)
        if line.startswith(_OOM_LINE):
            rid = _salvage_id(line[1:])
            raise RequestError("out of memory reading the request; send smaller batches")
        rid = _salvage_id(line)
        framed = unframe(line)
        try:
            req = json.loads(line)
        except (ValueError, TypeError):  # MicroPython raises ValueError for bad JSON
            raise RequestError("request is not valid JSON") from None
        if not isinstance(req, dict):
            raise RequestError("request must be a JSON object")
        if "crc" in req:
            if not framed:  # a CRC field unframe did not see: its ',' or ':' lost on the link
                raise RequestError("bad crc field")  # (MicroPython's json parses on without)
            del req["crc"]
        if payload is not None and req.get(payload.key) == "":
            req[payload.key] = payload
        rid = req.get("id")
        if rid is not None and (isinstance(rid, bool) or not isinstance(rid, (int, str))):
            rid = None
            raise RequestError("id must be an integer or a string")
        op = req.get("op")
        if op == "exit":
            return {"id": rid, "ok": True, "bye": True}, False
        fn = _OPS.get(op) if isinstance(op, str) and model is not None else None
        if fn is None and op in _TRAIN_OPS:  # not any "train_*": no import for a junk name
            fn = __import__("server_train").handle  # on the first training op (docs/protocol.md)
        if fn is None:
            raise RequestError("unknown op %r; ops: info infer batch bench exit train_*%s" % (
                op, "" if model else " (a training session: train_* only)"))  # fmt: skip
        rep = fn(model, req)
        rep["id"] = rid
        rep["ok"] = True
        return rep, True
    except RequestError as exc:
        return {"id": rid, "ok": False, "error": str(exc)}, True
    except MemoryError:
        gc.collect()
        return {"id": rid, "ok": False, "error": "out of memory handling the request"}, True
    except Exception as exc:  # a bug, not bad input: report it and keep serving
        return {"id": rid, "ok": False, "error": "internal error: %r" % (exc,)}, True


def run(model_path="model.bin", stdin=None, stdout=None, loaded=None):
    """Serve until an `exit` request (or Ctrl-C). Prints a banner line first. `model_path`
    None: a training session (server_train.run: train_* ops, no inference model loaded).
    `loaded`: a list holding the Model of model_path, or the exception loading it raised,
    loaded before this module was imported (the host's start command, docs/protocol.md: the
    load is the heap's peak, 13 KB less without this module's bytecode), after the line
    buffer the command allocated before it (an array('f') of MAX_LINE bytes, in one piece at
    the bottom of the heap while it is whole); taken out of the list, so the REPL's global
    holds no model once the server stops."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    _state["model"] = None  # free a previous run's model (and its buffers) before loading
    _state["xq"] = _state["f32"] = None
    if micropython is not None:  # and the compact batches' code (imported again on use)
        sys.modules.pop("server_b64", None)
    gc.collect()
    model = loaded.pop() if loaded and model_path is not None else None
    buf = loaded.pop() if loaded else None
    if buf is not None and _state["line"] is None:
        try:
            import uctypes

            _state["line"] = (buf, uctypes.bytearray_at(uctypes.addressof(buf), MAX_LINE))
        except ImportError:
            pass
        buf = None
    if model_path is None:
        return __import__("server_train").run(stdin, stdout, _state["line"])
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
        if _state["line"] is None:
            _state["line"] = line_buffer(MAX_LINE)
        reader = LineReader(stdin, MAX_LINE, _state["line"])
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
    serve(model, reader, stdout)


def serve(model, reader, stdout):
    """The request loop: one reply line per request line, until `exit` or EOF."""
    while True:
        line = reader.readline()
        if line is None:  # EOF (CPython pipes; boards never see it)
            return
        line = line.strip()
        if not line:
            continue
        rep, keep = handle_line(model, line, reader.payload)
        line = reader.payload = None
        try:
            write_reply(stdout, rep)
        except MemoryError:  # finish the line so the host can resync, and go on serving
            rep = None
            gc.collect()
            stdout.write(
                '\n{"id": null, "ok": false, "error": "out of memory writing the reply"}\n'
            )
        rep = None
        if not keep:
            return
        gc.collect()  # keep the heap unfragmented for the next request (about 1 ms)
