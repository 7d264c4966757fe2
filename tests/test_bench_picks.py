# Host (CPython): tools/bench_picks.py's table and verdict, without boards.
"""What fails the picks' benchmark (tinyattn.tools.bench_picks.failures, its exit code): a
parity not exact, an error, or a missing row on a board that ran; a pick measured over the
--max-ms it was searched under. A skipped board and a pick of the default budget (no max-ms)
are not failures, and the table says so."""

from __future__ import annotations

import numpy as np

from tinyattn.tools import bench_picks


def _row(name, max_us=None, measured=100, pico=(10, 10), m3=(10, 10)):
    row = {"name": name, "label": "rocket 10000 -> <= 50 ms N64", "bytes": 5000,
           "max_us": max_us, "measured_us": measured, "predicted_us": 110.0}
    for kind, p in (("pico", pico), ("cortex-m3", m3)):
        if p is not None:
            row[kind] = {"exact": p[0], "samples": p[1], "kernels": "thumb", "seconds": 1.0}
    return row


def _result(*rows, skipped=None):
    boards = {"pico": None, "cortex-m3": skipped}
    return {"dir": "build/bench-search", "windows": 100, "boards": boards, "picks": list(rows)}


def test_all_exact_and_within_is_no_failure():
    r = _result(_row("coffee", max_us=50_000, measured=49_999), _row("trace"))
    assert bench_picks.failures(r) == []
    table = bench_picks.format_table(r)
    assert "yes (50 ms)" in table and "n/a (no --max-ms)" in table
    assert "failures: none" in table and "-9.1" in table  # (100 - 110) / 110


def test_a_logit_off_or_an_error_on_a_board_that_ran_fails():
    bad = _row("acsf1", pico=(9, 10))
    err = _row("plaid", m3=None)
    err["cortex-m3"] = {"error": "TimeoutError: ...", "seconds": 3600.0}
    missing = _row("trace", m3=None)
    got = bench_picks.failures(_result(bad, err, missing))
    assert got == ["acsf1: pico parity 9/10 FAIL",
                   "plaid: cortex-m3 parity ERROR (TimeoutError: ...)",
                   "trace: cortex-m3 parity skipped"]


def test_a_skipped_board_is_said_not_failed():
    r = _result(_row("coffee", m3=None), skipped="the cortex-m3 board needs qemu-system-arm")
    assert bench_picks.failures(r) == []
    assert "cortex-m3: skipped (the cortex-m3 board needs qemu-system-arm)" in \
        bench_picks.format_table(r)  # fmt: skip


def test_over_its_max_ms_fails_and_exactly_at_it_does_not():
    over = _row("acsf1", max_us=10_000, measured=10_001)
    at = _row("coffee", max_us=10_000, measured=10_000)
    assert bench_picks.failures(_result(over, at)) == [
        "acsf1: 10,001 µs on the Pico, over its max-ms 10"]
    assert "NO (10 ms)" in bench_picks.format_table(_result(over))


def test_no_pick_is_a_clear_error(tmp_path, capsys):
    assert bench_picks.main(["--dir", str(tmp_path)]) == 2
    assert "no pick in" in capsys.readouterr().err


def test_pick_info_reads_the_search_budget_and_exports_a_missing_blob(tmp_path):
    """A pick directory as tools/bench_search.py lays it out, its model.bin not exported yet."""
    import json

    from tinyattn import cli

    work = tmp_path / "iris"
    work.mkdir()
    assert cli.main(["train", "--dataset", "iris", "--epochs", "2", "--out",
                     str(work / "model.npz"), "--quiet"]) == 0  # fmt: skip
    with np.load(work / "model.npz") as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    meta["search"] = {"pick_label": "embed 8", "board": "rp2040",
                      "budget": {"max_us": 50_000.0}}
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(work / "model.npz", **arrays)
    info = bench_picks.pick_info(work)
    assert (info["dataset"], info["label"], info["max_us"]) == ("iris", "embed 8", 50_000.0)
    assert info["bytes"] == (work / "model.bin").stat().st_size > 0
    assert bench_picks.find_picks(tmp_path) == [work]


def test_bench_picks_without_a_search_names_the_fix(tmp_path, monkeypatch, capsys):
    """`tinyattn bench --picks` where no search left a pick: exit 2, one line naming --search."""
    from tinyattn import cli

    monkeypatch.chdir(tmp_path)
    assert cli.main(["bench", "--picks"]) == 2
    assert "--picks: no pick in build/bench-search; run --search first" in capsys.readouterr().err


def test_reference_reads_a_test_window_longer_than_the_model_on_its_last_steps(tmp_path):
    """JapaneseVowels' TEST has windows longer than any TRAIN window (the model's T): the
    host reference takes their last T steps, as parity does (it raised "window 7 has 29
    steps, the model takes 1..28")."""
    from tinyattn import cli
    from tinyattn.data.timeseries import load_ts_dataset

    work = tmp_path / "japanesevowels"
    work.mkdir()
    assert cli.main(["train", "--dataset", "japanesevowels", "--model", "seq-rocket",
                     "--rocket-features", "84", "--out", str(work / "model.npz"),
                     "--quiet"]) == 0  # fmt: skip
    info = bench_picks.pick_info(work)
    test = load_ts_dataset("japanesevowels", "test")
    assert test.lengths.max() > load_ts_dataset("japanesevowels", "train").lengths.max()
    logits = bench_picks.reference(info, 0, tmp_path)
    assert logits.shape == (len(test.y), test.n_classes)


def test_a_presets_picks_get_a_section_of_their_own():
    """The default budget's picks and a preset's stand side by side in docs/benchmarks.md: the
    preset's section title names it; the default's is the plain title."""
    from tinyattn.bench import PICKS_TITLE, extra_of, picks_title

    assert picks_title(_result(_row("coffee"), _row("trace"))) == PICKS_TITLE
    preset = _row("plaid", max_us=50_000)
    preset["board"] = "rp2040"
    title = picks_title(_result(preset))
    assert title == f"{PICKS_TITLE}, rp2040 preset at 50 ms"
    assert extra_of(title) == extra_of(PICKS_TITLE)


def test_a_presets_pick_with_no_room_on_a_smaller_board_is_said_not_failed():
    """The rp2040 preset's pick (a 95.6 KB model) raising MemoryError on the Cortex-M3 is 'no
    room', not a parity failure; the same on the Pico (its own board) or for a default-budget
    pick is a failure."""
    info = {"board": "rp2040", "max_heap": 95_592}
    assert bench_picks.no_room(info, "cortex-m3", "MemoryError: memory allocation failed")
    assert not bench_picks.no_room(info, "pico", "MemoryError: memory allocation failed")
    assert not bench_picks.no_room({"board": None}, "cortex-m3", "MemoryError: ...")
    assert not bench_picks.no_room(info, "cortex-m3", "TimeoutError: ...")
    assert bench_picks.no_room_reason(info) == \
        "MemoryError: searched for rp2040's 95,592 B of model heap"
    only_us = {"board": "rp2040", "max_heap": None}  # a record with --max-ms and no heap
    assert bench_picks.no_room_reason(only_us) == "MemoryError: searched for rp2040's budget"
    big = _row("plaid", max_us=50_000, m3=None)
    big["cortex-m3"] = {"no_room": "MemoryError: searched for rp2040's 95,592 B of model heap"}
    r = _result(big)
    assert bench_picks.failures(r) == []
    table = bench_picks.format_table(r)
    assert "no room" in table and "plaid on cortex-m3 (MemoryError" in table
