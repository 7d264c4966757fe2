# Host (CPython): the Pico bench's µs by kernel (tools/bench_pico_cost.step_macs, bench_pico's
# steps table) counts each program step's MACs as the blob does.
"""A step's MACs come from its parameters on the board (`step_macs`); the profile's µs/MAC
figures are only honest if the steps of a model's program add up to the blob's own MAC count
(`blob_macs`). Checked here on the device runtime's program under CPython (pure kernels, the
same steps and parameters as thumb's), for a golden model and a conv stem of the bench's grid."""

from __future__ import annotations

import pytest

from tinyattn.intmodel.blob import read_blob
from tinyattn.intmodel.export import blob_macs
from tinyattn.tools.bench_pico import steps_table
from tinyattn.tools.bench_pico_cost import KERNEL, by_kernel, models, step_macs

pytestmark = pytest.mark.host


@pytest.mark.parametrize("name", ["iris", "japanesevowels", "bm-conv-s4-w8"])
def test_the_steps_macs_add_up_to_the_blobs(attention, tmp_path, name):
    blob = models(tmp_path, (name,))[name]
    m = attention.Model(str(blob))
    n = m.steps * m.n_features if m.seq else m.n_features
    m.run_int8(m.quantize([0.0] * n), m.new_logits())  # a full window: each step's sizes
    counted = {"dense", "embed", "conv", "attn", "pool"}  # add, relu: values, not MACs
    assert counted < set(KERNEL.values())
    macs = sum(step_macs(st[0].__name__, list(st[6])) for st in m._prog8
               if st[0].__name__ in counted)  # fmt: skip
    assert macs == blob_macs(read_blob(blob.read_bytes()))


def test_the_steps_table_sums_each_kernel_and_rates_the_stem():
    steps = {"m": [{"kernel": "embed", "us": 50, "macs": 500},
                   {"kernel": "conv", "us": 30, "macs": 300},
                   {"kernel": "conv", "us": 20, "macs": 100},
                   {"kernel": "attn", "us": 70, "macs": 350},
                   {"kernel": "add", "us": 7, "macs": 40}]}  # fmt: skip
    assert by_kernel(steps["m"]) == {"embed": (50, 500), "conv": (50, 400), "attn": (70, 350),
                                     "add": (7, 40)}  # fmt: skip
    row = steps_table(steps)[1].split()
    # embed, conv, dense (none), attn, other µs, stem µs/MAC: (50 + 50) / (500 + 400)
    assert row[1:5] == ["50", "(0.100)", "50", "(0.125)"] and row[5] == "-"
    assert row[6:] == ["70", "(0.200)", "7", f"{100 / 900:.3f}"]
