"""Host (CPython): training loop and the `tinyattn train` subcommand.

`fit` runs minibatch training (shuffled each epoch, last batch may be short) with Adam(W) or
SGD+momentum and an optional cosine learning-rate decay; `train_split` standardizes on the train
split, trains, evaluates and returns everything `docs/model-format.md` stores; `cross_validate`
runs stratified k-fold cross-validation.

Defaults and why. The source library's recipe (Xavier-uniform, zero biases, Adam lr 1e-3,
100 epochs, batch 16, constant rate) reaches 90 % test accuracy on its Iris split. Ours keeps
the init, batch size and 100 epochs (800 steps, ~0.2 s) and changes the optimization:
- `weight_decay = 1.0`, decoupled (AdamW) and on weight matrices only: the model has 475
  parameters for 120 rows and without decay drives the train loss to ~0, with over-confident,
  badly calibrated held-out predictions (CV log-loss 0.2-0.5 at rates >= 3e-3); strong decay
  keeps the logits moderate (CV log-loss 0.071). Decay 3.0 under-fits.
- `lr = 0.01` with cosine decay to 0: ten times the source's rate early, then small steps that
  settle instead of rattling around the minimum (cosine beats a constant rate at every strong
  decay setting).
- Not stronger: decay acts as `theta *= 1 - lr_t * wd` each step, so the weights of a ReLU unit
  that has died shrink by `exp(-wd * sum(lr_t))` (here exp(-4)); with lr 0.03, or 300 epochs,
  at this decay they collapse to ~1e-6..1e-11 next to a non-zero bias — a useless unit with a
  degenerate per-channel int8 scale.
How they were chosen: `python -m tools.tune_train` runs 5 x repeated stratified 5-fold
cross-validation on the 120-row **train split only** over epochs {100, 200, 300} x lr {1e-3,
3e-3, 1e-2, 3e-2} x weight decay {0, 0.1, 0.3, 1, 3} x {cosine, constant} and picks, among the
configurations without a collapsed weight row (above), the lowest mean fold log-loss (fold
accuracy is too coarse on 24 rows: most settings tie at 0.97 +- 0.01): this one, CV accuracy
0.973. The test rows were not used to choose anything, and the seed is the fixed default 0,
not searched.
On that default split the result is 27/30 test rows (0.900): its test part holds four of the
overlapping versicolor/virginica rows (70, 77, 106, 133). For scale, LDA fitted on the same
train rows gets 28/30 there, while over 200 seeded splits it averages 29.4/30: seed 0's split
is among the hardest ~11 %. `--cv 5` over all 150 rows (0.947) is the steadier estimate.

Seeds: the split and fold assignment use `seed`, the weight init uses `seed`, the minibatch
order uses `[seed, 1]`; the same seed gives the same arrays (float64, deterministic NumPy ops).

References: Loshchilov & Hutter (2017), "SGDR: Stochastic Gradient Descent with Warm Restarts"
(cosine decay); (2019) "Decoupled Weight Decay Regularization" (AdamW).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .data import (
    DATASETS,
    Dataset,
    fit_standardizer,
    load_csv,
    load_dataset,
    standardize,
    stratified_kfold,
    stratified_split,
)
from .losses import softmax_cross_entropy
from .model import MODELS, Sequential, build_model, save_model
from .optim import SGD, Adam


@dataclass(frozen=True)
class TrainConfig:
    """Hyperparameters; the defaults are the issue-2 recipe (see the module docstring)."""

    epochs: int = 100  # 800 AdamW steps on Iris, ~0.2 s
    lr: float = 0.01  # peak learning rate (cosine-decayed to 0)
    batch_size: int = 16  # as the source library
    optimizer: str = "adam"  # "adam" (AdamW) or "sgd" (with momentum)
    weight_decay: float = 1.0  # decoupled, on weight matrices only; lowest CV log-loss
    momentum: float = 0.9  # SGD only
    schedule: str = "cosine"  # "cosine" or "constant"
    seed: int = 0  # split, init and shuffle; fixed, not searched
    test_fraction: float = 0.2  # 30 of Iris's 150 rows
    model: str = "iris-attn"


@dataclass
class TrainResult:
    """A trained model with what `docs/model-format.md` stores and the wall time."""

    model: Sequential
    norm_mean: np.ndarray  # (F,)
    norm_std: np.ndarray  # (F,)
    train_idx: np.ndarray
    test_idx: np.ndarray
    history: dict[str, list[float]]
    metrics: dict[str, float]
    seconds: float
    config: TrainConfig = field(default_factory=TrainConfig)


def learning_rate(config: TrainConfig, step: int, total_steps: int) -> float:
    """Learning rate for 0-based `step`: constant, or cosine from `lr` down to 0."""
    if config.schedule == "constant":
        return config.lr
    return 0.5 * config.lr * (1.0 + math.cos(math.pi * step / total_steps))


def make_optimizer(model: Sequential, config: TrainConfig) -> Adam | SGD:
    if config.optimizer == "adam":
        return Adam(
            model.theta, model.grad, config.lr,
            weight_decay=config.weight_decay, decay_mask=model.decay_mask,
        )  # fmt: skip
    if config.optimizer == "sgd":
        return SGD(
            model.theta, model.grad, config.lr, config.momentum,
            weight_decay=config.weight_decay, decay_mask=model.decay_mask,
        )  # fmt: skip
    raise ValueError(f"unknown optimizer {config.optimizer!r}; choose adam or sgd")


def fit(
    model: Sequential,
    X: np.ndarray,
    y: np.ndarray,
    config: TrainConfig,
    on_epoch: Callable[[int, float], None] | None = None,
) -> None:
    """Minibatch training on normalized `X [N, F]`, labels `y [N]`; `on_epoch(epoch, loss)`."""
    rng = np.random.default_rng([config.seed, 1])  # minibatch order
    opt = make_optimizer(model, config)
    N, bs = len(X), config.batch_size
    steps_per_epoch = -(-N // bs)
    total_steps = config.epochs * steps_per_epoch
    step = 0
    for epoch in range(config.epochs):
        order = rng.permutation(N)
        loss_sum = 0.0
        for start in range(0, N, bs):
            idx = order[start : start + bs]
            logits = model.forward(X[idx], training=True)  # (b, C)
            loss, dlogits = softmax_cross_entropy(logits, y[idx])
            model.backward(dlogits)
            opt.step(learning_rate(config, step, total_steps))
            loss_sum += loss * len(idx)
            step += 1
        if on_epoch is not None:
            on_epoch(epoch, loss_sum / N)


def accuracy(model: Sequential, X: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(model.predict(X) == y)) if len(y) else float("nan")


def train_split(
    data: Dataset,
    train_idx: np.ndarray,
    test_idx: np.ndarray,
    config: TrainConfig,
    progress: Callable[[float, float, float], None] | None = None,
) -> TrainResult:
    """Standardize on `train_idx`, train, record per-epoch loss/accuracy; `progress(loss, acc,
    test_acc)` is called once per epoch (e.g. to move a progress bar)."""
    norm_mean, norm_std = fit_standardizer(data.X[train_idx])
    X = standardize(data.X, norm_mean, norm_std)  # (N, F)
    X_train, y_train = X[train_idx], data.y[train_idx]
    X_eval = np.concatenate([X_train, X[test_idx]])  # one forward per epoch for both splits
    y_eval = np.concatenate([y_train, data.y[test_idx]])
    n_train = len(train_idx)
    model = build_model(config.model, data.n_features, data.n_classes, seed=config.seed)
    history: dict[str, list[float]] = {"loss": [], "train_acc": [], "test_acc": []}

    def on_epoch(epoch: int, loss: float) -> None:
        hit = model.predict(X_eval) == y_eval
        train_acc = float(hit[:n_train].mean())
        test_acc = float(hit[n_train:].mean()) if len(test_idx) else float("nan")
        history["loss"].append(loss)
        history["train_acc"].append(train_acc)
        history["test_acc"].append(test_acc)
        if progress is not None:
            progress(loss, train_acc, test_acc)

    t0 = time.perf_counter()
    fit(model, X_train, y_train, config, on_epoch)
    seconds = time.perf_counter() - t0
    metrics = {
        "train_accuracy": accuracy(model, X_train, y_train),
        "test_accuracy": accuracy(model, X[test_idx], data.y[test_idx]),
    }
    return TrainResult(
        model, norm_mean, norm_std, train_idx, test_idx, history, metrics, seconds, config
    )


def cross_validate(
    data: Dataset,
    k: int,
    config: TrainConfig,
    rows: np.ndarray | None = None,
    progress: Callable[[float, float, float], None] | None = None,
) -> list[dict[str, Any]]:
    """Stratified k-fold over `rows` (default: all rows). Pass `rows=train_idx` to tune
    hyperparameters without ever touching the test split."""
    rows = np.arange(len(data.y)) if rows is None else np.asarray(rows)
    folds = []
    for f, (tr, te) in enumerate(stratified_kfold(data.y[rows], k, config.seed)):
        result = train_split(data, rows[tr], rows[te], config, progress)
        folds.append(
            {
                "fold": f,
                "n_train": len(tr),
                "n_test": len(te),
                "train_accuracy": result.metrics["train_accuracy"],
                "test_accuracy": result.metrics["test_accuracy"],
                "seconds": result.seconds,
            }
        )
    return folds


def model_meta(data: Dataset, result: TrainResult) -> dict[str, Any]:
    """The `meta` JSON of docs/model-format.md (ops are added by `save_model`)."""
    c = result.config
    return {
        "model": c.model,
        "dataset": data.name,
        "feature_names": list(data.feature_names),
        "class_names": list(data.class_names),
        "train": {
            **asdict(c),
            "train_idx": [int(i) for i in result.train_idx],
            "test_idx": [int(i) for i in result.test_idx],
        },
        "history": result.history,
        "metrics": result.metrics,
    }


# ----------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = TrainConfig()
    data = parser.add_argument_group("data")
    data.add_argument(
        "--dataset", choices=sorted(DATASETS), default="iris", help="vendored dataset (iris)"
    )
    data.add_argument(
        "--csv", type=Path, metavar="FILE", help="any numeric CSV with a header row instead"
    )
    data.add_argument("--target", metavar="COL", help="label column of --csv (default: last)")
    data.add_argument(
        "--test-fraction", type=float, default=d.test_fraction,
        help=f"stratified test share (default: {d.test_fraction})",
    )  # fmt: skip
    hp = parser.add_argument_group("training")
    hp.add_argument("--model", choices=MODELS, default=d.model, help="architecture")
    hp.add_argument("--epochs", type=int, default=d.epochs, help=f"default: {d.epochs}")
    hp.add_argument(
        "--seed", type=int, default=d.seed, help=f"split/init/shuffle seed (default: {d.seed})"
    )
    hp.add_argument("--lr", type=float, default=d.lr, help=f"peak learning rate ({d.lr})")
    hp.add_argument("--batch-size", type=int, default=d.batch_size, help=f"({d.batch_size})")
    hp.add_argument(
        "--optimizer", choices=("adam", "sgd"), default=d.optimizer,
        help="adam = AdamW, sgd = SGD with momentum (default: adam)",
    )  # fmt: skip
    hp.add_argument(
        "--weight-decay", type=float, default=d.weight_decay,
        help=f"on weight matrices (default: {d.weight_decay})",
    )  # fmt: skip
    hp.add_argument("--momentum", type=float, default=d.momentum, help="SGD momentum")
    hp.add_argument(
        "--schedule", choices=("cosine", "constant"), default=d.schedule,
        help=f"learning-rate schedule (default: {d.schedule})",
    )  # fmt: skip
    out = parser.add_argument_group("output")
    out.add_argument(
        "--out", type=Path, default=Path("build/model.npz"),
        help="model file (default: build/model.npz); not written with --cv",
    )  # fmt: skip
    out.add_argument(
        "--cv", type=int, metavar="K", help="stratified K-fold CV over all rows, each fold shown"
    )
    out.add_argument(
        "--json", action="store_true", help="print one JSON object as the last stdout line"
    )
    out.add_argument("--quiet", action="store_true", help="no progress bar")


def _config_from_args(args: argparse.Namespace) -> TrainConfig:
    from .cli import CLIError

    if args.epochs < 1:
        raise CLIError(f"--epochs {args.epochs}: must be at least 1")
    if args.batch_size < 1:
        raise CLIError(f"--batch-size {args.batch_size}: must be at least 1")
    if not args.lr > 0:
        raise CLIError(f"--lr {args.lr}: must be positive")
    if not 0.0 < args.test_fraction < 1.0:
        raise CLIError(f"--test-fraction {args.test_fraction}: must be between 0 and 1")
    if args.cv is not None and args.cv < 2:
        raise CLIError(f"--cv {args.cv}: needs at least 2 folds, e.g. --cv 5")
    return TrainConfig(
        epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, optimizer=args.optimizer,
        weight_decay=args.weight_decay, momentum=args.momentum, schedule=args.schedule,
        seed=args.seed, test_fraction=args.test_fraction, model=args.model,
    )  # fmt: skip


def _load_data(args: argparse.Namespace) -> Dataset:
    from .cli import CLIError

    if args.target is not None and args.csv is None:
        raise CLIError("--target needs --csv FILE (the vendored datasets know their target)")
    try:
        if args.csv is not None:
            return load_csv(args.csv, target=args.target)
        return load_dataset(args.dataset)
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def _progress_bar(total: int, desc: str, quiet: bool):
    from tqdm import tqdm

    bar = tqdm(
        total=total, desc=desc, unit="epoch", file=sys.stderr, leave=False,
        disable=quiet or not sys.stderr.isatty(),
    )  # fmt: skip

    def progress(loss: float, acc: float, test_acc: float) -> None:
        bar.set_postfix(
            loss=f"{loss:.4f}", acc=f"{acc:.3f}", test=f"{test_acc:.3f}", refresh=False
        )
        bar.update()

    return bar, progress


def main(args: argparse.Namespace) -> int:
    from .cli import CLIError

    config = _config_from_args(args)
    data = _load_data(args)
    log = sys.stderr if args.json else sys.stdout
    if args.cv is not None:
        bar, progress = _progress_bar(args.cv * config.epochs, f"{args.cv}-fold cv", args.quiet)
        t0 = time.perf_counter()
        try:
            folds = cross_validate(data, args.cv, config, progress=progress)
        except ValueError as exc:
            raise CLIError(str(exc)) from None
        finally:
            bar.close()
        seconds = time.perf_counter() - t0
        for f in folds:
            print(
                f"fold {f['fold']}: test {f['test_accuracy']:.3f} ({f['n_test']} rows), "
                f"train {f['train_accuracy']:.3f}",
                file=log,
            )
        mean_test = float(np.mean([f["test_accuracy"] for f in folds]))
        mean_train = float(np.mean([f["train_accuracy"] for f in folds]))
        print(f"{args.cv}-fold mean test accuracy {mean_test:.3f} ({seconds:.1f} s; no model "
              "file written with --cv)", file=log)  # fmt: skip
        summary = {
            "model": config.model, "dataset": data.name, "seed": config.seed,
            "epochs": config.epochs, "cv": args.cv, "folds": folds,
            "mean_test_accuracy": mean_test, "test_accuracy": mean_test,
            "train_accuracy": mean_train, "seconds": seconds,
            "params": build_model(config.model, data.n_features, data.n_classes).n_params,
        }  # fmt: skip
    else:
        try:
            train_idx, test_idx = stratified_split(data.y, config.test_fraction, config.seed)
        except ValueError as exc:
            raise CLIError(f"{data.name}: {exc}") from None
        bar, progress = _progress_bar(config.epochs, f"train {data.name}", args.quiet)
        try:
            result = train_split(data, train_idx, test_idx, config, progress)
        finally:
            bar.close()
        meta = model_meta(data, result)
        if args.csv is not None:  # so parity/export can find the data again
            meta["csv"] = str(args.csv.resolve())
            meta["target"] = args.target
        try:
            path = save_model(args.out, result.model, result.norm_mean, result.norm_std, meta)
        except OSError as exc:
            raise CLIError(f"cannot write {args.out} ({exc.strerror}); check --out") from None
        m = result.metrics
        n_test, n_train = len(test_idx), len(train_idx)
        print(
            f"test accuracy {m['test_accuracy']:.3f} ({round(m['test_accuracy'] * n_test)}/"
            f"{n_test}), train {m['train_accuracy']:.3f} ({round(m['train_accuracy'] * n_train)}/"
            f"{n_train}), {config.epochs} epochs in {result.seconds:.2f} s, "
            f"{result.model.n_params} params -> {path}",
            file=log,
        )
        summary = {
            "model": config.model, "dataset": data.name, "seed": config.seed,
            "epochs": config.epochs, "test_accuracy": m["test_accuracy"],
            "train_accuracy": m["train_accuracy"], "n_test": n_test, "n_train": n_train,
            "seconds": result.seconds, "params": result.model.n_params, "out": str(path),
        }  # fmt: skip
    if args.json:
        print(json.dumps(summary))
    return 0
