"""Host (CPython): the board float model file ("TAFM") <-> the host model file `model.npz`.

On-board training (DESIGN §11, issue 13) starts from weights the host sends and ends with
weights the board writes, both in the float format of `device/attention_trainfile.py` (its
docstring is the byte-level spec; this module writes and reads the same bytes with struct and
zlib). `npz_to_board` turns `build/model.npz` (docs/model-format.md) into that file;
`board_to_npz` turns a board file back into an ordinary `model.npz`, so `tinyattn export`,
`flash` and `parity` work unchanged on weights trained on a board.

- `board_meta(model_file)`: the small JSON the board keeps (ops, n_features, normalization,
  names); the board parses only "ops" and "n_features".
- `board_bytes(meta, theta, step, state)` / `parse_board(data, name)`: the format itself;
  `read_board(path)` / `write_board(path, ...)` (atomic: temp file + rename).
- theta is the host `Sequential.theta` in float32 (the order attention_train.py uses), state
  the optimizer vectors (Adam m, v or SGD velocity) for a checkpoint, average the running
  weight average of a window run with weight averaging (flag AVERAGE: a checkpoint between
  the first averaged epoch and the last; a finished run's theta is the average already, as
  host seqtrain.fit_seq leaves it, and its file has none).

    python -m tinyattn.board.boardmodel to-board build/model.npz build/model.tafm
    python -m tinyattn.board.boardmodel to-npz build/model.tafm build/board.npz [--base
    build/model.npz]

References: docs/model-format.md; device/attention_trainfile.py (the byte layout).
"""

from __future__ import annotations

import argparse
import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tinyattn.atomic import write_atomic
from tinyattn.learn.model import build_from_ops, load_model, read_npz, save_model

MAGIC = b"TAFM"
VERSION = 1
HEADER = struct.Struct("<4sHHIIII")  # magic, version, flags, meta_len, n_params, step, n_state
MAX_META = 65536  # as the device reader
MAX_STATE = 2
AVERAGE = 1  # flags bit 0: a weight average follows the optimizer state
# npz meta keys the board file carries (besides ops, n_features and the normalization)
META_KEYS = ("model", "dataset", "feature_names", "class_names", "csv", "target")


@dataclass
class BoardModel:
    """A parsed board float model file."""

    meta: dict[str, Any]
    theta: np.ndarray  # (P,) float32, host Sequential.theta order
    step: int = 0  # optimizer steps taken
    state: list[np.ndarray] = field(default_factory=list)  # n_state x (P,) float32
    average: np.ndarray | None = None  # (P,) float32: the running weight average (flag AVERAGE)


def board_meta(meta: dict[str, Any], norm_mean: np.ndarray, norm_std: np.ndarray) -> dict:
    """The board file's meta from a model file's meta and normalization."""
    out = {"ops": meta["ops"], "n_features": int(len(norm_mean))}
    out.update({k: meta[k] for k in META_KEYS if k in meta})
    out["norm_mean"] = [float(v) for v in norm_mean]  # JSON keeps every float64 digit
    out["norm_std"] = [float(v) for v in norm_std]
    return out


def board_bytes(
    meta: dict[str, Any],
    theta: np.ndarray,
    step: int = 0,
    state: list[np.ndarray] | tuple = (),
    average: np.ndarray | None = None,
) -> bytes:
    """The TAFM bytes (device/attention_trainfile.py) of meta, theta [P], optimizer state and
    (given) the running weight average [P] (flag AVERAGE)."""
    meta_b = json.dumps(meta, separators=(",", ":")).encode()
    if len(meta_b) > MAX_META:
        raise ValueError(f"meta is {len(meta_b)} bytes; the board reads at most {MAX_META}")
    theta = np.asarray(theta, dtype="<f4").ravel()
    if len(state) > MAX_STATE or any(np.size(s) != theta.size for s in state):
        raise ValueError(f"optimizer state must be at most {MAX_STATE} vectors of {theta.size}")
    tail = () if average is None else (average,)
    if any(np.size(a) != theta.size for a in tail):
        raise ValueError(f"the weight average must be a vector of {theta.size}")
    flags = AVERAGE if tail else 0
    parts = [
        HEADER.pack(MAGIC, VERSION, flags, len(meta_b), theta.size, step, len(state)),
        meta_b,
        bytes(-len(meta_b) % 4),
        theta.tobytes(),
        *(np.asarray(s, dtype="<f4").tobytes() for s in (*state, *tail)),
    ]
    body = b"".join(parts)
    return body + struct.pack("<I", zlib.crc32(body))


def parse_board(data: bytes, name: str = "board model") -> BoardModel:
    """Check and parse TAFM bytes; ValueError naming what is wrong."""
    remedy = "fetch the weights from the board again"
    if len(data) < HEADER.size + 4:
        raise ValueError(f"{name}: {len(data)} bytes, shorter than header + CRC; {remedy}")
    magic, version, flags, meta_len, P, step, n_state = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError(f"{name}: magic {magic!r}, expected {MAGIC!r}: not a board model file")
    if version != VERSION:
        raise ValueError(f"{name}: unsupported format version {version} (this reads {VERSION})")
    if flags & ~AVERAGE:
        raise ValueError(f"{name}: flags {flags:#x}, expected 0 or {AVERAGE} (a weight average)")
    n_avg = flags & AVERAGE
    if meta_len > MAX_META or n_state > MAX_STATE:
        raise ValueError(f"{name}: header says {meta_len} meta bytes, {n_state} state vectors")
    pos = HEADER.size + meta_len + (-meta_len % 4)
    size = pos + 4 * P * (1 + n_state + n_avg) + 4
    if len(data) != size:
        raise ValueError(f"{name}: {len(data)} bytes, the header says {size}; {remedy}")
    if zlib.crc32(data[:-4]) != struct.unpack_from("<I", data, size - 4)[0]:
        raise ValueError(f"{name}: CRC mismatch (file corrupt or truncated); {remedy}")
    if any(data[HEADER.size + meta_len : pos]):
        raise ValueError(f"{name}: non-zero padding after meta")
    meta = json.loads(data[HEADER.size : HEADER.size + meta_len])
    if not isinstance(meta, dict) or "ops" not in meta or "n_features" not in meta:
        raise ValueError(f"{name}: meta lacks 'ops' or 'n_features'")
    vecs = np.frombuffer(data, dtype="<f4", count=P * (1 + n_state + n_avg), offset=pos)
    vecs = vecs.reshape(1 + n_state + n_avg, P).astype(np.float32)
    expected = build_from_ops(meta["ops"]).n_params
    if P != expected:
        raise ValueError(f"{name}: {P} parameters, its ops have {expected}")
    return BoardModel(meta, vecs[0], step, list(vecs[1 : 1 + n_state]),
                      vecs[1 + n_state] if n_avg else None)  # fmt: skip


def read_board(path: str | Path) -> BoardModel:
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{path}: not found") from None
    return parse_board(data, str(path))


def _write_atomic(path: Path, data: bytes) -> Path:
    return write_atomic(path, data)


def write_board(
    path: str | Path,
    meta: dict[str, Any],
    theta: np.ndarray,
    step: int = 0,
    state: list[np.ndarray] | tuple = (),
    average: np.ndarray | None = None,
) -> Path:
    """Write a TAFM file atomically (temp file + rename); returns the path."""
    return _write_atomic(Path(path), board_bytes(meta, theta, step, state, average))


def npz_to_board(npz: str | Path, out: str | Path) -> Path:
    """`model.npz` -> board float model file (theta as float32, step 0, no optimizer state)."""
    mf = load_model(npz)
    meta = board_meta({**mf.meta, "ops": mf.model.ops}, mf.norm_mean, mf.norm_std)
    return write_board(out, meta, mf.model.theta.astype(np.float32))


def board_to_npz(board: str | Path, out: str | Path, base: str | Path | None = None) -> Path:
    """Board float model file -> `model.npz` (docs/model-format.md). `base`: the model file the
    run started from, whose other meta (train, history, metrics) is kept; `meta["board"]`
    records the step count."""
    bm = read_board(board)
    meta: dict[str, Any] = {}
    if base is not None:
        meta, _, _, _ = read_npz(base)
        for key in ("format", "version", "ops"):
            meta.pop(key, None)
    meta.update({k: bm.meta[k] for k in META_KEYS if k in bm.meta})
    meta["board"] = {"step": bm.step}
    if "class_names" not in meta:
        raise ValueError(f"{board}: no class_names in its meta nor a --base model file")
    model = build_from_ops(bm.meta["ops"])
    model.theta[...] = bm.theta.astype(np.float64)
    F = int(bm.meta["n_features"])
    mean = np.asarray(bm.meta.get("norm_mean", [0.0] * F), dtype=np.float64)
    std = np.asarray(bm.meta.get("norm_std", [1.0] * F), dtype=np.float64)
    return save_model(out, model, mean, std, meta)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tinyattn.board.boardmodel",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("to-board", help="model.npz -> board float model file")
    a.add_argument("npz", type=Path)
    a.add_argument("out", type=Path)
    b = sub.add_parser("to-npz", help="board float model file -> model.npz")
    b.add_argument("board", type=Path)
    b.add_argument("out", type=Path)
    b.add_argument("--base", type=Path, help="the model.npz the run started from (its meta)")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "to-board":
            print(npz_to_board(args.npz, args.out))
        else:
            print(board_to_npz(args.board, args.out, args.base))
    except ValueError as exc:
        parser.exit(1, f"error: {exc}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
