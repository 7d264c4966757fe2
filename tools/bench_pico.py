# Host (CPython): `make bench`'s Pico table — the int8 kernel sets on an emulated Pico's clock.
"""µs per inference of the trained golden models (tests/golden/trained: Iris, Wine,
BasicMotions, JapaneseVowels) by int8 kernel set (thumb, viper, pure) on the rp2 firmware of
the emulated Raspberry Pi Pico (../shared/boards/pico: Cortex-M0+ at 125 MHz, `ticks_us` on
the Pico's own cycles), with µs per MAC, and a bare `asm_thumb` int8 MAC loop measured in the
same run (ldr + ldrb + sxtb + muls + adds per MAC, four per step: the yardstick).

The runtime goes on the board with `tinyattn flash` (.mpy for armv6m), as a user's Pico gets
it. Each figure: the fastest of REPEAT run_int8 calls on the first golden input, after one
warm-up. Also the free heap at the REPL and with the runtime and the server imported.

Then the stream on the Pico: `tinyattn flash --app` with a replay source (BasicMotions' first
STREAM_RECORDINGS TEST recordings, hop 10, smoothing 3), `tinyattn monitor --reset` over its
decisions: µs of inference per decision (the app's own field) and whether every decision's
(class, score %) equals the host's Stream; a plain flash removes the app again.

Writes RESULT (committed): host/board/rp2040.json, which the `rp2040` search preset reads
(tinyattn.learn.search: µs per MAC and heap from this measured table).

    python -m tools.bench_pico [--port TTY] [--json]   # no --port: starts the emulated Pico
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from tinyattn.board.flash import flash, mpremote
from tinyattn.intmodel.blob import read_blob
from tinyattn.intmodel.export import blob_macs
from tools.emulated_boards import EmulatedBoard, skip_reason, write_xq
from tools.make_trained_golden import GOLDEN, NAMES

RESULT = Path(__file__).resolve().parent.parent / "host" / "board" / "rp2040.json"
KERNELS = ("thumb", "viper", "pure")
REPEAT = 3
BARE_MACS = 4096
STREAM_RECORDINGS = 3  # 300 steps: 21 decisions at hop 10

DEVICE = """
import gc, time, array, micropython
from attention import Model

@micropython.asm_thumb
def bare(r0, r1, r2):
    mov(r3, 0)
    label(LOOP)
    ldr(r4, [r0, 0])
    ldrb(r5, [r1, 0])
    data(2, 0xB26D)
    mul(r4, r5)
    add(r3, r3, r4)
    ldr(r4, [r0, 4])
    ldrb(r5, [r1, 1])
    data(2, 0xB26D)
    mul(r4, r5)
    add(r3, r3, r4)
    ldr(r4, [r0, 8])
    ldrb(r5, [r1, 2])
    data(2, 0xB26D)
    mul(r4, r5)
    add(r3, r3, r4)
    ldr(r4, [r0, 12])
    ldrb(r5, [r1, 3])
    data(2, 0xB26D)
    mul(r4, r5)
    add(r3, r3, r4)
    add(r0, 16)
    add(r1, 4)
    sub(r2, 4)
    bne(LOOP)
    mov(r0, 0)


def timed_bare(x, w, n):
    best = -1
    for _ in range(@REPEAT@ + 1):
        t = time.ticks_us()
        bare(x, w, n)
        dt = time.ticks_diff(time.ticks_us(), t)
        if best < 0 or dt < best:
            best = dt
    return best


def timed_run(m, xq, out, n):
    best = -1
    for _ in range(@REPEAT@ + 1):
        t = time.ticks_us()
        m.run_int8(xq, out, n)
        dt = time.ticks_diff(time.ticks_us(), t)
        if best < 0 or dt < best:
            best = dt
    return best


def bench(names, kernel_sets):
    x = array.array("i", range(@NBARE@))
    w = array.array("b", [(i * 7) % 255 - 127 for i in range(@NBARE@)])
    long = timed_bare(x, w, @NBARE@)
    short = timed_bare(x, w, 4)
    print("BARE", long - short, @NBARE@ - 4)
    for name in names:
        for kernels in kernel_sets:
            gc.collect()
            free0 = gc.mem_free()
            m = Model(name + ".bin", kernels=kernels)
            gc.collect()
            out = m.new_logits()
            xq = m.quantize([0.0] * m.n_features)
            f = open(name + ".xq", "rb")
            st = bytearray(2)
            f.readinto(st)
            f.readinto(xq)
            f.close()
            n = st[0] | (st[1] << 8)
            us = timed_run(m, xq, out, n if n else None)
            print("RUN", name, m.kernels, us, free0 - gc.mem_free())
            m = None
"""


def run(port: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in NAMES:
            with np.load(GOLDEN / f"{name}_int8.npz") as z:
                steps = z["steps"] if "steps" in z.files else np.zeros(len(z["xq"]), np.int64)
                write_xq(folder / f"{name}.xq", steps[:1], z["xq"][:1])
            (folder / f"{name}.bin").write_bytes((GOLDEN / f"{name}.bin").read_bytes())
        text = DEVICE.replace("@REPEAT@", str(REPEAT)).replace("@NBARE@", str(BARE_MACS))
        (folder / "bench_pico_dev.py").write_text(text)
        flash(port, GOLDEN / "iris.bin", use_mpy=True, progress=False)
        chain = []
        for path in sorted(folder.iterdir()):
            chain += ["cp", str(path), ":", "+"]
        mpremote(port, *chain[:-1], timeout=300)
    free = mpremote(port, "exec", "import gc; gc.collect(); print(gc.mem_free())", timeout=60)
    free_server = mpremote(port, "exec", "import gc, server, attention, attention_thumb; "
                           "gc.collect(); print(gc.mem_free())", timeout=60)  # fmt: skip
    out = mpremote(port, "exec", "import bench_pico_dev as b; "
                   f"b.bench({list(NAMES)!r}, {list(KERNELS)!r})", timeout=1800)  # fmt: skip
    result: dict = {
        "board": "emulated Raspberry Pi Pico (rp2 firmware, RP2040 Cortex-M0+ "
        "125 MHz, rp2040js; µs on the board's own clock)",  # fmt: skip
        "free_heap": int(free.split()[-1]),
        "free_heap_runtime": int(free_server.split()[-1]),
        "models": {},
    }
    for line in out.splitlines():
        parts = line.split()
        if parts[:1] == ["BARE"]:
            result["bare_asm_us_per_mac"] = int(parts[1]) / int(parts[2])
        elif parts[:1] == ["RUN"]:
            name, kernels, us, heap = parts[1], parts[2], int(parts[3]), int(parts[4])
            macs = blob_macs(read_blob((GOLDEN / f"{name}.bin").read_bytes()))
            result["models"].setdefault(name, {"macs": macs})[kernels] = {
                "us": us, "us_per_mac": us / macs, "heap": heap}  # fmt: skip
    for row in result["models"].values():
        row["thumb"]["vs_bare"] = row["thumb"]["us_per_mac"] / result["bare_asm_us_per_mac"]
    # the search preset's figure: thumb's µs per MAC, the most of the models with >= 50k MACs
    # (a smaller model pays more per MAC: the Python around the kernels)
    big = max((r for r in result["models"].values() if r["macs"] >= 50_000),
              key=lambda r: r["thumb"]["us_per_mac"])  # fmt: skip
    result["preset"] = {"kernels": "thumb", "us_per_mac": round(big["thumb"]["us_per_mac"], 4),
                        "from_macs": big["macs"]}  # fmt: skip
    return result


def stream(port: str) -> dict:
    """The app on the Pico over a replay, next to the host's Stream (module docstring)."""
    import contextlib
    import io

    from tinyattn import cli
    from tinyattn.board.stream import host_decisions, write_replay
    from tinyattn.data.timeseries import load_ts_dataset

    blob = GOLDEN / "basicmotions.bin"
    d = load_ts_dataset("basicmotions", "TEST")
    steps = d.X[:STREAM_RECORDINGS].astype(np.float32).reshape(-1, d.n_channels)
    host = host_decisions(blob, steps, 10, smooth=3)
    with tempfile.TemporaryDirectory() as tmp:
        replay = write_replay(Path(tmp) / "bm.tasr", steps)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            ok = cli.main(["flash", "--port", port, "--blob", str(blob), "--quiet", "--app",
                           "--source", f"replay:{replay}", "--rate", "1000", "--hop", "10",
                           "--smooth", "3"]) == 0  # fmt: skip
            ok = ok and cli.main(["monitor", "--port", port, "--reset", "--count",
                                  str(len(host)), "--json"]) == 0  # fmt: skip
            cli.main(["flash", "--port", port, "--blob", str(blob), "--quiet"])  # the app goes
    rows = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    names = list(d.class_names)
    equal = ok and [(r["label"], round(r["score"] * 100)) for r in rows] == [
        (names[h["smoothed"]], h["score"] * 100 // 16384) for h in host]  # fmt: skip
    us = [r["us"] for r in rows]
    return {"decisions": len(rows), "host_equal": equal,
            "us_per_decision": sum(us) / len(us) if us else None}  # fmt: skip


def table(r: dict) -> list[str]:
    lines = [f"Pico ({r['board']}); free heap {r['free_heap']:,} B at the REPL, "
             f"{r['free_heap_runtime']:,} B with the runtime and server imported; bare "
             f"asm_thumb int8 MAC loop {r['bare_asm_us_per_mac']:.4f} µs/MAC", "",
             "| model | MACs | thumb µs | thumb µs/MAC | ÷ bare loop | viper µs | viper µs/MAC "
             "| pure µs |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, row in r["models"].items():
        t, v, p = row["thumb"], row["viper"], row["pure"]
        lines.append(f"| {name} | {row['macs']:,} | {t['us']:,} | {t['us_per_mac']:.3f} | "
                     f"{t['vs_bare']:.2f} | {v['us']:,} | {v['us_per_mac']:.3f} | "
                     f"{p['us']:,} |")  # fmt: skip
    st = r.get("stream")
    if st:
        lines += ["", f"Stream on the Pico (flash --app, replay of BasicMotions TEST, hop 10, "
                  f"k = 3): {st['decisions']} decisions, {st['us_per_decision']:,.0f} µs of "
                  f"inference per decision (thumb), every decision equal to the host's: "
                  f"{'yes' if st['host_equal'] else 'NO'}"]  # fmt: skip
    return lines


def bench_pico(port: str | None = None) -> dict:
    """Every figure (module docstring), also written to RESULT; {"skipped": why} when no port
    is given and the emulated Pico cannot start here."""
    board = None
    if port is None:
        why = skip_reason("pico")
        if why:
            return {"skipped": why}
        board = EmulatedBoard("pico").start()
    try:
        result = run(port or board.tty)
        result["stream"] = stream(port or board.tty)
    finally:
        if board is not None:
            board.stop()
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    return result


def format_table(r: dict) -> str:
    return f"skipped: {r['skipped']}" if "skipped" in r else "\n".join(table(r))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", help="a Pico's serial port (default: start the emulated Pico)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    result = bench_pico(args.port)
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
