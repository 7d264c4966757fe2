"""Host (CPython): `tinyattn predict` — classify the rows of a CSV with a blob, here or on a board.

    tinyattn predict --csv rows.csv                      # host: intref (int8) or floatref
    tinyattn predict --csv rows.csv --port /dev/ttyACM0  # the board that runs the same blob
    tinyattn predict --csv rows.csv --out preds.csv      # or --json
    tinyattn predict --ts windows.ts [--port ...]        # a sequence model's windows

A sequence blob (seq-attn) classifies the windows of a `.ts` file (tinyattn.data.timeseries:
unequal lengths too); a window longer than the model's T is classified on its last T steps (the
long window rule, docs/quantization.md) and the number of such windows is said on stderr
(parity.fit_windows). New data need not be labelled: `@classLabel false`, and labels the
header does not declare, are read (`load_ts(labels_required=False)`); when windows carry labels,
the accuracy over them is said (stderr; `accuracy` in --json).

CSV columns are matched by their header names against the model file's `feature_names` (the
`.npz` the blob was exported from: --model, by default the one beside the blob, build/model.npz
for build/model.bin), in any order; the label column (--target, by default the model file's
`target`) is left out; a missing feature or another extra column is refused by name. A file
without a header row is read by position (the model's features in training order, then
optionally the label), and so is a CSV when no model file of the blob is found (as before:
a label column is dropped when --target names it, or when there is exactly one column more
than the model has features); either is said on stderr, and `columns` in --json is "name" or
"position". Bad input gets the same one-line errors as `parity --csv` (file:line, column, what
to do) and the same feature checks (parity.check_samples). Features are rounded to float32
first, on the host too: that is what a board receives (docs/protocol.md, compact batches) and
computes with, so host and board give the same classes. With --port the board is asked first
(`info`): the blob it runs must be the one given (CRC), else exit 2 naming both CRCs, before
the data is judged against that blob.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinyattn.board.link import LinkError, as_sent
from tinyattn.data.windows import as_windows
from tinyattn.errors import CLIError
from tinyattn.paths import BUILD_DIR


@dataclass
class Samples:
    """What is classified: rows X [N, F] (`columns` "name" or "position": how they were
    matched), or windows X [N, T', C] with `lengths` and their `labels` (None: unlabelled)."""

    X: np.ndarray
    lengths: np.ndarray | None = None
    labels: list[str | None] | None = None
    columns: str | None = None


@dataclass
class Rows:
    """A CSV's features in the model's order: X [N, F], their names, "name" or "position",
    and what to say on stderr about a positional reading (None: matched by name)."""

    X: np.ndarray  # (N, F)
    names: list[str]
    columns: str
    note: str | None = None
    labels: list[str | None] | None = None  # the label column's cells, when the file has one


def model_columns(
    blob, blob_path: Path, model: Path | None
) -> tuple[list[str] | None, str | None, str | None]:
    """`(feature_names, target, why not)` from the model file the blob was exported from
    (`blob_model_meta`). None names and a reason when there is no such file, or it records no
    feature names (older files)."""
    from tinyattn.board.blobmodel import blob_model_meta

    meta, why = blob_model_meta(blob, blob_path, model)
    if meta is None:
        return None, None, why
    path = model if model is not None else blob_path.with_suffix(".npz")
    names = meta.get("feature_names")
    if not isinstance(names, list):
        return None, None, f"{path} records no feature names"
    if len(names) != blob.n_features:
        what = f"{path} is not the model {blob_path} was exported from"
        if model is not None:
            raise CLIError(f"{what} (other features, classes or input scaling); pass that "
                           "model with --model FILE")  # fmt: skip
        return None, None, what
    target = meta.get("target")
    return [str(n) for n in names], (str(target) if target else None), None


def read_rows(
    path: Path, n_features: int, target: str | None, feature_names: list[str] | None = None,
    model_target: str | None = None, why: str | None = None,
) -> Rows:  # fmt: skip
    """The model's features from a CSV, in its order (`Rows`). With the model file's
    `feature_names`, columns are matched by header name: `target` (--target, else
    `model_target`) is left out, a missing feature or any other column is refused by name
    (a file whose model does not record its target may have one such column: the label).
    Without them, or without a header row, by position (`why`: why no names). The messages of
    data.load_csv (what `parity --csv` says) for the values."""
    from tinyattn.data.tabular import check_columns, check_header, feature_rows, read_csv_rows

    try:
        rows = read_csv_rows(path)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if not rows:
        raise CLIError(f"{path}: needs a header row and at least one data row")
    header = [cell.strip() for cell in rows[0]]
    try:
        check_header(path, header, n_features)  # the rule of train/export/parity
    except ValueError:
        return _headerless_rows(path, rows, n_features, target, feature_names)
    if len(rows) < 2:
        raise CLIError(f"{path}: needs a header row and at least one data row")
    if target is not None and target not in header:
        raise CLIError(
            f"{path}: no column named {target!r}; columns are {', '.join(header)} "
            "(pass the label column with --target COL)"
        )
    if feature_names is None:
        return _rows_in_file_order(path, rows, header, n_features, target, why)
    try:
        check_columns(path, header)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    missing = [f for f in feature_names if f not in header]
    if missing:
        more = f" (nor {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CLIError(
            f"{path}: no column {missing[0]!r}{more}; the model takes "
            f"{', '.join(feature_names)} (by name, any order): add or rename it"
        )
    target = target if target is not None else model_target
    extra = [h for h in header if h not in feature_names and h != target]
    if len(extra) == 1 and model_target is None and target is None:
        extra = []  # an older model file without its target: the one other column is the label
    if extra:
        label = f", nor the label column {target!r}" if target is not None else ""
        raise CLIError(
            f"{path}: column {extra[0]!r} is not a feature of the model "
            f"({', '.join(feature_names)}){label}; drop it, or name the label column with "
            "--target COL"
        )
    columns = [header.index(f) for f in feature_names]
    try:
        X = feature_rows(path, rows, feature_names, -1, columns)  # (N, F), load_csv's checks
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    label = [h for h in header if h not in feature_names]  # the label column, if any
    return Rows(X, list(feature_names), "name", labels=_cells(rows, header.index(label[0]))
                if label else None)  # fmt: skip


def _cells(rows: list[list[str]], j: int) -> list[str | None]:
    """Column j of the data rows, stripped (an empty cell: no label)."""
    return [(r[j].strip() or None) if j < len(r) else None for r in rows[1:]]


def _rows_in_file_order(
    path: Path, rows: list[list[str]], header: list[str], n_features: int, target: str | None,
    why: str | None,
) -> Rows:  # fmt: skip
    """No feature names to match: the columns in file order, a label column dropped when
    --target names it or there is exactly one column more than the model has features (the
    last, as `tinyattn train --csv` takes it by default)."""
    from tinyattn.data.tabular import feature_rows

    if target is None and len(header) == n_features + 1:
        target = header[-1]
    t = header.index(target) if target is not None else -1
    names = [h for j, h in enumerate(header) if j != t]
    try:
        X = feature_rows(path, rows, names, t)  # (N, F), the checks and words of load_csv
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    why = why or "no model file"
    note = (f"{path}: columns taken in file order, not matched by name ({why}); pass --model, "
            "the .npz the blob was exported from, to match them by name")  # fmt: skip
    return Rows(X, names, "position", note, _cells(rows, t) if t >= 0 else None)


def _headerless_rows(
    path: Path, rows: list[list[str]], n_features: int, target: str | None,
    feature_names: list[str] | None,
) -> Rows:  # fmt: skip
    """A CSV without a header row: by position, the model's features in training order, then
    optionally a label column (the last)."""
    from tinyattn.data.tabular import feature_rows

    width = len(rows[0])
    names = feature_names or [f"column {j + 1}" for j in range(n_features)]
    if target is not None:
        raise CLIError(f"{path}:1: no header row, so no column is named {target!r}; add a "
                       f"header row ({', '.join(names)}, then the label's)")  # fmt: skip
    if width not in (n_features, n_features + 1):
        raise CLIError(
            f"{path}:1: no header row and {width} columns; the model takes {n_features} "
            f"features ({', '.join(names)}), then optionally the label: add a header row"
        )
    try:
        X = feature_rows(path, rows, names, n_features if width > n_features else -1, first=0)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    label = ", the last column as the label" if width > n_features else ""
    note = (f"{path}: no header row; columns taken by position as the model's features "
            f"{', '.join(names)}{label} (add a header row to match them by name)")  # fmt: skip
    labels = [(r[-1].strip() or None) for r in rows] if width > n_features else None
    return Rows(X, list(names), "position", note, labels)


def read_windows(path: Path, blob) -> Samples:
    """Windows X [N, <= T, C], lengths [N] and labels (None: unlabelled) of a `.ts` file for a
    sequence blob, fit to its T (the count said on stderr); the one-line errors of
    tinyattn.data.timeseries and parity. Labels are optional and need not be declared."""
    from tinyattn.board.parity import check_samples, fit_windows, is_seq_blob
    from tinyattn.data.timeseries import load_ts

    if not is_seq_blob(blob):  # the file kind must match the model's: refused in one line
        raise CLIError(f"{path}: .ts windows need a sequence model; this blob takes rows: --csv")
    try:
        ds = load_ts(path, labels_required=False)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    X, lengths, cut = fit_windows(blob, ds.X, ds.lengths)
    check_samples(blob, X, [], str(path), lengths)
    if cut:
        T = blob.ops[0].iparams["T"]
        print(f"{path}: {cut} of {len(X)} windows longer than the model's T = {T} steps, "
              f"classified on their last {T}", file=sys.stderr)  # fmt: skip
    labels = [ds.class_names[int(k)] if k >= 0 else None for k in ds.y]
    return Samples(X, lengths, labels)


def predict_host(
    blob, X: np.ndarray, path: str, lengths: np.ndarray | None = None, source: str = "samples"
) -> np.ndarray:
    """Class indices [N] of raw features X on the host reference of `path` (a sequence blob:
    windows X [N, T, C] with `lengths`); CLIError naming the sample of `source` whose float
    logits are not finite (never a class for them)."""
    if path == "int8":
        from tinyattn.intmodel.intref import quantize_input, run_int8

        xq = quantize_input(blob, X, lengths)
        return np.argmax(run_int8(blob, xq, lengths), axis=1)  # first maximum
    from tinyattn.intmodel.floatref import run_float

    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below
        logits = run_float(blob, X, lengths) if lengths is not None else run_float(blob, X)
    bad = np.flatnonzero(~np.isfinite(logits).all(axis=1))
    if len(bad):  # float32 overflow: no class to answer (the board's float path says the same)
        i = int(bad[0])
        raise CLIError(
            f"{source}: sample {i}: the float path's logits are {logits[i].tolist()} (float32 "
            "overflow: the features are too large for it); use the int8 path (--path int8) or "
            "scale the features"
        )
    return np.argmax(logits, axis=1)


def predict_board(
    port: str, blob, blob_path: Path, load, path: str, baud: int, timeout: float, progress: bool,
) -> tuple[np.ndarray, Samples]:  # fmt: skip
    """Class indices [N] as the board on PORT computes them (compact batches), and the
    samples: the board is asked first which blob it runs (`info`), then `load()` reads and
    checks the samples against that blob."""
    from tinyattn.board.link import BoardLink
    from tinyattn.board.parity import board_info, check_identity, run_device, start_server

    with BoardLink(port, baud=baud, timeout=timeout, connect_timeout=timeout) as link:
        start_server(link, blob, blob_path)
        try:
            info = board_info(link)
            check_identity(info, blob, blob_path, port)
            s = load()
            dev = run_device(link, s.X, path, 0, progress, enc="b64", info=info,
                             lengths=s.lengths)  # fmt: skip
        finally:
            try:
                link.stop_server()
            except LinkError:
                pass
    if dev["error"]:
        raise LinkError(dev["error"])
    missing = [i for i in range(len(s.X)) if i not in dev["rows"]]
    if missing:
        raise LinkError(f"{port}: the board did not answer rows {missing[:5]}; retry")
    return np.array([int(dev["rows"][i]["pred"]) for i in range(len(s.X))], dtype=np.int64), s


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tinyattn.board.ports import add_port_arguments, positive_seconds

    add_port_arguments(parser, without="none: the host computes (no board)")
    data = parser.add_mutually_exclusive_group(required=True)
    data.add_argument(
        "--csv", type=Path,
        help="rows to classify: columns matched by header name (no header row: by position)",
    )  # fmt: skip
    data.add_argument(
        "--ts", type=Path,
        help="windows to classify (.ts; a sequence model); labels optional (accuracy if given)",
    )  # fmt: skip
    parser.add_argument(
        "--target", help="a label column of --csv to leave out (default: the model file's)"
    )
    parser.add_argument(
        "--blob", type=Path, default=BUILD_DIR / "model.bin",
        help="the model (default %(default)s); on a board, the blob it runs",
    )  # fmt: skip
    parser.add_argument(
        "--model", type=Path,
        help="the model file the blob was exported from, for --csv's column names (default: "
        "the .npz beside the blob)",
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


def load_samples(args: argparse.Namespace, blob, path: str) -> Samples:
    """The samples of --csv or --ts for `blob`, checked (parity.check_samples) and rounded to
    float32 as sent; what a positional reading of --csv means is said on stderr."""
    from tinyattn.board.parity import check_samples, is_seq_blob, takes_rows

    if args.ts is not None:
        s = read_windows(args.ts, blob)
    else:
        if not takes_rows(blob):  # the file kind must match the model's: refused in one line
            raise CLIError(f"{args.blob} is a sequence model: give its windows with --ts FILE.ts")
        names, target, why = model_columns(blob, args.blob, args.model)
        r = read_rows(args.csv, blob.n_features, args.target, names, target, why)
        X = as_windows(r.X) if is_seq_blob(blob) else r.X  # a sequence blob of one step
        check_samples(blob, X, r.names, str(args.csv))
        if r.note:
            print(r.note, file=sys.stderr)
        s = Samples(X, columns=r.columns, labels=r.labels)
    if path == "int8" and not blob.quantized:
        raise CLIError(f"{args.blob} holds float32 weights only: use --path float")
    s.X = as_sent(s.X)
    return s


def label_hits(
    labels: list[str | None] | None, pred: np.ndarray, class_names: list[str]
) -> tuple[int, int, int] | None:
    """`(right, labelled, unknown)` over the windows that carry a label (None when none does);
    `unknown`: labelled with a class the model does not have (counted as wrong)."""
    have = [(class_names[int(p)], y) for p, y in zip(pred, labels or [], strict=False)
            if y is not None]  # fmt: skip
    if not have:
        return None
    return sum(p == y for p, y in have), len(have), sum(y not in class_names for _, y in have)


def main(args: argparse.Namespace) -> int:
    from tinyattn.board.parity import read_blob_file

    blob = read_blob_file(args.blob)
    path = args.path or ("int8" if blob.quantized else "float")

    def load() -> Samples:
        return load_samples(args, blob, path)

    if args.port:  # the board first: the samples are judged against the blob it runs
        from tinyattn.board.fleet import one_port

        try:
            with one_port(args.port) as port:
                pred, s = predict_board(port, blob, args.blob, load, path, args.baud,
                                        args.timeout, not args.quiet)  # fmt: skip
        except LinkError as exc:
            raise CLIError(str(exc)) from None
        where = port
    else:
        s = load()
        pred = predict_host(blob, s.X, path, s.lengths, str(args.csv or args.ts))
        where = "host"
    rows = [{"row": i, "pred": int(p), "class": blob.class_names[int(p)]}
            for i, p in enumerate(pred)]  # fmt: skip
    hits = label_hits(s.labels, pred, blob.class_names)
    if args.json:
        extra: dict = {"columns": s.columns} if s.columns else {}
        if hits is not None:
            extra.update(accuracy=hits[0] / hits[1], labelled=hits[1])
        print(json.dumps({"where": where, "path": path, "blob_crc32": f"{blob.crc32:08x}",
                          **extra, "predictions": rows}))  # fmt: skip
        return 0
    if hits is not None:
        right, n, unknown = hits
        more = f"; {len(pred) - n} without a label" if n < len(pred) else ""
        more += f"; {unknown} with a class the model does not have" if unknown else ""
        unit = "windows" if args.ts is not None else "rows"
        print(f"{args.ts or args.csv}: accuracy {right / n:.3f} ({right}/{n} labelled {unit}"
              f"{more})", file=sys.stderr)  # fmt: skip
    text = "row,pred,class\n" + "".join(f"{r['row']},{r['pred']},{r['class']}\n" for r in rows)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"{len(rows)} rows classified on {where} ({path}) -> {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
