# Device (MicroPython; also runs under CPython): the tinyattn server's link layer.
"""Framing of the serial protocol (docs/protocol.md), shared by the inference server
(server.py) and the training session (server_train.py), so a training session loads none of
the inference ops: one request line in (LineReader: a bounded buffer allocated once; a long
base64 field left in place as a Payload), the CRC field checked (unframe), the request routed
to its op, one framed reply line out (write_reply, piece by piece).
"""

import array
import gc
import json

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
    from attention_crc import crc32

try:
    from micropython import const
except ImportError:  # CPython
    const = lambda x: x  # noqa: E731

PROTOCOL = 1
RUNTIME_VERSION = "0.1.0"  # device/package.json "version"
MAX_LINE = 4096  # bytes: the least request line; longer ones are rejected (the host splits
# batches to fit), unless the model's window needs a longer line (line_size)


def line_size(values):
    """Bytes of the line buffer for a model whose one sample is `values` float32 values (a
    window's T·C, a row's F): MAX_LINE, or that sample whole as base64 (ceil(16·values/3)
    characters) plus 400 bytes of the request's other fields, rounded up to 4."""
    need = (16 * values + 2) // 3 + 400
    return max(MAX_LINE, (need + 3) // 4 * 4)


class RequestError(Exception):
    """A request the server understood to be wrong: becomes an error reply."""


def heap():
    """(free, allocated) heap bytes after a collection; (None, None) where gc cannot tell."""
    if hasattr(gc, "mem_free"):
        gc.collect()
        return gc.mem_free(), gc.mem_alloc()
    return None, None


_CRC_TAG = ',"crc":'
_CRC_TAG_B = b',"crc":'


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
_LONG_LINE = "\x02"  # marker: the request line was longer than the line buffer
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


_shared = {"line": None}  # the runtime's line buffer: one, kept across sessions


def shared_line(buf=None, make=True, size=MAX_LINE):
    """The runtime's line buffer as line_buffer() gives it (floats, bytes), at least `size`
    bytes: adopted from `buf` (the array('f') a start command allocated first, in one piece
    while the heap was whole, of line_size() bytes for its model) if there is none yet or the
    one kept is shorter, else allocated now when `make` (None otherwise)."""
    line = _shared["line"]
    if buf is not None and (line is None or len(line[1]) < 4 * len(buf)):
        try:
            import uctypes

            line = (buf, uctypes.bytearray_at(uctypes.addressof(buf), 4 * len(buf)))
        except ImportError:
            pass
    if make and (line is None or len(line[1]) < size):
        line = None
        _shared["line"] = None
        gc.collect()  # the shorter buffer goes before the longer one is taken
        line = line_buffer(size)
    _shared["line"] = line
    return line


def max_line():
    """Bytes of the longest request line the server takes: its line buffer's."""
    line = _shared["line"]
    return MAX_LINE if line is None else len(line[1])


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


def handle_line(route, model, line, payload=None):
    """One request line -> (reply dict, keep_running). Never raises for bad input. `route(op)`:
    the function serving op, called as fn(model, req) (RequestError for an op it does not
    serve); `payload`: the long base64 field LineReader cut out of the line (line has it as
    ""), which the request gets back as that Payload."""
    rid = None
    try:
        if line == _LONG_LINE or len(line) > max_line():
            raise RequestError("request line longer than %d bytes" % max_line())
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
        rep = route(op)(model, req)
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


def serve(route, model, reader, stdout):
    """The request loop: one reply line per request line, until `exit` or EOF (handle_line
    for `route`)."""
    while True:
        line = reader.readline()
        if line is None:  # EOF (CPython pipes; boards never see it)
            return
        line = line.strip()
        if not line:
            continue
        rep, keep = handle_line(route, model, line, reader.payload)
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
