"""Host (CPython): `tinyattn train --model seq-rocket` — fit on TRAIN, evaluate, write the model.

The flow of seqcli (the same windows, split, evaluation and model file) with MiniRocket's
transform and a ridge head in place of a trained network (host/learn/rocketmodel.py): no
epochs and no seed lottery. The model is a function of TRAIN: MiniRocket's draws (the channel
combinations, the windows the biases come from) are the model's own parameter,
`--rocket-seed` (default 0), like its number of features; `--seed` only holds out the test
part when there is no TEST file (and assigns `--cv`'s folds).

    recipe: (RocketConfig, TrainConfig)   (the TrainConfig's seed and test_fraction only)
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from tinyattn.learn.rocketmodel import RocketConfig, RocketFit, fit_rocket

# The default budget (DESIGN §16: ≤ 150k integer operations an inference, as the search's
# default MAC limit, and its 32 KiB blob; no heap bound unless --rocket-max-heap: as the other
# families' plain `train`, flash and parity say when a board lacks the heap), the features
# MiniRocket draws before pruning to it, and at most 64 positions a window (a longer window's
# PPVs on 64 evenly spaced positions).
DEFAULT = RocketConfig(num_features=10_000, max_ops=150_000, max_bytes=32 * 1024, positions=64)
FLAGS = ("--rocket-features", "--rocket-keep", "--rocket-pool", "--rocket-positions",
         "--rocket-max-ops", "--rocket-max-heap", "--rocket-seed")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """seq-rocket's flags (`tinyattn train --model seq-rocket`)."""
    g = p.add_argument_group("seq-rocket (--model seq-rocket: MiniRocket features, a ridge head)")
    g.add_argument("--rocket-features", type=int, metavar="N",
                   help=f"features MiniRocket draws before pruning (default "
                        f"{DEFAULT.num_features})")  # fmt: skip
    g.add_argument("--rocket-keep", type=int, metavar="K",
                   help="prune to the K features that matter most (default: as many as fit "
                        "--rocket-max-ops)")  # fmt: skip
    g.add_argument("--rocket-pool", type=int, metavar="P",
                   help="sum P steps into one before the transform (long windows; default 1)")
    g.add_argument("--rocket-positions", type=int, metavar="N",
                   help=f"count each feature on at most N evenly spaced positions of the "
                        f"(pooled) window, 0 for every position (default {DEFAULT.positions})")
    g.add_argument("--rocket-max-ops", type=int, metavar="OPS",
                   help=f"integer operations one inference may take (default "
                        f"{DEFAULT.max_ops:,})")  # fmt: skip
    g.add_argument("--rocket-max-heap", type=int, metavar="B",
                   help="board heap the model and its Stream may take, as flash and parity "
                        "estimate it (default: no bound; the search's budget has one)")
    g.add_argument("--rocket-seed", type=int, metavar="S",
                   help=f"the generator of MiniRocket's draws (channel combinations, the "
                        f"windows the biases come from): a parameter of the model, which "
                        f"--seed does not change (default {DEFAULT.seed})")  # fmt: skip


def setup(args: argparse.Namespace, train) -> tuple[RocketConfig, Any]:
    """`(RocketConfig, TrainConfig)` from the flags; CLIError in one line for a bad value."""
    from tinyattn.errors import CLIError
    from tinyattn.learn.train import TrainConfig

    given = {"num_features": args.rocket_features, "keep": args.rocket_keep,
             "pool": args.rocket_pool, "positions": args.rocket_positions,
             "max_ops": args.rocket_max_ops,
             "max_heap": args.rocket_max_heap, "seed": args.rocket_seed}  # fmt: skip
    try:
        cfg = replace(DEFAULT, **{k: v for k, v in given.items() if v is not None})
    except ValueError as exc:
        raise CLIError(f"seq-rocket: {exc}") from None
    if cfg.pool > int(train.max_length):
        raise CLIError(f"--rocket-pool {cfg.pool}: longer than the longest TRAIN window "
                       f"({train.max_length} steps)")  # fmt: skip
    tf = args.test_fraction if args.test_fraction is not None else TrainConfig().test_fraction
    return cfg, replace(TrainConfig(), seed=args.seed or 0, test_fraction=tf)


def as_result(fit: RocketFit):
    """The fit as seqcli's evaluation and writer take it (a TrainResult)."""
    from tinyattn.learn.train import TrainResult

    return TrainResult(fit.model, fit.norm_mean, fit.norm_std, fit.seconds)


def run_one(args, data, recipe: tuple, log, extra: dict | None = None) -> dict[str, Any]:
    """Fit on the train part, evaluate on the test part, write the model file."""
    from tinyattn.learn import seqcli
    from tinyattn.learn.rocketboard import estimator
    from tinyattn.learn.seqtrain import evaluate_seq
    from tinyattn.learn.train import write_run

    cfg, config = recipe
    train, test, split = seqcli._split(data, config)
    if data.test is None and len(test.y):
        print(f"no --test: held out {len(test.y)} of {len(data.train.y)} TRAIN "
              f"{data.train.unit} (stratified {config.test_fraction:g}, seed {config.seed}) as "
              "the test part", file=log)  # fmt: skip
    if not args.quiet:
        limits = [f"≤ {v:,} {unit}" for v, unit in ((cfg.max_ops, "operations an inference"),
                  (cfg.max_bytes, "B blob"), (cfg.max_heap, "B heap")) if v is not None]
        limits += [f"≤ {cfg.max_us / 1000:g} ms an inference"] if cfg.max_us is not None else []
        print(f"seq-rocket: {cfg.num_features:,} MiniRocket features on {len(train.y)} TRAIN "
              f"{data.train.unit}, pruned to {cfg.keep or 'what fits'}"
              + (f" ({', '.join(limits)})" if limits else ""), file=log)  # fmt: skip
    try:
        board = estimator(train.X, train.lengths, list(data.train.class_names), cfg.rates)
        fit = fit_rocket(train.X, train.lengths, train.y, train.n_classes, cfg, board=board)
    except ValueError as exc:
        from tinyattn.errors import CLIError

        raise CLIError(f"seq-rocket: {exc}") from None
    result = as_result(fit)
    if len(test.y):
        ev = evaluate_seq(result, train.X, train.lengths, test.X, test.lengths, test.y)
    else:
        ev = dict.fromkeys(("float_accuracy", "int8_accuracy", "int8_float_agreement"))
        ev["truncated"] = 0
    metrics = {"train_accuracy": seqcli._accuracy(result, train),
               "test_accuracy": ev["float_accuracy"], "int8_test_accuracy": ev["int8_accuracy"]}
    h = fit.history
    meta = {
        "model": "seq-rocket", **data.meta, "feature_names": train.feature_names,
        "class_names": list(data.train.class_names),
        "train": {"rocket": asdict(cfg), "seed": config.seed,
                  "test_fraction": config.test_fraction, "max_steps": fit.max_steps,
                  "fit": h, **split},
        "history": {}, "metrics": metrics,
    }  # fmt: skip
    s = write_run(args.out, result, meta, {
        "model": "seq-rocket", "dataset": data.name, "seed": config.seed,
        "test_accuracy": ev["float_accuracy"], "int8_test_accuracy": ev["int8_accuracy"],
        "int8_float_agreement": ev["int8_float_agreement"],
        "train_accuracy": metrics["train_accuracy"], "n_test": len(test.y),
        "n_train": len(train.y),
        "test_split": "test file" if data.test is not None else "held-out part of train",
        "test_windows_truncated": ev["truncated"], "seconds": fit.seconds,
        "features": h["features"], "ops": h["ops"], "max_steps": fit.max_steps,
        "rocket": asdict(cfg),
    }, None, extra)  # fmt: skip
    n_test = s["n_test"]
    what = "the TEST file" if data.test is not None else "the held-out part of TRAIN"
    tested = (f"test accuracy {s['test_accuracy']:.3f} ({round(s['test_accuracy'] * n_test)}/"
              f"{n_test} {data.train.unit} of {what}), int8 {s['int8_test_accuracy']:.3f}"
              if n_test else "no test part")  # fmt: skip
    print(f"{tested}, train {s['train_accuracy']:.3f} ({s['n_train']} {data.train.unit}), "
          f"{h['features']} of {h['fitted_features']:,} features kept, {h['ops']:,} operations "
          f"an inference, ridge alpha {h['alpha']:.3g}, fitted in {fit.seconds:.1f} s -> "
          f"{s['out']}", file=log)  # fmt: skip
    return s


def run_cv(args, data, recipe: tuple, log) -> dict[str, Any]:
    """`tinyattn train --model seq-rocket --cv K` on the TRAIN windows (repeat r: seed + r for
    the folds; the transform's draws are the model's, `--rocket-seed`); no model file."""
    from tinyattn.data.tabular import stratified_kfold
    from tinyattn.learn.rocketboard import estimator
    from tinyattn.learn.seqtrain import evaluate_seq
    from tinyattn.learn.train import cv_summary, run_folds

    cfg, config = recipe
    ds, k, repeats = data.train, args.cv, args.repeats or 1

    def folds_of(on_fold):
        out = []
        for r in range(repeats):
            seed = config.seed + r
            for f, (tr, te) in enumerate(stratified_kfold(ds.y, k, seed, ds.class_names,
                                                          ds.unit)):  # fmt: skip
                board = estimator(ds.X[tr], ds.lengths[tr], list(ds.class_names), cfg.rates)
                try:
                    fit = fit_rocket(ds.X[tr], ds.lengths[tr], ds.y[tr], ds.n_classes, cfg,
                                     board=board)  # fmt: skip
                except ValueError as exc:
                    from tinyattn.errors import CLIError

                    raise CLIError(f"seq-rocket: {exc}") from None
                res = as_result(fit)
                ev = evaluate_seq(res, ds.X[tr], ds.lengths[tr], ds.X[te], ds.lengths[te],
                                  ds.y[te])  # fmt: skip
                tr_acc = float(np.mean(res.model.predict(*res.normalize(ds.X[tr], ds.lengths[tr]))
                                       == ds.y[tr]))  # fmt: skip
                fold = {"repeat": r, "seed": seed, "fold": f, "n_train": len(tr),
                        "n_test": len(te), "train_accuracy": tr_acc,
                        "test_accuracy": ev["float_accuracy"],
                        "int8_test_accuracy": ev["int8_accuracy"],
                        "int8_float_agreement": ev["int8_float_agreement"],
                        "test_windows_truncated": ev["truncated"], "seconds": fit.seconds}
                out.append(fold)
                on_fold(fold)
        return out

    folds, seconds = run_folds(args, folds_of, data.name, ds.unit, log)
    s = cv_summary(folds)
    print(f"{repeats} x {k}-fold CV, seq-rocket on {data.name} ({len(ds.y)} {ds.unit}): test "
          f"accuracy float {s['mean_test_accuracy']:.4f} ± {s['std_test_accuracy']:.3f}, int8 "
          f"{s['mean_int8_test_accuracy']:.4f} ± {s['std_int8_test_accuracy']:.3f} (mean ± std "
          f"over {len(folds)} folds; {seconds:.1f} s; no model file written with --cv)",
          file=log)  # fmt: skip
    return {"model": "seq-rocket", "dataset": data.name, "seed": config.seed, "cv": k,
            "repeats": repeats, "rocket": asdict(cfg), **s,
            "test_accuracy": s["mean_test_accuracy"],
            "int8_test_accuracy": s["mean_int8_test_accuracy"],
            "train_accuracy": s["mean_train_accuracy"], "folds": folds,
            "seconds": seconds}  # fmt: skip
