"""Host (CPython): windows, the one data type — `X [B, T, C]` with `lengths [B]`.

A window is T steps of C channels; `lengths` says how many leading steps are data (None:
every step). A row of F features is a window of one step, `[B, 1, F]` (`as_windows`), so
every stage from the readers on takes the same pair.

- `valid_lengths`: the lengths checked against a model's T.
- `fit_to_model`: the long window rule (a window longer than T is classified on its last T).
- `normalize_windows`: per-channel `(x - mean) / std` at valid steps, 0 past them.
"""

from __future__ import annotations

import numpy as np


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


def normalize_windows(X, lengths, mean, std, dtype=np.float64) -> np.ndarray:
    """Per-channel `(X - mean[c]) / std[c]` at the valid steps of `X [B, T', C]`, 0 elsewhere."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 3 or X.shape[2] != len(mean):
        raise ValueError(f"windows of shape {X.shape}, expected [B, T, {len(mean)}]")
    n = valid_lengths(X, lengths, X.shape[1])
    valid = np.arange(X.shape[1])[None, :, None] < n[:, None, None]  # (B, T', 1)
    with np.errstate(invalid="ignore", over="ignore"):
        x = (X.astype(dtype) - np.asarray(mean, dtype)) / np.asarray(std, dtype)
    return np.where(valid, x, dtype(0)).astype(dtype, copy=False)
