"""Host (CPython): the heap a blob needs on a board — the one estimate every command uses.

The model search's budget, `flash`'s warning, `flash --app`'s refusal and parity's message
all ask `heap_needed(blob, context)`: the free heap (bytes, at the REPL, runtime as .mpy) with
which the server serves the blob (`"server"`: parity, predict) or the app runs it with its
Stream (`"app"`).

How: the device runtime itself is loaded under CPython (`features`), and what it allocates
for the model is counted: array bytes, arrays and other objects (lists, tuples, memoryviews,
instances), and the same for its Stream. Three linear fits turn counts into heap:
`MODEL_FIT` and `STREAM_FIT` to what loading the model and making its Stream allocate on the
MicroPython unix port (gc.mem_alloc deltas), and `RUNTIME_FIT` to the rest of the least free
heap with which parity passes, or the app makes a decision (bisection of the virtual board's
heap), as a function of the values of one sample (the server's line buffer and batches, the
float input). tools/dev/heap_fit.py measures all three on the trained golden models and one model
of each shape the search picks and fits them; tests/test_heap.py keeps the model's estimate
at or above every measured load and a context's need within `HEAP_ERROR` of every measured
need. The unix port is a 64-bit build: a 32-bit board's objects are smaller.
"""

from __future__ import annotations

import array
from typing import Any

# Fitted by tools/dev/heap_fit.py (its --fit) to tests/golden/heap_measured.json, each a linear
# function: `MODEL_FIT` (intercept, per array byte, per array, per object, per source byte of
# the op kinds' own modules: kind_modules) and `STREAM_FIT` (intercept, per array byte, per
# array, per object)
# of what loading the model and making its Stream allocate on the unix port (the runtime
# imported before), `RUNTIME_FIT` (intercept, per value of one sample) of the rest of the
# least free heap with which parity passes ("server") or the app decides ("app").
MODEL_FIT = (7124.29, 1.01, 37.19, 88.74, 0.1)
STREAM_FIT = (942.96, 1.08, 0.0, 44.91)
RUNTIME_FIT = {"server": (50984.62, 22.48), "app": (48441.84, 7.97)}
# `model_heap` adds the largest shortfall of MODEL_FIT + STREAM_FIT on the measured loads (the
# search's budget holds an upper bound); a context's need is a least heap found by bisection,
# which a heap's fragmentation makes uneven (a model may load at one size and not at a larger
# one): `heap_needed` is the fit itself, within HEAP_ERROR of every measured need
# (tests/test_heap.py), and flash --app refuses a board only below that band
MODEL_MARGIN = 768
HEAP_ERROR = 0.16
# .py sources: the compiler's transient comes first; Iris's server did not start in 100 KiB
# (the virtual board, 2026-12-01), so no blob needs less than this free
PY_LEAST = 110_000
def _walk(root: Any, seen: set[int]) -> tuple[int, int, int, int]:
    """(bytes, arrays, objects, the largest array's bytes) reachable from `root` and not in
    `seen` (which it extends): array.array, bytes and bytearray are arrays (their bytes
    counted); lists, tuples, dicts, memoryviews and instances are objects; numbers, strings
    and functions are neither."""
    stack, nbytes, arrays, objects, largest = [root], 0, 0, 0, 0
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, (array.array, bytes, bytearray)):
            size = len(o) * (o.itemsize if isinstance(o, array.array) else 1)
            nbytes, arrays, largest = nbytes + size, arrays + 1, max(largest, size)
        elif isinstance(o, memoryview):
            objects += 1
        elif isinstance(o, dict):
            objects += 1
            stack.extend(o.values())
        elif isinstance(o, (list, tuple)):
            objects += 1
            stack.extend(o)
        elif hasattr(o, "__dict__") and not isinstance(o, type) and not callable(o):
            objects += 1
            stack.extend(vars(o).values())
    return nbytes, arrays, objects, largest


def features(blob: bytes, hop: int = 10) -> dict[str, Any]:
    """What the estimate reads of a blob, from the device runtime loading it under CPython:
    the model's (bytes, arrays, objects, source bytes of its op kinds' modules) (`model`), its
    Stream's and the app's read buffer
    (`stream`; None for a row model, which never streams), and the values of one sample
    (`values`: a window's T·C, a row's F)."""
    from tinyattn.board.stream import device_modules

    attention, attention_stream = device_modules()
    model = attention.Model(bytes(blob), kernels="pure")
    seen: set[int] = set()
    *counts, largest = _walk(model, seen)
    shared_bytes, shared_arrays = _shared_int8(attention, blob)
    counts[0] -= shared_bytes
    counts[1] -= shared_arrays
    counts.append(kind_modules(blob))
    out: dict[str, Any] = {"model": tuple(counts), "stream": None, "largest": largest}
    out["values"] = model.steps * model.n_features if model.seq else model.n_features
    if model.seq and model.steps > 1:
        s_bytes, s_arrays, s_objects, _ = _walk(attention_stream.Stream(model, hop), seen)
        out["stream"] = (s_bytes + 4 * model.n_features * hop, s_arrays + 1, s_objects)
    return out


def _shared_int8(attention: Any, blob: bytes) -> tuple[int, int]:
    """(bytes, arrays) of a seq-attn model's int8 program buffers that a board does not
    allocate: its int8 kernels (viper, thumb: raw 32-bit words) run in the float program's
    buffers, all but the int8 input window (device/attention_build_seq.py `shared`), while
    the pure kernels the walk loads under CPython have their own. Counted as the board
    allocates them, the fit's bytes are what a board holds (it was bent to 0.6 per byte by
    this double count). (0, 0) for any other model."""
    read = attention.read_blob(bytes(blob), lean=True)
    if not read.quantized or read.ops[0].code != 7:
        return 0, 0
    import attention_build_seq  # the device module (device_modules put it on the path)

    bufs, sc = attention_build_seq.buffers(read.ops, True, False)[0]
    own = {id(a): a for a in (*bufs, *sc[:6])}  # sc[4] is sc[0]; sc[6] the input window
    return sum(len(a) * a.itemsize for a in own.values()), len(own)


def kind_modules(blob: bytes) -> int:
    """Source bytes of the device modules of the blob's op kinds (`attention_*_<kind>.py`:
    a conv stem's checks and builder, a rocket op's checks, builder and pure and viper
    kernels), which the runtime imports for that blob alone: their code sits on the heap
    beside the model's arrays. The Thumb assembler ones (`attention_thumb_<kind>.py`) are
    not counted: on a Thumb port the thumb set imports them instead of the viper ones (the
    fit was made with the viper ones), and elsewhere they are not there."""
    from tinyattn.intmodel.blob import read_blob
    from tinyattn.paths import device_dir

    kinds = {op.kind for op in read_blob(bytes(blob)).ops}
    return sum(p.stat().st_size for k in sorted(kinds)
               for p in device_dir().glob(f"attention_*_{k}.py")
               if not p.name.startswith("attention_thumb_"))  # fmt: skip


def _linear(fit: tuple[float, ...], counts: tuple[int, ...]) -> int:
    return int(fit[0] + sum(c * n for c, n in zip(fit[1:], counts, strict=True)))


def model_heap(f: dict[str, Any], stream: bool = True) -> int:
    """The heap the runtime allocates for the model, and (`stream`) for its Stream when it
    streams (a window model; a row model never does), an upper bound (MODEL_MARGIN): what the
    search's budget counts."""
    heap = _linear(MODEL_FIT, f["model"]) + MODEL_MARGIN
    return heap + (_linear(STREAM_FIT, f["stream"]) if stream and f["stream"] else 0)


def from_features(f: dict[str, Any], context: str = "server") -> int:
    """Free heap (bytes, at the REPL) the blob of features `f` needs in `context`."""
    heap = _linear(MODEL_FIT, f["model"])
    heap += _linear(RUNTIME_FIT[context], (f["values"],))
    if context == "app":
        heap += _linear(STREAM_FIT, f["stream"])
    return heap


def heap_needed(blob: bytes, context: str = "server", as_mpy: bool = True) -> int:
    """Free heap (bytes, at the REPL) the blob needs in `context`: "server" (parity,
    predict) or "app" (`flash --app`: its model, Stream and source); `as_mpy` False: the
    runtime as .py sources, which the board compiles first (PY_LEAST)."""
    if context not in RUNTIME_FIT:
        raise ValueError(f"context {context!r}: one of {', '.join(RUNTIME_FIT)}")
    f = features(blob)
    if context == "app" and f["stream"] is None:
        raise ValueError("a row model does not stream: no app")
    need = from_features(f, context)
    return need if as_mpy else max(need, PY_LEAST)


def check_table(measured: dict) -> str:
    """Measured vs estimated, per model and context (tools/dev/heap_fit.py prints it)."""
    lines = [f"{'model':16s} {'context':7s} {'measured':>9s} {'estimate':>9s} {'over':>6s}"]
    for name, row in measured["models"].items():
        for context in RUNTIME_FIT:
            if context in row:
                est = from_features(row["features"], context)
                over = est / row[context] - 1
                lines.append(f"{name:16s} {context:7s} {row[context]:9d} {est:9d} {over:6.1%}")
    return "\n".join(lines)
