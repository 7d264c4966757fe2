# Device (MicroPython; also runs unchanged under CPython): op table and graph checks.
"""Last phase of reading a blob: the checks of each op's tensors and parameters, of the
shapes chaining from n_features to n_classes and, int8 blobs, of the small-int budget (every
requantization site's worst case for any int8 input, docs/blob-format.md check 12)
(`check_ops`), run by attention.read_blob after attention_blob.read_records and
attention_tensors.read_tensors have checked the file structure and been dropped again (the
phases never sit in a small heap together).

Messages as the host reader's (`tinyattn.intmodel.blob._check_op`): `shape mismatch in op K
(dense): ...`, `op K (attention): shift_q = 0 out of range 1..30`, ...
The rules only the seq-attn ops (7-10) need live in attention_ops_seq.py (the conv op's, 11,
in attention_ops_conv.py; the rocket op's, 12, in attention_ops_rocket.py), imported from here
when a blob has them (or is a seq model) and dropped with the other load-time modules.
"""

def _finite(v):
    return v == v and v - v == 0.0


def check_ops(api, blob, ops, tensors, tables, source, lean=False):
    """Bind each op's tensors by role after checking count, dtype and shape; check params and
    that shapes chain from [F] to [C]. `api`: the attention module (REMEDY, blob_error,
    Tensor), passed in: a phase never imports the API module. `ops`: [(Op, tensor
    indices)]; `tensors`: [(dtype code, shape, name, data)] of attention_tensors; `tables`:
    (OPS, DTYPES) of attention_blob. Returns [Op], each op's `t` mapping a role to a Tensor,
    or with `lean` to its data array (and `op.shape`: W role -> its shape), the Tensor
    objects never made."""

    def fail(problem, remedy=api.REMEDY):
        return api.blob_error(source, problem, remedy)

    OPS, DTYPES = tables
    F, C, quantized = blob.n_features, blob.n_classes, blob.quantized
    n_ops = len(ops)
    seq = ops[0][0].code == 7  # a seq model: op 0 embeds a window of T steps
    out = []
    shape = (F,)
    for k in range(n_ops):
        op, refs = ops[k]
        slots = _slots(op, quantized, k, fail)
        if len(refs) != len(slots):
            raise fail(
                "shape mismatch in op %d (%s): %d tensors, its parameters need %d (%s)"
                % (k, op.name, len(refs), len(slots), ", ".join([s[0] for s in slots]))
            )
        for i in range(len(slots)):
            role, dtype, want = slots[i]
            code, have, name, data = tensors[refs[i]]
            if code != dtype or have != want:
                raise fail(
                    "shape mismatch in op %d (%s): tensor %d (%s) is %s %r, expected %s %s %r"
                    % (k, op.name, refs[i], name, DTYPES[code][0], list(have), role,
                       DTYPES[dtype][0], list(want))
                )  # fmt: skip
            op.t[role] = data  # while checking: the data arrays
        shape = _check_op(k, op, OPS[op.code], shape, quantized, k == n_ops - 1, fail, seq)
        out.append(op)
    if shape != (C,):
        raise fail("shape mismatch: the last op outputs %r, n_classes is %d" % (list(shape), C))
    if quantized:
        for k in range(n_ops):
            _check_budget(k, out[k], fail)
    for k in range(n_ops):  # checked: the tensors as the caller asked
        op, refs = ops[k]
        slots = _slots(op, quantized, k, fail)
        if lean:
            op.shape = {}
        for i in range(len(refs)):
            code, have, name, data = tensors[refs[i]]
            role = slots[i][0]
            if not lean:
                op.t[role] = api.Tensor(code, have, name, data)
            elif role[0] == "W":
                op.shape[role] = have
    return out


def _seq():
    # the checks of the seq-attn ops (7-11): a module of their own, loaded only for a blob
    # that has them (a small board reading a non-seq blob never holds their bytecode)
    return __import__("attention_ops_seq")


def _slots(op, quantized, k, fail):
    """The tensors an op must reference: [(role, dtype code, shape)] in record order."""
    ip = op.ip
    for p in ("in", "out", "S", "E", "H", "q", "k", "v1", "v2", "T", "C", "P", "F", "K",
              "stride", "dilation", "groups", "G", "L"):  # fmt: skip
        if p in ip and not 1 <= ip[p] <= 65535:
            raise fail("op %d (%s): %s = %d out of range 1..65535" % (k, op.name, p, ip[p]))
    if ip.get("has_bias", 0) not in (0, 1):
        raise fail("op %d (%s): has_bias = %d, must be 0 or 1" % (k, op.name, ip["has_bias"]))
    if op.code == 1:
        groups = (("", ip["out"], ip["in"]),)
    elif op.code == 4 or op.code == 8:  # attention, res_attention
        groups = (("q", ip["E"], ip["E"]), ("k", ip["E"], ip["E"]), ("v", ip["E"], ip["E"]),
                  ("o", ip["E"], ip["E"]))  # fmt: skip
    elif op.code == 6:  # myattn: attn Linear(q + k -> v1), attn_combine Linear(q + v2 -> out)
        groups = (("a", ip["v1"], ip["q"] + ip["k"]), ("c", ip["out"], ip["q"] + ip["v2"]))
    elif op.code == 9:  # res_ff: Dense(E -> F) as W1, b1; Dense(F -> E) as W2, b2
        groups = (("1", ip["F"], ip["E"]), ("2", ip["E"], ip["F"]))
    elif op.code == 7 or op.code == 10:  # embed, masked_pool
        return _seq().slots(op, quantized)
    elif op.code >= 11:  # conv, rocket: attention_ops_<kind> (OPS's name), loaded for a blob
        # that has one
        return __import__("attention_ops_" + op.name).slots(op, quantized, k, fail)
    else:
        return []
    slots = []
    for g, n_out, n_in in groups:
        slots.append(("W" + g, 1 if quantized else 4, (n_out, n_in)))  # int8 / float32
        if ip["has_bias"]:
            slots.append(("b" + g, 3 if quantized else 4, (n_out,)))  # int32 / float32
        if quantized:
            slots.append(("s" + g, 4, (n_out,)))  # float32 weight scales
            slots.append(("m" + g, 2, (n_out,)))  # int16 multipliers
    if op.code in (4, 6, 8) and quantized:
        slots.append(("lut", 5, (2, 16)))  # uint16 EXP_HI, EXP_LO
    return slots


def _check_op(k, op, layout, shape, quantized, last, fail, seq):
    """Check an op's parameters against its input shape; returns its output shape. `seq`:
    op 0 is embed (a seq model, whose ops run on the valid tokens only). op.t maps roles to
    data arrays here."""
    ip, name = op.ip, op.name
    floats = [s[0] for s in _slots(op, quantized, k, fail) if s[1] == 4]
    for role in sorted(floats):  # scales and float32 weights: finite only
        for v in op.t[role]:
            if v - v != 0:  # inf - inf and nan - nan are nan
                raise fail(
                    "op %d (%s): tensor %s has a non-finite value (inf or NaN)" % (k, name, role)
                )
    shifts, multipliers = layout[3], layout[4]
    if quantized:
        for p in shifts:
            if not 1 <= ip[p] <= 30:
                raise fail("op %d (%s): %s = %d out of range 1..30" % (k, name, p, ip[p]))
        # tensors by sorted role, as the host: a MicroPython dict has no insertion order
        for p in list(multipliers) + sorted(role for role in op.t if role[0] == "m"):
            a = op.t[p] if p in op.t else (ip[p],)  # a tensor's elements are named m[i]
            for i in range(len(a)):
                if not 0 <= a[i] < 32768:
                    what = p if p not in op.t else "%s[%d]" % (p, i)
                    raise fail(
                        "op %d (%s): multiplier %s = %d out of range 0..32767"
                        % (k, name, what, a[i])
                    )
        if "lut" in op.t:  # EXP_HI, EXP_LO start at 2**14 and never increase
            lut = op.t["lut"]
            for r in (0, 16):
                bad = lut[r] != 16384
                for i in range(r, r + 15):
                    bad = bad or lut[i + 1] > lut[i]
                if bad:
                    raise fail(
                        "op %d (%s): lut is not an exp table (row 0 must be 16384, rows must "
                        "not increase)" % (k, name)
                    )
        if op.code == 10:  # masked_pool: the table of 1/k, as the exporter writes it
            _seq().pool_table(k, ip["shift"], op.t["m"], fail)
        if op.code == 12:  # rocket: its groups, channels and zero points
            __import__("attention_ops_rocket").tables(k, op, fail)
        for p in op.fp:
            if not (_finite(op.fp[p]) and op.fp[p] > 0):
                raise fail(
                    "op %d (%s): scale %s = %r must be finite and > 0" % (k, name, p, op.fp[p])
                )
    else:
        bad = [p for p in shifts + multipliers + ("act_min", "act_max") if ip.get(p, 0) != 0]
        bad += [p for p in op.fp if op.fp[p] != 1.0]
        if bad:
            raise fail(
                "op %d (%s): a float32 blob has quantization parameters 0 and scales 1.0, "
                "found %r" % (k, name, bad)
            )

    if seq or 7 <= op.code <= 11:  # seq-only ops and ops refused in a seq model
        _seq().place(k, op, seq, fail)

    def mismatch(detail):
        return fail("shape mismatch in op %d (%s): %s" % (k, name, detail))

    if op.code == 1:  # dense
        if shape[-1] != ip["in"]:
            raise mismatch("input shape %r, op has in = %d" % (list(shape), ip["in"]))
        lo, hi = (-32768, 32767) if last else (-128, 127)
        if quantized and not lo <= ip["act_min"] <= ip["act_max"] <= hi:
            raise fail(
                "op %d (dense): activation range [%d, %d] outside [%d, %d]%s"
                % (k, ip["act_min"], ip["act_max"], lo, hi,
                   "" if last else " (hidden layers are int8)")
            )  # fmt: skip
        return shape[:-1] + (ip["out"],)
    if op.code == 2:  # relu
        return shape
    if op.code == 3:  # reshape
        count = 1
        for d in shape:
            count *= d
        if count != ip["S"] * ip["E"]:
            raise mismatch(
                "input shape %r cannot become [%d, %d]" % (list(shape), ip["S"], ip["E"])
            )
        return (ip["S"], ip["E"])
    if op.code == 6:  # myattn: mode 0 input Q ‖ K ‖ V, mode 1 tokens [v1, v2] (Q = K = mean)
        q, v1, v2 = ip["q"], ip["v1"], ip["v2"]
        if ip["mode"] == 0:
            n = q + ip["k"] + v1 * v2
            if shape != (n,):
                raise mismatch(
                    "input shape %r, mode 0 (explicit) needs [q + k + v1·v2] = [%d]"
                    % (list(shape), n)
                )
        elif ip["mode"] == 1:
            if not q == ip["k"] == v2:
                raise mismatch("mode 1 (pool) needs q = k = v2, has %d, %d, %d" % (q, ip["k"], v2))
            if shape != (v1, v2):
                raise mismatch(
                    "input shape %r, mode 1 (pool) needs [v1, v2] = [%d, %d]"
                    % (list(shape), v1, v2)
                )
        else:
            raise fail(
                "op %d (myattn): mode = %d, must be 0 (explicit) or 1 (pool)" % (k, ip["mode"])
            )
        return (ip["out"],)
    if op.code == 7 or op.code == 9:  # embed, res_ff
        return _seq().shape(k, op, shape, mismatch, fail)
    if op.code >= 11:  # conv, rocket
        return __import__("attention_ops_" + name).shape(k, op, shape, mismatch, fail)
    # attention, avgpool, res_attention, masked_pool
    if shape != (ip["S"], ip["E"]):
        raise mismatch("input shape %r, op has S, E = %d, %d" % (list(shape), ip["S"], ip["E"]))
    if op.code == 5 or op.code == 10:
        return (ip["E"],)
    if ip["E"] % ip["H"]:
        raise mismatch("E = %d is not divisible by H = %d" % (ip["E"], ip["H"]))
    return shape


# The small-int budget (docs/quantization.md), proven from the stored integers for any int8
# input (|x_q| <= 128): per requantization site, in the order the kernels compute them, and per
# channel, max|acc| < 2**30 and then max|acc|*M + 2**(shift-1) < 2**30. The other
# intermediates are bounded by the checks above (dimensions <= 65535, lut entries <= 2**14).
# Load time only; the same sites, order and messages as tinyattn.intmodel.blob.budget_sites.


def _check_budget(k, op, fail):
    ip, code = op.ip, op.code
    if code == 1 or code == 7 or code == 11:  # dense, conv; embed (bias [S, E]: max |b[s, o]|)
        _dense_budget(k, op, "", ip["shift"], fail)
    elif code == 4 or code == 8:  # attention: q, k, v, softmax index (max - score), ctx, o
        _dense_budget(k, op, "q", ip["shift_q"], fail)
        _dense_budget(k, op, "k", ip["shift_k"], fail)
        _dense_budget(k, op, "v", ip["shift_v"], fail)
        _softmax_site(k, op, 2 * (ip["E"] // ip["H"]) * 16384, fail)  # diff = max - score
        _site(k, op, "M_ctx", 128 * (16384 + ip["S"]), ip["M_ctx"], ip["shift_ctx"], fail)
        _dense_budget(k, op, "o", ip["shift_o"], fail)
        if code == 8:  # the residual add x·M_x + a·M_a
            _seq().budget(k, op, fail, _dense_budget, _site)
    elif code == 9 or code == 10:  # res_ff, masked_pool
        _seq().budget(k, op, fail, _dense_budget, _site)
    elif code == 12:  # rocket: its bounds, then each feature's requantization
        __import__("attention_ops_rocket").budget(k, op, fail, _site)
    elif code == 5:  # avgpool
        _site(k, op, "M", 128 * ip["S"], ip["M"], ip["shift"], fail)
    elif code == 6:  # myattn: query (n = 1 or v1 rows), scores, softmax index, applied, out
        n = ip["v1"] if ip["mode"] == 1 else 1
        _site(k, op, "M_q", 128 * n, ip["M_q"], ip["shift_q"], fail)
        _dense_budget(k, op, "a", ip["shift_a"], fail)
        _softmax_site(k, op, 255, fail)  # diff of two int8 scores
        _site(k, op, "M_ap", 128 * (16384 + ip["v1"]), ip["M_ap"], ip["shift_ap"], fail)
        _dense_budget(k, op, "c", ip["shift_c"], fail)


def _softmax_site(k, op, bound, fail):
    """The softmax index computes diff·M_sm for diff <= dmax_sm only: `bound` (the largest diff
    there is) or one below ceil(511·2**(shift_sm-1) / M_sm), the first diff whose idx >= 256
    (e = 0 from there on, computed or not). Kept in op.ip for the kernels' parameters."""
    ip = op.ip
    M, shift = ip["M_sm"], ip["shift_sm"]
    dmax = bound
    if M:
        dmax = min(bound, -(-(511 << (shift - 1)) // M) - 1)
    _site(k, op, "M_sm", dmax, M, shift, fail)
    ip["dmax_sm"] = dmax


def _dense_budget(k, op, g, shift, fail):
    """max|acc| = 128 * sum_i |W[o, i]| + max_r |b[r, o]| per output channel o (one bias row,
    or embed's S rows)."""
    w = op.t["W" + g]
    m = op.t["m" + g]
    b = op.t.get("b" + g)
    n_out = len(m)
    n_in = len(w) // n_out
    wi = 0
    for o in range(n_out):
        acc = 0
        for i in range(wi, wi + n_in):
            acc += abs(w[i])
        wi += n_in
        acc *= 128
        if b is not None:
            bmax = 0
            for j in range(o, len(b), n_out):
                bmax = max(bmax, abs(b[j]))
            acc += bmax
        _site(k, op, "m%s[%d]" % (g, o), acc, m[o], shift, fail)


def _site(k, op, what, acc, M, shift, fail):
    if acc >= 1073741824:
        raise fail(
            "op %d (%s): small-int budget broken at %s: max|acc| = %d >= 2**30"
            % (k, op.name, what, acc)
        )
    top = acc * M + (1 << (shift - 1))
    if top >= 1073741824:
        raise fail(
            "op %d (%s): small-int budget broken at %s = %d, shift %d: max|acc|·M + "
            "2**(shift-1) = %d >= 2**30 (max|acc| = %d)" % (k, op.name, what, M, shift, top, acc)
        )
