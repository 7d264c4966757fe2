"""Host (CPython): the board heap of a seq-rocket model, as every command estimates it.

`estimator(X, lengths, class_names)` is the `heap(model, norm_std)` that `fit_rocket` prunes
to (`RocketConfig.max_heap`): tinyattn.board.heap.model_heap — the model and its Stream, what
the search's `--max-heap` bounds — of the int8 blob `tinyattn export` would write of the model,
calibrated on a few of the TRAIN windows (a table's size does not depend on the values).
`least_heap` is that estimate for the smallest model of a data's shapes (one feature, of one
channel, at dilation 1): the search refuses a seq-rocket candidate before any fit when even it
is over the budget. A module of its own: it reaches the quantizer and the device runtime,
which rocketmodel (imported by both) cannot.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from tinyattn.learn import rocket
from tinyattn.learn.rocketmodel import RocketModel, build_rocket_from_ops, rocket_ops

CALIBRATION = 8  # TRAIN windows the blob is calibrated on


def estimator(X: np.ndarray, lengths: np.ndarray,
              class_names: list[str]) -> Callable[[RocketModel, np.ndarray], int]:  # fmt: skip
    """`heap(model, norm_std)`: the board's heap estimate of `model` and its Stream, on raw
    TRAIN windows `X [N, T', C]` and their `lengths`."""
    from tinyattn.board.heap import features, model_heap
    from tinyattn.intmodel.blob import blob_bytes
    from tinyattn.intmodel.quantize import quantize
    from tinyattn.learn.train import TrainResult, npz_model

    X, lengths, names = X[:CALIBRATION], np.asarray(lengths)[:CALIBRATION], list(class_names)

    def heap(model: RocketModel, norm_std: np.ndarray) -> int:
        res = TrainResult(model, np.zeros_like(norm_std), norm_std, 0.0)
        return model_heap(features(blob_bytes(quantize(npz_model(res, names), X, lengths))))

    return heap


@functools.lru_cache(maxsize=64)
def least_heap(T: int, C: int, P: int, N: int, n_classes: int) -> int:
    """The heap estimate of the smallest seq-rocket model of these shapes (T steps, C channels,
    pooling P, positions cap N, n_classes): one feature, of one channel, at dilation 1."""
    one, zero = np.ones(1, np.int64), np.zeros(1, np.int64)
    p = rocket.RocketParams(one, one, np.array([[0, 1, 2]]), one, zero, one, zero, zero)
    N = N if N < -(-T // P) else 0
    model = build_rocket_from_ops(rocket_ops(T, C, P, 1.0, p, n_classes, N))
    model.rocket.set_params(p, np.zeros(1), np.ones(1))
    heap = estimator(np.ones((1, T, C)), np.array([T]), [str(k) for k in range(n_classes)])
    return heap(model, np.ones(C))
