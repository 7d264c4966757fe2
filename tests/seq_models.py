# Host (CPython): hand-made seq-attn blob specs for the blob, budget and device tests.
"""`seq_spec(quantized, seed, T, P)`: a small seq blob spec built by hand (random int8
weights and biases, every multiplier half the largest its budget site allows, but masked_pool's
table, which readers require to be `m[k-1] = rint(2**14 / k)`), independent
of the quantizer: by default T=10 steps, C=3 channels, P=4 (S=3 tokens, the last patch half
padding), E=8, H=2, F=12, 4 classes; ops embed, res_attention, res_ff, masked_pool, dense.
The float32 variant (`quantized=False`) has float weights and zero/one parameters.

The seq models the tests build, in one place: `train_seq` (a model trained on raw windows),
`basicmotions_model()` (the BasicMotions one, trained once per test process),
`random_seq_case` (random weights, random unequal-length windows), `model_file`,
`view_windows` and `view_model` (a log- or clip-view model on heavy-tailed windows).
"""

from __future__ import annotations

import functools

import numpy as np

from tinyattn.intmodel.blob import (
    BUDGET,
    POOL_SHIFT,
    Op,
    QuantModelSpec,
    budget_sites,
    pool_reciprocal,
)

T, C, P, E, H, F, K = 10, 3, 4, 8, 2, 12, 4
S = -(-T // P)


def _fit_multipliers(op: Op) -> Op:
    """Set every multiplier of `op` to half the largest the budget allows (<= 32767);
    masked_pool's table is fixed by the format and stays."""
    if op.kind == "masked_pool":
        return op
    for name, max_acc, _, shift in budget_sites(op):
        m = np.minimum(32767, (BUDGET - 1 - (1 << (shift - 1))) // max_acc) // 2
        if name[0] == "m":
            op.tensors[name] = m.astype(np.int16)
        else:
            op.iparams[name] = int(m[0])
    return op


def seq_spec(
    quantized: bool = True, seed: int = 0, T: int = T, P: int = P
) -> QuantModelSpec:
    rng = np.random.default_rng(seed)
    S = -(-T // P)

    def w(*shape):
        if quantized:
            return rng.integers(-127, 128, size=shape).astype(np.int8)
        return rng.normal(0, 0.3, size=shape).astype(np.float32)

    def b(*shape):
        if quantized:
            return rng.integers(-3000, 3000, size=shape).astype(np.int32)
        return rng.normal(0, 0.1, size=shape).astype(np.float32)

    def qt(role_w, role_b, n_out, n_in, g=""):
        t = {f"W{g}": w(n_out, n_in), f"b{g}": b(n_out)}
        if quantized:
            t[f"s{g}"] = np.full(n_out, 0.01, np.float32)
            t[f"m{g}"] = np.ones(n_out, np.int16)
        return t

    sh = 20 if quantized else 0
    one = (lambda v: v) if quantized else (lambda v: 1.0)
    ops = []
    t = {"W": w(E, P * C), "b": b(S, E)}
    if quantized:
        t |= {"s": np.full(E, 0.01, np.float32), "m": np.ones(E, np.int16)}
    ops.append(Op("embed", {"T": T, "C": C, "P": P, "E": E, "shift": sh},
                  {"s_in": one(0.05), "s_out": one(0.1)}, t))  # fmt: skip
    t = {}
    for g in "qkvo":
        t |= qt("W", "b", E, E, g)
    if quantized:
        t["lut"] = np.array(
            [[int(round(16384 * np.exp(-i * 2.0))) for i in range(16)],
             [int(round(16384 * np.exp(-i / 8.0))) for i in range(16)]], np.uint16)  # fmt: skip
    ip = dict(S=S, E=E, H=H, has_bias=1, shift_q=sh, shift_k=sh, shift_v=sh, shift_o=sh,
              M_sm=1, shift_sm=sh, M_ctx=1, shift_ctx=sh, M_x=1, M_a=1, shift_add=sh)  # fmt: skip
    if not quantized:
        ip = {n: (v if n in ("S", "E", "H", "has_bias") else 0) for n, v in ip.items()}
    fp = {n: one(0.1) for n in ("s_in", "s_q", "s_k", "s_v", "s_ctx", "s_out", "s_y")}
    ops.append(Op("res_attention", ip, fp, t))
    t = qt("W", "b", F, E, "1") | qt("W", "b", E, F, "2")
    ip = dict(E=E, F=F, has_bias=1, shift_1=sh, shift_2=sh, M_x=1, M_f=1, shift_add=sh)
    if not quantized:
        ip = {n: (v if n in ("E", "F", "has_bias") else 0) for n, v in ip.items()}
    ops.append(Op("res_ff", ip, {n: one(0.1) for n in ("s_in", "s_h", "s_f", "s_y")}, t))
    table = np.array([pool_reciprocal(k) for k in range(1, S + 1)], np.int16)
    t = {"m": table} if quantized else {}
    ops.append(Op("masked_pool", {"S": S, "E": E, "shift": POOL_SHIFT if quantized else 0}, {}, t))
    t = qt("W", "b", K, E)
    ops.append(Op("dense", {"in": E, "out": K, "has_bias": 1, "shift": sh,
                            "act_min": -32768 if quantized else 0,
                            "act_max": 32767 if quantized else 0},
                  {"s_in": one(0.1), "s_out": one(0.2)}, t))  # fmt: skip
    if quantized:
        ops = [_fit_multipliers(op) for op in ops]
    return QuantModelSpec(
        quantized=quantized,
        class_names=[f"class{i}" for i in range(K)],
        norm_mean=rng.normal(size=C).astype(np.float32),
        norm_std=rng.uniform(0.5, 2, size=C).astype(np.float32),
        input_scale=0.05 if quantized else 1.0,
        logit_scale=0.2 if quantized else 1.0,
        ops=ops,
    )


def train_seq(
    X: np.ndarray,
    lengths: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    config=None,
    epochs: int = 60,
    lr: float = 3e-3,
    batch_size: int = 16,
    weight_decay: float = 0.01,
    seed: int = 0,
    max_steps: int | None = None,
):
    """`(model, norm_mean, norm_std)`: a `seq-attn` model trained on raw windows `X [N, T, C]`
    with `lengths` (AdamW, cosine decay, per-channel standardization fitted on these windows).

    A local loop because `train.fit` takes no lengths (it works for equal-length data only).
    `max_steps` is the model's T (default: the longest window rounded up to a multiple of P).
    """
    from tinyattn.data.timeseries import fit_channel_standardizer, standardize_windows
    from tinyattn.learn.losses import softmax_cross_entropy
    from tinyattn.learn.optim import Adam
    from tinyattn.learn.seqmodel import SeqAttnConfig, build_seq_model, default_max_steps

    config = config if config is not None else SeqAttnConfig()
    mean, std = fit_channel_standardizer(X, lengths)
    xn = standardize_windows(X, lengths, mean, std)  # (N, T, C), 0 at padding
    T = max_steps if max_steps is not None else default_max_steps(lengths, config.patch)
    xn = xn[:, :T]  # steps past every length (and past T) are padding
    model = build_seq_model(T, X.shape[2], n_classes, config, seed=seed)
    opt = Adam(model.theta, model.grad, lr, weight_decay=weight_decay, decay_mask=model.decay_mask)
    rng = np.random.default_rng([seed, 1])
    N = len(y)
    total, step = epochs * -(-N // batch_size), 0
    for _ in range(epochs):
        order = rng.permutation(N)
        for start in range(0, N, batch_size):
            idx = order[start : start + batch_size]
            logits = model.forward(xn[idx], training=True, lengths=lengths[idx])
            _, dlogits = softmax_cross_entropy(logits, y[idx])
            model.backward(dlogits)
            opt.step(0.5 * lr * (1.0 + np.cos(np.pi * step / total)))
            step += 1
    return model, mean, std


@functools.lru_cache(maxsize=1)
def basicmotions_model():
    """(model, norm_mean, norm_std, TRAIN split): the seq-attn model trained on BasicMotions
    TRAIN (60 epochs, defaults), built once per process for every test that needs it."""
    from tinyattn.data.timeseries import load_ts_dataset

    train = load_ts_dataset("basicmotions", "train")
    model, mean, std = train_seq(train.X, train.lengths, train.y, train.n_classes, epochs=60)
    return model, mean, std, train


def model_file(model, mean, std, class_names):
    """The ModelFile of a seq model (as `tinyattn train` saves it, without data meta)."""
    from tinyattn.learn.model import ModelFile

    meta = {"ops": model.ops, "class_names": list(class_names)}
    return ModelFile.from_params(meta, model.state_dict(), mean, std)


def random_seq_case(seed, T, C, K, config, n_windows, hot=1.0):
    """A random-weight seq model quantized on random unequal-length windows, and test windows:
    (ModelFile, X [80, T, C], lengths, test windows [n_windows, T, C], their lengths). `hot`
    scales the attention's Wq, Wk, bq, bk: large score scales (the softmax a hard max)."""
    from tinyattn.data.timeseries import fit_channel_standardizer
    from tinyattn.learn.seqmodel import build_seq_model

    rng = np.random.default_rng(seed)
    X = rng.normal(1.0, 3.0, size=(80, T, C)) * rng.uniform(0.5, 2.0, size=C)
    lengths = rng.integers(1, T + 1, size=80)
    mean, std = fit_channel_standardizer(X, lengths)
    model = build_seq_model(T, C, K, config, seed=seed)
    model.theta[:] = rng.normal(0.0, 0.4, size=model.theta.shape)  # biases and pos too
    if hot != 1.0:
        state = model.state_dict()
        for key in state:
            if key.endswith((".Wq", ".Wk", ".bq", ".bk")):
                state[key] *= hot
        model.load_state_dict(state)
    npz = model_file(model, mean, std, [f"c{i}" for i in range(K)])
    Xt = rng.normal(1.0, 3.0, size=(n_windows, T, C)) * rng.uniform(0.5, 2.0, size=C)
    return npz, X, lengths, Xt, rng.integers(1, T + 1, size=n_windows)


VIEWS = {"log": {"log_view": True}, "clip": {"clip": 95.0}}  # view_model's (SeqAttnConfig)


def view_windows(seed: int = 4, N: int = 24, T: int = 16, C: int = 2):
    """(X [N, T, C], lengths, y): heavy-tailed positive levels (a power draw's shape), 3
    classes, unequal lengths, zeros past each length."""
    rng = np.random.default_rng(seed)
    y = np.arange(N) % 3
    X = np.exp(rng.normal(0.5 * y[:, None, None], 1.0, (N, T, C)))
    lengths = rng.integers(6, T + 1, N)
    X[np.arange(T)[None, :] >= lengths[:, None]] = 0.0
    return X, lengths, y


def view_model(view: str):
    """(train result, blob bytes, (X, lengths, y)): a small seq-attn model with the input view
    `view` ("log" or "clip", `VIEWS`), trained 8 epochs on `view_windows()`, quantized."""
    from tinyattn.intmodel.blob import blob_bytes
    from tinyattn.intmodel.quantize import quantize
    from tinyattn.learn.seqmodel import SeqAttnConfig
    from tinyattn.learn.seqtrain import train_seq as train_windows
    from tinyattn.learn.train import TrainConfig, npz_model

    X, n, y = view_windows()
    arch = SeqAttnConfig(patch=4, embed_dim=8, num_heads=2, blocks=1, ff_dim=16, **VIEWS[view])
    res = train_windows(X, n, y, 3, arch, TrainConfig(epochs=8))
    return res, blob_bytes(quantize(npz_model(res, ["a", "b", "c"]), X, n)), (X, n, y)
