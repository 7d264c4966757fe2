# Host (CPython): the stream benchmark's figures and its summary rows in docs/benchmarks.md.
"""tools/bench_stream.scores on a hand-made stream (accuracy inside one recording / activity /
overall, latency after a class change, missed changes) and bench.update_summary (replaces
rows by figure, keeps every other committed row as it was)."""

from __future__ import annotations

import numpy as np
import pytest

from tinyattn.bench import format_table, update_summary
from tinyattn.tools.bench_stream import scores

pytestmark = pytest.mark.host


def test_bench_stream_scores_by_hand():
    T = 4  # recordings of 4 steps, classes 0, 0, 1, 0
    rec = np.repeat([0, 1, 2, 3], 4)  # 16 steps
    label = np.repeat([0, 0, 1, 0], 4)  # changes at steps 8 (0 -> 1) and 12 (1 -> 0)
    ends = [4, 6, 8, 10, 12, 14, 16]  # hop 2 after the first window
    smoothed = [0, 0, 0, 0, 1, 1, 1]
    s = scores(smoothed, ends, label, rec, T)
    # inside one recording: ends 4, 8, 12, 16 -> right, right, right, wrong
    assert (s["n_recording"], s["acc_recording"]) == (4, 0.75)
    # inside one activity (the window one class): 4, 6, 8, 12 right, 16 wrong
    assert (s["n_activity"], s["acc_activity"]) == (5, 0.8)
    assert s["n_all"] == 7 and s["acc_all"] == pytest.approx(4 / 7)  # 10, 14, 16 wrong
    # change at 8: first correct (class 1) at end 12 -> 4 steps; change at 12: never 0 -> missed
    assert (s["changes"], s["latency_steps"], s["missed"]) == (2, 4.0, 1)


def test_bench_update_summary_replaces_by_figure(tmp_path):
    rows = [("train: ratio NumPy/PyTorch", "0.14", "≤ 0.5", "ok"),
            ("device seq MACs/inference", "63744", "≤ 150000", "ok"),
            ("stream real-time factor (viper, vboard)", "900", "> 1", "ok")]  # fmt: skip
    doc = tmp_path / "b.md"
    text = f"# Benchmarks\n\n## Summary\n```\n{format_table(rows)}\n```\n\n## Other\n```\nx\n```\n"
    doc.write_text(text)
    update_summary(doc, [("stream real-time factor (viper, vboard)", "1254", "> 1", "ok"),
                         ("stream host = board decisions", "PASS", "PASS", "ok")])  # fmt: skip
    lines = doc.read_text().splitlines()
    assert lines[4:7] == text.splitlines()[4:7]  # the other rows byte for byte
    assert "1254" in lines[7] and "900" not in doc.read_text() and "PASS" in lines[8]
    assert lines[-4:] == ["## Other", "```", "x", "```"]
