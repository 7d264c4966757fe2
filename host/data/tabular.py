"""Host (CPython): datasets as float64 arrays — CSV loading, stratified splits, standardization.

- `load_dataset("iris" | "wine")` reads the vendored copies in `host/data/` (sources and
  checksums in `host/data/README.md`).
- `load_csv(path, target=None)` reads any numeric CSV with a header row: every column except
  the target is a float feature; the target column (default: the last one) holds class labels,
  and the class names come from the data (sorted, numerically when every label is a number).
  A first row of numbers is data, not a header (`check_header`): refused with a one-line
  error saying to add a header row, never read as names (`tinyattn predict` reads such a file
  by position, and says so). `Windows.target` keeps the label column's name. `write_csv`
  writes rows back as a CSV that `load_csv` reads exactly (the Python API's export). The rows come
  as windows of one step (`X [N, 1, F]`, lengths 1: `host/data/windows.py`), the one data type.
  Column names that are numbers (`400,410,...`) are refused too: name them (`nm400`).
- `stratified_split` / `stratified_kfold` keep the class proportions, driven by a seeded
  `numpy.random.Generator` so a seed always gives the same indices.
- `fit_standardizer` is fitted on the train split only (no test statistics leak into training)
  and its mean/std are saved with the model (`docs/model-format.md`).

References: scikit-learn's `StratifiedShuffleSplit` / `StratifiedKFold` and `StandardScaler`
(same idea, independent code).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from tinyattn.atomic import atomic_open
from tinyattn.data.windows import Windows
from tinyattn.paths import DATA_DIR

# Largest |feature| accepted: the device server's limit (docs/protocol.md; boards compute in
# float32, whose range ends near 3.4e38, and standardizing must not overflow on the way).
MAX_ABS_FEATURE = 1e30

# Vendored datasets: name -> (file in host/data/, target column).
DATASETS: dict[str, tuple[str, str]] = {
    "iris": ("iris.csv", "species"),
    "wine": ("wine.csv", "cultivar"),
}


# A CSV's rows are read as windows of one step (`Windows`, host/data/windows.py: X [N, 1, F],
# lengths 1), the one data type from the readers on.
Dataset = Windows


def _label_key(labels: set[str]):
    """Sort key for class names: numeric order if every label is a number, else text order."""
    try:
        for label in labels:
            float(label)
    except ValueError:
        return str
    return float


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def check_header(path: str | Path, header: list[str], n_features: int) -> None:
    """ValueError when the first row of a CSV is data, not column names: at least as many of
    its cells are numbers as the file has features (a label column may hold text)."""
    if sum(_is_number(cell) for cell in header) >= min(n_features, len(header)):
        raise ValueError(
            f"{path}:1: the first row is numbers, not column names; add a header row "
            "(the feature names, then the label column's)"
        )


def read_csv_rows(path: str | Path) -> list[list[str]]:
    """The non-blank rows of a CSV file as cells. The delimiter is a comma, or a semicolon or
    tab when the first line has no comma but those (a spreadsheet's export in many locales).
    One-line ValueError naming the file when it cannot be read or is not UTF-8 text."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror}); check the path") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise ValueError(
            f"{path}:{line}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); save the file "
            f"as UTF-8 (e.g. 'iconv -f latin1 -t utf-8 {path} > utf8.csv')"
        ) from None
    first = next((line for line in text.splitlines() if line.strip()), "")
    delimiter = ","
    if "," not in first:
        delimiter = max(";\t", key=first.count) if (";" in first or "\t" in first) else ","
    reader = csv.reader(text.splitlines(), delimiter=delimiter)
    return [row for row in reader if row and any(cell.strip() for cell in row)]


def check_columns(path: str | Path, header: list[str]) -> None:
    """ValueError when a column name appears twice (every name must pick one column)."""
    twice = [h for j, h in enumerate(header) if h in header[:j]]
    if twice:
        raise ValueError(f"{path}:1: column {twice[0]!r} appears twice; name each column once")


MAX_CLASSES = 50  # distinct values above which a numeric last column is a feature


def check_default_target(path: Path, target: str, values: list[str], n_rows: int) -> None:
    """ValueError when the last column, taken as the label column because --target was not
    given, looks like a feature: numbers that are not whole (measurements), or more distinct
    numbers than a class column has (over MAX_CLASSES, or one a row or two)."""
    try:
        numbers = [float(v) for v in values]
    except ValueError:
        return  # class names: a label column
    whole = all(math.isfinite(v) and v == int(v) for v in numbers)
    if whole and len(values) <= min(MAX_CLASSES, n_rows // 2):
        return  # class codes 0, 1, 2 …
    shown = ", ".join(values[:4]) + (", …" if len(values) > 4 else "")
    raise ValueError(
        f"{path}: no --target given, and the last column {target!r} is numeric ({len(values)} "
        f"distinct values: {shown}): a feature, not a class label; name the label column with "
        "--target COL"
    )


def load_csv(path: str | Path, target: str | None = None, name: str | None = None) -> Windows:
    """Read a numeric CSV with a header row; `target` names the label column (default: last).
    Its rows are windows of one step: `X [N, 1, F]`, lengths 1."""
    path = Path(path)
    rows = read_csv_rows(path)
    if len(rows) < 2:
        raise ValueError(f"{path}: needs a header row and at least one data row")
    header = [cell.strip() for cell in rows[0]]
    check_columns(path, header)
    check_header(path, header, max(1, len(header) - 1))  # every column but the label's
    given = target
    if target is None:
        target = header[-1]
    if target not in header:
        raise ValueError(
            f"{path}: no column named {target!r}; columns are {', '.join(header)} "
            "(pass the label column with --target COL)"
        )
    t = header.index(target)
    feature_names = [h for j, h in enumerate(header) if j != t]
    if not feature_names:
        raise ValueError(f"{path}: only the target column {target!r}; need at least one feature")

    X = feature_rows(path, rows, feature_names, t)  # (N, F)
    labels = [row[t].strip() for row in rows[1:]]

    class_names = sorted(set(labels), key=_label_key(set(labels)))
    if given is None:
        check_default_target(path, target, class_names, len(labels))
    if len(class_names) < 2:
        raise ValueError(f"{path}: target column {target!r} has one class; need at least two")
    index = {c: i for i, c in enumerate(class_names)}
    y = np.array([index[label] for label in labels], dtype=np.int64)
    lengths = np.ones(len(y), np.int64)
    return Windows(name or path.stem, X[:, None, :], lengths, y, class_names, path,
                   tuple(feature_names), target)  # fmt: skip


def write_csv(path: str | Path, rows: Windows) -> Path:
    """Write rows (windows of one step, with their feature `names` and `target` column) as a
    CSV that `load_csv(path, target=rows.target)` reads back exactly: a header row, the
    values as `repr` (which round-trips a float64), the class name last. Written to a temp
    file and renamed. ValueError for what the reader would not give back: unnamed or numeric
    feature names, a class name with spaces at either end."""
    names, target = list(rows.names), rows.target
    if not names or target is None:
        raise ValueError("rows to write need their feature names and target column")
    check_columns(path, [*names, target])
    if any(not n.strip() or _is_number(n) for n in names):
        raise ValueError(f"{path}: feature names {names} must be text, not numbers")
    bad = [c for c in rows.class_names if c != c.strip() or not c]
    if bad:
        raise ValueError(f"class name {bad[0]!r} cannot be written to a CSV (spaces at either "
                         "end, or empty); rename that class")  # fmt: skip
    with atomic_open(path, "w", encoding="utf-8", newline="") as f:
        out = csv.writer(f)
        out.writerow([*names, target])
        for x, label in zip(rows.rows, rows.y, strict=True):
            out.writerow([*(repr(float(v)) for v in x), rows.class_names[label]])
    return Path(path)


def feature_rows(
    path: str | Path, rows: list[list[str]], names: list[str], t: int,
    columns: list[int] | None = None, first: int = 1,
) -> np.ndarray:  # fmt: skip
    """The data rows (`rows[first:]`: after the header, or every row of a headerless file,
    `first` 0) as numbers `X [N, F]`: the `columns` in that order (`names[j]` is column
    `columns[j]`'s name), by default every column but `t` (the label; -1: none). One-line
    ValueError naming the line and column for a row of the wrong length, a non-number,
    NaN/inf or |x| > MAX_ABS_FEATURE."""
    width = len(rows[0])
    keep = columns if columns is not None else [j for j in range(width) if j != t]
    X = np.empty((len(rows) - first, len(names)))  # (N, F)
    for r, row in enumerate(rows[first:]):
        line = r + first + 1  # 1-based
        if len(row) != width:
            what = "header has" if first else "the first row has"
            raise ValueError(f"{path}:{line}: {len(row)} fields, {what} {width}; fix the row")
        for j, col in enumerate(keep):
            cell = row[col]
            try:
                X[r, j] = value = float(cell)
            except ValueError:
                if not cell.strip():
                    raise ValueError(
                        f"{path}:{line}: column {names[j]!r} is empty; fill the cell or drop "
                        "the row"
                    ) from None
                text = not any(_is_number(row[col]) for row in rows[first:] if len(row) > col)
                fix = (f"if it is the label column, name it with --target {names[j]}; else "
                       "drop or encode it") if text else "fix the cell, or drop or encode the "\
                    "column"  # fmt: skip
                raise ValueError(
                    f"{path}:{line}: column {names[j]!r} is {cell!r}, not a number; features "
                    f"must be numeric ({fix})"
                ) from None
            if not abs(value) <= MAX_ABS_FEATURE:  # NaN fails this too
                what = "not a finite number" if not np.isfinite(value) else "too large"
                raise ValueError(
                    f"{path}:{line}: column {names[j]!r} is {cell.strip()!r}, {what} "
                    f"(features must be finite, |x| <= {MAX_ABS_FEATURE:g}); fix or drop the row"
                )
    return X


def load_dataset(name: str) -> Windows:
    """One of the vendored datasets (`iris`, `wine`)."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    filename, target = DATASETS[name]
    return load_csv(DATA_DIR / filename, target=target, name=name)


def _class_name(c: int, class_names: list[str] | None) -> str:
    known = class_names is not None and 0 <= c < len(class_names)
    return repr(class_names[c]) if known else str(c)


def _count(n: int, unit: str) -> str:
    return f"{n} {unit if n != 1 else unit[:-1]}"


def stratified_split(
    y: np.ndarray, test_fraction: float = 0.2, seed: int = 0,
    class_names: list[str] | None = None, unit: str = "rows",
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Sorted `(train_idx, test_idx)`; each class gives `round(n_c * test_fraction)` to test.
    `class_names` and `unit` ("rows", "windows") only name things in the errors."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    rng = np.random.default_rng(seed)
    test: list[np.ndarray] = []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        n_test = int(round(len(idx) * test_fraction))
        if n_test == 0 or n_test == len(idx):
            raise ValueError(
                f"class {_class_name(c, class_names)} has {_count(len(idx), unit)}: too few "
                f"for a {test_fraction:.0%} test split"
            )
        test.append(idx[:n_test])
    test_idx = np.sort(np.concatenate(test))
    train_idx = np.setdiff1d(np.arange(len(y)), test_idx)
    return train_idx, test_idx


def stratified_kfold(
    y: np.ndarray, k: int, seed: int = 0, class_names: list[str] | None = None,
    unit: str = "rows",
) -> list[tuple[np.ndarray, np.ndarray]]:  # fmt: skip
    """`k` folds of sorted `(train_idx, test_idx)`; every row is in exactly one test fold.
    `class_names` and `unit` ("rows", "windows") only name things in the errors."""
    if k < 2:
        raise ValueError(f"k-fold needs k >= 2, got {k}")
    rng = np.random.default_rng(seed)
    fold_of = np.empty(len(y), dtype=np.int64)
    offset = 0  # continue the round-robin across classes so fold sizes stay balanced
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        if len(idx) < k:
            raise ValueError(
                f"class {_class_name(c, class_names)} has {_count(len(idx), unit)}, fewer than "
                f"k={k} folds; give --cv {len(idx)} or fewer"
            )
        fold_of[idx] = (np.arange(len(idx)) + offset) % k
        offset += len(idx)
    folds = []
    for f in range(k):
        folds.append((np.flatnonzero(fold_of != f), np.flatnonzero(fold_of == f)))
    return folds


def fit_standardizer(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature `(mean, std)` of `X [N, F]`; std is 1.0 where a feature is constant."""
    mean = X.mean(axis=0)  # (F,)
    std = X.std(axis=0)  # (F,) population std, as StandardScaler
    std = np.where(std > 0.0, std, 1.0)
    return mean, std


def standardize(X: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """`(X - mean) / std` as float64 `[N, F]` — the model's input."""
    return (np.asarray(X, dtype=np.float64) - mean) / std
