"""Host (CPython): training loop, and the rows flow of `tinyattn train` (host/learn/traincli.py).

Windows (`--dataset basicmotions|japanesevowels`, `--ts TRAIN.ts [--test TEST.ts]`,
`seq-attn`) take their own flow, `host/learn/seqcli.py`; this module turns the recipe flags of
both into one `TrainConfig` (`config_from_args`, over each model's defaults) and runs rows
(`load_rows`, `run_one`, `run_cv`).

`fit` runs minibatch training (shuffled each epoch, last batch may be short) with Adam(W) or
SGD+momentum, optional label smoothing and cosine learning-rate decay; `train_split` fits the
input scaling on the train split, trains, evaluates and returns everything
`docs/model-format.md` stores; `cross_validate` runs repeated stratified k-fold
cross-validation, float and int8 (`int8_predict`: the exporter's `quantize` + `run_int8`).

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
How they were chosen (issue 2; `tools/tune_train.py`, in git history up to 95d3e7f, since replaced
by the product's one search, `tinyattn train --search`, which takes rows too): `tune_train
--flat` ran 5 x repeated
stratified 5-fold CV on the 120-row train split of seed 0 over epochs {100, 200, 300} x lr {1e-3,
3e-3, 1e-2, 3e-2} x weight decay {0, 0.1, 0.3, 1, 3} x {cosine, constant} and picks, among the
configurations without a collapsed weight row (above), the lowest mean fold log-loss: this one.
Issue 10 added two defaults, chosen by nested CV (`tune_train`: outer 2 x 5-fold,
seeds 0-1; inner 2 x 5-fold on each outer fold's training rows only; 16 candidates, label
smoothing {0, 0.1, 0.2, 0.3} x scaling {feature, center, shared, none}; ranked by inner int8
accuracy among candidates keeping int8/float argmax agreement >= 149/150):
- `label_smoothing = 0.2`: on Iris, mean inner accuracy with raw inputs 0.976 int8 / 0.978 float
  (0.3: 0.976 / 0.977; 0: 0.971 / 0.970); on Wine smoothing neither helps nor hurts (0.972 for
  0.2, 0.973 for 0). It keeps the logits from growing on rows already classified right.
- `scaling = "feature"` (per-feature standardization), although Iris's inner CV slightly
  prefers raw centimetres, "none" (mean inner int8 0.976 vs 0.969, chosen in 5 of 10 outer
  folds, one shared scale in 5 more; Wine's prefers "feature": 0.972, vs 0.68 shared and 0.59
  raw). On the 10 x 5 protocol below the difference is within noise (iris-attn float/int8:
  raw 0.967 / 0.965, feature 0.965 / 0.963; the standard error of a 50-fold mean is ~0.004),
  while raw inputs cost what the product exists to prove: one int8 input scale for four
  features on different ranges gives narrow ones (sepal width) a coarse step, and int8/float
  argmax agreement falls from 0.997 to 0.990 over the 1,500 fold rows (147/150 on the seed-0
  model, where issue 3 requires >= 149/150; 150/150 with "feature"). `--scaling none|shared|
  center|auto` remain ("auto": raw values if every feature's std on the train rows is within
  10x of the others' and |x| <= 10, else "feature").
Nested estimate (outer folds, seeds 0-1, "tune then train"): 0.960 float / 0.957 int8 on Iris
vs 0.943 / 0.947 for the issue-2 recipe on the same folds; 0.980 / 0.980 on Wine vs 0.978.
No early stopping and no best checkpoint: the epoch count is fixed, and the per-epoch test
accuracy in `history` is drawn in the report, never used to choose.

Accuracy protocol (issue 10, `tinyattn train --cv 5 --repeats 10`): stratified 5-fold over all
rows, repeated with split seeds 0-9 (`data.stratified_kfold`), each fold scaled, trained and
int8-calibrated on its own training rows. With these defaults: iris-attn 0.965 float / 0.963
int8 (issue-2 recipe: 0.959 / 0.958), Wine (iris-attn) 0.973 / 0.974; iris-myattn and the
current figures: `make bench-accuracy`. For scale, LDA gets 0.980 on the same Iris folds (`make
bench-accuracy`). The fixed seed-0 80/20 split stays the default for export and parity demos
(27/30 test rows with these defaults), not a gate: its test part holds four of the overlapping
versicolor/virginica rows (70, 77, 106, 133) and is among the hardest ~11 % of splits for every
method.

Seeds: the split and fold assignment use `seed`, the weight init uses `seed`, the minibatch
order uses `[seed, 1]`; the same seed gives the same arrays (float64, deterministic NumPy ops).

References: Loshchilov & Hutter (2017), "SGDR: Stochastic Gradient Descent with Warm Restarts"
(cosine decay); (2019) "Decoupled Weight Decay Regularization" (AdamW); Szegedy et al. (2016),
"Rethinking the Inception Architecture" (label smoothing); Varma & Simon (2006), "Bias in error
estimation when using cross-validation for model selection" (nested CV).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from tinyattn.data.tabular import (
    fit_standardizer,
    load_csv,
    load_dataset,
    standardize,
    stratified_kfold,
    stratified_split,
)
from tinyattn.data.timeseries import standardize_windows
from tinyattn.data.windows import Windows, fit_to_model, model_view
from tinyattn.intmodel.intref import quantize_input, run_int8
from tinyattn.intmodel.quantize import quantize
from tinyattn.learn.losses import softmax_cross_entropy
from tinyattn.learn.model import ModelFile, Sequential, build_model, save_model
from tinyattn.learn.optim import SGD, Adam

SCALINGS = ("auto", "feature", "center", "shared", "none")
AUTO_STD_RATIO = 10.0  # auto: raw values if every feature's std is within this factor of the rest
AUTO_MAX_ABS = 10.0  # ... and every |x| at most this (what a Xavier-initialized layer expects)


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
    label_smoothing: float = 0.2  # target (1 - eps)·onehot + eps/C; chosen by nested CV
    scaling: str = "feature"  # input scaling fitted on the train rows (`fit_scaling`)
    seed: int = 0  # split, init and shuffle; fixed, not searched
    test_fraction: float = 0.2  # 30 of Iris's 150 rows
    model: str = "iris-attn"


def _no_rows() -> np.ndarray:
    return np.zeros(0, np.int64)


@dataclass
class TrainResult:
    """A trained model — rows' `Sequential` or windows' `SeqModel` — with its input scaling
    (per feature or per channel) and the training wall time; a row split also keeps what
    `docs/model-format.md` stores of it (its rows, curves, figures and recipe)."""

    model: Sequential
    norm_mean: np.ndarray  # (F,) or (C,)
    norm_std: np.ndarray  # (F,) or (C,)
    seconds: float
    train_idx: np.ndarray = field(default_factory=_no_rows)
    test_idx: np.ndarray = field(default_factory=_no_rows)
    history: dict[str, list[float]] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    config: TrainConfig = field(default_factory=TrainConfig)

    @property
    def max_steps(self) -> int:
        """The model's T (a row model: windows of one step)."""
        return int(self.model.ops[0].get("steps", 1))

    def normalize(self, X: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Raw windows -> `(standardized [B, min(T', T), C], lengths cut to T)`; a window
        longer than the model's T is classified on its last T steps (the long window rule)."""
        X, n, _ = fit_to_model(X, lengths, self.max_steps)
        view = model_view(self.model.ops)
        return standardize_windows(X, n, self.norm_mean, self.norm_std, view), n


def resolve_scaling(X: np.ndarray, scaling: str) -> str:
    """`scaling`, with "auto" resolved on the train rows `X`: "none" if the features already
    share one scale (std ratio <= AUTO_STD_RATIO, |x| <= AUTO_MAX_ABS), else "feature"."""
    if scaling != "auto":
        return scaling
    std = X.std(axis=0)  # (F,)
    same_scale = std.min() > 0 and std.max() <= AUTO_STD_RATIO * std.min()
    return "none" if same_scale and np.abs(X).max() <= AUTO_MAX_ABS else "feature"


def fit_scaling(X: np.ndarray, scaling: str) -> tuple[np.ndarray, np.ndarray]:
    """`(mean [F], std [F])` of the model input `(x - mean) / std`, fitted on train rows `X`.

    feature: per-feature mean and std (standardization); center: per-feature mean, one std
    over all centred values; shared: one mean and one std over all values; none: raw features;
    auto: see `resolve_scaling`. The blob stores per-feature vectors either way, so the device
    is unaffected.
    """
    F = X.shape[1]
    scaling = resolve_scaling(X, scaling)
    if scaling == "feature":
        return fit_standardizer(X)
    if scaling == "center":
        mean = X.mean(axis=0)  # (F,)
        return mean, np.full(F, fit_standardizer((X - mean).reshape(-1, 1))[1][0])
    if scaling == "shared":
        mean, std = fit_standardizer(X.reshape(-1, 1))  # (1,), (1,)
        return np.full(F, mean[0]), np.full(F, std[0])
    if scaling == "none":
        return np.zeros(F), np.ones(F)
    raise ValueError(f"unknown scaling {scaling!r}; choose one of {', '.join(SCALINGS)}")


def smoothed_cross_entropy(
    logits: np.ndarray, y: np.ndarray, eps: float
) -> tuple[float, np.ndarray]:
    """Cross-entropy against `(1 - eps)·onehot(y) + eps/C`: (loss, dlogits), from the plain one.

    `-Σ_c t_c log p_c = (lse - z_y) + eps·(z_y - mean_c z)` and the gradient is `(p - t) / B`.
    """
    loss, dlogits = softmax_cross_entropy(logits, y)  # (B, C): (p - onehot) / B
    if eps == 0.0:
        return loss, dlogits
    B, C = logits.shape
    rows = np.arange(B)
    loss += eps * float(np.mean(logits[rows, y] - logits.mean(axis=1)))
    dlogits[rows, y] += eps / B
    dlogits -= eps / (C * B)
    return loss, dlogits


WARMUP = 0.05  # "onecycle": the first 5 % of the steps warm the rate up linearly


def learning_rate(config: TrainConfig, step: int, total_steps: int) -> float:
    """Learning rate for 0-based `step`: constant; cosine from `lr` down to 0; or one-cycle,
    a linear warm-up to `lr` over the first WARMUP of the steps, then that cosine over the rest
    (Smith & Topin 2019, "Super-convergence"; the warm-up as Goyal et al. 2017)."""
    if config.schedule == "constant":
        return config.lr
    if config.schedule == "onecycle":
        warm = max(1, round(WARMUP * total_steps))
        if step < warm:
            return config.lr * (step + 1) / warm
        step, total_steps = step - warm, max(1, total_steps - warm)
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
            loss, dlogits = smoothed_cross_entropy(logits, y[idx], config.label_smoothing)
            model.backward(dlogits)
            opt.step(learning_rate(config, step, total_steps))
            loss_sum += loss * len(idx)
            step += 1
        if on_epoch is not None:
            on_epoch(epoch, loss_sum / N)


def accuracy(model: Sequential, X: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(model.predict(X) == y)) if len(y) else float("nan")


def train_split(
    data: Windows,
    train_idx: np.ndarray,
    test_idx: np.ndarray,
    config: TrainConfig,
    progress: Callable[[float, float, float], None] | None = None,
    history: bool = True,
) -> TrainResult:
    """Fit the input scaling on `train_idx`, train, evaluate; `history` records per-epoch loss
    and accuracy (for the curves only: nothing is chosen by them) and calls `progress(loss,
    acc, test_acc)` once per epoch (e.g. to move a progress bar)."""
    rows = data.rows  # (N, F): windows of one step; the row models' scalings are per feature
    norm_mean, norm_std = fit_scaling(rows[train_idx], config.scaling)
    X = standardize(rows, norm_mean, norm_std)  # (N, F)
    X_train, y_train = X[train_idx], data.y[train_idx]
    X_eval = np.concatenate([X_train, X[test_idx]])  # one forward per epoch for both splits
    y_eval = np.concatenate([y_train, data.y[test_idx]])
    n_train = len(train_idx)
    model = build_model(config.model, data.n_features, data.n_classes, seed=config.seed)
    curves: dict[str, list[float]] = {"loss": [], "train_acc": [], "test_acc": []}

    def on_epoch(epoch: int, loss: float) -> None:
        hit = model.predict(X_eval) == y_eval
        train_acc = float(hit[:n_train].mean())
        test_acc = float(hit[n_train:].mean()) if len(test_idx) else float("nan")
        curves["loss"].append(loss)
        curves["train_acc"].append(train_acc)
        curves["test_acc"].append(test_acc)
        if progress is not None:
            progress(loss, train_acc, test_acc)

    t0 = time.perf_counter()
    fit(model, X_train, y_train, config, on_epoch if history else None)
    seconds = time.perf_counter() - t0
    metrics = {
        "train_accuracy": accuracy(model, X_train, y_train),
        "test_accuracy": accuracy(model, X[test_idx], data.y[test_idx]),
    }
    return TrainResult(
        model, norm_mean, norm_std, seconds, train_idx, test_idx, curves, metrics, config
    )


def npz_model(result: TrainResult, class_names: list[str]) -> ModelFile:
    """The trained model as `tinyattn export` reads it from a model file, without a file."""
    meta = {"ops": result.model.ops, "class_names": list(class_names)}
    state = result.model.state_dict()
    return ModelFile.from_params(meta, state, result.norm_mean, result.norm_std)


def int8_predict(data: Windows, result: TrainResult, rows: np.ndarray) -> np.ndarray:
    """Class indices of the int8 path as `tinyattn export` builds it — quantized and calibrated
    on the model's own train rows (`quantize`), run by the integer reference (`run_int8`)."""
    spec = quantize(npz_model(result, data.class_names), data.X[result.train_idx])
    logits_q = run_int8(spec, quantize_input(spec, data.X[rows]))  # (n, C) int64
    return np.argmax(logits_q, axis=1)


def int8_accuracy(data: Windows, result: TrainResult) -> float:
    """Test accuracy of the int8 path (`int8_predict`) on the model's test rows."""
    test_idx = result.test_idx
    if not len(test_idx):
        return float("nan")
    return float(np.mean(int8_predict(data, result, test_idx) == data.y[test_idx]))


def cross_validate(
    data: Windows,
    k: int,
    config: TrainConfig,
    rows: np.ndarray | None = None,
    repeats: int = 1,
    int8: bool = True,
    on_fold: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Repeated stratified k-fold over `rows` (default: all rows): repeat r uses seed
    `config.seed + r` for the folds (`data.stratified_kfold`), the init and the minibatch order.
    Each fold fits its scaling on, trains on, and (with `int8`) calibrates the int8 path on its
    own train rows only; `on_fold(fold)` is called after each. Pass `rows=train_idx` to tune
    without ever touching the test split."""
    rows = np.arange(len(data.y)) if rows is None else np.asarray(rows)
    folds = []
    for r in range(repeats):
        cfg = replace(config, seed=config.seed + r)
        splits = stratified_kfold(data.y[rows], k, cfg.seed, data.class_names)
        for f, (tr, te) in enumerate(splits):
            result = train_split(data, rows[tr], rows[te], cfg, history=False)
            y_test = data.y[rows[te]]
            x_test = standardize(data.rows[rows[te]], result.norm_mean, result.norm_std)
            pred = result.model.predict(x_test)  # (n_test,)
            pred_q = int8_predict(data, result, rows[te]) if int8 else None
            fold = {
                "repeat": r,
                "seed": cfg.seed,
                "fold": f,
                "n_train": len(tr),
                "n_test": len(te),
                "train_accuracy": result.metrics["train_accuracy"],
                "test_accuracy": float(np.mean(pred == y_test)),
                "int8_test_accuracy": None if pred_q is None else float(np.mean(pred_q == y_test)),
                "int8_float_agreement": None if pred_q is None else float(np.mean(pred_q == pred)),
                "seconds": result.seconds,
            }
            folds.append(fold)
            if on_fold is not None:
                on_fold(fold)
    return folds


def cv_summary(folds: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and std (over folds, ddof 0) of float and int8 test accuracy, and each repeat's
    mean (whose spread says how much the split alone moves a k-fold estimate)."""
    out: dict[str, Any] = {}
    for key in ("test_accuracy", "int8_test_accuracy", "int8_float_agreement", "train_accuracy"):
        acc = [f[key] for f in folds if f[key] is not None]
        if not acc:
            continue
        repeats = sorted({f["repeat"] for f in folds})
        per_repeat = [float(np.mean([f[key] for f in folds if f["repeat"] == r])) for r in repeats]
        out[f"mean_{key}"] = float(np.mean(acc))
        out[f"std_{key}"] = float(np.std(acc))
        out[f"repeat_means_{key}"] = per_repeat
    return out


def model_meta(data: Windows, result: TrainResult) -> dict[str, Any]:
    """The `meta` JSON of docs/model-format.md (ops are added by `save_model`)."""
    c = result.config
    return {
        "model": c.model,
        "dataset": data.name,
        "feature_names": list(data.feature_names),
        "target": data.target,  # the label column: `tinyattn predict --csv` leaves it out
        "class_names": list(data.class_names),
        "train": {
            **asdict(c),
            "scaling_resolved": resolve_scaling(data.rows[result.train_idx], c.scaling),
            "train_idx": [int(i) for i in result.train_idx],
            "test_idx": [int(i) for i in result.test_idx],
        },
        "history": result.history,
        "metrics": result.metrics,
    }


# ----------------------------------------------------------------------------- CLI


# TrainConfig fields that `tinyattn train` flags set (`--batch-size` -> batch_size); None in
# the parsed args = not given, so the model's own defaults apply (`config_from_args`).
RECIPE_FIELDS = ("epochs", "lr", "batch_size", "optimizer", "weight_decay", "momentum",
                 "schedule", "label_smoothing", "scaling", "test_fraction")  # fmt: skip


def given_flags(args: argparse.Namespace, fields: tuple[str, ...]) -> dict[str, Any]:
    """`{field: value}` of the flags the user gave (argparse default None = not given)."""
    return {f: getattr(args, f) for f in fields if getattr(args, f, None) is not None}


def check_cv_arguments(args: argparse.Namespace) -> None:
    from tinyattn.errors import CLIError

    if args.cv is not None and args.cv < 2:
        raise CLIError(f"--cv {args.cv}: needs at least 2 folds, e.g. --cv 5")
    if args.repeats is not None:
        if args.cv is None:
            raise CLIError("--repeats needs --cv K, e.g. --cv 5 --repeats 10")
        if args.repeats < 1:
            raise CLIError(f"--repeats {args.repeats}: must be at least 1")


def config_from_args(
    args: argparse.Namespace, base: TrainConfig | None = None, model: str = "iris-attn"
) -> TrainConfig:
    """`base` (default: `TrainConfig()`) with the recipe flags the user gave, `--seed` and
    `model`; CLIError naming the flag when a value cannot work. The one place the flags of
    both flows (rows and windows) become a TrainConfig."""
    from tinyattn.errors import CLIError

    c = replace(base or TrainConfig(), **given_flags(args, RECIPE_FIELDS), seed=args.seed,
                model=model)  # fmt: skip
    if c.epochs < 1:
        raise CLIError(f"--epochs {c.epochs}: must be at least 1")
    if c.batch_size < 1:
        raise CLIError(f"--batch-size {c.batch_size}: must be at least 1")
    if not c.lr > 0:
        raise CLIError(f"--lr {c.lr}: must be positive")
    if not 0.0 <= c.test_fraction < 1.0:
        raise CLIError(f"--test-fraction {c.test_fraction}: must be between 0 and 1")
    if not 0.0 <= c.label_smoothing < 1.0:
        raise CLIError(f"--label-smoothing {c.label_smoothing}: must be in [0, 1), e.g. 0.1")
    if not c.weight_decay >= 0.0:
        raise CLIError(f"--weight-decay {c.weight_decay}: must be 0 or more")
    check_cv_arguments(args)
    return c


def load_rows(args: argparse.Namespace) -> Windows:
    """The rows named by `--csv` (and `--target`) or `--dataset`; CLIError in one line."""
    from tinyattn.errors import CLIError

    if args.target is not None and args.csv is None:
        raise CLIError("--target needs --csv FILE (the vendored datasets know their target)")
    if args.test_fraction == 0:  # every row training is the Python API's (row_split)
        raise CLIError("--test-fraction 0 (no test part) is for --ts windows; on rows, "
                       "--cv 5 gives a figure from every row")  # fmt: skip
    try:
        if args.csv is not None:
            return load_csv(args.csv, target=args.target)
        return load_dataset(args.dataset or "iris")
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def count(n: int, noun: str) -> str:
    """'1 epoch', '2 epochs': a count with its noun in the right number."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _progress_bar(total: int, desc: str, quiet: bool, unit: str = "epoch"):
    from tqdm import tqdm

    return tqdm(
        total=total, desc=desc, unit=unit, file=sys.stderr, leave=False,
        disable=quiet or not sys.stderr.isatty(),
    )  # fmt: skip


def run_folds(args: argparse.Namespace, folds_of, source: str, unit: str, log):
    """`(folds, seconds)` of `--cv K --repeats R`, rows or windows alike: `folds_of(on_fold)`
    runs them under one progress bar (running float and int8 means), each fold is said in one
    line; CLIError naming `source` when the folds cannot be made (too few samples of a class
    for K folds, or an unquantizable fold)."""
    from tinyattn.errors import CLIError

    k, repeats = args.cv, args.repeats or 1
    bar = _progress_bar(k * repeats, f"{repeats} x {k}-fold cv", args.quiet or args.json, "fold")
    acc: dict[str, list[float]] = {"float": [], "int8": []}

    def on_fold(fold: dict[str, Any]) -> None:
        acc["float"].append(fold["test_accuracy"])
        acc["int8"].append(fold["int8_test_accuracy"])
        bar.set_postfix(float=f"{np.mean(acc['float']):.3f}", int8=f"{np.mean(acc['int8']):.3f}",
                        refresh=False)  # fmt: skip
        bar.update()

    t0 = time.perf_counter()
    try:
        folds = folds_of(on_fold)
    except ValueError as exc:
        raise CLIError(f"{source}: {exc}") from None
    finally:
        bar.close()
    seconds = time.perf_counter() - t0
    for f in folds:
        print(
            f"seed {f['seed']} fold {f['fold']}: test float {f['test_accuracy']:.3f}, int8 "
            f"{f['int8_test_accuracy']:.3f} ({f['n_test']} {unit}), train "
            f"{f['train_accuracy']:.3f}",
            file=log,
        )
    return folds, seconds


def write_run(out, result: TrainResult, meta: dict[str, Any], summary: dict[str, Any],
              board: dict | None = None, extra: dict | None = None) -> dict[str, Any]:  # fmt: skip
    """The one writer of `tinyattn train`'s rows and windows (and `--on-board` windows): the
    model file (docs/model-format.md: `meta`, "board" for an on-board run's figures, then
    `extra`, e.g. the model search's record under "search"); returns the `--json` summary
    with "out", "on_board" and `extra` added."""
    from tinyattn.errors import CLIError

    meta = {**meta, **({} if board is None else {"board": board}), **(extra or {})}
    try:
        path = save_model(out, result.model, result.norm_mean, result.norm_std, meta)
    except OSError as exc:
        raise CLIError(f"cannot write {out} ({exc.strerror}); check --out") from None
    summary = {**summary, "out": str(path)}
    if board is not None:
        summary["on_board"] = board
    return {**summary, **(extra or {})}


def run_cv(args: argparse.Namespace, data: Windows, config: TrainConfig, log) -> dict:
    """`tinyattn train --cv K` on rows; returns the `--json` summary."""
    k, repeats = args.cv, args.repeats or 1
    folds, seconds = run_folds(args, lambda on_fold: cross_validate(
        data, k, config, repeats=repeats, on_fold=on_fold), data.name, "rows", log)  # fmt: skip
    s = cv_summary(folds)
    print(
        f"{repeats} x {k}-fold CV, {config.model} on {data.name} ({len(data.y)} rows): test "
        f"accuracy float {s['mean_test_accuracy']:.4f} ± {s['std_test_accuracy']:.3f}, int8 "
        f"{s['mean_int8_test_accuracy']:.4f} ± {s['std_int8_test_accuracy']:.3f} (mean ± std "
        f"over {len(folds)} folds; {seconds:.1f} s; no model file written with --cv)",
        file=log,
    )
    return {
        "model": config.model, "dataset": data.name, "seed": config.seed,
        "seeds": [config.seed + r for r in range(repeats)], "cv": k, "repeats": repeats,
        "config": asdict(config), **s, "test_accuracy": s["mean_test_accuracy"],
        "int8_test_accuracy": s["mean_int8_test_accuracy"],
        "train_accuracy": s["mean_train_accuracy"], "folds": folds, "seconds": seconds,
        "epochs": config.epochs,
        "params": build_model(config.model, data.n_features, data.n_classes).n_params,
    }  # fmt: skip


def run_one(args: argparse.Namespace, data: Windows, config: TrainConfig, log,
            extra: dict | None = None) -> dict:  # fmt: skip
    """`tinyattn train` on rows, one split: train, write the model file, say the figures (the
    int8 path's too); returns the `--json` summary. `extra` joins the model file's meta and
    the summary (`search`: the model search's record)."""
    from tinyattn.errors import CLIError

    try:
        train_idx, test_idx = row_split(data, config)
    except ValueError as exc:
        raise CLIError(f"{data.name}: {exc}") from None
    bar = _progress_bar(config.epochs, f"train {data.name}", args.quiet or args.json)

    def progress(loss: float, acc: float, test_acc: float) -> None:
        bar.set_postfix(
            loss=f"{loss:.4f}", acc=f"{acc:.3f}", test=f"{test_acc:.3f}", refresh=False
        )
        bar.update()

    try:
        result = train_split(data, train_idx, test_idx, config, progress)
    finally:
        bar.close()
    meta = model_meta(data, result)
    if args.csv is not None:  # so parity/export can find the data again
        meta["csv"] = str(args.csv.resolve())
    m = result.metrics
    n_test, n_train = len(test_idx), len(train_idx)
    test, int8 = None, None  # no test part (test_fraction 0): no test figure
    if n_test:
        test = m["test_accuracy"]
        int8 = float(np.mean(int8_predict(data, result, test_idx) == data.y[test_idx]))
    s = write_run(args.out, result, meta, {
        "model": config.model, "dataset": data.name, "seed": config.seed,
        "epochs": config.epochs, "test_accuracy": test, "int8_test_accuracy": int8,
        "train_accuracy": m["train_accuracy"], "n_test": n_test, "n_train": n_train,
        "seconds": result.seconds, "params": result.model.n_params,
    }, extra=extra)  # fmt: skip
    tested = (f"test accuracy {test:.3f} ({round(test * n_test)}/{n_test}), int8 {int8:.3f}"
              if n_test else "no test part")  # fmt: skip
    print(
        f"{tested}, train {m['train_accuracy']:.3f} ({round(m['train_accuracy'] * n_train)}/"
        f"{n_train}), {count(config.epochs, 'epoch')} in {result.seconds:.2f} s, "
        f"{result.model.n_params} params -> {s['out']}",
        file=log,
    )
    return s


def row_split(data: Windows, config: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """`(train_idx, test_idx)` of one run on rows: a stratified `config.test_fraction` held
    out (seed `config.seed`), or every row training at 0 (the Python API, whose caller holds
    out its own test rows; `tinyattn train` refuses it on rows, `load_rows`)."""
    if config.test_fraction == 0:
        return np.arange(len(data.y)), np.zeros(0, np.int64)
    return stratified_split(data.y, config.test_fraction, config.seed, data.class_names)
