# Host (CPython) + the qemu port of MicroPython on an emulated Cortex-M3 (../shared/boards).
"""The trained golden models (tests/golden/trained) on the qemu port's Cortex-M3 (ARMv7-M): the
runtime as .mpy for its arch, served with `mpremote mount` (the port has no filesystem), with
the thumb, viper and pure kernels, every logit equal to the host integer reference's, on the
rows emulated_support.STRIDE states; a rocket model likewise, and the compiled rocket kernels
against the pure ones on random calls. One board per session; skipped with the reason when
../shared/boards or qemu-system-arm is not there.
"""

from __future__ import annotations

import pytest
from emulated_support import (
    KERNELS,
    TIMEOUT,
    check_logits,
    golden_files,
    rocket_case,
    rocket_kernel_cases,
    running_board,
)

from tinyattn.board.flash import mpremote
from tinyattn.tools.emulated_boards import NAMES, parse_golden

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
        board.rocket_logits = rocket_case(folder)
        board.rocket_kernel_cases = rocket_kernel_cases(folder)
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


@pytest.mark.slow
def test_emulated_cortex_m3_rocket_int8_exact_and_kernels_equal_pure(cortex_m3):
    """A rocket model with each kernel set (every logit of 12 windows equal to the host integer
    reference's), then the thumb and viper rocket kernels against the pure ones on random
    calls (emulated_support.rocket_kernel_cases), on ARMv7-M, in one session."""
    calls = "; ".join(f"golden_runner.go('rocket', {k!r}); print('END')" for k in KERNELS)
    calls += "; " + "; ".join(f"rocket_kernel_runner.go({m!r}); print('END')"
                              for m in ("attention_thumb_rocket", "attention_viper_rocket"))
    out = mpremote(cortex_m3.tty, "mount", str(cortex_m3.folder_served), "exec",
                   f"import golden_runner, rocket_kernel_runner; {calls}",
                   timeout=TIMEOUT["cortex-m3"])  # fmt: skip
    parts = out.split("END\n")
    assert len(parts) == len(KERNELS) + 3, out[-2000:]
    for kernels, part in zip(KERNELS, parts, strict=False):
        rows, chosen, _ = parse_golden(part)
        assert chosen == kernels, part[-2000:]
        assert sorted(rows) == list(range(len(cortex_m3.rocket_logits))), part[-2000:]
        for i, logits in enumerate(cortex_m3.rocket_logits):
            assert rows[i] == logits.tolist(), (kernels, i)
    for part in parts[len(KERNELS) : len(KERNELS) + 2]:
        rows = [line.split() for line in part.splitlines() if line.startswith("R ")]
        assert len(rows) == cortex_m3.rocket_kernel_cases, part[-2000:]
        assert all(r[2] == "True" for r in rows), [r for r in rows if r[2] != "True"]
