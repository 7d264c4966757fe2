"""Hardware tests: only with a real board on $TINYATTN_PORT (e.g. /dev/ttyACM0, /dev/ttyUSB0).

The serial tier (test_serial_parity.py) runs against the same board when the variable is set;
these add what only real hardware shows: the board's own native architecture for .mpy files
(armv6m on RP2040, xtensawin on ESP32) and parity with the runtime compiled for it.
"""

from __future__ import annotations

import os

import pytest

from tinyattn.board.flash import MPY_ARCH, board_arch, flash
from tinyattn.board.parity import parity
from tinyattn.data.tabular import load_dataset

PORT = os.environ.get("TINYATTN_PORT")
pytestmark = [
    pytest.mark.hardware,
    pytest.mark.skipif(not PORT, reason="no real board: set TINYATTN_PORT=/dev/ttyACM0"),
    pytest.mark.usefixtures("tmp_cwd"),  # flash(use_mpy=True) writes build/mpy/ under the cwd
]


def test_hardware_board_reports_a_native_arch():
    version, arch = board_arch(PORT)
    assert version == 6 and arch in MPY_ARCH.values()


def test_hardware_parity_with_mpy_runtime(reference_model):
    flash(PORT, reference_model["blob"], use_mpy=True, progress=False)
    data = load_dataset("iris")
    s = parity(PORT, reference_model["blob"], data.X, data.y, progress=False)["summary"]
    assert s["passed"], s
