# Host (CPython): the serial link to a board running device/server.py (pyserial).
"""Raw-REPL entry, server start and integrity-checked JSON request/reply with resync.

Protocol: docs/protocol.md. The same code talks to a real board (`/dev/ttyACM0`,
`/dev/ttyUSB0`) and to a virtual board's pseudo-terminal. mpremote opens the port
exclusively, so the link and mpremote take turns (close one before using the other).
References: mpremote's transport_serial.py (raw REPL byte sequences).
"""

from __future__ import annotations

import errno
import json
import re
import time
import zlib
from typing import Any

import serial

from tinyattn import remedy

RAW_REPL_BANNER = b"raw REPL; CTRL-B to exit\r\n"
# Lines that mean the board rebooted (soft or hard reset, ESP32 ROM boot, a REPL prompt).
RESET_MARKERS = (b"MPY: soft reboot", b"MicroPython v", b"rst:", b"raw REPL; CTRL-B", b">>> ")
CRC_TAG = ',"crc":'
# What shows that the app ran (device/app_main.py, installed as main.py): a line it prints
# ("TA …", "TA+ …"), the traceback of main.py that an interrupt leaves, or a KeyboardInterrupt
# with no frame at all: the interrupt landed while the board still compiled main.py (nothing
# else compiles on a board without running: the code we send has a "<stdin>" frame, and an
# interrupted raw paste says "KeyboardInterrupt" with no "Traceback" line).
APP_OUTPUT = re.compile(
    rb'(?:^|\n)TA[ +.!]|File "main\.py"|Traceback \(most recent call last\):\r?\nKeyboardInterrupt'
)
# The raw-REPL command that starts the server (docs/protocol.md, Getting there), sent right
# after a soft reset (start_server), so the heap is as after a reboot. With the runtime
# precompiled (server.mpy: importing it needs no compile heap) the server's line buffer
# (`line_words` float32 words as an array('f'), allocated whole from a range) comes first, in
# one piece at the bottom of the heap, then the model loads before server is imported, so the
# load (the heap's peak) does not share the heap with the server's bytecode; `_m` hands both
# over in a list server.run empties. With .py sources the import (compiling server.py, the
# bigger transient) comes first and server.run loads the model.
START_CODE = (  # terse (a noisy link damages fewer bytes); the path once, so a damaged path
    # fails the load (the banner names it), and only the load's own errors go to the banner (a
    # line damaged elsewhere is a traceback: the start is tried again)
    "import gc,os,array\n_p={path!r};_m=[]\n"
    "if 'server.mpy' in os.listdir():\n"
    " gc.collect();_m.append(array.array('f',range({words})))\n"
    " from attention import Model\n"
    " try:_m.append(Model(_p))\n"
    " except Exception as e:_m.append(e)\n"
    "gc.collect()\nimport server\nserver.run(_p,loaded=_m)\n"
)
# A training session's start (server_train.run, docs/protocol.md, Training), also after a soft
# reset; the line buffer first, as above. The session never imports server.py (its framing is
# server_link.py).
TRAIN_START_CODE = (
    "import gc,os,array\n_m=[]\n"
    "if 'server.mpy' in os.listdir():\n"
    " gc.collect();_m.append(array.array('f',range(1024)))\n"
    "gc.collect()\nimport server_train\nserver_train.run(loaded=_m)\n"
)
# the banner's fields besides "banner" and "ok"; `info` carries them all (docs/protocol.md)
BANNER_FIELDS = ("protocol", "format_version", "n_features", "n_classes", "blob_crc")
TRACEBACK = b"Traceback (most recent call last)"
# Errors the server gives a request that arrived damaged (docs/protocol.md): resend at once.
CORRUPTED = ("crc mismatch", "request is not valid JSON", "bad crc field")
DEFAULT_BAUD = 115200
BUSY_WAIT = 1.0  # seconds a busy port is tried again before "port is busy" (a killed mpremote)
# Seconds a silent board is waited for before a command gives up, the same for `flash` (the
# first mpremote command) and `parity` (the raw REPL prompt): their --timeout default.
DEFAULT_CONNECT_TIMEOUT = 10.0
MAX_LINE = 4096  # bytes: the server's least request line (device/server_link.py MAX_LINE)


def line_words(values: int) -> int:
    """Float32 words of the server's line buffer for a model whose one sample is `values`
    values (a window's T·C, a row's F): device/server_link.py `line_size(values) / 4` — at
    least MAX_LINE bytes, else the sample whole as base64 plus 400 bytes, so a long window
    (ACSF1: 1,460 values, 7.8 KB as base64) fits one request line."""
    need = (16 * values + 2) // 3 + 400
    return max(MAX_LINE, (need + 3) // 4 * 4) // 4


class LinkError(Exception):
    """A link problem, worded for the user (what happened and what to do)."""


class HeapTooSmall(LinkError):
    """The board ran out of heap starting the server (loading the model): flashing the same
    files again does not help; the callers that hold the blob name the heap it needs."""


class BoardReset(LinkError):
    """The board rebooted while we waited for a reply."""


class LinkTimeout(LinkError):
    """The board did not answer in time; `damaged` counts replies that arrived damaged (a
    noisy link rather than a silent board: smaller requests and replies may get through);
    `seen`: what came instead of the awaited marker (its last bytes)."""

    def __init__(self, message: str, damaged: int = 0, seen: bytes = b""):
        super().__init__(message)
        self.damaged = damaged
        self.seen = seen


def frame(obj: dict[str, Any]) -> bytes:
    """Serialize a request with its CRC field (docs/protocol.md, Integrity) and a newline."""
    head = json.dumps(obj, separators=(",", ":"))[:-1]
    crc = zlib.crc32(head.encode())
    return f"{head}{CRC_TAG}{crc}}}\n".encode()


def unframe(line: bytes) -> dict[str, Any] | None:
    """Parse a reply line; None unless it is a JSON object whose CRC field matches.

    The server frames every reply (docs/protocol.md), so a line without the field is not a
    reply: a print from other code, or a reply whose CRC field was damaged on the way.
    """
    text = line.decode("utf-8", "replace").strip()
    at = text.rfind(CRC_TAG)
    if at < 0 or not text.endswith("}"):
        return None
    try:
        want = int(text[at + len(CRC_TAG) : -1])
    except ValueError:
        return None
    if zlib.crc32(text[:at].encode()) != want:
        return None
    try:
        obj = json.loads(text[:at] + "}")
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def damaged_reply(line: bytes) -> bool:
    """A line that unframe() refused but that was meant as a reply: it carries the CRC field,
    or it starts like a JSON object and does not parse (bytes lost or flipped on the link)."""
    text = line.decode("utf-8", "replace").strip()
    if CRC_TAG in text:
        return True
    if not text.startswith("{"):
        return False
    try:
        json.loads(text)
    except ValueError:
        return True
    return False  # an intact JSON line without the field: not ours, skip it


def open_port(port: str, baud: int = DEFAULT_BAUD) -> serial.Serial:
    """Open PORT holding DTR/RTS low, so an ESP32's auto-reset circuit is not triggered."""
    s = serial.Serial()
    s.port = port
    s.baudrate = baud
    s.timeout = 0.05
    s.write_timeout = 5
    s.dtr = False  # applied when the port opens
    s.rts = False
    try:
        s.exclusive = True  # fail fast if mpremote or a terminal holds the port
    except (AttributeError, ValueError):
        pass
    deadline = time.monotonic() + BUSY_WAIT
    while True:
        try:
            s.open()
            return s
        except serial.SerialException as exc:
            if is_busy_error(exc) and time.monotonic() < deadline:
                time.sleep(0.05)  # a program that just ended (mpremote, Ctrl-C) lets go soon
                continue
            raise LinkError(describe_open_error(port, exc)) from None


class BoardLink:
    """A session with the tinyattn server on a board. Use as a context manager."""

    def __init__(
        self,
        port: str,
        baud: int = DEFAULT_BAUD,
        timeout: float = 5.0,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ):
        if not timeout > 0 or not connect_timeout > 0:
            raise ValueError("timeouts must be positive numbers of seconds")
        self.port = port
        self.baud = baud
        self.timeout = timeout  # seconds per request (resent up to 3 times)
        self.connect_timeout = connect_timeout  # seconds a silent board is waited for
        self.serial: serial.Serial | None = None
        self._buf = b""
        self._next_id = 1
        self.line_values = 0  # one sample's values of the model served (start_server)
        self.stats = {
            "garbage_lines": 0,  # lines that were not replies (noise, boot messages)
            "damaged_replies": 0,  # replies that failed their CRC: resent at once
            "resends": 0,
            "resets": 0,
            "timeouts": 0,
            "server_starts": 0,
        }
        self.banner: dict[str, Any] | None = None
        self.app_stopped = False  # enter_raw_repl interrupted the app (main.py) to get here

    # -- port -------------------------------------------------------------------------------
    def open(self) -> BoardLink:
        self.serial = open_port(self.port, self.baud)
        return self

    def close(self) -> None:
        if self.serial is not None:
            try:
                self.serial.close()
            finally:
                self.serial = None

    def __enter__(self) -> BoardLink:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, data: bytes) -> None:
        assert self.serial is not None, "link is not open"
        try:
            self.serial.write(data)
            self.serial.flush()
        except (serial.SerialException, OSError) as exc:
            raise LinkError(
                f"{self.port}: write failed ({exc}); is the board still connected?"
            ) from None

    def _read_some(self) -> bytes:
        assert self.serial is not None, "link is not open"
        try:
            return self.serial.read(max(1, self.serial.in_waiting))
        except (serial.SerialException, OSError) as exc:
            raise LinkError(
                f"{self.port}: read failed ({exc}); is the board still connected?"
            ) from None

    def drain(self, quiet: float = 0.15, limit: float = 3.0) -> bytes:
        """Read until the line has been quiet for `quiet` seconds (or `limit` passed)."""
        got, end = self._buf, time.monotonic() + limit
        self._buf = b""
        last = time.monotonic()
        while time.monotonic() < end and time.monotonic() - last < quiet:
            chunk = self._read_some()
            if chunk:
                got += chunk
                last = time.monotonic()
        return got

    def read_until(self, marker: bytes, timeout: float) -> bytes:
        """Read until `marker` has arrived; LinkTimeout with what came instead."""
        end = time.monotonic() + timeout
        while marker not in self._buf:
            if time.monotonic() > end:
                seen = self._buf[-80:]
                self._buf = b""
                raise LinkTimeout(
                    f"{self.port}: expected {marker!r} within {timeout:.0f}s, got {seen!r}",
                    seen=seen,
                )
            self._buf += self._read_some()
        at = self._buf.index(marker) + len(marker)
        data, self._buf = self._buf[:at], self._buf[at:]
        return data

    def _read_line(self, deadline: float) -> bytes | None:
        while b"\n" not in self._buf:
            if time.monotonic() > deadline:
                return None
            self._buf += self._read_some()
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    # -- raw REPL ---------------------------------------------------------------------------
    def enter_raw_repl(self, timeout: float | None = None) -> None:
        """Interrupt whatever runs and enter the raw REPL (mpremote's byte sequence), again
        and again until the prompt comes: a board that reboots when its port opens (an ESP32
        behind a USB-UART) misses an interrupt sent while it boots, then runs its app. Sets
        `app_stopped` when what it interrupted was the app (`tinyattn flash --app`)."""
        timeout = self.connect_timeout if timeout is None else timeout
        end = time.monotonic() + timeout
        heard = b""  # the last the board said: in the message when no prompt comes
        while True:
            self._write(b"\r\x03\x03")
            got = self.drain(quiet=0.1, limit=1.0)
            heard = (heard + got)[-60:]
            if APP_OUTPUT.search(got):
                self.app_stopped = True
            self._write(b"\r\x01")
            try:
                seen = self.read_until(RAW_REPL_BANNER + b">", timeout=min(2.0, timeout))
                if APP_OUTPUT.search(seen):
                    self.app_stopped = True
                return
            except LinkTimeout as exc:
                heard = (heard + exc.seen)[-60:]
                if time.monotonic() > end:
                    said = f"it last printed {heard!r}" if heard.strip() else "it printed nothing"
                    raise LinkTimeout(
                        f"{self.port}: no raw REPL prompt within {timeout:g}s ({said}); is a "
                        "MicroPython board on this port? Press its reset button and retry (or "
                        "give it longer: --timeout)"
                    ) from None

    def soft_reset(self, timeout: float | None = None, at_prompt: bool = False) -> None:
        """A soft reset from the raw REPL (Ctrl-D at its prompt, as mpremote does): the heap as
        after a reboot, main.py not run (a board runs it only from the friendly REPL); back at
        the raw REPL prompt. `at_prompt`: the link is at the raw REPL prompt already. The
        prompt is asked for again until it comes intact (enter_raw_repl: a damaged "soft
        reboot" or banner on a noisy link costs one retry, not the whole timeout)."""
        if not at_prompt:
            self.enter_raw_repl(timeout)
        self._write(b"\x04")
        self.enter_raw_repl(timeout)

    def exec_raw(self, code: str, timeout: float = 10.0) -> str:
        """Run `code` at the raw REPL and return its output; LinkError with the traceback."""
        data = code.encode()
        for i in range(0, len(data), 256):
            self._write(data[i : i + 256])
            time.sleep(0.01)
        self._write(b"\x04")
        self.read_until(b"OK", timeout=timeout)
        out = self.read_until(b"\x04", timeout=timeout)[:-1]
        err = self.read_until(b"\x04", timeout=timeout)[:-1]
        if err:
            raise LinkError(f"{self.port}: board raised: {err.decode(errors='replace').strip()}")
        return out.decode(errors="replace")

    # -- server -----------------------------------------------------------------------------
    def start_server(
        self, model_path: str = "model.bin", timeout: float = 15.0, attempts: int = 3,
        values: int | None = None,
    ) -> dict:  # fmt: skip
        """Enter the raw REPL, start device/server.py, and return its banner. `values`: one
        sample's values of the blob (a window's T·C, a row's F; None: as the last start) sizes
        the server's line buffer (`line_words`).

        A start that goes wrong on the way (the command or the banner damaged on a noisy link,
        a reset meanwhile) is tried again, up to `attempts` times in all. No raw REPL prompt
        (LinkTimeout) and a server that cannot load the model fail at once.
        """
        if values is not None:
            self.line_values = int(values)
        for attempt in range(attempts):
            self.enter_raw_repl()
            # a soft reset from the raw REPL first: the heap as after a reboot, whatever ran
            # (the app, an earlier session) released, and main.py not run again
            self.soft_reset(at_prompt=True)
            self.stats["server_starts"] += 1
            try:
                return self._start_once(model_path, timeout)
            except HeapTooSmall:
                self.leave_raw_repl()
                raise
            except _NoModel as exc:
                self.leave_raw_repl()
                raise LinkError(str(exc)) from None
            except LinkError:
                if attempt == attempts - 1:
                    self.leave_raw_repl()
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def leave_raw_repl(self) -> None:
        """Back to the friendly REPL (Ctrl-B), where a reset runs main.py again: what a
        failed start leaves for the next command and for the user. Best effort."""
        try:
            self._write(b"\r\x03\x02")
            self.drain(quiet=0.1, limit=0.5)
        except LinkError:
            pass

    def _start_once(self, model_path: str, timeout: float) -> dict:
        words = line_words(self.line_values)
        code = START_CODE.format(path=model_path, words=words) if model_path else TRAIN_START_CODE
        self._write(code.encode() + b"\x04")
        self.read_until(b"OK", timeout=min(timeout, 5.0))  # the raw REPL took the code
        deadline = time.monotonic() + timeout
        while True:
            line = self._read_line(deadline)
            if line is None:
                raise LinkTimeout(
                    f"{self.port}: the server did not start within {timeout:.0f}s; "
                    f"run '{remedy.flash()}' to install the device files"
                )
            if b"\x04" in line or b"Traceback" in line or b"Error" in line:
                rest = (line + b"\n" + self.drain(quiet=0.2, limit=2.0)).replace(b"\x04", b"\n")
                text = rest.decode(errors="replace").splitlines()
                last = [x.strip() for x in text if x.strip() not in ("", ">")]
                why = last[-1] if last else "?"
                if why.startswith("MemoryError"):
                    raise HeapTooSmall(f"{self.port}: the board ran out of heap starting the "
                                       f"server ({why})")  # fmt: skip
                raise LinkError(  # the exception line of the traceback says what is missing
                    f"{self.port}: the server failed to start: {why}; "
                    f"run '{remedy.flash()}' to (re)install the device files"
                )
            obj = unframe(line)
            if obj and obj.get("banner") == "tinyattn-server":
                if not obj.get("ok"):
                    err = str(obj.get("error"))
                    if model_path not in err:  # it loaded another path: the command was damaged
                        raise LinkError(f"{self.port}: the start command arrived damaged ({err})")
                    if err.startswith("not enough heap"):  # the host says what helps
                        raise HeapTooSmall(f"{self.port}: {err.split(';')[0]}")
                    fixed = remedy.blob_error(err)  # the board's reader: 'make export' …
                    fix = "" if fixed != err else f"; run '{remedy.flash()}'"
                    raise _NoModel(f"{self.port}: {fixed}{fix}")
                self.banner = obj
                return obj
            if any(m in line for m in RESET_MARKERS):
                raise LinkError(f"{self.port}: the board reset while the server started")
            if damaged_reply(line):
                return self._banner_from_info()

    def _banner_from_info(self) -> dict:
        """The banner arrived damaged (a noisy link) but the server may well be up: it
        answers `info` (CRC-framed and resent like any request), which carries every banner
        field. A server that printed an error banner has exited, and the raw REPL's end
        markers follow the banner: then, as when `info` gets no intact reply, LinkError, and
        start_server starts it again."""
        self.stats["damaged_replies"] += 1
        damaged = LinkError(f"{self.port}: the server's banner did not arrive intact")
        rest = self.drain(quiet=0.2, limit=2.0)
        if b"\x04" in rest or any(m in rest for m in RESET_MARKERS):
            raise damaged
        try:
            info = self.request("info")
        except LinkError:  # LinkTimeout or BoardReset: not a serving server
            raise damaged from None
        if not info.get("ok"):
            raise damaged
        banner = {"banner": "tinyattn-server", "ok": True}
        banner.update({k: info.get(k) for k in BANNER_FIELDS})
        self.banner = banner
        return banner

    def stop_server(self) -> None:
        """Ask the server to exit and leave the board at the friendly REPL."""
        try:
            self._write(frame({"op": "exit"}))
            self.read_until(b">", timeout=3.0)
        except LinkError:
            self._write(b"\r\x03\x03")
        self._write(b"\r\x02")
        self.drain(quiet=0.1, limit=1.0)

    def _board_reset(self, op: str, line: bytes) -> BoardReset | None:
        """BoardReset if `line` (or what follows it) shows the server is gone, else None."""
        if TRACEBACK in line:
            rest = self.drain(quiet=0.2, limit=2.0).replace(b"\x04", b"\n")
            last = [x for x in rest.splitlines() if x.strip() and x.strip() != b">"]
            why = last[-1].decode(errors="replace").strip() if last else "?"
            self.stats["resets"] += 1
            return BoardReset(f"{self.port}: the server stopped during '{op}': {why}")
        if any(m in line for m in RESET_MARKERS):
            self.stats["resets"] += 1
            self._buf = b""
            return BoardReset(f"{self.port}: the board reset during '{op}'")
        return None

    def request(
        self, op: str, timeout: float | None = None, retries: int = 3, **fields: Any
    ) -> dict[str, Any]:
        """Send one request and return its reply (`ok` may be false: the caller decides).

        A request refused as damaged by the server, and a reply that arrives damaged, are
        resent at once; a lost line after `timeout`. Up to `retries` resends, then LinkTimeout
        (its `damaged` counts the damaged replies: a noisy link, not a silent board). A reboot
        of the board or a server that stopped raises BoardReset. Never waits longer than
        (retries + 1) × (timeout + 0.5 s).
        """
        timeout = self.timeout if timeout is None else timeout
        rid = self._next_id
        self._next_id += 1
        payload = frame({"id": rid, "op": op, **fields})
        intact_json = b"NaN" not in payload and b"Infinity" not in payload
        damaged = 0
        for attempt in range(retries + 1):
            if attempt:
                self.stats["resends"] += 1
                self._write(b"\n")  # end any half-received line on the board
            self._write(payload)
            deadline = time.monotonic() + timeout
            while True:
                line = self._read_line(deadline)
                if line is None:
                    self.stats["timeouts"] += 1
                    break  # resend
                obj = unframe(line)
                if obj is None:
                    reset = self._board_reset(op, line)
                    if reset:
                        raise reset
                    if damaged_reply(line):
                        self.stats["damaged_replies"] += 1
                        damaged += 1
                        # the rest of a reply that a flipped byte cut in two
                        rest = self.drain(quiet=0.05, limit=0.5)
                        reset = self._board_reset(op, rest)
                        if reset:
                            raise reset
                        break  # resend at once
                    if line.strip():
                        self.stats["garbage_lines"] += 1
                    continue
                if obj.get("banner"):
                    self.stats["resets"] += 1
                    raise BoardReset(f"{self.port}: the server restarted during '{op}'")
                if "op" in obj:  # our own request echoed: a REPL, not the server, has the line
                    self.stats["resets"] += 1
                    raise BoardReset(f"{self.port}: the server is not running (during '{op}')")
                if obj.get("id") == rid:
                    error = "" if obj.get("ok") else str(obj.get("error", ""))
                    if not error.startswith(CORRUPTED):
                        return obj
                    if error.startswith("request is not valid JSON") and not intact_json:
                        return obj  # NaN or Infinity: a JSON extension MicroPython refuses
                    damaged += 1  # our request arrived damaged
                    break  # resend it at once
                # a stale reply, or one to a line we did not send (noise): skip
        if damaged:
            raise LinkTimeout(
                f"{self.port}: no intact reply to '{op}' in {retries + 1} tries, {damaged} "
                "damaged on the link; check the cable and the baud rate (--baud), or use a "
                "shorter cable / powered hub",
                damaged=damaged,
            )
        raise LinkTimeout(
            f"{self.port}: no reply to '{op}' after {retries + 1} tries of {timeout:.0f}s; "
            "the board may be hung or the server not running — reset the board and retry"
        )


class _NoModel(LinkError):
    """The server started but could not load the model: starting again will not help."""


# -- compact batches (docs/protocol.md, Compact batches) ------------------------------------
# Per-sample reply fields of a base64 batch and their little-endian element type.
B64_REPLY_DTYPES = {"xq": "<i1", "logits_q": "<i4", "logits": "<f4"}


def b64_batch(X: Any) -> dict[str, Any]:
    """Request fields of a base64 batch of raw features X [n, F]: float32 bytes, row-major.
    The board computes on these float32 values: the host reference must use them too
    (`as_sent`)."""
    import base64

    import numpy as np

    x = np.ascontiguousarray(X, dtype="<f4")
    return {"enc": "b64", "n": int(x.shape[0]), "f32": base64.b64encode(x.tobytes()).decode()}


def as_sent(X: Any) -> Any:
    """X as a base64 batch delivers it: each feature rounded to float32 (as float64)."""
    import numpy as np

    return np.asarray(X, dtype=np.float32).astype(np.float64)


def decode_b64_reply(
    rep: dict[str, Any], n: int, xq_widths: list[int] | None = None
) -> dict[str, Any]:
    """A base64 batch reply with its arrays as lists of n per-sample lists, as a JSON batch
    reply has them. A field that is not valid base64 or does not split into n rows becomes
    None (the caller's per-sample count check then refuses the reply). `xq_widths`: a
    sequence model's windows, whose `xq` rows are their n_k·C values (split by these; int8,
    or int32 when the reply has 4 bytes a value: a rocket blob's wider input grid)."""
    import base64
    import binascii

    import numpy as np

    out = dict(rep)
    for key, dtype in B64_REPLY_DTYPES.items():
        text = rep.get(key)
        if not isinstance(text, str):
            continue
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            out[key] = None
            continue
        size = np.dtype(dtype).itemsize
        if key == "xq" and xq_widths is not None:
            # a window model's xq is int8, or int32 on a wider input grid (a rocket blob): the
            # reply's byte count says which
            if len(raw) == 4 * sum(xq_widths) and sum(xq_widths):
                dtype, size = "<i4", 4
            if len(xq_widths) != n or len(raw) != size * sum(xq_widths):
                out[key] = None
                continue
            flat = np.frombuffer(raw, dtype=dtype).astype(np.int64)
            ends = np.cumsum(xq_widths)
            out[key] = [flat[e - w : e].tolist() for e, w in zip(ends, xq_widths, strict=True)]
            continue
        if n <= 0 or not raw or len(raw) % (size * n):
            out[key] = None
            continue
        arr = np.frombuffer(raw, dtype=dtype).reshape(n, -1)
        out[key] = arr.astype(np.float64 if dtype == "<f4" else np.int64).tolist()
    return out


# ---------------------------------------------------------------- "cannot open PORT", one wording

DIALOUT_FIX = (
    "add yourself to the 'dialout' group: sudo usermod -aG dialout $USER, then log out and in "
    "again"
)


def permission_message(port: str) -> str:
    return f"{port}: permission denied opening the serial port; {DIALOUT_FIX}"


def is_permission_error(exc: BaseException) -> bool:
    """True for EACCES/EPERM, as an OSError or as pyserial's SerialException (an OSError whose
    errno pyserial sets; its text ends in "[Errno 13] Permission denied: '/dev/ttyUSB0'")."""
    if getattr(exc, "errno", None) in (errno.EACCES, errno.EPERM):
        return True
    text = str(exc)
    return "[Errno 13]" in text or "Permission denied" in text


def is_busy_error(exc: BaseException) -> bool:
    """Another process holds the port (pyserial's exclusive lock, or EBUSY)."""
    text = str(exc).lower()
    return getattr(exc, "errno", None) == errno.EBUSY or "lock" in text or "busy" in text


def describe_open_error(port: str, exc: BaseException) -> str:
    """One line for an exception from opening PORT (pyserial or os.open): what and the fix."""
    text = str(exc)
    if is_permission_error(exc):
        return permission_message(port)
    if getattr(exc, "errno", None) == errno.ENOENT or "No such file" in text:
        return (
            f"{port}: no such serial port; plug the board in (ls /dev/ttyACM* /dev/ttyUSB*, or "
            "'tinyattn devs') or start a virtual board with 'tinyattn board'"
        )
    if is_busy_error(exc):
        return (
            f"{port}: port is busy (another program, e.g. mpremote or a terminal, has it "
            "open); close it and retry"
        )
    if getattr(exc, "errno", None) == errno.ENOTTY or "Inappropriate ioctl" in text:
        return (
            f"{port}: not a serial port (a file or device without a UART); give the board's "
            "port (ls /dev/ttyACM* /dev/ttyUSB*, or 'tinyattn devs')"
        )
    return f"{port}: cannot open serial port: {text}"
