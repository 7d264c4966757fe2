"""Host (CPython): the board's stream loop on the host, and the replay file it plays.

- `write_replay(path, steps, rate)` / `replay_bytes(steps, rate)`: the compact replay file
  (TASR, docs/protocol.md "Replay file") that device/attention_source.py's Replay plays: a
  16-byte header, then the steps as float32 little-endian.
- `host_decisions(blob, steps, hop, smooth, threshold)`: device/attention_stream.py's Stream
  run under CPython over the same steps: the host reference of every decision a board makes
  (the same file, integer-only from the int8 window to the smoothed score, so host and board
  agree on every field; tests/test_stream.py pins it against intref).
"""

from __future__ import annotations

import importlib
import struct
import sys
from pathlib import Path

import numpy as np

from tinyattn.atomic import atomic_open
from tinyattn.paths import device_dir

REPLAY_MAGIC = b"TASR"
REPLAY_VERSION = 1
REPLAY_HEADER = struct.Struct("<4sHHIf")  # magic, version, C, n_steps, rate_hz


def replay_bytes(steps: np.ndarray, rate: float = 0.0) -> bytes:
    """The replay file of `steps` [N, C] (as float32) at `rate` steps per second (0: no pacing)."""
    x = np.ascontiguousarray(steps, dtype="<f4")
    if x.ndim != 2 or x.shape[1] < 1 or not 0 < x.shape[1] < 65536:
        raise ValueError(f"steps must be [N, C], got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("steps must be finite (a replay file holds no NaN or inf)")
    head = REPLAY_HEADER.pack(REPLAY_MAGIC, REPLAY_VERSION, x.shape[1], x.shape[0], rate)
    return head + x.tobytes()


def write_replay(path: str | Path, steps: np.ndarray, rate: float = 0.0) -> Path:
    """Write the replay file of `steps` atomically (host/atomic.py)."""
    data = replay_bytes(steps, rate)
    with atomic_open(Path(path), "wb") as f:
        f.write(data)
    return Path(path)


def read_replay(path: str | Path) -> tuple[np.ndarray, float]:
    """(steps [N, C] float32, rate) of a replay file; ValueError naming what is wrong."""
    data = Path(path).read_bytes()
    if len(data) < REPLAY_HEADER.size:
        raise ValueError(f"{path}: {len(data)} bytes is no replay file (header is 16)")
    magic, version, C, n, rate = REPLAY_HEADER.unpack_from(data)
    if magic != REPLAY_MAGIC:
        raise ValueError(f"{path}: not a replay file (magic {magic!r}, expected b'TASR')")
    if version != REPLAY_VERSION:
        raise ValueError(f"{path}: unsupported replay version {version}")
    if len(data) != REPLAY_HEADER.size + 4 * n * C:
        raise ValueError(f"{path}: {n} steps of {C} need {16 + 4 * n * C} bytes, got {len(data)}")
    return np.frombuffer(data, "<f4", offset=REPLAY_HEADER.size).reshape(n, C), rate


def read_steps(path: str | Path) -> tuple[np.ndarray, float]:
    """(steps [N, C], rate) of a replay source: a .ts file's windows, their valid steps back to
    back (rate: the one its header records, else 0.0: none of its own), or a replay file
    (read_replay); ValueError (TSFormatError is one) or OSError naming what is wrong."""
    if Path(path).suffix.lower() == ".ts":
        from tinyattn.data.timeseries import load_ts

        d = load_ts(path, labels_required=False)
        steps = np.concatenate([x[:n] for x, n in zip(d.X, d.lengths, strict=True)])
        return steps, d.rate or 0.0
    return read_replay(path)


def device_modules():
    """(attention, attention_stream): the device modules imported under CPython."""
    path = str(device_dir())
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module("attention"), importlib.import_module("attention_stream")


def host_decisions(
    blob: str | Path | bytes,
    steps: np.ndarray,
    hop: int,
    smooth: int = 1,
    threshold: float | None = None,
) -> list[dict]:
    """Every decision of Stream(hop, smooth, threshold) over `steps` [N, C] (float32): dicts
    with step (steps pushed so far), logits, cls, prob, smoothed, score, uncertain."""
    attention, attention_stream = device_modules()
    model = attention.Model(str(blob) if isinstance(blob, Path) else blob, kernels="pure")
    stream = attention_stream.Stream(model, hop, smooth=smooth, threshold=threshold)
    x = np.ascontiguousarray(steps, dtype="<f4")
    if x.ndim != 2 or x.shape[1] != model.n_features:
        raise ValueError(f"steps must be [N, {model.n_features}], got shape {x.shape}")
    buf = x.tobytes()
    size = 4 * x.shape[1]
    out = []
    for i in range(x.shape[0]):
        if stream.push_block(buf[i * size : (i + 1) * size], 1):
            out.append(decision(stream, i + 1))
    return out


def decision(stream, step: int) -> dict:
    """The fields of the stream's last decision as plain Python values."""
    return {
        "step": step,
        "logits": list(stream.logits),
        "cls": stream.cls,
        "prob": list(stream.prob),
        "smoothed": stream.smoothed,
        "score": stream.score,
        "uncertain": stream.uncertain,
    }
