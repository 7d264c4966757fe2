# Host (CPython): generator of the golden blob and golden integer outputs in tests/golden/.
"""Make (or check) `tests/golden/tiny_v{FORMAT_VERSION}.bin` and `.json`.

The golden model is small, synthetic and fully deterministic — it does not depend on training,
so it changes only when the blob format or the integer math changes:

    dense(3->8) -> relu -> reshape [2, 4] -> attention(E=4, H=2) -> avgpool -> dense(4->3)

Every weight is a multiple of 1/8 and every calibration input a multiple of 1/4 of a standard
deviation, so the float64 calibration is exact up to the softmax (no dependence on BLAS
summation order). The JSON holds the golden inputs (raw features), their int8 inputs `xq`, the
integer logits from `tinyattn.intmodel.intref`, and float32 logits from
`tinyattn.intmodel.floatref`.

    python -m tinyattn.tools.dev.make_golden          # write the files of FORMAT_VERSION
    python -m tinyattn.tools.dev.make_golden --check  # exit 1 if they differ from the code's

Changing the format or the math changes these files: bump `FORMAT_VERSION`
(tinyattn.intmodel.blob, device/attention.py, docs/blob-format.md) and generate new files — the old
version's files stay as they are. tests/test_golden.py enforces this.
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from pathlib import Path

import numpy as np

from tinyattn.intmodel.blob import FORMAT_VERSION, blob_bytes, read_blob
from tinyattn.intmodel.floatref import run_float
from tinyattn.intmodel.intref import quantize_input, run_int8
from tinyattn.intmodel.quantize import quantize
from tinyattn.learn.model import ModelFile
from tinyattn.paths import REPO_DIR

GOLDEN_DIR = REPO_DIR / "tests" / "golden"
CLASS_NAMES = ["low", "mid", "high"]
NORM_MEAN = np.array([0.5, -1.0, 2.0])
NORM_STD = np.array([0.5, 2.0, 0.25])
OPS = [
    {"op": "dense", "in": 3, "out": 8, "bias": True},
    {"op": "relu"},
    {"op": "reshape", "shape": [2, 4]},
    {"op": "attention", "embed_dim": 4, "num_heads": 2, "bias": True},
    {"op": "avgpool"},
    {"op": "dense", "in": 4, "out": 3, "bias": True},
]


def golden_model() -> ModelFile:
    """Weights `((3o + 4i + 3k) % 17 - 8) / 8`, biases `((3o + k) % 9 - 4) / 16`, k = tensor no."""
    shapes: list[tuple[str, tuple[int, ...]]] = [("p0.W", (8, 3)), ("p0.b", (8,))]
    shapes += [(f"p3.W{p}", (4, 4)) for p in "qkvo"] + [(f"p3.b{p}", (4,)) for p in "qkvo"]
    shapes += [("p5.W", (3, 4)), ("p5.b", (3,))]
    params = {}
    for k, (name, shape) in enumerate(shapes):
        if len(shape) == 2:
            o, i = np.indices(shape)
            params[name] = ((3 * o + 4 * i + 3 * k) % 17 - 8) / 8.0
        else:
            o = np.arange(shape[0])
            params[name] = ((3 * o + k) % 9 - 4) / 16.0
    meta = {
        "format": "tinyattn-model",
        "version": 1,
        "model": "golden-tiny",
        "dataset": "synthetic",
        "feature_names": ["f0", "f1", "f2"],
        "class_names": CLASS_NAMES,
        "ops": OPS,
    }
    return ModelFile.from_params(meta, params, NORM_MEAN.copy(), NORM_STD.copy())


def calibration_inputs() -> np.ndarray:
    """16 raw rows: `mean + std · (((5n + 3f) % 13) - 6) / 4` (within ±1.5 std)."""
    n, f = np.indices((16, 3))
    return NORM_MEAN + NORM_STD * ((((5 * n + 3 * f) % 13) - 6) / 4.0)


def golden_inputs() -> np.ndarray:
    """Raw rows: the mean, ±1 std, mixed, a row that saturates the int8 input, zeros."""
    z = np.array(
        [
            [0.0, 0.0, 0.0],  # mean: xq = 0
            [1.0, 1.0, 2.25],  # +1 std each
            [0.0, -3.0, 1.75],  # -1 std each
            [0.75, -2.0, 2.5],  # mixed
            [100.0, -100.0, 100.0],  # far outside: xq saturates at 127 / -128
            [0.25, 0.5, 1.875],
        ]
    )
    z[0] = NORM_MEAN  # row 0 is exactly the mean
    return z


def build() -> tuple[bytes, dict]:
    """The golden blob's bytes and the golden outputs."""
    model = golden_model()
    data = blob_bytes(quantize(model, calibration_inputs()))
    blob = read_blob(data)
    X = golden_inputs()
    xq = quantize_input(blob, X)
    logits_q = run_int8(blob, xq)
    logits_f = run_float(blob, X)
    outputs = {
        "format_version": FORMAT_VERSION,
        "blob": f"tiny_v{FORMAT_VERSION}.bin",
        "bytes": len(data),
        "crc32": f"0x{zlib.crc32(data[:-4]):08x}",
        "class_names": CLASS_NAMES,
        "logit_scale": blob.logit_scale,
        "inputs": X.tolist(),
        "xq": xq.astype(int).tolist(),
        "logits_q": logits_q.astype(int).tolist(),
        "argmax": logits_q.argmax(axis=1).astype(int).tolist(),
        "float32_logits": [[float(v) for v in row] for row in logits_f],
        "float32_tolerance": 1e-4,
    }
    return data, outputs


def dumps(outputs: dict) -> str:
    """JSON with one key per line and one matrix row per line (readable in a diff)."""
    lines = []
    for key, value in outputs.items():
        if isinstance(value, list) and value and isinstance(value[0], list):
            rows = ",\n    ".join(json.dumps(row) for row in value)
            lines.append(f'  "{key}": [\n    {rows}\n  ]')
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def paths(version: int = FORMAT_VERSION) -> tuple[Path, Path]:
    return GOLDEN_DIR / f"tiny_v{version}.bin", GOLDEN_DIR / f"tiny_v{version}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    data, outputs = build()
    bin_path, json_path = paths()
    text = dumps(outputs)
    if args.check:
        same = bin_path.is_file() and bin_path.read_bytes() == data
        same = same and json_path.is_file() and json.loads(json_path.read_text()) == outputs
        print(f"{bin_path.name}, {json_path.name}: {'match' if same else 'DIFFER'}")
        return 0 if same else 1
    if bin_path.exists() and bin_path.read_bytes() != data:
        print(
            f"{bin_path} exists with other bytes: the format or the math changed. Bump "
            "FORMAT_VERSION instead of overwriting the golden files of this version.",
            file=sys.stderr,
        )
        return 1
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    bin_path.write_bytes(data)
    json_path.write_text(text)
    print(f"wrote {bin_path} ({len(data)} bytes) and {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
