# Device (MicroPython; also runs unchanged under CPython): the naive baseline of the benchmark.
"""A straightforward transcription of the forward formulas with nested lists and float math:
what one writes first, before buffers, flat index math, integer kernels or native code.

    m = NaiveModel("model.bin")   # weights dequantized into lists of lists, once
    m.logits([5.1, 3.5, 1.4, 0.2]) # -> list of C floats (the float path's logits)

It reads the blob with attention.read_blob (same checks), and is only a yardstick:
`tools/bench_device.py` times it next to attention.Model's paths in the same run.

References: docs/model-format.md (ops), DESIGN §3 (attention), docs/quantization.md (float path).
"""

import math

from attention import read_blob


def matrix(data, rows, cols, scale=None):
    """Flat array -> list of rows; row r times scale[r] when given (dequantization)."""
    return [
        [data[r * cols + c] * (scale[r] if scale is not None else 1.0) for c in range(cols)]
        for r in range(rows)
    ]


def linear(x, W, b):
    """y = x @ W.T + b for one vector x."""
    return [sum(x[i] * row[i] for i in range(len(x))) + b[o] for o, row in enumerate(W)]


def softmax(z):
    m = max(z)
    e = [math.exp(v - m) for v in z]
    s = sum(e)
    return [v / s for v in e]


class NaiveModel:
    def __init__(self, path):
        blob = read_blob(path)
        self.mean = list(blob.mean)
        self.std = list(blob.std)
        self.layers = []
        for op in blob.ops:
            if op.name == "dense":
                self.layers.append(("dense", self._params(op, "", op.fp["s_in"])))
            elif op.name == "attention":
                qkvo = [
                    self._params(op, g, op.fp["s_ctx" if g == "o" else "s_in"]) for g in "qkvo"
                ]
                self.layers.append(("attention", (op.ip["H"], qkvo)))
            elif op.name == "reshape":
                self.layers.append(("reshape", (op.ip["S"], op.ip["E"])))
            else:  # relu, avgpool
                self.layers.append((op.name, None))

    @staticmethod
    def _params(op, g, s_in):
        """(W [out][in], b [out]) as floats: dequantized from int8, or float32 as stored."""
        W = op.t["W" + g]
        n_out, n_in = W.shape
        s = op.t["s" + g].data if ("s" + g) in op.t else None
        Wf = matrix(W.data, n_out, n_in, s)
        if ("b" + g) in op.t:
            b = op.t["b" + g].data
            bf = [b[o] * s_in * s[o] if s is not None else b[o] for o in range(n_out)]
        else:
            bf = [0.0] * n_out
        return Wf, bf

    def logits(self, features):
        x = [(features[i] - self.mean[i]) / self.std[i] for i in range(len(features))]
        for kind, params in self.layers:
            if kind == "dense":
                W, b = params
                x = [linear(row, W, b) for row in x] if isinstance(x[0], list) else linear(x, W, b)
            elif kind == "relu":
                x = [max(v, 0.0) for v in x]
            elif kind == "reshape":
                S, E = params
                x = [x[s * E : (s + 1) * E] for s in range(S)]
            elif kind == "attention":
                x = self._attention(x, *params)
            elif kind == "avgpool":
                x = [sum(row[e] for row in x) / len(x) for e in range(len(x[0]))]
        return x

    @staticmethod
    def _attention(x, H, qkvo):
        """softmax(Q_h K_h^T / sqrt(D)) V_h per head, heads concatenated, then Wo."""
        (Wq, bq), (Wk, bk), (Wv, bv), (Wo, bo) = qkvo
        Q = [linear(t, Wq, bq) for t in x]
        K = [linear(t, Wk, bk) for t in x]
        V = [linear(t, Wv, bv) for t in x]
        S, E = len(x), len(Q[0])
        D = E // H
        ctx = [[0.0] * E for _ in range(S)]
        for h in range(H):
            cols = range(h * D, (h + 1) * D)
            for i in range(S):
                scores = [sum(Q[i][c] * K[j][c] for c in cols) / math.sqrt(D) for j in range(S)]
                A = softmax(scores)
                for c in cols:
                    ctx[i][c] = sum(A[j] * V[j][c] for j in range(S))
        return [linear(t, Wo, bo) for t in ctx]
