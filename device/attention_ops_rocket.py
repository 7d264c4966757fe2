# Device (MicroPython; also runs unchanged under CPython): the rocket op's checks (opcode 12).
"""The rocket op (opcode 12: MiniRocket's transform of the input window into K int8 features,
docs/blob-format.md, docs/quantization.md "rocket") for the reader: its row of the op table
(`OPS`, as attention_ops_seq's), its parameter and table checks, its tensor slots, its shape
rule and its small-int budget, with the host reader's messages (`tinyattn.intmodel.
blob_rocket`) in its order. A module of its own, loaded only for a blob that has a rocket op,
and dropped with the reader by attention.read_blob.
"""

OPS = {12: ("rocket", ("T", "C", "P", "N", "bits", "K", "G", "L", "shift"), (), ("shift",), ())}
_Q15 = 32768  # the PPV's fixed point


def slots(op, quantized, k, fail):
    """The positions cap, the grid's width and an int8 blob, then the slots: grp u16 [G, 8],
    ch u16 [L], b i32 [K], z i32 [K], m i16 [K]."""
    ip = op.ip
    if not 0 <= ip["N"] <= ip["T"]:
        raise fail("op %d (rocket): N = %d out of range 0..T (%d)" % (k, ip["N"], ip["T"]))
    if not 8 <= ip["bits"] <= 30:
        raise fail("op %d (rocket): bits = %d out of range 8..30" % (k, ip["bits"]))
    if not quantized:
        raise fail("op %d (rocket) needs an int8 blob: its features are counts on the input "
                   "grid" % k)  # fmt: skip
    K = ip["K"]
    return [("grp", 5, (ip["G"], 8)), ("ch", 5, (ip["L"],)), ("b", 3, (K,)), ("z", 3, (K,)),
            ("m", 2, (K,))]  # fmt: skip


def tables(k, op, fail):
    """Each group row (dilation >= 1, pad 0 or 1, taps increasing within 0..8, channels >= 1,
    features >= 1, bias exponent <= 30), the counts they add up to, each channel index, each
    zero point."""
    ip, t = op.ip, op.t
    g, n_ch, n_f = t["grp"], 0, 0
    for r in range(0, len(g), 8):
        if not (g[r] >= 1 and g[r + 1] <= 1 and g[r + 2] < g[r + 3] < g[r + 4] <= 8
                and g[r + 5] >= 1 and g[r + 6] >= 1 and g[r + 7] <= 30):  # fmt: skip
            raise fail("op %d (rocket): group %d = %s is not a group (dilation >= 1, pad 0 or 1, "
                       "taps increasing within 0..8, channels >= 1, features >= 1, bias "
                       "exponent <= 30)" % (k, r // 8, list(g[r : r + 8])))  # fmt: skip
        n_ch += g[r + 5]
        n_f += g[r + 6]
    if n_ch != ip["L"] or n_f != ip["K"]:
        raise fail("op %d (rocket): its groups hold %d channels and %d features, the op has "
                   "L = %d and K = %d" % (k, n_ch, n_f, ip["L"], ip["K"]))  # fmt: skip
    ch = t["ch"]
    for i in range(len(ch)):
        if ch[i] >= ip["C"]:
            raise fail("op %d (rocket): channel ch[%d] = %d, the window has C = %d"
                       % (k, i, ch[i], ip["C"]))  # fmt: skip
    z = t["z"]
    for j in range(len(z)):
        if not 0 <= z[j] <= _Q15:
            raise fail("op %d (rocket): zero point z[%d] = %d out of range 0..32768"
                       % (k, j, z[j]))  # fmt: skip


def shape(k, op, shape, mismatch, fail):
    """Op 0 only; the input [C]; P <= T; -> [K]."""
    ip = op.ip
    if k:
        raise fail("op %d (rocket) must be op 0 (it reads the input window)" % k)
    if shape != (ip["C"],):
        raise mismatch("n_features = %d channels, op has C = %d" % (shape[0], ip["C"]))
    if ip["P"] > ip["T"]:
        raise mismatch("pool P = %d steps is longer than the window T = %d" % (ip["P"], ip["T"]))
    return (ip["K"],)


def budget(k, op, fail, site):
    """Each bias mantissa b[j], the convolution (12 · the largest combination · P · 2**15),
    the PPV numerator (ceil(T/P) << 15), then each feature's m[j] with |p - z| <= 2**15 (with
    attention_ops' `_site`)."""
    ip, t = op.ip, op.t
    b = t["b"]
    for j in range(len(b)):
        site(k, op, "b[%d]" % j, abs(b[j]), 0, 1, fail)
    g, top = t["grp"], 1
    for r in range(5, len(g), 8):
        top = max(top, g[r])
    site(k, op, "conv", 12 * top * ip["P"] << 15, 0, 1, fail)
    site(k, op, "ppv", -(-ip["T"] // ip["P"]) << 15, 0, 1, fail)
    m = t["m"]
    for j in range(len(m)):
        site(k, op, "m[%d]" % j, _Q15, m[j], ip["shift"], fail)
