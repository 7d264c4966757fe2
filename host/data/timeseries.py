"""Host (CPython): time-series windows from the archive's `.ts` files — reader, writer, scaling.

The `.ts` format of the UEA/UCR time series classification archive (as read and written by
sktime's `load_from_tsfile` / `write_dataframe_to_tsfile`):

    # comment lines (anywhere)
    # rate 50 Hz                         a comment above @data: the steps per second (written
                                         by `tinyattn record`; `TSDataset.rate`, else None)
    @problemName BasicMotions            header keys are case-insensitive
    @timeStamps false                    true is not supported here (one-line error)
    @missing false                       true: '?' may mark a missing value
    @univariate false                    true: one channel
    @dimensions 6                        channels per case (optional; else from the first case)
    @equalLength true                    true: every case has @seriesLength (or the same) steps
    @seriesLength 100
    @classLabel true Standing Running …  the class names, in this order (y indexes them)
    @data
    -0.74,0.40,…:0.12,…:…:Standing       one case a line: channels split by ':', values
                                         by ',', the class label last

What this module makes of it:
- `TSDataset.X [N, T, C]` float64, each case's steps first, then zeros up to the longest case in
  the file (`T = lengths.max()`); `lengths [N]` the valid steps; `y [N]` indexes `class_names`
  in the order `@classLabel` declares them (not sorted: the file says the order).
- `load_ts(path, labels_required=False)` (what `tinyattn predict` reads new data with) also
  takes unlabelled windows: `@classLabel false` (or none; every ':' field is then a channel),
  and in a labelled file a case with no label (exactly the declared channels) gets `y = -1`; a
  label `@classLabel` does not declare is appended to `class_names` (seen order).
- Missing values (`?`, only where `@missing true`) are NaN inside a case's valid steps; the
  model side decides what NaN becomes. Unless `@equalLength true`, steps at the end of a case
  where every channel is `?` are padding, not missing values: the case is that much shorter.
  Archive files with unequal lengths (JapaneseVowels) usually just give shorter lists.
- The longest case can be in the TEST file (JapaneseVowels: TRAIN 7..26 steps, TEST 7..29);
  `pad_windows` brings both splits to one length.
- `?` where `@missing` is false (or absent), a header key we do not know, channels of one case
  with different lengths, a non-number, an undeclared label (unless labels are optional), a
  case with the wrong number of channels, data before `@data`, no `@data`, an empty file,
  unequal lengths where `@equalLength true` — each is a one-line `TSFormatError` naming
  `file:line` and the fix.
- `fit_channel_standardizer` / `standardize_windows`: per-channel mean/std over the valid steps
  of the training split only (padding and NaN do not count); padding stays exactly 0.
- `load_ts_dataset("basicmotions" | "japanesevowels", "train" | "test")` reads the vendored
  copies in `host/data/ts/` (sources and checksums in `host/data/ts/README.md`), with the
  archive's fixed TRAIN/TEST split: published results are on it.

References: A. Bagnall et al. (2018), "The UEA multivariate time series classification archive,
2018", arXiv:1811.00075 (the archive and its `.ts` format, timeseriesclassification.com);
sktime's `load_from_tsfile` (same format, independent code).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tinyattn.atomic import atomic_open
from tinyattn.data.tabular import MAX_ABS_FEATURE
from tinyattn.data.windows import Windows, input_view, stack_cases, strip_padding
from tinyattn.paths import DATA_DIR

TS_DIR = DATA_DIR / "ts"

# Vendored archive problems: name -> file stem in host/data/ts/ (`<stem>_TRAIN.ts`, `_TEST.ts`).
TS_DATASETS: dict[str, str] = {
    "basicmotions": "BasicMotions",
    "japanesevowels": "JapaneseVowels",
    # the model search's development problems (the archive's other problems stay unseen)
    "coffee": "Coffee",
    "trace": "Trace",
    "pickupgesturewiimotez": "PickupGestureWiimoteZ",
    "acsf1": "ACSF1",
    "plaid": "PLAID",
}
SPLITS = ("train", "test")

MISSING = "?"
_BOOL_KEYS = ("timestamps", "missing", "univariate", "equallength")
_INT_KEYS = ("dimensions", "serieslength")
# Header keys (matched case-insensitively) -> the archive's spelling, for messages.
_KEY_NAMES = {
    k.lower(): k
    for k in ("problemName", "timeStamps", "missing", "univariate", "dimensions", "equalLength")
    + ("seriesLength", "classLabel", "data")
}


class TSFormatError(ValueError):
    """A `.ts` file that does not follow the format; the message is `file:line: what and fix`."""


# The `.ts` reader's cases are `Windows` (host/data/windows.py), the one data type.
TSDataset = Windows
# The recording's steps per second, as a comment line above @data (other readers skip it).
RATE_COMMENT = re.compile(r"#\s*rate\s+([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*Hz\b")


def rate_line(rate: float) -> str:
    """The comment line that records `rate` steps per second in a `.ts` file."""
    return f"# rate {rate:g} Hz (steps per second of the recording)"


def valid_mask(lengths: np.ndarray, max_length: int) -> np.ndarray:
    """`[N, T]` bool: step t of case n is valid when `t < lengths[n]`."""
    return np.arange(max_length)[None, :] < np.asarray(lengths)[:, None]  # (N, T)


def _parse_bool(path: Path, line: int, key: str, value: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise TSFormatError(
            f"{path}:{line}: @{_KEY_NAMES[key]} is {value.strip()!r}; write true or false"
        )
    return v == "true"


def _parse_int(path: Path, line: int, key: str, value: str) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise TSFormatError(
            f"{path}:{line}: @{_KEY_NAMES[key]} is {value.strip()!r}; needs an integer >= 1"
        )
    return n


def _parse_channel(
    path: Path, line: int, channel: int, text: str, missing: bool
) -> list[float]:
    """One channel's comma-separated values; `?` becomes NaN (only when `missing` is allowed)."""
    values: list[float] = []
    for step, cell in enumerate(text.split(",")):
        token = cell.strip()
        if token == MISSING:
            if not missing:
                raise TSFormatError(
                    f"{path}:{line}: channel {channel}, step {step} is '?' (missing) but the "
                    "header says '@missing false'; fill the value or declare '@missing true'"
                )
            values.append(math.nan)
            continue
        try:
            value = float(token)
        except ValueError:
            raise TSFormatError(
                f"{path}:{line}: channel {channel}, step {step} is {token!r}, not a number; "
                "values must be numeric ('?' marks a missing one)"
            ) from None
        if not abs(value) <= MAX_ABS_FEATURE:  # NaN fails this too
            what = "not a finite number" if not math.isfinite(value) else "too large"
            raise TSFormatError(
                f"{path}:{line}: channel {channel}, step {step} is {token!r}, {what} "
                f"(values must be finite, |x| <= {MAX_ABS_FEATURE:g}; '?' marks a missing one)"
            )
        values.append(value)
    return values


@dataclass
class _Header:
    """What the `@` lines said; `keys` holds each key once (lower case) with its parsed value."""

    keys: dict[str, object] = field(default_factory=dict)
    class_names: list[str] | None = None
    labels_required: bool = True  # False: unlabelled cases and undeclared labels are read
    labelled: bool = True  # cases end in ':<label>' (@classLabel true)
    n_dims: int | None = None  # channels a case has: @dimensions, @univariate or the 1st case
    dims_from: str = ""  # which of those, for error messages

    def flag(self, key: str) -> bool | None:
        value = self.keys.get(key)
        return value if isinstance(value, bool) else None


def _header_line(path: Path, line: int, s: str, header: _Header) -> None:
    """Record one `@key value` line before `@data`; raise on anything the format forbids."""
    parts = s[1:].split(None, 1) or [""]
    key = parts[0].lower()
    value = parts[1].strip() if len(parts) > 1 else ""
    if key not in _KEY_NAMES:
        if key == "targetlabel":
            raise TSFormatError(
                f"{path}:{line}: @targetLabel is a regression problem; tinyattn "
                "classifies (needs '@classLabel true <labels>')"
            )
        raise TSFormatError(
            f"{path}:{line}: unknown header @{parts[0]}; known: @problemName @timeStamps @missing "
            "@univariate @dimensions @equalLength @seriesLength @classLabel @data"
        )
    if key in header.keys:
        raise TSFormatError(f"{path}:{line}: @{_KEY_NAMES[key]} given twice; keep one")
    if key in _BOOL_KEYS:
        header.keys[key] = _parse_bool(path, line, key, value)
    elif key in _INT_KEYS:
        header.keys[key] = _parse_int(path, line, key, value)
    elif key == "classlabel":
        flag, *names = value.split() or [""]
        if not _parse_bool(path, line, key, flag) and not header.labels_required:
            if names:
                raise TSFormatError(
                    f"{path}:{line}: '@classLabel false' followed by labels; write "
                    "'@classLabel true <labels>', or leave the labels out"
                )
            header.keys[key], header.class_names, header.labelled = False, [], False
            return
        if not _parse_bool(path, line, key, flag):
            raise TSFormatError(
                f"{path}:{line}: '@classLabel false' (no classes); tinyattn "
                "classifies: write '@classLabel true <labels>'"
            )
        if not names:
            raise TSFormatError(
                f"{path}:{line}: '@classLabel true' lists no labels; "
                "write '@classLabel true <label> <label> …'"
            )
        dup = [c for c in names if names.count(c) > 1]
        if dup:
            raise TSFormatError(f"{path}:{line}: @classLabel lists {dup[0]!r} twice; keep one")
        header.keys[key] = header.class_names = names
    else:  # problemname, data
        if key == "data" and value:
            raise TSFormatError(f"{path}:{line}: text after @data; cases start on the next line")
        header.keys[key] = value


def _data_starts(path: Path, line: int, header: _Header) -> None:
    """Check the header as a whole at `@data`; set the channel count if the header gives it."""
    if header.class_names is None and not header.labels_required:
        header.class_names, header.labelled = [], False  # no @classLabel: unlabelled cases
    if header.class_names is None:
        raise TSFormatError(
            f"{path}:{line}: @data before any '@classLabel true <labels>'; "
            "declare the class labels in the header"
        )
    if header.flag("timestamps"):
        raise TSFormatError(
            f"{path}:{line}: '@timeStamps true' is not supported; "
            "write the values without time stamps (equally spaced steps)"
        )
    dims = header.keys.get("dimensions")
    if header.flag("univariate"):
        if dims not in (None, 1):
            raise TSFormatError(
                f"{path}:{line}: '@univariate true' but @dimensions {dims}; make them agree"
            )
        header.n_dims, header.dims_from = 1, "@univariate true"
    elif isinstance(dims, int):
        header.n_dims, header.dims_from = dims, "@dimensions"


def _parse_case(path: Path, line: int, s: str, header: _Header) -> tuple[np.ndarray, int]:
    """One `channel:channel:…:label` line -> `(case [T_n, C], class index)`; an unlabelled case
    (labels not required: `channel:…:channel`) has class index -1."""
    fields = s.split(":")
    label, channels = fields[-1].strip(), fields[:-1]
    names = header.class_names if header.class_names is not None else []
    if not header.labelled or (
        not header.labels_required and header.n_dims is not None and len(fields) == header.n_dims
    ):
        label, channels = None, fields  # no label: every field is a channel
    if not channels:
        raise TSFormatError(
            f"{path}:{line}: no ':' in the case; write the channels, then ':<label>'"
        )
    if header.n_dims is None:  # not declared: the first case decides
        header.n_dims, header.dims_from = len(channels), f"the first case (line {line})"
    if len(channels) != header.n_dims:
        raise TSFormatError(
            f"{path}:{line}: {len(channels)} channels, {header.dims_from} says "
            f"{header.n_dims}; fix the case (channels are separated by ':', the label comes last)"
        )
    if label is not None and label not in names and not header.labels_required:
        names.append(label)  # new data may carry a label the header does not declare
    if label is not None and label not in names:
        raise TSFormatError(
            f"{path}:{line}: label {label!r} is not declared in @classLabel "
            f"({' '.join(names)}); fix the label or declare it"
        )
    missing = bool(header.flag("missing"))
    series = [_parse_channel(path, line, c, ch, missing) for c, ch in enumerate(channels)]
    counts = [len(v) for v in series]
    if len(set(counts)) != 1:
        raise TSFormatError(
            f"{path}:{line}: channels of one case differ in length "
            f"({', '.join(map(str, counts))} steps); every channel needs the same steps"
        )
    case = np.array(series, dtype=np.float64).T  # (T_n, C)
    if missing and header.flag("equallength") is not True:
        case = strip_padding(case)  # trailing all-'?' steps are padding
    if len(case) == 0:
        raise TSFormatError(f"{path}:{line}: the case has no values (only '?'); drop it")
    return case, (names.index(label) if label is not None else -1)


def load_ts(path: str | Path, name: str | None = None, labels_required: bool = True) -> TSDataset:
    """Read a `.ts` classification file (see the module docstring for the rules);
    `labels_required=False` also reads unlabelled cases (`y = -1`) and undeclared labels."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise TSFormatError(f"{path}: cannot read ({exc.strerror}); check the path") from exc
    if not text.strip():
        raise TSFormatError(f"{path}:1: empty file; a .ts file needs @ header lines and @data")

    header = _Header(labels_required=labels_required)
    cases: list[np.ndarray] = []  # each (T_n, C)
    labels: list[int] = []
    case_lines: list[int] = []
    in_data = False
    rate = None
    line = 0
    for line, raw in enumerate(text.splitlines(), start=1):
        s = raw.strip()
        if not s or s.startswith("#"):
            m = RATE_COMMENT.match(s) if not in_data else None
            if m and float(m[1]) > 0:
                rate = float(m[1])
            continue
        if s.startswith("@"):
            if in_data:
                key = s[1:].split(None, 1)[0] if s[1:].strip() else ""
                raise TSFormatError(
                    f"{path}:{line}: header line @{key} after @data; move it above @data"
                )
            _header_line(path, line, s, header)
            if "data" in header.keys:
                _data_starts(path, line, header)
                in_data = True
            continue
        if not in_data:
            raise TSFormatError(
                f"{path}:{line}: data before @data; put '@data' on the line above the cases"
            )
        case, label = _parse_case(path, line, s, header)
        cases.append(case)
        labels.append(label)
        case_lines.append(line)

    if not in_data:
        raise TSFormatError(
            f"{path}:{line}: end of file and no @data line; put '@data' above the cases"
        )
    if not cases:
        raise TSFormatError(f"{path}:{line}: no cases after @data; add one case a line")
    lengths = np.array([len(c) for c in cases], dtype=np.int64)  # (N,)
    if header.flag("equallength"):
        _check_equal_lengths(path, lengths, case_lines, header)

    X, _ = stack_cases(cases)  # (N, T, C) zero-padded
    problem = header.keys.get("problemname")
    name = name or (str(problem) if problem else path.stem)
    y = np.array(labels, dtype=np.int64)
    return TSDataset(name, X, lengths, y, list(header.class_names or []), path, rate=rate)


def _check_equal_lengths(
    path: Path, lengths: np.ndarray, case_lines: list[int], header: _Header
) -> None:
    """`@equalLength true`: every case has `@seriesLength` steps (else the first case's)."""
    declared = header.keys.get("serieslength")
    expected = declared if isinstance(declared, int) else int(lengths[0])
    where = "@seriesLength" if isinstance(declared, int) else f"line {case_lines[0]}"
    bad = np.flatnonzero(lengths != expected)
    if bad.size:
        i = int(bad[0])
        raise TSFormatError(
            f"{path}:{case_lines[i]}: {lengths[i]} steps, but '@equalLength true' and "
            f"{where} has {expected}; fix the case or declare '@equalLength false'"
        )


def ts_path(name: str, split: str) -> Path:
    """Path of a vendored archive file: `ts_path("basicmotions", "train")`."""
    key = name.lower()
    if key not in TS_DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(TS_DATASETS)}")
    if split.lower() not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    return TS_DIR / f"{TS_DATASETS[key]}_{split.upper()}.ts"


def load_ts_dataset(name: str, split: str) -> TSDataset:
    """One of the vendored archive problems (`basicmotions`, `japanesevowels`), `train`/`test`."""
    return load_ts(ts_path(name, split), name=name.lower())


def pad_windows(X: np.ndarray, lengths: np.ndarray, max_length: int) -> np.ndarray:
    """`X [N, T, C]` zero-padded (or cut) to `[N, max_length, C]`; no valid step may be cut."""
    lengths = np.asarray(lengths)
    if lengths.size and int(lengths.max()) > max_length:
        raise ValueError(
            f"a window has {int(lengths.max())} valid steps, longer than {max_length}; "
            "pad to the longest length of both splits"
        )
    N, T, C = X.shape
    out = np.zeros((N, max_length, C), dtype=np.float64)  # (N, T', C)
    keep = min(T, max_length)
    out[:, :keep] = X[:, :keep]
    return out


def fit_channel_standardizer(X: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel `(mean [C], std [C])` over valid steps of `X [N, T, C]` (NaN ignored).

    Fit it on the training split only. std is 1.0 where a channel is constant (or has no
    values), as `data.fit_standardizer`; population std, as scikit-learn's StandardScaler.
    """
    m = valid_mask(lengths, X.shape[1])  # (N, T)
    v = X[m]  # (valid steps, C)
    ok = ~np.isnan(v)  # (valid steps, C)
    count = ok.sum(axis=0)  # (C,)
    safe = np.where(ok, v, 0.0)
    mean = safe.sum(axis=0) / np.maximum(count, 1)  # (C,)
    var = (np.where(ok, v - mean, 0.0) ** 2).sum(axis=0) / np.maximum(count, 1)  # (C,)
    std = np.sqrt(var)
    std = np.where(std > 0.0, std, 1.0)
    return mean, std


def standardize_windows(
    X: np.ndarray, lengths: np.ndarray, mean: np.ndarray, std: np.ndarray, view=None
) -> np.ndarray:
    """`(X - mean) / std` per channel at valid steps, exactly 0 at padding; NaN stays NaN.
    `view` given: of the input view of `X` (`windows.InputView`)."""
    X = input_view(np.asarray(X, dtype=np.float64), view)
    m = valid_mask(lengths, X.shape[1])[:, :, None]  # (N, T, 1)
    return np.where(m, (X - mean) / std, 0.0)  # (N, T, C)


def _format_value(v: float) -> str:
    return MISSING if math.isnan(v) else repr(float(v))  # repr round-trips a float64 exactly


def write_ts(
    path: str | Path,
    X: np.ndarray,
    lengths: np.ndarray | None,
    y: np.ndarray,
    class_names: list[str],
    problem_name: str = "tinyattn",
    rate: float | None = None,
) -> Path:
    """Write windows `X [N, T, C]` (valid steps `lengths`, default all) as a `.ts` file;
    `rate`: the steps per second, recorded as a comment line (`rate_line`).

    The header follows the data: `@missing true` if any valid value is NaN (written `?`),
    `@univariate` for C == 1, `@equalLength`/`@seriesLength` from `lengths`. Written to a
    temporary file and renamed, so a reader never sees half a file. `load_ts` reads it back
    exactly (values round-trip through `repr`).
    """
    path = Path(path)
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 3:
        raise ValueError(f"X must be [N, T, C], got shape {X.shape}")
    N, T, C = X.shape
    lengths = np.full(N, T) if lengths is None else np.asarray(lengths, dtype=np.int64)
    y = np.asarray(y, dtype=np.int64)
    if lengths.shape != (N,) or y.shape != (N,):
        raise ValueError(f"lengths and y must be [N={N}], got {lengths.shape} and {y.shape}")
    if N == 0 or C == 0 or lengths.min() < 1 or lengths.max() > T:
        raise ValueError(f"need N, C >= 1 and 1 <= lengths <= T={T}")
    if y.min() < 0 or y.max() >= len(class_names):
        raise ValueError(f"y must index class_names (0..{len(class_names) - 1})")
    for c in class_names:
        if not c or any(ch.isspace() for ch in c) or ":" in c:
            raise ValueError(f"class name {c!r} cannot be written (no spaces or ':')")
    mask = valid_mask(lengths, T)
    missing = bool(np.isnan(X[mask]).any())
    equal = bool((lengths == lengths[0]).all())
    lines = [rate_line(rate)] if rate else []
    lines += [
        f"@problemName {problem_name}",
        "@timeStamps false",
        f"@missing {str(missing).lower()}",
        f"@univariate {str(C == 1).lower()}",
        f"@dimensions {C}",
        f"@equalLength {str(equal).lower()}",
    ]
    if equal:
        lines.append(f"@seriesLength {int(lengths[0])}")
    lines += [f"@classLabel true {' '.join(class_names)}", "@data"]
    for n in range(N):
        window = X[n, : lengths[n]]  # (T_n, C)
        channels = [",".join(_format_value(v) for v in window[:, c]) for c in range(C)]
        lines.append(":".join(channels) + ":" + class_names[y[n]])
    with atomic_open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    return path
