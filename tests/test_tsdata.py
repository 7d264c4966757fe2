"""Host (CPython): the `.ts` reader/writer, the vendored archive files, per-channel scaling."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyattn.data.timeseries import (
    TS_DIR,
    TSFormatError,
    fit_channel_standardizer,
    load_ts,
    load_ts_dataset,
    pad_windows,
    standardize_windows,
    ts_path,
    valid_mask,
    write_ts,
)

pytestmark = pytest.mark.host

# Pinned in host/data/ts/README.md (and ../shared/data/README.md); a changed file changes
# every trained model and every published comparison.
TS_SHA256 = {
    "BasicMotions_TRAIN.ts": "8dc43cc6306cb679c888c01e26f91772ac4441a916da43bac8b79734a538b9d6",
    "BasicMotions_TEST.ts": "79213102bc6fca1a398ad98ce1185dff0208fa3d1465e687f48288946b0ff8dc",
    "JapaneseVowels_TRAIN.ts": "68a430eabd919cc77f40b1f5f3bc0dcafacc1486bca9260785aeb7d262cc78cd",
    "JapaneseVowels_TEST.ts": "b3d41d6a0ca3bcad3afb9ca7d4365382aa51341e2e58bae2a574babdda5b9462",
    "Coffee_TRAIN.ts": "fb0b26c44c4d79816e5dc18af99f662e6b523c1b7b874a6814ed03e03ecf0331",
    "Coffee_TEST.ts": "29d3be1dac86b662427dae6e140af691358bdd6f8a2b6e0f610fa0dd9471623c",
    "Trace_TRAIN.ts": "70d80d43c2a94df1c29f6cf49cfe3dc6b076f95a238ed9c8025055a331e861a7",
    "Trace_TEST.ts": "5992719b5567a38599b7c97336b428d9eb52d1658b0178f47c02b66574d27fc1",
    "PickupGestureWiimoteZ_TRAIN.ts": (
        "4d303d9990df621c066fc454d62626e3721aed008462103500b86b1ac1ca92c8"),
    "PickupGestureWiimoteZ_TEST.ts": (
        "a9109bce918e48ee0e924e9cf2fdfdc4de364a3d88ec5e8aa44399ff08b11361"),
    "ACSF1_TRAIN.ts": "0646b90dc4843e02baed6b2ba345c5601a4991b6796565489cef1b2d92a7537b",
    "ACSF1_TEST.ts": "93e8aaeb44a10af181d24a156e60da7021193cd990ca28f263fccf3b905bfebf",
    "PLAID_TRAIN.ts": "40deb3bc6bd1e1aa0e6db6e6bfd3cecc4a23bf57f6a6d6ab90fb75e4a2c72344",
    "PLAID_TEST.ts": "aa6da0dc1461e8d374e068a940ce37d1b0bb1a9844596d818920c8af696d656d",
}  # fmt: skip

HEADER = """\
# a comment
@problemName Tiny
@timeStamps false
@missing {missing}
@univariate false
@dimensions 2
@equalLength {equal}
@classLabel true b a
@data
"""


def _ts(tmp_path: Path, text: str, name: str = "t.ts") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _header(missing: str = "false", equal: str = "false") -> str:
    return HEADER.format(missing=missing, equal=equal)


# --- vendored files -------------------------------------------------------------------------


@pytest.mark.parametrize("filename", sorted(TS_SHA256))
def test_ts_checksum_is_pinned(filename: str):
    assert hashlib.sha256((TS_DIR / filename).read_bytes()).hexdigest() == TS_SHA256[filename]


@pytest.mark.parametrize("split", ["train", "test"])
def test_basicmotions_is_40_windows_of_100_by_6_with_10_per_class(split: str):
    d = load_ts_dataset("basicmotions", split)
    assert d.X.shape == (40, 100, 6) and d.X.dtype == np.float64
    assert d.lengths.tolist() == [100] * 40
    assert d.class_names == ["Standing", "Running", "Walking", "Badminton"]  # declared order
    assert np.bincount(d.y).tolist() == [10, 10, 10, 10]
    assert d.name == "basicmotions" and d.source == ts_path("basicmotions", split)
    assert np.isfinite(d.X).all()


def test_japanesevowels_is_270_370_windows_of_12_channels_7_to_29_steps():
    train = load_ts_dataset("japanesevowels", "train")
    test = load_ts_dataset("japanesevowels", "test")
    assert len(train.y) == 270 and len(test.y) == 370
    assert train.n_channels == test.n_channels == 12
    assert train.class_names == test.class_names == [str(k) for k in range(1, 10)]
    assert np.bincount(train.y).tolist() == [30] * 9
    lengths = np.concatenate([train.lengths, test.lengths])
    assert lengths.min() == 7 and lengths.max() == 29
    # The longest window is in TEST: padding to the TRAIN length alone would cut it.
    assert train.max_length == 26 and test.max_length == 29
    for d in (train, test):
        assert np.isfinite(d.X).all()
        assert (d.X[~d.mask] == 0.0).all()  # zero padding past each length
        last = d.X[np.arange(len(d.y)), d.lengths - 1]  # (N, C) last valid step
        assert (np.abs(last).sum(axis=1) > 0).all()


def test_plaid_is_537_537_univariate_windows_of_100_to_1344_steps_in_11_classes():
    train = load_ts_dataset("plaid", "train")
    test = load_ts_dataset("plaid", "test")
    assert len(train.y) == len(test.y) == 537
    assert train.n_channels == test.n_channels == 1
    assert train.class_names == test.class_names == [str(k) for k in range(11)]
    assert train.lengths.min() == 100 and train.lengths.max() == 1344 == train.max_length
    assert test.max_length == 1000  # unequal lengths: the longest TEST window is shorter
    for d in (train, test):
        assert np.isfinite(d.X).all() and (d.X[~d.mask] == 0.0).all()


def test_japanesevowels_first_case_matches_the_file():
    d = load_ts_dataset("japanesevowels", "train")
    first = (TS_DIR / "JapaneseVowels_TRAIN.ts").read_text().split("@data\n")[1].splitlines()[0]
    *channels, label = first.split(":")
    assert d.lengths[0] == len(channels[0].split(","))
    assert d.X[0, 0, 0] == float(channels[0].split(",")[0])
    assert d.X[0, d.lengths[0] - 1, 11] == float(channels[11].split(",")[-1])
    assert d.class_names[d.y[0]] == label


def test_unknown_dataset_or_split_names_the_choices():
    with pytest.raises(ValueError, match="choose one of basicmotions, japanesevowels"):
        load_ts_dataset("iris", "train")
    with pytest.raises(ValueError, match="choose one of train, test"):
        load_ts_dataset("basicmotions", "valid")


# --- reader ---------------------------------------------------------------------------------


def test_univariate_equal_length_file(tmp_path: Path):
    text = (
        "@problemName Uni\n@timeStamps false\n@missing false\n@univariate true\n"
        "@equalLength true\n@seriesLength 3\n@classLabel true 0 1\n@data\n"
        "1,2,3:1\n4,5,6:0\n"
    )
    d = load_ts(_ts(tmp_path, text))
    assert d.name == "Uni" and d.X.shape == (2, 3, 1)
    assert d.X[:, :, 0].tolist() == [[1, 2, 3], [4, 5, 6]]
    assert d.y.tolist() == [1, 0] and d.class_names == ["0", "1"]


def test_header_keys_are_case_insensitive_and_labels_keep_declared_order(tmp_path: Path):
    text = (
        "@PROBLEMNAME x\n@TimeStamps FALSE\n@Missing false\n@UNIVARIATE false\n"
        "@Dimensions 2\n@EqualLength false\n@CLASSLABEL True zeta alpha\n@DATA\n"
        "1,2:3,4:alpha\n5:6:zeta\n"
    )
    d = load_ts(_ts(tmp_path, text))
    assert d.class_names == ["zeta", "alpha"] and d.y.tolist() == [1, 0]
    assert d.lengths.tolist() == [2, 1]
    assert d.X.tolist() == [[[1, 3], [2, 4]], [[5, 6], [0, 0]]]


def test_dimensions_come_from_the_first_case_when_not_declared(tmp_path: Path):
    text = "@classLabel true a\n@data\n1,2:3,4:5,6:a\n"
    d = load_ts(_ts(tmp_path, text))
    assert d.X.shape == (1, 2, 3) and d.name == "t"


def test_missing_values_are_nan_and_trailing_question_marks_shorten_the_case(tmp_path: Path):
    text = _header(missing="true") + "1,?,3,?:4,5,6,7:a\n1,2,?,?:3,4,?,?:b\n"
    d = load_ts(_ts(tmp_path, text))
    assert d.lengths.tolist() == [4, 2]  # case 2: the last two steps are '?' in every channel
    assert math.isnan(d.X[0, 1, 0]) and math.isnan(d.X[0, 3, 0])  # case 1: missing values
    assert d.X[0, :, 1].tolist() == [4, 5, 6, 7]
    assert d.X[1].tolist() == [[1, 3], [2, 4], [0, 0], [0, 0]]  # padding is 0, not NaN


def test_missing_values_in_equal_length_files_keep_the_length(tmp_path: Path):
    text = _header(missing="true", equal="true") + "1,?:2,?:a\n3,4:5,6:b\n"
    d = load_ts(_ts(tmp_path, text))
    assert d.lengths.tolist() == [2, 2] and math.isnan(d.X[0, 1, 0])


def _bad(tmp_path: Path, text: str) -> str:
    path = _ts(tmp_path, text, "bad.ts")
    with pytest.raises(TSFormatError) as info:
        load_ts(path)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{path}:"), msg
    return msg


# (file text, line the error names, what the message says)
BAD_FILES = {
    "unknown header": ("@problemName x\n@Colour red\n@data\n", 2, "unknown header @Colour"),
    "bare @": ("@problemName x\n@\n", 2, "unknown header @;"),
    "ragged channels": (_header() + "1,2:3,4:a\n1,2,3:4,5:a\n", 11, "differ in length (3, 2"),
    "non-number": (_header() + "1,2:3,x4:a\n", 10, "channel 1, step 1 is 'x4', not a number"),
    "empty value": (_header() + "1,,2:3,4,5:a\n", 10, "channel 0, step 1 is '', not a number"),
    "not finite": (_header() + "1,inf:3,4:a\n", 10, "'inf', not a finite number"),
    "undeclared label": (_header() + "1,2:3,4:c\n", 10, "label 'c' is not declared"),
    "missing not allowed": (_header() + "1,?:3,4:a\n", 10, "'?' (missing) but the header"),
    "too few dimensions": (_header() + "1,2:a\n", 10, "1 channels, @dimensions says 2"),
    "too many dimensions": (_header() + "1:2:3:a\n", 10, "3 channels, @dimensions says 2"),
    "dimensions vs first case": (
        "@classLabel true a\n@data\n1:2:a\n1:2:3:a\n",
        4,
        "3 channels, the first case (line 3) says 2",
    ),
    "univariate vs data": (
        "@univariate true\n@classLabel true a\n@data\n1:2:a\n",
        4,
        "2 channels, @univariate true says 1",
    ),
    "data before @data": ("@classLabel true a\n1,2:a\n@data\n", 2, "data before @data"),
    "no @data": ("# only\n@problemName x\n@classLabel true a\n", 3, "no @data line"),
    "no cases": ("@classLabel true a\n@data\n\n", 3, "no cases after @data"),
    "empty file": ("", 1, "empty file"),
    "blank file": ("\n  \n", 1, "empty file"),
    "equal length vs seriesLength": (
        _header(equal="true").replace("@data", "@seriesLength 2\n@data") + "1,2:3,4:a\n1:2:b\n",
        12,
        "1 steps, but '@equalLength true' and @seriesLength has 2",
    ),
    "equal length vs first case": (
        _header(equal="true") + "1,2:3,4:a\n1,2,3:4,5,6:b\n",
        11,
        "3 steps, but '@equalLength true' and line 10 has 2",
    ),
    "header after @data": (_header() + "1:2:a\n@missing true\n", 11, "@missing after @data"),
    "no labels declared": ("@problemName x\n@data\n1:a\n", 2, "@data before any '@classLabel"),
    "class label false": ("@classLabel false\n@data\n", 1, "'@classLabel false'"),
    "duplicate label": ("@classLabel true a b a\n@data\n", 1, "lists 'a' twice"),
    "bad boolean": ("@missing maybe\n", 1, "@missing is 'maybe'; write true or false"),
    "bad dimensions": ("@dimensions zero\n", 1, "@dimensions is 'zero'; needs an integer"),
    "header twice": ("@missing false\n@missing true\n", 2, "@missing given twice"),
    "timestamps": ("@timeStamps true\n@classLabel true a\n@data\n", 3, "not supported"),
    "no label separator": ("@classLabel true a\n@data\n1,2,3\n", 3, "no ':' in the case"),
    "class label without flag": ("@classLabel\n", 1, "@classLabel is ''; write true or false"),
    "regression": ("@targetLabel true\n", 1, "regression problem"),
    "only question marks": (_header(missing="true") + "?,?:?,?:a\n", 10, "has no values"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file_is_a_one_line_error_naming_file_line_and_problem(tmp_path: Path, case: str):
    text, line, fragment = BAD_FILES[case]
    msg = _bad(tmp_path, text)
    assert msg.startswith(f"{tmp_path / 'bad.ts'}:{line}: "), msg
    assert fragment in msg, msg


def test_unreadable_file_names_the_path(tmp_path: Path):
    with pytest.raises(TSFormatError, match="cannot read"):
        load_ts(tmp_path / "absent.ts")


def test_tsformaterror_is_a_valueerror():
    assert issubclass(TSFormatError, ValueError)


def test_unlabelled_windows_read_when_labels_are_optional(tmp_path: Path):
    """New data (`tinyattn predict --ts`): `@classLabel false` or no @classLabel, every ':'
    field a channel, y = -1; the training reader still refuses both."""
    for head in ("@classLabel false\n", ""):
        path = _ts(tmp_path, f"@dimensions 2\n{head}@data\n1,2:3,4\n5:6\n")
        d = load_ts(path, labels_required=False)
        assert d.y.tolist() == [-1, -1] and d.class_names == [] and d.lengths.tolist() == [2, 1]
        assert d.X[0].tolist() == [[1, 3], [2, 4]] and d.n_channels == 2
        with pytest.raises(TSFormatError, match="classLabel"):
            load_ts(path)
    univariate = _ts(tmp_path, "@classLabel false\n@data\n1,2,3\n4,5\n")
    assert load_ts(univariate, labels_required=False).lengths.tolist() == [3, 2]


def test_undeclared_and_missing_labels_read_when_labels_are_optional(tmp_path: Path):
    """A labelled file whose cases carry a label it does not declare (appended to
    class_names), or no label (exactly the declared channels: y = -1)."""
    path = _ts(tmp_path, _header() + "1,2:3,4:a\n1,2:3,4:c\n1,2:3,4\n1:2:b\n")
    d = load_ts(path, labels_required=False)
    assert d.class_names == ["b", "a", "c"] and d.y.tolist() == [1, 2, -1, 0]
    with pytest.raises(TSFormatError, match="label 'c' is not declared"):
        load_ts(path)
    with pytest.raises(TSFormatError, match="followed by labels"):
        load_ts(_ts(tmp_path, "@classLabel false a b\n@data\n1:2\n"), labels_required=False)


# --- writer ---------------------------------------------------------------------------------


def test_write_ts_round_trips_a_univariate_equal_length_file(tmp_path: Path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5, 8, 1))  # (N, T, C)
    y = np.array([0, 1, 2, 1, 0])
    path = write_ts(tmp_path / "uni.ts", X, None, y, ["lo", "mid", "hi"], problem_name="Uni")
    text = path.read_text()
    assert "@univariate true" in text and "@seriesLength 8" in text and "@missing false" in text
    d = load_ts(path)
    assert d.name == "Uni" and np.array_equal(d.X, X) and d.y.tolist() == y.tolist()
    assert d.class_names == ["lo", "mid", "hi"] and d.lengths.tolist() == [8] * 5


def test_write_ts_round_trips_unequal_lengths_and_missing_values(tmp_path: Path):
    rng = np.random.default_rng(1)
    lengths = np.array([3, 7, 1, 5])
    X = rng.normal(size=(4, 7, 3)) * 1e3  # (N, T, C)
    X[~valid_mask(lengths, 7)] = 0.0
    X[1, 2, 0] = np.nan
    y = np.array([1, 0, 1, 1])
    path = write_ts(tmp_path / "multi.ts", X, lengths, y, ["x", "y"])
    text = path.read_text()
    assert "@equalLength false" in text and "@seriesLength" not in text
    assert "@missing true" in text and "@dimensions 3" in text
    d = load_ts(path)
    assert d.lengths.tolist() == lengths.tolist() and d.y.tolist() == y.tolist()
    assert np.array_equal(d.X, X, equal_nan=True)
    assert not list(tmp_path.glob("*.tmp"))  # the temporary file was renamed


def test_write_ts_round_trips_japanesevowels_exactly(tmp_path: Path):
    d = load_ts_dataset("japanesevowels", "test")
    back = load_ts(write_ts(tmp_path / "jv.ts", d.X, d.lengths, d.y, d.class_names))
    assert np.array_equal(back.X, d.X) and np.array_equal(back.lengths, d.lengths)
    assert np.array_equal(back.y, d.y) and back.class_names == d.class_names


def test_write_ts_refuses_unwritable_class_names(tmp_path: Path):
    with pytest.raises(ValueError, match="cannot be written"):
        write_ts(tmp_path / "x.ts", np.zeros((1, 2, 1)), None, [0], ["two words"])


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 4),
    t=st.integers(1, 6),
    c=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_write_then_load_is_the_identity(tmp_path_factory, n: int, t: int, c: int, seed: int):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, t + 1, size=n)
    X = rng.normal(size=(n, t, c)) * 10.0 ** rng.integers(-30, 28, size=(n, t, c))
    X[~valid_mask(lengths, t)] = 0.0
    X = X[:, : lengths.max()]  # the reader pads to the longest case
    y = rng.integers(0, 2, size=n)
    path = write_ts(tmp_path_factory.mktemp("ts") / "p.ts", X, lengths, y, ["a", "b"])
    d = load_ts(path)
    assert np.array_equal(d.X, X) and d.lengths.tolist() == lengths.tolist()
    assert d.y.tolist() == y.tolist()


# --- scaling and padding --------------------------------------------------------------------


def test_channel_standardizer_counts_valid_steps_only():
    X = np.zeros((2, 3, 2))  # (N, T, C)
    X[0, :3] = [[1.0, 5.0], [3.0, 5.0], [5.0, 5.0]]
    X[1, :1] = [[3.0, 5.0]]  # steps 1, 2 are padding (zeros) and must not pull the mean down
    lengths = np.array([3, 1])
    mean, std = fit_channel_standardizer(X, lengths)
    assert mean.tolist() == [3.0, 5.0]
    assert std[0] == pytest.approx(math.sqrt(2.0)) and std[1] == 1.0  # constant channel -> 1


def test_channel_standardizer_ignores_missing_values():
    X = np.array([[[1.0], [np.nan], [3.0]]])
    mean, std = fit_channel_standardizer(X, np.array([3]))
    assert mean.tolist() == [2.0] and std.tolist() == [1.0]


def test_standardize_windows_keeps_padding_at_zero_and_uses_train_statistics():
    train = load_ts_dataset("japanesevowels", "train")
    test = load_ts_dataset("japanesevowels", "test")
    mean, std = fit_channel_standardizer(train.X, train.lengths)
    z_train = standardize_windows(train.X, train.lengths, mean, std)
    z_test = standardize_windows(test.X, test.lengths, mean, std)
    assert (z_train[~train.mask] == 0.0).all() and (z_test[~test.mask] == 0.0).all()
    valid = z_train[train.mask]  # (valid steps, C)
    assert np.allclose(valid.mean(axis=0), 0.0, atol=1e-12)
    assert np.allclose(valid.std(axis=0), 1.0)
    assert not np.allclose(z_test[test.mask].mean(axis=0), 0.0, atol=1e-3)  # no test leak


def test_pad_windows_pads_with_zeros_and_never_cuts_a_valid_step():
    train = load_ts_dataset("japanesevowels", "train")
    X = pad_windows(train.X, train.lengths, 29)
    assert X.shape == (270, 29, 12) and np.array_equal(X[:, :26], train.X)
    assert (X[:, 26:] == 0.0).all()
    test = load_ts_dataset("japanesevowels", "test")
    with pytest.raises(ValueError, match="29 valid steps, longer than 26"):
        pad_windows(test.X, test.lengths, 26)
