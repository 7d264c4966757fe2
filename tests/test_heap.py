# Host (CPython) and MicroPython: the one heap estimate, against what was measured.
"""tinyattn.board.heap: every command's heap figure (the search's budget, flash's warning,
flash --app's refusal, parity's message) is one estimate, fitted by tools/dev/heap_fit.py to the
measurements in tests/golden/heap_measured.json (the trained golden models and one model of
each shape the search picks, on the MicroPython unix port). Here: the fit holds on those
measurements (the model's load an upper bound, a context's need within HEAP_ERROR), the
features are what the device runtime allocates (counted again from the golden blobs), and on
the unix port the loads of the golden blobs stay under the model estimate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tinyattn.board import heap

GOLDEN = Path(__file__).parent / "golden"
MEASURED = json.loads((GOLDEN / "heap_measured.json").read_text())


@pytest.mark.host
@pytest.mark.parametrize("name", sorted(MEASURED["models"]))
def test_heap_estimate_bounds_the_measured_load_and_is_near_the_measured_need(name):
    r = MEASURED["models"][name]
    f = r["features"]
    load = r["load"][0] + (r["load"][1] if f["stream"] else 0)
    assert load <= heap.model_heap(f) <= load + 2 * heap.MODEL_MARGIN + 0.1 * load
    for context in ("server", "app"):
        if context in r:
            est = heap.from_features(f, context)
            assert abs(est / r[context] - 1) <= heap.HEAP_ERROR, (context, est, r[context])


@pytest.mark.host
@pytest.mark.parametrize("name", ["iris", "wine", "basicmotions", "japanesevowels"])
def test_heap_features_of_the_golden_blobs_are_the_measured_ones(name):
    """The features the fit was made on are what `features` counts now (a change in the
    device runtime's allocations must be measured again: tools/dev/heap_fit.py)."""
    f = heap.features((GOLDEN / "trained" / f"{name}.bin").read_bytes())
    assert json.loads(json.dumps(f)) == MEASURED["models"][name]["features"]


@pytest.mark.host
def test_heap_row_model_has_no_app_and_py_sources_need_more():
    iris = (GOLDEN / "trained" / "iris.bin").read_bytes()
    bm = (GOLDEN / "trained" / "basicmotions.bin").read_bytes()
    with pytest.raises(ValueError, match="does not stream"):
        heap.heap_needed(iris, "app")
    assert heap.heap_needed(bm, "server", as_mpy=False) >= heap.PY_LEAST
    assert heap.heap_needed(bm, "app") > heap.model_heap(heap.features(bm)) > 0


@pytest.mark.micropython
@pytest.mark.parametrize("name", ["iris", "basicmotions", "japanesevowels"])
def test_heap_model_estimate_bounds_the_load_on_the_unix_port(name):
    from tinyattn.tools.dev.heap_fit import load
    from tinyattn.tools.vboard import find_micropython

    if not find_micropython():
        pytest.skip("the MicroPython unix port is not installed (make install)")
    blob = GOLDEN / "trained" / f"{name}.bin"
    model, stream = load(blob)
    f = heap.features(blob.read_bytes())
    assert 0 < model + (stream if f["stream"] else 0) <= heap.model_heap(f)


def test_heap_kind_modules_counts_a_rocket_op_modules_but_not_its_thumb_one():
    """A rocket blob's own modules (checks, builder, pure and viper kernels) count, as the fit
    was made; attention_thumb_rocket does not: it takes viper's place on a Thumb port and is
    absent elsewhere."""
    from rocket_models import rocket_cases

    from tinyattn.paths import device_dir

    raw = rocket_cases()["pooled"][0]
    names = ("ops", "build", "kernels", "viper")
    want = sum((device_dir() / f"attention_{n}_rocket.py").stat().st_size for n in names)
    assert (device_dir() / "attention_thumb_rocket.py").is_file()
    assert heap.kind_modules(raw) == want


@pytest.mark.host
def test_heap_counts_a_seq_models_int8_buffers_once_as_a_board_holds_them():
    """On a board (viper, thumb) a seq-attn model's int8 program runs in its float program's
    buffers but for its int8 input window; the pure kernels the estimate loads under CPython
    allocate their own, which `features` takes out again: both ping-pong buffers [S*E], [S*F],
    q, k, v, ctx [S*E] and the scores [2S] of JapaneseVowels (S = 26, E = 20, F = 40), in
    4-byte words. A row model and a rocket model have nothing shared."""
    from rocket_models import rocket_cases

    from tinyattn.board.stream import device_modules

    attention, _ = device_modules()
    jv = (GOLDEN / "trained" / "japanesevowels.bin").read_bytes()
    S, E, F = 26, 20, 40
    assert heap._shared_int8(attention, jv) == (4 * (S * E + S * F + 4 * S * E + 2 * S), 7)
    assert heap._shared_int8(attention, (GOLDEN / "trained" / "iris.bin").read_bytes()) == (0, 0)
    assert heap._shared_int8(attention, rocket_cases()["uni"][0]) == (0, 0)


@pytest.mark.host
@pytest.mark.parametrize("name", ["japanesevowels", "rocket"])
def test_heap_seq_quantize_buffer_is_the_int8_window_and_keeps_the_window(attention, name):
    """A seq model quantizes into its int8 program's input window (no second window on the
    heap; a Stream uses the same). run_int8 of that buffer leaves a seq-attn window as
    quantize wrote it; a rocket model's at P = 1 is the interior of its pooled grid xp (no
    window of its own) and the run turns it into pooled values in place: the server reads the
    window's xq before the run, and reports quantize's."""
    from rocket_models import rocket_cases

    from tinyattn.board.stream import device_modules

    _, attention_stream = device_modules()
    if name == "rocket":
        data, X, n = rocket_cases()["uni"]
        window = X[0][: int(n[0])].reshape(-1).tolist()
    else:
        data = (GOLDEN / "trained" / "japanesevowels.bin").read_bytes()
        window = [0.25 * ((i * 37) % 11 - 5) for i in range(20 * 12)]  # 20 of 26 steps
    m = attention.Model(data, kernels="pure")
    assert m._xq is m._x8 and len(m._xq) == m.input_len
    q = m.quantize(window, m._xq)
    before = list(q)
    out = m.new_logits()
    m.run_int8(q, out, len(window) // m.n_features)
    assert any(before)
    if name == "rocket":
        import server

        xp = m._prog8[0][2]  # rocket_in's (x, xp): the window is xp's interior
        assert isinstance(m._x8, memoryview) and m._x8.obj is xp and len(xp) > len(m._x8)
        assert list(q) != before  # consumed: its grid values (|x| >= 2**15) became pooled ones
        server._state["out"] = m.new_logits()
        _, xq, logits, _ = server._infer_one(m, window, "int8")
        assert xq == before[: len(window)] and logits == list(out)
    else:
        assert list(q) == before
    assert attention_stream.Stream(m, 1, reuse=False)._xq is m._xq
