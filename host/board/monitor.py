"""Host (CPython): `tinyattn monitor` — watch the decisions of the app running on a board.

The app (`tinyattn flash --app`, device/app_main.py) prints one line per decision:
`TA <ms> <class or uncertain> <score %> <µs>`, after a `TA+ hop=.. smooth=.. classes=..`
line at its start, `TA! ...` when it could not start and `TA. ...` when its source ended.
This command reads those lines from the serial port (it sends nothing unless `--reset`:
then Ctrl-C, Ctrl-B, Ctrl-D — to the friendly REPL, then a soft reset, which runs main.py
again) and shows each decision with the decision rate, the inference time and a running
tally per class; `--json` prints one JSON object per decision instead. Ctrl-C (or `--count`
/ `--seconds`) ends it with the tally; with `--count`, a board silent for `--timeout` seconds
ends it with one line.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

from tinyattn.errors import CLIError

NO_APP_AFTER = 5.0  # seconds without a line of the app before saying why nothing shows
SILENT_AFTER = 30.0  # seconds without a byte before a monitor --count gives up (--timeout)


def parse_line(line: str) -> dict | None:
    """A decision line -> {ms, label, score, us}; None for any other line."""
    parts = line.split()
    if len(parts) != 5 or parts[0] != "TA":
        return None
    try:
        return {"ms": int(parts[1]), "label": parts[2], "score": int(parts[3]) / 100,
                "us": int(parts[4])}  # fmt: skip
    except ValueError:
        return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port", default=None,
        help="serial port of the board running the app (default: $TINYATTN_PORT, else the "
        "virtual board on build/board)",
    )  # fmt: skip
    parser.add_argument("--baud", type=int, default=115200, help="UART baud (default 115200)")
    parser.add_argument("--json", action="store_true", help="one JSON object per decision")
    parser.add_argument("--reset", action="store_true",
                        help="soft-reset the board first (Ctrl-C, Ctrl-B, Ctrl-D): the app "
                        "restarts",
                        )  # fmt: skip
    parser.add_argument("--count", type=int, default=None,
                        help="stop after this many decisions")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=None,
                        help="stop after this many seconds")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=SILENT_AFTER,
                        help="with --count: give up when the board has sent nothing at all "
                        f"for this many seconds (default {SILENT_AFTER:g})")  # fmt: skip




def monitor(port: str, args: argparse.Namespace, out=print, say=None) -> Counter:
    """Read and show decisions from PORT until count/seconds/Ctrl-C; returns the tally.
    `say`: notes (why no decision shows, a board reset), by default on stderr. A board that
    goes away ends it with one line (CLIError) and the tally so far."""
    import sys

    from tinyattn.board.link import LinkError, open_port

    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    try:
        s = open_port(port, args.baud)
    except LinkError as exc:
        raise CLIError(str(exc)) from None
    tally: Counter = Counter()
    start = time.monotonic()
    first_ms = last_ms = None
    base = 0  # decisions before the first one the rate counts from (a reset starts it again)
    app_seen = noted = rebooted = False
    buf = b""
    try:
        if args.reset:  # Ctrl-B first: a soft reset from the raw REPL would not run main.py
            s.write(b"\r\x03\x03\x02\x04")
        heard = start  # when the last byte came
        while args.seconds is None or time.monotonic() - start < args.seconds:
            try:
                got = s.read(4096)
            except OSError as exc:  # pyserial's SerialException (an OSError): unplugged
                n = sum(tally.values())
                raise CLIError(
                    f"{port}: the board went away ({exc}); {n} decision{'s' * (n != 1)} seen"
                    + (": " + ", ".join(f"{k} {v}" for k, v in tally.most_common()) if n else "")
                    + "; plug it back in and run 'tinyattn monitor' again"
                ) from None
            buf += got
            if got:
                heard = time.monotonic()
            elif args.count is not None and time.monotonic() - heard > args.timeout:
                n = sum(tally.values())
                raise CLIError(
                    f"{port}: nothing received for {args.timeout:g}s ({n} of {args.count} "
                    "decisions seen); is a board with the app on this port? Check the port "
                    "('tinyattn devs'), then 'tinyattn monitor --reset' (or --timeout longer)"
                )
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                if b"soft reboot" in raw:
                    rebooted = True
            idle = b">>>" in buf or any(b">>>" in raw for raw in lines)
            # after --reset the board is booting and loading its app (seconds on a slow
            # board): only its REPL prompt after the reboot says that no app started
            if (not app_seen and not noted and time.monotonic() - start > NO_APP_AFTER
                    and (not args.reset or (rebooted and idle))):  # fmt: skip
                noted = True
                state = "is at its REPL prompt, no app runs" if idle else "prints no app lines"
                if args.reset:  # the app would have started: none is installed
                    fix = ("no app started after the soft reset: install one with 'tinyattn "
                           "flash --app --source …'")  # fmt: skip
                else:
                    fix = ("no app installed, or stopped by predict/parity/record; start it "
                           "with 'tinyattn monitor --reset', or install one with 'tinyattn "
                           "flash --app --source …'")  # fmt: skip
                say(f"no decisions yet: the board on {port} {state} ({fix})")
            for raw in lines:
                line = raw.decode("utf-8", "replace").strip().removeprefix(">>> ")
                if line.startswith(("TA!", "TA.", "TA+")):
                    app_seen = True
                    if not args.json:
                        out(line[4:] if line[2] != "+" else "app: " + line[4:])
                    if line.startswith("TA!"):
                        raise CLIError(f"the board's app: {line[4:]}")
                    continue
                d = parse_line(line)
                if d is None:
                    continue
                app_seen = True
                tally[d["label"]] += 1
                n = sum(tally.values())
                if last_ms is not None and d["ms"] < last_ms:  # the app's clock started again
                    say("board reset: the app started again (the rate counts from here)")
                    first_ms = None
                last_ms = d["ms"]
                if first_ms is None:
                    first_ms, base = d["ms"], n
                k = n - base  # decisions since first_ms
                rate = k * 1000 / (d["ms"] - first_ms) if d["ms"] > first_ms else None
                if args.json:
                    out(json.dumps(d | {"rate": None if rate is None else round(rate, 3),
                                        "n": n}))  # fmt: skip
                else:
                    top = " ".join(f"{k} {v}" for k, v in tally.most_common(4))
                    shown = f"{rate:5.2f}/s" if rate is not None else "    -/s"
                    out(f"{d['ms'] / 1000:8.1f} s  {d['label']:12s} {d['score']:4.0%}  "
                        f"{d['us'] / 1000:7.1f} ms  {shown}  | {top}")  # fmt: skip
                if args.count is not None and n >= args.count:
                    return tally
    except KeyboardInterrupt:
        pass
    finally:
        try:
            s.close()
        except OSError:  # a port that went away may not close cleanly
            pass
    return tally


def main(args: argparse.Namespace) -> int:
    import os

    from tinyattn.board.fleet import one_port

    with one_port(args.port or os.environ.get("TINYATTN_PORT") or None) as port:
        tally = monitor(port, args)
    if not args.json:
        total = sum(tally.values())
        what = ", ".join(f"{k} {v}" for k, v in tally.most_common())
        print(f"{total} decision{'s' * (total != 1)}" + (f": {what}" if what else ""))
    return 0 if tally else 1
