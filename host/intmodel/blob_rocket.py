# Host (CPython): the rocket op's rules in the blob (opcode 12), for tinyattn.intmodel.blob.
"""The rocket op (opcode 12: MiniRocket's transform of the input window into K int8 features,
docs/blob-format.md and docs/quantization.md "rocket") as the host reader and writer see it: its
tensor slots, its parameter and table checks, its shape rule and its small-int budget sites,
with the messages of the device reader (device/attention_ops_rocket.py), in the same order.

    grp u16 [G, 8]  per group: dilation, pad, i0, i1, i2 (the taps of weight 2), channels,
                    features, bias exponent
    ch  u16 [L]     the groups' channel combinations, group after group
    b   i32 [K]     per feature: the bias mantissa
    z   i32 [K]     the PPV's zero point (Q15)
    m   i16 [K]     the feature's multiplier
"""

from __future__ import annotations

import numpy as np

from tinyattn.learn import rocket

GROUP_WIDTH = 8  # dilation, pad, i0, i1, i2, channels, features, bias exponent
BITS_MIN, BITS_MAX = 8, 30  # the input grid: |xq| <= 2**(bits-1)
MANTISSA = 15  # |x| <= 2**15 after the block exponent
Q15 = 1 << 15  # the PPV's fixed point
KERNEL_ABS = 12  # sum of |weights| of a kernel: six taps of -1, three of +2


def tensors(ip: dict[str, int], quantized: bool) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
    """The rocket op's tensor slots (an int8 blob; `check_params` refuses a float32 one)."""
    return [
        ("grp", np.dtype("<u2"), (ip["G"], GROUP_WIDTH)),
        ("ch", np.dtype("<u2"), (ip["L"],)),
        ("b", np.dtype("<i4"), (ip["K"],)),
        ("z", np.dtype("<i4"), (ip["K"],)),
        ("m", np.dtype("<i2"), (ip["K"],)),
    ]


def check_params(k: int, ip: dict[str, int], quantized: bool, fail) -> None:
    """Before the tensors: the positions cap, the input grid's width, and an int8 blob."""
    if not 0 <= ip["N"] <= ip["T"]:
        raise fail(f"op {k} (rocket): N = {ip['N']} out of range 0..T ({ip['T']})")
    if not BITS_MIN <= ip["bits"] <= BITS_MAX:
        raise fail(f"op {k} (rocket): bits = {ip['bits']} out of range {BITS_MIN}..{BITS_MAX}")
    if not quantized:
        raise fail(f"op {k} (rocket) needs an int8 blob: its features are counts on the input "
                   "grid")  # fmt: skip


def group_ok(row: list[int]) -> bool:
    """A group row: dilation >= 1, pad 0 or 1, taps increasing within 0..8, channels >= 1,
    features >= 1, bias exponent <= 30."""
    d, pad, i0, i1, i2, n_ch, n_f, e = row
    return d >= 1 and pad in (0, 1) and 0 <= i0 < i1 < i2 <= 8 and n_ch >= 1 and n_f >= 1 \
        and e <= 30  # fmt: skip


def check_tables(k: int, op, fail) -> None:
    """After the multipliers: each group row, the counts the rows add up to, each channel
    index, each zero point (in this order, elements in order)."""
    ip, t = op.iparams, op.tensors
    rows = t["grp"].astype(np.int64).tolist()
    for g, row in enumerate(rows):
        if not group_ok(row):
            raise fail(f"op {k} (rocket): group {g} = {row} is not a group (dilation >= 1, pad "
                       "0 or 1, taps increasing within 0..8, channels >= 1, features >= 1, "
                       "bias exponent <= 30)")  # fmt: skip
    n_ch = sum(r[5] for r in rows)
    n_f = sum(r[6] for r in rows)
    if n_ch != ip["L"] or n_f != ip["K"]:
        raise fail(f"op {k} (rocket): its groups hold {n_ch} channels and {n_f} features, the "
                   f"op has L = {ip['L']} and K = {ip['K']}")  # fmt: skip
    for i, c in enumerate(t["ch"].tolist()):
        if c >= ip["C"]:
            raise fail(f"op {k} (rocket): channel ch[{i}] = {c}, the window has C = {ip['C']}")
    for j, z in enumerate(t["z"].tolist()):
        if not 0 <= z <= Q15:
            raise fail(f"op {k} (rocket): zero point z[{j}] = {z} out of range 0..{Q15}")


def out_shape(k: int, ip: dict[str, int], shape: tuple[int, ...], mismatch, fail):
    """Op 0 only; the input [C]; P <= T; -> [K]."""
    if k:
        raise fail(f"op {k} (rocket) must be op 0 (it reads the input window)")
    if shape != (ip["C"],):
        raise mismatch(f"n_features = {shape[0]} channels, op has C = {ip['C']}")
    if ip["P"] > ip["T"]:
        raise mismatch(f"pool P = {ip['P']} steps is longer than the window T = {ip['T']}")
    return (ip["K"],)


def bounds(op) -> list[tuple[str, int]]:
    """The rocket op's small-int bounds without a multiplier, in the device's order (checked
    before its requantization site, with the same message): each bias mantissa `b[j]` as
    stored, the convolution `conv` (12 times the largest combination times P pooled steps of
    |x| <= 2**15; the shared sum is below it) and the PPV numerator `ppv` (count << 15 for up
    to S = ceil(T/P) positions): `(site, max|v|)`."""
    ip, t = op.iparams, op.tensors
    out = [(f"b[{j}]", abs(v)) for j, v in enumerate(t["b"].tolist())]
    top = int(t["grp"][:, 5].max(initial=1))
    out.append(("conv", KERNEL_ABS * top * ip["P"] << MANTISSA))
    out.append(("ppv", -(-ip["T"] // ip["P"]) << MANTISSA))
    return out


def budget_sites(op) -> list[tuple[str, np.ndarray, np.ndarray, int]]:
    """The rocket op's requantization site: each feature's `m[j]`, |p - z| <= 2**15."""
    return [("m", np.full(op.iparams["K"], Q15, np.int64), op.tensors["m"].astype(np.int64),
             op.iparams["shift"])]  # fmt: skip


def params(op):
    """The op's groups and biases as the host transform takes them (`rocket.RocketParams`)."""
    g = op.tensors["grp"].astype(np.int64)
    ch, b = (op.tensors[r].astype(np.int64) for r in ("ch", "b"))
    return rocket.RocketParams(g[:, 0], g[:, 1], g[:, 2:5], g[:, 5], ch, g[:, 6], g[:, 7], b)


def counts(op, xq: np.ndarray, lengths: np.ndarray, record: dict | None = None):
    """`(counts [B, K], n_pos [B, K])` of the op on the flat grid windows `xq [B, S·P·C]`
    (docs/quantization.md "rocket"), `lengths` valid steps each."""
    ip = op.iparams
    P, C = ip["P"], ip["C"]
    x = np.asarray(xq, np.int64).reshape(len(xq), -1, C)  # (B, S·P, C)
    return rocket.transform(params(op), *rocket.prepare(x, lengths, P), P, record, ip["N"])
