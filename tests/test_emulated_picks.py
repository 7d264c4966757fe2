# Host (CPython) + the emulated Pico and Cortex-M3 (../shared/boards).
"""tools/bench_picks.py on two small picks laid out as tools/bench_search.py lays out a pick
directory (model.npz with a search record; model.bin exported by the tool when absent): a
seq-rocket model of Coffee searched under a generous --max-ms and the default budget's heap
(without a heap bound its 840 features need ~115 KB, more than the Cortex-M3 has beside
`mpremote mount`), a 5-epoch seq-attn model of BasicMotions under a --max-ms of 1 µs. Both
boards start and stop in the tool; every int8 logit of the first 10 TEST windows is exact on
both, the Pico's µs are measured, and the run fails (exit 1) for the one reason that
BasicMotions' pick is over its max-ms. Skipped with the reason when a board cannot start here."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tinyattn.tools import bench_picks
from tinyattn.tools.emulated_boards import golden_missing, skip_reason

pytestmark = pytest.mark.emulated


def _pick(folder, name, flags, max_us, max_heap=None):
    from tinyattn import cli

    work = folder / name
    work.mkdir()
    assert cli.main(["train", "--dataset", name, *flags, "--out", str(work / "model.npz"),
                     "--quiet"]) == 0  # fmt: skip
    with np.load(work / "model.npz") as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    meta["search"] = {"pick_label": f"{name} pick", "board": "rp2040",
                      "budget": {"max_us": max_us, "max_heap": max_heap}}
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(work / "model.npz", **arrays)


@pytest.mark.slow
def test_emulated_picks_parity_and_max_ms(tmp_path, capsys):
    for kind in bench_picks.BOARDS:
        why = skip_reason(kind) or golden_missing()
        if why:
            pytest.skip(why)
    heap = 49_152  # the search's default budget: a pick it writes loads on both boards
    _pick(tmp_path, "coffee", ["--model", "seq-rocket", "--rocket-max-heap", str(heap)], 1e9,
          heap)  # fmt: skip
    _pick(tmp_path, "basicmotions", ["--epochs", "5"], 1.0)
    capsys.readouterr()
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Other\n```\nkept\n```\n")
    code = bench_picks.main(["--dir", str(tmp_path), "--windows", "10", "--json",
                             "--write", str(doc)])  # fmt: skip
    result = json.loads(capsys.readouterr().out)
    assert code == 1
    rows = {r["name"]: r for r in result["picks"]}
    assert set(rows) == {"coffee", "basicmotions"}
    for r in rows.values():
        for kind in bench_picks.BOARDS:
            assert r[kind]["exact"] == r[kind]["samples"] == 10, (r["name"], kind, r[kind])
            assert r[kind]["kernels"] == "thumb"
        assert r["measured_us"] > 0 and r["predicted_us"] > 0
    assert bench_picks.failures(result) == [
        f"basicmotions: {rows['basicmotions']['measured_us']:,} µs on the Pico, over its "
        "max-ms 0.001"]  # fmt: skip
    text = doc.read_text()
    assert "## Other\n```\nkept\n```" in text and f"## {bench_picks.TITLE}" in text
    assert "first 10 TEST windows" in text
