# Host (CPython): `tinyattn train --on-board` for windows (seq-attn) — device/server_train_seq.py
# under CPython and the whole command against virtual boards.
"""`tinyattn train --on-board --dataset basicmotions` (host/board/onboard_seq.py).

- The window run's ops under CPython (server_train's request handling, no board): the host's
  windows file, weights, orders and time shifts; three epochs with weight averaging (SWA over
  the last two), the run reloaded from the checkpoint that carries the average between epochs
  2 and 3: the board's weights equal host `train_seq` (float64) to float32 rounding; shifts
  that are missing, of the wrong size or out of range, or sent to an Iris run, are refused.
- CLI errors in one line: JapaneseVowels' distillation, `--head-only` on windows.
- Slow, on virtual boards: BasicMotions for 4 epochs on the board `tinyattn train --on-board`
  starts without --port (SEQ_VIRTUAL_HEAP) against the host run with the same seed: test
  accuracy within one window, the weights equal to float32 rounding; the fetched model
  exports, flashes to the inference board (100 KiB) and passes parity on the 40 TEST windows.
  A board too small for the run (the 100 KiB one, --port): one line, "not enough heap".
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
import test_onboard
from test_onboard import _call, _ok, _upload

from tinyattn import cli
from tinyattn.board.boardmodel import parse_board
from tinyattn.board.onboard import plan_full
from tinyattn.board.onboard_seq import SEQ_VIRTUAL_HEAP, plan_seq
from tinyattn.board.ports import VIRTUAL_HEAP
from tinyattn.data.tabular import load_dataset
from tinyattn.learn.seqcli import load_windows, seq_setup
from tinyattn.learn.seqtrain import Average, train_seq
from tinyattn.learn.train import TrainConfig
from tinyattn.tools.vboard import VirtualBoard, find_micropython

SEQ_EPOCHS = 4  # the on-board run of the slow test: ~10 s on the board, a few s of setup
server = test_onboard.server  # the fixture: a training session under CPython, no board


def _args(*argv: str):
    return cli.build_parser().parse_args(["train", *argv])


def _bm_plan(epochs: int, average: Average):
    args = _args("--dataset", "basicmotions", "--epochs", str(epochs))
    data = load_windows(args)
    arch, config, augment, _, distill = seq_setup(args, data.train)
    return data, plan_seq(data, arch, config, augment, average, distill)


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(a.tobytes()).decode()


def _fetch(server) -> bytes:
    got, size = bytearray(), None
    while size is None or len(got) < size:
        rep = _ok(server, "train_get", offset=len(got), n=2048)
        size = rep["size"]
        got += base64.b64decode(rep["b64"])
    return bytes(got)


def _off_key_bias(model, a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| off the attention key biases (their gradient is 0 in exact arithmetic,
    so Adam's steps on them are rounding noise of up to lr: tests/test_device_train_seq.py)."""
    keep = np.ones(model.n_params, bool)
    for name, (value, _) in model.named_parameters().items():
        if name.endswith(".attn.bk"):
            start = model._offset(value)
            keep[start : start + value.size] = False
    return float(np.abs(np.asarray(a, np.float64) - b)[keep].max())


@pytest.mark.slow
@pytest.mark.host
def test_onboard_seq_ops_train_with_shifts_and_average_as_host_train_seq(server):
    import server_train

    data, plan = _bm_plan(3, Average(swa=0.5))  # epochs 2 and 3 (1-based) enter the average
    info = _ok(server, "train_info")
    assert info["data_rows"] is None
    _upload(server, "data", plan.rows)
    _upload(server, "weights", plan.init)
    info = _ok(server, "train_info")
    assert (info["run"], info["epoch"], info["data_rows"]) == (plan.run, 0, 80)
    assert info["data_crc"] == plan.data_crc
    for e in range(2):
        rep = _ok(server, "train_epoch", epoch=e, order=_b64(plan.orders[e]),
                  shifts=_b64(plan.shifts[e]))  # fmt: skip
        assert (rep["epoch"], rep["step"], rep["n_train"], rep["n_test"]) == (
            e + 1,
            3 * e + 3,
            40,
            40,
        )
    mid = parse_board(_fetch(server))  # between the first averaged epoch and the last
    assert mid.step == 6 and mid.average is not None and len(mid.state) == 2
    server_train._drop()  # the next epoch reloads the run from the checkpoint, average included
    assert _ok(server, "train_info")["epoch"] == 2
    _ok(server, "train_epoch", epoch=2, order=_b64(plan.orders[2]), shifts=_b64(plan.shifts[2]))
    final = parse_board(_fetch(server))
    assert final.step == 9 and final.average is None  # finished: theta is the average
    train = data.train
    host = train_seq(train.X, train.lengths, train.y, train.n_classes, plan.arch, plan.config,
                     plan.augment, average=plan.average)  # fmt: skip
    worst = _off_key_bias(host.model, final.theta, host.model.theta)
    assert worst < 1e-4, f"max |theta_board - theta_host| {worst:.3g}"
    moved = _off_key_bias(host.model, mid.theta, host.model.theta)
    assert moved > 1e-3  # the comparison can fail: the last epoch and the average moved theta


@pytest.mark.host
def test_onboard_seq_ops_refuse_bad_shifts(server):
    _, plan = _bm_plan(2, Average())
    _upload(server, "data", plan.rows)
    _upload(server, "weights", plan.init)
    order = _b64(plan.orders[0])
    missing = _call(server, "train_epoch", epoch=0, order=order)
    assert "shifts missing: this run shifts its windows by up to 50 steps" in missing["error"]
    short = _call(server, "train_epoch", epoch=0, order=order, shifts=_b64(plan.shifts[0][:-1]))
    assert "shifts: expected 80 bytes (40 windows x int16), got 78" in short["error"]
    wide = plan.shifts[0].copy()
    wide[5] = -51
    far = _call(server, "train_epoch", epoch=0, order=order, shifts=_b64(wide))
    assert "shifts: -51 at position 5, outside -50..50" in far["error"]
    assert _call(server, "train_info")["epoch"] == 0  # nothing trained
    iris = plan_full(load_dataset("iris"), TrainConfig(epochs=1))
    _upload(server, "data", iris.rows)
    _upload(server, "weights", iris.init)
    rep = _call(server, "train_epoch", epoch=0, order=_b64(iris.orders[0]),
                shifts=_b64(np.zeros(120, "<i2")))  # fmt: skip
    assert "shifts: only a window model's run takes them" in rep["error"]


def _one_line_error(capsys, argv: list[str]) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line]  # (before it: progress notes)
    assert code == 2 and errors == lines[-1:] and "Traceback" not in err, err
    return lines[-1]


@pytest.mark.host
def test_onboard_seq_cli_errors(tmp_cwd, capsys):
    line = _one_line_error(capsys, ["train", "--on-board", "--dataset", "japanesevowels"])
    assert "distils from 4 teachers" in line and "train japanesevowels on the host" in line
    line = _one_line_error(capsys, ["train", "--on-board", "--head-only", "--dataset",
                                    "basicmotions"])  # fmt: skip
    assert "--head-only adapts the classifier of a row model" in line
    line = _one_line_error(capsys, ["train", "--on-board", "--cv", "5", "--dataset",
                                    "basicmotions"])  # fmt: skip
    assert "--cv runs on the host only" in line
    line = _one_line_error(capsys, ["train", "--on-board", "--schedule", "onecycle",
                                    "--dataset", "basicmotions"])  # fmt: skip
    assert "schedules are cosine and constant, not onecycle" in line
    line = _one_line_error(capsys, ["train", "--on-board", "--schedule", "onecycle"])  # Iris
    assert "schedules are cosine and constant, not onecycle" in line
    assert not Path("build/board").exists()  # refused before any board was started


def _need_micropython() -> None:
    if find_micropython() is None:
        pytest.skip("MicroPython unix port not installed ('make install')")


def _summary(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.serial
@pytest.mark.slow
def test_onboard_seq_basicmotions_matches_host_run_and_passes_parity(tmp_path, tmp_cwd, capsys):
    """The host run and the board run (no --port: a virtual board of SEQ_VIRTUAL_HEAP), same
    seed, SEQ_EPOCHS epochs; then export, flash to a 100 KiB inference board, parity."""
    from tinyattn.board.flash import flash
    from tinyattn.learn.model import load_model

    _need_micropython()
    common = ["--dataset", "basicmotions", "--epochs", str(SEQ_EPOCHS), "--json", "--quiet"]
    assert cli.main(["train", "--out", str(tmp_path / "host.npz"), *common]) == 0
    host = _summary(capsys)
    code = cli.main(["train", "--on-board", "--out", str(tmp_path / "board.npz"), *common])
    board = _summary(capsys)
    assert code == 0
    b, n_test = board["on_board"], board["n_test"]
    with capsys.disabled():
        print(f"\nBasicMotions, {SEQ_EPOCHS} epochs: on-board test accuracy "
              f"{board['test_accuracy']:.3f} (int8 {board['int8_test_accuracy']:.3f}), host "
              f"{host['test_accuracy']:.3f} (int8 {host['int8_test_accuracy']:.3f}) of {n_test}; "
              f"board ({SEQ_VIRTUAL_HEAP}) {b['s_per_epoch']:.2f} s/epoch, {board['seconds']:.1f} "
              f"s, {b['min_free_heap']} B free at least")  # fmt: skip
    assert abs(board["test_accuracy"] - host["test_accuracy"]) * n_test <= 1 + 1e-9
    assert b["step"] == SEQ_EPOCHS * 3 and b["port"].startswith("/dev/")
    for key in ("model", "dataset", "seed", "epochs", "n_test", "n_train", "params", "macs",
                "max_steps", "arch", "augment", "average", "distill", "test_split"):  # fmt: skip
        assert board[key] == host[key], key
    a, h = load_model(tmp_path / "board.npz"), load_model(tmp_path / "host.npz")
    worst = _off_key_bias(h.model, a.model.theta, h.model.theta)
    assert worst < 1e-4, f"max |theta_board - theta_host| {worst:.3g}"
    assert a.meta["train"]["augment"] == h.meta["train"]["augment"]
    blob = tmp_path / "board.bin"
    assert cli.main(["export", "--model", str(tmp_path / "board.npz"), "--out", str(blob)]) == 0
    capsys.readouterr()
    with VirtualBoard(tmp_path / "inference", heap=VIRTUAL_HEAP) as vb:
        flash(vb.port, blob, progress=False)
        report = tmp_path / "parity.json"
        code = cli.main(["parity", "--port", vb.port, "--blob", str(blob), "--model",
                         str(tmp_path / "board.npz"), "--report", str(report), "--bench", "0",
                         "--quiet"])  # fmt: skip
    s = json.loads(report.read_text())["summary"]
    assert code == 0 and s["passed"] and s["samples"] == n_test, s
    assert s["int8_exact"] == n_test


@pytest.mark.serial
@pytest.mark.slow
def test_onboard_seq_board_too_small_says_so(tmp_path, tmp_cwd, capsys):
    """BasicMotions on the 100 KiB board (--port): one line, the board's heap and what to do."""
    _need_micropython()
    with VirtualBoard(tmp_path / "small", heap=VIRTUAL_HEAP) as vb:
        line = _one_line_error(capsys, ["train", "--on-board", "--port", vb.port, "--dataset",
                                        "basicmotions", "--epochs", "1", "--out",
                                        str(tmp_path / "m.npz"), "--quiet",
                                        "--timeout", "5"])  # fmt: skip
    with capsys.disabled():
        print(f"\nBasicMotions on a {VIRTUAL_HEAP} board: {line}")
    assert "not enough heap to train" in line and "a board with more RAM" in line
    assert f"a virtual board of {SEQ_VIRTUAL_HEAP}" in line and "resume" not in line
    assert not (tmp_path / "m.npz").exists()
    # a run that cannot resume leaves none of its files (the windows, ~100 KB) on the flash
    assert sorted(p.name for p in vb.fs_dir.iterdir() if p.name.startswith("train_")) == []
