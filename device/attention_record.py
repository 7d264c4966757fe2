# Device (MicroPython; also runs unchanged under CPython): send a source's steps to the host.
"""The board's side of `tinyattn record`: a source's steps as compact lines on the REPL's
stdout (docs/protocol.md "Recording"). host/board/record.py sends this file and
attention_source.py through the raw REPL and calls `run` (nothing is left on the board).

    TR+ <C> <rate Hz> <k steps a line>       the source opened
    TR <seq> <base64> <crc>                  seq 0, 1, …: k steps of C float32 little-endian
                                             (fewer on the last line), crc = CRC-32 of the
                                             base64 text, decimal
    TR. <steps sent>                         n steps sent, or the source ended
    TR! <why>                                the source could not be opened (one line)

The source paces itself (Replay by its rate, an IMU by its sampling rate): a line goes as
soon as its k steps are read, so the link carries rate·C·16/3 bytes a second plus about 20 a
line. k = rate/10 (about ten lines a second), at most 384 bytes of steps a line.

References: DESIGN §12 (Edge Impulse's data forwarder: the board streams, the host writes
the dataset); docs/protocol.md "Compact batches" (float32 as base64).
"""

import struct
import sys
from binascii import b2a_base64

try:
    from binascii import crc32
except ImportError:  # a port built without binascii.crc32
    from attention_crc import crc32

_LINE_BYTES = 384  # most step bytes a line carries (512 base64 characters)


def steps_per_line(C, rate):
    """k: about ten lines a second, at most _LINE_BYTES of steps, at least one step."""
    k = int(rate) // 10 if rate else 16
    return max(1, min(k, _LINE_BYTES // (4 * C)))


def _fill(source, buf, k, C):
    """Read up to k steps into buf (float32 LE); the number read, 0 at the end."""
    if hasattr(source, "read"):
        return source.read(buf) if len(buf) == 4 * C * k else source.read(buf[: 4 * C * k])
    for i in range(k):
        v = source.step()
        if v is None:
            return i
        for c in range(C):
            struct.pack_into("<f", buf, 4 * (i * C + c), v[c])
    return k


def record(source, n, out=None):
    """Send n steps of `source` (0: until it ends) as TR lines on `out` (sys.stdout);
    returns the steps sent."""
    write = (out or sys.stdout).write
    C = source.C
    rate = getattr(source, "rate", 0) or 0
    k = steps_per_line(C, rate)
    buf = bytearray(4 * C * k)
    write("TR+ %d %s %d\n" % (C, rate, k))
    sent = seq = 0
    while not n or sent < n:
        want = k if not n or n - sent >= k else n - sent
        if want < k:
            buf = bytearray(4 * C * want)  # the last, shorter line
        got = _fill(source, buf, want, C)
        if got:
            text = b2a_base64(buf[: 4 * C * got] if got < want else buf).strip()
            write("TR %d %s %d\n" % (seq, text.decode(), crc32(text)))
            seq += 1
            sent += got
        if got < want:
            break
    write("TR. %d\n" % sent)
    return sent


def run(spec, seconds, rate=None, i2c=None, open_source=None):
    """`tinyattn record`'s entry: open `spec` (None: app.json's source, at `rate` if given),
    send round(seconds * rate) steps (until the end of a source without a rate).
    `open_source`: attention_source's (the host sends both files in one namespace), else
    imported."""
    if open_source is None:
        from attention_source import open_source

    try:
        if spec is None:
            import json

            with open("app.json") as f:
                cfg = json.load(f)
            spec = cfg["source"]
            if i2c is None and cfg.get("i2c"):
                i2c = cfg["i2c"]  # [id, scl, sda]: open_source makes the bus
        if rate is not None:
            spec = "%s@%s" % (spec.partition("@")[0], rate)
        source = open_source(spec, i2c, loop=False)
    except Exception as exc:  # no app.json, a bad spec, a missing sensor: one line
        print("TR! %s" % (exc,))
        return 0
    r = getattr(source, "rate", 0) or 0
    return record(source, int(seconds * r + 0.5) if r else 0)
