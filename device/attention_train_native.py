# Device (MicroPython only): the training kernels compiled to machine code (@micropython.native).
"""A verbatim copy of the kernel section of attention_train.py (dense_fwd .. sgd_step) with
`@micropython.native` on every kernel: same results, about half the time per epoch on the unix
port. attention_train.use_kernels("auto"/"native") binds these; on CPython, or a port without
the native emitter, the import fails and the pure kernels stay. Edit attention_train.py first,
then copy: tests/test_device_train.py checks that the two differ only in these decorators.
"""

import math

import micropython


@micropython.native
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


@micropython.native
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


@micropython.native
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


@micropython.native
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


@micropython.native
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


@micropython.native
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


@micropython.native
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


@micropython.native
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
