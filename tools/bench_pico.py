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

Then the time model (tools/bench_pico_cost.py: one model of each shape the search makes, timed
here, and the µs rates fitted to them), and each of those models' µs by kernel (embed, conv,
dense, attn, the rest: a step's µs the difference of its program's prefixes, each one call
as run_int8's) with their µs per MAC, and a conv stem's own (its embed and convs). Writes
RESULT (committed): host/board/rp2040.json, which the `rp2040` search preset reads
(tinyattn.learn.search: the time model and the heap).

    python -m tinyattn.tools.bench_pico [--port TTY] [--json]  # no --port: the emulated Pico
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
from tinyattn.paths import PACKAGE_DIR
from tinyattn.tools.emulated_boards import (
    GOLDEN,
    NAMES,
    EmulatedBoard,
    golden_missing,
    skip_reason,
    write_xq,
)  # fmt: skip

RESULT = PACKAGE_DIR / "board" / "rp2040.json"  # host/board/ in a clone
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
    return result


def stream(port: str) -> dict:
    """The app on the Pico over a replay, next to the host's Stream (module docstring): the
    golden BasicMotions model (patch attention) and a conv stem alone (the search's pick for
    accelerometer windows: tools/bench_pico_cost.SHAPES "bm-alone-w8")."""
    from tinyattn.tools.bench_pico_cost import models

    with tempfile.TemporaryDirectory() as tmp:
        conv = models(Path(tmp), ("bm-alone-w8",))["bm-alone-w8"]
        return {"patch": stream_one(port, GOLDEN / "basicmotions.bin"),
                "conv": stream_one(port, conv)}


def stream_one(port: str, blob: Path) -> dict:
    """`flash --app` of `blob` over a replay of BasicMotions' first TEST recordings, `monitor
    --reset` over its decisions: their µs, their rate on the Pico's clock, equal to the host's."""
    import contextlib
    import io

    from tinyattn import cli
    from tinyattn.board.stream import host_decisions, write_replay
    from tinyattn.data.timeseries import load_ts_dataset

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
                                  str(len(host)), "--json", "--timeout", "120"]) == 0  # fmt: skip
            cli.main(["flash", "--port", port, "--blob", str(blob), "--quiet"])  # the app goes
    rows = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    names = list(d.class_names)
    equal = ok and [(r["label"], round(r["score"] * 100)) for r in rows] == [
        (names[h["smoothed"]], h["score"] * 100 // 16384) for h in host]  # fmt: skip
    us = [r["us"] for r in rows]
    span = (rows[-1]["ms"] - rows[0]["ms"]) / 1000 if len(rows) > 1 else 0.0
    return {"decisions": len(rows), "host_equal": equal,
            "us_per_decision": sum(us) / len(us) if us else None,
            "decisions_per_s": (len(rows) - 1) / span if span else None}  # fmt: skip


def time_model(port: str) -> dict:
    """The Pico's time model: the models of tools/bench_pico_cost timed here and the rates
    fitted to them (tinyattn.board.cost), as host/board/rp2040.json's "cost"."""
    from tinyattn.board import cost
    from tinyattn.tools.bench_pico_cost import measure_steps, models

    with tempfile.TemporaryDirectory() as tmp:
        blobs = models(Path(tmp))
        terms = {n: cost.terms(read_blob(b.read_bytes())) for n, b in blobs.items()}
        us, steps = measure_steps(port, blobs)
    rates = cost.fit(terms, us)
    return {"rates": rates, "measured": {n: {"us": us[n], "terms": terms[n]} for n in us},
            "steps": steps}  # fmt: skip


STEP_KERNELS = ("embed", "conv", "dense", "attn")


def steps_table(steps: dict[str, list[dict]]) -> list[str]:
    """Each model's µs by kernel (and µs per MAC), from its program's steps; the conv stem's
    own rate (its embed and convs)."""
    from tinyattn.tools.bench_pico_cost import by_kernel

    head = f"{'model':<20}" + "".join(f"{k + ' µs (µs/MAC)':>22}" for k in STEP_KERNELS)
    lines = [head + f"{'other µs':>10}{'stem µs/MAC':>13}"]
    for name, st in steps.items():
        k = by_kernel(st)
        cells = "".join(f"{k[n][0]:>12,} ({k[n][0] / k[n][1]:.3f})" if k.get(n, (0, 0))[1]
                        else f"{'-':>22}" for n in STEP_KERNELS)  # fmt: skip
        other = sum(us for n, (us, _) in k.items() if n not in STEP_KERNELS)
        stem = [k[n] for n in ("embed", "conv") if n in k]
        rate = (f"{sum(u for u, _ in stem) / sum(m for _, m in stem):.3f}"
                if "conv" in k else "-")  # fmt: skip
        lines.append(f"{name:<20}{cells}{other:>10,}{rate:>13}")
    return lines


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
    for kind, st in (r.get("stream") or {}).items():
        rate = f", {st['decisions_per_s']:.1f} decisions/s" if st.get("decisions_per_s") else ""
        lines += ["", f"Stream on the Pico, {kind} model (flash --app, replay of BasicMotions "
                  f"TEST at 1000 steps/s, hop 10, k = 3): {st['decisions']} decisions, "
                  f"{st['us_per_decision']:,.0f} µs of inference per decision (thumb){rate}, "
                  f"every decision equal to the host's: "
                  f"{'yes' if st['host_equal'] else 'NO'}"]  # fmt: skip
    cm = r.get("cost")
    if cm:
        from tinyattn.board.cost import table as cost_table

        lines += ["", "Pico time model (tinyattn.board.cost; µs rates "
                  + ", ".join(f"{k} {v:g}" for k, v in cm["rates"].items() if v) + "), "
                  "each model on a full window (the budget's case; the kernel table above "
                  "times a golden model's first input, which can be shorter: JapaneseVowels' "
                  "has 20 of 26 steps):", ""]  # fmt: skip
        lines += cost_table({n: m["terms"] for n, m in cm["measured"].items()},
                            {n: m["us"] for n, m in cm["measured"].items()},
                            cm["rates"]).splitlines()  # fmt: skip
        if cm.get("steps"):
            lines += ["", "Pico µs by kernel (thumb; a step's µs: the difference of its "
                      "program's prefixes on the board's clock; stem: the embed and the "
                      "convs of a conv stem):", ""]  # fmt: skip
            lines += steps_table(cm["steps"])
    return lines


def bench_pico(port: str | None = None) -> dict:
    """Every figure (module docstring), also written to RESULT; {"skipped": why} when no port
    is given and the emulated Pico cannot start here."""
    board = None
    if golden_missing():
        return {"skipped": golden_missing()}
    if port is None:
        why = skip_reason("pico")
        if why:
            return {"skipped": why}
        board = EmulatedBoard("pico").start()
    try:
        result = run(port or board.tty)
        result["stream"] = stream(port or board.tty)
        result["cost"] = time_model(port or board.tty)
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
