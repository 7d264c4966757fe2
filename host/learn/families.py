"""Host (CPython): the model families the search chooses among, on the same folds.

A search candidate (`search.Candidate`) names its family; everything the search does with a
candidate that depends on the family goes through its `Family` here, as the device runtime's
ops register with their builders (attention_build.KINDS):

- `cost(data, cand)`: `{macs, bytes, heap}` from shapes only (an untrained model's blob: the
  size, the buffers and the work do not depend on the weights' values);
- `score(data, cand, tr, te, seed)`: trained on rows `tr` with `seed`, its held-out int8 and
  float accuracy and float log-loss on rows `te` (the int8 path calibrated on `tr`, as export
  does);
- `applies(data)`: whether it takes this data; `first(data)`: whether the `family` stage
  starts from it (the family a plain `tinyattn train` gives this data: the one-standard-error
  pick keeps it unless another family is better on the folds);
- `candidate(data, base)`: its candidate for the `family` stage;
- `label(cand)`: one line for the tables.

Families: `seq-attn` (patch or conv stem, attention blocks; the stages after `family` vary
it), `row-attn` (the row model of `tinyattn train --csv`: features as tokens, for rows only),
`seq-rocket` (MiniRocket's features and a ridge head, pruned to the budget: no seed lottery,
its draws are the model's own `RocketConfig.seed`, which `score`'s seed does not change; the
`family` stage prefers it within one standard error, and its `arch` stage tries the
positions cap and the pooling, `rocket_grid`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tinyattn.data.windows import Windows, view_to_op
from tinyattn.learn.seqmodel import SeqAttnConfig, build_seq_model, default_max_steps, macs
from tinyattn.learn.seqtrain import fit_input_view

Candidate = Any  # tinyattn.learn.search.Candidate (which imports this module)


@dataclass(frozen=True)
class Family:
    name: str
    cost: Callable[[Windows, Candidate], dict[str, int]]
    score: Callable[[Windows, Candidate, np.ndarray, np.ndarray, int], dict[str, Any]]
    applies: Callable[[Windows], bool]
    first: Callable[[Windows], bool]
    candidate: Callable[[Windows, Candidate], Candidate]
    label: Callable[[Candidate], str]


def is_rows(data: Windows) -> bool:
    """Rows of a CSV (or a tabular dataset) searched as windows of one step."""
    return int(np.max(data.lengths)) == 1 and data.X.shape[1] == 1


# -- seq-attn ----------------------------------------------------------------------------------


def shape_spec(data: Windows, arch: SeqAttnConfig) -> dict[str, Any]:
    """The quantized spec of an untrained `arch` on these windows (calibrated on four): its
    blob has the trained model's size and buffers, which do not depend on the weights' values."""
    from tinyattn.intmodel.quantize import quantize
    from tinyattn.learn.train import TrainResult, npz_model

    C = data.X.shape[2]
    T = default_max_steps(data.lengths, arch.patch)
    arch = replace(arch, stem_norm=False)  # the norms fold into the stem's convs
    model = build_seq_model(T, C, data.n_classes, arch)
    model.ops[0].update(view_to_op(fit_input_view(arch, data.X, data.lengths)))  # its bytes
    res = TrainResult(model, np.zeros(C), np.ones(C), 0.0)
    few = slice(0, min(4, len(data.X)))
    X = data.X[few, :T]
    return quantize(npz_model(res, data.class_names), X, np.minimum(data.lengths[few], T))


def cost(data: Windows, arch: SeqAttnConfig) -> dict[str, int]:
    """`{macs, bytes, heap}` of `arch` on these windows, from shapes only (`shape_spec`); heap:
    the runtime's own estimate for the model and, for windows (which the app streams), its
    Stream (tinyattn.board.heap.model_heap); a row model never streams."""
    from tinyattn.intmodel.blob import blob_bytes

    C = data.X.shape[2]
    T = default_max_steps(data.lengths, arch.patch)
    ops = build_seq_model(T, C, data.n_classes, arch).ops
    return blob_cost(blob_bytes(shape_spec(data, arch)), macs(ops))


def blob_cost(blob: bytes, n_macs: int) -> dict[str, Any]:
    """A candidate's cost from its (untrained) blob: `{macs, bytes, heap, terms}` (the heap
    estimate of tinyattn.board.heap, the work terms of the boards' time models)."""
    from tinyattn.board.cost import terms
    from tinyattn.board.heap import features, model_heap
    from tinyattn.intmodel.blob import read_blob

    return {"macs": n_macs, "bytes": len(blob), "heap": model_heap(features(blob)),
            "terms": terms(read_blob(blob))}  # fmt: skip



def _seq_score(data: Windows, cand: Candidate, tr, te, seed: int) -> dict[str, Any]:
    from tinyattn.learn.losses import softmax
    from tinyattn.learn.seqtrain import evaluate_seq, train_seq

    X, n, y = data.X, data.lengths, data.y
    res = train_seq(X[tr], n[tr], y[tr], data.n_classes, cand.arch,
                    replace(cand.train, seed=seed), cand.augment, average=cand.average,
                    distill=cand.distill)  # fmt: skip
    ev = evaluate_seq(res, X[tr], n[tr], X[te], n[te], y[te])
    xn, nn = res.normalize(X[te], n[te])
    p = softmax(res.model.forward(xn, lengths=nn))  # (n_te, classes)
    loss = float(-np.mean(np.log(p[np.arange(len(te)), y[te]] + 1e-12)))
    return {"int8": ev["int8_accuracy"], "float": ev["float_accuracy"], "logloss": loss,
            "seconds": res.seconds}  # fmt: skip


def _seq_cost(data: Windows, cand: Candidate) -> dict[str, int]:
    return cost(data, cand.arch)


# -- row-attn ----------------------------------------------------------------------------------


def _row_score(data: Windows, cand: Candidate, tr, te, seed: int) -> dict[str, Any]:
    from tinyattn.learn.losses import softmax
    from tinyattn.learn.train import int8_predict, standardize, train_split

    res = train_split(data, tr, te, replace(cand.train, seed=seed), history=False)
    rows = standardize(data.rows[te], res.norm_mean, res.norm_std)
    p = softmax(res.model.forward(rows))  # (n_te, classes)
    y = data.y[te]
    loss = float(-np.mean(np.log(p[np.arange(len(te)), y] + 1e-12)))
    int8 = float(np.mean(int8_predict(data, res, te) == y))
    return {"int8": int8, "float": float(np.mean(np.argmax(p, axis=1) == y)), "logloss": loss,
            "seconds": res.seconds}  # fmt: skip


def _row_cost(data: Windows, cand: Candidate) -> dict[str, int]:
    from tinyattn.intmodel.blob import blob_bytes
    from tinyattn.intmodel.quantize import quantize
    from tinyattn.learn.model import build_model
    from tinyattn.learn.train import TrainResult, npz_model

    F = data.X.shape[2]
    model = build_model(cand.train.model, F, data.n_classes, seed=0)
    res = TrainResult(model, np.zeros(F), np.ones(F), 0.0)
    return blob_cost(blob_bytes(quantize(npz_model(res, data.class_names), data.X[:4])),
                     macs(model.ops))  # fmt: skip


def _row_candidate(data: Windows, base: Candidate) -> Candidate:
    from tinyattn.learn.train import TrainConfig

    d = TrainConfig()  # plain `tinyattn train --csv`'s recipe, the model it trains
    return replace(base, family="row-attn",
                   train=replace(d, model="iris-attn", seed=base.train.seed,
                                 test_fraction=base.train.test_fraction))  # fmt: skip


def _row_label(cand: Candidate) -> str:
    t = cand.train
    return (f"row {t.model} | ep{t.epochs} lr{t.lr:g} wd{t.weight_decay:g} "
            f"ls{t.label_smoothing:g} {t.scaling}")  # fmt: skip


# -- seq-rocket --------------------------------------------------------------------------------


def rocket_within(cand: Candidate, budget, data: Windows) -> Candidate:
    """The candidate pruned to the budget: its fit keeps the features that fit `budget`'s MACs
    (as integer operations an inference), its blob bytes, its heap and, on a board with a time
    model (`--max-ms`), its µs as that model predicts them from the fitted blob's op list
    (rocketmodel.fit_rocket, rocketboard.estimator)."""
    r = cand.rocket
    timed = budget.max_us is not None  # then the µs take the default MAC limit's place
    ops = budget.max_macs if budget.max_macs is not None or timed else r.max_ops
    return replace(cand, rocket=replace(r, max_ops=ops, max_bytes=budget.max_bytes,
                                        max_heap=budget.max_heap,
                                        max_us=budget.max_us if timed else None,
                                        rates=budget.rates if timed else ()))  # fmt: skip


def _rocket_score(data: Windows, cand: Candidate, tr, te, seed: int) -> dict[str, Any]:
    from tinyattn.learn.losses import softmax
    from tinyattn.learn.rocketboard import estimator
    from tinyattn.learn.rocketcli import as_result
    from tinyattn.learn.rocketmodel import fit_rocket
    from tinyattn.learn.seqtrain import evaluate_seq

    X, n, y, r = data.X, data.lengths, data.y, cand.rocket
    # the model's draws are its own (r.seed): a fold scores the model `train` writes, whatever
    # the repeat's seed, which only assigns the folds
    fit = fit_rocket(X[tr], n[tr], y[tr], data.n_classes, r,
                     board=estimator(X[tr], n[tr], list(data.class_names), r.rates))  # fmt: skip
    res = as_result(fit)
    ev = evaluate_seq(res, X[tr], n[tr], X[te], n[te], y[te])
    xn, nn = res.normalize(X[te], n[te])
    p = softmax(res.model.forward(xn, lengths=nn))  # (n_te, classes)
    loss = float(-np.mean(np.log(p[np.arange(len(te)), y[te]] + 1e-12)))
    return {"int8": ev["int8_accuracy"], "float": ev["float_accuracy"], "logloss": loss,
            "seconds": fit.seconds}  # fmt: skip


def _rocket_cost(data: Windows, cand: Candidate) -> dict[str, int]:
    """Bounds the fit keeps (rocket_within): its operations, its blob's bytes and its heap (the
    board's estimate of the model and its Stream); its work terms for a board's time model are
    a one-feature model's of this data's shapes (`rocketboard.least`: the fit prunes to the
    budget's µs with the fitted blob's own). A budget that even the one-feature model exceeds
    refuses the candidate before any fit."""
    from tinyattn.learn.rocketboard import least

    r = cand.rocket
    T, C = int(np.max(data.lengths)), data.X.shape[2]
    low = least(T, C, r.pool, r.positions, data.n_classes, r.rates)
    return {"macs": low["ops"] if r.max_ops is None else max(r.max_ops, low["ops"]),
            "bytes": r.max_bytes, "heap": max(r.max_heap or 0, low["heap"]),
            "terms": low["terms"]}  # fmt: skip


def rocket_grid(data: Windows, base: Candidate) -> list[Candidate]:
    """The positions cap and the pooling the `arch` stage tries for a seq-rocket candidate:
    the start, 32 and 128 positions, and 32 positions of pairs of steps (those that differ on
    this data's longest window)."""
    T = int(np.max(data.lengths))
    r = base.rocket
    grid = [(r.positions, r.pool), (32, 1), (128, 1), (32, 2)]
    out, seen = [], set()
    for positions, pool in grid:
        S = -(-T // pool)
        key = (positions if positions < S else 0, pool)
        if pool > 1 and S < 64 or key in seen:
            continue
        seen.add(key)
        out.append(replace(base, rocket=replace(r, positions=positions, pool=pool)))
    return out


def _rocket_candidate(data: Windows, base: Candidate) -> Candidate:
    from tinyattn.learn.rocketcli import DEFAULT

    return replace(base, family="seq-rocket", rocket=DEFAULT)


def _rocket_label(cand: Candidate) -> str:
    r = cand.rocket
    cap = f" N{r.positions}" if r.positions else ""
    pool = f" P{r.pool}" if r.pool > 1 else ""
    bounds = [f"<= {r.max_ops:,} ops"] if r.max_ops is not None else []
    bounds += [f"<= {r.max_us / 1000:g} ms"] if r.max_us is not None else []
    return f"rocket {r.num_features} -> {', '.join(bounds) or 'every feature'}{cap}{pool}"


FAMILIES: dict[str, Family] = {
    "seq-attn": Family("seq-attn", _seq_cost, _seq_score, lambda data: True,
                       lambda data: not is_rows(data), lambda data, base: base,
                       lambda cand: cand.seq_label()),  # fmt: skip
    "row-attn": Family("row-attn", _row_cost, _row_score, is_rows, is_rows, _row_candidate,
                       _row_label),  # fmt: skip
    "seq-rocket": Family("seq-rocket", _rocket_cost, _rocket_score,
                         lambda data: not is_rows(data), lambda data: False, _rocket_candidate,
                         _rocket_label),  # fmt: skip
}
