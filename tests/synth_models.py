# Host (CPython): synthetic model files for the quantization / blob tests.
"""Random-weight models following docs/model-format.md, so the quantization, blob and export
tests do not depend on training (`tinyattn train`).

- `iris_attn_ops(F, C)`: the reference architecture's op list (dense 32, relu, reshape [4, 8],
  attention E=8 H=2, avgpool, dense C).
- `random_model(ops, seed)`: an `ModelFile` with Xavier-like weights and small random biases
  (dense, attention and myattn ops), random normalization unless given.
- `tutorial_myattn_ops(C)`: MyAttn at the PyTorch tutorial's sizes (32, 32, 32, 64, 32) on a
  flat input `Q ‖ K ‖ V` (2112 features), then a dense layer to C classes.
- `save_npz(path, model)`: write it as `build/model.npz` would be written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tinyattn.learn.model import ModelFile


def iris_attn_ops(n_features: int = 4, n_classes: int = 3) -> list[dict[str, Any]]:
    return [
        {"op": "dense", "in": n_features, "out": 32, "bias": True},
        {"op": "relu"},
        {"op": "reshape", "shape": [4, 8]},
        {"op": "attention", "embed_dim": 8, "num_heads": 2, "bias": True},
        {"op": "avgpool"},
        {"op": "dense", "in": 8, "out": n_classes, "bias": True},
    ]


TUTORIAL = (32, 32, 32, 64, 32)  # query, key, value1, value2, output sizes (DESIGN §8)


def tutorial_myattn_ops(n_classes: int = 4) -> list[dict[str, Any]]:
    q, k, v1, v2, out = TUTORIAL
    return [
        {"op": "myattn", "mode": "explicit", "query_size": q, "key_size": k,
         "value_size1": v1, "value_size2": v2, "output_size": out, "bias": True},
        {"op": "dense", "in": out, "out": n_classes, "bias": True},
    ]  # fmt: skip


def param_shapes(ops: list[dict[str, Any]]) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for i, op in enumerate(ops):
        if op["op"] == "dense":
            shapes[f"p{i}.W"] = (op["out"], op["in"])
            if op.get("bias", True):
                shapes[f"p{i}.b"] = (op["out"],)
        elif op["op"] == "attention":
            E = op["embed_dim"]
            for p in "qkvo":
                shapes[f"p{i}.W{p}"] = (E, E)
                if op.get("bias", True):
                    shapes[f"p{i}.b{p}"] = (E,)
        elif op["op"] == "myattn":
            q, k = op["query_size"], op["key_size"]
            v1, v2, out = op["value_size1"], op["value_size2"], op["output_size"]
            for p, n_out, n_in in (("a", v1, q + k), ("c", out, q + v2)):
                shapes[f"p{i}.W{p}"] = (n_out, n_in)
                if op.get("bias", True):
                    shapes[f"p{i}.b{p}"] = (n_out,)
    return shapes


def random_model(
    ops: list[dict[str, Any]],
    seed: int = 0,
    n_features: int = 4,
    class_names: list[str] | None = None,
    norm: tuple[np.ndarray, np.ndarray] | None = None,
    dataset: str = "iris",
    train_idx: list[int] | None = None,
    test_idx: list[int] | None = None,
) -> ModelFile:
    rng = np.random.default_rng(seed)
    params = {}
    for key, shape in param_shapes(ops).items():
        if len(shape) == 2:
            a = np.sqrt(6.0 / (shape[0] + shape[1]))
            params[key] = rng.uniform(-a, a, size=shape)
        else:
            params[key] = rng.normal(0.0, 0.1, size=shape)
    n_classes = ops[-1]["out"]
    if class_names is None:
        class_names = [f"class_{c}" for c in range(n_classes)]
    if norm is None:
        norm = (rng.normal(0, 1, n_features), rng.uniform(0.5, 2.0, n_features))
    meta = {
        "format": "tinyattn-model",
        "version": 1,
        "model": "synthetic",
        "dataset": dataset,
        "feature_names": [f"f{j}" for j in range(n_features)],
        "class_names": class_names,
        "ops": ops,
        "train": {"seed": seed, "train_idx": train_idx or [], "test_idx": test_idx or []},
    }
    mean, std = np.asarray(norm[0], float), np.asarray(norm[1], float)
    return ModelFile.from_params(meta, params, mean, std)


def save_npz(path: str | Path, model: ModelFile) -> Path:
    path = Path(path)
    np.savez(
        path,
        meta=np.array(json.dumps(model.meta)),
        norm_mean=model.norm_mean,
        norm_std=model.norm_std,
        **model.params,
    )
    return path


def iris_synthetic(seed: int = 1) -> tuple[ModelFile, np.ndarray, np.ndarray]:
    """A random-weight model of the reference architecture on Iris: `(model, X_raw, y)`.

    Normalization and the split are made the way training makes them (stratified 80/20, seed 0),
    so its blob has exactly the layout and size of the reference blob.
    """
    from tinyattn.data.tabular import fit_standardizer, load_dataset, stratified_split

    ds = load_dataset("iris")
    train_idx, test_idx = stratified_split(ds.y, 0.2, 0)
    mean, std = fit_standardizer(ds.rows[train_idx])
    model = random_model(
        iris_attn_ops(ds.n_features, ds.n_classes),
        seed,
        ds.n_features,
        ds.class_names,
        (mean, std),
        "iris",
        train_idx.tolist(),
        test_idx.tolist(),
    )
    return model, ds.rows, ds.y
