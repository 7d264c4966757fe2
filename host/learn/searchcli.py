"""Host (CPython): `tinyattn train --search` — the model search (host/learn/search.py) as a
command: flags, the run, and its record in the model file.

The search sees the TRAIN windows only (with `--ts` and no `--test`, the part of TRAIN that
is not held out). Its pick is then trained on all of them by the ordinary path
(`seqcli.run_one`), which reads the test part once and writes the model file; the file's meta
gains `search` (the budget, every stage's candidates with their cost and CV score, the pick
and its CV estimate), which `tinyattn report` shows and `--json` prints.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tinyattn import remedy
from tinyattn.errors import CLIError

CACHE = Path("build") / "search"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tinyattn.learn import search as S

    d = S.Budget()
    g = parser.add_argument_group(
        "model search (--search)",
        "choose the seq-attn model by repeated stratified k-fold CV on TRAIN, within the "
        "board's budget; TEST is read once, for the pick",
    )
    rows = [
        ("--search", dict(action="store_true", help="search architecture, recipe, "
         "augmentation and weight averaging (stages " + ",".join(S.STAGES) + ") instead of "
         "training the defaults")),
        ("--max-bytes", dict(type=int, default=d.max_bytes, metavar="B",
         help=f"largest blob (default: {d.max_bytes})")),
        ("--max-macs", dict(type=int, metavar="N", help="most multiply-accumulates an "
         f"inference (default: {d.max_macs}; with --board and --max-ms: no MAC limit but the "
         "milliseconds, unless given)")),
        ("--max-heap", dict(type=int, metavar="B", help="most heap of the loaded model, its "
         f"buffers and its Stream (default: {d.max_heap}; with --board: the board's, or the "
         "tighter of the two when given)")),
        ("--board", dict(choices=sorted(S.BOARDS), help="a board's measured costs: its time "
         "model (µs of an inference from the op list, fitted to the board's measured µs: "
         "make bench-pico) and heap: rp2040 = a 125 MHz Cortex-M0+ with the thumb int8 "
         f"kernels, {S.BOARDS['rp2040'].max_heap} B for the model and its Stream")),
        ("--max-ms", dict(type=float, metavar="MS", help="with --board: most milliseconds an "
         "inference, as the board's time model predicts them for each candidate's op list "
         "(in place of the default --max-macs)")),
        ("--jobs", dict(type=int, default=S.default_jobs(), metavar="N", help="worker "
         f"processes (joblib/loky; default: this machine's cores, {S.default_jobs()})")),
        ("--scheduler", dict(metavar="ADDRESS", help="run the folds on a Dask cluster "
         "(dask.distributed scheduler address, e.g. tcp://10.0.0.5:8786; 'make "
         "install-cluster')")),
        ("--time-limit", dict(type=float, metavar="MIN", help="stop starting folds after MIN "
         "minutes and pick from the finished stages")),
        ("--search-folds", dict(type=int, default=5, metavar="K",
         help="k of the stratified k-fold (default: 5)")),
        ("--search-repeats", dict(type=int, default=2, metavar="R",
         help="repeats of the k-fold, seeds 0..R-1 (default: 2)")),
        ("--search-stages", dict(default=",".join(S.STAGES), metavar="LIST",
         help=f"the stages to run, in order (default: {','.join(S.STAGES)})")),
    ]  # fmt: skip
    for flag, kwargs in rows:
        g.add_argument(flag, **kwargs)


def check_arguments(args: argparse.Namespace, flow: str) -> None:
    """One line for each combination --search cannot run."""
    if not args.search:
        given = [f for f in ("board", "max_ms", "scheduler", "time_limit")
                 if getattr(args, f) is not None]  # fmt: skip
        if given:
            raise CLIError(f"--{given[0].replace('_', '-')} goes with --search")
        return
    if flow != "seq" and args.model not in (None, "seq-attn"):
        raise CLIError(f"--search chooses a seq-attn model (rows as windows of one step), not "
                       f"--model {args.model}; leave out --model")  # fmt: skip
    if flow != "seq" and args.scaling is not None:
        raise CLIError("--scaling: the searched seq-attn model standardizes each feature on "
                       "the training rows; leave it out")  # fmt: skip
    if args.cv is not None or args.on_board:
        raise CLIError("--search runs its own cross-validation on TRAIN and trains on the host;"
                       " leave out --cv and --on-board")  # fmt: skip
    if args.search_folds < 2 or args.search_repeats < 1 or args.jobs < 1:
        raise CLIError("--search-folds needs >= 2, --search-repeats and --jobs >= 1")
    if args.max_ms is not None and args.board is None:
        raise CLIError("--max-ms needs --board (the board whose time model predicts the ms)")
    from tinyattn.learn.search import STAGES

    bad = [s for s in args.search_stages.split(",") if s not in STAGES]
    if bad or not args.search_stages:
        stages = ", ".join(dict.fromkeys(STAGES))
        raise CLIError(f"--search-stages: {', '.join(bad) or 'none given'}; choose from "
                       f"{stages} (a stage may run more than once)")  # fmt: skip


def _score_of(record: list[dict], key: str) -> dict | None:
    for stage in reversed(record):
        for row in stage["rows"]:
            if row["key"] == key and row.get("score"):
                return row["score"]
    return None


SCHEDULER_WAIT = 10  # seconds a Dask scheduler is given to answer before the search starts


def check_scheduler(address: str, wait: float | None = None) -> None:
    """CLIError in one line when no Dask scheduler answers at `address` within `wait` s
    (default SCHEDULER_WAIT; a connection that would otherwise fail after 30 s with a
    traceback of the client's internals)."""
    import logging

    wait = SCHEDULER_WAIT if wait is None else wait
    from dask.distributed import Client

    quiet = logging.getLogger("distributed")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # its own retry warnings: the error is one line
    try:
        with Client(address, timeout=f"{wait}s"):
            return
    except (OSError, TimeoutError, ValueError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CLIError(
            f"--scheduler {address}: no Dask scheduler answered within {wait:g} s ({why}); "
            "start one there ('dask scheduler', then 'dask worker ADDRESS' on each machine), "
            "or leave --scheduler out to run the folds on this machine"
        ) from None
    finally:
        quiet.setLevel(level)


def run_search(args: argparse.Namespace, data, recipe: tuple, log) -> dict[str, Any]:
    """Search on the TRAIN part, train the pick on it, evaluate the test part once, write the
    model file with `meta["search"]`; returns the `--json` summary (with `search`)."""
    from tinyattn.learn import search as S
    from tinyattn.learn import seqcli

    train, _, _ = seqcli._split(data, recipe[1])
    given = args.max_macs is not None
    macs = args.max_macs if given else S.Budget().max_macs
    heap_given = args.max_heap is not None
    heap = args.max_heap if heap_given else S.Budget().max_heap
    budget = S.board_budget(args.board, args.max_ms, S.Budget(args.max_bytes, macs, heap), given,
                            heap_given)  # fmt: skip
    engine = S.Engine(jobs=args.jobs, scheduler=args.scheduler)
    if args.scheduler is not None:
        try:
            import dask.distributed  # noqa: F401
        except ImportError:
            raise CLIError("--scheduler needs dask.distributed: "
                           f"{remedy.install('cluster', 'install-cluster')}") from None
        check_scheduler(args.scheduler)
    start = S.Candidate(*recipe)
    print(f"search {data.name}: {len(train.y)} TRAIN {train.unit}, {args.search_repeats} x "
          f"{args.search_folds}-fold, budget {budget.max_bytes} B / {budget.max_macs} MACs / "
          f"{budget.max_heap} B heap"
          + (f" / {budget.max_us / 1000:g} ms on {args.board}" if budget.max_us else "")
          + f", {args.jobs if args.scheduler is None else 'dask'} "
          f"worker(s); cache {CACHE}/", file=log)  # fmt: skip
    stages = tuple(args.search_stages.split(","))
    try:
        res = S.search(train, start, budget, k=args.search_folds, repeats=args.search_repeats,
                       stages=stages, engine=engine, cache_dir=CACHE,
                       time_limit=None if args.time_limit is None else 60 * args.time_limit,
                       progress=not (args.quiet or args.json))  # fmt: skip
    except KeyboardInterrupt:
        print(f"search interrupted: every finished fold is kept in {CACHE}/; run the same "
              "command again to resume", file=sys.stderr)  # fmt: skip
        raise
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if res.arch_first:
        print(f"search: the start is over the budget, so the arch stage ran before the "
              f"{res.arch_first} stage to find an architecture within it",
              file=log)  # fmt: skip
    pick = res.pick
    cv = _score_of(res.stages, pick.key())
    if cv is None:  # the time limit came before any candidate of the first stage was done
        raise CLIError(f"--time-limit {args.time_limit:g} ended the search before any model had "
                       f"all its folds, so there is no pick; the finished folds are kept in "
                       f"{CACHE}/: run the same command again with a longer --time-limit to "
                       "resume")  # fmt: skip
    record = {**res.record(), "budget": asdict(budget), "board": args.board,
              "folds": args.search_folds, "repeats": args.search_repeats, "cv": cv}  # fmt: skip
    how = "" if res.complete else " (time limit: stages left undone)"
    for line in stage_lines(res.stages):  # what each stage chose (its bar is gone by now)
        print(line, file=log)
    print(f"search picked {pick.label()}{how}: CV int8 {cv['int8']:.3f} ± {cv['int8_se']:.3f}, "
          f"float {cv['float']:.3f} ({cv['folds']} folds) in {res.seconds / 60:.1f} min",
          file=log)  # fmt: skip
    if pick.family == "seq-rocket":  # fitted as `tinyattn train --model seq-rocket` fits it
        from tinyattn.learn import rocketcli

        return rocketcli.run_one(args, data, (pick.rocket, pick.train), log,
                                 extra={"search": record})  # fmt: skip
    if pick.family == "row-attn":  # the row model, trained as plain `tinyattn train` trains it
        from tinyattn.learn import train as row_train

        return row_train.run_one(args, data.train, pick.train, log, extra={"search": record})
    recipe = (pick.arch, pick.train, pick.augment, pick.average, pick.distill)
    return seqcli.run_one(args, data, recipe, log, extra={"search": record})


def stage_lines(stages: list[dict]) -> list[str]:
    """One line a stage: its name, the candidates scored, its pick and the pick's CV int8."""
    out = []
    for st in stages:
        scored = [r for r in st["rows"] if r.get("score")]
        chosen = next((r for r in scored if r["label"] == st["pick"]), None)
        score = (f"int8 {chosen['score']['int8']:.3f} ± {chosen['score']['int8_se']:.3f}"
                 if chosen else "")  # fmt: skip
        out.append(f"  {st['stage']:8s} {len(scored):2d} scored -> {st['pick']}  {score}")
    return out
