# Host (CPython): tools/bench_search.py's figures beside the search's pick.
"""The pick's TEST accuracy over final seeds (`seed_spread`): each seed trains as the written
model did (the same numbers for seed 0), and the table shows mean [min, max] beside it."""

from __future__ import annotations

import pytest

from tinyattn.data.timeseries import load_ts_dataset
from tinyattn.learn.search import Candidate
from tinyattn.learn.seqmodel import SeqAttnConfig
from tinyattn.learn.seqtrain import evaluate_seq, train_seq
from tinyattn.learn.train import TrainConfig
from tinyattn.tools import bench_search as bs

pytestmark = pytest.mark.host


def test_bench_search_seed_spread_trains_each_seed_as_the_written_model():
    pick = Candidate(SeqAttnConfig(patch=26, embed_dim=8, num_heads=2, blocks=1, ff_dim=8),
                     TrainConfig(epochs=3, lr=1e-2, model="seq-attn"))  # fmt: skip
    out = bs.seed_spread("coffee", pick.as_dict(), jobs=1, seeds=2)
    assert out["seeds"] == [0, 1] and len(out["int8"]) == len(out["float"]) == 2
    assert out["int8_min"] <= out["int8_mean"] <= out["int8_max"]
    train, test = load_ts_dataset("coffee", "train"), load_ts_dataset("coffee", "test")
    res = train_seq(train.X, train.lengths, train.y, train.n_classes, pick.arch, pick.train)
    ev = evaluate_seq(res, train.X, train.lengths, test.X, test.lengths, test.y)
    assert out["int8"][0] == ev["int8_accuracy"] and out["float"][0] == ev["float_accuracy"]
    assert Candidate.from_dict(pick.as_dict()) == pick


def test_bench_search_table_shows_the_final_seeds_beside_the_written_model():
    seeds = {"int8_mean": 0.584, "int8_min": 0.52, "int8_max": 0.64}
    ours = {"int8": 0.58, "float": 0.56, "cv_int8": 0.59, "cv_se": 0.05, "bytes": 3428,
            "macs": 34552, "minutes": 1.8, "final_seeds": seeds, "pick": "P12", "complete": True,
            "parity": {"passed": True, "int8_exact": 50, "samples": 50}}  # fmt: skip
    result = {"jobs": 2, "cores": 2, "problems": {"pgwz": {"ours": ours, "peers": {}}},
              "speedup": {"dataset": "trace", "stage": "augment", "speedup": 1.7,
                          "jobs1": {"seconds": 71, "pick": "a"},
                          "jobs2": {"seconds": 42, "pick": "a"}}}  # fmt: skip
    table = bs.format_table(result)
    assert "5 seeds [min, max]" in table and "0.584 [0.520, 0.640]" in table


def test_bench_search_runs_every_search_under_the_budget_given(tmp_path, monkeypatch):
    seen: list[list[str]] = []
    pick = {"key": "k", "cost": {"bytes": 1, "heap": 2}}
    summary = {"test_accuracy": 1.0, "int8_test_accuracy": 1.0, "macs": 3,
               "search": {"pick": {}, "pick_key": "k", "pick_label": "P1",
                          "complete": True, "stages": [{"rows": [pick]}],
                          "cv": {"int8": 1.0, "int8_se": 0.0, "folds": 10}}}  # fmt: skip
    monkeypatch.setattr(bs, "_train_search", lambda name, flags, work: (seen.append(flags)
                                                                         or (summary, 60.0)))
    seeds = {"int8_mean": 1.0, "int8_min": 1.0, "int8_max": 1.0}
    monkeypatch.setattr(bs, "seed_spread", lambda *a, **k: seeds)
    monkeypatch.setattr(bs, "parity", lambda work: {"passed": True, "samples": 1,
                                                    "int8_exact": 1})  # fmt: skip
    monkeypatch.setattr(bs, "speedup", lambda *a: {"dataset": "trace", "stage": "augment",
                                                   "speedup": 1.0,
                                                   "jobs1": {"seconds": 1, "pick": "a"},
                                                   "jobs2": {"seconds": 1, "pick": "a"}})
    budget = ("--board", "rp2040", "--max-ms", "50")
    result = bs.bench_search(("coffee",), peers=False, out_dir=tmp_path, budget=budget)
    assert seen == [["--jobs", "2", *budget]]
    assert "tinyattn train --search, --board rp2040 --max-ms 50, --jobs 2" in bs.format_table(
        result)
    bs.bench_search(("coffee",), peers=False, out_dir=tmp_path)
    assert seen[-1] == ["--jobs", "2"]


def test_bench_search_board_needs_its_milliseconds(capsys):
    with pytest.raises(SystemExit):
        bs.main(["--board", "rp2040"])
    assert "--board and --max-ms go together" in capsys.readouterr().err


def test_bench_search_gap_to_minirocket_is_signed_with_two_decimals():
    """The mean of (MiniRocket − ours) over the problems: a problem above MiniRocket lowers it,
    and two decimals tell 3.03 from a target of 3 (one decimal would print 3.0)."""
    seeds = {"int8_mean": 0.7, "int8_min": 0.7, "int8_max": 0.7}

    def problem(ours_int8, minirocket):
        ours = {"int8": ours_int8, "float": ours_int8, "cv_int8": 0.7, "cv_se": 0.0,
                "bytes": 1, "macs": 1, "minutes": 1.0, "final_seeds": seeds, "pick": "P1",
                "complete": True, "parity": {"passed": True, "int8_exact": 1, "samples": 1}}
        return {"ours": ours, "peers": {name: {"float": v} for name, v in
                                        zip(bs.PEERS, (minirocket, 0.0), strict=False)}}

    result = {"jobs": 2, "cores": 2,
              "problems": {"a": problem(0.71, 0.90), "b": problem(0.986, 0.978),
                           "c": problem(1.0, 1.0)},
              "speedup": {"dataset": "trace", "stage": "augment", "speedup": 1.0,
                          "jobs1": {"seconds": 1, "pick": "a"},
                          "jobs2": {"seconds": 1, "pick": "a"}}}  # fmt: skip
    gap = 100 * ((0.90 - 0.71) + (0.978 - 0.986) + 0.0) / 3
    assert f": {gap:.2f} points" in bs.format_table(result)
    assert f"{gap:.2f}" == "6.07"


def test_bench_search_rocket_pick_is_one_model_for_every_seed_and_shows_its_draws():
    """A seq-rocket pick is the same model whatever `--seed` (its draws are its own): the five
    final seeds give one figure, and the luck its fixed draws hold is shown beside it, over
    its draws' generator seeds."""
    from tinyattn.learn.rocketmodel import RocketConfig

    pick = Candidate(SeqAttnConfig(), TrainConfig(model="seq-rocket"), family="seq-rocket",
                     rocket=RocketConfig(num_features=840, keep=12, positions=64))  # fmt: skip
    out = bs.seed_spread("coffee", pick.as_dict(), jobs=1, seeds=2)
    assert out["int8"][0] == out["int8"][1] and out["float"][0] == out["float"][1]
    d = out["draws"]
    assert d["seeds"] == [0, 1] and d["int8"][0] == out["int8"][0]
    assert d["int8_min"] <= d["int8_mean"] <= d["int8_max"]
    ours = {"int8": 0.9, "float": 0.9, "cv_int8": 0.9, "cv_se": 0.0, "bytes": 1, "macs": 1,
            "minutes": 1.0, "final_seeds": {**out, "draws": {**d, "int8": [0.9, 0.8],
                                                             "int8_mean": 0.85,
                                                             "int8_min": 0.8, "int8_max": 0.9}},
            "pick": "rocket", "complete": True,
            "parity": {"passed": True, "int8_exact": 1, "samples": 1}}  # fmt: skip
    result = {"jobs": 2, "cores": 2, "problems": {"coffee": {"ours": ours, "peers": {}}},
              "speedup": {"dataset": "trace", "stage": "augment", "speedup": 1.0,
                          "jobs1": {"seconds": 1, "pick": "a"},
                          "jobs2": {"seconds": 1, "pick": "a"}}}  # fmt: skip
    assert "its draws' generator seeds 0-1: 0.850 [0.800, 0.900]" in bs.format_table(result)
