# Device side (MicroPython unix port): the virtual board's "firmware", started by tools/vboard.py.
"""Boot sequence, friendly REPL, raw REPL and raw-paste mode of a MicroPython board, in Python.

The unix port's own REPL is a terminal REPL without raw REPL, so tools/vboard.py runs this
script instead, with the serial line (the pty, through a proxy) on stdin/stdout. It follows
MicroPython's C sources byte for byte where hosts such as mpremote depend on it:
- shared/runtime/pyexec.c: `pyexec_raw_repl`, `pyexec_friendly_repl`, `parse_compile_execute`
  (the two \x04 after raw-REPL output, "OK", soft reset on Ctrl-D or SystemExit),
  `do_reader_stdin` (raw-paste: "R\x01", window size LE16, \x01 per window consumed);
- shared/readline/readline.c: echo, backspace, auto-indent, Ctrl-A..E on an empty line;
- ports/esp32/main.c, ports/rp2/main.c: boot.py always, main.py only in friendly-REPL mode,
  "MPY: soft reboot" after a soft reset, the REPL mode surviving a soft reset.
Docs: https://docs.micropython.org/en/latest/reference/repl.html (raw and raw-paste modes).

Not done here: "\n" -> "\r\n" on output (tools/vboard.py cooks the console like a board does)
and Ctrl-C while code runs (the proxy signals the interpreter: a scheduled KeyboardInterrupt).

Run as a script or, compiled by mpy-cross (compiling this file from source needs ~45 KiB of
heap), as `micropython -m vboard_boot`. argv: fs_dir ctl_fd mode reason heap_text; mode is
"raw" or "friendly"; reason is "power", "hard" (reset) or "soft".
Control bytes written to ctl_fd for the proxy (one byte each): B booted, M main.py starts,
R user code runs (Ctrl-C interrupts), I it stopped (Ctrl-C is a byte again), P the REPL waits
for input for the first time (boot output is complete), r / f REPL mode is raw / friendly,
S soft reset requested (the process exits next).
"""

import gc
import io
import os
import sys

from micropython import const

_CTRL_A = const(1)
_CTRL_B = const(2)
_CTRL_C = const(3)
_CTRL_D = const(4)
_CTRL_E = const(5)
_STDIN_BUFFER_MAX = const(256)  # MICROPY_REPL_STDIN_BUFFER_MAX; raw-paste window is half
_OOM = b"\x04MemoryError: memory allocation failed\n\x04"  # output, error, end
_COMPOUND = ("if", "while", "for", "try", "with", "def", "class", "async")
_SOFT = const(1)  # REPL result: soft reset
_TO_RAW = const(2)
_TO_FRIENDLY = const(3)

_ME = 'vboard_boot.py"'  # traceback lines from this file are hidden: a board has no such frame
_fs_dir, _ctl_fd, _mode, _reason, _heap = sys.argv[1:6]
_ctl = open(int(_ctl_fd), "wb").write
_out = sys.stdout.buffer.write
_readinto = sys.stdin.buffer.readinto
_b1 = bytearray(1)
_g = {"__name__": "__main__"}  # the user's globals: fresh on every boot, like a board
_prompted = False


def _rd():
    """One byte from the serial line (blocking); stdin closed means the host is gone."""
    global _prompted
    if not _prompted:  # the first time the REPL waits: boot output is all out
        _prompted = True
        _ctl(b"P")
    if not _readinto(_b1):
        raise SystemExit(0)
    return _b1[0]


def _banner():
    v = sys.implementation.version
    tag = f"v{v[0]}.{v[1]}.{v[2]}" + ("-" + v[3] if len(v) > 3 and v[3] else "")
    date = sys.version.rsplit(" on ", 1)[-1]
    _out(f"MicroPython {tag} on {date}; tinyattn virtual board with unix port (heap {_heap})\r\n")
    _out(b'Type "help()" for more information.\r\n')


def _print_exc(e):
    try:
        s = io.StringIO()
        sys.print_exception(e, s)
        for line in s.getvalue().split("\n"):
            if line and not (line.startswith('  File "') and _ME in line):
                _out(line + "\n")
    except MemoryError:  # no heap left to format the frames: header and message only
        _out(b"Traceback (most recent call last):\n")
        _out(type(e).__name__)
        try:
            _out(": " + str(e))
        except MemoryError:
            pass
        _out(b"\n")


def _exec(src, name, kind, eof, start=None):
    """parse_compile_execute: True when the code asked for a soft reset (SystemExit). `start`:
    a control byte sent first, inside the handler (main.py's "M": from there Ctrl-C interrupts,
    so the interrupt it lets in is caught here, as a board's pyexec catches it)."""
    soft = False
    try:
        if start:
            _ctl(start)
        if isinstance(src, bytearray):
            src = str(src, "utf8")
        if name != "<stdin>":
            _g["__file__"] = name
        code = compile(src, name, kind)
        _ctl(b"R")
        try:
            exec(code, _g)
        finally:
            _ctl(b"I")
        if eof:
            _out(b"\x04")
    except BaseException as e:  # noqa: B036 - SystemExit and KeyboardInterrupt included
        _ctl(b"I")
        if eof:
            _out(b"\x04")
        if isinstance(e, SystemExit):
            soft = True
        else:
            _print_exc(e)
    if eof:
        _out(b"\x04")
    return soft


def _run_file(name):
    """pyexec_file_if_exists: True when the file asked for a soft reset."""
    try:
        with open(name) as f:
            src = f.read()
    except OSError:
        return False
    return _exec(src, name, "exec", False, b"M" if name == "main.py" else None)


def _raw_paste(cmd):
    """do_reader_stdin: raw-paste mode with flow control; True for a soft reset."""
    if cmd != 65:  # "A"
        _out(b"R\x00")
        return False
    _out(b"R\x01")
    window = _STDIN_BUFFER_MAX // 2
    _out(bytes((window & 0xFF, window >> 8, 1)))  # window size, then "one more window free"
    src = bytearray()
    remain = window
    try:
        while True:
            c = _rd()
            if c == _CTRL_C or c == _CTRL_D:
                _out(b"\x04")  # end of data seen
                if c == _CTRL_C:  # the reader raises KeyboardInterrupt: no traceback lines
                    _out(b"\x04KeyboardInterrupt: \n\x04")
                    return False
                break
            src.append(c)
            remain -= 1
            if remain == 0:
                _out(b"\x01")
                remain = window
    except MemoryError:  # as a board's compiler running out of heap mid-stream:
        src = None
        gc.collect()
        _out(b"\x04")  # abrupt end of data, swallow the rest, then the error
        while c != _CTRL_C and c != _CTRL_D:
            c = _rd()
        _out(_OOM)
        return False
    return _exec(src, "<stdin>", "exec", True)


def _raw_repl(banner):
    if banner:
        _out(b"raw REPL; CTRL-B to exit\r\n")
    while True:
        _out(b">")
        line = bytearray()
        while True:
            c = _rd()
            if c == _CTRL_A:
                if line is not None and len(line) == 2 and line[0] == _CTRL_E:
                    if _raw_paste(line[1]):
                        return _SOFT
                    line = bytearray()
                    _out(b">")
                    continue
                _out(b"raw REPL; CTRL-B to exit\r\n>")
                line = bytearray()
            elif c == _CTRL_B:
                _out(b"\r\n")
                return _TO_FRIENDLY
            elif c == _CTRL_C:
                line = bytearray()
            elif c == _CTRL_D:
                break
            elif line is not None:
                try:
                    line.append(c)
                except MemoryError:  # too long for the heap: swallow it, report at Ctrl-D
                    line = None
                    gc.collect()
        _out(b"OK")
        if line is None:
            _out(_OOM)
            continue
        if not line:
            _out(b"\r\n")
            return _SOFT
        if _exec(line, "<stdin>", "exec", True):
            return _SOFT


def _auto_indent(text):
    """readline_auto_indent: indentation for the next continuation line of `text`."""
    lines = text.split("\n")
    prev = lines[-2] if len(lines) > 1 else ""
    n = (len(prev) - len(prev.lstrip(" "))) // 4
    if len(lines) > 2 and not prev.strip(" ") and not lines[-3].strip(" "):
        return ""  # last two lines all spaces: stop indenting
    if prev.endswith(":"):
        n += 1
    return "    " * n


def _readline(prompt, text):
    """readline(): echo and edit one line after `text`; returns (ctrl char or 0, new text)."""
    _out(prompt)
    indent = _auto_indent(text) if text else ""
    _out(indent)
    line = indent
    esc = 0
    while True:
        c = _rd()
        if esc == 1:
            esc = 2 if c in (91, 79) else 0  # "[" or "O"
        elif esc == 2:
            esc = 2 if 48 <= c <= 57 or c == 59 else 0  # parameters, then the final byte
        elif _CTRL_A <= c <= _CTRL_E and line == "":
            return c, text
        elif c == _CTRL_C:
            return c, text
        elif c == 13:
            _out(b"\r\n")
            return 0, text + line
        elif c == 27:
            esc = 1
        elif c == 8 or c == 127:
            if line:
                n = 4 if len(line) >= 4 and not line.strip(" ") else 1
                line = line[:-n]
                _out(b"\b" * n + b"\x1b[K")
        elif 32 <= c <= 126:
            line += chr(c)
            _out(_b1)


def _continue(text):
    """mp_repl_continue_with_input, simplified: brackets, triple quotes, \\, compound blocks."""
    if not text:
        return False
    first = text.split(None, 1)[0] if text.strip() else ""
    compound = text[0] == "@" or first.rstrip(":") in _COMPOUND
    depth = 0
    quote = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif text.startswith(quote, i):
                i += len(quote) - 1
                quote = None
        elif ch in "'\"":
            quote = ch * 3 if text.startswith(ch * 3, i) else ch
            i += len(quote) - 1
        elif ch == "#":
            while i < len(text) and text[i] != "\n":
                i += 1
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        i += 1
    if quote and len(quote) == 3:
        return True
    if depth > 0 and not quote:
        return True
    if text[-1] == "\\":
        return True
    return compound and text[-1] != "\n"


def _paste_mode():
    _out(b"\r\npaste mode; Ctrl-C to cancel, Ctrl-D to finish\r\n=== ")
    src = bytearray()
    while True:
        c = _rd()
        if c == _CTRL_C:
            _out(b"\r\n")
            return False
        if c == _CTRL_D:
            _out(b"\r\n")
            return _exec(src, "<stdin>", "exec", False)
        src.append(c)
        _out(b"\r\n=== " if c == 13 else bytes((c,)))


def _friendly_repl(banner):
    if banner:
        _banner()
    while True:
        c, text = _readline(b">>> ", "")
        if c == _CTRL_A:
            _out(b"\r\n")
            return _TO_RAW
        if c == _CTRL_B:
            _out(b"\r\n")
            _banner()
            continue
        if c == _CTRL_C:
            _out(b"\r\n")
            continue
        if c == _CTRL_D:
            _out(b"\r\n")
            return _SOFT
        if c == _CTRL_E:
            if _paste_mode():
                return _SOFT
            continue
        if not text:
            continue
        cancelled = False
        while _continue(text):
            c, text = _readline(b"... ", text + "\n")
            if c == _CTRL_C:
                _out(b"\r\n")
                cancelled = True
                break
            if c == _CTRL_D:
                break
        if not cancelled and _exec(text, "<stdin>", "single", False):
            return _SOFT


def _boot():
    os.umount("/")
    # the folder is the board's flash, mounted at / as the C VFS it is (a Python VFS class
    # makes every import stat through Python, raising OSError for each path it tries: garbage
    # between the bytecode an import keeps, ~7 KB more at a JapaneseVowels load's peak than on
    # a board, whose VfsFat/VfsLfs2 is C); os.ilistdir() entries have no size (mpremote ls: 0)
    os.mount(os.VfsPosix(_fs_dir), "/")
    os.chdir("/")
    sys.path[:] = ["", ".frozen", "/lib"]
    sys.argv[:] = []
    if _reason == "soft":
        _out(b"MPY: soft reboot\r\n")
    _ctl(b"B")
    mode = _mode
    gc.collect()
    if _run_file("boot.py"):
        return mode
    if mode == "friendly" and _run_file("main.py"):
        return mode
    fresh = True
    while True:
        _ctl(b"r" if mode == "raw" else b"f")
        try:
            ret = _raw_repl(fresh) if mode == "raw" else _friendly_repl(fresh)
        except MemoryError:  # REPL input that does not fit (a board's C REPL needs less)
            gc.collect()
            _ctl(b"I")
            _out(b"\r\nMemoryError: REPL input does not fit in the heap\r\n")
            fresh = False
            continue
        except KeyboardInterrupt:
            # A Ctrl-C that raced with the end of a command: the host is resynchronising
            # (it sends Ctrl-A / Enter next), so go back to the prompt without a banner.
            _ctl(b"I")
            fresh = False
            continue
        fresh = True
        if ret == _SOFT:
            return mode
        mode = "raw" if ret == _TO_RAW else "friendly"


_ctl(b"r" if _boot() == "raw" else b"f")
_ctl(b"S")
