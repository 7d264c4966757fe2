# Host (CPython): on-board training (device/attention_train*.py) against the host's float32
# NumPy step, under CPython; tests/test_device_train_mp.py runs the same cases on MicroPython.
"""Issue 13, "Must show" 1: one training step of the device code vs the host's float32 NumPy
step (host/learn/layers.py, myattn.py, losses.py + train.py's smoothing, optim.py) from the same
weights and batch. Every output, input gradient and parameter gradient, per layer (Dense, ReLU,
Attention with and without biases, GlobalAvgPool, MyAttn pool, the loss) and for whole models
(iris-attn, iris-myattn, an odd op list), and the parameters after optimizer steps (AdamW,
SGD + momentum), agree within TOL_REL relative or TOL_ABS absolute, elementwise.

The device side runs DRIVER, one script valid under CPython and MicroPython: it reads a JSON
spec and float32 files, runs the case and writes float32 files back. `run_case(interp, ...)`
runs it in a subprocess of either interpreter, so both test files check the same thing.
Also here: the native kernel copy, the board float model file (device reader/writer vs
host/board/boardmodel.py, rejections, npz round trip, export of fetched weights), the schedule, and
a few epochs of `Trainer` against host `fit`.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from device_support import DEVICE_DIR, ODD_OPS

from tinyattn.board import boardmodel
from tinyattn.data.tabular import fit_standardizer, load_dataset, standardize
from tinyattn.learn.layers import Layer
from tinyattn.learn.losses import softmax_cross_entropy
from tinyattn.learn.model import (
    build_from_ops,
    iris_attn_ops,
    iris_myattn_ops,
    layer_from_op,
    load_model,
    save_model,
)
from tinyattn.learn.optim import SGD, Adam

pytestmark = pytest.mark.host

TOL_REL = 1e-4  # the bound: 1e-4 relative ...
TOL_ABS = 1e-6  # ... or 1e-6 absolute

# argv: modules dir, spec.json, kernels. Arrays in spec["dir"] as NAME.f32 (float32, native
# order); outputs written as NAME.out; the loss (if any) printed as a literal.
DRIVER = """
import sys, json
from array import array
sys.path.insert(0, sys.argv[1])
import attention_train as at
at.use_kernels(sys.argv[3])
f = open(sys.argv[2]); spec = json.loads(f.read()); f.close()
D = spec["dir"] + "/"
if "myattn" in [op.get("op") for op in spec.get("ops") or [spec.get("op") or {}]]:
    import attention_train_myattn  # registers op myattn in attention_train (as server_train)

def load(name):
    f = open(D + name + ".f32", "rb"); a = array("f", f.read()); f.close()
    return a

def save(name, a):
    f = open(D + name + ".out", "wb"); f.write(a); f.close()

B = spec["batch"]
n = spec["n"]
kind = spec["kind"]
if kind == "layer":
    tokens, width = spec["shape"]
    layer = at._layer(spec["op"], tokens, width, B, 0, True)
    th = load("theta")
    g = at.buf(layer.n_params)
    layer.bind(th, g, bytearray(layer.n_params))
    save("y", layer.forward(load("x"), n))
    save("dx", layer.backward(load("dy"), n))
    save("grad", g)
elif kind == "loss":
    C = spec["classes"]
    dl = at.buf(B * C)
    loss = at.softmax_ce(load("x"), bytes(spec["labels"]), dl, n, C, spec["eps"])
    save("dx", dl)
    print(repr(loss))
else:
    net = at.Net(spec["ops"], spec["features"], B, load("theta"), True)
    o = spec["opt"]
    opt = at.optimizer(net, o["name"], o["lr"], o["weight_decay"], o["momentum"])
    X = load("x")
    labels = bytes(spec["labels"])
    order = list(range(n))
    for k in range(spec["steps"]):
        net.gather(X, labels, order, 0, n)
        net.forward(n)
        loss = net.loss(n, spec["eps"])
        net.backward(n)
        if k == 0:
            save("y", net.logits)
            save("dx", net.dx)
            save("grad", net.grad)
            save("mask", array("f", [float(v) for v in net.mask]))
            print(repr(loss))
        opt.step(o["lr"])
    save("theta", net.theta)
"""


# --------------------------------------------------------------------------------- helpers


def check(name: str, dev: np.ndarray, host: np.ndarray) -> tuple[float, float]:
    """Assert |dev - host| <= max(TOL_REL |host|, TOL_ABS) elementwise; returns (max abs err,
    max err / tolerance)."""
    dev, host = np.asarray(dev, np.float64).ravel(), np.asarray(host, np.float64).ravel()
    assert dev.shape == host.shape, f"{name}: {dev.shape} values on the device, {host.shape}"
    err = np.abs(dev - host)
    ratio = err / np.maximum(TOL_REL * np.abs(host), TOL_ABS)
    worst = int(np.argmax(ratio)) if ratio.size else 0
    assert ratio.size == 0 or ratio[worst] <= 1.0, (
        f"{name}: element {worst} device {dev[worst]!r} host {host[worst]!r} "
        f"(|err| {err[worst]:.3g}, {ratio[worst]:.3g} x the tolerance)"
    )
    return (float(err.max()) if err.size else 0.0, float(ratio.max()) if ratio.size else 0.0)


def bind_f32(layers: list[Layer], theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Re-bind `layers`' parameters to float32 views of one flat vector (the host Sequential
    order, as Sequential does in float64) holding `theta`; returns (theta32, grad32)."""
    theta32 = np.array(theta, np.float32)
    grad32 = np.zeros_like(theta32)
    off = 0
    for layer in layers:
        values, grads = {}, {}
        for name, p in layer.params.items():
            span = slice(off, off + p.size)
            values[name], grads[name] = (
                theta32[span].reshape(p.shape),
                grad32[span].reshape(p.shape),
            )
            off += p.size
        layer.bind(values, grads)  # copies the layer's own values in ...
    assert off == theta32.size
    theta32[...] = theta  # ... so put `theta` back
    return theta32, grad32


def host_loss(logits: np.ndarray, y: np.ndarray, eps: float) -> tuple[float, np.ndarray]:
    """The host's training loss (mean CE, label smoothing `eps` wherever the host has it)."""
    if eps == 0.0:
        return softmax_cross_entropy(logits, y)
    if "label_smoothing" in inspect.signature(softmax_cross_entropy).parameters:
        return softmax_cross_entropy(logits, y, label_smoothing=eps)
    from tinyattn.learn import train

    if hasattr(train, "smoothed_cross_entropy"):
        return train.smoothed_cross_entropy(logits, y, eps)
    pytest.skip("the host loss has no label smoothing yet")


def run_case(interp: list[str], spec: dict, arrays: dict, tmp: Path, modules: Path,
             kernels: str = "pure") -> tuple[dict[str, np.ndarray], list[str]]:  # fmt: skip
    """Run DRIVER under `interp` (argv prefix) on `spec` + float32 `arrays`; returns the
    written outputs (float32 arrays by name) and stdout lines."""
    tmp.mkdir(parents=True, exist_ok=True)
    spec = {**spec, "dir": str(tmp)}
    for name, a in arrays.items():
        np.ascontiguousarray(a, dtype=np.float32).tofile(tmp / f"{name}.f32")
    (tmp / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.run([*interp, "-c", DRIVER, str(modules), str(tmp / "spec.json"), kernels],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, f"device driver failed:\n{proc.stdout[-2000:]}\n{proc.stderr}"
    outs = {p.stem: np.fromfile(p, dtype=np.float32) for p in tmp.glob("*.out")}
    return outs, proc.stdout.splitlines()


# ------------------------------------------------------------------------------------ cases
# Each case: (spec, input arrays, host results). Shapes: (tokens, width) per sample.

LAYER_CASES = {
    "dense": ({"op": "dense", "in": 5, "out": 7, "bias": True}, (1, 5)),
    "dense-nobias-tokens": ({"op": "dense", "in": 4, "out": 6, "bias": False}, (3, 4)),
    "relu": ({"op": "relu"}, (1, 9)),
    "attention": ({"op": "attention", "embed_dim": 8, "num_heads": 2, "bias": True}, (4, 8)),
    "attention-h4-nobias": (
        {"op": "attention", "embed_dim": 8, "num_heads": 4, "bias": False}, (5, 8)),
    "attention-h1": ({"op": "attention", "embed_dim": 6, "num_heads": 1, "bias": True}, (3, 6)),
    "avgpool": ({"op": "avgpool"}, (4, 8)),
    "myattn-pool": ({"op": "myattn", "mode": "pool", "query_size": 8, "key_size": 8,
                     "value_size1": 4, "value_size2": 8, "output_size": 16, "bias": True},
                    (4, 8)),
}  # fmt: skip


def layer_case(key: str, batch: int = 6, n: int = 5, seed: int = 0):
    """A single layer on a short batch (n of `batch` rows), random weights, input and dy."""
    op, (tokens, width) = LAYER_CASES[key]
    rng = np.random.default_rng(seed)
    layer = layer_from_op(op, rng)
    P = sum(p.size for p in layer.params.values())
    theta = rng.normal(0.0, 0.3, P).astype(np.float32)  # ~Xavier scale, biases non-zero too
    _, grad = bind_f32([layer], theta)
    shape = (n, width) if tokens == 1 else (n, tokens, width)
    x = rng.normal(0.0, 1.0, shape).astype(np.float32)
    y = layer.forward(x.copy(), training=True)
    dy = (rng.normal(0.0, 1.0, y.shape) / n).astype(np.float32)  # a mean loss's scale
    dx = layer.backward(dy)
    spec = {"kind": "layer", "op": op, "shape": [tokens, width], "batch": batch, "n": n}
    return spec, {"theta": theta, "x": x, "dy": dy}, {"y": y, "dx": dx, "grad": grad}


def loss_case(eps: float, batch: int = 16, n: int = 13, C: int = 3, seed: int = 1):
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 2.0, (n, C)).astype(np.float32)
    labels = rng.integers(0, C, n)
    loss, dlogits = host_loss(logits.copy(), labels, eps)
    spec = {"kind": "loss", "batch": batch, "n": n, "classes": C, "eps": eps,
            "labels": [int(v) for v in labels]}  # fmt: skip
    return spec, {"x": logits}, {"loss": loss, "dx": dlogits}


def iris_batch(n: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n standardized Iris rows (float32) and their labels, in a seeded order."""
    data = load_dataset("iris")
    mean, std = fit_standardizer(data.rows)
    X = standardize(data.rows, mean, std)
    idx = np.random.default_rng(seed).permutation(len(X))[:n]
    return X[idx].astype(np.float32), data.y[idx]


def model_case(ops, x, labels, optimizer="adam", steps=1, eps=0.0, lr=0.01,
               weight_decay=1.0, momentum=0.9, batch=16, seed=0):  # fmt: skip
    """One model, one batch: the host float32 step(s) from build_from_ops(ops, seed)."""
    model = build_from_ops(ops, seed)
    theta0 = model.theta.astype(np.float32)
    flat, grad = bind_f32(model.layers, theta0)  # the layers view flat, grad
    mask = model.decay_mask.astype(np.float32)
    if optimizer == "adam":
        opt = Adam(flat, grad, lr, weight_decay=weight_decay, decay_mask=mask)
    else:
        opt = SGD(flat, grad, lr, momentum, weight_decay=weight_decay, decay_mask=mask)
    host: dict = {}
    for k in range(steps):
        h = x.copy()
        for layer in model.layers:
            h = layer.forward(h, training=True)
        loss, d = host_loss(h, labels, eps)
        if k == 0:
            host.update(y=h.copy(), loss=loss)
        for layer in reversed(model.layers):
            d = layer.backward(d)
        if k == 0:
            host.update(dx=d.copy(), grad=grad.copy(), mask=mask)
            if optimizer == "adam":  # see compare()
                host.update(noise=np.abs(grad) < TOL_ABS, noise_bound=2 * steps * lr)
        opt.step(lr)
    host["theta"] = flat.copy()
    spec = {"kind": "model", "ops": ops, "features": x.shape[1], "batch": batch, "n": len(x),
            "eps": eps, "steps": steps, "labels": [int(v) for v in labels],
            "opt": {"name": optimizer, "lr": lr, "weight_decay": weight_decay,
                    "momentum": momentum}}  # fmt: skip
    return spec, {"theta": theta0, "x": x}, host


def odd_batch(n: int = 11, seed: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, 1.0, (n, 4)).astype(np.float32), rng.integers(0, 5, n)


MODEL_CASES = {
    "iris-attn-adam": lambda: model_case(iris_attn_ops(4, 3), *iris_batch()),
    "iris-attn-adam-smooth": lambda: model_case(iris_attn_ops(4, 3), *iris_batch(), eps=0.1),
    "iris-attn-sgd-3steps": lambda: model_case(iris_attn_ops(4, 3), *iris_batch(), "sgd", 3,
                                               weight_decay=0.01),
    "iris-attn-adam-3steps-short": lambda: model_case(iris_attn_ops(4, 3), *iris_batch(8),
                                                      steps=3),
    "iris-myattn-adam": lambda: model_case(iris_myattn_ops(4, 3), *iris_batch()),
    "odd-ops-adam": lambda: model_case(ODD_OPS, *odd_batch(), seed=3),
}  # fmt: skip


def compare(case: tuple, outs: dict, lines: list[str], label: str) -> dict[str, tuple]:
    """Check every output of a case; returns {output: (max abs err, max err/tol)}."""
    spec, _, host = case
    errors = {}
    for name in ("y", "dx", "grad", "theta"):
        if name not in host:
            continue
        dev, ref = outs[name], host[name]
        if name in ("y", "dx"):  # the device's buffers hold `batch` rows, the first n are used
            dev = dev[: np.size(ref)]
        if name == "theta" and "noise" in host:
            # Adam's first update is lr g / (|g| + 1e-8): for a gradient below the gradient
            # tolerance (rounding noise, e.g. the key bias bk, exactly 0 in exact arithmetic as
            # softmax ignores a shift shared by all keys) it is noise of up to lr either way.
            noise = host["noise"]
            assert np.all(np.abs(dev[noise] - ref[noise]) <= host["noise_bound"]), label
            dev, ref = dev[~noise], ref[~noise]
        errors[name] = check(f"{label} {name}", dev, ref)
    if "mask" in host:
        assert np.array_equal(outs["mask"], host["mask"]), f"{label}: weight-decay mask differs"
    if "loss" in host:
        loss = float(lines[0])
        assert abs(loss - host["loss"]) <= max(TOL_REL * abs(host["loss"]), TOL_ABS), label
        errors["loss"] = (abs(loss - host["loss"]), 0.0)
    return errors


CPYTHON = [sys.executable]


# -------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("key", sorted(LAYER_CASES))
def test_device_train_layer_step_matches_host_float32(key, tmp_path):
    case = layer_case(key)
    outs, lines = run_case(CPYTHON, case[0], case[1], tmp_path, DEVICE_DIR)
    compare(case, outs, lines, key)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_device_train_loss_matches_host(eps, tmp_path):
    case = loss_case(eps)
    outs, lines = run_case(CPYTHON, case[0], case[1], tmp_path, DEVICE_DIR)
    compare(case, outs, lines, f"loss eps={eps}")


@pytest.mark.parametrize("key", sorted(MODEL_CASES))
def test_device_train_model_step_matches_host_float32(key, tmp_path):
    case = MODEL_CASES[key]()
    outs, lines = run_case(CPYTHON, case[0], case[1], tmp_path, DEVICE_DIR)
    compare(case, outs, lines, key)


@pytest.fixture(scope="module")
def at():
    """device/attention_train.py imported under CPython."""
    sys.path.insert(0, str(DEVICE_DIR))
    try:
        import attention_train
        import attention_train_myattn  # noqa: F401  (registers op myattn, as server_train does)

        yield attention_train
    finally:
        sys.path.remove(str(DEVICE_DIR))


def test_device_train_kernels_fall_back_to_pure_on_cpython(at):
    assert at.use_kernels("auto") == "pure"
    with pytest.raises(ValueError, match="native emitter"):
        at.use_kernels("native")
    with pytest.raises(ValueError, match="choose pure"):
        at.use_kernels("viper")


def test_device_train_learning_rate_matches_host_schedule(at):
    from tinyattn.learn.train import TrainConfig, learning_rate

    for schedule in ("cosine", "constant"):
        config = TrainConfig(lr=0.03, schedule=schedule)
        for step in (0, 1, 399, 799):
            host = learning_rate(config, step, 800)
            assert at.learning_rate(0.03, step, 800, schedule == "cosine") == pytest.approx(host)


def test_device_train_net_rejects_what_it_cannot_train(at):
    with pytest.raises(ValueError, match="cannot train"):
        at.Net([{"op": "gelu"}, {"op": "dense", "in": 4, "out": 3}], 4, 2)
    with pytest.raises(ValueError, match="only 'pool'"):
        at.Net(iris_myattn_ops(4, 3)[:3] + [{**iris_myattn_ops(4, 3)[3], "mode": "explicit"}],
               4, 2)  # fmt: skip
    with pytest.raises(ValueError, match="dense in=5"):
        at.Net([{"op": "dense", "in": 5, "out": 3}], 4, 2)
    with pytest.raises(ValueError, match="end with avgpool"):
        at.Net(iris_attn_ops(4, 3)[:4], 4, 2)


def test_device_train_epochs_follow_host_fit(at):
    """Three epochs of Trainer (the host's minibatch order, cosine AdamW, decay 1.0) from the
    host's initial weights end near host `fit` in float32: the step math composes (single
    steps are pinned above; Adam amplifies rounding where gradients are ~0, so looser)."""
    from array import array

    from tinyattn.learn.train import TrainConfig, fit

    data = load_dataset("iris")
    mean, std = fit_standardizer(data.rows[:120])
    X = standardize(data.rows[:120], mean, std).astype(np.float32)
    y = data.y[:120]
    config = TrainConfig(epochs=3)
    model = build_from_ops(iris_attn_ops(4, 3), config.seed)
    theta0 = model.theta.astype(np.float32)
    model.theta, model.grad = bind_f32(model.layers, theta0)
    model.decay_mask = model.decay_mask.astype(np.float32)
    fit(model, X, y, config)

    net = at.Net(iris_attn_ops(4, 3), 4, config.batch_size, array("f", theta0.tobytes()))
    opt = at.optimizer(net, "adam", config.lr, config.weight_decay)
    trainer = at.Trainer(net, opt, array("f", X.tobytes()), bytes(y.astype(np.uint8)),
                         config.epochs, config.lr,
                         label_smoothing=config.label_smoothing)  # fmt: skip
    rng = np.random.default_rng([config.seed, 1])  # host fit's minibatch order
    for _ in range(config.epochs):
        trainer.epoch([int(i) for i in rng.permutation(len(X))])
    err = np.abs(np.array(net.theta) - model.theta)
    bk = slice(160 + 192 + 64 + 8, 160 + 192 + 64 + 16)  # W1, b1, Wqkv, Wo, bq: then bk
    assert err[bk].max() < 3 * 8 * config.lr  # noise steps (see compare)
    err[bk] = 0.0
    assert err.max() < 1e-4, f"max |theta_device - theta_host| {err.max():.3g}"


# ------------------------------------------------------------------- board float model file


@pytest.fixture(scope="module")
def npz(tmp_path_factory) -> Path:
    """A small trained model file (iris-attn, 3 epochs) as `tinyattn train` writes it."""
    from tinyattn import cli

    path = tmp_path_factory.mktemp("npz") / "model.npz"
    assert cli.main(["train", "--epochs", "3", "--out", str(path), "--quiet"]) == 0
    return path


def test_device_train_board_file_host_to_device_to_host(at, npz, tmp_path):
    """npz -> TAFM (host) -> Net on the device, one step, written back (device) -> npz (host):
    the device read exactly the host's float32 weights, the host reads exactly the device's."""
    board = boardmodel.npz_to_board(npz, tmp_path / "model.tafm")
    mf = load_model(npz)
    net, meta, step, state = at.from_file(str(board), 16)
    assert step == 0 and state == []
    assert np.array_equal(np.array(net.theta, np.float32), mf.model.theta.astype(np.float32))
    x, labels = iris_batch()
    net.gather(np.ravel(x).tolist(), bytes(labels.astype(np.uint8)), list(range(16)), 0, 16)
    net.forward(16)
    net.loss(16)
    net.backward(16)
    opt = at.optimizer(net, "adam", 0.01, 1.0)
    opt.step()
    at.to_file(str(tmp_path / "trained.tafm"), net, meta, opt)
    assert not list(tmp_path.glob("*.tmp")), "the temp file must be renamed away"
    bm = boardmodel.read_board(tmp_path / "trained.tafm")
    assert bm.step == 1 and len(bm.state) == 2
    assert np.array_equal(bm.theta, np.array(net.theta, np.float32))
    assert np.array_equal(bm.state[0], np.array(opt.state[0], np.float32))
    out = boardmodel.board_to_npz(tmp_path / "trained.tafm", tmp_path / "board.npz", base=npz)
    back = load_model(out)
    assert np.array_equal(back.model.theta, bm.theta.astype(np.float64))
    assert np.array_equal(back.norm_mean, mf.norm_mean) and np.array_equal(
        back.norm_std, mf.norm_std
    )
    assert back.meta["class_names"] == mf.meta["class_names"]
    assert back.meta["train"] == mf.meta["train"] and back.meta["board"] == {"step": 1}
    assert back.model.ops == mf.model.ops


def test_device_train_board_file_round_trip_exports(npz, tmp_path):
    """npz -> TAFM -> npz (no base) is the float32-rounded model and `tinyattn export` takes it."""
    from tinyattn import cli

    board = boardmodel.npz_to_board(npz, tmp_path / "m.tafm")
    out = boardmodel.board_to_npz(board, tmp_path / "m.npz")
    mf, back = load_model(npz), load_model(out)
    assert np.array_equal(back.model.theta, mf.model.theta.astype(np.float32).astype(np.float64))
    X = load_dataset("iris").rows
    assert (back.predict(X) == mf.predict(X)).mean() >= 0.99
    assert cli.main(["export", "--model", str(out), "--out", str(tmp_path / "m.bin")]) == 0
    assert boardmodel.main(["to-npz", str(board), str(tmp_path / "cli.npz"), "--base",
                            str(npz)]) == 0  # fmt: skip


def _corrupt(data: bytes) -> list[tuple[str, bytes, str]]:
    """(what, bytes, message fragment both readers must give)."""
    import struct
    import zlib

    def put(fmt, off, *v, crc=True):
        b = bytearray(data)
        struct.pack_into(fmt, b, off, *v)
        if crc:
            struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])))
        return bytes(b)

    return [
        ("magic", put("4s", 0, b"XAFM", crc=False), "magic"),
        ("version", put("<H", 4, 2, crc=False), "version 2"),
        ("flags", put("<H", 6, 2), "flags"),  # an unknown bit (bit 0: AVERAGE)
        ("crc", put("B", 40, data[40] ^ 1, crc=False), "CRC mismatch"),
        ("truncated", data[:-9], "truncated"),
        ("short", data[:10], "header"),
        ("extra", data + b"\0\0\0\0", "extra bytes"),
    ]


def test_device_train_board_file_rejections_name_the_problem(at, npz, tmp_path):
    import attention_trainfile as tf

    data = boardmodel.npz_to_board(npz, tmp_path / "ok.tafm").read_bytes()
    for what, bad, fragment in _corrupt(data):
        path = tmp_path / f"{what}.tafm"
        path.write_bytes(bad)
        with pytest.raises(ValueError) as dev:
            tf.load(str(path))
        assert fragment in str(dev.value) or what in ("extra", "truncated"), (what, dev.value)
        with pytest.raises(ValueError):
            boardmodel.read_board(path)


def test_device_train_board_file_rejects_wrong_parameter_count(tmp_path):
    meta = {"ops": iris_attn_ops(4, 3), "n_features": 4, "class_names": ["a", "b", "c"]}
    path = boardmodel.write_board(tmp_path / "x.tafm", meta, np.zeros(10, np.float32))
    with pytest.raises(ValueError, match="10 parameters, its ops have 475"):
        boardmodel.read_board(path)


def test_device_train_save_model_round_trip_unaffected(npz, tmp_path):
    """board_to_npz writes through save_model: the file reads back with the host reader."""
    mf = load_model(npz)
    p = save_model(tmp_path / "again.npz", mf.model, mf.norm_mean, mf.norm_std,
                   {"class_names": mf.class_names})  # fmt: skip
    assert load_model(p).class_names == mf.class_names
