"""Host (CPython): vendored datasets, the generic CSV loader, stratified splits, scaling."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from tinyattn.data.tabular import (
    fit_standardizer,
    load_csv,
    load_dataset,
    standardize,
    stratified_kfold,
    stratified_split,
)
from tinyattn.paths import DATA_DIR

pytestmark = pytest.mark.host

# Pinned in host/data/README.md; a changed file changes every trained model.
IRIS_SHA256 = "b6b8efc86732bc48c9fbddba53e2c191fd4f263c0ee98e2b1b7d3543e8d2121d"
WINE_SHA256 = "0b1878a85c7319cb85c8f5eed4731bac48b130b99bb19169c8ac7f55fbc984f7"


def test_iris_csv_checksum_is_pinned():
    assert hashlib.sha256((DATA_DIR / "iris.csv").read_bytes()).hexdigest() == IRIS_SHA256


def test_wine_csv_checksum_is_pinned():
    assert hashlib.sha256((DATA_DIR / "wine.csv").read_bytes()).hexdigest() == WINE_SHA256


def test_iris_has_150_rows_and_50_per_class():
    d = load_dataset("iris")
    assert d.X.shape == (150, 1, 4) and d.X.dtype == np.float64  # rows: windows of one step
    assert d.lengths.tolist() == [1] * 150 and d.rows.shape == (150, 4)
    assert d.class_names == ["setosa", "versicolor", "virginica"]
    assert np.bincount(d.y).tolist() == [50, 50, 50]
    assert d.feature_names[0] == "sepal_length_cm"


def test_wine_classes_come_from_the_data():
    d = load_dataset("wine")
    assert d.X.shape == (178, 1, 13)
    assert d.class_names == ["class_0", "class_1", "class_2"]
    assert np.bincount(d.y).tolist() == [59, 71, 48]


def test_iris_split_is_120_30_stratified():
    d = load_dataset("iris")
    train_idx, test_idx = stratified_split(d.y, 0.2, seed=0)
    assert len(train_idx) == 120 and len(test_idx) == 30
    assert np.bincount(d.y[test_idx]).tolist() == [10, 10, 10]
    assert np.bincount(d.y[train_idx]).tolist() == [40, 40, 40]
    assert np.intersect1d(train_idx, test_idx).size == 0
    assert np.union1d(train_idx, test_idx).tolist() == list(range(150))


def test_split_same_seed_same_indices_other_seed_differs():
    y = load_dataset("iris").y
    a, b, c = (stratified_split(y, 0.2, seed=s) for s in (7, 7, 8))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(a[1], c[1])


def test_kfold_partitions_rows_and_keeps_class_balance():
    y = load_dataset("iris").y
    folds = stratified_kfold(y, 5, seed=0)
    tests = np.concatenate([te for _, te in folds])
    assert sorted(tests.tolist()) == list(range(150))
    for tr, te in folds:
        assert np.bincount(y[te]).tolist() == [10, 10, 10]
        assert np.intersect1d(tr, te).size == 0 and len(tr) + len(te) == 150


def test_standardizer_uses_train_rows_only():
    X = np.array([[1.0, 5.0], [3.0, 5.0], [100.0, -7.0]])
    mean, std = fit_standardizer(X[:2])
    assert mean.tolist() == [2.0, 5.0]
    assert std.tolist() == [1.0, 1.0]  # second feature constant on train -> 1.0, never 0
    Z = standardize(X[:2], mean, std)
    assert np.allclose(Z.mean(axis=0), 0.0)


def test_load_csv_target_column_and_numeric_class_order(tmp_path):
    path = tmp_path / "toy.csv"
    path.write_text("label,a,b\n10,1,2\n2,3,4\n10,5,6\n")
    d = load_csv(path, target="label")
    assert d.feature_names == ["a", "b"]
    assert d.class_names == ["2", "10"]  # numeric labels sort as numbers
    assert d.y.tolist() == [1, 0, 1]
    assert d.rows.tolist() == [[1, 2], [3, 4], [5, 6]]
    assert d.name == "toy"


@pytest.mark.parametrize(
    ("text", "target", "message"),
    [
        ("a,b\n1,x\n2,y\n", "c", "no column named 'c'"),
        ("a,b,y\n1,oops,u\n2,3,v\n", None, "not a number"),
        ("a,y\n1,u\n2\n", None, "1 fields, header has 2"),
        ("a,y\n1,u\n2,u\n", None, "one class"),
    ],
)
def test_load_csv_errors_name_the_problem(tmp_path, text, target, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_csv(path, target=target)


@pytest.mark.parametrize(
    "text",
    [
        "5.1,3.5,1.4,0.2,setosa\n4.9,3.0,1.4,0.2,setosa\n6.3,3.3,6.0,2.5,virginica\n",
        "1,2,0\n3,4,1\n5,6,0\n",  # numeric labels too
    ],
)
def test_load_csv_without_a_header_row_is_refused_not_misread(tmp_path, text):
    """Issue 12: a first row of numbers was read as column names (and lost as a sample)."""
    path = tmp_path / "noheader.csv"
    path.write_text(text)
    with pytest.raises(
        ValueError, match=r"noheader\.csv:1: the first row is numbers.*add a header"
    ):
        load_csv(path)


def test_load_csv_refuses_a_missing_header_predict_reads_it_by_position(tmp_path):
    """One check (data.check_header): train/export/parity --csv refuse a headerless file;
    predict --csv (new rows, issue 23) reads it by position and says so."""
    from tinyattn.board.predict import read_rows

    path = tmp_path / "noheader.csv"
    path.write_text("5.1,3.5,1.4,0.2,setosa\n6.3,3.3,6.0,2.5,virginica\n")
    with pytest.raises(ValueError, match="the first row is numbers"):
        load_csv(path)
    rows = read_rows(path, 4, None, ["sl", "sw", "pl", "pw"])
    assert rows.columns == "position" and rows.X.tolist() == [[5.1, 3.5, 1.4, 0.2],
                                                              [6.3, 3.3, 6.0, 2.5]]  # fmt: skip
    assert "no header row; columns taken by position as the model's features sl, sw" in rows.note


def test_load_csv_keeps_the_target_column_name(tmp_path):
    """The label column's name travels with the data (`Dataset.target`): the model file
    records it, and `tinyattn predict --csv` leaves that column out (issue 23)."""
    path = tmp_path / "t.csv"
    path.write_text("y,a,b\nu,1,2\nv,3,4\n")
    assert load_csv(path, target="y").target == "y"
    path.write_text("a,b,y\n1,2,u\n3,4,v\n")
    assert load_csv(path).target == "y"  # the last column by default


def test_load_csv_header_with_some_numeric_names_is_still_a_header(tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_text("a,2,y\n1,2,u\n3,4,v\n")
    assert load_csv(path).feature_names == ["a", "2"]
