# Host (CPython): the tinyattn blob (`model.bin`) — writer and reader in one module.
"""Byte-level writer and reader of the blob specified in `docs/blob-format.md` (version 1).

Both directions are driven by one table, `OP_LAYOUTS` (opcode -> names of the i32 and f32
parameters and the list of tensors the op references), so the writer and the reader cannot
drift apart. The writer re-reads what it produced before it touches the disk, so every blob it
writes passes every check of the reader.

- `write_blob(path, spec)`: serialize a `QuantModelSpec` and write it atomically (temp file in
  the same folder, fsync, `os.replace`); `blob_bytes(spec)` gives the bytes only.
- `read_blob(data)`: parse and check bytes; raises `BlobError` (a `ValueError`) whose message
  names the problem and how to fix it. The result, a `Blob`, has the same fields as a
  `QuantModelSpec` plus the file layout, so the host references run either. Three phases, as
  the device reader's modules and in their order: `_read_records` (attention_blob.py),
  `_read_tensors` (attention_tensors.py), `_check_ops` (attention_ops.py), the last ending
  with the small-int budget proven from the stored integers (`budget_sites`).

References: docs/blob-format.md (the contract), docs/quantization.md (what the numbers mean),
ggml's docs/gguf.md and the safetensors README (format conventions).
"""

from __future__ import annotations

import math
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tinyattn.atomic import atomic_open
from tinyattn.data.windows import VIEW_CLIP, VIEW_LOG, InputView
from tinyattn.intmodel import blob_rocket

MAGIC = b"TATN"
FORMAT_VERSION = 1
ALIGN = 4
HEADER = struct.Struct("<4sHHIHHHHffHH")  # 32 bytes, see the layout table of the doc
OP_HEAD = struct.Struct("<BBBB")  # opcode, n_tensors, n_iparams, n_fparams
TENSOR_HEAD = struct.Struct("<BBBBI")  # dtype, ndim, name_len, reserved, offset
CRC_SIZE = 4
FLAG_QUANTIZED = 1 << 0
FLAG_FLOAT32 = 1 << 1

MAX_OPS = 64
MAX_TENSORS = 256
MAX_NAMES = 1024
MAX_NAME_LEN = 32
MAX_NDIM = 4
MAX_FILE = 16 * 1024 * 1024
MIN_FILE = HEADER.size + CRC_SIZE
INPUT_VIEW_RAW = 0  # the header's input_view: raw values; VIEW_LOG 1, VIEW_CLIP 2 (InputView)
# each view's f32[F] sections after norm std, in order (docs/blob-format.md)
VIEW_SECTIONS = {INPUT_VIEW_RAW: (), VIEW_LOG: ("log floor",),
                 VIEW_CLIP: ("clip low", "clip high")}  # fmt: skip

INT8_MIN, INT8_MAX = -128, 127
LOGIT_MIN, LOGIT_MAX = -32768, 32767  # the last op's int8-path output (int16 range)
M_LIMIT = 1 << 15  # multipliers: 0 <= M < 2**15
SHIFT_MIN, SHIFT_MAX = 1, 30
LUT_SHAPE = (2, 16)  # EXP_HI, EXP_LO (docs/quantization.md)

REMEDY = "re-run 'make export' and 'make flash'"

# dtype code -> numpy dtype (little-endian). Removed codes are never reused.
DTYPES: dict[int, np.dtype] = {
    1: np.dtype("<i1"),
    2: np.dtype("<i2"),
    3: np.dtype("<i4"),
    4: np.dtype("<f4"),
    5: np.dtype("<u2"),
}
DTYPE_CODES: dict[np.dtype, int] = {dt: code for code, dt in DTYPES.items()}
I8, I16, I32, F32, U16 = (DTYPES[c] for c in (1, 2, 3, 4, 5))


class BlobError(ValueError):
    """A blob that cannot be used; the message names the problem and the fix."""


# ---------------------------------------------------------------------------------------------
# The one table of op layouts


TensorSlot = tuple[str, np.dtype, tuple[int, ...]]  # role, dtype, shape


def _no_tensors(ip: dict[str, int], quantized: bool) -> list[TensorSlot]:
    return []


def _dense_tensors(ip: dict[str, int], quantized: bool) -> list[TensorSlot]:
    n_in, n_out = ip["in"], ip["out"]
    slots: list[TensorSlot] = [("W", I8 if quantized else F32, (n_out, n_in))]
    if ip["has_bias"]:
        slots.append(("b", I32 if quantized else F32, (n_out,)))
    if quantized:
        slots += [("s", F32, (n_out,)), ("m", I16, (n_out,))]
    return slots


def _attention_tensors(ip: dict[str, int], quantized: bool) -> list[TensorSlot]:
    E = ip["E"]
    slots: list[TensorSlot] = []
    for p in "qkvo":
        slots.append((f"W{p}", I8 if quantized else F32, (E, E)))
        if ip["has_bias"]:
            slots.append((f"b{p}", I32 if quantized else F32, (E,)))
        if quantized:
            slots += [(f"s{p}", F32, (E,)), (f"m{p}", I16, (E,))]
    if quantized:
        slots.append(("lut", U16, LUT_SHAPE))
    return slots


def _myattn_tensors(ip: dict[str, int], quantized: bool) -> list[TensorSlot]:
    # attn: Linear(q + k -> v1) as Wa, ba; attn_combine: Linear(q + v2 -> out) as Wc, bc
    slots: list[TensorSlot] = []
    for p, n_out, n_in in (
        ("a", ip["v1"], ip["q"] + ip["k"]),
        ("c", ip["out"], ip["q"] + ip["v2"]),
    ):
        slots.append((f"W{p}", I8 if quantized else F32, (n_out, n_in)))
        if ip["has_bias"]:
            slots.append((f"b{p}", I32 if quantized else F32, (n_out,)))
        if quantized:
            slots += [(f"s{p}", F32, (n_out,)), (f"m{p}", I16, (n_out,))]
    if quantized:
        slots.append(("lut", U16, LUT_SHAPE))
    return slots


def _embed_tensors(ip: dict[str, int], quantized: bool) -> list[TensorSlot]:
    # patch embedding; the positional embedding is folded into a per-token bias b[s, o]
    E, n_in, S = ip["E"], ip["P"] * ip["C"], seq_tokens(ip["T"], ip["P"])
    slots: list[TensorSlot] = [
        ("W", I8 if quantized else F32, (E, n_in)),
        ("b", I32 if quantized else F32, (S, E)),
    ]
    if quantized:
        slots += [("s", F32, (E,)), ("m", I16, (E,))]
    return slots


def _conv_tensors(ip: dict[str, int], quantized: bool) -> list[TensorSlot]:
    # W [F, C/groups, K] as PyTorch's conv1d, stored [F, (C/groups)·K] (value c·K + j)
    F, n_in = ip["F"], ip["C"] // ip["groups"] * ip["K"]
    slots: list[TensorSlot] = [("W", I8 if quantized else F32, (F, n_in))]
    if ip["has_bias"]:
        slots.append(("b", I32 if quantized else F32, (F,)))
    if quantized:
        slots += [("s", F32, (F,)), ("m", I16, (F,))]
    return slots


def conv_out_tokens(S: int, stride: int) -> int:
    """Tokens out of a conv of `stride` over S tokens: ceil(S / stride)."""
    return -(-S // stride)


def _res_ff_tensors(ip: dict[str, int], quantized: bool) -> list[TensorSlot]:
    E, F = ip["E"], ip["F"]
    slots: list[TensorSlot] = []
    for g, n_out, n_in in (("1", F, E), ("2", E, F)):
        slots.append((f"W{g}", I8 if quantized else F32, (n_out, n_in)))
        if ip["has_bias"]:
            slots.append((f"b{g}", I32 if quantized else F32, (n_out,)))
        if quantized:
            slots += [(f"s{g}", F32, (n_out,)), (f"m{g}", I16, (n_out,))]
    return slots


def _masked_pool_tensors(ip: dict[str, int], quantized: bool) -> list[TensorSlot]:
    return [("m", I16, (ip["S"],))] if quantized else []  # m[k-1] / 2**shift ~ 1/k


def seq_tokens(T: int, P: int) -> int:
    """Tokens of a full window of T steps in patches of P steps: S = ceil(T / P)."""
    return -(-T // P)


@dataclass(frozen=True)
class OpLayout:
    """How one opcode is stored: parameter names (in record order) and its tensor slots."""

    name: str
    iparams: tuple[str, ...]
    fparams: tuple[str, ...]
    tensors: Callable[[dict[str, int], bool], list[TensorSlot]]
    shifts: tuple[str, ...] = ()  # iparams that are requantization shifts (1..30 when int8)
    multipliers: tuple[str, ...] = ()  # iparams that are multipliers (0 <= M < 2**15)


_ATTENTION_IPARAMS = tuple(
    "S E H has_bias shift_q shift_k shift_v shift_o M_sm shift_sm M_ctx shift_ctx".split()
)
_ATTENTION_FPARAMS = ("s_in", "s_q", "s_k", "s_v", "s_ctx", "s_out")
_ATTENTION_SHIFTS = ("shift_q", "shift_k", "shift_v", "shift_o", "shift_sm", "shift_ctx")
# Ops of a seq model (op 0 is `embed`): token-wise ops run on the S_n valid tokens only.
SEQ_ONLY_OPS = ("embed", "res_attention", "res_ff", "masked_pool", "conv")
NOT_IN_SEQ_OPS = ("reshape", "attention", "avgpool", "myattn")  # unmasked: refused after embed
# Op 0 of a blob that reads windows [T, C] (its input is n <= T steps of C channels): embed (a
# seq model) and rocket; both carry T, C and P (steps a patch or a pooled step takes).
WINDOW_OPS = ("embed", "rocket")

OP_LAYOUTS: dict[int, OpLayout] = {
    1: OpLayout(
        "dense",
        ("in", "out", "has_bias", "shift", "act_min", "act_max"),
        ("s_in", "s_out"),
        _dense_tensors,
        shifts=("shift",),
    ),
    2: OpLayout("relu", (), (), _no_tensors),
    3: OpLayout("reshape", ("S", "E"), (), _no_tensors),
    4: OpLayout(
        "attention",
        _ATTENTION_IPARAMS,
        _ATTENTION_FPARAMS,
        _attention_tensors,
        shifts=_ATTENTION_SHIFTS,
        multipliers=("M_sm", "M_ctx"),
    ),
    5: OpLayout(
        "avgpool",
        ("S", "E", "M", "shift"),
        (),
        _no_tensors,
        shifts=("shift",),
        multipliers=("M",),
    ),
    6: OpLayout(
        "myattn",
        tuple(
            "mode q k v1 v2 out has_bias M_q shift_q shift_a M_sm shift_sm M_ap shift_ap "
            "shift_c".split()
        ),
        ("s_in", "s_qk", "s_sc", "s_qa", "s_out"),
        _myattn_tensors,
        shifts=("shift_q", "shift_a", "shift_sm", "shift_ap", "shift_c"),
        multipliers=("M_q", "M_sm", "M_ap"),
    ),
    7: OpLayout(
        "embed",
        ("T", "C", "P", "E", "shift"),
        ("s_in", "s_out"),
        _embed_tensors,
        shifts=("shift",),
    ),
    8: OpLayout(
        "res_attention",
        _ATTENTION_IPARAMS + ("M_x", "M_a", "shift_add"),
        _ATTENTION_FPARAMS + ("s_y",),
        _attention_tensors,
        shifts=_ATTENTION_SHIFTS + ("shift_add",),
        multipliers=("M_sm", "M_ctx", "M_x", "M_a"),
    ),
    9: OpLayout(
        "res_ff",
        ("E", "F", "has_bias", "shift_1", "shift_2", "M_x", "M_f", "shift_add"),
        ("s_in", "s_h", "s_f", "s_y"),
        _res_ff_tensors,
        shifts=("shift_1", "shift_2", "shift_add"),
        multipliers=("M_x", "M_f"),
    ),
    10: OpLayout(
        "masked_pool",
        ("S", "E", "shift"),
        (),
        _masked_pool_tensors,
        shifts=("shift",),
    ),
    11: OpLayout(
        "conv",
        ("S", "C", "F", "K", "stride", "dilation", "groups", "relu", "has_bias", "shift"),
        ("s_in", "s_out"),
        _conv_tensors,
        shifts=("shift",),
    ),
    12: OpLayout(  # MiniRocket's transform of the window (blob_rocket.py)
        "rocket",
        ("T", "C", "P", "N", "bits", "K", "G", "L", "shift"),
        (),
        blob_rocket.tensors,
        shifts=("shift",),
    ),
}
# Opcodes that were reserved and are not (yet) readable: none since myattn (6) landed.
RESERVED_OPCODES: dict[int, str] = {}
MYATTN_EXPLICIT, MYATTN_POOL = 0, 1  # myattn's `mode`: input Q ‖ K ‖ V, or tokens [S, E]
OPCODES: dict[str, int] = {layout.name: code for code, layout in OP_LAYOUTS.items()}


# ---------------------------------------------------------------------------------------------
# In-memory model: what the writer takes and (with the layout added) what the reader returns


@dataclass
class Op:
    """One op of the graph: `kind` (a name of OP_LAYOUTS), its parameters and tensors by role."""

    kind: str
    iparams: dict[str, int]  # every name of the layout, in layout order
    fparams: dict[str, float] = field(default_factory=dict)
    tensors: dict[str, np.ndarray] = field(default_factory=dict)  # role -> array (exact dtype)

    @property
    def opcode(self) -> int:
        return OPCODES[self.kind]


@dataclass
class QuantModelSpec:
    """Everything a blob holds. `quantized`: int8 path (True) or float32 weights (False)."""

    quantized: bool
    class_names: list[str]
    norm_mean: np.ndarray  # (F,) float32
    norm_std: np.ndarray  # (F,) float32, > 0
    input_scale: float  # s_in of the quantized input (1.0 in a float32 blob)
    logit_scale: float  # real logit = logit_q * logit_scale (1.0 in a float32 blob)
    ops: list[Op]
    view: InputView | None = None  # the input's log or clip view ((F,) float32 each); None: raw

    @property
    def n_features(self) -> int:
        return int(len(self.norm_mean))

    @property
    def n_classes(self) -> int:
        return len(self.class_names)


@dataclass(frozen=True)
class TensorEntry:
    """One record of the tensor table as found in the file."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int  # absolute, [offset, offset + nbytes)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize


@dataclass
class Blob(QuantModelSpec):
    """A parsed blob: the model plus where everything was in the file."""

    version: int = FORMAT_VERSION
    flags: int = 0
    file_size: int = 0
    crc32: int = 0
    data_start: int = 0  # first byte after the tensor table
    tensor_table: list[TensorEntry] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Writer


def _pad(n: int) -> int:
    return (-n) % ALIGN


def _op_iparams(op: Op) -> list[int]:
    layout = OP_LAYOUTS[op.opcode]
    if set(op.iparams) != set(layout.iparams):
        raise ValueError(
            f"op {op.kind}: iparams {sorted(op.iparams)} != layout {list(layout.iparams)}"
        )
    return [int(op.iparams[name]) for name in layout.iparams]


def _op_fparams(op: Op) -> list[float]:
    layout = OP_LAYOUTS[op.opcode]
    if set(op.fparams) != set(layout.fparams):
        raise ValueError(
            f"op {op.kind}: fparams {sorted(op.fparams)} != layout {list(layout.fparams)}"
        )
    return [float(op.fparams[name]) for name in layout.fparams]


def blob_bytes(spec: QuantModelSpec) -> bytes:
    """Serialize `spec` (docs/blob-format.md) and check the result with `read_blob`."""
    names = "\n".join(spec.class_names).encode("utf-8")
    F = spec.n_features
    # Tensor list in op order, each op's slots in layout order; names "<op index>.<role>".
    entries: list[tuple[str, np.ndarray]] = []
    op_refs: list[list[int]] = []
    for k, op in enumerate(spec.ops):
        if op.kind not in OPCODES:
            raise ValueError(f"op {k}: kind {op.kind!r} has no opcode in OP_LAYOUTS")
        ip = dict(zip(OP_LAYOUTS[op.opcode].iparams, _op_iparams(op), strict=True))
        slots = OP_LAYOUTS[op.opcode].tensors(ip, spec.quantized)
        if set(op.tensors) != {role for role, _, _ in slots}:
            raise ValueError(
                f"op {k} ({op.kind}): tensors {sorted(op.tensors)}, layout wants "
                f"{[role for role, _, _ in slots]}"
            )
        refs = []
        for role, dtype, _ in slots:
            refs.append(len(entries))
            entries.append((f"{k}.{role}", np.ascontiguousarray(op.tensors[role], dtype=dtype)))
        op_refs.append(refs)

    head = bytearray()
    head += names + bytes(_pad(len(names)))
    head += np.asarray(spec.norm_mean, dtype=F32).tobytes()
    head += np.asarray(spec.norm_std, dtype=F32).tobytes()
    for values in spec.view.params if spec.view is not None else ():
        head += np.asarray(values, dtype=F32).tobytes()
    for op, refs in zip(spec.ops, op_refs, strict=True):
        iparams, fparams = _op_iparams(op), _op_fparams(op)
        rec = OP_HEAD.pack(op.opcode, len(refs), len(iparams), len(fparams))
        rec += struct.pack(f"<{len(refs)}H", *refs)
        rec += bytes(_pad(len(rec)))
        rec += struct.pack(f"<{len(iparams)}i{len(fparams)}f", *iparams, *fparams)
        head += rec
    # Tensor table: offsets depend on the table's own size, so measure it first.
    table_size = 0
    for name, arr in entries:
        rec_len = TENSOR_HEAD.size + 2 * arr.ndim + len(name.encode("ascii"))
        table_size += rec_len + _pad(rec_len)
    data_start = HEADER.size + len(head) + table_size
    offset = data_start
    table = bytearray()
    data = bytearray()
    for name, arr in entries:
        raw_name = name.encode("ascii")
        rec = TENSOR_HEAD.pack(DTYPE_CODES[arr.dtype], arr.ndim, len(raw_name), 0, offset)
        rec += struct.pack(f"<{arr.ndim}H", *arr.shape) + raw_name
        table += rec + bytes(_pad(len(rec)))
        raw = arr.tobytes()
        data += raw + bytes(_pad(len(raw)))
        offset += len(raw) + _pad(len(raw))
    file_size = data_start + len(data) + CRC_SIZE
    flags = FLAG_QUANTIZED if spec.quantized else FLAG_FLOAT32
    header = HEADER.pack(
        MAGIC,
        FORMAT_VERSION,
        flags,
        file_size,
        F,
        spec.n_classes,
        len(spec.ops),
        len(entries),
        spec.input_scale,
        spec.logit_scale,
        len(names),
        INPUT_VIEW_RAW if spec.view is None else spec.view.kind,
    )
    body = header + head + table + data
    out = body + struct.pack("<I", zlib.crc32(body))
    assert len(out) == file_size
    read_blob(out, source="writer self-check")  # a blob we write always passes the reader
    return bytes(out)


def write_blob(
    path: str | Path,
    spec: QuantModelSpec,
    before_rename: Callable[[Path], None] | None = None,
) -> int:
    """Write the blob of `spec` to `path` atomically; returns its size in bytes.

    The bytes go to a temp file in the same folder, are fsync'ed, and replace `path` in one
    `os.replace`, so a reader (or a crash) sees the old file or the new one, never a mix.
    `before_rename(tmp_path)` is a test hook called between the fsync and the rename.
    """
    data = blob_bytes(spec)
    path = Path(path)
    with atomic_open(path, "wb", fsync=True, before_rename=before_rename) as f:
        f.write(data)
    try:  # make the rename itself durable (POSIX); not possible on every OS
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return len(data)
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
    return len(data)


# ---------------------------------------------------------------------------------------------
# Reader


class _Reader:
    """Sequential little-endian reads inside `[0, end)`; overruns are structural errors."""

    def __init__(self, data: bytes, pos: int, end: int, fail: Callable[[str], BlobError]):
        self.data, self.pos, self.end, self.fail = data, pos, end, fail

    def take(self, n: int, what: str) -> bytes:
        if self.pos + n > self.end:
            raise self.fail(
                f"{what} at offset {self.pos} needs {n} bytes but the section ends at "
                f"{self.end} (counts in the header or records are inconsistent)"
            )
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))

    def padding(self, what: str) -> None:
        pad = self.take(_pad(self.pos), f"padding after {what}")
        if any(pad):
            raise self.fail(f"non-zero padding after {what} at offset {self.pos - len(pad)}")


@dataclass(frozen=True)
class _Header:
    """The header fields the later phases need (phase 1 has checked them)."""

    flags: int
    file_size: int
    crc32: int
    n_features: int
    n_classes: int
    n_tensors: int
    input_scale: float
    logit_scale: float

    @property
    def quantized(self) -> bool:
        return self.flags == FLAG_QUANTIZED


RawOp = tuple[int, list[int], list[int], list[float]]  # opcode, tensor indices, iparams, fparams


def read_blob(data: bytes | bytearray | memoryview, source: str = "blob") -> Blob:
    """Parse and check a blob; every MUST of docs/blob-format.md raises `BlobError` if broken.

    Three phases in the device reader's order and with its messages (device/attention_blob.py,
    attention_tensors.py, attention_ops.py): `_read_records` (magic, version, size, CRC,
    header, names, normalization, op records), `_read_tensors` (tensor table, data section),
    `_check_ops` (each op's tensors and parameters, the shape chain, the small-int budget).
    `source` (e.g. the file name) starts every error message.
    """
    data = bytes(data)

    def fail(problem: str, remedy: str = REMEDY) -> BlobError:
        return BlobError(f"{source}: {problem}; {remedy}")

    head, class_names, (norm_mean, norm_std, view), raw_ops, pos, end = _read_records(data, fail)
    table, arrays, data_start = _read_tensors(data, pos, end, head.n_tensors, fail)
    ops = _check_ops(raw_ops, table, arrays, head, fail)
    return Blob(
        quantized=head.quantized,
        class_names=class_names,
        norm_mean=norm_mean,
        norm_std=norm_std,
        input_scale=float(head.input_scale),
        logit_scale=float(head.logit_scale),
        ops=ops,
        view=view,
        version=FORMAT_VERSION,
        flags=head.flags,
        file_size=head.file_size,
        crc32=head.crc32,
        data_start=data_start,
        tensor_table=table,
    )


# -- phase 1: header, CRC, sections, op records (device: attention_blob.read_records) ----------


def _read_records(data: bytes, fail: Callable[..., BlobError]):
    """Magic, version, size, CRC, header fields, class names, normalization, op records.

    Returns (header, class names, (norm mean, norm std, input view or None), [RawOp], tensor
    table offset, end of the data section)."""
    n = len(data)
    if n >= 4 and data[:4] != MAGIC:
        raise fail(f"bad magic {data[:4]!r}, expected {MAGIC!r} (not a tinyattn blob)")
    if n >= 6:
        (version,) = struct.unpack_from("<H", data, 4)
        if version != FORMAT_VERSION:
            raise fail(
                f"unsupported format version {version} (this reader reads version "
                f"{FORMAT_VERSION})",
                "export the blob with the same tinyattn version as the device runtime",
            )
    if n < MIN_FILE:
        raise fail(f"truncated: {n} bytes, a blob has at least {MIN_FILE}")
    (file_size,) = struct.unpack_from("<I", data, 8)
    if n < file_size:
        raise fail(f"truncated: {n} of {file_size} bytes")
    if n > file_size:
        raise fail(f"file size mismatch: header says {file_size} bytes, the file has {n}")
    (crc_stored,) = struct.unpack_from("<I", data, file_size - CRC_SIZE)
    crc = zlib.crc32(data[: file_size - CRC_SIZE])
    if crc != crc_stored:
        raise fail(
            f"CRC mismatch (file corrupt or truncated): stored 0x{crc_stored:08x}, "
            f"computed 0x{crc:08x}"
        )
    # From here on the bytes are what the writer wrote: errors are inconsistent structure.
    (_, _, flags, _, F, C, n_ops, n_tensors, input_scale, logit_scale, names_len, view) = (
        HEADER.unpack_from(data, 0)
    )
    if file_size > MAX_FILE or file_size % ALIGN:
        raise fail(f"file size {file_size} is not a multiple of {ALIGN} up to {MAX_FILE}")
    if flags not in (FLAG_QUANTIZED, FLAG_FLOAT32):
        raise fail(f"unknown flags 0x{flags:04x} (exactly one of bit 0, bit 1 must be set)")
    quantized = flags == FLAG_QUANTIZED
    if view not in (INPUT_VIEW_RAW, VIEW_LOG, VIEW_CLIP):
        raise fail(f"unknown input view {view} (0 raw, 1 log, 2 clip)")
    if F < 1 or C < 1:
        raise fail(f"n_features {F} and n_classes {C} must be >= 1")
    if not 1 <= n_ops <= MAX_OPS:
        raise fail(f"n_ops {n_ops} out of range 1..{MAX_OPS}")
    if n_tensors > MAX_TENSORS:
        raise fail(f"n_tensors {n_tensors} out of range 0..{MAX_TENSORS}")
    if names_len > MAX_NAMES:
        raise fail(f"names_len {names_len} over the limit {MAX_NAMES}")
    for label, s in (("input_scale", input_scale), ("logit_scale", logit_scale)):
        if not (math.isfinite(s) and s > 0):
            raise fail(f"{label} {s} must be finite and > 0")
        if not quantized and s != 1.0:
            raise fail(f"{label} {s} must be 1.0 in a float32 blob")
    head = _Header(flags, file_size, crc_stored, F, C, n_tensors, input_scale, logit_scale)

    end = file_size - CRC_SIZE
    r = _Reader(data, HEADER.size, end, fail)
    try:
        names = r.take(names_len, "class names").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"class names are not UTF-8 ({exc.reason})") from None
    r.padding("class names")
    class_names = names.split("\n") if names else []
    if len(class_names) != C or not all(class_names):
        raise fail(f"{len(class_names)} class names (or an empty one) for n_classes {C}")
    norm_mean = np.frombuffer(r.take(4 * F, "norm mean"), dtype=F32).copy()
    norm_std = np.frombuffer(r.take(4 * F, "norm std"), dtype=F32).copy()
    if not (np.all(np.isfinite(norm_mean)) and np.all(np.isfinite(norm_std))):
        raise fail("norm mean/std contain NaN or infinity")
    if not np.all(norm_std > 0):
        raise fail("norm std has a value <= 0 (must be > 0)")
    params = []  # the view's sections, in order: log floor; clip low, clip high
    for what in VIEW_SECTIONS[view]:
        params.append(np.frombuffer(r.take(4 * F, what), dtype=F32).copy())
        if not np.all(np.isfinite(params[-1])):
            raise fail(f"{what} contains NaN or infinity")
    if view == VIEW_CLIP and not np.all(params[0] <= params[1]):
        raise fail("clip low has a value above clip high (must be <= high)")
    input_view = InputView(view, tuple(params)) if params else None

    raw_ops: list[RawOp] = []
    for k in range(n_ops):
        opcode, nt, ni, nf = r.unpack("4B", f"op {k} record")
        if opcode in RESERVED_OPCODES:
            raise fail(
                f"opcode {opcode} ({RESERVED_OPCODES[opcode]}) in op {k} is reserved and not "
                f"supported by format version {FORMAT_VERSION}"
            )
        if opcode not in OP_LAYOUTS:
            raise fail(f"unknown opcode {opcode} in op {k}")
        layout = OP_LAYOUTS[opcode]
        if ni != len(layout.iparams) or nf != len(layout.fparams):
            raise fail(
                f"op {k} ({layout.name}) has {ni} iparams and {nf} fparams, expected "
                f"{len(layout.iparams)} and {len(layout.fparams)}"
            )
        refs = list(r.unpack(f"{nt}H", f"op {k} tensor indices"))
        r.padding(f"op {k} tensor indices")
        ip = list(r.unpack(f"{ni}i", f"op {k} iparams"))
        fp = list(r.unpack(f"{nf}f", f"op {k} fparams"))
        for t in refs:
            if t >= n_tensors:
                raise fail(f"op {k} ({layout.name}) refers to tensor {t}, only {n_tensors}")
        raw_ops.append((opcode, refs, ip, fp))
    return head, class_names, (norm_mean, norm_std, input_view), raw_ops, r.pos, end


# -- phase 2: tensor table, data section (device: attention_tensors.read_tensors) -------------


def _read_tensors(data: bytes, pos: int, end: int, n_tensors: int, fail):
    """The tensor records at `pos` and the data section up to `end`.

    Returns (table, one array per record, data_start)."""
    r = _Reader(data, pos, end, fail)
    table: list[TensorEntry] = []
    for t in range(n_tensors):
        code, ndim, name_len, res, offset = r.unpack("BBBBI", f"tensor record {t}")
        if code not in DTYPES:
            raise fail(f"unknown dtype {code} in tensor record {t}")
        if not 1 <= ndim <= MAX_NDIM:
            raise fail(f"tensor record {t}: ndim {ndim} out of range 1..{MAX_NDIM}")
        if not 1 <= name_len <= MAX_NAME_LEN:
            raise fail(f"tensor record {t}: name_len {name_len} out of range 1..{MAX_NAME_LEN}")
        if res:
            raise fail(f"tensor record {t}: reserved byte is {res}, must be 0")
        shape = r.unpack(f"{ndim}H", f"tensor {t} shape")
        raw_name = r.take(name_len, f"tensor {t} name")
        if not raw_name.isascii():
            raise fail(f"tensor record {t}: name {raw_name!r} is not ASCII")
        r.padding(f"tensor record {t}")
        name = raw_name.decode("ascii")
        if 0 in shape:
            raise fail(f"tensor {t} ({name}): empty shape {list(shape)}")
        table.append(TensorEntry(name, DTYPES[code], tuple(shape), offset))
    data_start = r.pos

    # Data: aligned, inside [data_start, end), no overlaps, every other byte zero.
    spans = []
    for t, e in enumerate(table):
        if e.offset % ALIGN:
            raise fail(f"tensor {t} ({e.name}): offset {e.offset} is not {ALIGN}-aligned")
        if e.offset < data_start or e.offset + e.nbytes > end:
            raise fail(
                f"tensor {t} ({e.name}): data [{e.offset}, {e.offset + e.nbytes}) outside "
                f"the data section [{data_start}, {end})"
            )
        spans.append((e.offset, e.offset + e.nbytes, t))
    spans.sort()
    for (b0, e0, t0), (b1, e1, t1) in zip(spans, spans[1:], strict=False):
        if b1 < e0:
            raise fail(
                f"tensors {t0} ({table[t0].name}) and {t1} ({table[t1].name}) overlap: "
                f"[{b0}, {e0}) and [{b1}, {e1})"
            )
    pos = data_start
    for b, e, _ in spans + [(end, end, -1)]:
        if any(data[pos:b]):
            raise fail(f"non-zero padding in the data section within [{pos}, {b})")
        pos = max(pos, e)

    arrays = [
        np.frombuffer(data, dtype=e.dtype, count=int(np.prod(e.shape)), offset=e.offset)
        .reshape(e.shape)
        .copy()
        for e in table
    ]
    return table, arrays, data_start


# -- phase 3: ops, shape chain, small-int budget (device: attention_ops.check_ops) -------------


def _check_ops(raw_ops: list[RawOp], table, arrays, head: _Header, fail) -> list[Op]:
    """Bind each op's tensors by role (count, dtype, shape), check its parameters and the
    shapes chaining from [F] to [C]; then, int8 blobs, the small-int budget of every op."""
    quantized, n_ops = head.quantized, len(raw_ops)
    ops: list[Op] = []
    shape: tuple[int, ...] = (head.n_features,)
    seq = raw_ops[0][0] == OPCODES["embed"]  # a seq model: op 0 embeds a window of T steps
    for k, (opcode, refs, ip, fp) in enumerate(raw_ops):
        layout = OP_LAYOUTS[opcode]
        iparams = dict(zip(layout.iparams, ip, strict=True))
        fparams = dict(zip(layout.fparams, fp, strict=True))
        slots = _slots_or_fail(layout, iparams, quantized, k, fail)
        if len(refs) != len(slots):
            raise fail(
                f"shape mismatch in op {k} ({layout.name}): {len(refs)} tensors, its "
                f"parameters need {len(slots)} ({', '.join(s[0] for s in slots)})"
            )
        tensors = {}
        for t, (role, dtype, want) in zip(refs, slots, strict=True):
            e = table[t]
            if e.dtype != dtype or e.shape != want:
                raise fail(
                    f"shape mismatch in op {k} ({layout.name}): tensor {t} ({e.name}) is "
                    f"{e.dtype.name} {list(e.shape)}, expected {role} {dtype.name} {list(want)}"
                )
            tensors[role] = arrays[t]
        op = Op(layout.name, iparams, fparams, tensors)
        shape = _check_op(k, op, shape, quantized, k == n_ops - 1, fail, seq)
        ops.append(op)
    if shape != (head.n_classes,):
        raise fail(
            f"shape mismatch: the last op outputs {list(shape)}, n_classes is {head.n_classes}"
        )
    if quantized:
        for k, op in enumerate(ops):
            _check_budget(k, op, fail)
    return ops


def _slots_or_fail(layout, iparams, quantized, k, fail) -> list[TensorSlot]:
    for name in ("in", "out", "S", "E", "H", "q", "k", "v1", "v2", "T", "C", "P", "F", "K",
                 "stride", "dilation", "groups", "G", "L"):  # fmt: skip
        if name in iparams and not 1 <= iparams[name] <= 65535:
            raise fail(f"op {k} ({layout.name}): {name} = {iparams[name]} out of range 1..65535")
    if "has_bias" in iparams and iparams["has_bias"] not in (0, 1):
        raise fail(f"op {k} ({layout.name}): has_bias = {iparams['has_bias']}, must be 0 or 1")
    if layout.name == "rocket":
        blob_rocket.check_params(k, iparams, quantized, fail)
    if layout.name != "conv":
        return layout.tensors(iparams, quantized)
    if iparams["relu"] not in (0, 1):
        raise fail(f"op {k} (conv): relu = {iparams['relu']}, must be 0 or 1")
    if iparams["C"] % iparams["groups"] or iparams["F"] % iparams["groups"]:
        raise fail(
            f"op {k} (conv): groups = {iparams['groups']} must divide C = {iparams['C']} and "
            f"F = {iparams['F']}"
        )
    return layout.tensors(iparams, quantized)


POOL_SHIFT = 14  # masked_pool: m[0] = 2**shift < 2**15 (docs/quantization.md)


def pool_reciprocal(k: int) -> int:
    """`rint(2**14 / k)`, ties to even, in integers: masked_pool's `m[k-1]`."""
    q, r = divmod(1 << POOL_SHIFT, k)
    return q + (2 * r > k or (2 * r == k and q & 1))


def _check_pool_table(k: int, shift: int, m: np.ndarray, fail) -> None:
    """masked_pool's table MUST be the exporter's: `shift = 14`, `m[j-1] = rint(2**14 / j)`
    (a CRC-valid blob with another table would silently change the mean)."""
    if shift != POOL_SHIFT:
        raise fail(f"op {k} (masked_pool): shift = {shift}, must be {POOL_SHIFT}")
    for i, v in enumerate(m.tolist()):
        if v != pool_reciprocal(i + 1):
            raise fail(
                f"op {k} (masked_pool): m[{i}] = {v}, must be rint(2**14 / {i + 1}) = "
                f"{pool_reciprocal(i + 1)} (the table of 1/k)"
            )


def _check_op(
    k: int, op: Op, shape: tuple[int, ...], quantized: bool, last: bool, fail, seq: bool = False
):
    """Check one op's attributes against its input shape; returns its output shape.
    `seq`: op 0 is `embed` (a seq model, whose ops run on the valid tokens only)."""
    ip, kind = op.iparams, op.kind
    for role, a in sorted(op.tensors.items()):  # scales and float32 weights: finite only
        if a.dtype == F32 and not np.all(np.isfinite(a)):
            raise fail(f"op {k} ({kind}): tensor {role} has a non-finite value (inf or NaN)")

    def mismatch(detail: str) -> BlobError:
        return fail(f"shape mismatch in op {k} ({kind}): {detail}")

    layout = OP_LAYOUTS[op.opcode]
    if quantized:
        for name in layout.shifts:
            if not SHIFT_MIN <= ip[name] <= SHIFT_MAX:
                raise fail(f"op {k} ({kind}): {name} = {ip[name]} out of range 1..30")
        multipliers = [(name, ip[name]) for name in layout.multipliers]
        multipliers += [  # tensors by sorted role: the device's dicts have no insertion order
            (f"{role}[{i}]", int(v))
            for role, a in sorted(op.tensors.items())
            if role[0] == "m"
            for i, v in enumerate(a.ravel())
        ]
        for name, m in multipliers:
            if not 0 <= m < M_LIMIT:
                raise fail(f"op {k} ({kind}): multiplier {name} = {m} out of range 0..32767")
        if "lut" in op.tensors:  # EXP_HI, EXP_LO start at 2**14 and never increase
            lut = [int(v) for v in op.tensors["lut"].ravel()]
            for row in (lut[:16], lut[16:]):
                if row[0] != 16384 or any(row[i + 1] > row[i] for i in range(15)):
                    raise fail(f"op {k} ({kind}): lut is not an exp table (row 0 must be "
                               "16384, rows must not increase)")  # fmt: skip
        if kind == "masked_pool":
            _check_pool_table(k, ip["shift"], op.tensors["m"], fail)
        if kind == "rocket":
            blob_rocket.check_tables(k, op, fail)
    else:
        zero = [
            n
            for n in layout.shifts + layout.multipliers + ("act_min", "act_max")
            if n in ip and ip[n] != 0
        ]
        ones = [n for n, v in op.fparams.items() if v != 1.0]
        if zero or ones:
            raise fail(
                f"op {k} ({kind}): a float32 blob has quantization parameters 0 and scales "
                f"1.0, found {zero + ones}"
            )
    if quantized:
        for name, v in op.fparams.items():
            if not (math.isfinite(v) and v > 0):
                raise fail(f"op {k} ({kind}): scale {name} = {v} must be finite and > 0")

    if kind in SEQ_ONLY_OPS and kind != "embed" and not seq:
        raise fail(f"op {k} ({kind}) needs a seq model (op 0 embed), op 0 is not embed")
    if kind in NOT_IN_SEQ_OPS and seq:
        raise fail(
            f"op {k} ({kind}) cannot run in a seq model (op 0 embed): it does not mask "
            "padded tokens; use res_attention and masked_pool"
        )
    if kind == "dense":
        if shape[-1] != ip["in"]:
            raise mismatch(f"input shape {list(shape)}, op has in = {ip['in']}")
        if quantized:
            lo, hi = (LOGIT_MIN, LOGIT_MAX) if last else (INT8_MIN, INT8_MAX)
            if not lo <= ip["act_min"] <= ip["act_max"] <= hi:
                raise fail(
                    f"op {k} (dense): activation range [{ip['act_min']}, {ip['act_max']}] "
                    f"outside [{lo}, {hi}]" + ("" if last else " (hidden layers are int8)")
                )
        return shape[:-1] + (ip["out"],)
    if kind == "relu":
        return shape
    if kind == "reshape":
        if int(np.prod(shape)) != ip["S"] * ip["E"]:
            raise mismatch(f"input shape {list(shape)} cannot become [{ip['S']}, {ip['E']}]")
        return (ip["S"], ip["E"])
    if kind == "attention":
        if shape != (ip["S"], ip["E"]):
            raise mismatch(f"input shape {list(shape)}, op has S, E = {ip['S']}, {ip['E']}")
        if ip["E"] % ip["H"]:
            raise mismatch(f"E = {ip['E']} is not divisible by H = {ip['H']}")
        return shape
    if kind == "avgpool":
        if shape != (ip["S"], ip["E"]):
            raise mismatch(f"input shape {list(shape)}, op has S, E = {ip['S']}, {ip['E']}")
        return (ip["E"],)
    if kind == "myattn":
        q, v1, v2 = ip["q"], ip["v1"], ip["v2"]
        if ip["mode"] == MYATTN_EXPLICIT:
            n = q + ip["k"] + v1 * v2
            if shape != (n,):
                raise mismatch(
                    f"input shape {list(shape)}, mode 0 (explicit) needs [q + k + v1·v2] = [{n}]"
                )
        elif ip["mode"] == MYATTN_POOL:
            if not q == ip["k"] == v2:
                raise mismatch(f"mode 1 (pool) needs q = k = v2, has {q}, {ip['k']}, {v2}")
            if shape != (v1, v2):
                raise mismatch(
                    f"input shape {list(shape)}, mode 1 (pool) needs [v1, v2] = [{v1}, {v2}]"
                )
        else:
            raise fail(f"op {k} (myattn): mode = {ip['mode']}, must be 0 (explicit) or 1 (pool)")
        return (ip["out"],)
    if kind == "embed":
        if k:
            raise fail(f"op {k} (embed) must be op 0 (it reads the input window)")
        if shape != (ip["C"],):
            raise mismatch(f"n_features = {shape[0]} channels, op has C = {ip['C']}")
        if ip["P"] > ip["T"]:
            raise mismatch(f"patch P = {ip['P']} steps is longer than the window T = {ip['T']}")
        return (seq_tokens(ip["T"], ip["P"]), ip["E"])
    if kind == "res_attention":
        if shape != (ip["S"], ip["E"]):
            raise mismatch(f"input shape {list(shape)}, op has S, E = {ip['S']}, {ip['E']}")
        if ip["E"] % ip["H"]:
            raise mismatch(f"E = {ip['E']} is not divisible by H = {ip['H']}")
        return shape
    if kind == "res_ff":
        if len(shape) != 2 or shape[1] != ip["E"]:
            raise mismatch(f"input shape {list(shape)}, op has [S, E] with E = {ip['E']}")
        return shape
    if kind == "masked_pool":
        if shape != (ip["S"], ip["E"]):
            raise mismatch(f"input shape {list(shape)}, op has S, E = {ip['S']}, {ip['E']}")
        return (ip["E"],)
    if kind == "rocket":
        return blob_rocket.out_shape(k, ip, shape, mismatch, fail)
    if kind == "conv":
        if shape != (ip["S"], ip["C"]):
            raise mismatch(f"input shape {list(shape)}, op has S, C = {ip['S']}, {ip['C']}")
        return (conv_out_tokens(ip["S"], ip["stride"]), ip["F"])
    raise fail(f"op {k}: no shape rule for {kind}")  # pragma: no cover - table and rules agree


# -- the small-int budget, proven from the stored integers (docs/quantization.md) -------------

BUDGET = 1 << 30  # every intermediate of the int8 path: |v| < 2**30
X_ABS_MAX = 128  # |x_q| <= 128 for every int8 input of an op
Q14 = 1 << 14  # softmax probabilities (and exp values) are Q14
SOFTMAX_DIFF_INT8 = 255  # myattn: max - score of two int8 scores


def softmax_diff_max(bound: int, M: int, shift: int) -> int:
    """The largest `diff = max - score` whose softmax index a reader computes: `bound` (the
    largest diff there can be), or one below the first diff whose index leaves the table,
    `ceil(511·2**(shift-1) / M)` (from there on `idx >= 256` and `e = 0`, computed or not).
    The softmax site's max|acc| (docs/quantization.md); 0 when even diff = 1 leaves it."""
    if M == 0:
        return bound
    return min(bound, -(-(511 << (shift - 1)) // M) - 1)


BudgetSite = tuple[str, np.ndarray, np.ndarray, int]  # multiplier name, max|acc|, M, shift


def budget_sites(op: Op) -> list[BudgetSite]:
    """Every requantization site of an int8 op in the device's order of computing them:
    (multiplier name, worst-case |accumulator| per channel for any int8 input, M per
    channel, shift). Tensor multipliers (`m`, `mq`, `m1`, …) have one channel per output
    (masked_pool's `m`: one per valid-token count k, channel k-1); the others (`M_sm`,
    `M_ctx`, avgpool `M`, `M_q`, `M_ap`, the residual adds' `M_x`, `M_a`, `M_f`) one. The table of
    docs/quantization.md "Choice of M and shift", as `tinyattn.intmodel.quantize` applies it."""
    ip, t = op.iparams, op.tensors

    def dense(g: str, shift: str) -> BudgetSite:
        acc = X_ABS_MAX * np.abs(t[f"W{g}"].astype(np.int64)).sum(axis=1)  # (out,)
        if f"b{g}" in t:
            acc = acc + np.abs(t[f"b{g}"].astype(np.int64))
        return f"m{g}", acc, t[f"m{g}"].astype(np.int64), ip[shift]

    def one(name: str, max_acc: int, shift: str) -> BudgetSite:
        return name, np.array([max_acc], np.int64), np.array([ip[name]], np.int64), ip[shift]

    def softmax(name: str, bound: int) -> BudgetSite:  # diff·M_sm for diff <= diff_max only
        return one(name, softmax_diff_max(bound, ip[name], ip["shift_sm"]), "shift_sm")

    def add(M_x: str, M_y: str) -> list[BudgetSite]:  # residual add x·M_x + y·M_y + round
        # each product is a site; their sum, 128·(M_x + M_y) + 2**(shift_add-1) < 2**30,
        # holds for any multipliers in range (docs/quantization.md)
        return [one(M_x, X_ABS_MAX, "shift_add"), one(M_y, X_ABS_MAX, "shift_add")]

    def attention() -> list[BudgetSite]:
        D = ip["E"] // ip["H"]  # head_dim
        return [
            dense("q", "shift_q"),
            dense("k", "shift_k"),
            dense("v", "shift_v"),
            softmax("M_sm", 2 * D * X_ABS_MAX * X_ABS_MAX),  # diff = max - score
            one("M_ctx", X_ABS_MAX * (Q14 + ip["S"]), "shift_ctx"),  # Σ_j p[j]·v[j,c]
            dense("o", "shift_o"),
        ]

    if op.kind in ("dense", "conv"):
        return [dense("", "shift")]
    if op.kind == "rocket":
        return blob_rocket.budget_sites(op)
    if op.kind == "attention":
        return attention()
    if op.kind == "embed":  # per-token bias: the largest |b[s, o]| over the tokens s
        acc = X_ABS_MAX * np.abs(t["W"].astype(np.int64)).sum(axis=1)
        acc = acc + np.abs(t["b"].astype(np.int64)).max(axis=0)
        return [("m", acc, t["m"].astype(np.int64), ip["shift"])]
    if op.kind == "res_attention":
        return attention() + add("M_x", "M_a")
    if op.kind == "res_ff":
        return [dense("1", "shift_1"), dense("2", "shift_2")] + add("M_x", "M_f")
    if op.kind == "masked_pool":  # m[k-1] for k valid tokens: Σ of k int8 values
        acc = X_ABS_MAX * np.arange(1, ip["S"] + 1, dtype=np.int64)
        return [("m", acc, t["m"].astype(np.int64), ip["shift"])]
    if op.kind == "avgpool":
        return [one("M", X_ABS_MAX * ip["S"], "shift")]
    if op.kind == "myattn":
        n = 1 if ip["mode"] == MYATTN_EXPLICIT else ip["v1"]  # rows summed into the query
        return [
            one("M_q", X_ABS_MAX * n, "shift_q"),
            dense("a", "shift_a"),
            softmax("M_sm", SOFTMAX_DIFF_INT8),
            one("M_ap", X_ABS_MAX * (Q14 + ip["v1"]), "shift_ap"),  # Σ_j w[j]·V[j,d]
            dense("c", "shift_c"),
        ]
    return []  # relu, reshape: no arithmetic beyond a clamp


def _check_budget(k: int, op: Op, fail) -> None:
    """Refuse an int8 op whose worst case leaves the small-int budget: per site and channel,
    in order, `max|acc| < 2**30`, then `max|acc|·M + 2**(shift-1) < 2**30`. The other
    intermediates (products, scores, exp table products, sums, numerators) are bounded by the
    earlier checks (dimensions <= 65535, exp table entries <= 2**14): docs/quantization.md.
    The rocket op's bounds without a multiplier come first (`blob_rocket.bounds`)."""
    for what, v in blob_rocket.bounds(op) if op.kind == "rocket" else ():
        if v >= BUDGET:
            raise fail(f"op {k} (rocket): small-int budget broken at {what}: max|acc| = {v} "
                       ">= 2**30")  # fmt: skip
    for name, max_acc, M, shift in budget_sites(op):
        top = max_acc * M + (1 << (shift - 1))
        bad = np.flatnonzero((max_acc >= BUDGET) | (top >= BUDGET))
        if not bad.size:
            continue
        o = int(bad[0])
        what = f"{name}[{o}]" if name[0] == "m" else name
        if max_acc[o] >= BUDGET:
            raise fail(
                f"op {k} ({op.kind}): small-int budget broken at {what}: max|acc| = "
                f"{int(max_acc[o])} >= 2**30"
            )
        raise fail(
            f"op {k} ({op.kind}): small-int budget broken at {what} = {int(M[o])}, shift "
            f"{shift}: max|acc|·M + 2**(shift-1) = {int(top[o])} >= 2**30 (max|acc| = "
            f"{int(max_acc[o])})"
        )
