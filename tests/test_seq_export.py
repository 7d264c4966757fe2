# Host (CPython): `tinyattn export` of a seq-attn model (issue 11).
"""Export of a seq model file: calibrated on its TRAIN windows, figures on its TEST file found
through the meta (`model.ts_data_meta`: a vendored dataset, or `.ts` paths); `bytes`, `macs`,
`float_test_accuracy`, `int8_test_accuracy`; `--float32`; TEST windows longer than the model's
T cut explicitly and counted; a model file without data named is refused with the fix.
"""

from __future__ import annotations

import numpy as np
import pytest
from seq_models import basicmotions_model, train_seq

from tinyattn.cli import CLIError
from tinyattn.data.timeseries import load_ts_dataset, write_ts
from tinyattn.intmodel.export import export_model
from tinyattn.learn.model import load_model, save_model, ts_data_meta
from tinyattn.learn.seqmodel import SeqAttnConfig, macs

pytestmark = pytest.mark.host


def _save(path, model, mean, std, class_names, data_meta):
    meta = {"model": "seq-attn", "class_names": list(class_names), **data_meta}
    return save_model(path, model, mean, std, meta)


@pytest.fixture(scope="module")
def bm_model(tmp_path_factory):
    model, mean, std, train = basicmotions_model()  # trained once per process
    path = tmp_path_factory.mktemp("bm") / "model.npz"
    return _save(path, model, mean, std, train.class_names, ts_data_meta("basicmotions")), model


def test_seq_export_reports_test_figures(bm_model, tmp_path):
    path, model = bm_model
    report = export_model(path, tmp_path / "model.bin")
    assert report["quantized"] and report["dataset"] == "basicmotions"
    assert report["bytes"] == (tmp_path / "model.bin").stat().st_size <= 32 * 1024
    assert report["macs"] == macs(model.ops) <= 150_000
    assert report["test_samples"] == 40 and report["test_windows_truncated"] == 0
    assert report["int8_test_accuracy"] == report["float_test_accuracy"] >= 0.85
    assert report["int8_float_argmax_agreement"] == 1.0
    assert report["blob_float32_test_accuracy"] == report["float_test_accuracy"]
    kinds = {row["what"].split()[0] for row in report["layers"]}
    assert {"embed", "attention", "ff", "masked_pool", "dense"} <= kinds


def test_seq_export_float32(bm_model, tmp_path):
    path, _ = bm_model
    report = export_model(path, tmp_path / "model.bin", float32=True)
    assert not report["quantized"] and report["int8_test_accuracy"] is None
    assert report["blob_float32_max_abs_logit_diff"] < 1e-3
    assert report["blob_float32_test_accuracy"] == report["float_test_accuracy"]


def test_seq_model_file_loads_as_a_seq_model(bm_model):
    path, model = bm_model
    mf = load_model(path)
    assert mf.is_seq and mf.model.ops == model.ops
    test = load_ts_dataset("basicmotions", "test")
    np.testing.assert_array_equal(mf.predict(test.X, test.lengths), model.predict(
        mf.normalize(test.X, test.lengths), test.lengths))  # fmt: skip


def test_seq_export_from_ts_files_truncates_long_test_windows(tmp_path):
    """An unequal-length `.ts` pair whose TEST has windows longer than TRAIN's: T comes from
    TRAIN (rounded up to P), longer TEST windows are cut and counted."""
    rng = np.random.default_rng(5)
    N, C = 24, 2
    y = np.arange(N) % 2
    t = np.arange(14)[None, :, None]
    X = np.sin(t * (0.3 + 0.5 * y[:, None, None]) + rng.normal(0, 0.1, (N, 14, C)))
    tr_len = rng.integers(4, 10, N)  # TRAIN: 4..9 steps -> T = 9 with P = 3
    te_len = np.where(np.arange(N) < 5, 14, rng.integers(4, 10, N))  # five of 14 steps
    write_ts(tmp_path / "S_TRAIN.ts", X, tr_len, y, ["slow", "fast"], "S")
    write_ts(tmp_path / "S_TEST.ts", X, te_len, y, ["slow", "fast"], "S")
    cfg = SeqAttnConfig(patch=3, embed_dim=8, ff_dim=16, blocks=1)
    model, mean, std = train_seq(X, tr_len, y, 2, cfg, epochs=30)
    assert model.ops[0]["steps"] == 9
    meta = ts_data_meta("S", tmp_path / "S_TRAIN.ts", tmp_path / "S_TEST.ts")
    path = _save(tmp_path / "m.npz", model, mean, std, ["slow", "fast"], meta)
    report = export_model(path, tmp_path / "m.bin")
    assert report["test_windows_truncated"] == 5 and report["max_steps"] == 9
    assert report["data"]["ts_test"].endswith("S_TEST.ts")
    assert report["int8_test_accuracy"] is not None and report["macs"] > 0


def test_seq_export_without_data_in_meta_is_refused(bm_model, tmp_path):
    _, model = bm_model
    path = _save(tmp_path / "m.npz", model, np.zeros(6), np.ones(6), ["a", "b", "c", "d"],
                 {"dataset": "mystery"})  # fmt: skip
    with pytest.raises(CLIError, match="names no data"):
        export_model(path, tmp_path / "m.bin")
