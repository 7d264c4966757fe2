# Host (CPython): the Python API, `tinyattn.TinyAttnClassifier` (host/estimator.py, docs/api.md).
"""The estimator is `tinyattn train` and `export` on arrays, not a second implementation:
fitted on the rows (or windows) the command trains on, it gives the command's model file
bit for bit and the same blob; its search is the command's search (same pick, same record);
its blob passes `tinyattn parity` on a virtual board; it meets scikit-learn's estimator checks
(`parametrize_with_checks`, no expected failures: docs/api.md); its input errors say what was
wrong; docs/api.md's example runs as written and prints what the page shows.
"""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sklearn = pytest.importorskip(
    "sklearn", reason="scikit-learn not installed (a dependency of tinyattn: pip install .)"
)
from sklearn.base import clone  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

from tinyattn import TinyAttnClassifier, cli  # noqa: E402
from tinyattn.data.tabular import load_dataset, stratified_split  # noqa: E402
from tinyattn.data.timeseries import load_ts_dataset, write_ts  # noqa: E402
from tinyattn.data.windows import from_channels_first  # noqa: E402
from tinyattn.learn.model import load_model  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.host


def _iris():
    """Iris rows, class names as labels, and the seed-0 split `tinyattn train` holds out."""
    ds = load_dataset("iris")
    train_idx, test_idx = stratified_split(ds.y, 0.2, 0)
    return ds.rows, np.array(ds.class_names)[ds.y], train_idx, test_idx


def _numpy3d(windows):
    """tinyattn's Windows [n, steps, channels] as sktime's numpy3D (n, channels, steps)."""
    return windows.X.transpose(0, 2, 1), np.array(windows.class_names)[windows.y]


def _same_weights(a, b) -> bool:
    return a.params.keys() == b.params.keys() and all(
        np.array_equal(v, b.params[k]) for k, v in a.params.items()
    )


# -- one path with the command ----------------------------------------------------------------


def test_api_rows_fit_is_tinyattn_train_and_export(reference_model):
    """Fitted on the 120 rows `tinyattn train` trains on, the estimator holds the command's
    model bit for bit and the blob `tinyattn export` writes; both score the 30 held-out rows
    as the command reports them (27/30, float and int8)."""
    X, y, tr, te = _iris()
    clf = TinyAttnClassifier().fit(X[tr], y[tr])
    ref = load_model(reference_model["npz"])
    assert _same_weights(clf.model_, ref)
    assert clf.blob_ == reference_model["blob"].read_bytes()
    assert list(clf.classes_) == ref.class_names
    assert clf.score(X[te], y[te]) == ref.meta["metrics"]["test_accuracy"] == 0.9
    assert clf.set_params(inference="float").score(X[te], y[te]) == 0.9
    assert clf.train_summary_["n_train"] == 120 and clf.train_summary_["n_test"] == 0


def test_api_windows_fit_is_tinyattn_train_ts(tmp_cwd):
    """Windows (n, channels, steps) are the `.ts` windows of `tinyattn train --ts`: the same
    model file and blob (classes in sorted order, as scikit-learn's `classes_`)."""
    bm = load_ts_dataset("basicmotions", "train")
    X, y = _numpy3d(bm)
    classes, y_idx = np.unique(y, return_inverse=True)
    write_ts("mine_TRAIN.ts", bm.X, bm.lengths, y_idx, list(classes), problem_name="mine")
    argv = ["--ts", "mine_TRAIN.ts", "--test-fraction", "0", "--epochs", "20", "--quiet"]
    assert cli.main(["train", *argv, "--out", "m.npz"]) == 0
    assert cli.main(["export", "--model", "m.npz", "--out", "m.bin"]) == 0
    clf = TinyAttnClassifier(epochs=20).fit(X, y)
    assert _same_weights(clf.model_, load_model("m.npz"))
    assert clf.blob_ == Path("m.bin").read_bytes()
    assert clf.n_channels_ == 6 and clf.model_.ops[0]["steps"] == 100
    Xt, yt = _numpy3d(load_ts_dataset("basicmotions", "test"))
    assert 0.75 <= clf.score(Xt, yt) <= 1.0  # 20 epochs: a smoke figure, not a gate


def test_api_search_is_tinyattn_train_search(tmp_cwd):
    """search=True with a board budget runs the command's search on the same rows: the same
    pick, its CV figures and the same model (the keys differ: a candidate's key holds its
    recipe's test fraction, which the estimator sets to 0)."""
    X, y, tr, _ = _iris()
    flags = ["--search", "--search-folds", "2", "--search-repeats", "1", "--board", "rp2040",
             "--max-ms", "5", "--jobs", "1"]  # fmt: skip
    assert cli.main(["train", *flags, "--out", "s.npz", "--quiet"]) == 0
    clf = TinyAttnClassifier(search=True, search_folds=2, search_repeats=1, board="rp2040",
                             max_ms=5, n_jobs=1).fit(X[tr], y[tr])  # fmt: skip
    ref = load_model("s.npz")
    got = json.loads(json.dumps(clf.train_summary_["search"]))  # as the model file holds it
    want = ref.meta["search"]
    assert got["board"] == "rp2040" and got["budget"]["max_us"] == 5000
    for record in (got, want):
        record["pick"]["train"].pop("test_fraction")
        record["cv"].pop("seconds")
    keys = ("pick", "pick_label", "cv", "budget", "folds", "repeats", "complete")
    assert {k: got[k] for k in keys} == {k: want[k] for k in keys}
    assert _same_weights(clf.model_, ref)


# -- windows: layouts, lengths ----------------------------------------------------------------


def test_api_unequal_lengths_as_list_or_nan_padding_are_the_ts_windows():
    """aeon's list of (channels, steps_i) arrays and sktime's NaN-padded numpy3D give the
    `.ts` reader's windows and lengths, and the same model; a window longer than the model's
    T is classified on its last T steps, as on the board."""
    jv = load_ts_dataset("japanesevowels", "train")
    as_list = [x[:n].T for x, n in zip(jv.X, jv.lengths, strict=True)]
    padded = np.full((len(as_list), jv.n_channels, jv.max_length), np.nan)
    for i, x in enumerate(as_list):
        padded[i, :, : x.shape[1]] = x
    for X in (as_list, padded):
        Xw, lengths = from_channels_first(X)
        assert np.array_equal(Xw, jv.X) and np.array_equal(lengths, jv.lengths)
    y = np.array(jv.class_names)[jv.y]
    a = TinyAttnClassifier(epochs=3).fit(as_list, y)
    b = TinyAttnClassifier(epochs=3).fit(padded, y)
    assert a.blob_ == b.blob_ and np.array_equal(a.predict(as_list), b.predict(padded))
    T = a.model_.ops[0]["steps"]  # 26
    long = np.concatenate([np.zeros((jv.n_channels, 5)), as_list[0], as_list[1]], axis=1)
    assert long.shape[1] > T
    assert np.array_equal(a.predict_proba([long]), a.predict_proba([long[:, -T:]]))


def test_api_seq_rocket_fits_windows():
    X, y = _numpy3d(load_ts_dataset("basicmotions", "train"))
    clf = TinyAttnClassifier("seq-rocket").fit(X, y)
    assert clf.model_.meta["model"] == "seq-rocket" and clf.train_summary_["ops"] <= 150_000
    assert clf.score(X, y) == 1.0


# -- parameters ---------------------------------------------------------------------------------


def test_api_get_set_params_and_clone_round_trip():
    clf = TinyAttnClassifier("seq-rocket", seed=3, search=False, inference="float")
    params = clf.get_params()
    assert params["model"] == "seq-rocket" and params["seed"] == 3 and params["epochs"] is None
    twin = clone(clf)
    assert twin is not clf and twin.get_params() == params
    twin.set_params(model="iris-attn", epochs=7, max_ms=12.5)
    assert (twin.model, twin.epochs, twin.max_ms) == ("iris-attn", 7, 12.5)
    assert TinyAttnClassifier(**params).get_params() == params
    X, y, tr, te = _iris()
    fitted = TinyAttnClassifier(epochs=5).fit(X[tr], y[tr])
    fresh = clone(fitted)
    assert not hasattr(fresh, "classes_") and fresh.get_params() == fitted.get_params()
    again = pickle.loads(pickle.dumps(fitted))
    assert np.array_equal(again.predict_proba(X[te]), fitted.predict_proba(X[te]))


def test_api_import_tinyattn_does_not_import_scikit_learn():
    code = ("import sys, tinyattn; assert 'sklearn' not in sys.modules, 'eager'; "
            "from tinyattn import TinyAttnClassifier; assert 'sklearn' in sys.modules; "
            "print(TinyAttnClassifier.__module__)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "tinyattn.estimator", out.stderr


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize("params, said", [
    ({"epochs": 0}, "epochs=0: must be at least 1"),
    ({"model": "nope"}, "argument model: invalid choice: 'nope'"),
    ({"board": "rp2040"}, "board goes with search"),
    ({"search": True, "max_ms": 5}, "max_ms needs board"),
    ({"model": "seq-rocket"}, "model='seq-rocket' takes windows"),
    ({"search": True, "model": "iris-myattn"}, "not model='iris-myattn'; leave out model"),
])  # fmt: skip
def test_api_bad_parameters_are_refused_in_their_names(params, said):
    X, y, tr, _ = _iris()
    with pytest.raises(ValueError) as exc:
        TinyAttnClassifier(**params).fit(X[tr], y[tr])
    assert said in str(exc.value), str(exc.value)


def test_api_bad_input_is_refused_in_one_sentence():
    X, y, tr, _ = _iris()
    clf = TinyAttnClassifier(epochs=2)
    cases = [
        (X[:, 0], y, "Expected 2D array"),
        (X[:, :, None, None], y, "X has shape (150, 4, 1, 1); give rows"),
        (np.where(np.arange(4) == 2, np.nan, X), y, "Input X contains NaN"),
        (X * 1e31, y, "Input X contains 5.1e+31; values must be finite with |x| <= 1e+30"),
        (X, y[:-1], "inconsistent numbers of samples"),
        (X, np.full(len(y), "a"), "one class"),
        (X, np.linspace(0, 1, len(y)), "Unknown label type"),
    ]
    windows = X[:, :, None].repeat(3, axis=2)  # (150, 4 channels, 3 steps)
    inside = windows.copy()
    inside[7, 1, 0] = np.nan
    cases += [
        (windows, y[:-1], "150 windows and y 149 labels"),
        (inside, y, "Input X contains NaN: window 7, step 0, channel 1"),
        ([windows[0], windows[1, :2]], y[:2], "window 1 has 2 channels, window 0 has 4"),
        ([windows[0], np.full((4, 3), np.nan)], y[:2], "window 1 has no steps"),
    ]
    for Xb, yb, said in cases:
        with pytest.raises(ValueError) as exc:
            clf.fit(Xb, yb)
        assert said in str(exc.value), (said, str(exc.value))
    padded = windows.copy()
    padded[3, :, 2] = np.nan  # the last step of window 3 is padding: fine
    assert TinyAttnClassifier(epochs=2).fit(padded, y).predict(padded).shape == (150,)


def test_api_predict_refuses_other_shapes_and_an_unfitted_estimator(tmp_cwd):
    X, y, tr, te = _iris()
    clf = TinyAttnClassifier(epochs=2)
    calls = (lambda: clf.predict(X), lambda: clf.predict_proba(X),
             lambda: clf.export("m.bin"), lambda: clf.flash(), lambda: clf.parity())  # fmt: skip
    for call in calls:
        with pytest.raises(NotFittedError):
            call()
    clf.fit(X[tr], y[tr])
    checks = [
        (X[:, :3], "X has 3 features, but TinyAttnClassifier is expecting 4"),
        (X[:, :, None], "the model was fitted on rows"),
    ]
    win = TinyAttnClassifier(epochs=2).fit(X[:, None, :], y)  # univariate windows of 4 steps
    for Xb, said in checks:
        with pytest.raises(ValueError, match=re.escape(said)):
            clf.predict(Xb)
    with pytest.raises(ValueError, match=re.escape("pass windows (univariate: X[:, None, :])")):
        win.predict(X)
    said = "X has 2 channels, but TinyAttnClassifier is expecting 1 channels as input"
    with pytest.raises(ValueError, match=said):
        win.predict(X[:, None, :].repeat(2, axis=1))
    with pytest.raises(ValueError, match="export the blob first"):
        clf.flash()
    with pytest.raises(ValueError, match="model file's name"):
        clf.export("m.npz")
    with pytest.raises(ValueError, match="inference='f16'"):
        clf.set_params(inference="f16").predict(X)


# -- scikit-learn's checks ----------------------------------------------------------------------

# Checks expected to fail, with the reason for each (docs/api.md "scikit-learn's checks"):
# none. check_array_api_input skips itself (scikit-learn's reason: SCIPY_ARRAY_API not set).
EXPECTED_FAILED_CHECKS: dict[str, str] = {}


@parametrize_with_checks(
    [TinyAttnClassifier(), TinyAttnClassifier("iris-myattn", inference="float")],
    expected_failed_checks=lambda estimator: EXPECTED_FAILED_CHECKS,
)
def test_api_sklearn_check_estimator(estimator, check):
    check(estimator)


# -- the board: export, flash, parity -----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("kind", ["rows", "windows"])
def test_api_export_passes_tinyattn_parity_on_a_virtual_board(kind, vboard, tmp_cwd, capsys):
    """The exported blob, the model file beside it and the samples it names are what the
    commands take: `tinyattn export` rewrites the same blob, and `tinyattn parity --blob`
    passes on the board the estimator flashed, as does the estimator's own parity."""
    if kind == "rows":
        X, y, _, _ = _iris()
        clf = TinyAttnClassifier().fit(X, y)
    else:
        X, y = _numpy3d(load_ts_dataset("basicmotions", "train"))
        clf = TinyAttnClassifier(epochs=20).fit(X, y)
    report = clf.export("out/model.bin")
    blob = Path("out/model.bin")
    assert blob.read_bytes() == clf.blob_ and report["bytes"] == len(clf.blob_)
    assert sorted(p.name for p in blob.parent.iterdir()) == sorted(
        ["model.bin", "model.npz", "model.csv" if kind == "rows" else "model_TRAIN.ts"]
    )
    assert cli.main(["export", "--model", "out/model.npz", "--out", "again.bin"]) == 0
    assert Path("again.bin").read_bytes() == clf.blob_
    flashed = clf.flash(vboard.port)
    assert f"0x{flashed['blob_crc32']:08x}" == report["crc32"]
    capsys.readouterr()
    argv = ["parity", "--port", vboard.port, "--blob", str(blob), "--report", "p.json",
            "--bench", "0", "--json"]  # fmt: skip
    assert cli.main(argv) == 0, capsys.readouterr().err
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert s["passed"] and s["samples"] == len(y) == s["int8_exact"]
    own = clf.parity(vboard.port, report="own.json")["summary"]
    assert own["passed"] and own["int8_exact"] == len(y) and Path("own.json").is_file()
    rows = json.loads(Path("p.json").read_text())["rows"]  # the board's answers: predict's
    host = clf.predict(X.astype(np.float32))  # the samples travel as float32
    assert [clf.classes_[r["host_pred_int8"]] for r in rows] == list(host)


# -- docs/api.md ----------------------------------------------------------------------------------


def _doc_blocks() -> list[tuple[str, str]]:
    """docs/api.md's ```python blocks, each with the ```text block that follows it ('' if
    none): the output the page shows for it."""
    text = (ROOT / "docs" / "api.md").read_text()
    blocks = re.findall(r"```(python|text)\n(.*?)```", text, re.S)
    out = []
    for i, (kind, body) in enumerate(blocks):
        if kind == "python":
            nxt = blocks[i + 1] if i + 1 < len(blocks) else ("", "")
            out.append((body, nxt[1] if nxt[0] == "text" else ""))
    return out


def test_api_docs_page_is_a_users_page():
    text = (ROOT / "docs" / "api.md").read_text()
    assert not re.search(r"\bissue[- ]?\d|\(#\d|DESIGN §|shared/data", text, re.I)
    assert len(_doc_blocks()) >= 3
    for param in TinyAttnClassifier().get_params():
        assert f"`{param}`" in text, f"docs/api.md does not describe {param}="


@pytest.mark.serial
@pytest.mark.slow
def test_api_docs_example_runs_as_written(tmp_cwd, monkeypatch, capsys):
    """Every ```python block of docs/api.md, in order, in one namespace, on a virtual board
    (no port: build/board under the working directory); each prints the ```text block the
    page shows after it: the same text and integers (sizes, parity counts, verdicts), the
    decimals (accuracies, probabilities: float training, which another CPU's BLAS may round
    otherwise) as decimals."""
    from tinyattn.tools.vboard import find_micropython

    if find_micropython() is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    monkeypatch.delenv("TINYATTN_PORT", raising=False)
    namespace: dict = {"__name__": "__docs__"}
    for code, shown in _doc_blocks():
        exec(compile(code, "docs/api.md", "exec"), namespace)
        printed = capsys.readouterr().out
        assert _decimals_masked(printed) == _decimals_masked(shown), (
            f"docs/api.md shows:\n{shown}\nran:\n{printed}"
        )


def _decimals_masked(text: str) -> str:
    """`text` with each decimal number (an accuracy, a probability) as `<d>`."""
    return re.sub(r"\d+\.\d+", "<d>", text.strip())
