"""Host (CPython): a Sequential model built from the op list, and the `.npz` model file.

`build_from_ops(ops)` turns the op list of `docs/model-format.md` into layers; `build_model(
name, n_features, n_classes)` gives a named architecture. Both see each of the F features as a
token of 8 (so any numeric CSV works: Iris has 4 tokens, Wine 13):

    iris-attn:   dense(F->8F) -> relu -> reshape [F, 8] -> attention(E=8, H=2) -> avgpool
                 -> dense(8->C)                       (issue 2; 475 parameters for F=4, C=3)
    iris-myattn: dense(F->8F) -> relu -> reshape [F, 8] -> myattn pool (Q = K = mean token,
                 V = tokens; out 16) -> relu -> dense(16->C)      (issue 7, DESIGN §8)
    seq-attn:    windows [T, C]: patch_embed -> pos_add -> L x (attention + ff, residual)
                 -> masked_pool -> dense   (issue 11, DESIGN §9; host/learn/seqmodel.py builds it)
    seq-rocket:  windows [T, C]: rocket (MiniRocket's PPV features, standardized) -> dense
                 (the ridge head; issue 39, DESIGN §16; host/learn/rocketmodel.py fits it)

A seq model's file stores per-channel `norm_mean`/`norm_std` `[C]`, and its meta says where its
windows came from (`ts_data_meta`): the vendored archive problem (`dataset`) or the `.ts` files
(`ts_train`, `ts_test`); the TRAIN file is its train split, the TEST file its test split.

`Sequential` keeps all parameters in one flat float64 vector `theta` (and gradients in `grad`),
each layer's arrays being views into it, so an optimizer step is a few vectorized calls.
`forward(x_norm)` (inference by default) takes the normalized features `[B, F]` and returns
the logits `[B, C]`; `predict(x_norm)` returns class indices.

`save_model` / `load_model` write and read exactly the `docs/model-format.md` file: `meta`
(JSON in a 0-d str array), `norm_mean`, `norm_std` and `p{i}.{name}` float64 arrays, loaded
with `allow_pickle=False`.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinyattn.atomic import atomic_open
from tinyattn.data.windows import as_windows, model_view, normalize_windows
from tinyattn.learn.rocketmodel import build_rocket_from_ops
from tinyattn.learn.seqmodel import build_seq_from_ops, build_seq_model
from tinyattn.learn.sequential import MYATTN_MODES as MYATTN_MODES
from tinyattn.learn.sequential import SEQ_KINDS as SEQ_KINDS
from tinyattn.learn.sequential import Sequential
from tinyattn.learn.sequential import layer_from_op as layer_from_op

FORMAT = "tinyattn-model"
VERSION = 1
MODELS = ("iris-attn", "iris-myattn", "seq-attn", "seq-rocket")
# op 0 of a model that reads windows [T, C] -> the builder of its op list
WINDOW_MODELS = {"patch_embed": build_seq_from_ops, "rocket": build_rocket_from_ops}
EMBED_DIM = 8  # each feature becomes one token of 8
MYATTN_OUT = 16  # width of the myattn head's output


def _tokens(n_features: int) -> list[dict[str, Any]]:
    """dense(F -> 8F) -> relu -> reshape [F, 8]: one token of 8 per input feature."""
    return [
        {"op": "dense", "in": n_features, "out": n_features * EMBED_DIM, "bias": True},
        {"op": "relu"},
        {"op": "reshape", "shape": [n_features, EMBED_DIM]},
    ]


def iris_attn_ops(n_features: int, n_classes: int) -> list[dict[str, Any]]:
    """Op list of `iris-attn`: F tokens of 8, one attention block, mean over the tokens."""
    return _tokens(n_features) + [
        {"op": "attention", "embed_dim": EMBED_DIM, "num_heads": 2, "bias": True},
        {"op": "avgpool"},
        {"op": "dense", "in": EMBED_DIM, "out": n_classes, "bias": True},
    ]


def iris_myattn_ops(n_features: int, n_classes: int) -> list[dict[str, Any]]:
    """Op list of `iris-myattn`: F tokens of 8 pooled by MyAttn (Q = K = mean token)."""
    return _tokens(n_features) + [
        myattn_op("pool", EMBED_DIM, EMBED_DIM, n_features, EMBED_DIM, MYATTN_OUT),
        {"op": "relu"},
        {"op": "dense", "in": MYATTN_OUT, "out": n_classes, "bias": True},
    ]


def myattn_op(
    mode: str, q: int, k: int, v1: int, v2: int, out: int, bias: bool = True
) -> dict[str, Any]:
    """A `myattn` op dict (docs/model-format.md); mode "pool" needs q == k == v2."""
    return {"op": "myattn", "mode": mode, "query_size": q, "key_size": k, "value_size1": v1,
            "value_size2": v2, "output_size": out, "bias": bias}  # fmt: skip


def is_seq_ops(ops: list[dict[str, Any]]) -> bool:
    """An op list of a sequence model (`seq-attn`): op 0 is `patch_embed`."""
    return bool(ops) and ops[0].get("op") == "patch_embed"


def is_window_ops(ops: list[dict[str, Any]]) -> bool:
    """An op list of a model that reads windows (`seq-attn`, `seq-rocket`): op 0 is one of
    `WINDOW_MODELS`."""
    return bool(ops) and ops[0].get("op") in WINDOW_MODELS


def build_from_ops(ops: list[dict[str, Any]], seed: int = 0) -> Sequential:
    """A freshly initialized model (Xavier-uniform weights, zero biases) for an op list; a
    `SeqModel` (host/learn/seqmodel.py) when op 0 is `patch_embed`, a `RocketModel`
    (host/learn/rocketmodel.py) when it is `rocket`."""
    if is_window_ops(ops):  # windows: their own model kinds, not a stack of dense layers
        return WINDOW_MODELS[ops[0]["op"]](ops, seed)
    rng = np.random.default_rng(seed)
    return Sequential([layer_from_op(op, rng) for op in ops], [dict(op) for op in ops])


def build_model(
    name: str,
    n_features: int,
    n_classes: int,
    seed: int = 0,
    steps: int | None = None,
    config: Any = None,
) -> Sequential:
    """A named architecture for F features (F tokens); `iris-attn` has 475 parameters for 4
    features and 3 classes. `seq-attn` takes windows of `steps` (T) x `n_features` (C
    channels) and an optional `seqmodel.SeqAttnConfig`."""
    if name == "seq-attn":
        if steps is None:
            raise ValueError("seq-attn needs steps (T, e.g. seqmodel.default_max_steps)")
        return build_seq_model(steps, n_features, n_classes, config, seed)
    if name == "iris-attn":
        return build_from_ops(iris_attn_ops(n_features, n_classes), seed)
    if name == "iris-myattn":
        return build_from_ops(iris_myattn_ops(n_features, n_classes), seed)
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")


@dataclass
class ModelFile:
    """A trained model as its file holds it (docs/model-format.md): the model, its input
    normalization and its meta dict. The one trained-model type: training, export, the float
    and integer references and the report all read it (`load_model`, once)."""

    model: Sequential
    norm_mean: np.ndarray  # (F,)
    norm_std: np.ndarray  # (F,)
    meta: dict[str, Any]

    @classmethod
    def from_params(
        cls,
        meta: dict[str, Any],
        params: dict[str, np.ndarray],
        norm_mean: np.ndarray,
        norm_std: np.ndarray,
    ) -> ModelFile:
        """The model of `meta["ops"]` holding `params` (`p{i}.{name}` arrays, copied in as
        float64), as `load_model` makes it from a file."""
        model = build_from_ops(meta["ops"])
        model.load_state_dict(params)
        return cls(model, np.asarray(norm_mean, np.float64), np.asarray(norm_std, np.float64),
                   meta)  # fmt: skip

    @property
    def ops(self) -> list[dict[str, Any]]:
        return self.model.ops

    @property
    def params(self) -> dict[str, np.ndarray]:
        """`{"p{i}.{name}": array}`: views of the model's parameters (writing one changes
        the model)."""
        return {
            f"p{i}.{name}": value
            for i, layer in enumerate(self.model.layers)
            for name, value, _ in layer.collect_params()
        }

    def param(self, i: int, name: str) -> np.ndarray | None:
        """Parameter `name` of op i (a view), None if the op has none of that name."""
        for pname, value, _ in self.model.layers[i].collect_params():
            if pname == name:
                return value
        return None

    @property
    def class_names(self) -> list[str]:
        return list(self.meta["class_names"])

    @property
    def is_seq(self) -> bool:
        return is_seq_ops(self.model.ops)

    @property
    def is_windows(self) -> bool:
        """A model of windows (`seq-attn`, `seq-rocket`)."""
        return is_window_ops(self.model.ops)

    @property
    def takes_rows(self) -> bool:
        """Trained on rows of named features (a CSV, Iris, Wine): a row model, or a seq-attn
        model searched on rows as windows of one step (meta `input: "rows"`)."""
        return not self.is_windows or self.meta.get("input") == "rows"

    def normalize(self, X: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
        """Raw windows `[B, T', C]` -> the model's input, per channel `(X - norm_mean) /
        norm_std`, 0 past each window's `lengths`; rows `[B, F]` are windows of one step."""
        return normalize_windows(as_windows(X), lengths, self.norm_mean, self.norm_std,
                                 view=model_view(self.model.ops))

    def predict(self, X: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
        """Class indices `[B]` for raw (unnormalized) features `X [B, F]` (a seq model: raw
        windows `[B, T', C]` and their `lengths [B]`, None = every step valid)."""
        return self.model.predict(self.normalize(X, lengths), lengths)


def ts_data_meta(
    dataset: str | None = None,
    ts_train: str | Path | None = None,
    ts_test: str | Path | None = None,
) -> dict[str, Any]:
    """Where a seq model's windows came from, for its meta (`tinyattn train` merges it in):
    `{"dataset": "basicmotions"}` for a vendored archive problem, or `{"dataset": <problem
    name>, "ts_train": <absolute path>, "ts_test": <absolute path or None>}` for `--ts` files.
    `tinyattn export` reads the same keys back (`export.load_seq_data`)."""
    if ts_train is None:
        if dataset is None:
            raise ValueError("name a vendored dataset or the TRAIN .ts file")
        return {"dataset": dataset.lower()}
    meta: dict[str, Any] = {"ts_train": str(Path(ts_train).resolve())}
    meta["ts_test"] = None if ts_test is None else str(Path(ts_test).resolve())
    meta["dataset"] = dataset if dataset is not None else Path(ts_train).stem
    return meta


def predict(model: Sequential | ModelFile, x: np.ndarray) -> np.ndarray:
    """Class indices: raw features for a `ModelFile`, normalized features for a `Sequential`."""
    return model.predict(x)


def save_model(
    path: str | Path,
    model: Sequential,
    norm_mean: np.ndarray,
    norm_std: np.ndarray,
    meta: dict[str, Any],
) -> Path:
    """Write `docs/model-format.md` atomically (temp file + rename); returns the path."""
    path = Path(path)
    meta = {"format": FORMAT, "version": VERSION, **meta, "ops": model.ops}
    arrays = {
        "meta": np.array(json.dumps(meta)),
        "norm_mean": np.asarray(norm_mean, dtype=np.float64),
        "norm_std": np.asarray(norm_std, dtype=np.float64),
        **model.state_dict(),
    }
    with atomic_open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def read_npz(path: str | Path) -> tuple[dict[str, Any], np.ndarray, np.ndarray, dict]:
    """Read and check a `model.npz` (`allow_pickle=False`, docs/model-format.md):
    `(meta, norm_mean, norm_std, parameter arrays)`; ValueError naming what is wrong."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError:
        head = b"PK\x03\x04"  # np.load says what (not found, unreadable)
    if head != b"PK\x03\x04":  # an .npz is a zip archive; np.load would advise pickles
        raise ValueError(
            f"{path}: not a model file (a model file is the .npz 'tinyattn train' writes: a "
            "zip archive); give the model with --model FILE.npz"
            + (" (a CSV is training data: 'tinyattn train --csv FILE')"
               if path.suffix.lower() in (".csv", ".ts") else "")
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
    except FileNotFoundError:
        raise ValueError(f"{path}: not found; run 'tinyattn train --out {path}' first") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: not a readable .npz model file ({exc})") from None
    if "meta" not in arrays:
        raise ValueError(f"{path}: no 'meta' entry; not a tinyattn model file")
    meta = json.loads(str(arrays.pop("meta")))
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    if meta.get("version") != VERSION:
        raise ValueError(
            f"{path}: unsupported model format version {meta.get('version')}; "
            f"this tinyattn reads version {VERSION}, re-run 'tinyattn train'"
        )
    for key in ("norm_mean", "norm_std"):
        if key not in arrays:
            raise ValueError(f"{path}: missing {key}; re-run 'tinyattn train'")
    return meta, arrays.pop("norm_mean"), arrays.pop("norm_std"), arrays


def load_model(path: str | Path) -> ModelFile:
    """Read a `model.npz` and rebuild the model from its op list."""
    meta, norm_mean, norm_std, arrays = read_npz(path)
    model = build_from_ops(meta["ops"])
    try:
        model.load_state_dict(arrays)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return ModelFile(model, norm_mean, norm_std, meta)
