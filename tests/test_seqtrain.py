# Host (CPython): `seq-attn` training options — weight averaging (seqtrain.Average).
"""`Average(swa=f)` leaves the model with the mean of its last `f·epochs` epoch-end weights,
`Average(ema=d)` with their exponential moving average (decay `d` per epoch); `Average()` is
off and changes nothing (bitwise). The in-loop average equals the one recomputed from the
epoch-end weights (what tools/tune_seq.py scores) to float64 rounding, the averaged model
exports through the existing int8 ops, and the PyTorch twin of the loop (tools/bench_train.py)
averages the same way (same final weights, as `make bench-train` checks). Small random windows,
a few epochs: each test runs in well under a second.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tinyattn.learn.seqmodel import SeqAttnConfig
from tinyattn.learn.seqtrain import Average, WeightAverager, evaluate_seq, train_seq
from tinyattn.learn.train import TrainConfig

pytestmark = pytest.mark.host

ARCH = SeqAttnConfig(patch=2, embed_dim=8, num_heads=2, blocks=1, ff_dim=16)
CONFIG = TrainConfig(epochs=8, lr=0.01, weight_decay=0.1, label_smoothing=0.1, batch_size=8,
                     model="seq-attn")  # fmt: skip


def _windows(seed: int = 0):
    """24 windows of 3 channels, 5..12 steps, 3 classes (class = sign pattern of the mean)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 13, size=24)
    y = np.arange(24) % 3
    X = rng.normal(size=(24, 12, 3)) + y[:, None, None] * np.array([1.0, -1.0, 0.5])
    X[np.arange(12)[None, :] >= lengths[:, None]] = 0.0
    return X, lengths, y


def _train(average=None, on_epoch=None, config=CONFIG):
    X, n, y = _windows()
    return train_seq(X, n, y, 3, ARCH, config, average=average, on_epoch=on_epoch)


def _snapshots(config=CONFIG) -> list[np.ndarray]:
    snaps: list[np.ndarray] = []
    _train(on_epoch=lambda epoch, loss, res: snaps.append(res.model.theta.copy()), config=config)
    return snaps


def test_seqtrain_average_off_changes_nothing():
    assert np.array_equal(_train(Average()).model.theta, _train(None).model.theta)


@pytest.mark.parametrize(("swa", "first"), [(0.25, 6), (0.5, 4), (1.0, 0), (0.01, 7)])
def test_seqtrain_swa_is_the_mean_of_the_last_epochs(swa, first):
    snaps = _snapshots()
    assert Average(swa=swa).first_epoch(CONFIG.epochs) == first
    got = _train(Average(swa=swa)).model.theta
    np.testing.assert_allclose(got, np.mean(snaps[first:], axis=0), rtol=0, atol=1e-12)
    assert not np.allclose(got, snaps[-1]) or first == 7  # one epoch: the last weights


def test_seqtrain_ema_is_the_moving_average_of_epoch_end_weights():
    snaps, d = _snapshots(), 0.9
    ema = snaps[0].copy()
    for theta in snaps[1:]:
        ema = d * ema + (1.0 - d) * theta
    np.testing.assert_allclose(_train(Average(ema=d)).model.theta, ema, rtol=0, atol=1e-12)


def test_seqtrain_weight_averager_replays_the_in_loop_average():
    """tools/tune_seq.py scores every averaging of one run from its epoch-end weights."""
    snaps = _snapshots()
    for average in (Average(swa=0.5), Average(ema=0.97)):
        avg = WeightAverager(average, CONFIG.epochs)
        for epoch, theta in enumerate(snaps):
            avg.update(epoch, theta)
        assert np.array_equal(avg.value, _train(average).model.theta)


def test_seqtrain_averaged_model_exports_to_int8():
    X, n, y = _windows()
    res = _train(Average(swa=0.5), config=replace(CONFIG, epochs=30))
    ev = evaluate_seq(res, X, n, X, n, y)  # quantize + the integer reference, as export
    assert ev["int8_float_agreement"] >= 0.9 and ev["float_accuracy"] >= 0.9, ev


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"swa": 1.5}, "a fraction of the epochs"), ({"ema": 1.0}, "a decay per epoch"),
     ({"swa": 0.5, "ema": 0.9}, "choose one")],
)  # fmt: skip
def test_seqtrain_average_refuses_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Average(**kwargs)


@pytest.mark.oracle
@pytest.mark.parametrize("average", [Average(swa=0.5), Average(ema=0.9)])
def test_seqtrain_torch_twin_averages_the_same_way(average):
    """tools/bench_train.py's PyTorch loop ends with the same averaged weights as `fit_seq`."""
    torch = pytest.importorskip("torch", reason="PyTorch not installed; run 'make install-oracle'")
    from tinyattn.learn.seqmodel import build_seq_model
    from tinyattn.learn.seqtrain import fit_seq
    from tools.bench_train import _fit_torch
    from tools.torch_twins import SeqAttnTorch

    X, n, y = _windows()
    config = replace(CONFIG, epochs=4)
    ours = build_seq_model(12, 3, 3, ARCH, seed=0)
    twin = SeqAttnTorch(build_seq_model(12, 3, 3, ARCH, seed=0))
    fit_seq(ours, X, n, y, config, average=average)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        _fit_torch(twin, X, y, config, n, None, average)
    finally:
        torch.set_num_threads(threads)
    theirs = twin.named_tensors()
    diff = max(float(np.abs(v - theirs[k]).max()) for k, (v, _) in ours.named_parameters().items())
    assert diff <= 1e-9
