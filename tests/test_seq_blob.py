# Host (CPython): tests of the seq-attn ops in the blob (opcodes 7-10, /work/seq_spec.md).
"""Layouts of embed, res_attention, res_ff and masked_pool: round trip through write/read, the
reader's shape and parameter checks, the small-int budget refused at load for a broken
multiplier in each new op (the same `budget_sites` mechanism as every other op). Specs come
from `seq_models.seq_spec` (hand-made, independent of the quantizer).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from seq_models import E, S, seq_spec

from tinyattn.intmodel import blob as tb
from tinyattn.intmodel.blob import BUDGET, BlobError, Op, budget_sites, read_blob

pytestmark = pytest.mark.host


@pytest.mark.parametrize("quantized", [True, False])
def test_seq_blob_round_trip(tmp_path, quantized):
    spec = seq_spec(quantized)
    path = tmp_path / "seq.bin"
    n = tb.write_blob(path, spec)
    data = path.read_bytes()
    assert len(data) == n
    blob = read_blob(data)
    assert [op.kind for op in blob.ops] == [op.kind for op in spec.ops]
    for a, b in zip(spec.ops, blob.ops, strict=True):
        assert a.iparams == b.iparams
        assert set(a.tensors) == set(b.tensors)
        for role in a.tensors:
            np.testing.assert_array_equal(a.tensors[role], b.tensors[role])
        for name, v in a.fparams.items():
            assert b.fparams[name] == np.float32(v)
    assert tb.blob_bytes(blob) == data  # what was read writes the same bytes
    assert blob.ops[0].tensors["b"].shape == (S, E)


def test_seq_blob_opcodes():
    assert {tb.OPCODES[k] for k in ("embed", "res_attention", "res_ff", "masked_pool")} == {
        7,
        8,
        9,
        10,
    }


def _refused(spec, match):
    with pytest.raises((BlobError, ValueError), match=match):
        tb.blob_bytes(spec)


def test_seq_blob_reader_checks_shapes_and_placement():
    spec = seq_spec()
    bad = copy.deepcopy(spec)
    bad.norm_mean, bad.norm_std = bad.norm_mean[:2], bad.norm_std[:2]
    _refused(bad, r"op 0 \(embed\).*n_features = 2 channels, op has C = 3")
    bad = copy.deepcopy(spec)
    bad.ops = [bad.ops[1]] + bad.ops  # res_attention before embed
    _refused(bad, r"op 0 \(res_attention\) needs a seq model")
    bad = copy.deepcopy(spec)
    bad.ops[3] = Op("avgpool", {"S": S, "E": E, "M": 1, "shift": 1})
    _refused(bad, r"op 3 \(avgpool\) cannot run in a seq model")
    bad = copy.deepcopy(spec)
    bad.ops[1].iparams["S"] = S + 1
    _refused(bad, r"shape mismatch in op 1 \(res_attention\)")
    bad = copy.deepcopy(spec)
    bad.ops[3].iparams["S"] = S + 1
    _refused(bad, r"op 3 \(masked_pool\)")  # m has S entries: the tensor shape disagrees
    bad = copy.deepcopy(spec)
    bad.ops[2].iparams["shift_add"] = 31
    _refused(bad, r"op 2 \(res_ff\): shift_add = 31 out of range 1..30")
    bad = copy.deepcopy(spec)
    bad.ops[1].iparams["M_a"] = 1 << 15
    _refused(bad, r"op 1 \(res_attention\): multiplier M_a = 32768 out of range")


def test_seq_blob_masked_pool_table_is_checked():
    """masked_pool's table is fixed by the format (shift 14, m[k-1] = rint(2**14 / k)): an
    edited entry or shift is refused by name, before the budget check could pass it."""
    assert [tb.pool_reciprocal(k) for k in (1, 2, 3, 4, 5, 6, 7)] == [
        16384, 8192, 5461, 4096, 3277, 2731, 2341]  # fmt: skip
    assert tb.pool_reciprocal(32768) == 0  # 0.5: a tie, to even
    tb.blob_bytes(seq_spec(T=300, P=2))  # 150 entries, all as the exporter writes them
    bad = seq_spec()
    bad.ops[3].tensors["m"] = bad.ops[3].tensors["m"].copy()
    bad.ops[3].tensors["m"][1] += 1
    _refused(bad, r"op 3 \(masked_pool\): m\[1\] = 8193, must be rint\(2\*\*14 / 2\) = 8192")
    bad = seq_spec()
    bad.ops[3].iparams["shift"] = 15
    _refused(bad, r"op 3 \(masked_pool\): shift = 15, must be 14")


@pytest.mark.parametrize(
    "k, name, channel",
    [(0, "m", 5), (1, "mq", 0), (1, "mo", 7), (2, "m1", 3), (2, "m2", 0)],
)
def test_seq_blob_budget_refused_at_load(k, name, channel):
    """A multiplier one above its site's bound is refused by the reader, naming the site.
    (masked_pool's sites cannot fail: its table is fixed, 128·k·rint(2**14/k) < 2**22.)"""
    spec = seq_spec()
    op = spec.ops[k]
    site = {s[0]: s for s in budget_sites(op)}[name]
    _, max_acc, _, shift = site
    m_max = (BUDGET - 1 - (1 << (shift - 1))) // int(max_acc[channel])
    assert m_max < 32767
    op.tensors[name] = op.tensors[name].copy()
    op.tensors[name][channel] = m_max
    tb.blob_bytes(spec)  # the bound itself is accepted
    op.tensors[name][channel] = m_max + 1
    _refused(spec, rf"op {k} \({op.kind}\): small-int budget broken at {name}\[{channel}\] = ")
