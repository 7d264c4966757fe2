# Device (MicroPython; windows() also under CPython): helpers of the device benchmark runner.
"""Imported by tools/bench_device_run.py only when a case needs them (a 64 KiB heap has no
room to spare for code a case does not run):

- `bare_dot(x, w, n)`: the bare viper int8 dot-product loop, n MACs `acc += x[i] * w[i]`
  over rows of 256 (int32 activations times int8 weights, with the sign fix-ups of
  attention_viper.dense's inner loop and nothing else): the yardstick of issue 11, Must show
  6; `bare_us(macs, timed)` is its best µs for `macs` MACs.
- `windows(m, k)`: k full windows of a seq model for the timing loop (array('f') each).
"""

import array
import sys

if sys.implementation.name == "micropython":
    import micropython

    @micropython.viper
    def bare_dot(x: ptr32, w: ptr8, n: int) -> int:  # noqa: F821 (viper types)
        one = 1
        sg = one << 31
        acc = 0
        for _ in range(n >> 8):
            for i in range(256):
                acc += ((x[i] ^ sg) - sg) * ((w[i] ^ 0x80) - 0x80)
        for i in range(n & 255):
            acc += ((x[i] ^ sg) - sg) * ((w[i] ^ 0x80) - 0x80)
        return acc & 0xFFFF  # a small int: returning it allocates nothing


def bare_us(macs, timed):
    """Best µs of bare_dot doing `macs` MACs, timed with the runner's `timed`."""
    x = array.array("i", [(i * 37) % 256 - 128 for i in range(256)])
    w = array.array("b", [(i * 91) % 255 - 127 for i in range(256)])
    return timed(bare_dot, [(x, w, macs)])[0]


def windows(m, k):
    """k full windows of seq model `m` (m.steps steps of m.n_features channels), each an
    array('f'): mean[c] + std[c] * g, g ~ N(0, 1) (a sum of 4 uniforms of a fixed LCG,
    rescaled; no `random` module needed). A seq model's time does not depend on the values.
    Not lists: a list of 600 floats is 600 heap objects (~14 KB on the 64-bit unix port), and
    three of them next to the model do not fit the 100k heap of the seq cases."""
    state = 12345
    out = []
    C = m.n_features
    n = m.steps * C
    mean, std = m._norm[0], m._norm[1]  # the model's input normalization (attention.py)
    for _ in range(k):
        x = array.array("f", bytes(4 * n))
        for i in range(n):
            g = 0.0
            for _ in range(4):
                state = (state * 75 + 74) % 65537  # ZX81's LCG: small ints only
                g += state / 65537.0
            x[i] = mean[i % C] + std[i % C] * (g - 2.0) * 1.7320508
        out.append(x)
    return out
