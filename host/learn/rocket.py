"""Host (CPython): MiniRocket's transform on integer windows — its parameters, fit and features.

    windows xq [N, T, C] int (the input grid, |xq| < 2**29), lengths n [N]
      -> block      per window the exponent e: the smallest e >= 0 with max|xq| < 2**(15+e);
                    x = round(xq / 2**e) (half up), so |x| <= 2**15: a 16-bit mantissa
                    per value, one exponent per window (block floating point)
      -> pool       P steps summed into one: [N, S, C], S = ceil(T/P), n' = ceil(n/P)
      -> per group g (a dilation d, one of the 84 kernels, a channel combination, a pad flag):
         conv[t] = sum_{c in combo} (3·(x[t+(i0-4)d, c] + x[t+(i1-4)d, c] + x[t+(i2-4)d, c])
                                     - sum_{j<9} x[t+(j-4)d, c])     a tap outside 0..n'-1 reads 0
      -> per feature f of g (a bias b_f at the group's exponent e_g):
         count_f = #{t in positions(g) : conv[t] > thr_f},  thr_f = floor(b_f·2**(e_g - e))
         (exactly conv·2**e > b_f·2**e_g: the comparison in the input grid's units)
         positions: 0 <= t < n' (pad 1), or 4d <= t < n' - 4d (pad 0: every tap inside)
      -> PPV_f = count_f / #positions (0 when there are none)
         at most N positions a window (`N` > 0): only the positions t with t % s = 0,
         s = ceil(n'/N), count (a PPV is a proportion: the even sample estimates it, and an
         inference's work no longer grows with the window's length); N = 0: every position

The block exponent keeps a 16-bit relative precision in every window whatever its level
(appliance currents span six decades), with every sum a small integer; the biases carry the
exponent of the window they came from, so a comparison means what it means in the input's own
units, as float MiniRocket's does.

The 84 kernels are MiniRocket's: 9 taps of weight -1, three of them (`KERNELS[k]`, the
combinations of 3 of 9 in lexicographic order) of weight 2, so a kernel's weights sum to 0.
`-sum_j x + 3·(three taps)` is that kernel: the shared sum `A = -sum_j x` is computed once per
dilation and channel (the paper's C_alpha), each kernel adds three taps (its C_gamma).

Fitting (`fit`), as the paper: dilations spread exponentially over the window's length
(`fit_dilations`), features per dilation as even as the kernel count allows; the padding
alternates between kernels and dilations; multivariate windows take a random combination of
1..min(C, 9) channels per (dilation, kernel) (as sktime's MiniRocketMultivariate); each
(dilation, kernel)'s biases are quantiles, at a low-discrepancy sequence of levels, of its
convolution over one random TRAIN window. The convolution is an integer, so a bias is stored
as `floor(quantile)` with that window's exponent: `conv > floor(q)` exactly when `conv > q`.
The random choices come from one seeded generator: the same TRAIN windows give the same
parameters.

Unequal lengths: a window of n valid steps is computed as a window of exactly n steps (taps past
it read 0, positions past it are not counted, its exponent from its valid steps), so padding
never changes a feature.

References: A. Dempster, D. F. Schmidt and G. I. Webb (2021), "MINIROCKET: A Very Fast (Almost)
Deterministic Transform for Time Series Classification", KDD '21 (github.com/angus924/minirocket);
sktime's `MiniRocket`, `MiniRocketMultivariate`, `MiniRocketMultivariateVariable`
(sktime/transformations/rocket/_minirocket*.py); block floating point: J. H. Wilkinson (1963),
"Rounding Errors in Algebraic Processes".
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

KERNELS = np.array(list(itertools.combinations(range(9), 3)), np.int64)  # (84, 3) taps of weight 2
TAPS = 9
MAX_COMBO = 9  # channels a combination takes at most (the paper's multivariate variant)
MANTISSA = 15  # |x| <= 2**15 after the block exponent
SATURATE = (1 << 30) - 1  # a threshold past every convolution: the same counts as its value
UNCOUNTED = -SATURATE - 1  # a position outside the counted ones: below every threshold


@dataclass(frozen=True)
class RocketParams:
    """The transform's parameters: G groups (the kept (dilation, kernel) pairs, in dilation
    order), each with its channel combination and its run of features (biases)."""

    dilation: np.ndarray  # (G,) int64, >= 1, non-decreasing
    pad: np.ndarray  # (G,) int64: 1 count every position, 0 only those whose taps are inside
    taps: np.ndarray  # (G, 3) int64, increasing in 0..8: the taps of weight 2 (KERNELS)
    n_channels: np.ndarray  # (G,) int64 >= 1: channels in the group's combination
    channels: np.ndarray  # (sum n_channels,) int64: the combinations, group after group
    n_features: np.ndarray  # (G,) int64 >= 1: features (biases) of the group
    bias_exp: np.ndarray  # (G,) int64 >= 0: the exponent of the group's biases
    bias: np.ndarray  # (K,) int64: feature f counts conv·2**e > bias[f]·2**bias_exp[g]

    @property
    def n_groups(self) -> int:
        return len(self.dilation)

    @property
    def size(self) -> int:
        """K, the number of features."""
        return len(self.bias)

    def group_of_feature(self) -> np.ndarray:
        """`(K,)` the group index of each feature."""
        return np.repeat(np.arange(self.n_groups), self.n_features)

    def combos(self) -> list[np.ndarray]:
        """Each group's channel combination."""
        ends = np.cumsum(self.n_channels)
        return [self.channels[e - k : e] for e, k in zip(ends, self.n_channels, strict=True)]

    def subset(self, keep: np.ndarray) -> RocketParams:
        """The parameters of the features `keep` (indices, any order): groups without a kept
        feature leave, the others keep their order and their kept features in order."""
        mask = np.zeros(self.size, bool)
        mask[np.asarray(keep, np.int64)] = True
        n_feat = np.bincount(self.group_of_feature()[mask], minlength=self.n_groups)
        live = n_feat > 0
        combos = self.combos()
        chans = [combos[g] for g in np.flatnonzero(live)]
        return RocketParams(
            self.dilation[live], self.pad[live], self.taps[live], self.n_channels[live],
            np.concatenate(chans) if chans else np.zeros(0, np.int64), n_feat[live],
            self.bias_exp[live], self.bias[mask],
        )  # fmt: skip


def fit_dilations(length: int, num_features: int, max_dilations: int = 32):
    """`(dilations, features per dilation)` for windows of `length` steps (the paper's
    `_fit_dilations`): `min(num_features // 84, max_dilations)` exponents spread evenly over
    `0 .. log2((length - 1) / 8)` (the largest dilation whose 9 taps fit the window), rounded
    down and made unique; the features per kernel shared among them, the remainder from the
    smallest dilation on."""
    per_kernel = max(num_features, len(KERNELS)) // len(KERNELS)
    n = min(per_kernel, max_dilations)
    top = max(math.log2((length - 1) / (TAPS - 1)), 0.0) if length > 1 else 0.0
    dilations, counts = np.unique(
        np.logspace(0, top, n, base=2).astype(np.int64), return_counts=True
    )
    counts = (counts * (per_kernel / n)).astype(np.int64)
    for i in range(per_kernel - int(counts.sum())):
        counts[i % len(counts)] += 1
    return dilations, counts


def quantile_levels(n: int) -> np.ndarray:
    """The paper's low-discrepancy levels `(i·phi) mod 1`, i = 1..n, phi the golden ratio."""
    return (np.arange(1, n + 1) * ((math.sqrt(5) + 1) / 2)) % 1


def block(xq: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`(x [N, T, C], e [N])`: each window's exponent, the smallest `e >= 0` with every
    valid |xq| < 2**(15+e), and its values `(xq + 2**e // 2) >> e` (half up; 0 past the
    window's length), so |x| <= 2**15."""
    xq = np.asarray(xq, np.int64)
    valid = np.arange(xq.shape[1])[None, :, None] < np.asarray(lengths)[:, None, None]
    xq = np.where(valid, xq, 0)
    top = np.abs(xq).reshape(len(xq), -1).max(axis=1, initial=0)  # (N,)
    e = np.zeros(len(xq), np.int64)
    for k in range(len(xq)):
        while top[k] >> int(e[k]) >= 1 << MANTISSA:
            e[k] += 1
    return (xq + ((1 << e) >> 1)[:, None, None]) >> e[:, None, None], e


def pool_windows(x: np.ndarray, lengths: np.ndarray, P: int) -> tuple[np.ndarray, np.ndarray]:
    """`(pooled [N, ceil(T/P), C], n' = ceil(n/P))`: each run of P steps summed, steps past a
    window's length read 0 (the last run of a short window sums its valid steps only)."""
    N, T, C = x.shape
    S = -(-T // P)
    out = np.zeros((N, S * P, C), np.int64)
    valid = np.arange(T)[None, :, None] < np.asarray(lengths)[:, None, None]
    out[:, :T] = np.where(valid, x, 0)
    return out.reshape(N, S, P, C).sum(axis=2), -(-np.asarray(lengths, np.int64) // P)


def prepare(xq: np.ndarray, lengths: np.ndarray, P: int):
    """`(x [N, S, C], n' [N], e [N])`: windows on the input grid blocked and pooled, what
    `transform` takes."""
    x, e = block(xq, lengths)
    x, n = pool_windows(x, lengths, P)
    return x, n, e


def thresholds(bias: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """`floor(bias·2**shift)` (elementwise, broadcast), saturated at +-(2**30 - 1): past
    every convolution either way (|conv| < 2**30), so the counts are those of the exact
    value."""
    b, s = np.broadcast_arrays(np.asarray(bias, np.int64), np.asarray(shift, np.int64))
    up = np.clip(s, 0, 62)
    down = np.clip(-s, 0, 62)
    fits = np.abs(b) <= (SATURATE >> np.minimum(up, 30))
    wide = np.where(fits, b << np.minimum(up, 30), np.sign(b) * SATURATE)
    return np.where(s > 0, np.where(up > 30, np.sign(b) * SATURATE, wide), b >> down)


def _padded(x: np.ndarray, lengths: np.ndarray, margin: int) -> np.ndarray:
    """`[N, S + 2·margin, C]`: the windows with `margin` zero steps on each side, and zeros
    past each window's length."""
    N, S, C = x.shape
    out = np.zeros((N, S + 2 * margin, C), x.dtype)
    valid = np.arange(S)[None, :, None] < np.asarray(lengths)[:, None, None]
    out[:, margin : margin + S] = np.where(valid, x, 0)
    return out


def _alpha(xp: np.ndarray, d: int, S: int, s: int = 1) -> np.ndarray:
    """`A [N, ceil(S/s), C] = -sum_{j<9} x[t + (j-4)d]` at t = 0, s, 2s, … < S over a window
    padded by 4d (`_padded`)."""
    A = np.zeros((xp.shape[0], -(-S // s), xp.shape[2]), xp.dtype)
    for j in range(TAPS):
        A -= xp[:, j * d : j * d + S : s]
    return A


def _conv(xp: np.ndarray, A: np.ndarray, d: int, taps, combo: np.ndarray,
          S: int | None = None, s: int = 1) -> np.ndarray:  # fmt: skip
    """`conv [N, ceil(S/s)]` of one group at the positions of `A` (`_alpha`'s, step `s`):
    `sum_{c in combo} 3·(three taps) + A`."""
    S = A.shape[1] if S is None else S
    i0, i1, i2 = (int(i) for i in taps)
    taps = (xp[:, i0 * d : i0 * d + S : s] + xp[:, i1 * d : i1 * d + S : s]
            + xp[:, i2 * d : i2 * d + S : s])  # fmt: skip
    return (3 * taps[:, :, combo] + A[:, :, combo]).sum(axis=2)


def stride(lengths: np.ndarray, N: int) -> np.ndarray:
    """Each window's position step: `ceil(n'/N)` (at least 1) for a cap of N positions, 1
    without one (N = 0)."""
    n = np.asarray(lengths, np.int64)
    return np.maximum(-(-n // N), 1) if N > 0 else np.ones_like(n)


def conv_bound(max_combo: int, P: int) -> int:
    """The largest |conv| (and |A|) there can be: 12 (the kernel's |weights|) times the
    channels times P steps of |x| <= 2**15."""
    return 12 * max_combo * P << MANTISSA


def _dtype(max_combo: int, P: int) -> type:
    return np.int32 if conv_bound(max_combo, P) < 2**31 else np.int64


def transform(params: RocketParams, x: np.ndarray, lengths: np.ndarray, e: np.ndarray,
              P: int = 1, record: dict | None = None, cap: int = 0):  # fmt: skip
    """`(counts [N, K], n_pos [N, K])` of prepared windows (`prepare`: `x [N, S, C]` of P
    pooled steps, `lengths` n' valid, exponents `e`): feature f counts the positions of its
    group (at most `cap` a window when cap > 0: `positions`) where conv > its threshold, out of
    n_pos such positions. PPV = counts / n_pos (`ppv`). `record`: gets the largest |conv| and
    |A| seen (`"conv"`)."""
    N, S, C = x.shape
    K = params.size
    counts = np.zeros((N, K), np.int64)
    n_pos = np.zeros((N, K), np.int64)
    if K == 0:
        return counts, n_pos
    x = x.astype(_dtype(int(params.n_channels.max()), P))
    e = np.asarray(e, np.int64)
    lengths = np.asarray(lengths, np.int64)
    steps = stride(lengths, cap)
    top = 0
    for s in np.unique(steps).tolist():  # the windows of one step at once, at their positions
        rows = np.flatnonzero(steps == s)
        # up to their longest: the steps past it are zeros that no counted position reaches
        S_s = max(1, int(lengths[rows].max()))
        c, p, t = _transform_step(params, x[rows, :S_s], lengths[rows], e[rows], int(s))
        counts[rows], n_pos[rows], top = c, p, max(top, t)
    if record is not None:
        record["conv"] = max(record.get("conv", 0), top)
    return counts, n_pos


def _transform_step(params: RocketParams, x: np.ndarray, lengths: np.ndarray, e: np.ndarray,
                    s: int) -> tuple[np.ndarray, np.ndarray, int]:  # fmt: skip
    """`transform` of windows whose positions come every `s` steps: `(counts, n_pos, the
    largest |conv| and |A|)`."""
    N, S, C = x.shape
    counts = np.zeros((N, params.size), np.int64)
    n_pos = np.zeros((N, params.size), np.int64)
    combos = params.combos()
    t = np.arange(0, S, s)[None, :]  # the positions that may count
    n = lengths[:, None]
    f0 = 0
    d_now, xp, A = None, None, None
    top = 0
    exps = np.repeat(params.bias_exp, params.n_features)  # each feature's group's exponent
    thr = thresholds(params.bias[None, :], exps[None, :] - e[:, None])  # (N, K)
    for g in range(params.n_groups):
        d = int(params.dilation[g])
        if d != d_now:  # groups come in dilation order: the shared sum once per dilation
            d_now = d
            xp = _padded(x, lengths, (TAPS // 2) * d)
            A = _alpha(xp, d, S, s)
            top = max(top, int(np.abs(A).max(initial=0)))
        conv = _conv(xp, A, d, params.taps[g], combos[g], S, s)  # (N, ceil(S/s))
        lo = 0 if params.pad[g] else (TAPS // 2) * d
        mask = (t >= lo) & (t < n - lo)
        f1 = f0 + int(params.n_features[g])
        top = max(top, int(np.abs(np.where(mask, conv, 0)).max(initial=0)))
        conv = np.where(mask, conv, UNCOUNTED)  # below every threshold: never counted
        counts[:, f0:f1] = np.count_nonzero(conv[:, :, None] > thr[:, None, f0:f1], axis=1)
        n_pos[:, f0:f1] = mask.sum(axis=1)[:, None]
        f0 = f1
    return counts, n_pos, top


def ppv(counts: np.ndarray, n_pos: np.ndarray) -> np.ndarray:
    """Proportions of positive values, `counts / n_pos` (0 where a window has no position)."""
    return np.where(n_pos > 0, counts / np.maximum(n_pos, 1), 0.0)


def fit(
    x: np.ndarray, lengths: np.ndarray, e: np.ndarray, P: int = 1, num_features: int = 10_000,
    max_dilations: int = 32, seed: int = 0,
) -> RocketParams:  # fmt: skip
    """MiniRocket's parameters for prepared TRAIN windows (`prepare`: `x [N, S, C]` of P
    pooled steps, `lengths` n' valid, exponents `e`): dilations for the longest window, about
    `num_features` features (84 kernels times the features per kernel), channel combinations
    and biases drawn with `seed`."""
    N, S, C = x.shape
    lengths = np.asarray(lengths, np.int64)
    dilations, per_dilation = fit_dilations(int(lengths.max()), num_features, max_dilations)
    rng = np.random.default_rng(seed)
    n_comb = len(dilations) * len(KERNELS)
    width = min(C, MAX_COMBO)
    n_ch = (2 ** rng.uniform(0, math.log2(width + 1), n_comb)).astype(np.int64)
    n_ch = np.clip(n_ch, 1, width)
    chans = [np.sort(rng.choice(C, k, replace=False)) for k in n_ch]
    levels = quantile_levels(int(per_dilation.sum()) * len(KERNELS))
    x = x.astype(_dtype(width, P))
    rows: dict[str, list[int]] = {k: [] for k in ("dilation", "pad", "kernel", "n_features",
                                                  "bias_exp")}  # fmt: skip
    bias: list[np.ndarray] = []
    f0 = 0
    for di, d in enumerate(dilations.tolist()):
        for k in range(len(KERNELS)):
            g = di * len(KERNELS) + k
            i = int(rng.integers(N))  # the TRAIN window whose convolution sets the biases
            n = int(lengths[i])
            xp = _padded(x[i : i + 1, :n], lengths[i : i + 1], (TAPS // 2) * d)
            conv = _conv(xp, _alpha(xp, d, n), d, KERNELS[k], chans[g])[0]  # (n,)
            m = int(per_dilation[di])
            bias.append(np.floor(np.quantile(conv, levels[f0 : f0 + m])).astype(np.int64))
            f0 += m
            rows["dilation"].append(d)
            rows["pad"].append(1 - (di + k) % 2)  # the paper's alternation
            rows["kernel"].append(k)
            rows["n_features"].append(m)
            rows["bias_exp"].append(int(e[i]))
    arr = {key: np.array(v, np.int64) for key, v in rows.items()}
    return RocketParams(arr["dilation"], arr["pad"], KERNELS[arr["kernel"]], n_ch,
                        np.concatenate(chans).astype(np.int64), arr["n_features"],
                        arr["bias_exp"], np.concatenate(bias))  # fmt: skip
