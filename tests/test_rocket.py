# Host (CPython): the seq-rocket family on the host — transform, ridge, pruning, the model file.
"""The transform against a loop written from its definition (host/learn/rocket.py's docstring),
window by window, on random integer windows (unequal lengths, several channels, pooling, block
exponents); padding and what lies past a window never change a feature; the fit is a function
of TRAIN and its seed; the ridge's closed-form leave-one-out equals refitting N times; pruning
keeps what it is asked to, within the op budget; a fitted model survives its file."""

from __future__ import annotations

import numpy as np
import pytest

from tinyattn.learn import ridge, rocket, rocketcli
from tinyattn.learn.model import ModelFile, load_model, save_model
from tinyattn.learn.rocketmodel import (
    GRID_MAX,
    RocketConfig,
    fit_grid,
    fit_rocket,
    ops,
    prune,
    to_grid,
)

pytestmark = pytest.mark.host


def _windows(seed: int, N=7, T=40, C=3, top=2**29 - 1):
    rng = np.random.default_rng(seed)
    scale = 2.0 ** rng.integers(0, 29, N)  # levels spread over many decades: several exponents
    x = np.clip(np.round(rng.normal(size=(N, T, C)) * scale[:, None, None]), -top, top)
    n = rng.integers(9, T + 1, N)
    n[0] = T
    return x.astype(np.int64), n.astype(np.int64)


def _naive(params: rocket.RocketParams, xq, n, P, cap=0):
    """The transform of one window at a time, as its docstring defines it (`cap`: at most
    that many positions, those that are multiples of ceil(n'/cap))."""
    N = len(xq)
    counts = np.zeros((N, params.size), np.int64)
    n_pos = np.zeros((N, params.size), np.int64)
    for w in range(N):
        v = [list(map(int, row)) for row in xq[w, : n[w]]]  # (n, C) valid steps only
        top = max(abs(a) for row in v for a in row)
        e = 0
        while top >= 2 ** (15 + e):
            e += 1
        v = [[(a + (1 << e) // 2) >> e for a in row] for row in v]
        S_n = -(-len(v) // P)
        pooled = [[sum(v[t * P + k][c] for k in range(P) if t * P + k < len(v))
                   for c in range(len(v[0]))] for t in range(S_n)]  # fmt: skip

        def at(t, c, pooled=pooled, S_n=S_n):
            return pooled[t][c] if 0 <= t < S_n else 0

        f = 0
        ch = 0
        for g in range(params.n_groups):
            d, pad = int(params.dilation[g]), int(params.pad[g])
            combo = params.channels[ch : ch + params.n_channels[g]]
            ch += params.n_channels[g]
            lo = 0 if pad else 4 * d
            step = max(-(-S_n // cap), 1) if cap else 1
            for _ in range(params.n_features[g]):
                b, s = int(params.bias[f]), int(params.bias_exp[g]) - e
                for t in range(lo, S_n - lo):
                    if t % step:
                        continue
                    n_pos[w, f] += 1
                    conv = 0
                    for c in combo:
                        for j in range(9):
                            wgt = 2 if j in params.taps[g] else -1
                            conv += wgt * at(t + (j - 4) * d, int(c))
                    counts[w, f] += conv * 2**e > b * 2 ** (int(params.bias_exp[g]))
                f += 1
            assert s == int(params.bias_exp[g]) - e
    return counts, n_pos


@pytest.mark.parametrize(("seed", "C", "P", "cap"),
                         [(0, 1, 1, 0), (1, 3, 1, 0), (2, 3, 2, 0), (3, 2, 3, 0), (4, 1, 1, 5),
                          (5, 2, 2, 3)])  # fmt: skip
def test_transform_equals_the_definition(seed: int, C: int, P: int, cap: int):
    xq, n = _windows(seed, C=C)
    prepared = rocket.prepare(xq, n, P)
    params = rocket.fit(*prepared, P, num_features=84 * 3, max_dilations=3, seed=seed)
    params = params.subset(np.arange(0, params.size, 7))  # a pruned model: groups of 1..3
    assert params.pad.min() == 0 and params.pad.max() == 1
    assert len(set(params.bias_exp.tolist())) > 1  # biases of several exponents
    got = rocket.transform(params, *prepared, P, None, cap)
    want = _naive(params, xq, n, P, cap)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_padding_and_what_lies_past_a_window_change_no_feature():
    xq, n = _windows(5, C=2)
    params = rocket.fit(*rocket.prepare(xq, n, 2), 2, num_features=200, seed=1)
    rng = np.random.default_rng(9)
    noisy = xq.copy()
    past = np.arange(xq.shape[1])[None, :] >= n[:, None]
    noisy[past] = rng.integers(-(2**29), 2**29, (int(past.sum()), 2))
    longer = np.concatenate([noisy, rng.integers(-99, 99, (len(xq), 13, 2))], axis=1)
    base = rocket.transform(params, *rocket.prepare(xq, n, 2), 2)
    for x in (noisy, longer):
        got = rocket.transform(params, *rocket.prepare(x, n, 2), 2)
        assert all(np.array_equal(a, b) for a, b in zip(got, base, strict=True))


def test_block_keeps_16_bits_and_one_exponent_a_window():
    xq = np.array([[[2**29 - 1], [-(2**29)], [5]], [[32767], [-32768], [0]], [[0], [0], [0]]])
    x, e = rocket.block(xq, np.array([3, 3, 3]))
    assert e.tolist() == [15, 1, 0]
    assert np.abs(x).max() <= 2**15
    assert x[1, :, 0].tolist() == [16384, -16384, 0]  # (v + 1) >> 1: half up


def test_thresholds_floor_and_saturate():
    b = np.array([5, -5, 7, -7, 0, 123456])
    for s in range(-20, 40):
        got = rocket.thresholds(b, s)
        exact = [(v << s) if s >= 0 else v >> -s for v in b.tolist()]
        want = [max(min(v, rocket.SATURATE), -rocket.SATURATE) for v in exact]
        assert got.tolist() == want, s


def test_fit_is_a_function_of_train_and_its_seed():
    xq, n = _windows(3, C=4)
    prepared = rocket.prepare(xq, n, 1)
    a, b, c = (rocket.fit(*prepared, 1, 500, seed=s) for s in (0, 0, 1))
    for field in ("dilation", "pad", "taps", "channels", "bias", "bias_exp"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    assert not np.array_equal(a.channels, c.channels)
    assert a.n_channels.max() <= 4 and a.size == 84 * (500 // 84)


def test_fit_dilations_spread_over_the_window():
    d, per = rocket.fit_dilations(100, 10_000)
    assert d[0] == 1 and 8 * d[-1] <= 99 and per.sum() == 10_000 // 84
    d, per = rocket.fit_dilations(5, 84)  # shorter than the kernel: dilation 1 only
    assert d.tolist() == [1] and per.tolist() == [1]


def test_ridge_leave_one_out_is_refitting_without_each_window():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(12, 30))
    y = np.arange(12) % 3
    r = ridge.fit(Z, y, 3, alphas=(0.1, 3.0))
    Y = ridge.targets(y, 3)
    for a, mse in zip((0.1, 3.0), r.loo_mse, strict=True):
        err = []
        for i in range(12):
            m = np.arange(12) != i
            zm, ym = Z[m].mean(0), Y[m].mean(0)
            Zc = Z[m] - zm
            W = np.linalg.solve(Zc.T @ Zc + a * np.eye(30), Zc.T @ (Y[m] - ym))
            err.append((Z[i] - zm) @ W + ym - Y[i])
        assert np.mean(np.square(err)) == pytest.approx(mse, rel=1e-9)
    assert r.alpha == (0.1, 3.0)[int(np.argmin(r.loo_mse))]


def test_prune_keeps_k_then_what_fits():
    rng = np.random.default_rng(1)
    y = np.arange(40) % 2
    Z = rng.normal(size=(40, 64))
    Z[:, 5] += 3 * y  # the informative features
    Z[:, 17] -= 3 * y
    rounds = []
    idx, head = prune(Z, y, 2, keep=8, drop=0.5, on_round=lambda i, h: rounds.append(len(i)))
    assert rounds == [64, 32, 16, 8]  # half a round, refit each time, down to keep
    assert len(idx) == 8 and {5, 17} <= set(idx.tolist()) and head.W.shape == (2, 8)
    rounds.clear()
    seen = []  # the sets the second bound is asked about
    bounds = (lambda i: len(i) <= 6, lambda i: seen.append(len(i)) or len(i) <= 3)
    small, _ = prune(Z, y, 2, keep=8, bounds=bounds, drop=0.5,
                     on_round=lambda i, h: rounds.append((len(i), i, h)))  # fmt: skip
    # past keep, rounds go on while a round keeps more than the longest prefix that fits (8 ->
    # 4); then that prefix of the last ranking (the best 3 of 4), refit
    assert [n for n, _, _ in rounds] == [64, 32, 16, 8, 4, 3]
    _, four, h4 = rounds[-2]
    best = four[np.argsort(-h4.importance(), kind="stable")][:3]
    assert sorted(small.tolist()) == sorted(best.tolist()) and {5, 17} <= set(small.tolist())
    # the second bound (the board's, an expensive estimate) is asked only about sets within the
    # first, and its prefixes only within the first's longest prefix
    assert seen and max(seen) <= 6
    # a share that rounds to nothing still drops one a round, and ends
    assert len(prune(Z[:, :6], y, 2, keep=2, drop=0.01)[0]) == 2


def test_grid_is_powers_of_two_and_holds_train():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(5, 30, 2)) * np.array([1e-3, 400.0])
    n = np.array([30, 20, 9, 30, 12])
    std, s_in = fit_grid(X, n)
    assert np.all(np.log2(std) == np.round(np.log2(std))) and np.log2(s_in) % 1 == 0
    xq = to_grid(X / std, n, s_in)
    assert np.abs(xq).max() <= GRID_MAX and np.abs(xq).max() > GRID_MAX // 2
    assert (xq[np.arange(30)[None, :] >= n[:, None]] == 0).all()
    # a single-precision board's arithmetic (device Model.quantize: u = x / std / s_in,
    # q = floor(u), q + 1 if u - q >= 0.5) gives the same grid: every scale a power of two
    x32 = X.astype(np.float32)
    u = x32 / std.astype(np.float32) / np.float32(s_in)
    assert u.dtype == np.float32
    q = np.floor(u)
    q = q + ((u - q) >= np.float32(0.5))
    valid = np.arange(30)[None, :, None] < n[:, None, None]
    assert np.array_equal(np.where(valid, q, 0), to_grid(x32.astype(np.float64) / std, n, s_in))


def test_a_fitted_model_survives_its_file(tmp_path):
    rng = np.random.default_rng(3)
    y = np.arange(24) % 3
    X = rng.normal(size=(24, 50, 2)) + y[:, None, None] * np.linspace(0, 1, 50)[None, :, None]
    n = rng.integers(20, 51, 24)
    cfg = RocketConfig(num_features=420, keep=30, max_ops=60_000)
    fit = fit_rocket(X, n, y, 3, cfg)
    h = fit.history
    assert h["features"] <= 30 and h["ops"] <= 60_000 and h["fitted_features"] == 420
    assert ops(fit.model.rocket.rocket_params(), fit.max_steps, 2, 1, 3)["ops"] == h["ops"]
    mf = ModelFile(fit.model, fit.norm_mean, fit.norm_std, {"class_names": list("abc")})
    path = save_model(tmp_path / "r.npz", fit.model, fit.norm_mean, fit.norm_std,
                      {"class_names": list("abc")})  # fmt: skip
    back = load_model(path)
    assert back.is_windows and not back.is_seq and not back.takes_rows
    assert np.array_equal(back.predict(X, n), mf.predict(X, n))
    assert np.mean(mf.predict(X, n) == y) > 0.9
    again = fit_rocket(X, n, y, 3, cfg)  # deterministic given TRAIN
    assert np.array_equal(again.model.theta, fit.model.theta)


def test_an_operations_bound_below_one_feature_is_refused_in_words():
    """Before, the pruning rounds went on for ever at one feature over `max_ops`."""
    rng = np.random.default_rng(5)
    y = np.arange(12) % 2
    X = rng.normal(size=(12, 30, 1)) + y[:, None, None]
    n = np.full(12, 30)
    ok = fit_rocket(X, n, y, 2, RocketConfig(num_features=84, max_ops=1_000))
    assert ok.history["ops"] <= 1_000 and ok.history["features"] >= 1
    with pytest.raises(ValueError, match=r"one feature needs [\d,]+ operations an inference, "
                       r"more than the 10 allowed: raise the limit \(train --rocket-max-ops"):
        fit_rocket(X, n, y, 2, RocketConfig(num_features=84, max_ops=10))


def test_heap_and_time_bounds_prune_to_the_boards_estimates_and_refuse_in_words_below_the_least():
    """`max_heap` and `max_us` prune, best first, until the estimates every command uses (the
    blob `tinyattn export` writes: its heap as the device runtime loads it, its µs from its op
    list at a board's rates) fit; a bound below what one feature needs (`least`, the search's
    pre-check) is refused in one sentence that says what to change."""
    from tinyattn.board.cost import predict_us
    from tinyattn.board.heap import features, model_heap
    from tinyattn.intmodel.blob import blob_bytes, read_blob
    from tinyattn.intmodel.quantize import quantize
    from tinyattn.learn.rocketboard import estimator, least
    from tinyattn.learn.train import npz_model

    rng = np.random.default_rng(4)
    y = np.arange(24) % 3
    X = rng.normal(size=(24, 50, 2)) + y[:, None, None] * np.linspace(0, 1, 50)[None, :, None]
    n = rng.integers(20, 51, 24)
    names = ["a", "b", "c"]
    rates = (("inference", 40.0), ("op", 1.0), ("rocket_values", 0.9), ("rocket_sums", 0.06),
             ("rocket_positions", 0.13), ("rocket_convs", 0.06), ("rocket_regcounts", 0.03),
             ("rocket_counts", 0.04), ("rocket_groups", 14.0), ("rocket_features", 0.5),
             ("dense", 0.035), ("outputs", 0.6))  # fmt: skip
    board = estimator(X, n, names, rates)
    free = fit_rocket(X, n, y, 3, RocketConfig(num_features=420, keep=200))
    full = board(free.model, free.norm_std)
    low = least(50, 2, 1, 0, 3, rates)
    assert low["heap"] < full["heap"] and low["us"] < full["us"]

    def exported(fit):  # as tinyattn export writes it
        return blob_bytes(quantize(npz_model(rocketcli.as_result(fit), names), X, n))

    for bound in ({"max_heap": (low["heap"] + full["heap"]) // 2},
                  {"max_us": (low["us"] + full["us"]) / 2, "rates": rates}):  # fmt: skip
        cfg = RocketConfig(num_features=420, keep=200, **bound)
        fit = fit_rocket(X, n, y, 3, cfg, board=board)
        assert 1 <= fit.history["features"] < free.history["features"]
        blob = exported(fit)
        if "max_heap" in bound:
            assert model_heap(features(blob)) <= bound["max_heap"]
        else:
            assert predict_us(read_blob(blob), dict(rates)) <= bound["max_us"]
    with pytest.raises(ValueError, match=r"one feature needs about [\d,]+ B .* --rocket-max-heap"):
        fit_rocket(X, n, y, 3, RocketConfig(num_features=420, max_heap=low["heap"] - 1),
                   board=board)  # fmt: skip
    with pytest.raises(ValueError, match=r"one feature needs about [\d.]+ ms an inference"):
        fit_rocket(X, n, y, 3, RocketConfig(num_features=420, max_us=low["us"] / 2, rates=rates),
                   board=board)  # fmt: skip
    with pytest.raises(ValueError, match="need the board's estimates"):
        fit_rocket(X, n, y, 3, RocketConfig(num_features=420, max_heap=low["heap"]))
    with pytest.raises(ValueError, match="needs the board's time model"):
        RocketConfig(max_us=1000.0)
