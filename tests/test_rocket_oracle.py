"""Host (CPython): the rocket transform against sktime's MiniRocket (the peers extra), as the
PyTorch oracles do for attention.

For the same kernels, dilations, channel combinations and biases, the host's features equal
sktime's `MiniRocketMultivariate` features: windows of small integers (block exponent 0, one
step a pooled step, every position counted), sktime's fitted parameters loaded into
`RocketParams` (a bias `b` as `floor(b)`: an integer convolution is > b exactly when it is
> floor(b)), and the PPVs compared. Also the fit's pieces that need no randomness: the
dilations and features per dilation (`fit_dilations`) and the quantile levels.
Skipped with a reason without sktime (`make install-peers`).
"""

from __future__ import annotations

import numpy as np
import pytest

from tinyattn.learn.rocket import (
    KERNELS,
    RocketParams,
    fit_dilations,
    ppv,
    quantile_levels,
    transform,
)

pytestmark = [pytest.mark.host, pytest.mark.oracle]

sk_rocket = pytest.importorskip(
    "sktime.transformations.rocket._minirocket_multi_numba",
    reason="sktime is the peers extra: make install-peers",
)
sk_multi = pytest.importorskip("sktime.transformations.rocket")


def _params_from_sktime(parameters) -> RocketParams:
    """sktime's `(channels per combination, channel indices, dilations, features per dilation,
    biases)` as the host's groups: one group per (dilation, kernel) in sktime's order, the
    padding flag as sktime alternates it (pad 1: every position, sktime's `_padding1 == 0`)."""
    n_ch, ch, dilations, per_dilation, biases = (np.asarray(p) for p in parameters)
    G = len(dilations) * len(KERNELS)
    di = np.repeat(np.arange(len(dilations)), len(KERNELS))
    k = np.tile(np.arange(len(KERNELS)), len(dilations))
    return RocketParams(
        dilation=dilations[di].astype(np.int64),
        pad=((di + k) % 2 == 0).astype(np.int64),
        taps=KERNELS[k],
        n_channels=n_ch[:G].astype(np.int64),
        channels=ch[: int(n_ch[:G].sum())].astype(np.int64),
        n_features=per_dilation[di].astype(np.int64),
        bias_exp=np.zeros(G, np.int64),
        bias=np.floor(biases.astype(np.float64)).astype(np.int64),
    )


@pytest.mark.parametrize(("C", "T", "seed"), [(1, 40, 0), (3, 57, 1), (12, 26, 2)])
def test_rocket_oracle_features_equal_sktime_minirocket(C, T, seed):
    rng = np.random.default_rng(seed)
    X = rng.integers(-300, 300, size=(12, C, T)).astype(np.float32)  # (n, channels, steps)
    X += np.rint(np.linspace(0, 200, T)).astype(np.float32) * rng.integers(-2, 3, (12, C, 1))
    mr = sk_multi.MiniRocketMultivariate(num_kernels=840, random_state=seed).fit(X)
    want = np.asarray(mr.transform(X), np.float64)  # (n, 84 · features per kernel)
    params = _params_from_sktime(mr.parameters)
    assert params.size == want.shape[1]
    x = np.transpose(X, (0, 2, 1)).astype(np.int64)  # the host's [N, T, C]
    counts, n_pos = transform(params, x, np.full(len(x), T), np.zeros(len(x), np.int64))
    got = ppv(counts, n_pos)
    # sktime's PPV is a float32 mean; ours the exact proportion
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert len(np.unique(got.round(6))) > 10  # not a degenerate all-0 / all-1 comparison


@pytest.mark.parametrize("length", [9, 26, 100, 1344])
@pytest.mark.parametrize("num_features", [84, 840, 10_000])
def test_rocket_oracle_dilations_equal_sktime(length, num_features):
    want_d, want_n = sk_rocket._fit_dilations(length, num_features, 32)
    got_d, got_n = fit_dilations(length, num_features, 32)
    np.testing.assert_array_equal(got_d, want_d)
    np.testing.assert_array_equal(got_n, want_n)


def test_rocket_oracle_quantile_levels_equal_sktime():
    np.testing.assert_allclose(quantile_levels(840), sk_rocket._quantiles(840), atol=1e-6)
