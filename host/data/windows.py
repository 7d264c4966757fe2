"""Host (CPython): windows, the one data type — `X [B, T, C]` with `lengths [B]`.

A window is T steps of C channels; `lengths` says how many leading steps are data (None:
every step). A row of F features is a window of one step, `[B, 1, F]` (`as_windows`), so
every stage from the readers on takes the same pair.

- `valid_lengths`: the lengths checked against a model's T.
- `fit_to_model`: the long window rule (a window longer than T is classified on its last T).
- `log_view` / `fit_log_floor`: the log view of the input (docs/quantization.md "Input view").
- `normalize_windows`: per-channel `(x - mean) / std` at valid steps, 0 past them (after the
  log view when the model has one).
- `Windows`: what every reader gives (`data.tabular`'s CSV rows as windows of one step,
  `data.timeseries`' `.ts` cases) and train, quantize, export, parity, predict, report and
  on-board training take.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Windows:
    """Samples `X [N, T, C]` float64 (zero past `lengths`), labels `y [N]` int64 in [0, K).
    A CSV's rows are windows of one step (`T = 1`, lengths 1, C = F features)."""

    name: str
    X: np.ndarray  # (N, T, C) float64; NaN = missing value (only if a .ts file allows them)
    lengths: np.ndarray  # (N,) int64, valid steps per sample, 1 <= lengths <= T
    y: np.ndarray  # (N,) int64, index into class_names; -1: no label (labels_required=False)
    class_names: list[str]  # a CSV: sorted labels; a .ts file: @classLabel's order
    source: Path | None = None  # the file read
    names: tuple[str, ...] = ()  # the CSV's feature columns (a .ts file: none, see below)
    target: str | None = None  # the CSV's label column (None: not from a named column)
    rate: float | None = None  # steps per second, when the file records it (a .ts comment)

    @property
    def n_channels(self) -> int:
        return self.X.shape[2]

    n_features = n_channels  # a row's features are a window's channels

    @property
    def max_length(self) -> int:
        return self.X.shape[1]

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    def in_class_order(self, class_names: list[str]) -> Windows:
        """These samples with `y` indexing `class_names` (the same classes, in another order:
        a TEST file whose @classLabel lists them differently); self when already so, and
        unchanged when the classes differ (the caller refuses that)."""
        if list(self.class_names) == list(class_names) or sorted(self.class_names) != sorted(
            class_names
        ):
            return self
        to = np.array([list(class_names).index(n) for n in self.class_names], np.int64)
        y = np.where(self.y >= 0, to[np.maximum(self.y, 0)], self.y)
        return replace(self, y=y, class_names=list(class_names))

    @property
    def feature_names(self) -> list[str]:
        """The CSV's column names, or one name a channel (`channel c`) for `.ts` windows."""
        return list(self.names) or [f"channel {c}" for c in range(self.n_channels)]

    @property
    def is_rows(self) -> bool:
        """Read as rows of named features (a CSV): windows of one step, not `.ts` windows."""
        return bool(self.names)

    @property
    def unit(self) -> str:
        """What a message calls the samples: "rows" (a CSV's) or "windows" (`.ts` windows)."""
        return "rows" if self.is_rows else "windows"

    @property
    def mask(self) -> np.ndarray:
        """`[N, T]` bool, True at valid steps."""
        return np.arange(self.max_length)[None, :] < np.asarray(self.lengths)[:, None]

    @property
    def rows(self) -> np.ndarray:
        """`X [N, F]` of windows of one step (a CSV's rows); ValueError for longer windows."""
        if self.max_length != 1:
            raise ValueError(f"{self.name}: windows of {self.max_length} steps, not rows")
        return self.X[:, 0, :]


def as_windows(X: np.ndarray) -> np.ndarray:
    """`X` as windows: rows `[B, F]` become windows of one step `[B, 1, F]`; windows
    `[B, T, C]` are returned as they are."""
    X = np.asarray(X)
    return X[:, None, :] if X.ndim == 2 else X


def valid_lengths(X: np.ndarray, lengths: np.ndarray | None, max_steps: int) -> np.ndarray:
    """`lengths [B]` (int64) of windows `X [B, T', C]`: all `T'` steps if None; each must lie
    in 1..max_steps (the model's T). The functions that take a user's windows apply the long
    window rule first (`fit_to_model`: a longer window is classified on its last T steps)."""
    B, T = X.shape[0], X.shape[1]
    n = np.full(B, T, np.int64) if lengths is None else np.asarray(lengths, np.int64)
    if n.shape != (B,):
        raise ValueError(f"{n.size} lengths for {B} windows")
    if B and (n.min() < 1 or n.max() > min(T, max_steps)):
        r = int(np.argmax((n < 1) | (n > min(T, max_steps))))
        raise ValueError(
            f"window {r} has {int(n[r])} steps, the model takes 1..{max_steps} (T); a longer "
            "window is classified on its last T steps (tinyattn.intmodel.floatref.fit_to_model)"
        )
    return n


def fit_to_model(
    X: np.ndarray, lengths: np.ndarray | None, max_steps: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """The long window rule (docs/quantization.md, "Windows longer than T"): a window of
    `n > T` steps is classified on its **last** T steps, `X[n-T : n]` (the most recent, as a
    board's sliding window holds them), on the host references, `predict`, `parity`, export's
    figures and the device API alike. Returns `(X [B, min(T', T), C], lengths cut to T, the
    number of windows shortened)`; lengths None: every step of X is valid. A window of
    `n <= T` steps is returned as it is (its first `n` steps)."""
    X = np.asarray(X)
    B, Tx = X.shape[0], X.shape[1]
    n = np.full(B, Tx, np.int64) if lengths is None else np.asarray(lengths, np.int64)
    long = np.flatnonzero(n > max_steps)
    if not long.size:
        return X[:, :max_steps], n, 0
    out = X[:, :max_steps].copy()
    for i in long:
        out[i] = X[i, n[i] - max_steps : n[i]]
    return out, np.minimum(n, max_steps), int(long.size)


_LOG = np.frompyfunc(math.log, 1, 1)  # libm's log, as CPython's math and the MicroPython port


def log_view(X: np.ndarray, floor: np.ndarray | None) -> np.ndarray:
    """The log view of raw values `X [..., C]` (docs/quantization.md "Input view"): per channel
    `v = x - floor[c]`, `log(1 + v)` where `v > 0`, else 0; a non-finite x (NaN, ±inf) passes
    unchanged. `floor` is float32 (as the blob holds it), the arithmetic float64 in this order
    with libm's `log`, as the device computes it. `floor` None: the values as they are."""
    if floor is None:
        return X
    X = np.asarray(X, dtype=np.float64)
    finite = np.isfinite(X)
    with np.errstate(over="ignore"):  # a finite x far above the floor: v, 1 + v may be inf
        d = np.where(finite, X, 0.0) - np.asarray(floor, np.float32).astype(np.float64)
        w = np.where(d > 0.0, 1.0 + d, 1.0)  # log(1) = 0 at or below the floor
    return np.where(finite, _LOG(w).astype(np.float64), X)


def fit_log_floor(X: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The log view's `floor [C]`, float32: each channel's smallest value at the valid steps of
    training windows `X [N, T, C]` (NaN ignored; 0 for a channel without values)."""
    valid = np.arange(X.shape[1])[None, :] < np.asarray(lengths)[:, None]  # (N, T)
    v = np.where(np.isnan(X[valid]), np.inf, X[valid])  # (valid steps, C)
    low = v.min(axis=0) if len(v) else np.zeros(X.shape[2])
    return np.where(np.isfinite(low), low, 0.0).astype(np.float32)


def model_log_floor(ops: list[dict]) -> np.ndarray | None:
    """The log view's floor a model's op list carries (op 0's `log_floor`), None without."""
    floor = ops[0].get("log_floor") if ops else None
    return None if floor is None else np.asarray(floor, np.float32)


def normalize_windows(X, lengths, mean, std, dtype=np.float64, log_floor=None) -> np.ndarray:
    """Per-channel `(X - mean[c]) / std[c]` at the valid steps of `X [B, T', C]`, 0 elsewhere;
    `log_floor` given: of the log view of `X` (`log_view`)."""
    X = log_view(np.asarray(X, dtype=np.float64), log_floor)
    if X.ndim != 3 or X.shape[2] != len(mean):
        raise ValueError(f"windows of shape {X.shape}, expected [B, T, {len(mean)}]")
    n = valid_lengths(X, lengths, X.shape[1])
    valid = np.arange(X.shape[1])[None, :, None] < n[:, None, None]  # (B, T', 1)
    with np.errstate(invalid="ignore", over="ignore"):
        x = (X.astype(dtype) - np.asarray(mean, dtype)) / np.asarray(std, dtype)
    return np.where(valid, x, dtype(0)).astype(dtype, copy=False)
