"""Host (CPython): training-time benchmark — our NumPy `iris-attn` vs the same model in PyTorch.

Both sides train the same architecture from the same initial weights on the same standardized
Iris train split, with the same minibatch order, epochs, batch size, optimizer (AdamW, decay on
weight matrices only), learning-rate schedule and dtype (float64), in the same process. Only the
training loop is timed (no per-epoch evaluation); each side runs `repeats` times and the median
wall time is reported. As a check that the work is the same, the final parameters of the two
runs are compared (they agree to rounding).

The PyTorch twin uses `torch.nn.Linear` and `torch.nn.MultiheadAttention(batch_first=True)`,
with our `Wqkv` as its `in_proj_weight` and `Wo` as `out_proj.weight`.

`bench_train_seq()` does the same for the BasicMotions `seq-attn` model (issue 11, must-show 7;
target NumPy <= 1x PyTorch): its defaults (`tinyattn.learn.seqdefaults`: architecture, epochs,
batch size, AdamW, cosine rate, label smoothing, augmentation, weight averaging) on the 40
standardized TRAIN windows, ours `seqtrain.fit_seq` against the twin
`tinyattn.tools.torch_twins.SeqAttnTorch` in the same loop (minibatch order and augmented
batches drawn by the same NumPy generator, outside neither side's timing: both loops include
them; the epoch-end weight average by the same `seqtrain.WeightAverager`), float64 on both sides.

    .venv/bin/python -m tinyattn.tools.bench_train [--epochs N] [--batch-size B] [--repeats R]
    .venv/bin/python -m tinyattn.tools.bench_train --seq    # the BasicMotions seq-attn model too

`tinyattn bench --train` calls `bench_train()` and prints the same table; `bench_train_seq()`
gives the seq row in the same format.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from typing import Any

import numpy as np

from tinyattn.data.tabular import load_dataset, standardize, stratified_split
from tinyattn.learn.model import Sequential, build_model
from tinyattn.learn.train import TrainConfig, fit, fit_scaling, learning_rate


def _torch_twin(model: Sequential):
    """An `nn.Module` computing the same function as `iris-attn`, holding a copy of its weights."""
    import torch

    dense1, _, reshape, attn, _, dense2 = model.layers
    tokens, embed_dim = reshape.shape

    class IrisAttn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = torch.nn.Linear(dense1.n_in, dense1.n_out, dtype=torch.float64)
            self.attn = torch.nn.MultiheadAttention(
                attn.embed_dim, attn.num_heads, batch_first=True, dtype=torch.float64
            )
            self.fc2 = torch.nn.Linear(dense2.n_in, dense2.n_out, dtype=torch.float64)

        def forward(self, x):
            h = torch.relu(self.fc1(x)).reshape(-1, tokens, embed_dim)  # (B, S, E)
            a, _ = self.attn(h, h, h, need_weights=False)
            return self.fc2(a.mean(dim=1))  # (B, C)

    twin = IrisAttn()
    with torch.no_grad():
        for dst, src in [
            (twin.fc1.weight, dense1.W), (twin.fc1.bias, dense1.b),
            (twin.attn.in_proj_weight, attn.Wqkv), (twin.attn.in_proj_bias, attn.bqkv),
            (twin.attn.out_proj.weight, attn.Wo), (twin.attn.out_proj.bias, attn.bo),
            (twin.fc2.weight, dense2.W), (twin.fc2.bias, dense2.b),
        ]:  # fmt: skip
            dst.copy_(torch.from_numpy(src))
    return twin


def _twin_params(twin) -> np.ndarray:
    """The twin's parameters flattened in our `theta` order."""
    order = [
        twin.fc1.weight, twin.fc1.bias, twin.attn.in_proj_weight, twin.attn.out_proj.weight,
        twin.attn.in_proj_bias, twin.attn.out_proj.bias, twin.fc2.weight, twin.fc2.bias,
    ]  # fmt: skip
    return np.concatenate([p.detach().numpy().ravel() for p in order])


def _fit_torch(
    twin, x: np.ndarray, y: np.ndarray, config: TrainConfig,
    lengths: np.ndarray | None = None, augment=None, average=None,
) -> None:  # fmt: skip
    """Our training loop in PyTorch: `tinyattn.learn.train.fit` on rows, or with `lengths`
    `seqtrain.fit_seq` on windows (augmentation drawn from the same NumPy generator; weight
    averaging by the same `seqtrain.WeightAverager` on the flat parameter vector). The same
    minibatches, AdamW groups (no decay on biases and the positional embedding) and rates."""
    import torch
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    from tinyattn.learn.seqtrain import WeightAverager, augment_batch

    decay = [p for n, p in twin.named_parameters() if p.ndim == 2 and n != "pos"]
    no_decay = [p for n, p in twin.named_parameters() if p.ndim != 2 or n == "pos"]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr,
    )  # fmt: skip
    rng = np.random.default_rng([config.seed, 1])  # the same minibatch order as ours
    N, bs = len(x), config.batch_size
    total_steps = config.epochs * -(-N // bs)
    yt = torch.from_numpy(y)
    aug = augment if augment is not None and augment.active else None
    on = average is not None and average.active
    avg = WeightAverager(average, config.epochs) if on else None
    step = 0
    twin.train()
    for epoch in range(config.epochs):
        order = rng.permutation(N)
        for start in range(0, N, bs):
            idx = order[start : start + bs]
            if lengths is None:
                logits = twin(torch.from_numpy(x[idx]))
            else:
                xb, nb = x[idx], lengths[idx]
                if aug is not None:
                    xb, nb = augment_batch(xb, nb, aug, rng)
                logits = twin(torch.from_numpy(xb), torch.from_numpy(nb))
            loss = torch.nn.functional.cross_entropy(
                logits, yt[idx], label_smoothing=config.label_smoothing
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            lr = learning_rate(config, step, total_steps)
            for group in opt.param_groups:
                group["lr"] = lr
            opt.step()
            step += 1
        if avg is not None:
            avg.update(epoch, parameters_to_vector(twin.parameters()).detach().numpy())
    if avg is not None and avg.value is not None:
        with torch.no_grad():
            vector_to_parameters(torch.from_numpy(avg.value), twin.parameters())


def bench_train(
    epochs: int | None = None,
    batch_size: int | None = None,
    repeats: int = 3,
    torch_threads: int | None = 1,
) -> dict[str, Any]:
    """Median training wall time of ours and of PyTorch (same work); `ratio = ours / torch`.

    `torch_threads=1` (default) is PyTorch's best case for a model this small: its intra-op
    threads only add synchronization (and suffer when other processes share the cores);
    None keeps PyTorch's own setting. Without PyTorch installed the torch fields are None and
    `note` says how to install it.
    """
    config = TrainConfig()
    config = replace(
        config,
        epochs=config.epochs if epochs is None else epochs,
        batch_size=config.batch_size if batch_size is None else batch_size,
    )
    data = load_dataset("iris")
    train_idx, _ = stratified_split(data.y, config.test_fraction, config.seed)
    mean, std = fit_scaling(data.rows[train_idx], config.scaling)  # as `tinyattn train`
    X, y = standardize(data.rows[train_idx], mean, std), data.y[train_idx]
    result: dict[str, Any] = {
        "model": config.model, "epochs": config.epochs, "batch_size": config.batch_size,
        "steps": config.epochs * -(-len(y) // config.batch_size), "repeats": repeats,
        "optimizer": "AdamW", "dtype": "float64", "numpy_version": np.__version__,
    }  # fmt: skip

    ours_s, ours_theta = [], None
    for _ in range(repeats):
        model = build_model(config.model, data.n_features, data.n_classes, seed=config.seed)
        t0 = time.perf_counter()
        fit(model, X, y, config)
        ours_s.append(time.perf_counter() - t0)
        ours_theta = model.theta.copy()
    result["numpy_seconds"] = statistics.median(ours_s)
    result["numpy_train_accuracy"] = float(np.mean(model.predict(X) == y))

    try:
        import torch
    except ImportError:
        result.update(torch_seconds=None, ratio=None, torch_version=None,
                      note="PyTorch not installed; run 'make install-oracle'")  # fmt: skip
        return result
    torch_s, threads_before = [], torch.get_num_threads()
    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    try:
        for _ in range(repeats):
            model = build_model(config.model, data.n_features, data.n_classes, seed=config.seed)
            twin = _torch_twin(model)
            t0 = time.perf_counter()
            _fit_torch(twin, X, y, config)
            torch_s.append(time.perf_counter() - t0)
        threads_used = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads_before)
    twin.eval()
    with torch.no_grad():
        torch_pred = twin(torch.from_numpy(X)).argmax(dim=1).numpy()
    result.update(
        torch_seconds=statistics.median(torch_s),
        torch_version=torch.__version__,
        torch_threads=threads_used,
        torch_train_accuracy=float(np.mean(torch_pred == y)),
        max_param_diff=float(np.max(np.abs(_twin_params(twin) - ours_theta))),
    )
    result["ratio"] = result["numpy_seconds"] / result["torch_seconds"]
    return result


def bench_train_seq(
    epochs: int | None = None,
    batch_size: int | None = None,
    repeats: int = 3,
    torch_threads: int | None = 1,
    dataset: str = "basicmotions",
) -> dict[str, Any]:
    """`bench_train` for the `seq-attn` model of `dataset` with its defaults (same fields)."""
    from tinyattn.data.timeseries import (
        fit_channel_standardizer,
        load_ts_dataset,
        standardize_windows,
    )
    from tinyattn.learn.seqdefaults import seq_defaults
    from tinyattn.learn.seqmodel import build_seq_model, default_max_steps
    from tinyattn.learn.seqtrain import fit_seq

    d = seq_defaults(dataset)
    if d.distill.active:  # the twin replays one fit_seq; a distilled default trains teachers too
        raise ValueError(f"bench_train: {dataset}'s default distills from teachers; the PyTorch "
                         "twin replays fit_seq without distillation (not twinned)")  # fmt: skip
    config = replace(
        d.train,
        epochs=d.train.epochs if epochs is None else epochs,
        batch_size=d.train.batch_size if batch_size is None else batch_size,
    )
    ds = load_ts_dataset(dataset, "train")
    T = default_max_steps(ds.lengths, d.arch.patch)
    n = np.minimum(ds.lengths, T)
    mean, std = fit_channel_standardizer(ds.X, ds.lengths)
    x = standardize_windows(ds.X[:, :T], n, mean, std)  # (N, T, C)
    y = ds.y

    def build():
        return build_seq_model(T, ds.n_channels, ds.n_classes, d.arch, seed=config.seed)

    result: dict[str, Any] = {
        "model": f"seq-attn {dataset}", "epochs": config.epochs,
        "batch_size": config.batch_size, "steps": config.epochs * -(-len(y) // config.batch_size),
        "repeats": repeats, "optimizer": "AdamW", "dtype": "float64",
        "numpy_version": np.__version__,
    }  # fmt: skip
    ours_s = []
    for _ in range(repeats):
        model = build()
        t0 = time.perf_counter()
        fit_seq(model, x, n, y, config, d.augment, average=d.average)
        ours_s.append(time.perf_counter() - t0)
    result["numpy_seconds"] = statistics.median(ours_s)
    result["numpy_train_accuracy"] = float(np.mean(model.predict(x, n) == y))
    ours = {k: v.copy() for k, (v, _) in model.named_parameters().items()}

    try:
        import torch

        from tinyattn.tools.torch_twins import SeqAttnTorch
    except ImportError:
        result.update(torch_seconds=None, ratio=None, torch_version=None,
                      note="PyTorch not installed; run 'make install-oracle'")  # fmt: skip
        return result
    torch_s, threads_before = [], torch.get_num_threads()
    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    try:
        for _ in range(repeats):
            twin = SeqAttnTorch(build())
            t0 = time.perf_counter()
            _fit_torch(twin, x, y, config, n, d.augment, d.average)
            torch_s.append(time.perf_counter() - t0)
        threads_used = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads_before)
    twin.eval()
    with torch.no_grad():
        torch_pred = twin(torch.from_numpy(x), torch.from_numpy(n)).argmax(dim=1).numpy()
    theirs = twin.named_tensors()
    result.update(
        torch_seconds=statistics.median(torch_s),
        torch_version=torch.__version__,
        torch_threads=threads_used,
        torch_train_accuracy=float(np.mean(torch_pred == y)),
        max_param_diff=max(float(np.abs(ours[k] - theirs[k]).max()) for k in ours),
    )
    result["ratio"] = result["numpy_seconds"] / result["torch_seconds"]
    return result


def format_table(r: dict[str, Any], target: float = 0.5) -> str:
    """A small text table of a `bench_train` result."""
    head = (
        f"train {r['model']}: {r['epochs']} epochs, batch {r['batch_size']}, {r['steps']} "
        f"{r['optimizer']} steps, {r['dtype']}, median of {r['repeats']}"
    )
    lines = [head, f"{'':<28}{'wall s':>8}{'ms/step':>9}{'train acc':>11}"]
    lines.append(
        f"{'NumPy ' + r['numpy_version']:<28}{r['numpy_seconds']:8.3f}"
        f"{1e3 * r['numpy_seconds'] / r['steps']:9.3f}{r['numpy_train_accuracy']:11.3f}"
    )
    if r["torch_seconds"] is None:
        lines.append(f"{'PyTorch':<28}{'—':>8}   ({r['note']})")
        return "\n".join(lines)
    torch_name = f"PyTorch {r['torch_version']} ({r['torch_threads']} thr)"
    lines.append(
        f"{torch_name:<28}{r['torch_seconds']:8.3f}"
        f"{1e3 * r['torch_seconds'] / r['steps']:9.3f}{r['torch_train_accuracy']:11.3f}"
    )
    lines.append(
        f"ratio NumPy/PyTorch = {r['ratio']:.2f} (target <= {target:g}); "
        f"final weights differ by at most {r['max_param_diff']:.1e}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="training time: our NumPy vs PyTorch")
    parser.add_argument("--epochs", type=int, help="default: the train default")
    parser.add_argument("--batch-size", type=int, help="default: the train default")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--torch-threads", type=int, default=1, help="PyTorch threads (1, its fastest; 0 = own)"
    )
    parser.add_argument(
        "--seq", action="store_true", help="also the BasicMotions seq-attn model (its defaults)"
    )
    args = parser.parse_args(argv)
    threads = args.torch_threads or None
    print(format_table(bench_train(args.epochs, args.batch_size, args.repeats, threads)))
    if args.seq:
        r = bench_train_seq(args.epochs, args.batch_size, args.repeats, threads)
        print()
        print(format_table(r, target=1.0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
