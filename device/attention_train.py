# Device (MicroPython; also runs unchanged under CPython): float32 training — forward with
# caches, backward, softmax cross-entropy, AdamW / SGD, cosine learning rate.
"""On-board training of an op-list model (DESIGN §11, issue 13). Never imported for inference.

Mirrors the host exactly: host/learn/layers.py (Dense, ReLU, Reshape, Attention, GlobalAvgPool),
host/learn/myattn.py (AttnPool = op `myattn` mode "pool"), host/learn/losses.py + train.py
`smoothed_cross_entropy` (mean over the batch, optional label smoothing), host/learn/optim.py (Adam
with decoupled weight decay = AdamW, SGD with momentum; decay on weight matrices only) and
host/learn/train.py `learning_rate` (constant or cosine to 0).

Storage. All parameters live in one flat array('f') `theta` (gradients in `grad`) in the host
`Sequential.theta` order: per op, its arrays in the host layer's order — dense W [out,in], b;
attention Wqkv [3E,E] (= Wq; Wk; Wv), Wo [E,E], bqkv [3E], bo [E]; myattn Wa [v1,2E], ba, Wc
[out,2E], bc. Weights are [out, in], `y = x W^T + b`, so a dot product walks one row
W[o*n_in : (o+1)*n_in] (DESIGN §3). `mask[i]` is 1 on weight matrices (weight decay), 0 on
biases. Every buffer (activations, caches, gradients, optimizer moments) is allocated once in
`Net(...)` / `Adam(...)` for a batch size; a step allocates only float objects.

Kernels (module functions over flat buffers; rows = samples x tokens):
  dense_fwd (x, y, th, wo, bo, rows, n_in, n_out)   y[r,o] = th[bo+o] + sum_i x[r,i] W[o,i]
  dense_bwd (x, dy, dx, th, g, wo, bo, rows, n_in, n_out)
            gW[o,i] = sum_r dy[r,o] x[r,i]; gb[o] = sum_r dy[r,o]; dx[r,i] = sum_o dy[r,o] W[o,i]
            (W at th[wo + o*n_in + i], b at th[bo + o]; bo < 0: no bias; dx None: skipped)
  attn_fwd  (qkv, att, ctx, B, S, E, H, scale)       qkv [B,S,3E] -> att [B,H,S,S], ctx [B,S,E]
  attn_bwd  (qkv, att, dctx, ds, B, S, E, H, scale)  the documented steps; dqkv over qkv,
            ds [S*S + 3*S*D] scratch (one head's dS, then its dq, dk, dv)
  softmax_ce (logits, labels, dlogits, n, C, eps) -> mean loss; dlogits = (p - t) / n
  adam_step / sgd_step (theta, grad, state..., mask, lr, ...)  one update of all P parameters

Floats: array('f') stores float32; arithmetic runs in the port's float (double on the unix
port and CPython, single on ESP32/RP2040), so results agree with the host's float32 NumPy step
to float32 rounding (tests/test_device_train*.py: 1e-4 relative or 1e-6 absolute).

References: Vaswani et al. (2017) (attention); Kingma & Ba (2015) (Adam); Loshchilov & Hutter
(2019) (AdamW); Goodfellow et al., "Deep Learning" §6.2.2.3 (softmax cross-entropy);
Szegedy et al. (2016) (label smoothing); Loshchilov & Hutter (2017) (SGDR, cosine schedule);
MicroPython "Maximising MicroPython speed" (buffers once, locals, flat index math).
"""

import math

from attention_trainfile import zeros

try:
    from micropython import const
except ImportError:  # CPython

    def const(x):
        return x


_MAX_OPS = const(64)


buf = zeros  # a zeroed array('f') of n floats, allocated in place (attention_trainfile.py)
# The model kinds of extension modules, registered by each when imported (this module never
# names them; the server, or a caller, imports the one a model needs):
# op kind -> layer class, called (op, tokens, width, batch, offset) (attention_train_myattn)
LAYERS = {}
# op 0's kind -> Net class for that model kind, called as new_net's (attention_train_seq)
NETS = {}


# ------------------------------------------------------------------------------------ kernels


def dense_fwd(x, y, th, wo, bo, rows, n_in, n_out):
    xo = 0
    yo = 0
    for _ in range(rows):
        wi = wo
        for o in range(n_out):
            acc = th[bo + o] if bo >= 0 else 0.0
            for i in range(xo, xo + n_in):
                acc += x[i] * th[wi]
                wi += 1
            y[yo + o] = acc
        xo += n_in
        yo += n_out


def dense_bwd(x, dy, dx, th, g, wo, bo, rows, n_in, n_out):
    wi = wo
    for o in range(n_out):  # gW = dy^T x  (out, in)
        for i in range(n_in):
            acc = 0.0
            xi = i
            di = o
            for _ in range(rows):
                acc += dy[di] * x[xi]
                xi += n_in
                di += n_out
            g[wi] = acc
            wi += 1
        if bo >= 0:  # gb = sum_r dy  (out,)
            acc = 0.0
            di = o
            for _ in range(rows):
                acc += dy[di]
                di += n_out
            g[bo + o] = acc
    if dx is None:
        return
    xo = 0
    yo = 0
    for _ in range(rows):  # dx = dy W  (rows, in)
        for i in range(n_in):
            acc = 0.0
            wi = wo + i
            for o in range(yo, yo + n_out):
                acc += dy[o] * th[wi]
                wi += n_in
            dx[xo + i] = acc
        xo += n_in
        yo += n_out


def attn_fwd(qkv, att, ctx, B, S, E, H, scale):
    # q, k, v of token t of sample b, head h: qkv[(b*S + t)*3E + {0, E, 2E} + h*D + d]
    D = E // H
    E3 = 3 * E
    exp = math.exp
    for b in range(B):
        base = b * S * E3
        for h in range(H):
            ho = h * D
            row = (b * H + h) * S * S
            for s in range(S):
                qo = base + s * E3 + ho
                mx = -1e38
                for t in range(S):  # scores Q_h K_h^T * scale  (S,)
                    ko = base + t * E3 + E + ho
                    acc = 0.0
                    for d in range(D):
                        acc += qkv[qo + d] * qkv[ko + d]
                    acc *= scale
                    att[row + t] = acc
                    if acc > mx:
                        mx = acc
                tot = 0.0
                for t in range(S):  # softmax over keys, row max first
                    e = exp(att[row + t] - mx)
                    att[row + t] = e
                    tot += e
                for t in range(S):
                    att[row + t] /= tot
                co = (b * S + s) * E + ho
                for d in range(D):  # ctx_h = A_h V_h  (D,)
                    acc = 0.0
                    vo = base + 2 * E + ho + d
                    for t in range(S):
                        acc += att[row + t] * qkv[vo]
                        vo += E3
                    ctx[co + d] = acc
                row += S


def attn_bwd(qkv, att, dctx, ds, B, S, E, H, scale):
    # DESIGN §3 per head: dV = A^T dctx, dA = dctx V^T, dS = A (dA - rowsum(dA A)) scale,
    # dQ = dS K, dK = dS^T Q; written over qkv [B,S,3E] (same layout): each (sample, head)'s
    # dq, dk, dv go to scratch (ds[S*S:], [S, 3, D]) first, then over its q, k, v, which
    # nothing reads after (the next forward makes qkv anew). ds [S*S + 3*S*D] scratch.
    D = E // H
    E3 = 3 * E
    SS = S * S
    for b in range(B):
        base = b * S * E3
        cbase = b * S * E
        for h in range(H):
            ho = h * D
            ab = (b * H + h) * SS
            for s in range(S):  # dS row by row  (S, S) in ds
                do = cbase + s * E + ho
                dot = 0.0
                for t in range(S):
                    vo = base + t * E3 + 2 * E + ho
                    acc = 0.0
                    for d in range(D):
                        acc += dctx[do + d] * qkv[vo + d]
                    ds[s * S + t] = acc  # dA[s, t]
                    dot += acc * att[ab + s * S + t]
                for t in range(S):
                    i = s * S + t
                    ds[i] = att[ab + i] * (ds[i] - dot) * scale
            for t in range(S):
                to = SS + t * 3 * D
                for d in range(D):
                    acc_v = 0.0  # dV[t,d] = sum_s A[s,t] dctx[s,d]
                    acc_k = 0.0  # dK[t,d] = sum_s dS[s,t] Q[s,d]
                    acc_q = 0.0  # dQ[t,d] = sum_u dS[t,u] K[u,d]
                    for s in range(S):
                        acc_v += att[ab + s * S + t] * dctx[cbase + s * E + ho + d]
                        acc_k += ds[s * S + t] * qkv[base + s * E3 + ho + d]
                        acc_q += ds[t * S + s] * qkv[base + s * E3 + E + ho + d]
                    ds[to + d] = acc_q
                    ds[to + D + d] = acc_k
                    ds[to + 2 * D + d] = acc_v
            for t in range(S):  # over this head's q, k, v of sample b
                qo = base + t * E3 + ho
                to = SS + t * 3 * D
                for d in range(D):
                    qkv[qo + d] = ds[to + d]
                    qkv[qo + E + d] = ds[to + D + d]
                    qkv[qo + 2 * E + d] = ds[to + 2 * D + d]


def softmax_rows(z, rows, n):
    """In place, row max first: z[r, :] <- softmax(z[r, :])."""
    exp = math.exp
    o = 0
    for _ in range(rows):
        mx = z[o]
        for j in range(o + 1, o + n):
            if z[j] > mx:
                mx = z[j]
        tot = 0.0
        for j in range(o, o + n):
            e = exp(z[j] - mx)
            z[j] = e
            tot += e
        for j in range(o, o + n):
            z[j] /= tot
        o += n


def softmax_ce(logits, labels, dlogits, n, C, eps):
    """Mean cross-entropy of logits [n, C] against `(1 - eps) onehot + eps / C`; dlogits [n, C]
    = (softmax - target) / n. Returns the mean loss (lse - z_y + eps (z_y - mean z))."""
    exp = math.exp
    log = math.log
    loss = 0.0
    off = eps / C
    o = 0
    for r in range(n):
        y = labels[r]
        mx = logits[o]
        mean = 0.0
        for j in range(o, o + C):
            if logits[j] > mx:
                mx = logits[j]
            mean += logits[j]
        mean /= C
        tot = 0.0
        for j in range(o, o + C):
            e = exp(logits[j] - mx)
            dlogits[j] = e
            tot += e
        zy = logits[o + y]
        loss += log(tot) + mx - zy + eps * (zy - mean)
        for j in range(o, o + C):
            dlogits[j] = (dlogits[j] / tot - off) / n
        dlogits[o + y] -= (1.0 - eps) / n
        o += C
    return loss / n


def adam_step(th, g, m, v, mask, n, lr, b1, b2, eps, wd, t):
    # AdamW as host/learn/optim.py: theta <- theta (1 - lr wd mask) - lr m_hat / (sqrt(v_hat) +
    # eps)
    step_size = lr / (1.0 - b1**t)
    bc2 = math.sqrt(1.0 - b2**t)
    decay = lr * wd
    sqrt = math.sqrt
    c1 = 1.0 - b1
    c2 = 1.0 - b2
    for i in range(n):
        p = th[i]
        if decay and mask[i]:
            p -= decay * p
        gi = g[i]
        mi = b1 * m[i] + c1 * gi
        vi = b2 * v[i] + c2 * gi * gi
        m[i] = mi
        v[i] = vi
        th[i] = p - step_size * mi / (sqrt(vi) / bc2 + eps)


def sgd_step(th, g, vel, mask, n, lr, mu, wd, first):
    # torch.optim.SGD: d = g + wd mask theta; vel <- d (first step) or mu vel + d; th -= lr vel
    for i in range(n):
        d = g[i]
        if wd and mask[i]:
            d += wd * th[i]
        if mu:
            if not first:
                d += mu * vel[i]
            vel[i] = d
        th[i] -= lr * d


# The hot loops above, bound by name: use_kernels() swaps in attention_train_native.py (these
# functions under @micropython.native, generated from this file by tinyattn.board.native when
# deploying: _NAMES is its list of kernels).
_NAMES = ("dense_fwd", "dense_bwd", "attn_fwd", "attn_bwd", "softmax_rows", "softmax_ce",
          "adam_step", "sgd_step")  # fmt: skip
_PURE = (dense_fwd, dense_bwd, attn_fwd, attn_bwd, softmax_rows, softmax_ce, adam_step, sgd_step)
KERNELS = "pure"


def use_kernels(name="auto"):
    """Bind the kernels: "pure" (this file), "native" (attention_train_native.py, the native
    emitter: about 2x faster on the unix port) or "auto" (native where it imports, else pure).
    Returns the set bound. Floats stay heap objects either way (no viper: its typed pointers
    are integer-only, so float loops would not gain)."""
    global dense_fwd, dense_bwd, attn_fwd, attn_bwd, softmax_rows, softmax_ce, adam_step
    global sgd_step, KERNELS
    if name not in ("pure", "native", "auto"):
        raise ValueError("kernels %r: choose pure, native or auto" % name)
    kernels = _PURE
    chosen = "pure"
    if name != "pure":
        try:
            import attention_train_native as nat

            kernels = tuple(getattr(nat, k) for k in _NAMES)
            chosen = "native"
        except (ImportError, SyntaxError, ValueError):  # CPython, or no native emitter
            if name == "native":
                raise ValueError("native training kernels need MicroPython's native emitter "
                                 "and attention_train_native on the path") from None  # fmt: skip
    (dense_fwd, dense_bwd, attn_fwd, attn_bwd, softmax_rows, softmax_ce, adam_step,
     sgd_step) = kernels  # fmt: skip
    KERNELS = chosen
    return chosen


use_kernels("auto")


def learning_rate(lr, step, total_steps, cosine=True):
    """host/learn/train.py `learning_rate`: constant, or cosine from lr (step 0) down to 0."""
    if not cosine:
        return lr
    return 0.5 * lr * (1.0 + math.cos(math.pi * step / total_steps))


# ------------------------------------------------------------------------------------- layers


class Layer:
    """Per-sample output shape (tokens, width); forward(x, n) -> y, backward(dy, n) -> dx over
    n <= batch rows. `x` (the input buffer) is the cache; layers with parameters add theirs."""

    n_params = 0

    def bind(self, th, g, mask):
        self.th = th
        self.g = g

    def forward(self, x, n):  # identity: reshape
        return x

    def backward(self, dy, n):
        return dy


class Dense(Layer):
    """[.., in] -> [.., out] on the last axis, per token: y = x W^T + b."""

    def __init__(self, op, tokens, width, batch, offset, need_dx):
        n_in = int(op["in"])
        n_out = int(op["out"])
        if width != n_in:
            raise ValueError("dense in=%d but its input has width %d" % (n_in, width))
        self.n_in = n_in
        self.n_out = n_out
        self.tokens = tokens
        self.width = n_out
        self.wo = offset
        self.bo = offset + n_out * n_in if op.get("bias", True) else -1
        self.n_params = n_out * n_in + (n_out if self.bo >= 0 else 0)
        self.y = buf(batch * tokens * n_out)  # (B, tokens, out)
        self.dx = buf(batch * tokens * n_in) if need_dx else None  # (B, tokens, in)

    def bind(self, th, g, mask):
        self.th = th
        self.g = g
        for i in range(self.wo, self.wo + self.n_out * self.n_in):
            mask[i] = 1

    def forward(self, x, n):
        self.x = x
        dense_fwd(x, self.y, self.th, self.wo, self.bo, n * self.tokens, self.n_in, self.n_out)
        return self.y

    def backward(self, dy, n):
        dense_bwd(self.x, dy, self.dx, self.th, self.g, self.wo, self.bo, n * self.tokens,
                  self.n_in, self.n_out)  # fmt: skip
        return self.dx


class ReLU(Layer):
    """max(x, 0), in place on its input (which no other layer needs); backward in place too."""

    def __init__(self, tokens, width):
        self.tokens = tokens
        self.width = width

    def forward(self, x, n):
        for i in range(n * self.tokens * self.width):
            if x[i] < 0.0:
                x[i] = 0.0
        self.x = x  # now y
        return x

    def backward(self, dy, n):
        y = self.x
        for i in range(n * self.tokens * self.width):
            if y[i] <= 0.0:
                dy[i] = 0.0
        return dy


class Reshape(Layer):
    """[B, prod] -> [B, S, E] (row-major: the flat buffer is unchanged)."""

    def __init__(self, op, tokens, width):
        shape = [int(v) for v in op["shape"]]
        if len(shape) == 1:
            shape = [1, shape[0]]
        if len(shape) != 2 or shape[0] * shape[1] != tokens * width:
            raise ValueError("reshape %s does not fit an input of %d values" % (
                op["shape"], tokens * width))  # fmt: skip
        self.tokens = shape[0]
        self.width = shape[1]


class Attention(Layer):
    """Multi-head self-attention [B, S, E] -> [B, S, E] (DESIGN §3); caches qkv, att, ctx."""

    def __init__(self, op, tokens, width, batch, offset, need_dx):
        S, E, H = self.layout(op, tokens, width, offset)
        self.qkv = buf(batch * S * 3 * E)  # (B, S, 3E) cache; dqkv once backward ran
        self.att = buf(batch * H * S * S)  # (B, H, S, S) cache
        self.ctx = buf(batch * S * E)  # (B, S, E) cache
        self.y = buf(batch * S * E)  # (B, S, E)
        # backward reuses y (read by the next layer only, whose backward has run by then): dctx,
        # then dx once dqkv is made from it; and qkv, over which attn_bwd writes dqkv (10 KB
        # less for Iris's batch of 16)
        self.dctx = self.y  # (B, S, E)
        self.ds = buf(S * S + 3 * S * (E // H))  # one head's dS [S, S], then dq, dk, dv [S, 3D]
        self.dx = self.y if need_dx else None  # (B, S, E)

    def layout(self, op, tokens, width, offset):
        """Sizes and parameter offsets of an attention op (also the sequence model's residual
        attention, attention_train_seq.py): Wqkv [3E, E], Wo [E, E], bqkv [3E], bo [E]."""
        E = int(op["embed_dim"])
        H = int(op["num_heads"])
        if width != E or E % H:
            raise ValueError("attention embed_dim=%d num_heads=%d on tokens of %d" % (E, H, width))
        self.S = self.tokens = tokens
        self.E = self.width = E
        self.H = H
        self.scale = 1.0 / math.sqrt(E // H)
        self.wqkv = offset
        self.wo = offset + 3 * E * E
        bias = op.get("bias", True)
        self.bqkv = self.wo + E * E if bias else -1
        self.bo = self.bqkv + 3 * E if bias else -1
        self.n_params = 4 * E * E + (4 * E if bias else 0)
        return tokens, E, H

    def bind(self, th, g, mask):
        self.th = th
        self.g = g
        for i in range(self.wqkv, self.wo + self.E * self.E):
            mask[i] = 1

    def forward(self, x, n):
        S, E, th = self.S, self.E, self.th
        self.x = x
        dense_fwd(x, self.qkv, th, self.wqkv, self.bqkv, n * S, E, 3 * E)
        attn_fwd(self.qkv, self.att, self.ctx, n, S, E, self.H, self.scale)
        dense_fwd(self.ctx, self.y, th, self.wo, self.bo, n * S, E, E)
        return self.y

    def backward(self, dy, n):
        S, E, th, g = self.S, self.E, self.th, self.g
        dense_bwd(self.ctx, dy, self.dctx, th, g, self.wo, self.bo, n * S, E, E)
        attn_bwd(self.qkv, self.att, self.dctx, self.ds, n, S, E, self.H, self.scale)
        dense_bwd(self.x, self.qkv, self.dx, th, g, self.wqkv, self.bqkv, n * S, E, 3 * E)
        return self.dx


class AvgPool(Layer):
    """Mean over tokens [B, S, E] -> [B, E]."""

    def __init__(self, tokens, width, batch):
        self.S = tokens
        self.E = width
        self.tokens = 1
        self.width = width
        self.y = buf(batch * width)  # (B, E)
        self.dx = buf(batch * tokens * width)  # (B, S, E)

    def forward(self, x, n):
        S, E, y = self.S, self.E, self.y
        for b in range(n):
            for e in range(E):
                acc = 0.0
                i = b * S * E + e
                for _ in range(S):
                    acc += x[i]
                    i += E
                y[b * E + e] = acc / S
        return y

    def backward(self, dy, n):
        S, E, dx = self.S, self.E, self.dx
        i = 0
        for b in range(n):
            for _ in range(S):
                for e in range(b * E, b * E + E):
                    dx[i] = dy[e] / S
                    i += 1
        return dx


def _layer(op, tokens, width, batch, offset, need_dx):
    kind = op.get("op")
    if kind == "dense":
        return Dense(op, tokens, width, batch, offset, need_dx)
    if kind == "relu":
        return ReLU(tokens, width)
    if kind == "reshape":
        return Reshape(op, tokens, width)
    if kind == "attention":
        return Attention(op, tokens, width, batch, offset, need_dx)
    if kind == "avgpool":
        return AvgPool(tokens, width, batch)
    if kind in LAYERS:  # myattn (iris-myattn's pool): its own module, imported only for it
        return LAYERS[kind](op, tokens, width, batch, offset)
    raise ValueError("op %r cannot train on the device (dense, relu, reshape, attention, "
                     "avgpool; myattn pool and window models once their modules are "
                     "imported)" % kind)  # fmt: skip


# ---------------------------------------------------------------------------------------- net


class Net:
    """The op list as layers over buffers for `batch` rows of `n_in` features.

    theta/grad/mask: parameters, gradients, weight-decay mask (host Sequential order); pass
    `theta` (array('f') of n_params) to train weights loaded from a file without a copy.
    x [batch, n_in] and labels [batch] hold the current batch (see `gather`); forward(n) ->
    logits [n, C]; loss(n, eps) fills dlogits; backward(n) fills grad (and `dx`, the input
    gradient, when `input_grad`)."""

    def __init__(self, ops, n_in, batch, theta=None, input_grad=False):
        if len(ops) > _MAX_OPS:
            raise ValueError("%d ops: at most %d" % (len(ops), _MAX_OPS))
        self.n_in = n_in
        self.batch = batch
        layers = []
        tokens, width, P = 1, n_in, 0
        for i in range(len(ops)):
            layer = self.layer(ops[i], tokens, width, batch, P, input_grad or P > 0)
            layers.append(layer)
            P += layer.n_params
            tokens, width = layer.tokens, layer.width
        if tokens != 1:
            raise ValueError("the last op gives %d tokens; end with avgpool and dense" % tokens)
        if theta is None:
            theta = buf(P)
        elif len(theta) != P:
            raise ValueError("%d parameters given, the ops need %d" % (len(theta), P))
        stop = 0  # backward stops at the first layer with parameters, unless input_grad
        while not input_grad and stop < len(layers) - 1 and layers[stop].n_params == 0:
            stop += 1
        self.stop = stop
        self.layers = layers
        self.n_params = P
        self.n_classes = width
        self.theta = theta  # (P,)
        self.grad = buf(P)  # (P,)
        self.mask = bytearray(P)  # (P,) 1 on weight matrices
        for layer in layers:
            layer.bind(theta, self.grad, self.mask)
        self.x = buf(batch * n_in)  # (B, F)
        self.labels = bytearray(batch)  # (B,)
        self.dlogits = buf(batch * width)  # (B, C)
        self.dx = None

    def layer(self, op, tokens, width, batch, offset, need_dx):
        """The layer of `op` (attention_train_seq.SeqNet adds the sequence ops)."""
        return _layer(op, tokens, width, batch, offset, need_dx)

    def gather(self, X, labels, order, start, n, lengths=None):
        """Rows order[start:start+n] of X [N, F] (array('f')) and labels [N] into x, labels
        (`lengths`: window models only, attention_train_seq.SeqNet)."""
        F = self.n_in
        x = self.x
        j = 0
        for r in range(n):
            row = order[start + r]
            o = row * F
            for f in range(F):
                x[j] = X[o + f]
                j += 1
            self.labels[r] = labels[row]

    def step(self, X, labels, order, start, n, lengths=None, eps=0.0):
        """One minibatch (see gather): forward, loss, backward; returns the mean loss."""
        self.gather(X, labels, order, start, n, lengths)
        self.forward(n)
        loss = self.loss(n, eps)
        self.backward(n)
        return loss

    def forward(self, n):
        x = self.x
        for layer in self.layers:
            x = layer.forward(x, n)
        self.logits = x
        return x  # (n, C)

    def loss(self, n, eps=0.0):
        return softmax_ce(self.logits, self.labels, self.dlogits, n, self.n_classes, eps)

    def backward(self, n):
        d = self.dlogits
        layers = self.layers
        i = len(layers) - 1
        while i >= self.stop:
            d = layers[i].backward(d, n)
            i -= 1
        self.dx = d  # (n, F) when input_grad

    def correct(self, n):
        """How many of the n rows' logits have their argmax at the label (ties: first)."""
        C = self.n_classes
        z = self.logits
        hits = 0
        for r in range(n):
            best = 0
            for j in range(1, C):
                if z[r * C + j] > z[r * C + best]:
                    best = j
            if best == self.labels[r]:
                hits += 1
        return hits


# ---------------------------------------------------------------------------------- optimizers


class Adam:
    """AdamW (host/learn/optim.py Adam): decoupled weight decay on `net.mask`; state = (m, v)."""

    def __init__(self, net, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 state=None, t=0):  # fmt: skip
        self.net = net
        self.lr = lr
        self.b1 = betas[0]
        self.b2 = betas[1]
        self.eps = eps
        self.weight_decay = weight_decay
        P = net.n_params
        self.state = state if state is not None else (buf(P), buf(P))  # m, v  (P,) each
        self.t = t

    def step(self, lr=None):
        net = self.net
        self.t += 1
        m, v = self.state
        adam_step(net.theta, net.grad, m, v, net.mask, net.n_params,
                  self.lr if lr is None else lr, self.b1, self.b2, self.eps,
                  self.weight_decay, self.t)  # fmt: skip


class SGD:
    """SGD with momentum (host/learn/optim.py SGD, torch's update); state = (velocity,)."""

    def __init__(self, net, lr=1e-2, momentum=0.9, weight_decay=0.0, state=None, t=0):
        self.net = net
        self.lr = lr
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.state = state if state is not None else (buf(net.n_params),)  # (P,)
        self.t = t

    def step(self, lr=None):
        net = self.net
        sgd_step(net.theta, net.grad, self.state[0], net.mask, net.n_params,
                 self.lr if lr is None else lr, self.momentum, self.weight_decay,
                 self.t == 0)  # fmt: skip
        self.t += 1


def optimizer(net, name="adam", lr=0.01, weight_decay=0.0, momentum=0.9, state=None, t=0):
    """Adam (AdamW) for "adam", SGD with momentum for "sgd", as host/learn/train.py
    make_optimizer.
    """
    if name == "adam":
        return Adam(net, lr, weight_decay=weight_decay, state=state, t=t)
    if name == "sgd":
        return SGD(net, lr, momentum, weight_decay, state=state, t=t)
    raise ValueError("unknown optimizer %r; choose adam or sgd" % name)


# ----------------------------------------------------------------------------------- training


class Trainer:
    """host/learn/train.py `fit` on the device: minibatches in the host's order, scheduled steps.

    X: array('f') [N, F] (normalized features), labels: bytes-like [N]; epoch(order) runs one
    epoch over `order` (N row indices, the host's permutation) and returns the mean loss.
    A window model (attention_train_seq.SeqNet): X [N, T*C] and `lengths` [N] (None: all T),
    or X an attention_train_seq.WindowFile (windows and lengths read from a file as gathered).
    average: an attention_train_seq.Averager (host seqtrain `Average`), fed the weights at each
    epoch end; the last epoch leaves theta = the average (as host fit_seq). A trainer built at
    `step` > 0 (a resumed checkpoint) takes the average's count from the epochs done."""

    average = None  # attention_train_seq.Averager, fed the weights at epoch ends

    def __init__(self, net, opt, X, labels, epochs, lr, cosine=True, label_smoothing=0.0, step=0,
                 lengths=None, average=None):  # fmt: skip
        self.net = net
        self.opt = opt
        self.X = X
        self.labels = labels
        self.lr = lr
        self.cosine = cosine
        self.eps = label_smoothing
        self.n_rows = len(labels)
        self.steps_per_epoch = -(-self.n_rows // net.batch)
        self.total_steps = epochs * self.steps_per_epoch
        self.step = step  # global step: the schedule's position
        self.lengths = lengths
        if average is not None:  # (else the class's None: no instance slot for the Iris run)
            self.average = average
            average.resume(net.n_params, epochs, step // self.steps_per_epoch)

    def train_step(self, order, start, n):
        loss = self.net.step(self.X, self.labels, order, start, n, self.lengths, self.eps)
        self.opt.step(learning_rate(self.lr, self.step, self.total_steps, self.cosine))
        self.step += 1
        return loss

    def epoch(self, order, on_step=None):
        B = self.net.batch
        N = self.n_rows
        total = 0.0
        start = 0
        while start < N:
            n = B if N - start > B else N - start
            total += self.train_step(order, start, n) * n
            start += n
            if on_step is not None:
                on_step(self.step)
        if self.average is not None:  # the epoch-end weights; after the last, theta = average
            self.average.epoch_done(self.step // self.steps_per_epoch, self.net.theta)
        return total / N

    def evaluate(self, X, labels, order=None, lengths=None):
        """(mean loss, correct) of the current weights over rows `order` (default: all)."""
        net = self.net
        N = len(labels) if order is None else len(order)
        if order is None:
            order = range(N)
        B = len(net.x) // net.n_in  # rows a forward holds (batch; a SeqNet's rows)
        total = 0.0
        hits = 0
        start = 0
        while start < N:
            n = B if N - start > B else N - start
            net.gather(X, labels, order, start, n, lengths)
            net.forward(n)
            total += net.loss(n, 0.0) * n
            hits += net.correct(n)
            start += n
        return total / N, hits


def new_net(ops, n_features, batch, theta=None, input_grad=False, rows=None):
    """Net for an op list; a window model (op 0 `patch_embed`: n_features = channels C) is
    the Net class registered for it in NETS (attention_train_seq.SeqNet, registered when the
    caller imports that module: the Iris session never loads its code), with buffers for
    `rows` windows (default: batch; fewer: a minibatch in pieces)."""
    if ops and ops[0].get("op") in NETS:
        return NETS[ops[0]["op"]](ops, n_features, batch, theta, input_grad, rows)
    return Net(ops, n_features, batch, theta, input_grad)


# ----------------------------------------------------------------------------------- files


def from_file(path, batch, input_grad=False, rows=None, average=None):
    """(net, meta bytes, step, state) from a board float model file (attention_trainfile.py):
    the net trains the file's theta in place; state/step resume an optimizer (or are empty/0).
    rows: new_net's. average: the run's attention_train_seq.Averager, which takes the file's
    weight average if it has one (then pass it to Trainer with `step`); None refuses a file
    with an average."""
    import json

    from attention_trainfile import load

    found = [] if average is not None else None
    meta, theta, step, state = load(path, None, found)
    m = json.loads(meta)
    if "ops" not in m or "n_features" not in m:
        raise ValueError("%s: meta lacks 'ops' or 'n_features'; write it with tinyattn."
                         "boardmodel" % path)  # fmt: skip
    net = new_net(m["ops"], int(m["n_features"]), batch, theta, input_grad, rows)
    if found:
        average.value = found[0]
    return net, meta, step, state


def to_file(path, net, meta, opt=None, average=None):
    """Write net.theta (and the optimizer's step count and state, and the running weight
    average of an Averager while the run has one to resume) atomically."""
    from attention_trainfile import save

    avg = average.pending() if average is not None else None
    save(path, meta, net.theta, opt.t if opt else 0, opt.state if opt else (), avg)
