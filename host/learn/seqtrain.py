"""Host (CPython): training and evaluation of `seq-attn` on windows of unequal length.

`fit_seq` is `train.fit` with lengths: the same shuffled minibatches (order from `[seed, 1]`),
AdamW on weight matrices only (`train.make_optimizer`), cosine learning rate
(`train.learning_rate`) and label-smoothed cross-entropy (`train.smoothed_cross_entropy`), plus
optional data augmentation of each minibatch (`Augment`). `train_seq` fits the per-channel
standardization on the training windows, builds the model for the TRAIN split's T
(`seqmodel.default_max_steps`) and trains it; `evaluate_seq` gives float and int8 accuracy of a
trained model on other windows, the int8 path exactly as `tinyattn export` builds it
(calibrated on the training windows, `quantize` + `intref.run_int8`).

Augmentation (training only; a fresh draw per minibatch from the shuffle's generator):
- `shift`: each window's valid steps are rotated by a random `-shift..shift` steps (a circular
  shift within its own length, so padding stays padding). A periodic motion (BasicMotions' IMU)
  looks the same from any starting point; a spoken vowel does not.
- `scale`: each window and channel is multiplied by `exp(N(0, scale²))` (amplitude jitter) on
  the standardized values.
- `stretch`: each window's valid steps are linearly resampled to `n·exp(U(-stretch, stretch))`
  steps (at most T): a faster or slower rendition (speaking rate). Applied first.
- `noise`: Gaussian jitter `N(0, noise²)` added at every valid step (last).

Weight averaging (`Average`, training only; free at inference: the model ends with the averaged
weights, which export quantizes like any others): after each epoch the weights are folded into
an average of epoch-end weights — `swa`: the uniform mean of the last `swa·epochs` epochs
(stochastic weight averaging, Izmailov et al. 2018), `ema`: an exponential moving average with
decay `ema` per epoch (Polyak averaging). `WeightAverager` does the bookkeeping on a flat
parameter vector, so the PyTorch twin (tools/bench_train.py) averages the same way.

Knowledge distillation (`Distill`, training only; free at inference: the deployed model is the
same single student, same blob, same MACs): `teachers` models of the same architecture and
recipe are trained first by this same `fit_seq` on the same windows, teacher i with seed
`teacher_seed(seed, i)`; then the student (seed `seed`, so its init and minibatch order are the
run without distillation's) learns from
    loss = (1 - alpha)·CE(smoothed labels) + alpha·T²·KL(q_T ‖ p_T),
`q_T` the mean over teachers of `softmax(teacher logits / T)`, `p_T = softmax(student / T)`,
gradient `alpha·T·(p_T - q_T) / B` on the student's logits (`distill_loss`). The teachers see
the student's minibatch exactly: with augmentation on they run on the augmented windows of that
step; without it their logits are computed once for every training window (the same numbers,
in one batch) and looked up by row.
The per-dataset defaults and how they were chosen are in `seqdefaults.py`.

References: Um et al. (2017), "Data augmentation of wearable sensor data for Parkinson's disease
monitoring using convolutional neural networks" (time shift, scaling); Iwana & Uchida (2021),
"An empirical survey of data augmentation for time series classification with neural networks";
Izmailov et al. (2018), "Averaging weights leads to wider optima and better generalization"
(SWA); Polyak & Juditsky (1992), "Acceleration of stochastic approximation by averaging";
Hinton, Vinyals & Dean (2015), "Distilling the knowledge in a neural network"; Buciluǎ, Caruana
& Niculescu-Mizil (2006), "Model compression".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tinyattn.data.timeseries import fit_channel_standardizer, standardize_windows
from tinyattn.data.windows import InputView, fit_clip, fit_log_floor, input_view, view_to_op
from tinyattn.intmodel.floatref import fit_to_model
from tinyattn.intmodel.intref import quantize_input, run_int8
from tinyattn.intmodel.quantize import quantize
from tinyattn.learn.losses import softmax
from tinyattn.learn.seqmodel import (
    SeqAttnConfig,
    SeqModel,
    build_seq_model,
    default_max_steps,
    fold_batch_norm,
)
from tinyattn.learn.train import (
    TrainConfig,
    TrainResult,
    learning_rate,
    make_optimizer,
    npz_model,
    smoothed_cross_entropy,
)


@dataclass(frozen=True)
class Augment:
    """Minibatch augmentation of standardized windows (see the module docstring)."""

    shift: int = 0  # rotate each window's valid steps by up to ±shift steps (0: off)
    scale: float = 0.0  # per window and channel amplitude factor exp(N(0, scale²)) (0: off)
    stretch: float = 0.0  # resample each window to n·exp(U(-stretch, stretch)) steps (0: off)
    noise: float = 0.0  # add N(0, noise²) at every valid step (0: off)

    @property
    def active(self) -> bool:
        return self.shift > 0 or self.scale > 0.0 or self.stretch > 0.0 or self.noise > 0.0


@dataclass(frozen=True)
class Average:
    """Averaging of the epoch-end weights (see the module docstring); at most one is on."""

    swa: float = 0.0  # uniform mean over the last swa·epochs epochs (0: off, 1: every epoch)
    ema: float = 0.0  # exponential moving average, decay per epoch (0: off), e.g. 0.9

    def __post_init__(self) -> None:
        if not 0.0 <= self.swa <= 1.0:
            raise ValueError(f"Average(swa={self.swa}): a fraction of the epochs, 0..1")
        if not 0.0 <= self.ema < 1.0:
            raise ValueError(f"Average(ema={self.ema}): a decay per epoch, 0 <= ema < 1")
        if self.swa > 0.0 and self.ema > 0.0:
            raise ValueError("Average: swa and ema both on; choose one")

    @property
    def active(self) -> bool:
        return self.swa > 0.0 or self.ema > 0.0

    def first_epoch(self, epochs: int) -> int:
        """The first 0-based epoch whose end weights enter the average."""
        if self.swa > 0.0:
            return epochs - max(1, round(self.swa * epochs))
        return 0


class WeightAverager:
    """The running `Average` of flat parameter vectors, fed once per epoch (`update`)."""

    def __init__(self, average: Average, epochs: int) -> None:
        self.average, self.start = average, average.first_epoch(epochs)
        self.value: np.ndarray | None = None
        self.count = 0

    def update(self, epoch: int, theta: np.ndarray) -> None:
        """Fold the weights `theta` at the end of 0-based `epoch` into the average."""
        if epoch < self.start:
            return
        if self.value is None:
            self.value, self.count = np.array(theta, copy=True), 1
        elif self.average.ema > 0.0:
            self.value += (1.0 - self.average.ema) * (theta - self.value)
        else:  # swa: running mean
            self.count += 1
            self.value += (theta - self.value) / self.count


@dataclass(frozen=True)
class Distill:
    """Knowledge distillation from an ensemble of teachers (see the module docstring)."""

    teachers: int = 0  # teachers trained first, same architecture and recipe (0: off)
    temperature: float = 1.0  # T: both softmaxes of the soft term at logits / T
    alpha: float = 0.0  # weight of the soft term; 1 - alpha on the (smoothed) labels

    def __post_init__(self) -> None:
        if self.teachers < 0:
            raise ValueError(f"Distill(teachers={self.teachers}): a count, 0 or more")
        if not self.temperature > 0.0:
            raise ValueError(f"Distill(temperature={self.temperature}): must be > 0")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"Distill(alpha={self.alpha}): a weight, 0..1")

    @property
    def active(self) -> bool:
        return self.teachers > 0 and self.alpha > 0.0


def teacher_seed(seed: int, i: int) -> int:
    """The seed of teacher `i` of a run with seed `seed` (never a student seed below 1000)."""
    return 1000 * (seed + 1) + i


def teacher_probs(teachers: list[SeqModel], x: np.ndarray, lengths: np.ndarray,
                  temperature: float) -> np.ndarray:  # fmt: skip
    """`q_T [B, C]`: the mean over `teachers` of `softmax(logits / temperature)` on `x`."""
    q = sum(softmax(t.forward(x, lengths=lengths) / temperature) for t in teachers)
    return q / len(teachers)


def distill_loss(
    logits: np.ndarray, y: np.ndarray, q: np.ndarray, eps: float, d: Distill
) -> tuple[float, np.ndarray]:
    """`(1 - alpha)·CE(labels smoothed by eps) + alpha·T²·KL(q ‖ softmax(logits / T))`, mean
    over the batch: (loss, dlogits). `q [B, C]`: the teachers' softened probabilities."""
    B = logits.shape[0]
    T, a = d.temperature, d.alpha
    loss, dlogits = smoothed_cross_entropy(logits, y, eps)  # (B, C): (p - t) / B
    z = logits / T
    z = z - z.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))  # (B, C) log softmax(logits / T)
    log_q = np.log(np.where(q > 0.0, q, 1.0))  # 0·log 0 = 0
    kl = float(np.sum(q * (log_q - log_p))) / B
    loss = (1.0 - a) * loss + a * T * T * kl
    dlogits = (1.0 - a) * dlogits + (a * T / B) * (np.exp(log_p) - q)
    return loss, dlogits


def stretch_windows(x: np.ndarray, lengths: np.ndarray, new_lengths: np.ndarray) -> np.ndarray:
    """Each window's `lengths[b]` valid steps linearly resampled to `new_lengths[b]` steps
    (first and last step kept), 0 after; `[B, T, C]` in and out (`new_lengths <= T`)."""
    B, T, C = x.shape
    t = np.arange(T)[None, :]  # (1, T)
    n, m = lengths[:, None], new_lengths[:, None]  # (B, 1)
    src = t * ((n - 1) / np.maximum(m - 1, 1))  # (B, T) position in the source window
    i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)  # (B, T)
    i1 = np.minimum(i0 + 1, n - 1)
    w = (src - i0)[:, :, None]  # (B, T, 1)
    x0 = np.take_along_axis(x, i0[:, :, None], axis=1)
    x1 = np.take_along_axis(x, i1[:, :, None], axis=1)
    out = (1.0 - w) * x0 + w * x1  # (B, T, C)
    return np.where((t < m)[:, :, None], out, 0.0).astype(x.dtype, copy=False)


def augment_batch(
    x: np.ndarray, lengths: np.ndarray, aug: Augment, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """`(x', lengths')`: a new `[B, T, C]` batch — `x` stretched, rotated within each window's
    length, scaled and jittered (`aug`) — and its lengths; padded steps stay 0."""
    B, T, C = x.shape
    out = x
    if aug.stretch > 0.0:
        factor = np.exp(rng.uniform(-aug.stretch, aug.stretch, size=B))  # (B,)
        new = np.clip(np.rint(lengths * factor).astype(np.int64), 1, T)
        out, lengths = stretch_windows(out, lengths, new), new
    if aug.shift > 0:
        k = rng.integers(-aug.shift, aug.shift + 1, size=B)  # (B,)
        t = np.arange(T)[None, :]  # (1, T)
        src = (t - k[:, None]) % lengths[:, None]  # (B, T): valid steps rotate among themselves
        src = np.where(t < lengths[:, None], src, t)  # padding reads itself (0)
        out = np.take_along_axis(out, src[:, :, None], axis=1)
    if aug.scale > 0.0:
        out = out * np.exp(rng.normal(0.0, aug.scale, size=(B, 1, C)))
    if aug.noise > 0.0:
        valid = np.arange(T)[None, :, None] < lengths[:, None, None]  # (B, T, 1)
        out = out + np.where(valid, rng.normal(0.0, aug.noise, size=out.shape), 0.0)
    return out, lengths


def fit_seq(
    model: SeqModel,
    x: np.ndarray,
    lengths: np.ndarray,
    y: np.ndarray,
    config: TrainConfig,
    augment: Augment | None = None,
    on_epoch: Callable[[int, float], None] | None = None,
    average: Average | None = None,
    distill: Distill | None = None,
    teachers: list[SeqModel] | None = None,
) -> None:
    """Minibatch training on standardized windows `x [N, T, C]` (0 past `lengths [N]`), labels
    `y [N]`; `on_epoch(epoch, loss)` (with the epoch's own weights, not the average). The loop
    of `train.fit`, with lengths, augmentation and, at the end, the averaged weights. With an
    active `distill` the loss is `distill_loss` against `teachers` (trained models, see the
    module docstring); without one the loop is the same as before distillation existed."""
    rng = np.random.default_rng([config.seed, 1])  # minibatch order, then augmentation draws
    opt = make_optimizer(model, config)
    N, bs = len(x), config.batch_size
    total_steps = config.epochs * -(-N // bs)
    aug = augment if augment is not None and augment.active else None
    on = average is not None and average.active
    avg = WeightAverager(average, config.epochs) if on else None
    soft = distill if distill is not None and distill.active else None
    if soft is not None and not teachers:
        raise ValueError("fit_seq: distill is on but no teachers were given")
    q_all = None  # without augmentation: the teachers' soft targets of every window, once
    if soft is not None and aug is None:
        q_all = teacher_probs(teachers, x, lengths, soft.temperature)  # (N, classes)
    step = 0
    for epoch in range(config.epochs):
        order = rng.permutation(N)
        loss_sum = 0.0
        for start in range(0, N, bs):
            idx = order[start : start + bs]
            xb, nb = x[idx], lengths[idx]  # (b, T, C), (b,)
            if aug is not None:
                xb, nb = augment_batch(xb, nb, aug, rng)
            logits = model.forward(xb, training=True, lengths=nb)  # (b, classes)
            if soft is None:
                loss, dlogits = smoothed_cross_entropy(logits, y[idx], config.label_smoothing)
            else:
                q = q_all[idx] if q_all is not None else teacher_probs(teachers, xb, nb,
                                                                       soft.temperature)
                loss, dlogits = distill_loss(logits, y[idx], q, config.label_smoothing, soft)
            model.backward(dlogits)
            opt.step(learning_rate(config, step, total_steps))
            loss_sum += loss * len(idx)
            step += 1
        if avg is not None:
            avg.update(epoch, model.theta)
        if on_epoch is not None:
            on_epoch(epoch, loss_sum / N)
    if avg is not None and avg.value is not None:
        model.theta[...] = avg.value


# The one trained-result type is train.TrainResult (a seq model, its per-channel
# standardization, the wall time; `normalize` applies the long window rule); the old name
# stays importable.
SeqTrainResult = TrainResult


def fit_input_view(arch: SeqAttnConfig, X: np.ndarray, lengths: np.ndarray) -> InputView | None:
    """The input view `arch` asks for, fitted on training windows `X [N, T, C]`: the log view
    (floor: each channel's smallest value), the clip view (ceiling: the `arch.clip`-th
    percentile), or None (the values as they are)."""
    if arch.log_view:
        return fit_log_floor(X, lengths)
    return fit_clip(X, lengths, arch.clip) if arch.clip else None


def train_seq(
    X: np.ndarray,
    lengths: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    arch: SeqAttnConfig | None = None,
    config: TrainConfig | None = None,
    augment: Augment | None = None,
    max_steps: int | None = None,
    dtype=np.float64,
    on_epoch: Callable[[int, float, TrainResult], None] | None = None,
    average: Average | None = None,
    distill: Distill | None = None,
    teachers: list[TrainResult] | None = None,
) -> TrainResult:
    """A `seq-attn` model trained on raw windows `X [N, T', C]` with `lengths [N]`, labels `y`.

    The per-channel standardization is fitted on these windows; the model's T is `max_steps`
    (default: the longest window rounded up to a multiple of P). `config.seed` seeds the init,
    the minibatch order and the augmentation; `config.model`/`scaling`/`test_fraction` are
    not used here. `average` (None: off) leaves the model with its averaged weights. An active
    `distill` first trains its teachers (`train_teachers`; `result.seconds` counts them too)
    unless `teachers` gives them already trained (by `train_teachers` on these same windows,
    e.g. shared by several students in cross-validation).
    `on_epoch(epoch, loss, result)` is called after each epoch with the model as it stands
    (e.g. for a progress bar or accuracy curves; the epoch's weights, not the average); its
    own time is not counted in `result.seconds`.
    """
    arch = arch if arch is not None else SeqAttnConfig()
    config = config if config is not None else TrainConfig()
    lengths = np.asarray(lengths, np.int64)
    view = fit_input_view(arch, X, lengths)
    Xv = input_view(X, view)  # the model's view of the windows (X itself without a view)
    mean, std = fit_channel_standardizer(Xv, lengths)
    T = max_steps if max_steps is not None else default_max_steps(lengths, arch.patch)
    Xt, n, _ = fit_to_model(Xv, lengths, T)
    x = standardize_windows(Xt, n, mean, std).astype(dtype)  # (N, T', C), 0 at padding
    if x.shape[1] < T:  # every window shorter than T: pad the array (not the model) to T
        x = np.pad(x, ((0, 0), (0, T - x.shape[1]), (0, 0)))
    t0 = time.perf_counter()
    soft = distill if distill is not None and distill.active else None
    if soft is not None and teachers is None:
        teachers = train_teachers(X, lengths, y, n_classes, arch, config, augment, max_steps,
                                  dtype, average, soft.teachers)  # fmt: skip
    if soft is not None and len(teachers) != soft.teachers:
        raise ValueError(f"train_seq: {len(teachers)} teachers given, distill wants "
                         f"{soft.teachers}")  # fmt: skip
    t_teach = time.perf_counter() - t0
    model = build_seq_model(T, Xt.shape[2], n_classes, arch, seed=config.seed, dtype=dtype)
    model.ops[0].update(view_to_op(view))
    result = TrainResult(model, mean, std, 0.0)
    spent = [0.0]  # seconds inside on_epoch, not training

    def epoch_done(epoch: int, loss: float) -> None:
        t = time.perf_counter()
        on_epoch(epoch, loss, result)
        spent[0] += time.perf_counter() - t

    t0 = time.perf_counter()
    fit_seq(model, x, n, np.asarray(y), config, augment, epoch_done if on_epoch else None,
            average, soft, [t.model for t in teachers] if soft is not None else None)  # fmt: skip
    result.model = fold_batch_norm(model, x, n)  # the stem's norms into its convs (if any)
    result.seconds = time.perf_counter() - t0 - spent[0] + t_teach
    return result


def train_teachers(
    X: np.ndarray,
    lengths: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    arch: SeqAttnConfig,
    config: TrainConfig,
    augment: Augment | None = None,
    max_steps: int | None = None,
    dtype=np.float64,
    average: Average | None = None,
    count: int = 1,
) -> list[TrainResult]:
    """`count` teachers for distillation: `train_seq` on these windows and recipe (no
    distillation), teacher i with seed `teacher_seed(config.seed, i)`."""
    return [
        train_seq(X, lengths, y, n_classes, arch, replace(config, seed=teacher_seed(config.seed,
                  i)), augment, max_steps, dtype, average=average)
        for i in range(count)
    ]  # fmt: skip


def evaluate_seq(
    result: TrainResult,
    X_calib: np.ndarray,
    len_calib: np.ndarray,
    X: np.ndarray,
    lengths: np.ndarray,
    y: np.ndarray,
    int8: bool = True,
) -> dict[str, Any]:
    """Float and int8 accuracy on windows `X`, `lengths`, labels `y`; the int8 path calibrated
    on `X_calib`/`len_calib` (the training windows, as export). Windows longer than the model's
    T run their last T steps and are counted (`truncated`)."""
    xn, n = result.normalize(X, lengths)
    pred = result.model.predict(xn, n)  # (N,)
    out: dict[str, Any] = {
        "float_accuracy": float(np.mean(pred == y)),
        "truncated": int(np.sum(np.asarray(lengths) > result.max_steps)),
        "int8_accuracy": None,
        "int8_float_agreement": None,
    }
    if int8:
        names = [str(i) for i in range(result.model.layers[-1].n_out)]
        Xc, nc, _ = fit_to_model(X_calib, len_calib, result.max_steps)
        spec = quantize(npz_model(result, names), Xc, nc)
        Xt, nt, _ = fit_to_model(X, lengths, result.max_steps)
        pred_q = np.argmax(run_int8(spec, quantize_input(spec, Xt, nt), nt), axis=1)
        out["int8_accuracy"] = float(np.mean(pred_q == y))
        out["int8_float_agreement"] = float(np.mean(pred_q == pred))
    return out
