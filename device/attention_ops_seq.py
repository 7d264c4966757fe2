# Device (MicroPython; also runs unchanged under CPython): the seq-attn part of the op checks.
"""The checks of a blob's seq-attn ops (opcodes 7-10: embed, res_attention, res_ff,
masked_pool; the conv stem's conv, 11, in attention_ops_conv.py) that attention_ops.check_ops
delegates here, in its order and with the host reader's messages
(`tinyattn.intmodel.blob._check_op`, `budget_sites`): the tensor slots of embed and
masked_pool, where ops may stand (embed is op 0 of a seq model; 8-11 only in one; reshape,
attention, avgpool and myattn, which do not mask padded tokens, never in one), the shape
rules of embed and res_ff, and the budget sites of the residual adds, res_ff and masked_pool.

Also their rows of the op table (`OPS`, as attention_blob.op_table(): name, iparams, fparams,
shift iparams, multiplier iparams), which attention_blob adds to its own when it meets one.
Load-time only, imported by attention_blob and attention_ops when a blob has these ops (a
non-seq blob never loads it) and dropped with the reader by attention.read_blob.
"""

# a seq model: op 0 is embed; every op runs on the S_n = ceil(n/P) valid tokens
OPS = {
    7: ("embed", ("T", "C", "P", "E", "shift"), ("s_in", "s_out"), ("shift",), ()),
    8: ("res_attention",
        ("S", "E", "H", "has_bias", "shift_q", "shift_k", "shift_v", "shift_o", "M_sm",
         "shift_sm", "M_ctx", "shift_ctx", "M_x", "M_a", "shift_add"),
        ("s_in", "s_q", "s_k", "s_v", "s_ctx", "s_out", "s_y"),
        ("shift_q", "shift_k", "shift_v", "shift_o", "shift_sm", "shift_ctx", "shift_add"),
        ("M_sm", "M_ctx", "M_x", "M_a")),
    9: ("res_ff", ("E", "F", "has_bias", "shift_1", "shift_2", "M_x", "M_f", "shift_add"),
        ("s_in", "s_h", "s_f", "s_y"), ("shift_1", "shift_2", "shift_add"), ("M_x", "M_f")),
    10: ("masked_pool", ("S", "E", "shift"), (), ("shift",), ()),
}  # fmt: skip


def slots(op, quantized):
    """Tensor slots [(role, dtype code, shape)] of embed (7) and masked_pool (10)."""
    ip = op.ip
    if op.code == 10:  # masked_pool: m[k-1] / 2**shift ~ 1/k for k valid tokens
        return [("m", 2, (ip["S"],))] if quantized else []
    # embed: W [E, P*C], per-token bias b [S, E] (dense bias + positional embedding)
    S = -(-ip["T"] // ip["P"])
    out = [("W", 1 if quantized else 4, (ip["E"], ip["P"] * ip["C"])),
           ("b", 3 if quantized else 4, (S, ip["E"]))]  # fmt: skip
    if quantized:
        out += [("s", 4, (ip["E"],)), ("m", 2, (ip["E"],))]
    return out


def pool_table(k, shift, m, fail):
    """masked_pool's table MUST be `shift = 14`, `m[j-1] = rint(2**14 / j)` (ties to even)."""
    if shift != 14:
        raise fail("op %d (masked_pool): shift = %d, must be 14" % (k, shift))
    for i in range(len(m)):
        q, r = divmod(16384, i + 1)
        want = q + (1 if 2 * r > i + 1 or (2 * r == i + 1 and q & 1) else 0)
        if m[i] != want:
            raise fail(
                "op %d (masked_pool): m[%d] = %d, must be rint(2**14 / %d) = %d (the table "
                "of 1/k)" % (k, i, m[i], i + 1, want)
            )


def place(k, op, seq, fail):
    """Ops 8-11 need a seq model (op 0 embed); ops 3-6 cannot run in one."""
    if op.code in (8, 9, 10, 11) and not seq:
        raise fail("op %d (%s) needs a seq model (op 0 embed), op 0 is not embed" % (k, op.name))
    if op.code in (3, 4, 5, 6) and seq:
        raise fail(
            "op %d (%s) cannot run in a seq model (op 0 embed): it does not mask padded "
            "tokens; use res_attention and masked_pool" % (k, op.name)
        )


def shape(k, op, shape, mismatch, fail):
    """Output shape of embed (7: [F] = [C] -> [S, E]) and res_ff (9: [S, E] -> [S, E])."""
    ip = op.ip
    if op.code == 9:  # res_ff, token-wise
        if len(shape) != 2 or shape[1] != ip["E"]:
            raise mismatch("input shape %r, op has [S, E] with E = %d" % (list(shape), ip["E"]))
        return shape
    if k:
        raise fail("op %d (embed) must be op 0 (it reads the input window)" % k)
    if shape != (ip["C"],):
        raise mismatch("n_features = %d channels, op has C = %d" % (shape[0], ip["C"]))
    if ip["P"] > ip["T"]:
        raise mismatch("patch P = %d steps is longer than the window T = %d" % (ip["P"], ip["T"]))
    return (-(-ip["T"] // ip["P"]), ip["E"])


def budget(k, op, fail, dense_budget, site):
    """Budget sites after attention's for res_attention (8), and of res_ff (9) and
    masked_pool (10), with attention_ops' `_dense_budget` and `_site`."""
    ip = op.ip
    if op.code == 10:  # masked_pool: m[k-1] for k valid tokens, a sum of k int8 values
        m = op.t["m"]
        for i in range(ip["S"]):
            site(k, op, "m[%d]" % i, 128 * (i + 1), m[i], ip["shift"], fail)
        return
    if op.code == 9:  # res_ff: Dense1 (relu as the clamp [0, 127]), Dense2
        dense_budget(k, op, "1", ip["shift_1"], fail)
        dense_budget(k, op, "2", ip["shift_2"], fail)
    # the residual add x·M_x + y·M_y: each product a site (their sum, below 128·2**16 +
    # 2**29, holds for any multipliers in range)
    y = "M_a" if op.code == 8 else "M_f"
    site(k, op, "M_x", 128, ip["M_x"], ip["shift_add"], fail)
    site(k, op, y, 128, ip[y], ip["shift_add"], fail)
