# Host (CPython): every remedy the CLI prints is the exact command that fixes the problem.
"""An error line ends with what to run next (`run 'tinyattn flash --boards 3'`): that command
carries the boards, link settings and files the user gave, names `tinyattn` (no Makefile is
needed: these tests run in an empty folder), and — run as printed — fixes it, so the command
that failed then succeeds. Also the advice of the board commands that was wrong: a heap too
small (flashing again does not help: the heap needed and free), on-board training interrupted
(resumable) or never started (nothing to resume), Ctrl-C during flash (the staged copies), and
the flash listing and epoch counts.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tinyattn import cli
from tinyattn.board import flash as flash_mod
from tinyattn.data.tabular import DATA_DIR
from tinyattn.tools.vboard import find_micropython

pytestmark = pytest.mark.usefixtures("tmp_cwd")
IRIS_CSV = DATA_DIR / "iris.csv"


def _remedies(text: str) -> list[str]:
    """The commands quoted in an error line: 'tinyattn …'."""
    return re.findall(r"'(tinyattn [^']*)'", text)


def _run_remedy(command: str, capsys: pytest.CaptureFixture) -> None:
    """Run a printed remedy as a user would paste it; it must succeed."""
    words = shlex.split(command)
    assert words[0] == "tinyattn", command
    code = cli.main(words[1:])
    out = capsys.readouterr()
    assert code == 0, (command, out.out[-800:], out.err)


def _fail(capsys: pytest.CaptureFixture, *argv: str, code: int = 2) -> str:
    """Run the CLI; it must fail with status `code`; returns its last stderr line."""
    got = cli.main(list(argv))
    out = capsys.readouterr()
    assert got == code, (got, out.out[-800:], out.err)
    assert "Traceback" not in out.err, out.err
    return [line for line in out.err.splitlines() if line.strip()][-1]


def _place_model(tmp_cwd: Path, reference_model: dict[str, Path], stem: str) -> Path:
    """The reference model as build/STEM.npz (the Makefile's names); returns the path."""
    npz = tmp_cwd / "build" / f"{stem}.npz"
    npz.parent.mkdir(parents=True, exist_ok=True)
    npz.write_bytes(reference_model["npz"].read_bytes())
    return npz


# -- the commands themselves ------------------------------------------------------------------


@pytest.mark.host
def test_remedies_carry_the_users_boards_link_and_files():
    from tinyattn import remedy

    parser = cli.build_parser()

    def use(*argv: str) -> None:
        remedy.use(list(argv), parser.parse_args(list(argv)))

    try:
        use("parity", "--boards", "3")
        assert remedy.flash() == "tinyattn flash --boards 3"
        assert remedy.export() == "tinyattn export"
        use("parity", "--port", "/dev/ttyUSB0", "--port", "/dev/ttyUSB1", "--baud", "57600",
            "--timeout", "20", "--blob", "build/wine.bin")  # fmt: skip
        assert remedy.flash() == ("tinyattn flash --port /dev/ttyUSB0 --port /dev/ttyUSB1 "
                                  "--baud 57600 --timeout 20 --blob build/wine.bin")  # fmt: skip
        assert remedy.export() == "tinyattn export --model build/wine.npz --out build/wine.bin"
        use("predict", "--csv", "x.csv", "--port", "/dev/ttyACM0", "--blob", "my models/m.bin")
        assert remedy.flash() == "tinyattn flash --port /dev/ttyACM0 --blob 'my models/m.bin'"
        assert remedy.again("predict") == (
            "tinyattn predict --csv x.csv --port /dev/ttyACM0 --blob 'my models/m.bin'"
        )
        use("train", "--on-board", "--port", "/dev/ttyACM0", "--baud", "9600")
        assert remedy.flash(train=True) == "tinyattn flash --port /dev/ttyACM0 --baud 9600 --train"
        for command in (remedy.flash(), remedy.flash(train=True, mpy=True), remedy.export()):
            parser.parse_args(shlex.split(command)[1:])  # each parses as printed
    finally:
        remedy.use(None, None)
    assert remedy.flash() == "tinyattn flash" and remedy.again("flash") == "tinyattn flash"


# -- running the remedies ---------------------------------------------------------------------


@pytest.mark.host
def test_remedies_outside_a_clone_name_tinyattn_and_run(
    capsys, tmp_cwd, reference_model, tmp_path
):
    """No Makefile here: a missing blob, a corrupt one and a missing model each name the
    `tinyattn` command with the user's files; run as printed, it fixes the problem."""
    assert not (tmp_cwd / "Makefile").exists()
    _place_model(tmp_cwd, reference_model, "wine")  # any model, by the Makefile's names
    nope = str(tmp_path / "ttyNOPE0")
    fix = "tinyattn export --model build/wine.npz --out build/wine.bin"
    for argv in (
        ["predict", "--csv", str(IRIS_CSV), "--blob", "build/wine.bin"],
        ["parity", "--port", nope, "--blob", "build/wine.bin", "--quiet"],
        ["flash", "--port", nope, "--blob", "build/wine.bin", "--quiet"],
        ["report", "--model", "build/wine.npz", "--blob", "build/wine.bin", "--out", "rep"],
    ):
        line = _fail(capsys, *argv)
        assert "make " not in line and fix in _remedies(line), line
    _run_remedy(fix, capsys)
    assert cli.main(["predict", "--csv", str(IRIS_CSV), "--blob", "build/wine.bin"]) == 0
    capsys.readouterr()
    # a corrupt blob: rebuild it (and flash it: see the board tests below)
    blob = tmp_cwd / "build" / "wine.bin"
    data = bytearray(blob.read_bytes())
    data[200] ^= 0x10
    blob.write_bytes(bytes(data))
    line = _fail(capsys, "predict", "--csv", str(IRIS_CSV), "--blob", "build/wine.bin")
    assert "CRC mismatch" in line and "make " not in line, line
    assert _remedies(line)[:2] == [fix, "tinyattn flash --blob build/wine.bin"], line
    _run_remedy(fix, capsys)
    assert cli.main(["predict", "--csv", str(IRIS_CSV), "--blob", "build/wine.bin"]) == 0
    capsys.readouterr()
    # a missing model: train it
    line = _fail(capsys, "export", "--model", "build/new.npz", "--out", "build/new.bin")
    assert "make " not in line and _remedies(line) == ["tinyattn train --out build/new.npz"]
    _run_remedy("tinyattn train --out build/new.npz --quiet", capsys)
    assert cli.main(["export", "--model", "build/new.npz", "--out", "build/new.bin"]) == 0


@pytest.mark.slow
@pytest.mark.serial
def test_remedies_parity_on_unflashed_boards_names_their_flash(capsys, tmp_cwd, reference_model):
    """Issue 18: `parity --boards 2` on boards never flashed says 'tinyattn flash --boards 2'
    (not a bare 'tinyattn flash', which flashes the one build/board); that flash fixes it."""
    find_micropython() or pytest.skip("no unix port")
    _place_model(tmp_cwd, reference_model, "model")
    (tmp_cwd / "build" / "model.bin").write_bytes(reference_model["blob"].read_bytes())
    code = cli.main(["parity", "--boards", "2", "--bench", "0"])
    out = capsys.readouterr()
    assert code == 2, out
    rows = re.findall(r"^board[01] .* ERROR (.*)$", out.out, re.M)
    assert len(rows) == 2, out.out
    fixes = {tuple(_remedies(row)) for row in rows}
    assert fixes == {("tinyattn flash --boards 2",)}, rows
    _run_remedy("tinyattn flash --boards 2 --quiet", capsys)
    assert cli.main(["parity", "--boards", "2", "--bench", "0"]) == 0


@pytest.mark.slow
@pytest.mark.serial
def test_remedies_parity_and_predict_keep_port_baud_timeout_and_blob(
    capsys, vboard, reference_model, tmp_path
):
    """An unflashed board on --port with --baud, --timeout and --blob: the flash named keeps
    them all; after it parity and predict run; another blob then names its own flash."""
    blob, npz = str(reference_model["blob"]), str(reference_model["npz"])
    parity = ["parity", "--port", vboard.port, "--baud", "57600", "--timeout", "7",
              "--blob", blob, "--model", npz, "--bench", "0", "--quiet"]  # fmt: skip
    line = _fail(capsys, *parity)
    want = f"tinyattn flash --port {vboard.port} --baud 57600 --timeout 7 --blob {blob}"
    assert _remedies(line) == [want], line
    _run_remedy(want + " --quiet", capsys)
    assert cli.main(parity) == 0
    capsys.readouterr()
    other = tmp_path / "other.bin"
    assert cli.main(["export", "--model", npz, "--out", str(other), "--float32"]) == 0
    capsys.readouterr()
    predict = ["predict", "--csv", str(IRIS_CSV), "--port", vboard.port, "--blob", str(other)]
    line = _fail(capsys, *predict, "--quiet")
    want = f"tinyattn flash --port {vboard.port} --blob {other}"
    assert _remedies(line) == [want], line
    _run_remedy(want + " --quiet", capsys)
    assert cli.main([*predict, "--quiet"]) == 0


# -- wrong advice (issue 23, items 6-8) -------------------------------------------------------


@pytest.mark.serial
@pytest.mark.parametrize("heap", ["40k", "58k"])  # a MemoryError on load; "not enough heap"
def test_remedies_heap_too_small_names_heap_needed_and_free(
    capsys, vboard_factory, reference_model, heap
):
    """Flashing again does not help a board whose heap is too small: parity and predict name
    the heap the blob needs (board.heap.heap_needed) and the heap the board has free."""
    from tinyattn.board.flash import flash
    from tinyattn.board.heap import heap_needed

    board = vboard_factory(heap=heap)
    blob = reference_model["blob"]
    flash(board.port, blob, progress=False)
    need = heap_needed(blob.read_bytes(), "server") // 1000
    for argv in (
        ["parity", "--port", board.port, "--blob", str(blob), "--bench", "0", "--quiet"],
        ["predict", "--csv", str(IRIS_CSV), "--port", board.port, "--blob", str(blob)],
    ):
        line = _fail(capsys, *argv)
        assert f"needs about {need} KB of free heap" in line, line
        free = re.search(r"the board has (\d+) KB free", line)
        assert free and 0 < int(free[1]) < need <= 100, line
        assert "flashing again does not help" in line and not _remedies(line), line


@pytest.mark.host
def test_remedies_on_board_training_that_reached_no_board_promises_no_resume(capsys, tmp_path):
    line = _fail(capsys, "train", "--on-board", "--port", str(tmp_path / "ttyNOPE0"), "--quiet")
    assert "no such serial port" in line, line
    assert "checkpoint" not in line and "resume" not in line, line


@pytest.mark.serial
@pytest.mark.slow
def test_remedies_on_board_training_interrupted_says_how_to_resume(
    capsys, vboard_factory, tmp_path, monkeypatch
):
    """Ctrl-C during the 3rd epoch: "interrupted" and the command that resumes; run as
    printed it resumes from the board's checkpoint and finishes."""
    from tinyattn.board.link import BoardLink

    board = vboard_factory(heap="160k")
    out = tmp_path / "m.npz"
    argv = ["train", "--on-board", "--port", board.port, "--out", str(out), "--epochs", "4",
            "--quiet", "--json"]  # fmt: skip
    write, sent = BoardLink._write, []

    def ctrl_c_at_third_epoch(link, data: bytes) -> None:
        write(link, data)
        if b'"op":"train_epoch"' in data:
            sent.append(data)
            if len(sent) == 3:
                raise KeyboardInterrupt

    monkeypatch.setattr(BoardLink, "_write", ctrl_c_at_third_epoch)
    line = _fail(capsys, *argv, code=130)
    monkeypatch.undo()
    assert line.startswith("tinyattn train: interrupted; the board keeps its last checkpoint")
    assert _remedies(line) == [shlex.join(["tinyattn", *argv])], line
    code = cli.main(argv)
    text = capsys.readouterr().out
    start = re.search(r'"start_epoch": (\d+)', text)
    assert code == 0 and start and int(start[1]) in (2, 3), text  # the 3rd ran on or not


@pytest.mark.serial
def test_remedies_flash_interrupted_removes_the_staged_copies(
    capsys, vboard, reference_model, tmp_path, monkeypatch
):
    """Ctrl-C while the files are copied: the board keeps its previous files and no *.new."""
    blob = reference_model["blob"]
    assert cli.main(["flash", "--port", vboard.port, "--blob", str(blob), "--quiet"]) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in vboard.fs_dir.iterdir() if p.is_file()}
    other = tmp_path / "other.bin"
    assert cli.main(["export", "--model", str(reference_model["npz"]), "--out", str(other),
                     "--float32"]) == 0  # fmt: skip
    real = flash_mod.mpremote

    def ctrl_c_while_copying(port: str, *args: str, timeout: float = 60.0) -> str:
        if "cp" not in args:
            return real(port, *args, timeout=timeout)
        real(port, *args[: 4 * 5 - 1], timeout=timeout)  # five files staged, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(flash_mod, "mpremote", ctrl_c_while_copying)
    assert [p.name for p in vboard.fs_dir.iterdir() if p.name.endswith(".new")] == []
    line = _fail(capsys, "flash", "--port", vboard.port, "--blob", str(other), code=130)
    assert line == ("tinyattn flash: interrupted; the board keeps all its previous files (the "
                    "copies staged as *.new removed)"), line  # fmt: skip
    after = {p.name: p.read_bytes() for p in vboard.fs_dir.iterdir() if p.is_file()}
    assert after == before


# -- cosmetics (item 15) ----------------------------------------------------------------------


@pytest.mark.host
def test_remedies_flash_listing_keeps_its_columns(capsys):
    files = {name: {"bytes": 1234, "sha256": "ab" * 32, "copied": name == "model.bin"}
             for name in ("attention.mpy", "attention_build_seq.mpy", "model.bin")}  # fmt: skip
    flash_mod.print_summary({"files": files, "mpy_arch": "x64", "blob_crc32": 1, "notes": []},
                            "board")  # fmt: skip
    lines = capsys.readouterr().out.splitlines()[:3]
    assert len({line.index(" B  sha256") for line in lines}) == 1, lines


@pytest.mark.host
def test_remedies_one_epoch_is_singular(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "tinyattn.cli", "train", "--epochs", "1", "--quiet", "--out",
         str(tmp_path / "m.npz")], capture_output=True, text=True,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert " 1 epoch in " in res.stdout, res.stdout
