# Host (CPython): the small-int budget, proven by both blob readers at load (issue 10, §2).
"""Both readers (`tinyattn.intmodel.blob.read_blob`, the device's `attention.read_blob`) compute
the worst case of every requantization site from the stored integers, for any int8 input
(docs/quantization.md, "Choice of M and shift"), and refuse a blob whose `max|acc|` or
`max|acc|·M + 2**(shift-1)` reaches 2**30, with the same message.

- The issue's blob (op 0: every M = 32767, shift = 30, CRC fixed) is refused by the host reader,
  the device reader under CPython and under the MicroPython unix port, word for word.
- Every site of four models (dense, attention q/k/v/o, softmax index, ctx, avgpool, myattn
  query/scores/softmax/applied/combine): the largest M the budget allows is accepted and runs on
  intref without a budget violation on the extreme inputs; one more is refused by both readers.
- The intermediates the readers do not compute per blob are bounded by the limits of the format.
The fuzz volume (CRC-fixed mutations, every kernel set) is in tests/test_fuzz_blob.py.
"""

from __future__ import annotations

import struct
import subprocess
import zlib

import numpy as np
import pytest
from device_support import DEVICE_DIR, find, odd_blob, op_offsets
from rocket_models import rocket_cases
from seq_models import random_seq_case, seq_spec
from synth_models import iris_synthetic, random_model

from tinyattn.intmodel.blob import (
    BUDGET,
    OP_LAYOUTS,
    SOFTMAX_DIFF_INT8,
    BlobError,
    blob_bytes,
    budget_sites,
    read_blob,
    softmax_diff_max,
)
from tinyattn.intmodel.intref import run_int8
from tinyattn.intmodel.quantize import quantize
from tinyattn.learn.model import myattn_op
from tinyattn.learn.seqmodel import SeqAttnConfig

pytestmark = pytest.mark.host

# The issue's example on the reference architecture (random weights of iris_synthetic(seed=1),
# calibrated on the Iris train split), as both readers word it.
EXAMPLE_MESSAGE = (
    "example.bin: op 0 (dense): small-int budget broken at m[0] = 32767, shift 30: "
    "max|acc|·M + 2**(shift-1) = 2058275489 >= 2**30 (max|acc| = 46431); "
    "re-run 'make export' and 'make flash'"
)


def budget_bases() -> dict[str, bytes]:
    """Four small int8 blobs that together have every requantization site of the format."""
    rng = np.random.default_rng(10)
    iris, X, _ = iris_synthetic(seed=1)
    pool = [
        {"op": "dense", "in": 3, "out": 15, "bias": True}, {"op": "relu"},
        {"op": "reshape", "shape": [5, 3]}, myattn_op("pool", 3, 3, 5, 3, 6, bias=True),
        {"op": "relu"}, {"op": "dense", "in": 6, "out": 2, "bias": True},
    ]  # fmt: skip
    explicit = [myattn_op("explicit", 4, 4, 3, 2, 5, bias=True),
                {"op": "dense", "in": 5, "out": 3, "bias": True}]  # fmt: skip
    return {
        "iris": blob_bytes(quantize(iris, X[iris.meta["train"]["train_idx"]])),
        "odd": odd_blob()[0],
        "myattn_pool": blob_bytes(quantize(random_model(pool, 4, 3), rng.normal(size=(40, 3)))),
        "myattn_explicit": blob_bytes(
            quantize(random_model(explicit, 5, 14), rng.normal(size=(40, 14)))
        ),
    }


def extreme_rows(F: int) -> np.ndarray:
    """int8 inputs at the edges (all -128, all 127, alternating, zero) and 12 random rows."""
    alt = np.where(np.arange(F) % 2, 127, -128)
    edges = np.array([np.full(F, -128), np.full(F, 127), np.zeros(F), alt, -1 - alt])
    rand = np.random.default_rng(F).integers(-128, 128, size=(12, F))
    return np.concatenate([edges, rand]).astype(np.int8)


def iparam_offsets(data: bytes) -> list[int]:
    """Offset of the first iparam of every op record."""
    return [at + 4 + 2 * data[at + 1] + (-(4 + 2 * data[at + 1])) % 4 for at in op_offsets(data)]


def recrc(data: bytearray) -> bytes:
    struct.pack_into("<I", data, len(data) - 4, zlib.crc32(bytes(data[:-4])))
    return bytes(data)


def example_blob() -> bytes:
    """The issue's blob: the reference architecture with op 0's M = 32767, shift = 30."""
    data = bytearray(budget_bases()["iris"])
    m = next(e for e in read_blob(bytes(data)).tensor_table if e.name == "0.m")
    for o in range(m.shape[0]):
        struct.pack_into("<h", data, m.offset + 2 * o, 32767)
    shift = OP_LAYOUTS[1].iparams.index("shift")
    struct.pack_into("<i", data, iparam_offsets(bytes(data))[0] + 4 * shift, 30)
    return recrc(data)


def both_verdicts(attention, data: bytes) -> tuple[str | None, str | None]:
    verdicts = []
    for reader, error in ((read_blob, BlobError), (attention.read_blob, attention.BlobError)):
        try:
            reader(data, source="example.bin")
            verdicts.append(None)
        except error as exc:
            verdicts.append(str(exc))
    return verdicts[0], verdicts[1]


def test_budget_issue_example_refused_by_both_readers_with_the_same_message(attention):
    host, device = both_verdicts(attention, example_blob())
    assert host == EXAMPLE_MESSAGE
    assert device == EXAMPLE_MESSAGE
    with pytest.raises(attention.BlobError, match="small-int budget"):  # no Model, no kernels
        attention.Model(example_blob(), kernels="pure")


@pytest.mark.micropython
def test_budget_issue_example_refused_on_micropython(tmp_path):
    if find("micropython") is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    path = tmp_path / "example.bin"
    path.write_bytes(example_blob())
    script = (
        "import sys\nsys.path.insert(0, sys.argv[1])\nimport attention\n"
        "try:\n    attention.Model(sys.argv[2])\n    print('accepted')\n"
        "except attention.BlobError as e:\n    print(e)\n"
    )
    proc = subprocess.run([find("micropython"), "-c", script, str(DEVICE_DIR), str(path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.stdout.strip() == EXAMPLE_MESSAGE.replace("example.bin", str(path)), proc.stderr


def _sites(data: bytes):
    """(op index, site name, channel, offset and struct format of M, max|acc|, shift) of every
    channel of every requantization site of the blob."""
    blob = read_blob(data)
    entries = {e.name: e for e in blob.tensor_table}
    for k, (op, at) in enumerate(zip(blob.ops, iparam_offsets(data), strict=True)):
        for name, max_acc, _, shift in budget_sites(op):
            for o in range(len(max_acc)):
                if name[0] == "m":  # tensor multiplier, one int16 per channel
                    where = (entries[f"{k}.{name}"].offset + 2 * o, "<h")
                else:
                    where = (at + 4 * OP_LAYOUTS[op.opcode].iparams.index(name), "<i")
                yield k, name, o, where, int(max_acc[o]), shift


@pytest.mark.parametrize("base", ["iris", "odd", "myattn_pool", "myattn_explicit"])
def test_budget_boundary_of_every_site_is_exact(attention, base):
    """At each site, M_max = the largest M with max|acc|·M + 2**(shift-1) < 2**30: accepted,
    and intref (which checks every intermediate it computes) runs the extreme inputs; M_max + 1
    is refused by both readers with the same message naming the site. The softmax index's
    max|acc| is diff_max(B, M, shift) (docs/quantization.md), which shrinks as M grows: its
    site is tested at shift_sm = 30, where diff_max(B, M_max + 1, 30) is still the bound B."""
    data = budget_bases()[base]
    ops = read_blob(data).ops
    rows = extreme_rows(read_blob(data).n_features)
    kinds = set()
    for k, name, o, (at, fmt), max_acc, shift in _sites(data):
        ok = bytearray(data)
        if name == "M_sm":  # at shift 30 with max|acc| = B: a larger M stays within the table
            ip = ops[k].iparams
            D = ip["E"] // ip["H"] if ops[k].kind != "myattn" else 0
            max_acc = SOFTMAX_DIFF_INT8 if ops[k].kind == "myattn" else 2 * D * 128 * 128
            shift = 30
            sh_at = iparam_offsets(data)[k] + 4 * OP_LAYOUTS[ops[k].opcode].iparams.index(
                "shift_sm")  # fmt: skip
            struct.pack_into("<i", ok, sh_at, shift)
        m_max = (BUDGET - 1 - (1 << (shift - 1))) // max_acc
        if m_max >= 32767:  # the budget does not bind below the multiplier range
            continue
        if name == "M_sm":
            assert softmax_diff_max(max_acc, m_max + 1, shift) == max_acc
        kinds.add(name)
        bad = bytearray(ok)
        struct.pack_into(fmt, ok, at, m_max)
        assert both_verdicts(attention, recrc(ok)) == (None, None), (k, name, o)
        run_int8(read_blob(recrc(ok)), rows)  # no SmallIntBudgetError
        struct.pack_into(fmt, bad, at, m_max + 1)
        host, device = both_verdicts(attention, recrc(bad))
        site = f"{name}[{o}]" if name[0] == "m" else name
        assert host is not None and f"op {k} " in host and f"at {site} = {m_max + 1}," in host
        assert device == host
    assert kinds, "no site where the budget binds"
    if any(op.kind in ("attention", "res_attention") for op in ops):  # (myattn's: 255·M)
        assert "M_sm" in kinds


CONV_STEM = SeqAttnConfig(patch=2, embed_dim=4, num_heads=2, blocks=1, ff_dim=4, stem="conv",
                          stem_width=4)  # fmt: skip


def test_budget_sites_cover_every_multiplier_of_the_format():
    """Each multiplier of OP_LAYOUTS (iparams and `m·` tensors) is a budget site."""
    seen = {}
    seq = [blob_bytes(seq_spec())]  # embed, res_attention, res_ff, masked_pool (issue 11)
    npz, X, lengths, _, _ = random_seq_case(3, 12, 2, 3, CONV_STEM, 1)
    seq.append(blob_bytes(quantize(npz, X, lengths)))  # conv
    seq.append(rocket_cases()["uni"][0])  # rocket
    for data in list(budget_bases().values()) + seq:
        for op in read_blob(data).ops:
            seen.setdefault(op.kind, set()).update(s[0] for s in budget_sites(op))
    for layout in OP_LAYOUTS.values():
        if layout.name in ("relu", "reshape"):
            continue
        tensors = {role for role, *_ in layout.tensors(_ones(layout), True) if role[0] == "m"}
        assert set(layout.multipliers) | tensors <= seen[layout.name], layout.name


def _ones(layout) -> dict[str, int]:
    return {name: 1 for name in layout.iparams}


def test_budget_intermediates_bounded_by_the_format_limits():
    """docs/quantization.md: the intermediates without a multiplier stay below 2**30 for the
    largest dimensions a reader accepts (65535) and any exp table it accepts (entries <= 2**14)."""
    dim, q14, x = 65535, 1 << 14, 128
    assert dim * x * x < BUDGET  # a score q·k over D <= 65535 columns (and its partial sums)
    assert q14 * q14 <= 1 << 28 < BUDGET  # EXP_HI·EXP_LO
    assert dim * q14 < BUDGET  # sum of e over S (or v1) <= 65535 entries
    assert (q14 << 14) + (dim * q14 >> 1) < BUDGET  # numerator (e << 14) + (sum >> 1)
    assert q14 * x < BUDGET and x * x < BUDGET  # products p·v and x·W


def test_choose_shift_refuses_a_huge_multiplier_without_an_invalid_cast():
    """A multiplier so large that r·2**shift does not fit an int64 at the top shifts (a
    softmax's score scale before choose_softmax_shift clips it) is compared as a float first:
    QuantizeError, which that caller handles, and no numpy "invalid value encountered in cast"
    warning (it reached the search's output); a softmax index of that scale still gets its
    clipped shift."""
    import warnings

    from tinyattn.intmodel.quantize import QuantizeError, choose_shift, choose_softmax_shift

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(QuantizeError, match="no shift in 1..30"):
            choose_shift(np.array([0.5, 3.0e13]), np.array([1, 1]), "test")
        M, shift = choose_softmax_shift(3.0e13, 100, "test")
    assert 0 < M < 1 << 15 and 1 <= shift <= 30
