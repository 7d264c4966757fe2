# Host (CPython): `tinyattn export` — quantize a trained model and write the blob.
"""`tinyattn export [--model build/model.npz] [--out build/model.bin] [--float32] [--json]
[--csv FILE [--target COL]]`

Reads the trained model (docs/model-format.md), quantizes it to int8 calibrated on its train
split (docs/quantization.md) — or keeps float32 weights with `--float32` — writes the blob
atomically (docs/blob-format.md), reads it back, and evaluates it on the dataset named in the
model's meta: float (the trained float64 model) vs int8 (`tinyattn.intref`) accuracy on the
test split, the float32 blob path (`tinyattn.floatref`), and the int8/float argmax agreement
over every sample. `--json` prints one JSON object as the last line of stdout. A model trained
with `tinyattn train --csv FILE` finds its CSV again through the path its meta stores; `--csv`
overrides it (e.g. after moving the file).

Library entry point: `export_model(model_path, out_path, float32=False) -> dict`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from .blob import Blob, read_blob, write_blob
from .cli import CLIError
from .floatref import NpzModel, forward_npz, load_npz, run_float
from .intref import quantize_input, run_int8
from .paths import BUILD_DIR
from .quantize import QuantizeError, float32_spec, quantize


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=str(BUILD_DIR / "model.npz"),
        help="trained model file (default: %(default)s)",
    )
    parser.add_argument(
        "--out", default=str(BUILD_DIR / "model.bin"), help="blob to write (default: %(default)s)"
    )
    parser.add_argument(
        "--float32", action="store_true", help="store unquantized float32 weights (no int8 path)"
    )
    parser.add_argument(
        "--csv",
        metavar="FILE",
        help="the CSV the model was trained on with 'tinyattn train --csv' "
        "(needed for calibration when the model is not on a vendored dataset)",
    )
    parser.add_argument("--target", metavar="COL", help="label column of --csv")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object with the figures as the last line",
    )


def load_data(model: NpzModel, csv: str | None = None, target: str | None = None):
    """`(X [N, F] raw float64, y [N])`: `csv` if given, else the CSV the model was trained on
    (`meta["csv"]`, `meta["target"]`, written by `tinyattn train --csv`), else the vendored
    dataset named in the meta."""
    from .data import DATASETS, load_csv, load_dataset

    name = model.meta.get("dataset", "")
    try:
        if csv is not None:
            ds = load_csv(csv, target=target)
        elif model.meta.get("csv"):
            ds = load_csv(model.meta["csv"], target=model.meta.get("target"))
        elif name in DATASETS:
            ds = load_dataset(name)
        else:
            raise CLIError(
                f"the model was trained on {name!r}, not a vendored dataset; pass the same CSV "
                "with --csv FILE (and --target COL if it was given to 'tinyattn train')"
            )
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if ds.class_names != model.class_names or ds.n_features != len(model.norm_mean):
        raise CLIError(
            f"dataset {name!r} has classes {ds.class_names} and {ds.n_features} features, the "
            f"model {model.class_names} and {len(model.norm_mean)}; re-train on this dataset"
        )
    return ds.X, ds.y


def _split(model: NpzModel, n: int) -> tuple[np.ndarray, np.ndarray]:
    train = model.meta.get("train", {})
    train_idx = np.asarray(train.get("train_idx") or range(n), dtype=np.int64)
    test_idx = np.asarray(train.get("test_idx") or [], dtype=np.int64)
    return train_idx, test_idx


def _accuracy(logits: np.ndarray, y: np.ndarray, idx: np.ndarray) -> float | None:
    if len(idx) == 0:
        return None
    return float(np.mean(np.argmax(logits[idx], axis=1) == y[idx]))


def layer_table(blob: Blob) -> list[dict[str, Any]]:
    """One row per requantization site: op, what, scales, multipliers, shift."""
    rows: list[dict[str, Any]] = []
    for k, op in enumerate(blob.ops):
        ip, fp, t = op.iparams, op.fparams, op.tensors
        if op.kind == "dense":
            rows.append(
                {
                    "op": k,
                    "what": f"dense {ip['in']}->{ip['out']}",
                    "s_in": fp["s_in"],
                    "s_out": fp["s_out"],
                    "shift": ip["shift"],
                    "M_min": int(t["m"].min()),
                    "M_max": int(t["m"].max()),
                    "act": [ip["act_min"], ip["act_max"]],
                }
            )
        elif op.kind == "attention":
            s_of = {"q": "s_q", "k": "s_k", "v": "s_v", "o": "s_out"}
            for p in "qkvo":
                s_in = fp["s_ctx"] if p == "o" else fp["s_in"]
                rows.append(
                    {
                        "op": k,
                        "what": f"attention W{p}",
                        "s_in": s_in,
                        "s_out": fp[s_of[p]],
                        "shift": ip[f"shift_{p}"],
                        "M_min": int(t[f"m{p}"].min()),
                        "M_max": int(t[f"m{p}"].max()),
                    }
                )
            rows.append(
                {
                    "op": k,
                    "what": "attention softmax idx",
                    "s_in": None,
                    "s_out": None,
                    "shift": ip["shift_sm"],
                    "M_min": ip["M_sm"],
                    "M_max": ip["M_sm"],
                }
            )
            rows.append(
                {
                    "op": k,
                    "what": "attention ctx",
                    "s_in": fp["s_v"],
                    "s_out": fp["s_ctx"],
                    "shift": ip["shift_ctx"],
                    "M_min": ip["M_ctx"],
                    "M_max": ip["M_ctx"],
                }
            )
        elif op.kind == "myattn":
            explicit = ip["mode"] == 0
            sites = [
                (
                    "query " + ("Q" if explicit else "mean"),
                    fp["s_in"],
                    fp["s_qa"],
                    "shift_q",
                    "M_q",
                ),
                ("scores Wa", fp["s_qk"], fp["s_sc"], "shift_a", "ma"),
                ("softmax idx", None, None, "shift_sm", "M_sm"),
                ("applied", fp["s_in"], fp["s_qa"], "shift_ap", "M_ap"),
                ("combine Wc", fp["s_qa"], fp["s_out"], "shift_c", "mc"),
            ]
            for what, s_in, s_out, shift, m in sites:
                M = t[m] if m in t else np.array([ip[m]])
                rows.append(
                    {
                        "op": k,
                        "what": f"myattn {what}",
                        "s_in": s_in,
                        "s_out": s_out,
                        "shift": ip[shift],
                        "M_min": int(M.min()),
                        "M_max": int(M.max()),
                    }
                )
        elif op.kind == "avgpool":
            rows.append(
                {
                    "op": k,
                    "what": f"avgpool over {ip['S']}",
                    "s_in": None,
                    "s_out": None,
                    "shift": ip["shift"],
                    "M_min": ip["M"],
                    "M_max": ip["M"],
                }
            )
    return rows


def export_model(
    model_path: str | Path,
    out_path: str | Path,
    float32: bool = False,
    csv: str | None = None,
    target: str | None = None,
) -> dict[str, Any]:
    """Quantize (or not), write, read back and evaluate; returns the report dict."""
    model_path, out_path = Path(model_path), Path(out_path)
    if not model_path.is_file():
        raise CLIError(
            f"{model_path} not found; train first: 'make export' trains and then exports, or "
            f"run '.venv/bin/tinyattn train --out {model_path}'"
        )
    try:
        model = load_npz(model_path)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    X, y = load_data(model, csv, target)
    train_idx, test_idx = _split(model, len(y))
    try:
        spec = float32_spec(model) if float32 else quantize(model, X[train_idx])
    except QuantizeError as exc:
        raise CLIError(f"{model_path}: {exc}") from None
    size = write_blob(out_path, spec)
    blob = read_blob(out_path.read_bytes(), source=str(out_path))

    logits_float = forward_npz(model, model.normalize(X))  # (N, C) float64
    logits_f32 = run_float(blob, X)  # (N, C) float32 from the blob
    report: dict[str, Any] = {
        "blob": str(out_path),
        "bytes": size,
        "format_version": blob.version,
        "crc32": f"0x{blob.crc32:08x}",
        "quantized": blob.quantized,
        "dataset": model.meta.get("dataset"),
        "n_samples": len(y),
        "test_samples": len(test_idx),
        "float_test_accuracy": _accuracy(logits_float, y, test_idx),
        "blob_float32_test_accuracy": _accuracy(logits_f32, y, test_idx),
        "blob_float32_max_abs_logit_diff": float(np.abs(logits_f32 - logits_float).max()),
    }
    if blob.quantized:
        logits_q = run_int8(blob, quantize_input(blob, X))  # (N, C) int64, asserts the budget
        agree = int(np.sum(np.argmax(logits_q, axis=1) == np.argmax(logits_float, axis=1)))
        report.update(
            {
                "int8_test_accuracy": _accuracy(logits_q, y, test_idx),
                "int8_float_argmax_agreement": agree / len(y),
                "int8_float_argmax_agree_count": agree,
                "int8_max_abs_logit_error": float(
                    np.abs(logits_q * blob.logit_scale - logits_float).max()
                ),
                "input_scale": blob.input_scale,
                "logit_scale": blob.logit_scale,
                "layers": layer_table(blob),
            }
        )
    else:
        report.update({"int8_test_accuracy": None, "int8_float_argmax_agreement": None})
    return report


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def _acc(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def print_report(report: dict[str, Any]) -> None:
    kind = "int8" if report["quantized"] else "float32"
    print(
        f"wrote {report['blob']}: {report['bytes']} bytes ({kind}, format version "
        f"{report['format_version']}, CRC32 {report['crc32']})"
    )
    if report["quantized"]:
        print(f"input scale {report['input_scale']:.6g}, logit scale {report['logit_scale']:.6g}")
        print(f"{'op':>3}  {'requantization':<24}{'s_in':>11}{'s_out':>11}{'shift':>6}  M")
        for row in report["layers"]:
            M = (
                str(row["M_min"])
                if row["M_min"] == row["M_max"]
                else f"{row['M_min']}..{row['M_max']}"
            )
            print(
                f"{row['op']:>3}  {row['what']:<24}{_fmt(row['s_in']):>11}"
                f"{_fmt(row['s_out']):>11}{row['shift']:>6}  {M}"
            )
    n_test = report["test_samples"]
    print(
        f"test accuracy ({n_test} samples of {report['dataset']}): "
        f"float {_acc(report['float_test_accuracy'])}, "
        f"int8 {_acc(report['int8_test_accuracy'])}, "
        f"float32 blob path {_acc(report['blob_float32_test_accuracy'])}"
    )
    if report["quantized"]:
        print(
            f"int8/float argmax agreement: {report['int8_float_argmax_agree_count']}/"
            f"{report['n_samples']} samples; max |logit error| "
            f"{report['int8_max_abs_logit_error']:.4g}"
        )


def main(args: argparse.Namespace) -> int:
    report = export_model(args.model, args.out, args.float32, args.csv, args.target)
    print_report(report)
    if args.json:
        print(json.dumps(report, separators=(",", ":")))
    return 0
