# Host (CPython) and a virtual board: `tinyattn train --search`, end to end.
"""The search as a user runs it, on a small .ts pair (and on a CSV's rows, windows of one
step): its record in `--json`, in the model file and in `tinyattn report`; the board preset
(the pick's MACs × µs per MAC within `--max-ms`, its loaded heap measured under MicroPython
within the preset); the pick exports, flashes and passes parity on a virtual board, int8
exact; the refusals in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from device_support import (
    HEAP,
    KERNEL_MODULES,
    find,
    flash_and_parity,
    run_micropython,
)

from tinyattn import cli
from tinyattn.data.timeseries import write_ts
from tinyattn.learn.model import load_model

FAST = ["--search-folds", "2", "--search-repeats", "1", "--search-stages", "arch", "--epochs",
        "6", "--jobs", "1", "--quiet"]  # fmt: skip


@pytest.fixture
def ts_pair(tmp_path):
    rng = np.random.default_rng(4)
    N, T, C = 24, 16, 2
    y = np.arange(N) % 3
    t = np.arange(T)[None, :, None]
    X = np.sin(t * (0.3 + 0.5 * y[:, None, None]) + rng.normal(0, 0.2, (N, T, C))) * 2 + 1
    names = ["a", "b", "c"]
    write_ts(tmp_path / "S_TRAIN.ts", X, None, y, names, "S")
    write_ts(tmp_path / "S_TEST.ts", X[::-1] + 0.05, None, y[::-1], names, "S")
    return tmp_path / "S_TRAIN.ts", tmp_path / "S_TEST.ts"


def _train(capsys, *argv):
    code = cli.main(["train", *argv, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out.strip().splitlines()[-1]), out.err


@pytest.mark.slow
@pytest.mark.host
@pytest.mark.usefixtures("tmp_cwd")
def test_search_cli_records_the_search_in_json_model_file_and_report(ts_pair, capsys, tmp_path):
    tr, te = ts_pair
    s, err = _train(capsys, "--ts", str(tr), "--test", str(te), "--search", *FAST,
                    "--out", "m.npz")  # fmt: skip
    rec = s["search"]
    assert rec["complete"] and rec["stages"][0]["stage"] == "arch"
    assert rec["cv"]["folds"] == 2 and 0 <= rec["cv"]["int8"] <= 1
    assert rec["pick"]["arch"] == s["arch"]  # the summary's model is the pick
    rows = rec["stages"][0]["rows"]
    assert sum(r["label"] == rec["pick_label"] for r in rows) == 1
    assert "search picked" in err and "CV int8" in err
    meta = load_model(tmp_path / "m.npz").meta
    assert meta["search"]["pick_label"] == rec["pick_label"]
    assert cli.main(["export", "--model", "m.npz", "--out", "m.bin"]) == 0
    assert cli.main(["report", "--model", "m.npz", "--blob", "m.bin", "--out", "rep"]) == 0
    capsys.readouterr()
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Model search" in md and "### Model search, stage arch" in md
    assert md.count("| ✓ |") == 1
    # the same command again: every fold comes from the cache, the same pick
    again, _ = _train(capsys, "--ts", str(tr), "--test", str(te), "--search", *FAST,
                      "--out", "m2.npz")  # fmt: skip
    assert again["search"]["pick"] == rec["pick"]


@pytest.mark.host
@pytest.mark.usefixtures("tmp_cwd")
def test_search_cli_refuses_in_one_line(ts_pair, capsys):
    tr, _ = ts_pair
    for argv, words in [
        (["--search", "--model", "iris-attn"], "not --model iris-attn; leave out --model"),
        (["--search", "--scaling", "feature"], "--scaling: the searched seq-attn model"),
        (["--ts", str(tr), "--max-ms", "5"], "--max-ms goes with --search"),
        (["--ts", str(tr), "--search", "--cv", "3"], "leave out --cv and --on-board"),
        (["--ts", str(tr), "--search", "--max-ms", "5"], "--max-ms needs --board"),
        (["--ts", str(tr), "--search", "--search-stages", "arch,nope"], "--search-stages: nope"),
        (["--ts", str(tr), "--search", "--max-macs", "10", *FAST], "no arch candidate fits"),
        (["--ts", str(tr), "--search", "--board", "rp2040", "--max-ms", "50", "--max-macs",
          "10", *FAST], "10 MACs"),  # a --max-macs given caps the milliseconds' MACs
    ]:
        assert cli.main(["train", *argv]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], (argv, err)


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.usefixtures("tmp_cwd")
def test_search_cli_board_preset_pick_fits_and_passes_parity(ts_pair, capsys, tmp_path,
                                                             vboard_factory, mpy):  # fmt: skip
    """`--board rp2040 --max-ms 5`: the pick's µs as the Pico's time model predicts ≤ 5 ms; its
    loaded heap, measured under MicroPython (.mpy, viper), within the preset's heap; it
    exports, flashes and passes parity on a virtual board with every int8 logit exact."""
    from tinyattn.learn.search import BOARDS

    if find("micropython") is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    tr, te = ts_pair
    s, _ = _train(capsys, "--ts", str(tr), "--test", str(te), "--search", *FAST, "--board",
                  "rp2040", "--max-ms", "5", "--out", "m.npz")  # fmt: skip
    preset = BOARDS["rp2040"]
    assert s["search"]["budget"]["max_us"] == 5_000
    assert cli.main(["export", "--model", "m.npz", "--out", "m.bin"]) == 0
    from tinyattn.board.cost import predict_us
    from tinyattn.intmodel.blob import read_blob

    assert predict_us(read_blob((tmp_path / "m.bin").read_bytes()), dict(preset.rates)) <= 5_000
    used = int(run_micropython(HEAP, [str(mpy), str(tmp_path / "m.bin"), "viper",
                                      *KERNEL_MODULES["viper"]], "256k")[0])  # fmt: skip
    assert 0 < used <= preset.max_heap
    flash_and_parity(vboard_factory(), capsys, tmp_path, 24)


@pytest.mark.serial
@pytest.mark.usefixtures("tmp_cwd")
def test_search_cli_on_csv_rows_exports_passes_parity_and_predicts_by_header(
        capsys, tmp_path, vboard_factory):  # fmt: skip
    """`train --csv FILE --search`: the rows are windows of one step, the pick a seq-attn
    model of T = 1 whose file names the CSV and its target; it exports (from the CSV the meta
    names), flashes and passes parity on a virtual board with every int8 logit exact, and
    `predict --csv` on the board matches the columns by header, as for a row model."""
    from tinyattn.data.tabular import load_dataset

    if find("micropython") is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    iris = load_dataset("iris")
    names = list(iris.feature_names)
    lines = [",".join(names + ["species"])]
    lines += [",".join([*map(repr, row), iris.class_names[c]]) for row, c in
              zip(iris.rows.tolist(), iris.y.tolist(), strict=True)]  # fmt: skip
    (tmp_path / "mine.csv").write_text("\n".join(lines) + "\n")
    s, _ = _train(capsys, "--csv", "mine.csv", "--target", "species", "--search", *FAST,
                  "--out", "m.npz")  # fmt: skip
    meta = load_model(tmp_path / "m.npz").meta
    assert meta["model"] == "seq-attn" and meta["input"] == "rows"
    assert meta["csv"] == str(tmp_path / "mine.csv") and meta["target"] == "species"
    assert meta["feature_names"] == names and s["max_steps"] == 1
    assert cli.main(["export", "--model", "m.npz", "--out", "m.bin"]) == 0
    vb = flash_and_parity(vboard_factory(), capsys, tmp_path, 150)
    # the columns in another order, the label first: matched by name on the board
    order = [4, 2, 0, 3, 1]
    cells = [line.split(",") for line in lines]
    (tmp_path / "shuffled.csv").write_text("\n".join(",".join(c[i] for i in order)
                                                     for c in cells) + "\n")  # fmt: skip
    assert cli.main(["predict", "--csv", "mine.csv", "--blob", "m.bin", "--model", "m.npz"]) == 0
    host = capsys.readouterr().out
    assert cli.main(["predict", "--csv", "shuffled.csv", "--blob", "m.bin", "--model", "m.npz",
                     "--port", vb.port]) == 0  # fmt: skip
    board = capsys.readouterr().out
    assert board.splitlines()[-150:] == host.splitlines()[-150:]


@pytest.mark.host
@pytest.mark.usefixtures("tmp_cwd")
def test_search_cli_time_limit_says_one_line_of_its_own(ts_pair, capsys):
    """`--time-limit` with 2 workers: the tasks it cancels raise no joblib warning (the search
    says "time limit" itself); a limit that ends the search before any model has all its folds
    is one line, exit 2, that says the folds are kept and how to resume."""
    import warnings

    tr, te = ts_pair
    argv = ["train", "--ts", str(tr), "--test", str(te), "--search", *FAST, "--jobs", "2",
            "--time-limit", "0", "--out", "m.npz"]  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(argv) == 2
    assert [str(w.message) for w in caught if "tasks" in str(w.message)] == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--time-limit 0 ended the search before any model" in err[0], err
    assert "kept in build/search/" in err[0] and "run the same command again" in err[0]


@pytest.mark.host
@pytest.mark.slow
def test_search_cli_sigterm_ends_the_workers_quietly(ts_pair, tmp_path):
    """SIGTERM during a 2-worker search: the command ends as after Ctrl-C (the search says
    its folds are kept), status 143, its workers shut down with it (stderr closes: no
    orphan holds it) and nothing else on stderr (no leaked-semlock warnings, no traceback)."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys
    import time

    tr, te = ts_pair
    exe = str(Path(sys.executable).with_name("tinyattn"))
    proc = subprocess.Popen(
        [exe, "train", "--ts", str(tr), "--test", str(te), "--search", "--search-folds", "5",
         "--epochs", "40", "--jobs", "2", "--out", "m.npz", "--quiet"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not list((tmp_path / "build" / "search").rglob("r*f*k*.json")):
            assert proc.poll() is None and time.monotonic() < deadline, "no fold finished"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:  # whatever is left of the test's own process group (workers that outlived it)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, err
    lines = err.strip().splitlines()
    assert lines == ["search interrupted: every finished fold is kept in build/search/; run "
                     "the same command again to resume",
                     "tinyattn train: terminated (SIGTERM)"], err  # fmt: skip


@pytest.mark.host
@pytest.mark.usefixtures("tmp_cwd")
def test_search_cli_calls_a_csv_s_samples_rows_and_a_ts_files_windows(ts_pair, capsys,
                                                                        tmp_path):  # fmt: skip
    """The messages name the samples from the data: a CSV's rows are rows (though the searched
    model takes them as windows of one step), a .ts file's windows are windows."""
    rows = ["a,b,label"] + [f"{i % 7},{(i * 3) % 5},{'xyz'[i % 3]}" for i in range(30)]
    (tmp_path / "mine.csv").write_text("\n".join(rows) + "\n")
    _, err = _train(capsys, "--csv", "mine.csv", "--search", *FAST, "--out", "m.npz")
    assert "24 TRAIN rows" in err and "held out 6 of 30 TRAIN rows" in err, err
    assert "6 rows of the held-out part" in err and "(24 rows)" in err, err
    assert "window" not in err, err
    tr, _ = ts_pair
    _, err = _train(capsys, "--ts", str(tr), "--epochs", "2", "--quiet", "--out", "w.npz")
    assert "TRAIN windows" in err and "windows of the held-out part" in err, err
    assert " rows" not in err, err


@pytest.mark.host
def test_search_cli_scheduler_nobody_answers_is_one_line(capsys, monkeypatch, tmp_path):
    """--scheduler with no scheduler running printed a 19-frame traceback after 30 s."""
    pytest.importorskip("dask.distributed", reason="the cluster extra (make install-cluster)")
    import socket

    from tinyattn.learn import searchcli

    monkeypatch.setattr(searchcli, "SCHEDULER_WAIT", 1)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.chdir(tmp_path)
    code = cli.main(["train", "--dataset", "coffee", "--search", "--scheduler",
                     f"tcp://127.0.0.1:{port}", "--out", "m.npz"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "no Dask scheduler answered within 1 s" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.host
@pytest.mark.usefixtures("tmp_cwd")
def test_rocket_positions_flag_sets_the_blobs_positions_cap(ts_pair, capsys):
    """`--rocket-positions N` is the op's positions cap N in the exported blob (the search's
    picks carry one; tools/bench_pico_cost times such shapes); a negative N is refused in one
    line."""
    from tinyattn.intmodel.blob import read_blob

    tr, te = ts_pair
    _train(capsys, "--ts", str(tr), "--test", str(te), "--model", "seq-rocket",
           "--rocket-features", "840", "--rocket-positions", "5", "--quiet", "--out", "m.npz")
    assert cli.main(["export", "--model", "m.npz", "--out", "m.bin"]) == 0
    capsys.readouterr()
    op = read_blob(Path("m.bin").read_bytes()).ops[0]
    assert op.kind == "rocket" and op.iparams["N"] == 5, op.iparams  # 16 steps, 5 counted
    code = cli.main(["train", "--ts", str(tr), "--model", "seq-rocket", "--rocket-positions",
                     "-1"])  # fmt: skip
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "positions -1" in lines[0], lines


@pytest.mark.host
@pytest.mark.usefixtures("tmp_cwd")
def test_rocket_model_is_a_function_of_train_not_of_the_seed(ts_pair, capsys):
    """A seq-rocket model's draws are its own parameter (`--rocket-seed`): `--seed`, which the
    search's bench varies for its five final seeds, writes the same model; another
    `--rocket-seed` draws other channel combinations and biases."""
    tr, te = ts_pair
    flags = ["--ts", str(tr), "--test", str(te), "--model", "seq-rocket", "--rocket-features",
             "840", "--rocket-keep", "20", "--quiet"]  # fmt: skip
    for seed, rocket_seed, out in ((0, 0, "a"), (3, 0, "b"), (0, 1, "c")):
        _train(capsys, *flags, "--seed", str(seed), "--rocket-seed", str(rocket_seed), "--out",
               f"{out}.npz")  # fmt: skip
    a, b, c = (load_model(f"{out}.npz").model for out in "abc")
    assert np.array_equal(a.theta, b.theta)
    assert not np.array_equal(a.theta, c.theta)


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.usefixtures("tmp_cwd")
def test_rocket_model_end_to_end_and_the_family_stage(ts_pair, capsys, tmp_path, vboard):
    """`train --model seq-rocket` writes a model whose blob flashes and passes parity on a
    virtual board with every int8 logit exact, and reports and predicts; `--search` with the
    `family` stage scores seq-attn and seq-rocket on the same folds and trains its pick;
    attention's flags and --on-board are refused with it in one line."""
    if find("micropython") is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    tr, te = ts_pair
    s, err = _train(capsys, "--ts", str(tr), "--test", str(te), "--model", "seq-rocket",
                    "--rocket-features", "840", "--out", "m.npz")  # fmt: skip
    assert s["model"] == "seq-rocket" and 0 <= s["int8_test_accuracy"] <= 1
    assert s["ops"] <= 150_000 and "features kept" in err
    assert cli.main(["export", "--model", "m.npz", "--out", "m.bin"]) == 0
    flash_and_parity(vboard, capsys, tmp_path, 24)
    assert cli.main(["report", "--model", "m.npz", "--blob", "m.bin", "--out", "rep"]) == 0
    assert cli.main(["predict", "--model", "m.npz", "--blob", "m.bin", "--ts", str(te)]) == 0
    capsys.readouterr()
    again, _ = _train(capsys, "--ts", str(tr), "--test", str(te), "--search",
                      "--search-stages", "family", "--search-folds", "2", "--search-repeats",
                      "1", "--epochs", "6", "--jobs", "1", "--quiet", "--out", "s.npz")
    rows = again["search"]["stages"][0]["rows"]
    assert {r["label"].split()[0] for r in rows if r.get("score")} >= {"rocket"}
    assert len([r for r in rows if r.get("score")]) == 2
    for argv, words in [
        (["--model", "seq-rocket", "--embed", "16"], "--embed: not for seq-rocket"),
        (["--model", "seq-rocket", "--on-board"], "--on-board: not for seq-rocket"),
        (["--rocket-keep", "5"], "--rocket-keep: seq-rocket flags; add --model seq-rocket"),
    ]:
        assert cli.main(["train", "--ts", str(tr), *argv]) == 2, argv
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (argv, lines)
