# Host (CPython): the README's Python example, run as written (a virtual board, or $TINYATTN_PORT).
"""The README's tour ends with the Python API in a few lines: fit, predict and score on the
host, export the blob, flash a board, parity. It must run as the reader copies it, in an empty
folder. The README's shell commands, links and figures: tests/test_docs.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.mark.serial
def test_readme_python_example_runs_as_written(tmp_cwd, mpy, capsys):
    """`mpy` only for its skip: without the MicroPython unix port there is no virtual board."""
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.M | re.S)
    assert len(blocks) == 1, "the README has one Python example"
    exec(compile(blocks[0], str(README), "exec"), {"__name__": "__readme__"})
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "True", out  # parity passed: every int8 logit equal on the board
    assert (tmp_cwd / "build" / "iris.bin").is_file()
