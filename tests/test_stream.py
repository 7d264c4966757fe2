# Host (CPython): device/attention_stream.py — a live stream of steps, a decision every hop.
"""The Stream over the trained BasicMotions model (tests/golden/trained/basicmotions.bin, T=100,
C=6, P=5) and a hand-made seq blob with T % P != 0 (tests/seq_models.seq_spec, T=10, P=4):

- its quantizer (thresholds, no float op per value) equals `Model.quantize` on every float32
  tried: random values, huge ones, and each threshold's neighbours, channel by channel;
- BasicMotions' 40 TEST windows back to back (4000 steps), hop 10: every decision's logits
  equal intref's run_int8 of the float32 window (the host oracle); on the short stream (below)
  also Model.run_int8's, and push (one step) and push_block give the same decisions;
- the pure kernels (CPython's, and MicroPython's `pure` set) play the short stream, every
  4th TEST window (10 windows, 1000 steps, all four classes, three class changes): the same
  code paths (ring wrap-arounds, patch reuse, smoothing over a class change) at a quarter of
  the hops; the compiled kernel sets (native, viper) play the whole stream at hop 10 (every
  decision field against the host's) and the short one at the other hops;
- on the MicroPython unix port (.mpy, kernels pure/native/viper): the same stream with
  every push and push_block under `micropython.heap_lock()`, a gc.mem_alloc delta of 0 per
  block, each decision's logits equal Model.run_int8 on the board of the same window, and
  every decision field (logits, cls, prob, smoothed, score, uncertain) equal to the host's
  (the same file under CPython);
- patch reuse (hop a multiple of P, T a whole number of patches): every decision's logits
  equal the full recompute's (run_int8 of the window) at hops P, 2P (= 10) and 4P, on CPython
  and on the unix port with each kernel set under heap_lock; a hop that is not a multiple of P
  (7) and a window that is not whole patches (T=10, P=4) fall back to the full recompute;
  a hand-made seq blob with T % P == 0 and large per-token biases agrees with intref;
- smoothing, threshold and probabilities as docs/stream.md says; bad arguments refused.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from device_support import literals, run_micropython
from seq_models import seq_spec

from tinyattn.board.stream import device_modules, host_decisions, replay_bytes
from tinyattn.data.timeseries import load_ts_dataset
from tinyattn.data.windows import VIEW_CLIP, VIEW_LOG, InputView
from tinyattn.intmodel.blob import blob_bytes, read_blob
from tinyattn.intmodel.intref import quantize_input, run_int8

BM = Path(__file__).parent / "golden" / "trained" / "basicmotions.bin"
HOP = 10
KERNELS = ("pure", "native", "viper")
HOPS = (10, 5, 7)  # 2P, P (patch reuse) and not a multiple of P (the full recompute)
SHORT = slice(0, 40, 4)  # the short stream's TEST windows: 10 of 40, every class (docstring)


@pytest.fixture(scope="module")
def mods():
    return device_modules()


@functools.cache
def bm_stream(short: bool = False) -> np.ndarray:
    """BasicMotions' 40 TEST windows back to back: [4000, 6] float32; `short`: the SHORT
    windows only, [1000, 6]."""
    d = load_ts_dataset("basicmotions", "TEST")
    X = d.X[SHORT] if short else d.X
    return X.astype(np.float32).reshape(-1, d.n_channels)


@pytest.fixture(scope="module")
def bm_steps() -> np.ndarray:
    return bm_stream()


@pytest.fixture(scope="module")
def bm_short() -> np.ndarray:
    return bm_stream(short=True)


@functools.cache
def bm_host(smooth: int, threshold: float | None, short: bool = False) -> list[dict]:
    """host_decisions of the BasicMotions stream (`short`: the short one) at hop 10 (cached:
    pure kernels on CPython)."""
    return host_decisions(BM, bm_stream(short), HOP, smooth, threshold)


def oracle_logits(blob: bytes, steps: np.ndarray, ends: list[int]) -> np.ndarray:
    """intref's int8 logits of the T-step windows ending at each of `ends` (exclusive)."""
    spec = read_blob(blob)
    T = spec.ops[0].iparams["T"]
    X = np.stack([steps[e - T : e] for e in ends]).astype(np.float64)  # (N, T, C)
    n = np.full(len(ends), T)
    return run_int8(spec, quantize_input(spec, X, n), n)


@pytest.mark.host
def test_stream_quantizer_equals_model_quantize(mods):
    attention, attention_stream = mods
    rng = np.random.default_rng(1)
    spec = seq_spec(seed=4)
    F = len(spec.norm_mean)
    logged = replace(spec, view=InputView(VIEW_LOG, (np.linspace(-2, 1, F),)))
    clip = (np.linspace(-2, -1, F), np.linspace(0, 1, F))  # inside the values' range
    clipped = replace(spec, view=InputView(VIEW_CLIP, clip))
    for data in (BM.read_bytes(), blob_bytes(spec), blob_bytes(logged), blob_bytes(clipped)):
        m = attention.Model(data, kernels="pure")
        s = attention_stream.Stream(m, HOP)
        C = m.n_features
        xq = m.quantize([0.0] * C, m.quantize([0.0] * C)[:C])
        values = [rng.normal(0, 10, 3000 * C), rng.normal(0, 1e6, 300 * C),
                  rng.uniform(-3, 3, 3000 * C)]  # fmt: skip
        steps = [list(map(float, v)) for v in np.concatenate(values).astype(np.float32)
                 .reshape(-1, C)]  # fmt: skip
        for c in range(C):  # each threshold's neighbours, in its own channel
            for j in range(255):
                key = (s._hi[c][j] << 16) | s._lo[c][j]
                for k in (key - 1, key, key + 1):
                    if abs(k) <= attention_stream._KEY_MAX:
                        step = [0.0] * C
                        step[c] = attention_stream._float(k)
                        steps.append(step)
        bad = 0
        for step in steps:
            s._head = 0
            s._put(struct.pack(f"<{C}f", *step), 0)
            m.quantize(step, xq)
            bad += list(s._ring[:C]) != list(xq)
        assert bad == 0, f"{bad} of {len(steps)} steps quantized unlike Model.quantize"


@pytest.mark.slow
@pytest.mark.host
def test_stream_decisions_equal_run_int8_of_their_windows(mods, bm_steps, bm_short):
    """The short stream step by step (push, pure kernels): every decision's logits equal
    Model.run_int8's and intref's of its window, and push_block's decisions are the same in
    every field; the whole stream through push_block: every decision equals intref's."""
    attention, attention_stream = mods
    data = BM.read_bytes()
    m = attention.Model(data, kernels="pure")
    s = attention_stream.Stream(m, HOP, smooth=3, threshold=0.9)
    assert s.reuse  # hop 10 = 2P: the patches' sums are reused
    T, C = m.steps, m.n_features
    ends, got, model_logits, fields = [], [], [], []
    ref = m.new_logits()
    for i, step in enumerate(bm_short):
        if s.push([float(v) for v in step]):
            ends.append(i + 1)
            got.append(list(s.logits))
            fields.append((s.smoothed, s.score, s.uncertain))
            window = bm_short[i + 1 - T : i + 1].reshape(-1).tolist()
            cls = m.run_int8(m.quantize(window), ref, T)
            assert cls == s.cls
            model_logits.append(list(ref))
    assert ends == list(range(T, len(bm_short) + 1, HOP))  # 91 decisions
    assert got == model_logits
    assert np.array_equal(np.array(got), oracle_logits(data, bm_short, ends))
    # push_block, a block of a hop at a time: the same decisions, every field
    blocks = bm_host(3, 0.9, short=True)
    assert [d["logits"] for d in blocks] == got
    assert [(d["smoothed"], d["score"], d["uncertain"]) for d in blocks] == fields
    assert s.decisions == len(ends) and len(s.logits) == 4 and C == 6
    whole = bm_host(3, 0.9)  # the whole stream: 391 decisions, each intref's
    ends = [d["step"] for d in whole]
    assert ends == list(range(T, len(bm_steps) + 1, HOP))
    assert np.array_equal(np.array([d["logits"] for d in whole]),
                          oracle_logits(data, bm_steps, ends))  # fmt: skip


@pytest.mark.host
def test_stream_seq_spec_window_of_t_not_multiple_of_p(mods):
    """T=10, P=4 (the last patch half padding): decisions equal intref's every hop."""
    attention, attention_stream = mods
    data = blob_bytes(seq_spec(seed=2))
    steps = np.random.default_rng(3).normal(0, 2, (200, 3)).astype(np.float32)
    for hop in (1, 3, 4):
        decisions = host_decisions(data, steps, hop, smooth=2)
        ends = [d["step"] for d in decisions]
        assert ends == list(range(10, 201, hop))
        assert np.array_equal(np.array([d["logits"] for d in decisions]),
                              oracle_logits(data, steps, ends))  # fmt: skip


@pytest.mark.host
@pytest.mark.parametrize("hop", [5, 20, 7])
def test_stream_patch_reuse_equals_full_recompute(mods, bm_short, hop):
    """BasicMotions (P=5), the short stream: reuse at hops P and 4P equals intref's run_int8 of
    every window; hop 7 is no multiple of P: no reuse (the full recompute, run_int8 itself)."""
    bm_steps = bm_short
    attention, attention_stream = mods
    m = attention.Model(BM.read_bytes(), kernels="pure")
    s = attention_stream.Stream(m, hop)
    assert s.reuse == (hop % m.patch == 0)
    ends, got = [], []
    buf = bm_steps.astype("<f4").tobytes()
    size = 4 * m.n_features
    for i in range(len(bm_steps)):
        if s.push_block(buf[i * size : (i + 1) * size], 1):
            ends.append(i + 1)
            got.append(list(s.logits))
    assert ends == list(range(m.steps, len(bm_steps) + 1, hop))
    assert np.array_equal(np.array(got), oracle_logits(BM.read_bytes(), bm_steps, ends))


@pytest.mark.host
def test_stream_patch_reuse_hand_made_blob(mods):
    """seq_spec T=12, P=4 (3 patches, b_q of +-3000 per token): hops 4 and 8 reuse, 6 does not;
    T=10, P=4 (half a patch of padding) never does. Every decision equals intref's."""
    attention, attention_stream = mods
    steps = np.random.default_rng(5).normal(0, 2, (120, 3)).astype(np.float32)
    for T, hop, reuse in ((12, 4, True), (12, 8, True), (12, 6, False), (10, 4, False)):
        data = blob_bytes(seq_spec(seed=7, T=T, P=4))
        assert attention_stream.Stream(attention.Model(data, kernels="pure"), hop).reuse == reuse
        decisions = host_decisions(data, steps, hop)
        ends = [d["step"] for d in decisions]
        assert ends == list(range(T, 121, hop))
        assert np.array_equal(np.array([d["logits"] for d in decisions]),
                              oracle_logits(data, steps, ends))  # fmt: skip


@pytest.mark.host
def test_stream_probabilities_and_smoothing(mods):
    attention, attention_stream = mods
    m = attention.Model(BM.read_bytes(), kernels="pure")
    single = bm_host(1, None, short=True)
    smooth = bm_host(5, 0.9, short=True)
    assert len({d["smoothed"] for d in smooth}) == 4  # every class, three changes of it
    scale = m.logit_scale
    for d in single:
        p = np.exp((np.array(d["logits"]) - max(d["logits"])) * scale)
        p /= p.sum()
        assert np.abs(np.array(d["prob"]) / 16384 - p).max() < 0.02  # the Q14 exp2 table
        assert 16384 - len(p) <= sum(d["prob"]) <= 16384
        assert d["smoothed"] == d["cls"] and d["score"] == d["prob"][d["cls"]]
        assert not d["uncertain"]
    probs = np.array([d["prob"] for d in smooth])
    for i, d in enumerate(smooth):
        acc = probs[max(0, i - 4) : i + 1].sum(axis=0)  # the last 5 decisions (fewer at first)
        assert d["smoothed"] == int(np.argmax(acc))
        assert d["score"] == acc[d["smoothed"]] // min(i + 1, 5)
        assert d["uncertain"] == (d["score"] < round(0.9 * 16384))
    assert any(d["uncertain"] for d in smooth) and not all(d["uncertain"] for d in smooth)


@pytest.mark.host
def test_stream_refuses_bad_arguments_and_values(mods):
    attention, attention_stream = mods
    m = attention.Model(BM.read_bytes(), kernels="pure")
    for kwargs in ({"hop": 0}, {"hop": 1, "smooth": 0}, {"hop": 1, "threshold": 1.5}):
        with pytest.raises(ValueError, match="stream: "):
            attention_stream.Stream(m, **kwargs)
    s = attention_stream.Stream(m, 1)
    with pytest.raises(ValueError, match="NaN or inf"):
        s.push([0.0, float("nan"), 0, 0, 0, 0])
    with pytest.raises(ValueError, match="as bytes"):
        s.push_block([0.5] * 6, 1)
    f32 = attention.Model(blob_bytes(seq_spec(quantized=False)), kernels="pure")
    with pytest.raises(ValueError, match="float32 weights only"):
        attention_stream.Stream(f32, 1)


# argv: modules dir, blob, kernels, replay file, hop. Plays the replay file's steps a hop at a
# time (the first block T % hop steps, when not 0: each decision at a block's last step), odd
# blocks through push_block and even ones step by step through push, each call under
# heap_lock; after each decision (outside the lock) Model.run_int8 of the same window. Prints
# per decision [logits, cls, prob, smoothed, score, uncertain, same as run_int8], then
# [heap delta of one block with gc off, decisions, patch reuse on].
STREAM_MP = """
import sys, gc, struct, micropython
sys.path.insert(0, sys.argv[1])
from attention import Model
from attention_stream import Stream
m = Model(sys.argv[2], kernels=sys.argv[3])
hop = int(sys.argv[5])
s = Stream(m, hop, smooth=3, threshold=0.9)
T = m.steps
C = m.n_features
size = 4 * C
buf = bytearray(hop * size)
# the reference window, its room taken now while the heap has large spans (growing it block
# by block later asked a fragmented heap for 8 KB at once); a slice delete keeps the room
win = [0.0] * (T * C + hop * C)
del win[:]
ref = m.new_logits()
xq = m.quantize([0.0] * (T * C))
f = open(sys.argv[4], 'rb')
f.read(16)

def block(n):
    micropython.heap_lock()
    try:
        return s.push_block(buf, n)
    finally:
        micropython.heap_unlock()

def one(step):
    micropython.heap_lock()
    try:
        return s.push(step)
    finally:
        micropython.heap_unlock()

def delta(n):
    gc.collect()
    gc.disable()
    a = gc.mem_alloc()
    block(n)
    b = gc.mem_alloc()
    gc.enable()
    return b - a

i = 0
worst = 0
seen = 0
first = memoryview(buf)[:(T % hop) * size]
while True:
    k = f.readinto(first if i == 0 and len(first) else buf)
    if not k:
        break
    n = k // size
    vals = struct.unpack('<%df' % (n * C), buf)
    win.extend(vals)
    if len(win) > T * C:
        del win[:len(win) - T * C]
    if i % 2:
        worst = max(worst, delta(n))
    else:
        for j in range(n):
            one(vals[j * C:(j + 1) * C])
    i += 1
    if s.decisions != seen:  # blocks of a hop: a decision is at a block's last step
        seen = s.decisions
        c = m.run_int8(m.quantize(win, xq), ref, T)
        same = list(ref) == list(s.logits) and c == s.cls
        print([list(s.logits), s.cls, list(s.prob), s.smoothed, s.score, s.uncertain, same])
print([worst, s.decisions, s.reuse])
"""


@pytest.mark.micropython
@pytest.mark.parametrize("hop", HOPS)
@pytest.mark.parametrize("kernels", KERNELS)
def test_stream_mp_heap_locked_and_bit_exact(mpy, tmp_path, kernels, hop):
    short = kernels == "pure" or hop != HOP  # the short stream (docstring)
    bm_steps = bm_stream(short)
    replay = tmp_path / "bm.tasr"
    replay.write_bytes(replay_bytes(bm_steps))
    # the script's own list of the window's floats needs an 8 KB span besides the model: 176k
    # (160k failed once the kernel modules grew by the conv kernel, 0.1-0.7 KB)
    lines = run_micropython(STREAM_MP, [str(mpy), str(BM), kernels, str(replay), str(hop)],
                            "176k", timeout=300)  # fmt: skip
    *rows, (worst, n, reuse) = literals(lines)
    assert reuse == (hop % 5 == 0)  # P = 5
    assert worst == 0  # bytes allocated by a block of a hop (a decision included), gc off
    assert n == len(rows) == len(range(100, len(bm_steps) + 1, hop))
    assert all(r[6] for r in rows), "a decision differs from Model.run_int8 of its window"
    if hop == HOP:  # every field equal to the host's (the same file under CPython)
        host = bm_host(3, 0.9, short)
        keys = ("logits", "cls", "prob", "smoothed", "score", "uncertain")
        assert n == len(host) == (91 if short else 391)
        assert [r[:6] for r in rows] == [[d[k] for k in keys] for d in host]


@pytest.mark.host
@pytest.mark.parametrize(("hop", "reuse"), [(4, True), (2, True), (3, False)])
def test_stream_conv_stem_decisions_equal_run_int8(mods, hop, reuse):
    """A conv-stem model (T=24, P=2, depthwise-separable convs, stride 3): decisions with
    patch reuse (hops of P) and the full recompute equal intref's run_int8 of every window."""
    from seq_models import random_seq_case

    from tinyattn.intmodel.quantize import quantize
    from tinyattn.learn.seqmodel import SeqAttnConfig

    attention, attention_stream = mods
    cfg = SeqAttnConfig(patch=2, embed_dim=8, num_heads=2, blocks=1, ff_dim=8, stem="conv",
                        stem_width=4, stem_kernel=5, stem_dilations=(1, 2), stem_stride=3)
    npz, X, lengths, _, _ = random_seq_case(4, 24, 2, 3, cfg, 1)
    data = blob_bytes(quantize(npz, X, lengths))
    assert [op.kind for op in read_blob(data).ops].count("conv") == 4
    steps = np.random.default_rng(6).normal(1.0, 3.0, (100, 2)).astype(np.float32)
    assert attention_stream.Stream(attention.Model(data, kernels="pure"), hop).reuse == reuse
    decisions = host_decisions(data, steps, hop)
    ends = [d["step"] for d in decisions]
    assert ends == list(range(24, 101, hop))
    assert np.array_equal(np.array([d["logits"] for d in decisions]),
                          oracle_logits(data, steps, ends))  # fmt: skip
