# Host (CPython): link throughput of compact batches over a virtual board paced like a UART.
"""`python -m tinyattn.tools.bench_link [--blob build/model.bin] [--json]` (and `tinyattn bench
--link`).

What parity sends (`--enc b64`: float32 features in base64, `host/board/parity.py`
run_device) is sent to a virtual board (tools/vboard.py) paced at 115200 and 921600 baud, 8N1,
and unpaced (like USB-CDC), and timed from the first request to the last reply. Every byte
that crosses the port during that time is counted on the host's side, both ways (request +
reply), so

    bytes/sample = (bytes written + bytes read) / samples
    ceiling      = (baud / 10) / bytes/sample   samples/s  (8N1: 10 bits a byte)

is what the wire allows a request/reply protocol (one line out, one line back, no overlap);
"% of ceiling" is the measured rate over it. Unpaced has no ceiling.

Two payloads:
- Iris: the blob given (4 float32 features a sample), every sample of the dataset, path "both"
  (parity's default for an int8 blob: xq, int8 and float logits back).
- window: BasicMotions TEST windows (100 steps × 6 channels, float32: 600 values a window)
  through the BasicMotions seq-attn blob (its defaults, trained here in ~0.3 s), path "both"
  (xq, int8 and float logits back), the window's length sent with it.

The runtime is flashed once (unpaced) into a flash folder; each rate then starts a board on
that folder. Timing is wall clock on a shared machine: a single run, not a gate.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

BAUDS: tuple[int | None, ...] = (115200, 921600, None)  # None: unpaced, like USB-CDC
WINDOW_BLOB = "basicmotions.bin"
# The product's virtual board: the BasicMotions model's server answers a 3.3 KB window request
# there (compact payloads decoded in place in the line buffer, docs/protocol.md).
HEAP = "100k"


class _Counter:
    """Counts the bytes through a pyserial port's write and read (the host's side)."""

    def __init__(self, port: Any) -> None:
        self.tx = self.rx = 0
        write, read = port.write, port.read

        def counted_write(data: bytes) -> int | None:
            self.tx += len(data)
            return write(data)

        def counted_read(size: int = 1) -> bytes:
            data = read(size)
            self.rx += len(data)
            return data

        port.write, port.read = counted_write, counted_read


def measure(
    port: str, baud: int | None, model_path: str, X: np.ndarray, path: str,
    lengths: np.ndarray | None = None,
) -> dict:  # fmt: skip
    """Send X [N, F] or windows X [N, T, C] with `lengths` (as parity does, enc b64) over the
    board on `port`; figures of the run."""
    from tinyattn.board.link import BoardLink, as_sent
    from tinyattn.board.parity import bench_path, board_info, run_device

    X = as_sent(X)
    with BoardLink(port, baud=baud or 115200, timeout=30.0) as link:
        link.start_server(model_path)
        try:
            info = board_info(link)
            count = _Counter(link.serial)
            dev = run_device(link, X, path, 0, False, enc="b64", info=info, lengths=lengths)
            if dev.get("error"):
                raise RuntimeError(f"{model_path} at {baud or 'unpaced'}: {dev['error']}")
            bench = bench_path(link, "int8", 50, dev["slowest_sample_s"])  # as parity's bench
        finally:
            link.stop_server()
    n, secs = len(dev["rows"]), dev["link_seconds"]
    per_sample = (count.tx + count.rx) / n
    rate = n / secs
    ceiling = baud / 10 / per_sample if baud else None
    return {
        "baud": baud,
        "samples": n,
        "seconds": secs,
        "samples_per_s": rate,
        "bytes_per_sample": per_sample,
        "request_bytes_per_sample": count.tx / n,
        "reply_bytes_per_sample": count.rx / n,
        "ceiling_samples_per_s": ceiling,
        "of_ceiling": rate / ceiling if ceiling else None,
        "server_us_int8": bench["us_per_inference"],
        "split_batches": dev.get("split_batches", 0),
    }


def bench_link(
    blob: Path, X_iris: np.ndarray, n_windows: int = 12, heap: str = HEAP
) -> dict[str, Any]:
    """Iris (blob, X_iris) and BasicMotions TEST windows at every rate in BAUDS."""
    from tinyattn.bench import seq_blob
    from tinyattn.board.flash import flash
    from tinyattn.data.timeseries import load_ts_dataset
    from tinyattn.tools.vboard import VirtualBoard

    test = load_ts_dataset("basicmotions", "test")
    X_win, n_win = test.X[:n_windows], test.lengths[:n_windows]  # (N, 100, 6), (N,)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        fs = Path(tmp) / "flash"
        with VirtualBoard(fs) as vb:
            flash(vb.port, blob, progress=False)
        seq_blob(fs / WINDOW_BLOB)
        for baud in BAUDS:
            with VirtualBoard(fs, baud=baud, heap=heap) as vb:
                payloads = (("iris", "model.bin", X_iris, None),
                            ("window", WINDOW_BLOB, X_win, n_win))  # fmt: skip
                for name, model_path, X, lengths in payloads:
                    t0 = time.perf_counter()
                    r = measure(vb.port, baud, model_path, X, "both", lengths)
                    r["path"] = "both"
                    r["payload"], r["wall_s"] = name, time.perf_counter() - t0
                    rows.append(r)
    features = {"iris": X_iris.shape[1], "window": X_win.shape[1] * X_win.shape[2]}
    return {"rows": rows, "features": features, "heap": heap}


def format_table(result: dict[str, Any]) -> str:
    lines = [
        f"{'payload':<8}{'link':>14}{'samples/s':>11}{'B/sample':>10}{'(req+rep)':>12}"
        f"{'ceiling/s':>11}{'of ceiling':>12}"
    ]
    for r in result["rows"]:
        link = f"{r['baud']} baud" if r["baud"] else "unpaced"
        split = f"{r['request_bytes_per_sample']:.0f}+{r['reply_bytes_per_sample']:.0f}"
        ceil = "—" if r["ceiling_samples_per_s"] is None else f"{r['ceiling_samples_per_s']:.1f}"
        pct = "—" if r["of_ceiling"] is None else f"{100 * r['of_ceiling']:.0f} %"
        lines.append(
            f"{r['payload']:<8}{link:>14}{r['samples_per_s']:>11.1f}"
            f"{r['bytes_per_sample']:>10.1f}{split:>12}{ceil:>11}{pct:>12}"
        )
    lines.append(
        f"B/sample: request + reply bytes on the wire; ceiling: (baud/10) / B/sample; path "
        f"both (xq, int8 and float logits back). window: BasicMotions TEST windows (100 x 6 "
        f"float32) through its seq-attn blob; virtual board heap {result['heap']}"
    )
    return "\n".join(lines)


def main() -> None:
    from tinyattn.board.parity import load_samples

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blob", type=Path, default=Path("build/model.bin"))
    parser.add_argument("--model", type=Path, default=Path("build/model.npz"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data = load_samples(args.model, None, None, None)
    result = bench_link(args.blob, data.X)
    print(format_table(result))
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
