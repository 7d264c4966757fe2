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


def test_train_log_view_on_rows_is_refused_not_ignored(capsys, tmp_cwd):
    line = _fail(capsys, "train", "--dataset", "iris", "--log-view", "--epochs", "1",
                 "--out", "t.npz")  # fmt: skip
    assert "--log-view" in line and "--search" in line, line
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
