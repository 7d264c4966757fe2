# Host (CPython): with the app installed, every other command still reaches the board.
"""Issue 40, "A user's day": once `tinyattn flash --app` is on a board, the app runs at every
boot and holds the heap (its model and Stream). Every command that talks to the board must
first stop it (and say so), then leave a board on which `monitor --reset` starts the app
again; `flash --no-app` removes it. Two kinds of board:

- the CLI's own virtual board (no --port: a fresh board on build/board per command, booting
  into main.py every time, 100 KiB of heap);
- a board that reboots whenever its port opens (`tinyattn board --reset-on-open`, an ESP32
  behind a USB-UART): mpremote's single Ctrl-C lands while it boots, and is lost.

After every command the app is restarted with `monitor --reset` and must print decisions, so
each command meets a running app and leaves a board the app can run on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinyattn import cli
from tinyattn.board.stream import write_replay
from tinyattn.data.timeseries import load_ts_dataset

GOLDEN = Path(__file__).parent / "golden" / "trained"
BM = GOLDEN / "basicmotions.bin"
TS = Path(__file__).parents[1] / "host" / "data" / "ts" / "BasicMotions_TEST.ts"


@pytest.fixture
def replay(tmp_path: Path) -> Path:
    d = load_ts_dataset("basicmotions", "TEST")
    steps = d.X[:3].astype(np.float32).reshape(-1, 6)  # 3 windows: 300 steps
    return write_replay(tmp_path / "bm.tasr", steps)


def _run(argv: list[str], capsys) -> tuple[str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 0, f"{' '.join(argv)} -> {code}: {err}"
    return out, err


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("kind", ["default", "reset-on-open"])
def test_app_installed_every_command_reaches_the_board_and_the_app_runs_again(
    kind, vboard_factory, tmp_cwd, replay, capsys
):
    if kind == "default":
        port: list[str] = []  # the CLI's own virtual board on build/board, booted per command
    else:
        board = vboard_factory(reset_on_open=True, heap="100k")
        port = ["--port", board.port]
    ts = tmp_cwd / "w.ts"
    app = ["--app", "--source", f"replay:{replay}", "--rate", "1000", "--hop", "20"]
    _run(["flash", *port, "--blob", str(BM), "--quiet", *app], capsys)
    commands = {
        "parity": ["parity", *port, "--blob", str(BM), "--dataset", "basicmotions",
                   "--bench", "2"],
        "predict": ["predict", *port, "--blob", str(BM), "--ts",
                    str(TS)],
        "record": ["record", *port, "--label", "Walking", "--seconds", "0.2", "--out", str(ts),
                   "--source", f"replay:{replay}", "--rate", "1000", "--quiet"],
        "flash": ["flash", *port, "--blob", str(BM), "--quiet", *app],
    }  # fmt: skip
    for name, argv in commands.items():
        out, err = _run(argv, capsys)
        if name == "parity" or (name == "predict" and port):  # without --port: on the host
            assert "stopped the app (main.py)" in err, (name, err)
        if name == "parity":
            assert "PASS" in out
        if kind == "default":
            continue  # the next command boots a new board, main.py and all
        out, err = _run(["monitor", *port, "--reset", "--count", "2", "--timeout", "60"], capsys)
        assert "2 decisions" in out, (name, out, err)
    _run(["flash", *port, "--no-app"], capsys)
    out, _ = _run(["flash", *port, "--no-app"], capsys)
    assert "no app installed" in out
    out, err = _run(["parity", *port, "--blob", str(BM), "--dataset", "basicmotions",
                     "--bench", "2"], capsys)  # fmt: skip
    assert "PASS" in out and "stopped the app" not in err


@pytest.mark.serial
def test_two_commands_on_one_virtual_board_folder_the_second_is_refused_in_one_line(
    vboard_factory, tmp_cwd, capsys
):
    """Two commands on the default board (build/board) were two boards on one flash folder:
    a flash replaced model.bin under a running parity. The folder is locked while a board
    runs on it; the second command names the first and changes nothing."""
    board = vboard_factory(fs_dir=tmp_cwd / "build" / "board")  # as a running command holds it
    before = sorted(p.name for p in board.fs_dir.iterdir())
    code = cli.main(["flash", "--blob", str(BM), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "is in use by pid" in err and "one command at a time" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert sorted(p.name for p in board.fs_dir.iterdir()) == before
    board.stop()  # released: the next command gets the board
    assert cli.main(["flash", "--blob", str(BM), "--quiet"]) == 0, capsys.readouterr().err


@pytest.mark.serial
def test_monitor_reset_without_an_app_says_none_started_and_a_silent_port_ends(
    vboard_factory, capsys, monkeypatch
):
    """monitor --reset on a board without an app named itself as the fix; and monitor
    --count on a port where nothing answers waited forever."""
    import os

    from tinyattn.board import monitor

    monkeypatch.setattr(monitor, "NO_APP_AFTER", 0.5)
    board = vboard_factory()
    assert cli.main(["monitor", "--port", board.port, "--reset", "--seconds", "3"]) == 1
    err = capsys.readouterr().err
    assert "no app started after the soft reset" in err and "flash --app" in err, err
    assert "monitor --reset" not in err
    master, slave = os.openpty()  # a port with nothing behind it
    try:
        code = cli.main(["monitor", "--port", os.ttyname(slave), "--count", "2",
                         "--timeout", "1"])  # fmt: skip
    finally:
        os.close(master)
        os.close(slave)
    err = capsys.readouterr().err
    assert code == 2 and "nothing received for 1s" in err, err


@pytest.mark.serial
def test_an_app_interrupted_before_its_first_line_counts_as_stopped(vboard_factory, tmp_path):
    """The interrupt can land while the board still compiles main.py (a board that has just
    booted, a large app): the traceback it leaves has no frame, no `File "main.py"`, and no
    line of the app's output. The link must still know that it stopped the app, so that the
    command says so (the flake of the default virtual board, where parity was quicker than
    the app's first line)."""
    from tinyattn.board.link import BoardLink

    fs = tmp_path / "flash"
    fs.mkdir()
    ifs = "\n".join(f"if n > {i}:\n    n = n - {i}" for i in range(20000))
    (fs / "main.py").write_text(f"n = 0\n{ifs}\nprint('TA app')\n")  # ~0.3 s to compile
    board = vboard_factory(fs_dir=fs, heap="8M")
    with BoardLink(board.port) as link:
        link.enter_raw_repl()
        assert link.app_stopped, board.transcript()[-300:]
