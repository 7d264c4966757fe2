# Device (MicroPython; also runs unchanged under CPython): the float model file the board
# writes and reads — trained weights (and optionally the optimizer state) as float32.
"""Board float model file ("TAFM", version 1): what on-board training starts from and writes.

Little-endian throughout; offsets in bytes; the file ends with a CRC-32 (IEEE, as zlib.crc32)
of every byte before it. host/board/boardmodel.py writes and reads the same bytes.

| offset | size | field | meaning |
|---|---|---|---|
| 0 | 4 | magic | b"TAFM" |
| 4 | u16 | version | 1; a reader MUST reject any other |
| 6 | u16 | flags | bit 0 `AVERAGE`: a weight average follows the state; other bits MUST be 0 |
| 8 | u32 | meta_len | bytes of the UTF-8 JSON meta that follows the header |
| 12 | u32 | n_params | P, float32 values of theta |
| 16 | u32 | step | optimizer steps taken (0 for initial weights) |
| 20 | u32 | n_state | optimizer state vectors after theta: 0, 1 (SGD velocity), 2 (Adam m, v) |
| 24 | meta_len | meta | UTF-8 JSON object, see below |
| .. | pad | zeros | to a multiple of 4: `(-meta_len) % 4` bytes, MUST be zero |
| .. | 4·P | theta | float32, host `Sequential.theta` order (attention_train.py) |
| .. | 4·P·n_state | state | float32, optimizer state vectors in order |
| .. | 4·P | average | float32, only with flag `AVERAGE`: the running weight average |
| end−4 | u32 | crc | CRC-32 of bytes [0, end−4) |

average: a checkpoint of a run with weight averaging (attention_train_seq.Averager, host
seqtrain.WeightAverager) taken after an epoch that entered the average and before the last
epoch: the mean / EMA of the epoch-end weights so far. How many epochs it holds follows from
`step` and the run's averaging (meta "train"). A finished run's file has no average (theta is
the average by then), so it reads as any other. A reader that does not resume averaging MUST
refuse a file with flag `AVERAGE` (a reader of before the flag does: flags MUST be 0 there).

meta: "ops" (docs/model-format.md) and "n_features", which the board parses, plus whatever the
host keeps there (norm_mean, norm_std, class_names, ...): the board keeps the bytes as they are.

Arrays are written and read as array('f') in the machine's byte order: little-endian on every
supported board (ESP32, RP2040, the unix port on x86_64/ARM) and host.

`save(path, meta, theta, step, state, average=None)` writes `path + ".tmp"`, then renames it
over `path` (atomic on POSIX, LittleFS and FAT as MicroPython's VFS renames): a reset mid-write
leaves the old file. `load(path, theta=None, average=None)` -> (meta bytes, theta, step, state
list); a file's average is appended to the list `average` (a file with one and no list given:
ValueError); ValueError naming the problem for a wrong magic, version, flags, size, padding or
CRC.

References: docs/blob-format.md (the same conventions: magic + version, CRC-32 last);
MicroPython `binascii.crc32`, `os.rename`.
"""

import gc
import os
import struct
from array import array

try:
    from binascii import crc32
except ImportError:  # a port built without binascii.crc32: the runtime's table version
    from attention_crc import crc32

try:
    from micropython import const
except ImportError:  # CPython

    def const(x):
        return x


MAGIC = b"TAFM"
VERSION = const(1)
_HEADER = "<4sHHIIII"  # magic, version, flags, meta_len, n_params, step, n_state
_HEADER_SIZE = const(24)
_MAX_META = const(65536)
_MAX_STATE = const(2)
_AVERAGE = const(1)  # flags bit 0: a weight average follows the optimizer state
_REMEDY = "re-send the weights from the host (tinyattn.board.boardmodel)"


def floats(n):
    """An array('f') of n floats in one block, allocated without a transient copy (which
    array('f', bytes(4 * n)) makes: a small heap may not hold both): MicroPython sizes an array
    from a range's length. Its values are 0 .. n - 1: read into it, or use zeros(). A block of
    1 KB or more is allocated after a collection, so it lands in the lowest gap that holds it
    (the load's garbage freed first) rather than past it (measured 2026-12-01, before dqkv
    went over qkv: an Iris session on a 100k virtual board failed to load without it)."""
    if n >= 256:
        gc.collect()
    return array("f", range(n))


def zeros(n):
    """A zeroed array('f') of n floats (floats(), then zeroed)."""
    a = floats(n)
    for i in range(n):
        a[i] = 0.0
    return a


def _write(f, data, crc):
    f.write(data)
    return crc32(data, crc)


def save(path, meta, theta, step=0, state=(), average=None):
    """Write meta (bytes, JSON), theta (array('f')), optimizer state and (given) the running
    weight average (array('f') of P) atomically."""
    tmp = path + ".tmp"
    P = len(theta)
    flags = 0
    if average is not None:  # after the optimizer state, checked with it
        state = tuple(state) + (average,)
        flags = _AVERAGE
    for s in state:
        if len(s) != P:
            raise ValueError("optimizer state of %d values for %d parameters" % (len(s), P))
    with open(tmp, "wb") as f:
        head = struct.pack(_HEADER, MAGIC, VERSION, flags, len(meta), P, step, len(state) - flags)
        crc = _write(f, head, 0)
        crc = _write(f, meta, crc)
        pad = (-len(meta)) % 4
        if pad:
            crc = _write(f, bytes(pad), crc)
        crc = _write(f, theta, crc)
        for s in state:
            crc = _write(f, s, crc)
        f.write(struct.pack("<I", crc & 0xFFFFFFFF))
    os.rename(tmp, path)


def _read_into(f, a, crc, path, what):
    got = f.readinto(a)
    if got != 4 * len(a):
        raise ValueError("%s: truncated in %s (file cut short); %s" % (path, what, _REMEDY))
    return crc32(a, crc)


def load(path, theta=None, average=None):
    """(meta bytes, theta array('f'), step, [state array('f'), ...]) of a TAFM file; reads
    into `theta` (array('f') of n_params) if given. A file's weight average (flag AVERAGE) is
    appended to the list `average`; without the list such a file is refused."""
    with open(path, "rb") as f:
        head = f.read(_HEADER_SIZE)
        if len(head) < _HEADER_SIZE:
            raise ValueError("%s: %d bytes, shorter than the header; %s" % (path, len(head),
                                                                           _REMEDY))  # fmt: skip
        magic, version, flags, meta_len, P, step, n_state = struct.unpack(_HEADER, head)
        if magic != MAGIC:
            raise ValueError("%s: magic %r, expected %r: not a board float model file" % (
                path, magic, MAGIC))  # fmt: skip
        if version != VERSION:
            raise ValueError("%s: unsupported format version %d (this runtime reads %d); %s" % (
                path, version, VERSION, _REMEDY))  # fmt: skip
        if flags & ~_AVERAGE or flags and average is None:  # AVERAGE: the caller takes it
            raise ValueError("%s: flags 0x%x, expected 0%s" % (path, flags, " (1: a weight "
                             "average, load(average=[]))" * (flags & 1)))
        if meta_len > _MAX_META or n_state > _MAX_STATE:
            raise ValueError("%s: header says %d meta bytes, %d state vectors: corrupt; %s" % (
                path, meta_len, n_state, _REMEDY))  # fmt: skip
        crc = crc32(head, 0)
        meta = f.read(meta_len)
        pad = f.read((-meta_len) % 4)
        if len(meta) != meta_len or len(pad) != (-meta_len) % 4:
            raise ValueError("%s: truncated in meta; %s" % (path, _REMEDY))
        for byte in pad:
            if byte:
                raise ValueError("%s: non-zero padding after meta: corrupt; %s" % (path, _REMEDY))
        crc = crc32(pad, crc32(meta, crc))
        if theta is None:
            theta = floats(P)
        elif len(theta) != P:
            raise ValueError("%s: %d parameters, the model has %d" % (path, P, len(theta)))
        crc = _read_into(f, theta, crc, path, "theta")
        state = []
        for k in range(n_state + flags):  # then the average (flags is 0 or _AVERAGE = 1)
            s = floats(P)
            crc = _read_into(f, s, crc, path, "state")
            (state if k < n_state else average).append(s)
        tail = f.read(5)
    if len(tail) != 4:
        raise ValueError("%s: %s after the data; %s" % (
            path, "truncated" if len(tail) < 4 else "extra bytes", _REMEDY))  # fmt: skip
    if struct.unpack("<I", tail)[0] != crc & 0xFFFFFFFF:
        raise ValueError("%s: CRC mismatch (file corrupt or truncated); %s" % (path, _REMEDY))
    return meta, theta, step, state
