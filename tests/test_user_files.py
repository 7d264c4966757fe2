# Host (CPython): the user's own files — read, refused in one line naming them, or honoured.
"""What a new user's own files met: a Latin-1 CSV (a `temp°C` header) gave a UnicodeDecodeError
traceback in `predict` and a line naming no file in `train`/`parity`; a semicolon CSV was
read as one column; `train --csv` took duplicate column names that every `predict` then
refused; `train --log-view` on rows was ignored; a bench write kept another section's
absolute paths.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tinyattn import cli
from tinyattn.data.tabular import DATA_DIR, load_csv

pytestmark = [pytest.mark.host, pytest.mark.usefixtures("tmp_cwd")]
GOLDEN = Path(__file__).parent / "golden" / "trained"
IRIS = (DATA_DIR / "iris.csv").read_text()


def _fail(capsys: pytest.CaptureFixture, *argv: str) -> str:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    assert code == 2, (code, out.out[-800:], out.err)
    assert "Traceback" not in out.err, out.err
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1, out.err
    return lines[0]


def test_csv_not_utf8_is_one_line_naming_the_file_in_every_command(capsys, tmp_cwd):
    latin = tmp_cwd / "latin.csv"
    head, *rest = IRIS.splitlines()
    latin.write_bytes(("temp°C," + head.split(",", 1)[1] + "\n").encode("latin-1")
                      + "\n".join(rest).encode() + b"\n")  # fmt: skip
    (tmp_cwd / "m.bin").write_bytes((GOLDEN / "iris.bin").read_bytes())
    for argv in (
        ["predict", "--csv", "latin.csv", "--blob", "m.bin"],
        ["train", "--csv", "latin.csv", "--epochs", "1", "--quiet"],
        ["parity", "--csv", "latin.csv", "--blob", "m.bin", "--port", str(tmp_cwd / "nope")],
    ):
        line = _fail(capsys, *argv)
        assert "latin.csv:1: not UTF-8 text (byte 0xb0)" in line and "UTF-8" in line, line


def test_csv_semicolon_and_tab_separated_are_read_as_comma_separated(tmp_cwd):
    want = load_csv(DATA_DIR / "iris.csv")
    for sep, name in ((";", "semi.csv"), ("\t", "tab.csv")):
        (tmp_cwd / name).write_text(IRIS.replace(",", sep))
        got = load_csv(tmp_cwd / name)
        assert got.feature_names == want.feature_names and got.class_names == want.class_names
        assert (got.X == want.X).all() and (got.y == want.y).all()


def test_train_refuses_duplicate_column_names(capsys, tmp_cwd):
    head, *rest = IRIS.splitlines()
    names = head.split(",")
    names[1] = names[0]
    (tmp_cwd / "twice.csv").write_text(",".join(names) + "\n" + "\n".join(rest) + "\n")
    line = _fail(capsys, "train", "--csv", "twice.csv", "--epochs", "1", "--out", "t.npz")
    assert f"twice.csv:1: column {names[0]!r} appears twice" in line, line
    assert not (tmp_cwd / "t.npz").exists()


@pytest.mark.parametrize("flags", [["--log-view"], ["--clip-view", "99"]])
def test_train_input_view_on_rows_is_refused_not_ignored(capsys, tmp_cwd, flags):
    line = _fail(capsys, "train", "--dataset", "iris", *flags, "--epochs", "1",
                 "--out", "t.npz")  # fmt: skip
    assert flags[0] in line and "--search" in line, line
    assert not (tmp_cwd / "t.npz").exists()


def test_bench_doc_writes_leave_no_absolute_path_in_any_section(tmp_cwd):
    from tinyattn.bench import update_doc_section, update_summary

    doc = tmp_cwd / "bench.md"
    doc.write_text(
        "# Benchmarks\n\n## Summary\n```\nfigure  measured\n```\n\n## Device\n```\n"
        f"device benchmark: {tmp_cwd}/build/model.bin\nseq model /tmp/tmpq1x2/bm.bin\n```\n"
    )
    update_doc_section(doc, "Stream", "replay /tmp/tmpz9/r.tasr")
    text = doc.read_text()
    assert not re.search(r"(?<![\w.)])/(?:[^\s/]+/)+", text), text
    assert "device benchmark: build/model.bin" in text and "seq model bm.bin" in text
    doc.write_text(doc.read_text().replace("seq model bm.bin", "seq model /tmp/tmpq1x2/bm.bin"))
    update_summary(doc, [("figure", "1", "", "")])
    assert "/tmp/" not in doc.read_text()


def test_docs_benchmarks_md_holds_no_absolute_path():
    text = (Path(__file__).parent.parent / "docs" / "benchmarks.md").read_text()
    assert not re.findall(r"(?<![\w.)`])/(?:tmp|work|home|root|Users)/\S*", text)


# -- the float path answers no class for what it cannot compute --------------------------------


def test_a_model_trained_after_the_last_export_is_said(capsys, tmp_cwd):
    import os

    (tmp_cwd / "m.bin").write_bytes((GOLDEN / "iris.bin").read_bytes())
    (tmp_cwd / "m.npz").write_bytes((GOLDEN / "iris.npz").read_bytes())
    os.utime(tmp_cwd / "m.bin", (1_000_000, 1_000_000))  # exported long before the training
    assert cli.main(["predict", "--csv", str(DATA_DIR / "iris.csv"), "--blob", "m.bin"]) == 0
    err = capsys.readouterr().err
    assert "note: m.npz is newer than m.bin" in err, err
    assert "'tinyattn export --model m.npz --out m.bin'" in err, err
    os.utime(tmp_cwd / "m.npz", (900_000, 900_000))
    assert cli.main(["predict", "--csv", str(DATA_DIR / "iris.csv"), "--blob", "m.bin"]) == 0
    assert "newer" not in capsys.readouterr().err


def test_float_path_never_answers_a_class_for_nonfinite_inputs_or_logits(attention):
    m = attention.Model(str(GOLDEN / "iris.bin"))
    for x in ([float("nan"), 3.5, 1.4, 0.2], [5.1, float("inf"), 1.4, 0.2]):
        with pytest.raises(ValueError, match="finite"):
            m.classify(x, "float")
        with pytest.raises(ValueError, match="finite"):
            m.classify(x, "int8")  # as it always did
    with pytest.raises(OverflowError, match="float path: logit 0 is nan"):
        m.classify([1e25, 3.5, 1.4, 0.2], "float")
    assert m.classify([5.1, 3.5, 1.4, 0.2], "float") == "setosa"


def test_predict_float_path_refuses_a_sample_whose_logits_overflow(capsys, tmp_cwd):
    (tmp_cwd / "m.npz").write_bytes((GOLDEN / "iris.npz").read_bytes())
    (tmp_cwd / "m.bin").write_bytes((GOLDEN / "iris.bin").read_bytes())  # exported after it
    head, first, second, *_ = IRIS.splitlines()
    big = second.split(",")
    big[0] = "1e25"
    (tmp_cwd / "big.csv").write_text("\n".join([head, first, ",".join(big)]) + "\n")
    line = _fail(capsys, "predict", "--csv", "big.csv", "--blob", "m.bin", "--path", "float")
    assert "big.csv: sample 1: the float path's logits are [nan" in line, line


@pytest.mark.micropython
def test_float_path_overflow_raises_under_micropython():
    from device_support import device_tree, needs_micropython, run_micropython

    if needs_micropython.args[0]:
        pytest.skip(needs_micropython.kwargs["reason"])
    script = (
        "import sys\nsys.path.insert(0, sys.argv[1])\nfrom attention import Model\n"
        "m = Model(sys.argv[2])\n"
        "for x in ([1e25, 3.5, 1.4, 0.2], [float('nan'), 3.5, 1.4, 0.2]):\n"
        "    try:\n        print(repr(m.classify(x, 'float')))\n"
        "    except (ValueError, OverflowError) as e:\n        print(repr(str(e)))\n"
    )
    lines = run_micropython(script, [str(device_tree()), str(GOLDEN / "iris.bin")], "200k")
    assert lines[0].startswith("'float path: logit 0 is ") and "overflow" in lines[0], lines
    assert "finite" in lines[1], lines


# -- the sample rate travels with the data, the model and the app -------------------------------


def _bm_ts(path: Path, rate: float | None, first: int = 0) -> Path:
    from tinyattn.data.timeseries import load_ts_dataset, write_ts

    d = load_ts_dataset("basicmotions", "TRAIN")
    pick = np.r_[first : first + 4, 10 + first : 14 + first]  # Standing, Running
    return write_ts(path, d.X[pick], d.lengths[pick], d.y[pick], d.class_names, "mine",
                    rate=rate)  # fmt: skip


def test_rate_recorded_with_the_data_reaches_the_model_and_the_app(capsys, tmp_cwd):
    from tinyattn.board.app import plan_app
    from tinyattn.board.parity import read_blob_file
    from tinyattn.board.record import write_windows
    from tinyattn.data.timeseries import load_ts
    from tinyattn.learn.model import read_npz

    ts = _bm_ts(tmp_cwd / "mine.ts", 50.0)
    assert load_ts(ts).rate == 50.0
    X = load_ts(ts).X[:2].astype(np.float32)
    write_windows(ts, X, "Walking", 20.0)  # appending keeps the file's rate
    assert load_ts(ts).rate == 50.0 and len(load_ts(ts).y) == 10
    _bm_ts(ts, 50.0)
    assert cli.main(["train", "--ts", "mine.ts", "--epochs", "2", "--out", "m.npz"]) == 0
    assert cli.main(["export", "--model", "m.npz", "--out", "m.bin"]) == 0
    capsys.readouterr()
    assert read_npz(tmp_cwd / "m.npz")[0]["rate"] == 50.0  # the model file
    blob = read_blob_file(tmp_cwd / "m.bin")

    def plan(*extra: str):
        return plan_app(cli.build_parser().parse_args(
            ["flash", "--blob", "m.bin", "--app", "--source", f"replay:{ts}", *extra]), blob)

    p = plan()  # no --rate: the model's
    assert p.rate == 50.0 and p.cfg["source"] == "replay:replay.tasr@50"
    with pytest.raises(cli.CLIError, match="trained on data recorded at 50 steps/s"):
        plan("--rate", "10")
    assert plan("--rate", "50").rate == 50.0
    other = _bm_ts(tmp_cwd / "fast.ts", 200.0)
    with pytest.raises(cli.CLIError, match="recorded at 200 steps/s, the model at 50"):
        plan_app(cli.build_parser().parse_args(
            ["flash", "--blob", "m.bin", "--app", "--source", f"replay:{other}"]), blob)
    # the command refuses before any board: nothing flashed
    line = _fail(capsys, "flash", "--port", str(tmp_cwd / "nope"), "--blob", "m.bin", "--app",
                 "--source", f"replay:{ts}", "--rate", "10")  # fmt: skip
    assert "--rate 10" in line and "nothing was flashed" in line, line


def test_rate_mismatch_refused_at_train_and_record(capsys, tmp_cwd):
    _bm_ts(tmp_cwd / "a.ts", 50.0)
    _bm_ts(tmp_cwd / "b.ts", 10.0, first=4)
    line = _fail(capsys, "train", "--ts", "a.ts", "--test", "b.ts", "--epochs", "1",
                 "--out", "m.npz")  # fmt: skip
    assert "recorded at 10 steps/s" in line and "at 50" in line, line
    before = (tmp_cwd / "a.ts").read_bytes()
    line = _fail(capsys, "record", "--port", "/dev/ttyNOPE9", "--source", "replay:b.ts",
                 "--label", "x", "--seconds", "1", "--out", "a.ts")  # fmt: skip
    assert "plays at 10 steps/s" in line and "recorded at 50" in line, line
    line = _fail(capsys, "record", "--port", "/dev/ttyNOPE9", "--source", "imu:lsm6dsox",
                 "--i2c", "0,5,4", "--rate", "25", "--label", "x", "--seconds", "1",
                 "--out", "a.ts")  # fmt: skip
    assert "--rate 25" in line and "recorded at 50" in line, line
    assert (tmp_cwd / "a.ts").read_bytes() == before


def test_a_commands_unknown_flag_shows_that_commands_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["export", "--bogus"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "usage: tinyattn export" in err, err
    assert "tinyattn export: error: unrecognized arguments: --bogus" in err, err
    args = cli.build_parser().parse_args(["parity", "--dataset", "coffee"])  # any vendored one
    assert args.dataset == "coffee"


def test_parity_takes_the_model_beside_its_blob(capsys, tmp_cwd):
    """`parity --blob build/wine.bin` read build/model.npz's data (Iris) and refused its 4
    features; the model beside the blob (build/wine.npz) names the data, as predict finds it."""
    build = tmp_cwd / "build"
    build.mkdir(exist_ok=True)
    (build / "model.npz").write_bytes((GOLDEN / "iris.npz").read_bytes())
    (build / "wine.npz").write_bytes((GOLDEN / "wine.npz").read_bytes())
    (build / "wine.bin").write_bytes((GOLDEN / "wine.bin").read_bytes())
    line = _fail(capsys, "parity", "--blob", "build/wine.bin", "--port", str(tmp_cwd / "nope"))
    assert "feature" not in line and "no such serial port" in line, line


def test_train_maps_a_test_file_listing_the_classes_in_another_order(capsys, tmp_cwd):
    from tinyattn.data.timeseries import load_ts, write_ts

    _bm_ts(tmp_cwd / "a.ts", None)
    d = load_ts(_bm_ts(tmp_cwd / "b.ts", None, first=4))
    names = list(reversed(d.class_names))
    y = np.array([names.index(d.class_names[k]) for k in d.y])
    write_ts(tmp_cwd / "b.ts", d.X, d.lengths, y, names, "mine")
    assert load_ts(tmp_cwd / "b.ts").class_names == names  # listed in another order
    assert cli.main(["train", "--ts", "a.ts", "--test", "b.ts", "--epochs", "2", "--out",
                     "m.npz", "--json"]) == 0, capsys.readouterr().err  # fmt: skip
    capsys.readouterr()
    assert cli.main(["export", "--model", "m.npz", "--out", "m.bin"]) == 0


@pytest.mark.host
def test_csv_without_a_class_column_says_the_last_column_is_numeric(capsys, tmp_cwd):
    """Iris without `species`: the last numeric column became the label ("class '0.5' has 1
    row"). Class codes (0/1/2) stay labels."""
    lines = (DATA_DIR / "iris.csv").read_text().splitlines()
    (tmp_cwd / "noclass.csv").write_text("\n".join(",".join(r.split(",")[:4]) for r in lines))
    assert cli.main(["train", "--csv", "noclass.csv", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "last column 'petal_width_cm' is numeric" in err and "--target COL" in err, err
    assert cli.main(["train", "--csv", "noclass.csv", "--target", "petal_width_cm",
                     "--epochs", "1", "--quiet"]) in (0, 2)  # asked for: taken as labels
    assert "is numeric" not in capsys.readouterr().err
    codes = [lines[0]] + [",".join(r.split(",")[:4] + [str(i % 3)])
                          for i, r in enumerate(lines[1:])]  # fmt: skip
    (tmp_cwd / "codes.csv").write_text("\n".join(codes))
    assert load_csv(tmp_cwd / "codes.csv").class_names == ["0", "1", "2"]
