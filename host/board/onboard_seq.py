"""Host (CPython): `tinyattn train --on-board` for windows — `seq-attn` trained on the board.

DESIGN §11. `--dataset basicmotions` or `--ts TRAIN.ts [--test TEST.ts]` with `--on-board`:
the host prepares the run exactly as `tinyattn train` on those windows would
(host/learn/seqcli.py `run_one` -> seqtrain.train_seq): the dataset's defaults and the flags
given, the per-channel standardization fitted on the train windows, the model's T, the initial
weights of `build_seq_model(seed)`, and from `np.random.default_rng([seed, 1])` per epoch the
minibatch order and then each minibatch's time shifts (seqtrain.augment_batch's draws). The
board gets the initial weights (TAFM), the standardized windows (TAWF: the train windows, then
the test windows, cut to T as the host's evaluation cuts them) and, per epoch, the order and
the shifts; BoardTrainer (onboard.py) drives it. Weight averaging (the dataset's `Average`)
runs on the board (attention_train_seq.Averager): its running value rides in the checkpoints,
and the last epoch leaves theta = the average, as host fit_seq does. The summary and the model
file are `run_one`'s (float and int8 test accuracy, `evaluate_seq`), plus "on_board".

Refused in one line: distillation (JapaneseVowels' default trains 4 teachers on the host first;
no flag turns it off), augmentation other than the time shift (scale, stretch, noise: their
draws would have to be replayed on the board), `--head-only` (a row model's classifier).

The board needs more heap than for Iris (SEQ_VIRTUAL_HEAP): without `--port` the run gets a
virtual board of that size; a real board too small answers "not enough heap to train".

Protocol: docs/protocol.md, Training.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
import zlib
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tinyattn import remedy
from tinyattn.board.boardmodel import board_bytes, board_meta
from tinyattn.board.onboard import RunFiles, check_schedule
from tinyattn.errors import CLIError

# Windows a forward holds on the board: the minibatch of 16 runs in pieces of one, so the run
# holds one window's caches (BasicMotions: 86 KiB of buffers and optimizer state at rows 1,
# 376 KiB at 16; attention_train_seq.py).
SEQ_ROWS = 1
# The virtual board of a window run without --port (the inference one's 100k is too small).
# BasicMotions sessions (.mpy, rows 1, measured 2026-12-01, 4 KiB steps): the smallest board
# that trains is 172k (168k: "not enough heap"), GC-bound there at 14.4 s/epoch (9 KB free);
# 184k 6.1 s, 208k 3.5 s, 256k 2.4 s/epoch (94 KB free). 256k: the GC has room, so the
# default 150 epochs take ~6 min instead of ~36 (docs/protocol.md, Training).
SEQ_VIRTUAL_HEAP = "256k"
TAWF_HEADER = struct.Struct("<4sHHIII")  # magic, version, flags, N, T, C


def window_file_bytes(x: np.ndarray, lengths: np.ndarray, labels: np.ndarray) -> bytes:
    """The board's windows file (TAWF, device/attention_train_seq.py's docstring is the byte
    layout) of standardized windows `x [N, T, C]`, `lengths [N]` (1..T), `labels [N]`."""
    N, T, C = x.shape
    lengths = np.asarray(lengths)
    if not 0 < N < 65536 or lengths.min() < 1 or lengths.max() > T or int(labels.max()) > 255:
        raise ValueError(f"{N} windows of lengths {lengths.min()}..{lengths.max()} at T={T}, "
                         f"{int(labels.max()) + 1} classes: the board takes 1..65535 windows "
                         "of 1..T steps and at most 256 classes")  # fmt: skip
    body = b"".join([
        TAWF_HEADER.pack(b"TAWF", 1, 0, N, T, C),
        lengths.astype("<u2").tobytes(),
        np.asarray(labels).astype(np.uint8).tobytes(),
        bytes(-3 * N % 4),
        np.ascontiguousarray(x, dtype="<f4").tobytes(),
    ])  # fmt: skip
    return body + struct.pack("<I", zlib.crc32(body))


def orders_and_shifts(seed: int, n: int, epochs: int, batch_size: int,
                      shift: int) -> tuple[np.ndarray, np.ndarray | None]:  # fmt: skip
    """`(orders [epochs, n] uint16, shifts [epochs, n] int16 or None)`: seqtrain.fit_seq's
    generator replayed — per epoch the permutation, then (shift > 0, the only augmentation)
    one draw of `batch` shifts per minibatch in order (augment_batch)."""
    rng = np.random.default_rng([seed, 1])  # exactly fit_seq's
    orders, shifts = [], []
    for _ in range(epochs):
        orders.append(rng.permutation(n))
        if shift:
            shifts.append(np.concatenate([
                rng.integers(-shift, shift + 1, size=min(batch_size, n - s))
                for s in range(0, n, batch_size)
            ]))  # fmt: skip
    return (np.asarray(orders, dtype="<u2"),
            np.asarray(shifts, dtype="<i2") if shift else None)  # fmt: skip


def check_recipe(name: str, augment: Any, distill: Any) -> None:
    """CLIError (one line) for what the board cannot run."""
    if distill.active:
        raise CLIError(
            f"--on-board: {name}'s default recipe distils from {distill.teachers} teachers "
            "(host/learn/seqdefaults.py), which train on the host only and no flag turns it "
            f"off; train {name} on the host (without --on-board), then export and flash"
        )
    other = [k for k in ("scale", "stretch", "noise") if getattr(augment, k) > 0.0]
    if other:
        raise CLIError(
            f"--on-board: the board augments by time shift only; {name}'s recipe also uses "
            f"{', '.join(other)}: train it on the host (without --on-board)"
        )


@dataclass
class SeqPlan(RunFiles):
    """A window run as the host prepares it (what BoardTrainer reads: run, init, rows,
    data_crc, n_rows, n_train, config, orders, shifts)."""

    config: Any  # train.TrainConfig
    arch: Any  # seqmodel.SeqAttnConfig
    augment: Any
    average: Any
    distill: Any
    train: Any  # TSDataset: the train part (raw windows)
    test: Any  # TSDataset: the test part
    split: dict[str, Any]  # meta["train"] additions (held-out indices, no --test)
    model: Any  # SeqModel with the initial weights (float64); trained ones loaded at the end
    norm_mean: np.ndarray
    norm_std: np.ndarray
    meta: dict[str, Any]  # the board file's meta
    init: bytes  # TAFM of the initial weights
    rows: bytes  # TAWF: train windows then test windows
    orders: np.ndarray  # (epochs, n_train) uint16
    shifts: np.ndarray | None  # (epochs, n_train) int16
    head_only: bool = False  # (BoardTrainer's summary field: a window run trains whole)
    heap_note = (f"; a window run holds one window at a time already (rows {SEQ_ROWS}): the "
                 "BasicMotions default needs a 172 KiB board; without --port a virtual board of "
                 f"{SEQ_VIRTUAL_HEAP} trains it")  # fmt: skip

    @property
    def n_train(self) -> int:
        return len(self.train.y)

    @property
    def n_rows(self) -> int:
        return len(self.train.y) + len(self.test.y)


def _standardized(ds: Any, T: int, mean: np.ndarray, std: np.ndarray) -> tuple[np.ndarray, ...]:
    """`(x [N, T, C] standardized, 0 past each length, lengths cut to T)`: as train_seq and
    evaluate_seq see the windows."""
    from tinyattn.data.timeseries import standardize_windows
    from tinyattn.intmodel.floatref import fit_to_model

    Xt, n, _ = fit_to_model(ds.X, np.asarray(ds.lengths, np.int64), T)
    x = standardize_windows(Xt, n, mean, std)
    if x.shape[1] < T:
        x = np.pad(x, ((0, 0), (0, T - x.shape[1]), (0, 0)))
    return x, n


def plan_seq(data: Any, arch: Any, config: Any, augment: Any, average: Any,
             distill: Any) -> SeqPlan:  # fmt: skip
    """The run `tinyattn train` makes on these windows with this recipe, for the board."""
    from tinyattn.data.timeseries import fit_channel_standardizer
    from tinyattn.learn.seqcli import _split
    from tinyattn.learn.seqmodel import build_seq_model, default_max_steps

    check_recipe(data.name, augment, distill)
    check_schedule(config)
    if arch.stem != "patch":
        raise CLIError("--on-board: the board trains the patch stem only, not a conv stem; "
                       "train with --stem conv on the host, then export and flash")
    if arch.blocks < 1:
        raise CLIError("--on-board: the board trains models of at least one attention block; "
                       "train --blocks 0 on the host, then export and flash")
    if arch.log_view or arch.clip:
        flag = "--log-view" if arch.log_view else "--clip-view"
        raise CLIError("--on-board: the board trains on the values as they are, not their log "
                       f"or clip view; train with {flag} on the host, then export and flash")
    train, test, split = _split(data, config)
    lengths = np.asarray(train.lengths, np.int64)
    mean, std = fit_channel_standardizer(train.X, lengths)
    T = default_max_steps(lengths, arch.patch)
    x_tr, n_tr = _standardized(train, T, mean, std)
    x_te, n_te = _standardized(test, T, mean, std)
    try:
        rows = window_file_bytes(np.concatenate([x_tr, x_te]), np.concatenate([n_tr, n_te]),
                                 np.concatenate([train.y, test.y]))  # fmt: skip
    except ValueError as exc:
        raise CLIError(f"{data.name}: {exc}") from None
    C = x_tr.shape[2]
    model = build_seq_model(T, C, train.n_classes, arch, seed=config.seed)  # as train_seq
    meta = board_meta({"ops": model.ops, "model": "seq-attn", "dataset": data.name,
                       "class_names": list(data.train.class_names)}, mean, std)  # fmt: skip
    meta["train"] = {**asdict(config), "head_only": False, "n_train": len(train.y),
                     "rows": min(SEQ_ROWS, config.batch_size), "shift": int(augment.shift),
                     "average": asdict(average)}  # fmt: skip
    theta = model.theta.astype(np.float32)
    meta["run"] = hashlib.sha256(board_bytes(meta, theta) + rows).hexdigest()[:16]
    orders, shifts = orders_and_shifts(config.seed, len(train.y), config.epochs,
                                       config.batch_size, int(augment.shift))  # fmt: skip
    return SeqPlan(config, arch, augment, average, distill, train, test, split, model, mean, std,
                   meta, board_bytes(meta, theta), rows, orders, shifts)  # fmt: skip


def finish(plan: SeqPlan, data: Any, bm: Any, history: dict, board: dict, seconds: float,
           out: Any) -> dict[str, Any]:  # fmt: skip
    """Load the board's weights, then evaluate, write the model file and summarize as
    `tinyattn train` does (seqcli.finish_seq); returns the `--json` summary."""
    from tinyattn.learn.seqcli import finish_seq
    from tinyattn.learn.train import TrainResult

    if bm.average is not None:  # only a finished run's file has none (theta = the average)
        raise CLIError("the board's final weights still carry a weight average: the run did "
                       f"not finish; run '{remedy.again('train')}' again to resume")  # fmt: skip
    plan.model.theta[...] = bm.theta.astype(np.float64)
    result = TrainResult(plan.model, plan.norm_mean, plan.norm_std, seconds)
    recipe = (plan.arch, plan.config, plan.augment, plan.average, plan.distill)
    return finish_seq(out, data, plan.train, plan.test, plan.split, result, recipe, history,
                      board)  # fmt: skip


def main(args: argparse.Namespace) -> int:
    """`tinyattn train --on-board` on windows (traincli.main hands it over)."""
    from tinyattn.board.onboard import check_arguments, drive, run_board
    from tinyattn.learn.seqcli import load_windows, seq_setup
    from tinyattn.learn.train import count

    if args.head_only:
        raise CLIError("--head-only adapts the classifier of a row model (iris-attn); seq-attn "
                       "trains whole on the board: leave out --head-only")  # fmt: skip
    check_arguments(args)
    data = load_windows(args)
    arch, config, augment, average, distill = seq_setup(args, data.train)
    plan = plan_seq(data, arch, config, augment, average, distill)
    log = sys.stderr if args.json else sys.stdout

    def run(port: str, on_epoch: Any, say: Any) -> dict[str, Any]:
        bm, history, board, seconds = run_board(port, plan, args.out, args.baud, args.timeout,
                                                on_epoch, say)  # fmt: skip
        return finish(plan, data, bm, history, board, seconds, args.out)

    s = drive(args, config.epochs, data.name, run, SEQ_VIRTUAL_HEAP)
    n_test, n_train = s["n_test"], s["n_train"]
    b = s["on_board"]
    where = args.port or f"virtual board (build/board, {SEQ_VIRTUAL_HEAP})"
    resumed = f", resumed at epoch {b['start_epoch']}" if b["start_epoch"] else ""
    epochs = count(config.epochs, "epoch")
    print(
        f"test accuracy {s['test_accuracy']:.3f} ({round(s['test_accuracy'] * n_test)}/{n_test}"
        f" windows, {s['test_split']}), int8 {s['int8_test_accuracy']:.3f}, train "
        f"{s['train_accuracy']:.3f} ({n_train} windows), {epochs} on {where} in "
        f"{s['seconds']:.2f} s{resumed}, {s['params']} params, {s['macs']} MACs -> {s['out']}",
        file=log,
    )
    if args.json:
        print(json.dumps(s))
    return 0
