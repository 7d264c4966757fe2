# Host (CPython): the Pico's cost model — µs of an int8 inference from the blob's op list.
"""Times the int8 inference (`kernels="auto"`: thumb on the Pico) of a set of models on the
emulated Raspberry Pi Pico (../shared/boards/pico; µs on the board's own clock), and fits
host/board/cost.py's rates to them: one µs rate per term of `cost.terms` (the fixed cost of an
inference, a step, the MACs each kernel does, the window's values), least squares on the
models' µs, so the budget predicts a model's µs from its op list (`--board rp2040 --max-ms`).

The models: the trained golden ones (Iris, Wine, BasicMotions, JapaneseVowels) and one of each
shape the search's grid makes (patch attention of one and two blocks, conv stems of strides 4
and 8 at widths 8 and 16, the conv stem alone at widths 8 and 16, long windows), trained for
one epoch here: a model's time does not depend on its weights' values; and seq-rocket models
at several operation budgets (its time: its operations and the positions its loops visit,
`rocketmodel.ops`), on each path of the thumb rocket kernel (groups of one channel and of
several, of one or two features and of more, every position and a cap of them).
`measure_steps` also times each step of a model the thumb kernels run as
one program (the difference of the program's prefixes: bench_pico's "µs by kernel").

    python -m tinyattn.tools.bench_pico_cost [--port TTY] [--write host/board/rp2040.json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

from tinyattn.tools.emulated_boards import GOLDEN, NAMES

REPEAT = 3
ARCH = ["--embed", "8", "--heads", "2"]
SHAPES = {  # name: train flags (the search's grid shapes)
    "bm-p5-l1": ["--dataset", "basicmotions", "--patch", "5", *ARCH, "--blocks", "1"],
    "bm-p4-e16-l2": ["--dataset", "basicmotions", "--patch", "4", "--embed", "16", "--heads",
                     "4", "--blocks", "2"],
    "bm-conv-s4-w8": ["--dataset", "basicmotions", "--stem", "conv", "--patch", "1",
                      "--stem-stride", "4", "--stem-width", "8", *ARCH, "--blocks", "1"],
    "bm-conv-s8-w16": ["--dataset", "basicmotions", "--stem", "conv", "--patch", "1",
                       "--stem-stride", "8", "--stem-width", "16", "--stem-dilations", "2,4",
                       "--embed", "16", "--heads", "4", "--blocks", "1"],
    "bm-alone-w8": ["--dataset", "basicmotions", "--stem", "conv", "--blocks", "0",
                    "--stem-stride", "1", "--patch", "2", *ARCH, "--stem-dilations", "2,4"],
    "acsf1-alone-w16": ["--dataset", "acsf1", "--stem", "conv", "--blocks", "0",
                        "--stem-stride", "1", "--patch", "12", "--stem-width", "16",
                        "--embed", "16", "--heads", "4", "--stem-dilations", "2,4"],
    "acsf1-p46-l1": ["--dataset", "acsf1", "--patch", "46", "--embed", "16", "--heads", "4",
                     "--blocks", "1"],
    "coffee-p8-l2": ["--dataset", "coffee", "--patch", "8", *ARCH, "--blocks", "2"],
    "trace-conv-s4-w16": ["--dataset", "trace", "--stem", "conv", "--patch", "2",
                          "--stem-stride", "4", "--stem-width", "16", "--stem-dilations",
                          "2,4", "--embed", "16", "--heads", "4", "--blocks", "1"],
    # seq-rocket at a few budgets (its time: its operations and the positions its loops visit)
    "bm-rocket": ["--dataset", "basicmotions", "--model", "seq-rocket"],
    "bm-rocket-30k": ["--dataset", "basicmotions", "--model", "seq-rocket",
                      "--rocket-max-ops", "30000"],
    "jv-rocket-20k": ["--dataset", "japanesevowels", "--model", "seq-rocket",
                      "--rocket-max-ops", "20000"],
    "acsf1-rocket-60k": ["--dataset", "acsf1", "--model", "seq-rocket", "--rocket-max-ops",
                         "60000"],
    "acsf1-rocket": ["--dataset", "acsf1", "--model", "seq-rocket"],
    "coffee-rocket-40k": ["--dataset", "coffee", "--model", "seq-rocket", "--rocket-max-ops",
                          "40000"],
    "trace-rocket": ["--dataset", "trace", "--model", "seq-rocket"],
    # the rp2040 preset's rocket picks' shapes: long windows, 128 positions, ~700 features
    "plaid-rocket-n128": ["--dataset", "plaid", "--model", "seq-rocket", "--rocket-positions",
                          "128", "--rocket-keep", "780", "--rocket-max-ops", "10000000"],
    "acsf1-rocket-n128": ["--dataset", "acsf1", "--model", "seq-rocket", "--rocket-positions",
                          "128", "--rocket-keep", "660", "--rocket-max-ops", "10000000"],
    # the thumb rocket kernel's paths: many channels and features a group (pooled, every
    # position), univariate groups of many features, every position, the default budget's
    "jv-rocket": ["--dataset", "japanesevowels", "--model", "seq-rocket"],
    "bm-rocket-p3-n0": ["--dataset", "basicmotions", "--model", "seq-rocket", "--rocket-pool",
                        "3", "--rocket-positions", "0"],
    "trace-rocket-k1500": ["--dataset", "trace", "--model", "seq-rocket", "--rocket-keep",
                           "1500", "--rocket-max-ops", "10000000"],
    "coffee-rocket-n0": ["--dataset", "coffee", "--model", "seq-rocket", "--rocket-positions",
                         "0", "--rocket-max-ops", "100000"],
    "pickup-rocket": ["--dataset", "pickupgesturewiimotez", "--model", "seq-rocket"],
    "plaid-rocket": ["--dataset", "plaid", "--model", "seq-rocket"],
    # the default budget's JapaneseVowels pick's shape
    "jv-p4-e16": ["--dataset", "japanesevowels", "--patch", "4", "--embed", "16", "--heads",
                  "4", "--blocks", "1"],
}  # fmt: skip

DEVICE = """
import gc, time
from attention import Model

def bench(names, with_steps=False):
    for name in names:
        gc.collect()
        m = Model(name + ".bin")
        out = m.new_logits()
        xq = m.quantize([0.0] * m.n_features)
        for i in range(len(xq)):
            xq[i] = (i * 37) % 255 - 127
        best = -1
        for _ in range(@REPEAT@ + 1):
            t = time.ticks_us()
            m.run_int8(xq, out)
            dt = time.ticks_diff(time.ticks_us(), t)
            if best < 0 or dt < best:
                best = dt
        print("RUN", name, m.kernels, best)
        if with_steps:
            steps(name, m)
        m = None


def bench_steps(names):
    bench(names, True)


def steps(name, m):
    # a thumb model run as one program: each step's µs, as the difference of the program's
    # prefixes (one call each, as run_int8's; the buffers hold the full run's values)
    if m.kernels != "thumb" or len(m._prog8) != 1 or len(m._prog8[0]) < 3:
        return
    import attention_thumb as AT

    run = m._prog8[0][2]
    prev = 0
    for k in range(len(run) + 1):
        words = AT._fused(run[:k])[1]
        best = -1
        for _ in range(@REPEAT@):
            t = time.ticks_us()
            AT._run(words, 0, 0, 0)
            dt = time.ticks_diff(time.ticks_us(), t)
            if best < 0 or dt < best:
                best = dt
        if k:
            p = run[k - 1][6]
            print("STEP", name, AT._CODES[run[k - 1][0]], best - prev,
                  " ".join(str(p[i]) for i in range(min(8, len(p)))))
        prev = best
"""

# the kernel codes of attention_thumb's program, and each step's MACs from its parameters
KERNEL = {0: "dense", 1: "attn", 2: "add", 3: "pool", 4: "embed", 5: "relu", 6: "conv"}


def step_macs(kind: str, p: list[int]) -> int:
    """MACs (or, for add / pool / relu, values) of one program step of `kind` with parameters
    `p` (attention_kernels: dense / embed [rows, n_in, n_out, ...], conv [S_out, S_in, C, F,
    K, stride, dil, Cg], attn [S, E, ...]: scores and context, 2 S² E)."""
    if kind in ("dense", "embed"):
        return p[0] * p[1] * p[2]
    if kind == "conv":
        return p[0] * p[3] * p[7] * p[4]
    if kind == "attn":
        return 2 * p[0] * p[0] * p[1]
    return p[0] * (p[1] if kind == "pool" else 1)


def models(tmp: Path, names: tuple[str, ...] | None = None) -> dict[str, Path]:
    """name -> blob of the golden models and the SHAPES (`names`: only those)."""
    from tinyattn import cli
    from tinyattn.intmodel.export import export_model

    out = {n: GOLDEN / f"{n}.bin" for n in NAMES if names is None or n in names}
    for name, flags in SHAPES.items():
        if names is not None and name not in names:
            continue
        npz, blob = tmp / f"{name}.npz", tmp / f"{name}.bin"
        epochs = [] if "seq-rocket" in flags else ["--epochs", "1"]  # a ridge: no epochs
        with contextlib.redirect_stdout(io.StringIO()):
            assert cli.main(["train", *flags, *epochs, "--out", str(npz), "--quiet"]) == 0
            export_model(npz, blob)
        out[name] = blob
    return out


def run_on_board(port: str, blobs: dict[str, Path], module: str, source: str, call: str,
                 each: bool = False) -> str:  # fmt: skip
    """Flash the runtime (as .mpy), copy each blob as NAME.bin and `source` (its @REPEAT@
    filled in) as `module`.py to the board at `port`, then run `module.call(names)` there; its
    output. `each`: one run a blob, `module.call([name])`, each after mpremote's soft reset
    (a fresh heap: large models one after another fragment it; the rp2040 preset's 32 KB
    blobs found no span after a 95 KB model), each blob copied just before its run and removed
    after it (the 29 blobs of the time model, ~250 KB, do not fit the Pico's filesystem beside
    what a test session leaves there)."""
    from tinyattn.board.flash import flash, mpremote

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, blob in blobs.items():
            (folder / f"{name}.bin").write_bytes(blob.read_bytes())
        (folder / f"{module}.py").write_text(source)
        flash(port, GOLDEN / "iris.bin", use_mpy=True, progress=False)
        run = f"import {module} as b; b.{call}"
        if not each:
            chain = []
            for path in sorted(folder.iterdir()):
                chain += ["cp", str(path), ":", "+"]
            mpremote(port, *chain[:-1], timeout=600)
            return mpremote(port, "exec", f"{run}({list(blobs)!r})", timeout=3600)
        mpremote(port, "cp", str(folder / f"{module}.py"), ":", timeout=600)
        out = []
        for name in blobs:
            mpremote(port, "cp", str(folder / f"{name}.bin"), ":", timeout=600)
            out.append(mpremote(port, "exec", f"{run}([{name!r}])", timeout=3600))
            mpremote(port, "rm", f":{name}.bin", timeout=60)
        return "\n".join(out)


def measure(port: str, blobs: dict[str, Path]) -> dict[str, int]:
    """µs of one int8 inference of each blob on the board at `port` (the fastest of REPEAT)."""
    return measure_steps(port, blobs, with_steps=False)[0]


def measure_steps(port: str, blobs: dict[str, Path], with_steps: bool = True
                  ) -> tuple[dict[str, int], dict[str, list[dict]]]:  # fmt: skip
    """`measure`'s µs, and (`with_steps`) of each model the thumb kernels run as one program,
    its steps: [{"kernel", "us", "macs"}] in program order (a step's µs: the difference of the
    program's prefixes, each the fastest of REPEAT)."""
    out = run_on_board(port, blobs, "bench_cost_dev", DEVICE.replace("@REPEAT@", str(REPEAT)),
                       "bench_steps" if with_steps else "bench", each=True)  # fmt: skip
    us: dict[str, int] = {}
    steps: dict[str, list[dict]] = {}
    for line in out.splitlines():
        parts = line.split()
        if parts[:1] == ["RUN"]:
            us[parts[1]] = int(parts[3])
        elif parts[:1] == ["STEP"]:
            kind = KERNEL[int(parts[2])]
            p = [int(v) for v in parts[4:]]
            steps.setdefault(parts[1], []).append({"kernel": kind, "us": int(parts[3]),
                                                   "macs": step_macs(kind, p)})  # fmt: skip
    return us, steps


def by_kernel(steps: list[dict]) -> dict[str, tuple[int, int]]:
    """A model's steps summed by kernel: kernel -> (µs, MACs)."""
    out: dict[str, tuple[int, int]] = {}
    for st in steps:
        us, macs = out.get(st["kernel"], (0, 0))
        out[st["kernel"]] = (us + st["us"], macs + st["macs"])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", help="a running Pico's tty (default: start the emulated one)")
    p.add_argument("--write", type=Path, help="save the rates into this board table (JSON)")
    args = p.parse_args(argv)
    from tinyattn.board import cost
    from tinyattn.intmodel.blob import read_blob
    from tinyattn.tools.emulated_boards import EmulatedBoard, golden_missing, skip_reason

    if golden_missing():
        print(golden_missing(), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        blobs = models(Path(tmp))
        terms = {n: cost.terms(read_blob(b.read_bytes())) for n, b in blobs.items()}
        if args.port:
            us = measure(args.port, blobs)
        else:
            why = skip_reason("pico")
            if why:
                print(f"no emulated Pico: {why}", file=sys.stderr)
                return 2
            board = EmulatedBoard("pico").start()
            try:
                us = measure(board.tty, blobs)
            finally:
                board.stop()
    rates = cost.fit(terms, us)
    print(json.dumps(rates, indent=1))
    print(cost.table(terms, us, rates))
    if args.write:
        table = json.loads(args.write.read_text()) if args.write.exists() else {}
        table["cost"] = {"rates": rates, "measured": {n: {"us": us[n], "terms": terms[n]}
                                                      for n in us}}  # fmt: skip
        args.write.write_text(json.dumps(table, indent=1) + "\n")
        print(f"written: {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
