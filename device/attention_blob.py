# Device (MicroPython; also runs unchanged under CPython): the blob reader of the device runtime.
"""First phase of reading `model.bin` (docs/blob-format.md, version 1), `struct` + `array` only.

`read_records(mv, source)` checks, in the host reader's order (`tinyattn.intmodel.blob.read_blob`)
and with its messages, magic, version, size, CRC, the header fields, the sections, op records,
tensor records and the data section, and raises BlobError `"<source>: <problem>; <remedy>"`.
Tensors come out as flat arrays ('b' int8, 'h' int16, 'i' int32, 'f' float32, 'H' uint16).
The op and dtype tables live here; attention_ops.check_ops is the second phase.

Use `attention.read_blob`: it imports this module only while loading and drops it afterwards,
so its bytecode does not stay in a board's heap (BlobError, crc32 and the Blob, Op, Tensor
containers belong to attention.py for that reason, which passes itself in as `api`: a phase
never imports the API module).
"""

import array
import struct

try:
    from micropython import const
except ImportError:  # CPython

    def const(x):
        return x


FORMAT_VERSION = 1
MAGIC = b"TATN"
_ALIGN = const(4)
_MIN_FILE = const(36)  # header + CRC
_FLAG_QUANTIZED = const(1)
_FLAG_FLOAT32 = const(2)
_VIEW_PARTS = ((), ("log floor",), ("clip low", "clip high"))  # input_view 0, 1, 2: its sections

def op_table():
    """opcode -> name, iparams, fparams, shift iparams (1..30), multiplier iparams (0..32767);
    the names as tuples of literals: interned strings, where split() would put a copy of each
    name in every op's dicts on the heap. A new dict per read (load-time data, dropped with
    the reader; attention_ops_seq's rows join it for a seq blob). A function, not a
    module-level table: op 4's name is the API module's, which tests/test_import_graph.py
    would read as a load by name."""
    return {
        1: ("dense", ("in", "out", "has_bias", "shift", "act_min", "act_max"),
            ("s_in", "s_out"), ("shift",), ()),
        2: ("relu", (), (), (), ()),
        3: ("reshape", ("S", "E"), (), (), ()),
        4: ("attention",
            ("S", "E", "H", "has_bias", "shift_q", "shift_k", "shift_v", "shift_o", "M_sm",
             "shift_sm", "M_ctx", "shift_ctx"),
            ("s_in", "s_q", "s_k", "s_v", "s_ctx", "s_out"),
            ("shift_q", "shift_k", "shift_v", "shift_o", "shift_sm", "shift_ctx"),
            ("M_sm", "M_ctx")),
        5: ("avgpool", ("S", "E", "M", "shift"), (), ("shift",), ("M",)),
        6: ("myattn",
            ("mode", "q", "k", "v1", "v2", "out", "has_bias", "M_q", "shift_q", "shift_a",
             "M_sm", "shift_sm", "M_ap", "shift_ap", "shift_c"),
            ("s_in", "s_qk", "s_sc", "s_qa", "s_out"),
            ("shift_q", "shift_a", "shift_sm", "shift_ap", "shift_c"), ("M_q", "M_sm", "M_ap")),
    }  # fmt: skip


# 7-10 (seq-attn: embed, res_attention, res_ff, masked_pool) are in attention_ops_seq.OPS, 11
# (conv) in attention_ops_conv.OPS, 12 (rocket) in attention_ops_rocket.OPS,
# added to the read's op table when a blob has one of them (a blob without never loads that
# module)
RESERVED_OPCODES = {}  # reserved, not yet readable opcodes: none since myattn (6) landed
# dtype code -> (name, array typecode, itemsize)
DTYPES = {
    1: ("int8", "b", 1),
    2: ("int16", "h", 2),
    3: ("int32", "i", 4),
    4: ("float32", "f", 4),
    5: ("uint16", "H", 2),
}


_BIG_ENDIAN = struct.pack("@H", 1) == b"\x00\x01"  # CPython on a big-endian host only


def _array(tc, raw):
    a = array.array(tc, raw)
    if _BIG_ENDIAN and tc not in "bB":
        a.byteswap()
    return a


def _finite(v):
    return v == v and v - v == 0.0


def read_records(api, mv, source):
    """Check magic, version, size, CRC, the header fields, class names, normalization and op
    records of the blob in memoryview `mv` (`api`: the attention module). Returns (Blob
    without ops, [(Op, tensor indices)], n_tensors, offset of the tensor table, end of the
    data section, (OPS, DTYPES)).
    """

    def fail(problem, remedy=api.REMEDY):
        return api.blob_error(source, problem, remedy)

    OPS = op_table()
    n = len(mv)
    if n >= 4 and bytes(mv[0:4]) != MAGIC:
        raise fail("bad magic %r, expected %r (not a tinyattn blob)" % (bytes(mv[0:4]), MAGIC))
    if n >= 6:
        version = struct.unpack("<H", mv[4:6])[0]
        if version != FORMAT_VERSION:
            raise fail(
                "unsupported format version %d (this reader reads version %d)"
                % (version, FORMAT_VERSION),
                "export the blob with the same tinyattn version as the device runtime",
            )
    if n < _MIN_FILE:
        raise fail("truncated: %d bytes, a blob has at least %d" % (n, _MIN_FILE))
    (_, _, flags, size, F, C, n_ops, n_tensors, s_in, s_logit, names_len, view) = (
        struct.unpack("<4sHHIHHHHffHH", mv[0:32])
    )
    if n < size:
        raise fail("truncated: %d of %d bytes" % (n, size))
    if n > size:
        raise fail("file size mismatch: header says %d bytes, the file has %d" % (size, n))
    end = size - 4
    stored = struct.unpack("<I", mv[end:size])[0]
    crc = api.crc32(mv[0:end]) & 0xFFFFFFFF
    if crc != stored:
        raise fail(
            "CRC mismatch (file corrupt or truncated): stored 0x%08x, computed 0x%08x"
            % (stored, crc)
        )
    # From here on the bytes are what the writer wrote: errors are inconsistent structure.
    if size > 16777216 or size % _ALIGN:
        raise fail("file size %d is not a multiple of 4 up to 16777216" % size)
    if flags != _FLAG_QUANTIZED and flags != _FLAG_FLOAT32:
        raise fail("unknown flags 0x%04x (exactly one of bit 0, bit 1 must be set)" % flags)
    quantized = flags == _FLAG_QUANTIZED
    if view != 0 and view != 1 and view != 2:
        raise fail("unknown input view %d (0 raw, 1 log, 2 clip)" % view)
    if F < 1 or C < 1:
        raise fail("n_features %d and n_classes %d must be >= 1" % (F, C))
    if not 1 <= n_ops <= 64:
        raise fail("n_ops %d out of range 1..64" % n_ops)
    if n_tensors > 256:
        raise fail("n_tensors %d out of range 0..256" % n_tensors)
    if names_len > 1024:
        raise fail("names_len %d over the limit 1024" % names_len)
    for label, s in (("input_scale", s_in), ("logit_scale", s_logit)):
        if not (_finite(s) and s > 0):
            raise fail("%s %r must be finite and > 0" % (label, s))
        if not quantized and s != 1.0:
            raise fail("%s %r must be 1.0 in a float32 blob" % (label, s))

    pos = 32

    # `what` (and `i`, formatted into it) names the field in messages only
    def skip(k, what, i):
        nonlocal pos
        if pos + k > end:
            what = what % i if i is not None else what
            raise fail(
                "%s at offset %d needs %d bytes but the section ends at %d (counts in the "
                "header or records are inconsistent)" % (what, pos, k, end)
            )
        pos += k
        return pos - k

    def take(k, what, i=None):
        return bytes(mv[skip(k, what, i) : pos])

    def unpack(fmt, what, i=None):
        fmt = "<" + fmt
        return struct.unpack_from(fmt, mv, skip(struct.calcsize(fmt), what, i))

    def padding(what, i=None):
        start = skip((-pos) % _ALIGN, "padding after " + what, i)
        for j in range(start, pos):
            if mv[j]:
                what = what % i if i is not None else what
                raise fail("non-zero padding after %s at offset %d" % (what, start))

    try:
        names = take(names_len, "class names").decode("utf-8")
    except UnicodeError as exc:  # CPython names the reason, as the host reader does
        reason = getattr(exc, "reason", None)
        if reason:
            raise fail("class names are not UTF-8 (%s)" % reason) from None
        raise fail("class names are not UTF-8") from None  # MicroPython names no reason
    padding("class names")
    names = names.split("\n") if names else []
    if len(names) != C or "" in names:
        raise fail("%d class names (or an empty one) for n_classes %d" % (len(names), C))
    mean = _array("f", take(4 * F, "norm mean"))
    std = _array("f", take(4 * F, "norm std"))
    for i in range(F):
        if not (_finite(mean[i]) and _finite(std[i])):
            raise fail("norm mean/std contain NaN or infinity")
    for i in range(F):
        if not std[i] > 0:
            raise fail("norm std has a value <= 0 (must be > 0)")
    code = view  # the view: None, (1, floor) or (2, lo, hi)
    view = (code,) if code else None
    for what in _VIEW_PARTS[code]:
        a = _array("f", take(4 * F, what))
        for i in range(F):
            if not _finite(a[i]):
                raise fail("%s contains NaN or infinity" % what)
        view += (a,)
    if code == 2:
        for i in range(F):
            if not view[1][i] <= view[2][i]:
                raise fail("clip low has a value above clip high (must be <= high)")

    ops = []
    for k in range(n_ops):
        code, nt, ni, nf = unpack("4B", "op %d record", k)
        if code in RESERVED_OPCODES:
            raise fail(
                "opcode %d (%s) in op %d is reserved and not supported by format version %d"
                % (code, RESERVED_OPCODES[code], k, FORMAT_VERSION)
            )
        if 7 <= code <= 10 and code not in OPS:
            OPS.update(__import__("attention_ops_seq").OPS)
        if code == 11 and code not in OPS:
            OPS.update(__import__("attention_ops_conv").OPS)
        if code == 12 and code not in OPS:
            OPS.update(__import__("attention_ops_rocket").OPS)
        if code not in OPS:
            raise fail("unknown opcode %d in op %d" % (code, k))
        name, inames, fnames = OPS[code][0], OPS[code][1], OPS[code][2]
        if ni != len(inames) or nf != len(fnames):
            raise fail(
                "op %d (%s) has %d iparams and %d fparams, expected %d and %d"
                % (k, name, ni, nf, len(inames), len(fnames))
            )
        refs = unpack("%dH" % nt, "op %d tensor indices", k)
        padding("op %d tensor indices", k)
        ip = unpack("%di" % ni, "op %d iparams", k)
        fp = unpack("%df" % nf, "op %d fparams", k)
        op = api.Op(code, name, dict(zip(inames, ip)), dict(zip(fnames, fp)))  # noqa: B905
        for t in refs:
            if t >= n_tensors:
                raise fail("op %d (%s) refers to tensor %d, only %d" % (k, name, t, n_tensors))
        ops.append((op, refs))

    blob = api.Blob(FORMAT_VERSION, quantized, F, C, s_in, s_logit, names, mean, std, view,
                    None)  # fmt: skip
    return blob, ops, n_tensors, pos, end, (OPS, DTYPES)
