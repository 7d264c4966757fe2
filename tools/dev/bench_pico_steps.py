# Host (CPython): where a model's µs go on the Pico — its thumb program timed step by step.
"""Times a model's int8 inference on the emulated Raspberry Pi Pico (../shared/boards/pico; µs on
the board's own clock) piece by piece: its thumb program (attention_thumb.whole: one assembler
call, a header and 7 words a step) run with its step count cut to k = 0, 1, ..., n, each the
fastest of REPEAT calls, so step k's µs is the difference of two runs without the call's cost
in it; k = 0 is the call, the window's load and the logits' copy. Then `run_int8` as a user
calls it (the fixed cost over the program is run_int8's own: its checks, the call into native
and assembler code) and the timer's own cost (`ticks_us` twice).

The models: the trained golden ones (tests/golden/trained) and the shapes of
tools/bench_pico_cost.SHAPES (trained for one epoch: a model's time does not depend on its
weights), by name; a model whose program is not one assembler call (a rocket or MyAttn model)
is reported as such.

    python -m tinyattn.tools.dev.bench_pico_steps [--port TTY] [iris acsf1-alone-w16 ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPEAT = 4
CODES = ("dense", "attn", "add", "pool", "embed", "relu", "conv")  # attention_thumb's _DENSE..

DEVICE = """
import gc, time
from attention import Model


def t_program(call, words, xq, out, lp):
    b = -1
    for _ in range(@REPEAT@ + 1):
        t = time.ticks_us()
        call(words, xq, out, lp)
        dt = time.ticks_diff(time.ticks_us(), t)
        if b < 0 or dt < b:
            b = dt
    return b


def t_run_int8(m, xq, out):
    b = -1
    for _ in range(@REPEAT@ + 1):
        t = time.ticks_us()
        m.run_int8(xq, out)
        dt = time.ticks_diff(time.ticks_us(), t)
        if b < 0 or dt < b:
            b = dt
    return b


def t_timer():
    b = -1
    for _ in range(@REPEAT@ + 1):
        t = time.ticks_us()
        dt = time.ticks_diff(time.ticks_us(), t)
        if b < 0 or dt < b:
            b = dt
    return b


def steps(names):
    for name in names:
        gc.collect()
        m = Model(name + ".bin")
        out = m.new_logits()
        xq = m.quantize([0.0] * m.n_features)
        for i in range(len(xq)):
            xq[i] = (i * 37) % 255 - 127
        m.run_int8(xq, out)  # the counts of a full window
        run = m._run1
        if m.kernels != "thumb" or run is None:
            print("NOPROG", name, m.kernels)
            continue
        call, words = run
        n = words[5]
        for k in range(n + 1):
            words[5] = k
            print("K", name, k, words[6 + 7 * k - 7] if k else -1,
                  t_program(call, words, xq, out, m._loadp))
        words[5] = n
        print("R", name, t_run_int8(m, xq, out), t_timer())
        m = None
"""


def measure(port: str, blobs: dict[str, Path]) -> dict[str, dict]:
    """name -> {"steps": [(kernel, µs)], "program": µs, "run_int8": µs, "timer": µs}."""
    from tinyattn.tools.bench_pico_cost import run_on_board

    source = DEVICE.replace("@REPEAT@", str(REPEAT))
    out = run_on_board(port, blobs, "bench_steps_dev", source, "steps")
    res: dict[str, dict] = {}
    for line in out.splitlines():
        parts = line.split()
        if parts[:1] == ["K"]:
            r = res.setdefault(parts[1], {"cumulative": []})
            r["cumulative"].append((int(parts[3]), int(parts[4])))
        elif parts[:1] == ["R"]:
            res[parts[1]].update(run_int8=int(parts[2]), timer=int(parts[3]))
        elif parts[:1] == ["NOPROG"]:
            res[parts[1]] = {"kernels": parts[2]}
    for r in res.values():
        cum = r.pop("cumulative", [])
        if cum:
            r["call"] = cum[0][1] - r["timer"]
            r["steps"] = [(CODES[code], us - cum[k][1])
                          for k, (code, us) in enumerate(cum[1:])]  # fmt: skip
            r["program"] = cum[-1][1] - r["timer"]
    return res


def table(res: dict[str, dict]) -> str:
    lines = []
    for name, r in res.items():
        if "steps" not in r:
            lines.append(f"{name}: kernels {r['kernels']}, not one assembler program")
            continue
        run = r["run_int8"] - r["timer"]
        lines.append(
            f"{name}: run_int8 {run} µs = run_int8's own {run - r['program']} + "
            f"the call, load and logits {r['call']} + "
            f"the steps {r['program'] - r['call']} (timer {r['timer']} µs not counted)"
        )
        for i, (kernel, us) in enumerate(r["steps"]):
            lines.append(f"  step {i:2d} {kernel:6s} {us:8d} µs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", help="a running Pico's tty (default: start the emulated one)")
    p.add_argument(
        "names",
        nargs="*",
        default=["iris"],
        help="golden models and tools/bench_pico_cost.SHAPES (default: iris)",
    )
    args = p.parse_args(argv)
    from tinyattn.tools.bench_pico_cost import models
    from tinyattn.tools.emulated_boards import EmulatedBoard, skip_reason

    with tempfile.TemporaryDirectory() as tmp:
        blobs = models(Path(tmp), tuple(args.names))
        missing = sorted(set(args.names) - set(blobs))
        if missing:
            print(f"unknown models: {', '.join(missing)}", file=sys.stderr)
            return 2
        if args.port:
            res = measure(args.port, blobs)
        else:
            why = skip_reason("pico")
            if why:
                print(f"no emulated Pico: {why}", file=sys.stderr)
                return 2
            board = EmulatedBoard("pico").start()
            try:
                res = measure(board.tty, blobs)
            finally:
                board.stop()
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
