# Host (CPython): measure the heap a blob needs on a board, to fit host/board/heap.py's estimate.
"""For each model of a set (the trained golden models and one of each seq shape the search can
pick, trained for an epoch here), the least free heap at the REPL (bytes, runtime as .mpy on
the MicroPython unix port) with which

- `server`: `tinyattn parity` starts the server, loads the blob and passes (the server and
  its line buffer, the model, both paths);
- `app`: the app (`tinyattn flash --app`, a replay source) loads the model, its Stream and its
  source and prints a decision;

found by bisection over the virtual board's heap (`-X heapsize`, 1 KiB steps); and what
loading the model and making its Stream allocate there (`load`: gc.mem_alloc deltas); next to
the features the estimate uses (host/board/heap.py `features`, counted under CPython).
`--write FILE` saves the measurements as JSON (tests/golden/heap_measured.json, what the
estimate is checked against); `--fit FILE` fits host/board/heap.py's constants to such a file
and prints them with the table of measured against estimated.

    python -m tinyattn.tools.dev.heap_fit --write tests/golden/heap_measured.json
    python -m tinyattn.tools.dev.heap_fit --fit tests/golden/heap_measured.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tinyattn.paths import device_dir
from tinyattn.tools.emulated_boards import GOLDEN

STEP = 1024  # bisection resolution (bytes of heap)

# (name, train flags) of the seq shapes trained here; the golden models come as they are
SHAPES = {
    "bm-conv-alone": ["--dataset", "basicmotions", "--stem", "conv", "--blocks", "0",
                      "--stem-stride", "1", "--patch", "2", "--embed", "8", "--heads", "2"],
    "bm-conv-attn": ["--dataset", "basicmotions", "--stem", "conv", "--blocks", "1",
                     "--patch", "2", "--embed", "16", "--heads", "4"],
    "acsf1-patch": ["--dataset", "acsf1", "--patch", "16", "--embed", "16", "--heads", "4",
                    "--blocks", "2"],
    "coffee-p1": ["--dataset", "coffee", "--patch", "2", "--embed", "8", "--heads", "2",
                  "--blocks", "1"],
    "jv-conv": ["--dataset", "japanesevowels", "--stem", "conv", "--blocks", "1", "--patch",
                "1", "--embed", "16", "--heads", "4"],
    "trace-l2": ["--dataset", "trace", "--patch", "5", "--embed", "24", "--heads", "4",
                 "--blocks", "2"],
    "pickup-w16": ["--dataset", "pickupgesturewiimotez", "--stem", "conv", "--blocks", "0",
                   "--stem-stride", "1", "--stem-width", "16", "--patch", "4", "--embed", "16",
                   "--heads", "4"],
    "bm-rocket": ["--dataset", "basicmotions", "--model", "seq-rocket"],
    "jv-rocket": ["--dataset", "japanesevowels", "--model", "seq-rocket"],
}  # fmt: skip
# the runtime's allocations for a model and its Stream, on the unix port (viper kernels, the
# set a board runs, imported before: the model's own heap, as the search's budget counts it):
# gc.mem_alloc deltas around Model() and Stream()
LOAD = """import sys, gc
sys.path.insert(0, {device!r})
import attention, attention_stream, attention_viper
gc.collect(); a0 = gc.mem_alloc()
m = attention.Model({blob!r}, kernels="viper")
gc.collect(); a1 = gc.mem_alloc()
s = attention_stream.Stream(m, 10) if m.seq and m.steps > 1 else None
b = bytearray(4 * m.n_features * 10) if s else None
gc.collect(); a2 = gc.mem_alloc()
print("LOAD", a1 - a0, a2 - a1)
"""


def models(tmp: Path) -> dict[str, tuple[Path, Path, list[str]]]:
    """name -> (blob, model file, parity's data flags)."""
    from tinyattn import cli
    from tinyattn.intmodel.export import export_model

    out = {}
    for name, data in (("iris", []), ("wine", ["--dataset", "wine"]),
                       ("basicmotions", ["--dataset", "basicmotions"]),
                       ("japanesevowels", ["--dataset", "japanesevowels"])):  # fmt: skip
        out[name] = (GOLDEN / f"{name}.bin", GOLDEN / f"{name}.npz", data)
    for name, flags in SHAPES.items():
        npz, blob = tmp / f"{name}.npz", tmp / f"{name}.bin"
        with contextlib.redirect_stdout(io.StringIO()):
            assert cli.main(["train", *flags, "--epochs", "1", "--out", str(npz), "--quiet"]) == 0
            export_model(npz, blob)
        out[name] = (blob, npz, flags[:2])
    return out


def baseline() -> int:
    """Heap the virtual board uses at its REPL (its size minus gc.mem_free there)."""
    from tinyattn.tools.vboard import VirtualBoard

    with tempfile.TemporaryDirectory() as fs, VirtualBoard(Path(fs), heap=256 * 1024) as vb:
        from tinyattn.board.link import BoardLink

        with BoardLink(vb.port) as link:
            link.enter_raw_repl()
            free = int(link.exec_raw("import gc\ngc.collect()\nprint(gc.mem_free())"))
            link.leave_raw_repl()
    return 256 * 1024 - free


def server_ok(fs: Path, heap: int, blob: Path, npz: Path) -> bool:
    from tinyattn import cli
    from tinyattn.tools.vboard import VirtualBoard

    with VirtualBoard(fs, heap=heap) as vb, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):  # fmt: skip
        return cli.main(["parity", "--port", vb.port, "--blob", str(blob), "--model", str(npz),
                         "--bench", "0", "--quiet"]) == 0  # fmt: skip


def app_ok(fs: Path, heap: int) -> bool:
    from tinyattn.tools.vboard import VirtualBoard

    with VirtualBoard(fs, heap=heap) as vb:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            text = vb.transcript()
            if b"\nTA " in text:
                return True
            if b"TA!" in text or b"Error" in text:
                return False
            time.sleep(0.1)
    return False


def least(ok, lo: int, hi: int) -> int:
    """The least heap in [lo, hi] (STEP apart) for which ok(heap) holds (hi if none)."""
    while hi - lo > STEP:
        mid = (lo + hi) // 2 // STEP * STEP
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def flashed(fs: Path, blob: Path, app: bool, steps: np.ndarray | None) -> None:
    from tinyattn import cli
    from tinyattn.board.stream import write_replay
    from tinyattn.tools.vboard import VirtualBoard

    with VirtualBoard(fs, heap=512 * 1024) as vb, contextlib.redirect_stdout(io.StringIO()):
        argv = ["flash", "--port", vb.port, "--blob", str(blob), "--quiet"]
        if app:
            replay = write_replay(fs.parent / "r.tasr", steps)
            argv += ["--app", "--source", f"replay:{replay}", "--rate", "1000"]
        assert cli.main(argv) == 0


def load(blob: Path) -> list[int]:
    """[model, stream] bytes the runtime allocates on the unix port (LOAD)."""
    import subprocess

    from tinyattn.tools.vboard import find_micropython

    code = LOAD.format(device=str(device_dir()), blob=str(blob))
    out = subprocess.run([find_micropython(), "-X", "heapsize=8M", "-c", code],
                         capture_output=True, text=True, timeout=120).stdout  # fmt: skip
    words = out.split()
    at = words.index("LOAD")
    return [int(words[at + 1]), int(words[at + 2])]


def fit(measured: dict) -> dict:
    """host/board/heap.py's constants fitted to `measured` (least squares; MODEL_MARGIN: the
    largest shortfall of the load fits, rounded up to 256 B; HEAP_ERROR: the largest relative
    error of a context's need)."""
    rows = measured["models"].values()
    feats = [r["features"] for r in rows]
    A = np.array([[1, *f["model"]] for f in feats], float)
    model = np.linalg.lstsq(A, np.array([r["load"][0] for r in rows], float), rcond=None)[0]
    streamed = [r for r in rows if r["features"]["stream"]]
    A = np.array([[1, r["features"]["stream"][0], r["features"]["stream"][2]]
                  for r in streamed], float)  # fmt: skip
    a, b, d = np.linalg.lstsq(A, np.array([r["load"][1] for r in streamed], float),
                              rcond=None)[0]  # fmt: skip
    out = {"MODEL_FIT": tuple(round(float(x), 2) for x in model),
           "STREAM_FIT": (round(float(a), 2), round(float(b), 2), 0.0, round(float(d), 2)),
           "RUNTIME_FIT": {}}  # fmt: skip
    for context in ("server", "app"):
        have = [r for r in rows if context in r]
        rest = [r[context] - r["load"][0] - (r["load"][1] if context == "app" else 0)
                for r in have]  # fmt: skip
        A = np.array([[1, r["features"]["values"]] for r in have], float)
        c = np.linalg.lstsq(A, np.array(rest, float), rcond=None)[0]
        out["RUNTIME_FIT"][context] = tuple(round(float(x), 2) for x in c)
    from tinyattn.board import heap

    saved = {k: getattr(heap, k) for k in ("MODEL_FIT", "STREAM_FIT", "RUNTIME_FIT")}
    try:
        for k in saved:
            setattr(heap, k, out[k])
        short = max(r["load"][0] + (r["load"][1] if r["features"]["stream"] else 0)
                    - heap.model_heap(r["features"]) + heap.MODEL_MARGIN for r in rows)
        out["MODEL_MARGIN"] = max(0, -(-int(short) // 256) * 256)
        err = max(abs(heap.from_features(r["features"], c) / r[c] - 1)
                  for r in rows for c in ("server", "app") if c in r)  # fmt: skip
        out["HEAP_ERROR"] = math.ceil(err * 100) / 100
    finally:
        for k, v in saved.items():
            setattr(heap, k, v)
    return out


def measure(names: list[str] | None = None) -> dict:
    from tinyattn.board.heap import features
    from tinyattn.data.timeseries import load_ts_dataset

    base = baseline()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, (blob, npz, data) in models(tmp).items():
            if names and name not in names:
                continue
            f = features(blob.read_bytes())
            row = {"features": f, "load": load(blob)}
            fs = tmp / f"fs-{name}"
            flashed(fs, blob, False, None)
            row["server"] = least(lambda h, fs=fs, b=blob, m=npz: server_ok(fs, h, b, m),
                                  24 * 1024, 512 * 1024) - base  # fmt: skip
            if f["stream"] is not None:
                ds = load_ts_dataset(data[1], "TEST")
                steps = ds.X[:3, : int(ds.lengths[:3].min())].astype(np.float32)
                fs = tmp / f"fs-{name}-app"
                flashed(fs, blob, True, steps.reshape(-1, ds.n_channels))
                row["app"] = least(lambda h, fs=fs: app_ok(fs, h), 24 * 1024,
                                   512 * 1024) - base  # fmt: skip
            rows[name] = row
            print(f"{name:16s} load {row['load']}  server {row['server']:7d}  app "
                  f"{row.get('app', '-')}", flush=True)  # fmt: skip
    return {"baseline": base, "step": STEP, "models": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", type=Path, help="save the measurements as JSON")
    p.add_argument("--fit", type=Path, help="fit the estimate to measurements saved before")
    p.add_argument("--features", type=Path,
                   help="count the features of saved measurements again (a new feature)")
    p.add_argument("--loads", type=Path,
                   help="measure the model and Stream loads of saved measurements again")
    p.add_argument("--only", help="comma-separated model names")
    args = p.parse_args(argv)
    from tinyattn.board.heap import check_table, features

    if args.features:  # the features of saved measurements again (the shapes are the same)
        measured = json.loads(args.features.read_text())
        with tempfile.TemporaryDirectory() as tmp:
            for name, (blob, _, _) in models(Path(tmp)).items():
                if name in measured["models"]:
                    measured["models"][name]["features"] = features(blob.read_bytes())
        args.features.write_text(json.dumps(measured, indent=1) + "\n")
        print(f"written: {args.features}")
        return 0
    if args.loads:  # the loads of saved measurements again (LOAD changed)
        measured = json.loads(args.loads.read_text())
        with tempfile.TemporaryDirectory() as tmp:
            for name, (blob, _, _) in models(Path(tmp)).items():
                if name in measured["models"]:
                    measured["models"][name]["load"] = load(blob)
        args.loads.write_text(json.dumps(measured, indent=1) + "\n")
        print(f"written: {args.loads}")
        return 0
    if args.fit:
        measured = json.loads(args.fit.read_text())
        for key, value in fit(measured).items():
            print(f"{key} = {value!r}")
        print(check_table(measured))
        return 0
    result = measure(args.only.split(",") if args.only else None)
    print(check_table(result))
    if args.write:
        args.write.write_text(json.dumps(result, indent=1) + "\n")
        print(f"written: {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
