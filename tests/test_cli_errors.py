# Host (CPython): bad input through the real CLI — one line naming the problem and the fix.
"""Issue 6, item 3: NaN/inf/huge features, non-numeric values, wrong feature counts (CSVs with
missing or extra columns), a missing --target column, missing or corrupt model/blob files, a
port that does not exist or that another program holds. Each must end the command with a
non-zero exit status and exactly one line on stderr, `tinyattn CMD: error: …`, that names the
problem and says what to do — never a traceback.

Features reach the tool through CSV files (`tinyattn parity --csv`, `train --csv`, `export
--csv`): there is no single-sample command. Most cases run `tinyattn.cli.main([...])` in
process (stderr from capsys); a few run the console entry point as a subprocess, where a
traceback would really be printed. No case may reach a board: commands that would talk to
one get a port path that does not exist, so a missed check shows up as the wrong message.
Every case runs in an empty working directory, so the defaults under build/ are its own.
"""

from __future__ import annotations

import csv
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tinyattn import cli
from tinyattn.data.tabular import DATA_DIR

serial = pytest.importorskip("serial")
# each test in its own working directory: parity without --model would otherwise read whatever
# build/model.npz a previous `make train` left in the checkout (a Wine model: wrong messages)
pytestmark = pytest.mark.usefixtures("tmp_cwd")

CLI = [sys.executable, "-c", "import sys; from tinyattn.cli import main; sys.exit(main())"]
IRIS_CSV = DATA_DIR / "iris.csv"


def _error_line(err: str, command: str) -> str:
    """The one stderr line of a failed command (AssertionError if there are more)."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"tinyattn {command}: error: "), lines[0]
    return lines[0]


def _run(capsys: pytest.CaptureFixture, *argv: str) -> str:
    """Run the CLI in process; it must fail (status 2) with one line. Returns that line."""
    code = cli.main(list(argv))
    out = capsys.readouterr()
    assert code == 2, (code, out.out[-500:], out.err)
    return _error_line(out.err, argv[0])


def _iris_rows() -> list[list[str]]:
    with IRIS_CSV.open(newline="") as f:
        return [row for row in csv.reader(f) if row]


def _csv(tmp_path: Path, name: str, rows: list[list[str]]) -> Path:
    path = tmp_path / name
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    return path


def _iris_with(tmp_path: Path, line: int, column: int, value: str) -> Path:
    """iris.csv with the cell at 1-based file `line`, 0-based `column` replaced by `value`."""
    rows = _iris_rows()
    rows[line - 1][column] = value
    return _csv(tmp_path, "iris_edit.csv", rows)


@pytest.fixture
def no_port(tmp_path: Path) -> str:
    return str(tmp_path / "ttyNOPE0")


# -- features from a CSV ----------------------------------------------------------------------

BAD_VALUES = [  # (cell, words the message must have)
    ("nan", "not a finite number"),
    ("NaN", "not a finite number"),
    ("inf", "not a finite number"),
    ("-Infinity", "not a finite number"),
    ("1e300", "too large"),
    ("-3e31", "too large"),
    ("abc", "not a number"),
    ("", "is empty"),  # fill the cell, not drop the column
    ("5,1", "fields, header has"),  # a decimal comma splits the row into one field more
]


@pytest.mark.host
@pytest.mark.parametrize(("cell", "words"), BAD_VALUES)
def test_cli_errors_parity_csv_bad_feature_values(
    capsys, tmp_path, reference_model, no_port, cell, words
):
    if cell == "5,1":
        rows = _iris_rows()
        rows[6] = ["5", "1", *rows[6][1:]]
        path = _csv(tmp_path, "comma.csv", rows)
    else:
        path = _iris_with(tmp_path, 7, 2, cell)
    line = _run(capsys, "parity", "--port", no_port, "--blob", str(reference_model["blob"]),
                "--csv", str(path), "--target", "species", "--quiet")  # fmt: skip
    assert f"{path}:7" in line and words in line, line  # file, line number, problem
    if cell != "5,1":  # the column, and what to do
        assert "'petal_length_cm'" in line, line
        fix = {"not a number": "drop or encode", "is empty": "fill the cell or drop the row"}
        assert fix.get(words, "fix or drop the row") in line, line
    else:
        assert "fix the row" in line


@pytest.mark.host
@pytest.mark.parametrize("cell", ["nan", "1e300", "abc"])
def test_cli_errors_train_csv_bad_feature_values(capsys, tmp_path, cell):
    path = _iris_with(tmp_path, 12, 0, cell)
    line = _run(capsys, "train", "--csv", str(path), "--target", "species",
                "--out", str(tmp_path / "m.npz"), "--quiet")  # fmt: skip
    assert f"{path}:12" in line and "sepal_length_cm" in line, line
    assert not (tmp_path / "m.npz").exists()


@pytest.mark.host
@pytest.mark.parametrize(
    ("edit", "n_features"),
    [("drop sepal_width_cm", 3), ("add a column", 5)],
)
def test_cli_errors_parity_csv_wrong_feature_count(
    capsys, tmp_path, reference_model, no_port, edit, n_features
):
    rows = _iris_rows()
    if edit.startswith("drop"):
        rows = [row[:1] + row[2:] for row in rows]
    else:
        rows = [row[:2] + (["humidity"] if i == 0 else ["0.5"]) + row[2:]
                for i, row in enumerate(rows)]  # fmt: skip
    path = _csv(tmp_path, "cols.csv", rows)
    line = _run(capsys, "parity", "--port", no_port, "--blob", str(reference_model["blob"]),
                "--csv", str(path), "--target", "species", "--quiet")  # fmt: skip
    assert f"has {n_features} feature columns" in line and "the model takes 4" in line, line
    assert "same order" in line


@pytest.mark.host
@pytest.mark.parametrize(
    ("rows", "words"),
    [
        ([["a", "b", "species"], ["1", "2", "x"], ["3", "y"]], ":3: 2 fields, header has 3"),
        ([["a", "b", "species"], ["1", "2", "x", "9"]], ":2: 4 fields, header has 3"),
        ([["a", "b", "species"]], "needs a header row and at least one data row"),
        ([["species"], ["x"], ["y"]], "only the target column"),
    ],
)
def test_cli_errors_parity_csv_missing_or_extra_fields(
    capsys, tmp_path, reference_model, no_port, rows, words
):
    path = _csv(tmp_path, "rows.csv", rows)
    line = _run(capsys, "parity", "--port", no_port, "--blob", str(reference_model["blob"]),
                "--csv", str(path), "--target", "species", "--quiet")  # fmt: skip
    assert words in line, line


@pytest.mark.host
def test_cli_errors_missing_target_column(capsys, tmp_path, reference_model, no_port):
    line = _run(capsys, "parity", "--port", no_port, "--blob", str(reference_model["blob"]),
                "--csv", str(IRIS_CSV), "--target", "label", "--quiet")  # fmt: skip
    assert "no column named 'label'" in line and "species" in line and "--target" in line
    line = _run(capsys, "train", "--csv", str(IRIS_CSV), "--target", "label",
                "--out", str(tmp_path / "m.npz"), "--quiet")  # fmt: skip
    assert "no column named 'label'" in line and "--target" in line
    line = _run(capsys, "parity", "--port", no_port, "--blob", str(reference_model["blob"]),
                "--target", "species", "--quiet")  # fmt: skip
    assert "--target needs --csv" in line


@pytest.mark.host
def test_cli_errors_export_csv_of_another_shape(capsys, tmp_path, reference_model):
    rows = [row[:1] + row[2:] for row in _iris_rows()]
    path = _csv(tmp_path, "three.csv", rows)
    line = _run(capsys, "export", "--model", str(reference_model["npz"]), "--out",
                str(tmp_path / "m.bin"), "--csv", str(path), "--target", "species")  # fmt: skip
    assert "3 features" in line and "and 4" in line and "re-train" in line, line
    assert not (tmp_path / "m.bin").exists()


# -- missing and corrupt files ----------------------------------------------------------------


@pytest.mark.host
def test_cli_errors_missing_files(capsys, tmp_path, reference_model, no_port):
    gone = tmp_path / "gone"
    blob = str(reference_model["blob"])
    line = _run(capsys, "parity", "--port", no_port, "--blob", f"{gone}.bin", "--quiet")
    assert "no such blob" in line and f"there is no model file {gone}.npz" in line, line
    assert f"--model {gone}.npz" not in line  # a remedy never names a model that is not there
    Path(f"{gone}.npz").write_bytes(reference_model["npz"].read_bytes())
    line = _run(capsys, "parity", "--port", no_port, "--blob", f"{gone}.bin", "--quiet")
    assert "no such blob" in line and f"'tinyattn export --model {gone}.npz --out {gone}.bin'" \
        in line
    Path(f"{gone}.npz").unlink()
    line = _run(capsys, "parity", "--port", no_port, "--blob", blob, "--model", f"{gone}.npz")
    assert "no such model file" in line and "--model" in line
    line = _run(capsys, "parity", "--port", no_port, "--blob", blob, "--csv", f"{gone}.csv")
    assert f"{gone}.csv: cannot read" in line and "check the path" in line
    line = _run(capsys, "flash", "--port", no_port, "--blob", f"{gone}.bin", "--quiet")
    assert "no such blob" in line and f"there is no model file {gone}.npz" in line, line
    assert f"--model {gone}.npz" not in line  # a remedy never names a model that is not there
    Path(f"{gone}.npz").write_bytes(reference_model["npz"].read_bytes())
    line = _run(capsys, "parity", "--port", no_port, "--blob", f"{gone}.bin", "--quiet")
    assert "no such blob" in line and f"'tinyattn export --model {gone}.npz --out {gone}.bin'" \
        in line
    Path(f"{gone}.npz").unlink()
    line = _run(capsys, "export", "--model", f"{gone}.npz", "--out", str(tmp_path / "m.bin"))
    assert "not found" in line and "train" in line
    line = _run(capsys, "train", "--csv", f"{gone}.csv", "--out", str(tmp_path / "m.npz"))
    assert "cannot read" in line


@pytest.mark.host
def test_cli_errors_corrupt_blob_and_model(capsys, tmp_path, reference_model, no_port):
    data = bytearray(reference_model["blob"].read_bytes())
    data[200] ^= 0x10
    bad_blob = tmp_path / "flipped.bin"
    bad_blob.write_bytes(bytes(data))
    (tmp_path / "flipped.npz").write_bytes(reference_model["npz"].read_bytes())  # its model
    line = _run(capsys, "parity", "--port", no_port, "--blob", str(bad_blob), "--quiet")
    assert "CRC mismatch" in line and "make " not in line, line
    stem = tmp_path / "flipped"
    assert line.endswith(f"re-run 'tinyattn export --model {stem}.npz --out {stem}.bin' and "
                         f"'tinyattn flash --port {no_port} --blob {stem}.bin'"), line
    cut = tmp_path / "cut.bin"
    cut.write_bytes(bytes(data[:1000]))
    line = _run(capsys, "parity", "--port", no_port, "--blob", str(cut), "--quiet")
    assert "truncated: 1000 of" in line
    bad_npz = tmp_path / "cut.npz"
    bad_npz.write_bytes(reference_model["npz"].read_bytes()[:300])
    line = _run(capsys, "parity", "--port", no_port, "--blob", str(reference_model["blob"]),
                "--model", str(bad_npz), "--quiet")  # fmt: skip
    assert "not a readable tinyattn model" in line and "--dataset or --csv" in line
    future = bytearray(reference_model["blob"].read_bytes())
    struct.pack_into("<H", future, 4, 2)
    (tmp_path / "v2.bin").write_bytes(bytes(future))
    line = _run(capsys, "flash", "--port", no_port, "--blob", str(tmp_path / "v2.bin"))
    assert "unsupported format version 2" in line and "nothing was flashed" in line, line


@pytest.mark.host
def test_cli_errors_export_truncated_model(tmp_path, reference_model):
    bad = tmp_path / "cut.npz"
    bad.write_bytes(reference_model["npz"].read_bytes()[:300])
    proc = subprocess.run([*CLI, "export", "--model", str(bad), "--out", str(tmp_path / "m.bin")],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2
    assert "cut.npz" in _error_line(proc.stderr, "export")


# -- ports ------------------------------------------------------------------------------------


@pytest.mark.host
@pytest.mark.parametrize("command", ["parity", "flash"])
def test_cli_errors_port_that_does_not_exist(tmp_path, reference_model, command):
    """As a subprocess: the console entry point, exactly as a user runs it."""
    argv = [command, "--port", "/dev/ttyNOPE9", "--blob", str(reference_model["blob"]),
            "--quiet"]  # fmt: skip
    proc = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc
    line = _error_line(proc.stderr, command)
    assert "/dev/ttyNOPE9: no such serial port" in line and "tinyattn board" in line, line


@pytest.mark.serial
@pytest.mark.parametrize("command", ["parity", "flash"])
def test_cli_errors_port_busy(vboard, reference_model, capsys, command):
    """Another program (here a pyserial handle opened exclusively) holds the board's port."""
    holder = serial.Serial(vboard.port, 115200, exclusive=True)
    try:
        line = _run(capsys, command, "--port", vboard.port,
                    "--blob", str(reference_model["blob"]), "--quiet")  # fmt: skip
    finally:
        holder.close()
    assert f"{vboard.port}: port is busy" in line and "close it and retry" in line, line


# -- issue 12 defects ---------------------------------------------------------------------------


@pytest.mark.host
def test_cli_errors_flash_mpy_without_mpy_cross(capsys, reference_model, no_port, monkeypatch):
    monkeypatch.setenv("TINYATTN_MPY_CROSS", "/nonexistent/mpy-cross")
    line = _run(capsys, "flash", "--mpy", "--port", no_port, "--blob",
                str(reference_model["blob"]), "--quiet")  # fmt: skip
    assert "mpy-cross not found" in line and "--py" in line, line


@pytest.mark.host
@pytest.mark.parametrize("command", ["flash", "parity", "demo"])
def test_cli_errors_no_unix_port_for_the_virtual_board(
    capsys, reference_model, monkeypatch, command
):
    monkeypatch.setenv("TINYATTN_MICROPYTHON", "/nonexistent/micropython")
    monkeypatch.delenv("TINYATTN_PORT", raising=False)
    extra = ["--model", str(reference_model["npz"])] if command == "demo" else ["--quiet"]
    line = _run(capsys, command, "--blob", str(reference_model["blob"]), *extra)
    assert "MicroPython unix port not found" in line and "--port" in line, line


@pytest.mark.host
@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["parity", "--bench", "1000000"], "0 (no bench) to 10000"),
        (["parity", "--timeout", "0"], "above 0"),
        (["parity", "--timeout", "nan"], "above 0"),
        (["flash", "--timeout", "0"], "above 0"),
        (["flash", "--py", "--mpy"], "not allowed with"),
    ],
)
def test_cli_errors_bad_numbers_refused_by_the_parser(capsys, argv, words):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.host
def test_cli_errors_board_refusing_bench_is_a_link_error_not_dropped():
    """`parity --bench N` beyond the board's limit (an older host, or another server): the
    board's error reply ends the run with that error (exit 2), it is not silently dropped."""
    import numpy as np

    from tinyattn.board.parity import compare, run_device

    class Link:
        port = "fake"
        timeout = 1.0

        def request(self, op, **fields):
            if op == "info":
                return {"ok": True, "max_batch": 16, "max_line": 4096}
            if op == "batch":
                n = len(fields["samples"])
                return {"ok": True, "n": n, "pred": [0] * n}
            return {"ok": False, "error": "n must be an integer from 1 to 10000"}

    X = np.zeros((2, 4))
    dev = run_device(Link(), X, "float", 1_000_000, False)
    assert "refused bench" in dev["error"] and "1 to 10000" in dev["error"]
    assert compare({"logits": np.zeros((2, 3))}, dev, np.zeros(2), "float")["summary"][
        "passed"] is False  # fmt: skip


@pytest.mark.serial
@pytest.mark.parametrize("command", ["flash", "parity"])
def test_cli_errors_silent_port_gives_up_after_timeout(vboard, reference_model, capsys, command):
    """flash used to wait 60 s on a silent board, parity 10 s: one --timeout for both."""
    import time

    vboard.set_silent(True)
    t0 = time.monotonic()
    line = _run(capsys, command, "--port", vboard.port, "--blob",
                str(reference_model["blob"]), "--timeout", "2", "--quiet")  # fmt: skip
    assert time.monotonic() - t0 < 12
    assert "within 2s" in line and "--timeout" in line, line


@pytest.mark.host
def test_cli_errors_tinyattn_port_without_a_board_skips_serial_tests(tmp_path):
    """TINYATTN_PORT naming no board: serial tests are skipped with one reason, not failed."""
    import os

    env = dict(os.environ, TINYATTN_PORT=str(tmp_path / "ttyNOPE0"))
    test = Path(__file__).with_name("test_serial_parity.py")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         f"{test}::test_server_answers_errors_as_replies",
         f"{test}::test_parity_single_path_int8_and_float"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "2 skipped" in proc.stdout and "no board answers there" in proc.stdout, proc.stdout


@pytest.mark.host
def test_train_out_naming_a_blob_is_refused_before_training(tmp_path, capsys):
    """`train --out m.bin` wrote a model file over a blob without a word."""
    blob = tmp_path / "m.bin"
    blob.write_bytes(b"TATN" + bytes(60))
    other = tmp_path / "m.dat"  # a blob by content, whatever its name
    other.write_bytes(blob.read_bytes())
    for out in (blob, other):
        assert cli.main(["train", "--out", str(out), "--epochs", "1", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "names a blob" in err and "m.npz" in err and "nothing was written" in err, err
        assert out.read_bytes() == b"TATN" + bytes(60)
