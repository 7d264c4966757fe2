"""Host (CPython): windows, the one data type — `X [B, T, C]` with `lengths [B]`.

A window is T steps of C channels; `lengths` says how many leading steps are data (None:
every step). A row of F features is a window of one step, `[B, 1, F]` (`as_windows`), so
every stage from the readers on takes the same pair.

- `strip_padding` / `stack_cases`: cases of unequal lengths as one zero-padded `X` and its
  `lengths` (the `.ts` reader's, and `from_channels_first`'s: sktime/aeon's numpy3D
  `(n, channels, steps)`, NaN-padded, or a list of `(channels, steps_i)` arrays).
- `valid_lengths`: the lengths checked against a model's T.
- `fit_to_model`: the long window rule (a window longer than T is classified on its last T).
- `InputView` / `fit_log_floor` / `fit_clip` / `model_view`: the input's log or clip view
  (docs/quantization.md "Input view").
- `normalize_windows`: per-channel `(x - mean) / std` at valid steps, 0 past them (after the
  input view when the model has one).
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


def strip_padding(case: np.ndarray) -> np.ndarray:
    """A case `[T_n, C]` without its trailing padding: the steps at its end where every
    channel is NaN (the `.ts` reader's `?` padding, sktime/aeon's NaN-padded numpy3D)."""
    valid = ~np.isnan(case).all(axis=1)  # (T_n,)
    return case[: (np.flatnonzero(valid)[-1] + 1) if valid.any() else 0]


def stack_cases(cases: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Cases `[T_n, C]` of one C as windows: `(X [N, T, C]` float64 zero-padded to the
    longest case, `lengths [N])`."""
    lengths = np.array([len(c) for c in cases], dtype=np.int64)  # (N,)
    N, T, C = len(cases), int(lengths.max()), cases[0].shape[1]
    X = np.zeros((N, T, C))  # (N, T, C)
    for n, case in enumerate(cases):
        X[n, : len(case)] = case
    return X, lengths


def from_channels_first(X) -> tuple[np.ndarray, np.ndarray]:
    """Windows as sktime and aeon hold them -> `(X [N, T, C], lengths [N])`, the `.ts`
    reader's pair: a 3-D array `(n, channels, steps)` ("numpy3D"), unequal lengths NaN-padded
    at the end (`strip_padding`: a window's trailing all-NaN steps are not data), or a list of
    2-D arrays `(channels, steps_i)` ("np-list"). ValueError for another shape, a window
    without a step, or windows of different channel counts."""
    if isinstance(X, (list, tuple)):
        cases = [np.asarray(x, dtype=np.float64) for x in X]
        bad = next((i for i, c in enumerate(cases) if c.ndim != 2), None)
        if bad is not None:
            raise ValueError(f"window {bad} has shape {cases[bad].shape}; a list of windows "
                             "holds 2-D arrays (channels, steps)")  # fmt: skip
    else:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 3:
            raise ValueError(f"windows of shape {X.shape}; give (n, channels, steps) or a list "
                             "of (channels, steps) arrays")  # fmt: skip
        cases = list(X)
    if not cases:
        raise ValueError("no windows (n = 0); give at least one")
    C = cases[0].shape[0]
    if C == 0:
        raise ValueError("windows of 0 channels; give at least one")
    other = next((i for i, c in enumerate(cases) if c.shape[0] != C), None)
    if other is not None:
        raise ValueError(f"window {other} has {cases[other].shape[0]} channels, window 0 has "
                         f"{C}; every window needs the same channels")  # fmt: skip
    cases = [strip_padding(c.T) for c in cases]  # (T_n, C) each
    empty = next((i for i, c in enumerate(cases) if len(c) == 0), None)
    if empty is not None:
        raise ValueError(f"window {empty} has no steps (or only NaN); drop it")
    return stack_cases(cases)


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

VIEW_LOG, VIEW_CLIP = 1, 2  # the blob header's input_view (0: the values as they are)


@dataclass(frozen=True, eq=False)
class InputView:
    """A model's per-channel view of its raw values, before the standardization
    (docs/quantization.md "Input view"). `params` are float32 `(C,)` arrays, as the blob
    holds them:
    - `VIEW_LOG`, `(floor,)`: `log(1 + x - floor[c])` where `x > floor[c]`, else 0;
    - `VIEW_CLIP`, `(lo, hi)`: `min(max(x, lo[c]), hi[c])`.
    A non-finite x (NaN, ±inf) passes unchanged; the arithmetic is float64 in the documented
    order (libm's `log`), as the device computes it."""

    kind: int
    params: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(np.asarray(p, np.float32) for p in self.params))

    def tile(self, n: int) -> InputView:
        """The view of `n` steps flattened to `[n·C]` (entry i reads channel i % C)."""
        return InputView(self.kind, tuple(np.tile(p, n) for p in self.params))

    def __call__(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        finite = np.isfinite(X)
        x = np.where(finite, X, 0.0)
        p = [v.astype(np.float64) for v in self.params]
        if self.kind == VIEW_CLIP:
            return np.where(finite, np.minimum(np.maximum(x, p[0]), p[1]), X)
        with np.errstate(over="ignore"):  # a finite x far above the floor: v, 1 + v may be inf
            d = x - p[0]
            w = np.where(d > 0.0, 1.0 + d, 1.0)  # log(1) = 0 at or below the floor
        return np.where(finite, _LOG(w).astype(np.float64), X)


def input_view(X: np.ndarray, view: InputView | None) -> np.ndarray:
    """`view(X)` for raw values `X [..., C]`; `view` None: the values as they are."""
    return X if view is None else view(X)


def _valid_values(X: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The values at the valid steps of `X [N, T, C]`, `(steps, C)` (NaN and inf kept)."""
    valid = np.arange(X.shape[1])[None, :] < np.asarray(lengths)[:, None]  # (N, T)
    return np.asarray(X, np.float64)[valid]


def fit_log_floor(X: np.ndarray, lengths: np.ndarray) -> InputView:
    """The log view, its `floor [C]` each channel's smallest value at the valid steps of
    training windows `X [N, T, C]` (NaN ignored; 0 for a channel without values)."""
    v = _valid_values(X, lengths)
    v = np.where(np.isnan(v), np.inf, v)
    low = v.min(axis=0) if len(v) else np.zeros(X.shape[2])
    return InputView(VIEW_LOG, (np.where(np.isfinite(low), low, 0.0),))


def fit_clip(X: np.ndarray, lengths: np.ndarray, percentile: float) -> InputView:
    """The clip view: per channel `hi` the `percentile`-th percentile of the finite values at
    the valid steps of training windows `X [N, T, C]` and `lo` their smallest, so the rare
    peaks above `hi` stop setting the int8 input's scale (docs/quantization.md "Input view").
    A channel without values: `lo = hi = 0`."""
    v = _valid_values(X, lengths)
    lo, hi = np.zeros(X.shape[2]), np.zeros(X.shape[2])
    for c in range(X.shape[2]):
        col = v[:, c][np.isfinite(v[:, c])]
        if col.size:
            lo[c], hi[c] = col.min(), np.percentile(col, percentile)
    return InputView(VIEW_CLIP, (lo, np.maximum(hi, lo)))


def model_view(ops: list[dict]) -> InputView | None:
    """The input view a model's op list carries (op 0's `log_floor` or `clip`), None without."""
    op = ops[0] if ops else {}
    if op.get("log_floor") is not None:
        return InputView(VIEW_LOG, (op["log_floor"],))
    if op.get("clip") is not None:
        return InputView(VIEW_CLIP, tuple(op["clip"]))
    return None


def view_text(view: InputView | None) -> str:
    """The view in words, per channel (four at most): `clip to [-1.35, 1.75]`."""

    def few(p: np.ndarray) -> str:
        text = ", ".join(f"{v:.4g}" for v in p[:4])
        return text + (f", … ({len(p)} channels)" if len(p) > 4 else "")

    if view is None:
        return "the values as they are"
    if view.kind == VIEW_LOG:
        return f"log(1 + x - floor), floor {few(view.params[0])}"
    lo, hi = view.params
    ranges = "; ".join(f"[{a:.4g}, {b:.4g}]" for a, b in zip(lo[:4], hi[:4], strict=True))
    return "clip to " + ranges + (f"; … ({len(lo)} channels)" if len(lo) > 4 else "")


def view_to_op(view: InputView | None) -> dict:
    """The op-0 entries that carry `view` in a model file (`model_view`'s inverse)."""
    if view is None:
        return {}
    values = [[float(v) for v in p] for p in view.params]
    return {"log_floor": values[0]} if view.kind == VIEW_LOG else {"clip": values}


def normalize_windows(X, lengths, mean, std, dtype=np.float64, view=None) -> np.ndarray:
    """Per-channel `(X - mean[c]) / std[c]` at the valid steps of `X [B, T', C]`, 0 elsewhere;
    `view` given: of the input view of `X` (`InputView`)."""
    X = input_view(np.asarray(X, dtype=np.float64), view)
    if X.ndim != 3 or X.shape[2] != len(mean):
        raise ValueError(f"windows of shape {X.shape}, expected [B, T, {len(mean)}]")
    n = valid_lengths(X, lengths, X.shape[1])
    valid = np.arange(X.shape[1])[None, :, None] < n[:, None, None]  # (B, T', 1)
    with np.errstate(invalid="ignore", over="ignore"):
        x = (X.astype(dtype) - np.asarray(mean, dtype)) / np.asarray(std, dtype)
    return np.where(valid, x, dtype(0)).astype(dtype, copy=False)
