"""Host (CPython): a board's time model — µs of one int8 inference from a blob's op list.

`terms(blob)` counts the work of one full-window inference by what a kernel does with it:

| term | counts | kernel |
|---|---|---|
| `inference` | 1 | the call, the window's load, the logits' copy |
| `op` | ops in the blob | a step's setup |
| `values` | the window's values (T·C, a row's F) | the input's load |
| `dense` | MACs of dense rows (dense, embed, projections, feed-forward, 1x1 conv) | dense |
| `scores` | MACs of attention's scores and context (2·S²·E) | attn |
| `conv` | MACs of the other convs (depthwise, grouped, dilated) | conv |
| `pool` | values pooled (S·E) | pool |
| `outputs` | values requantized by dense and conv (rows · outputs) | their epilogue |
| `softmax` | attention's query rows (S·H): a row's max, sum and division | attn |
| `rocket_values` | a rocket window's values (T·C): load, block exponent, pooling | rocket_in |
| `rocket_sums` | the shared sums' adds (`rocketmodel.ops`: `shared`) | rocket |
| `rocket_positions` | the counted positions of groups of one channel | rocket |
| `rocket_convs` | the other groups' convolutions' adds (a position: 4 a channel, and 1) | rocket |
| `rocket_regcounts` | the compares of groups of one channel and one or two features | rocket |
| `rocket_counts` | the other compares (a feature and position, each count in memory) | rocket |
| `rocket_groups` | the groups (G): a group's setup | rocket |
| `rocket_features` | the features (K): threshold, PPV quotient, requantization | rocket |

The rocket terms follow the thumb kernel's paths (device/attention_thumb_rocket.py): a group of
one channel runs with its taps' offsets in registers (its positions: three taps and the shared
sum), and with one or two features its thresholds and counts too (its compares).

and a board's table (host/board/NAME.json, "cost") holds a µs rate per term, fitted by
tools/bench_pico_cost.py to the µs measured on the board (least squares on the relative error,
rates ≥ 0), so `predict_us(blob, rates)` is that board's µs for any model the search can make.
The search's `--board NAME --max-ms MS` budget is `predict_us ≤ 1000·MS`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

TERMS = ("inference", "op", "values", "dense", "scores", "conv", "pool", "outputs", "softmax",
         "rocket_values", "rocket_sums", "rocket_positions", "rocket_convs", "rocket_regcounts",
         "rocket_counts", "rocket_groups", "rocket_features")  # fmt: skip


def terms(blob: Any) -> dict[str, int]:
    """The work of one full-window int8 inference of `blob` (a Blob or the exporter's spec:
    its `ops`, each with `kind` and `iparams`), by term (module docstring)."""
    t = dict.fromkeys(TERMS, 0)
    t["inference"] = 1
    rows = 1  # tokens a token-wise op runs on
    for op in blob.ops:
        ip, kind = op.iparams, op.kind
        t["op"] += 1
        if kind == "embed":
            rows = -(-ip["T"] // ip["P"])
            t["values"] += ip["T"] * ip["C"]
            t["dense"] += rows * ip["P"] * ip["C"] * ip["E"]
            t["outputs"] += rows * ip["E"]
        elif kind == "dense":
            if rows == 1 and t["values"] == t["rocket_values"] == 0:
                t["values"] += ip["in"]  # a row model's input
            t["dense"] += rows * ip["in"] * ip["out"]
            t["outputs"] += rows * ip["out"]
        elif kind == "conv":
            rows = -(-rows // ip["stride"])
            macs = rows * ip["F"] * ip["C"] // ip["groups"] * ip["K"]
            pointwise = ip["K"] == 1 and ip["groups"] == 1 and ip["stride"] == 1
            t["dense" if pointwise else "conv"] += macs
            t["outputs"] += rows * ip["F"]
        elif kind == "reshape":
            rows = ip["S"]
        elif kind in ("attention", "res_attention"):
            S, E = ip["S"], ip["E"]
            t["dense"] += 4 * S * E * E
            t["scores"] += 2 * S * S * E
            t["outputs"] += 4 * S * E
            t["softmax"] += S * ip["H"]
        elif kind == "res_ff":
            t["dense"] += 2 * rows * ip["E"] * ip["F"]
            t["outputs"] += rows * (ip["E"] + ip["F"])
        elif kind in ("avgpool", "masked_pool"):
            t["pool"] += ip["S"] * ip["E"]
            rows = 1
        elif kind == "rocket":  # its tables give its work (a Blob's op; a spec has none yet)
            from tinyattn.intmodel.blob_rocket import params
            from tinyattn.learn.rocketmodel import ops, positions

            p = params(op)
            npos = positions(p, ip["T"], ip["P"], ip["N"])
            one = p.n_channels == 1
            reg = one & (p.n_features <= 2)
            t["rocket_values"] += ip["T"] * ip["C"]
            t["rocket_sums"] += ops(p, ip["T"], ip["C"], ip["P"], 0, ip["N"])["shared"]
            t["rocket_positions"] += int(npos[one].sum())
            t["rocket_convs"] += int((npos * (4 * p.n_channels + 1))[~one].sum())
            t["rocket_regcounts"] += int((npos * p.n_features)[reg].sum())
            t["rocket_counts"] += int((npos * p.n_features)[~reg].sum())
            t["rocket_groups"] += ip["G"]
            t["rocket_features"] += ip["K"]
            rows = 1
        elif kind == "myattn":
            t["dense"] += ip["v1"] * (ip["q"] + ip["k"]) + ip["v1"] * ip["v2"]
            t["dense"] += ip["out"] * (ip["q"] + ip["v2"])
            rows = 1
    return t


def predict_us(blob: Any, rates: dict[str, float]) -> float:
    """µs of one full-window int8 inference of `blob` on the board whose `rates` these are."""
    return predict_from_terms(terms(blob), rates)


def predict_from_terms(t: dict[str, int], rates: dict[str, float]) -> float:
    """µs of the work `t` (terms' counts) at `rates`."""
    return float(sum(rates.get(k, 0.0) * v for k, v in t.items()))


def fit(measured_terms: dict[str, dict[str, int]], us: dict[str, float]) -> dict[str, float]:
    """Rates ≥ 0 per term, least squares on the relative error over the measured models (a
    term no model exercises gets 0; one that came out negative is dropped and the rest fitted
    again: the active-set step of non-negative least squares)."""
    names = [n for n in measured_terms if n in us]
    A = np.array([[measured_terms[n][k] for k in TERMS] for n in names], float)
    y = np.array([us[n] for n in names], float)
    w = 1.0 / y  # relative error
    active = [j for j in range(len(TERMS)) if A[:, j].any()]
    while True:
        c, *_ = np.linalg.lstsq(A[:, active] * w[:, None], y * w, rcond=None)
        if (c >= 0).all():
            break
        active = [j for j, v in zip(active, c, strict=True) if v > 0]
    rates = dict.fromkeys(TERMS, 0.0)
    for j, v in zip(active, c, strict=True):
        rates[TERMS[j]] = round(float(v), 5)
    return rates


def table(measured_terms: dict[str, dict[str, int]], us: dict[str, float],
          rates: dict[str, float]) -> str:  # fmt: skip
    """Measured µs next to predicted, per model."""
    lines = [f"{'model':20s} {'MACs':>9s} {'measured µs':>12s} {'predicted µs':>13s} {'Δ':>7s}"]
    for name, t in measured_terms.items():
        if name not in us:
            continue
        pred = predict_from_terms(t, rates)
        macs = t["dense"] + t["scores"] + t["conv"] + t["pool"]
        lines.append(f"{name:20s} {macs:9,d} {us[name]:12,.0f} {pred:13,.0f} "
                     f"{pred / us[name] - 1:+7.1%}")  # fmt: skip
    return "\n".join(lines)
