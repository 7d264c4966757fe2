# Host (CPython), the device module under CPython and MicroPython, and a virtual board.
"""The input's log view (docs/quantization.md "Input view", docs/blob-format.md `input_view`):
its equation on the host (libm's log, value by value), the model file and the blob carrying
the floor, the device computing the same int8 input and logits bit for bit (CPython and the
MicroPython unix port), bad floors and views refused by both readers with the same message,
the search's `view` stage, and `tinyattn train --log-view` end to end: export, flash and
parity on a virtual board, every int8 logit exact.
"""

from __future__ import annotations

import json
import math
import struct
import zlib

import numpy as np
import pytest
from device_support import DEVICE_DIR, find, flash_and_parity, run_micropython

from tinyattn import cli
from tinyattn.data.timeseries import write_ts
from tinyattn.data.windows import fit_log_floor, log_view
from tinyattn.intmodel.blob import BlobError, blob_bytes, read_blob
from tinyattn.intmodel.intref import quantize_input, run_int8
from tinyattn.intmodel.quantize import quantize
from tinyattn.learn.model import load_model, save_model
from tinyattn.learn.search import Candidate, stage_candidates
from tinyattn.learn.seqmodel import SeqAttnConfig
from tinyattn.learn.seqtrain import train_seq
from tinyattn.learn.train import TrainConfig, npz_model

N, T, C = 24, 16, 2


def _windows(seed: int = 4):
    """Heavy-tailed positive levels (a power draw's shape), 3 classes, unequal lengths."""
    rng = np.random.default_rng(seed)
    y = np.arange(N) % 3
    X = np.exp(rng.normal(0.5 * y[:, None, None], 1.0, (N, T, C)))  # (N, T, C)
    lengths = rng.integers(6, T + 1, N)
    X[np.arange(T)[None, :] >= lengths[:, None]] = 0.0
    return X, lengths, y


@pytest.fixture(scope="module")
def log_blob():
    X, n, y = _windows()
    arch = SeqAttnConfig(patch=4, embed_dim=8, num_heads=2, blocks=1, ff_dim=16, log_view=True)
    res = train_seq(X, n, y, 3, arch, TrainConfig(epochs=8))
    spec = quantize(npz_model(res, ["a", "b", "c"]), X, n)
    return res, blob_bytes(spec), (X, n, y)


@pytest.mark.host
def test_log_view_is_libm_log_of_one_plus_the_excess_value_by_value():
    x = np.array([[-2.0, 0.5], [0.25, 7.0], [np.nan, 1e300], [-np.inf, 3.0]])
    floor = np.array([-1.0, 1.0], np.float32)
    got = log_view(x, floor)
    want = [[0.0, 0.0], [math.log(1.0 + 1.25), math.log(7.0)], [math.nan, math.log(1e300)],
            [-math.inf, math.log(3.0)]]  # fmt: skip
    assert np.array_equal(got, np.array(want), equal_nan=True)
    assert log_view(x, None) is x
    X, n, _ = _windows()
    floor = fit_log_floor(X, n)
    assert floor.dtype == np.float32 and floor.shape == (C,)
    valid = np.arange(T)[None, :] < n[:, None]
    assert np.array_equal(floor, X[valid].min(axis=0).astype(np.float32))  # not the padding


@pytest.mark.host
def test_log_view_model_file_and_blob_carry_the_floor(log_blob, tmp_path):
    res, data, (X, n, _) = log_blob
    floor = res.model.ops[0]["log_floor"]
    assert np.array_equal(np.float32(floor), fit_log_floor(X, n))
    save_model(tmp_path / "m.npz", res.model, res.norm_mean, res.norm_std,
               {"class_names": ["a", "b", "c"]})
    assert load_model(tmp_path / "m.npz").ops[0]["log_floor"] == floor
    assert struct.unpack_from("<H", data, 30)[0] == 1  # input_view: log
    blob = read_blob(data)
    assert np.array_equal(blob.log_floor, np.float32(floor))
    # the view is what the int8 input sees: without it the same weights quantize otherwise
    raw = read_blob(blob_bytes(_without_view(blob)))
    assert raw.log_floor is None
    assert not np.array_equal(quantize_input(blob, X, n), quantize_input(raw, X, n))


def _without_view(blob):
    from dataclasses import replace

    return replace(blob, log_floor=None)


@pytest.mark.host
def test_log_view_device_cpython_bit_exact_and_same_errors(log_blob, attention):
    res, data, (X, n, _) = log_blob
    blob = read_blob(data)
    xq = quantize_input(blob, X, n)
    lq = run_int8(blob, xq, n)
    m = attention.Model(data)
    for b in range(N):
        w = [float(v) for v in X[b, : n[b]].ravel()]
        assert list(m.quantize(w)) == xq[b].tolist()
        assert m.logits(w) == lq[b].tolist()
    for bad in (math.nan, math.inf, -math.inf):  # refused on the raw value, as without a view
        w = [float(v) for v in X[0, : n[0]].ravel()]
        w[3] = bad
        Xb = X[:1].copy()
        Xb[0, 1, 1] = bad
        with pytest.raises(ValueError) as host:
            quantize_input(blob, Xb, n[:1])
        with pytest.raises(ValueError) as dev:
            m.quantize(w)
        assert str(host.value) == "row 0: " + str(dev.value)


def _with_crc(data: bytearray) -> bytes:
    struct.pack_into("<I", data, len(data) - 4, zlib.crc32(bytes(data[:-4])))
    return bytes(data)


@pytest.mark.host
@pytest.mark.parametrize(("what", "message"), [
    ("view 2", "unknown input view 2 (0 raw, 1 log)"),
    ("nan floor", "log floor contains NaN or infinity"),
])  # fmt: skip
def test_log_view_bad_view_or_floor_refused_by_both_readers(log_blob, attention, what, message):
    _, data, _ = log_blob
    bad = bytearray(data)
    if what == "view 2":
        struct.pack_into("<H", bad, 30, 2)
    else:  # the floor follows names, norm mean and std
        names_len = struct.unpack_from("<H", data, 28)[0]
        at = 32 + names_len + (-names_len % 4) + 8 * C
        assert np.array_equal(np.frombuffer(data[at : at + 4 * C], np.float32),
                              read_blob(data).log_floor)  # fmt: skip
        struct.pack_into("<f", bad, at, math.nan)
    bad = _with_crc(bad)
    with pytest.raises(BlobError) as host:
        read_blob(bad)
    assert message in str(host.value)
    with pytest.raises(ValueError) as dev:
        attention.Model(bad)
    assert str(dev.value) == str(host.value)


MP_LOGITS = """
import sys, json
sys.path.insert(0, sys.argv[1])
import attention
m = attention.Model(open(sys.argv[2], "rb").read())
for line in open(sys.argv[3]):
    print(json.dumps(m.logits(json.loads(line))))
"""


def test_log_view_micropython_bit_exact(log_blob, tmp_path):
    if find("micropython") is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    _, data, (X, n, _) = log_blob
    blob = read_blob(data)
    lq = run_int8(blob, quantize_input(blob, X, n), n)
    (tmp_path / "m.bin").write_bytes(data)
    rows = [json.dumps([float(v) for v in X[b, : n[b]].ravel()]) for b in range(N)]
    (tmp_path / "w.txt").write_text("\n".join(rows) + "\n")
    out = run_micropython(MP_LOGITS, [str(DEVICE_DIR), str(tmp_path / "m.bin"),
                                      str(tmp_path / "w.txt")], "256k")  # fmt: skip
    assert [json.loads(line) for line in out] == lq.tolist()


@pytest.mark.host
def test_search_view_stage_tries_the_other_view():
    X, n, y = _windows()
    from tinyattn.data.windows import Windows

    data = Windows("w", X, n, y, ["a", "b", "c"])
    base = Candidate(SeqAttnConfig(patch=4), TrainConfig())
    views = [c.arch.log_view for c in stage_candidates("view", data, base)]
    assert views == [False, True]
    logged = Candidate(SeqAttnConfig(patch=4, log_view=True), TrainConfig())
    assert [c.arch.log_view for c in stage_candidates("view", data, logged)] == [True, False]
    assert " log |" in stage_candidates("view", data, base)[1].label()


@pytest.mark.usefixtures("tmp_cwd")
def test_train_log_view_exports_flashes_and_passes_parity(tmp_path, capsys, vboard_factory):
    if find("micropython") is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    X, n, y = _windows()
    write_ts(tmp_path / "P_TRAIN.ts", X, n, y, ["a", "b", "c"], "P")
    write_ts(tmp_path / "P_TEST.ts", X[::-1] * 1.1 - 0.05, n[::-1], y[::-1], ["a", "b", "c"], "P")
    code = cli.main(["train", "--ts", "P_TRAIN.ts", "--test", "P_TEST.ts", "--log-view",
                     "--patch", "4", "--embed", "8", "--heads", "2", "--epochs", "6",
                     "--out", "m.npz", "--quiet"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert "log_floor" in load_model(tmp_path / "m.npz").ops[0]
    assert cli.main(["export", "--model", "m.npz", "--out", "m.bin"]) == 0
    assert read_blob((tmp_path / "m.bin").read_bytes()).log_floor is not None
    flash_and_parity(vboard_factory(), capsys, tmp_path, N)
