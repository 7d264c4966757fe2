# Host (CPython): generator of tests/golden/trained/, the trained models' integer outputs.
"""Make (or check) `tests/golden/trained/`: for Iris, Wine, BasicMotions and JapaneseVowels,
the blob `tinyattn train --dataset NAME` + `tinyattn export` gave when it was written, and the
int8 path's outputs on every row or window of the dataset (TRAIN and TEST of the archive
problems): the int8 inputs `xq` and the integer logits (`tinyattn.intmodel.intref`).

They pin the integer path across refactors (issue 17's "int8 logits bit-identical to before"):
a blob's int8 outputs are integer arithmetic, the same on every machine, so
tests/test_trained_golden.py checks them on any machine and under every kernel set. The model
files (`NAME.npz`) are kept beside them so that a refactor of export can be checked by hand
(`python -m tinyattn.tools.dev.make_trained_golden --check-export`, which re-exports them and
compares the bytes: export calibrates in float through BLAS, so the bytes are only expected to
match on the machine and NumPy that wrote them — not a test).

    python -m tinyattn.tools.dev.make_trained_golden                # train, export, write (~1 min)
    python -m tinyattn.tools.dev.make_trained_golden --check-export  # re-export them, compare
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from tinyattn.tools.emulated_boards import GOLDEN, NAMES  # what the boards run


def samples(name: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(X, lengths): Iris/Wine rows [N, F] (lengths None); the archive's TRAIN then TEST
    windows [N, T', C] with their lengths (JapaneseVowels' 29-step TEST window among them)."""
    from tinyattn.data.tabular import load_dataset
    from tinyattn.data.timeseries import TS_DATASETS, load_ts_dataset, pad_windows

    if name not in TS_DATASETS:
        return np.asarray(load_dataset(name).rows, np.float64), None
    parts = [load_ts_dataset(name, split) for split in ("train", "test")]
    T = max(p.X.shape[1] for p in parts)
    X = np.concatenate([pad_windows(p.X, p.lengths, T) for p in parts])
    return X, np.concatenate([p.lengths for p in parts]).astype(np.int64)


def outputs(blob_bytes: bytes, name: str) -> dict[str, np.ndarray]:
    """`xq` and `logits_q` of the int8 path on the dataset's samples (host reference)."""
    from tinyattn.intmodel.blob import read_blob
    from tinyattn.intmodel.intref import quantize_input, run_int8

    blob = read_blob(blob_bytes)
    X, lengths = samples(name)
    if lengths is None:
        xq = quantize_input(blob, X)
        return {"xq": xq, "logits_q": run_int8(blob, xq).astype(np.int32)}
    xq = quantize_input(blob, X, lengths)
    T = blob.ops[0].iparams["T"]
    steps = np.minimum(lengths, T)
    return {"xq": xq, "logits_q": run_int8(blob, xq, steps).astype(np.int32), "steps": steps}


def make() -> None:
    from tinyattn.cli import main as cli

    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        npz, blob = GOLDEN / f"{name}.npz", GOLDEN / f"{name}.bin"
        for argv in (["train", "--dataset", name, "--out", str(npz)],
                     ["export", "--model", str(npz), "--out", str(blob)]):  # fmt: skip
            if cli(argv) != 0:
                sys.exit(f"tinyattn {' '.join(argv)} failed")
        np.savez_compressed(GOLDEN / f"{name}_int8.npz", **outputs(blob.read_bytes(), name))
        print(f"{name}: {blob.stat().st_size} B blob, outputs written")


def check_export() -> int:
    from tinyattn.intmodel.export import export_model

    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in NAMES:
            out = Path(tmp) / f"{name}.bin"
            export_model(GOLDEN / f"{name}.npz", out)
            same = out.read_bytes() == (GOLDEN / f"{name}.bin").read_bytes()
            print(f"{name}: re-exported blob {'identical' if same else 'DIFFERS'}")
            bad += not same
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check-export", action="store_true",
        help="re-export the saved model files and compare the blobs' bytes",
    )  # fmt: skip
    args = parser.parse_args()
    if args.check_export:
        return check_export()
    make()
    return 0


if __name__ == "__main__":
    sys.exit(main())
