# Host (CPython): the golden blob and golden integer outputs pin the format and the math.
"""tests/golden/tiny_v{N}.bin and .json (made by tools/make_golden.py, see its README): the
current code must make exactly these bytes and these integer outputs for FORMAT_VERSION N.
If a change breaks this test on purpose, bump FORMAT_VERSION and generate new golden files.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tinyattn.blob import FORMAT_VERSION, blob_bytes, read_blob
from tinyattn.floatref import run_float
from tinyattn.intref import quantize_input, run_int8
from tools import make_golden

pytestmark = pytest.mark.host

BUMP = (
    "the golden files of format version {v} no longer match: if the blob format or the integer "
    "math changed on purpose, bump FORMAT_VERSION and run 'python -m tools.make_golden'"
)


@pytest.fixture(scope="module")
def golden():
    bin_path, json_path = make_golden.paths()
    assert bin_path.is_file() and json_path.is_file(), (
        f"no golden files for format version {FORMAT_VERSION}: run 'python -m tools.make_golden'"
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
