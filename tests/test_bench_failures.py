# Host (CPython): a benchmark case that fails makes `tinyattn bench` fail, docs untouched.
"""Issue 40: the sequence model's device section read `n/a: AttributeError: 'Model' object has
no attribute '_mean'` on every row (tools/bench_device_bare.py used a field the device Model
renamed), the command exited 0, and `--write` replaced docs/benchmarks.md's summary rows with
the errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tinyattn import bench, cli

ROOT = Path(__file__).resolve().parents[1]
BM = ROOT / "tests" / "golden" / "trained" / "basicmotions.bin"


@pytest.mark.host
def test_bench_device_bare_windows_of_a_seq_model_under_cpython(monkeypatch):
    """The runner's seq-model windows, from the device Model as it is (CPython runs it)."""
    monkeypatch.syspath_prepend(str(ROOT / "device"))
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    for name in [n for n in sys.modules if n.startswith("attention")]:
        monkeypatch.delitem(sys.modules, name)
    from attention import Model
    from bench_device_bare import windows

    m = Model(str(BM), kernels="pure")
    xs = windows(m, 2)
    assert len(xs) == 2 and len(xs[0]) == m.steps * m.n_features


@pytest.mark.host
def test_bench_failures_finds_every_case_with_an_error_but_not_a_skip():
    result = {"device": {"cases": [{"us": 3.0}, {"error": "AttributeError: _mean"}]},
              "stream": {"error": "not installed", "skipped": True}, "train": [1, 2]}
    assert bench.failures(result) == [("device.cases[1]", "AttributeError: _mean")]


@pytest.mark.host
def test_bench_a_failed_case_fails_the_command_and_leaves_the_docs(tmp_path, monkeypatch,
                                                                    capsys):  # fmt: skip
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Summary\n```\nkept\n```\n")
    before = doc.read_text()
    import tinyattn.tools.bench_stream as bs

    monkeypatch.setattr(bs, "bench_stream", lambda blob: {"error": "AttributeError: _mean"})
    monkeypatch.setattr(bs, "format_table", lambda r: "n/a: " + r["error"])
    code = cli.main(["bench", "--stream", "--write", str(doc)])
    err = capsys.readouterr().err
    assert code == 2 and "FAILED stream: AttributeError: _mean" in err, err
    assert "was left as it was" in err and doc.read_text() == before
