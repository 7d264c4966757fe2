# Host (CPython): tests of `tinyattn export` on the real trained model and on synthetic ones.
"""The issue-3 gates on the reference blob made from the really trained Iris model (trained here
with `tinyattn train`, about a second): blob <= 2048 bytes, int8 test accuracy >= float test
accuracy, int8/float argmax agreement >= 149/150, the small-int budget on all 150 samples (the
exporter runs the asserting integer reference on every sample). Plus the CLI's behaviour.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from synth_models import iris_synthetic, save_npz

from tinyattn import cli
from tinyattn.intmodel.blob import read_blob
from tinyattn.intmodel.export import export_model

pytestmark = pytest.mark.host


@pytest.fixture(scope="module")
def trained_npz(tmp_path_factory):
    path = tmp_path_factory.mktemp("trained") / "model.npz"
    assert cli.main(["train", "--out", str(path), "--quiet"]) == 0
    return path


@pytest.fixture(scope="module")
def reference(trained_npz, tmp_path_factory):
    out = tmp_path_factory.mktemp("blob") / "model.bin"
    return export_model(trained_npz, out), out


def test_export_reference_blob_size_within_2048(reference):
    report, out = reference
    assert report["bytes"] == out.stat().st_size <= 2048
    assert read_blob(out.read_bytes()).quantized


def test_export_int8_accuracy_no_drop_on_test_split(reference):
    report, _ = reference
    assert report["test_samples"] == 30
    assert report["int8_test_accuracy"] >= report["float_test_accuracy"]


def test_export_int8_float_argmax_agreement_at_least_149_of_150(reference):
    report, _ = reference
    assert report["n_samples"] == 150
    assert report["int8_float_argmax_agree_count"] >= 149


def test_export_float32_blob_of_trained_model(trained_npz, tmp_path):
    report = export_model(trained_npz, tmp_path / "f.bin", float32=True)
    assert not report["quantized"] and report["int8_test_accuracy"] is None
    assert report["blob_float32_test_accuracy"] == report["float_test_accuracy"]
    assert report["blob_float32_max_abs_logit_diff"] < 1e-3


def test_export_cli_json_is_the_last_line(tmp_path, capsys):
    model, _, _ = iris_synthetic(seed=3)
    npz = save_npz(tmp_path / "m.npz", model)
    out = tmp_path / "m.bin"
    assert cli.main(["export", "--model", str(npz), "--out", str(out), "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert any("requantization" in line for line in lines)  # the per-layer table
    report = json.loads(lines[-1])
    for key in ("bytes", "float_test_accuracy", "int8_test_accuracy",
                "int8_float_argmax_agreement", "layers"):  # fmt: skip
        assert key in report
    assert report["bytes"] == out.stat().st_size
    assert 0.0 <= report["int8_float_argmax_agreement"] <= 1.0


def test_export_missing_model_says_how_to_make_it(tmp_path, capsys):
    missing = tmp_path / "nope.npz"
    assert cli.main(["export", "--model", str(missing), "--out", str(tmp_path / "x.bin")]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and f"'tinyattn train --out {missing}'" in err
    assert not (tmp_path / "x.bin").exists()


def test_export_unknown_dataset_asks_for_csv(tmp_path, capsys):
    model, _, _ = iris_synthetic(seed=3)
    model.meta["dataset"] = "my_measurements"
    npz = save_npz(tmp_path / "m.npz", model)
    assert cli.main(["export", "--model", str(npz), "--out", str(tmp_path / "x.bin")]) == 2
    assert "--csv" in capsys.readouterr().err


def test_export_budget_and_layers_reported(tmp_path):
    model, _, _ = iris_synthetic(seed=6)
    report = export_model(save_npz(tmp_path / "m.npz", model), tmp_path / "m.bin")
    shifts = [row["shift"] for row in report["layers"]]
    assert all(1 <= s <= 30 for s in shifts)
    assert all(0 <= row["M_min"] <= row["M_max"] < 2**15 for row in report["layers"])
    assert np.isfinite(report["int8_max_abs_logit_error"])


def test_export_float32_without_out_keeps_the_int8_blob(tmp_path, capsys, monkeypatch):
    """`export --float32` wrote build/model.bin over the int8 blob, after which `make export`
    (model.bin newer than model.npz) had "Nothing to be done"."""
    monkeypatch.chdir(tmp_path)
    model, _, _ = iris_synthetic(seed=3)
    (tmp_path / "build").mkdir()
    npz = save_npz(tmp_path / "build" / "model.npz", model)
    assert cli.main(["export", "--model", str(npz)]) == 0
    int8 = (tmp_path / "build" / "model.bin").read_bytes()
    assert cli.main(["export", "--model", str(npz), "--float32"]) == 0
    capsys.readouterr()
    assert (tmp_path / "build" / "model.bin").read_bytes() == int8
    f32 = read_blob((tmp_path / "build" / "model-float32.bin").read_bytes())
    assert read_blob(int8).quantized and not f32.quantized
