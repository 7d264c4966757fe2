# Host (CPython): the golden blob and golden integer outputs pin the format and the math.
"""tests/golden/tiny_v{N}.bin and .json (made by tools/dev/make_golden.py, see its README): the
current code must make exactly these bytes and these integer outputs for FORMAT_VERSION N.
If a change breaks this test on purpose, bump FORMAT_VERSION and generate new golden files.

The device runtime (device/attention.py, run here under CPython with whatever kernel set
imports, i.e. the pure-Python one) must reproduce the golden `xq` and `logits_q` exactly, and
agree with the integer reference on every Iris sample.
"""

from __future__ import annotations

import importlib
import json
import sys

import numpy as np
import pytest

from tinyattn.intmodel.blob import FORMAT_VERSION, blob_bytes, read_blob
from tinyattn.intmodel.floatref import run_float
from tinyattn.intmodel.intref import quantize_input, run_int8
from tinyattn.paths import DEVICE_DIR
from tinyattn.tools.dev import make_golden

pytestmark = pytest.mark.host

BUMP = (
    "the golden files of format version {v} no longer match: if the blob format or the integer "
    "math changed on purpose, bump FORMAT_VERSION and run "
    "'python -m tinyattn.tools.dev.make_golden'"
)


@pytest.fixture(scope="module")
def golden():
    bin_path, json_path = make_golden.paths()
    assert bin_path.is_file() and json_path.is_file(), (
        f"no golden files for format version {FORMAT_VERSION}: run "
        "'python -m tinyattn.tools.dev.make_golden'"
    )
    return bin_path.read_bytes(), json.loads(json_path.read_text())


def test_golden_files_are_for_this_format_version(golden):
    data, outputs = golden
    assert outputs["format_version"] == FORMAT_VERSION
    assert int.from_bytes(data[4:6], "little") == FORMAT_VERSION
    assert outputs["bytes"] == len(data)


def test_golden_blob_bytes_pinned(golden):
    data, _ = golden
    made, _ = make_golden.build()
    assert made == data, BUMP.format(v=FORMAT_VERSION)
    assert blob_bytes(read_blob(data)) == data  # read + write is the identity


def test_golden_integer_outputs_pinned(golden):
    data, outputs = golden
    blob = read_blob(data)
    X = np.array(outputs["inputs"])
    xq = quantize_input(blob, X)
    assert xq.tolist() == outputs["xq"], BUMP.format(v=FORMAT_VERSION)
    logits = run_int8(blob, xq)
    assert logits.tolist() == outputs["logits_q"], BUMP.format(v=FORMAT_VERSION)
    assert logits.argmax(axis=1).tolist() == outputs["argmax"]
    assert len(set(outputs["argmax"])) == 3  # the golden rows reach every class
    np.testing.assert_allclose(
        run_float(blob, X),
        outputs["float32_logits"],
        rtol=outputs["float32_tolerance"],
        atol=outputs["float32_tolerance"],
    )


def test_golden_outputs_file_is_what_the_generator_writes(golden):
    _, outputs = golden
    _, made = make_golden.build()
    assert made == outputs, BUMP.format(v=FORMAT_VERSION)


@pytest.fixture(scope="module")
def device_attention():
    path = DEVICE_DIR / "attention.py"
    if not path.is_file():
        pytest.skip("device/attention.py not written yet")
    sys.path.insert(0, str(DEVICE_DIR))  # attention.py imports its sibling modules lazily
    try:
        try:  # keep the loader module imported: the runtime drops it after each load otherwise
            importlib.import_module("attention_blob")
        except ImportError:
            pass
        yield importlib.import_module("attention")
    finally:
        sys.path.remove(str(DEVICE_DIR))


def _device_int8(device, data: bytes, X: np.ndarray) -> tuple[list, list]:
    m = device.Model(data)
    xqs, logits = [], []
    for row in X:
        xq = m.quantize([float(v) for v in row])
        out = m.new_logits()
        m.run_int8(xq, out)
        xqs.append(list(xq))
        logits.append(list(out))
    return xqs, logits


def test_golden_device_runtime_reproduces_golden_outputs(golden, device_attention):
    data, outputs = golden
    xq, logits = _device_int8(device_attention, data, np.array(outputs["inputs"]))
    assert xq == outputs["xq"]
    assert logits == outputs["logits_q"]


def test_golden_device_runtime_matches_intref_on_all_iris(device_attention):
    from synth_models import iris_synthetic

    from tinyattn.intmodel.quantize import quantize

    model, X, _ = iris_synthetic(seed=1)
    data = blob_bytes(quantize(model, X[model.meta["train"]["train_idx"]]))
    blob = read_blob(data)
    xq, logits = _device_int8(device_attention, data, X)
    assert xq == quantize_input(blob, X).tolist()
    assert logits == run_int8(blob, np.array(xq, dtype=np.int8)).tolist()


def test_golden_device_reader_rejects_like_the_host_reader(golden, device_attention):
    """Every truncation and a bit flip in every byte of the golden blob (bit `byte % 8`; all
    8 bits are flipped against the host reader in test_blob.py): both readers raise, and say
    the same thing (docs/blob-format.md gives both the same checks and messages)."""
    data, _ = golden
    cases = [data[:n] for n in range(len(data))]
    for byte in range(len(data)):
        flipped = bytearray(data)
        flipped[byte] ^= 1 << (byte % 8)
        cases.append(bytes(flipped))
    for case in cases:
        with pytest.raises(ValueError) as host:
            read_blob(case)
        with pytest.raises(ValueError) as device:
            device_attention.Model(case)
        assert str(device.value) == str(host.value)
