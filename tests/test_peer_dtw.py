"""The 1-NN DTW peer of `make bench-accuracy` (tools/bench_seq.dtw_1nn): dtaidistance's C DTW
on each window's valid steps, unequal lengths as they are, is the textbook dependent DTW (no
window, squared channel differences summed along the cheapest warping path, its square root),
checked against the dynamic program written out here; and 1-NN takes the nearest TRAIN
window's class. Skipped without the `peers` extra (`make install-peers`)."""

from __future__ import annotations

import numpy as np
import pytest

from tinyattn.data.timeseries import TSDataset

pytest.importorskip("dtaidistance", reason="the peers extra is absent: make install-peers")


def _dtw(a: np.ndarray, b: np.ndarray) -> float:
    """Dependent DTW, no window: sqrt of the least sum of squared differences on a path."""
    D = np.full((len(a) + 1, len(b) + 1), np.inf)
    D[0, 0] = 0.0
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = float(np.sum((a[i - 1] - b[j - 1]) ** 2))
            D[i, j] = cost + min(D[i - 1, j], D[i, j - 1], D[i - 1, j - 1])
    return float(np.sqrt(D[-1, -1]))


def _ds(rng: np.random.Generator, n: int, T: int, C: int) -> TSDataset:
    lengths = rng.integers(3, T + 1, size=n)
    X = rng.normal(size=(n, T, C))
    X[np.arange(T)[None, :] >= lengths[:, None]] = 99.0  # past a window's length: never read
    y = rng.integers(0, 3, size=n)
    return TSDataset(name="synthetic", X=X, lengths=lengths, y=y,
                     class_names=["a", "b", "c"])  # fmt: skip


@pytest.mark.parametrize("C", [1, 3])
def test_peer_dtw_is_the_textbook_dtw_on_unequal_lengths(C):
    from tinyattn.tools.bench_seq import dtw_1nn, dtw_distances

    rng = np.random.default_rng(C)
    train, test = _ds(rng, 9, 12, C), _ds(rng, 5, 15, C)
    d = dtw_distances(train, test)
    assert d.shape == (5, 9)
    for i in range(5):
        for j in range(9):
            want = _dtw(test.X[i, : test.lengths[i]], train.X[j, : train.lengths[j]])
            assert d[i, j] == pytest.approx(want, rel=1e-9, abs=1e-12), (i, j)
    want_acc = np.mean(train.y[np.argmin(d, axis=1)] == test.y)
    assert dtw_1nn(train, test)["float"] == pytest.approx(want_acc)
    # a TEST window equal to a TRAIN window's valid steps is its own nearest (distance 0)
    same = TSDataset(name="same", X=train.X[:3].copy(), lengths=train.lengths[:3].copy(),
                     y=train.y[:3].copy(), class_names=train.class_names)  # fmt: skip
    assert np.allclose(np.diag(dtw_distances(train, same)[:, :3]), 0.0)
