# Device (MicroPython; also runs under CPython): the training ops of the tinyattn server.
"""On-board training over the serial link (DESIGN §11, issue 13; docs/protocol.md, Training).

Imported by server.py on the first `train_*` request, never for inference. `run()` starts a
training session: the server's request loop (server_link.py) serving these ops only, without
the inference server or a model, so the heap goes to training. The host
(tinyattn.board.onboard) sends the initial weights and the rows as
files, then one `train_epoch` request per epoch carrying that epoch's minibatch order (the host's
permutation), and fetches the weights back.

Files on the board's filesystem:
  train_ckpt.tafm  the weights being trained: the host's initial weights (TAFM,
                   attention_trainfile.py) until the first epoch ends, then the checkpoint
                   written atomically after every epoch (weights, optimizer state, step). Its
                   meta carries the run: "run" (the host's id), "train" (config), "ops".
  train_data.bin   the rows (TAFD, below): the first n_train train, the rest evaluated only;
                   or, for a window model (seq-attn), a windows file (TAWF,
                   attention_train_seq.py), whose run server_train_seq.py loads: imported
                   only then, so an Iris session never holds its code.
Uploads go to NAME.part and replace NAME only when their size and CRC-32 match (`train_commit`),
so a reset or a dropped link never leaves a half-written file in use. They stay while the run
can resume; `train_end` with `remove` (the host has the final weights) deletes them. Epochs
done = step // steps per epoch (checkpoints are taken at epoch ends only); a reset loses at
most the epoch that was running.

TAFD (little-endian): magic b"TAFD" | u16 version 1 | u16 flags 0 | u32 n_rows N | u32
n_features F | u32 n_train | float32 X [N, F] | u8 labels [N] | zeros to a multiple of 4 |
u32 CRC-32 of every byte before it.

A window run's `train_epoch` also carries the epoch's time shifts (server_train_seq.py).

`--head-only` (meta train.head_only): only the last op (a dense: the classifier) trains. The
frozen body's output for every row is computed once when the run loads (Z [N, width]), then a
one-layer net trains over Z on a view of the head's slice of theta and of the optimizer
state, so checkpoints keep the whole model's layout.

References: docs/protocol.md (Training); device/attention_train.py (Net, Trainer, optimizers);
device/attention_trainfile.py (TAFM).
"""

import gc
import json
import os
import struct
import sys
from array import array
from binascii import a2b_base64, b2a_base64

import server_link as link

try:
    from binascii import crc32
except ImportError:  # a port built without binascii.crc32
    from attention_trainfile import crc32  # noqa: F811

from attention_trainfile import floats, zeros
from server_link import RequestError, ticks_diff, ticks_us

TRAIN_PROTOCOL = 1
MAX_CHUNK = 2048  # file bytes per train_put / train_get (2732 base64 characters: one line)
WEIGHTS = "train_ckpt.tafm"
DATA = "train_data.bin"
_FILES = {"weights": WEIGHTS, "data": DATA}
_DATA_MAGIC = b"TAFD"
_WINDOWS_MAGIC = b"TAWF"  # a window model's data (attention_train_seq.py, server_train_seq.py)
_DATA_HEADER = "<4sHHIII"  # magic, version, flags, n_rows, n_features, n_train (TAWF: N, T, C)
_DATA_HEADER_SIZE = 20
_TAFM_HEADER = "<4sHHIIII"  # attention_trainfile.py: magic, version, flags, meta_len, P, ...
_CONFIG = ("epochs", "batch_size", "lr", "optimizer", "weight_decay", "momentum", "schedule",
           "label_smoothing")  # fmt: skip

_run = {}  # the loaded run (net, optimizer, trainer, rows); emptied whenever a file changes


def _int(req, key, lo, hi):
    v = req.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise RequestError("%s must be an integer from %d to %d" % (key, lo, hi))
    return v


def _size(path):
    try:
        return os.stat(path)[6]
    except OSError:
        return -1


def _file(req):
    name = req.get("file")
    if name not in _FILES:
        raise RequestError("file must be 'weights' or 'data'")
    return _FILES[name]


def _b64(req, key):
    """The bytes of a base64 field: a str decoded into new bytes, or a link.Payload (a long
    field LineReader left in the line buffer: a 2 KB chunk's 2732 characters) decoded in
    place, its bytes a view of that buffer."""
    text = req.get(key)
    if not isinstance(text, (str, link.Payload)):
        raise RequestError("%s must be a base64 string" % key)
    try:
        if isinstance(text, str):
            return a2b_base64(text)
        text.decode()
        return text.bytes()
    except ValueError:
        raise RequestError("%s is not valid base64" % key) from None


def _file_crc(path):
    crc = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(512)
            if not chunk:
                return crc & 0xFFFFFFFF
            crc = crc32(chunk, crc)


def _replace(src, dst):
    """os.rename over dst (one step on littlefs and the unix port; FAT needs dst gone first)."""
    try:
        os.rename(src, dst)
    except OSError:
        try:
            os.remove(dst)
        except OSError:
            pass
        os.rename(src, dst)


def _peek(path):
    """(meta dict, step, n_params) from a TAFM file's header and meta, without its arrays."""
    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) < 24:
            raise ValueError("%s: shorter than its header" % path)
        magic, version, flags, meta_len, P, step, n_state = struct.unpack(_TAFM_HEADER, head)
        if magic != b"TAFM" or meta_len > 65536:
            raise ValueError("%s: not a board float model file" % path)
        meta = json.loads(f.read(meta_len))
    return meta, step, P


def _config(meta, path):
    cfg = meta.get("train") if isinstance(meta, dict) else None
    if not isinstance(cfg, dict) or "ops" not in meta or "n_features" not in meta:
        raise RequestError("%s: meta lacks 'ops', 'n_features' or 'train'; send the weights "
                           "with tinyattn train --on-board" % path)  # fmt: skip
    for key in _CONFIG:
        if key not in cfg:
            raise RequestError("%s: meta 'train' lacks %r" % (path, key))
    return cfg


def _data_header(path):
    with open(path, "rb") as f:
        head = f.read(_DATA_HEADER_SIZE)
    if len(head) < _DATA_HEADER_SIZE:
        raise ValueError("%s: shorter than its header" % path)
    magic, version, flags, N, F, n_train = struct.unpack(_DATA_HEADER, head)
    if magic == _WINDOWS_MAGIC and version == 1 and not flags and 0 < N < 65536:
        T, C = F, n_train  # windows: n_train is in the weights' meta (None here)
        return N, C, None, 20 + 3 * N + (-3 * N) % 4 + 4 * N * T * C + 4
    if magic != _DATA_MAGIC or version != 1 or flags:
        raise ValueError("%s: not a training data file (TAFD or TAWF version 1)" % path)
    if not 0 < n_train <= N or N > 65535 or F > 4096:
        raise ValueError("%s: %d rows, %d train, %d features: corrupt" % (path, N, n_train, F))
    size = _DATA_HEADER_SIZE + 4 * N * F + N + (-N) % 4 + 4
    return N, F, n_train, size


def _read_data():
    """(X array('f') [N, F], labels bytearray [N], n_train, F) of DATA, its CRC checked."""
    N, F, n_train, size = _data_header(DATA)
    if _size(DATA) != size:
        raise ValueError("%s: %d bytes, its header says %d" % (DATA, _size(DATA), size))
    X = floats(N * F)
    labels = bytearray(N)
    with open(DATA, "rb") as f:
        head = f.read(_DATA_HEADER_SIZE)
        f.readinto(X)
        f.readinto(labels)
        pad = f.read((-N) % 4)
        tail = f.read(4)
    crc = crc32(pad, crc32(labels, crc32(X, crc32(head))))
    if struct.unpack("<I", tail)[0] != crc & 0xFFFFFFFF:
        raise ValueError("%s: CRC mismatch (file corrupt); send the data again" % DATA)
    return X, labels, n_train, F


# -------------------------------------------------------------------------------- the run


def _head_params(op):
    n = int(op["in"]) * int(op["out"])
    return n + (int(op["out"]) if op.get("bias", True) else 0)


def _body_features(at, ops, F, theta, X, N):
    """Z [N, width]: the input of the last op (the classifier) for every row, computed once
    by the frozen body, one row at a time (a net for one row: its buffers are 1/batch of a
    training net's; freed afterwards, before the head's net is built)."""
    net = at.Net(ops, F, 1, theta)
    head = net.layers[-1]
    width = head.n_in
    Z = floats(N * width)
    labels = bytearray(N)  # unused: the body's forward needs none
    rows = range(N)
    x = None
    for r in rows:
        net.gather(X, labels, rows, r, 1)
        net.forward(1)
        x = head.x  # (1, width)
        for i in range(width):
            Z[r * width + i] = x[i]
    net = head = x = None
    gc.collect()
    return Z, width


def optimizer_state(cfg, state, P):
    """The optimizer's state vectors: the checkpoint's, or zeros for a run not started yet."""
    n_state = 2 if cfg["optimizer"] == "adam" else 1
    if not state:
        return [zeros(P) for _ in range(n_state)]
    if len(state) != n_state:
        raise RequestError("%s: %d optimizer state vectors, %s keeps %d" % (
            WEIGHTS, len(state), cfg["optimizer"], n_state))  # fmt: skip
    return state


def _drop():
    """Forget the loaded run (a window run's data file is closed) and free its heap."""
    X = _run.get("X")
    if X is not None and hasattr(X, "close"):
        X.close()
    _run.clear()
    gc.collect()


def _load():
    """The run in memory: loaded from WEIGHTS and DATA on first use after a start or a
    change (an out-of-memory board gets an error reply, not a dead server)."""
    if _run:
        return _run
    try:
        return _load_run()
    except MemoryError:
        _drop()
        raise RequestError(
            "not enough heap to train: %d bytes free with the modules loaded; "
            "a smaller batch or model, or a board with more RAM" % gc.mem_free()
        ) from None


def _extend(ops):
    """Import the training modules of the op kinds attention_train does not hold itself
    (each registers its kind there), only for a model that has one: an iris-attn session
    never holds their code."""
    for op in ops:
        if op.get("op") == "myattn":
            import attention_train_myattn  # noqa: F401  (registers op myattn)


def _load_run():
    try:
        with open(DATA, "rb") as f:
            windows = f.read(4) == _WINDOWS_MAGIC
    except OSError:
        windows = False
    if windows:  # a window model's run: its code is imported now, never for Iris
        import server_train_seq

        return server_train_seq.load_run(sys.modules[__name__], _run)
    import attention_train as at
    from attention_trainfile import load

    gc.collect()
    try:
        meta_b, theta, step, state = load(WEIGHTS)
        X, labels, n_train, F = _read_data()
    except OSError:
        raise RequestError("no weights or data on the board: send both (train_put)") from None
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    meta = json.loads(meta_b)
    cfg = _config(meta, WEIGHTS)
    ops = meta["ops"]
    if int(meta["n_features"]) != F:
        raise RequestError("the data has %d features, the model %d" % (F, meta["n_features"]))
    B = int(cfg["batch_size"])
    P = len(theta)
    state = optimizer_state(cfg, state, P)
    _extend(ops)
    try:
        if cfg.get("head_only"):
            if ops[-1].get("op") != "dense":
                raise RequestError("head-only training needs a dense classifier as the last op")
            X, F = _body_features(at, ops, F, theta, X, len(labels))
            ph = _head_params(ops[-1])
            net = at.Net(ops[-1:], F, B, memoryview(theta)[P - ph :])
            opt_state = tuple(memoryview(s)[P - ph :] for s in state)
        else:
            net = at.Net(ops, F, B, theta)
            opt_state = tuple(state)
    except (ValueError, KeyError) as exc:
        raise RequestError("cannot train these ops: %s" % exc) from None
    opt = at.optimizer(net, cfg["optimizer"], cfg["lr"], cfg["weight_decay"], cfg["momentum"],
                       opt_state, step)  # fmt: skip
    trainer = at.Trainer(net, opt, X, memoryview(labels)[:n_train], int(cfg["epochs"]),
                         cfg["lr"], cfg["schedule"] == "cosine", cfg["label_smoothing"],
                         step)  # fmt: skip
    _run.update(meta=meta_b, run=meta.get("run"), cfg=cfg, theta=theta, state=state, opt=opt,
                trainer=trainer, X=X, labels=labels, n_train=n_train, order=array("H", bytes(
                    2 * n_train)), seen=bytearray(n_train), last=None)  # fmt: skip
    gc.collect()
    return _run


def _order(r, req):
    """The epoch's minibatch order: a permutation of the n_train train rows (uint16, base64)."""
    raw = _b64(req, "order")
    n = r["n_train"]
    if len(raw) != 2 * n:
        raise RequestError("order: expected %d bytes (%d rows x uint16), got %d" % (
            2 * n, n, len(raw)))  # fmt: skip
    order, seen = r["order"], r["seen"]
    for i in range(n):
        seen[i] = 0
    for i in range(n):
        row = raw[2 * i] | raw[2 * i + 1] << 8
        if row >= n or seen[row]:
            raise RequestError("order is not a permutation of the %d train rows" % n)
        seen[row] = 1
        order[i] = row
    return order


def _evaluate(r):
    t = r["trainer"]
    n, N = r["n_train"], len(r["labels"])
    _, train_hits = t.evaluate(r["X"], r["labels"], range(n))
    test_hits = t.evaluate(r["X"], r["labels"], range(n, N))[1] if N > n else 0
    return train_hits, test_hits


# -------------------------------------------------------------------------------------- ops


def _op_info(req):
    import attention_train as at

    free, alloc = link.heap()
    rep = {"train_protocol": TRAIN_PROTOCOL, "runtime_version": link.RUNTIME_VERSION,
           "train_kernels": at.KERNELS, "free_heap": free, "alloc_heap": alloc,
           "max_chunk": MAX_CHUNK, "run": None, "step": None, "epoch": None, "epochs": None,
           "data_crc": None, "data_rows": None, "loaded": bool(_run)}  # fmt: skip
    try:
        N, F, n_train, size = _data_header(DATA)
        with open(DATA, "rb") as f:
            f.seek(size - 4)
            rep["data_crc"] = struct.unpack("<I", f.read(4))[0]
        rep["data_rows"] = N
    except (OSError, ValueError) as exc:
        n_train = 0
        if _size(DATA) >= 0:
            rep["data_error"] = str(exc)
    try:
        meta, step, P = _peek(WEIGHTS)
        cfg = _config(meta, WEIGHTS)
        rep["run"] = meta.get("run")
        rep["step"] = step
        rep["epochs"] = cfg["epochs"]
        rep["n_params"] = P
        n_train = n_train if n_train is not None else cfg.get("n_train")  # windows: meta's
        if n_train:
            rep["epoch"] = step // -(-n_train // int(cfg["batch_size"]))
    except (OSError, ValueError, RequestError) as exc:
        if _size(WEIGHTS) >= 0:
            rep["weights_error"] = str(exc)
    return rep


def _op_put(req):
    """One chunk of a file at `offset`, appended to NAME.part (offset 0 starts it afresh)."""
    path = _file(req) + ".part"
    offset = _int(req, "offset", 0, 1 << 24)
    chunk = _b64(req, "b64")
    if len(chunk) > MAX_CHUNK:
        raise RequestError("b64: at most %d bytes a chunk, got %d" % (MAX_CHUNK, len(chunk)))
    have = _size(path) if offset else 0
    if have == offset + len(chunk) and offset:
        return {"size": have, "again": True}  # a resend of the chunk written last
    if have != offset:
        raise RequestError("offset %d, but %s holds %d bytes: send from offset %d" % (
            offset, path, max(have, 0), max(have, 0)))  # fmt: skip
    with open(path, "ab" if offset else "wb") as f:
        f.write(chunk)
    return {"size": offset + len(chunk)}


def _op_commit(req):
    """Check NAME.part (size, CRC-32, contents) and rename it over NAME."""
    final = _file(req)
    path = final + ".part"
    size = _int(req, "size", 1, 1 << 24)
    want = _int(req, "file_crc", 0, 0xFFFFFFFF)
    have = _size(path)
    if have < 0 and _size(final) == size and _file_crc(final) == want:
        return {"size": size, "again": True}  # committed already: the reply was lost
    if have != size:
        raise RequestError("%s holds %d bytes, not %d: send the file again" % (
            path, max(have, 0), size))  # fmt: skip
    if _file_crc(path) != want:
        raise RequestError("%s: CRC mismatch: send the file again" % path)
    try:
        if final == DATA:
            _data_header(path)
        else:
            _config(_peek(path)[0], path)
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    _drop()
    _replace(path, final)
    return {"size": size}


def _op_epoch(req):
    """Train epoch `epoch` (0-based) over `order`, checkpoint, evaluate; a resend of the epoch
    just done gets its figures again."""
    r = _load()
    t = r["trainer"]
    done = t.step // t.steps_per_epoch
    e = _int(req, "epoch", 0, 65535)
    if r["last"] and e == done - 1 and r["last"]["epoch"] == done:
        rep = dict(r["last"])
        rep["again"] = True
        return rep
    if e != done:
        raise RequestError("epoch %d: the board's checkpoint has %d epochs done; send epoch %d"
                           % (e, done, done))  # fmt: skip
    if done >= int(r["cfg"]["epochs"]):
        raise RequestError("all %d epochs are done: fetch the weights (train_get)" % done)
    order = _order(r, req)
    prep = r.get("prep")  # a window run: the epoch's time shifts (server_train_seq)
    if prep is not None:
        prep(sys.modules[__name__], r, req)
    elif "shifts" in req:
        raise RequestError("shifts: only a window model's run takes them")
    t0 = ticks_us()
    loss = t.epoch(order)
    seconds = ticks_diff(ticks_us(), t0) / 1e6
    if prep is not None:
        t.net.shifts = None  # evaluation reads the windows as they are
    from attention_trainfile import save

    avg = r.get("average")  # a window run's weight average, kept until the last epoch
    avg = avg.pending() if avg is not None else None
    save(WEIGHTS, r["meta"], r["theta"], r["opt"].t, r["state"], avg)  # atomic: tmp + rename
    train_hits, test_hits = _evaluate(r)
    free, _ = link.heap()
    r["last"] = {"epoch": done + 1, "step": t.step, "loss": loss, "train_correct": train_hits,
                 "n_train": r["n_train"], "test_correct": test_hits,
                 "n_test": len(r["labels"]) - r["n_train"], "seconds": seconds,
                 "free_heap": free}  # fmt: skip
    return dict(r["last"])


def _op_get(req):
    """`n` bytes (at most MAX_CHUNK) of the weights file from `offset`, base64."""
    offset = _int(req, "offset", 0, 1 << 24)
    n = _int(req, "n", 1, MAX_CHUNK) if "n" in req else MAX_CHUNK
    size = _size(WEIGHTS)
    if size < 0:
        raise RequestError("no weights on the board (%s)" % WEIGHTS)
    line = link.shared_line(make=False)
    with open(WEIGHTS, "rb") as f:
        f.seek(offset)
        if line is None:
            return {"size": size, "offset": offset, "b64": b2a_base64(f.read(n)).decode().rstrip()}
        # the line buffer is free once the request is parsed: the chunk is read into its end
        # and encoded 192 bytes (256 characters) at a time into its start, every write behind
        # what is still to read; the reply's b64 is a view of it, which link.write_reply
        # writes as a JSON string in pieces: no block of the chunk's size
        buf = line[1]
        mv = memoryview(buf)
        end = len(buf)
        start = end - n
        end = start + f.readinto(mv[start:end])
    w = 0
    for i in range(start, end, 192):
        piece = b2a_base64(mv[i : min(i + 192, end)], newline=False)
        buf[w : w + len(piece)] = piece
        w += len(piece)
    return {"size": size, "offset": offset, "b64": mv[:w]}


def _op_end(req):
    """Drop the loaded run (frees its heap); with `remove` (the host has the final weights)
    its files too, so that nothing of the run stays on the board's flash."""
    _drop()
    removed = []
    if req.get("remove"):
        for name in (WEIGHTS, DATA):
            for path in (name, name + ".part", name + ".tmp"):
                if _size(path) >= 0:
                    os.remove(path)
                    removed.append(path)
    return {"freed": True, "removed": removed}


_OPS = {"train_info": _op_info, "train_put": _op_put, "train_commit": _op_commit,
        "train_epoch": _op_epoch, "train_get": _op_get, "train_end": _op_end}  # fmt: skip


def handle(model, req):
    """The route's function for `train_*` ops (the inference model, if any, is unused)."""
    return _OPS[req["op"]](req)


def _route(op):
    """server_link.handle_line's route in a training session: `train_*` ops only."""
    if op not in _OPS:
        raise RequestError("unknown op %r; a training session serves: %s exit" % (
            op, " ".join(_OPS)))  # fmt: skip
    return handle


def run(stdin=None, stdout=None, loaded=None):
    """A training session: the server loop with these ops only. Banner first. `loaded`: a
    list holding the line buffer the host's start command allocated first (as server.run)."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    _run.clear()  # a session after an interrupted one reloads from the checkpoint
    gc.collect()
    line = link.shared_line(loaded.pop() if loaded else None)
    reader = link.LineReader(stdin, link.MAX_LINE, line)
    link.write_reply(stdout, {"banner": "tinyattn-server", "protocol": link.PROTOCOL,
                              "ok": True, "mode": "train",
                              "train_protocol": TRAIN_PROTOCOL})  # fmt: skip
    link.serve(_route, None, reader, stdout)
