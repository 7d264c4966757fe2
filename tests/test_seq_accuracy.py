# Host (CPython): the issue-11 accuracy gates on the archive's official TEST splits.
"""Trained with the defaults (`tinyattn.learn.seqdefaults`, seed 0, as `tinyattn train` and export
build them), the int8 path calibrated on TRAIN and run by the integer reference:

- BasicMotions: 40/40 TEST windows in float and in int8 (must-show 1);
- JapaneseVowels: int8 TEST accuracy >= 0.985, float within 0.005 of it (must-show 2), and
  within the budgets: in tests/test_seq_cli.py (test_seq_cli_japanesevowels_train_then_export_
  agree), on the model `tinyattn train --dataset japanesevowels` trains there, so that the
  suite trains it once (five runs: ~14 s quiet, plus its per-epoch curves);
- within the budgets: blob <= 32 KiB, <= 150k MACs an inference (must-show 3).
The figures over several seeds, and the peers', are `python -m tinyattn.tools.bench_seq --seeds 5`.
The JapaneseVowels gate was a strict xfail until round 4's default (distilled from 4 teachers,
host/learn/seqdefaults.py) met it: seed 0 int8 0.986 (365/370), float 0.989 (366).
Training: ~0.3 s (BasicMotions), ~14 s (JapaneseVowels: 4 teachers and the student).
"""

from __future__ import annotations

import numpy as np
import pytest

from tinyattn.data.timeseries import load_ts_dataset
from tinyattn.intmodel.blob import blob_bytes
from tinyattn.intmodel.quantize import quantize
from tinyattn.learn.seqdefaults import seq_defaults
from tinyattn.learn.seqmodel import macs
from tinyattn.learn.seqtrain import evaluate_seq, npz_model, train_seq

pytestmark = [pytest.mark.host, pytest.mark.slow]


def _train_and_score(name: str):
    train, test = load_ts_dataset(name, "train"), load_ts_dataset(name, "test")
    d = seq_defaults(name)
    res = train_seq(train.X, train.lengths, train.y, train.n_classes, d.arch, d.train, d.augment,
                    average=d.average, distill=d.distill)  # fmt: skip
    ev = evaluate_seq(res, train.X, train.lengths, test.X, test.lengths, test.y)
    T = res.max_steps
    spec = quantize(npz_model(res, train.class_names), train.X[:, :T],
                    np.minimum(train.lengths, T))  # fmt: skip
    return res, ev, len(blob_bytes(spec))


def test_seq_accuracy_basicmotions_40_of_40_float_and_int8():
    res, ev, nbytes = _train_and_score("basicmotions")
    assert ev["float_accuracy"] == 1.0, ev
    assert ev["int8_accuracy"] == 1.0, ev
    assert nbytes <= 32 * 1024 and macs(res.model.ops) <= 150_000

