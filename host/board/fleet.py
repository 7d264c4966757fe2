"""Host (CPython): several boards side by side — the `--port P --port Q` / `--boards N` options.

`flash` and `parity` take a port as every command does (host/board/ports.py: a real board, `auto`,
or none for a virtual board on build/board), or several: `--port` repeated, or `--boards N` for N
virtual boards, board i on its own flash folder `build/board{i}` (so `flash --boards 3` then
`parity --boards 3` find what was flashed). Each board gets its own thread and its own link or
mpremote process; a board's failure is its row, never the others'. The caller prints one row
per board and a summary, and exits non-zero naming every board that failed.

References: DESIGN §10 (Fleet); concurrent.futures.ThreadPoolExecutor (pyserial and
subprocess release the GIL while they wait, so N boards take about the wall time of one).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tinyattn.board.link import DEFAULT_BAUD, LinkError
from tinyattn.board.ports import board_port
from tinyattn.errors import CLIError
from tinyattn.paths import BUILD_DIR

MAX_BOARDS = 16  # virtual boards at once: each is a MicroPython process and a proxy thread


def add_fleet_arguments(parser: argparse.ArgumentParser) -> None:
    """--port (repeatable), --baud and --boards N; `port_list(args)` reads them back."""
    parser.add_argument(
        "--port",
        action="append",
        help="serial port of a real board, e.g. /dev/ttyACM0 (RP2040) or /dev/ttyUSB0 (ESP32), "
        "or 'auto': the only MicroPython board plugged in ('tinyattn devs' lists them); repeat "
        "it for several boards side by side; default: $TINYATTN_PORT, else a virtual board on "
        "build/board",
    )
    parser.add_argument(
        "--baud",
        type=int,
        default=DEFAULT_BAUD,
        help="baud rate of a board behind a USB-UART, e.g. an ESP32 (default %(default)s; "
        "USB-CDC boards such as the RP2040 ignore it)",
    )
    parser.add_argument(
        "--boards",
        type=int,
        metavar="N",
        help="run N virtual boards side by side, board i on build/board{i} (instead of --port)",
    )


def port_list(args: argparse.Namespace) -> list[str | None]:
    """The boards a command runs on: real ports as given, None for each virtual board."""
    if args.boards is not None:
        if args.port:
            raise CLIError("--boards N starts virtual boards: leave --port out, or drop --boards")
        if not 1 <= args.boards <= MAX_BOARDS:
            raise CLIError(f"--boards {args.boards}: give 1 to {MAX_BOARDS} virtual boards")
        return [None] * args.boards
    if args.port:
        return list(args.port)
    return [os.environ.get("TINYATTN_PORT") or None]


def is_fleet(args: argparse.Namespace) -> bool:
    return args.boards is not None or len(args.port or []) > 1


@contextlib.contextmanager
def one_port(port: str | None, fs_dir=None) -> Iterator[str]:
    """ports.board_port with a missing MicroPython unix port as one CLIError line."""
    from tinyattn.tools.vboard import VirtualBoardError

    try:
        with board_port(port, **({"fs_dir": fs_dir} if fs_dir is not None else {})) as p:
            yield p
    except VirtualBoardError as exc:
        raise CLIError(f"virtual board: {exc} (or name a real board with --port)") from None


@dataclass
class BoardResult:
    label: str  # board0, board1 …, in the order given
    port: str
    ok: bool = False
    value: Any = None  # what the job returned
    error: str | None = None  # why the board failed (a CLIError/LinkError line)
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def run_fleet(
    ports: list[str | None],
    job: Callable[[str, str], Any],
    ok: Callable[[Any], bool] = lambda v: True,
) -> tuple[list[BoardResult], float]:
    """Start the boards (virtual ones on build/board{i}), run job(label, port) for each in its
    own thread, stop them. Returns one BoardResult per board, in order, and the wall time of
    the jobs (not counting the virtual boards' start)."""
    results: list[BoardResult] = []
    with contextlib.ExitStack() as stack:
        opened = []
        for i, port in enumerate(ports):
            label = f"board{i}"
            fs_dir = BUILD_DIR / f"board{i}" if port is None else None
            try:
                opened.append((label, stack.enter_context(one_port(port, fs_dir))))
            except CLIError as exc:
                results.append(BoardResult(label, port or "-", error=str(exc)))
                opened.append((label, None))

        def run(label: str, port: str) -> BoardResult:
            res = BoardResult(label, port)
            t0 = time.perf_counter()
            try:
                res.value = job(label, port)
                res.ok = ok(res.value)
            except (CLIError, LinkError) as exc:
                res.error = str(exc)
            res.seconds = time.perf_counter() - t0
            return res

        t0 = time.perf_counter()
        todo = [(label, port) for label, port in opened if port is not None]
        with ThreadPoolExecutor(max_workers=max(1, len(todo))) as pool:
            done = list(pool.map(lambda lp: run(*lp), todo))
        wall = time.perf_counter() - t0
    by_label = {r.label: r for r in results + done}
    return [by_label[label] for label, _ in opened], wall


def failed_line(command: str, results: list[BoardResult]) -> str | None:
    """One line naming every board that failed, or None when all passed."""
    bad = [r for r in results if not r.ok]
    if not bad:
        return None
    parts = [f"{r.label} ({r.port}): {r.error or 'FAIL'}" for r in bad]
    return f"{len(bad)} of {len(results)} boards failed: " + "; ".join(parts)
