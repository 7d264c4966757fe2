"""Host (CPython): where tinyattn's files are (device runtime, data, build outputs), in a clone
and in an installed wheel.

One package, `tinyattn`, from the repository's folders: `host/` is `tinyattn`, `tools/` is
`tinyattn.tools` and `device/` is `tinyattn.device` (the MicroPython runtime, shipped as package
data: files for the board, not modules for CPython). In a clone (`make install`, an editable
install) each name resolves to its folder in the clone; in a wheel they sit side by side under
site-packages/tinyattn/.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent  # host/ in a clone, site-packages/tinyattn/
DATA_DIR = PACKAGE_DIR / "data"
REPO_DIR = PACKAGE_DIR.parent  # a clone's top folder (only meaningful in a clone)
BUILD_DIR = Path("build")  # relative to the working directory, like the Makefile's


def clone_dir() -> Path | None:
    """The clone tinyattn runs from (host/ beside device/ and the Makefile), or None when it
    runs from an installed wheel (no Makefile, no tests/: say `pip install`, never `make`)."""
    if PACKAGE_DIR.name == "host" and (REPO_DIR / "Makefile").is_file():
        return REPO_DIR
    return None


# The device runtime's folder: device/ in a clone, tinyattn/device/ in a wheel.
DEVICE_DIR = REPO_DIR / "device" if clone_dir() is not None else PACKAGE_DIR / "device"


def device_dir() -> Path:
    """DEVICE_DIR, once checked that the runtime is there (FileNotFoundError saying how to
    get it back)."""
    if not (DEVICE_DIR / "attention.py").is_file():
        fix = ("restore it with 'git checkout -- device'" if clone_dir() is not None else
               "reinstall tinyattn: pip install --force-reinstall tinyattn")  # fmt: skip
        raise FileNotFoundError(f"{DEVICE_DIR}/attention.py not found (the device runtime): {fix}")
    return DEVICE_DIR
