"""Host (CPython): a seq-rocket model on a board — its heap and its µs, as every command
estimates them.

`estimator(X, lengths, class_names, rates)` is the `board(model, norm_std)` that `fit_rocket`
prunes to (`RocketConfig.max_heap`, `max_us`): of the int8 blob `tinyattn export` would write
of the model (calibrated on a few TRAIN windows: a table's size does not depend on the
values), `heap` is tinyattn.board.heap.model_heap — the model and its Stream, what the search's
`--max-heap` bounds — and `us` is tinyattn.board.cost.predict_us at the board's `rates` (its
time model: what `--board NAME --max-ms` bounds; 0 without rates). `least` is the same for
the smallest model of a data's shapes (one feature, of one channel, at dilation 1), with its
work terms and operations: the search refuses a seq-rocket candidate before any fit when even
it is over the budget. A module of its own: it reaches the quantizer and the device runtime,
which rocketmodel (imported by both) cannot.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from tinyattn.learn import rocket
from tinyattn.learn.rocketmodel import RocketModel, build_rocket_from_ops, ops, rocket_ops

CALIBRATION = 8  # TRAIN windows the blob is calibrated on


def estimator(X: np.ndarray, lengths: np.ndarray, class_names: list[str],
              rates: tuple[tuple[str, float], ...] = (),
              ) -> Callable[[RocketModel, np.ndarray], dict[str, Any]]:  # fmt: skip
    """`board(model, norm_std)`: `{heap, us, terms}` of `model` on the board of `rates`, on
    raw TRAIN windows `X [N, T', C]` and their `lengths`."""
    from tinyattn.board.cost import predict_from_terms, terms
    from tinyattn.board.heap import features, model_heap
    from tinyattn.intmodel.blob import blob_bytes, read_blob
    from tinyattn.intmodel.quantize import quantize
    from tinyattn.learn.train import TrainResult, npz_model

    X, lengths, names = X[:CALIBRATION], np.asarray(lengths)[:CALIBRATION], list(class_names)
    rate = dict(rates)

    def board(model: RocketModel, norm_std: np.ndarray) -> dict[str, Any]:
        res = TrainResult(model, np.zeros_like(norm_std), norm_std, 0.0)
        blob = blob_bytes(quantize(npz_model(res, names), X, lengths))
        work = terms(read_blob(blob))
        return {"heap": model_heap(features(blob)), "us": predict_from_terms(work, rate),
                "terms": work}  # fmt: skip

    return board


@functools.lru_cache(maxsize=64)
def least(T: int, C: int, P: int, N: int, n_classes: int,
          rates: tuple[tuple[str, float], ...] = ()) -> dict[str, Any]:  # fmt: skip
    """`{heap, us, terms, ops}` of the smallest seq-rocket model of these shapes (T steps, C
    channels, pooling P, positions cap N, n_classes) on the board of `rates`: one feature, of
    one channel, at dilation 1."""
    one, zero = np.ones(1, np.int64), np.zeros(1, np.int64)
    p = rocket.RocketParams(one, one, np.array([[0, 1, 2]]), one, zero, one, zero, zero)
    N = N if N < -(-T // P) else 0
    model = build_rocket_from_ops(rocket_ops(T, C, P, 1.0, p, n_classes, N))
    model.rocket.set_params(p, np.zeros(1), np.ones(1))
    board = estimator(np.ones((1, T, C)), np.array([T]), [str(k) for k in range(n_classes)],
                      rates)  # fmt: skip
    return {**board(model, np.ones(C)), "ops": ops(p, T, C, P, n_classes, N)["ops"]}
