# Host (CPython): `seq-attn` training options — weight averaging (seqtrain.Average) and
# knowledge distillation (seqtrain.Distill).
"""`Average(swa=f)` leaves the model with the mean of its last `f·epochs` epoch-end weights,
`Average(ema=d)` with their exponential moving average (decay `d` per epoch); `Average()` is
off and changes nothing (bitwise). The in-loop average equals the one recomputed from the
epoch-end weights (what the tuning rounds scored) to float64 rounding, the averaged model
exports through the existing int8 ops, and the PyTorch twin of the loop (tools/bench_train.py)
averages the same way (same final weights, as `make bench-train` checks).

`Distill`: its loss' gradient is exact (central differences), its soft term is the soft-target
cross-entropy minus the teachers' entropy, training without it is bitwise what it was before
distillation existed (weights pinned from commit 9240ebe's seqtrain), the teachers see the
student's augmented minibatch, `train_seq` trains the teachers `train_teachers` gives, and a
distilled model exports to int8. Small random windows, a few epochs: each test runs in well
under a second.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tinyattn.learn.seqmodel import SeqAttnConfig
from tinyattn.learn.seqtrain import (
    Augment,
    Average,
    Distill,
    WeightAverager,
    augment_batch,
    distill_loss,
    evaluate_seq,
    fit_seq,
    teacher_probs,
    teacher_seed,
    train_seq,
    train_teachers,
)
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
    """The tuning rounds scored every averaging of one run from its epoch-end weights."""
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
    from tinyattn.tools.bench_train import _fit_torch
    from tinyattn.tools.torch_twins import SeqAttnTorch

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


# ------------------------------------------------------------------------- distillation


@pytest.mark.parametrize(
    ("augment", "average"), [(None, None), (Augment(shift=2, noise=0.05), Average(ema=0.9))]
)
def test_seqtrain_without_distill_is_bitwise_the_same_run(augment, average):
    """An inactive `Distill` (alpha 0 or no teachers) is the run without one, bit for bit, and
    a run repeats itself bit for bit in one process. (Weights are not pinned across machines:
    they depend on the machine's NumPy/BLAS; this once compared SHA digests from one machine
    and failed on another CPU.)"""
    X, n, y = _windows()
    runs = [train_seq(X, n, y, 3, ARCH, CONFIG, augment, average=average, distill=d)
            for d in (None, None, Distill(), Distill(teachers=3, alpha=0.0))]  # fmt: skip
    assert np.isfinite(runs[0].model.theta).all()
    for r in runs[1:]:
        assert np.array_equal(r.model.theta, runs[0].model.theta)


@pytest.mark.parametrize("d", [Distill(4, 2.0, 0.5), Distill(4, 4.0, 0.9), Distill(1, 1.0, 1.0)])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_seqtrain_distill_loss_gradcheck(d, eps):
    rng = np.random.default_rng(1)
    z = 2.0 * rng.normal(size=(5, 4))  # (B, C) student logits
    y = rng.integers(0, 4, size=5)
    q = rng.dirichlet(np.ones(4), size=5)  # (B, C) teachers' soft targets
    q[0] = [1.0, 0.0, 0.0, 0.0]  # a one-hot row: 0·log 0 = 0
    _, grad = distill_loss(z, y, q, eps, d)
    h, num = 1e-6, np.zeros_like(z)
    for i in range(z.shape[0]):
        for j in range(z.shape[1]):
            zp, zm = z.copy(), z.copy()
            zp[i, j] += h
            zm[i, j] -= h
            num[i, j] = (distill_loss(zp, y, q, eps, d)[0] - distill_loss(zm, y, q, eps, d)[0])
            num[i, j] /= 2 * h
    assert np.max(np.abs(num - grad)) < 1e-8


def test_seqtrain_distill_loss_is_soft_target_cross_entropy():
    """`T²·KL(q ‖ p_T)` = `T²·(CE(q, p_T) - H(q))`; alpha 0 is the smoothed label loss."""
    from tinyattn.learn.losses import softmax
    from tinyattn.learn.train import smoothed_cross_entropy

    rng = np.random.default_rng(2)
    z, y = rng.normal(size=(6, 3)), rng.integers(0, 3, size=6)
    q = rng.dirichlet(np.ones(3), size=6)
    T, eps = 3.0, 0.1
    ce, g = smoothed_cross_entropy(z, y, eps)
    loss0, g0 = distill_loss(z, y, q, eps, Distill(2, T, 0.0))
    assert loss0 == pytest.approx(ce, abs=1e-12) and np.allclose(g0, g, rtol=0, atol=1e-15)
    loss1, _ = distill_loss(z, y, q, eps, Distill(2, T, 1.0))
    soft_ce = -np.mean(np.sum(q * np.log(softmax(z / T)), axis=1))
    entropy = -np.mean(np.sum(q * np.log(q), axis=1))
    assert loss1 == pytest.approx(T * T * (soft_ce - entropy), abs=1e-12)


def test_seqtrain_distill_teachers_see_the_augmented_minibatch():
    """With augmentation the teachers' soft targets come from the very windows the student is
    trained on at that step (the shuffle's generator replayed)."""
    from tinyattn.learn.seqmodel import build_seq_model

    X, n, y = _windows()
    aug = Augment(shift=3, scale=0.1)
    config = replace(CONFIG, epochs=1)
    teacher = build_seq_model(12, 3, 3, ARCH, seed=5)
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    forward = teacher.forward

    def spy(x, training=False, lengths=None):
        seen.append((x.copy(), np.array(lengths)))
        return forward(x, training, lengths)

    teacher.forward = spy
    student = build_seq_model(12, 3, 3, ARCH, seed=0)
    fit_seq(student, X, n, y, config, aug, distill=Distill(1, 2.0, 0.5), teachers=[teacher])
    rng = np.random.default_rng([config.seed, 1])
    order = rng.permutation(len(X))
    expect = [augment_batch(X[order[s : s + 8]], n[order[s : s + 8]], aug, rng)
              for s in range(0, len(X), 8)]  # fmt: skip
    assert len(seen) == len(expect) == 3
    for (xs, ns), (xe, ne) in zip(seen, expect, strict=True):
        assert np.array_equal(xs, xe) and np.array_equal(ns, ne)


def test_seqtrain_distill_targets_once_equal_the_minibatch_ones():
    """Without augmentation the soft targets are computed once for all windows: the same
    numbers as on each minibatch (to rounding)."""
    X, n, y = _windows()
    teachers = train_teachers(X, n, y, 3, ARCH, replace(CONFIG, epochs=2), count=2)
    xn, nn = teachers[0].normalize(X, n)
    models = [t.model for t in teachers]
    q_all = teacher_probs(models, xn, nn, 2.0)  # (N, C)
    idx = np.array([3, 17, 5, 0, 22])
    q_b = teacher_probs(models, xn[idx], nn[idx], 2.0)
    np.testing.assert_allclose(q_all[idx], q_b, rtol=0, atol=1e-13)
    np.testing.assert_allclose(q_all.sum(axis=1), 1.0, rtol=0, atol=1e-12)


def test_seqtrain_distill_trains_its_teachers_as_train_teachers():
    """`train_seq(distill=...)` trains `teachers` models with seeds `teacher_seed(seed, i)`;
    handing it those teachers ready-made (the tuning rounds shared them) gives the same
    student, and the student differs from the undistilled run."""
    X, n, y = _windows()
    config = replace(CONFIG, epochs=4, seed=3)
    d = Distill(2, 2.0, 0.7)
    teachers = train_teachers(X, n, y, 3, ARCH, config, count=2)
    solo = [train_seq(X, n, y, 3, ARCH, replace(config, seed=teacher_seed(3, i)))
            for i in range(2)]  # fmt: skip
    for t, s in zip(teachers, solo, strict=True):
        assert np.array_equal(t.model.theta, s.model.theta)
    own = train_seq(X, n, y, 3, ARCH, config, distill=d)
    given = train_seq(X, n, y, 3, ARCH, config, distill=d, teachers=teachers)
    plain = train_seq(X, n, y, 3, ARCH, config)
    assert np.array_equal(own.model.theta, given.model.theta)
    assert not np.allclose(own.model.theta, plain.model.theta)
    with pytest.raises(ValueError, match="2 teachers given, distill wants 3"):
        train_seq(X, n, y, 3, ARCH, config, distill=Distill(3, 2.0, 0.5), teachers=teachers)


def test_seqtrain_distilled_model_exports_to_int8():
    X, n, y = _windows()
    res = train_seq(X, n, y, 3, ARCH, replace(CONFIG, epochs=30), distill=Distill(2, 2.0, 0.5))
    ev = evaluate_seq(res, X, n, X, n, y)  # quantize + the integer reference, as export
    assert ev["int8_float_agreement"] >= 0.9 and ev["float_accuracy"] >= 0.9, ev


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"teachers": -1}, "a count"), ({"temperature": 0.0}, "must be > 0"),
     ({"alpha": 1.5}, "a weight, 0..1")],
)  # fmt: skip
def test_seqtrain_distill_refuses_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Distill(**kwargs)
