# Host (CPython): tests of the blob writer/reader (tinyattn.intmodel.blob, docs/blob-format.md).
"""Round trip, every truncation, every bit flip, each MUST check of the reader (corruptions are
re-CRC'd so the specific check is reached), atomic writes, and the size overhead.

The layout walker `walk()` below reads the file from docs/blob-format.md with `struct` only
(independently of tinyattn.intmodel.blob), which also checks that the doc and the writer agree.
"""

from __future__ import annotations

import copy
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from synth_models import iris_synthetic, random_model

from tinyattn.intmodel import blob as tb
from tinyattn.intmodel.blob import BlobError, read_blob, write_blob
from tinyattn.intmodel.quantize import float32_spec, quantize

pytestmark = pytest.mark.host


@pytest.fixture(scope="module")
def ref_spec():
    """Int8 spec of the reference architecture (random weights, calibrated on Iris)."""
    model, X, _ = iris_synthetic(seed=1)
    return quantize(model, X[model.meta["train"]["train_idx"]])


@pytest.fixture(scope="module")
def ref_bytes(ref_spec) -> bytes:
    return tb.blob_bytes(ref_spec)


def recrc(data: bytes | bytearray) -> bytes:
    """Fix the CRC after a deliberate corruption, so the reader reaches the later checks."""
    data = bytearray(data)
    struct.pack_into("<I", data, len(data) - 4, zlib.crc32(bytes(data[:-4])))
    return bytes(data)


def walk(data: bytes) -> dict:
    """Offsets of every field, following docs/blob-format.md with struct only."""
    (
        magic,
        version,
        flags,
        file_size,
        F,
        C,
        n_ops,
        n_tensors,
        s_in,
        s_logit,
        names_len,
        reserved,
    ) = struct.unpack_from("<4sHHIHHHHffHH", data, 0)
    out = {"padding": [], "ops": [], "tensors": [], "file_size": file_size}
    pos = 32 + names_len
    out["padding"] += range(pos, pos + (-pos) % 4)
    pos += (-pos) % 4
    out["norm"] = pos
    pos += 8 * F
    for _ in range(n_ops):
        opcode, nt, ni, nf = struct.unpack_from("<4B", data, pos)
        out["ops"].append(
            {
                "at": pos,
                "opcode": opcode,
                "nt": nt,
                "iparams": pos + 4 + 2 * nt + (-(4 + 2 * nt)) % 4,
            }
        )
        end_refs = pos + 4 + 2 * nt
        out["padding"] += range(end_refs, end_refs + (-end_refs) % 4)
        pos = end_refs + (-end_refs) % 4 + 4 * (ni + nf)
    for _ in range(n_tensors):
        dtype, ndim, name_len, res, offset = struct.unpack_from("<BBBBI", data, pos)
        shape = struct.unpack_from(f"<{ndim}H", data, pos + 8)
        name = data[pos + 8 + 2 * ndim : pos + 8 + 2 * ndim + name_len].decode()
        itemsize = {1: 1, 2: 2, 3: 4, 4: 4, 5: 2}[dtype]
        nbytes = int(np.prod(shape)) * itemsize
        out["tensors"].append(
            {
                "at": pos,
                "name": name,
                "offset": offset,
                "nbytes": nbytes,
                "dtype": dtype,
                "shape": shape,
            }
        )
        end = pos + 8 + 2 * ndim + name_len
        out["padding"] += range(end, end + (-end) % 4)
        pos = end + (-end) % 4
    out["data_start"] = pos
    for t in out["tensors"]:
        end = t["offset"] + t["nbytes"]
        out["padding"] += range(end, end + (-end) % 4)
    return out


def expect(data: bytes, *fragments: str) -> str:
    with pytest.raises(BlobError) as info:
        read_blob(data)
    msg = str(info.value)
    for fragment in fragments:
        assert fragment in msg, msg
    assert "make export" in msg or "tinyattn version" in msg, msg  # says how to fix it
    return msg


# ---------------------------------------------------------------------------------------------
# round trip and layout


def test_blob_roundtrip_preserves_everything(ref_spec, ref_bytes):
    b = read_blob(ref_bytes)
    assert b.quantized and b.version == tb.FORMAT_VERSION and b.file_size == len(ref_bytes)
    assert b.class_names == ref_spec.class_names
    assert b.input_scale == np.float32(ref_spec.input_scale)
    assert b.logit_scale == np.float32(ref_spec.logit_scale)
    np.testing.assert_array_equal(b.norm_mean, ref_spec.norm_mean)
    np.testing.assert_array_equal(b.norm_std, ref_spec.norm_std)
    assert [op.kind for op in b.ops] == [op.kind for op in ref_spec.ops]
    for got, want in zip(b.ops, ref_spec.ops, strict=True):
        assert got.iparams == want.iparams
        assert got.fparams == {k: float(np.float32(v)) for k, v in want.fparams.items()}
        assert set(got.tensors) == set(want.tensors)
        for role, arr in want.tensors.items():
            assert got.tensors[role].dtype == arr.dtype, role
            np.testing.assert_array_equal(got.tensors[role], arr)
    assert tb.blob_bytes(b) == ref_bytes  # a parsed blob writes back byte for byte


def test_blob_layout_matches_the_doc(ref_bytes):
    layout = walk(ref_bytes)
    b = read_blob(ref_bytes)
    assert layout["data_start"] == b.data_start
    assert [t["name"] for t in layout["tensors"]] == [e.name for e in b.tensor_table]
    assert [t["offset"] for t in layout["tensors"]] == [e.offset for e in b.tensor_table]
    assert layout["tensors"][0]["offset"] == layout["data_start"]
    assert all(t["offset"] % 4 == 0 for t in layout["tensors"])
    assert layout["file_size"] % 4 == 0
    assert all(ref_bytes[p] == 0 for p in layout["padding"])
    assert layout["padding"], "the reference blob should exercise padding"


def test_blob_reference_size_within_2048(ref_bytes):
    assert len(ref_bytes) <= 2048


def test_blob_float32_roundtrip():
    model, X, _ = iris_synthetic(seed=2)
    spec = float32_spec(model)
    b = read_blob(tb.blob_bytes(spec))
    assert not b.quantized and b.flags == tb.FLAG_FLOAT32
    for op in b.ops:
        assert all(t.dtype == np.float32 for t in op.tensors.values())
    np.testing.assert_array_equal(b.ops[0].tensors["W"], model.param(0, "W").astype(np.float32))
    assert "lut" not in b.ops[3].tensors


# ---------------------------------------------------------------------------------------------
# truncation and bit flips (exhaustive over the reference blob)


def test_blob_truncation_at_every_offset_rejected(ref_bytes):
    for n in range(len(ref_bytes)):
        with pytest.raises(BlobError, match="truncated"):
            read_blob(ref_bytes[:n])


def test_blob_every_single_bit_flip_rejected(ref_bytes):
    """Flips in the CRC-covered body or the CRC give the CRC message; the ten bytes read
    before the CRC can be checked name their own problem (magic, version, size)."""
    data = bytearray(ref_bytes)
    counts = {"CRC mismatch": 0, "bad magic": 0, "unsupported format version": 0, "size": 0}
    for byte in range(len(data)):
        for bit in range(8):
            data[byte] ^= 1 << bit
            with pytest.raises(BlobError) as info:
                read_blob(data)
            data[byte] ^= 1 << bit
            msg = str(info.value)
            if byte < 4:
                key = "bad magic"
            elif byte < 6:
                key = "unsupported format version"
            elif 8 <= byte < 12:
                key = "size"
                assert "truncated" in msg or "file size mismatch" in msg, msg
            else:
                key = "CRC mismatch"
            assert key == "size" or key in msg, (byte, bit, msg)
            counts[key] += 1
    assert counts["CRC mismatch"] == 8 * (len(data) - 10)
    assert bytes(data) == ref_bytes


# ---------------------------------------------------------------------------------------------
# header checks


def test_blob_wrong_magic_rejected(ref_bytes):
    expect(b"PK\x03\x04" + ref_bytes[4:], "bad magic", "not a tinyattn blob")
    expect(b"\x89PNG", "bad magic")


def test_blob_unknown_version_rejected(ref_bytes):
    for version in (0, 2, 65535):
        data = bytearray(ref_bytes)
        struct.pack_into("<H", data, 4, version)
        expect(recrc(data), f"unsupported format version {version}")


def test_blob_extra_bytes_rejected(ref_bytes):
    expect(ref_bytes + b"\0\0\0\0", "file size mismatch")


def test_blob_crc_mismatch_message(ref_bytes):
    data = bytearray(ref_bytes)
    data[-1] ^= 0xFF
    expect(
        bytes(data),
        "CRC mismatch (file corrupt or truncated)",
        "re-run 'make export' and 'make flash'",
    )


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "fragment"),
    [
        (6, "<H", 3, "unknown flags"),
        (6, "<H", 0, "unknown flags"),
        (16, "<H", 0, "n_ops 0 out of range"),
        (16, "<H", 65, "n_ops 65 out of range"),
        (18, "<H", 257, "n_tensors 257 out of range"),
        (20, "<f", 0.0, "input_scale"),
        (24, "<f", float("nan"), "logit_scale"),
        (28, "<H", 2000, "names_len"),
        (30, "<H", 3, "unknown input view 3 (0 raw, 1 log, 2 clip)"),
        (14, "<H", 4, "class names"),
    ],
)
def test_blob_header_field_checks(ref_bytes, offset, fmt, value, fragment):
    data = bytearray(ref_bytes)
    struct.pack_into(fmt, data, offset, value)
    expect(recrc(data), fragment)


def test_blob_nonpositive_norm_std_rejected(ref_bytes):
    data = bytearray(ref_bytes)
    layout = walk(ref_bytes)
    struct.pack_into("<f", data, layout["norm"] + 4 * 4, 0.0)  # norm_std[0] (F = 4)
    expect(recrc(data), "norm std")


# ---------------------------------------------------------------------------------------------
# op list and tensor table


def test_blob_unknown_opcode_rejected(ref_bytes):
    layout = walk(ref_bytes)
    data = bytearray(ref_bytes)
    data[layout["ops"][1]["at"]] = 13  # 7-10 seq-attn ops, 11 the conv stem, 12 rocket
    expect(recrc(data), "unknown opcode 13 in op 1")


def test_blob_myattn_opcode_on_another_record_rejected(ref_bytes):
    """Opcode 6 was reserved until myattn landed (issue 7): a relu record relabelled 6 is now
    read as myattn and refused for its parameter counts."""
    layout = walk(ref_bytes)
    data = bytearray(ref_bytes)
    data[layout["ops"][1]["at"]] = 6
    expect(recrc(data), "op 1 (myattn) has 0 iparams and 0 fparams, expected 15 and 5")


@pytest.mark.parametrize(
    "opcode, name, counts",
    [(7, "embed", "5 and 2"), (8, "res_attention", "15 and 7"), (9, "res_ff", "8 and 4"),
     (10, "masked_pool", "3 and 0")],
)  # fmt: skip
def test_blob_seq_opcode_on_another_record_rejected(ref_bytes, opcode, name, counts):
    """Opcodes 7-10 (issue 11): a relu record relabelled is read as the seq op and refused for
    its parameter counts."""
    layout = walk(ref_bytes)
    data = bytearray(ref_bytes)
    data[layout["ops"][1]["at"]] = opcode
    expect(recrc(data), f"op 1 ({name}) has 0 iparams and 0 fparams, expected {counts}")


def test_blob_unknown_dtype_rejected(ref_bytes):
    layout = walk(ref_bytes)
    for code in (0, 6, 255):
        data = bytearray(ref_bytes)
        data[layout["tensors"][2]["at"]] = code
        expect(recrc(data), f"unknown dtype {code} in tensor record 2")


def test_blob_wrong_dtype_is_a_shape_mismatch(ref_bytes):
    layout = walk(ref_bytes)
    data = bytearray(ref_bytes)
    data[layout["tensors"][0]["at"]] = 2  # 0.W int8 -> int16 (also overruns its data)
    msg = expect(recrc(data))
    assert "shape mismatch in op 0 (dense)" in msg or "overlap" in msg or "outside" in msg


def test_blob_inconsistent_dense_out_rejected(ref_bytes):
    layout = walk(ref_bytes)
    data = bytearray(ref_bytes)
    struct.pack_into("<i", data, layout["ops"][0]["iparams"] + 4, 31)  # out 32 -> 31
    expect(recrc(data), "shape mismatch in op 0 (dense)", "0.W")


def test_blob_inconsistent_tensor_shape_rejected(ref_bytes):
    layout = walk(ref_bytes)
    data = bytearray(ref_bytes)
    t = layout["tensors"][0]  # 0.W [32, 4] -> [16, 8]: same bytes, wrong shape
    struct.pack_into("<HH", data, t["at"] + 8, 16, 8)
    expect(recrc(data), "shape mismatch in op 0 (dense)", "0.W", "[16, 8]")


def test_blob_shapes_must_chain(ref_bytes):
    layout = walk(ref_bytes)
    data = bytearray(ref_bytes)
    struct.pack_into("<ii", data, layout["ops"][2]["iparams"], 8, 4)  # reshape [4,8] -> [8,4]
    expect(recrc(data), "shape mismatch in op 3 (attention)")
    data = bytearray(ref_bytes)
    struct.pack_into("<ii", data, layout["ops"][2]["iparams"], 5, 8)  # 32 -> 40 elements
    expect(recrc(data), "shape mismatch in op 2 (reshape)")


def test_blob_last_op_must_output_n_classes(ref_spec):
    spec = copy.copy(ref_spec)
    spec.class_names = ["a", "b"]  # the last dense still has out = 3
    with pytest.raises(BlobError, match=r"the last op outputs \[3\], n_classes is 2"):
        tb.blob_bytes(spec)  # the writer's self-check refuses to write it


def test_blob_tensor_index_out_of_range(ref_bytes):
    layout = walk(ref_bytes)
    data = bytearray(ref_bytes)
    struct.pack_into("<H", data, layout["ops"][0]["at"] + 4, 999)
    expect(recrc(data), "refers to tensor 999")


def test_blob_wrong_param_counts_rejected(ref_bytes):
    layout = walk(ref_bytes)
    data = bytearray(ref_bytes)
    data[layout["ops"][0]["at"] + 2] = 5  # dense with 5 iparams
    expect(recrc(data), "op 0 (dense) has 5 iparams")


def test_blob_shift_and_multiplier_ranges(ref_bytes):
    layout = walk(ref_bytes)
    ip = layout["ops"][0]["iparams"]
    for value in (0, 31):
        data = bytearray(ref_bytes)
        struct.pack_into("<i", data, ip + 12, value)  # dense shift
        expect(recrc(data), f"shift = {value} out of range 1..30")
    data = bytearray(ref_bytes)
    m = next(t for t in layout["tensors"] if t["name"] == "0.m")
    struct.pack_into("<h", data, m["offset"], -1)
    expect(recrc(data), "multiplier m[0] = -1 out of range")  # a tensor element: its index
    data = bytearray(ref_bytes)
    struct.pack_into("<ii", data, ip + 16, -129, 127)  # hidden act_min below int8
    expect(recrc(data), "activation range [-129, 127]")


def test_blob_nonzero_padding_rejected(ref_bytes):
    layout = walk(ref_bytes)
    kinds = {"names": None, "op": None, "record": None, "data": None}
    for p in layout["padding"]:
        data = bytearray(ref_bytes)
        data[p] = 0x01
        msg = expect(recrc(data), "non-zero padding")
        for key, words in (
            ("names", "class names"),
            ("op", "tensor indices"),
            ("record", "tensor record"),
            ("data", "data section"),
        ):
            if words in msg:
                kinds[key] = p
    assert all(v is not None for v in kinds.values()), kinds  # every kind of padding was hit


def test_blob_reserved_tensor_byte_rejected(ref_bytes):
    layout = walk(ref_bytes)
    data = bytearray(ref_bytes)
    data[layout["tensors"][0]["at"] + 3] = 1
    expect(recrc(data), "reserved byte")


def test_blob_overlapping_tensors_rejected(ref_bytes):
    layout = walk(ref_bytes)
    data = bytearray(ref_bytes)
    t0, t1 = layout["tensors"][0], layout["tensors"][1]
    struct.pack_into("<I", data, t1["at"] + 4, t0["offset"] + 4)
    expect(recrc(data), "overlap", "0.W", "0.b")


def test_blob_misaligned_or_outside_tensor_rejected(ref_bytes):
    layout = walk(ref_bytes)
    t = layout["tensors"][1]
    data = bytearray(ref_bytes)
    struct.pack_into("<I", data, t["at"] + 4, t["offset"] + 2)
    expect(recrc(data), "not 4-aligned")
    data = bytearray(ref_bytes)
    struct.pack_into("<I", data, t["at"] + 4, len(ref_bytes) - 4)
    expect(recrc(data), "outside the data section")
    data = bytearray(ref_bytes)
    struct.pack_into("<I", data, t["at"] + 4, 32)  # into the header
    expect(recrc(data), "outside the data section")


def test_blob_empty_tensor_and_bad_ndim_rejected(ref_bytes):
    layout = walk(ref_bytes)
    t = layout["tensors"][1]
    data = bytearray(ref_bytes)
    struct.pack_into("<H", data, t["at"] + 8, 0)
    expect(recrc(data), "empty shape")
    data = bytearray(ref_bytes)
    data[t["at"] + 1] = 0
    expect(recrc(data), "ndim 0")


# ---------------------------------------------------------------------------------------------
# atomic write


def test_blob_atomic_write_fault_before_rename_keeps_previous(tmp_path, ref_spec):
    path = tmp_path / "model.bin"
    write_blob(path, ref_spec)
    before = path.read_bytes()
    other = quantize(*_other_model())

    def crash(tmp: Path) -> None:
        assert tmp.parent == path.parent and tmp.read_bytes() != before  # new bytes written
        raise KeyboardInterrupt  # the exporter killed between write and rename

    with pytest.raises(KeyboardInterrupt):
        write_blob(path, other, before_rename=crash)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]  # temp file removed
    read_blob(path.read_bytes())


def test_blob_atomic_write_killed_process_keeps_previous(tmp_path, ref_spec):
    """A real SIGKILL between write and rename: nothing can clean up, the old blob stays."""
    path = tmp_path / "model.bin"
    write_blob(path, ref_spec)
    before = path.read_bytes()
    tests_dir = Path(__file__).parent
    code = (
        "import os, signal, sys\n"
        f"sys.path.insert(0, {str(tests_dir)!r})\n"
        "from synth_models import iris_synthetic\n"
        "from tinyattn.intmodel.blob import write_blob\n"
        "from tinyattn.intmodel.quantize import quantize\n"
        "model, X, _ = iris_synthetic(seed=5)\n"
        "spec = quantize(model, X)\n"
        "kill = lambda tmp: os.kill(os.getpid(), signal.SIGKILL)\n"
        f"write_blob({str(path)!r}, spec, before_rename=kill)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    assert path.read_bytes() == before
    leftovers = [p for p in tmp_path.iterdir() if p.name != "model.bin"]
    assert len(leftovers) == 1 and leftovers[0].name.startswith(".model.bin.")
    read_blob(path.read_bytes())


def test_blob_write_replaces_and_returns_size(tmp_path, ref_spec):
    path = tmp_path / "sub" / "model.bin"
    n = write_blob(path, ref_spec)
    assert n == path.stat().st_size
    n2 = write_blob(path, quantize(*_other_model()))
    assert n2 == path.stat().st_size and read_blob(path.read_bytes())
    assert os.listdir(path.parent) == ["model.bin"]


def _other_model():
    model, X, _ = iris_synthetic(seed=7)
    return model, X


# ---------------------------------------------------------------------------------------------
# size overhead on a bigger model


def test_blob_overhead_within_10_percent_for_100k_params():
    ops = [
        {"op": "dense", "in": 64, "out": 256, "bias": True},
        {"op": "relu"},
        {"op": "dense", "in": 256, "out": 320, "bias": True},
        {"op": "relu"},
        {"op": "reshape", "shape": [20, 16]},
        {"op": "attention", "embed_dim": 16, "num_heads": 4, "bias": True},
        {"op": "avgpool"},
        {"op": "dense", "in": 16, "out": 10, "bias": True},
    ]
    model = random_model(ops, seed=3, n_features=64)
    n_params = sum(p.size for p in model.params.values())
    assert n_params >= 100_000
    X = np.random.default_rng(0).normal(size=(64, 64)) * model.norm_std + model.norm_mean
    spec = quantize(model, X)
    raw = sum(
        p.size * (1 if k.split(".")[1].startswith("W") else 4) for k, p in model.params.items()
    )
    size = len(tb.blob_bytes(spec))
    assert size <= 1.1 * raw, (size, raw, size / raw)


def test_blob_random_corruptions_raise_only_blob_error(ref_bytes):
    """Random byte changes anywhere, re-CRC'd so they reach the structure checks: the reader
    either accepts the blob (e.g. a changed weight) or raises BlobError, never anything else."""
    rng = np.random.default_rng(0)
    rejected = 0
    for _ in range(3000):
        data = bytearray(ref_bytes)
        for p in rng.integers(0, len(data) - 4, size=rng.choice([1, 2, 8])):
            data[p] = rng.integers(0, 256)
        try:
            read_blob(recrc(data) if data[:6] == ref_bytes[:6] else bytes(data))
        except BlobError:
            rejected += 1
    assert rejected > 1000


def test_blob_lut_that_is_not_an_exp_table_rejected(ref_bytes):
    """A LUT with a valid CRC but a rising entry would make the device's softmax sum wrong
    (or zero): the reader refuses it, as the device reader does (tests/device_support.py)."""
    blob = read_blob(ref_bytes)
    lut = next(e for e in blob.tensor_table if e.name.endswith("lut"))
    for offset, value in ((0, 16383), (2, 16385), (32, 0)):
        bad = bytearray(ref_bytes)
        struct.pack_into("<H", bad, lut.offset + offset, value)
        expect(recrc(bad), "lut is not an exp table")


def test_blob_non_finite_float32_tensor_rejected(ref_bytes):
    blob = read_blob(ref_bytes)
    scales = next(e for e in blob.tensor_table if e.dtype == tb.F32)
    for value in (float("inf"), float("nan")):
        bad = bytearray(ref_bytes)
        struct.pack_into("<f", bad, scales.offset, value)
        expect(recrc(bad), "non-finite value")


def test_blob_check_order_is_the_documented_one(ref_bytes, attention):
    """docs/blob-format.md "Reader checks (MUST), in this order": a blob with two problems is
    named for the one checked first, by both readers. The pairs are where the page once
    disagreed with the code, and the budget (check 12) after every per-op check."""
    layout = walk(ref_bytes)
    by_name = {t["name"]: t for t in layout["tensors"]}
    attn = layout["ops"][3]  # 17 tensor indices, then 2 bytes of padding
    names = tb.OP_LAYOUTS[4].iparams
    m_sm, shift_q = (attn["iparams"] + 4 * names.index(n) for n in ("M_sm", "shift_q"))
    lut = by_name["3.lut"]["offset"]

    def two(*edits) -> bytes:
        data = bytearray(ref_bytes)
        for fmt, offset, value in edits:
            struct.pack_into(fmt, data, offset, value)
        return recrc(data)

    cases = {
        "non-zero padding after op 3 tensor indices": two(
            ("<H", attn["at"] + 4, 999), ("B", attn["at"] + 4 + 2 * 17, 1)),
        "shape mismatch in op 0 (dense): tensor 0 (0.W)": two(
            ("<f", by_name["0.s"]["offset"], float("nan")), ("<H", by_name["0.W"]["at"] + 8, 16),
            ("<H", by_name["0.W"]["at"] + 10, 8)),
        "op 3 (attention): shift_q = 0 out of range": two(
            ("<i", m_sm, 40000), ("<i", shift_q, 0)),
        "op 3 (attention): multiplier M_sm = 40000": two(
            ("<i", m_sm, 40000), ("<h", by_name["3.mq"]["offset"], -1)),
        "op 3 (attention): lut is not an exp table": two(
            ("<h", by_name["0.m"]["offset"], 32767), ("<H", lut + 2, 20000)),
    }  # fmt: skip
    for first, data in cases.items():
        msg = expect(data, first)
        with pytest.raises(attention.BlobError) as device:
            attention.read_blob(data)
        assert str(device.value) == msg
