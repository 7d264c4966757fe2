# Host (CPython) + MicroPython unix port: the Stream over seq-rocket models (a 30-bit input grid).
"""Issue 39: a rocket model streams like the other window models, every decision exactly
`run_int8` of its window. Its input grid is wider than int8 (docs/quantization.md: mean 0,
std and s_in powers of two), so the Stream quantizes a step from the float32's bits in integers
(`Stream._put_wide`) instead of the int8 threshold tables:
- that quantizer equals `Model.quantize` on every float32 tried, channel by channel: random
  values over many decades, every rounding tie (k + 1/2) * 2**k_c and its float32 neighbours,
  values that saturate, subnormals, signed zeros; NaN and inf are refused;
- the small rocket models of tests/rocket_models.py (one channel, three, pooled with levels
  over six decades, a positions cap, JapaneseVowels' 12 channels) over their TEST windows back
  to back: every decision's logits equal intref's run_int8 of the window and Model.run_int8's,
  push and push_block alike;
- on the MicroPython unix port (.py, kernels pure, native, viper): the same stream with every
  push under `micropython.heap_lock()`, no byte allocated by a block, every decision equal to
  Model.run_int8 on the board of its window and to the host's in every field.
"""

from __future__ import annotations

import numpy as np
import pytest
from device_support import literals, run_micropython
from rocket_models import rocket_cases
from test_stream import STREAM_MP

from tinyattn.board.stream import device_modules, host_decisions, replay_bytes
from tinyattn.intmodel.blob import read_blob
from tinyattn.intmodel.intref import quantize_input, run_int8

CASES = ("uni", "multi", "pooled", "capped", "jv")
HOP = 5


@pytest.fixture(scope="module")
def mods():
    return device_modules()


def stream_of(name: str) -> tuple[bytes, np.ndarray]:
    """The case's blob and its TEST windows back to back, each cut to its length: [N, C]."""
    blob, X, n = rocket_cases()[name]
    return blob, np.concatenate([X[i, : n[i]] for i in range(len(n))]).astype(np.float32)


def oracle_logits(blob: bytes, steps: np.ndarray, ends: list[int]) -> np.ndarray:
    spec = read_blob(blob)
    T = spec.ops[0].iparams["T"]
    X = np.stack([steps[e - T : e] for e in ends]).astype(np.float64)
    n = np.full(len(ends), T)
    return run_int8(spec, quantize_input(spec, X, n), n)


def _f32(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, np.uint32).view(np.float32)


@pytest.mark.host
@pytest.mark.parametrize("name", CASES)
def test_stream_rocket_quantizer_equals_model_quantize(mods, name):
    attention, attention_stream = mods
    blob, _ = stream_of(name)
    m = attention.Model(blob, kernels="pure")
    assert m.xq_typecode != "b"
    s = attention_stream.Stream(m, HOP)
    C = m.n_features
    rng = np.random.default_rng(7)
    k = np.array([shift - 150 for shift in s._shift])  # u = x / 2**k_c
    ties = (rng.integers(-(2**20), 2**20, (64, C)) + 0.5) * 2.0 ** k[None, :]
    values = [
        rng.normal(size=(400, C)) * 10.0 ** rng.uniform(-12, 12, (400, C)),
        ties,
        np.nextafter(ties.astype(np.float32), np.float32(np.inf)),
        np.nextafter(ties.astype(np.float32), np.float32(-np.inf)),
        np.full((1, C), 3e38), np.full((1, C), -3e38), np.zeros((1, C)), np.full((1, C), -0.0),
        np.tile(_f32([1, 0x80000005, 0x007FFFFF, 0x00800000])[:, None], (1, C)),
    ]  # fmt: skip
    steps = np.concatenate([v.astype(np.float32) for v in values])
    xq = m.quantize([0.0] * C)
    for step in steps:
        s._head = 0
        s._put(step.astype("<f4").tobytes(), 0)
        m.quantize([float(v) for v in step], xq)
        assert list(s._ring[:C]) == list(xq[:C]), step
    for bad in (np.nan, np.inf, -np.inf):
        step = np.zeros(C, np.float32)
        step[-1] = bad
        with pytest.raises(ValueError, match="NaN or inf"):
            s.push(step.tolist())


@pytest.mark.host
@pytest.mark.parametrize("name", CASES)
def test_stream_rocket_decisions_equal_run_int8_of_their_windows(mods, name):
    attention, attention_stream = mods
    blob, steps = stream_of(name)
    m = attention.Model(blob, kernels="pure")
    s = attention_stream.Stream(m, HOP, smooth=2)
    assert not s.reuse
    T = m.steps
    ref = m.new_logits()
    ends, got = [], []
    for i, step in enumerate(steps):
        if s.push([float(v) for v in step]):
            ends.append(i + 1)
            got.append(list(s.logits))
            window = steps[i + 1 - T : i + 1].reshape(-1).tolist()
            assert m.run_int8(m.quantize(window), ref, T) == s.cls
            assert list(ref) == got[-1]
    assert ends == list(range(T, len(steps) + 1, HOP)) and len(ends) > 10
    assert np.array_equal(np.array(got), oracle_logits(blob, steps, ends))
    blocks = host_decisions(blob, steps, HOP, smooth=2)
    assert [d["logits"] for d in blocks] == got


@pytest.mark.micropython
@pytest.mark.parametrize("kernels", ("pure", "native", "viper"))
def test_stream_rocket_mp_heap_locked_and_bit_exact(mpy, tmp_path, kernels):
    blob, steps = stream_of("pooled")  # several block exponents a window
    path = tmp_path / "rocket.bin"
    path.write_bytes(blob)
    replay = tmp_path / "rocket.tasr"
    replay.write_bytes(replay_bytes(steps))
    lines = run_micropython(STREAM_MP, [str(mpy), str(path), kernels, str(replay), str(HOP)],
                            "176k", timeout=300)  # fmt: skip
    *rows, (worst, n, reuse) = literals(lines)
    T = read_blob(blob).ops[0].iparams["T"]
    assert not reuse and worst == 0
    assert n == len(rows) == len(range(T, len(steps) + 1, HOP))
    assert all(r[6] for r in rows), "a decision differs from Model.run_int8 of its window"
    host = host_decisions(blob, steps, HOP, smooth=3, threshold=0.9)
    keys = ("logits", "cls", "prob", "smoothed", "score", "uncertain")
    assert [r[:6] for r in rows] == [[d[k] for k in keys] for d in host]


@pytest.mark.host
def test_stream_rocket_heap_estimate_counts_the_app():
    """`flash --app` takes a rocket model now: the heap estimate walks its Stream (the int32
    ring and input buffer, no tables) beside the model."""
    from tinyattn.board import heap

    blob, _ = stream_of("jv")
    f = heap.features(blob)
    assert f["stream"] is not None
    assert heap.model_heap(f) > heap.model_heap(f, stream=False) > 0
    assert heap.heap_needed(blob, "app") > 0
