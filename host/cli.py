"""Host (CPython): the `tinyattn` command line — a thin dispatcher over library modules.

Each subcommand lives in its own module exposing `add_arguments(parser)` and
`main(args) -> int`; this file only wires them up, so `--help` lists them all.

It is also the one place where every command's exits are decided: a CLIError is one line on
stderr and status 2, Ctrl-C is status 130 (with what the command left, when it raises
KeyboardInterrupt("...") to say so), SIGTERM ends the command the same way (its cleanup runs:
boards stopped, worker processes shut down, temp files removed) with status 143, and a stdout
whose reader went away (`tinyattn export | head -1`) ends the command quietly with status 141
(128 + SIGPIPE), as a shell tool killed by SIGPIPE does, instead of a BrokenPipeError
traceback. SIGPIPE itself stays ignored (Python's default): a signal would kill the process
before it could stop a virtual board or remove a temp file.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import signal
import sys
import threading

from tinyattn.errors import CLIError  # also tinyattn.cli.CLIError, the same class

# name -> (module, one-line help). Modules are imported when argparse is built; they must not
# import heavy optional dependencies (torch, matplotlib) at module level.
COMMANDS: dict[str, tuple[str, str]] = {
    "train": (
        "tinyattn.learn.traincli",
        "train a model on Iris, any CSV or .ts windows -> build/model.npz",
    ),
    "export": ("tinyattn.intmodel.export", "quantize to int8 and write the blob build/model.bin"),
    "board": ("tinyattn.board.virtual", "run a virtual board (MicroPython unix port on a pty)"),
    "devs": ("tinyattn.board.ports", "list serial ports and which look like MicroPython boards"),
    "flash": ("tinyattn.board.flash", "copy the device runtime and the blob to a board"),
    "parity": ("tinyattn.board.parity", "host-vs-device parity over serial (rows or windows)"),
    "predict": (
        "tinyattn.board.predict",
        "classify the rows of a CSV or the windows of a .ts, on the host or on a board",
    ),
    "monitor": (
        "tinyattn.board.monitor", "watch the app's live decisions on a board (flash --app)"
    ),
    "record": ("tinyattn.board.record", "record labelled .ts windows from the board's sensor"),
    "demo": ("tinyattn.demo", "train, export, flash and run parity in one go"),
    "bench": ("tinyattn.bench", "benchmarks: training, device speed, heap, blob, link"),
    "report": ("tinyattn.report", "PNG/HTML report: curves, confusion matrices, attention maps"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tinyattn",
        description="Tiny attention classifier: NumPy on the PC, MicroPython on the board.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="typical run:\n"
        "  tinyattn train && tinyattn export      # build/model.npz, build/model.bin\n"
        "  tinyattn flash --port /dev/ttyACM0     # or no --port: a virtual board\n"
        "  tinyattn parity --port /dev/ttyACM0    # host vs device, build/parity.json\n"
        "  tinyattn predict --csv rows.csv        # classify rows (or --port: on the board)\n"
        "windows (.ts files: a sequence model, seq-attn):\n"
        "  tinyattn train --dataset basicmotions --out build/bm.npz  # or --ts TRAIN.ts\n"
        "  tinyattn export --model build/bm.npz --out build/bm.bin\n"
        "  tinyattn predict --ts new.ts --blob build/bm.bin           # classify windows\n"
        "'tinyattn COMMAND --help' for each command; 'tinyattn demo' does it all.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.set_defaults(_subparsers=sub.choices)  # a command's own usage for its bad flags
    for name, (module_name, help_text) in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # subcommand not built yet
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_main=module.main)
    return parser


def _stdout_reader_gone() -> bool:
    """True when stdout is a pipe or socket whose reading end is closed (poll says POLLERR)."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no real file (captured), or closed
        return False


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, so that it unwinds as after Ctrl-C."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def _run(argv: list[str] | None) -> int:
    from tinyattn import remedy

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # unknown flags of a command: its own usage and error, not the top level's
        sub = getattr(args, "_subparsers", {}).get(getattr(args, "command", None))
        (sub or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "_main", None):
        parser.print_help()
        return 2
    remedy.use(sys.argv[1:] if argv is None else argv, args)  # the errors' "run '…'"
    args._run_command = main  # a command that runs others (demo) calls back through here
    # the process's own command line (the console script: argv None) in its main thread; a
    # program that calls main([...]) keeps its own SIGTERM handling
    own = argv is None and threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if own else None
    try:
        return int(args._main(args) or 0)
    except CLIError as exc:
        print(f"tinyattn {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # a command may say what state it left: its args[0]
        what = f"; {exc.args[0]}" if exc.args else ""
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(f"tinyattn {args.command}: {how}{what}", file=sys.stderr)
        return 128 + signal.SIGTERM if isinstance(exc, Terminated) else 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        remedy.use(None, None)


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return _run(argv)
        finally:  # --help's SystemExit too: a closed pipe is seen here, not at exit
            sys.stdout.flush()
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise  # another pipe (a board's, a subprocess's): a real error
        # Nobody reads stdout any more: send what is still buffered to /dev/null, so that the
        # interpreter's final flush does not print "Exception ignored ... BrokenPipeError".
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    # `python -m tinyattn.cli` runs this file as __main__: dispatch through the package module
    # so that CLIError is the same class the subcommands raise.
    from tinyattn.cli import main as package_main

    sys.exit(package_main())
