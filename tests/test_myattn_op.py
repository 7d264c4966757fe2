# Host (CPython): the myattn op (opcode 6) from model file to blob to both references and the
# device runtime under CPython; the token models for any feature count; Wine from a CSV.
"""Tests of issue 7's `myattn` op outside MicroPython (tests/test_device_mp_myattn.py runs the
device side under the MicroPython unix port, tests/test_serial_myattn.py over a serial link).

- A hand-checkable example pins the integer equations of docs/quantization.md "myattn".
- Blobs with the op in both modes, with and without biases, int8 and float32, survive the
  writer's self-check and read back exactly; malformed records fail with the named problem, in
  the host reader and the device reader alike.
- The tutorial-size graph (Q ‖ K ‖ V, 2112 features) and `iris-myattn`: the device runtime
  (pure kernels, under CPython) equals tinyattn.intmodel.intref exactly and
  tinyattn.intmodel.floatref ≤ 1e-4.
- `iris-attn` / `iris-myattn` build for any feature count (one token per feature).
- `tinyattn train --csv wine.csv --target cultivar`, then `tinyattn export` without `--csv`.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from device_support import host_reference, op_offsets, recrc
from synth_models import TUTORIAL, random_model, tutorial_myattn_ops

from tinyattn.intmodel.blob import BlobError, Op, QuantModelSpec, blob_bytes, read_blob
from tinyattn.intmodel.floatref import forward_npz
from tinyattn.intmodel.intref import run_int8
from tinyattn.intmodel.quantize import exp_lut, float32_spec, quantize
from tinyattn.learn.model import build_from_ops, build_model, myattn_op
from tinyattn.learn.myattn import MyAttnFlat

pytestmark = pytest.mark.host

TUTORIAL_F = TUTORIAL[0] + TUTORIAL[1] + TUTORIAL[2] * TUTORIAL[3]  # 32 + 32 + 32·64 = 2112


def tutorial_blob(seed: int = 5, n: int = 8) -> tuple[bytes, np.ndarray]:
    """(int8 blob, n raw inputs) of the tutorial graph: myattn explicit 32, 32, 32, 64, 32 ->
    dense 32 -> 4, random weights, calibrated on 256 random inputs."""
    model = random_model(tutorial_myattn_ops(), seed=seed, n_features=TUTORIAL_F)
    rng = np.random.default_rng(seed)
    X = model.norm_mean + model.norm_std * rng.normal(size=(256 + n, TUTORIAL_F))
    return blob_bytes(quantize(model, X[:256])), X[256:]


POOL_OPS = [
    {"op": "dense", "in": 3, "out": 15, "bias": True},
    {"op": "relu"},
    {"op": "reshape", "shape": [5, 3]},
    myattn_op("pool", 3, 3, 5, 3, 6, bias=False),
    {"op": "relu"},
    {"op": "dense", "in": 6, "out": 2, "bias": False},
]


def _golden_op() -> Op:
    """mode 1 (pool), S = v1 = 2 tokens of E = 1, out 1, every multiplier 1."""
    return Op(
        "myattn",
        {"mode": 1, "q": 1, "k": 1, "v1": 2, "v2": 1, "out": 1, "has_bias": 1,
         "M_q": 1, "shift_q": 1, "shift_a": 1, "M_sm": 1, "shift_sm": 1,
         "M_ap": 1, "shift_ap": 14, "shift_c": 1},
        {"s_in": 1.0, "s_qk": 1.0, "s_sc": 1.0, "s_qa": 1.0, "s_out": 1.0},
        {"Wa": np.array([[1, 0], [1, 1]], np.int8), "ba": np.array([2, -4], np.int32),
         "sa": np.ones(2, np.float32), "ma": np.array([1, 1], np.int16),
         "Wc": np.array([[2, -1]], np.int8), "bc": np.array([3], np.int32),
         "sc": np.ones(1, np.float32), "mc": np.array([1], np.int16), "lut": exp_lut()},
    )  # fmt: skip


def test_myattn_op_golden_example_follows_the_documented_equations(attention):
    """Tokens x = [[10], [20]] through the equations of docs/quantization.md, by hand:
    Q      = (30·1 + 1) >> 1                       = 15   (mean 15 at the same scale)
    scores = ((15 + 0 + 2) + 1) >> 1 = 9,  ((15 + 15 - 4) + 1) >> 1 = 13
    idx    = ((13 - 9)·1 + 1) >> 1 = 2,  0;   e = EXP_LO[2] = 15391, 16384;   sum = 31775
    w      = (15391·2**14 + 15887) // 31775 = 7936,  (16384·2**14 + 15887) // 31775 = 8448
    applied= (7936·10 + 8448·20 + 2**13) >> 14 = (248320 + 8192) >> 14 = 15
    out    = (2·15 - 1·15 + 3 + 1) >> 1 = 9
    The device kernels (under CPython) compute the same through a blob with a dense head."""
    spec = QuantModelSpec(
        quantized=True, class_names=["a", "b"], norm_mean=np.zeros(2, np.float32),
        norm_std=np.ones(2, np.float32), input_scale=1.0, logit_scale=1.0,
        ops=[Op("reshape", {"S": 2, "E": 1}), _golden_op(),
             Op("dense", {"in": 1, "out": 2, "has_bias": 0, "shift": 1, "act_min": -32768,
                          "act_max": 32767}, {"s_in": 1.0, "s_out": 1.0},
                {"W": np.array([[2], [-2]], np.int8), "s": np.ones(2, np.float32),
                 "m": np.array([1, 1], np.int16)})],
    )  # fmt: skip
    blob = read_blob(blob_bytes(spec))
    xq = np.array([[10, 20]])
    assert run_int8(blob, xq).tolist() == [[9, -9]]  # (2·9 + 1) >> 1, (-18 + 1) >> 1
    m = attention.Model(blob_bytes(spec), kernels="pure")
    out = m.new_logits()
    m.run_int8(bytearray([10, 20]), out)
    assert list(out) == [9, -9]


@pytest.mark.parametrize("quantized", [True, False])
@pytest.mark.parametrize("ops", ["tutorial", "pool"])
def test_myattn_op_blob_reads_back_exactly(ops, quantized):
    F = TUTORIAL_F if ops == "tutorial" else 3
    model = random_model(tutorial_myattn_ops() if ops == "tutorial" else POOL_OPS, 2, F)
    X = model.norm_mean + model.norm_std * np.random.default_rng(0).normal(size=(64, F))
    spec = quantize(model, X) if quantized else float32_spec(model)
    blob = read_blob(blob_bytes(spec))
    k = 0 if ops == "tutorial" else 3
    op, want = blob.ops[k], spec.ops[k]
    assert op.kind == "myattn" and op.iparams == want.iparams and op.fparams == want.fparams
    assert op.iparams["mode"] == (0 if ops == "tutorial" else 1)
    assert sorted(op.tensors) == sorted(want.tensors)
    for role, a in want.tensors.items():
        assert op.tensors[role].dtype == a.dtype and np.array_equal(op.tensors[role], a), role
    roles = {"Wa", "Wc"} | ({"ba", "bc"} if ops == "tutorial" else set())
    roles |= {"sa", "ma", "sc", "mc", "lut"} if quantized else set()
    assert set(op.tensors) == roles


def test_myattn_op_reader_names_bad_modes_and_shapes(attention):
    model = random_model(POOL_OPS, 2, 3)
    data = blob_bytes(quantize(model, np.random.default_rng(0).normal(size=(32, 3))))
    at = op_offsets(data)[3]
    iparams = at + 4 + 2 * 7 + (-(4 + 2 * 7)) % 4  # 7 tensors (no biases)

    def with_iparam(i: int, value: int) -> bytes:
        b = bytearray(data)
        struct.pack_into("<i", b, iparams + 4 * i, value)
        return recrc(b)

    cases = {
        "op 3 (myattn): mode = 2, must be 0 (explicit) or 1 (pool)": with_iparam(0, 2),
        "shape mismatch in op 3 (myattn): input shape [5, 3], mode 0 (explicit) needs": (
            with_iparam(0, 0)
        ),
        "op 3 (myattn): v1 = 0 out of range 1..65535": with_iparam(3, 0),
        "op 3 (myattn): shift_sm = 31 out of range 1..30": with_iparam(11, 31),
        "op 3 (myattn): multiplier M_ap = 40000 out of range 0..32767": with_iparam(12, 40000),
        "shape mismatch in op 3 (myattn): 7 tensors, its parameters need 9": with_iparam(6, 1),
    }
    for fragment, bad in cases.items():
        with pytest.raises(BlobError) as host:
            read_blob(bad)
        assert fragment in str(host.value), str(host.value)
        with pytest.raises(attention.BlobError) as device:
            attention.read_blob(bad)
        assert str(device.value) == str(host.value)


def _device_matches_host(attention, data: bytes, X: np.ndarray, kernels: str = "pure") -> None:
    xq, lq, lf = host_reference(data, X)
    m = attention.Model(data, kernels=kernels)
    out = m.new_logits()
    for n, x in enumerate(X.tolist()):
        if lq is not None:
            dxq = m.quantize(x)
            assert m.run_int8(dxq, out) == int(np.argmax(lq[n]))
            assert list(dxq) == xq[n].tolist() and list(out) == lq[n].tolist(), n
        assert np.max(np.abs(np.array(m.logits(x, "float")) - lf[n])) <= 1e-4, n


def test_myattn_op_tutorial_sizes_device_cpython_equals_host_references(attention):
    data, X = tutorial_blob()
    assert read_blob(data).n_features == TUTORIAL_F
    _device_matches_host(attention, data, X)


def test_myattn_op_pool_without_bias_device_cpython_equals_host_references(attention):
    model = random_model(POOL_OPS, 4, 3)
    X = np.random.default_rng(1).normal(size=(80, 3)) * 2
    _device_matches_host(attention, blob_bytes(quantize(model, X[:40])), X)
    _device_matches_host(attention, blob_bytes(float32_spec(model)), X)


def test_myattn_op_int8_follows_the_float_model_at_tutorial_sizes():
    """Quantization keeps the tutorial graph's decisions: int8 argmax = float64 argmax on most
    of 200 held-out random inputs, and the int8 logits stay near the float ones."""
    model = random_model(tutorial_myattn_ops(), seed=7, n_features=TUTORIAL_F)
    rng = np.random.default_rng(7)
    X = model.norm_mean + model.norm_std * rng.normal(size=(456, TUTORIAL_F))
    blob = read_blob(blob_bytes(quantize(model, X[:256])))
    _, lq, _ = host_reference(blob_bytes(blob), X[256:])
    lf = forward_npz(model, model.normalize(X[256:]))
    assert np.mean(np.argmax(lq, 1) == np.argmax(lf, 1)) >= 0.9
    assert np.max(np.abs(lq * blob.logit_scale - lf)) <= 0.1 * np.max(np.abs(lf))


def test_myattn_flat_layer_is_the_tutorial_module_on_a_flat_row():
    """`myattn` explicit = MyAttn.attend on Q, K, V cut from the row; its backward is the
    gradient of that cut (checked against central differences)."""
    rng = np.random.default_rng(3)
    layer = MyAttnFlat(3, 2, 4, 5, 3, rng=rng)
    layer.params["ba"][...] = rng.normal(size=4)
    x = rng.normal(size=(2, 3 + 2 + 20))
    out, _ = layer.attend(x[:, None, :3], x[:, None, 3:5], x[:, 5:].reshape(2, 4, 5))
    assert np.array_equal(layer.forward(x), out[:, 0])
    c = rng.normal(size=(2, 3))
    layer.forward(x, training=True)
    dx = layer.backward(c)
    num = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + 1e-6
        fp = np.sum(layer.forward(x) * c)
        x[i] = old - 1e-6
        fm = np.sum(layer.forward(x) * c)
        x[i] = old
        num[i] = (fp - fm) / 2e-6
    np.testing.assert_allclose(dx, num, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("name", ["iris-attn", "iris-myattn"])
@pytest.mark.parametrize("F", [1, 4, 13])
def test_model_token_models_build_for_any_feature_count(name, F):
    model = build_model(name, F, 3)
    assert model.ops[2] == {"op": "reshape", "shape": [F, 8]}  # one token of 8 per feature
    assert model.forward(np.zeros((5, F))).shape == (5, 3)
    if name == "iris-attn" and F == 4:
        assert model.n_params == 475  # issue 2's reference model, unchanged


def test_model_myattn_pool_needs_equal_query_key_value_widths():
    with pytest.raises(ValueError, match="query_size, key_size and value_size2"):
        build_from_ops([myattn_op("pool", 8, 8, 4, 6, 3)])
    with pytest.raises(ValueError, match="mode 'mean'"):
        build_from_ops([{**myattn_op("pool", 8, 8, 4, 8, 3), "mode": "mean"}])


def test_wine_csv_trains_and_exports_without_naming_the_csv_again(tmp_path, capsys):
    """`tinyattn train --csv wine.csv --target cultivar` stores the CSV in the meta, so
    `tinyattn export` and parity's sample loader need no --csv; the model is the one
    `--dataset wine` trains (same rows, same split), so the blobs are byte-identical."""
    import json

    from tinyattn import cli
    from tinyattn.board.parity import load_samples
    from tinyattn.data.tabular import load_dataset
    from tinyattn.paths import REPO_DIR

    csv = REPO_DIR / "host" / "data" / "wine.csv"
    a, b = tmp_path / "csv.npz", tmp_path / "ds.npz"
    assert cli.main(["train", "--csv", str(csv), "--target", "cultivar", "--out", str(a),
                     "--quiet", "--json"]) == 0  # fmt: skip
    trained = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert trained["test_accuracy"] >= 0.94 and trained["n_test"] == 36
    assert cli.main(["train", "--dataset", "wine", "--out", str(b), "--quiet"]) == 0
    assert cli.main(["export", "--model", str(a), "--out", str(tmp_path / "a.bin"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert cli.main(["export", "--model", str(b), "--out", str(tmp_path / "b.bin")]) == 0
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()
    blob = read_blob((tmp_path / "a.bin").read_bytes())
    wine = load_dataset("wine")
    assert blob.class_names == wine.class_names == ["class_0", "class_1", "class_2"]
    assert report["n_samples"] == 178 and report["int8_test_accuracy"] >= 0.94
    samples = load_samples(a, None, None, None)
    assert np.array_equal(samples.X, wine.X) and np.array_equal(samples.y, wine.y)
