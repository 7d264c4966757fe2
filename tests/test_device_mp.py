# Host (CPython): the device runtime under the real MicroPython unix port, as subprocesses.
"""`device/attention.py` on MicroPython (the unix port, `-X heapsize=64k`), driven from pytest:
small device scripts run in `micropython` subprocesses and print Python literals, one line per
sample; the host compares them with tinyattn.intmodel.intref / tinyattn.intmodel.floatref.

Forms: the modules precompiled by `mpy-cross -march=x64` (.mpy) under the 64 KiB heap, what a
small board runs; and the .py sources, which MicroPython compiles at import and which
therefore need transient heap on top (about 60 KB on this 64-bit port), under the virtual
board's heap (100 KiB). Kernel sets: pure, native, viper. Both forms and all sets must give
the same int8 logits as the host, every integer, and float logits within 1e-4.
"""

from __future__ import annotations

import pytest
from device_support import (
    HEAP,
    HEAP_BUDGET,
    HEAP_LOCK,
    HEAP_MARGIN,
    KERNEL_MODULES,
    MPY_HEAP,
    PY_HEAP,
    assert_parity,
    corruptions,
    device_tree,
    host_reference,
    iris_X,
    literals,
    needs_micropython,
    odd_blob,
    reference_blobs,
    run_micropython,
    write_rows,
)

from tinyattn.intmodel.blob import read_blob

pytestmark = [pytest.mark.micropython, needs_micropython]

KERNELS = ("pure", "native", "viper")

# argv: modules dir, blob, kernels, rows file. Prints the chosen kernel sets, then per row
# [xq, int8 logits, run_int8's argmax, float logits, float argmax].
PARITY = """
import sys
sys.path.insert(0, sys.argv[1])
from attention import Model
m = Model(sys.argv[2], kernels=sys.argv[3])
out = m.new_logits()
print([m.kernels, m.float_kernels])
xq = m.quantize([0.0] * m.n_features)
for line in open(sys.argv[4]):
    x = [float(v) for v in line.split()]
    if m.quantized:
        m.quantize(x, xq)
        p = m.run_int8(xq, out)
        print([list(xq), list(out), p, m.logits(x, "float"), m.predict(x, "float")])
    else:
        print([None, None, None, m.logits(x, "float"), m.predict(x)])
"""


# argv: modules dir, blob paths. Each blob's reader verdict.
REJECT = """
import sys
sys.path.insert(0, sys.argv[1])
import attention
for path in sys.argv[2:]:
    try:
        attention.Model(path)
        print(repr(None))
    except ValueError as e:
        print(repr([isinstance(e, attention.BlobError), str(e)]))
"""


@pytest.fixture(scope="module")
def blobs(tmp_path_factory):
    return reference_blobs(tmp_path_factory.mktemp("ref"))


@pytest.fixture(scope="module")
def forms(mpy):
    """form -> (modules dir, heap)."""
    return {"mpy": (mpy, MPY_HEAP), "py": (str(device_tree()), PY_HEAP)}


@pytest.fixture(scope="module")
def iris_rows(tmp_path_factory):
    return write_rows(tmp_path_factory.mktemp("rows") / "iris.txt", iris_X())


@pytest.fixture(scope="module")
def parity_runs(forms, blobs, iris_rows):
    """(form, kernels) -> parsed output of PARITY over all 150 Iris samples."""
    runs = {}
    for form, (mods, heap) in forms.items():
        for k in KERNELS:
            lines = run_micropython(PARITY, [mods, str(blobs[0]), k, str(iris_rows)], heap)
            runs[form, k] = literals(lines)
    return runs


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("form", ["mpy", "py"])
def test_device_mp_all_iris_samples_match_host_references(parity_runs, blobs, form, kernels):
    head, *rows = parity_runs[form, kernels]
    float_set = "pure" if kernels == "pure" else "native"
    assert head == [kernels, float_set]
    assert_parity(rows, blobs[0].read_bytes(), iris_X())


def test_device_mp_forms_and_kernel_sets_agree_exactly(parity_runs):
    """.mpy and .py, pure, native and viper: identical int8 outputs, and identical float
    outputs for the same float kernels (same code, same double arithmetic)."""
    base = [row[:3] for row in parity_runs["py", "pure"][1:]]
    for (form, k), (_, *rows) in parity_runs.items():
        assert [row[:3] for row in rows] == base, (form, k)
        assert rows == parity_runs["py", k][1:], (form, k)


@pytest.mark.parametrize("form", ["mpy", "py"])
def test_device_mp_float32_blob_matches_floatref(forms, blobs, iris_rows, form):
    mods, heap = forms[form]
    head, *rows = literals(run_micropython(PARITY, [mods, str(blobs[1]), "auto", str(iris_rows)],
                                           heap))  # fmt: skip
    assert head[0] is None  # no int8 path in a float32 blob
    assert_parity(rows, blobs[1].read_bytes(), iris_X())


@pytest.mark.parametrize("kernels", KERNELS)
def test_device_mp_odd_architecture_matches_host_references(forms, tmp_path, kernels):
    data, X = odd_blob()
    blob = tmp_path / "odd.bin"
    blob.write_bytes(data)
    mods = forms["mpy"][0]  # a bigger model than the reference one: not held to 64 KiB
    lines = run_micropython(PARITY, [mods, str(blob), kernels, str(write_rows(tmp_path / "x", X))],
                            PY_HEAP)  # fmt: skip
    assert_parity(literals(lines)[1:], data, X)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("form", ["mpy", "py"])
def test_device_mp_run_int8_allocates_nothing_under_heap_lock(
    forms, blobs, form, kernels, tmp_path
):
    mods, heap = forms[form]
    rows = write_rows(tmp_path / "rows.txt", iris_X()[:1])
    delta, control, out = literals(run_micropython(HEAP_LOCK, [mods, str(blobs[0]), kernels,
                                                               str(rows)], heap))[0]  # fmt: skip
    assert delta == 0  # 100 calls left nothing on the heap
    assert control == "MemoryError"  # the lock does catch an allocating call (quantize)
    xq, lq, _ = host_reference(blobs[0].read_bytes(), iris_X()[:1])
    assert out == lq[0].tolist()  # the locked calls computed the right logits


@pytest.mark.parametrize("kernels", KERNELS)
def test_device_mp_loaded_model_heap_within_budget(forms, blobs, kernels):
    mods, heap = forms["mpy"]
    args = [mods, str(blobs[0]), kernels, *KERNEL_MODULES[kernels]]
    used = int(run_micropython(HEAP, args, heap)[0])
    assert 0 < used <= HEAP_BUDGET - HEAP_MARGIN, f"model + buffers use {used} B"


@pytest.mark.parametrize("form", ["mpy", "py"])
def test_device_mp_corrupt_blobs_raise_host_reader_messages(forms, blobs, tmp_path, form):
    cases = corruptions(blobs[0].read_bytes())
    paths = []
    for i, (_, data) in enumerate(cases):
        paths.append(tmp_path / f"bad{i}.bin")
        paths[-1].write_bytes(data)
    mods, heap = forms[form]
    verdicts = literals(run_micropython(REJECT, [mods, *map(str, paths)], heap))
    assert len(verdicts) == len(cases)
    for (what, data), path, verdict in zip(cases, paths, verdicts, strict=True):
        with pytest.raises(ValueError) as host:
            read_blob(data, source=str(path))
        assert verdict == [True, str(host.value)], what


@pytest.mark.slow
def test_device_mp_benchmark_reports_every_case(blobs):
    """tools/bench_device.py end to end under MicroPython (figures only, no timing asserts)."""
    from tinyattn.tools.bench_device import CASES, bench_device, format_table

    result = bench_device(blobs[0], cpython=False)
    cases = result["micropython"]
    for case in CASES:
        assert cases[case]["us"] > 0, (case, cases[case])
        assert 0 < cases[case]["heap"] <= HEAP_BUDGET or case == "naive", case
    for k in KERNELS:
        assert cases["int8-" + k]["net"] == 0  # run_int8 leaves nothing on the heap
    assert cases["float-pure"]["alloc"] > 0 and cases["int8-pure"]["quantize_alloc"] > 0
    assert result["micropython_summary"]["fastest_int8"].startswith("int8-")
    assert "fastest int8" in format_table(result)
