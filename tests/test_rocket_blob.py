# Host (CPython) + device code under CPython: the rocket op in the blob (opcode 12).
"""The rocket op's bytes and checks: a worked example small enough to check by hand (host
integer reference and device pure kernels give its numbers), the round trip, every reader check
the op adds refused by both readers with the documented message, its small-int bounds and
sites at the edge, and the op's blob fuzzed as tests/test_fuzz_blob.py fuzzes the others (both
readers agree on every mutant; an accepted one gives the same logits on intref and the pure
kernels)."""

from __future__ import annotations

import copy
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rocket_models import rocket_cases, unchecked_blob
from test_budget import both_verdicts
from test_fuzz_blob import FUZZ, MUTATIONS, Checker, reseal

from tinyattn.intmodel import intref
from tinyattn.intmodel.blob import (
    LOGIT_MAX,
    LOGIT_MIN,
    Op,
    QuantModelSpec,
    blob_bytes,
    read_blob,
)
from tinyattn.intmodel.floatref import run_float

pytestmark = pytest.mark.host


# -- the worked example ---------------------------------------------------------------------


def example_spec(N: int = 0) -> QuantModelSpec:
    """T = 20 steps of 1 channel, no pooling, mean 0, std 1, s_in 1 (xq = the raw value).
    Group A: dilation 1, pad 1 (every position), taps 0, 1, 2 of weight 2: for an impulse of
    10 at step 10, conv[t] = 10·w[14 - t]: 0 at t = 0..5, -10 at 6..11, +20 at 12..14, 0 at
    15..19; biases -11, -1, 15 at exponent 0. Group B: dilation 2, pad 0 (positions 8..11),
    taps 6, 7, 8: conv = -10, 0, -10, 0 at t = 8, 9, 10, 11; bias -5 at exponent 1 (-10 in
    exponent 0's units). z = 16384 each, m = 1, 1, 1, 2, shift 8. The head: class 0 reads
    feature 0, class 1 features 2 and 3, (acc + 1) >> 1. `N`: the positions cap."""
    grp = np.array([[1, 1, 0, 1, 2, 1, 3, 0], [2, 0, 6, 7, 8, 1, 1, 1]], np.uint16)
    rocket = Op("rocket", {"T": 20, "C": 1, "P": 1, "N": N, "bits": 30, "K": 4, "G": 2, "L": 2,
                           "shift": 8}, {},
                {"grp": grp, "ch": np.zeros(2, np.uint16),
                 "b": np.array([-11, -1, 15, -5], np.int32),
                 "z": np.full(4, 16384, np.int32),
                 "m": np.array([1, 1, 1, 2], np.int16)})  # fmt: skip
    dense = Op("dense", {"in": 4, "out": 2, "has_bias": 1, "shift": 1, "act_min": LOGIT_MIN,
                         "act_max": LOGIT_MAX}, {"s_in": 1.0, "s_out": 1.0},
               {"W": np.array([[1, 0, 0, 0], [0, 0, 1, 1]], np.int8),
                "b": np.zeros(2, np.int32), "s": np.ones(2, np.float32),
                "m": np.ones(2, np.int16)})  # fmt: skip
    return QuantModelSpec(True, ["a", "b"], np.zeros(1, np.float32), np.ones(1, np.float32),
                          1.0, 1.0, [rocket, dense])  # fmt: skip


def _impulse(value: float, n: int) -> np.ndarray:
    x = np.zeros((20, 1))
    x[10, 0] = value
    x[n:] = 0.0
    return x


# (window, steps) -> (features, logits), each figure from the docstring:
EXAMPLE = [
    # counts 20, 14, 3 of 20 positions (conv > -11, > -1, > 15) and 2 of 4 (> -10):
    # q = 32768, 22937, 4915, 16384; f = (q - 16384 + 128) >> 8 = 64, 26, -45 and
    # (0·2 + 128) >> 8 = 0; logits (64 + 1) >> 1 = 32, (-45 + 0 + 1) >> 1 = -22
    ((10.0, 20), ([64, 26, -45, 0], [32, -22])),
    # 11 steps (the impulse is the last): conv -10 at 6..10, 0 at 0..5; counts 11, 6, 0 of 11;
    # group B has no position (4d = 8 > 11 - 8): q = 0, f = (-16384·2 + 128) >> 8 = -128;
    # q = 32768, 17873, 0: f = 64, 6, -64; logits 32, (-64 - 128 + 1) >> 1 = -96
    ((10.0, 11), ([64, 6, -64, -128], [32, -96])),
    # 655360 = 10·2**16: e = 5 (2**19 <= 655360 < 2**20), x = 20480; thresholds at e 5:
    # -11 >> 5 = -1, -1 >> 5 = -1, 15 >> 5 = 0; group B: -5 >> (5 - 1) = -1: counts 14, 14,
    # 3, 2: f = 26, 26, -45, 0; logits (26 + 1) >> 1 = 13, -22
    ((655360.0, 20), ([26, 26, -45, 0], [13, -22])),
]  # fmt: skip


# N = 5 (at most 5 positions a window): 20 steps, s = 4: group A counts t = 0, 4, 8, 12, 16
# (conv 0, 0, -10, 20, 0): 5, 4, 1 of 5; group B t = 8 only (conv -10, not > -10): 0 of 1;
# q = 32768, 26214, 6553, 0: f = 64, (9830 + 128) >> 8 = 38, (-9831 + 128) >> 8 = -38, -128;
# logits 32, (-38 - 128 + 1) >> 1 = -83. 11 steps: s = 3: group A t = 0, 3, 6, 9 (0, 0, -10,
# -10): 4, 2, 0 of 4: q = 32768, 16384, 0: f = 64, 0, -64; group B none: -128; logits 32, -96
EXAMPLE_CAP = [
    ((10.0, 20), ([64, 38, -38, -128], [32, -83])),
    ((10.0, 11), ([64, 0, -64, -128], [32, -96])),
]  # fmt: skip


@pytest.mark.parametrize("N, cases", [(0, EXAMPLE), (5, EXAMPLE_CAP)], ids=["all", "cap5"])
def test_rocket_example_by_hand_on_intref_and_the_device(attention, tmp_path, N, cases):
    data = unchecked_blob(example_spec(N))
    blob = read_blob(data)
    m = attention.Model(data, kernels="pure")
    assert m.xq_typecode == "i" and m.steps == 20 and m.input_len == 20
    for (value, n), (features, logits) in cases:
        x = _impulse(value, n)
        xq = intref.quantize_input(blob, x[None], np.array([n]))
        assert xq.dtype == np.int32 and xq[0, 10] == (value if n > 10 else 0)
        f = intref.rocket(blob.ops[0], xq, np.array([n]), "op 0")
        assert f[0].tolist() == features, (value, n)
        assert intref.run_int8(blob, xq, np.array([n]))[0].tolist() == logits
        assert m.logits(x[:n].reshape(-1).tolist(), "int8") == logits
        lf = m.logits(x[:n].reshape(-1).tolist(), "float")  # the same counts, unrounded
        assert np.allclose(lf, run_float(blob, x[None], np.array([n]))[0], atol=1e-4)


def test_rocket_blob_round_trip():
    spec = example_spec()
    data = unchecked_blob(spec)
    blob = read_blob(data)
    assert blob.ops[0].kind == "rocket" and blob.ops[0].opcode == 12
    for role, a in spec.ops[0].tensors.items():
        got = blob.ops[0].tensors[role]
        assert np.array_equal(got, a) and got.dtype == a.dtype
    assert blob.ops[0].iparams == spec.ops[0].iparams
    assert blob_bytes(blob) == data  # the writer's self-check passes: a valid blob


# -- reader checks: each refused by both readers, with the documented message ----------------


def _bad(edit) -> QuantModelSpec:
    spec = copy.deepcopy(example_spec())
    edit(spec.ops[0].iparams, spec.ops[0].tensors, spec)
    return spec


def _float32(spec: QuantModelSpec) -> None:
    """The example as a float32 blob would hold it (the head's float32 W, b; 0s and 1.0s)."""
    spec.quantized = False
    head = spec.ops[1]
    head.tensors = {r: head.tensors[r].astype(np.float32) for r in ("W", "b")}
    head.iparams.update(shift=0, act_min=0, act_max=0)
    spec.ops[0].iparams["shift"] = 0


def _grp(row: int, col: int, v: int):
    def edit(ip, t, spec):
        t["grp"][row, col] = v

    return edit


CHECKS = [
    ("cap", lambda ip, t, s: ip.update(N=21), "op 0 (rocket): N = 21 out of range 0..T (20)"),
    ("bits", lambda ip, t, s: ip.update(bits=31), "op 0 (rocket): bits = 31 out of range 8..30"),
    ("float32", lambda ip, t, s: _float32(s),
     "op 0 (rocket) needs an int8 blob: its features are counts on the input grid"),
    ("dims", lambda ip, t, s: ip.update(G=0), "op 0 (rocket): G = 0 out of range 1..65535"),
    ("pad", _grp(0, 1, 2), "op 0 (rocket): group 0 = [1, 2, 0, 1, 2, 1, 3, 0] is not a group"),
    ("taps", _grp(1, 3, 6), "op 0 (rocket): group 1 = [2, 0, 6, 6, 8, 1, 1, 1] is not a group"),
    ("tap 9", _grp(1, 4, 9), "group 1 = [2, 0, 6, 7, 9, 1, 1, 1] is not a group"),
    ("dilation", _grp(0, 0, 0), "group 0 = [0, 1, 0, 1, 2, 1, 3, 0] is not a group"),
    ("exponent", _grp(1, 7, 31), "group 1 = [2, 0, 6, 7, 8, 1, 1, 31] is not a group"),
    ("features", _grp(0, 6, 2),
     "op 0 (rocket): its groups hold 2 channels and 3 features, the op has L = 2 and K = 4"),
    ("channel", lambda ip, t, s: t["ch"].__setitem__(1, 1),
     "op 0 (rocket): channel ch[1] = 1, the window has C = 1"),
    ("zero point", lambda ip, t, s: t["z"].__setitem__(2, 32769),
     "op 0 (rocket): zero point z[2] = 32769 out of range 0..32768"),
    ("multiplier", lambda ip, t, s: t["m"].__setitem__(3, -1),
     "op 0 (rocket): multiplier m[3] = -1 out of range 0..32767"),
    ("shift", lambda ip, t, s: ip.update(shift=0), "op 0 (rocket): shift = 0 out of range 1..30"),
    ("channels", lambda ip, t, s: (setattr(s, "norm_mean", np.zeros(2, np.float32)),
                                   setattr(s, "norm_std", np.ones(2, np.float32))),
     "shape mismatch in op 0 (rocket): n_features = 2 channels, op has C = 1"),
    ("pool", lambda ip, t, s: ip.update(P=21),
     "shape mismatch in op 0 (rocket): pool P = 21 steps is longer than the window T = 20"),
    ("op 0", lambda ip, t, s: s.ops.insert(0, Op("relu", {})),
     "op 1 (rocket) must be op 0 (it reads the input window)"),
    ("bias", lambda ip, t, s: t["b"].__setitem__(1, -(2**30)),
     "op 0 (rocket): small-int budget broken at b[1]: max|acc| = 1073741824 >= 2**30"),
    ("ppv", lambda ip, t, s: ip.update(T=65535),
     "op 0 (rocket): small-int budget broken at ppv: max|acc| = 2147450880 >= 2**30"),
    ("site", lambda ip, t, s: (t["m"].__setitem__(0, 32767), ip.update(shift=30)),
     "op 0 (rocket): small-int budget broken at m[0] = 32767, shift 30: max|acc|·M + "
     "2**(shift-1) = 1610579968 >= 2**30 (max|acc| = 32768)"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "edit", "message"), CHECKS, ids=[c[0] for c in CHECKS])
def test_rocket_reader_checks_refused_by_both_readers(attention, what, edit, message):
    data = unchecked_blob(_bad(edit))
    host, device = both_verdicts(attention, data)
    assert host is not None and message in host, host
    assert device == host


def test_rocket_conv_bound_refused_at_its_edge(attention):
    """12·channels·P·2**15 < 2**30: P = 2730 with one channel is the largest that passes."""
    for P, ok in ((2730, True), (2731, False)):
        spec = _bad(lambda ip, t, s, P=P: ip.update(T=P, P=P))
        host, device = both_verdicts(attention, unchecked_blob(spec))
        assert device == host
        if ok:
            assert host is None
        else:
            assert f"broken at conv: max|acc| = {12 * P << 15} >= 2**30" in host


# -- fuzz -------------------------------------------------------------------------------------

N_FUZZ = 300  # mutants per kind on the rocket blobs


@pytest.mark.parametrize("kind", list(MUTATIONS))
def test_fuzz_rocket_blob_readers_agree(attention, kind):
    """The mutations of tests/test_fuzz_blob.py on rocket blobs: both readers give the same
    verdict and message, only BlobError, and an accepted blob loads and runs."""
    bases = {"example": unchecked_blob(example_spec()), "multi": rocket_cases()["multi"][0]}
    check = Checker(attention)

    @settings(FUZZ, max_examples=N_FUZZ)
    @given(st.data())
    def run(data):
        base = bytearray(bases[data.draw(st.sampled_from(sorted(bases)))])
        check(bytes(MUTATIONS[kind](data.draw, base, bases)))

    run()
    assert check.n >= N_FUZZ and check.n - check.accepted >= check.n // 10
    assert not [p for p in check.problems if p.startswith("other")], check.problems


def _tensor_values(data: bytes) -> list[tuple[str, int, str]]:
    """(role, offset, struct format) of every value of op 0's rocket tensors."""
    blob = read_blob(data)
    out = []
    fmt = {"grp": "<H", "ch": "<H", "b": "<i", "z": "<i", "m": "<h"}
    for e in blob.tensor_table:
        role = e.name.split(".", 1)[1]
        if e.name.startswith("0.") and role in fmt:
            size = struct.calcsize(fmt[role])
            n = e.nbytes // size
            out += [(role, e.offset + size * i, fmt[role]) for i in range(n)]
    return out


EDGES = {"<H": [0, 1, 2, 8, 9, 30, 31, 65535], "<h": [0, 1, 32767, -1, -32768],
         "<i": [0, 1, -1, 32768, 32769, 2**29, 2**30 - 1, 2**30, -(2**30), 2**31 - 1]}  # fmt: skip
RANGES = {"<H": (0, 65535), "<h": (0, 32767), "<i": (-(2**20), 2**20)}


def test_fuzz_rocket_values_agree_and_run_the_same(attention):
    """CRC-valid edits of the rocket tensors' values (group rows, channels, biases, zero
    points, multipliers), many at the checks' edges: both readers agree, and every accepted
    blob gives the same int8 logits on intref and the pure kernels, on windows full and cut."""
    base = rocket_cases()["multi"]
    data0, X, n = base
    targets = _tensor_values(data0)
    accepted = refused = 0

    @settings(FUZZ, max_examples=N_FUZZ)
    @given(st.data())
    def run(draw_data):
        nonlocal accepted, refused
        data = bytearray(data0)
        for _ in range(draw_data.draw(st.integers(1, 3))):
            _, at, fmt = draw_data.draw(st.sampled_from(targets))
            v = draw_data.draw(st.one_of(st.sampled_from(EDGES[fmt]), st.integers(*RANGES[fmt])))
            struct.pack_into(fmt, data, at, v)
        data = bytes(reseal(data))
        host, device = both_verdicts(attention, data)
        assert device == host, (device, host)
        if host is not None:
            refused += 1
            return
        accepted += 1
        blob = read_blob(data)
        m = attention.Model(data, kernels="pure")
        xq = intref.quantize_input(blob, X[:4], n[:4])
        want = intref.run_int8(blob, xq, n[:4])
        for i in range(4):
            assert m.logits(X[i, : n[i]].reshape(-1).tolist(), "int8") == want[i].tolist()

    run()
    assert accepted >= 20 and refused >= 20, (accepted, refused)


@pytest.mark.parametrize("name", ["uni", "pooled", "capped"])
def test_rocket_blob_time_model_terms_are_its_operations(name):
    """A board's time model counts a rocket blob's work as the fit counted it (`rocketmodel.ops`,
    the positions cap and the pooling included), split by the thumb kernel's paths: its
    window, its shared sums, the counted positions of its groups of one channel and the
    convolutions' adds of the others (counted here position by position), its compares (in
    registers for a group of one channel and at most two features, the rest through memory),
    its groups, its features, and the head's MACs as `dense`."""
    from tinyattn.board.cost import terms
    from tinyattn.intmodel.blob_rocket import params
    from tinyattn.learn.rocketmodel import ops

    blob = read_blob(rocket_cases()[name][0])
    op, head = blob.ops
    ip = op.iparams
    work = ops(params(op), ip["T"], ip["C"], ip["P"], head.iparams["out"], ip["N"])
    t = terms(blob)
    assert t["rocket_regcounts"] + t["rocket_counts"] == work["compares"] > 0
    assert 0 < t["rocket_sums"] == work["shared"] < work["adds"]
    S = -(-ip["T"] // ip["P"])  # the convolutions: per counted position, 4 a channel and 1
    s = -(-S // ip["N"]) if ip["N"] else 1
    g = params(op)
    one = convs = reg = 0
    for d, pad, nch, nf in zip(g.dilation, g.pad, g.n_channels, g.n_features, strict=True):
        lo = 0 if pad else 4 * int(d)
        npos = sum(1 for u in range(0, S, s) if lo <= u < S - lo)
        if nch == 1:
            one += npos
            reg += npos * int(nf) if nf <= 2 else 0
        else:
            convs += npos * (4 * int(nch) + 1)
    assert one + convs > 0 and (one > 0) == bool((g.n_channels == 1).any())
    assert t["rocket_positions"] == one and t["rocket_convs"] == convs
    assert t["rocket_regcounts"] == reg
    assert t["rocket_groups"] == ip["G"] > 0 and t["rocket_features"] == ip["K"]
    assert t["dense"] == work["macs"] == ip["K"] * head.iparams["out"]
    assert t["rocket_values"] == ip["T"] * ip["C"] and t["values"] == 0
    assert t["op"] == 2 and t["inference"] == 1
