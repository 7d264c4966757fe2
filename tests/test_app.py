# Host (CPython): the app on a virtual board — flash --app, reset, monitor, flash removes it.
"""`tinyattn flash --app --source replay:FILE` on a virtual board (tools/vboard.py) with the
trained BasicMotions blob and a replay of its TEST windows:

- after a hard reset the board prints decision lines by itself (nothing sent by the host; the
  board's transcript), the same classes as the host's Stream over the same steps;
- `tinyattn monitor --count N` shows them (text and --json);
- a bad app.json or a missing IMU driver prints one `TA!` line and the REPL answers;
- `tinyattn flash` without --app removes main.py and app.json, and `tinyattn parity` passes;
- the sources: Replay's pacing and blocks, the IMU adapter against fakes of micropython-lib's
  lsm6dsox / bmi270 / lsm9ds1 drivers (constructor on an I2C bus, accel() / gyro() tuples).
"""

from __future__ import annotations

import json
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

from tinyattn import cli
from tinyattn.board.stream import device_modules, host_decisions, write_replay
from tinyattn.data.timeseries import load_ts_dataset

BM = Path(__file__).parent / "golden" / "trained" / "basicmotions.bin"


def _wait_for(board, marker: bytes, n: int, timeout: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = board.transcript()
        if text.count(marker) >= n:
            break
        time.sleep(0.2)
    return board.transcript().decode("utf-8", "replace").splitlines()


@pytest.fixture
def steps() -> np.ndarray:
    d = load_ts_dataset("basicmotions", "TEST")
    return d.X[:4].astype(np.float32).reshape(-1, 6)  # 4 windows: 400 steps


@pytest.mark.slow
@pytest.mark.serial
def test_app_runs_at_reset_monitor_shows_it_flash_removes_it(
    vboard_factory, tmp_path, steps, capsys
):
    board = vboard_factory(heap="160k")
    replay = write_replay(tmp_path / "bm.tasr", steps)
    argv = ["flash", "--port", board.port, "--blob", str(BM), "--quiet", "--app", "--source",
            f"replay:{replay}", "--rate", "1000", "--hop", "10", "--smooth", "3"]  # fmt: skip
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert "app installed" in capsys.readouterr().out
    cfg = json.loads((board.fs_dir / "app.json").read_text())
    assert cfg["source"] == "replay:replay.tasr@1000" and cfg["hop"] == 10
    assert (board.fs_dir / "main.py").read_text().startswith("# tinyattn app")
    board.reset(wait=False)  # no client: the board runs main.py by itself
    lines = _wait_for(board, b"\nTA ", 40)
    assert any("TA+ hop=10 smooth=3 classes=Standing," in line for line in lines)
    got = [line.split() for line in lines if line.startswith("TA ")][:31]
    host = host_decisions(BM, steps, 10, smooth=3)  # 31 decisions over the 400 steps
    names = ["Standing", "Running", "Walking", "Badminton"]
    assert [g[2] for g in got] == [names[d["smoothed"]] for d in host]
    assert [int(g[3]) for g in got] == [d["score"] * 100 // 16384 for d in host]
    # monitor: text, then JSON
    assert cli.main(["monitor", "--port", board.port, "--count", "3"]) == 0
    out = capsys.readouterr().out
    assert out.count(" ms ") == 3 and "3 decisions:" in out
    assert cli.main(["monitor", "--port", board.port, "--count", "2", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 and rows[1]["label"] in names and rows[1]["us"] > 0
    # a plain flash removes the app; parity works
    assert cli.main(["flash", "--port", board.port, "--blob", str(BM), "--quiet"]) == 0
    assert "the app (main.py) was removed" in capsys.readouterr().out
    assert not (board.fs_dir / "main.py").exists() and not (board.fs_dir / "app.json").exists()
    assert (
        cli.main(["parity", "--port", board.port, "--blob", str(BM), "--dataset", "basicmotions"])
        == 0
    ), capsys.readouterr().err


@pytest.mark.serial
def test_app_bad_config_or_missing_sensor_is_one_line_and_the_repl_answers(
    vboard_factory, tmp_path, mpremote
):
    fs = tmp_path / "fs"
    fs.mkdir()
    repo = Path(__file__).resolve().parent.parent
    (fs / "main.py").write_text((repo / "device" / "app_main.py").read_text())
    for name in ("attention_stream.py", "attention_source.py"):
        (fs / name).write_text((repo / "device" / name).read_text())
    for cfg, expect in (
        ("{not json", "TA! app not started:"),
        ('{"source": "imu:lsm6dsox", "i2c": null}', "needs an I2C bus"),
        ('{"source": "replay:nothing.tasr"}', "TA! app not started:"),
        ('{"source": "imu:lsm6dsox", "i2c": [0, 5, 4]}', "TA! app not started:"),
    ):
        (fs / "app.json").write_text(cfg)
        board = vboard_factory(fs_dir=fs)
        lines = _wait_for(board, b"TA!", 1, 20)
        bad = [line for line in lines if line.startswith("TA!")]
        assert len(bad) == 1 and expect in bad[0], lines
        res = mpremote(board.port, "exec", "print(6 * 7)")
        assert res.stdout.strip() == "42", res.stderr
        board.stop()


# -- sources, under CPython --------------------------------------------------------------------


@pytest.fixture
def source_mod():
    device_modules()
    import attention_source

    return attention_source


@pytest.mark.host
def test_app_replay_source_blocks_and_pacing(source_mod, tmp_path, steps):
    path = write_replay(tmp_path / "r.tasr", steps[:50], rate=200.0)
    src = source_mod.Replay(str(path))
    assert (src.C, src.steps, src.rate) == (6, 50, 200.0)
    buf = bytearray(4 * 6 * 10)
    t0 = time.monotonic()
    got = []
    while n := src.read(buf):
        got.append(np.frombuffer(bytes(buf[: 24 * n]), "<f4").reshape(n, 6))
    assert np.array_equal(np.concatenate(got), steps[:50])
    assert time.monotonic() - t0 >= 50 / 200 * 0.9  # paced at 200 Hz
    loop = source_mod.Replay(str(path), rate=0, loop=True)
    assert sum(loop.read(buf) for _ in range(7)) == 70  # 5 blocks, then again from the start
    assert source_mod.open_source(f"replay:{path}@0").rate == 0.0
    with pytest.raises(ValueError, match="expected 'replay:FILE"):
        source_mod.open_source("mic:0")


class _FakeI2C:
    """An I2C bus with one device at `address` (readfrom_mem raises OSError ENODEV else)."""

    def __init__(self, address: int | None) -> None:
        self.address = address

    def readfrom_mem(self, addr: int, reg: int, n: int) -> bytes:
        if addr != self.address:
            raise OSError(19, "ENODEV")
        return bytes(n)


def _fake_driver(cls_name: str, address: int, accel, gyro) -> types.ModuleType:
    """A module as micropython-lib's driver: CLS(bus, ...) probes its address; accel() and
    gyro() return (x, y, z) float tuples (g and degrees per second)."""

    class Driver:
        def __init__(self, bus, **kwargs):
            bus.readfrom_mem(address, 0x0F, 1)  # WHO_AM_I: OSError when nothing answers
            self.kwargs = kwargs

        def accel(self):
            return accel

        def gyro(self):
            return gyro

    Driver.__name__ = cls_name
    mod = types.ModuleType(cls_name.lower())
    setattr(mod, cls_name, Driver)
    return mod


@pytest.mark.host
@pytest.mark.parametrize("name, cls, address", [("lsm6dsox", "LSM6DSOX", 0x6A),
                                                ("bmi270", "BMI270", 0x68),
                                                ("lsm9ds1", "LSM9DS1", 0x6B)])  # fmt: skip
def test_app_imu_adapters_against_fake_drivers(source_mod, monkeypatch, name, cls, address):
    a, g = (0.01, -0.02, 0.98), (1.5, -2.0, 0.25)
    monkeypatch.setitem(sys.modules, name, _fake_driver(cls, address, a, g))
    src = source_mod.open_source(f"imu:{name}@1000", _FakeI2C(address))
    assert src.C == 6 and src.step() == a + g
    buf = bytearray(4 * 6 * 3)
    assert src.read(buf) == 3
    assert np.array_equal(np.frombuffer(bytes(buf), "<f4").reshape(3, 6),
                          np.array([a + g] * 3, np.float32))  # fmt: skip
    three = source_mod.IMU(source_mod.open_imu(name, _FakeI2C(address)), 1000, gyro=False)
    assert three.C == 3 and three.step() == a
    with pytest.raises(OSError, match=f"IMU {name} not found on the I2C bus"):
        source_mod.open_imu(name, _FakeI2C(None))
    monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "site-packages" not in p])
    with pytest.raises(ValueError, match=f"'mpremote mip install {name}'"):
        source_mod.open_imu(name, _FakeI2C(address))


@pytest.mark.host
def test_app_imu_source_on_a_board_without_i2c_says_so_and_points_to_replay(
    source_mod, monkeypatch
):
    """The README's first live command on the virtual board (the unix port: no machine.I2C)
    ended in "AttributeError: module 'machine' has no attribute 'I2C'"."""
    monkeypatch.setitem(sys.modules, "machine", types.ModuleType("machine"))  # as the unix port
    with pytest.raises(ValueError, match=r"no I2C bus .* --source replay:FILE"):
        source_mod.open_source("imu:lsm6dsox@50", [0, 5, 4])


@pytest.mark.serial
def test_record_imu_source_on_the_virtual_board_is_one_line_naming_replay(tmp_cwd, capsys):
    code = cli.main(["record", "--source", "imu:lsm6dsox", "--i2c", "0,5,4", "--rate", "10",
                     "--label", "walk", "--seconds", "2", "--out", "mine.ts", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "has no I2C bus" in err and "--source replay:FILE" in err, err
    assert "Traceback" not in err and not (tmp_cwd / "mine.ts").exists()
