# Host (CPython): an interrupted `tinyattn flash` never loses the model on the board (issue 6).
"""Flash is atomic from the user's point of view, checked on a virtual board.

`tinyattn flash` copies every file that differs from the board's to `NAME.new`, reads each
back on the board (size + SHA-256), and only then renames them over the old files, the blob last
(host/board/flash.py). So:
- killed while copying a new runtime and blob, as after an upgrade (SIGKILL to tinyattn and
  its mpremote child, at the first and at the last file): every previous file is byte for byte what
  it was, and parity still passes with the previous blob; a second flash then completes;
- a copy that does not read back as sent (cut short, or one byte changed): flash stops with
  one line naming the file, nothing is switched, parity passes with the previous blob;
- a switch-over that stops part-way (a new runtime, as after an upgrade, and the board loses
  power after k of the n renames, simulated by running the real rename code on the first k
  entries only): flash says which
  files are new, which are the previous version, which are missing; the previous model still
  runs;
- a first flash killed on a fresh board: nothing usable is there, and parity says exactly
  what is missing and how to fix it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tinyattn import cli
from tinyattn.board import flash as flash_mod
from tinyattn.board.parity import parity
from tinyattn.cli import CLIError
from tinyattn.data.tabular import load_dataset

# in an empty working directory: parity without --model reads no build/model.npz of the checkout
pytestmark = [pytest.mark.serial, pytest.mark.usefixtures("tmp_cwd")]

CLI = [sys.executable, "-c", "import sys; from tinyattn.cli import main; sys.exit(main())"]
# the CLI flashing new_runtime's sources (their paths in $NEXT_RUNTIME)
NEXT_CLI = """
import json, os, sys
from pathlib import Path
from tinyattn.board import flash
NEXT = [Path(p) for p in json.loads(os.environ["NEXT_RUNTIME"])]
flash.device_sources = lambda train=False: NEXT
from tinyattn.cli import main
sys.exit(main())
"""


@pytest.fixture(scope="module")
def blobs(reference_model: dict[str, Path], tmp_path_factory) -> dict[str, Path]:
    """old: the int8 reference blob; new: the same model exported as float32 (other bytes)."""
    new = tmp_path_factory.mktemp("new") / "model_f32.bin"
    code = cli.main(["export", "--model", str(reference_model["npz"]), "--out", str(new),
                     "--float32"])  # fmt: skip
    assert code == 0
    return {"old": reference_model["blob"], "new": new}


@pytest.fixture
def board(vboard_factory, blobs):
    """A virtual board flashed with the old blob."""
    vb = vboard_factory()
    flash_mod.flash(vb.port, blobs["old"], progress=False)
    return vb


@pytest.fixture
def new_runtime(monkeypatch, tmp_path):
    """The next version of the runtime, as after an upgrade of tinyattn: every device source
    with one more line, so every .mpy has other bytes and a flash copies every file."""
    real = flash_mod.device_sources
    folder = tmp_path / "runtime-next"
    folder.mkdir()

    def sources(train: bool = False) -> list[Path]:
        out = []
        for src in real(train):
            (folder / src.name).write_text(src.read_text() + "\n_NEXT_VERSION = 1\n")
            out.append(folder / src.name)
        return out

    monkeypatch.setattr(flash_mod, "device_sources", sources)
    return sources


def _files(vb) -> dict[str, bytes]:
    """The board's files (its flash folder), *.new copies left out."""
    return {p.name: p.read_bytes() for p in vb.fs_dir.iterdir() if not p.name.endswith(".new")}


def _parity_passes(port: str, blob: Path, path: str = "both") -> dict:
    iris = load_dataset("iris")
    X, y = iris.X[::5], iris.y[::5]  # 30 samples are enough to tell the models apart
    s = parity(port, blob, X, y, path=path, timeout=2.0, bench_n=0, progress=False)["summary"]
    assert s["passed"] and s["answered"] == len(y), s
    return s


def _kill_flash_when(vb, blob: Path, staged: str, limit: float = 60.0,
                     runtime: list[Path] | None = None) -> None:  # fmt: skip
    """Run `tinyattn flash` as a subprocess and SIGKILL it (with its mpremote) as soon as the
    board's flash holds the file `staged`, i.e. while that file is being copied. `runtime`:
    the device sources it flashes (new_runtime's), else the package's."""
    cli = CLI if runtime is None else [sys.executable, "-c", NEXT_CLI]
    env = dict(os.environ, NEXT_RUNTIME=json.dumps([str(p) for p in runtime or []]))
    proc = subprocess.Popen([*cli, "flash", "--port", vb.port, "--blob", str(blob), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            start_new_session=True)  # fmt: skip
    target = vb.fs_dir / staged
    end = time.monotonic() + limit
    try:
        while not target.exists():
            assert proc.poll() is None, f"flash ended before {staged} appeared: {proc.stderr}"
            assert time.monotonic() < end, f"{staged} never appeared"
            time.sleep(0.002)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("at", ["first file", "blob"])
def test_flash_atomic_killed_mid_copy_keeps_previous_model(board, blobs, at, new_runtime):
    before = _files(board)
    first = flash_mod.device_sources()[0].stem + ".mpy"  # .mpy by default
    _kill_flash_when(board, blobs["new"], f"{first}.new" if at == "first file" else
                     "model.bin.new", runtime=new_runtime())  # fmt: skip
    assert _files(board) == before  # every previous file, byte for byte
    assert (board.fs_dir / "model.bin").read_bytes() == blobs["old"].read_bytes()
    _parity_passes(board.port, blobs["old"])
    # and the next flash finishes the job
    flash_mod.flash(board.port, blobs["new"], progress=False)
    assert (board.fs_dir / "model.bin").read_bytes() == blobs["new"].read_bytes()
    assert not [p for p in board.fs_dir.iterdir() if p.name.endswith(".new")]
    _parity_passes(board.port, blobs["new"], path="float")


@pytest.mark.parametrize("damage", ["cut short", "one byte changed"])
def test_flash_atomic_readback_mismatch_switches_nothing(board, blobs, monkeypatch, tmp_path,
                                                         damage):  # fmt: skip
    """The blob arrives damaged (mpremote reported success): the read-back catches it."""
    data = blobs["new"].read_bytes()
    bad = tmp_path / "damaged.bin"
    bad.write_bytes(data[: len(data) // 2] if damage == "cut short"
                    else data[:100] + bytes([data[100] ^ 1]) + data[101:])  # fmt: skip
    real = flash_mod.mpremote

    def mpremote(port: str, *args: str, **kw) -> str:
        if ":model.bin.new" in args:  # the copy session: one chain `cp SRC :NAME.new + …`
            k = args.index(":model.bin.new")
            args = (*args[: k - 1], str(bad), *args[k:])
        return real(port, *args, **kw)

    monkeypatch.setattr(flash_mod, "mpremote", mpremote)
    before = _files(board)
    with pytest.raises(CLIError) as err:
        flash_mod.flash(board.port, blobs["new"], progress=False)
    msg = str(err.value)
    want = f"{len(data) // 2} bytes, want {len(data)}" if damage == "cut short" else "SHA-256"
    assert msg.startswith("model.bin: the copy on the board does not read back") and want in msg
    assert "previous files are untouched" in msg and "\n" not in msg
    assert _files(board) == before
    _parity_passes(board.port, blobs["old"])


def test_flash_atomic_switch_over_cut_short_reports_what_is_where(board, blobs, monkeypatch,
                                                                  new_runtime):  # fmt: skip
    """A new runtime and blob; power lost after 3 of the n renames (the real rename code, run
    on the first 3 entries): the blob is renamed last, so the previous model is still whole
    and still runs; the message lists what is new and what is the previous version."""
    real = flash_mod._COMMIT
    commit = real.replace("{moves!r}:", "{moves!r}[:3]:")
    commit = commit.replace("print('COMMITTED')", "raise OSError(5, 'power lost')")
    assert commit != flash_mod._COMMIT and "COMMITTED" not in commit
    monkeypatch.setattr(flash_mod, "_COMMIT", commit)
    with pytest.raises(CLIError) as err:
        flash_mod.flash(board.port, blobs["new"], progress=False)
    msg = str(err.value)
    assert "switch-over to the new files did not finish" in msg and "power lost" in msg, msg
    assert "missing" not in msg, msg
    new = msg.split("now new: ")[1].split("; ")[0].split(", ")
    old = msg.split("; previous version: ")[1].split(" — ")[0].split(", ")
    assert len(new) == 3 and old[-1] == "model.bin", msg
    assert sorted(new + old) == sorted(_files(board)), msg  # every file, new or previous
    assert "retry 'tinyattn flash'" in msg and "\n" not in msg
    assert (board.fs_dir / "model.bin").read_bytes() == blobs["old"].read_bytes()
    assert (board.fs_dir / "model.bin.new").read_bytes() == blobs["new"].read_bytes()
    _parity_passes(board.port, blobs["old"])
    monkeypatch.setattr(flash_mod, "_COMMIT", real)
    flash_mod.flash(board.port, blobs["new"], progress=False)  # retry finishes the job
    _parity_passes(board.port, blobs["new"], path="float")


def test_flash_atomic_first_flash_killed_then_parity_names_what_is_missing(
    vboard, blobs, capsys, tmp_path
):
    _kill_flash_when(vboard, blobs["old"], "model.bin.new")
    assert (
        not (vboard.fs_dir / "model.bin").exists() and not (vboard.fs_dir / "server.py").exists()
    )
    code = cli.main(["parity", "--port", vboard.port, "--blob", str(blobs["old"]),
                     "--report", str(tmp_path / "p.json"), "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "no module named 'server'" in lines[0], lines
    assert f"run 'tinyattn flash --port {vboard.port} --blob {blobs['old']}'" in lines[0], lines
