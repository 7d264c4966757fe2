"""Host (CPython): where a windows model's int8 accuracy goes, op by op, on TRAIN folds.

Cross-validation inside TRAIN (the TEST file is never read), as the search scores a
candidate: `--repeats` × `--cv` stratified folds (default 2 × 5), repeat r with the seed
`--seed + r`. Each fold trains the model of the `tinyattn train` flags given (the dataset's
defaults otherwise), quantizes it on its own training windows as `export` does, and
classifies its held-out windows in these ways:

- `float`: the float64 model;
- `input`: the float model on the int8 input, dequantized (`xq · s_in`): what the input's
  int8 grid alone costs;
- `op k (kind)`: ops 0…k run in the integer reference (`intref`), their int8 output
  dequantized with its scale and the float ops k+1… after it;
- `int8`: the whole integer path (the board's logits: the last op on `op k`'s output).

The columns are the mean accuracy ± its standard error over the folds; `paired` lines give the
fold-by-fold difference `float − input` and `input − int8` (mean ± standard error). With
`--ensemble K` each fold also trains K seeds of the model and scores the mean of their float
probabilities beside their mean accuracy (what averaging seeds would give, before any
distillation). docs/search.md "Where ACSF1's last points are not" was measured with:

    .venv/bin/python -m tinyattn.tools.dev.int8_loss --dataset acsf1 --patch 8 --embed 8 \\
        --heads 2 --blocks 0 --stem conv --stem-width 8 --stem-dilations 2,4 --stem-stride 1 \\
        --stem-norm --lr 0.01 --weight-decay 0.01 --label-smoothing 0 --epochs 150 \\
        [--ensemble 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace

import numpy as np


def parse(argv: list[str] | None) -> argparse.Namespace:
    from tinyattn.learn.traincli import add_arguments

    p = argparse.ArgumentParser(
        prog="python -m tinyattn.tools.dev.int8_loss",
        description="where a windows model's int8 accuracy goes, op by op, on TRAIN folds "
        "(the model: tinyattn train's flags)",
    )
    add_arguments(p)
    p.add_argument("--ensemble", type=int, default=0, metavar="K",
                   help="also score the mean probabilities of K seeds a fold (0: none)")
    args = p.parse_args(argv)
    args.cv = 5 if args.cv is None else args.cv  # as the search: 2 x 5 folds
    args.repeats = 2 if args.repeats is None else args.repeats
    if args.cv < 2 or args.repeats < 1 or args.ensemble < 0:
        p.error("--cv must be at least 2, --repeats at least 1, --ensemble 0 or more")
    if args.search or args.on_board:
        p.error("--search and --on-board are tinyattn train's; this tool trains the one "
                "model the flags give, on the host")
    if args.ts is None and args.dataset in (None, "iris", "wine"):
        p.error("a windows dataset: --dataset NAME (not iris or wine) or --ts TRAIN.ts")
    return args


def out_scale(op, s: float) -> float:
    """The scale of an int8 op's output (`masked_pool` keeps its input's)."""
    return float(op.fparams.get("s_y", op.fparams.get("s_out", s)))


def op_by_op(result, class_names, X_calib, len_calib, X, lengths) -> tuple[list[str], np.ndarray]:
    """Column names and predicted classes `[columns, N]` of held-out windows `X`, `lengths`
    (see the module docstring); the int8 path calibrated on `X_calib`, `len_calib`."""
    from tinyattn.data.windows import valid_lengths
    from tinyattn.intmodel.floatref import _seq_float_forward as float_forward
    from tinyattn.intmodel.floatref import fit_to_model, seq_float_ops, seq_groups, seq_patches
    from tinyattn.intmodel.intref import quantize_input, seq_op
    from tinyattn.intmodel.quantize import quantize
    from tinyattn.learn.train import npz_model

    model = npz_model(result, class_names)
    Xc, nc, _ = fit_to_model(X_calib, len_calib, result.max_steps)
    spec = quantize(model, Xc, nc)
    Xt, nt, _ = fit_to_model(X, lengths, result.max_steps)
    xq = quantize_input(spec, Xt, nt)
    fops = seq_float_ops(model)
    e = spec.ops[0].iparams
    T, C, P = e["T"], e["C"], e["P"]
    names = ["float", "input"] + [f"op {k} ({op.kind})" for k, op in enumerate(spec.ops[:-1])]
    names.append("int8")
    pred = np.zeros((len(names), len(Xt)), np.int64)
    xn = model.normalize(Xt, nt)
    n = valid_lengths(xn, nt, T)

    def floats(ops, x):
        return np.argmax(float_forward(ops, x, lambda op: op.tensors, None,
                                            lambda op: op.iparams["H"]), axis=1)  # fmt: skip

    for S_n, idx in seq_groups(n, P):
        pred[0, idx] = floats(fops, seq_patches(xn[idx], n[idx], S_n, P))
        h = xq[idx, : S_n * P * C].astype(np.int64).reshape(len(idx), S_n, P * C)
        s = float(spec.ops[0].fparams["s_in"])
        pred[1, idx] = floats(fops, h * s)
        for k, op in enumerate(spec.ops[:-1]):
            h = seq_op(h, op, f"op {k} ({op.kind})")
            s = out_scale(op, s)
            pred[2 + k, idx] = floats(fops[k + 1 :], h * s)
        last = spec.ops[-1]
        pred[-1, idx] = np.argmax(seq_op(h, last, f"op {len(spec.ops) - 1} ({last.kind})"), axis=1)
    return names, pred


def mean_se(v: list[float]) -> str:
    se = statistics.stdev(v) / len(v) ** 0.5 if len(v) > 1 else 0.0
    return f"{statistics.fmean(v):.3f} ± {se:.3f}"


def main(argv: list[str] | None = None) -> int:
    from tinyattn.data.tabular import stratified_kfold
    from tinyattn.errors import CLIError
    from tinyattn.learn.seqcli import load_windows, seq_setup
    from tinyattn.learn.seqtrain import train_seq

    args = parse(argv)
    try:
        data = load_windows(args)
        arch, config, augment, average, distill = seq_setup(args, data.train)
    except CLIError as exc:
        print(f"int8_loss: {exc}", file=sys.stderr)
        return 2
    ds = data.train
    cols: dict[str, list[float]] = {}
    ens: dict[str, list[float]] = {"members": [], "ensemble": []}
    for r in range(args.repeats):
        cfg = replace(config, seed=config.seed + r)
        for f, (tr, te) in enumerate(stratified_kfold(ds.y, args.cv, cfg.seed,
                                                      ds.class_names, ds.unit)):  # fmt: skip
            res = train_seq(ds.X[tr], ds.lengths[tr], ds.y[tr], ds.n_classes, arch, cfg,
                            augment, average=average, distill=distill)  # fmt: skip
            names, pred = op_by_op(res, ds.class_names, ds.X[tr], ds.lengths[tr], ds.X[te],
                                   ds.lengths[te])  # fmt: skip
            acc = (pred == ds.y[te]).mean(axis=1)
            for name, a in zip(names, acc, strict=True):
                cols.setdefault(name, []).append(float(a))
            pairs = zip(names, acc, strict=True)
            line = f"r{r}f{f}: " + ", ".join(f"{n} {a:.3f}" for n, a in pairs)
            if args.ensemble:
                probs, accs = [], []
                for j in range(args.ensemble):
                    m = res if j == 0 else train_seq(
                        ds.X[tr], ds.lengths[tr], ds.y[tr], ds.n_classes, arch,
                        replace(cfg, seed=cfg.seed + 1000 * j), augment, average=average,
                        distill=distill)  # fmt: skip
                    xn, n = m.normalize(ds.X[te], ds.lengths[te])
                    z = m.model.forward(xn, lengths=n)
                    p = np.exp(z - z.max(axis=1, keepdims=True))
                    probs.append(p / p.sum(axis=1, keepdims=True))
                    accs.append(float(np.mean(probs[-1].argmax(axis=1) == ds.y[te])))
                ens["members"].append(statistics.fmean(accs))
                ens["ensemble"].append(float(np.mean(np.mean(probs, axis=0).argmax(axis=1)
                                                     == ds.y[te])))  # fmt: skip
                line += f"; {args.ensemble} seeds {ens['members'][-1]:.3f}, their mean " \
                        f"probabilities {ens['ensemble'][-1]:.3f}"
            print(line, file=sys.stderr, flush=True)
    k = len(cols["float"])
    print(f"{data.name}: {k} folds of TRAIN ({args.repeats} x {args.cv}), the TEST "
          "file not read; accuracy mean ± standard error over the folds")  # fmt: skip
    width = max(len(n) for n in cols)
    for name, v in cols.items():
        print(f"  {name:<{width}}  {mean_se(v)}")
    for a, b in (("float", "input"), ("input", "int8")):
        diff = [x - y for x, y in zip(cols[a], cols[b], strict=True)]
        print(f"  paired {a} − {b}: {mean_se(diff)}")
    if args.ensemble:
        diff = [x - y for x, y in zip(ens["ensemble"], ens["members"], strict=True)]
        print(f"  {args.ensemble} seeds (float): each {mean_se(ens['members'])}, their mean "
              f"probabilities {mean_se(ens['ensemble'])}; paired gain {mean_se(diff)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
