"""Host (CPython): accuracy benchmark — ours next to classical peers, on the same folds.

Every method sees exactly the same folds: repeated stratified k-fold from
`tinyattn.data.tabular.stratified_kfold` with split seeds 0..repeats-1 (the `tinyattn train --cv 5
--repeats 10` protocol). Ours is trained by `tinyattn.learn.train.cross_validate` with the default
`TrainConfig` (float64 test accuracy, and the int8 path each fold quantized on its own train
rows and run by the integer reference). The peers are scikit-learn's usual baselines with fixed,
untuned settings, each fitted on the fold's train rows (any scaling inside the pipeline, so it
too sees train rows only):

- LDA: `LinearDiscriminantAnalysis()` (scale-invariant; no scaler).
- logistic regression: `StandardScaler` + `LogisticRegression(C=100, max_iter=10000)`.
- RBF-SVM: `StandardScaler` + `SVC(kernel="rbf", C=1, gamma="scale")`.
- kNN: `StandardScaler` + `KNeighborsClassifier(n_neighbors=5)`.

scikit-learn is the optional extra `peers` (`make install-peers`); without it the peer rows
are skipped and the reason printed. Reported: mean ± std over all folds, and the spread (min to
max) of the per-repeat means, which shows how much the split alone moves a k-fold figure.

    .venv/bin/python -m tinyattn.tools.bench_accuracy            # or: make bench-accuracy
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from tinyattn.data.tabular import load_dataset, stratified_kfold
from tinyattn.learn.model import build_model
from tinyattn.learn.train import TrainConfig, cross_validate

DATASETS = ("iris", "wine")
MODELS = ("iris-attn", "iris-myattn")


def peers() -> tuple[dict[str, Callable[[], Any]], str | None]:
    """`({name: factory of an unfitted estimator}, None)`, or `({}, reason)` without sklearn."""
    try:
        from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
        from sklearn.linear_model import LogisticRegression
        from sklearn.neighbors import KNeighborsClassifier
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import SVC
    except ImportError as exc:
        return {}, f"scikit-learn not installed ({exc.name}); run 'make install-peers'"
    return {
        "LDA": lambda: LinearDiscriminantAnalysis(),
        "logistic regression (C=100)": lambda: make_pipeline(
            StandardScaler(), LogisticRegression(C=100, max_iter=10000)
        ),
        "RBF-SVM (C=1)": lambda: make_pipeline(StandardScaler(), SVC(kernel="rbf", C=1.0)),
        "kNN (k=5)": lambda: make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=5)),
    }, None


def _stats(acc: list[float], repeat_of: list[int]) -> dict[str, Any]:
    repeat_means = [
        float(np.mean([a for a, r in zip(acc, repeat_of, strict=True) if r == rep]))
        for rep in sorted(set(repeat_of))
    ]
    return {
        "mean": float(np.mean(acc)), "std": float(np.std(acc)), "folds": acc,
        "repeat_means": repeat_means,
    }  # fmt: skip


def bench_accuracy(
    datasets: tuple[str, ...] = DATASETS,
    models: tuple[str, ...] = MODELS,
    k: int = 5,
    repeats: int = 10,
    config: TrainConfig | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """`{"k", "repeats", "peers_skipped", "datasets": {name: {"rows", "methods": [...]}}}`;
    each method: name, params (ours), float and (ours) int8 statistics, seconds."""
    config = config or TrainConfig()
    makers, skipped = peers()
    out: dict[str, Any] = {"k": k, "repeats": repeats, "peers_skipped": skipped, "datasets": {}}
    for name in datasets:
        data = load_dataset(name)
        methods: list[dict[str, Any]] = []
        for model in models:
            if progress:
                progress(f"{name}: {model}")
            t0 = time.perf_counter()
            folds = cross_validate(data, k, replace(config, model=model, seed=0), repeats=repeats)
            rep = [f["repeat"] for f in folds]
            methods.append({
                "method": f"tinyattn {model}",
                "params": build_model(model, data.n_features, data.n_classes).n_params,
                "float": _stats([f["test_accuracy"] for f in folds], rep),
                "int8": _stats([f["int8_test_accuracy"] for f in folds], rep),
                "seconds": time.perf_counter() - t0,
            })  # fmt: skip
        for peer, make in makers.items():
            if progress:
                progress(f"{name}: {peer}")
            t0 = time.perf_counter()
            acc, rep = [], []
            for r in range(repeats):
                for tr, te in stratified_kfold(data.y, k, r):
                    est = make().fit(data.rows[tr], data.y[tr])
                    acc.append(float(np.mean(est.predict(data.rows[te]) == data.y[te])))
                    rep.append(r)
            methods.append({
                "method": peer, "params": None, "float": _stats(acc, rep), "int8": None,
                "seconds": time.perf_counter() - t0,
            })  # fmt: skip
        out["datasets"][name] = {"rows": len(data.y), "methods": methods}
    return out


def _cell(s: dict[str, Any] | None) -> str:
    return "—" if s is None else f"{s['mean']:.4f} ± {s['std']:.3f}"


def _spread(s: dict[str, Any]) -> str:
    return f"{min(s['repeat_means']):.3f}..{max(s['repeat_means']):.3f}"


def format_table(result: dict[str, Any]) -> str:
    k, repeats = result["k"], result["repeats"]
    lines = [
        f"accuracy: {repeats} x stratified {k}-fold CV (split seeds 0..{repeats - 1}), the same "
        "folds for every method;",
        f"mean ± std over {k * repeats} test folds; 'repeats' = range of the {repeats} "
        f"per-repeat means",
        f"{'dataset':<8} {'method':<30} {'params':>6}  {'float':<15} {'int8':<15} "
        f"{'repeats (float)':<15} {'s':>5}",
    ]
    for name, d in result["datasets"].items():
        for m in d["methods"]:
            params = "" if m["params"] is None else str(m["params"])
            lines.append(
                f"{name:<8} {m['method']:<30} {params:>6}  {_cell(m['float']):<15} "
                f"{_cell(m['int8']):<15} {_spread(m['float']):<15} {m['seconds']:5.1f}"
            )
    if result["peers_skipped"]:
        lines.append(f"peers skipped: {result['peers_skipped']}")
    return "\n".join(lines)


def main() -> None:
    result = bench_accuracy(progress=lambda what: print(f"  {what} ...", flush=True))
    print(format_table(result))


if __name__ == "__main__":
    main()
