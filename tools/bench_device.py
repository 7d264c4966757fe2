# Host (CPython): device benchmark — µs/inference and heap of the device runtime under the
# MicroPython unix port (and CPython), next to the naive baseline, in one run.
"""Benchmark of `device/attention.py` on the MicroPython unix port with a board-sized heap.

    .venv/bin/python -m tinyattn.tools.bench_device build/model.bin [--heap 100k] [--json]
        [--seq build/basicmotions.bin [--seq-heap 100k]]

Each case runs `tools/bench_device_run.py` in a fresh interpreter (clean heap figures):
`micropython -X heapsize=100k` (the virtual board's heap, `tinyattn board`; the naive baseline's
nested lists no longer fit 64k next to the runtime's reader) over the device modules
precompiled with `mpy-cross -march=x64` (what a small board runs: a .py module's compile needs
more transient heap than the
model itself), then the same cases under CPython from the .py sources. Cases: the naive
baseline (device/naive.py: nested lists, float math), the float path (pure, native), the int8
path `run_int8` (pure, native, viper) and `quantize`. Figures: best µs per inference of 3 timed
runs, heap held by the loaded model and its buffers (gc.mem_alloc delta around loading), and
bytes allocated per call (gc disabled around the calls).

`bench_device(blob_path) -> dict` returns everything (for `tinyattn bench --device`);
`main()` prints the table. Speedup = naive µs / fastest int8 µs (target >= 5x), also shown
end to end (quantize + run_int8).

MACs: every int8 case reports the model's multiply-accumulates per inference; the int8-viper
case also times, in the same process, a bare viper int8 dot-product loop doing the same number
of MACs and reports our time over its time (issue 11: target <= 1.5x for a seq model).
`seq_blob` (`--seq`): the same MicroPython cases (no naive baseline: it has no seq ops) for a
seq-attn blob on full windows, under `seq_heap` (100k: issue 11's loaded model + buffers
<= 48 KiB is measured there).

References: MicroPython docs "Maximising MicroPython speed" and "MicroPython .mpy files";
DESIGN §6.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tinyattn.board.native import runtime_tree
from tinyattn.paths import device_dir

RUNNER = Path(__file__).resolve().parent / "bench_device_run.py"
BARE = RUNNER.parent / "bench_device_bare.py"  # the runner's bare loop and seq windows
CASES = ("naive", "float-pure", "float-native", "int8-pure", "int8-native", "int8-viper")
# one Iris sample per class (setosa, versicolor, virginica), cycled by the timing loop
SAMPLES = "5.1,3.5,1.4,0.2;6.4,3.2,4.5,1.5;6.3,3.3,6.0,2.5"
SEQ_CASES = CASES[1:]  # the naive baseline has no seq ops
SEQ_SAMPLES = "seq:3"  # three full pseudo-random windows (bench_device_run.windows)
TARGET_SPEEDUP = 5.0
HEAP_BUDGET = 16 * 1024
SEQ_HEAP_BUDGET = 48 * 1024  # issue 11: loaded BasicMotions model + buffers, -X heapsize=100k
TARGET_VS_BARE = 1.5  # issue 11: our viper kernels' time over the bare loop's, seq model


def blob_macs(blob: Path) -> int:
    """Multiply-accumulates of one (full-window) inference of the blob, as `tinyattn export`
    counts them (host side: the device runtime has no room for the count on a small heap)."""
    from tinyattn.intmodel.blob import read_blob
    from tinyattn.intmodel.export import blob_macs as count

    return count(read_blob(blob.read_bytes()))


def find_tool(name: str) -> str | None:
    """`name` next to the running Python (the venv), else on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def compile_mpy(out_dir: Path, mpy_cross: str, arch: str = "x64") -> None:
    """Compile the device modules (the native kernels generated from the pure ones) and the
    runner to .mpy files in `out_dir`."""
    from tinyattn.board.flash import THUMB_ARCHS, THUMB_MODULES

    tree = runtime_tree(device_dir(), out_dir / "src")
    sources = sorted(tree.glob("attention*.py")) + [tree / "naive.py", RUNNER, BARE]
    for src in sources:
        if src.stem in THUMB_MODULES and arch not in THUMB_ARCHS:
            continue  # the Thumb assembler kernels: ARM boards only
        out = out_dir / (src.stem + ".mpy")
        subprocess.run([mpy_cross, f"-march={arch}", "-o", str(out), str(src)], check=True,
                       capture_output=True, text=True)  # fmt: skip


def run_case(cmd: list[str], timeout: float = 120.0) -> dict[str, Any]:
    """One case in a fresh interpreter; its last stdout line is a JSON object."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        err = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        return {"error": err[-1] if err else f"exit status {proc.returncode}"}
    return json.loads(lines[-1])


def _micropython_cases(
    blob: Path,
    micropython: str,
    mpy_cross: str | None,
    heap: str,
    cases: tuple[str, ...] = CASES,
    samples: str = SAMPLES,
):
    with tempfile.TemporaryDirectory(prefix="tinyattn-bench-") as tmp:
        if mpy_cross:
            modules = Path(tmp)
            compile_mpy(modules, mpy_cross)
            # the runner is an .mpy too: import it from its folder (argv[1:] are its arguments)
            code = f"import sys; sys.path.insert(0, {str(modules)!r}); import bench_device_run"
            base = [micropython, "-X", f"heapsize={heap}", "-c", code]
        else:
            modules = runtime_tree(device_dir(), Path(tmp))  # with the native kernels
            base = [micropython, "-X", f"heapsize={heap}", str(RUNNER)]
        macs = str(blob_macs(blob))
        return {c: run_case(base + [str(modules), str(blob), c, samples, macs]) for c in cases}


def bench_device(
    blob_path: str | Path,
    micropython: str | None = None,
    mpy_cross: str | None = None,
    heap: str = "100k",
    cpython: bool = True,
    use_mpy: bool = True,
    seq_blob: str | Path | None = None,
    seq_heap: str = "100k",
) -> dict[str, Any]:
    """Run every case; returns {"micropython": {case: figures}, "cpython": {...}, summary,
    and with `seq_blob` "seq": {"blob", "heap", "micropython": {case: figures}}}."""
    blob = Path(blob_path).resolve()
    if not blob.is_file():
        raise FileNotFoundError(f"{blob} not found; run 'make export' first")
    seq = Path(seq_blob).resolve() if seq_blob else None
    if seq and not seq.is_file():
        raise FileNotFoundError(f"{seq} not found; export the seq-attn model first")
    micropython = micropython or find_tool("micropython")
    mpy_cross = (mpy_cross or find_tool("mpy-cross")) if use_mpy else None
    result: dict[str, Any] = {"blob": str(blob), "heap": heap, "samples": SAMPLES}
    if micropython:
        result["micropython"] = _micropython_cases(blob, micropython, mpy_cross, heap)
        result["micropython_modules"] = ".mpy (mpy-cross -march=x64)" if mpy_cross else ".py"
    if cpython:
        base = [sys.executable, str(RUNNER), str(device_dir()), str(blob)]
        macs = str(blob_macs(blob))
        result["cpython"] = {c: run_case(base + [c, SAMPLES, macs]) for c in CASES}
    for impl in ("micropython", "cpython"):
        if impl in result:
            result[impl + "_summary"] = summarize(result[impl])
    if seq and micropython:
        result["seq"] = {
            "blob": str(seq),
            "heap": seq_heap,
            "micropython": _micropython_cases(seq, micropython, mpy_cross, seq_heap,
                                              SEQ_CASES, SEQ_SAMPLES),
        }  # fmt: skip
    return result


def summarize(cases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Fastest int8 path, its speedup over naive (run_int8 only and end to end)."""
    int8 = {c: r["us"] for c, r in cases.items() if c.startswith("int8") and "us" in r}
    naive = cases.get("naive", {}).get("us")
    if not int8 or not naive:
        return {}
    best = min(int8, key=int8.get)
    e2e = int8[best] + cases[best].get("quantize_us", 0.0)
    return {
        "fastest_int8": best,
        "speedup": naive / int8[best],
        "speedup_end_to_end": naive / e2e,
        "meets_target": naive / int8[best] >= TARGET_SPEEDUP,
    }


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def format_table(result: dict[str, Any]) -> str:
    lines = [f"device benchmark: {result['blob']} (one sample per Iris class, cycled)"]
    for impl in ("micropython", "cpython"):
        if impl not in result:
            continue
        cases = result[impl]
        if impl == "micropython":
            lines.append(f"\nMicroPython unix port, -X heapsize={result['heap']}, modules "
                         f"{result['micropython_modules']}")  # fmt: skip
        else:
            lines.append(f"\nCPython {sys.version.split()[0]} (same .py files; no native/viper "
                         "kernels there, and CPython is not the target)")  # fmt: skip
        naive = cases.get("naive", {}).get("us")
        lines.append(f"{'case':<14}{'us/inference':>13}{'vs naive':>10}{'model heap B':>14}"
                     f"{'alloc B/call':>14}{'net B/call':>12}")  # fmt: skip
        for c in CASES:
            r = cases.get(c, {})
            if "us" not in r:
                lines.append(f"{c:<14}  n/a: {r.get('error', 'not run')}")
                continue
            speed = f"{naive / r['us']:.1f}x" if naive else "-"
            heap, alloc, net = r.get("heap"), r.get("alloc"), r.get("net")
            lines.append(f"{c:<14}{r['us']:>13.1f}{speed:>10}{_fmt(heap, 'd'):>14}"
                         f"{_fmt(alloc, '.0f'):>14}{_fmt(net, '.0f'):>12}")  # fmt: skip
        q = next((cases[c] for c in CASES if c.startswith("int8") and "quantize_us" in cases[c]),
                 None)  # fmt: skip
        if q:
            new = _fmt(q.get("quantize_new_alloc"), ".0f")
            lines.append(f"{'quantize':<14}{q['quantize_us']:>13.1f}{'':>10}{'':>14}"
                         f"{_fmt(q.get('quantize_alloc'), '.0f'):>14}"
                         f"{_fmt(q.get('quantize_net'), '.0f'):>12}"
                         f"  (into a new array: {new} B)")  # fmt: skip
        s = result.get(impl + "_summary") or {}
        if s:
            met = "met" if s["meets_target"] else "NOT met"
            target = f"; target >= {TARGET_SPEEDUP:.0f}x: {met}" if impl == "micropython" else ""
            e2e = s["speedup_end_to_end"]
            lines.append(f"fastest int8: {s['fastest_int8']}, {s['speedup']:.1f}x the naive "
                         f"baseline ({e2e:.1f}x with quantize){target}")  # fmt: skip
        loads = [cases[c] for c in CASES if c.startswith("int8") and cases[c].get("heap")]
        if loads:
            first = max(r["heap"] for r in loads)
            again = max(r.get("heap_reload") or 0 for r in loads)
            lines.append(f"loaded model + buffers: {first} B on the first load, {again} B when "
                         f"loaded again (budget {HEAP_BUDGET} B)")  # fmt: skip
        lines += _bare_lines(cases)
    if "seq" in result:
        lines += _seq_table(result["seq"], result.get("micropython_modules", ".py"))
    return "\n".join(lines)


def _bare_lines(cases: dict[str, dict[str, Any]], target: float | None = None) -> list[str]:
    r = cases.get("int8-viper", {})
    if "bare_us" not in r:
        return []
    goal = ""
    if target:
        goal = f" (target <= {target:.1f}x: {'met' if r['vs_bare'] <= target else 'NOT met'})"
    return [f"MACs per inference: {r['macs']:,}; bare viper int8 dot-product loop doing the "
            f"same MACs: {r['bare_us']:.1f} us; int8-viper run_int8 {r['us']:.1f} us = "
            f"{r['vs_bare']:.2f}x the bare loop{goal}"]  # fmt: skip


def _seq_table(seq: dict[str, Any], modules: str) -> list[str]:
    cases = seq["micropython"]
    lines = [f"\nseq model {seq['blob']} (full windows), MicroPython unix port, -X heapsize="
             f"{seq['heap']}, modules {modules}",
             f"{'case':<14}{'us/inference':>13}{'MACs/us':>9}{'model heap B':>14}"
             f"{'alloc B/call':>14}{'net B/call':>12}"]  # fmt: skip
    for c in SEQ_CASES:
        r = cases.get(c, {})
        if "us" not in r:
            lines.append(f"{c:<14}  n/a: {r.get('error', 'not run')}")
            continue
        rate = _fmt(r["macs"] / r["us"] if r.get("macs") else None, ".1f")
        heap, alloc, net = r.get("heap"), r.get("alloc"), r.get("net")
        lines.append(f"{c:<14}{r['us']:>13.1f}{rate:>9}{_fmt(heap, 'd'):>14}"
                     f"{_fmt(alloc, '.0f'):>14}{_fmt(net, '.0f'):>12}")  # fmt: skip
    heaps = [r["heap"] for c, r in cases.items() if c.startswith("int8") and r.get("heap")]
    if heaps:
        ok = "met" if max(heaps) <= SEQ_HEAP_BUDGET else "NOT met"
        lines.append(f"loaded model + buffers: {max(heaps)} B (budget {SEQ_HEAP_BUDGET} B: "
                     f"{ok})")  # fmt: skip
    return lines + _bare_lines(cases, TARGET_VS_BARE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("blob", nargs="?", default="build/model.bin", help="model blob")
    parser.add_argument("--heap", default="100k", help="MicroPython heap (default: 100k)")
    parser.add_argument("--micropython", help="micropython binary (default: the venv's)")
    parser.add_argument("--py", action="store_true",
                        help="run the .py sources under MicroPython instead of .mpy")  # fmt: skip
    parser.add_argument("--no-cpython", action="store_true", help="skip the CPython run")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--seq", help="also benchmark this seq-attn blob (full windows)")
    parser.add_argument("--seq-heap", default="100k", help="heap of the seq runs (100k)")
    args = parser.parse_args(argv)
    try:
        result = bench_device(args.blob, micropython=args.micropython, heap=args.heap,
                              cpython=not args.no_cpython, use_mpy=not args.py,
                              seq_blob=args.seq, seq_heap=args.seq_heap)  # fmt: skip
    except FileNotFoundError as exc:
        print(f"bench_device: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
