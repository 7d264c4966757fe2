# Device (MicroPython; also runs under CPython): on-board training of iris-myattn's pool.
"""The `myattn` op (mode "pool", host/learn/myattn.py AttnPool) on the device trainer
(attention_train.py, DESIGN §11): forward with caches and backward over array('f') buffers
allocated once. Its own module, imported (by server_train) only for a model that has the op,
so an iris-attn training session does not hold its code (2 KB of a 100 KiB heap); importing
it registers AttnPool in attention_train.LAYERS.
The kernels are attention_train's, looked up at each call (use_kernels() rebinds them).
"""

import attention_train as at


class AttnPool(at.Layer):
    """op `myattn` mode "pool" (host/learn/myattn.py AttnPool): Q = K = mean token m, V = tokens,
    w = softmax([m, m] Wa^T + ba) (S,), out = [m, sum_j w_j x_j] Wc^T + bc; [B,S,E] -> [B,out]."""

    def __init__(self, op, tokens, width, batch, offset):
        E = int(op["query_size"])
        S = int(op["value_size1"])
        out = int(op["output_size"])
        if op.get("mode") != "pool":
            raise ValueError("myattn mode %r: only 'pool' trains on the device" % op.get("mode"))
        if not (E == int(op["key_size"]) == int(op["value_size2"]) == width and S == tokens):
            raise ValueError("myattn pool sizes do not fit tokens [%d, %d]" % (tokens, width))
        bias = op.get("bias", True)
        self.S = S
        self.E = E
        self.out = out
        self.tokens = 1
        self.width = out
        self.wa = offset  # Wa [S, 2E], ba [S], Wc [out, 2E], bc [out] (host order)
        self.ba = self.wa + 2 * E * S if bias else -1
        self.wc = self.wa + 2 * E * S + (S if bias else 0)
        self.bc = self.wc + 2 * E * out if bias else -1
        self.n_params = 2 * E * (S + out) + ((S + out) if bias else 0)
        self.qk = at.buf(batch * 2 * E)  # (B, 2E) [m, m]
        self.w = at.buf(batch * S)  # (B, S) scores, then weights
        self.qa = at.buf(batch * 2 * E)  # (B, 2E) [m, applied]
        self.y = at.buf(batch * out)  # (B, out)
        self.dqa = at.buf(batch * 2 * E)  # (B, 2E)
        self.dsc = at.buf(batch * S)  # (B, S) dscores
        self.dqk = at.buf(batch * 2 * E)  # (B, 2E)
        self.dx = at.buf(batch * S * E)  # (B, S, E)

    def bind(self, th, g, mask):
        self.th = th
        self.g = g
        for i in range(self.wa, self.wa + 2 * self.E * self.S):
            mask[i] = 1
        for i in range(self.wc, self.wc + 2 * self.E * self.out):
            mask[i] = 1

    def forward(self, x, n):
        S, E, qk, qa, w = self.S, self.E, self.qk, self.qa, self.w
        self.x = x
        for b in range(n):
            for e in range(E):  # mean token
                acc = 0.0
                i = b * S * E + e
                for _ in range(S):
                    acc += x[i]
                    i += E
                acc /= S
                qk[b * 2 * E + e] = acc
                qk[b * 2 * E + E + e] = acc
                qa[b * 2 * E + e] = acc
        at.dense_fwd(qk, w, self.th, self.wa, self.ba, n, 2 * E, S)
        at.softmax_rows(w, n, S)
        for b in range(n):
            for d in range(E):  # applied = w V  (E,)
                acc = 0.0
                for j in range(S):
                    acc += w[b * S + j] * x[(b * S + j) * E + d]
                qa[b * 2 * E + E + d] = acc
        at.dense_fwd(qa, self.y, self.th, self.wc, self.bc, n, 2 * E, self.out)
        return self.y

    def backward(self, dy, n):
        S, E, x, w, dqa, dsc, dqk, dx = (self.S, self.E, self.x, self.w, self.dqa, self.dsc,
                                         self.dqk, self.dx)  # fmt: skip
        at.dense_bwd(self.qa, dy, dqa, self.th, self.g, self.wc, self.bc, n, 2 * E, self.out)
        for b in range(n):  # softmax backward: ds = w (dw - sum(dw w)), dw_j = dapplied . x_j
            dot = 0.0
            for j in range(S):
                acc = 0.0
                for d in range(E):
                    acc += dqa[b * 2 * E + E + d] * x[(b * S + j) * E + d]
                dsc[b * S + j] = acc
                dot += acc * w[b * S + j]
            for j in range(S):
                dsc[b * S + j] = w[b * S + j] * (dsc[b * S + j] - dot)
        at.dense_bwd(self.qk, dsc, dqk, self.th, self.g, self.wa, self.ba, n, 2 * E, S)
        for b in range(n):  # dx = dV + (dQ + dK) / S, dQ = dq0 + dqk[:E], dK = dqk[E:]
            o = b * 2 * E
            for j in range(S):
                wj = w[b * S + j]
                for d in range(E):
                    dx[(b * S + j) * E + d] = wj * dqa[o + E + d] + (
                        dqa[o + d] + dqk[o + d] + dqk[o + E + d]) / S  # fmt: skip
        return dx


at.LAYERS["myattn"] = AttnPool  # mode "pool"
