# Host (CPython): the device runtime (device/attention.py) checked under CPython.
"""`device/attention.py` runs unchanged under CPython (pure-Python kernels there), so a user
without MicroPython can check it: the same parity checks as tests/test_device_mp.py against
the host references, the reader's rejections with the host reader's messages, the API, and
the invariants of the kernel modules. Blobs: the real reference blobs (`tinyattn train` +
`tinyattn export`, int8 and --float32) and an odd-shaped synthetic model.
"""

from __future__ import annotations

import importlib
import zlib

import numpy as np
import pytest
from device_support import (
    corruptions,
    host_reference,
    iris_X,
    odd_blob,
    recrc,
    reference_blobs,
)

from tinyattn.data.tabular import load_dataset
from tinyattn.intmodel.blob import BlobError as HostBlobError
from tinyattn.intmodel.blob import read_blob

pytestmark = pytest.mark.host


@pytest.fixture(scope="module")
def blobs(tmp_path_factory):
    q8, f32 = reference_blobs(tmp_path_factory.mktemp("ref"))
    return q8.read_bytes(), f32.read_bytes()


def _device_outputs(m, X):
    """xq, int8 logits, int8 argmax, float logits, float argmax for every row of X."""
    out = m.new_logits()
    rows = []
    for x in X.tolist():
        xq = m.quantize(x) if m.quantized else None
        pred = m.run_int8(xq, out) if m.quantized else None
        lf = m.logits(x, "float")
        rows.append((xq and list(xq), list(out) if m.quantized else None, pred, lf,
                     m.predict(x, "float")))  # fmt: skip
    return rows


def _assert_parity(rows, data, X):
    xq, lq, lf = host_reference(data, X)
    for n, (dxq, dlq, dpred, dlf, dpf) in enumerate(rows):
        if xq is not None:
            assert dxq == xq[n].tolist(), n
            assert dlq == lq[n].tolist(), n  # every integer
            assert dpred == int(np.argmax(lq[n])), n
        assert np.max(np.abs(np.array(dlf) - lf[n])) <= 1e-4, (n, dlf, lf[n])
        assert dpf == int(np.argmax(lf[n])), n


def test_device_cpython_reference_blob_matches_host_references(attention, blobs):
    X = iris_X()
    m = attention.Model(blobs[0], kernels="pure")
    assert (m.kernels, m.float_kernels, m.quantized) == ("pure", "pure", True)
    _assert_parity(_device_outputs(m, X), blobs[0], X)


def test_device_cpython_float32_blob_matches_floatref(attention, blobs):
    X = iris_X()
    m = attention.Model(blobs[1])
    assert not m.quantized and m.kernels is None
    _assert_parity(_device_outputs(m, X), blobs[1], X)
    assert m.predict(X[0].tolist()) == m.predict(X[0].tolist(), "float")
    with pytest.raises(ValueError, match="float32 weights only"):
        m.run_int8(m.quantize(X[0].tolist()), m.new_logits())


def test_device_cpython_odd_architecture_matches_host_references(attention):
    data, X = odd_blob()
    m = attention.Model(data)
    assert m.op_names == ["dense", "relu", "reshape", "dense", "attention", "relu",
                          "attention", "avgpool", "dense"]  # fmt: skip
    _assert_parity(_device_outputs(m, X), data, X)


def test_device_cpython_model_from_path_equals_model_from_bytes(attention, tmp_path, blobs):
    path = tmp_path / "model.bin"
    path.write_bytes(blobs[0])
    a, b = attention.Model(str(path)), attention.Model(blobs[0])
    x = [6.3, 3.3, 6.0, 2.5]
    assert a.logits(x) == b.logits(x) and a.logits(x, "float") == b.logits(x, "float")
    assert a.class_names == ["setosa", "versicolor", "virginica"]
    assert a.format_version == 1 and a.n_features == 4 and a.n_classes == 3
    assert a.op_names == ["dense", "relu", "reshape", "attention", "avgpool", "dense"]


def test_device_cpython_api_predict_classify_agree_with_logits(attention, blobs):
    m = attention.Model(blobs[0])
    data = load_dataset("iris")
    X, y = data.rows, data.y
    for x in X[::7].tolist():
        lq = m.logits(x)
        assert m.predict(x) == lq.index(max(lq))  # the first maximum
        assert m.classify(x) == m.class_names[m.predict(x)]
        lf = m.logits(x, "float")
        assert m.classify(x, "float") == m.class_names[lf.index(max(lf))]
    # and the answers are right, not merely consistent: the trained reference model gets
    # 146 of the 150 Iris samples (its 120 training rows among them) on either path
    assert m.class_names == data.class_names
    for path in ("int8", "float"):
        pairs = zip(X.tolist(), y.tolist(), strict=True)
        right = sum(m.predict(x, path) == label for x, label in pairs)
        assert right >= 0.93 * len(y), (path, right)
    out = m.new_logits()
    assert out.typecode == "i" and len(out) == 3 and list(out) == [0, 0, 0]
    with pytest.raises(ValueError, match="path must be"):
        m.logits(X[0].tolist(), "int4")


def test_device_cpython_quantize_validates_and_clamps_like_intref(attention, blobs):
    m = attention.Model(blobs[0])
    X = np.array([[1e6, -1e6, 0.0, 3.0], [-1e9, 1e9, 5.8, 1.2], [5.1, 3.5, 1.4, 0.2]])
    xq, _, _ = host_reference(blobs[0], X)
    for n, x in enumerate(X.tolist()):
        q = m.quantize(x)
        assert q.typecode == "b" and list(q) == xq[n].tolist()
    buf = m.quantize(X[2].tolist())
    assert m.quantize(X[0].tolist(), buf) is buf and list(buf) == xq[0].tolist()
    with pytest.raises(ValueError, match="expected 4 numbers, got 3"):
        m.quantize([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="NaN"):
        m.quantize([1.0, float("nan"), 3.0, 4.0])
    with pytest.raises(ValueError, match="run_int8 needs"):
        m.run_int8(buf, m.new_logits()[:2])


def test_device_cpython_kernel_sets_on_cpython(attention, blobs):
    assert attention.kernels_available() == ["pure"]  # no micropython module here
    assert attention.Model(blobs[0]).kernels == "pure"  # "auto" falls back
    with pytest.raises(ValueError, match="'viper' not available here"):
        attention.Model(blobs[0], kernels="viper")
    with pytest.raises(ValueError, match="kernels must be"):
        attention.Model(blobs[0], kernels="fast")


def test_device_cpython_corrupt_blobs_raise_host_reader_messages(attention, blobs):
    cases = corruptions(blobs[0])
    assert len(cases) >= 20
    for what, data in cases:
        with pytest.raises(HostBlobError) as host:
            read_blob(data)
        with pytest.raises(attention.BlobError) as device:
            attention.Model(data)
        assert isinstance(device.value, ValueError), what
        assert str(device.value) == str(host.value), what


def test_device_cpython_random_corruptions_agree_with_host_reader(attention, blobs):
    """Random byte changes, re-CRC'd so they reach the structure checks: the device reader
    accepts exactly what the host reader accepts, and otherwise says the same thing."""
    ref = blobs[0]
    rng = np.random.default_rng(4)
    rejected = 0
    for _ in range(400):
        data = bytearray(ref)
        for p in rng.integers(32, len(data) - 4, size=rng.choice([1, 2, 4])):
            data[p] = int(rng.integers(0, 256))
        data = recrc(data)
        try:
            read_blob(data)
            host = None
        except HostBlobError as exc:
            host = str(exc)
        try:
            attention.read_blob(data)
            device = None
        except attention.BlobError as exc:
            device = str(exc)
        assert device == host
        rejected += host is not None
    assert rejected > 50  # the mutations reach the checks


def test_device_cpython_malformed_input_types_raise_value_error(attention):
    with pytest.raises(ValueError, match="truncated"):
        attention.Model(b"")
    with pytest.raises(ValueError, match="bad magic"):
        attention.Model(bytes(64))
    with pytest.raises(OSError):
        attention.Model("/nonexistent/model.bin")


def test_device_cpython_crc32_fallback_equals_zlib(attention):
    import attention_crc  # the port-without-binascii fallback, imported only there

    rng = np.random.default_rng(0)
    for n in (0, 1, 3, 255, 1880):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert attention_crc.crc32(data) == zlib.crc32(data)
        assert attention_crc.crc32(data[n // 2 :], attention_crc.crc32(data[: n // 2])) == (
            zlib.crc32(data))  # continued, as binascii.crc32(data, crc)
    assert attention.crc32(b"tinyattn") == zlib.crc32(b"tinyattn")


def test_device_cpython_naive_baseline_agrees_with_float_path(attention, blobs, tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(blobs[0])
    naive = importlib.import_module("naive")
    m, b = naive.NaiveModel(str(path)), attention.Model(blobs[0])
    for x in iris_X()[::10].tolist():
        assert np.max(np.abs(np.array(m.logits(x)) - b.logits(x, "float"))) <= 1e-4
