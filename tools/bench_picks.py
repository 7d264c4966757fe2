"""Host (CPython): the search's picks on the emulated boards (issue 39, issue 42).

For every pick directory under `--dir` (default build/bench-search: tools/bench_search.py leaves
each problem's pick there as model.npz, and model.bin after its virtual-board parity; a pick
without model.bin is exported first), on the emulated boards of ../shared/boards, started and
stopped here (a board whose emulator is absent is skipped with the reason):

- **parity** on the emulated Pico (rp2 firmware, Cortex-M0+) and Cortex-M3 (qemu, ARMv7-M): the
  first `--windows` TEST windows of the pick's problem (default WINDOWS; 0: every one) quantized
  on the host, run on the board by the runtime with `kernels="auto"` (thumb on both), every
  int8 logit equal to the host integer reference's (`run_int8`). The subset is the first N in
  the split's order, deterministic: PLAID's whole TEST split (537 windows of up to 1,344 int32
  steps, 2.9 MB) neither fits the Pico's filesystem nor a few minutes of emulated time.
- **µs on the Pico's clock**: one full-length int8 inference, the fastest of
  tools/bench_pico_cost.py's REPEAT runs, next to the µs the board's time model predicts
  (`board.cost.predict_us` with host/board/rp2040.json's rates), Δ %, and whether it is within
  the `--max-ms` the pick was searched under (the model file's meta["search"]["budget"]
  ["max_us"]; a pick of the default budget has none: n/a).

Exits 1 when a parity fails or a pick is over its max-ms, 2 when there is no pick.

    python -m tinyattn.tools.bench_picks [--dir build/bench-search] [--boards pico,cortex-m3]
        [--windows 100] [--write docs/benchmarks.md] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tinyattn.bench import PICKS_TITLE as TITLE
from tinyattn.errors import CLIError
from tinyattn.tools.bench_search import OUT_DIR

BOARDS = ("pico", "cortex-m3")
PRESET = {"pico": "rp2040"}  # the search's board preset each emulated board is
WINDOWS = 100  # TEST windows checked per pick and board (the first ones; 0: all)
TIMEOUT = 3600  # seconds one pick's parity run may take on one board


def find_picks(folder: Path) -> list[Path]:
    """The pick directories under `folder` (a model.npz with a search record), by name."""
    return sorted(p for p in folder.iterdir() if (p / "model.npz").is_file()) \
        if folder.is_dir() else []  # fmt: skip


def pick_info(work: Path) -> dict[str, Any]:
    """The pick in `work`: its problem, label, search budget's µs (None: no --max-ms), blob
    (exported from model.npz when absent) and the blob's bytes."""
    from tinyattn.intmodel.export import export_model

    with np.load(work / "model.npz", allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
    search = meta.get("search") or {}
    blob = work / "model.bin"
    if not blob.is_file():
        export_model(work / "model.npz", blob)
    budget = search.get("budget") or {}
    return {"name": work.name, "dataset": meta["dataset"],
            "label": search.get("pick_label", meta.get("model", "?")),
            "max_us": budget.get("max_us"), "max_heap": budget.get("max_heap"),
            "board": search.get("board"),
            "blob": blob, "bytes": blob.stat().st_size}  # fmt: skip


def reference(info: dict[str, Any], windows: int, folder: Path) -> np.ndarray:
    """The pick's first `windows` TEST windows (0: all) quantized on the host, written as
    NAME.bin and NAME-auto.xq in `folder` (tools/emulated_boards.write_xq); returns the host
    integer reference's logits [N, K]."""
    from tinyattn.board.parity import fit_windows
    from tinyattn.data.timeseries import load_ts_dataset
    from tinyattn.intmodel.blob import read_blob
    from tinyattn.intmodel.intref import quantize_input, run_int8
    from tinyattn.tools.emulated_boards import write_xq

    raw = info["blob"].read_bytes()
    blob = read_blob(raw)
    test = load_ts_dataset(info["dataset"], "test")
    X, n = test.X, test.lengths
    if windows:
        X, n = X[:windows], n[:windows]
    X, n, _ = fit_windows(blob, X, n)  # a window longer than T: its last T steps, as parity
    xq = quantize_input(blob, X, n)
    (folder / f"{info['name']}.bin").write_bytes(raw)
    write_xq(folder / f"{info['name']}-auto.xq", n, xq, wide=xq.dtype.itemsize > 1)
    return run_int8(blob, xq, n)


def compare(out: str, want: np.ndarray) -> dict[str, Any]:
    """The runner's output against the host logits: `{exact, samples, kernels}` (exact: the
    windows whose every logit is equal)."""
    from tinyattn.tools.emulated_boards import parse_golden

    rows, kernels, _ = parse_golden(out)
    exact = sum(rows.get(i) == w.tolist() for i, w in enumerate(want))
    return {"exact": int(exact), "samples": len(want), "kernels": kernels}


def runner() -> str:
    """tools/emulated_boards.GOLDEN_RUNNER reading one record at a time after a collection:
    its 8-record buffer of a long rocket window (8 x 5,378 B for 1,344 int32 steps) beside the
    model runs the Cortex-M3's 140 KB heap out with `mpremote mount`'s."""
    from tinyattn.tools.emulated_boards import GOLDEN_RUNNER

    src = GOLDEN_RUNNER.replace("bytearray(8 * size)", "bytearray(size)")
    src = src.replace("def go(name, kernels):\n", "def go(name, kernels):\n    gc.collect()\n")
    assert src.count("gc.collect()") == 1 and "bytearray(size)" in src
    return "import gc\n" + src


class Board:
    """An emulated board with the runtime on it, running the picks' windows."""

    def __init__(self, kind: str, folder: Path):
        from tinyattn.tools.emulated_boards import EmulatedBoard

        self.kind, self.folder = kind, folder
        self.board = EmulatedBoard(kind).start()

    def setup(self) -> None:
        from tinyattn.board.flash import compile_mpy, device_sources, flash
        from tinyattn.tools.emulated_boards import GOLDEN

        (self.folder / "picks_runner.py").write_text(runner())
        if self.kind == "pico":  # a filesystem: the runtime flashed as a user's is
            flash(self.board.tty, GOLDEN / "iris.bin", use_mpy=True, progress=False)
        else:  # no filesystem: the runtime as .mpy in the folder `mpremote mount` serves
            compile_mpy(device_sources(), self.board.arch, self.folder)

    def run(self, name: str) -> str:
        """picks_runner.go(name, "auto") on the board: its output."""
        from tinyattn.board.flash import mpremote

        call = f"import picks_runner; picks_runner.go({name!r}, 'auto')"
        if self.kind == "pico":
            files = ["picks_runner.py", f"{name}.bin", f"{name}-auto.xq"]
            chain: list[str] = []
            for f in files:
                chain += ["cp", str(self.folder / f), ":", "+"]
            mpremote(self.board.tty, *chain[:-1], timeout=1200)
            try:
                return mpremote(self.board.tty, "exec", call, timeout=TIMEOUT)
            finally:  # the Pico's filesystem is small: one pick's windows at a time
                mpremote(self.board.tty, "rm", f":{name}-auto.xq", timeout=120)
        return mpremote(self.board.tty, "mount", str(self.folder), "exec", call, timeout=TIMEOUT)

    def stop(self) -> None:
        self.board.stop()


def predicted_us(blob: Path) -> float:
    """µs of one int8 inference on the RP2040 by its time model (host/board/rp2040.json)."""
    from tinyattn.board.cost import predict_us
    from tinyattn.intmodel.blob import read_blob
    from tinyattn.tools.bench_pico import RESULT  # host/board/rp2040.json

    rates = json.loads(RESULT.read_text())["cost"]["rates"]
    return predict_us(read_blob(blob.read_bytes()), rates)


def bench_picks(folder: Path = OUT_DIR, boards=BOARDS, windows: int = WINDOWS,
                progress=None) -> dict[str, Any]:  # fmt: skip
    """`{"windows", "boards": {kind: skip reason or None}, "picks": [row, ...]}`, a row: the
    pick's name, label, bytes, max_us, predicted_us, measured_us, and per board its parity
    (`{exact, samples, kernels, seconds}` or `{error}`)."""
    from tinyattn.tools.emulated_boards import golden_missing, skip_reason

    say = progress or (lambda what: None)
    infos = [pick_info(p) for p in find_picks(folder)]
    result: dict[str, Any] = {"dir": str(folder), "windows": windows, "boards": {},
                              "picks": []}  # fmt: skip
    rows = {i["name"]: {k: v for k, v in i.items() if k != "blob"} for i in infos}
    for i in infos:
        rows[i["name"]]["predicted_us"] = predicted_us(i["blob"])
        rows[i["name"]]["measured_us"] = None
    with tempfile.TemporaryDirectory(prefix="bench-picks-") as tmp:
        want = {i["name"]: reference(i, windows, Path(tmp)) for i in infos}
        for kind in boards:
            why = skip_reason(kind) or golden_missing()
            result["boards"][kind] = why
            if why:
                say(f"{kind}: skipped ({why})")
                continue
            say(f"{kind}: starting the emulated board")
            board = Board(kind, Path(tmp))
            try:
                board.setup()
                if kind == "pico" and infos:
                    from tinyattn.tools.bench_pico_cost import measure

                    say("pico: µs of one full-length inference of each pick, on its clock")
                    us = measure(board.board.tty, {i["name"]: i["blob"] for i in infos})
                    board.setup()  # measure flashed the runtime again; the runner with it
                    for name, v in us.items():
                        rows[name]["measured_us"] = v
                for i in infos:
                    say(f"{kind}: {i['name']} ({i['label']}), {len(want[i['name']])} windows")
                    t0 = time.perf_counter()
                    try:
                        res = compare(board.run(i["name"]), want[i["name"]])
                    except (CLIError, subprocess.SubprocessError, RuntimeError, OSError) as exc:
                        res = {"error": f"{type(exc).__name__}: {str(exc)[-300:]}"}
                        if no_room(i, kind, str(exc)):
                            res = {"no_room": no_room_reason(i)}
                    res["seconds"] = time.perf_counter() - t0
                    rows[i["name"]][kind] = res
            finally:
                board.stop()
    result["picks"] = list(rows.values())
    return result


def no_room(info: dict[str, Any], kind: str, error: str) -> bool:
    """A MemoryError of a pick searched under another board's preset (its heap budget made
    for that board: the rp2040 preset's 95.6 KB model does not load on the Cortex-M3's 140 KB
    heap): the board has no room for it, which is not a parity failure. The default budget's
    picks, and a preset's on its own board, must load."""
    return ("MemoryError" in error and info.get("board") is not None
            and PRESET.get(kind) != info["board"])  # fmt: skip


def no_room_reason(info: dict[str, Any]) -> str:
    """Why a pick of no_room did not load: the board preset it was searched for, and that
    budget's model heap when its record holds one (a search record may give only its µs)."""
    heap = info.get("max_heap")
    return (f"MemoryError: searched for {info['board']}'s "
            + (f"{heap:,} B of model heap" if heap is not None else "budget"))  # fmt: skip


def parity_cell(p: dict[str, Any] | None) -> str:
    if p is None:
        return "skipped"
    if "no_room" in p:
        return "no room"
    if "error" in p:
        return "ERROR"
    return f"{p['exact']}/{p['samples']}" + ("" if p["exact"] == p["samples"] else " FAIL")


def within(row: dict[str, Any]) -> bool | None:
    """The measured µs within the pick's max-ms (None: no max-ms, or not measured)."""
    if row.get("max_us") is None or row.get("measured_us") is None:
        return None
    return row["measured_us"] <= row["max_us"]


def failures(result: dict[str, Any]) -> list[str]:
    """What failed, in words: a parity not exact on a board that ran, a pick over its max-ms."""
    out = []
    for r in result["picks"]:
        for kind, why in result["boards"].items():
            p = r.get(kind)
            if p is not None and "no_room" in p:
                continue  # said in the table: not this board's model
            if why is None and (p is None or "error" in p or p["exact"] != p["samples"]):
                out.append(f"{r['name']}: {kind} parity {parity_cell(p)}"
                           + (f" ({p['error']})" if p and "error" in p else ""))  # fmt: skip
        if within(r) is False:
            out.append(f"{r['name']}: {r['measured_us']:,} µs on the Pico, over its max-ms "
                       f"{r['max_us'] / 1000:g}")  # fmt: skip
    return out


def format_table(result: dict[str, Any]) -> str:
    w = result["windows"]
    subset = f"the first {w} TEST windows of each (all when fewer)" if w else "every TEST window"
    lines = [f"Picks in {Path(result['dir']).name}/: int8 logits on {subset}, runtime "
             "kernels='auto' (thumb); Pico µs: one full-length window, fastest of 3, on the "
             "board's clock; predicted: host/board/rp2040.json's time model."]  # fmt: skip
    for kind, why in result["boards"].items():
        if why:
            lines.append(f"{kind}: skipped ({why})")
    lines.append(f"{'problem':<22}{'pick':<40}{'blob B':>8}{'Pico':>10}{'Cortex-M3':>11}"
                 f"{'Pico µs':>9}{'predicted':>10}{'Δ %':>7}  ≤ max-ms?")  # fmt: skip
    for r in result["picks"]:
        m, p = r.get("measured_us"), r["predicted_us"]
        delta = f"{100 * (m - p) / p:+.1f}" if m else "n/a"
        ok = within(r)
        verdict = "yes" if ok else "NO" if ok is False else "?"
        limit = ("n/a (no --max-ms)" if r.get("max_us") is None
                 else f"{verdict} ({r['max_us'] / 1000:g} ms)")  # fmt: skip
        lines.append(f"{r['name']:<22}{r['label'][:39]:<40}{r['bytes']:>8}"
                     f"{parity_cell(r.get('pico')):>10}{parity_cell(r.get('cortex-m3')):>11}"
                     f"{'n/a' if m is None else m:>9}{p:>10.0f}{delta:>7}"
                     f"  {limit}")  # fmt: skip
    room = [f"{r['name']} on {kind} ({r[kind]['no_room']})" for r in result["picks"]
            for kind in result["boards"] if "no_room" in (r.get(kind) or {})]  # fmt: skip
    if room:
        lines.append("no room (a preset's pick on a smaller board): " + "; ".join(room))
    bad = failures(result)
    lines.append("failures: " + ("; ".join(bad) if bad else "none"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the search's picks (tools/bench_search.py's "
                                     "pick directories) on the emulated Pico and Cortex-M3: "
                                     "parity, and µs on the Pico's clock vs the time model")
    parser.add_argument("--dir", type=Path, default=OUT_DIR,
                        help=f"the pick directories' folder (default {OUT_DIR})")
    parser.add_argument("--boards", default=",".join(BOARDS),
                        help="comma-separated, of: pico, cortex-m3 (default both)")
    parser.add_argument("--windows", type=int, default=WINDOWS,
                        help=f"TEST windows checked per pick, the first ones (default {WINDOWS}; "
                        "0: every one)")
    parser.add_argument("--write", type=Path, metavar="FILE",
                        help=f"put the table in FILE's section '{TITLE}' (a preset's picks: "
                        "its own section, the title naming the preset; others kept)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    boards = [b.strip() for b in args.boards.split(",") if b.strip()]
    wrong = [b for b in boards if b not in BOARDS]
    if wrong or not boards:
        parser.error(f"--boards: {', '.join(wrong) or 'none'} not a board; use pico, cortex-m3")
    if args.windows < 0:
        parser.error("--windows: a count >= 0 (0: every TEST window)")
    if not find_picks(args.dir):
        print(f"no pick in {args.dir}: run 'make bench-accuracy' (tools/bench_search.py) or "
              "name the folder of pick directories with --dir", file=sys.stderr)
        return 2
    result = bench_picks(args.dir, boards, args.windows,
                         progress=lambda what: print(f"  {what} ...", file=sys.stderr,
                                                     flush=True))  # fmt: skip
    table = format_table(result)
    print(json.dumps(result, indent=1, default=str) if args.json else table)
    if args.write:
        from tinyattn.bench import picks_title, update_doc_section

        update_doc_section(args.write, picks_title(result), table)
    return 1 if failures(result) else 0


if __name__ == "__main__":
    raise SystemExit(main())
