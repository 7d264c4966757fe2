# Host (CPython): `tinyattn record` — the board's source to labelled .ts windows.
"""device/attention_record.py (the board's lines) and host/board/record.py (the command):

- under CPython: a Replay's steps through `record` and `Steps.add` come back bit for bit; a
  damaged or lost line starts a new run, and the window it fell in is left out; appending
  keeps the windows and labels already in the file;
- on virtual boards, from replays of BasicMotions TEST windows: two `tinyattn record` runs
  with two labels write one .ts whose windows equal the replayed float32 steps, and
  `tinyattn train --ts` trains on it; the app's source (app.json) is recorded when no
  --source is given; Ctrl-C keeps the windows that arrived and leaves the REPL answering; a
  UART-paced board (115200 baud) with bytes damaged on the way keeps only intact windows.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from tinyattn import cli
from tinyattn.board import record as rec
from tinyattn.board.stream import device_modules, write_replay
from tinyattn.data.timeseries import load_ts, load_ts_dataset

LABELS = ("Standing", "Running")


@pytest.fixture(scope="module")
def bm() -> np.ndarray:
    """BasicMotions' 40 TEST windows [40, 100, 6] float32 (10 per class, in class order)."""
    return load_ts_dataset("basicmotions", "TEST").X.astype(np.float32)


@pytest.fixture(scope="module")
def mods():
    device_modules()
    import attention_record
    import attention_source

    return attention_source, attention_record


def _lines(mods, path: Path, n: int) -> list[str]:
    source_mod, record_mod = mods
    out = io.StringIO()
    record_mod.record(source_mod.Replay(str(path), rate=0), n, out)
    return out.getvalue().splitlines()


def _collect(lines: list[str]) -> rec.Steps:
    steps = rec.Steps()
    _, C, rate, k = lines[0].split()
    steps.C, steps.rate, steps.per_line = int(C), float(rate), int(k)
    for line in lines[1:]:
        steps.add(line, 0.0)
    return steps


@pytest.mark.host
def test_record_lines_round_trip_bit_for_bit(mods, bm, tmp_path):
    steps = bm[:3].reshape(-1, 6)
    path = write_replay(tmp_path / "r.tasr", steps)
    lines = _lines(mods, path, 290)
    assert lines[0] == "TR+ 6 0 16" and lines[-1] == "TR. 290"
    got = _collect(lines)
    assert got.count == 290 and got.lost_lines == 0 and len(got.runs) == 1
    assert np.concatenate(got.runs[0]).tobytes() == steps[:290].tobytes()
    X, left = rec.windows(got, 100)
    assert X.shape == (2, 100, 6) and left == 90
    assert np.array_equal(X, bm[:2])
    ended = _lines(mods, path, 0)  # n = 0: until the source ends
    assert ended[-1] == "TR. 300"


@pytest.mark.host
def test_record_damaged_or_lost_line_leaves_its_window_out(mods, bm, tmp_path):
    steps = bm[:4].reshape(-1, 6)
    lines = _lines(mods, write_replay(tmp_path / "r.tasr", steps), 400)  # 25 lines of 16 steps
    body = lines[1:-1]
    damaged = body[8].replace("A", "B", 1) if "A" in body[8] else body[8][:-1] + "0"
    got = _collect([lines[0], *body[:8], damaged, *body[9:14], *body[15:]])  # 8 bad, 14 lost
    assert got.bad_lines == 1 and got.lost_lines == 2 and len(got.runs) == 3
    X, left = rec.windows(got, 50)  # runs: steps [0, 128), [144, 224), [240, 400)
    starts = [0, 50, 144, 240, 290, 340]
    assert len(X) == len(starts) and left == 28 + 30 + 10
    for x, s in zip(X, starts, strict=True):
        assert np.array_equal(x, steps[s : s + 50])


@pytest.mark.host
def test_record_write_windows_appends_labels_and_lengths(bm, tmp_path):
    out = tmp_path / "mine.ts"
    names, counts = rec.write_windows(out, bm[:2], "Standing")
    assert names == ["Standing"] and counts.tolist() == [2]
    names, counts = rec.write_windows(out, bm[10:13, :50], "Running")
    assert names == ["Standing", "Running"] and counts.tolist() == [2, 3]
    d = load_ts(out)
    assert d.y.tolist() == [0, 0, 1, 1, 1] and d.lengths.tolist() == [100, 100, 50, 50, 50]
    assert np.array_equal(d.X[:2], bm[:2]) and np.array_equal(d.X[2:, :50], bm[10:13, :50])
    rec.write_windows(out, bm[3:4], "Standing")
    assert load_ts(out).y.tolist() == [0, 0, 1, 1, 1, 0]
    with pytest.raises(SystemExit):
        cli.main(["record", "--label", "two words", "--seconds", "1", "--out", str(out)])


@pytest.mark.serial
def test_record_two_labels_equal_the_replay_and_train_accepts(
    vboard_factory, bm, tmp_path, capsys
):
    board = vboard_factory()
    out = tmp_path / "mine.ts"
    for label, first in zip(LABELS, (0, 10), strict=True):
        replay = write_replay(tmp_path / f"{label}.tasr", bm[first : first + 4].reshape(-1, 6))
        argv = ["record", "--port", board.port, "--source", f"replay:{replay}", "--rate", "1000",
                "--seconds", "0.4", "--label", label, "--out", str(out), "--quiet"]  # fmt: skip
        assert cli.main(argv) == 0, capsys.readouterr().err
        assert f"4 windows of 100 steps labelled {label} (400 steps at 1000 Hz)" in (
            capsys.readouterr().out
        )
    assert not (board.fs_dir / rec.BOARD_REPLAY).exists()  # the copied replay is removed
    d = load_ts(out)
    assert d.class_names == list(LABELS) and d.y.tolist() == [0] * 4 + [1] * 4
    assert d.X.tobytes() == np.concatenate([bm[0:4], bm[10:14]]).astype(np.float64).tobytes()
    model = tmp_path / "mine.npz"
    argv = ["train", "--ts", str(out), "--out", str(model), "--epochs", "5"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert model.is_file()


@pytest.mark.serial
def test_record_app_source_and_ctrl_c_keeps_what_arrived(
    vboard_factory, bm, tmp_path, capsys, monkeypatch, mpremote
):
    fs = tmp_path / "fs"
    fs.mkdir()
    write_replay(fs / "replay.tasr", bm[20:30].reshape(-1, 6), rate=500.0)
    (fs / "app.json").write_text(json.dumps({"source": "replay:replay.tasr@500", "hop": 10}))
    board = vboard_factory(fs_dir=fs)
    out = tmp_path / "walk.ts"
    add = rec.Steps.add

    def add_then_interrupt(self, line, now):  # Ctrl-C once 250 steps have arrived
        if self.count >= 250:
            raise KeyboardInterrupt
        return add(self, line, now)

    monkeypatch.setattr(rec.Steps, "add", add_then_interrupt)
    argv = ["record", "--port", board.port, "--label", "Walking", "--seconds", "2",
            "--out", str(out), "--window", "50"]  # fmt: skip
    assert cli.main(argv) == 130
    err = capsys.readouterr().err
    assert f"interrupted; kept the 5 windows that arrived in {out}" in err, err
    d = load_ts(out)
    assert d.class_names == ["Walking"] and np.array_equal(d.X, bm[20:30].reshape(-1, 50, 6)[:5])
    res = mpremote(board.port, "exec", "print(6 * 7)")
    assert res.stdout.strip() == "42", res.stderr
    assert (fs / "replay.tasr").exists()  # the app's files stay


@pytest.mark.slow
@pytest.mark.serial
def test_record_uart_paced_with_damaged_bytes_keeps_intact_windows(
    vboard_factory, bm, tmp_path, capsys
):
    from tinyattn.tools.vboard import FaultConfig

    board = vboard_factory(baud=115200)
    steps = bm[30:34].reshape(-1, 6)
    replay = write_replay(tmp_path / "bad.tasr", steps)
    board.set_fault(FaultConfig(corrupt=0.0005, direction="from_board", seed=3))
    out = tmp_path / "bad.ts"
    argv = ["record", "--port", board.port, "--source", f"replay:{replay}", "--rate", "200",
            "--seconds", "2", "--label", "Badminton", "--out", str(out), "--window", "20",
            "--quiet"]  # fmt: skip
    assert cli.main(argv) == 0, capsys.readouterr().err
    said = capsys.readouterr().out
    assert "lines lost or damaged on the link" in said, said
    d = load_ts(out)
    assert 0 < len(d.X) < 20
    flat = steps.astype(np.float64)
    for x in d.X:  # every kept window is 20 consecutive replayed steps
        assert any(np.array_equal(x, flat[s : s + 20]) for s in range(len(flat) - 19))


@pytest.mark.host
def test_record_few_windows_says_how_long_to_record_and_train_takes_all_with_fraction_0(
    bm, tmp_path, capsys
):
    """10 s at 10 Hz with 100-step windows is one window a class: record says how long to
    record, and train, which cannot hold out a test part, names --test-fraction 0, which then
    trains on every window and says there is no test figure."""
    note = rec.few_windows_note(["walk", "rest"], np.array([1, 12]), 100, 10.0)
    assert note.startswith("few windows: walk 1 (windows of 100 steps, 10 s each at 10 Hz)")
    assert "record about 100 s a class" in note and "--test-fraction 0" in note
    assert rec.few_windows_note(["walk"], np.array([10]), 100, 10.0) is None
    out = tmp_path / "two.ts"
    rec.write_windows(out, bm[0:1], "walk", 10.0)
    rec.write_windows(out, bm[10:11], "rest", 10.0)
    model = tmp_path / "m.npz"
    base = ["train", "--ts", str(out), "--out", str(model), "--epochs", "3", "--quiet"]
    assert cli.main(base) == 2
    err = capsys.readouterr().err
    assert "cannot hold out a test part" in err and "--test-fraction 0" in err, err
    assert not model.exists()
    assert cli.main([*base, "--test-fraction", "0", "--json"]) == 0, capsys.readouterr().err
    import json

    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert s["n_train"] == 2 and s["n_test"] == 0 and s["test_accuracy"] is None
    assert model.is_file()
    assert cli.main(["export", "--model", str(model), "--out", str(tmp_path / "m.bin")]) == 0
    capsys.readouterr()
    csv = tmp_path / "rows.csv"  # rows: --test-fraction 0 refused with the way to a figure
    csv.write_text("a,b,label\n" + "".join(f"{i},{i % 3},{'xy'[i % 2]}\n" for i in range(20)))
    assert cli.main(["train", "--csv", str(csv), "--test-fraction", "0", "--quiet"]) == 2
    assert "--cv 5" in capsys.readouterr().err


@pytest.mark.host
def test_record_window_other_than_the_files_is_refused_before_recording(bm, tmp_path, capsys):
    """`record --window 50` into a file of 100-step windows mixed lengths silently."""
    out = tmp_path / "mine.ts"
    rec.write_windows(out, bm[0:2], "walk", 10.0)
    before = out.read_bytes()
    argv = ["record", "--port", "/dev/ttyNOPE9", "--label", "rest", "--seconds", "1",
            "--window", "50", "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "holds windows of 100 steps" in err and "nothing was recorded" in err, err
    assert out.read_bytes() == before


@pytest.mark.serial
def test_record_failing_after_the_copy_removes_the_copied_replay(
    vboard_factory, bm, tmp_path, capsys, monkeypatch
):
    """A recording that failed after its replay was copied left record.tasr (48 KB) on the
    board's flash."""
    board = vboard_factory()
    replay = write_replay(tmp_path / "r.tasr", bm[0:2].reshape(-1, 6))

    def fail(*args, **kwargs):
        assert (board.fs_dir / rec.BOARD_REPLAY).exists()  # copied, then the run fails
        raise rec.CLIError("the board stopped answering")

    monkeypatch.setattr(rec, "stream_steps", fail)
    argv = ["record", "--port", board.port, "--source", f"replay:{replay}", "--rate", "1000",
            "--seconds", "0.2", "--label", "a", "--out", str(tmp_path / "o.ts"), "--quiet"]
    assert cli.main(argv) == 2
    assert "the board stopped answering" in capsys.readouterr().err
    assert not (board.fs_dir / rec.BOARD_REPLAY).exists()
