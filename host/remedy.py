"""Host (CPython): remedies — the exact `tinyattn` command that fixes a problem, built from the
arguments the user gave.

An error line ends with what to run next, and that command must work as printed, in a clone
or outside one (no Makefile there, so never `make …`): it names the boards the user's command
ran on (`--port`, once or repeated, or `--boards N`), the link settings (`--baud`,
`--timeout`) when not the defaults, and the files (`--blob`, `--model`). `tinyattn.cli`
records each command's arguments (`use`) for as long as it runs; a library caller without a
command line (a test, a script) gets the bare command.

    flash()   'tinyattn flash --boards 3'              the runtime and this blob onto the boards
    export()  'tinyattn export --model M --out B'      the blob from its model
    rebuild() the export's words: from the model file that exists, never over a model file
    again()   the command line the user typed, as typed (a retry)
    install() 'pip install "tinyattn[board]"'       an optional part (an extra) that is missing;
              in a clone: 'make install (or pip install -e ".[board]")'
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

# The defaults of the board commands (flash, parity, predict, train --on-board): a flag at its
# default is left out of a remedy.
DEFAULT_BAUD = 115200
DEFAULT_TIMEOUT = 10.0
DEFAULT_BLOB = Path("build") / "model.bin"

_argv: list[str] | None = None
_args: argparse.Namespace | None = None
_noted: set[Path] = set()  # blobs whose stale model file this command has noted


def use(argv: list[str] | None, args: argparse.Namespace | None) -> None:
    """Record the running command's argv and parsed arguments (None, None: no command)."""
    global _argv, _args
    _argv, _args = (list(argv) if argv is not None else None), args
    _noted.clear()


def _get(name: str) -> object:
    return getattr(_args, name, None) if _args is not None else None


def given(flag: str) -> bool:
    """True when the running command's command line has `flag` (e.g. "--blob"), not its
    default; False without a command line."""
    return bool(_argv) and any(w == flag or w.startswith(flag + "=") for w in _argv or [])


def board_flags() -> list[str]:
    """The boards the running command uses, as flags any board command takes."""
    flags: list[str] = []
    ports = _get("port")
    for port in [ports] if isinstance(ports, str) else ports or []:
        flags += ["--port", str(port)]
    boards = _get("boards")
    if boards is not None:
        flags += ["--boards", str(boards)]
    baud = _get("baud")
    if isinstance(baud, int) and baud != DEFAULT_BAUD:
        flags += ["--baud", str(baud)]
    timeout = _get("timeout")
    if isinstance(timeout, float | int) and timeout != DEFAULT_TIMEOUT:
        flags += ["--timeout", f"{timeout:g}"]
    return flags


def command(name: str, *flags: str) -> str:
    """'tinyattn NAME FLAGS…', each word quoted for a POSIX shell where it needs it."""
    return shlex.join(["tinyattn", name, *flags])


def flash(blob: Path | str | None = None, train: bool = False, mpy: bool = False) -> str:
    """The flash that installs the runtime and `blob` (default: the running command's
    --blob) on the boards the running command uses; `train`: the training modules too;
    `mpy`: insist on a precompiled runtime."""
    blob = blob if blob is not None else _get("blob")
    flags = board_flags()
    if blob is not None and Path(str(blob)) != DEFAULT_BLOB:
        flags += ["--blob", str(blob)]
    return command("flash", *flags, *(["--train"] if train else []), *(["--mpy"] if mpy else []))


def model_for(blob: Path | str) -> Path:
    """The model a blob is exported from, by the Makefile's names: build/wine.bin <-
    build/wine.npz, build/model.bin <- build/model.npz."""
    return Path(str(blob)).with_suffix(".npz")


def export(blob: Path | str | None = None, model: Path | str | None = None) -> str:
    """The export that writes `blob` (default: the running command's --blob) from `model`
    (default: the running command's --model, else the blob's model by name)."""
    blob = Path(str(blob if blob is not None else _get("blob") or DEFAULT_BLOB))
    model = Path(str(model if model is not None else _get("model") or model_for(blob)))
    flags = [] if model == model_for(DEFAULT_BLOB) else ["--model", str(model)]
    return command("export", *flags, *([] if blob == DEFAULT_BLOB else ["--out", str(blob)]))


def is_model_file(path: Path | str) -> bool:
    """True when `path` is a trained-model file (.npz: a zip archive), by name or by content."""
    path = Path(str(path))
    if path.suffix == ".npz":
        return True
    try:
        with path.open("rb") as f:
            return f.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def is_blob_file(path: Path | str) -> bool:
    """True when `path` is a blob (.bin by name, or the blob's magic "TATN" by content)."""
    path = Path(str(path))
    if path.suffix == ".bin":
        return True
    try:
        with path.open("rb") as f:
            return f.read(4) == b"TATN"
    except OSError:
        return False


def blob_for(model: Path | str) -> Path:
    """The blob to export `model` to: its name with .bin, never the model file itself."""
    model = Path(str(model))
    out = model.with_suffix(".bin")
    return out if out != model else model.with_name(model.name + ".blob.bin")


def rebuild(blob: Path | str | None = None, verb: str = "run", flash_too: bool = False) -> str:
    """What rebuilds `blob` (default: the running command's --blob), as words ending in the
    commands to run: the export from its model file when that file exists; when `blob` is a
    model file itself, its export to a .bin (never an export over the model); when no model
    file of the blob is here, the export with the model it came from, said as such.
    `flash_too`: and the flash of the rebuilt blob."""
    blob = Path(str(blob if blob is not None else _get("blob") or DEFAULT_BLOB))
    if is_model_file(blob):
        out = blob_for(blob)
        fix = f"{blob} is a model file, not a blob: export it with '{export(out, blob)}'"
        return fix + (f" and '{flash(out)}'" if flash_too else f", then give --blob {out}")
    model = Path(str(_get("model") or model_for(blob)))
    then = f" and '{flash(blob)}'" if flash_too else ""
    if model.is_file() and model.resolve() != blob.resolve():
        return f"{verb} '{export(blob, model)}'{then}"
    return (
        f"there is no model file {model} to rebuild it from: {verb} 'tinyattn export --model "
        f"YOUR_MODEL.npz --out {shlex.quote(str(blob))}' with the model file it came from"
        f"{then}"
    )


STALE_AFTER = 2.0  # seconds a model file must be newer than its blob to be called newer


def stale_note(blob: Path | str) -> str | None:
    """A note when the model file beside `blob` (its name with .npz) was written after it
    (STALE_AFTER later: files copied together are not): a model trained since the last
    export, which the blob does not hold yet; once per command, None otherwise."""
    blob = Path(str(blob))
    model = model_for(blob)
    if blob in _noted:
        return None
    try:
        if model != blob and model.stat().st_mtime > blob.stat().st_mtime + STALE_AFTER:
            _noted.add(blob)
            return (
                f"note: {model} is newer than {blob} (trained after the last export); this "
                f"command uses the blob: run '{export(blob, model)}' to use the new model"
            )
    except OSError:
        pass
    return None


def blob_error(
    exc: Exception | str, blob: Path | str | None = None, flash_too: bool = True
) -> str:
    """A blob reader's error line with its generic remedy (blob.REMEDY, in the device
    reader's words too) replaced by the commands that rebuild and re-flash this blob (default:
    the running command's --blob), `rebuild`'s words."""
    from tinyattn.intmodel.blob import REMEDY

    text = str(exc)
    if not text.endswith(REMEDY):
        return text
    return text[: -len(REMEDY)] + rebuild(blob, "re-run", flash_too)


def again(name: str) -> str:
    """The command the user ran, as typed: `tinyattn NAME …` (just the name without one)."""
    if _argv and _argv[0] == name:
        return command(*_argv)
    return command(name)


def install(extra: str, make_target: str = "install") -> str:
    """How to add the optional part `extra` (an `[project.optional-dependencies]` name): the
    pip line for an installed wheel; in a clone (tinyattn.paths.clone_dir) the make target
    that adds it to .venv, with the editable pip line beside it."""
    from tinyattn.paths import clone_dir

    if clone_dir() is None:
        return f'pip install "tinyattn[{extra}]"'
    return f'make {make_target} (or pip install -e ".[{extra}]")'
