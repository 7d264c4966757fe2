# Device (MicroPython; also runs under CPython): compact batches of the tinyattn server.
"""`batch` with `enc: "b64"` (docs/protocol.md, Compact batches), imported by server.py on the
first such request: its bytecode is not resident while the model loads (the heap's peak).
"""

import array
from binascii import a2b_base64, b2a_base64

MAX_BATCH_B64 = 64  # as server.MAX_BATCH_B64
_BIG = 1e30  # as server._BIG


def _b64(data, what, RequestError):
    if not isinstance(data, str):
        raise RequestError("%s must be a base64 string" % what)
    try:
        return a2b_base64(data)
    except ValueError:
        raise RequestError("%s is not valid base64" % what) from None


def _text(arr):
    """base64 text of an array's bytes (b2a_base64 ends it with a newline: dropped)."""
    return b2a_base64(arr).decode().rstrip()


def batch(model, req, state, get_path, RequestError):
    """A batch as little-endian arrays in base64 (docs/protocol.md, Compact batches): `n`
    samples of `n_features` values each, as float32 raw features (`f32`) or as int8 model
    input (`xq`, int8 path only). The reply carries `pred` as a JSON list and `xq` (int8),
    `logits_q` (int32), `logits` (float32) as base64 arrays, row-major [n, …]. Decoding
    allocates; the int8 kernel (`run_int8`) still does not."""
    n = req.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_BATCH_B64:
        raise RequestError("n must be an integer from 1 to %d" % MAX_BATCH_B64)
    path = get_path(req)
    nf = model.n_features
    f32 = req.get("f32")
    given_xq = req.get("xq")
    if (f32 is None) == (given_xq is None):
        raise RequestError("a b64 batch carries exactly one of 'f32' and 'xq'")
    if f32 is not None:
        raw = _b64(f32, "f32", RequestError)
        if len(raw) != 4 * n * nf:
            raise RequestError(
                "f32: expected %d bytes (n %d x %d float32), got %d"
                % (4 * n * nf, n, nf, len(raw))
            )
        x = array.array("f", raw)
        raw = None
        for f in x:  # validate all first: a batch is answered whole or not at all
            if not (f == f) or f > _BIG or f < -_BIG:
                raise RequestError("features must be finite numbers (got NaN, inf or > 1e30)")
    else:
        if path != "int8":
            raise RequestError("an 'xq' batch runs the int8 path only: send path 'int8'")
        x = array.array("b", _b64(given_xq, "xq", RequestError))
        if len(x) != n * nf:
            raise RequestError(
                "xq: expected %d int8 (n %d x %d), got %d" % (n * nf, n, nf, len(x))
            )
    nc = model.n_classes
    out = state["out"]
    preds = []
    xq_all = lq_all = lf_all = None
    if path != "float":
        xq_all = array.array("b", bytes(n * nf))
        lq_all = array.array("i", bytes(4 * n * nc))
        xq = model.quantize([0.0] * nf) if f32 is not None else array.array("b", bytes(nf))
    if path != "int8":
        lf_all = array.array("f", bytes(4 * n * nc))
        lf = [0.0] * nc
    feats = [0.0] * nf
    for k in range(n):
        base = k * nf
        if f32 is not None:
            for i in range(nf):
                feats[i] = x[base + i]
        pred = -1
        if path != "float":
            if f32 is not None:
                model.quantize(feats, xq)
            else:
                for i in range(nf):
                    xq[i] = x[base + i]
            pred = model.run_int8(xq, out)
            for i in range(nf):
                xq_all[base + i] = xq[i]
            for c in range(nc):
                lq_all[k * nc + c] = out[c]
        if path != "int8":
            best = model.run_float(feats, lf)
            if path == "float":
                pred = best
            for c in range(nc):
                lf_all[k * nc + c] = lf[c]
        preds.append(pred)
    rep = {"n": n, "enc": "b64", "pred": preds}
    if xq_all is not None:
        rep["xq"] = _text(xq_all)
        rep["logits_q"] = _text(lq_all)
    if lf_all is not None:
        rep["logits"] = _text(lf_all)
    return rep
