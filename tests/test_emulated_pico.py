# Host (CPython) + real MicroPython firmware on emulated ARM boards (../shared/boards).
"""The device runtime on the rp2 firmware of an emulated Raspberry Pi Pico (Cortex-M0+), as a
user's Pico runs it: `tinyattn flash` puts it there as armv6m .mpy, the Thumb assembler
kernels among them.

- `tinyattn flash` and `tinyattn parity --port <its tty>` as against a real board (Iris,
  every int8 logit exact); `kernels="auto"` takes thumb there.
- The trained golden models (tests/golden/trained: Iris, Wine, BasicMotions, JapaneseVowels)
  with the thumb, viper and pure kernels: every logit equal to the host integer reference's,
  on the rows emulated_support.STRIDE states (the emulated Pico runs ~5x slower than a real
  one in wall time and CI must stay short: every row of Iris and Wine with thumb and viper,
  every window of BasicMotions with thumb; the slower sets and JapaneseVowels' 640 windows a
  stated subset).
- A conv-stem model (random weights) with each kernel set: every logit exact on 24 windows.
- A rocket model with each kernel set (every logit exact on 12 windows), and the thumb and
  viper rocket kernels against the pure ones on random calls.
- A log-view and a clip-view model flashed and checked by `parity` from raw values, as a user
  runs it: the input stage in single precision, every xq and logit equal to the host's.
- The thumb attention kernel against the pure one on extreme int8 q, k where max - score
  passes dmax_sm so far that d M_sm overflows 32 bits.
- The app (`flash --app`, a replay source) and `monitor`: every decision equal to the host's.
One board per session (a module-scoped fixture); skipped with the reason when
../shared/boards or Node.js is not there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from emulated_support import (
    KERNELS,
    TIMEOUT,
    check_logits,
    conv_case,
    golden_files,
    rocket_case,
    rocket_kernel_cases,
    running_board,
)
from seq_models import view_model

from tinyattn.board.flash import mpremote
from tinyattn.tools.emulated_boards import GOLDEN, NAMES, parse_golden

RP2040 = Path(__file__).resolve().parent.parent / "host" / "board" / "rp2040.json"

pytestmark = pytest.mark.emulated


@pytest.fixture(scope="module")
def pico(tmp_path_factory):
    """An emulated Pico with the runtime flashed by `tinyattn flash` (Iris's blob as model.bin)
    and the golden models and inputs copied beside it."""
    from tinyattn import cli

    for board in running_board("pico"):
        files = tmp_path_factory.mktemp("pico-golden")
        golden_files(files)
        board.conv_logits = conv_case(files)
        board.rocket_logits = rocket_case(files)
        board.rocket_kernel_cases = rocket_kernel_cases(files)
        board.flash_code = cli.main(["flash", "--port", board.tty, "--blob",
                                     str(GOLDEN / "iris.bin"), "--quiet"])  # fmt: skip
        chain = []
        for path in sorted(files.iterdir()):
            chain += ["cp", str(path), ":", "+"]
        mpremote(board.tty, *chain[:-1], timeout=300)
        yield board


@pytest.mark.slow
def test_emulated_pico_flash_and_parity_like_a_realboard(pico, tmp_path):
    from tinyattn import cli

    assert pico.flash_code == 0
    report = tmp_path / "p.json"
    code = cli.main(["parity", "--port", pico.tty, "--blob", str(GOLDEN / "iris.bin"),
                     "--model", str(GOLDEN / "iris.npz"), "--path", "int8",
                     "--report", str(report), "--quiet"])  # fmt: skip
    summary = json.loads(report.read_text())["summary"]
    assert code == 0 and summary["passed"], summary
    assert summary["int8_exact"] == summary["samples"] > 0


@pytest.mark.slow
def test_emulated_pico_auto_takes_thumb(pico):
    script = ("import attention; m = attention.Model('iris.bin'); "
              "print('K', m.kernels, attention.kernels_available())")  # fmt: skip
    out = mpremote(pico.tty, "exec", script, timeout=120)
    assert "K thumb ['thumb', 'viper', 'native', 'pure']" in out  # flash adds native


@pytest.mark.slow
@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("name", NAMES)
def test_emulated_pico_golden_int8_exact(pico, name, kernels):
    out = mpremote(pico.tty, "exec", f"import golden_runner; golden_runner.go({name!r}, "
                   f"{kernels!r})", timeout=TIMEOUT["pico"])  # fmt: skip
    check_logits(out, name, kernels)


@pytest.mark.slow
def test_emulated_pico_app_stream_decisions_equal_the_host(pico, tmp_path, capsys):
    """`flash --app` with a replay source (BasicMotions' first 2 TEST recordings, 200 steps:
    11 decisions at hop 10); `monitor --reset` shows the app's decisions after a soft reset,
    each (class, score %) equal to the host's Stream; then a plain flash removes the app."""
    from tinyattn import cli
    from tinyattn.board.stream import host_decisions, write_replay
    from tinyattn.data.timeseries import load_ts_dataset

    blob = GOLDEN / "basicmotions.bin"
    d = load_ts_dataset("basicmotions", "TEST")
    steps = d.X[:2].astype(np.float32).reshape(-1, d.n_channels)
    replay = write_replay(tmp_path / "bm.tasr", steps)
    argv = ["flash", "--port", pico.tty, "--blob", str(blob), "--quiet", "--app", "--source",
            f"replay:{replay}", "--rate", "1000", "--hop", "10", "--smooth", "3"]  # fmt: skip
    assert cli.main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    host = host_decisions(blob, steps, 10, smooth=3)
    # the app's start (model load, the Stream's tables) takes seconds of a Pico's time, 5-10x
    # that of wall time on the emulator, more under load: silence is allowed for 300 s
    assert cli.main(["monitor", "--port", pico.tty, "--reset", "--count", str(len(host)),
                     "--json", "--timeout", "300"]) == 0  # fmt: skip
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    names = list(d.class_names)
    assert [r["label"] for r in rows] == [names[h["smoothed"]] for h in host]
    assert [round(r["score"] * 100) for r in rows] == [h["score"] * 100 // 16384 for h in host]
    assert all(r["us"] > 0 for r in rows)
    assert cli.main(["flash", "--port", pico.tty, "--blob", str(blob), "--quiet"]) == 0
    assert "the app (main.py) was removed" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("kernels", KERNELS)
def test_emulated_pico_conv_stem_int8_exact(pico, kernels):
    """A conv-stem model on the Pico: every logit of 24 windows of random lengths equal to the
    host integer reference's, with each kernel set (thumb: viper's conv between fused runs)."""
    out = mpremote(pico.tty, "exec", f"import golden_runner; golden_runner.go('conv', "
                   f"{kernels!r})", timeout=TIMEOUT["pico"])  # fmt: skip
    rows, chosen, _ = parse_golden(out)
    assert chosen == kernels, out[-2000:]
    assert sorted(rows) == list(range(len(pico.conv_logits))), out[-2000:]
    for i, logits in enumerate(pico.conv_logits):
        assert rows[i] == logits.tolist(), (kernels, i)



@pytest.mark.slow
@pytest.mark.parametrize("kernels", KERNELS)
def test_emulated_pico_rocket_int8_exact(pico, kernels):
    """A rocket model on the Pico (int32 input grid, pooled, levels over six decades): every
    logit of 12 windows of random lengths equal to the host integer reference's, with each
    kernel set (thumb: attention_thumb_rocket's kernels; viper: attention_viper_rocket's;
    32-bit words)."""
    out = mpremote(pico.tty, "exec", f"import golden_runner; golden_runner.go('rocket', "
                   f"{kernels!r})", timeout=TIMEOUT["pico"])  # fmt: skip
    rows, chosen, _ = parse_golden(out)
    assert chosen == kernels, out[-2000:]
    assert sorted(rows) == list(range(len(pico.rocket_logits))), out[-2000:]
    for i, logits in enumerate(pico.rocket_logits):
        assert rows[i] == logits.tolist(), (kernels, i)


@pytest.mark.slow
@pytest.mark.parametrize("module", ["attention_thumb_rocket", "attention_viper_rocket"])
def test_emulated_pico_rocket_kernels_equal_pure(pico, module):
    """The compiled rocket kernels (thumb: Thumb assembler; viper) against the pure ones on the
    Pico, on random calls (emulated_support.rocket_kernel_cases: pooled and capped, pad 0 and
    1, dilations in any order, combinations of 1..4 channels, windows shorter than 9d,
    values at the bounds, ties, saturated thresholds): rocket_in's block exponent and grid,
    rocket's features, all equal."""
    out = mpremote(pico.tty, "exec", f"import rocket_kernel_runner as r; r.go({module!r})",
                   timeout=600)  # fmt: skip
    rows = [line.split() for line in out.splitlines() if line.startswith("R ")]
    assert len(rows) == pico.rocket_kernel_cases, out[-2000:]
    assert all(r[2] == "True" for r in rows), [r for r in rows if r[2] != "True"]


@pytest.mark.slow
@pytest.mark.parametrize("view", ["log", "clip"])
def test_emulated_pico_view_from_raw_values_parity(pico, tmp_path, view):
    """A view blob (docs/quantization.md "Input view") from the raw values on the Pico's
    single-precision floats, the log view's `log` among them: `tinyattn flash` and `parity`
    as on a real board, every xq and int8 logit equal to the host's (float64) on 24 windows
    of heavy-tailed levels and unequal lengths (seq_models.view_model); then Iris's blob back."""
    from tinyattn import cli
    from tinyattn.board.parity import parity

    _, data, (X, n, y) = view_model(view)
    blob = tmp_path / "view.bin"
    blob.write_bytes(data)
    assert cli.main(["flash", "--port", pico.tty, "--blob", str(blob), "--quiet"]) == 0
    try:
        s = parity(pico.tty, blob, X, y, lengths=n, bench_n=0, progress=False,
                   timeout=60.0)["summary"]  # fmt: skip
    finally:
        cli.main(["flash", "--port", pico.tty, "--blob", str(GOLDEN / "iris.bin"), "--quiet"])
    assert s["passed"], s
    assert s["platform"]["platform"] == "rp2"
    assert s["xq_match"] == s["int8_exact"] == s["answered"] == 24


ATTN_CASE = """
import array, math
import attention_kernels as P, attention_thumb as T
S, E, H, D = @SHAPE@
hi = [round(16384 * math.exp(-16 * i / 32)) for i in range(16)]
lo = [round(16384 * math.exp(-i / 32)) for i in range(16)]
p = array.array("i", [S, E, H, D, @SM@, @CTX@] + hi + lo + [@DMAX@])
for case in @CASES@:
    q, k, v = (array.array("i", t) for t in case)
    out = []
    for mod in (P, T):
        ctx = array.array("i", [0] * (S * E))
        mod.attn(q, k, v, ctx, array.array("i", [0] * (2 * S)), p)
        out.append(list(ctx))
    print("C", out[0] == out[1], out[0][:4], out[1][:4])
"""


@pytest.mark.slow
def test_emulated_pico_thumb_attn_equals_pure_past_dmax(pico):
    """The attention kernel's softmax when max - score exceeds dmax_sm so far that d M_sm does
    not fit 32 bits (extreme int8 q and k, a sharp softmax: the small-int budget bounds the
    product by dmax_sm only): e = 0 there, as the pure kernel, whose ints never overflow."""
    S, E, H, D = 5, 8, 2, 4
    M_sm, sh_sm = 30000, 14
    dmax = -(-(511 << (sh_sm - 1)) // M_sm) - 1  # tinyattn.intmodel.blob.softmax_diff_max
    rng = np.random.default_rng(7)
    cases = [[rng.choice([-128, 127, -1, 0, 5, 126], S * E).tolist() for _ in range(3)]
             for _ in range(12)]  # fmt: skip
    assert 2 * D * 128 * 128 * M_sm >= 2**31  # the largest d times M_sm passes int32
    script = (ATTN_CASE.replace("@SHAPE@", f"{S}, {E}, {H}, {D}")
              .replace("@SM@", f"{M_sm}, {sh_sm}").replace("@CTX@", "600, 20")
              .replace("@DMAX@", str(dmax)).replace("@CASES@", repr(cases)))  # fmt: skip
    out = mpremote(pico.tty, "exec", script, timeout=300)
    rows = [line for line in out.splitlines() if line.startswith("C ")]
    assert len(rows) == len(cases) and all(r.startswith("C True") for r in rows), out[-2000:]


@pytest.mark.slow
def test_emulated_pico_time_model_predicts_every_grid_shape_within_10_percent(pico, tmp_path):
    """`--board rp2040 --max-ms MS` is a promise: one model of each shape the search's grid
    makes (tools/bench_pico_cost.SHAPES, and the golden models), timed on the Pico's own clock,
    takes at most its predicted µs + 10 % (host/board/rp2040.json's time model). A kernel
    made slower without the model fitted again fails here."""
    from tinyattn.board.cost import predict_us
    from tinyattn.intmodel.blob import read_blob
    from tinyattn.tools.bench_pico_cost import measure, models

    rates = json.loads(RP2040.read_text())["cost"]["rates"]
    keep = None  # TINYATTN_EMULATED_ALL: every model; CI: one of each kind of kernel work (a
    # rocket model of several channels a group, and one of one channel: the thumb kernel's paths)
    if not os.environ.get("TINYATTN_EMULATED_ALL"):
        keep = ("iris", "bm-p5-l1", "bm-conv-s8-w16", "acsf1-alone-w16", "bm-rocket-30k",
                "coffee-rocket-40k")  # fmt: skip
    blobs = models(tmp_path, keep)
    us = measure(pico.tty, blobs)
    assert sorted(us) == sorted(blobs)
    for name, blob in blobs.items():
        predicted = predict_us(read_blob(blob.read_bytes()), rates)
        assert us[name] <= 1.1 * predicted, (name, us[name], predicted)
