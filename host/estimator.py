"""Host (CPython): `TinyAttnClassifier`, the Python API in scikit-learn's convention.

A notebook's way to what the command line does (docs/api.md): `fit` is `tinyattn train` on
arrays, `export` is `tinyattn export`, `flash` and `parity` are those commands on one board.
One path: the estimator calls the functions the commands call, it does not copy them.

- **Options are the flags.** Each parameter is a flag of `tinyattn train` (`FLAGS`: `model=`
  is `--model`, `board=` is `--board`, `max_ms=` is `--max-ms` …; None leaves the flag out,
  so the model's own default applies, as on the command line). `fit` turns them into the
  command's arguments with its own parser (`traincli.parse_args`) and checks them with its
  own checks, so a value it refuses is refused here in the same words, the flags named as
  parameters (`epochs=0: must be at least 1`), as a ValueError.
- **Data are the readers'.** X is rows `(n, features)` or windows `(n, channels, steps)`
  (sktime/aeon's numpy3D; unequal lengths as a list of `(channels, steps_i)` arrays or
  NaN-padded at the end, `windows.from_channels_first`), made into the repo's one data type,
  `Windows` (rows: windows of one step). Rows are checked by scikit-learn's `validate_data`
  (NaN, inf, sparse, shapes: its messages); windows here, in the same words.
- **fit** is `traincli.train_on`, the training path of `tinyattn train`, on all of X (the
  caller holds out its own test samples: no test part is held out, `test_fraction` 0); it
  writes the model file as the command does (into a temporary folder) and reads it back with
  `load_model`, as `tinyattn export` reads it. The blob is made at once, by export's own
  `samples_data` and `model_spec`: calibrated on the fitted samples, as export calibrates on
  the training samples a model file names.
- **predict / predict_proba** run the blob's integer path (`intref.run_int8`), which the board
  computes bit for bit (`inference="int8"`, the default), or the trained float model
  (`inference="float"`, `floatref.forward_model`: the "float" figures of train and export).
  `predict_proba` is the softmax of those logits (the int8 logits in real units: times the
  blob's logit scale). `score` is accuracy (ClassifierMixin).
- **export(path)** writes the model file beside the blob (`.npz`, as `tinyattn train` does)
  with the fitted samples it names (a `.csv` of the rows, or a `_TRAIN.ts` of the windows,
  as `--csv` and `--ts` models name theirs), then runs `tinyattn export`'s `export_model`:
  so `tinyattn export`, `flash` and `parity --blob PATH` take the result as any other, and the
  blob written is the one `predict` ran (checked). **flash / parity(port)** run the commands'
  `flash.flash_board` and `parity.parity` on one board: `port` None is the virtual board on
  build/board (or $TINYATTN_PORT), as the commands without `--port`.
"""

from __future__ import annotations

import io
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from tinyattn.data.tabular import MAX_ABS_FEATURE, _is_number
from tinyattn.data.windows import Windows, fit_to_model, from_channels_first
from tinyattn.errors import CLIError
from tinyattn.paths import BUILD_DIR

# parameter -> the `tinyattn train` flag it sets (None: the flag left out, its default)
FLAGS = {
    "model": "--model",
    "epochs": "--epochs",
    "seed": "--seed",
    "search": "--search",
    "board": "--board",
    "max_ms": "--max-ms",
    "max_bytes": "--max-bytes",
    "max_macs": "--max-macs",
    "max_heap": "--max-heap",
    "search_folds": "--search-folds",
    "search_repeats": "--search-repeats",
    "time_limit": "--time-limit",
    "n_jobs": "--jobs",
}
INFERENCES = ("int8", "float")
ROW_MODELS = ("iris-attn", "iris-myattn")
WINDOW_MODELS = ("seq-attn", "seq-rocket")
NAME = "X"  # the data's name in the model file and messages: not a vendored dataset's


class TinyAttnClassifier(ClassifierMixin, BaseEstimator):
    """A tiny attention (or MiniRocket) classifier, trained in NumPy, run in int8 on a board.

    Parameters (each a flag of `tinyattn train`; None: its default for the data):
        model: "iris-attn" or "iris-myattn" (rows), "seq-attn" or "seq-rocket" (windows);
            None: iris-attn for rows, seq-attn for windows (or the search's pick).
        epochs: training epochs (None: the model's; seq-rocket has none).
        seed: split, init and shuffle seed.
        search: choose the model by the model search (`--search`): repeated k-fold CV on
            the fitted samples, within the budget; `search_folds`, `search_repeats`,
            `time_limit` (minutes) and `n_jobs` (worker processes) shape it; its cache is
            build/search under the working directory, as the command's.
        board, max_ms, max_bytes, max_macs, max_heap: the search's budget (`--board rp2040
            --max-ms 50`: within 50 ms an inference on that board's time model).
        inference: "int8" (the blob's integer path, bit-exact with the board) or "float"
            (the trained float model), for predict, predict_proba and score.
        verbose: print what `tinyattn train` prints.

    Learned: `classes_`, `n_features_in_` (rows) or `n_channels_` (windows), `model_` (the
    model file's `ModelFile`), `blob_` (the blob's bytes), `train_summary_` (`tinyattn
    train --json`'s figures; a search's record under "search"), `samples_` (the fitted
    samples as `Windows`, which export writes beside the model file); after `export`:
    `exported_` (its report, the blob's path under "blob").
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        epochs: int | None = None,
        seed: int = 0,
        search: bool = False,
        board: str | None = None,
        max_ms: float | None = None,
        max_bytes: int | None = None,
        max_macs: int | None = None,
        max_heap: int | None = None,
        search_folds: int | None = None,
        search_repeats: int | None = None,
        time_limit: float | None = None,
        n_jobs: int | None = None,
        inference: str = "int8",
        verbose: bool = False,
    ) -> None:
        self.model = model
        self.epochs = epochs
        self.seed = seed
        self.search = search
        self.board = board
        self.max_ms = max_ms
        self.max_bytes = max_bytes
        self.max_macs = max_macs
        self.max_heap = max_heap
        self.search_folds = search_folds
        self.search_repeats = search_repeats
        self.time_limit = time_limit
        self.n_jobs = n_jobs
        self.inference = inference
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True  # windows (n, channels, steps)
        return tags

    # -- fit ---------------------------------------------------------------------------------

    def fit(self, X, y) -> TinyAttnClassifier:
        """Train on all of X (rows or windows) and labels y, as `tinyattn train` with this
        estimator's flags; make the int8 blob (calibrated on X, as export). Returns self."""
        from tinyattn.intmodel.blob import blob_bytes, read_blob
        from tinyattn.intmodel.export import model_spec, samples_data
        from tinyattn.learn import searchcli, seqcli, traincli
        from tinyattn.learn.model import load_model

        windows = self._fit_samples(X, y)
        is_rows = windows.is_rows
        if is_rows and self.model in WINDOW_MODELS:
            raise ValueError(
                f"model={self.model!r} takes windows (n, channels, steps), and X holds rows "
                f"(n, features); pass windows, or a row model ({', '.join(ROW_MODELS)}), or "
                "model=None"
            )
        if not is_rows and self.model in ROW_MODELS:
            raise ValueError(
                f"model={self.model!r} takes rows (n, features), and X holds windows (n, "
                "channels, steps); pass rows, or model='seq-attn', 'seq-rocket' or None"
            )
        log = sys.stdout if self.verbose else io.StringIO()
        try:
            args = traincli.parse_args(self._argv())
            flow = traincli.check_flow(args, windows=not is_rows)
            searchcli.check_arguments(args, flow)
            args.test_fraction = 0.0  # every sample trains: the caller holds out its own
            if flow == "seq":
                data = seqcli.SeqData(NAME, windows, None, {"dataset": NAME})
            elif args.search:  # rows searched as windows of one step, as the command does
                data = seqcli.rows_data(windows, None)
            else:
                data = windows
            with tempfile.TemporaryDirectory(prefix="tinyattn-fit-") as tmp:
                args.out = Path(tmp) / "model.npz"
                summary = traincli.train_on(args, flow, data, log)
                model = load_model(args.out)
            spec = model_spec(model, samples_data(model, windows), source=NAME)
        except CLIError as exc:
            raise ValueError(self._in_parameters(str(exc))) from None
        self.blob_ = blob_bytes(spec)
        self._blob = read_blob(self.blob_, source="blob_")
        self.model_ = model
        self.samples_ = windows
        self.train_summary_ = {k: v for k, v in summary.items() if k != "out"}
        return self

    def _argv(self) -> list[str]:
        """The parameters as `tinyattn train`'s flags (None and False: left out)."""
        argv: list[str] = []
        for param, flag in FLAGS.items():
            value = getattr(self, param)
            if param == "search":
                argv += [flag] if value else []
            elif value is not None:
                argv += [flag, str(value)]
        return argv + ([] if self.verbose else ["--quiet"])

    def _in_parameters(self, message: str) -> str:
        """A message of the command, its flags named as this estimator's parameters."""
        for param, flag in FLAGS.items():
            value = getattr(self, param)
            if value is not None and not isinstance(value, bool):
                message = message.replace(f"{flag} {value}", f"{param}={value!r}")
            message = re.sub(rf"{re.escape(flag)}(?![\w-])", param, message)
        return f"{type(self).__name__}: {message}"

    def _fit_samples(self, X, y) -> Windows:
        """X and y as `Windows` (rows: of one step, with feature names and a label column),
        `classes_` and `n_features_in_` or `n_channels_` set; ValueError for what cannot be
        trained on."""
        _check_ndim(X)
        if _holds_windows(X):
            Xw, lengths = self._windows(X)
            if y is None:
                raise ValueError(f"{type(self).__name__} requires y to be passed, but the "
                                 "target y is None")  # fmt: skip
            y = column_or_1d(y, warn=True)
            if len(y) != len(Xw):
                raise ValueError(f"X holds {len(Xw)} windows and y {len(y)} labels; give one "
                                 "label a window")  # fmt: skip
            self.n_channels_ = int(Xw.shape[2])
            names, target = (), None
        else:
            X2, y = validate_data(self, X, y, dtype=np.float64)  # (N, F); NaN, inf refused
            _check_range(X2, "X")
            Xw, lengths = X2[:, None, :], np.ones(len(X2), np.int64)  # rows: windows of 1 step
            names = _feature_names(getattr(self, "feature_names_in_", None), X2.shape[1])
            target = next(t for t in ("class", "label", "target", "_class", "__class")
                          if t not in names)  # fmt: skip
        check_classification_targets(y)
        self.classes_, y_idx = np.unique(y, return_inverse=True)
        class_names = [str(c) for c in self.classes_]
        if len(self.classes_) < 2:
            raise ValueError(f"y holds one class ({class_names[0]!r}); a classifier needs "
                             "samples of at least two classes")  # fmt: skip
        if len(set(class_names)) < len(class_names):
            raise ValueError(f"the classes {list(self.classes_)!r} have the same text; "
                             "give each class its own name")  # fmt: skip
        return Windows(NAME, Xw, lengths, y_idx.astype(np.int64), class_names, None,
                       tuple(names), target)  # fmt: skip

    def _windows(self, X) -> tuple[np.ndarray, np.ndarray]:
        """Windows `(X [N, T, C], lengths)` from sktime/aeon's layouts; ValueError for a bad
        shape, NaN inside a window or values past the board's range."""
        try:
            Xw, lengths = from_channels_first(X)
        except ValueError as exc:
            raise ValueError(f"X: {exc}") from None
        valid = np.arange(Xw.shape[1])[None, :, None] < lengths[:, None, None]  # (N, T, 1)
        bad = np.argwhere(valid & np.isnan(Xw))
        if len(bad):
            i, t, c = (int(v) for v in bad[0])
            raise ValueError(
                f"Input X contains NaN: window {i}, step {t}, channel {c} ({len(bad)} values); "
                "NaN may only pad a window at its end (every channel NaN from a step on); fill "
                "or drop the rest"
            )
        _check_range(Xw[valid[..., 0]], "X")
        return Xw, lengths

    # -- predict -----------------------------------------------------------------------------

    def _logits(self, X) -> tuple[np.ndarray, np.ndarray]:
        """`(what argmax reads, the logits in real units)` of X on the chosen path."""
        from tinyattn.intmodel.floatref import forward_model
        from tinyattn.intmodel.intref import quantize_input, run_int8

        check_is_fitted(self)
        if self.inference not in INFERENCES:
            raise ValueError(f"inference={self.inference!r}: choose 'int8' or 'float'")
        Xw, n = self._predict_samples(X)
        if self.inference == "float":
            logits = forward_model(self.model_, Xw, n)  # (N, K) float64
            return logits, logits
        q = run_int8(self._blob, quantize_input(self._blob, Xw, n), n)  # (N, K) integers
        return q, q * self._blob.logit_scale

    def _predict_samples(self, X) -> tuple[np.ndarray, np.ndarray | None]:
        """X as the fitted model takes it: rows `[N, 1, F]` (lengths None), or windows cut
        to the model's T (a longer window: its last T steps, the long window rule)."""
        _check_ndim(X)
        if self.samples_.is_rows:
            if _holds_windows(X):
                raise ValueError(f"X holds windows {np.shape(X)}, the model was fitted on rows "
                                 f"(n, {self.n_features_in_}); pass rows")  # fmt: skip
            X2 = validate_data(self, X, dtype=np.float64, reset=False)  # (N, F)
            _check_range(X2, "X")
            return X2[:, None, :], None
        if not _holds_windows(X):
            raise ValueError(
                f"X has shape {np.shape(X)}, the model was fitted on windows (n, channels, "
                f"steps) of {self.n_channels_} channels; pass windows (univariate: "
                "X[:, None, :])"
            )
        Xw, lengths = self._windows(X)
        if Xw.shape[2] != self.n_channels_:
            raise ValueError(f"X has {Xw.shape[2]} channels, but {type(self).__name__} is "
                             f"expecting {self.n_channels_} channels as input")  # fmt: skip
        Xw, n, _ = fit_to_model(Xw, lengths, int(self.model_.ops[0]["steps"]))
        return Xw, n

    def predict(self, X) -> np.ndarray:
        """The class of each sample (`classes_`), on the int8 path unless inference="float"."""
        order, _ = self._logits(X)
        return self.classes_[np.argmax(order, axis=1)]

    def predict_proba(self, X) -> np.ndarray:
        """`[n, classes]`: the softmax of the chosen path's logits (int8: the board's integer
        logits times the blob's logit scale)."""
        _, logits = self._logits(X)
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)

    # -- the board ---------------------------------------------------------------------------

    def export(self, path: str | os.PathLike = BUILD_DIR / "model.bin") -> dict[str, Any]:
        """Write the blob at `path` (default build/model.bin, the commands' default), the
        model file beside it (`.npz`) and the fitted samples it names (`.csv` rows or
        `_TRAIN.ts` windows), by `tinyattn export`'s own `export_model`; returns its report
        (`tinyattn export --json`)."""
        from tinyattn.data.tabular import write_csv
        from tinyattn.data.timeseries import write_ts
        from tinyattn.intmodel.export import export_model
        from tinyattn.learn.model import save_model, ts_data_meta

        check_is_fitted(self)
        path = Path(path)
        if path.suffix == ".npz":
            raise ValueError(
                f"export({str(path)!r}): that is the model file's name; give "
                "the blob's, e.g. 'build/model.bin' (the .npz goes beside it)"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        s, meta = self.samples_, dict(self.model_.meta)
        try:
            if s.is_rows:
                data = write_csv(path.with_suffix(".csv"), s)
                meta.update(csv=str(data.resolve()), target=s.target)
            else:
                data = path.with_name(f"{path.stem}_TRAIN.ts")
                write_ts(data, s.X, s.lengths, s.y, s.class_names, problem_name=NAME)
                meta.update(ts_data_meta(NAME, data))
        except ValueError as exc:
            raise ValueError(f"export: {exc}") from None
        m = self.model_
        model_path = save_model(path.with_suffix(".npz"), m.model, m.norm_mean, m.norm_std, meta)
        try:
            report = export_model(model_path, path)
        except CLIError as exc:
            raise ValueError(f"export: {exc}") from None
        if path.read_bytes() != self.blob_:
            raise RuntimeError(f"{path}: the exported blob differs from the one predict runs "
                               f"(CRC {report['crc32']}); please report this")  # fmt: skip
        self.exported_ = report
        return report

    def _exported(self, what: str) -> Path:
        check_is_fitted(self)
        if not hasattr(self, "exported_"):
            raise ValueError(f"{what}: export the blob first, e.g. clf.export('build/model.bin')")
        return Path(self.exported_["blob"])

    def flash(self, port: str | None = None, mpy: bool | None = None) -> dict[str, Any]:
        """Copy the device runtime and the exported blob to the board on `port` (None: a
        virtual board on build/board, or $TINYATTN_PORT), verified, as `tinyattn flash`;
        `mpy`: None .mpy when mpy-cross can, True insist, False .py. Returns its summary.
        Board errors raise `tinyattn.errors.CLIError` with the command's one-line message."""
        from tinyattn.board.flash import flash_board
        from tinyattn.board.fleet import one_port

        blob = self._exported("flash")
        with one_port(port or os.environ.get("TINYATTN_PORT") or None) as p:
            return flash_board(p, blob, use_mpy=mpy, progress=self.verbose)

    def parity(self, port: str | None = None, report: str | os.PathLike | None = None
               ) -> dict[str, Any]:  # fmt: skip
        """`tinyattn parity` on the board on `port` (None as for `flash`): every fitted sample
        to the board, its int8 logits compared with the host's integer reference, exactly, and
        its float logits within tolerance. Returns the report (`["summary"]["passed"]`);
        `report`: also write it there as JSON. Board errors raise `CLIError`."""
        from tinyattn.board import parity as P
        from tinyattn.board.fleet import one_port
        from tinyattn.board.link import LinkError

        blob = self._exported("parity")
        data = P.load_samples(blob.with_suffix(".npz"), None, None, None)
        try:
            with one_port(port or os.environ.get("TINYATTN_PORT") or None) as p:
                out = P.parity(p, blob, data.X, data.y, progress=self.verbose,
                               lengths=data.lengths)  # fmt: skip
        except LinkError as exc:
            raise CLIError(str(exc)) from None
        if report is not None:
            P.write_report(Path(report), out)
        if self.verbose:
            print(P.format_table(out["summary"], out["rows"]))
        return out


def _holds_windows(X) -> bool:
    """Windows: a 3-D array, or a list of 2-D arrays (sktime/aeon's unequal lengths)."""
    if isinstance(X, (list, tuple)):
        return bool(X) and all(np.ndim(x) == 2 for x in X)
    ndim = getattr(X, "ndim", None)  # arrays, frames, sparse matrices say it themselves
    return (np.asarray(X).ndim if ndim is None else ndim) == 3


def _check_ndim(X) -> None:
    """ValueError for an array of more than 3 dimensions (the rest: scikit-learn's words)."""
    ndim = getattr(X, "ndim", None)
    if not isinstance(X, (list, tuple)) and (np.asarray(X).ndim if ndim is None else ndim) > 3:
        raise ValueError(f"X has shape {np.shape(X)}; give rows (n, features) or windows (n, "
                         "channels, steps)")  # fmt: skip


def _check_range(values: np.ndarray, what: str) -> None:
    """ValueError past the board's range (|x| <= MAX_ABS_FEATURE, as the readers and the
    device server take; inf is refused as 'infinity')."""
    over = np.abs(values) > MAX_ABS_FEATURE
    if over.any():
        v = values[over].flat[0]
        word = "infinity" if np.isinf(v) else f"{v:g}"
        raise ValueError(f"Input {what} contains {word}; values must be finite with |x| <= "
                         f"{MAX_ABS_FEATURE:g} (the board's range)")  # fmt: skip


def _feature_names(given, n: int) -> list[str]:
    """The rows' column names in the CSV export writes: a DataFrame's (`feature_names_in_`)
    when they are text, not numbers, else x0 … x{n-1}."""
    if given is not None:
        names = [str(v).strip() for v in given]
        if not any(_is_number(v) or not v for v in names) and len(set(names)) == n:
            return names
    return [f"x{j}" for j in range(n)]
