# Host (CPython): on-board training of the sequence model (device/attention_train_seq.py) against
# the host's float32 NumPy step, under CPython and the MicroPython unix port.
"""Issue 13, Build item 1 for `seq-attn` (issue 11): one training step of the device code vs the
host's float32 step (host/learn/seqlayers.py, seqmodel.py, losses + train.py's smoothing,
optim.py) from the same weights and batch, within test_device_train's TOL_REL relative or
TOL_ABS absolute, elementwise:

- each new layer alone (pos_add, residual masked attention with 1/2/4 heads and without
  biases, ff with and without biases, masked_pool) on tokens with some windows padded: output
  (valid tokens), input gradient and parameter gradients. The layer's dy is 0 on padded tokens,
  as it always is inside the model (pooling gives them none);
- patch_embed through the smallest window model (patch_embed, masked_pool, dense; T not a
  multiple of P);
- whole models on real windows: BasicMotions-shaped (T=100, C=6, equal lengths; a small one and
  the tuned default architecture) and JapaneseVowels-shaped (C=12, unequal lengths 7..26, the
  padding filled with garbage; two blocks, and the tuned default), logits, every gradient, the
  weight-decay mask and the weights after AdamW / SGD steps;
- padding invariance on the device: the same batch with its padding zero or garbage (huge
  values, inf, NaN) gives bit-identical logits, gradients and weights;
- a few epochs of Trainer (lengths, the host's minibatch order, and the host's time-shift
  augmentation replayed: SeqNet.shifts) against host `fit_seq`;
- a minibatch in pieces (`rows` < batch: buffers for `rows` windows, gradients summed): the
  same step within tolerance, the BasicMotions architecture training at -X heapsize=256k.
- the board float model file: a seq model.npz -> TAFM -> SeqNet (from_file) -> TAFM ->
  model.npz; an Iris net never imports the sequence module.

The device side runs DRIVER below (valid under CPython and MicroPython), the harness of
tests/test_device_train.py (`run_case`'s conventions: JSON spec + float32 files in, float32
files out). The MicroPython tests run it with `micropython` over the modules compiled by
mpy-cross, pure and native kernels.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from device_support import DEVICE_DIR, find, literals
from test_device_train import TOL_ABS, bind_f32, check, compare, host_loss

from tinyattn.board.onboard_seq import orders_and_shifts as board_orders_and_shifts
from tinyattn.data.timeseries import fit_channel_standardizer, load_ts_dataset, standardize_windows
from tinyattn.learn.optim import SGD, Adam
from tinyattn.learn.seqlayers import SeqMask
from tinyattn.learn.seqmodel import (
    SeqAttnConfig,
    build_seq_from_ops,
    seq_attn_ops,
    seq_layer_from_op,
)
from tinyattn.learn.seqtrain import Augment, Average, augment_batch, fit_seq
from tinyattn.learn.train import TrainConfig

# argv: modules dir, spec.json, kernels. As test_device_train.DRIVER, plus "lengths" (window
# model) or "ntok" (one layer) in the spec.
DRIVER = """
import sys, json
from array import array
sys.path.insert(0, sys.argv[1])
import attention_train as at
at.use_kernels(sys.argv[3])
import attention_train_seq as ats
f = open(sys.argv[2]); spec = json.loads(f.read()); f.close()
D = spec["dir"] + "/"

def load(name):
    f = open(D + name + ".f32", "rb"); a = array("f", f.read()); f.close()
    return a

def save(name, a):
    f = open(D + name + ".out", "wb"); f.write(a); f.close()

B = spec["batch"]
n = spec["n"]
if spec["kind"] == "layer":
    S, E = spec["shape"]
    win = ats.Windows(B, S)
    for b in range(n):
        win.ntok[b] = spec["ntok"][b]
    layer = ats.layer(spec["op"], S, E, B, 0, True, win, 1)
    th = load("theta")
    g = at.buf(layer.n_params)
    layer.bind(th, g, bytearray(layer.n_params))
    save("y", layer.forward(load("x"), n))
    save("dx", layer.backward(load("dy"), n))
    save("grad", g)
else:
    net = at.new_net(spec["ops"], spec["channels"], B, load("theta"), False, spec.get("rows"))
    o = spec["opt"]
    opt = at.optimizer(net, o["name"], o["lr"], o["weight_decay"], o["momentum"])
    X = load("x")
    labels = bytes(spec["labels"])
    lengths = spec["lengths"]
    if spec["kind"] == "epochs":
        E = len(spec["orders"])
        av = spec.get("average")
        avg = ats.Averager(E, av["swa"], av["ema"]) if av else None
        t = at.Trainer(net, opt, X, labels, E, o["lr"], True, spec["eps"], 0, lengths, avg)
        for e in range(E):
            if e == spec.get("resume_at"):  # checkpoint, then a new net, optimizer, average
                at.to_file(D + "ckpt.tafm", net, json.dumps({"ops": spec["ops"], "n_features":
                           spec["channels"]}).encode(), opt, avg)  # fmt: skip
                avg = ats.Averager(E, av["swa"], av["ema"]) if av else None
                net, meta, step, state = at.from_file(D + "ckpt.tafm", B, False,
                                                      spec.get("rows"), avg)  # fmt: skip
                opt = at.optimizer(net, o["name"], o["lr"], o["weight_decay"], o["momentum"],
                                   tuple(state), step)  # fmt: skip
                t = at.Trainer(net, opt, X, labels, E, o["lr"], True, spec["eps"], step,
                               lengths, avg)  # fmt: skip
                print(repr(["resumed", step, avg.count if avg else None]))
            if spec.get("shifts"):
                net.shifts = spec["shifts"][e]
            print(repr(t.epoch(spec["orders"][e])))
    else:
        order = list(range(n))
        for k in range(spec["steps"]):
            loss = net.step(X, labels, order, 0, n, lengths, spec["eps"])
            if k == 0:
                save("y", net.logits)
                save("grad", net.grad)
                save("mask", array("f", [float(v) for v in net.mask]))
                print(repr(loss))
            opt.step(o["lr"])
    save("theta", net.theta)
"""


def run_case(interp: list[str], spec: dict, arrays: dict, tmp: Path, modules: Path,
             kernels: str = "pure") -> tuple[dict[str, np.ndarray], list[str]]:  # fmt: skip
    """DRIVER under `interp` on `spec` + float32 `arrays`: (outputs by name, stdout lines)."""
    tmp.mkdir(parents=True, exist_ok=True)
    for old in tmp.glob("*.out"):
        old.unlink()
    spec = {**spec, "dir": str(tmp)}
    for name, a in arrays.items():
        np.ascontiguousarray(a, dtype=np.float32).tofile(tmp / f"{name}.f32")
    (tmp / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.run([*interp, "-c", DRIVER, str(modules), str(tmp / "spec.json"), kernels],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, f"device driver failed:\n{proc.stdout[-2000:]}\n{proc.stderr}"
    outs = {p.stem: np.fromfile(p, dtype=np.float32) for p in tmp.glob("*.out")}
    return outs, proc.stdout.splitlines()


# ------------------------------------------------------------------------------ layer cases

E, H, F = 8, 2, 12
LAYER_CASES = {  # op, tokens S, valid tokens of each window (n = 5 of a batch of 6)
    "pos_add": ({"op": "pos_add", "tokens": 5, "embed_dim": E}, 5, [5, 3, 1, 5, 2]),
    "attention": ({"op": "attention", "embed_dim": E, "num_heads": H, "bias": True,
                   "residual": True, "key_mask": True}, 5, [5, 3, 1, 5, 2]),
    "attention-full": ({"op": "attention", "embed_dim": E, "num_heads": H, "bias": True,
                        "residual": True, "key_mask": True}, 4, [4, 4, 4, 4, 4]),
    "attention-h4-nobias": ({"op": "attention", "embed_dim": E, "num_heads": 4, "bias": False,
                             "residual": True, "key_mask": True}, 6, [2, 6, 5, 1, 3]),
    "attention-h1": ({"op": "attention", "embed_dim": 6, "num_heads": 1, "bias": True,
                      "residual": True, "key_mask": True}, 3, [3, 1, 2, 3, 2]),
    "ff": ({"op": "ff", "embed_dim": E, "hidden": F, "bias": True, "residual": True}, 5,
           [5, 3, 1, 5, 2]),
    "ff-nobias": ({"op": "ff", "embed_dim": E, "hidden": F, "bias": False, "residual": True},
                  4, [4, 4, 2, 1, 3]),
    "masked_pool": ({"op": "masked_pool"}, 5, [5, 3, 1, 5, 2]),
}  # fmt: skip


def layer_case(key: str, batch: int = 6, seed: int = 0):
    """One sequence layer on n windows of S tokens (ntok valid), random weights, x and dy."""
    op, S, ntok = LAYER_CASES[key]
    n = len(ntok)
    width = int(op.get("embed_dim", E))
    rng = np.random.default_rng(seed)
    layer = seq_layer_from_op(op, rng)
    P = sum(p.size for p in layer.params.values())
    theta = rng.normal(0.0, 0.3, P).astype(np.float32)  # biases non-zero too
    _, grad = bind_f32([layer], theta)
    x = rng.normal(0.0, 1.0, (n, S, width)).astype(np.float32)
    mask = SeqMask.from_lengths(np.array(ntok), S, 1, np.float32)  # one step a token
    valid = np.arange(S)[None, :] < np.array(ntok)[:, None]  # (n, S)
    if getattr(layer, "uses_mask", False):
        y = layer.forward(x.copy(), training=True, mask=mask)
    else:
        y = layer.forward(x.copy(), training=True)
    dy = (rng.normal(0.0, 1.0, y.shape) / n).astype(np.float32)  # a mean loss's scale
    if y.ndim == 3:
        dy[~valid] = 0.0  # the model never sends a padded token a gradient
    dx = layer.backward(dy)
    host = {"y": y, "dx": dx, "grad": grad}
    if op["op"] == "attention":  # padded query rows are skipped on the device: compare the rest
        host["y_valid"] = np.repeat(valid.ravel(), width)
    spec = {"kind": "layer", "op": op, "shape": [S, width], "batch": batch, "n": n,
            "ntok": ntok}  # fmt: skip
    return spec, {"theta": theta, "x": x, "dy": dy}, host


def compare_seq(case: tuple, outs: dict, lines: list[str], label: str) -> dict[str, tuple]:
    """test_device_train.compare, the output restricted to valid tokens where the case says."""
    spec, arrays, host = case
    if "y_valid" in host:
        keep = host["y_valid"]
        outs = {**outs, "y": outs["y"][: keep.size][keep]}
        host = {**host, "y": host["y"].ravel()[keep]}
    return compare((spec, arrays, host), outs, lines, label)


# ------------------------------------------------------------------------------ model cases


def windows(name: str, n: int, seed: int = 0):
    """n standardized TRAIN windows of an archive problem (float32, [n, T, C]), their lengths
    and labels, in a seeded order; T is the TRAIN split's longest window."""
    d = load_ts_dataset(name, "train")
    mean, std = fit_channel_standardizer(d.X, d.lengths)
    X = standardize_windows(d.X, d.lengths, mean, std).astype(np.float32)
    idx = np.random.default_rng(seed).permutation(len(X))[:n]
    return X[idx], d.lengths[idx].astype(np.int64), d.y[idx], d.n_classes


def garbage(x: np.ndarray, lengths: np.ndarray, seed: int = 5, nan: bool = False) -> np.ndarray:
    """x with every padded step (t >= length) overwritten by huge values (and inf/NaN)."""
    x = x.copy()
    rng = np.random.default_rng(seed)
    for b, k in enumerate(lengths):
        x[b, k:] = rng.normal(0.0, 1e30, x[b, k:].shape)
        if nan and k < x.shape[1]:
            x[b, k, 0], x[b, -1, -1] = np.nan, np.inf
    return x


def model_case(ops, x, lengths, labels, optimizer="adam", steps=1, eps=0.0, lr=0.01,
               weight_decay=0.01, momentum=0.9, batch=16, seed=0, rows=None):  # fmt: skip
    """One window model, one batch: the host float32 step(s) from build_seq_from_ops(ops);
    `rows` < n: the device runs the batch in pieces of `rows` windows (its logits are the last
    piece's, so only gradients and weights are compared)."""
    model = build_seq_from_ops(ops, seed, np.float32)
    theta0 = model.theta.copy()
    mask = model.decay_mask.astype(np.float32)
    if optimizer == "adam":
        opt = Adam(model.theta, model.grad, lr, weight_decay=weight_decay, decay_mask=mask)
    else:
        opt = SGD(model.theta, model.grad, lr, momentum, weight_decay=weight_decay,
                  decay_mask=mask)  # fmt: skip
    full = bool(np.all(lengths == x.shape[1]))
    host: dict = {}
    for k in range(steps):
        logits = model.forward(x, training=True, lengths=None if full else lengths)
        loss, d = host_loss(logits, labels, eps)
        model.backward(d)
        if k == 0:
            host.update(y=logits.copy(), loss=loss, grad=model.grad.copy(), mask=mask)
            if optimizer == "adam":  # test_device_train.compare: Adam's noise steps
                host.update(noise=np.abs(model.grad) < TOL_ABS, noise_bound=2 * steps * lr)
        opt.step(lr)
    host["theta"] = model.theta.copy()
    if rows is not None and rows < len(x):
        del host["y"]
    spec = {"kind": "model", "ops": ops, "channels": x.shape[2], "batch": batch, "n": len(x),
            "rows": rows,
            "eps": eps, "steps": steps, "labels": [int(v) for v in labels],
            "lengths": None if full else [int(v) for v in lengths],
            "opt": {"name": optimizer, "lr": lr, "weight_decay": weight_decay,
                    "momentum": momentum}}  # fmt: skip
    return spec, {"theta": theta0, "x": x}, host


def arch(P, E, H, L, F):
    return SeqAttnConfig(patch=P, embed_dim=E, num_heads=H, blocks=L, ff_dim=F)


def bm_case(config, n=8, batch=8, **kw):
    x, lengths, y, K = windows("basicmotions", n)
    return model_case(seq_attn_ops(x.shape[1], x.shape[2], K, config), x, lengths, y,
                      batch=batch, **kw)  # fmt: skip


def jv_case(config, n=13, batch=16, **kw):
    x, lengths, y, K = windows("japanesevowels", n, seed=1)
    assert lengths.min() < x.shape[1], "the batch must have padded windows"
    return model_case(seq_attn_ops(x.shape[1], x.shape[2], K, config), garbage(x, lengths),
                      lengths, y, batch=batch, **kw)  # fmt: skip


def patch_case():
    """patch_embed alone (with masked_pool and a head): T=10 steps, P=4 (the last patch half
    zero-filled), random windows of lengths 1..10 with garbage padding."""
    rng = np.random.default_rng(3)
    T, C, P, K, n = 10, 3, 4, 4, 6
    ops = [{"op": "patch_embed", "steps": T, "channels": C, "patch": P, "embed_dim": 5,
            "bias": True}, {"op": "masked_pool"}, {"op": "dense", "in": 5, "out": K}]  # fmt: skip
    x = rng.normal(0.0, 1.0, (n, T, C)).astype(np.float32)
    lengths = np.array([10, 1, 4, 5, 9, 8])
    return model_case(ops, garbage(x, lengths), lengths, rng.integers(0, K, n), batch=7)


MODEL_CASES = {
    "patch_embed-pool-dense": patch_case,
    "basicmotions-small-adam": lambda: bm_case(arch(10, 8, 2, 1, 16)),
    "basicmotions-default-adam": lambda: bm_case(arch(5, 16, 2, 1, 32), n=6, batch=6),
    "japanesevowels-2blocks-adam-smooth": lambda: jv_case(arch(2, 8, 2, 2, 12), eps=0.1,
                                                          weight_decay=0.1),
    "japanesevowels-2blocks-sgd-3steps": lambda: jv_case(arch(3, 8, 4, 2, 12), optimizer="sgd",
                                                         steps=3, n=9),
    "japanesevowels-default-adam-smooth": lambda: jv_case(arch(1, 16, 4, 1, 32), eps=0.1,
                                                          weight_decay=0.1, lr=0.003),
    "japanesevowels-2blocks-adam-rows3": lambda: jv_case(arch(2, 8, 2, 2, 12), eps=0.1,
                                                         rows=3),
    "basicmotions-small-sgd-rows1": lambda: bm_case(arch(10, 8, 2, 1, 16), optimizer="sgd",
                                                    steps=2, rows=1),
}  # fmt: skip


def padding_pair(nan: bool):
    """The JapaneseVowels 2-block case twice: padding zero, and padding garbage."""
    x, lengths, y, K = windows("japanesevowels", 11, seed=2)
    ops = seq_attn_ops(x.shape[1], x.shape[2], K, arch(2, 8, 2, 2, 12))
    zero = model_case(ops, x, lengths, y, steps=2, eps=0.1)
    return zero, {**zero[1], "x": garbage(x, lengths, seed=9, nan=nan)}


def orders_and_shifts(train: TrainConfig, n: int, shift: int) -> tuple[list, list]:
    """fit_seq's generator replayed (what `train --on-board` sends: onboard_seq's) as lists:
    per epoch the order, and (shift > 0) each position's shift; [] without shifts."""
    orders, shifts = board_orders_and_shifts(train.seed, n, train.epochs, train.batch_size, shift)
    return orders.tolist(), [] if shifts is None else shifts.tolist()


def epochs_case(name: str, config, train: TrainConfig, n: int, rows: int | None = None,
                shift: int = 0, average: Average | None = None,
                resume_at: int | None = None):  # fmt: skip
    """`train.epochs` epochs of host fit_seq (float32; augmentation: a circular shift of up to
    `shift` steps; weight averaging `average`) and the device Trainer's spec for them (the
    device checkpoints before epoch `resume_at` and resumes from the file)."""
    x, lengths, y, K = windows(name, n, seed=4)
    x = garbage(x, lengths)  # fit_seq never reads padding either
    ops = seq_attn_ops(x.shape[1], x.shape[2], K, config)
    model = build_seq_from_ops(ops, train.seed, np.float32)
    theta0 = model.theta.copy()
    fit_seq(model, x, lengths, y, train, Augment(shift=shift), average=average)
    if average is not None:  # the average moved the weights well beyond the tolerance
        plain = build_seq_from_ops(ops, train.seed, np.float32)
        fit_seq(plain, x, lengths, y, train, Augment(shift=shift))
        assert np.abs(plain.theta - model.theta).max() > 1e-3
    orders, shifts = orders_and_shifts(train, n, shift)
    full = bool(np.all(lengths == x.shape[1]))
    spec = {"kind": "epochs", "ops": ops, "channels": x.shape[2], "batch": train.batch_size,
            "n": n, "eps": train.label_smoothing, "labels": [int(v) for v in y],
            "lengths": None if full else [int(v) for v in lengths], "orders": orders, "rows": rows,
            "shifts": shifts, "resume_at": resume_at,
            "average": {"swa": average.swa, "ema": average.ema} if average else None,
            "opt": {"name": "adam", "lr": train.lr, "weight_decay": train.weight_decay,
                    "momentum": 0.9}}  # fmt: skip
    return spec, {"theta": theta0, "x": x}, model


def key_bias_noise(model) -> np.ndarray:
    """True on each attention's key bias bk: its gradient is 0 in exact arithmetic (softmax
    ignores a shift shared by all keys), so Adam's steps on it are rounding noise of up to lr."""
    noise = np.zeros(model.n_params, bool)
    for name, (value, _) in model.named_parameters().items():
        if name.endswith(".attn.bk"):
            start = model._offset(value)
            noise[start : start + value.size] = True
    return noise


EPOCH_CASES = {
    "basicmotions": lambda: epochs_case(
        "basicmotions", arch(10, 8, 2, 1, 16),
        TrainConfig(epochs=3, lr=0.01, weight_decay=0.01, label_smoothing=0.0), 40),
    "japanesevowels": lambda: epochs_case(
        "japanesevowels", arch(2, 8, 2, 2, 12),
        TrainConfig(epochs=2, lr=0.003, weight_decay=0.1, label_smoothing=0.1), 48),
    "japanesevowels-rows5": lambda: epochs_case(
        "japanesevowels", arch(2, 8, 2, 2, 12),
        TrainConfig(epochs=2, lr=0.003, weight_decay=0.1, label_smoothing=0.1), 48, rows=5),
    "basicmotions-shift50": lambda: epochs_case(
        "basicmotions", arch(10, 8, 2, 1, 16),
        TrainConfig(epochs=3, lr=0.01, weight_decay=0.01, label_smoothing=0.0), 40, shift=50),
    "japanesevowels-shift3-rows4": lambda: epochs_case(
        "japanesevowels", arch(2, 8, 2, 2, 12),
        TrainConfig(epochs=2, lr=0.003, weight_decay=0.1, label_smoothing=0.1), 48, rows=4,
        shift=3),
    "japanesevowels-ema": lambda: epochs_case(  # the JapaneseVowels default's averaging
        "japanesevowels", arch(2, 8, 2, 2, 12),
        TrainConfig(epochs=3, lr=0.003, weight_decay=0.1, label_smoothing=0.1), 48,
        average=Average(ema=0.97)),
    "japanesevowels-ema-resumed": lambda: epochs_case(
        "japanesevowels", arch(2, 8, 2, 2, 12),
        TrainConfig(epochs=3, lr=0.003, weight_decay=0.1, label_smoothing=0.1), 48, rows=5,
        average=Average(ema=0.5), resume_at=2),
    "basicmotions-swa-shift50": lambda: epochs_case(
        "basicmotions", arch(10, 8, 2, 1, 16),
        TrainConfig(epochs=4, lr=0.01, weight_decay=0.01, label_smoothing=0.0), 40, shift=50,
        average=Average(swa=0.75)),
    "basicmotions-swa-resumed": lambda: epochs_case(
        "basicmotions", arch(10, 8, 2, 1, 16),
        TrainConfig(epochs=4, lr=0.01, weight_decay=0.01, label_smoothing=0.0), 40,
        average=Average(swa=0.5), resume_at=3),
}  # fmt: skip


def check_epochs(case, outs, label, lr, epochs, steps_per_epoch) -> float:
    """Device weights after the epochs vs host fit_seq: 1e-4 absolute (the step math composes;
    Adam amplifies rounding where gradients are ~0, so looser than one step), key biases within
    their noise bound. Returns the max error off the key biases."""
    spec, _, model = case
    err = np.abs(outs["theta"].astype(np.float64) - model.theta)
    noise = key_bias_noise(model)
    assert err[noise].max() <= 2 * epochs * steps_per_epoch * lr, label
    worst = float(err[~noise].max())
    assert worst < 1e-4, f"{label}: max |theta_device - theta_host| {worst:.3g}"
    return worst


def check_resumed(spec: dict, lines: list[str]) -> None:
    """A resumed run's line: the checkpoint's step and the epochs its average held."""
    e = spec["resume_at"]
    if e is None:
        return
    av = spec["average"]
    E = len(spec["orders"])
    start = E - max(1, round(av["swa"] * E)) if av["swa"] else 0
    steps = -(-spec["n"] // spec["batch"])
    assert literals(lines[e : e + 1]) == [["resumed", e * steps, max(0, e - start)]], lines


def padding_invariance(run) -> None:
    for nan in (False, True):
        (spec, zero_in, _), bad_in = padding_pair(nan)
        zero, _ = run(spec, zero_in, "zero")
        bad, _ = run(spec, bad_in, "garbage")
        for name in ("y", "grad", "theta"):
            assert np.array_equal(zero[name], bad[name]), f"{name} changed by padding (nan={nan})"


CPYTHON = [sys.executable]


# ------------------------------------------------------------------------------ CPython tests


@pytest.mark.host
@pytest.mark.parametrize("key", sorted(LAYER_CASES))
def test_device_train_seq_layer_step_matches_host_float32(key, tmp_path):
    case = layer_case(key)
    outs, lines = run_case(CPYTHON, case[0], case[1], tmp_path, DEVICE_DIR)
    compare_seq(case, outs, lines, key)


@pytest.mark.host
@pytest.mark.parametrize("key", sorted(MODEL_CASES))
def test_device_train_seq_model_step_matches_host_float32(key, tmp_path):
    case = MODEL_CASES[key]()
    outs, lines = run_case(CPYTHON, case[0], case[1], tmp_path, DEVICE_DIR)
    compare_seq(case, outs, lines, key)


@pytest.mark.host
def test_device_train_seq_padding_changes_nothing(tmp_path):
    padding_invariance(lambda spec, arrays, sub: run_case(CPYTHON, spec, arrays, tmp_path / sub,
                                                          DEVICE_DIR))  # fmt: skip


@pytest.mark.host
@pytest.mark.parametrize("key", sorted(EPOCH_CASES))
def test_device_train_seq_epochs_follow_host_fit_seq(key, tmp_path):
    case = EPOCH_CASES[key]()
    spec = case[0]
    outs, lines = run_case(CPYTHON, spec, case[1], tmp_path, DEVICE_DIR)
    assert len(lines) == len(spec["orders"]) + (spec["resume_at"] is not None)
    check_resumed(spec, lines)
    steps = -(-spec["n"] // spec["batch"])
    check_epochs(case, outs, key, spec["opt"]["lr"], len(spec["orders"]), steps)


@pytest.fixture(scope="module")
def at():
    sys.path.insert(0, str(DEVICE_DIR))
    try:
        import attention_train
        import attention_train_seq  # noqa: F401  (registers the window net, as server_train_seq)

        yield attention_train
    finally:
        sys.path.remove(str(DEVICE_DIR))


@pytest.mark.host
def test_device_train_seq_net_rejects_what_it_cannot_train(at):
    import attention_train_seq as ats

    ops = seq_attn_ops(10, 3, 4, arch(5, 8, 2, 1, 16))
    assert isinstance(at.new_net(ops, 3, 2), ats.SeqNet)
    assert not isinstance(at.new_net([{"op": "dense", "in": 4, "out": 3}], 4, 2), ats.SeqNet)
    with pytest.raises(ValueError, match="3 channels, the data has 4"):
        at.new_net(ops, 4, 2)
    with pytest.raises(ValueError, match="key mask"):
        at.new_net(ops[:2] + [{**ops[2], "residual": False}] + ops[3:], 3, 2)
    with pytest.raises(ValueError, match="masked_pool"):
        at.new_net(ops[:-2] + [{"op": "avgpool"}] + ops[-1:], 3, 2)
    with pytest.raises(ValueError, match="first op"):
        at.new_net(ops[:1] + ops, 3, 2)
    net = at.new_net(ops, 3, 2)
    with pytest.raises(ValueError, match="lengths must lie in 1..10"):
        net.gather([0.0] * 60, b"\0\0", [0, 1], 0, 2, [10, 0])
    with pytest.raises(ValueError, match="at least one window"):
        at.new_net(ops, 3, 2, rows=0)


@pytest.mark.host
def test_device_train_seq_gather_shifts_as_host_augment_batch(at):
    """SeqNet.gather with shifts puts exactly host augment_batch's rotated windows (within each
    window's length, padding 0) into its token buffer."""
    from array import array

    x, lengths, y, K = windows("japanesevowels", 12, seed=7)
    ops = seq_attn_ops(x.shape[1], x.shape[2], K, arch(4, 8, 2, 1, 12))  # T=26: S*P = 28
    net = at.new_net(ops, x.shape[2], 12)
    net.shifts = [-7, 0, 3, 25, -26, 1, 2, -1, 40, 5, -3, 9]

    class Draws:  # the generator augment_batch draws the shifts from
        def integers(self, lo, hi, size):
            return np.array(net.shifts)

    host, _ = augment_batch(x, lengths, Augment(shift=50), Draws())  # (12, T, C)
    order = list(range(12))
    net.gather(array("f", garbage(x, lengths).tobytes()), bytes(12), order, 0, 12, list(lengths))
    dev = np.array(net.x, np.float32).reshape(12, -1, x.shape[2])  # (12, S*P, C)
    assert np.array_equal(dev[:, : x.shape[1]], host) and not dev[:, x.shape[1] :].any()


@pytest.mark.slow
@pytest.mark.host
def test_device_train_seq_pieces_evaluate_and_step_as_the_whole_batch(at):
    """rows=3 of a batch of 16: evaluate (forward in pieces) gives the same loss and hits, and
    a step the same loss and gradients, as buffers for the whole batch."""
    from array import array

    x, lengths, y, K = windows("japanesevowels", 40, seed=6)
    ops = seq_attn_ops(x.shape[1], x.shape[2], K, arch(2, 8, 2, 1, 12))
    theta = build_seq_from_ops(ops, 0, np.float32).theta
    X, labels, n = (
        array("f", garbage(x, lengths).tobytes()),
        bytes(y.astype(np.uint8)),
        list(lengths),
    )
    out = []
    for rows in (None, 3):
        net = at.new_net(ops, x.shape[2], 16, array("f", theta.tobytes()), rows=rows)
        t = at.Trainer(net, at.optimizer(net), X, labels, 1, 0.01, lengths=n)
        loss, hits = t.evaluate(X, labels, lengths=n)
        step_loss = net.step(X, labels, list(range(40)), 5, 16, n)
        out.append((loss, hits, step_loss, np.array(net.grad)))
    assert out[0][1] == out[1][1]
    assert out[0][0] == pytest.approx(out[1][0], rel=1e-12)
    assert out[0][2] == pytest.approx(out[1][2], rel=1e-12)
    check("grad, rows=3 vs 16", out[1][3], out[0][3])


# -------------------------------------------------------------------------- MicroPython tests

KERNELS = ("pure", "native")
STEP_HEAP = "2m"  # the harness (JSON spec, whole float32 files) and batch-sized buffers


def _mp() -> list[str]:
    return [find("micropython"), "-X", f"heapsize={STEP_HEAP}"]


@pytest.mark.micropython
@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("key", sorted(LAYER_CASES))
def test_device_train_seq_mp_layer_step_matches_host_float32(key, kernels, mpy, tmp_path):
    case = layer_case(key)
    outs, lines = run_case(_mp(), case[0], case[1], tmp_path, mpy, kernels)
    compare_seq(case, outs, lines, f"{key} ({kernels})")


@pytest.mark.micropython
@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("key", sorted(MODEL_CASES))
def test_device_train_seq_mp_model_step_matches_host_float32(key, kernels, mpy, tmp_path):
    case = MODEL_CASES[key]()
    outs, lines = run_case(_mp(), case[0], case[1], tmp_path, mpy, kernels)
    compare_seq(case, outs, lines, f"{key} ({kernels})")


@pytest.mark.micropython
def test_device_train_seq_mp_padding_changes_nothing(mpy, tmp_path):
    padding_invariance(lambda spec, arrays, sub: run_case(_mp(), spec, arrays, tmp_path / sub,
                                                          mpy, "native"))  # fmt: skip


@pytest.mark.micropython
@pytest.mark.parametrize("key", sorted(EPOCH_CASES))
def test_device_train_seq_mp_epochs_follow_host_fit_seq(key, mpy, tmp_path):
    case = EPOCH_CASES[key]()
    spec = case[0]
    outs, lines = run_case(_mp(), spec, case[1], tmp_path, mpy, "native")
    assert len(lines) == len(spec["orders"]) + (spec["resume_at"] is not None)
    check_resumed(spec, lines)
    steps = -(-spec["n"] // spec["batch"])
    check_epochs(case, outs, f"{key} (mp)", spec["opt"]["lr"], len(spec["orders"]), steps)


# argv: modules dir, data dir (spec.json, theta.f32, x.f32), kernels, steps, rows. Trains
# `steps` minibatches of the spec's batch over the first windows; prints a dict literal.
HEAP_RUNNER = """
import sys, gc, json, os
from array import array
sys.path.insert(0, sys.argv[1])
D = sys.argv[2] + "/"

def read(name):  # into a preallocated array: no second copy of the file on the heap
    a = array("f", bytes(os.stat(D + name)[6]))
    f = open(D + name, "rb"); f.readinto(a); f.close()
    return a

X = read("x.f32")  # the data first, while the heap is in one piece
f = open(D + "spec.json"); spec = json.loads(f.read()); f.close()
import attention_train as at
at.use_kernels(sys.argv[3])
gc.collect()
code = gc.mem_alloc()
import attention_train_seq  # registers SeqNet for new_net: its code, apart from the buffers
gc.collect()
before = gc.mem_alloc()
code = before - code
net = at.new_net(spec["ops"], spec["channels"], spec["batch"], read("theta.f32"), False,
                 int(sys.argv[5]))
opt = at.optimizer(net, "adam", 0.01, 0.01)
gc.collect()
held = gc.mem_alloc() - before
t = at.Trainer(net, opt, X, bytes(spec["labels"]), 10, 0.01, True, 0.0, 0, spec["lengths"])
order = list(range(spec["batch"]))
live = []
for _ in range(int(sys.argv[4])):
    t.train_step(order, 0, spec["batch"])
    gc.collect()
    live.append(gc.mem_alloc())
print(repr({"held": held, "code": code, "live_peak": max(live),
            "live_spread": max(live) - min(live), "P": net.n_params, "rows": net.rows}))
"""


@pytest.mark.micropython
def test_device_train_seq_mp_basicmotions_trains_in_pieces_on_a_small_heap(mpy, tmp_path):
    """The tuned BasicMotions architecture (P5 E16 H2 L1 F32, batch 16) with rows=1: every
    buffer holds one window, so net + AdamW hold < 96 KiB (batch-sized buffers: ~376 KiB) and
    16 windows train at -X heapsize=256k (.mpy); no step keeps an allocation. The sequence
    module's code (imported first, apart from `held`) stays under 16 KiB."""
    x, lengths, y, K = windows("basicmotions", 16)
    ops = seq_attn_ops(x.shape[1], x.shape[2], K, arch(5, 16, 2, 1, 32))
    build_seq_from_ops(ops, 0, np.float32).theta.tofile(tmp_path / "theta.f32")
    x.tofile(tmp_path / "x.f32")
    (tmp_path / "spec.json").write_text(json.dumps({
        "ops": ops, "channels": x.shape[2], "batch": 16, "labels": [int(v) for v in y],
        "lengths": None}))  # fmt: skip
    proc = subprocess.run([find("micropython"), "-X", "heapsize=256k", "-c", HEAP_RUNNER,
                           str(mpy), str(tmp_path), "native", "3", "1"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (r,) = literals(proc.stdout.strip().splitlines()[-1:])
    assert r["rows"] == 1 and r["P"] == 3044
    assert r["live_spread"] == 0, f"live heap moved by {r['live_spread']} bytes between steps"
    assert r["held"] < 96 * 1024, r
    assert r["code"] < 16 * 1024, r


@pytest.mark.host
def test_device_train_seq_board_file_round_trip(at, tmp_path):
    """A seq model file -> TAFM (host) -> from_file on the device (a SeqNet, n_features = C),
    one step, written back -> model.npz (host): the ordinary model file, weights exact."""
    from array import array

    from tinyattn.board import boardmodel
    from tinyattn.learn.model import load_model, save_model

    x, lengths, y, K = windows("japanesevowels", 16, seed=8)
    ops = seq_attn_ops(x.shape[1], x.shape[2], K, arch(2, 8, 2, 1, 12))
    model = build_seq_from_ops(ops, 0)
    C = x.shape[2]
    npz = save_model(tmp_path / "m.npz", model, np.zeros(C), np.ones(C),
                     {"model": "seq-attn", "dataset": "japanesevowels",
                      "class_names": [str(i) for i in range(K)]})  # fmt: skip
    board = boardmodel.npz_to_board(npz, tmp_path / "m.tafm")
    net, meta, step, state = at.from_file(str(board), 16)
    assert type(net).__name__ == "SeqNet" and step == 0 and state == []
    opt = at.optimizer(net, "adam", 0.003, 0.1)
    X = array("f", garbage(x, lengths).tobytes())
    net.step(X, bytes(y.astype(np.uint8)), list(range(16)), 0, 16, list(lengths), 0.1)
    opt.step()
    at.to_file(str(tmp_path / "t.tafm"), net, meta, opt)
    out = boardmodel.board_to_npz(tmp_path / "t.tafm", tmp_path / "t.npz", base=npz)
    back = load_model(out)
    assert back.is_seq and back.model.ops == ops and back.meta["board"] == {"step": 1}
    assert np.array_equal(back.model.theta, np.array(net.theta, np.float64))
    assert not np.array_equal(back.model.theta, model.theta.astype(np.float32))


@pytest.mark.host
def test_device_train_seq_iris_net_does_not_load_the_sequence_module():
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import attention_train as at; "
              "at.new_net(%r, 4, 16); print('attention_train_seq' in sys.modules)")  # fmt: skip
    from tinyattn.learn.model import iris_attn_ops

    proc = subprocess.run([sys.executable, "-c", script % (iris_attn_ops(4, 3),),
                           str(DEVICE_DIR)], capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr


@pytest.mark.slow
@pytest.mark.host
def test_device_train_seq_averager_checkpoint_rules(at, tmp_path):
    """The weight average in the board file (TAFM flag AVERAGE): written while the run has one,
    refused by a reader that does not resume averaging, required by a resume that needs it;
    a finished run's file has none; bad settings are refused as the host's Average."""
    import attention_train_seq as ats
    import attention_trainfile as tf

    ops = seq_attn_ops(10, 3, 4, arch(5, 8, 2, 1, 16))
    meta = json.dumps({"ops": ops, "n_features": 3}).encode()
    net = at.new_net(ops, 3, 4)
    avg = ats.Averager(4, swa=0.5)  # epochs 3 and 4 (1-based) enter the average
    t = at.Trainer(net, at.optimizer(net), [0.0] * 8 * 30, bytes(8), 4, 0.01, lengths=None,
                   average=avg)  # fmt: skip
    assert avg.start == 2 and avg.pending() is None
    for e in range(4):
        t.epoch(list(range(8)))
        path = str(tmp_path / f"e{e + 1}.tafm")
        at.to_file(path, net, meta, t.opt, avg)
        has = []
        tf.load(path, None, has)
        assert len(has) == (e + 1 == 3), e  # only between the first averaged epoch and the end
    assert np.array_equal(np.array(net.theta), np.array(avg.value))  # theta = the average
    with pytest.raises(ValueError, match="weight average, load\\(average="):
        tf.load(str(tmp_path / "e3.tafm"))
    with pytest.raises(ValueError, match="weight average"):
        at.from_file(str(tmp_path / "e3.tafm"), 4)
    net3, _, step, state = at.from_file(str(tmp_path / "e3.tafm"), 4, average=ats.Averager(4,
                                                                                swa=0.5))
    assert step == 6
    with pytest.raises(ValueError, match="without its weight average"):  # e3 without its average
        tf.save(str(tmp_path / "bare.tafm"), meta, net3.theta, step, state)
        _, meta_b, step, state = at.from_file(str(tmp_path / "bare.tafm"), 4,
                                              average=ats.Averager(4, swa=0.5))
        at.Trainer(_, at.optimizer(_, state=tuple(state), t=step), [0.0] * 8 * 30, bytes(8), 4,
                   0.01, step=step, average=ats.Averager(4, swa=0.5))  # fmt: skip
    for kw, msg in (({"swa": 1.5}, "0..1"), ({"ema": 1.0}, "decay"), ({}, "choose one"),
                    ({"swa": 0.5, "ema": 0.9}, "choose one")):  # fmt: skip
        with pytest.raises(ValueError, match=msg):
            ats.Averager(4, **kw)
    with pytest.raises(ValueError, match="average over 4 epochs, the run has 5"):
        at.Trainer(net, at.optimizer(net), [0.0] * 8 * 30, bytes(8), 5, 0.01,
                   average=ats.Averager(4, ema=0.9))  # fmt: skip


# ------------------------------------------------------------------------- windows from a file

# argv: modules dir, data dir (spec.json, theta.f32, x.f32, w.tawf, bad files), kernels. Trains
# the spec's epochs twice from the same weights, windows from RAM and from the file; prints a
# dict literal, then one line per bad file: its error.
FILE_RUNNER = """
import sys, json
from array import array
sys.path.insert(0, sys.argv[1])
import attention_train as at
at.use_kernels(sys.argv[3])
import attention_train_seq as ats
D = sys.argv[2] + "/"
f = open(D + "spec.json"); spec = json.loads(f.read()); f.close()

def read(name):
    f = open(D + name, "rb"); a = array("f", f.read()); f.close()
    return a

def train(X, labels, lengths):
    net = at.new_net(spec["ops"], spec["channels"], spec["batch"], read("theta.f32"), False,
                     spec["rows"])
    opt = at.optimizer(net, "adam", 0.003, 0.1)
    t = at.Trainer(net, opt, X, labels, len(spec["orders"]), 0.003, True, 0.1, 0, lengths)
    losses = []
    for e in range(len(spec["orders"])):
        net.shifts = spec["shifts"][e]
        losses.append(t.epoch(spec["orders"][e]))
    net.shifts = None
    return net, losses, t.evaluate(X, labels, None, lengths)

ram = train(read("x.f32"), bytes(spec["labels"]), spec["lengths"])
wf = ats.WindowFile(D + "w.tawf")
labels = wf.labels()
disk = train(wf, labels, None)
extra = None  # bytes a piece's gather allocates from the file beyond the same from RAM
import gc
if hasattr(gc, "mem_alloc"):  # MicroPython: every float read is a heap object, the same
    net, X, order = disk[0], read("x.f32"), spec["orders"][0]  # number either way
    net.shifts = spec["shifts"][0]
    gc.collect()
    gc.disable()
    a = gc.mem_alloc()
    net.gather(X, labels, order, 0, net.rows, spec["lengths"])
    b = gc.mem_alloc()
    net.gather(wf, labels, order, 0, net.rows)
    extra = gc.mem_alloc() - 2 * b + a
    gc.enable()
wf.close()
print(repr({"same_theta": list(ram[0].theta) == list(disk[0].theta),
            "same_losses": ram[1] == disk[1], "same_eval": ram[2] == disk[2],
            "labels": list(labels) == spec["labels"], "extra_alloc": extra}))
for name in spec["bad"]:
    try:
        wf = ats.WindowFile(D + name)
        for i in range(wf.N):
            wf.read(i)
        print(repr([name, None]))
    except ValueError as e:
        print(repr([name, str(e)]))
"""


def bad_window_files(good: bytes) -> dict[str, tuple[bytes, str]]:
    """Broken copies of a TAWF file: name -> (bytes, fragment of the one-line error)."""
    import struct
    import zlib

    def put(fmt, off, *v, crc=True):
        b = bytearray(good)
        struct.pack_into(fmt, b, off, *v)
        if crc:
            struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])))
        return bytes(b)

    return {
        "magic": (put("4s", 0, b"TAFM"), "not a windows file"),
        "version": (put("<H", 4, 2), "unsupported format version 2"),
        "header": (put("<I", 12, 0), "corrupt"),
        "short": (good[:11], "shorter than the header"),
        "truncated": (good[:-100], "truncated"),
        "extra": (good + bytes(4), "extra bytes"),
        "crc": (put("B", len(good) - 40, good[-40] ^ 0x10, crc=False), "CRC mismatch"),
        "length": (put("<H", 20 + 2 * 3, 999), "window 3 has length 999, outside 1..26"),
    }


def window_file_case(tmp: Path) -> dict:
    """JapaneseVowels windows (unequal lengths, garbage padding) as RAM arrays and a TAWF file,
    with the broken copies; 2 epochs with shifts, rows 4 of a batch of 16."""
    from tinyattn.tools.bench_train_device import write_window_file

    x, lengths, y, K = windows("japanesevowels", 40, seed=3)
    x = garbage(x, lengths)
    ops = seq_attn_ops(x.shape[1], x.shape[2], K, arch(2, 8, 2, 1, 12))
    train = TrainConfig(epochs=2, batch_size=16)
    orders, shifts = orders_and_shifts(train, len(x), 3)
    tmp.mkdir(parents=True, exist_ok=True)
    build_seq_from_ops(ops, 0, np.float32).theta.tofile(tmp / "theta.f32")
    x.tofile(tmp / "x.f32")
    good = write_window_file(tmp / "w.tawf", x, lengths, y).read_bytes()
    bad = bad_window_files(good)
    for name, (data, _) in bad.items():
        (tmp / name).write_bytes(data)
    (tmp / "spec.json").write_text(json.dumps({
        "ops": ops, "channels": x.shape[2], "batch": 16, "rows": 4, "orders": orders,
        "shifts": shifts, "labels": [int(v) for v in y], "lengths": [int(v) for v in lengths],
        "bad": sorted(bad)}))  # fmt: skip
    return bad


def check_window_file_run(interp: list[str], modules: Path, kernels: str, tmp: Path) -> dict:
    bad = window_file_case(tmp)
    proc = subprocess.run([*interp, "-c", FILE_RUNNER, str(modules), str(tmp), kernels],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    (r,) = literals(lines[:1])
    assert r["same_theta"] and r["same_losses"] and r["same_eval"] and r["labels"], r
    for name, msg in literals(lines[1:]):
        assert msg is not None and bad[name][1] in msg, (name, msg)
        assert "\n" not in msg and msg.startswith(str(tmp / name)), msg
    assert sorted(name for name, _ in literals(lines[1:])) == sorted(bad)
    return r


@pytest.mark.host
def test_device_train_seq_windows_from_a_file_train_as_from_ram(tmp_path):
    """Two JapaneseVowels epochs (shifts, rows 4) from a TAWF file end with exactly the weights,
    losses and evaluation of the same run from RAM; broken files give a one-line error."""
    check_window_file_run(CPYTHON, DEVICE_DIR, "pure", tmp_path)


@pytest.mark.micropython
def test_device_train_seq_mp_windows_from_a_file_train_as_from_ram(mpy, tmp_path):
    """As under CPython, .mpy and native kernels; gathering a piece from the file allocates
    no more than from RAM (gc disabled: the float objects only, no buffer per window)."""
    r = check_window_file_run(_mp(), mpy, "native", tmp_path)
    assert r["extra_alloc"] == 0, r
