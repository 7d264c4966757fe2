# Device (MicroPython; also runs unchanged under CPython): the conv op's step of a seq program.
"""`step(...)`: the conv op's step (opcode 11) for attention_build_seq.build, in a module of its
own so that a seq model without a conv never holds this bytecode while it loads. Load-time
only, dropped with attention_build_seq.
"""

import array

from attention_build import dense_step


def step(ks, op, x, y, S, int8, div, steps, rows):
    """Append the conv step (INT8[9]; FLOAT[7], the same kernel run with shift 0: its float sum
    times s_w, plus the float bias) to `steps`; its S_out (p[0]) and S_in (p[1]) count tokens:
    ceil(S_n / (div * stride)) and ceil(S_n / div) in `rows`."""
    ip = op.ip
    st = dense_step(ks[9 if int8 else 7], op, "", x, y, 1, 0, 0, int8)
    g = ip["groups"]
    p = [-(-S // ip["stride"]), S, ip["C"], ip["F"], ip["K"], ip["stride"], ip["dilation"],
         ip["C"] // g, ip["F"] // g, (ip["K"] - 1) * ip["dilation"] // 2,
         ip["shift"] if int8 else 0, 0 if ip["relu"] else -128, 127]  # fmt: skip
    steps.append(st[:6] + (array.array("i", p),))
    rows.append((steps[-1][6], 0, 1, div * ip["stride"]))
    rows.append((steps[-1][6], 1, 1, div))
