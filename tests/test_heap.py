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
