# Host (CPython): `tinyattn board` — run a virtual board in the foreground and print its PORT.
"""`tinyattn board [--fs DIR] [--heap 100k] [--baud N] [--reset-on-open] [--print-port-only]`.

Starts tools/vboard.py's VirtualBoard (the MicroPython unix port on a pseudo-terminal, a
folder as its flash: `--fs`, created with its parents if missing) and keeps it running
until Ctrl-C or SIGTERM, then stops it and its interpreter processes. `--baud N` paces its
link like a UART at N baud (8N1: 10 bits a byte, at most N/10 bytes a second each way), so
link figures are what a board behind a USB-UART at that rate gives; by default the link is
unpaced, like USB-CDC. The first stdout line is `PORT=/dev/pts/N` (just the path with
--print-port-only), flushed at once so scripts can read it from a pipe.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from tinyattn.errors import CLIError
from tinyattn.paths import BUILD_DIR, clone_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fs", type=Path, default=BUILD_DIR / "board",
        help="folder that stands in for the board's flash filesystem, created (with its "
        "parents) if missing, as a board's flash is there before anything is copied to it; "
        "a file there is an error (default: build/board)",
    )  # fmt: skip
    parser.add_argument(
        "--heap", default="100k",
        help="heap available to Python at the prompt, e.g. 100k (ESP32) or 200k (default: 100k)",
    )  # fmt: skip
    parser.add_argument(
        "--baud", type=int, default=None, metavar="N",
        help="pace the link like a UART at N baud, 8N1 (N/10 bytes/s each way), e.g. 115200 "
        "(default: unpaced, like USB-CDC)",
    )  # fmt: skip
    parser.add_argument(
        "--reset-on-open", action="store_true",
        help="behave like an ESP32 behind a USB-UART: every port open resets the board",
    )  # fmt: skip
    parser.add_argument(
        "--print-port-only", action="store_true",
        help="print only the port path (one line) instead of the usage notes",
    )  # fmt: skip


def check_fs(fs: Path) -> None:
    """Make `fs` a folder the board can use: created if missing, CLIError (one line) if it is a
    file, lies under a file, or cannot be created."""
    if fs.exists() and not fs.is_dir():
        raise CLIError(f"--fs {fs}: is a file, not a folder; give a folder (created if missing)")
    try:
        fs.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a parent of it is a file
        raise CLIError(f"--fs {fs}: a parent is a file, not a folder; give a folder") from None
    except OSError as exc:
        raise CLIError(f"--fs {fs}: cannot create the folder ({exc.strerror})") from None


def main(args: argparse.Namespace) -> int:
    from tinyattn.tools.vboard import VirtualBoard, VirtualBoardError, check_baud, parse_heap

    try:
        parse_heap(args.heap)
    except ValueError as exc:
        raise CLIError(f"--heap: {exc}") from None
    try:
        check_baud(args.baud)
    except ValueError as exc:
        raise CLIError(f"--baud: {exc}") from None
    check_fs(args.fs)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
    board = VirtualBoard(args.fs, heap=args.heap, reset_on_open=args.reset_on_open, baud=args.baud)
    try:
        port = board.start()
    except VirtualBoardError as exc:
        raise CLIError(str(exc)) from None
    try:
        if args.print_port_only:
            print(port, flush=True)
        else:
            print(f"PORT={port}", flush=True)
            link = f"UART {args.baud} baud 8N1" if args.baud else "unpaced, like USB-CDC"
            if clone_dir() is not None:  # the Makefile's targets (they install first)
                use = [f"make flash PORT={port}", f"make parity PORT={port}",
                       f".venv/bin/mpremote connect {port} repl   (Ctrl-] leaves)"]  # fmt: skip
            else:
                use = [f"tinyattn flash --port {port}", f"tinyattn parity --port {port}",
                       f"mpremote connect {port} repl   (Ctrl-] leaves)"]  # fmt: skip
            print(
                f"virtual board: MicroPython unix port, heap {args.heap}, flash folder {args.fs}, "
                f"link {link}\n"
                f"use it from another terminal:\n"
                + "".join(f"  {line}\n" for line in use)
                + "Ctrl-C here stops the board.",
                flush=True,
            )
        while not stop.wait(0.5):
            if not board.alive:
                print("tinyattn board: the virtual board stopped unexpectedly", file=sys.stderr)
                return 1
    finally:
        board.stop()
    if not args.print_port_only:
        print("virtual board stopped", flush=True)
    return 0
