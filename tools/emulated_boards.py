# Host (CPython): the emulated ARM boards of ../shared/boards for tests and benchmarks.
"""Start and stop the emulated boards that run real MicroPython firmware behind a pty (the
folder's README): `pico` (rp2 firmware on rp2040js: Cortex-M0+, ARMv6-M, a filesystem, and
`time.ticks_us()` on the Pico's own cycles) and `cortex-m3` (the qemu port on MPS2-AN385:
ARMv7-M, no filesystem: files are served with `mpremote mount`; correctness only).

The folder is `$TINYATTN_BOARDS`, else `../shared/boards` beside the repository (CI has it; a
user's clone may not, an installed wheel has no repository): `boards_dir()` is None without it,
and `skip_reason(kind)` says why a board cannot start here (folder, Node.js for the Pico,
qemu-system-arm for the Cortex-M3).

Also the trained golden models the boards run (GOLDEN, NAMES: tests/golden/trained of a clone,
made by tools/dev/make_trained_golden.py; `golden_missing()` says when they are not here) and
their inputs as the device scripts read them: `write_xq(path, steps, xq)` writes one record per
row, its step count (uint16, little-endian; 0 = a non-seq row) then its int8 input.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from tinyattn.paths import REPO_DIR, clone_dir

GOLDEN = REPO_DIR / "tests" / "golden" / "trained"  # a clone's; an installed wheel has none
NAMES = ("iris", "wine", "basicmotions", "japanesevowels")
KINDS = {"pico": "armv6m", "cortex-m3": "armv7em"}  # board -> mpy-cross -march of its port
NEEDS = {"pico": ("node", "npm"), "cortex-m3": ("qemu-system-arm",)}


def boards_dir() -> Path | None:
    env = os.environ.get("TINYATTN_BOARDS")
    clone = clone_dir()
    if not env and clone is None:
        return None
    folder = Path(env) if env else clone.parent / "shared" / "boards"
    return folder if (folder / "pico" / "start_board.sh").is_file() else None


def golden_missing() -> str | None:
    """None when the trained golden models are here (a clone), else why not."""
    if (GOLDEN / f"{NAMES[0]}.bin").is_file():
        return None
    return (f"no trained golden models in {GOLDEN}: they come with a clone of tinyattn "
            "(tests/golden/trained), not with the installed package")  # fmt: skip


def skip_reason(kind: str) -> str | None:
    """None when board `kind` can start here, else why not."""
    if boards_dir() is None:
        return ("no emulated boards: ../shared/boards is not beside the repository (set "
                "TINYATTN_BOARDS to the folder)")  # fmt: skip
    missing = [exe for exe in NEEDS[kind] if shutil.which(exe) is None]
    if missing:
        how = "apt-get install qemu-system-arm" if kind == "cortex-m3" else "install Node.js >= 18"
        return f"the {kind} board needs {', '.join(missing)} ({how})"
    return None


class EmulatedBoard:
    """A running board: `tty` is its serial console (a pty, as a USB serial port)."""

    def __init__(self, kind: str):
        self.kind = kind
        self.arch = KINDS[kind]
        self.folder = boards_dir() / kind
        self.run_dir = Path(tempfile.mkdtemp(prefix=f"tinyattn-{kind}-"))
        self.tty = str(self.run_dir / "tty")

    def start(self) -> EmulatedBoard:
        env = dict(os.environ, RUN_DIR=str(self.run_dir))
        proc = subprocess.run(
            [str(self.folder / "start_board.sh")],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )  # fmt: skip  (first start: npm install)
        if proc.returncode != 0:
            raise RuntimeError(f"{self.kind} board did not start: {proc.stderr.strip()}")
        return self

    def stop(self) -> None:
        env = dict(os.environ, RUN_DIR=str(self.run_dir))
        subprocess.run([str(self.folder / "stop_board.sh")], env=env, capture_output=True,
                       timeout=60)  # fmt: skip
        shutil.rmtree(self.run_dir, ignore_errors=True)


def write_xq(path: Path, steps: np.ndarray, xq: np.ndarray, wide: bool = False) -> Path:
    """One record per row: uint16 step count (0: a row), then the row's xq: int8, or with
    `wide` (a rocket model's input grid) little-endian int32."""
    with open(path, "wb") as f:
        for n, x in zip(steps, xq, strict=True):
            f.write(int(n).to_bytes(2, "little"))
            f.write(np.asarray(x, "<i4" if wide else np.int8).tobytes())
    return path


# The device side (a module the board imports): go(name, kernels) runs name.bin on every record
# of name-kernels.xq and prints "L i logits..." per record, then "T kernels best_us" (the
# fastest run_int8 on the board's clock).
GOLDEN_RUNNER = """
import struct
import time
from attention import Model


def go(name, kernels):
    m = Model(name + ".bin", kernels=kernels)
    out = m.new_logits()
    xq = m.quantize([0.0] * m.n_features)
    wide = getattr(m, "xq_typecode", "b") == "i"  # int32 records (a rocket model's grid)
    size = 2 + len(xq) * (4 if wide else 1)
    chunk = bytearray(8 * size)  # 8 records a read: few round trips to a mounted file
    view = memoryview(chunk)
    into = None if wide else memoryview(xq)
    best = -1
    i = 0
    f = open(name + "-" + kernels + ".xq", "rb")
    while True:
        got = 0
        while got < len(chunk):
            k = f.readinto(view[got:])
            if not k:
                break
            got += k
        if not got:
            break
        for at in range(0, got - size + 1, size):
            n = chunk[at] | (chunk[at + 1] << 8)
            if wide:
                for j in range(len(xq)):
                    xq[j] = struct.unpack_from("<i", chunk, at + 2 + 4 * j)[0]
            else:
                into[:] = view[at + 2 : at + size]
            t = time.ticks_us()
            m.run_int8(xq, out, n if n else None)
            dt = time.ticks_diff(time.ticks_us(), t)
            if best < 0 or dt < best:
                best = dt
            print("L", i, " ".join([str(v) for v in out]))
            i += 1
    f.close()
    print("T", m.kernels, best)
"""


def parse_golden(out: str) -> tuple[dict[int, list[int]], str, int]:
    """({record: logits}, kernel set, best µs) from GOLDEN_RUNNER's output."""
    rows, kernels, best = {}, "", -1
    for line in out.splitlines():
        parts = line.split()
        if parts[:1] == ["L"]:
            rows[int(parts[1])] = [int(v) for v in parts[2:]]
        elif parts[:1] == ["T"]:
            kernels, best = parts[1], int(parts[2])
    return rows, kernels, best
