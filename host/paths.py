"""Host (CPython): where the repository's files are (device runtime, data, build outputs)."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"
REPO_DIR = PACKAGE_DIR.parent
DEVICE_DIR = REPO_DIR / "device"
BUILD_DIR = Path("build")  # relative to the working directory, like the Makefile's


def device_dir() -> Path:
    """The device/ folder; tinyattn is installed editable from a clone (`make install`)."""
    if not (DEVICE_DIR / "attention.py").is_file():
        raise FileNotFoundError(
            f"{DEVICE_DIR}/attention.py not found: "
            "install tinyattn from a clone with 'make install'"
        )
    return DEVICE_DIR
