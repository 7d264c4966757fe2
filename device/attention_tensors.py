# Device (MicroPython; also runs unchanged under CPython): reading a blob, second phase.
"""The tensor table and the data section of `model.bin` (docs/blob-format.md), after
attention_blob.read_records has checked the header, the sections and the op records.

`read_tensors(api, mv, source, pos, end, n_tensors, dtypes, crc)`: every tensor record (dtype,
ndim, name, reserved byte, padding, empty shapes), every tensor's data (4-aligned, inside the
data section, no overlaps, all other bytes zero), with the host reader's messages; returns
the table. `read_data(api, src, table, dtypes, source, crc)`: each tensor's data as a flat array
('b' int8, 'h' int16, 'i' int32, 'f' float32, 'H' uint16), from the blob's bytes or, for a
file, read again from the file after attention.read_blob has dropped its bytes; rows become
(dtype code, shape, name, data), which attention_ops.check_ops binds to the ops. Imported and
dropped by attention.read_blob, like the other reader phases; `api` is the attention module
(REMEDY, blob_error, crc32), passed in: a phase never imports the API module.
"""

import array
import struct

_BIG_ENDIAN = struct.pack("@H", 1) == b"\x00\x01"  # CPython on a big-endian host only


def read_tensors(api, mv, source, pos, end, n_tensors, dtypes, crc=None):
    """Check the tensor table at `pos` and the data section up to `end`; returns the table
    [(dtype code, shape, name, offset, nbytes)] and, with `crc` (0), the CRC-32 of the tensors'
    bytes in table order (read_data reading them from the file again checks it)."""

    def fail(problem, remedy=api.REMEDY):
        return api.blob_error(source, problem, remedy)

    # the cursor of attention_blob.read_records, on its own here (the phases share no code)
    def skip(k, what, i):
        nonlocal pos
        if pos + k > end:
            raise fail(
                "%s at offset %d needs %d bytes but the section ends at %d (counts in the "
                "header or records are inconsistent)" % (what % i, pos, k, end)
            )
        pos += k
        return pos - k

    def unpack(fmt, what, i):
        fmt = "<" + fmt
        return struct.unpack_from(fmt, mv, skip(struct.calcsize(fmt), what, i))

    table = []  # (dtype, shape, name, offset, nbytes)
    for t in range(n_tensors):
        code, ndim, name_len, res, offset = unpack("BBBBI", "tensor record %d", t)
        if code not in dtypes:
            raise fail("unknown dtype %d in tensor record %d" % (code, t))
        if not 1 <= ndim <= 4:
            raise fail("tensor record %d: ndim %d out of range 1..4" % (t, ndim))
        if not 1 <= name_len <= 32:
            raise fail("tensor record %d: name_len %d out of range 1..32" % (t, name_len))
        if res:
            raise fail("tensor record %d: reserved byte is %d, must be 0" % (t, res))
        shape = unpack("%dH" % ndim, "tensor %d shape", t)
        raw = bytes(mv[skip(name_len, "tensor %d name", t) : pos])
        for b in raw:
            if b > 127:
                raise fail("tensor record %d: name %r is not ASCII" % (t, raw))
        start = skip((-pos) % 4, "padding after tensor record %d", t)
        for j in range(start, pos):
            if mv[j]:
                raise fail("non-zero padding after tensor record %d at offset %d" % (t, start))
        name = raw.decode()
        count = 1
        for d in shape:
            count *= d
        if not count:
            raise fail("tensor %d (%s): empty shape %r" % (t, name, list(shape)))
        table.append((code, shape, name, offset, count * dtypes[code][2]))

    # Data: aligned, inside [data_start, end), no overlaps, every other byte zero.
    spans = []
    for t in range(n_tensors):
        name, offset, nbytes = table[t][2], table[t][3], table[t][4]
        if offset % 4:
            raise fail("tensor %d (%s): offset %d is not 4-aligned" % (t, name, offset))
        if offset < pos or offset + nbytes > end:
            raise fail(
                "tensor %d (%s): data [%d, %d) outside the data section [%d, %d)"
                % (t, name, offset, offset + nbytes, pos, end)
            )
        spans.append((offset, offset + nbytes, t))
    spans.sort()
    for i in range(1, n_tensors):
        (b0, e0, t0), (b1, e1, t1) = spans[i - 1], spans[i]
        if b1 < e0:
            raise fail(
                "tensors %d (%s) and %d (%s) overlap: [%d, %d) and [%d, %d)"
                % (t0, table[t0][2], t1, table[t1][2], b0, e0, b1, e1)
            )
    spans.append((end, end, -1))
    for b, e, _ in spans:
        for i in range(pos, b):
            if mv[i]:
                raise fail("non-zero padding in the data section within [%d, %d)" % (pos, b))
        pos = max(pos, e)
    spans = None
    if crc is not None:
        for row in table:
            crc = api.crc32(mv[row[3] : row[3] + row[4]], crc)
    return table, crc


def read_data(api, src, table, dtypes, source, crc):
    """Each tensor's data as an array, in place of its offset and size in `table` (rows
    (dtype code, shape, name, data) after it). `src`: the blob's memoryview, or its file's path
    (attention.read_blob has dropped the file's bytes then: a small heap gets the tensors
    without the whole file beside them), read again at each tensor's offset; `crc` (from
    read_tensors) must match what this second read gives."""
    f = None
    if isinstance(src, str):
        f = open(src, "rb")
        big = 0
        for row in table:
            big = max(big, row[4])
        raw = memoryview(bytearray(big))  # one buffer for every tensor's bytes
        check = 0
    try:
        for t in range(len(table)):
            code, shape, name, offset, nbytes = table[t]
            if f:
                f.seek(offset)
                got = f.readinto(raw[:nbytes])
                check = api.crc32(raw[:nbytes], check)
                if got != nbytes:
                    check = None
                data = raw[:nbytes]
            else:
                data = src[offset : offset + nbytes]
            if api._MICROPYTHON:  # extend copies the raw bytes of any buffer (an extension to
                a = array.array(dtypes[code][1])  # CPython): one allocation of the exact
                a.extend(data)  # size, no temporary copy whose hole would split a small heap
            else:
                a = array.array(dtypes[code][1], bytes(data))
                if _BIG_ENDIAN and dtypes[code][2] > 1:
                    a.byteswap()
            table[t] = (code, shape, name, a)
    finally:
        if f:
            f.close()
    if f and check != crc:
        raise api.blob_error(source, "changed while it was read (its tensor data differ from "
                         "the first read)", "copy it again and reload")  # fmt: skip
    return table
