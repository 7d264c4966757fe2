"""Host (CPython): the windows flow of `tinyattn train` — `seq-attn` on `.ts` data (issue 11).

`tinyattn train` (host/learn/traincli.py) parses the flags and runs windows through here:
`--dataset basicmotions|japanesevowels` (the vendored archive problems, their fixed TRAIN/TEST
split) or `--ts TRAIN.ts [--test TEST.ts]` (any archive file, univariate too). Without
`--test` a stratified part of TRAIN (`--test-fraction`, default 0.2, seed `--seed`) is held
out as the test part, and said so; the model file records which windows (`train.train_idx`,
`train.test_idx`, indices into the TRAIN file) so `tinyattn export` evaluates on the same.

Defaults (`seqdefaults.seq_defaults`): architecture, recipe, augmentation and weight averaging
chosen per dataset by cross-validation on its TRAIN file only (host/learn/seqdefaults.py says
how and with which figures); another `.ts` file gets JapaneseVowels' recipe with width 16 and
a patch giving at most 20 tokens. Every flag given overrides its default: `--patch --embed
--heads --blocks --ff --shift` here, the recipe flags through `train.config_from_args` (one
TrainConfig path for both flows); weight averaging (`seqtrain.Average`) and distillation
(`seqtrain.Distill`: the dataset's teachers are trained first, before the progress bar) have no
flag; the model file records both (`train.average`, `train.distill`).

Training is `seqtrain.train_seq` (lengths, masking, augmentation); the test figures are
`seqtrain.evaluate_seq`: float and int8 (calibrated on the training windows, as export), TEST
windows longer than the model's T classified on their last T steps and counted. `--cv K
--repeats R` runs stratified K-fold over the TRAIN windows only (the TEST file is not read),
float and int8 per fold.

Refused in one line: an iris model on windows, `seq-attn` on rows (Iris, Wine, a CSV),
`--ts` with `--csv`/`--dataset`, architecture flags on rows, missing values (`?`) in a window,
TRAIN windows of one class (whatever `@classLabel` declares; as a CSV of one class), a TEST file
whose classes or channels differ from TRAIN's (traincli.check_flow and here). `--on-board`
hands the run to host/board/onboard_seq.py (the same run, trained on a board).

`--search` on rows (`--csv FILE`, Iris, Wine) runs here too: the rows are windows of one step
(`rows_data`), the search picks a seq-attn model for them (T = P = 1) and the model file
names the rows (`csv`, `target`) as a row model's does.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tinyattn.data.timeseries import TSDataset, load_ts, load_ts_dataset
from tinyattn.learn.seqdefaults import seq_defaults
from tinyattn.learn.seqmodel import STEMS, SeqAttnConfig, macs
from tinyattn.learn.seqtrain import Augment, Average, Distill, evaluate_seq, train_seq
from tinyattn.learn.train import TrainResult

ARCH_FLAGS = {  # flag dest -> (SeqAttnConfig field, flag)
    "patch": ("patch", "--patch"),
    "embed": ("embed_dim", "--embed"),
    "heads": ("num_heads", "--heads"),
    "blocks": ("blocks", "--blocks"),
    "ff": ("ff_dim", "--ff"),
    "stem_width": ("stem_width", "--stem-width"),
    "stem_kernel": ("stem_kernel", "--stem-kernel"),
    "stem_stride": ("stem_stride", "--stem-stride"),
}


def add_seq_arguments(parser: argparse.ArgumentParser) -> None:
    """The `.ts` data and `seq-attn` architecture flags of `tinyattn train`."""
    ts = parser.add_argument_group("windows (.ts files, seq-attn)")
    ts.add_argument(
        "--ts", type=Path, metavar="TRAIN.ts",
        help="any time-series archive .ts file (univariate or multivariate, equal or unequal "
        "length) as the TRAIN windows",
    )  # fmt: skip
    ts.add_argument(
        "--test", type=Path, metavar="TEST.ts",
        help="with --ts: its TEST file (the test figures); without it a stratified "
        "--test-fraction of TRAIN is held out",
    )  # fmt: skip
    where = "default: per dataset, chosen by CV on TRAIN (host/learn/seqdefaults.py)"
    ts.add_argument("--patch", type=int, metavar="P", help=f"steps per token ({where})")
    ts.add_argument("--embed", type=int, metavar="E", help=f"token width ({where})")
    ts.add_argument("--heads", type=int, metavar="H", help=f"attention heads, E/H each ({where})")
    ts.add_argument("--blocks", type=int, metavar="L", help="attention + ff blocks (0: none, "
                    f"the stem's tokens pooled directly; {where})")  # fmt: skip
    ts.add_argument("--ff", type=int, metavar="F", help=f"feed-forward hidden units ({where})")
    ts.add_argument(
        "--log-view", action="store_true", default=None,
        help="feed the model log(1 + x - floor) of each channel, floor its smallest TRAIN "
        "value (for heavy-tailed levels such as power draw; docs/quantization.md)",
    )  # fmt: skip
    ts.add_argument(
        "--clip-view", type=float, metavar="PCT",
        help="clip each channel's values above the PCT-th percentile of its TRAIN values "
        "(50 < PCT < 100, e.g. 99.9), so rare peaks stop setting the int8 input's scale "
        "(docs/quantization.md)",
    )  # fmt: skip
    ts.add_argument(
        "--stem", choices=STEMS,
        help="the input stage: 'patch' (a linear patch embedding, the default) or 'conv' "
        "(patch embedding to --stem-width channels, then depthwise-separable 1-D convs over "
        "the tokens, the first of stride --stem-stride; docs/search.md)",
    )  # fmt: skip
    ts.add_argument("--stem-width", type=int, metavar="F",
                    help="conv stem: channels of its patch embedding and depthwise convs (8)")
    ts.add_argument("--stem-kernel", type=int, metavar="K",
                    help="conv stem: taps of its depthwise convs (5)")
    ts.add_argument("--stem-stride", type=int, metavar="S",
                    help="conv stem: stride of its first depthwise conv (2): tokens ceil(T/P/S)")
    ts.add_argument("--stem-dilations", metavar="D,D", help="conv stem: one depthwise-separable "
                    "conv per dilation, comma separated (1,2)")  # fmt: skip
    ts.add_argument("--stem-norm", action="store_true", default=None,
                    help="conv stem: batch norm in training after its embedding and each conv, "
                    "folded into them when training ends (docs/search.md)")  # fmt: skip
    ts.add_argument(
        "--shift", type=int, metavar="STEPS",
        help="augmentation: rotate each training window by up to ±STEPS steps (0: off; "
        f"{where}: basicmotions 50, others 0)",
    )  # fmt: skip


# ----------------------------------------------------------------------------- data


@dataclass
class SeqData:
    """The windows of one run: TRAIN (and TEST, if any) and where they came from."""

    name: str
    train: TSDataset
    test: TSDataset | None  # None: --ts without --test
    meta: dict[str, Any]  # model.ts_data_meta

    @property
    def source(self) -> str:
        if self.test is None:
            return str(self.train.source)
        return f"{self.train.source.name} / {self.test.source.name}"


def _check_complete(ds: TSDataset) -> None:
    from tinyattn.errors import CLIError

    bad = np.argwhere(np.isnan(ds.X) & ds.mask[:, :, None])  # (k, 3) window, step, channel
    if len(bad):
        i, t, c = (int(v) for v in bad[0])
        raise CLIError(
            f"{ds.source}: {len(bad)} missing values ('?'), the first in case {i + 1}, step "
            f"{t + 1}, channel {c + 1} (each counted from 1); seq-attn needs complete windows: "
            "fill them (e.g. interpolate) or drop those cases"
        )


def _check_classes(ds: TSDataset) -> None:
    """CLIError unless the TRAIN windows hold at least two classes: the rule of `tinyattn train
    --csv` (data.load_csv), whatever `@classLabel` declares."""
    from tinyattn.errors import CLIError

    held = [ds.class_names[k] for k in np.unique(ds.y)]
    if len(held) < 2:
        declared = f" (@classLabel declares {' '.join(ds.class_names)})" * (ds.n_classes > 1)
        raise CLIError(
            f"{ds.source}: every window is of class {held[0]!r}{declared}; need windows of at "
            "least two classes to train"
        )


def load_windows(args: argparse.Namespace) -> SeqData:
    """TRAIN (and TEST) windows named by `--dataset` or `--ts`/`--test`; CLIError in one line
    for a bad file, missing values, or a TEST file that does not match TRAIN."""
    from tinyattn.errors import CLIError
    from tinyattn.learn.model import ts_data_meta

    try:
        if args.ts is not None:
            train = load_ts(args.ts)
            test = load_ts(args.test, name=train.name) if args.test is not None else None
            meta = ts_data_meta(train.name, args.ts, args.test)
        else:
            train = load_ts_dataset(args.dataset, "train")
            test = load_ts_dataset(args.dataset, "test")
            meta = ts_data_meta(args.dataset)
    except ValueError as exc:  # TSFormatError: file:line and the fix
        raise CLIError(str(exc)) from None
    for ds in (train, test):
        if ds is not None:
            _check_complete(ds)
    _check_classes(train)
    if test is not None:  # the same classes listed in another order: mapped by name
        test = test.in_class_order(train.class_names)
    if test is not None and (
        test.class_names != train.class_names or test.n_channels != train.n_channels
    ):
        raise CLIError(
            f"{test.source}: classes {test.class_names} and {test.n_channels} channels, but "
            f"{train.source} has {train.class_names} and {train.n_channels}; pass the TEST "
            "file of the same problem"
        )
    if test is not None and train.rate and test.rate and test.rate != train.rate:
        raise CLIError(
            f"{test.source} was recorded at {test.rate:g} steps/s, {train.source} at "
            f"{train.rate:g}: a window of T steps is another length of time in each; record "
            "both at one rate"
        )
    if train.rate:  # the recording's steps per second travels with the model (flash --app)
        meta["rate"] = train.rate
    return SeqData(train.name, train, test, meta)


def rows_data(rows: TSDataset, csv: Path | None) -> SeqData:
    """A CSV's (or tabular dataset's) rows as the windows of one step a seq-attn model takes
    (`tinyattn train --search --csv`); the meta names the rows, as a row model's does, so
    export, parity and predict find them again."""
    meta = {"dataset": rows.name, "target": rows.target, "input": "rows"}
    if csv is not None:
        meta["csv"] = str(Path(csv).resolve())
    return SeqData(rows.name, rows, None, meta)


def _subset(ds: TSDataset, idx: np.ndarray) -> TSDataset:
    return replace(ds, X=ds.X[idx], lengths=ds.lengths[idx], y=ds.y[idx])


# ----------------------------------------------------------------------------- setup


def least(field: str) -> int:
    """The smallest value of an architecture flag: 0 blocks (the stem alone), else 1."""
    return 0 if field == "blocks" else 1


def seq_setup(args: argparse.Namespace, train: TSDataset):
    """`(arch, config, augment, average, distill)`: the dataset's defaults with every flag
    given applied (weight averaging and distillation have no flag: the dataset's default)."""
    from tinyattn.errors import CLIError
    from tinyattn.learn.train import config_from_args

    d = seq_defaults(train.name, train.max_length)
    given = {field: getattr(args, dest) for dest, (field, _) in ARCH_FLAGS.items()
             if getattr(args, dest) is not None}  # fmt: skip
    if getattr(args, "stem", None):
        given["stem"] = args.stem
    if getattr(args, "stem_dilations", None):
        try:
            given["stem_dilations"] = tuple(int(v) for v in args.stem_dilations.split(","))
        except ValueError:
            raise CLIError(f"--stem-dilations {args.stem_dilations}: integers separated by "
                           "commas, e.g. 1,2") from None  # fmt: skip
        if min(given["stem_dilations"]) < 1:
            raise CLIError(f"--stem-dilations {args.stem_dilations}: each must be at least 1")
    for field, flag in ARCH_FLAGS.values():
        if given.get(field, 1) < least(field):
            raise CLIError(f"{flag} {given[field]}: must be at least {least(field)}")
    if getattr(args, "stem_norm", None):
        if given.get("stem", d.arch.stem) != "conv" or not d.arch.bias:
            raise CLIError("--stem-norm: the batch norm is the conv stem's; add --stem conv")
        given["stem_norm"] = True
    arch = replace(d.arch, **given)
    if getattr(args, "log_view", None):
        arch = replace(arch, log_view=True, clip=0.0)
    clip = getattr(args, "clip_view", None)
    if clip is not None:
        if arch.log_view or not 50.0 < clip < 100.0:
            raise CLIError(f"--clip-view {clip:g}: a percentile above 50 and below 100, and "
                           "not with --log-view (the model takes one input view)")
        arch = replace(arch, clip=clip)
    for field, flag in ARCH_FLAGS.values():
        v = getattr(arch, field)
        if v < least(field):
            raise CLIError(f"{flag} {v}: must be at least {least(field)}")
    if arch.embed_dim % arch.num_heads:
        raise CLIError(
            f"--embed {arch.embed_dim} is not a multiple of --heads {arch.num_heads}; each head "
            "takes E/H columns"
        )
    if arch.patch > train.max_length:
        raise CLIError(
            f"--patch {arch.patch}: longer than TRAIN's longest window ({train.max_length} "
            "steps); choose a smaller patch"
        )
    augment = d.augment if args.shift is None else replace(d.augment, shift=args.shift)
    if augment.shift < 0:
        raise CLIError(f"--shift {augment.shift}: must be 0 or more")
    return arch, config_from_args(args, d.train, "seq-attn"), augment, d.average, d.distill


# ----------------------------------------------------------------------------- one run


def _accuracy(result: TrainResult, ds: TSDataset) -> float:
    return _rate(result, *result.normalize(ds.X, ds.lengths), ds.y)


def _rate(result: TrainResult, xn: np.ndarray, n: np.ndarray, y: np.ndarray) -> float:
    """The accuracy on windows normalized by `result.normalize` (`xn`, `n`), labels `y`."""
    return float(np.mean(result.model.predict(xn, n) == y)) if len(y) else float("nan")


def _split(data: SeqData, config) -> tuple[TSDataset, TSDataset, dict[str, Any]]:
    """`(train part, test part, meta["train"] additions)`: TRAIN and TEST, or TRAIN's
    stratified hold-out when there is no TEST file."""
    from tinyattn.data.tabular import stratified_split
    from tinyattn.errors import CLIError

    if data.test is not None:
        return data.train, data.test, {}
    if config.test_fraction == 0:  # asked for: every window trains, none is held out
        every = np.arange(len(data.train.y))
        split = {"train_idx": [int(i) for i in every], "test_idx": []}
        return data.train, _subset(data.train, every[:0]), split
    try:
        tr, te = stratified_split(data.train.y, config.test_fraction, config.seed,
                                  data.train.class_names, data.train.unit)
    except ValueError as exc:
        raise CLIError(
            f"{data.train.source}: cannot hold out a test part ({exc}); record more windows "
            "(a class needs 3 or more for a 20% test part), or train on all of them with "
            "--test-fraction 0 (then no test figure)"
        ) from None
    split = {"train_idx": [int(i) for i in tr], "test_idx": [int(i) for i in te]}
    return _subset(data.train, tr), _subset(data.train, te), split


def run_one(args, data: SeqData, recipe: tuple, log, extra: dict | None = None) -> dict[str, Any]:
    """Train on the train part, evaluate on the test part, write the model file; recipe:
    `seq_setup`'s (arch, config, augment, average, distill); `extra` joins the model file's
    meta and the summary (`search`: the model search's record)."""
    arch, config, augment, average, distill = recipe
    from tinyattn.learn.train import _progress_bar, count

    train, test, split = _split(data, config)
    if data.test is None and not len(test.y):
        print(f"--test-fraction 0: all {len(train.y)} TRAIN {data.train.unit} train the model; "
              "none is held out, so there is no test figure", file=log)  # fmt: skip
    elif data.test is None:
        print(
            f"no --test: held out {len(test.y)} of {len(data.train.y)} TRAIN {data.train.unit} "
            f"(stratified {config.test_fraction:g}, seed {config.seed}) as the test part",
            file=log,
        )
    if distill.active and not args.quiet:
        print(f"distillation: training {distill.teachers} teachers first (temperature "
              f"{distill.temperature:g}, alpha {distill.alpha:g})", file=log)  # fmt: skip
    bar = _progress_bar(config.epochs, f"train {data.name}", args.quiet or args.json)
    curves: dict[str, list[float]] = {"loss": [], "train_acc": [], "test_acc": []}
    inputs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (xn, n, y): train, test

    def on_epoch(epoch: int, loss: float, result: TrainResult) -> None:
        if not inputs:  # the run's standardization and T are fixed: normalize once
            inputs.extend((*result.normalize(ds.X, ds.lengths), ds.y) for ds in (train, test))
        curves["loss"].append(loss)
        for key, normalized in zip(("train_acc", "test_acc"), inputs, strict=True):
            curves[key].append(_rate(result, *normalized))
        bar.set_postfix(loss=f"{loss:.4f}", acc=f"{curves['train_acc'][-1]:.3f}",
                        test=f"{curves['test_acc'][-1]:.3f}", refresh=False)  # fmt: skip
        bar.update()

    try:
        result = train_seq(train.X, train.lengths, train.y, train.n_classes, arch, config,
                           augment, on_epoch=on_epoch, average=average,
                           distill=distill)  # fmt: skip
    finally:
        bar.close()
    s = finish_seq(args.out, data, train, test, split, result,
                   (arch, config, augment, average, distill), curves, extra=extra)  # fmt: skip
    n_test, n_train = s["n_test"], s["n_train"]
    what = "the TEST file" if data.test is not None else "the held-out part of TRAIN"
    cut = s["test_windows_truncated"]
    cut = f", {cut} longer than T = {result.max_steps}: their last T steps" if cut else ""
    tested = (
        f"test accuracy {s['test_accuracy']:.3f} ({round(s['test_accuracy'] * n_test)}/"
        f"{n_test} {data.train.unit} of {what}{cut}), int8 {s['int8_test_accuracy']:.3f}"
        if n_test else "no test part"
    )
    print(
        f"{tested}, train "
        f"{s['train_accuracy']:.3f} ({n_train} {data.train.unit}), "
        f"{count(config.epochs, 'epoch')} in "
        f"{result.seconds:.2f} s, {s['params']} params, {s['macs']} MACs -> {s['out']}",
        file=log,
    )
    return s


def finish_seq(out, data: SeqData, train, test, split: dict, result: TrainResult, recipe,
               history: dict, board: dict | None = None,
               extra: dict | None = None) -> dict[str, Any]:  # fmt: skip
    """Evaluate a trained `result` (float and int8) on the train and test parts, write the
    model file (docs/model-format.md; `board`: an on-board run's figures, meta "board") and
    return the `--json` summary. recipe: (arch, config, augment, average, distill). Shared by
    `tinyattn train` and `tinyattn train --on-board` (host/board/onboard_seq.py)."""
    from tinyattn.learn.train import write_run

    arch, config, augment, average, distill = recipe
    if len(test.y):
        ev = evaluate_seq(result, train.X, train.lengths, test.X, test.lengths, test.y)
    else:  # --test-fraction 0: nothing held out, no test figure
        ev = dict.fromkeys(("float_accuracy", "int8_accuracy", "int8_float_agreement"))
        ev["truncated"] = 0
    metrics = {
        "train_accuracy": _accuracy(result, train),
        "test_accuracy": ev["float_accuracy"],
        "int8_test_accuracy": ev["int8_accuracy"],
    }
    meta = {
        "model": "seq-attn",
        **data.meta,
        "feature_names": train.feature_names,  # one name a channel
        "class_names": list(data.train.class_names),
        "train": {
            **asdict(config),
            "arch": asdict(arch),
            "augment": asdict(augment),
            "average": asdict(average),
            "distill": asdict(distill),
            "max_steps": result.max_steps,
            **split,  # train_idx/test_idx into the TRAIN file (held out: no --test)
        },
        "history": history,
        "metrics": metrics,
    }
    return write_run(out, result, meta, {
        "model": "seq-attn", "dataset": data.name, "seed": config.seed, "epochs": config.epochs,
        "test_accuracy": ev["float_accuracy"], "int8_test_accuracy": ev["int8_accuracy"],
        "int8_float_agreement": ev["int8_float_agreement"],
        "train_accuracy": metrics["train_accuracy"], "n_test": len(test.y),
        "n_train": len(train.y),
        "test_split": "test file" if data.test is not None else "held-out part of train",
        "test_windows_truncated": ev["truncated"], "seconds": result.seconds,
        "params": result.model.n_params, "macs": macs(result.model.ops),
        "max_steps": result.max_steps, "arch": asdict(arch), "augment": asdict(augment),
        "average": asdict(average), "distill": asdict(distill),
    }, board, extra)  # fmt: skip


# ----------------------------------------------------------------------------- --cv


def cross_validate_seq(
    ds: TSDataset, k: int, arch: SeqAttnConfig, config, augment: Augment, repeats: int = 1,
    on_fold=None, average: Average | None = None, distill: Distill | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """Repeated stratified k-fold over the TRAIN windows `ds` (repeat r: seed `config.seed +
    r` for the folds, init, order and augmentation); each fold standardizes, trains and
    calibrates its int8 path on its own training windows (T from them too); distillation's
    teachers are trained on the fold's training windows only."""
    from tinyattn.data.tabular import stratified_kfold

    folds = []
    for r in range(repeats):
        cfg = replace(config, seed=config.seed + r)
        splits = stratified_kfold(ds.y, k, cfg.seed, ds.class_names, ds.unit)
        for f, (tr, te) in enumerate(splits):
            res = train_seq(ds.X[tr], ds.lengths[tr], ds.y[tr], ds.n_classes, arch, cfg, augment,
                            average=average, distill=distill)  # fmt: skip
            ev = evaluate_seq(res, ds.X[tr], ds.lengths[tr], ds.X[te], ds.lengths[te], ds.y[te])
            fold = {
                "repeat": r, "seed": cfg.seed, "fold": f, "n_train": len(tr), "n_test": len(te),
                "train_accuracy": _accuracy(res, _subset(ds, tr)),
                "test_accuracy": ev["float_accuracy"], "int8_test_accuracy": ev["int8_accuracy"],
                "int8_float_agreement": ev["int8_float_agreement"],
                "test_windows_truncated": ev["truncated"], "seconds": res.seconds,
            }  # fmt: skip
            folds.append(fold)
            if on_fold is not None:
                on_fold(fold)
    return folds


def run_cv(args, data: SeqData, recipe: tuple, log) -> dict[str, Any]:
    """`tinyattn train --cv K` on the TRAIN windows; returns the `--json` summary."""
    from tinyattn.learn.train import cv_summary, run_folds

    arch, config, augment, average, distill = recipe
    k, repeats = args.cv, args.repeats or 1
    folds, seconds = run_folds(args, lambda on_fold: cross_validate_seq(
        data.train, k, arch, config, augment, repeats, on_fold, average, distill),
        str(data.train.source), data.train.unit, log)  # fmt: skip
    s = cv_summary(folds)
    print(
        f"{repeats} x {k}-fold CV inside TRAIN, seq-attn on {data.name} ({len(data.train.y)} "
        f"{data.train.unit}; the TEST file not read): accuracy float "
        f"{s['mean_test_accuracy']:.4f} ± {s['std_test_accuracy']:.3f}, int8 "
        f"{s['mean_int8_test_accuracy']:.4f} ± {s['std_int8_test_accuracy']:.3f} (mean ± std "
        f"over {len(folds)} folds; {seconds:.1f} s; no model file written with --cv)",
        file=log,
    )
    return {
        "model": "seq-attn", "dataset": data.name, "seed": config.seed,
        "seeds": [config.seed + r for r in range(repeats)], "cv": k, "repeats": repeats,
        "config": asdict(config), "arch": asdict(arch), "augment": asdict(augment),
        "average": asdict(average), "distill": asdict(distill), **s,
        "test_accuracy": s["mean_test_accuracy"],
        "int8_test_accuracy": s["mean_int8_test_accuracy"],
        "train_accuracy": s["mean_train_accuracy"], "folds": folds, "seconds": seconds,
        "epochs": config.epochs,
    }  # fmt: skip
