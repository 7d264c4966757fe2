"""Host (CPython): how the `tinyattn train` defaults were chosen — CV on the train split only.

For each candidate configuration, repeated stratified k-fold cross-validation runs over the
rows of the default 80/20 split's **train** part (120 Iris rows); the 30 test rows are never
trained on nor scored, so choosing by this table does not leak the test set. Reports mean
fold accuracy and mean fold log-loss, and picks, among configurations whose model (trained on
the whole train split) has no collapsed weight row, the one with the lowest mean log-loss (a
proper scoring rule: on 24-row folds accuracy moves in steps of 0.04 and most configurations
tie within noise, while log-loss separates over-fitted from well-regularized runs).

Collapsed row: a row of a weight matrix whose largest |entry| is below `COLLAPSE` times the
matrix's largest. Decoupled weight decay multiplies every weight by `1 - lr_t * wd` per step,
so the weights of a ReLU unit that has died (no gradient) shrink by `exp(-wd * sum(lr_t))` —
to ~1e-11 at lr 0.03 and decay 1 — while its undecayed bias stays. Such a unit carries nothing
and makes its per-output-channel int8 scale degenerate (the bias at scale `s_in * s_w[o]`
overflows; the exporter now floors such rows, commit efc1994, but a sane model should not need
it).

    .venv/bin/python -m tools.tune_train            # the grid below, a few minutes on one core
    .venv/bin/python -m tools.tune_train --weight-decay 1,3   # one axis replaced
    .venv/bin/python -m tools.tune_train --quick    # a smaller grid
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import replace

import numpy as np

from tinyattn.data import (
    fit_standardizer,
    load_dataset,
    standardize,
    stratified_kfold,
    stratified_split,
)
from tinyattn.losses import softmax_cross_entropy
from tinyattn.model import build_model
from tinyattn.train import TrainConfig, fit, train_split

COLLAPSE = 1e-3


def weakest_row(data, train_idx: np.ndarray, config: TrainConfig) -> float:
    """Smallest `max|W[o,:]| / max|W|` over the weight matrices of the model trained on the
    whole train split (the attention's Wq/Wk/Wv/Wo each counted as their own matrix)."""
    result = train_split(data, train_idx, train_idx[:0], config)  # no test rows at all
    ratios = []
    for layer in result.model.layers:
        for name, W, _ in layer.collect_params():
            if name.startswith("W"):
                ratios.append(float(np.abs(W).max(axis=1).min() / np.abs(W).max()))
    return min(ratios)


def cv_score(
    data, rows: np.ndarray, config: TrainConfig, k: int, repeats: int
) -> tuple[float, float]:
    """Mean (accuracy, log-loss) over `repeats` x `k` folds of `rows` (seeds 0..repeats-1)."""
    accs, losses = [], []
    for r in range(repeats):
        cfg = replace(config, seed=r)
        for tr, te in stratified_kfold(data.y[rows], k, seed=r):
            tr, te = rows[tr], rows[te]
            mean, std = fit_standardizer(data.X[tr])
            model = build_model(cfg.model, data.n_features, data.n_classes, seed=r)
            fit(model, standardize(data.X[tr], mean, std), data.y[tr], cfg)
            logits = model.forward(standardize(data.X[te], mean, std))
            accs.append(float(np.mean(logits.argmax(1) == data.y[te])))
            losses.append(softmax_cross_entropy(logits, data.y[te])[0])
    return float(np.mean(accs)), float(np.mean(losses))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    for axis in ("epochs", "lr", "weight-decay", "schedule", "batch-size"):
        parser.add_argument(f"--{axis}", help="comma-separated values replacing that grid axis")
    args = parser.parse_args()
    data = load_dataset("iris")
    train_idx, _ = stratified_split(data.y, 0.2, seed=0)  # the default split; test rows unused
    if args.quick:
        grid = {"epochs": [100, 300], "lr": [1e-3, 1e-2], "weight_decay": [0.0, 1e-2]}
    else:
        grid = {
            "epochs": [100, 200, 300],
            "lr": [1e-3, 3e-3, 1e-2, 3e-2],
            "weight_decay": [0.0, 0.1, 0.3, 1.0, 3.0],
        }
    grid["schedule"] = ["cosine", "constant"]
    grid["batch_size"] = [16]
    for key, cast in (("epochs", int), ("lr", float), ("weight_decay", float),
                      ("schedule", str), ("batch_size", int)):  # fmt: skip
        given = getattr(args, key)
        if given:
            grid[key] = [cast(v) for v in given.split(",")]
    print(f"{args.repeats} x {args.k}-fold CV on the {len(train_idx)} train rows only")
    print(f"{'epochs':>6} {'lr':>7} {'wd':>6} {'sched':>8} {'batch':>5} | {'acc':>6} "
          f"{'logloss':>8} {'weakest':>8} {'s':>5}")  # fmt: skip
    rows = []
    for values in itertools.product(*grid.values()):
        cfg = TrainConfig(**dict(zip(grid, values, strict=True)))
        t0 = time.perf_counter()
        acc, loss = cv_score(data, train_idx, cfg, args.k, args.repeats)
        weakest = weakest_row(data, train_idx, cfg)
        ok = weakest >= COLLAPSE
        rows.append((loss, acc, ok, cfg))
        print(
            f"{cfg.epochs:6d} {cfg.lr:7.0e} {cfg.weight_decay:6.0e} {cfg.schedule:>8} "
            f"{cfg.batch_size:5d} | {acc:6.3f} {loss:8.4f} {weakest:8.1e}{' ' if ok else '!'}"
            f"{time.perf_counter() - t0:5.1f}",
            flush=True,
        )
    loss, acc, _, best = min((r for r in rows if r[2]), key=lambda r: r[0])
    print(f"lowest CV log-loss, no collapsed row (! above): {best}")
    print(f"  log-loss {loss:.4f}, accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
