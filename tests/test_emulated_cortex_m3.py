# Host (CPython) + the qemu port of MicroPython on an emulated Cortex-M3 (../shared/boards).
"""The trained golden models (tests/golden/trained) on the qemu port's Cortex-M3 (ARMv7-M): the
runtime as .mpy for its arch, served with `mpremote mount` (the port has no filesystem), with
the thumb, viper and pure kernels, every logit equal to the host integer reference's, on the
rows emulated_support.STRIDE states. One board per session; skipped with the reason when
../shared/boards or qemu-system-arm is not there.
"""

from __future__ import annotations

import pytest
from emulated_support import KERNELS, TIMEOUT, check_logits, golden_files, running_board

from tinyattn.board.flash import mpremote
from tinyattn.tools.emulated_boards import NAMES

pytestmark = pytest.mark.emulated


@pytest.fixture(scope="module")
def cortex_m3(tmp_path_factory):
    """An emulated Cortex-M3 and a folder (served with `mpremote mount`) holding the runtime as
    armv7 .mpy and the golden models and inputs."""
    from device_support import compile_mpy

    for board in running_board("cortex-m3"):
        folder = tmp_path_factory.mktemp("m3-files")
        compile_mpy(folder, board.arch)
        golden_files(folder)
        board.folder_served = folder
        yield board


@pytest.mark.slow
def test_emulated_cortex_m3_golden_int8_exact(cortex_m3):
    """Every model with each kernel set in turn, in one session: each session mounts the folder
    and imports the runtime over the serial link again (~20 s)."""
    runs = [(name, k) for name in NAMES for k in KERNELS]
    calls = "; ".join(f"golden_runner.go({n!r}, {k!r}); print('END')" for n, k in runs)
    out = mpremote(cortex_m3.tty, "mount", str(cortex_m3.folder_served), "exec",
                   f"import golden_runner; {calls}", timeout=TIMEOUT["cortex-m3"])  # fmt: skip
    parts = out.split("END\n")
    assert len(parts) == len(runs) + 1, out[-2000:]
    for (name, kernels), part in zip(runs, parts, strict=False):
        check_logits(part, name, kernels)
