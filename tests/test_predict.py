# Host (CPython): `tinyattn predict` — the same classes on the host and on a board (Must show 5).
"""Rows of a CSV classified on the host (intref / floatref) and on a virtual board (`--port`)
must give the same classes on both paths; bad input gets parity's one-line errors.
"""

from __future__ import annotations

import csv
import json

import pytest

from tinyattn import cli
from tinyattn.data.tabular import DATA_DIR

pytestmark = pytest.mark.usefixtures("tmp_cwd")
IRIS_CSV = DATA_DIR / "iris.csv"


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
    rows.write_text("sl,sw,pl,pw\n5.1,3.5,1.4,0.2\n6.3,3.3,6.0,2.5\n")
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
        ("sl,sw,pl,pw\n5.1,nan,1.4,0.2\n", ":2: column 'sw' is 'nan', not a finite number"),
        ("sl,sw,pl,pw\n5.1,abc,1.4,0.2\n", "not a number; features must be numeric"),
        ("sl,sw,pl,pw\n5.1,3.5,1.4\n", ":2: 3 fields, header has 4; fix the row"),
        ("sl,sw,pl\n5.1,3.5,1.4\n", "has 3 feature columns"),
        ("5.1,3.5,1.4,0.2,setosa\n6.3,3.3,6.0,2.5,virginica\n", "add a header row"),
        ("sl,sw,pl,pw\n", "needs a header row and at least one data row"),
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
