# Host (CPython): seq-rocket models and windows for the tests of its integer path.
"""`rocket_cases()`: name -> (int8 blob, raw windows [N, T', C], lengths [N]) of small
`seq-rocket` models fitted on TRAIN windows and quantized on them, with windows that exercise
the integer path: full and cut at random lengths, one channel and several, pooling with
T % P != 0, levels over many decades (several block exponents a batch), and a real problem
(JapaneseVowels: 12 channels, 7-29 steps), a positions cap (N = 7: steps of 1..10).
`unchecked_blob(spec)`: a spec's bytes without the writer's self-check (for blobs the readers
must refuse).
"""

from __future__ import annotations

import functools
from unittest import mock

import numpy as np

from tinyattn.data.timeseries import load_ts_dataset
from tinyattn.intmodel import blob as tb
from tinyattn.intmodel.quantize import quantize
from tinyattn.learn.model import ModelFile
from tinyattn.learn.rocketmodel import RocketConfig, fit_rocket


def synthetic(seed: int, N: int, T: int, C: int, K: int, lo: int, decades: float = 0.0):
    """`(X [N, T, C], lengths, y)`: K classes of a bump at a class-dependent place, noise, and
    a level of 10**U(-decades, decades) a window; lengths in lo..T (the first window full)."""
    rng = np.random.default_rng(seed)
    y = np.arange(N) % K
    t = np.arange(T)[None, :, None]
    centre = (y[:, None, None] + 1) * T / (K + 1)
    X = np.exp(-(((t - centre) / (T / 10)) ** 2)) * (1 + np.arange(C))[None, None, :]
    X = X + 0.3 * rng.normal(size=(N, T, C))
    X *= 10.0 ** rng.uniform(-decades, decades, N)[:, None, None]
    n = rng.integers(lo, T + 1, N)
    n[0] = T
    X[np.arange(T)[None, :] >= n[:, None]] = 0.0
    return X, n.astype(np.int64), y


def _case(X, n, y, K, cfg, Xt, nt, names=None):
    fit = fit_rocket(X, n, y, K, cfg)
    mf = ModelFile(fit.model, fit.norm_mean, fit.norm_std,
                   {"class_names": names or [f"c{k}" for k in range(K)]})  # fmt: skip
    T = fit.max_steps  # test windows longer than T: their first T steps (a window of <= T)
    return tb.blob_bytes(quantize(mf, X[:, :T], np.minimum(n, T))), Xt[:, :T], np.minimum(nt, T)


@functools.lru_cache(maxsize=1)
def rocket_cases() -> dict[str, tuple[bytes, np.ndarray, np.ndarray]]:
    """name -> (int8 blob, raw windows, lengths)."""
    out = {}
    # rounds of half the features (drop 0.5): the pruned cases keep groups of several features
    rc = functools.partial(RocketConfig, drop=0.5)
    cfg = rc(num_features=840, keep=24, seed=1)
    X, n, y = synthetic(0, 60, 40, 1, 3, 40)  # one channel, equal lengths
    Xt, nt, _ = synthetic(1, 30, 40, 1, 3, 9)  # windows cut at 9..40 steps
    out["uni"] = _case(X, n, y, 3, cfg, Xt, nt)
    X, n, y = synthetic(2, 60, 50, 3, 4, 12)  # three channels, 12..50 steps
    Xt, nt, _ = synthetic(3, 30, 50, 3, 4, 1)
    out["multi"] = _case(X, n, y, 4, rc(num_features=840, keep=40, seed=2), Xt, nt)
    X, n, y = synthetic(4, 60, 47, 2, 3, 20, decades=3.0)  # pooled; levels over 6 decades
    Xt, nt, _ = synthetic(5, 30, 47, 2, 3, 1, decades=3.0)
    out["pooled"] = _case(X, n, y, 3, rc(num_features=420, keep=30, pool=3, seed=3),
                          Xt, nt)  # fmt: skip
    X, n, y = synthetic(6, 60, 64, 2, 3, 8)  # at most 7 positions a window, 8..64 steps
    Xt, nt, _ = synthetic(7, 30, 64, 2, 3, 1)
    out["capped"] = _case(X, n, y, 3, rc(num_features=420, keep=30, positions=7, seed=4), Xt,
                          nt)  # fmt: skip
    tr, te = load_ts_dataset("japanesevowels", "train"), load_ts_dataset("japanesevowels", "test")
    out["jv"] = _case(tr.X, tr.lengths, tr.y, tr.n_classes,
                      rc(num_features=840, keep=60), te.X[:40], te.lengths[:40],
                      tr.class_names)  # fmt: skip
    return out


def unchecked_blob(spec) -> bytes:
    """The bytes of `spec` without the writer's self-check (`blob_bytes` reads back what it
    writes): a blob the readers must refuse."""
    with mock.patch.object(tb, "read_blob", lambda *a, **k: None):
        return tb.blob_bytes(spec)
