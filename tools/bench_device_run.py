# Device (MicroPython; also runs under CPython): one case of the device benchmark.
"""Run by tools/bench_device.py in a fresh interpreter per case (clean heap figures):

    micropython -X heapsize=64k tools/bench_device_run.py DEVICE_DIR BLOB CASE SAMPLES [MACS]

CASE: naive | float-pure | float-native | int8-pure | int8-native | int8-viper.
SAMPLES: feature vectors `a,b,c,d;e,f,g,h;...` cycled through by the timing loop, or `seq:K`
for K full windows (T steps of C channels, mean + std * a pseudo-random N(0, 1) value per
channel: a seq model's timing does not depend on the values) of a seq blob.
Prints one JSON object: us (best µs per inference over 3 timed runs), iters, heap (bytes the
loaded model and its buffers hold: gc.mem_alloc delta around loading, after gc.collect;
heap_reload: the same for a second load, without the names the first load interned),
alloc (bytes allocated per call, from micropython.mem_total: every allocation counts, also a
bytecode call's frame that MicroPython puts on the heap and frees on return), net (bytes per
call left on the heap, gc disabled around 100 calls; int8 only) and for int8 cases
quantize_us / quantize_alloc / quantize_net (into a reused array) / quantize_new_alloc.
Heap figures are None under CPython. Timing loops live inside functions.
int8 cases also give macs (MACS: multiply-accumulates of one inference, counted on the host by
tools/bench_device.py); under MicroPython int8-viper adds bare_us, the best µs of a bare viper
int8 dot-product loop doing the same number of MACs (tools/bench_device_bare.py), timed in the
same process, and vs_bare = us / bare_us.
"""

import gc
import json
import sys

try:
    from time import ticks_diff, ticks_us
except ImportError:  # CPython
    from time import perf_counter_ns

    def ticks_us():
        return perf_counter_ns() // 1000

    def ticks_diff(a, b):
        return a - b


_HAS_HEAP = hasattr(gc, "mem_alloc")
try:
    from micropython import mem_total as _mem_total  # unix port: bytes allocated so far
except ImportError:
    _mem_total = None
# kernel set -> modules attention.Model imports for it (int8 set, then the float path's)
_KERNEL_MODULES = {
    "pure": ("attention_kernels",),
    "native": ("attention_native",),
    "viper": ("attention_viper", "attention_native"),
}
_TARGET_US = 150000  # each timed run lasts about this long


def heap():
    if not _HAS_HEAP:
        return None
    gc.collect()
    return gc.mem_alloc()


def timed(fn, args):
    """Best µs per call of fn(*args[i % n]) over 3 runs sized to ~_TARGET_US each."""
    n = len(args)
    t0 = ticks_us()
    for a in args:
        fn(*a)
    once = max(1, ticks_diff(ticks_us(), t0) // n)
    iters = min(20000, max(n, _TARGET_US // once))
    best = None
    for _ in range(3):
        t0 = ticks_us()
        for i in range(iters):
            fn(*args[i % n])
        dt = ticks_diff(ticks_us(), t0)
        if best is None or dt < best:
            best = dt
    return best / iters, iters


def alloc_per_call(fn, a, calls):
    """Bytes allocated per fn(*a) with micropython.mem_total() (the unix port's count of every
    allocation, also of call frames freed again on return); None where unavailable."""
    if _mem_total is None:
        return None
    fn(*a)  # warm-up
    t0 = _mem_total()
    for _ in range(calls):
        fn(*a)
    return (_mem_total() - t0) / calls


def net_per_call(fn, a, calls):
    """Bytes per fn(*a) still held after the calls (garbage included: gc is disabled in
    between), from gc.mem_alloc(); None under CPython. Only for calls that allocate little."""
    if not _HAS_HEAP:
        return None
    fn(*a)  # warm-up
    gc.collect()
    gc.disable()
    a0 = gc.mem_alloc()
    for _ in range(calls):
        fn(*a)
    a1 = gc.mem_alloc()
    gc.enable()
    return (a1 - a0) / calls


def main():
    device_dir, blob, case, samples = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    macs = int(sys.argv[5]) if len(sys.argv) > 5 else None
    sys.path.insert(0, device_dir)
    feats = None
    if not samples.startswith("seq:"):
        feats = [[float(v) for v in s.split(",")] for s in samples.split(";")]
    res = {"case": case}
    if case == "naive":
        import naive

        h0 = heap()
        m = naive.NaiveModel(blob)
        h1 = heap()
        res["heap"] = h1 - h0 if _HAS_HEAP else None
        res["us"], res["iters"] = timed(m.logits, [(f,) for f in feats])
        res["alloc"] = alloc_per_call(m.logits, (feats[0],), 2)
        print(json.dumps(res))
        return
    import attention

    path, kernels = case.split("-")
    try:  # import the kernel modules the model will use before measuring its heap
        for name in _KERNEL_MODULES[kernels]:
            __import__(name)
    except Exception as exc:  # CPython (no `micropython`), a port without native emitters
        res["error"] = "kernels " + kernels + " not available: " + repr(exc)
        if sys.implementation.name != "micropython":  # CPython has none: not a failure
            res["skipped"] = True
        print(json.dumps(res))
        return
    h0 = heap()
    m = attention.Model(blob, kernels=kernels)
    h1 = heap()
    res["heap"] = h1 - h0 if _HAS_HEAP else None
    m = None  # load again: the first load also interned the reader modules' names (qstrs)
    h0 = heap()
    m = attention.Model(blob, kernels=kernels)
    h1 = heap()
    res["heap_reload"] = h1 - h0 if _HAS_HEAP else None
    res["kernels"] = m.kernels
    res["float_kernels"] = m.float_kernels
    if feats is None:
        from bench_device_bare import windows  # imported only when needed: a 64k heap is tight

        feats = windows(m, int(samples[4:]))
    if path == "float":
        out = [0.0] * m.n_classes
        res["us"], res["iters"] = timed(m.run_float, [(f, out) for f in feats])
        res["alloc"] = alloc_per_call(m.run_float, (feats[0], out), 3)
    else:
        out = m.new_logits()
        xqs = [(m.quantize(f), out) for f in feats]
        res["us"], res["iters"] = timed(m.run_int8, xqs)
        res["macs"] = macs
        # the bare loop, in the same process, right after
        if case == "int8-viper" and macs and sys.implementation.name == "micropython":
            from bench_device_bare import bare_us

            res["bare_us"] = bare_us(macs, timed)
            res["vs_bare"] = res["us"] / res["bare_us"]
        res["alloc"] = alloc_per_call(m.run_int8, xqs[0], 100)
        res["net"] = net_per_call(m.run_int8, xqs[0], 100)
        xq = m.quantize(feats[0])  # a reusable int8 input buffer
        # gc is off while net_per_call runs: a seq window's floats fill the heap in one call
        calls = 10 if len(feats[0]) <= 64 else 1
        res["quantize_us"] = timed(m.quantize, [(f, xq) for f in feats])[0]
        res["quantize_alloc"] = alloc_per_call(m.quantize, (feats[0], xq), calls)
        # gc off: a seq window's ~40 KB of transient floats per call would fill the heap
        short = len(feats[0]) <= 64
        res["quantize_net"] = net_per_call(m.quantize, (feats[0], xq), calls) if short else None
        res["quantize_new_alloc"] = alloc_per_call(m.quantize, (feats[0],), calls)
    print(json.dumps(res))


main()
