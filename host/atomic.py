"""Host (CPython): atomic file writes — a temp file in the same folder, then one `os.replace`.

Every output file (model.npz, model.bin, parity.json, .ts files, board model files) is written
through `atomic_open`, so a reader or a crash sees the old file or the new one, never a mix.
`tempfile.mkstemp` creates its file with mode 0600 whatever the umask; the file is given the
mode a plain `open(path, "w")` would give it (0666 minus the umask, usually 0644) before it
takes the final name, so outputs stay readable by the group and others as users expect.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def current_umask() -> int:
    """The process umask, read without changing it where Linux shows it (/proc, kernel >= 4.7):
    the usual `os.umask(0)`-and-back would briefly let another thread create a world-writable
    file (boards are flashed side by side in threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """The mode `open(path, "w")` gives a new file: 0666 minus the umask."""
    return 0o666 & ~current_umask()


@contextmanager
def atomic_open(
    path: str | Path,
    mode: str = "wb",
    *,
    encoding: str | None = None,
    newline: str | None = None,
    fsync: bool = False,
    before_rename: Callable[[Path], None] | None = None,
) -> Iterator[IO[Any]]:
    """`with atomic_open(path, "w") as f: ...` writes `path` atomically (parents created).

    The temp file `.NAME.XXXX.tmp` sits next to `path`; on any exception (KeyboardInterrupt
    too) it is removed and `path` is left as it was. `fsync` flushes it to the disk before the
    rename; `before_rename(tmp_path)` is a test hook called just before it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        os.fchmod(fd, new_file_mode())
        with os.fdopen(fd, mode, encoding=encoding, newline=newline) as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        if before_rename is not None:
            before_rename(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: str | Path, data: bytes | str, fsync: bool = False) -> Path:
    """Write bytes (or UTF-8 text, newlines as given) to `path` atomically; returns the path."""
    if isinstance(data, str):
        with atomic_open(path, "w", encoding="utf-8", newline="", fsync=fsync) as f:
            f.write(data)
    else:
        with atomic_open(path, "wb", fsync=fsync) as f:
            f.write(data)
    return Path(path)
