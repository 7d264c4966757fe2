# Host (CPython): the input grid, the int8 path's (and a rocket float path's) input equation.
"""Raw values onto the input grid, `xq = clamp(floor((x - mean)/std/s_in + 0.5), lo, hi)`
(docs/quantization.md, the input equation; `bits` 8, or a rocket op's wider grid): the rows'
form is intref.quantize_input's, the windows' `quantize_seq_input`. A module of its own so
that intref (the integer path) and floatref (a rocket blob's float path reads the same grid)
both take it without importing each other.
"""

from __future__ import annotations

import numpy as np

from tinyattn.data.windows import fit_to_model, input_view, valid_lengths
from tinyattn.intmodel.blob import QuantModelSpec, seq_tokens


def quantize_seq_input(
    blob: QuantModelSpec, X_raw: np.ndarray, lengths: np.ndarray | None = None
) -> np.ndarray:
    """Raw windows `X_raw [B, T', C]` (`lengths [B]`, None = all T' steps) -> `xq [B, S·P·C]`
    int8: `xq[t·C + c]` by the input equation with `mean[c]`, `std[c]` for `t < n`, 0 after
    (the tail of the last valid patch and every later patch). A window longer than the model's
    T gives the xq of its last T steps (the long window rule, `floatref.fit_to_model`);
    non-finite values at valid steps as `quantize_input`; whatever lies past a window's length
    is never read."""
    e = blob.ops[0].iparams
    T, C, P = e["T"], e["C"], e["P"]
    X = np.asarray(X_raw, dtype=np.float64)
    if X.ndim != 3 or X.shape[2] != C:
        raise ValueError(f"windows of shape {X.shape}, the blob expects [B, T', {C}]")
    n = valid_lengths(X, lengths, X.shape[1])
    # feature i of a window is its flat index t·C + c in the window as given, also where the
    # long window rule runs only its last T steps (the device counts the same way)
    t = np.arange(X.shape[1])[None, :]
    used = (t >= np.maximum(n - T, 0)[:, None]) & (t < n[:, None])  # (B, T')
    bad = np.argwhere(used[:, :, None] & ~np.isfinite(X))
    if bad.size:
        r, s, c = (int(v) for v in bad[0])
        raise ValueError(
            f"row {r}: features must be finite numbers, not NaN or inf (feature {s * C + c} is "
            f"{float(X[r, s, c])!r})"
        )
    X, n, _ = fit_to_model(X, n, T)
    B, Tx = X.shape[:2]
    valid = np.arange(Tx)[None, :] < n[:, None]  # (B, T')
    flat = np.where(valid[:, :, None], X, 0.0).reshape(B, Tx * C)  # (B, T'·C)
    mean = np.tile(np.asarray(blob.norm_mean, np.float32).astype(np.float64), Tx)
    std = np.tile(np.asarray(blob.norm_std, np.float32).astype(np.float64), Tx)
    view = None if blob.view is None else blob.view.tile(Tx)
    bits = e.get("bits", 8)
    xq = quantize_flat(flat, mean, std, blob.input_scale, view, bits)  # (B, T'·C)
    xq[~np.repeat(valid, C, axis=1)] = 0
    out = np.zeros((B, seq_tokens(T, P) * P * C), grid_dtype(bits))
    keep = min(Tx, T) * C
    out[:, :keep] = xq[:, :keep]
    return out


def grid_dtype(bits: int) -> type:
    """The type of xq on an input grid of `bits` (int8, or int32 for a wider grid)."""
    return np.int8 if bits <= 8 else np.int32


def quantize_flat(X, mean, std, input_scale, view=None, bits: int = 8) -> np.ndarray:
    bad = np.argwhere(~np.isfinite(X))
    if bad.size:
        r, i = (int(v) for v in bad[0])
        raise ValueError(
            f"row {r}: features must be finite numbers, not NaN or inf (feature {i} is "
            f"{float(X[r, i])!r})"
        )
    s_in = float(np.float32(input_scale))
    with np.errstate(over="ignore"):  # a finite feature may overflow to ±inf: it saturates
        X = input_view(X, view)  # view None: the raw values
        xq = np.floor((X - mean) / std / s_in + 0.5)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return np.clip(xq, lo, hi).astype(grid_dtype(bits))
