"""Host (CPython): the `seq-rocket` model — MiniRocket features, a ridge head, pruned to fit.

    windows [B, T, C] (raw), lengths [B]
      -> x / norm_std[c]            per channel a power of two near its TRAIN std (no centering)
      -> xq = floor(x / s_in + 0.5)   the input grid: s_in a power of two, |xq| < 2**29
      -> rocket (host/learn/rocket.py): block exponent, pooling of P steps, K PPV features
      -> (PPV - mean) / std         standardized on TRAIN
      -> dense (K -> classes)       the ridge classifier (host/learn/ridge.py)

Every step up to the PPVs is exact integer arithmetic on the grid, and every scale is a power of
two, so a window's grid values are the same in single and double precision: the board
quantizes as the host does, and the features it counts are the host's.

Fitting (`fit_rocket`) is deterministic given TRAIN (its random draws are seeded): the grid from
TRAIN's values, MiniRocket's parameters, the PPVs standardized, a ridge whose penalty is chosen
by closed-form leave-one-out, then pruning to `keep` features as Detach-ROCKET does (rank the
standardized features by the ridge's |coefficients|, keep the best, refit; here halving the set
each round), and to what fits `max_ops` operations an inference (`ops`), `max_bytes` of blob
(`blob_size`), and to `max_heap` of board heap and `max_us` on a board (the estimates every
command uses, on the blob `tinyattn export` would write: host/learn/rocketboard.py), best
first.

The model file (docs/model-format.md) holds two ops: `rocket` (the transform and the
standardization; its parameters `group [G, 8]`, `channel [L]`, `bias [K]`, `mean [K]`, `std
[K]`) and `dense` (the ridge's `W [classes, K]`, `b`).

References: Dempster, Schmidt & Webb (2021), MINIROCKET, KDD '21; G. Uribarri, F. Barone,
A. Ansuini and E. Fransén (2024), "Detach-ROCKET: sequential feature selection for time series
classification with random convolutional kernels", Data Mining and Knowledge Discovery.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinyattn.data.windows import fit_to_model, valid_lengths
from tinyattn.learn import ridge, rocket
from tinyattn.learn.layers import Dense, Layer
from tinyattn.learn.sequential import Sequential

GRID_BITS = 30  # the input grid: |xq| <= 2**29, a small int on every board
GRID_MAX = (1 << (GRID_BITS - 1)) - 1
GROUP_COLUMNS = ("dilation", "pad", "i0", "i1", "i2", "channels", "features", "bias_exp")


@dataclass(frozen=True)
class RocketConfig:
    """What `fit_rocket` builds; each field's default is the paper's or the board's."""

    num_features: int = 10_000  # MiniRocket's default: 84 kernels x 119 biases
    max_dilations: int = 32  # the paper's (dilations per kernel)
    pool: int = 1  # P steps summed into one before the transform (long windows, small boards)
    positions: int = 0  # N: at most N positions a window count (evenly spaced; 0: all)
    keep: int | None = None  # prune to the k most important features (None: keep them all)
    max_ops: int | None = None  # prune further until an inference takes at most this (`ops`)
    max_bytes: int | None = None  # and until its blob takes at most this (`blob_size`)
    max_heap: int | None = None  # and until the board's heap for it and its Stream is at most it
    max_us: float | None = None  # and until an inference's µs on that board are at most this
    rates: tuple[tuple[str, float], ...] = ()  # that board's time model (tinyattn.board.cost)
    drop: float = 0.1  # the share of the features a pruning round drops (Detach-ROCKET: 0.05)
    seed: int = 0  # the channel combinations and the windows the biases come from

    def __post_init__(self) -> None:
        if self.num_features < 1 or self.max_dilations < 1 or self.pool < 1:
            raise ValueError("num_features, max_dilations and pool must be >= 1")
        if self.positions < 0:
            raise ValueError(f"positions {self.positions}: 0 (every position) or a cap >= 1")
        if self.keep is not None and self.keep < 1:
            raise ValueError(f"keep {self.keep}: at least 1 feature")
        if not 0.0 < self.drop < 1.0:
            raise ValueError(f"drop {self.drop}: a share between 0 and 1")
        if self.max_us is not None and not self.rates:
            raise ValueError("max_us needs the board's time model (rates)")
        # a record read back (JSON) gives lists: the config stays hashable
        object.__setattr__(self, "rates", tuple((str(k), float(v)) for k, v in self.rates))


# -- the input grid --------------------------------------------------------------------------


def pow2(v: np.ndarray | float, up: bool = False) -> np.ndarray:
    """The power of two nearest `v` in log scale (or the smallest >= v, `up`); 1 for v <= 0."""
    v = np.asarray(v, np.float64)
    safe = np.where(v > 0, v, 1.0)
    k = np.ceil(np.log2(safe)) if up else np.round(np.log2(safe))
    return np.where(v > 0, 2.0**k, 1.0)


def fit_grid(X: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, float]:
    """`(norm_std [C], s_in)` of TRAIN windows: each channel's std over its valid steps as the
    nearest power of two, and the smallest power of two `s_in` that keeps every TRAIN value
    on the grid (|x / std / s_in| <= 2**29 - 1). Powers of two make the grid exact in any
    float precision."""
    valid = np.arange(X.shape[1])[None, :] < np.asarray(lengths)[:, None]
    v = np.asarray(X, np.float64)[valid]  # (steps, C)
    std = pow2(v.std(axis=0))
    top = float(np.abs(v / std).max(initial=0.0))
    return std, float(pow2(top / GRID_MAX, up=True)) if top > 0 else 1.0


def to_grid(x: np.ndarray, lengths: np.ndarray, s_in: float) -> np.ndarray:
    """`xq [B, T, C]` int64 of normalized windows `x` (= X / norm_std): `floor(x / s_in +
    0.5)` clamped to the grid, 0 past each length (docs/quantization.md, input equation)."""
    valid = np.arange(x.shape[1])[None, :, None] < np.asarray(lengths)[:, None, None]
    with np.errstate(invalid="ignore", over="ignore"):
        xq = np.floor(np.where(valid, x, 0.0) / s_in + 0.5)
    return np.clip(xq, -GRID_MAX - 1, GRID_MAX).astype(np.int64)


# -- the model -------------------------------------------------------------------------------


class RocketLayer(Layer):
    """The transform and the standardization: normalized windows -> standardized PPVs `[B, K]`
    (not trained by gradients: `fit_rocket` sets its parameters)."""

    def __init__(self, op: dict[str, Any]) -> None:
        super().__init__()
        self.op = op
        G, L, K = int(op["groups"]), int(op["combos"]), int(op["features"])
        for name, shape in (("group", (G, len(GROUP_COLUMNS))), ("channel", (L,)),
                            ("bias", (K,)), ("mean", (K,)), ("std", (K,))):  # fmt: skip
            self.params[name] = np.zeros(shape)
            self.grads[name] = np.zeros(shape)
        self.params["std"][:] = 1.0

    def rocket_params(self) -> rocket.RocketParams:
        g = self.params["group"].astype(np.int64)
        return rocket.RocketParams(
            g[:, 0], g[:, 1], g[:, 2:5], g[:, 5], self.params["channel"].astype(np.int64),
            g[:, 6], g[:, 7], self.params["bias"].astype(np.int64),
        )  # fmt: skip

    def set_params(self, p: rocket.RocketParams, mean: np.ndarray, std: np.ndarray) -> None:
        self.params["group"][...] = np.column_stack(
            [p.dilation, p.pad, p.taps, p.n_channels, p.n_features, p.bias_exp]
        )
        self.params["channel"][...] = p.channels
        self.params["bias"][...] = p.bias
        self.params["mean"][...] = mean
        self.params["std"][...] = std

    def ppv(self, x: np.ndarray, lengths: np.ndarray | None) -> np.ndarray:
        """The PPVs `[B, K]` of normalized windows `x [B, T', C]` (the long window rule: a
        window longer than T is read on its last T steps)."""
        T = int(self.op["steps"])
        n = valid_lengths(x, lengths, x.shape[1])
        x, n, _ = fit_to_model(x, n, T)
        xq = to_grid(x, n, float(self.op["input_scale"]))
        P, N = int(self.op["pool"]), int(self.op.get("positions", 0))
        return rocket.ppv(*rocket.transform(self.rocket_params(), *rocket.prepare(xq, n, P), P,
                                            None, N))  # fmt: skip

    def forward(self, x: np.ndarray, training: bool = False, lengths=None) -> np.ndarray:
        return (self.ppv(x, lengths) - self.params["mean"]) / self.params["std"]


class RocketModel(Sequential):
    """`seq-rocket`: the rocket layer, then the dense head; `forward(x, lengths=...)` takes
    normalized windows `[B, T', C]` as a `SeqModel` does."""

    def forward(self, x: np.ndarray, training: bool = False, lengths=None) -> np.ndarray:
        return self.layers[1].forward(self.layers[0].forward(x, lengths=lengths))

    def predict(self, x: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
        return np.argmax(self.forward(x, lengths=lengths), axis=1)

    @property
    def rocket(self) -> RocketLayer:
        return self.layers[0]


def rocket_ops(T: int, C: int, P: int, s_in: float, p: rocket.RocketParams,
               n_classes: int, N: int = 0) -> list[dict[str, Any]]:  # fmt: skip
    """The op list of a `seq-rocket` model (docs/model-format.md)."""
    return [
        {"op": "rocket", "steps": T, "channels": C, "pool": P, "positions": N, "bits": GRID_BITS,
         "input_scale": s_in, "groups": p.n_groups, "combos": len(p.channels),
         "features": p.size},
        {"op": "dense", "in": p.size, "out": n_classes, "bias": True},
    ]  # fmt: skip


def build_rocket_from_ops(ops: list[dict[str, Any]], seed: int = 0) -> RocketModel:
    """An empty `seq-rocket` model of this op list (`load_state_dict` fills it; nothing in it
    is drawn at random: `seed` is the other kinds' signature)."""
    if len(ops) != 2 or ops[1].get("op") != "dense":
        kinds = [op.get("op") for op in ops]
        raise ValueError(f"a seq-rocket model is [rocket, dense], got {kinds}")
    head = ops[1]
    dense = Dense(int(head["in"]), int(head["out"]), bool(head.get("bias", True)))
    return RocketModel([RocketLayer(ops[0]), dense], [dict(op) for op in ops])


# -- cost ------------------------------------------------------------------------------------


def ops(p: rocket.RocketParams, T: int, C: int, P: int, n_classes: int,
        N: int = 0) -> dict[str, int]:  # fmt: skip
    """Operations of one inference on a full window, by kind (each may get its own rate on a
    board), as the docs' equations are evaluated on a grid of 3·xp (docs/quantization.md,
    "rocket": the kernel's weight 3 paid once a value, not once a position): `adds` (4 a value:
    the block's max, the shift, the pooling and the tripling; the shared sum, 9 a counted step
    for each channel a dilation's groups use; 4C - 1 a position of a group of C channels: its
    4C terms, three taps and the shared sum a channel, added), `compares` (one a feature and
    position), `macs` (the head), and `ops`, their total; `shared`, the shared sums' share of
    the adds (a board's time model rates them apart). `N`: the positions cap
    (rocket.positions)."""
    S = -(-T // P)
    s = int(rocket.stride(np.array([S]), N)[0])
    npos = positions(p, T, P, N)
    g_of = np.repeat(np.arange(p.n_groups), p.n_channels)  # the group of each channel entry
    used = len(set(zip(p.dilation[g_of].tolist(), p.channels.tolist(), strict=True)))
    adds = 4 * T * C + rocket.TAPS * (-(-S // s)) * used
    adds += int(np.sum(npos * (4 * p.n_channels - 1)))
    compares = int(np.sum(npos * p.n_features))
    macs = p.size * n_classes
    shared = rocket.TAPS * (-(-S // s)) * used
    return {"adds": adds, "compares": compares, "macs": macs, "ops": adds + compares + macs,
            "shared": shared}  # fmt: skip


def positions(p: rocket.RocketParams, T: int, P: int, N: int = 0) -> np.ndarray:
    """`(G,)` the positions each group counts on a full window of T steps (pooled by P, at
    most N positions: rocket.positions): every s-th of the pooled window's S, from the first
    multiple of s at or past lo to S - lo (lo = 0 for pad 1, 4d for pad 0)."""
    S = -(-T // P)
    s = int(rocket.stride(np.array([S]), N)[0])
    lo = np.where(p.pad == 1, 0, (rocket.TAPS // 2) * p.dilation)
    first = -(-lo // s) * s  # the first counted position of each group
    return np.maximum(-(-(S - lo - first) // s), 0)


BLOB_OVERHEAD = 1024  # a blob's header, op records, tensor table, names, CRC: at most this


def blob_size(p: rocket.RocketParams, n_classes: int) -> int:
    """An upper bound of the int8 blob's bytes (docs/blob-format.md): the rocket op's tables
    (grp 16 a group, ch 2 a channel entry, b, z, m 10 a feature), the head (W a byte a
    feature and class, b, s and m 10 a class), each padded to 4, and BLOB_OVERHEAD."""
    pad = 3 * 8  # each tensor padded to 4 bytes
    return (16 * p.n_groups + 2 * len(p.channels) + 10 * p.size + p.size * n_classes
            + 10 * n_classes + pad + BLOB_OVERHEAD)  # fmt: skip


# -- fitting ---------------------------------------------------------------------------------


@dataclass
class RocketFit:
    """A fitted `seq-rocket` model and how it was made."""

    model: RocketModel
    norm_std: np.ndarray  # (C,) powers of two
    max_steps: int  # T
    seconds: float
    history: dict[str, Any] = field(default_factory=dict)  # the pruning rounds, alpha, ops

    @property
    def norm_mean(self) -> np.ndarray:
        return np.zeros_like(self.norm_std)


def standardize(F: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`(mean, std)` of features `F [N, K]`; a constant feature gets std 1."""
    mean, std = F.mean(axis=0), F.std(axis=0)
    return mean, np.where(std > 0, std, 1.0)


def prune(Z: np.ndarray, y: np.ndarray, n_classes: int, keep: int | None,
          bounds: Sequence[Callable[[np.ndarray], bool]] = (), drop: float = 0.1,
          on_round: Callable[[np.ndarray, ridge.Ridge], None] | None = None,
          ) -> tuple[np.ndarray, ridge.Ridge]:  # fmt: skip
    """`(kept feature indices, the ridge refit on them)`: Detach-ROCKET's sequential
    detachment on standardized features `Z [N, K]` — fit the ridge, keep the `1 - drop` share
    of the features with the largest |coefficients| (at least `keep`), refit, until `keep`
    remain; then, while a bound (`bounds`, each `bound(indices)` True when the set is within
    it; the cheap ones first) says no, the same rounds until the longest prefix of a ranking
    within every bound is at least a round's share: that prefix, refit. `on_round(indices,
    ridge)` sees every fit."""
    idx = np.arange(Z.shape[1])
    head = ridge.fit(Z, y, n_classes)
    if on_round is not None:
        on_round(idx, head)
    target = Z.shape[1] if keep is None else min(keep, Z.shape[1])
    while True:
        order = idx[np.argsort(-head.importance(), kind="stable")]
        cut = min(len(idx) - 1, math.ceil(len(idx) * (1 - drop)))  # a round: one goes at least
        if len(idx) > target:
            n = max(target, cut)
        elif len(idx) == 1 or (n := _longest_fit(order, bounds, cut)) == len(idx):
            return idx, head  # within every bound, or one feature (the caller says if it is)
        # else: the prefix within every bound, once it keeps as many as a round would
        idx = np.sort(order[:n])
        head = ridge.fit(Z[:, idx], y, n_classes)
        if on_round is not None:
            on_round(idx, head)


def _longest_fit(order: np.ndarray, bounds: Sequence[Callable[[np.ndarray], bool]],
                 floor: int = 1) -> int:
    """The most features of `order` (best first) whose set is within every bound, or `floor`
    (>= 1) when that is no more. Each bound is asked first about the floor's prefix (out: the
    floor, at once), then searched within the prefix the bounds before it left: an expensive
    bound, last, is asked once a round while it cuts deeper than a round would."""
    n = len(order)
    for bound in bounds:
        if n <= floor or not bound(np.sort(order[:floor])):
            return floor
        if bound(np.sort(order[:n])):
            continue
        lo, hi = floor, n - 1  # the prefix of lo is within this bound, that of n is not
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if bound(np.sort(order[:mid])):
                lo = mid
            else:
                hi = mid - 1
        n = lo
    return n


def fit_rocket(X: np.ndarray, lengths: np.ndarray, y: np.ndarray, n_classes: int,
               config: RocketConfig | None = None, max_steps: int | None = None,
               board: Callable[[RocketModel, np.ndarray], dict[str, Any]] | None = None,
               ) -> RocketFit:  # fmt: skip
    """Fit `seq-rocket` on TRAIN windows `X [N, T', C]` (raw), `lengths [N]`, labels `y`:
    the grid, the transform, the standardization, the ridge, the pruning (`prune`: to
    `config.keep` features, then in rounds to every bound: `config.max_ops` operations an
    inference and `config.max_bytes` of blob, counted, and `config.max_heap` of board heap and
    `config.max_us` as `board(model, norm_std)` estimates them: rocketboard.estimator). T: the
    longest TRAIN window (or `max_steps`)."""
    t0 = time.perf_counter()
    config = config or RocketConfig()
    limits = {k: v for k, v in (("heap", config.max_heap), ("us", config.max_us))
              if v is not None}  # fmt: skip
    if limits and board is None:
        raise ValueError("max_heap and max_us need the board's estimates "
                         "(board: rocketboard.estimator)")  # fmt: skip
    lengths = np.asarray(lengths, np.int64)
    T = int(max_steps or lengths.max())
    X, n, _ = fit_to_model(np.asarray(X, np.float64), lengths, T)
    if X.shape[1] < T:
        X = np.concatenate([X, np.zeros((len(X), T - X.shape[1], X.shape[2]))], axis=1)
    std, s_in = fit_grid(X, n)
    P, N = config.pool, config.positions
    N = N if N < -(-T // P) else 0  # a cap at or past the pooled window counts every position
    prepared = rocket.prepare(to_grid(X / std, n, s_in), n, P)
    params = rocket.fit(*prepared, P, config.num_features, config.max_dilations, config.seed)
    F = rocket.ppv(*rocket.transform(params, *prepared, P, None, N))
    mean, fstd = standardize(F)
    C = X.shape[2]

    def build(idx: np.ndarray) -> RocketModel:
        kept = params.subset(idx)
        model = build_rocket_from_ops(rocket_ops(T, C, P, s_in, kept, n_classes, N))
        model.rocket.set_params(kept, mean[idx], fstd[idx])
        return model

    def counted(idx: np.ndarray) -> list[str]:
        """The operations and blob bytes the model of features `idx` exceeds, in words."""
        sub = params.subset(idx)
        cost = {"operations an inference": (ops(sub, T, C, P, n_classes, N)["ops"],
                                            config.max_ops),
                "B of blob": (blob_size(sub, n_classes), config.max_bytes)}  # fmt: skip
        return [f"{v:,} {what}, more than the {lim:,} allowed"
                for what, (v, lim) in cost.items() if lim is not None and v > lim]

    def on_board(idx: np.ndarray) -> list[str]:
        """The board's heap and µs the model of features `idx` exceeds, in words (estimated
        on the blob `tinyattn export` would write)."""
        m = board(build(idx), std)
        return [f"about {m['heap']:,} B of board heap with its Stream, more than the "
                f"{config.max_heap:,} B allowed" if k == "heap" else
                f"about {m['us'] / 1000:,.1f} ms an inference on the board, more than the "
                f"{config.max_us / 1000:,.1f} ms allowed"
                for k in limits if m[k] > limits[k]]  # fmt: skip

    bounds = []  # every bound joins the rounds; the counted ones first, the board's last
    if config.max_ops is not None or config.max_bytes is not None:
        bounds.append(lambda idx: not counted(idx))
    if limits:
        bounds.append(lambda idx: not on_board(idx))
    rounds: list[dict[str, Any]] = []

    def on_round(idx: np.ndarray, head: ridge.Ridge) -> None:
        rounds.append({"features": int(len(idx)), "alpha": head.alpha})

    Z = (F - mean) / fstd
    keep, head = prune(Z, y, n_classes, config.keep, bounds, config.drop, on_round)
    if len(keep) == 1:  # one feature: is it still over?
        needs, hint = counted(keep), "train --rocket-max-ops, or --max-macs / --max-bytes"
        if not needs and limits:
            needs, hint = on_board(keep), "train --rocket-max-heap, or --max-heap / --max-ms"
        if needs:
            raise ValueError(f"a seq-rocket model of one feature needs {' and '.join(needs)}: "
                             f"raise the limit ({hint} with --search), or pool the window "
                             "(--rocket-pool) to shorten its buffers, or count fewer positions "
                             "(--rocket-positions)")  # fmt: skip

    kept = params.subset(keep)
    model = build(keep)
    model.layers[1].params["W"][...] = head.W
    model.layers[1].params["b"][...] = head.b
    history = {"rounds": rounds, "alpha": head.alpha, "features": int(len(keep)),
               "fitted_features": params.size, **ops(kept, T, C, P, n_classes, N)}  # fmt: skip
    return RocketFit(model, std, T, time.perf_counter() - t0, history)
