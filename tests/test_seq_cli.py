# Host (CPython): `tinyattn train` on windows end to end — `.ts` data, seq-attn, export, device.
"""Issue 11, the CLI bullet and Must-shows 1, 2, 5 and 8.

- `tinyattn train --dataset basicmotions --json` then `tinyattn export --json`: the figures
  train prints are the ones export computes from the model file on the TEST file (40/40 float
  and int8 with the defaults, Must-show 1); JapaneseVowels the same way (slow).
- `--ts TRAIN.ts --test TEST.ts` on files written by `tsdata.write_ts`: a univariate one and an
  unequal-length multivariate one whose TEST has windows longer than TRAIN's (cut to T and
  counted); without `--test` a stratified part of TRAIN is held out, said so, recorded in the
  model file, and export evaluates on that part.
- flags override the per-dataset defaults; `--cv` reads the TRAIN file only; one-line refusals.
- Must-show 8: the two `.ts` models on the device — under the MicroPython unix port against
  the host integer reference (bit-exact int8, float within 1e-4), and through `tinyattn flash`
  + `tinyattn parity` on a virtual board.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tinyattn import cli
from tinyattn.data.timeseries import load_ts, write_ts
from tinyattn.learn.model import load_model
from tinyattn.learn.seqdefaults import seq_defaults


def run(capsys, *argv: str) -> dict:
    """`tinyattn ARGV --json` in this process; the JSON summary (last stdout line)."""
    assert cli.main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def refused(capsys, *argv: str) -> str:
    """`tinyattn ARGV` must exit 2 with one line on stderr; returns it."""
    assert cli.main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def write_pair(folder: Path, kind: str) -> tuple[Path, Path]:
    """A small TRAIN/TEST `.ts` pair: "univariate" (2 classes, 1 channel, 32 equal steps) or
    "unequal" (3 classes, 3 channels, TRAIN 8..20 steps, TEST 8..26: some longer than T)."""
    rng = np.random.default_rng(3)
    if kind == "univariate":
        N, T, C, names = 40, 32, 1, ["slow", "fast"]
    else:
        N, T, C, names = 45, 26, 3, ["a", "b", "c"]
    y = np.arange(N) % len(names)
    t = np.arange(T)[None, :, None]
    freq = (0.15 + 0.35 * y)[:, None, None] * np.arange(1, C + 1)  # (N, 1, C)
    level = 0.7 * y[:, None, None]  # (N, 1, 1) and a level per class: an easy problem

    def draw():
        return (
            np.sin(t * freq + rng.uniform(0, 6, (N, 1, C))) + level + rng.normal(0, 0.1, (N, T, C))
        )

    X, X2 = draw(), draw()
    if kind == "univariate":
        len_train = len_test = None
    else:
        len_train = rng.integers(8, 21, N)
        len_test = np.where(np.arange(N) < 4, 26, rng.integers(8, 21, N))  # 4 longer than T
    train = write_ts(folder / f"{kind}_TRAIN.ts", X, len_train, y, names, kind)
    test = write_ts(folder / f"{kind}_TEST.ts", X2, len_test, y, names, kind)
    return train, test


SMALL = ("--embed", "8", "--heads", "2", "--ff", "16", "--epochs", "60")  # fast, fits 100k


# -- the vendored datasets: train --json, then export --json (Must-shows 1, 2) -------------------


@pytest.mark.host
def test_seq_cli_basicmotions_train_then_export_40_of_40(capsys, tmp_path):
    model, blob = tmp_path / "bm.npz", tmp_path / "bm.bin"
    train = run(capsys, "train", "--dataset", "basicmotions", "--out", str(model))
    assert (train["model"], train["n_test"], train["test_split"]) == ("seq-attn", 40, "test file")
    assert train["test_accuracy"] == train["int8_test_accuracy"] == 1.0  # Must-show 1
    assert {"train_accuracy", "seconds", "params", "macs"} <= set(train)
    d = seq_defaults("basicmotions")
    assert train["epochs"] == d.train.epochs and train["arch"]["patch"] == d.arch.patch
    assert load_model(model).meta["dataset"] == "basicmotions"
    exported = run(capsys, "export", "--model", str(model), "--out", str(blob))
    assert exported["bytes"] == blob.stat().st_size <= 32 * 1024
    assert exported["macs"] == train["macs"] <= 150_000
    assert exported["float_test_accuracy"] == train["test_accuracy"]
    assert exported["int8_test_accuracy"] == train["int8_test_accuracy"]
    assert exported["test_samples"] == 40 and exported["test_windows_truncated"] == 0


@pytest.mark.host
@pytest.mark.slow
def test_seq_cli_japanesevowels_train_then_export_agree(capsys, tmp_path):
    """`train --dataset japanesevowels` then `export`: the same TEST figures; and the issue-11
    gate on them (tests/test_seq_accuracy.py's must-show 2 and 3, checked here so that the
    suite trains this model once): int8 >= 0.985 on the official TEST split, float within
    0.005 of it, blob <= 32 KiB, <= 150k MACs an inference."""
    model, blob = tmp_path / "jv.npz", tmp_path / "jv.bin"
    train = run(capsys, "train", "--dataset", "japanesevowels", "--out", str(model), "--quiet")
    exported = run(capsys, "export", "--model", str(model), "--out", str(blob))
    assert train["n_test"] == exported["test_samples"] == 370
    assert exported["float_test_accuracy"] == train["test_accuracy"]
    assert exported["int8_test_accuracy"] == train["int8_test_accuracy"]
    assert abs(exported["float_test_accuracy"] - exported["int8_test_accuracy"]) <= 0.005
    assert exported["test_windows_truncated"] == train["test_windows_truncated"] == 1  # 29 > 26
    assert exported["int8_test_accuracy"] >= 0.985, exported
    assert exported["bytes"] <= 32 * 1024 and exported["macs"] == train["macs"] <= 150_000


# -- any .ts file --------------------------------------------------------------------------------


@pytest.mark.host
@pytest.mark.parametrize("kind", ["univariate", "unequal"])
def test_seq_cli_ts_train_test_then_export(capsys, tmp_path, kind):
    ts_train, ts_test = write_pair(tmp_path, kind)
    model, blob = tmp_path / "m.npz", tmp_path / "m.bin"
    train = run(capsys, "train", "--ts", str(ts_train), "--test", str(ts_test), *SMALL,
                "--out", str(model))  # fmt: skip
    meta = load_model(model).meta
    if train["average"] == {"swa": 0.0, "ema": 0.0}:  # the last epoch's weights are the model's
        history = meta["history"]  # the learning curves: one point an epoch, train and test
        assert len(history["train_acc"]) == len(history["test_acc"]) == train["epochs"]
        assert history["train_acc"][-1] == train["train_accuracy"]
        assert history["test_acc"][-1] == train["test_accuracy"]
    assert meta["ts_train"] == str(ts_train.resolve())
    assert meta["ts_test"] == str(ts_test.resolve())
    assert meta["dataset"] == kind and "test_idx" not in meta["train"]
    exported = run(capsys, "export", "--model", str(model), "--out", str(blob))
    n_test = len(load_ts(ts_test).y)
    assert exported["test_samples"] == train["n_test"] == n_test
    assert exported["float_test_accuracy"] == train["test_accuracy"]
    assert exported["int8_test_accuracy"] == train["int8_test_accuracy"]
    assert exported["test_windows_truncated"] == train["test_windows_truncated"]
    assert exported["test_windows_truncated"] == (0 if kind == "univariate" else 4)
    assert train["test_accuracy"] >= 0.8  # two or three frequencies: easy
    assert exported["bytes"] > 0 and exported["macs"] == train["macs"] > 0


@pytest.mark.host
def test_seq_cli_ts_without_test_holds_out_part_of_train(capsys, tmp_path):
    ts_train, _ = write_pair(tmp_path, "unequal")
    model = tmp_path / "m.npz"
    assert cli.main(["train", "--ts", str(ts_train), *SMALL, "--out", str(model)]) == 0
    out = capsys.readouterr().out
    assert "no --test: held out 9 of 45 TRAIN windows" in out
    split = load_model(model).meta["train"]
    assert (len(split["train_idx"]), len(split["test_idx"])) == (36, 9)
    assert not set(split["train_idx"]) & set(split["test_idx"])
    exported = run(capsys, "export", "--model", str(model), "--out", str(tmp_path / "m.bin"))
    assert exported["test_samples"] == 9 and exported["test_split"] == "held-out part of train"
    assert exported["float_test_accuracy"] == load_model(model).meta["metrics"]["test_accuracy"]


@pytest.mark.host
def test_seq_cli_model_file_records_averaging_and_distillation(capsys, tmp_path, monkeypatch):
    """A dataset default with distillation on: its teachers are trained (said so unless
    --quiet), and the model file and the summary record the option (no flag sets it)."""
    from dataclasses import replace

    from tinyattn.learn import seqcli
    from tinyattn.learn.seqtrain import Average, Distill

    d = replace(seq_defaults("basicmotions"), average=Average(ema=0.9),
                distill=Distill(teachers=2, temperature=2.0, alpha=0.5))  # fmt: skip
    monkeypatch.setattr(seqcli, "seq_defaults", lambda name, max_length=None: d)
    model = tmp_path / "m.npz"
    s = run(capsys, "train", "--dataset", "basicmotions", "--epochs", "3", "--out", str(model))
    want = {"teachers": 2, "temperature": 2.0, "alpha": 0.5}
    assert s["distill"] == want and s["average"] == {"swa": 0.0, "ema": 0.9}
    train = load_model(model).meta["train"]
    assert train["distill"] == want and train["average"] == {"swa": 0.0, "ema": 0.9}
    assert cli.main(["train", "--dataset", "basicmotions", "--epochs", "3",
                     "--out", str(model)]) == 0  # fmt: skip
    assert "distillation: training 2 teachers first" in capsys.readouterr().out


@pytest.mark.host
def test_seq_cli_flags_override_the_dataset_defaults(capsys, tmp_path):
    model = tmp_path / "m.npz"
    argv = ["--patch", "10", "--embed", "8", "--heads", "4", "--blocks", "2", "--ff", "12",
            "--epochs", "3", "--lr", "0.002", "--label-smoothing", "0.05",
            "--shift", "0", "--log-view", "--stem", "conv", "--stem-width", "6",
            "--stem-kernel", "3", "--stem-stride", "3", "--stem-dilations", "2",
            "--stem-norm"]  # fmt: skip
    s = run(capsys, "train", "--dataset", "basicmotions", *argv, "--out", str(model), "--quiet")
    assert s["arch"] == {"patch": 10, "embed_dim": 8, "num_heads": 4, "blocks": 2, "ff_dim": 12,
                         "bias": True, "log_view": True, "clip": 0.0, "stem": "conv",
                         "stem_width": 6,
                         "stem_kernel": 3, "stem_dilations": [2], "stem_stride": 3,
                         "stem_norm": True}  # fmt: skip
    assert s["augment"]["shift"] == 0 and s["epochs"] == 3
    train = load_model(model).meta["train"]
    assert (train["lr"], train["label_smoothing"]) == (0.002, 0.05)
    d = seq_defaults("basicmotions").train
    assert (train["weight_decay"], train["batch_size"]) == (d.weight_decay, d.batch_size)
    ops = load_model(model).model.ops
    assert ops[0]["patch"] == 10 and sum(op["op"] == "ff" for op in ops) == 2
    convs = [op for op in ops if op["op"] == "conv"]  # depthwise k3 s3 d2, pointwise -> E
    assert [(c["kernel"], c["stride"], c["dilation"], c["groups"]) for c in convs] == [
        (3, 3, 2, 6), (1, 1, 1, 1)] and convs[-1]["filters"] == 8  # fmt: skip
    assert len(ops[0]["log_floor"]) == 6  # one floor per channel
    assert len(load_model(model).meta["history"]["loss"]) == 3


@pytest.mark.host
def test_seq_cli_cv_reads_the_train_file_only(capsys, monkeypatch, tmp_path):
    import tinyattn.learn.seqcli as seqcli

    real = seqcli.load_ts_dataset

    def train_only(name, split):
        assert split == "train", "--cv read the TEST file"
        return real(name, split)

    monkeypatch.setattr(seqcli, "load_ts_dataset", train_only)
    monkeypatch.setattr(seqcli, "load_windows", lambda args: seqcli.SeqData(
        "basicmotions", train_only("basicmotions", "train"), None, {}))  # fmt: skip
    s = run(capsys, "train", "--dataset", "basicmotions", "--cv", "4", "--repeats", "2",
            "--epochs", "5", "--out", str(tmp_path / "none.npz"))  # fmt: skip
    assert (s["cv"], s["repeats"], s["seeds"], len(s["folds"])) == (4, 2, [0, 1], 8)
    assert sum(f["n_test"] for f in s["folds"] if f["repeat"] == 0) == 40  # every TRAIN window
    assert all(f["int8_test_accuracy"] is not None for f in s["folds"])
    assert not (tmp_path / "none.npz").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dataset", "basicmotions", "--model", "iris-attn"], "takes rows of features"),
        (["--model", "seq-attn"], "seq-attn takes .ts windows"),
        (["--dataset", "wine", "--model", "seq-attn"], "seq-attn takes .ts windows"),
        (["--patch", "5"], "--patch: seq-attn flags"),
        (["--test", "x.ts"], "--test needs --ts"),
        (["--dataset", "basicmotions", "--embed", "10", "--heads", "4"], "not a multiple"),
        (["--dataset", "basicmotions", "--scaling", "none"], "per channel"),
        (["--dataset", "basicmotions", "--test-fraction", "0.3"], "only for --ts without"),
        (["--dataset", "basicmotions", "--epochs", "0"], "--epochs 0: must be at least 1"),
        (["--dataset", "japanesevowels", "--on-board"], "distils from 4 teachers"),
        (["--dataset", "basicmotions", "--on-board", "--head-only"], "leave out --head-only"),
        (["--ts", "nope.ts"], "nope.ts: cannot read"),
        (["--dataset", "basicmotions", "--stem", "conv", "--on-board"], "not a conv stem"),
        (["--dataset", "basicmotions", "--blocks", "0", "--on-board"],
         "at least one attention block"),
        (["--dataset", "basicmotions", "--log-view", "--on-board"], "train with --log-view"),
        (["--dataset", "basicmotions", "--clip-view", "99", "--on-board"],
         "train with --clip-view"),
        (["--stem", "conv"], "--stem: seq-attn flags"),
        (["--stem-norm"], "--stem-norm: seq-attn flags"),
        (["--dataset", "basicmotions", "--stem-norm"], "the batch norm is the conv stem's"),
        (["--dataset", "basicmotions", "--stem-dilations", "1,x"], "integers separated by"),
        (["--dataset", "basicmotions", "--stem", "conv", "--stem-stride", "0"],
         "--stem-stride 0: must be at least 1"),
        (["--dataset", "basicmotions", "--blocks", "-1"], "--blocks -1: must be at least 0"),
    ],
)
@pytest.mark.host
def test_seq_cli_refusals_are_one_line(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    assert message in refused(capsys, "train", *argv, "--out", str(tmp_path / "m.npz"))


@pytest.mark.host
def test_seq_cli_refuses_missing_values_and_a_test_file_of_another_problem(capsys, tmp_path):
    X = np.ones((4, 5, 2))
    X[2, 3, 1] = np.nan
    y = np.array([0, 1, 0, 1])
    holes = write_ts(tmp_path / "holes.ts", X, None, y, ["p", "q"])
    assert "missing values ('?')" in refused(capsys, "train", "--ts", str(holes))
    uni, _ = write_pair(tmp_path, "univariate")
    _, other = write_pair(tmp_path, "unequal")
    err = refused(capsys, "train", "--ts", str(uni), "--test", str(other))
    assert "pass the TEST file of the same problem" in err


@pytest.mark.host
def test_seq_cli_refuses_train_windows_of_one_class(capsys, tmp_path):
    """As `train --csv` refuses one class: a .ts file holding one class, whether it declares
    two or four (issue 23; before: trained and reported "test accuracy 1.000")."""
    X = np.random.default_rng(0).normal(size=(12, 6, 1))
    for names in (["a", "b"], ["a", "b", "c", "d"]):
        one = write_ts(tmp_path / "one.ts", X, None, np.zeros(12, np.int64), names)
        for extra in ([], ["--cv", "3"]):
            err = refused(capsys, "train", "--ts", str(one), *extra, "--epochs", "1",
                          "--out", str(tmp_path / "m.npz"))  # fmt: skip
            declares = f"(@classLabel declares {' '.join(names)})"
            assert f"one.ts: every window is of class 'a' {declares}" in err, err
            assert "need windows of at least two classes to train" in err, err
    assert not (tmp_path / "m.npz").exists()


# -- Must-show 8: the .ts models on the device ----------------------------------------------------


@pytest.fixture(scope="module")
def ts_models(tmp_path_factory) -> dict[str, tuple[Path, Path, Path]]:
    """kind -> (model.npz, model.bin, TEST .ts) trained and exported through the CLI."""
    out = {}
    for kind in ("univariate", "unequal", "conv", "conv-alone"):
        d = tmp_path_factory.mktemp(kind)
        ts_train, ts_test = write_pair(d, "unequal" if kind.startswith("conv") else kind)
        model, blob = d / "m.npz", d / "m.bin"
        argv = ["train", "--ts", str(ts_train), "--test", str(ts_test), *SMALL, "--quiet"]
        if kind == "conv":  # the conv stem: unequal windows, longer TEST ones (T = 20)
            argv += ["--patch", "2", "--stem", "conv", "--stem-width", "4", "--stem-stride",
                     "2", "--stem-dilations", "1,3"]  # fmt: skip
        if kind == "conv-alone":  # the conv stem alone: no attention block, stride 1, its
            # batch norm folded into the convs
            argv += ["--patch", "2", "--stem", "conv", "--stem-width", "4", "--stem-stride",
                     "1", "--stem-dilations", "2,4", "--blocks", "0", "--stem-norm"]  # fmt: skip
        assert cli.main([*argv, "--out", str(model)]) == 0
        assert cli.main(["export", "--model", str(model), "--out", str(blob)]) == 0
        out[kind] = (model, blob, ts_test)
    return out


@pytest.mark.micropython
@pytest.mark.parametrize("kind", ["univariate", "unequal", "conv", "conv-alone"])
def test_seq_cli_ts_model_on_micropython_matches_intref(ts_models, tmp_path, kind, mpy):
    """The exported blob under the MicroPython unix port (.mpy, viper) on every TEST window
    (cut to T as export does): int8 logits and xq identical to the host's, float within 1e-4."""
    from device_support import literals, run_micropython
    from test_device_seq import FLOAT_TOL, host_window_reference
    from test_device_seq_mp import PARITY_HEAP, SEQ_PARITY, write_windows

    from tinyattn.intmodel.floatref import fit_to_model

    _, blob, ts_test = ts_models[kind]
    test = load_ts(ts_test)
    T = load_model(ts_models[kind][0]).model.ops[0]["steps"]
    X, n, _ = fit_to_model(test.X, test.lengths, T)
    rows = write_windows(tmp_path / "w.txt", X, n)
    head, *out = literals(
        run_micropython(SEQ_PARITY, [mpy, str(blob), "viper", str(rows)], PARITY_HEAP, timeout=600)
    )
    xq, lq, lf = host_window_reference(blob.read_bytes(), X, n)
    assert len(out) == len(X)
    for i, (dxq, dlq, _, same, dlf) in enumerate(out):
        assert dxq == xq[i].tolist() and dlq == lq[i].tolist(), (i, n[i])
        assert same and np.max(np.abs(np.array(dlf) - lf[i])) <= FLOAT_TOL, i


@pytest.mark.serial
@pytest.mark.parametrize("kind", ["univariate", "unequal", "conv", "conv-alone"])
def test_seq_cli_ts_model_parity_on_a_virtual_board(
    ts_models, vboard_factory, capsys, tmp_path, kind
):
    """`tinyattn flash` + `tinyattn parity` (its TEST windows, from the model's meta): int8
    exact on every window, float within tolerance, argmax equal, on the product's 100 KiB
    virtual board."""
    import tinyattn.board.parity as parity

    if not hasattr(parity, "is_seq_blob"):
        pytest.skip("tinyattn parity does not send seq windows yet (host/board/parity.py)")
    vboard = vboard_factory()
    model, blob, ts_test = ts_models[kind]
    assert cli.main(["flash", "--port", vboard.port, "--blob", str(blob)]) == 0
    capsys.readouterr()
    s = run(capsys, "parity", "--port", vboard.port, "--blob", str(blob), "--model", str(model),
            "--report", str(tmp_path / "parity.json"))  # fmt: skip
    n = len(load_ts(ts_test).y)
    assert s["passed"], s
    assert s["samples"] == s["int8_exact"] == s["xq_match"] == s["argmax_agreement"] == n, s
    assert s["float_max_abs_diff"] <= s["float_tol"]
