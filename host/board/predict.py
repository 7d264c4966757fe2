"""Host (CPython): `tinyattn predict` — classify the rows of a CSV with a blob, here or on a board.

    tinyattn predict --csv rows.csv                      # host: intref (int8) or floatref
    tinyattn predict --csv rows.csv --port /dev/ttyACM0  # the board that runs the same blob
    tinyattn predict --csv rows.csv --out preds.csv      # or --json
    tinyattn predict --ts windows.ts [--port ...]        # a sequence model's windows

A sequence blob (seq-attn) classifies the windows of a `.ts` file (tinyattn.data.timeseries:
unequal lengths too); windows longer than the model's T are cut to their first T steps and counted
on
stderr (parity.fit_windows). The file's class labels are not used.

The CSV has a header row and the model's features in training order; a label column is
dropped when --target names it, or when there is exactly one column more than the model has
features (then the last, as `tinyattn train --csv` takes it). Bad input gets the same one-line
errors as `parity --csv` (file:line, column, what to do) and the same feature checks
(parity.check_samples). Features are rounded to float32 first, on the host too: that is what
a board receives (docs/protocol.md, compact batches) and computes with, so host and board
give the same classes. On a board, the blob it runs must be the one given (`info` CRC), else
exit 2 naming both CRCs and `make flash`.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

from tinyattn.board.link import LinkError, as_sent
from tinyattn.cli import CLIError
from tinyattn.paths import BUILD_DIR


def read_rows(path: Path, n_features: int, target: str | None) -> tuple[np.ndarray, list[str]]:
    """Features X [N, F] and their column names from a CSV with a header row; the messages
    are those of data.load_csv (what `parity --csv` says)."""
    from tinyattn.data.tabular import check_header, feature_rows

    try:
        with path.open(newline="") as f:
            rows = [row for row in csv.reader(f) if row and any(cell.strip() for cell in row)]
    except OSError as exc:
        raise CLIError(f"{path}: cannot read ({exc.strerror}); check the path") from None
    if len(rows) < 2:
        raise CLIError(f"{path}: needs a header row and at least one data row")
    header = [cell.strip() for cell in rows[0]]
    try:
        check_header(path, header, n_features)  # the rule and words of train/export/parity
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if target is not None and target not in header:
        raise CLIError(
            f"{path}: no column named {target!r}; columns are {', '.join(header)} "
            "(pass the label column with --target COL)"
        )
    if target is None and len(header) == n_features + 1:
        target = header[-1]  # a label column last, as train --csv takes it by default
    t = header.index(target) if target is not None else -1
    names = [h for j, h in enumerate(header) if j != t]
    try:
        X = feature_rows(path, rows, names, t)  # (N, F), the checks and words of load_csv
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    return X, names


def read_windows(path: Path, blob) -> tuple[np.ndarray, np.ndarray]:
    """Windows X [N, <= T, C] and lengths [N] of a `.ts` file for a sequence blob, cut to its
    T (the count said on stderr); the one-line errors of tinyattn.data.timeseries and parity."""
    from tinyattn.board.parity import check_samples, fit_windows, is_seq_blob
    from tinyattn.data.timeseries import load_ts

    if not is_seq_blob(blob):
        raise CLIError(f"{path}: .ts windows need a sequence model; this blob takes rows: --csv")
    try:
        ds = load_ts(path)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    X, lengths, cut = fit_windows(blob, ds.X, ds.lengths)
    check_samples(blob, X, [], str(path), lengths)
    if cut:
        T = blob.ops[0].iparams["T"]
        print(f"{path}: {cut} of {len(X)} windows longer than the model's T = {T} steps, cut "
              f"to their first {T}", file=sys.stderr)  # fmt: skip
    return X, lengths


def predict_host(blob, X: np.ndarray, path: str, lengths: np.ndarray | None = None) -> np.ndarray:
    """Class indices [N] of raw features X on the host reference of `path` (a sequence blob:
    windows X [N, T, C] with `lengths`)."""
    if path == "int8":
        from tinyattn.intmodel.intref import quantize_input, run_int8

        xq = quantize_input(blob, X, lengths) if lengths is not None else quantize_input(blob, X)
        return np.argmax(run_int8(blob, xq, lengths), axis=1)  # first maximum
    from tinyattn.intmodel.floatref import run_float

    return np.argmax(run_float(blob, X, lengths) if lengths is not None else run_float(blob, X),
                     axis=1)  # fmt: skip


def predict_board(
    port: str, blob, blob_path: Path, X: np.ndarray, path: str, baud: int, timeout: float,
    progress: bool, lengths: np.ndarray | None = None,
) -> np.ndarray:  # fmt: skip
    """Class indices [N] as the board on PORT computes them (compact batches)."""
    from tinyattn.board.link import BoardLink
    from tinyattn.board.parity import board_info, check_identity, run_device, start_server

    with BoardLink(port, baud=baud, timeout=timeout, connect_timeout=timeout) as link:
        start_server(link, blob, blob_path)
        try:
            info = board_info(link)
            check_identity(info, blob, blob_path, port)
            dev = run_device(link, X, path, 0, progress, enc="b64", info=info, lengths=lengths)
        finally:
            try:
                link.stop_server()
            except LinkError:
                pass
    if dev["error"]:
        raise LinkError(dev["error"])
    missing = [i for i in range(len(X)) if i not in dev["rows"]]
    if missing:
        raise LinkError(f"{port}: the board did not answer rows {missing[:5]}; retry")
    return np.array([int(dev["rows"][i]["pred"]) for i in range(len(X))], dtype=np.int64)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tinyattn.board.parity import positive_seconds
    from tinyattn.board.ports import add_port_arguments

    add_port_arguments(parser)
    data = parser.add_mutually_exclusive_group(required=True)
    data.add_argument("--csv", type=Path, help="rows to classify (header row)")
    data.add_argument("--ts", type=Path, help="windows to classify (.ts; a sequence model)")
    parser.add_argument("--target", help="a label column of --csv to leave out")
    parser.add_argument(
        "--blob", type=Path, default=BUILD_DIR / "model.bin",
        help="the model (default %(default)s); on a board, the blob it runs",
    )  # fmt: skip
    parser.add_argument(
        "--path", choices=["int8", "float"],
        help="inference path (default: int8 for an int8 blob, float for a float32 one)",
    )  # fmt: skip
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--out", type=Path, help="write row,pred,class as CSV here")
    out.add_argument("--json", action="store_true", help="print JSON instead of CSV")
    parser.add_argument(
        "--timeout", type=positive_seconds, default=10.0,
        help="seconds a silent board is waited for (default %(default)g)",
    )  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.epilog = (
        "Without --port the host computes (it does not start a virtual board); with --port "
        "the board does, on the blob it runs."
    )


def main(args: argparse.Namespace) -> int:
    from tinyattn.board.parity import check_samples, is_seq_blob, read_blob_file

    blob = read_blob_file(args.blob)
    lengths = None
    if args.ts is not None:
        X, lengths = read_windows(args.ts, blob)
    else:
        if is_seq_blob(blob):
            raise CLIError(f"{args.blob} is a sequence model: give its windows with --ts FILE.ts")
        X, names = read_rows(args.csv, blob.n_features, args.target)
        check_samples(blob, X, names, str(args.csv))
    path = args.path or ("int8" if blob.quantized else "float")
    if path == "int8" and not blob.quantized:
        raise CLIError(f"{args.blob} holds float32 weights only: use --path float")
    X = as_sent(X)
    if args.port:
        from tinyattn.board.fleet import one_port

        try:
            with one_port(args.port) as port:
                pred = predict_board(port, blob, args.blob, X, path, args.baud, args.timeout,
                                     not args.quiet, lengths)  # fmt: skip
        except LinkError as exc:
            raise CLIError(str(exc)) from None
        where = port
    else:
        pred = predict_host(blob, X, path, lengths)
        where = "host"
    rows = [{"row": i, "pred": int(p), "class": blob.class_names[int(p)]}
            for i, p in enumerate(pred)]  # fmt: skip
    if args.json:
        print(json.dumps({"where": where, "path": path, "blob_crc32": f"{blob.crc32:08x}",
                          "predictions": rows}))  # fmt: skip
        return 0
    text = "row,pred,class\n" + "".join(f"{r['row']},{r['pred']},{r['class']}\n" for r in rows)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"{len(rows)} rows classified on {where} ({path}) -> {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
