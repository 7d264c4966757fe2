# Host (CPython): docs/blob-format.md's worked example is rebuilt byte for byte (issue 10, §3).
"""The worked example of docs/blob-format.md is the blob of a fixed model: the reference
architecture with the random weights of `synth_models.iris_synthetic(seed=1)`, normalized and
calibrated on the Iris train split of seed 0. These tests rebuild it and compare it with the
page: the hex dump (every byte and the text column), the layout figures, the values of the
field table, the tensor table's first record, and the page's statement of which bytes depend
on the weights and which on the split (checked by changing one and then the other).

    python tests/test_worked_example.py   # prints the dump to paste into the page
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest
from synth_models import iris_attn_ops, iris_synthetic, random_model

from tinyattn.data.tabular import fit_standardizer, load_dataset, stratified_split
from tinyattn.intmodel.blob import blob_bytes, read_blob
from tinyattn.intmodel.quantize import quantize

pytestmark = pytest.mark.host

DOC = Path(__file__).resolve().parent.parent / "docs" / "blob-format.md"
DUMP_BYTES = 0x88  # the dump shows the header, the names, the norm and op 0's record


def worked_example(seed: int = 1, split_seed: int = 0) -> bytes:
    """The blob of the page (seed 1, split 0); other seeds or splits for the dependence test."""
    if split_seed == 0:
        model, X, _ = iris_synthetic(seed)
        return blob_bytes(quantize(model, X[model.meta["train"]["train_idx"]]))
    ds = load_dataset("iris")
    train_idx, _ = stratified_split(ds.y, 0.2, split_seed)
    ops = iris_attn_ops(ds.n_features, ds.n_classes)
    norm = fit_standardizer(ds.rows[train_idx])
    model = random_model(ops, seed, ds.n_features, ds.class_names, norm, "iris")
    return blob_bytes(quantize(model, ds.rows[train_idx]))


def hexdump(data: bytes) -> str:
    """`xxd` format: offset, 16 bytes in groups of two, the printable characters."""
    lines = []
    for at in range(0, len(data), 16):
        row = data[at : at + 16]
        groups = " ".join(row[i : i + 2].hex() for i in range(0, len(row), 2))
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{at:08x}: {groups:<39}  {text}")
    return "\n".join(lines)


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("## Worked example")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def _doc_dump() -> str:
    return re.search(r"```\n(0{8}:.*?)\n```", _section(), re.S).group(1)


def _doc_ranges(label: str) -> set[int]:
    """Byte offsets named in the bullet that starts with `label` ("0x74", "0x3c–0x5b")."""
    bullet = re.search(rf"^- {label}.*?(?=^- |^\s*$)", _section(), re.M | re.S).group(0)
    found: set[int] = set()
    for a, b in re.findall(r"0x([0-9a-f]+)(?:–0x([0-9a-f]+))?", bullet):
        found.update(range(int(a, 16), int(b or a, 16) + 1))
    return found


@pytest.fixture(scope="module")
def blob() -> bytes:
    return worked_example()


def test_worked_example_dump_is_the_fixed_models_bytes(blob):
    assert _doc_dump() == hexdump(blob[:DUMP_BYTES]), (
        "docs/blob-format.md's worked example is stale: paste the output of "
        "'python tests/test_worked_example.py'"
    )


def test_worked_example_layout_figures(blob):
    b = read_blob(blob)
    text = " ".join(_section().split())
    figures = re.search(
        r"Its blob has (\d+) bytes: header (\d+), names (\d+) \+ (\d+) padding, norm (\d+), op "
        r"list (\d+), tensor table (\d+) \((\d+) records\), data (\d+), CRC (\d+)",
        text,
    )
    size, header, names, pad, norm, ops, table, records, data, crc = map(int, figures.groups())
    names_end = header + names + pad
    table_start = names_end + norm + ops
    assert size == len(blob) == b.file_size
    assert (header, crc, records) == (32, 4, len(b.tensor_table))
    assert names == len("\n".join(b.class_names).encode()) and names_end % 4 == 0
    assert norm == 8 * b.n_features
    assert table_start + table == b.data_start and data == size - crc - b.data_start
    tensor0 = re.search(r"tensor table starts at 0x([0-9a-f]+) with `([0-9a-f ]+)`", text)
    assert int(tensor0.group(1), 16) == table_start
    assert bytes.fromhex(tensor0.group(2)) == blob[table_start : table_start + 16]
    avgpool = next(op for op in b.ops if op.kind == "avgpool").iparams
    assert f"M={avgpool['M']}, shift={avgpool['shift']}" in text


def test_worked_example_field_table_values(blob):
    """Every row's bytes follow each other in the dump, and the numbers are what they hold."""
    rows = re.findall(r"^\| `([0-9a-f ]+)`(?: / `([0-9a-f ]+)`)? \| ([^|]+) \|", _section(), re.M)
    at = 0
    for first, second, _ in rows:
        for cell in (first, second):
            if cell:
                want = bytes.fromhex(cell)
                at = blob.index(want, at)  # raises if the bytes are not in order
                at += len(want)
    assert at <= DUMP_BYTES
    values = {field.strip(): value.strip() for value, field in
              re.findall(r"^\| [^|]+ \| ([^|]+) \| ([^|]+) \|", _section(), re.M)}  # fmt: skip

    def f32(offset: int) -> float:
        return struct.unpack_from("<f", blob, offset)[0]

    def same(text: str, *numbers: float) -> None:
        got = [float(v) for v in re.findall(r"[-\d.e]+", text)[: len(numbers)]]
        assert np.allclose(got, numbers, rtol=5e-6, atol=0), (text, numbers)

    b = read_blob(blob)
    assert values["file_size"] == str(len(blob))
    same(values["input_scale `s_in` (= 2.99266 / 127, absmax of the normalized train split)"],
         f32(20))  # fmt: skip
    same(values["logit_scale (= absmax of the train logits / 16383)"], f32(24))
    same(values["norm mean (f32 × 4, cm)"], *b.norm_mean)
    same(values["norm std (f32 × 4)"], *b.norm_std)
    ip, fp = b.ops[0].iparams, b.ops[0].fparams
    assert values["shift, act_min, act_max"] == f"{ip['shift']}, −128, 127"
    same(values["s_in, s_out"], fp["s_in"], fp["s_out"])


def test_worked_example_names_the_bytes_that_depend_on_training(blob):
    """Other weights change only the bytes the page lists under "the weights and the
    calibration"; another split only those and the ones under "the train split only"."""
    weights = _doc_ranges("the weights and the calibration")
    split = _doc_ranges("the train split only")
    assert weights and split

    def changed(other: bytes) -> set[int]:
        return {i for i in range(DUMP_BYTES) if other[i] != blob[i]}

    by_weights = changed(worked_example(seed=2))
    by_split = changed(worked_example(seed=1, split_seed=1))
    assert by_weights and by_weights <= weights, sorted(by_weights - weights)
    assert by_split and by_split <= weights | split, sorted(by_split - weights - split)


if __name__ == "__main__":
    print(hexdump(worked_example()[:DUMP_BYTES]))
