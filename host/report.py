# Host (CPython): `tinyattn report` — PNG figures and an HTML/Markdown page for a trained model.
"""`tinyattn report [--model build/model.npz] [--blob build/model.bin] [--out build/report]
[--samples 0,50,100] [--csv FILE [--target COL]] [--json]`

Writes into `--out`:
- `curves.png`: loss and train/test accuracy per epoch (meta "history", docs/model-format.md);
- `confusion_float.png`, `confusion_int8.png`: confusion matrices on the test split and on all
  samples, for the trained float64 model and for the integer reference
  (`tinyattn.intmodel.intref`) on
  the exported blob;
- `attention_<i>.png` for each chosen sample `i`: per head, the attention matrix
  `A_h = softmax(Q_h K_hᵀ / √D)` of every `attention` op (DESIGN §3), and the weights over
  tokens (rows of V) of every `myattn` op (DESIGN §8, the layer's `.weights`); ops without
  attention weights are skipped;
- a sequence model (`seq-attn`): `attention_<i>.png` for each chosen TEST window `i` instead —
  the window's signal over time, the attention each time step receives (averaged over heads
  and valid queries: where the model looks), and per head the query token x key token matrix
  `A_h` over the window's valid tokens (padded keys get weight 0); the confusion matrices are
  on the TEST windows (the test split; `--ts` models without TEST: the part of TRAIN held out)
  and on TEST + TRAIN, every window cut to the model's T as export does;
- `report.html` and `report.md`, which embed the images under a summary table.

The folder is built next to `--out` (`.NAME.XXXX.tmp`) and renamed to it at the end, so
`--out` is never half a report: Ctrl-C or an error removes the new folder and leaves a
previous report as it was. A previous `--out` is replaced as a whole, so it may hold only a
report's files (`.png`, `.html`, `.md`); anything else there is refused before any work.

The int8 figures use `--blob`; without it `build/model.bin` if it exists and was exported from
this model, else a blob exported to a temporary file (`tinyattn.intmodel.export.export_model`);
when the model cannot be exported (an op the blob format lacks) they are skipped with a note.
Samples
default to the first test-split sample (TEST window) of each class. matplotlib (the optional extra
`report`) is imported only here, and figures are drawn on the Agg canvas without pyplot, so
nothing global changes.

Library entry point: `write_report(model_path, blob_path, out_dir, samples) -> dict`.

References: docs/model-format.md (meta), DESIGN §3 and §8 (attention weights), matplotlib's
"Creating annotated heatmaps" gallery example (imshow + per-cell text).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinyattn import remedy
from tinyattn.atomic import current_umask
from tinyattn.data.windows import model_view, view_text
from tinyattn.errors import CLIError
from tinyattn.intmodel.blob import Blob, read_blob
from tinyattn.intmodel.floatref import (
    dequantized,
    seq_float_ops,
)
from tinyattn.intmodel.intref import quantize_input, run_int8
from tinyattn.learn.layers import Attention
from tinyattn.learn.model import ModelFile, Sequential, load_model
from tinyattn.learn.myattn import MyAttn
from tinyattn.learn.seqlayers import Conv1d, ResidualAttention
from tinyattn.learn.seqmodel import SeqModel, stem_text, token_steps
from tinyattn.paths import BUILD_DIR

DPI = 110


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=str(BUILD_DIR / "model.npz"),
        help="trained model (default: %(default)s)",
    )
    parser.add_argument(
        "--blob",
        help="exported blob for the int8 figures (default: build/model.bin if it was exported "
        "from --model, else a temporary export)",
    )
    parser.add_argument(
        "--out", default=str(BUILD_DIR / "report"), help="output folder (default: %(default)s)"
    )
    parser.add_argument(
        "--samples",
        type=_sample_list,
        metavar="I,J,...",
        help="dataset rows (seq-attn: TEST windows) for the attention maps (default: one test "
        "sample per class)",
    )
    parser.add_argument(
        "--csv",
        metavar="FILE",
        help="the CSV a 'tinyattn train --csv' model was trained on "
        "(default: the path saved in the model's meta)",
    )
    parser.add_argument("--target", metavar="COL", help="label column of --csv")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object with the written files last"
    )


def _sample_list(text: str) -> list[int]:
    try:
        samples = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected comma-separated row numbers, e.g. 0,50,100"
        ) from None
    if not samples:
        raise argparse.ArgumentTypeError("no row numbers given, e.g. --samples 0,50,100")
    return samples


def _matplotlib():
    """`(Figure, FigureCanvasAgg)`, or a CLIError naming the extra to install."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise CLIError(
            f"matplotlib is not installed; install the report extra: {remedy.install('report')}"
        ) from None
    return Figure, FigureCanvasAgg


# ----------------------------------------------------------------------------- evaluation


@dataclass
class AttentionMap:
    """Attention weights of op `op_index` for the chosen samples."""

    op_index: int
    kind: str  # "attention": weights (B, H, S, S); "myattn": weights (B, S)
    weights: np.ndarray


def attention_maps(model: Sequential, x_norm: np.ndarray) -> list[AttentionMap]:
    """Run the layers in order on `x_norm [B, 1, F]` (or `[B, F]`) and keep every op's
    attention weights.

    `attention`: the layer's own `A_h = softmax(Q_h K_hᵀ / √D)` (DESIGN §3) from the training
    cache of a `training=True` forward (no second copy of the math). `myattn`: the `(B, 1, S)`
    softmax weights over the rows of V that `AttnPool` / `MyAttnFlat` keep in `.weights`
    (DESIGN §8). Other ops give none.
    """
    maps: list[AttentionMap] = []
    x = np.asarray(x_norm, dtype=np.float64)
    x = x.reshape(len(x), -1)  # a row is a window of one step: [B, 1, F] -> [B, F] (dense)
    for i, layer in enumerate(model.layers):
        if isinstance(layer, Attention):
            x = layer.forward(x, training=True)
            _, _, _, _, att, _ = layer._cache  # (x, q, k, v, att, ctx); att (B, H, S, S)
            layer._cache = None  # inference keeps no caches
            maps.append(AttentionMap(i, "attention", att.copy()))
        elif isinstance(layer, MyAttn):  # AttnPool (mode "pool") or MyAttnFlat ("explicit")
            x = layer.forward(x)
            maps.append(AttentionMap(i, "myattn", layer.weights[:, 0, :].copy()))  # (B, v1)
        else:
            x = layer.forward(x)
    return maps


def seq_attention_maps(
    model: SeqModel, x_norm: np.ndarray, lengths: np.ndarray | None
) -> list[AttentionMap]:
    """Every residual attention op's `A_h` `(B, H, S, S)` for normalized windows `x_norm
    [B, T', C]` with `lengths [B]`: the layer's own weights from its training cache, with the
    model's padding mask (a padded key gets weight 0), as `attention_maps` does for rows."""
    x = np.asarray(x_norm, dtype=model.dtype)
    mask = model.mask(x, lengths)
    maps: list[AttentionMap] = []
    for i, layer in enumerate(model.layers):
        if isinstance(layer, ResidualAttention):
            x = layer.forward(x, True, mask)
            att = layer._cache[4]  # (x, q, k, v, att, ctx); att (B, H, S, S)
            layer._cache = None  # inference keeps no caches
            maps.append(AttentionMap(i, "attention", att.copy()))
        elif getattr(layer, "uses_mask", False):
            x = layer.forward(x, False, mask)
        else:
            x = layer.forward(x, False)
        if isinstance(layer, Conv1d) and mask is not None:
            mask = mask.strided(layer.stride)  # as SeqModel.forward
    return maps


def attention_over_time(att: np.ndarray, n_tokens: int) -> np.ndarray:
    """`[S_n]`: the attention each valid key token receives, averaged over heads and valid
    query tokens, from one window's `att [H, S, S]`; sums to 1 (a row of A does)."""
    return att[:, :n_tokens, :n_tokens].mean(axis=(0, 1))


def token_labels(
    ops: list[dict[str, Any]], op_index: int, feature_names: list[str], n_tokens: int
) -> tuple[list[str], str]:
    """`(names, what)` of the `n_tokens` tokens entering op `op_index`, traced through the ops.

    Token t is feature t only when the raw features are reshaped to `[F, k]` before any dense
    op mixes them (a per-feature token model). In `iris-attn` and `iris-myattn`, `dense(F->8F)`
    sees all features and `reshape [F, 8]` cuts its hidden units into F tokens, so token t is
    hidden units `8t .. 8t+7` — a function of every feature, not of feature t — and is labelled
    so; feature names there would mislead. A `myattn` op in mode "explicit" attends over the
    rows of its V input. `what` describes the tokens for an axis label.
    """
    if ops[op_index]["op"] == "myattn" and ops[op_index].get("mode") == "explicit":
        return [f"v{j}" for j in range(n_tokens)], "row of V"
    F = len(feature_names)
    state, hidden_from, tokens, width = "features", None, 0, 0  # what the last axis holds
    for k, op in enumerate(ops[:op_index]):
        kind = op["op"]
        if kind == "dense" and state == "features":
            state, hidden_from = "hidden", k
        elif kind == "reshape":
            shape = [int(n) for n in op["shape"]]
            tokens = shape[0]
            if state == "features" and tokens == F:
                state = "feature-tokens"
            elif state == "hidden":
                state = "hidden-tokens"
                width = int(np.prod(shape[1:]))
            else:
                state = "tokens"
        elif kind not in ("dense", "relu", "sigmoid", "tanh", "gelu", "attention"):
            state = "tokens"  # an op this tracer does not know: no claim about the tokens
    if tokens != n_tokens:
        state = "tokens"
    if state == "feature-tokens":
        return list(feature_names), "token = input feature"
    if state == "hidden-tokens":
        names = [f"t{t}: h{t * width}-{(t + 1) * width - 1}" for t in range(tokens)]
        return names, f"token = hidden units h of op {hidden_from} (dense)"
    return [f"t{t}" for t in range(n_tokens)], "token"


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int) -> np.ndarray:
    """`cm[true, predicted]` counts, int64 `[C, C]`."""
    cm = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(cm, (y_true, y_pred), 1)
    return cm


def _blob_mismatch(blob: Blob, npz: ModelFile) -> str | None:
    """Why `blob` was not exported from the model `npz` (None if it was, as far as can be told).

    Compared: op kinds, class names, input normalization, and every dense weight within half a
    quantization step of the float64 weight (docs/quantization.md: `W_q = rint(W / s_w)`; in a
    float32 blob, within float32 rounding).
    """
    # a seq model's ops map to blob ops (patch_embed + pos_add -> embed, ...): compare those
    ref_ops = seq_float_ops(npz) if npz.is_seq else None
    kinds = [op.kind for op in ref_ops] if ref_ops else [op["op"] for op in npz.ops]
    if [op.kind for op in blob.ops] != kinds:
        return "its op list differs from the model's"
    if blob.class_names != npz.class_names:
        return f"its classes {blob.class_names} differ from the model's {npz.class_names}"
    mean, std = (np.asarray(a, dtype=np.float32) for a in (npz.norm_mean, npz.norm_std))
    if not (np.array_equal(blob.norm_mean, mean) and np.array_equal(blob.norm_std, std)):
        return "its input normalization differs from the model's (another training run)"
    if blob.ops[0].kind == "rocket":  # its head is folded with the standardization: compare
        g = npz.param(0, "group")  # the transform's tables, which the blob holds as they are
        same = (np.array_equal(blob.ops[0].tensors["grp"].astype(np.int64), g.astype(np.int64))
                and np.array_equal(blob.ops[0].tensors["b"], npz.param(0, "bias")))
        return None if same else ("its rocket features differ from the model's (another "
                                  "training run)")  # fmt: skip
    for k, op in enumerate(blob.ops):
        if op.kind != "dense":
            continue
        W = ref_ops[k].tensors["W"] if ref_ops else npz.param(k, "W")  # (out, in)
        Wf, _ = dequantized(op, "", "s_in", blob.quantized)
        step = op.tensors["s"].astype(np.float64)[:, None] if blob.quantized else 2.0**-22 * abs(W)
        if np.any(np.abs(Wf - W) > 0.5 * step * (1 + 1e-3) + 1e-7):
            return f"the weights of op {k} (dense) differ from the model's (another training run)"
    return None


def _load_blob(path: Path) -> Blob:
    try:
        return read_blob(path.read_bytes(), source=str(path))
    except OSError as exc:
        raise CLIError(f"cannot read {path} ({exc.strerror}); check --blob") from None
    except ValueError as exc:  # a BlobError names its fix
        raise CLIError(remedy.blob_error(exc, path, flash_too=False)) from None


def int8_logits(
    model_path: Path,
    npz: ModelFile,
    X: np.ndarray,
    blob_path: str | Path | None,
    csv: str | None,
    target: str | None,
    lengths: np.ndarray | None = None,
) -> tuple[np.ndarray | None, dict[str, Any], list[str]]:
    """`(logits_q [N, C] int64 or None, blob info, notes)` from the integer reference (a seq
    model: windows `X [N, T, C]` with `lengths [N]`)."""
    from tinyattn.intmodel.export import export_model

    notes: list[str] = []
    blob: Blob | None = None
    info: dict[str, Any] = {"blob": None, "blob_bytes": None}
    if blob_path is not None:
        path = Path(blob_path)
        if not path.is_file():
            raise CLIError(
                f"{path} not found; export it with 'tinyattn export --model {model_path} "
                f"--out {path}', or leave out --blob"
            )
        blob = _load_blob(path)
        why = _blob_mismatch(blob, npz)
        if why:
            raise CLIError(
                f"{path} was not exported from {model_path}: {why}; re-run 'tinyattn export "
                f"--model {model_path} --out {path}'"
            )
        info = {"blob": str(path), "blob_bytes": path.stat().st_size}
    else:
        default = BUILD_DIR / "model.bin"
        if default.is_file():
            try:
                blob = read_blob(default.read_bytes(), source=str(default))
                why = _blob_mismatch(blob, npz)
            except ValueError as exc:
                why = str(exc)
            if why:
                notes.append(f"{default} not used ({why}); exported a temporary blob instead")
                blob = None
            else:
                info = {"blob": str(default), "blob_bytes": default.stat().st_size}
        if blob is None:
            with tempfile.TemporaryDirectory(prefix="tinyattn-report-") as tmp:
                tmp_blob = Path(tmp) / "model.bin"
                try:
                    export_model(model_path, tmp_blob, csv=csv, target=target)
                except (CLIError, ValueError) as exc:
                    notes.append(f"int8 figures skipped: the model cannot be exported ({exc})")
                    return None, info, notes
                blob = read_blob(tmp_blob.read_bytes(), source=str(tmp_blob))
                info = {"blob": "(temporary export)", "blob_bytes": tmp_blob.stat().st_size}
    if not blob.quantized:
        notes.append(f"int8 figures skipped: {info['blob']} holds float32 weights (--float32)")
        return None, info, notes
    try:
        logits_q = run_int8(blob, quantize_input(blob, X, lengths), lengths)  # (N, C) int64
    except ValueError as exc:  # an op the integer reference does not implement
        notes.append(f"int8 figures skipped: {exc}")
        return None, info, notes
    return logits_q, info, notes


# ----------------------------------------------------------------------------- figures


def _save(fig, canvas_cls, path: Path) -> None:
    canvas_cls(fig)
    fig.savefig(path, dpi=DPI)


def plot_curves(mpl, history: dict[str, list[float]], title: str, path: Path) -> None:
    Figure, Canvas = mpl
    fig = Figure(figsize=(9.0, 3.6), layout="constrained")
    ax_loss, ax_acc = fig.subplots(1, 2)
    epochs = np.arange(1, len(history["loss"]) + 1)
    ax_loss.plot(epochs, history["loss"], color="tab:red")
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy loss (train, mean over batches)")
    ax_loss.set_title("training loss")
    loss = np.asarray(history["loss"], dtype=float)
    if loss.min() > 0 and loss.max() / loss.min() > 30:
        ax_loss.set_yscale("log")
    for key, label, color in (
        ("train_acc", "train", "tab:blue"),
        ("test_acc", "test", "tab:orange"),
    ):
        if history.get(key):
            ax_acc.plot(epochs, history[key], label=label, color=color)
    ax_acc.set(xlabel="epoch", ylabel="accuracy", ylim=(0.0, 1.02))
    ax_acc.set_title("accuracy per epoch")
    ax_acc.legend(loc="lower right")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    _save(fig, Canvas, path)


def _heatmap(
    fig, ax, values, vmin, vmax, cmap, fmt, xlabels, ylabels, cbar_label, max_annotated=400
) -> None:
    """imshow + a number in every cell (up to `max_annotated` cells) + a colour bar
    (matplotlib's annotated-heatmap recipe)."""
    im = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax)
    ax.set_xticks(
        range(len(xlabels)), labels=xlabels, rotation=35, ha="right", rotation_mode="anchor"
    )
    ax.set_yticks(range(len(ylabels)), labels=ylabels)
    if values.size <= max_annotated:
        for r in range(values.shape[0]):
            for c in range(values.shape[1]):
                v = values[r, c]
                red, green, blue, _ = im.cmap(im.norm(v))
                dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5  # ITU-R BT.601 luma
                color = "white" if dark else "black"
                ax.text(c, r, format(v, fmt), ha="center", va="center", color=color, fontsize=8)
    fig.colorbar(im, ax=ax, shrink=0.85, label=cbar_label)


def plot_confusion(mpl, panels, class_names: list[str], title: str, path: Path) -> None:
    """`panels`: list of `(subtitle, cm)`; one matrix per panel, side by side."""
    Figure, Canvas = mpl
    C = len(class_names)
    side = 2.2 + 0.55 * C
    fig = Figure(figsize=(side * 1.25 * len(panels), side), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    for ax, (subtitle, cm) in zip(axes, panels, strict=True):
        _heatmap(
            fig,
            ax,
            cm,
            0,
            max(int(cm.max()), 1),
            "Blues",
            "d",
            class_names,
            class_names,
            "samples",
        )
        ax.set(xlabel="predicted class", ylabel="true class")
        ax.set_title(subtitle, fontsize=10)
    fig.suptitle(title)
    _save(fig, Canvas, path)


def plot_attention(mpl, maps, ops, labels_of, heading: str, path: Path) -> None:
    """One panel per head of each attention op, one bar chart per myattn op, for one sample."""
    Figure, Canvas = mpl
    panels = []  # (kind, op index, head or None, weights of this sample)
    for m in maps:
        if m.kind == "attention":
            panels += [
                ("attention", m.op_index, h, m.weights[0, h]) for h in range(m.weights.shape[1])
            ]
        else:
            panels.append(("myattn", m.op_index, None, m.weights[0]))
    S_max = max(len(p[3]) for p in panels)
    side = 2.6 + 0.34 * S_max
    width = max(side * 1.25 * len(panels), 0.1 * len(heading) + 0.5)  # room for the title
    # the square panels set the height: side, plus the two-line panel titles, the rotated
    # tick labels and the axis label below, and the heading above (constrained layout cannot
    # shrink a fixed-aspect image to make room, so the room is given here)
    fig = Figure(figsize=(width, side + 1.2), layout="constrained")
    fig.get_layout_engine().set(h_pad=0.1)  # inches between the heading and panel titles
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    for ax, (kind, k, h, w) in zip(axes, panels, strict=True):
        labels, what = labels_of(k)
        if kind == "attention":
            H = int(ops[k]["num_heads"])
            _heatmap(fig, ax, w, 0.0, 1.0, "viridis", ".2f", labels, labels, "attention weight")
            ax.set(xlabel=f"key {what}", ylabel=f"query {what}")
            ax.set_title(
                f"op {k} attention, head {h + 1}/{H}\nA = softmax(QKᵀ/√D), rows sum to 1",
                fontsize=9,
            )
        else:
            ax.bar(range(len(w)), w, color="tab:purple")
            ax.set_xticks(
                range(len(w)), labels=labels, rotation=35, ha="right", rotation_mode="anchor"
            )
            for t, v in enumerate(w):
                ax.text(t, v + 0.02, f"{v:.2f}", ha="center", fontsize=8)
            ax.set(xlabel=what, ylabel="attention weight", ylim=(0.0, 1.08))
            how = "Q = K = mean token, V = tokens" if ops[k].get("mode") == "pool" else "rows of V"
            ax.set_title(
                f"op {k} myattn: {how}\nweights = softmax(attn(Q‖K)), sum to 1", fontsize=9
            )
            ax.grid(axis="y", alpha=0.3)
    fig.suptitle(heading)
    _save(fig, Canvas, path)


def plot_seq_attention(
    mpl, maps, ops, window: np.ndarray, length: int, heading: str, path: Path
) -> None:
    """One window: its signal over time, the attention each time step receives (pooled over
    heads and queries, one line per attention op), and per head the query x key token matrix
    `A_h` over the window's valid tokens."""
    Figure, Canvas = mpl
    P = token_steps(ops)  # steps a token stands for (a conv stem's strides included)
    S_n = -(-length // P)
    panels = [(m.op_index, h, m.weights[0, h]) for m in maps for h in range(m.weights.shape[1])]
    n = len(panels)
    side = 2.8 + 0.16 * S_n
    fig = Figure(figsize=(max(side * 1.2 * n, 9.0), 4.4 + side), layout="constrained")
    mosaic = [["signal"] * n, ["time"] * n, [f"h{j}" for j in range(n)]]
    axes = fig.subplot_mosaic(mosaic, height_ratios=[1.3, 0.9, side / 1.6])
    t = np.arange(length)
    ax = axes["signal"]
    C = window.shape[1]
    for c in range(C):
        ax.plot(t, window[:length, c], lw=1.0, label=f"ch {c}")
    if C <= 6:
        ax.legend(loc="upper right", fontsize=7, ncol=C)
    ax.set(xlim=(0, length), ylabel="raw value")
    ax.set_title(f"the window: {length} steps x {C} channels", fontsize=9)
    ax.grid(alpha=0.3)
    ax = axes["time"]
    edges = np.minimum(np.arange(S_n + 1) * P, length)
    for m in maps:
        w = attention_over_time(m.weights[0], S_n)
        ax.stairs(w, edges, label=f"op {m.op_index}", fill=len(maps) == 1, alpha=0.7)
    ax.set(xlim=(0, length), xlabel="time step", ylabel="attention received")
    ax.set_title(
        f"attention over time: each {'step' if P == 1 else f'{P}-step patch'}'s share, "
        "averaged over heads and queries (sums to 1)",
        fontsize=9,
    )
    if len(maps) > 1:
        ax.legend(loc="upper right", fontsize=7)
    ax.grid(alpha=0.3)
    labels = [str(s * P) for s in range(S_n)]  # a token by its first step
    for j, (k, h, w) in enumerate(panels):
        ax = axes[f"h{j}"]
        H = int(ops[k]["num_heads"])
        _heatmap(fig, ax, w[:S_n, :S_n], 0.0, 1.0, "viridis", ".2f", labels, labels,
                 "attention weight", max_annotated=64)  # fmt: skip
        ax.set(xlabel="key token (first step)", ylabel="query token (first step)")
        ax.set_title(f"op {k} attention, head {h + 1}/{H}\nA = softmax(QKᵀ/√D)", fontsize=9)
    fig.suptitle(heading)
    _save(fig, Canvas, path)


# ----------------------------------------------------------------------------- pages


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def _summary_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    n_test, n = s["test_samples"], s["n_samples"]
    agree = s.get("int8_float_agree_count")
    return [
        ("model", str(s["model"])),
        ("dataset", f"{s['dataset']} ({n} samples, {n_test} in the test split)"),
        ("parameters", str(s["params"])),
        *([("stem", s["stem"])] if s.get("stem") else []),
        *([("input view", s["input_view"])] if s.get("input_view") else []),
        ("float64 test accuracy", _pct(s["float_test_accuracy"])),
        ("int8 test accuracy", _pct(s["int8_test_accuracy"])),
        ("int8/float argmax agreement", "n/a" if agree is None else f"{agree}/{n}"),
        ("blob", "n/a" if s["blob"] is None else f"{s['blob']}: {s['blob_bytes']} bytes"),
    ]


def search_tables(search: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The model search's record (meta "search", host/learn/searchcli.py) as one table a stage:
    (heading, header, rows); the stage's pick marked ✓, a candidate over budget or failed says
    why."""
    out = []
    for st in search.get("stages", []):
        rows = []
        for r in st["rows"]:
            c, s = r["cost"], r.get("score")
            if s:
                cv = (f"{s['int8']:.3f} ± {s['int8_se']:.3f}", f"{s['float']:.3f}")
            elif r.get("failed"):  # trained, and a fold failed (e.g. could not be quantized)
                cv = ("failed: " + r["failed"], "")
            else:  # never trained
                cv = ("over budget: " + "; ".join(r["over"]) if r["over"] else "not run", "")
            rows.append(["✓" if r["label"] == st["pick"] else "", r["label"], str(c["bytes"]),
                         str(c["macs"]), str(c["heap"]), *cv])  # fmt: skip
        header = ["pick", "candidate", "blob B", "MACs", "heap B", "CV int8 ± SE", "CV float"]
        out.append((f"Model search, stage {st['stage']}", header, rows))
    return out


def write_pages(out_dir: Path, summary: dict[str, Any], figures, notes) -> tuple[Path, Path]:
    """`report.html` and `report.md`: the summary table, notes, the model search's tables (if
    the model was chosen by `train --search`), then each figure."""
    title = f"tinyattn report: {summary['model']} on {summary['dataset']}"
    rows = _summary_rows(summary)
    e = html.escape
    h = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:.3em .7em;"
        "text-align:left}img{max-width:100%;border:1px solid #ddd}</style>",
        "</head><body>",
        f"<h1>{e(title)}</h1>",
        "<table>",
        *(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in rows),
        "</table>",
    ]
    md = [f"# {title}", "", "| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]
    if notes:
        h += ["<h2>Notes</h2>", "<ul>", *(f"<li>{e(n)}</li>" for n in notes), "</ul>"]
        md += ["## Notes", "", *(f"- {n}" for n in notes), ""]
    search = summary.get("search")
    if search:
        cv, nan = search.get("cv") or {}, float("nan")
        line = (f"pick: {search.get('pick_label')}; CV on TRAIN ({search.get('repeats')} x "
                f"{search.get('folds')}-fold) int8 {cv.get('int8', nan):.3f} ± "
                f"{cv.get('int8_se', nan):.3f}; budget {search.get('budget')}")  # fmt: skip
        h += ["<h2>Model search</h2>", f"<p>{e(line)}</p>"]
        md += ["## Model search", "", line, ""]
        for heading, header, rows in search_tables(search):
            h += [f"<h3>{e(heading)}</h3>", "<table>",
                  "<tr>" + "".join(f"<th>{e(x)}</th>" for x in header) + "</tr>",
                  *("<tr>" + "".join(f"<td>{e(x)}</td>" for x in r) + "</tr>" for r in rows),
                  "</table>"]  # fmt: skip
            md += [f"### {heading}", "", "| " + " | ".join(header) + " |",
                   "|" + "---|" * len(header),
                   *("| " + " | ".join(x.replace("|", "\\|") for x in r) + " |" for r in rows),
                   ""]  # fmt: skip
    for heading, path in figures:
        h += [f"<h2>{e(heading)}</h2>", f'<img src="{e(path.name)}" alt="{e(heading)}">']
        md += [f"## {heading}", "", f"![{heading}]({path.name})", ""]
    h.append("</body></html>")
    html_path, md_path = out_dir / "report.html", out_dir / "report.md"
    html_path.write_text("\n".join(h) + "\n", encoding="utf-8")
    md_path.write_text("\n".join(md), encoding="utf-8")
    return html_path, md_path


# ----------------------------------------------------------------------------- library entry


def _accuracy(pred: np.ndarray, y: np.ndarray, idx: np.ndarray) -> float | None:
    return float(np.mean(pred[idx] == y[idx])) if len(idx) else None


def _default_samples(y: np.ndarray, test_idx: np.ndarray, n_classes: int) -> list[int]:
    """The first test-split row of each class (the first row overall if the split has none)."""
    samples = []
    for c in range(n_classes):
        rows = [i for i in test_idx if y[i] == c] or list(np.flatnonzero(y == c))
        if rows:
            samples.append(int(rows[0]))
    return samples


@dataclass
class Samples:
    """What a report is drawn on: the model's inputs, labels and test split."""

    X: np.ndarray  # (N, 1, F) raw rows, or (N, T', C) raw windows cut to the model's T
    y: np.ndarray  # (N,)
    test_idx: np.ndarray  # rows of X in the test split
    lengths: np.ndarray | None  # (N,) valid steps of windows; None for rows
    feature_names: list[str]
    notes: list[str]


def report_samples(npz: ModelFile, csv: str | None, target: str | None) -> Samples:
    """The samples export evaluates (`export.export_data`): rows, the model's dataset or CSV
    and its test rows; windows, the test windows first (the TEST file, or the part of TRAIN a
    `--ts` model held out), then the TRAIN windows, all cut to the model's T, so sample `i`
    of `--samples` is test window `i`."""
    from tinyattn.data.timeseries import pad_windows
    from tinyattn.intmodel.export import export_data

    d = export_data(npz, csv, target)
    if d.n is None:  # rows: every row, the test rows among them
        names = list(npz.meta.get("feature_names") or [f"x{j}" for j in range(d.X.shape[-1])])
        return Samples(d.X, d.y, d.idx, None, names, [])
    notes = []
    if not len(d.idx):
        notes.append("no TEST windows recorded in the model's meta: figures on TRAIN only")
    cut = d.split["train_windows_truncated"] + (d.split["test_windows_truncated"] or 0)
    if cut:
        notes.append(f"{cut} windows longer than the model's T = {d.head['max_steps']} steps "
                     "were classified on their last T steps (as export does)")  # fmt: skip
    parts = [(d.X[d.idx], d.n[d.idx]), (d.Xc, d.nc)]  # test windows first, then TRAIN
    width = max(X.shape[1] for X, _ in parts)
    X = np.concatenate([pad_windows(X, n, width) for X, n in parts])  # (N, T', C)
    lengths = np.concatenate([n for _, n in parts])
    y = np.concatenate([d.y[d.idx], d.yc])
    names = [f"channel {c}" for c in range(X.shape[2])]
    return Samples(X, y, np.arange(len(d.idx)), lengths, names, notes)


REPORT_SUFFIXES = {".png", ".html", ".md"}  # what a report folder holds: replaced as a whole


def check_out_dir(out_dir: Path) -> None:
    """CLIError unless out_dir is missing, or a folder holding only a report's files (it is
    replaced as a whole at the end: nothing else in it may be lost)."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise CLIError(f"--out {out_dir}: is a file, not a folder; choose another --out")
    other = sorted(p.name for p in out_dir.iterdir()
                   if not (p.is_file() and p.suffix in REPORT_SUFFIXES))  # fmt: skip
    if other:
        raise CLIError(
            f"--out {out_dir}: holds files a report does not write ({', '.join(other[:3])}"
            f"{', …' if len(other) > 3 else ''}) and is replaced as a whole; choose another "
            "--out or an empty folder"
        )


def new_report_dir(final: Path) -> Path:
    """An empty folder next to `final` (same filesystem: the last step is a rename), with the
    mode a plain mkdir would give it (mkdtemp makes it 0700)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    work.chmod(0o777 & ~current_umask())
    return work


@contextmanager
def building(final: Path) -> Iterator[Path]:
    """`with building(out_dir) as work:` write into `work`, a new folder next to out_dir; at
    the end of the block it becomes out_dir. On any exception (Ctrl-C too) it is removed and
    a previous report at out_dir stays as it was."""
    work = new_report_dir(final)
    try:
        yield work
        replace_dir(work, final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def replace_dir(new: Path, final: Path) -> None:
    """Put the finished folder `new` at `final`; a previous `final` is moved aside first and
    removed after, so `final` is never half a report."""
    if not final.exists():
        os.rename(new, final)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".old", dir=final.parent))
    os.rename(final, old)  # onto an empty folder: allowed (POSIX rename)
    try:
        os.rename(new, final)
    except BaseException:
        os.rename(old, final)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _row_attention_figures(
    mpl, mf: ModelFile, X, y, samples, test_idx, feature_names, pred_float, pred_q,
    work: Path, figures, notes,
) -> list[str]:  # fmt: skip
    """`attention_<i>.png` for each chosen row `i` (`plot_attention`), or a note when the
    model has no attention op."""
    class_names = mf.class_names
    maps = attention_maps(mf.model, mf.normalize(X[samples]))  # from (len(samples), F)
    if not maps:
        kinds = ", ".join(op["op"] for op in mf.model.ops)
        notes.append(f"no attention or myattn op in the model ({kinds}): heatmaps skipped")
        return []
    labels = {
        m.op_index: token_labels(mf.model.ops, m.op_index, feature_names, m.weights.shape[-1])
        for m in maps
    }
    files = []
    for j, i in enumerate(samples):
        one = [AttentionMap(m.op_index, m.kind, m.weights[j : j + 1]) for m in maps]
        where = "test" if i in set(test_idx.tolist()) else "train"
        heading = (
            f"sample {i} ({where} split): true {class_names[y[i]]}, "
            f"float predicts {class_names[pred_float[i]]}"
            + ("" if pred_q is None else f", int8 predicts {class_names[pred_q[i]]}")
        )
        path = work / f"attention_{i}.png"
        plot_attention(mpl, one, mf.model.ops, labels.__getitem__, heading, path)
        figures.append((f"Attention, {heading}", path))
        files.append(str(path))
    return files


def _seq_attention_figures(
    mpl, mf: ModelFile, X, lengths, y, samples, pred_float, pred_q, work: Path, figures
) -> list[str]:
    """`attention_<i>.png` for each chosen TEST window `i` (`plot_seq_attention`)."""
    names = mf.class_names
    idx = np.asarray(samples, dtype=np.int64)
    if lengths is None:  # windows of one step (rows searched as windows): every step valid
        lengths = np.full(len(X), X.shape[1], np.int64)
    maps = seq_attention_maps(mf.model, mf.normalize(X[idx], lengths[idx]), lengths[idx])
    if not maps:  # no attention block (a conv stem alone): no maps to draw
        return []
    files = []
    for j, i in enumerate(samples):
        one = [AttentionMap(m.op_index, m.kind, m.weights[j : j + 1]) for m in maps]
        int8 = "" if pred_q is None else f", int8 predicts {names[pred_q[i]]}"
        heading = f"TEST window {i}: true {names[y[i]]}, float predicts {names[pred_float[i]]}"
        heading += int8
        path = work / f"attention_{i}.png"
        plot_seq_attention(mpl, one, mf.model.ops, X[i], int(lengths[i]), heading, path)
        figures.append((f"Attention over time, {heading}", path))
        files.append(str(path))
    return files


def write_report(
    model_path: str | Path,
    blob_path: str | Path | None = None,
    out_dir: str | Path = BUILD_DIR / "report",
    samples: list[int] | None = None,
    csv: str | None = None,
    target: str | None = None,
) -> dict[str, Any]:
    """Write the figures and pages into `out_dir`; returns the written paths and the summary.
    A seq model's `samples` are TEST windows (see `report_samples`)."""
    mpl = _matplotlib()
    model_path, out_dir = Path(model_path), Path(out_dir)
    if not model_path.is_file():
        raise CLIError(f"{model_path} not found; train first: 'tinyattn train --out {model_path}'")
    try:
        mf: ModelFile = load_model(model_path)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    check_out_dir(out_dir)
    meta = mf.meta
    if csv is None and meta.get("csv"):
        csv, target = meta["csv"], target if target is not None else meta.get("target")
    data = report_samples(mf, csv, target)
    X, y, test_idx, lengths = data.X, data.y, data.test_idx, data.lengths
    N, C = len(y), len(mf.class_names)
    class_names = mf.class_names
    feature_names = data.feature_names
    if samples is None:
        samples = _default_samples(y, test_idx, C)
    windows = lengths is not None  # the report's words: test windows, or the dataset's rows
    n_pick = len(test_idx) if windows and len(test_idx) else N
    bad = [i for i in samples if not 0 <= i < n_pick]
    if bad:
        what = "the TEST windows are" if windows else "the dataset has rows"
        raise CLIError(f"--samples {bad}: {what} 0..{n_pick - 1}")

    final = out_dir
    with building(final) as work:
        notes: list[str] = list(data.notes)
        figures: list[tuple[str, Path]] = []  # (heading, png)
        name = f"{meta.get('model', '?')} on {meta.get('dataset', '?')}"

        history = meta.get("history") or {}
        if history.get("loss"):
            path = work / "curves.png"
            plot_curves(mpl, history, f"{name}: training curves", path)
            figures.append(("Training curves", path))
        else:
            notes.append("no training history in the model's meta: curves skipped")

        pred_float = mf.predict(X, lengths)  # (N,) from the float64 model
        logits_q, blob_info, int8_notes = int8_logits(
            model_path, mf, X, blob_path, csv, target, lengths
        )
        notes += int8_notes
        pred_q = None if logits_q is None else np.argmax(logits_q, axis=1)
        for path_name, pred in (("float", pred_float), ("int8", pred_q)):
            if pred is None:
                continue
            what = "float64 model" if path_name == "float" else "int8 integer reference (blob)"
            panels = []
            everything = "test + train windows" if windows else "all samples"
            for split_name, idx in (("test split", test_idx), (everything, np.arange(N))):
                if len(idx):
                    acc = float(np.mean(pred[idx] == y[idx]))
                    cm = confusion_matrix(y[idx], pred[idx], C)
                    panels.append((f"{split_name}: {len(idx)} samples, accuracy {acc:.3f}", cm))
            path = work / f"confusion_{path_name}.png"
            plot_confusion(mpl, panels, class_names, f"{name}: confusion matrices, {what}", path)
            figures.append((f"Confusion matrices, {what}", path))

        if mf.is_seq:  # attention over time (tokens of steps) vs over the row's features
            attention_files = _seq_attention_figures(
                mpl, mf, X, lengths, y, samples, pred_float, pred_q, work, figures
            )
        elif mf.is_windows:  # seq-rocket: MiniRocket's features and a ridge head
            notes.append("no attention in a seq-rocket model (MiniRocket's features and a "
                         "ridge head): heatmaps skipped")  # fmt: skip
            attention_files = []
        else:
            attention_files = _row_attention_figures(
                mpl, mf, X, y, samples, test_idx, feature_names, pred_float, pred_q, work,
                figures, notes,
            )  # fmt: skip

        summary = {
            "model": meta.get("model"),
            "dataset": meta.get("dataset"),
            "params": mf.model.n_params,
            "stem": stem_text(mf.ops) if mf.is_seq else None,
            "input_view": view_text(model_view(mf.ops)) if mf.is_seq else None,
            "n_samples": N,
            "test_samples": len(test_idx),
            "float_test_accuracy": _accuracy(pred_float, y, test_idx),
            "int8_test_accuracy": None if pred_q is None else _accuracy(pred_q, y, test_idx),
            "int8_float_agree_count": None
            if pred_q is None
            else int(np.sum(pred_q == pred_float)),
            **blob_info,
            "search": meta.get("search"),
        }
        html_path, md_path = write_pages(work, summary, figures, notes)

    def moved(path: Path) -> str:  # a path in work -> the same file in the final folder
        return str(final / path.name)

    return {
        "out_dir": str(final),
        "html": moved(html_path),
        "markdown": moved(md_path),
        "images": [moved(p) for _, p in figures],
        "attention_images": [moved(Path(p)) for p in attention_files],
        "samples": samples,
        "summary": summary,
        "notes": notes,
    }


def main(args: argparse.Namespace) -> int:
    if args.target is not None and args.csv is None:
        raise CLIError("--target needs --csv FILE")
    result = write_report(args.model, args.blob, args.out, args.samples, args.csv, args.target)
    for line in result["notes"]:
        print(f"note: {line}")
    s = result["summary"]
    print(
        f"float test accuracy {_pct(s['float_test_accuracy'])}, int8 "
        f"{_pct(s['int8_test_accuracy'])}; {len(result['images'])} images -> {result['html']}, "
        f"{result['markdown']}"
    )
    if args.json:
        print(json.dumps(result, separators=(",", ":")))
    return 0
