# Device (MicroPython; also runs unchanged under CPython): float32 training of the sequence
# model `seq-attn` — the window net, its sequence blocks (forward with caches, backward), masks.
"""On-board training of windows [T, C] with lengths (DESIGN §9, §11; issue 13). Imported only for
a model whose op 0 is `patch_embed` (by server_train_seq, or before attention_train.new_net /
from_file: importing it registers SeqNet in attention_train.NETS); never for inference.

Mirrors host/learn/seqlayers.py + seqmodel.py to float32 rounding (tests/test_device_train_seq.py):

    x [T, C] (valid steps t < len)  -> tokens [S, P*C], S = ceil(T/P)  (SeqNet.gather)
    patch_embed  h = tok W^T + b                          W [E, P*C], b [E]    [S, E]
    pos_add      h = h + pos                              pos [S, E] (no decay) [S, E]
    attention    h = h + MHA(h), keys t >= n masked       Wqkv, Wo, bqkv, bo   [S, E]
    ff           h = h + relu(h W1^T + b1) W2^T + b2      W1 [F,E], W2 [E,F], b1, b2
    masked_pool  m = (1/n) sum_{s<n} h_s                                        [E]
    dense        logits = m Wc^T + bc                     (attention_train.Dense)

n = ceil(len / P) valid tokens. Masking as the host: padded steps are *written* as 0 by gather
(selected, never multiplied: garbage or NaN there stays out), a padded token is never a key
(its softmax weight is exactly 0) and never pooled, so its gradient is exactly 0 and it changes
neither a logit nor a gradient. Its own query row is skipped: ctx = 0 there (the host computes it
from zeros and parameters; either way it only meets zero gradients).

Attention, one query row s < n at a time (no S x S matrix is kept; per head, D = E/H,
c = 1/sqrt(D)):
  forward   a_t = softmax_t(c q_s.k_t) over t < n;  ctx_s = sum_t a_t v_t;  lse_s cached [B,H,S]
  backward  a_t = exp(c q_s.k_t - lse_s) again;  dA_t = dctx_s.v_t;
            dS_t = c a_t (dA_t - sum_u a_u dA_u);  dQ_s = sum_t dS_t k_t;
            dK_t += dS_t q_s;  dV_t += a_t dctx_s
  residual  y = x + out;  dx = dy + (the attention's dx)
Feed-forward: z = relu(x W1^T + b1) (cached), y = x + z W2^T + b2;
  dz = (dy W2) * [z > 0];  gW2 = dy^T z, gW1 = dz^T x;  dx = dy + dz W1.
Pool: dx_s = dy / n for s < n, else 0.  Pos: gpos = sum_b dy.

Storage: the parameters are slices of attention_train.Net's flat theta in the host's
`Sequential.theta` order (each layer's `params` dict order): patch_embed W, b; pos; attention
Wqkv, Wo, bqkv, bo; ff W1, W2, b1, b2; dense W, b. Weight decay (mask 1) on W, Wqkv, Wo, W1,
W2 — not on pos (as SeqModel) nor biases. Buffers are allocated once in SeqNet(...) for
B = `rows` windows (a minibatch runs in pieces of `rows`, gradients summed: the heap scales
with rows, not the batch); the backward gradients [B,S,E] alternate between two buffers by layer
parity and the backward scratch ([B,S,max(3E,F)]) is one buffer, shared by all blocks.
Heap (unix port, 64-bit, .mpy): the tuned BasicMotions model (P5 E16 H2 L1 F32, 3,044
parameters) holds 376 KiB with rows = batch = 16, 86 KiB with rows = 1 (59 KiB of it theta,
grad, gsum and AdamW's m, v).

Windows from a file (WindowFile): a board cannot hold BasicMotions' ~192 KB or
JapaneseVowels' ~800 KB of float32 windows in RAM, so gather can read each window (and its
length) from a file on the board's filesystem as it needs it: one seek + readinto of the length
into a 2-byte buffer, one of the window into a [T, C] array('f') allocated once (no allocation
per window; tests/test_device_train_seq.py runs gather under heap_lock). Pass the WindowFile as
X (lengths None) to SeqNet.gather / step, Trainer and Trainer.evaluate; training from the file
equals training from RAM exactly. The file ("TAWF", version 1; the host writes it with
tinyattn.board.onboard_seq.window_file_bytes), little-endian throughout:

| offset | size | field | meaning |
|---|---|---|---|
| 0 | 4 | magic | b"TAWF" |
| 4 | u16 | version | 1; a reader MUST reject any other |
| 6 | u16 | flags | 0 (reserved; MUST be 0) |
| 8 | u32 | N | windows, 1..65535 |
| 12 | u32 | T | steps of each stored window (the model's T: longer windows cut) |
| 16 | u32 | C | channels |
| 20 | 2·N | lengths | u16, valid steps of each window, 1..T |
| 20+2N | N | labels | u8, class of each window |
| .. | pad | zeros | to a multiple of 4: `(-3N) % 4` bytes |
| .. | 4·N·T·C | rows | float32 [N, T, C], standardized; steps >= length: any value (unread) |
| end−4 | u32 | crc | CRC-32 (IEEE, as zlib.crc32) of bytes [0, end−4) |

WindowFile(path) checks the header, the size and (check=True, one pass through the window
buffer) the CRC, and a length when it reads one: ValueError, one line naming the file and the
problem, for a bad magic, version, flags or header, a wrong size (truncated), a CRC mismatch
or a length outside 1..T.

References: host/learn/seqlayers.py (the masks); Vaswani et al. (2017); Dao et al. (2022),
"FlashAttention" (recomputing the attention row from its log-sum-exp in backward).
"""

import math
import struct
from array import array

import attention_train as at

try:
    from binascii import crc32
except ImportError:  # a port built without binascii.crc32: the runtime's table version
    from attention_crc import crc32

WINDOWS_MAGIC = b"TAWF"
_WINDOWS_HEADER = "<4sHHIII"  # magic, version, flags, N, T, C
_REMEDY = "send it again (tinyattn train --on-board writes it: onboard_seq.window_file_bytes)"

# ------------------------------------------------------------------------------------ kernels


def mha_fwd(qkv, ctx, lse, a, ntok, B, S, E, H, scale):
    """ctx [B,S,E], lse [B,H,S] from qkv [B,S,3E]; window b attends over its first ntok[b]
    tokens; padded query rows get ctx 0. a: one row of weights (S,) scratch."""
    D = E // H
    E3 = 3 * E
    exp = math.exp
    log = math.log
    for b in range(B):
        n = ntok[b]
        base = b * S * E3
        for h in range(H):
            ho = h * D
            for s in range(S):
                co = (b * S + s) * E + ho
                if s >= n:  # padded query: no row
                    for d in range(D):
                        ctx[co + d] = 0.0
                    continue
                qo = base + s * E3 + ho
                mx = -1e38  # below any score
                for t in range(n):  # scores c q_s.k_t over the valid keys  (n,)
                    ko = base + t * E3 + E + ho
                    acc = 0.0
                    for d in range(D):
                        acc += qkv[qo + d] * qkv[ko + d]
                    acc *= scale
                    a[t] = acc
                    if acc > mx:
                        mx = acc
                tot = 0.0
                for t in range(n):  # softmax, row max first
                    e = exp(a[t] - mx)
                    a[t] = e
                    tot += e
                lse[(b * H + h) * S + s] = mx + log(tot)
                for d in range(D):  # ctx_s = sum_t a_t v_t  (D,)
                    acc = 0.0
                    vo = base + 2 * E + ho + d
                    for t in range(n):
                        acc += a[t] * qkv[vo]
                        vo += E3
                    ctx[co + d] = acc / tot


def mha_bwd(qkv, lse, dctx, dqkv, a, ds, ntok, B, S, E, H, scale):
    """dqkv [B,S,3E] (layout of qkv) from dctx [B,S,E]; rows recomputed from lse. a, ds: (S,)."""
    D = E // H
    E3 = 3 * E
    exp = math.exp
    for i in range(B * S * E3):
        dqkv[i] = 0.0
    for b in range(B):
        n = ntok[b]
        base = b * S * E3
        for h in range(H):
            ho = h * D
            for s in range(n):
                qo = base + s * E3 + ho
                do = (b * S + s) * E + ho
                m = lse[(b * H + h) * S + s]
                dot = 0.0
                for t in range(n):  # a_t again, dA_t = dctx_s.v_t
                    ko = base + t * E3 + E + ho
                    acc = 0.0
                    dacc = 0.0
                    for d in range(D):
                        acc += qkv[qo + d] * qkv[ko + d]
                        dacc += dctx[do + d] * qkv[ko + E + d]
                    p = exp(acc * scale - m)
                    a[t] = p
                    ds[t] = dacc
                    dot += p * dacc
                for t in range(n):  # dS_t; dK_t += dS_t q_s, dV_t += a_t dctx_s
                    p = a[t]
                    g = p * (ds[t] - dot) * scale
                    ds[t] = g
                    ko = base + t * E3 + E + ho
                    for d in range(D):
                        dqkv[ko + d] += g * qkv[qo + d]
                        dqkv[ko + E + d] += p * dctx[do + d]
                for d in range(D):  # dQ_s = sum_t dS_t k_t
                    acc = 0.0
                    ko = base + E + ho + d
                    for t in range(n):
                        acc += ds[t] * qkv[ko]
                        ko += E3
                    dqkv[qo + d] = acc


def add_into(y, x, n):
    """y[i] += x[i] for i < n (the residual adds)."""
    for i in range(n):
        y[i] += x[i]


# ------------------------------------------------------------------------------------- layers
# The attention_train.Layer protocol: tokens, width, n_params; bind(th, g, mask);
# forward(x, n) -> y; backward(dy, n) -> dx. `win` is the batch's Windows (ntok, shared buffers);
# `index` the op's position (its backward gradient buffer alternates with its neighbours').


class Windows:
    """What the sequence layers of one net share: ntok [B], the valid tokens of each window of
    the batch (SeqNet.gather sets it); one attention row and its gradient (S,); and the backward
    buffers (`shared`: one per key; an ask larger than the key's buffer gets a new one)."""

    def __init__(self, batch, tokens):
        self.ntok = array("H", bytes(2 * batch))  # (B,)
        self.row_a = at.buf(tokens)  # (S,) a_t of one query row
        self.row_d = at.buf(tokens)  # (S,) dA_t, then dS_t
        self.buffers = {}

    def shared(self, key, n):
        b = self.buffers.get(key)
        if b is None or len(b) < n:
            b = self.buffers[key] = at.buf(n)
        return b


class PosAdd(at.Layer):
    """op `pos_add`: x + pos, in place on the input (the patch embedding's own output)."""

    def __init__(self, op, tokens, width, offset):
        S = int(op["tokens"])
        E = int(op["embed_dim"])
        if (S, E) != (tokens, width):
            raise ValueError("pos_add [%d, %d] on tokens [%d, %d]" % (S, E, tokens, width))
        self.tokens = S
        self.width = E
        self.po = offset
        self.n_params = S * E

    def forward(self, x, n):
        th, po, SE = self.th, self.po, self.tokens * self.width
        i = 0
        for _ in range(n):
            for j in range(po, po + SE):
                x[i] += th[j]
                i += 1
        return x

    def backward(self, dy, n):
        g, po, SE = self.g, self.po, self.tokens * self.width
        for j in range(SE):  # gpos = sum_b dy[b]  (S, E)
            acc = 0.0
            for i in range(j, n * SE, SE):
                acc += dy[i]
            g[po + j] = acc
        return dy


class ResAttention(at.Attention):
    """op `attention` with residual + key_mask: x + MHA(x); caches qkv [B,S,3E], ctx, lse.
    The parameters' layout and bind are attention_train.Attention's."""

    def __init__(self, op, tokens, width, batch, offset, win, index):
        S, E, H = self.layout(op, tokens, width, offset)
        self.win = win
        self.qkv = at.buf(batch * S * 3 * E)  # (B, S, 3E) cache
        self.ctx = at.buf(batch * S * E)  # (B, S, E) cache
        self.lse = at.buf(batch * H * S)  # (B, H, S) cache: each row's log-sum-exp
        self.y = at.buf(batch * S * E)  # (B, S, E)
        self.dqkv = win.shared("scratch", batch * S * 3 * E)  # (B, S, 3E)
        self.dx = win.shared(index & 1, batch * S * E)  # (B, S, E), also dctx

    def forward(self, x, n):
        S, E, th, rows, win = self.S, self.E, self.th, n * self.S, self.win
        self.x = x
        at.dense_fwd(x, self.qkv, th, self.wqkv, self.bqkv, rows, E, 3 * E)
        mha_fwd(self.qkv, self.ctx, self.lse, win.row_a, win.ntok, n, S, E, self.H, self.scale)
        at.dense_fwd(self.ctx, self.y, th, self.wo, self.bo, rows, E, E)
        add_into(self.y, x, rows * E)
        return self.y

    def backward(self, dy, n):
        S, E, th, g, rows, win = self.S, self.E, self.th, self.g, n * self.S, self.win
        dctx = self.dx
        at.dense_bwd(self.ctx, dy, dctx, th, g, self.wo, self.bo, rows, E, E)
        mha_bwd(self.qkv, self.lse, dctx, self.dqkv, win.row_a, win.row_d, win.ntok, n, S, E,
                self.H, self.scale)  # fmt: skip
        at.dense_bwd(self.x, self.dqkv, self.dx, th, g, self.wqkv, self.bqkv, rows, E, 3 * E)
        add_into(self.dx, dy, rows * E)
        return self.dx


class FeedForward(at.Layer):
    """op `ff`: x + relu(x W1^T + b1) W2^T + b2, token-wise; caches z [B,S,F]."""

    def __init__(self, op, tokens, width, batch, offset, win, index):
        E = int(op["embed_dim"])
        F = int(op["hidden"])
        if width != E:
            raise ValueError("ff embed_dim=%d on tokens of %d" % (E, width))
        if not op.get("residual", True):
            raise ValueError("ff: only the residual feed-forward exists")
        self.E = E
        self.F = F
        self.tokens = tokens
        self.width = E
        bias = op.get("bias", True)
        self.w1 = offset  # W1 [F, E], W2 [E, F], b1 [F], b2 [E] (the host's params order)
        self.w2 = offset + F * E
        self.b1 = self.w2 + E * F if bias else -1
        self.b2 = self.b1 + F if bias else -1
        self.n_params = 2 * E * F + ((F + E) if bias else 0)
        self.z = at.buf(batch * tokens * F)  # (B, S, F) cache: relu output
        self.y = at.buf(batch * tokens * E)  # (B, S, E)
        self.dz = win.shared("scratch", batch * tokens * F)  # (B, S, F)
        self.dx = win.shared(index & 1, batch * tokens * E)  # (B, S, E)

    def bind(self, th, g, mask):
        self.th = th
        self.g = g
        for i in range(self.w1, self.w1 + 2 * self.E * self.F):
            mask[i] = 1

    def forward(self, x, n):
        E, F, th, z, rows = self.E, self.F, self.th, self.z, n * self.tokens
        self.x = x
        at.dense_fwd(x, z, th, self.w1, self.b1, rows, E, F)
        for i in range(rows * F):
            if z[i] < 0.0:
                z[i] = 0.0
        at.dense_fwd(z, self.y, th, self.w2, self.b2, rows, F, E)
        add_into(self.y, x, rows * E)
        return self.y

    def backward(self, dy, n):
        E, F, th, g, z, dz = self.E, self.F, self.th, self.g, self.z, self.dz
        rows = n * self.tokens
        at.dense_bwd(z, dy, dz, th, g, self.w2, self.b2, rows, F, E)
        for i in range(rows * F):
            if z[i] <= 0.0:
                dz[i] = 0.0
        at.dense_bwd(self.x, dz, self.dx, th, g, self.w1, self.b1, rows, E, F)
        add_into(self.dx, dy, rows * E)
        return self.dx


class MaskedPool(at.Layer):
    """op `masked_pool`: mean over each window's ntok[b] valid tokens [B,S,E] -> [B,E]."""

    def __init__(self, tokens, width, batch, win, index):
        self.S = tokens
        self.E = width
        self.tokens = 1
        self.width = width
        self.win = win
        self.y = at.buf(batch * width)  # (B, E)
        self.dx = win.shared(index & 1, batch * tokens * width)  # (B, S, E)

    def forward(self, x, n):
        S, E, y, ntok = self.S, self.E, self.y, self.win.ntok
        for b in range(n):
            k = ntok[b]
            for e in range(E):
                acc = 0.0
                i = b * S * E + e
                for _ in range(k):
                    acc += x[i]
                    i += E
                y[b * E + e] = acc / k
        return y

    def backward(self, dy, n):
        S, E, dx, ntok = self.S, self.E, self.dx, self.win.ntok
        i = 0
        for b in range(n):
            k = ntok[b]
            for s in range(S):
                for e in range(b * E, b * E + E):
                    dx[i] = dy[e] / k if s < k else 0.0
                    i += 1
        return dx


# ------------------------------------------------------------------------- windows in a file


class WindowFile:
    """Windows [N, T, C] with lengths and labels in a TAWF file (module docstring), read one
    window at a time into `row` [T*C] (read); the file stays open until close()."""

    def __init__(self, path, check=True):
        f = open(path, "rb")
        try:
            self._open(f, path, check)
        except BaseException:
            f.close()
            raise
        self.f = f

    def _open(self, f, path, check):
        head = f.read(20)
        if len(head) < 20:
            raise ValueError("%s: %d bytes, shorter than the header; %s" % (path, len(head),
                                                                           _REMEDY))  # fmt: skip
        magic, version, flags, N, T, C = struct.unpack(_WINDOWS_HEADER, head)
        if magic != WINDOWS_MAGIC:
            raise ValueError("%s: magic %r, expected %r: not a windows file" % (path, magic,
                                                                               WINDOWS_MAGIC))
        if version != 1 or flags:
            raise ValueError("%s: unsupported format version %d flags 0x%x (this runtime reads "
                             "version 1, flags 0); %s" % (path, version, flags, _REMEDY))
        if not (0 < N < 65536 and 0 < T < 65536 and 0 < C < 4096):
            raise ValueError("%s: header says N=%d T=%d C=%d: corrupt; %s" % (path, N, T, C,
                                                                             _REMEDY))  # fmt: skip
        self.path = path
        self.N = N
        self.T = T
        self.C = C
        self.rows_at = 20 + 3 * N + (-3 * N) % 4
        size = self.rows_at + 4 * N * T * C + 4
        have = f.seek(0, 2)
        if have != size:
            raise ValueError("%s: %d bytes, its header says %d (%s); %s" % (path, have, size,
                             "truncated" if have < size else "extra bytes", _REMEDY))
        self.row = at.buf(T * C)  # (T*C,) the window read last
        self.two = bytearray(2)  # one length
        if check:
            self._check(f, size)

    def _check(self, f, size):
        f.seek(0)
        crc = 0
        left = size - 4
        buf = self.row
        mv = memoryview(buf)
        while left:  # every count is a multiple of 4: the part before the CRC is
            got = f.readinto(buf)  # T*C floats a read (the last, at the end, may hold the CRC)
            if got <= 0:
                break
            if got > left:
                got = left
            crc = crc32(buf if got == 4 * len(buf) else mv[: got // 4], crc)
            left -= got
        f.seek(size - 4)
        tail = f.read(4)
        if struct.unpack("<I", tail)[0] != crc & 0xFFFFFFFF:
            raise ValueError("%s: CRC mismatch (file corrupt or truncated); %s" % (self.path,
                                                                                  _REMEDY))

    def labels(self):
        """The labels [N] (a bytearray, read once)."""
        out = bytearray(self.N)
        self.f.seek(20 + 2 * self.N)
        self.f.readinto(out)
        return out

    def read(self, i):
        """Window i into `row` [T*C]; returns its length."""
        f = self.f
        two = self.two
        f.seek(20 + 2 * i)
        f.readinto(two)
        k = two[0] | two[1] << 8
        if k < 1 or k > self.T:
            raise ValueError("%s: window %d has length %d, outside 1..%d: corrupt; %s" % (
                self.path, i, k, self.T, _REMEDY))  # fmt: skip
        TC = self.T * self.C
        f.seek(self.rows_at + 4 * TC * i)
        if f.readinto(self.row) != 4 * TC:
            raise ValueError("%s: truncated in window %d; %s" % (self.path, i, _REMEDY))
        return k

    def close(self):
        self.f.close()


# ---------------------------------------------------------------------------- weight average


class Averager:
    """host seqtrain.WeightAverager on the device: the running average of the epoch-end
    weights, fed by Trainer.epoch; value [P] is allocated once (Trainer) or read from a
    checkpoint (attention_train.from_file).

    swa: uniform mean over the last max(1, round(swa * epochs)) epochs (0: off); ema: decay
    per epoch (0: off), value <- value + (1 - ema) (theta - value), from the first epoch's
    weights. One of them is on (the host's `Average(swa, ema)`). After the last epoch the
    weights become the average (host fit_seq: `model.theta[...] = avg.value`).

    Checkpoints: the average is in the file (TAFM flag AVERAGE, attention_trainfile) from the
    first epoch that enters it until the run ends; its count is not stored: count = epochs done
    - start (resume)."""

    def __init__(self, epochs, swa=0.0, ema=0.0):
        if not 0.0 <= swa <= 1.0:
            raise ValueError("average swa=%r: a fraction of the epochs, 0..1" % swa)
        if not 0.0 <= ema < 1.0:
            raise ValueError("average ema=%r: a decay per epoch, 0 <= ema < 1" % ema)
        if (swa > 0.0) == (ema > 0.0):
            raise ValueError("average: choose one of swa and ema (got swa=%r ema=%r)" % (swa, ema))
        self.epochs = epochs
        self.ema = ema
        self.start = epochs - max(1, round(swa * epochs)) if swa > 0.0 else 0  # first epoch in
        self.value = None  # (P,)
        self.count = 0  # epochs in the average
        self.done = 0  # epochs done

    def resume(self, n_params, epochs, done):
        """Before the first epoch (Trainer): `done` epochs of `epochs` are behind."""
        if epochs != self.epochs:
            raise ValueError("average over %d epochs, the run has %d" % (self.epochs, epochs))
        self.done = done
        self.count = done - self.start if self.start < done < epochs else 0
        if self.value is None:
            if self.count:
                raise ValueError("a checkpoint after %d epochs without its weight average (%d "
                                 "epochs in it); restart the run" % (done, self.count))
            self.value = at.buf(n_params)
        elif len(self.value) != n_params:
            raise ValueError("weight average of %d values, the net has %d" % (
                len(self.value), n_params))  # fmt: skip
        elif not self.count:
            raise ValueError("a weight average after %d epochs, where none is due" % done)

    def epoch_done(self, done, theta):
        """Fold theta, the weights at the end of epoch `done` (1-based), into the average; after
        the last epoch theta becomes the average."""
        self.done = done
        if done <= self.start:
            return
        v = self.value
        P = len(v)
        if self.count == 0:
            for i in range(P):
                v[i] = theta[i]
        elif self.ema:
            c = 1.0 - self.ema
            for i in range(P):
                v[i] += c * (theta[i] - v[i])
        else:  # swa: running mean
            n = self.count + 1
            for i in range(P):
                v[i] += (theta[i] - v[i]) / n
        self.count += 1
        if done == self.epochs:
            for i in range(P):
                theta[i] = v[i]

    def pending(self):
        """The average a checkpoint must keep (None before it starts and once the run ends)."""
        return self.value if self.count and self.done < self.epochs else None


# ---------------------------------------------------------------------------------------- net


def layer(op, tokens, width, batch, offset, need_dx, win, index):
    """The training layer of a window model's op `op` (the index-th op); ValueError if none."""
    kind = op.get("op")
    if kind == "patch_embed":  # tokens [S, P*C] (SeqNet.gather) through one shared Dense
        PC = int(op["patch"]) * int(op["channels"])
        if index or tokens != 1 or width % PC:
            raise ValueError("patch_embed must be the first op, on windows of [S, %d]" % PC)
        dense = {"in": PC, "out": int(op["embed_dim"]), "bias": op.get("bias", True)}
        return at.Dense(dense, width // PC, PC, batch, offset, need_dx)
    if kind == "pos_add":
        return PosAdd(op, tokens, width, offset)
    if kind == "attention":
        if not (op.get("residual") and op.get("key_mask", True)):
            raise ValueError("a window model's attention is residual with a key mask")
        return ResAttention(op, tokens, width, batch, offset, win, index)
    if kind == "ff":
        return FeedForward(op, tokens, width, batch, offset, win, index)
    if kind == "masked_pool":
        return MaskedPool(tokens, width, batch, win, index)
    if kind == "avgpool":
        raise ValueError("avgpool would average padded tokens; a window model uses masked_pool")
    return at._layer(op, tokens, width, batch, offset, need_dx)


class SeqNet(at.Net):
    """attention_train.Net for a `seq-attn` op list: windows [T, C] with lengths.

    channels: C (the board meta's n_features). The input buffer x holds `rows` windows (default
    `batch`) as tokens [S, P*C] (S*P*C floats each, zero past each window's length; n_in =
    S*P*C). gather(X, labels, order, start, n, lengths) reads windows of X [N, T*C]
    (array('f'), row-major [T, C], the model's T) with lengths [N] in 1..T (None: all T) and
    sets win.ntok.

    rows < batch: every buffer holds `rows` windows, so the heap scales with rows, not batch;
    step() runs a minibatch in pieces of `rows` and sums their gradients (dlogits of a piece
    scaled by its share m/n: the gradient of the minibatch mean loss) in gsum [P].

    shifts: None, or one integer per position of the epoch's order (set before each epoch):
    the window at order[i] is rotated by shifts[i] steps within its length, x'[t] =
    x[(t - shifts[i]) mod len] (host seqtrain.Augment.shift; the host draws the shifts with
    the order from the same generator and sends both)."""

    def __init__(self, ops, channels, batch, theta=None, input_grad=False, rows=None):
        op = ops[0] if ops else {}
        if op.get("op") != "patch_embed":
            raise ValueError("a window model starts with patch_embed, not %r" % op.get("op"))
        if input_grad:
            raise ValueError("input gradients of a window model are not supported")
        T = int(op["steps"])
        C = int(op["channels"])
        P = int(op["patch"])
        if C != channels:
            raise ValueError("patch_embed takes %d channels, the data has %d" % (C, channels))
        S = (T + P - 1) // P
        self.steps = T
        self.channels = C
        self.patch = P
        rows = batch if rows is None or rows > batch else rows
        if rows < 1:
            raise ValueError("rows %d: a piece holds at least one window" % rows)
        self.win = Windows(rows, S)
        self._index = 0
        at.Net.__init__(self, ops, S * P * C, rows, theta)
        self.win.buffers = None  # built: nothing more to share
        self.batch = batch  # the minibatch (Trainer); the buffers hold `rows`
        self.rows = rows
        self.gsum = at.buf(self.n_params) if rows < batch else None  # (P,)
        self.shifts = None

    def layer(self, op, tokens, width, batch, offset, need_dx):
        self._index += 1
        return layer(op, tokens, width, batch, offset, need_dx, self.win, self._index - 1)

    def step(self, X, labels, order, start, n, lengths=None, eps=0.0):
        """One minibatch of n windows in pieces of at most `rows`; returns the mean loss."""
        R = self.rows
        if n <= R:
            return at.Net.step(self, X, labels, order, start, n, lengths, eps)
        P, C, grad, gsum, dl = self.n_params, self.n_classes, self.grad, self.gsum, self.dlogits
        for i in range(P):
            gsum[i] = 0.0
        total = 0.0
        done = 0
        while done < n:
            m = R if n - done > R else n - done
            self.gather(X, labels, order, start + done, m, lengths)
            self.forward(m)
            total += self.loss(m, eps) * m
            share = m / n  # dlogits = (p - t) / m -> (p - t) / n
            for i in range(m * C):
                dl[i] *= share
            self.backward(m)
            for i in range(P):
                gsum[i] += grad[i]
            done += m
        for i in range(P):
            grad[i] = gsum[i]
        return total / n

    def gather(self, X, labels, order, start, n, lengths=None):
        """Windows order[start:start+n] of X [N, T*C] into x (zero past each length), their
        labels and ntok (rotated by self.shifts[start + r] steps when set). X may be a
        WindowFile (its lengths; `lengths` unused): each window is read as it is gathered."""
        T, C, P, W, shifts = self.steps, self.channels, self.patch, self.n_in, self.shifts
        x = self.x
        ntok = self.win.ntok
        wf = X if isinstance(X, WindowFile) else None
        if wf is not None and (wf.T != T or wf.C != C):
            raise ValueError("%s holds windows of [%d, %d], the model takes [%d, %d]" % (
                wf.path, wf.T, wf.C, T, C))  # fmt: skip
        for r in range(n):
            row = order[start + r]
            if wf is None:
                k = T if lengths is None else lengths[row]
                src = X
                o = row * T * C - r * W
            else:
                k = wf.read(row)
                src = wf.row
                o = -r * W
            if k < 1 or k > T:
                raise ValueError("window %d has length %d; lengths must lie in 1..%d" % (
                    row, k, T))  # fmt: skip
            s = 0 if shifts is None else shifts[start + r] % k  # x'[t] = x[(t - s) mod k]
            j = r * W
            for i in range(j, j + s * C):  # the last s valid steps first
                x[i] = src[o + (k - s) * C + i]
            for i in range(j + s * C, j + k * C):
                x[i] = src[o - s * C + i]
            for i in range(j + k * C, j + W):
                x[i] = 0.0
            ntok[r] = (k + P - 1) // P
            self.labels[r] = labels[row]


at.NETS["patch_embed"] = SeqNet  # op 0 patch_embed: a window model
