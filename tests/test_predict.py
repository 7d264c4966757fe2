# Host (CPython): `tinyattn predict` — the same classes on the host and on a board (Must show 5).
"""Rows of a CSV classified on the host (intref / floatref) and on a virtual board (`--port`)
must give the same classes on both paths; bad input gets parity's one-line errors.

Issue 23: CSV columns are matched by header name (the model file's `feature_names`; its
`target` left out by default), a headerless file by position and said so; `--ts` windows need
no labels (accuracy only when they have some); with `--port` the board is asked which blob it
runs before the data is judged.
"""

from __future__ import annotations

import csv
import json

import pytest

from tinyattn import cli
from tinyattn.data.tabular import DATA_DIR

pytestmark = pytest.mark.usefixtures("tmp_cwd")
IRIS_CSV = DATA_DIR / "iris.csv"
IRIS_FEATURES = "sepal_length_cm,sepal_width_cm,petal_length_cm,petal_width_cm"


def _predict(capsys, *argv: str) -> list[dict]:
    code = cli.main(["predict", *argv, "--json", "--quiet"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)["predictions"]


@pytest.mark.serial
@pytest.mark.parametrize("path", ["int8", "float"])
def test_predict_host_and_board_give_the_same_classes(vboard, reference_model, capsys, path):
    from tinyattn.board.flash import flash

    flash(vboard.port, reference_model["blob"], progress=False)
    blob = str(reference_model["blob"])
    host = _predict(capsys, "--csv", str(IRIS_CSV), "--blob", blob, "--path", path)
    board = _predict(capsys, "--csv", str(IRIS_CSV), "--blob", blob, "--path", path,
                     "--port", vboard.port)  # fmt: skip
    assert len(host) == 150 and host == board
    with IRIS_CSV.open() as f:
        labels = [row["species"] for row in csv.DictReader(f)]
    assert (
        sum(p["class"] == y for p, y in zip(host, labels, strict=True)) >= 135
    )  # a working model


@pytest.mark.host
def test_predict_features_only_csv_and_out_file(reference_model, capsys, tmp_path):
    rows = tmp_path / "rows.csv"
    rows.write_text(f"{IRIS_FEATURES}\n5.1,3.5,1.4,0.2\n6.3,3.3,6.0,2.5\n")
    got = _predict(capsys, "--csv", str(rows), "--blob", str(reference_model["blob"]))
    assert [p["class"] for p in got] == ["setosa", "virginica"]
    out = tmp_path / "preds.csv"
    assert cli.main(["predict", "--csv", str(rows), "--blob", str(reference_model["blob"]),
                     "--out", str(out)]) == 0  # fmt: skip
    assert out.read_text() == "row,pred,class\n0,0,setosa\n1,2,virginica\n"


@pytest.mark.host
@pytest.mark.parametrize(
    ("text", "words"),
    [
        (f"{IRIS_FEATURES}\n5.1,nan,1.4,0.2\n", ":2: column 'sepal_width_cm' is 'nan', not a"),
        (f"{IRIS_FEATURES}\n5.1,abc,1.4,0.2\n", "not a number; features must be numeric"),
        (f"{IRIS_FEATURES}\n5.1,3.5,1.4\n", ":2: 3 fields, header has 4; fix the row"),
        ("sl,sw,pl,pw\n5.1,3.5,1.4,0.2\n", "no column 'sepal_length_cm' (nor 3 more)"),
        ("5.1,3.5,1.4\n6.3,3.3,6.0\n", ":1: no header row and 3 columns"),
        (f"{IRIS_FEATURES}\n", "needs a header row and at least one data row"),
    ],
)
def test_predict_bad_input_one_line_as_parity(reference_model, capsys, tmp_path, text, words):
    rows = tmp_path / "rows.csv"
    rows.write_text(text)
    code = cli.main(["predict", "--csv", str(rows), "--blob", str(reference_model["blob"])])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("tinyattn predict: error: ") and words in lines[0], lines[0]


@pytest.mark.host
def test_predict_ts_needs_a_sequence_model_one_line(reference_model, capsys):
    from tinyattn.data.timeseries import ts_path

    code = cli.main(["predict", "--ts", str(ts_path("basicmotions", "test")), "--blob",
                     str(reference_model["blob"])])  # fmt: skip
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "need a sequence model; this blob takes rows: --csv" in lines[0], lines[0]


# -- issue 23: columns by name, the target remembered, unlabelled windows, the board first ------


def _run(capsys, *argv: str) -> tuple[dict, str]:
    """`tinyattn predict ARGV --json --quiet`: (the JSON, stderr); exit 0 required."""
    code = cli.main(["predict", *argv, "--json", "--quiet"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out), out.err


def _refused(capsys, *argv: str) -> str:
    """`tinyattn predict ARGV` must exit 2 with one line on stderr; returns it."""
    code = cli.main(["predict", *argv])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _iris_columns(path, order: list[int], header: bool = True):
    """Iris's CSV with its columns in `order` (indices into sepal_length_cm .. species)."""
    with IRIS_CSV.open(newline="") as f:
        rows = list(csv.reader(f))[0 if header else 1 :]
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([[r[j] for j in order] for r in rows])
    return path


@pytest.mark.host
def test_predict_csv_matches_columns_by_header_name(reference_model, capsys, tmp_path):
    """Iris with its features in another order gets the classes of the file in training order
    (before: matched by position, every setosa row came out virginica, exit 0)."""
    blob = str(reference_model["blob"])
    want, _ = _run(capsys, "--csv", str(IRIS_CSV), "--blob", blob)
    for order in ([3, 2, 1, 0, 4], [4, 1, 3, 0, 2]):  # label last, label first
        path = _iris_columns(tmp_path / "shuffled.csv", order)
        got, _ = _run(capsys, "--csv", str(path), "--blob", blob)
        assert got["predictions"] == want["predictions"], order
        assert got["columns"] == want["columns"] == "name"


@pytest.mark.host
def test_predict_csv_refuses_a_missing_or_extra_column_by_name(reference_model, capsys, tmp_path):
    blob = str(reference_model["blob"])
    extra = tmp_path / "extra.csv"
    extra.write_text(f"id,{IRIS_FEATURES},species\n7,5.1,3.5,1.4,0.2,setosa\n")
    err = _refused(capsys, "--csv", str(extra), "--blob", blob)
    assert "extra.csv: column 'id' is not a feature of the model" in err, err
    assert "drop it, or name the label column with --target COL" in err, err
    renamed = tmp_path / "renamed.csv"
    renamed.write_text("sepal_length_cm,sepal_width_cm,petal_length_cm,pw\n5.1,3.5,1.4,0.2\n")
    err = _refused(capsys, "--csv", str(renamed), "--blob", blob)
    assert "renamed.csv: no column 'petal_width_cm'; the model takes sepal_length_cm" in err, err


@pytest.mark.host
def test_predict_csv_without_a_header_is_read_by_position_and_says_so(
    reference_model, capsys, tmp_path
):
    blob = str(reference_model["blob"])
    want, _ = _run(capsys, "--csv", str(IRIS_CSV), "--blob", blob)
    for order in ([0, 1, 2, 3, 4], [0, 1, 2, 3]):  # with the label last, and without it
        path = _iris_columns(tmp_path / "noheader.csv", order, header=False)
        got, err = _run(capsys, "--csv", str(path), "--blob", blob)
        assert got["columns"] == "position" and got["predictions"] == want["predictions"]
        assert "noheader.csv: no header row; columns taken by position" in err, err


@pytest.mark.host
def test_predict_csv_leaves_out_the_target_the_model_file_remembers(
    reference_model, capsys, tmp_path
):
    """`train --csv my.csv --target species` (the label not last), then `predict --csv my.csv`
    with no --target: the model file names its target and features (before: the text column
    was read as a feature, exit 2)."""
    from tinyattn.learn.model import load_model

    mine = _iris_columns(tmp_path / "my.csv", [4, 0, 1, 2, 3])
    model, blob = tmp_path / "m.npz", tmp_path / "m.bin"
    argv = ["--csv", str(mine), "--target", "species", "--out", str(model), "--quiet"]
    assert cli.main(["train", *argv]) == 0
    assert cli.main(["export", "--model", str(model), "--out", str(blob)]) == 0
    capsys.readouterr()
    got, _ = _run(capsys, "--csv", str(mine), "--blob", str(blob))
    assert len(got["predictions"]) == 150 and got["columns"] == "name"
    meta = load_model(model).meta
    assert meta["target"] == "species" and meta["feature_names"] == IRIS_FEATURES.split(",")
    assert load_model(reference_model["npz"]).meta["target"] == "species"  # vendored too


@pytest.fixture(scope="module")
def seq_model(tmp_path_factory):
    """A small seq-attn model on a univariate `.ts` pair (classes slow, fast): (model.npz,
    model.bin, TEST .ts)."""
    from test_seq_cli import SMALL, write_pair

    d = tmp_path_factory.mktemp("seq")
    ts_train, ts_test = write_pair(d, "univariate")
    model, blob = d / "model.npz", d / "model.bin"
    argv = ["train", "--ts", str(ts_train), "--test", str(ts_test), *SMALL, "--quiet"]
    assert cli.main([*argv, "--out", str(model)]) == 0
    assert cli.main(["export", "--model", str(model), "--out", str(blob)]) == 0
    return model, blob, ts_test


def _relabel(src, dst, header_line: str | None, label) -> str:
    """`src` with its `@classLabel` line replaced (None: kept) and case i's label `label(i,
    old)` (None: no label)."""
    out, i = [], 0
    for line in src.read_text().splitlines():
        if line.startswith("@classLabel") and header_line is not None:
            line = header_line
        elif line and not line.startswith("@"):
            values, old = line.rsplit(":", 1)
            new = label(i, old)
            line = values if new is None else f"{values}:{new}"
            i += 1
        out.append(line)
    dst.write_text("\n".join(out) + "\n")
    return str(dst)


@pytest.mark.host
def test_predict_ts_takes_unlabelled_windows_and_undeclared_labels(seq_model, capsys, tmp_path):
    """New data has no labels (`@classLabel false`) or labels the model never saw: both are
    classified; accuracy is said only when labels are there (before: refused, exit 2)."""
    _, blob, ts_test = seq_model
    bare = _relabel(ts_test, tmp_path / "bare.ts", "@classLabel false", lambda i, old: None)
    got, _ = _run(capsys, "--ts", bare, "--blob", str(blob))
    labelled, _ = _run(capsys, "--ts", str(ts_test), "--blob", str(blob))
    assert got["predictions"] == labelled["predictions"] and "accuracy" not in got
    assert labelled["labelled"] == 40 and labelled["accuracy"] >= 0.9
    assert cli.main(["predict", "--ts", bare, "--blob", str(blob)]) == 0
    assert "accuracy" not in capsys.readouterr().err
    odd = _relabel(ts_test, tmp_path / "odd.ts", None,
                   lambda i, old: "medium" if i < 10 else None if i < 20 else old)  # fmt: skip
    got, _ = _run(capsys, "--ts", odd, "--blob", str(blob))
    hits = sum(p["class"] == ("slow", "fast")[i % 2] for i, p in enumerate(got["predictions"])
               if i >= 20)  # fmt: skip
    assert got["labelled"] == 30 and got["accuracy"] == pytest.approx(hits / 30)
    assert cli.main(["predict", "--ts", odd, "--blob", str(blob)]) == 0
    err = capsys.readouterr().err
    assert f"accuracy {hits / 30:.3f} ({hits}/30 labelled windows; 10 without a label; 10 " \
           "with a class the model does not have)" in err, err  # fmt: skip


@pytest.mark.serial
def test_predict_ts_on_a_board_asks_the_board_first(seq_model, reference_model, vboard, capsys):
    """`predict --ts W.ts --port P` with the host's blob of rows while the board runs the
    sequence model: the board's blob is named (before: "this blob takes rows", the host's
    blob judged); with the blob the board runs, the board's classes are the host's."""
    from tinyattn.board.flash import flash
    from tinyattn.intmodel.blob import read_blob

    _, blob, ts_test = seq_model
    flash(vboard.port, blob, progress=False)
    crc = read_blob(blob.read_bytes()).crc32
    err = _refused(capsys, "--ts", str(ts_test), "--blob", str(reference_model["blob"]),
                   "--port", vboard.port)  # fmt: skip
    assert f"runs blob CRC {crc:08x}" in err and "takes rows" not in err, err
    host, _ = _run(capsys, "--ts", str(ts_test), "--blob", str(blob))
    board, _ = _run(capsys, "--ts", str(ts_test), "--blob", str(blob), "--port", vboard.port)
    assert board["predictions"] == host["predictions"] and board["accuracy"] == host["accuracy"]


@pytest.mark.host
def test_predict_csv_with_a_label_column_says_the_accuracy_as_ts_does(
    reference_model, capsys, tmp_path
):
    """`predict --ts` said the accuracy over labelled windows; `predict --csv` with the label
    column said nothing. By name (the model file), by position, and without a header."""
    rows = tmp_path / "rows.csv"
    rows.write_text(f"{IRIS_FEATURES},species\n5.1,3.5,1.4,0.2,setosa\n6.3,3.3,6.0,2.5,setosa\n"
                    "4.9,3.0,1.4,0.2,\n")  # fmt: skip
    bare = tmp_path / "bare.csv"
    bare.write_text("5.1,3.5,1.4,0.2,setosa\n6.3,3.3,6.0,2.5,setosa\n")
    for argv in (["--csv", str(rows), "--model", str(reference_model["npz"])],
                 ["--csv", str(rows)], ["--csv", str(bare)]):  # fmt: skip
        assert cli.main(["predict", *argv, "--blob", str(reference_model["blob"])]) == 0
        err = capsys.readouterr().err
        assert "accuracy 0.500 (1/2 labelled rows" in err, (argv, err)
    got = _predict(capsys, "--csv", str(rows), "--blob", str(reference_model["blob"]))
    assert len(got) == 3
