# Host (CPython): issue 12's defects — each test fails without its fix.
"""`board --fs` on a file; `export | head -1` (a closed stdout); `bench --all` writing the
tracked docs/benchmarks.md without `--write`; `bench --device` on a truncated blob; output files
created 0600 by the atomic writers; `export --csv` naming the wrong dataset; skip/xfail reasons
pointing at issues; `make flash` re-exporting an up-to-date blob. (Headerless CSVs:
tests/test_data.py; Ctrl-C during `report`: tests/test_report.py.)
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tinyattn import cli
from tinyattn.data.tabular import DATA_DIR
from tinyattn.intmodel.blob import BlobError, read_blob

pytestmark = [pytest.mark.host, pytest.mark.usefixtures("tmp_cwd")]

REPO = Path(__file__).resolve().parent.parent
TINYATTN = [sys.executable, "-c", "import sys; from tinyattn.cli import main; sys.exit(main())"]


def _one_error_line(err: str, command: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"tinyattn {command}: error: "), lines[0]
    return lines[0]


# -- board --fs -------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["file", "under a file"])
def test_defects_12_board_fs_on_a_file_is_one_line(capsys, tmp_path, where):
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    fs = afile if where == "file" else afile / "flash"
    assert cli.main(["board", "--fs", str(fs)]) == 2
    line = _one_error_line(capsys.readouterr().err, "board")
    assert f"--fs {fs}" in line and "not a folder" in line
    assert afile.read_text() == "not a folder"


def test_defects_12_board_fs_missing_folder_is_created_as_help_says(tmp_path):
    from tinyattn.board.virtual import add_arguments, check_fs

    fs = tmp_path / "new" / "flash"
    check_fs(fs)
    assert fs.is_dir()
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert "created" in parser.format_help()


# -- a closed stdout --------------------------------------------------------------------------


def test_defects_12_export_into_a_closed_pipe_exits_quietly(reference_model, tmp_path):
    """`tinyattn export … | head -1`: the reader is gone before export prints; status 141
    (128 + SIGPIPE, as a shell tool killed by SIGPIPE), nothing on stderr."""
    argv = ["export", "--model", str(reference_model["npz"]), "--out", str(tmp_path / "m.bin")]
    proc = subprocess.Popen([*TINYATTN, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # like `head -1` having exited: the next write gets EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""
    assert (tmp_path / "m.bin").is_file()  # the work before the print was done


def test_defects_12_cli_reraises_a_broken_pipe_that_is_not_stdout(monkeypatch):
    """Only a closed stdout is quiet: EPIPE on another pipe (a board's, a subprocess's) is a
    real error and must not be swallowed."""
    import tinyattn.board.ports

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(tinyattn.board.ports, "main", broken)  # `tinyattn devs`
    with pytest.raises(BrokenPipeError):
        cli.main(["devs"])


# -- bench ------------------------------------------------------------------------------------


@pytest.fixture
def stub_benches(monkeypatch):
    """Every benchmark replaced by a stub returning figures at once."""
    import tinyattn.bench
    import tinyattn.board.parity
    import tinyattn.tools.bench_accuracy
    import tinyattn.tools.bench_device
    import tinyattn.tools.bench_link
    import tinyattn.tools.bench_pico
    import tinyattn.tools.bench_seq
    import tinyattn.tools.bench_stream
    import tinyattn.tools.bench_train
    import tinyattn.tools.bench_train_device

    tools = tinyattn.tools
    calls = []

    def stub(name, value):
        def run(*args, **kwargs):
            calls.append(name)
            return value

        return run

    monkeypatch.setattr(tools.bench_train, "bench_train", stub("train", {"numpy_seconds": 1.0}))
    monkeypatch.setattr(tools.bench_train, "bench_train_seq", stub("train_seq", {}))
    monkeypatch.setattr(tools.bench_train, "format_table", lambda r, **kw: "train table")
    monkeypatch.setattr(tools.bench_train_device, "bench_train_device",
                        stub("train_device", {"runs": {}}))  # fmt: skip
    monkeypatch.setattr(tools.bench_train_device, "format_table", lambda r: "board train table")
    monkeypatch.setattr(tinyattn.bench, "seq_blob", lambda path: path)
    monkeypatch.setattr(tools.bench_device, "bench_device", stub("device", {}))
    monkeypatch.setattr(tools.bench_device, "format_table", lambda r: "device table")
    acc = {"datasets": {}, "repeats": 10, "k": 5}
    monkeypatch.setattr(tools.bench_accuracy, "bench_accuracy", stub("accuracy", acc))
    monkeypatch.setattr(tools.bench_accuracy, "format_table", lambda r: "accuracy table")
    monkeypatch.setattr(tools.bench_seq, "bench_seq", stub("accuracy_seq", {}))
    monkeypatch.setattr(tools.bench_seq, "format_table", lambda r: "seq accuracy table")
    link = {
        "samples": 150, "passed": True, "link_samples_per_s_both": 300.0,
        "link_samples_per_s_int8": 400.0, "server_us_int8": 1.0, "server_us_float": 2.0,
        "server_heap_bytes_per_call_int8": 0, "server_heap_bytes_per_call_float": 10,
    }  # fmt: skip
    monkeypatch.setattr(tinyattn.bench, "bench_link", stub("link", link))
    monkeypatch.setattr(tools.bench_link, "bench_link", stub("uart", {"rows": [], "heap": "x"}))
    monkeypatch.setattr(tools.bench_link, "format_table", lambda r: "uart table")
    stream = {"host_equal": True, "runs": [{"acc_recording": 1.0, "viper": {"rtf": 100.0}}]}
    monkeypatch.setattr(tools.bench_stream, "bench_stream", stub("stream", stream))
    monkeypatch.setattr(tools.bench_stream, "format_table", lambda r: "stream table")
    monkeypatch.setattr(tools.bench_pico, "bench_pico", stub("pico", {"skipped": "stub"}))

    class Samples:
        X = np.zeros((2, 4))

    monkeypatch.setattr(tinyattn.board.parity, "load_samples", lambda *a: Samples())
    return calls


def test_defects_12_bench_all_writes_nothing_without_write(
    stub_benches, reference_model, tmp_path, monkeypatch, capsys
):
    import tinyattn.bench

    # before the fix, `--all` wrote REPO_DIR/docs/benchmarks.md: point it here, not at the repo
    monkeypatch.setattr(tinyattn.bench, "REPO_DIR", tmp_path, raising=False)
    (tmp_path / "docs").mkdir()
    argv = ["bench", "--all", "--blob", str(reference_model["blob"])]
    assert cli.main(argv) == 0
    assert list((tmp_path / "docs").iterdir()) == []
    assert sorted(stub_benches) == [
        "accuracy", "accuracy_seq", "device", "link", "pico", "stream", "train",
        "train_device", "train_seq", "uart",
    ]
    assert "written" not in capsys.readouterr().out
    doc = tmp_path / "bench.md"
    assert cli.main([*argv, "--write", str(doc)]) == 0
    assert "## Summary" in doc.read_text() and "uart table" in doc.read_text()


def test_defects_12_make_bench_passes_write():
    """The Makefile says `make bench` also writes docs/benchmarks.md: it must ask for it."""
    rule = re.search(r"^bench:.*\n\t(.*)$", (REPO / "Makefile").read_text(), re.M)
    assert rule and "--write docs/benchmarks.md" in rule.group(1)


@pytest.mark.parametrize("flag", ["--device", "--link"])
def test_defects_12_bench_on_a_truncated_blob_is_the_readers_error(
    stub_benches, reference_model, tmp_path, capsys, flag
):
    data = reference_model["blob"].read_bytes()
    blob = tmp_path / "short.bin"
    blob.write_bytes(data[: len(data) // 2])
    with pytest.raises(BlobError) as reader:
        read_blob(blob.read_bytes(), source=str(blob))
    assert cli.main(["bench", flag, "--blob", str(blob)]) == 2
    out = capsys.readouterr()
    line = _one_error_line(out.err, "bench")
    problem = str(reader.value).rsplit("; ", 1)[0]  # the reader's words, the CLI's remedy:
    # no model file to rebuild it from here: the remedy says so, never names one as if it were
    assert line.startswith(f"tinyattn bench: error: {problem}; there is no model file "
                           "build/model.npz to rebuild it from"), line  # fmt: skip
    assert f"--out {blob}'" in line, line
    assert stub_benches == [] and "ok" not in out.out


# -- file modes -------------------------------------------------------------------------------


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    try:
        yield 0o640  # what open(path, "w") gives a new file under it
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_defects_12_output_files_get_the_umask_mode_not_0600(reference_model, tmp_path, umask_027):
    """Every atomic writer (host/atomic.py): model.npz, model.bin, .ts, board model files."""
    from tinyattn.board.boardmodel import npz_to_board
    from tinyattn.data.timeseries import write_ts

    npz, blob = tmp_path / "model.npz", tmp_path / "model.bin"
    assert cli.main(["train", "--out", str(npz), "--quiet", "--epochs", "2"]) == 0
    assert cli.main(["export", "--model", str(npz), "--out", str(blob)]) == 0
    X = np.zeros((2, 3, 1))  # (N, T, C)
    ts = write_ts(tmp_path / "w.ts", X, np.array([3, 3]), np.array([0, 1]), ["a", "b"])
    board = npz_to_board(npz, tmp_path / "model.tafm")
    written = [npz, blob, Path(ts), Path(board)]
    for path in written:
        assert _mode(path) == umask_027, f"{path.name}: {oct(_mode(path))}"
    assert not list(tmp_path.glob(".*.tmp"))


def test_defects_12_report_folder_gets_the_umask_mode(reference_model, tmp_path, umask_027):
    pytest.importorskip("matplotlib", reason="needs the report extra: pip install -e '.[report]'")
    from tinyattn.report import write_report

    out = tmp_path / "report"
    write_report(reference_model["npz"], reference_model["blob"], out, samples=[0])
    assert _mode(out) == 0o750
    assert all(_mode(p) == umask_027 for p in out.iterdir())


# -- export --csv of another dataset ----------------------------------------------------------


def test_defects_12_export_csv_of_another_dataset_names_that_csv(
    reference_model, tmp_path, capsys
):
    wine = DATA_DIR / "wine.csv"
    argv = ["export", "--model", str(reference_model["npz"]), "--out", str(tmp_path / "m.bin"),
            "--csv", str(wine), "--target", "cultivar"]  # fmt: skip
    assert cli.main(argv) == 2
    line = _one_error_line(capsys.readouterr().err, "export")
    assert f"{wine} has classes ['class_0', 'class_1', 'class_2'] and 13 features" in line
    assert "trained on 'iris'" in line and "dataset 'iris' has" not in line


# -- stale skip/xfail reasons -----------------------------------------------------------------

SKIP_CALLS = {"skip", "importorskip", "xfail", "skipif"}
ISSUE_REF = re.compile(r"\bissues?[ -]?#?\d+", re.I)


def _skip_reasons(tree: ast.AST):
    """(line, first argument or reason text) of pytest.skip/importorskip/xfail/skipif calls."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "attr", None)
        if name not in SKIP_CALLS:
            continue
        texts = [a for a in node.args if isinstance(a, ast.Constant)]
        texts += [k.value for k in node.keywords if k.arg in ("reason", "msg")]
        for t in texts:
            if isinstance(t, ast.Constant) and isinstance(t.value, str):
                yield node.lineno, name, t.value
            elif isinstance(t, ast.JoinedStr):
                yield node.lineno, name, ast.unparse(t)


def test_defects_12_no_skip_or_xfail_waits_for_an_issue_or_our_own_module():
    """A reason like 'needs the host-core training (issue 2)' outlives the issue and hides a
    broken import of our own package as a skip. Reasons say what is missing (a tool, an extra)
    or what was measured; tinyattn's own modules are imported, never importorskip'ed."""
    stale = []
    for path in sorted((REPO / "tests").glob("*.py")):
        for line, name, text in _skip_reasons(ast.parse(path.read_text())):
            if ISSUE_REF.search(text):
                stale.append(f"{path.name}:{line}: {name} reason {text!r}")
            if name == "importorskip" and text.startswith("tinyattn"):
                stale.append(f"{path.name}:{line}: importorskip({text!r})")
    assert not stale, "\n".join(stale)


# -- Makefile: export only when the model changed ---------------------------------------------


@pytest.mark.skipif(not shutil.which("make"), reason="make not installed")
def test_defects_12_make_flash_exports_only_when_the_model_is_newer(reference_model, tmp_path):
    model, blob = tmp_path / "model.npz", tmp_path / "model.bin"
    shutil.copy(reference_model["npz"], model)
    shutil.copy(reference_model["blob"], blob)
    past = time.time() - 60
    os.utime(model, (past, past))

    def dry_run(target: str) -> str:
        res = subprocess.run(
            ["make", "-n", "-C", str(REPO), target, f"MODEL={model}", f"BLOB={blob}"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        return res.stdout

    for target in ("flash", "parity"):
        out = dry_run(target)
        assert "tinyattn export" not in out and f"tinyattn {target}" in out, out
    os.utime(model, None)  # the model changed: now export runs first
    out = dry_run("flash")
    assert out.index("tinyattn export") < out.index("tinyattn flash"), out
