# Host (CPython): a failing command leaves the user's files and board as they were.
"""Each refusal here is checked twice: the one line it prints (what was wrong and what to run,
a command that works as printed), and that nothing changed — the model file byte for byte,
every file of the board's flash byte for byte, the app that ran before still running.

- `export --out` over its own model (or any model file) is refused; a model file given as
  `--blob` gets the export to a .bin, never one over the model; a blob without a model file
  beside it gets no command naming a model file that does not exist;
- `flash --app` checks the source's channels, an int8 blob and the board's heap for the model
  and its Stream before it copies anything ("nothing was flashed", and nothing was);
- the README's live loop (flash --app --source replay:…BasicMotions_TEST.ts, then monitor)
  runs on the default virtual board and on one with the rp2040 preset's free heap.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from tinyattn import cli
from tinyattn.data.tabular import DATA_DIR

GOLDEN = Path(__file__).parent / "golden" / "trained"
BM_BLOB = GOLDEN / "basicmotions.bin"
BM_TEST = DATA_DIR / "ts" / "BasicMotions_TEST.ts"
IRIS_CSV = DATA_DIR / "iris.csv"
RP2040_FREE = 229_000  # the rp2040 preset's free heap at the REPL (tinyattn.learn.search)


def _fail(capsys: pytest.CaptureFixture, *argv: str) -> str:
    """Run the CLI; it must exit 2 with one error line and no traceback; returns that line."""
    code = cli.main(list(argv))
    out = capsys.readouterr()
    assert code == 2, (code, out.out[-800:], out.err)
    assert "Traceback" not in out.err, out.err
    return [line for line in out.err.splitlines() if line.strip()][-1]


def _remedies(text: str) -> list[str]:
    return re.findall(r"'(tinyattn [^']*)'", text)


def _flag(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words else None


# -- export and the blob remedies --------------------------------------------------------------


@pytest.mark.host
def test_export_refuses_to_write_its_blob_over_a_model_file(capsys, tmp_cwd):
    model = tmp_cwd / "b.npz"
    model.write_bytes((GOLDEN / "iris.npz").read_bytes())
    other = tmp_cwd / "other.npz"
    other.write_bytes((GOLDEN / "wine.npz").read_bytes())
    before = {p: p.read_bytes() for p in (model, other)}
    for out in ("b.npz", "./b.npz", str(model), "other.npz"):
        line = _fail(capsys, "export", "--model", "b.npz", "--out", out)
        assert "nothing was written" in line, line
        (fix,) = _remedies(line)
        words = shlex.split(fix)
        assert Path(_flag(words, "--out")).suffix == ".bin", line
    assert {p: p.read_bytes() for p in before} == before  # byte for byte
    assert not list(tmp_cwd.glob("*.bin"))


@pytest.mark.host
def test_blob_remedies_never_export_over_a_model_and_name_models_that_exist(capsys, tmp_cwd):
    """`predict --blob b.npz` (the model file given as the blob) advised an export with --out
    equal to --model, which overwrote the model with a blob; `--blob cut.bin` with no cut.npz
    advised 'export --model cut.npz'."""
    model = tmp_cwd / "b.npz"
    model.write_bytes((GOLDEN / "iris.npz").read_bytes())
    before = model.read_bytes()
    for argv in (["predict", "--csv", str(IRIS_CSV), "--blob", "b.npz"],
                 ["parity", "--blob", "b.npz", "--port", str(tmp_cwd / "ttyNOPE0")],
                 ["flash", "--blob", "b.npz", "--port", str(tmp_cwd / "ttyNOPE0")]):  # fmt: skip
        line = _fail(capsys, *argv)
        assert "is a model file, not a blob" in line, line
        fixes = [shlex.split(f) for f in _remedies(line)]
        exports = [w for w in fixes if w[1] == "export"]
        assert exports, line
        for words in exports:
            assert Path(_flag(words, "--out")) != Path(_flag(words, "--model")), line
            assert Path(_flag(words, "--model")).is_file(), line
    fix = next(f for f in _remedies(line) if " export " in f)
    assert cli.main(shlex.split(fix)[1:]) == 0  # run as printed: the model stays, a blob appears
    capsys.readouterr()
    assert model.read_bytes() == before
    assert cli.main(["predict", "--csv", str(IRIS_CSV), "--blob", "b.bin"]) == 0
    capsys.readouterr()
    # a blob whose model file is not beside it: no command names a missing model file
    cut = tmp_cwd / "cut.bin"
    cut.write_bytes((tmp_cwd / "b.bin").read_bytes()[:100])
    line = _fail(capsys, "predict", "--csv", str(IRIS_CSV), "--blob", "cut.bin")
    assert "cut.npz" not in " ".join(_remedies(line)) and "no model file cut.npz" in line, line


# -- flash --app: check everything first --------------------------------------------------------


def _board_files(board) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(board.fs_dir.iterdir()) if p.is_file()}


def _two_channels(tmp_path: Path) -> Path:
    from tinyattn.board.stream import write_replay
    from tinyattn.data.timeseries import load_ts_dataset

    d = load_ts_dataset("basicmotions", "TEST")
    return write_replay(tmp_path / "two.tasr", d.X[:2, :, :2].astype(np.float32).reshape(-1, 2))


def _float32_blob(tmp_path: Path) -> Path:
    from seq_models import seq_spec

    from tinyattn.intmodel.blob import write_blob

    path = tmp_path / "f32.bin"
    write_blob(path, seq_spec(quantized=False))
    return path


def _decisions(board, n: int, timeout: float = 60.0) -> list[str]:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and board.transcript().count(b"\nTA ") < n:
        time.sleep(0.2)
    return [line for line in board.transcript().decode("utf-8", "replace").splitlines()
            if line.startswith(("TA ", "TA!"))]  # fmt: skip


@pytest.mark.serial
def test_flash_app_that_fails_flashes_nothing_and_the_old_app_still_runs(
    vboard_factory, tmp_path, capsys
):
    board = vboard_factory()  # the default 100k heap
    app = ["--app", "--source", f"replay:{BM_TEST}", "--rate", "1000", "--quiet"]
    assert cli.main(["flash", "--port", board.port, "--blob", str(BM_BLOB), *app]) == 0, \
        capsys.readouterr().err  # fmt: skip
    capsys.readouterr()
    before = _board_files(board)
    assert {"main.py", "app.json", "replay.tasr", "attention_stream.mpy"} <= set(before)
    two = _two_channels(tmp_path)
    for argv, said in (
        (["--blob", str(BM_BLOB), "--app", "--source", f"replay:{two}"], "2 channels"),
        (["--blob", str(_float32_blob(tmp_path)), "--app", "--source", f"replay:{BM_TEST}"],
         "float32 weights only"),
    ):  # fmt: skip
        line = _fail(capsys, "flash", "--port", board.port, "--quiet", *argv)
        assert said in line and "nothing was flashed" in line, line
        assert _board_files(board) == before  # every file byte for byte
    board.reset(wait=False)  # the app that ran before starts by itself
    got = _decisions(board, 3)
    assert len([g for g in got if g.startswith("TA ")]) >= 3, got


@pytest.mark.serial
def test_flash_app_refuses_a_model_and_stream_the_heap_cannot_hold(
    vboard_factory, tmp_path, capsys
):
    from tinyattn.board.heap import heap_needed

    need = heap_needed(BM_BLOB.read_bytes(), "app")
    assert need > heap_needed(BM_BLOB.read_bytes(), "server") - 10_000  # its Stream, no server
    board = vboard_factory(heap="80k")
    before = _board_files(board)
    line = _fail(capsys, "flash", "--port", board.port, "--blob", str(BM_BLOB), "--quiet",
                 "--app", "--source", f"replay:{BM_TEST}")  # fmt: skip
    assert f"needs about {need / 1000:.1f} KB" in line and "nothing was flashed" in line, line
    assert "--max-heap" in line, line
    assert _board_files(board) == before


@pytest.mark.serial
@pytest.mark.parametrize("heap", ["100k", str(RP2040_FREE)])
def test_readme_live_loop_runs_on_the_default_and_rp2040_heaps(vboard_factory, capsys, heap):
    """README "Live on the board": flash --app --source replay:…BasicMotions_TEST.ts, then
    monitor; the app started with 34.8 KB free and failed allocating its threshold table."""
    board = vboard_factory(heap=heap)
    argv = ["flash", "--port", board.port, "--blob", str(BM_BLOB), "--quiet", "--app",
            "--source", f"replay:{BM_TEST}", "--rate", "1000"]  # fmt: skip
    assert cli.main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert cli.main(["monitor", "--port", board.port, "--reset", "--count", "3",
                     "--seconds", "60"]) == 0, capsys.readouterr()  # fmt: skip
    out = capsys.readouterr().out
    assert "3 decisions:" in out and "not started" not in out, out


@pytest.mark.host
def test_search_heap_budget_counts_the_stream_of_windows_only():
    """The search's heap is the runtime's estimate of the model and, for windows, of the
    Stream the app runs; a row model never streams, so its Stream's tables (about 1 KB a
    channel) are not charged: a 30-column CSV failed every candidate at the default budget."""
    from tinyattn.board.heap import features, model_heap
    from tinyattn.data.timeseries import load_ts_dataset
    from tinyattn.data.windows import Windows
    from tinyattn.intmodel.blob import blob_bytes
    from tinyattn.learn import search as S
    from tinyattn.learn.seqmodel import SeqAttnConfig

    data = load_ts_dataset("basicmotions", "TRAIN")
    arch = SeqAttnConfig()
    f = features(blob_bytes(S.shape_spec(data, arch)))
    assert S.cost(data, arch)["heap"] == model_heap(f) > model_heap(f, stream=False)
    rng = np.random.default_rng(0)
    wide = Windows("wide", rng.normal(size=(60, 1, 30)), np.ones(60, np.int64),
                   np.arange(60) % 2, ["a", "b"])  # a 30-column CSV's rows
    one = SeqAttnConfig(patch=1, embed_dim=8, num_heads=2, blocks=1, ff_dim=16)
    f = features(blob_bytes(S.shape_spec(wide, one)))
    assert f["stream"] is None and S.cost(wide, one)["heap"] == model_heap(f, stream=False)
    assert S.cost(wide, one)["heap"] <= S.Budget().max_heap
# -- record and monitor: a reset, a board that goes away, a bogus port ---------------------------


@pytest.mark.host
@pytest.mark.parametrize("port", ["/dev/ttyNOPE9", "/dev/null", "FILE"])
def test_record_bogus_port_is_one_line(capsys, tmp_path, port):
    if port == "FILE":
        port = str(tmp_path / "regular.txt")
        Path(port).write_text("not a port\n")
    line = _fail(capsys, "record", "--port", port, "--label", "a", "--seconds", "1",
                 "--out", str(tmp_path / "x.ts"))  # fmt: skip
    assert port in line and ("no such serial port" in line or "not a serial port" in line)
    assert not (tmp_path / "x.ts").exists()


def _ts_of(tmp_path: Path, C: int) -> Path:
    from tinyattn.data.timeseries import load_ts_dataset, write_ts

    d = load_ts_dataset("basicmotions", "TEST")
    path = tmp_path / f"c{C}.ts"
    write_ts(path, d.X[:4, :, :C], d.lengths[:4], d.y[:4], d.class_names, problem_name="c")
    return path


@pytest.mark.host
def test_record_into_a_ts_of_other_channels_is_refused_before_recording(capsys, tmp_path):
    two = _ts_of(tmp_path, 2)
    before = two.read_bytes()
    line = _fail(capsys, "record", "--port", "/dev/ttyNOPE9", "--source", f"replay:{BM_TEST}",
                 "--label", "a", "--seconds", "1", "--out", str(two))  # fmt: skip
    assert "6 channels" in line and "holds windows of 2" in line, line
    assert "nothing was recorded" in line and two.read_bytes() == before


@pytest.mark.serial
def _reset_after_steps(monkeypatch, board, n: int) -> None:
    """Reset the board (hard, as a watchdog or its button) once `n` steps have arrived."""
    from tinyattn.board import record as rec

    add, done = rec.Steps.add, []

    def add_then_reset(self, line, now):
        if self.count >= n and not done:
            done.append(board.reset(wait=False))
        return add(self, line, now)

    monkeypatch.setattr(rec.Steps, "add", add_then_reset)


@pytest.mark.slow
def test_record_and_monitor_with_an_app_reset_or_unplugged_end_in_one_line(
    vboard_factory, tmp_path, capsys, monkeypatch
):
    import threading
    import time

    board = vboard_factory()
    assert cli.main(["flash", "--port", board.port, "--blob", str(BM_BLOB), "--quiet", "--app",
                     "--source", f"replay:{BM_TEST}", "--rate", "200"]) == 0  # fmt: skip
    capsys.readouterr()
    board.reset()
    # the app's source (6 channels) into a file of 2: refused at the board's first line
    two = _ts_of(tmp_path, 2)
    before = two.read_bytes()
    line = _fail(capsys, "record", "--port", board.port, "--label", "a", "--seconds", "5",
                 "--out", str(two), "--quiet")  # fmt: skip
    assert "gives 6 values a step" in line and "nothing was recorded" in line, line
    assert two.read_bytes() == before
    # a reset while recording the app's source: ends within seconds, not never
    out = tmp_path / "rec.ts"
    _reset_after_steps(monkeypatch, board, 50)
    t0 = time.monotonic()
    code = cli.main(["record", "--port", board.port, "--label", "a", "--seconds", "60",
                     "--window", "10", "--out", str(out), "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - t0 < 30, (code, err)
    assert "reset during the recording" in err and "Traceback" not in err, err
    assert "kept the" in err and out.is_file()  # what arrived before the reset
    # monitor: the board goes away (unplugged): one line, the decisions seen
    board.reset()
    threading.Timer(4.0, board.stop).start()
    line = _fail(capsys, "monitor", "--port", board.port, "--seconds", "30")
    assert "the board went away" in line, line


@pytest.mark.serial
def test_record_reset_without_an_app_says_so(vboard_factory, tmp_path, capsys, monkeypatch):
    board = vboard_factory()
    replay = tmp_path / "slow.tasr"
    from tinyattn.board.stream import write_replay
    from tinyattn.data.timeseries import load_ts_dataset

    d = load_ts_dataset("basicmotions", "TEST")
    write_replay(replay, d.X[:4].astype(np.float32).reshape(-1, 6))
    _reset_after_steps(monkeypatch, board, 50)
    line = _fail(capsys, "record", "--port", board.port, "--source", f"replay:{replay}",
                 "--rate", "50", "--seconds", "8", "--window", "10", "--label", "a",
                 "--out", str(tmp_path / "r.ts"), "--quiet")  # fmt: skip
    assert "reset during the recording" in line, line
    from tinyattn.board.record import BOARD_REPLAY

    assert BOARD_REPLAY == "record.tasr"
    assert not (board.fs_dir / BOARD_REPLAY).exists()  # the copied replay does not stay


@pytest.mark.serial
def test_predict_on_a_board_running_another_model_without_blob_asks_for_it(
    vboard_factory, tmp_cwd, capsys
):
    """`predict --port P` without --blob on a board that runs the user's own model advised
    flashing the default blob over it; it now asks for the blob first."""
    from tinyattn.board.flash import flash

    board = vboard_factory()
    flash(board.port, GOLDEN / "wine.bin", progress=False)  # the user's model
    (tmp_cwd / "build").mkdir(exist_ok=True)
    (tmp_cwd / "build" / "model.bin").write_bytes((GOLDEN / "iris.bin").read_bytes())
    line = _fail(capsys, "predict", "--csv", str(IRIS_CSV), "--port", board.port)
    assert "name its blob with --blob FILE" in line and "instead" in line, line
    line = _fail(capsys, "predict", "--csv", str(IRIS_CSV), "--port", board.port, "--blob",
                 "build/model.bin")  # fmt: skip
    assert "flash it first" in line, line  # a blob the user named: flash it
