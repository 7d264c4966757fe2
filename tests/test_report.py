# Host (CPython): tests of `tinyattn report` — the PNGs exist, are valid, are not blank.
"""Issue 7, must-show 5. A quick model (`tinyattn train --epochs 30`, ~0.1 s) is exported and
reported on; every image is checked by hand-parsed PNG header (signature, IHDR size) and by its
pixels (more than one colour), and the HTML/Markdown pages must reference each image. Also:
the attention maps are the layer's own A (cross-checked against the float reference's record),
token labels, blob selection (given, default, stale default, temporary export), user errors.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from tinyattn import cli
from tinyattn.data.tabular import load_dataset
from tinyattn.data.timeseries import load_ts_dataset
from tinyattn.intmodel.blob import read_blob
from tinyattn.intmodel.export import export_model
from tinyattn.intmodel.floatref import forward_npz
from tinyattn.learn.model import iris_attn_ops, load_model
from tinyattn.report import _blob_mismatch, attention_maps, token_labels, write_report

pytestmark = pytest.mark.host
pytest.importorskip("matplotlib", reason="needs the report extra: pip install -e '.[report]'")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_png(path: Path) -> tuple[int, int]:
    """Assert a valid, non-blank PNG; returns (width, height) from its IHDR chunk."""
    from PIL import Image  # matplotlib depends on Pillow

    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path}: not a PNG signature"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13, f"{path}: first chunk is {kind!r}, not IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 0 and height > 0
    with Image.open(path) as im:
        assert im.size == (width, height)
        pixels = np.asarray(im.convert("RGB"), dtype=np.uint32)  # (h, w, 3)
    assert pixels.std() > 0, f"{path}: every pixel has the same value (blank image)"
    colours = np.unique((pixels[..., 0] << 16) | (pixels[..., 1] << 8) | pixels[..., 2])
    assert len(colours) > 10, f"{path}: only {len(colours)} colours (nearly blank)"
    return width, height


def train(path: Path, *extra: str) -> Path:
    argv = ["train", "--epochs", "30", "--out", str(path), "--quiet", *extra]
    assert cli.main(argv) == 0, "tinyattn train failed"
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path, dict]:
    tmp = tmp_path_factory.mktemp("report-model")
    npz = train(tmp / "model.npz")
    blob = tmp / "model.bin"
    exported = export_model(npz, blob)
    return npz, blob, exported


@pytest.fixture(scope="module")
def report(trained, tmp_path_factory) -> dict:
    npz, blob, _ = trained
    return write_report(npz, blob, tmp_path_factory.mktemp("report") / "out", samples=None)


def test_report_writes_curves_confusions_and_one_attention_map_per_class(report):
    out = Path(report["out_dir"])
    names = sorted(Path(p).name for p in report["images"])
    attention = [f"attention_{i}.png" for i in report["samples"]]
    expected = ["confusion_float.png", "confusion_int8.png", "curves.png", *attention]
    assert names == sorted(expected)
    y = load_dataset("iris").y
    assert sorted(int(y[i]) for i in report["samples"]) == [0, 1, 2]  # one sample per class
    for name in names:
        assert (out / name).is_file()
    assert report["notes"] == []


def test_report_every_png_is_valid_and_not_blank(report):
    for path in report["images"]:
        width, height = check_png(Path(path))
        assert width >= 300 and height >= 200, f"{path}: {width}x{height} is too small to read"


def test_report_pages_embed_every_image(report):
    html = Path(report["html"]).read_text(encoding="utf-8")
    md = Path(report["markdown"]).read_text(encoding="utf-8")
    for path in report["images"]:
        name = Path(path).name
        assert f'<img src="{name}"' in html
        assert f"]({name})" in md
    for page in (html, md):
        assert "iris-attn" in page and "475" in page  # model and parameter count


def test_report_summary_matches_the_export(trained, report):
    _, blob, exported = trained
    s = report["summary"]
    assert s["params"] == 475
    assert s["test_samples"] == exported["test_samples"] == 30
    assert s["float_test_accuracy"] == exported["float_test_accuracy"]
    assert s["int8_test_accuracy"] == exported["int8_test_accuracy"]
    assert s["int8_float_agree_count"] == exported["int8_float_argmax_agree_count"]
    assert s["blob_bytes"] == blob.stat().st_size == exported["bytes"]


def test_report_attention_maps_are_the_float_reference_softmax(trained):
    npz_path = trained[0]
    mf = load_model(npz_path)
    x = mf.normalize(load_dataset("iris").rows[::10])  # (15, 4)
    (m,) = attention_maps(mf.model, x)
    record: dict[str, np.ndarray] = {}
    forward_npz(mf, x, record)
    assert m.kind == "attention" and m.op_index == 3
    assert m.weights.shape == (15, 2, 4, 4)  # (B, H, S, S)
    np.testing.assert_allclose(m.weights, record["3.att"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(m.weights.sum(axis=-1), 1.0, atol=1e-12)
    assert all(layer._cache is None for layer in mf.model.layers if hasattr(layer, "_cache"))


def test_report_token_labels_name_features_only_for_feature_tokens():
    features = ["a", "b", "c", "d"]
    labels, what = token_labels(iris_attn_ops(4, 3), 3, features, 4)
    assert labels == ["t0: h0-7", "t1: h8-15", "t2: h16-23", "t3: h24-31"]
    assert "op 0" in what
    per_feature = [
        {"op": "reshape", "shape": [4, 1]},
        {"op": "dense", "in": 1, "out": 8, "bias": True},
        {"op": "relu"},
        {"op": "attention", "embed_dim": 8, "num_heads": 2, "bias": True},
    ]
    assert token_labels(per_feature, 3, features, 4) == (features, "token = input feature")
    unknown = [{"op": "something-new"}, {"op": "reshape", "shape": [4, 2]}, per_feature[3]]
    assert token_labels(unknown, 2, features, 4)[0] == ["t0", "t1", "t2", "t3"]


def test_report_without_blob_exports_a_temporary_one(trained, tmp_path, monkeypatch):
    npz, _, exported = trained
    monkeypatch.chdir(tmp_path)  # no build/model.bin here
    result = write_report(npz, None, tmp_path / "out", samples=[0])
    s = result["summary"]
    assert s["blob"] == "(temporary export)" and s["blob_bytes"] == exported["bytes"]
    assert s["int8_test_accuracy"] == exported["int8_test_accuracy"]
    assert not (tmp_path / "build").exists()
    check_png(tmp_path / "out" / "confusion_int8.png")


def test_report_uses_the_default_blob_when_it_matches(trained, tmp_path, monkeypatch):
    npz, blob, _ = trained
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "model.bin").write_bytes(blob.read_bytes())
    monkeypatch.chdir(tmp_path)
    result = write_report(npz, None, tmp_path / "out", samples=[0])
    assert result["summary"]["blob"] == "build/model.bin" and result["notes"] == []


def test_report_skips_a_default_blob_of_another_model(trained, tmp_path, monkeypatch):
    npz, _, exported = trained
    other = train(tmp_path / "other.npz", "--seed", "1")
    export_model(other, tmp_path / "build" / "model.bin")
    monkeypatch.chdir(tmp_path)
    result = write_report(npz, None, tmp_path / "out", samples=[0])
    assert any("build/model.bin not used" in note for note in result["notes"])
    assert result["summary"]["int8_test_accuracy"] == exported["int8_test_accuracy"]


def test_report_blob_mismatch_names_the_difference(trained, tmp_path):
    npz_path, blob_path, _ = trained
    npz, blob = load_model(npz_path), read_blob(blob_path.read_bytes())
    assert _blob_mismatch(blob, npz) is None
    export_model(npz_path, tmp_path / "f32.bin", float32=True)
    assert _blob_mismatch(read_blob((tmp_path / "f32.bin").read_bytes()), npz) is None
    same_split = train(tmp_path / "short.npz", "--epochs", "3")  # same split, other weights
    assert "weights of op 0" in _blob_mismatch(blob, load_model(same_split))
    other_split = train(tmp_path / "seed1.npz", "--seed", "1")
    assert "normalization" in _blob_mismatch(blob, load_model(other_split))


def test_report_cli_json_last_line_lists_the_files(trained, tmp_path, capsys):
    npz, blob, _ = trained
    out = tmp_path / "cli"
    argv = ["report", "--model", str(npz), "--blob", str(blob), "--out", str(out)]
    assert cli.main([*argv, "--samples", "0,149", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["samples"] == [0, 149]
    assert result["attention_images"] == [
        str(out / "attention_0.png"),
        str(out / "attention_149.png"),
    ]
    for path in [*result["images"], result["html"], result["markdown"]]:
        assert Path(path).is_file()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--samples", "0,150"], "rows 0..149"),
        (["--blob", "nope.bin"], "not found"),
    ],
)
def test_report_cli_user_errors_exit_2_with_a_hint(
    trained, tmp_path, capsys, monkeypatch, extra, message
):
    npz = trained[0]
    monkeypatch.chdir(tmp_path)
    argv = ["report", "--model", str(npz), "--out", str(tmp_path / "o"), *extra]
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_report_cli_mismatched_blob_is_an_error(trained, tmp_path, capsys):
    npz = trained[0]
    other = train(tmp_path / "other.npz", "--seed", "1")
    export_model(other, tmp_path / "other.bin")
    argv = ["report", "--model", str(npz), "--blob", str(tmp_path / "other.bin")]
    assert cli.main([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "was not exported from" in err and "tinyattn export" in err


def test_report_float32_blob_skips_int8_with_a_note(trained, tmp_path):
    npz = trained[0]
    export_model(npz, tmp_path / "f32.bin", float32=True)
    result = write_report(npz, tmp_path / "f32.bin", tmp_path / "out", samples=[0])
    assert "confusion_int8.png" not in {Path(p).name for p in result["images"]}
    assert any("float32 weights" in note for note in result["notes"])
    assert result["summary"]["int8_test_accuracy"] is None
    assert "float32 weights" in Path(result["html"]).read_text(encoding="utf-8")


def test_report_without_matplotlib_names_the_extra(trained, tmp_path, capsys, monkeypatch):
    for name in ("matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    argv = ["report", "--model", str(trained[0]), "--out", str(tmp_path / "o")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert 'pip install -e ".[report]"' in err and "make install" in err


def test_report_myattn_pooling_weights_are_plotted(tmp_path):
    from tinyattn.learn import myattn
    from tinyattn.learn.layers import ActivationLayer, Dense, Reshape
    from tinyattn.learn.model import Sequential
    from tinyattn.report import _matplotlib, plot_attention

    rng = np.random.default_rng(0)
    ops = [
        {"op": "dense", "in": 4, "out": 32, "bias": True},
        {"op": "relu"},
        {"op": "reshape", "shape": [4, 8]},
        {
            "op": "myattn",
            "mode": "pool",
            "query_size": 8,
            "key_size": 8,
            "value_size1": 4,
            "value_size2": 8,
            "output_size": 3,
            "bias": True,
        },
    ]
    layers = [Dense(4, 32, True, rng), ActivationLayer("relu"), Reshape([4, 8])]
    model = Sequential([*layers, myattn.AttnPool(4, 8, 3, rng)], ops)
    x = rng.normal(size=(5, 4))
    (m,) = attention_maps(model, x)
    assert m.kind == "myattn" and m.op_index == 3 and m.weights.shape == (5, 4)  # (B, S)
    np.testing.assert_allclose(m.weights.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(m.weights, model.layers[3].weights[:, 0, :])
    path = tmp_path / "myattn.png"
    one = [type(m)(m.op_index, m.kind, m.weights[:1])]
    plot_attention(
        _matplotlib(), one, ops, lambda k: token_labels(ops, k, list("abcd"), 4), "t", path
    )
    check_png(path)


def test_report_on_an_iris_myattn_model(tmp_path, monkeypatch):
    npz = train(tmp_path / "myattn.npz", "--model", "iris-myattn")
    monkeypatch.chdir(tmp_path)  # no build/model.bin: the int8 figures use a temporary export
    result = write_report(npz, None, tmp_path / "out", samples=[0, 100])
    names = {Path(p).name for p in result["images"]}
    assert {"curves.png", "confusion_float.png", "attention_0.png", "attention_100.png"} <= names
    int8_ok = "confusion_int8.png" in names
    assert int8_ok or any("int8 figures skipped" in n for n in result["notes"])
    for path in result["images"]:
        check_png(Path(path))


# -- Ctrl-C and the output folder (issue 12) ----------------------------------------------------


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_report_interrupted_leaves_no_partial_folder(trained, tmp_path, monkeypatch):
    """Ctrl-C while the figures are drawn: no `out` folder, no temp folder next to it."""
    import tinyattn.report as report_mod

    npz, blob, _ = trained
    monkeypatch.setattr(report_mod, "plot_attention", _interrupt)  # after curves, confusions
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        write_report(npz, blob, out)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_report_interrupted_keeps_the_previous_report(trained, tmp_path, monkeypatch):
    import tinyattn.report as report_mod

    npz, blob, _ = trained
    out = tmp_path / "out"
    first = write_report(npz, blob, out, samples=[0])
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(report_mod, "write_pages", _interrupt)  # the very last step
    with pytest.raises(KeyboardInterrupt):
        write_report(npz, blob, out, samples=[50, 100])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert Path(first["html"]).parent == out


def test_report_rerun_replaces_the_folder_and_names_the_final_paths(trained, tmp_path):
    npz, blob, _ = trained
    out = tmp_path / "out"
    write_report(npz, blob, out, samples=[0])
    result = write_report(npz, blob, out, samples=[100])
    names = {p.name for p in out.iterdir()}
    assert "attention_100.png" in names and "attention_0.png" not in names
    assert all(Path(p).parent == out and Path(p).is_file() for p in result["images"])
    assert result["out_dir"] == str(out) and Path(result["html"]).is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_report_refuses_an_out_folder_holding_other_files(trained, tmp_path, capsys):
    npz, blob, _ = trained
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    argv = ["report", "--model", str(npz), "--blob", str(blob), "--out", str(out)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "notes.txt" in err and "another --out" in err
    assert (out / "notes.txt").read_text() == "keep me"


# -- sequence models (issue 11): attention over time for TEST windows ---------------------------


@pytest.fixture(scope="module")
def seq_trained(tmp_path_factory) -> tuple[Path, Path, dict]:
    """A short BasicMotions seq-attn run (`tinyattn train --dataset basicmotions`), exported."""
    tmp = tmp_path_factory.mktemp("report-seq")
    npz = train(tmp / "bm.npz", "--dataset", "basicmotions", "--epochs", "40")
    blob = tmp / "bm.bin"
    return npz, blob, export_model(npz, blob)


@pytest.mark.slow
def test_report_seq_model_draws_attention_over_time_for_test_windows(seq_trained, tmp_path):
    npz, blob, exported = seq_trained
    result = write_report(npz, blob, tmp_path / "out")
    test = load_ts_dataset("basicmotions", "test")
    assert sorted(int(test.y[i]) for i in result["samples"]) == [0, 1, 2, 3]  # one per class
    names = sorted(Path(p).name for p in result["images"])
    attention = [f"attention_{i}.png" for i in result["samples"]]
    assert names == sorted(["curves.png", "confusion_float.png", "confusion_int8.png", *attention])
    for path in result["images"]:
        check_png(Path(path))
    s = result["summary"]
    assert (s["test_samples"], s["n_samples"]) == (40, 80)  # TEST windows, then TRAIN
    assert s["float_test_accuracy"] == exported["float_test_accuracy"]
    assert s["int8_test_accuracy"] == exported["int8_test_accuracy"]
    html = Path(result["html"]).read_text(encoding="utf-8")
    assert "Attention over time, TEST window" in html and "seq-attn" in html
    assert s["input_view"] == "the values as they are" and "input view" in html


def test_report_input_view_text_names_the_view_and_its_parameters():
    from tinyattn.data.windows import VIEW_CLIP, VIEW_LOG, InputView, view_text

    assert view_text(InputView(VIEW_LOG, ([0.5, -2.0],))) == "log(1 + x - floor), floor 0.5, -2"
    clip = InputView(VIEW_CLIP, ([-1.352876, 0.0], [1.7462395, 3.0]))
    assert view_text(clip) == "clip to [-1.353, 1.746]; [0, 3]"
    six = InputView(VIEW_CLIP, (np.zeros(6), np.ones(6)))
    assert view_text(six).endswith("[0, 1]; … (6 channels)")


def test_report_seq_attention_masks_padded_keys_and_rows_sum_to_one(seq_trained):
    from tinyattn.report import attention_over_time, seq_attention_maps

    mf = load_model(seq_trained[0])
    test = load_ts_dataset("basicmotions", "test")
    lengths = np.array([100, 37, 5])  # 20, 8 and 1 valid tokens of P = 5 steps
    X = test.X[:3]
    (m,) = seq_attention_maps(mf.model, mf.normalize(X, lengths), lengths)
    assert m.weights.shape == (3, 2, 20, 20)  # (B, H, S, S)
    for b, S_n in enumerate((20, 8, 1)):
        att = m.weights[b]
        np.testing.assert_allclose(att[:, :S_n].sum(axis=-1), 1.0, atol=1e-12)
        assert np.all(att[:, :, S_n:] == 0.0)  # a padded key gets no weight
        np.testing.assert_allclose(attention_over_time(att, S_n).sum(), 1.0, atol=1e-12)
    assert all(layer._cache is None for layer in mf.model.layers if hasattr(layer, "_cache"))


def test_report_seq_samples_are_test_windows(seq_trained, tmp_path, capsys):
    npz, blob, _ = seq_trained
    argv = ["report", "--model", str(npz), "--blob", str(blob), "--out", str(tmp_path / "o")]
    assert cli.main([*argv, "--samples", "0,40"]) == 2
    assert "the TEST windows are 0..39" in capsys.readouterr().err
    assert cli.main([*argv, "--samples", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["attention_images"] == [str(tmp_path / "o" / "attention_3.png")]


@pytest.mark.host
def test_report_attention_figures_keep_labels_inside_and_heading_apart(
    tmp_cwd, reference_model, monkeypatch
):
    """Iris attention PNGs: every axis label and panel title inside the figure (the x-axis
    label used to be cut at the bottom), and the heading above the panel titles, not on them."""
    pytest.importorskip("matplotlib")
    from tinyattn import report

    figs, save = [], report._save
    monkeypatch.setattr(report, "_save", lambda fig, canvas, path: (save(fig, canvas, path),
                                                                    figs.append((path, fig))))
    assert cli.main(["report", "--model", str(reference_model["npz"]), "--blob",
                     str(reference_model["blob"]), "--out", "rep"]) == 0  # fmt: skip
    attention = [(p, f) for p, f in figs if p.name.startswith("attention_")]
    assert attention, [p.name for p, _ in figs]
    for path, fig in attention:
        r = fig.canvas.get_renderer()  # the layout the PNG was saved with
        x0, y0, w, h = fig.get_tightbbox(r).bounds  # every artist, inches
        W, H = fig.get_size_inches()
        assert x0 >= 0 and y0 >= 0 and x0 + w <= W and y0 + h <= H, (path.name, (x0, y0, w, h))
        tops = [ax.title.get_window_extent(r).y1 for ax in fig.axes if ax.get_title()]
        gap = fig._suptitle.get_window_extent(r).y0 - max(tops)
        assert gap >= 4, (path.name, gap)  # pixels between the heading and the panel titles


@pytest.mark.parametrize("shape", [
    ["--stem", "conv", "--blocks", "0", "--stem-stride", "1"],  # the conv stem alone
    ["--stem", "conv", "--blocks", "1"],  # a conv stem before attention
])  # fmt: skip
def test_report_every_seq_shape_the_search_can_pick(tmp_path, shape):
    """`tinyattn report` on a conv stem alone (what the search picked for accelerometer data)
    ended in "ValueError: Number of columns must be a positive integer, not 0"."""
    npz = train(tmp_path / "m.npz", "--dataset", "basicmotions", "--epochs", "3", "--patch",
                "10", "--embed", "8", "--heads", "2", *shape)  # fmt: skip
    blob = tmp_path / "m.bin"
    export_model(npz, blob)
    result = write_report(npz, blob, tmp_path / "out", samples=[0])
    names = sorted(Path(p).name for p in result["images"])
    blocks = int(shape[shape.index("--blocks") + 1])
    assert ("attention_0.png" in names) == (blocks > 0), names
    assert {"curves.png", "confusion_float.png", "confusion_int8.png"} <= set(names)
