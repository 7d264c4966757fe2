"""Host (CPython): resolve the PORT a command talks to — a real board, or a virtual one.

`--port /dev/ttyACM0` (RP2040, USB-CDC) or `/dev/ttyUSB0` (ESP32 behind a USB-UART) names a
real board; `--port auto` takes the only serial port that looks like a MicroPython board (by
USB vendor id, see BOARD_VIDS) and otherwise says which to choose. Without `--port`, a virtual
board (tools/vboard.py: the MicroPython unix port on a pseudo-terminal) is started on the
folder `build/board` — its flash filesystem, which persists between commands like a board's
flash does — and stopped when the command ends.

Every command that takes a port goes through add_port_arguments() and board_port(), so they
all resolve `auto` and report an unusable port the same way; link.describe_open_error() is the
one wording of "cannot open PORT" (missing, no permission: the Linux `dialout` group, busy).
`tinyattn devs` (main() below) lists the ports. References: pyserial `serial.tools.list_ports`
(ListPortInfo: device, vid, pid, description, hwid); USB vendor ids from the boards' own USB
descriptors (Raspberry Pi 2E8A, Espressif 303A, Silicon Labs 10C4, QinHeng 1A86, MicroPython
F055).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tinyattn.board.link import (  # the wording of "cannot open PORT" lives with the opener
    DEFAULT_BAUD,
    DIALOUT_FIX,
    LinkError,
    permission_message,
)
from tinyattn.errors import CLIError
from tinyattn.paths import BUILD_DIR

VIRTUAL_FS = BUILD_DIR / "board"
VIRTUAL_HEAP = "100k"  # a generic ESP32's free heap; sequence models (BasicMotions,
# JapaneseVowels) serve in it too (docs/protocol.md, Sequence windows: the heap figures)
AUTO = "auto"

# USB vendor id -> what a port with it most likely is. The USB-UART bridges also sit on other
# devices (hence "likely"); an FTDI bridge (0403) is left out: it is as common on non-boards.
BOARD_VIDS: dict[int, str] = {
    0x2E8A: "RP2040 (Raspberry Pi USB)",
    0x303A: "ESP32 (Espressif native USB)",
    0x10C4: "ESP32? (CP210x USB-UART)",
    0x1A86: "ESP32? (CH340/CH9102 USB-UART)",
    0xF055: "MicroPython (pyboard, TinyUSB ports)",
}


class PortError(CLIError, LinkError):
    """A port that cannot be used, worded for the user. A CLIError (one line, exit 2) for the
    commands, and a LinkError for code that already catches link problems."""


@dataclass(frozen=True)
class SerialPort:
    """One entry of pyserial's comports(): the fields tinyattn uses."""

    device: str  # e.g. /dev/ttyACM0
    vid: int | None  # USB vendor id (None: not a USB port)
    pid: int | None  # USB product id
    description: str  # e.g. "Board in FS mode", "CP2102 USB to UART Bridge Controller"
    hwid: str  # e.g. "USB VID:PID=2E8A:0005 SER=E6614C311B7F4C2D LOCATION=1-1:1.0"

    @property
    def vid_pid(self) -> str:
        if self.vid is None or self.pid is None:
            return "-"
        return f"{self.vid:04X}:{self.pid:04X}"

    @property
    def board(self) -> str | None:
        """What board it looks like, or None when its vendor id is no MicroPython board's."""
        return BOARD_VIDS.get(self.vid) if self.vid is not None else None

    def summary(self) -> str:
        """`/dev/ttyACM0 (2E8A:0005 RP2040 (Raspberry Pi USB))`, for one-line messages."""
        return f"{self.device} ({self.vid_pid} {self.board or self.description})"

    def as_dict(self) -> dict:
        return {
            "device": self.device,
            "vid": self.vid,
            "pid": self.pid,
            "vid_pid": None if self.vid_pid == "-" else self.vid_pid,
            "description": self.description,
            "hwid": self.hwid,
            "board": self.board,
        }


def list_serial_ports() -> list[SerialPort]:
    """The serial ports pyserial sees, sorted by device. Virtual boards (ptys) are not listed."""
    from serial.tools import list_ports

    found = [
        SerialPort(
            device=str(p.device),
            vid=p.vid,
            pid=p.pid,
            description=str(p.description or ""),
            hwid=str(p.hwid or ""),
        )
        for p in list_ports.comports()
    ]
    return sorted(found, key=lambda p: p.device)


def likely_boards(ports: list[SerialPort]) -> list[SerialPort]:
    return [p for p in ports if p.board]


def resolve_port(port: str | None) -> str | None:
    """`port` as given, or for 'auto' the device of the only likely board; PortError if there
    is none or more than one. None stays None (a virtual board)."""
    if port is None or port.strip().lower() != AUTO:
        return port
    ports = list_serial_ports()
    boards = likely_boards(ports)
    if len(boards) == 1:
        return boards[0].device
    if boards:
        raise PortError(
            f"--port auto: {len(boards)} likely boards: "
            f"{', '.join(p.summary() for p in boards)}; choose one with --port "
            f"(e.g. --port {boards[0].device})"
        )
    others = f" among {', '.join(p.summary() for p in ports)}" if ports else ""
    unset = " and unset TINYATTN_PORT" if os.environ.get("TINYATTN_PORT") == port else ""
    raise PortError(
        f"--port auto: no MicroPython board found{others}; plug one in and check "
        f"'tinyattn devs' (or name a port: --port /dev/ttyUSB0), or leave --port out{unset} "
        "to run a virtual board"
    )


def check_access(port: str) -> None:
    """PortError naming the `dialout` group when PORT is a device this user may not open.

    Checked before anything opens the port because mpremote words every failure to open as
    "failed to access PORT", whatever the cause. Missing ports are left to the opener (the
    other checks of a command come first: a missing blob is reported before a missing port).
    """
    if not port.startswith("/") or not os.path.exists(port):
        return  # an mpremote shortcut (a0, u0, …), a URL, or a path the opener reports
    if not os.access(port, os.R_OK | os.W_OK):
        raise PortError(permission_message(port))


def positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0, e.g. 10")
    return value


def add_port_arguments(parser: argparse.ArgumentParser, without: str | None = None) -> None:
    """--port and --baud; `without`: what the command does with no port (default: it starts
    a virtual board on build/board)."""
    parser.add_argument(
        "--port",
        default=os.environ.get("TINYATTN_PORT") or None,
        help="serial port of a real board, e.g. /dev/ttyACM0 (RP2040) or /dev/ttyUSB0 (ESP32), "
        "or 'auto': the only MicroPython board plugged in ('tinyattn devs' lists them); "
        f"default: $TINYATTN_PORT, else {without or 'a virtual board on build/board'}",
    )
    parser.add_argument(
        "--baud",
        type=int,
        default=DEFAULT_BAUD,
        help="baud rate of a board behind a USB-UART, e.g. an ESP32 (default %(default)s; "
        "USB-CDC boards such as the RP2040 ignore it)",
    )


@contextlib.contextmanager
def board_port(
    port: str | None, fs_dir: Path = VIRTUAL_FS, heap: str = VIRTUAL_HEAP
) -> Iterator[str]:
    """Yield `port` ('auto' resolved, access checked), or the port of a virtual board started
    for the duration."""
    port = resolve_port(port)
    if port:
        check_access(port)
        yield port
        return
    from tinyattn.tools.vboard import VirtualBoard

    fs_dir.mkdir(parents=True, exist_ok=True)
    with VirtualBoard(fs_dir, heap=heap) as vb:
        yield vb.port


# -- `tinyattn devs` ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "A port whose USB vendor id is an RP2040's (2E8A), Espressif's native USB (303A), a "
        "CP210x (10C4) or CH340 (1A86) bridge as on ESP32 boards, or MicroPython's own (F055) "
        "looks like a board; '--port auto' on other commands takes it when it is the only one. "
        "Virtual boards (tinyattn board) are pseudo-terminals and are not listed."
    )
    parser.add_argument(
        "--json", action="store_true", help="print {ports, boards, auto} as JSON instead"
    )


def main(args: argparse.Namespace) -> int:
    ports = list_serial_ports()
    boards = likely_boards(ports)
    auto = boards[0].device if len(boards) == 1 else None
    if args.json:
        doc = {
            "ports": [p.as_dict() for p in ports],
            "boards": [p.device for p in boards],
            "auto": auto,
        }
        print(json.dumps(doc, indent=2))
        return 0
    if not ports:
        print(
            "no serial ports found; plug a board in (a charge-only USB cable shows none), or run "
            "a virtual board: tinyattn board"
        )
        return 0
    width = max(len("PORT"), *(len(p.device) for p in ports))
    kind = max(len("LOOKS LIKE"), *(len(p.board or "-") for p in ports))
    print(f"{'PORT':{width}}  VID:PID    {'LOOKS LIKE':{kind}}  DESCRIPTION")
    for p in ports:
        print(f"{p.device:{width}}  {p.vid_pid:9}  {p.board or '-':{kind}}  {p.description}")
    if auto:
        print(f"1 likely board: --port auto takes {auto}")
    elif boards:
        print(f"{len(boards)} likely boards: choose one with --port (--port auto will not guess)")
    else:
        print("no likely MicroPython board: name a port with --port, or leave it out for a "
              "virtual board")  # fmt: skip
    denied = [p.device for p in boards if os.path.exists(p.device)
              and not os.access(p.device, os.R_OK | os.W_OK)]  # fmt: skip
    if denied:
        print(f"no permission to open {', '.join(denied)}: {DIALOUT_FIX}")
    return 0
