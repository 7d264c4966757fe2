# Device (MicroPython; also runs unchanged under CPython): the conv op's checks (opcode 11).
"""The conv stem's op (opcode 11, conv: a 1-D convolution over the tokens of a seq model) for
the reader: its row of the op table (`OPS`, as attention_ops_seq's), its tensor slots and its
shape rule, with the host reader's messages (`tinyattn.intmodel.blob`). A module of its own,
loaded only for a blob that has a conv op (a seq model without one never holds its bytecode
while it loads), and dropped with the reader by attention.read_blob. Where it may stand and its
budget site are attention_ops_seq.place's and attention_ops' dense bound.
"""

OPS = {
    11: ("conv", ("S", "C", "F", "K", "stride", "dilation", "groups", "relu", "has_bias",
                  "shift"), ("s_in", "s_out"), ("shift",), ()),
}  # fmt: skip


def slots(op, quantized, k, fail):
    """Tensor slots of conv: W [F, (C/groups)*K] (PyTorch's [F, C/groups, K]), b [F]."""
    ip = op.ip
    if ip["relu"] not in (0, 1):
        raise fail("op %d (conv): relu = %d, must be 0 or 1" % (k, ip["relu"]))
    if ip["C"] % ip["groups"] or ip["F"] % ip["groups"]:
        raise fail("op %d (conv): groups = %d must divide C = %d and F = %d"
                   % (k, ip["groups"], ip["C"], ip["F"]))  # fmt: skip
    out = [("W", 1 if quantized else 4, (ip["F"], ip["C"] // ip["groups"] * ip["K"]))]
    if ip["has_bias"]:
        out.append(("b", 3 if quantized else 4, (ip["F"],)))
    if quantized:
        out += [("s", 4, (ip["F"],)), ("m", 2, (ip["F"],))]
    return out


def shape(_k, op, shape, mismatch, _fail):
    """[S, C] -> [ceil(S/stride), F]."""
    ip = op.ip
    if shape != (ip["S"], ip["C"]):
        raise mismatch("input shape %r, op has S, C = %d, %d" % (list(shape), ip["S"], ip["C"]))
    return (-(-ip["S"] // ip["stride"]), ip["F"])
