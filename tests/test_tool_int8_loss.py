"""tools/dev/int8_loss.py: the op-by-op columns end where the integer path ends."""

from __future__ import annotations

import numpy as np
import pytest

from tinyattn.data.timeseries import load_ts_dataset
from tinyattn.learn.seqmodel import SeqAttnConfig
from tinyattn.learn.seqtrain import evaluate_seq, train_seq
from tinyattn.learn.train import TrainConfig
from tinyattn.tools.dev.int8_loss import main, op_by_op


@pytest.mark.parametrize("name, patch", [("basicmotions", 10), ("japanesevowels", 4)])
def test_op_by_op_first_and_last_columns_are_the_float_and_int8_predictions(name, patch) -> None:
    ds = load_ts_dataset(name, "train")  # japanesevowels: windows of 7-26 steps
    tr, te = np.arange(0, len(ds.y), 2)[:40], np.arange(1, len(ds.y), 2)[:40]
    assert len(np.unique(-(-ds.lengths[te] // patch))) > (name == "japanesevowels")
    arch = SeqAttnConfig(patch=patch, embed_dim=8, num_heads=2, blocks=1, ff_dim=16)
    res = train_seq(ds.X[tr], ds.lengths[tr], ds.y[tr], ds.n_classes, arch,
                    TrainConfig(epochs=3, model="seq-attn"))  # fmt: skip
    names, pred = op_by_op(res, ds.class_names, ds.X[tr], ds.lengths[tr], ds.X[te],
                           ds.lengths[te])  # fmt: skip
    assert names == ["float", "input", "op 0 (embed)", "op 1 (res_attention)", "op 2 (res_ff)",
                     "op 3 (masked_pool)", "int8"]  # fmt: skip
    ev = evaluate_seq(res, ds.X[tr], ds.lengths[tr], ds.X[te], ds.lengths[te], ds.y[te])
    acc = (pred == ds.y[te]).mean(axis=1)
    assert acc[0] == ev["float_accuracy"] and acc[-1] == ev["int8_accuracy"]
    xn, n = res.normalize(ds.X[te], ds.lengths[te])
    assert np.array_equal(pred[0], res.model.predict(xn, n))


def test_cli_prints_every_column_and_refuses_rows(capsys) -> None:
    assert main(["--dataset", "coffee", "--epochs", "2", "--cv", "2", "--repeats", "1",
                 "--stem", "conv", "--stem-stride", "1"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    for col in ("float", "input", "(conv)", "int8", "paired float − input"):
        assert col in out
    for argv, said in ((["--dataset", "iris"], "a windows dataset"),
                       (["--dataset", "coffee", "--search"], "--search and --on-board")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2 and said in capsys.readouterr().err
