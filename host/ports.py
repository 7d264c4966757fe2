"""Host (CPython): resolve the PORT a command talks to — a real board, or a virtual one.

`--port /dev/ttyACM0` (RP2040, USB-CDC) or `/dev/ttyUSB0` (ESP32 behind a USB-UART) names a
real board. Without `--port`, a virtual board (tools/vboard.py: the MicroPython unix port on a
pseudo-terminal) is started on the folder `build/board` — its flash filesystem, which persists
between commands like a board's flash does — and stopped when the command ends.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from .link import DEFAULT_BAUD
from .paths import BUILD_DIR

VIRTUAL_FS = BUILD_DIR / "board"
VIRTUAL_HEAP = "100k"  # a generic ESP32's free heap


def add_port_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port",
        default=os.environ.get("TINYATTN_PORT") or None,
        help="serial port of a real board, e.g. /dev/ttyACM0 (RP2040) or /dev/ttyUSB0 (ESP32); "
        "default: $TINYATTN_PORT, else a virtual board on build/board",
    )
    parser.add_argument(
        "--baud", type=int, default=DEFAULT_BAUD, help="baud rate (default %(default)s)"
    )


@contextlib.contextmanager
def board_port(
    port: str | None, fs_dir: Path = VIRTUAL_FS, heap: str = VIRTUAL_HEAP
) -> Iterator[str]:
    """Yield `port`, or the port of a virtual board started for the duration."""
    if port:
        yield port
        return
    from tools.vboard import VirtualBoard

    fs_dir.mkdir(parents=True, exist_ok=True)
    with VirtualBoard(fs_dir, heap=heap) as vb:
        yield vb.port
