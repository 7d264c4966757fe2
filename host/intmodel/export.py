# Host (CPython): `tinyattn export` — quantize a trained model and write the blob.
"""`tinyattn export [--model build/model.npz] [--out build/model.bin] [--float32] [--json]
[--csv FILE [--target COL]]`

Reads the trained model (docs/model-format.md), quantizes it to int8 calibrated on its train
split (docs/quantization.md) — or keeps float32 weights with `--float32` — writes the blob
atomically (docs/blob-format.md), reads it back, and evaluates it on the dataset named in the
model's meta: float (the trained float64 model) vs int8 (`tinyattn.intmodel.intref`) accuracy on
the test split, the float32 blob path (`tinyattn.intmodel.floatref`), and the int8/float argmax
agreement over every sample. `--json` prints one JSON object as the last line of stdout. A model
trained
with `tinyattn train --csv FILE` finds its CSV again through the path its meta stores; `--csv`
overrides it (e.g. after moving the file).

A sequence model (`seq-attn`) is calibrated on its TRAIN windows and evaluated on the TEST file
(the archive's fixed split), both found through its meta (`model.ts_data_meta`: a vendored
`dataset`, or `ts_train`/`ts_test` paths); a model trained with `--ts` and no `--test` is
calibrated on the TRAIN windows it trained on and evaluated on the part of TRAIN it held out
(`meta["train"]["train_idx"]`/`["test_idx"]`, `test_split` in the report). A TEST window longer
than the model's T is classified on its last T steps (the long window rule,
`floatref.fit_to_model`, as on the board), counted in the report (`test_windows_truncated`).
Every report has `macs`: multiply-accumulates of one full-length inference, counted from the
blob's ops.

Library entry point: `export_model(model_path, out_path, float32=False) -> dict`; the Python
API (tinyattn.estimator) makes its blob with the same `samples_data` and `model_spec`.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinyattn.data.windows import Windows
from tinyattn.errors import CLIError
from tinyattn.intmodel.blob import Blob, QuantModelSpec, read_blob, write_blob
from tinyattn.intmodel.floatref import fit_to_model, forward_model, run_float
from tinyattn.intmodel.intref import quantize_input, run_int8
from tinyattn.intmodel.quantize import QuantizeError, float32_spec, quantize
from tinyattn.learn.model import ModelFile, load_model
from tinyattn.paths import BUILD_DIR

FLOAT32_BLOB = "model-float32.bin"  # export --float32's default --out, beside model.bin


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=str(BUILD_DIR / "model.npz"),
        help="trained model file (default: %(default)s)",
    )
    parser.add_argument(
        "--out", default=None,
        help=f"blob to write (default: {BUILD_DIR / 'model.bin'}; with --float32 "
        f"{BUILD_DIR / FLOAT32_BLOB}, so the int8 blob that make's targets use is kept)",
    )  # fmt: skip
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


def load_data(model: ModelFile, csv: str | None = None, target: str | None = None) -> Windows:
    """The rows (windows of one step, `X [N, 1, F]` raw float64): `csv` if given, else the
    CSV the model was trained on (`meta["csv"]`, `meta["target"]`, written by `tinyattn train
    --csv`), else the vendored dataset named in the meta."""
    from tinyattn.data.tabular import DATASETS, load_csv, load_dataset

    name = model.meta.get("dataset", "")
    try:
        if csv is not None:  # a CSV moved or copied: the label column the model remembers
            ds = load_csv(csv, target=target or model.meta.get("target"))
            source = str(csv)
        elif model.meta.get("csv"):
            source = str(model.meta["csv"])
            if not Path(source).is_file():
                raise CLIError(
                    f"{source}: not found; export calibrates the int8 path on the rows the "
                    "model was trained on: give that CSV where it is now with --csv FILE"
                )
            ds = load_csv(source, target=model.meta.get("target"))
        elif name in DATASETS:
            ds, source = load_dataset(name), f"dataset {name!r}"
        else:
            raise CLIError(
                f"the model was trained on {name!r}, not a vendored dataset; pass the same CSV "
                "with --csv FILE (and --target COL if it was given to 'tinyattn train')"
            )
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if ds.class_names != model.class_names or ds.n_features != len(model.norm_mean):
        # name the data that was read (the --csv file), and what the model was trained on
        trained = f" (trained on {name!r})" if name else ""
        raise CLIError(
            f"{source} has classes {ds.class_names} and {ds.n_features} features, the model"
            f"{trained} has {model.class_names} and {len(model.norm_mean)}; pass the data it was "
            "trained on, or re-train on this data"
        )
    return ds


def load_seq_data(model: ModelFile):
    """`(train, test)` TSDatasets of a seq model from its meta (`ts_train`/`ts_test` paths,
    else the vendored `dataset`); test is None when no TEST file is recorded."""
    from tinyattn.data.timeseries import TS_DATASETS, load_ts, load_ts_dataset

    meta, name = model.meta, str(model.meta.get("dataset", ""))
    for key in ("ts_train", "ts_test"):
        if meta.get(key) and not Path(meta[key]).is_file():
            raise CLIError(
                f"{meta[key]}: not found; export calibrates the int8 path on the model's TRAIN "
                "windows and reports on its TEST ones: put the file back there (the model "
                "file keeps its absolute path), or re-train with 'tinyattn train --ts FILE'"
            )
    try:
        if meta.get("ts_train"):
            train = load_ts(meta["ts_train"], name=name)
            test = load_ts(meta["ts_test"], name=name) if meta.get("ts_test") else None
        elif name.lower() in TS_DATASETS:
            train, test = load_ts_dataset(name, "train"), load_ts_dataset(name, "test")
        else:
            raise CLIError(
                f"the seq model's meta names no data (dataset {name!r}, no ts_train); "
                "re-train it with 'tinyattn train --dataset NAME' or '--ts TRAIN.ts'"
            )
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    train = train.in_class_order(model.class_names)  # listed in another order: by name
    test = test.in_class_order(model.class_names) if test is not None else None
    for ds in (train, test):
        if ds is not None and (
            ds.class_names != model.class_names or ds.n_channels != len(model.norm_mean)
        ):
            raise CLIError(
                f"{ds.source}: classes {ds.class_names} and {ds.n_channels} channels, the model "
                f"{model.class_names} and {len(model.norm_mean)}; re-train on this data"
            )
    return train, test


def blob_macs(blob) -> int:
    """Multiply-accumulates of one inference of the blob's ops (seq: a full window of T
    steps, S tokens): dense `in·out` per row, attention `4·S·E² + 2·S²·E` (projections,
    scores, context), feed-forward `2·S·E·F`, pooling `S·E`, myattn its two Linears and
    the weighted sum, conv `ceil(S/stride)·F·(C/groups)·K` (as seqmodel.macs)."""
    total, rows = 0, 1  # rows: tokens a token-wise op runs on
    for op in blob.ops:
        ip = op.iparams
        if op.kind == "embed":
            rows = -(-ip["T"] // ip["P"])
            total += rows * ip["P"] * ip["C"] * ip["E"]
        elif op.kind == "dense":
            total += rows * ip["in"] * ip["out"]
        elif op.kind == "conv":
            rows = -(-rows // ip["stride"])
            total += rows * ip["F"] * ip["C"] // ip["groups"] * ip["K"]
        elif op.kind == "reshape":
            rows = ip["S"]
        elif op.kind in ("attention", "res_attention"):
            S, E = ip["S"], ip["E"]
            total += 4 * S * E * E + 2 * S * S * E
        elif op.kind == "res_ff":
            total += 2 * rows * ip["E"] * ip["F"]
        elif op.kind in ("avgpool", "masked_pool"):
            total += ip["S"] * ip["E"]
            rows = 1
        elif op.kind == "myattn":
            total += ip["v1"] * (ip["q"] + ip["k"]) + ip["v1"] * ip["v2"]
            total += ip["out"] * (ip["q"] + ip["v2"])
            rows = 1
    return total


def _split(model: ModelFile, n: int) -> tuple[np.ndarray, np.ndarray]:
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
        elif op.kind in ("embed", "res_ff", "res_attention", "masked_pool", "conv"):
            rows += _seq_layer_rows(k, op)
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


def _seq_layer_rows(k: int, op) -> list[dict[str, Any]]:
    ip, fp, t = op.iparams, op.fparams, op.tensors

    def row(what, s_in, s_out, shift, M) -> dict[str, Any]:
        M = np.atleast_1d(M)
        return {"op": k, "what": what, "s_in": s_in, "s_out": s_out, "shift": ip[shift],
                "M_min": int(M.min()), "M_max": int(M.max())}  # fmt: skip

    if op.kind == "embed":
        return [row(f"embed {ip['P']}x{ip['C']}->{ip['E']}", fp["s_in"], fp["s_out"], "shift",
                    t["m"])]  # fmt: skip
    if op.kind == "masked_pool":
        return [row(f"masked_pool over 1..{ip['S']}", None, None, "shift", t["m"])]
    if op.kind == "conv":
        what = (f"conv k{ip['K']} s{ip['stride']} d{ip['dilation']} g{ip['groups']} "
                f"{ip['C']}->{ip['F']}" + " (relu)" * ip["relu"])  # fmt: skip
        return [row(what, fp["s_in"], fp["s_out"], "shift", t["m"])]
    if op.kind == "res_ff":
        return [
            row("ff W1 (relu)", fp["s_in"], fp["s_h"], "shift_1", t["m1"]),
            row("ff W2", fp["s_h"], fp["s_f"], "shift_2", t["m2"]),
            row("ff add x", fp["s_in"], fp["s_y"], "shift_add", ip["M_x"]),
            row("ff add f", fp["s_f"], fp["s_y"], "shift_add", ip["M_f"]),
        ]
    s_of = {"q": "s_q", "k": "s_k", "v": "s_v", "o": "s_out"}
    rows = [
        row(f"attention W{p}", fp["s_ctx" if p == "o" else "s_in"], fp[s_of[p]], f"shift_{p}",
            t[f"m{p}"])
        for p in "qkvo"
    ]  # fmt: skip
    rows += [
        row("attention softmax idx", None, None, "shift_sm", ip["M_sm"]),
        row("attention ctx", fp["s_v"], fp["s_ctx"], "shift_ctx", ip["M_ctx"]),
        row("attention add x", fp["s_in"], fp["s_y"], "shift_add", ip["M_x"]),
        row("attention add a", fp["s_out"], fp["s_y"], "shift_add", ip["M_a"]),
    ]
    return rows


@dataclass
class ExportData:
    """What export calibrates on (`Xc`, `nc`, labels `yc`) and evaluates on (`X`, `n`, `y`,
    test rows `idx`; `samples`: the same as read, windows not cut to T: what parity sends),
    with the report's data fields (`head` after "dataset", `split` after "test_samples").
    Lengths are None for rows: every one of their one steps is valid."""

    Xc: np.ndarray
    nc: np.ndarray | None
    yc: np.ndarray
    X: np.ndarray
    n: np.ndarray | None
    y: np.ndarray
    idx: np.ndarray
    head: dict[str, Any]
    split: dict[str, Any]
    samples: Windows


def export_data(model: ModelFile, csv: str | None, target: str | None) -> ExportData:
    """The samples of `model`'s own data: a row model's CSV or dataset (calibrated on its
    train rows, all rows evaluated), a window model's `.ts` files cut to its T (calibrated on
    TRAIN, evaluated on TEST or the part of TRAIN held out). The fork is the data source: a
    row model's meta names rows, a window model's meta names `.ts` files."""
    if model.takes_rows:  # the data source: rows of a CSV or dataset, not .ts files
        return samples_data(model, load_data(model, csv, target))
    return samples_data(model, *load_seq_data(model))


def samples_data(model: ModelFile, train: Windows, test: Windows | None = None) -> ExportData:
    """`export_data` of samples already read (the Python API's arrays, as their files give
    them): a row model's rows `train` (its meta's train_idx/test_idx index them), or a window
    model's TRAIN windows and TEST windows (None: no TEST file)."""
    if model.takes_rows:
        X, y = train.X, train.y
        train_idx, test_idx = _split(model, len(y))
        return ExportData(X[train_idx], None, y[train_idx], X, None, y, test_idx, {}, {}, train)
    T = int(model.ops[0]["steps"])
    ev = test if test is not None else train
    held_out = test is None and bool(model.meta.get("train", {}).get("test_idx"))
    if test is not None:  # the TEST file: every window is a test window
        calib, idx = np.arange(len(train.y)), np.arange(len(ev.y))
    elif held_out:  # --ts without --test: the part of TRAIN that training held out
        calib, idx = _split(model, len(train.y))
    else:  # no test windows known: figures n/a, agreement over TRAIN
        calib, idx = np.arange(len(train.y)), np.array([], np.int64)
    Xc, nc, cut_train = fit_to_model(train.X[calib], train.lengths[calib], T)
    X, n, _ = fit_to_model(ev.X, ev.lengths, T)
    cut = int(np.sum(ev.lengths[idx] > T))
    split_name = (
        "test file" if test is not None else "held-out part of train" if held_out else None
    )
    files = {k: model.meta.get(k) for k in ("ts_train", "ts_test") if model.meta.get(k)}
    head = {"data": files, "max_steps": T} if files else {"max_steps": T}  # vendored: dataset
    split = {
        "test_split": split_name,
        "train_windows_truncated": cut_train,
        "test_windows_truncated": cut if len(idx) else None,
    }
    return ExportData(Xc, nc, train.y[calib], X, n, ev.y, idx, head, split, ev)


def check_out(model_path: Path, out_path: Path) -> None:
    """CLIError before anything is read or written when the blob would overwrite a model file
    (--out equal to --model, a .npz name, or an existing model file): the model would be lost."""
    from tinyattn.remedy import blob_for, command, is_model_file

    same = out_path.resolve() == model_path.resolve()
    if same or is_model_file(out_path):
        what = "is the model file itself" if same else "names a model file (.npz)"
        out = blob_for(model_path) if same or out_path.suffix == ".npz" else blob_for(out_path)
        fix = command("export", "--model", str(model_path), "--out", str(out))
        raise CLIError(
            f"--out {out_path} {what}: the blob would overwrite it; write the blob to a .bin "
            f"file: '{fix}' (nothing was written)"
        )


def model_spec(model: ModelFile, d: ExportData, float32: bool = False,
               source: str = "model") -> QuantModelSpec:  # fmt: skip
    """What the blob holds: the int8 model calibrated on `d`'s calibration samples, or the
    float32 weights; CLIError naming `source` when the model cannot be quantized."""
    try:
        return float32_spec(model) if float32 else quantize(model, d.Xc, d.nc)
    except QuantizeError as exc:
        raise CLIError(f"{source}: {exc}") from None


def export_model(
    model_path: str | Path,
    out_path: str | Path,
    float32: bool = False,
    csv: str | None = None,
    target: str | None = None,
) -> dict[str, Any]:
    """Quantize (or not), write, read back and evaluate; returns the report dict."""
    model_path, out_path = Path(model_path), Path(out_path)
    check_out(model_path, out_path)
    if not model_path.is_file():
        raise CLIError(
            f"{model_path} not found; train first: 'tinyattn train --out {model_path}' (with "
            "--dataset, --csv or --ts naming the data; default Iris)"
        )
    try:
        model = load_model(model_path)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    d = export_data(model, csv, target)
    spec = model_spec(model, d, float32, str(model_path))
    size = write_blob(out_path, spec)
    blob = read_blob(out_path.read_bytes(), source=str(out_path))
    logits_float = forward_model(model, d.X, d.n)  # (N, C) float64
    logits_f32 = run_float(blob, d.X, d.n)  # (N, C) float32 from the blob
    report: dict[str, Any] = {
        "blob": str(out_path),
        "bytes": size,
        "format_version": blob.version,
        "crc32": f"0x{blob.crc32:08x}",
        "quantized": blob.quantized,
        "macs": blob_macs(blob),
        "dataset": model.meta.get("dataset"),
        **d.head,
        "n_samples": len(d.y),
        "test_samples": len(d.idx),
        **d.split,
        "float_test_accuracy": _accuracy(logits_float, d.y, d.idx),
        "blob_float32_test_accuracy": _accuracy(logits_f32, d.y, d.idx),
        "blob_float32_max_abs_logit_diff": float(np.abs(logits_f32 - logits_float).max()),
    }
    logits_q = run_int8(blob, quantize_input(blob, d.X, d.n), d.n) if blob.quantized else None
    return report | int8_report(blob, logits_q, logits_float, d.y, d.idx)


def int8_report(blob, logits_q, logits_float, y, idx) -> dict[str, Any]:
    """The int8 figures of an export report from the integer logits `logits_q` (None for a
    float32 blob; run_int8 has asserted the small-int budget on every sample)."""
    if logits_q is None:
        return {"int8_test_accuracy": None, "int8_float_argmax_agreement": None}
    agree = int(np.sum(np.argmax(logits_q, axis=1) == np.argmax(logits_float, axis=1)))
    error = np.abs(logits_q * blob.logit_scale - logits_float).max()  # in real logit units
    return {
        "int8_test_accuracy": _accuracy(logits_q, y, idx),
        "int8_float_argmax_agreement": agree / len(y),
        "int8_float_argmax_agree_count": agree,
        "int8_max_abs_logit_error": float(error),
        "input_scale": blob.input_scale,
        "logit_scale": blob.logit_scale,
        "layers": layer_table(blob),
    }


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def _acc(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def print_report(report: dict[str, Any]) -> None:
    kind = "int8" if report["quantized"] else "float32"
    print(
        f"wrote {report['blob']}: {report['bytes']} bytes ({kind}, format version "
        f"{report['format_version']}, CRC32 {report['crc32']}), {report['macs']} MACs"
    )
    if report.get("test_windows_truncated"):
        print(
            f"{report['test_windows_truncated']} test windows longer than the model's "
            f"T = {report['max_steps']} steps were classified on their last {report['max_steps']}"
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
    held = " (held out of TRAIN)" if report.get("test_split") == "held-out part of train" else ""
    print(
        f"test accuracy ({n_test} samples of {report['dataset']}{held}): "
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
    out = args.out or BUILD_DIR / (FLOAT32_BLOB if args.float32 else "model.bin")
    report = export_model(args.model, out, args.float32, args.csv, args.target)
    print_report(report)
    if args.json:
        print(json.dumps(report, separators=(",", ":")))
    return 0
