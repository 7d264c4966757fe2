"""Host (CPython): `tinyattn monitor` — watch the decisions of the app running on a board.

The app (`tinyattn flash --app`, device/app_main.py) prints one line per decision:
`TA <ms> <class or uncertain> <score %> <µs>`, after a `TA+ hop=.. smooth=.. classes=..`
line at its start, `TA! ...` when it could not start and `TA. ...` when its source ended.
This command reads those lines from the serial port (it sends nothing unless `--reset`: then
Ctrl-C, Ctrl-D — a soft reset, which runs main.py again) and shows each decision with the
decision rate, the inference time and a running tally per class; `--json` prints one JSON
object per decision instead. Ctrl-C (or `--count` / `--seconds`) ends it with the tally.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

from tinyattn.errors import CLIError


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
                        help="soft-reset the board first (Ctrl-C, Ctrl-D): the app restarts",
                        )  # fmt: skip
    parser.add_argument("--count", type=int, default=None,
                        help="stop after this many decisions")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=None,
                        help="stop after this many seconds")  # fmt: skip


def monitor(port: str, args: argparse.Namespace, out=print) -> Counter:
    """Read and show decisions from PORT until count/seconds/Ctrl-C; returns the tally."""
    from tinyattn.board.link import LinkError, open_port

    try:
        s = open_port(port, args.baud)
    except LinkError as exc:
        raise CLIError(str(exc)) from None
    tally: Counter = Counter()
    start = time.monotonic()
    first_ms = None
    buf = b""
    try:
        if args.reset:
            s.write(b"\r\x03\x03\x04")
        while args.seconds is None or time.monotonic() - start < args.seconds:
            buf += s.read(4096)
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace").strip().removeprefix(">>> ")
                if line.startswith(("TA!", "TA.", "TA+")):
                    if not args.json:
                        out(line[4:] if line[2] != "+" else "app: " + line[4:])
                    if line.startswith("TA!"):
                        raise CLIError(f"the board's app: {line[4:]}")
                    continue
                d = parse_line(line)
                if d is None:
                    continue
                tally[d["label"]] += 1
                n = sum(tally.values())
                first_ms = d["ms"] if first_ms is None else first_ms
                rate = (n - 1) * 1000 / (d["ms"] - first_ms) if d["ms"] > first_ms else 0.0
                if args.json:
                    out(json.dumps(d | {"rate": round(rate, 3), "n": n}))
                else:
                    top = " ".join(f"{k} {v}" for k, v in tally.most_common(4))
                    out(f"{d['ms'] / 1000:8.1f} s  {d['label']:12s} {d['score']:4.0%}  "
                        f"{d['us'] / 1000:7.1f} ms  {rate:5.2f}/s  | {top}")  # fmt: skip
                if args.count is not None and n >= args.count:
                    return tally
    except KeyboardInterrupt:
        pass
    finally:
        s.close()
    return tally


def main(args: argparse.Namespace) -> int:
    import os

    from tinyattn.board.fleet import one_port

    with one_port(args.port or os.environ.get("TINYATTN_PORT") or None) as port:
        tally = monitor(port, args)
    if not args.json:
        total = sum(tally.values())
        print(f"{total} decisions: " + ", ".join(f"{k} {v}" for k, v in tally.most_common()))
    return 0 if tally else 1
