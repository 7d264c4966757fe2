# Host (CPython), the device module under CPython and MicroPython, and a virtual board.
"""The input's log and clip views (docs/quantization.md "Input view", docs/blob-format.md
`input_view`): their equations on the host (libm's log, value by value; the clip's min/max),
the model file and the blob carrying the floor or the clip's low and high, the device
computing the same int8 input and logits bit for bit (CPython and the MicroPython unix port),
bad parameters and views refused by both readers with the same message, the search's `view`
stage, and `tinyattn train --log-view` / `--clip-view` end to end: export, flash and parity
on a virtual board, every int8 logit exact.
"""

from __future__ import annotations

import json
import math
import struct
import zlib

import numpy as np
import pytest
from device_support import DEVICE_DIR, find, flash_and_parity, run_micropython
from seq_models import VIEWS, view_model, view_windows

from tinyattn import cli
from tinyattn.data.timeseries import write_ts
from tinyattn.data.windows import (
    VIEW_CLIP,
    VIEW_LOG,
    InputView,
    fit_clip,
    fit_log_floor,
    input_view,
)
from tinyattn.intmodel.blob import BlobError, blob_bytes, read_blob
from tinyattn.intmodel.intref import quantize_input, run_int8
from tinyattn.learn.model import load_model, save_model
from tinyattn.learn.search import Candidate, stage_candidates
from tinyattn.learn.seqmodel import SeqAttnConfig
from tinyattn.learn.train import TrainConfig

N, T, C = view_windows()[0].shape


@pytest.fixture(scope="module", params=sorted(VIEWS))
def view_blob(request):
    return view_model(request.param)


@pytest.mark.host
def test_log_view_is_libm_log_of_one_plus_the_excess_value_by_value():
    x = np.array([[-2.0, 0.5], [0.25, 7.0], [np.nan, 1e300], [-np.inf, 3.0]])
    floor = np.array([-1.0, 1.0], np.float32)
    got = input_view(x, InputView(VIEW_LOG, (floor,)))
    want = [[0.0, 0.0], [math.log(1.0 + 1.25), math.log(7.0)], [math.nan, math.log(1e300)],
            [-math.inf, math.log(3.0)]]  # fmt: skip
    assert np.array_equal(got, np.array(want), equal_nan=True)
    assert input_view(x, None) is x
    X, n, _ = view_windows()
    view = fit_log_floor(X, n)
    (floor,) = view.params
    assert view.kind == VIEW_LOG and floor.dtype == np.float32 and floor.shape == (C,)
    valid = np.arange(T)[None, :] < n[:, None]
    assert np.array_equal(floor, X[valid].min(axis=0).astype(np.float32))  # not the padding


@pytest.mark.host
def test_clip_view_is_min_max_and_its_ceiling_a_train_percentile():
    x = np.array([[-2.0, 0.5], [0.25, 7.0], [np.nan, 1e300], [-np.inf, 3.0]])
    lo, hi = np.array([-1.0, 1.0], np.float32), np.array([0.0, 2.5], np.float32)
    got = input_view(x, InputView(VIEW_CLIP, (lo, hi)))
    want = [[-1.0, 1.0], [0.0, 2.5], [math.nan, 2.5], [-math.inf, 2.5]]  # non-finite: unchanged
    assert np.array_equal(got, np.array(want), equal_nan=True)
    X, n, _ = view_windows()
    X[0, 0, 0] = np.nan  # a missing value is not a value
    view = fit_clip(X, n, 90.0)
    lo, hi = view.params
    assert view.kind == VIEW_CLIP and lo.dtype == hi.dtype == np.float32 and hi.shape == (C,)
    valid = np.arange(T)[None, :] < n[:, None]
    for c in range(C):
        v = X[valid][:, c]
        v = v[np.isfinite(v)]  # not the padding, not the NaN
        assert lo[c] == np.float32(v.min()) and hi[c] == np.float32(np.percentile(v, 90.0))
        assert 0.08 < np.mean(v > hi[c]) < 0.12  # about a tenth of TRAIN's values lie above
    assert np.array_equal(fit_clip(X[:, :, :1] * 0 + np.nan, n, 99.0).params[1], [0.0])


def _fitted(res, X, n):
    """The view `res`'s architecture fits on its training windows."""
    op = res.model.ops[0]
    return fit_log_floor(X, n) if "log_floor" in op else fit_clip(X, n, VIEWS["clip"]["clip"])


@pytest.mark.host
def test_view_model_file_and_blob_carry_its_parameters(view_blob, tmp_path):
    res, data, (X, n, _) = view_blob
    key = "log_floor" if "log_floor" in res.model.ops[0] else "clip"
    stored = res.model.ops[0][key]
    want = _fitted(res, X, n)
    params = (stored,) if key == "log_floor" else tuple(stored)
    assert all(np.array_equal(np.float32(a), b) for a, b in zip(params, want.params, strict=True))
    save_model(tmp_path / "m.npz", res.model, res.norm_mean, res.norm_std,
               {"class_names": ["a", "b", "c"]})
    assert load_model(tmp_path / "m.npz").ops[0][key] == stored
    assert struct.unpack_from("<H", data, 30)[0] == want.kind  # input_view: 1 log, 2 clip
    blob = read_blob(data)
    assert blob.view.kind == want.kind
    assert all(np.array_equal(a, b) for a, b in zip(blob.view.params, want.params, strict=True))
    # the view is what the int8 input sees: without it the same weights quantize otherwise
    raw = read_blob(blob_bytes(_without_view(blob)))
    assert raw.view is None
    assert not np.array_equal(quantize_input(blob, X, n), quantize_input(raw, X, n))


def _without_view(blob):
    from dataclasses import replace

    return replace(blob, view=None)


@pytest.mark.host
def test_view_device_cpython_bit_exact_and_same_errors(view_blob, attention):
    res, data, (X, n, _) = view_blob
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
@pytest.mark.parametrize("what", ["view 3", "nan", "inf high", "low above high"])
def test_view_bad_view_or_parameters_refused_by_both_readers(view_blob, attention, what):
    _, data, _ = view_blob
    kind = read_blob(data).view.kind
    if what in ("inf high", "low above high") and kind != VIEW_CLIP:
        pytest.skip("the log view has one parameter, the floor")
    bad = bytearray(data)
    names_len = struct.unpack_from("<H", data, 28)[0]
    at = 32 + names_len + (-names_len % 4) + 8 * C  # the view's parameters follow mean and std
    params = np.frombuffer(data[at : at + 4 * C * len(read_blob(data).view.params)], np.float32)
    assert np.array_equal(params, np.concatenate(read_blob(data).view.params))
    message = {VIEW_LOG: "log floor contains NaN or infinity",
               VIEW_CLIP: "clip low contains NaN or infinity"}[kind]  # fmt: skip
    if what == "view 3":
        struct.pack_into("<H", bad, 30, 3)
        message = "unknown input view 3 (0 raw, 1 log, 2 clip)"
    elif what == "nan":
        struct.pack_into("<f", bad, at + 4, math.nan)
    elif what == "inf high":
        struct.pack_into("<f", bad, at + 4 * C, math.inf)
        message = "clip high contains NaN or infinity"
    else:  # channel 1's low above its high
        struct.pack_into("<f", bad, at + 4, float(params[C + 1]) + 1.0)
        message = "clip low has a value above clip high (must be <= high)"
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


def test_view_micropython_bit_exact(view_blob, tmp_path):
    if find("micropython") is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    _, data, (X, n, _) = view_blob
    blob = read_blob(data)
    lq = run_int8(blob, quantize_input(blob, X, n), n)
    (tmp_path / "m.bin").write_bytes(data)
    rows = [json.dumps([float(v) for v in X[b, : n[b]].ravel()]) for b in range(N)]
    (tmp_path / "w.txt").write_text("\n".join(rows) + "\n")
    out = run_micropython(MP_LOGITS, [str(DEVICE_DIR), str(tmp_path / "m.bin"),
                                      str(tmp_path / "w.txt")], "256k")  # fmt: skip
    assert [json.loads(line) for line in out] == lq.tolist()


@pytest.mark.host
def test_search_view_stage_tries_every_view_base_first():
    X, n, y = view_windows()
    from tinyattn.data.windows import Windows

    data = Windows("w", X, n, y, ["a", "b", "c"])
    base = Candidate(SeqAttnConfig(patch=4), TrainConfig())
    views = [(c.arch.log_view, c.arch.clip) for c in stage_candidates("view", data, base)]
    assert views == [(False, 0.0), (True, 0.0), (False, 99.9), (False, 99.0)]
    logged = Candidate(SeqAttnConfig(patch=4, log_view=True), TrainConfig())
    views = [(c.arch.log_view, c.arch.clip) for c in stage_candidates("view", data, logged)]
    assert views == [(True, 0.0), (False, 0.0), (False, 99.9), (False, 99.0)]
    clipped = Candidate(SeqAttnConfig(patch=4, clip=99.0), TrainConfig())
    views = [(c.arch.log_view, c.arch.clip) for c in stage_candidates("view", data, clipped)]
    assert views == [(False, 99.0), (False, 0.0), (True, 0.0), (False, 99.9)]
    labels = [c.label() for c in stage_candidates("view", data, base)]
    assert " log |" in labels[1] and " clip99.9 |" in labels[2]


@pytest.mark.usefixtures("tmp_cwd")
@pytest.mark.parametrize(("flags", "key", "kind"), [
    (["--log-view"], "log_floor", VIEW_LOG), (["--clip-view", "95"], "clip", VIEW_CLIP),
])  # fmt: skip
def test_train_view_exports_flashes_and_passes_parity(tmp_path, capsys, vboard_factory, flags,
                                                      key, kind):  # fmt: skip
    if find("micropython") is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    X, n, y = view_windows()
    write_ts(tmp_path / "P_TRAIN.ts", X, n, y, ["a", "b", "c"], "P")
    write_ts(tmp_path / "P_TEST.ts", X[::-1] * 1.1 - 0.05, n[::-1], y[::-1], ["a", "b", "c"], "P")
    code = cli.main(["train", "--ts", "P_TRAIN.ts", "--test", "P_TEST.ts", *flags,
                     "--patch", "4", "--embed", "8", "--heads", "2", "--epochs", "6",
                     "--out", "m.npz", "--quiet"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert key in load_model(tmp_path / "m.npz").ops[0]
    assert cli.main(["export", "--model", "m.npz", "--out", "m.bin"]) == 0
    assert read_blob((tmp_path / "m.bin").read_bytes()).view.kind == kind
    flash_and_parity(vboard_factory(), capsys, tmp_path, N)


@pytest.mark.host
@pytest.mark.parametrize(("flags", "message"), [
    (["--clip-view", "100"], "--clip-view 100: a percentile above 50 and below 100"),
    (["--clip-view", "40"], "--clip-view 40: a percentile above 50 and below 100"),
    (["--clip-view", "99", "--log-view"], "not with --log-view"),
])  # fmt: skip
def test_train_clip_view_bad_percentile_refused_in_one_line(tmp_path, capsys, flags, message):
    X, n, y = view_windows()
    write_ts(tmp_path / "P_TRAIN.ts", X, n, y, ["a", "b", "c"], "P")
    code = cli.main(["train", "--ts", str(tmp_path / "P_TRAIN.ts"), *flags, "--epochs", "1",
                     "--out", str(tmp_path / "m.npz"), "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and message in err and "Traceback" not in err
    assert not (tmp_path / "m.npz").exists()
