# Host (CPython): several boards side by side — `flash`/`parity` with --boards N (issue 12 §Fleet).
"""`tinyattn flash --boards 3` then `tinyattn parity --boards 3` on virtual boards (build/board0..2
in the test's own working directory): one row per board, a summary with the wall time, exit 0;
one board running another blob: a non-zero exit and one stderr line naming that board. The
wall time of 3 boards against 1 is a benchmark line (printed), not a timed assertion.
"""

from __future__ import annotations

import json
import re

import pytest

from tinyattn import cli
from tinyattn.tools.vboard import find_micropython

pytestmark = [pytest.mark.serial, pytest.mark.usefixtures("tmp_cwd")]


@pytest.fixture
def fleet(reference_model, tmp_cwd):
    find_micropython() or pytest.skip("no unix port")
    blob = tmp_cwd / "build" / "model.bin"
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(reference_model["blob"].read_bytes())
    (tmp_cwd / "build" / "model.npz").write_bytes(reference_model["npz"].read_bytes())
    return blob


@pytest.mark.slow
def test_fleet_three_virtual_boards_flash_and_parity_pass(fleet, capsys, tmp_cwd):
    assert cli.main(["flash", "--boards", "3", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"^board[012] .* OK ", out, re.M)) == 3, out
    assert "3 boards: 3 flashed" in out
    assert cli.main(["parity", "--boards", "3", "--bench", "0"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^(board[012]) +\S+ +PASS +150 +150/150", out, re.M)
    assert rows == [("board0"), ("board1"), ("board2")], out
    wall = re.search(r"3 boards: 3 PASS, 0 FAIL; wall time ([0-9.]+) s", out)
    assert wall, out
    report = json.loads((tmp_cwd / "build" / "parity.json").read_text())
    assert report["summary"]["passed"] and sorted(report["boards"]) == ["board0", "board1",
                                                                        "board2"]  # fmt: skip
    assert cli.main(["parity", "--boards", "1", "--bench", "0"]) == 0
    one = re.search(r"1 boards: 1 PASS.*wall time ([0-9.]+) s", capsys.readouterr().out)
    print(f"parity wall time: 3 boards {float(wall[1]):.2f} s, 1 board {float(one[1]):.2f} s")


@pytest.mark.slow
def test_fleet_one_board_failing_exits_nonzero_naming_it(fleet, capsys, tmp_cwd, tmp_path):
    assert cli.main(["flash", "--boards", "3", "--quiet"]) == 0
    capsys.readouterr()
    other = tmp_path / "other.bin"
    assert cli.main(["export", "--model", "build/model.npz", "--out", str(other),
                     "--float32"]) == 0  # fmt: skip
    assert cli.main(["flash", "--boards", "1", "--blob", str(other), "--quiet"]) == 0
    capsys.readouterr()  # board0 now runs another blob
    code = cli.main(["parity", "--boards", "3", "--bench", "0"])
    out = capsys.readouterr()
    assert code == 2, out
    assert re.search(r"^board0 .* ERROR .*'tinyattn flash --boards 3'", out.out, re.M), out.out
    assert len(re.findall(r"^board[12] .* PASS ", out.out, re.M)) == 2, out.out
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tinyattn parity: error: 1 of 3 boards failed")
    assert "board0" in lines[0] and "board1" not in lines[0], lines[0]


@pytest.mark.host
def test_fleet_port_and_boards_together_refused(capsys, reference_model):
    code = cli.main(["parity", "--boards", "2", "--port", "/dev/ttyNOPE0",
                     "--blob", str(reference_model["blob"])])  # fmt: skip
    assert code == 2 and "--boards N starts virtual boards" in capsys.readouterr().err
    code = cli.main(["flash", "--boards", "0", "--blob", str(reference_model["blob"])])
    assert code == 2 and "give 1 to 16" in capsys.readouterr().err
