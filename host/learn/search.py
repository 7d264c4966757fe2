"""Host (CPython): the model search — what the team did by hand, for any windows (DESIGN §13).

`tinyattn train --search` chooses a model for a user's TRAIN windows inside a board's
budget, as the team's tuning rounds (tools/tune_seq.py, which this replaces) chose the
tuned defaults (host/learn/seqdefaults.py), and leaves its record in the model file. The
reasons behind its grids and constants, with the figures measured on the development
problems, are in docs/search.md ("Why the constants are what they are"); the code is
generic:

- **TRAIN only.** A candidate (architecture, recipe, augmentation, weight averaging) is scored
  by repeated stratified k-fold over the TRAIN windows: split seed r and model seed r for
  r = 0 … repeats-1; each fold fits its own standardization, trains, calibrates the int8 path
  on its own training windows and predicts its held-out windows (int8 and float accuracy,
  float log-loss). TEST is read once, after the pick, by the caller.
- **The budget.** A candidate whose blob bytes, MACs or heap (loaded model + buffers, the
  estimate `tinyattn.board.heap.model_heap`, with its Stream's) exceed it is never trained;
  its shapes are enough (`cost`).
- **Staged.** Each stage varies one group around the previous stage's pick: `arch` (patch,
  embed, heads, blocks, ff), `stem` (the patch embedding, or conv stems: `stem_grid`), `view`
  (the values, their log view, or their clip view at `VIEW_CLIPS`), `recipe` (lr, weight
  decay, label smoothing; epochs; a one-cycle schedule over 300 epochs), `augment` (time
  shift, scaling, jitter, time stretch), `average` (none, EMA, SWA), `distill` (none, or an
  ensemble of 4 teachers; a distilled candidate within one standard error first). `view`
  runs again after `recipe`: the int8 grid's cost depends on the recipe (`STAGES`). The first
  stage starts from the dataset's tuned defaults when it has them, else from
  `generic_defaults`; when none of the first stage's candidates fits the budget (a start over
  it: tuned defaults may take more heap than the default budget, and `view` to `distill`
  keep the start's size), the `arch` stage runs first (before `family`, so the other
  families are compared with a start within the budget) to find one within it;
  the stages before `distill` train without teachers
  (a fold with 4 teachers costs 5 trainings) and `distill` starts from the start's own.
- **One standard error.** In a stage, the best mean int8 accuracy m has a standard error s
  over its k·repeats folds; every candidate scoring at least m − s is as good as the folds can
  tell, and the simplest of them is picked (the stage's starting point if it is among them,
  else fewest MACs, then the stage's order). The search does not chase fold noise.
- **Parallel on an existing engine.** The (candidate, repeat, fold) tasks run through joblib:
  loky processes on this machine (`jobs`), or a Dask cluster (`scheduler`, a
  dask.distributed address) through joblib's dask backend — the same code path. A task is a
  pure function of its inputs and runs its BLAS on one thread, so the pick is the same
  whatever the backend and the number of workers.
- **Failures are scores.** A candidate that cannot be trained, calibrated or quantized on a
  fold (an exception in its task, e.g. a `QuantizeError`) is scored as failed, with the first
  failed fold's reason in its row (`failed`), and is never picked; the stage picks among the
  others (after the first stage a stage's start is the previous pick, whose folds passed;
  if every candidate of the first stage fails, the search stops there, naming the first
  failure).
- **Nothing lost.** Every finished task is one small JSON file in the cache
  (`build/search/<data key>/<candidate key>/r<repeat>f<fold>.json`, written atomically): Ctrl-C,
  a crash or `time_limit` loses only the tasks that were running, and the same command resumes
  from the cache without retraining what finished.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tinyattn.atomic import atomic_open
from tinyattn.board.cost import predict_from_terms
from tinyattn.data.windows import Windows
from tinyattn.learn.families import (  # noqa: F401 (the search's)
    FAMILIES,
    cost,
    rocket_grid,
    rocket_within,
    shape_spec,
)
from tinyattn.learn.rocketmodel import RocketConfig
from tinyattn.learn.seqmodel import SeqAttnConfig
from tinyattn.learn.seqtrain import Augment, Average, Distill
from tinyattn.learn.train import TrainConfig

# -- the budget ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """What a candidate may cost on the board (None: no limit)."""

    max_bytes: int | None = 32 * 1024  # the blob
    max_macs: int | None = 150_000  # multiply-accumulates of one full-length inference
    max_heap: int | None = 48 * 1024  # loaded model + buffers + its Stream (`cost`)
    max_us: float | None = None  # µs of one inference on the board of `rates` (--max-ms)
    rates: tuple[tuple[str, float], ...] = ()  # that board's time model (board/cost.py)

    def us(self, c: dict[str, Any]) -> float:
        """The µs the board's time model predicts for a candidate's `cost` (its work terms)."""
        return predict_from_terms(c["terms"], dict(self.rates))

    def unmeasured(self, c: dict[str, Any]) -> list[str]:
        """The work terms of `c` the board's time model has no rate for (not measured there)."""
        rates = dict(self.rates)
        return [k for k, v in c["terms"].items() if v and k not in rates]

    def over(self, c: dict[str, Any]) -> list[str]:
        """What `c` (`cost`) exceeds, in words; empty when it fits."""
        out = []
        if self.max_us is not None and self.unmeasured(c):
            return [f"its {', '.join(self.unmeasured(c))} work is not timed on this board yet"]
        for key, limit, unit in (("bytes", self.max_bytes, "B blob"), ("macs", self.max_macs,
                                 "MACs"), ("heap", self.max_heap, "B heap")):  # fmt: skip
            if limit is not None and c[key] > limit:
                out.append(f"{c[key]:,} {unit} > {limit:,}")
        if self.max_us is not None and self.us(c) > self.max_us:
            out.append(f"{self.us(c) / 1000:,.1f} ms > {self.max_us / 1000:,.1f} (predicted)")
        return out


@dataclass(frozen=True)
class BoardPreset:
    """A board's measured costs (DESIGN §13): its time model (µs rates per work term of
    tinyattn.board.cost, fitted to the µs measured on the board) and the heap a model may take
    there."""

    name: str
    rates: tuple[tuple[str, float], ...]
    max_heap: int
    source: str


def _measured(name: str) -> BoardPreset:
    """The preset from the board's table that `make bench-pico` measures (host/board/NAME.json):
    the time model tools/bench_pico_cost.py fits ("cost"), and half the heap free with the
    runtime and server imported for the model and its Stream (the other half: the server's
    line buffer and batches)."""
    t = json.loads((Path(__file__).resolve().parent.parent / "board" / f"{name}.json").read_text())
    rates = tuple(sorted(t["cost"]["rates"].items()))
    heap = t["free_heap_runtime"] // 2
    return BoardPreset(name, rates, heap, f"{t['board']}: int8 time model fitted on "
                       f"{len(t['cost']['measured'])} models; {t['free_heap_runtime']:,} B free "
                       f"with the runtime, {heap} B for the model")  # fmt: skip


BOARDS = {"rp2040": _measured("rp2040")}


def board_budget(board: str | None, max_ms: float | None, budget: Budget,
                 macs_given: bool = True, heap_given: bool = True) -> Budget:
    """`budget` with a board preset applied: `--max-ms` becomes the predicted µs limit (the
    board's time model of each candidate's op list, in place of the default MAC limit: a MAC
    costs what its kernel costs on that board), the preset's heap the heap limit. The heap
    replaces budget's when that is the default (`heap_given` False), else the tighter of the
    two is kept; a `--max-macs` given (`macs_given`) stays a limit of its own."""
    if board is None:
        if max_ms is not None:
            raise ValueError("--max-ms needs --board (a board's time model)")
        return budget
    preset = BOARDS[board]
    heap = budget.max_heap if heap_given and budget.max_heap is not None else preset.max_heap
    out = replace(budget, max_heap=min(heap, preset.max_heap))
    if max_ms is not None:
        out = replace(out, max_us=max_ms * 1000.0, rates=preset.rates,
                      max_macs=out.max_macs if macs_given else None)  # fmt: skip
    return out


# -- candidates ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    arch: SeqAttnConfig
    train: TrainConfig
    augment: Augment = field(default_factory=Augment)
    average: Average = field(default_factory=Average)
    distill: Distill = field(default_factory=Distill)
    family: str = "seq-attn"  # tinyattn.learn.families: what the other fields describe
    rocket: RocketConfig | None = None  # the seq-rocket family's configuration

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: asdict(getattr(self, k)) for k in ("arch", "train", "augment",
                                                                   "average", "distill")}
        if self.family != "seq-attn":  # (so a seq-attn candidate keeps its cache key)
            d["family"] = self.family
        if self.rocket is not None:
            d["rocket"] = asdict(self.rocket)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Candidate:
        """The candidate `as_dict` wrote (the model file's `search.pick`)."""
        kinds = {"arch": SeqAttnConfig, "train": TrainConfig, "augment": Augment,
                 "average": Average, "distill": Distill}  # fmt: skip
        arch = {**d["arch"], "stem_dilations": tuple(d["arch"].get("stem_dilations", (1, 2)))}
        fields = {k: kind(**(arch if k == "arch" else d[k])) for k, kind in kinds.items()}
        rocket = RocketConfig(**d["rocket"]) if d.get("rocket") else None
        return cls(**fields, family=d.get("family", "seq-attn"), rocket=rocket)

    def key(self) -> str:
        text = json.dumps(self.as_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def label(self) -> str:
        from tinyattn.learn.families import FAMILIES  # noqa: F401 (the search's)

        return FAMILIES[self.family].label(self)

    def seq_label(self) -> str:
        """A seq-attn candidate's line: architecture | recipe | augmentation | averaging."""
        a, t, g, w = self.arch, self.train, self.augment, self.average
        avg = f"swa{w.swa:g}" if w.swa else f"ema{w.ema:g}" if w.ema else "last"
        d = self.distill
        teach = f" | teachers{d.teachers} T{d.temperature:g} a{d.alpha:g}" if d.active else ""
        stretch = f" stretch{g.stretch:g}" if g.stretch else ""
        view = " log" if a.log_view else f" clip{a.clip:g}" if a.clip else ""
        if a.stem == "conv":
            dil = ",".join(str(d) for d in a.stem_dilations)
            view += f" conv{a.stem_width} k{a.stem_kernel} s{a.stem_stride} d{dil}"
            view += " bn" if a.stem_norm else ""
        return (f"P{a.patch} E{a.embed_dim} H{a.num_heads} L{a.blocks} F{a.ff_dim}{view} | "
                f"ep{t.epochs} lr{t.lr:g} wd{t.weight_decay:g} ls{t.label_smoothing:g} | "
                f"shift{g.shift} scale{g.scale:g} noise{g.noise:g}{stretch} | "
                f"{avg}{teach}")  # fmt: skip


# What a cached fold result means: raised when the same candidate on the same fold would score
# otherwise (2: a seq-rocket candidate's draws are its own, no longer each repeat's seed; 3: a
# rocket model at one pooled step needs less heap, so the budget prunes its features less; 4: a
# seq-rocket fit prunes to the budget in rounds of a tenth, refitting the ranking each round; 5:
# a rocket model's operations are counted on the grid of 3·xp, so a budget keeps more features;
# 6: the board's heap and µs join a seq-rocket fit's pruning rounds), so a cache written before
# is not reused
CACHE_VERSION = 6


def data_key(data: Windows) -> str:
    """The cache's name for the TRAIN windows a search sees (their values, lengths, labels) and
    what its results mean (CACHE_VERSION)."""
    h = hashlib.sha256(f"tinyattn search cache {CACHE_VERSION}".encode())
    for a in (data.X.astype(np.float64), data.lengths.astype(np.int64),
              data.y.astype(np.int64)):  # fmt: skip
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(json.dumps(list(data.class_names)).encode())
    return h.hexdigest()[:16]


# -- one task: a candidate on one fold -------------------------------------------------------


def fold_task(data: Windows, cand: Candidate, repeat: int, fold: int, k: int) -> dict:
    """Held-out int8/float accuracy and float log-loss of `cand` trained on fold `fold` of
    repeat `repeat` (stratified k-fold, split seed and model seed `repeat`). A pure function:
    BLAS on one thread, so any worker gives the same numbers."""
    from threadpoolctl import threadpool_limits

    from tinyattn.data.tabular import stratified_kfold

    t0 = time.perf_counter()
    with threadpool_limits(limits=1):
        tr, te = stratified_kfold(data.y, k, seed=repeat)[fold]
        try:
            got = FAMILIES[cand.family].score(data, cand, tr, te, repeat)
        except Exception as exc:  # noqa: BLE001 — any failure scores the candidate as failed
            return {"failed": f"{type(exc).__name__}: {exc}",
                    "seconds": time.perf_counter() - t0, "n": int(len(te))}  # fmt: skip
    return {**got, "n": int(len(te))}


def cost_of(data: Windows, cand: Candidate, memo: dict) -> dict[str, int]:
    """`{macs, bytes, heap}` of a candidate (its family's `cost`), once per model shape."""
    key = (cand.family, cand.arch, cand.train.model, cand.rocket)
    if key not in memo:
        memo[key] = FAMILIES[cand.family].cost(data, cand)
    return memo[key]


# -- the cache -------------------------------------------------------------------------------


class Cache:
    """One JSON file a finished task: `<root>/<data key>/<candidate key>/r<R>f<F>k<K>.json`."""

    def __init__(self, root: Path, data: Windows):
        self.dir = Path(root) / data_key(data)

    def path(self, cand: Candidate, repeat: int, fold: int, k: int) -> Path:
        return self.dir / cand.key() / f"r{repeat}f{fold}k{k}.json"

    def get(self, cand: Candidate, repeat: int, fold: int, k: int) -> dict | None:
        try:
            return json.loads(self.path(cand, repeat, fold, k).read_text())
        except (OSError, ValueError):
            return None  # absent, or a file cut short by a crash: the task runs again

    def put(self, cand: Candidate, repeat: int, fold: int, k: int, result: dict) -> None:
        path = self.path(cand, repeat, fold, k)
        path.parent.mkdir(parents=True, exist_ok=True)
        spec = path.parent / "candidate.json"
        if not spec.exists():
            with atomic_open(spec, "w") as f:
                json.dump(cand.as_dict(), f, sort_keys=True)
        with atomic_open(path, "w") as f:
            json.dump(result, f)


# -- running tasks ---------------------------------------------------------------------------


@dataclass
class Engine:
    """Where tasks run: joblib loky processes (`jobs`), or a Dask cluster (`scheduler`)."""

    jobs: int = 1
    scheduler: str | None = None  # a dask.distributed address, e.g. tcp://127.0.0.1:8786

    def run(self, fn: Callable, tasks: list[tuple]) -> Iterator[tuple[int, Any]]:
        """Yield `(index, fn(*task))` as tasks finish (their order: any)."""
        import joblib

        if not tasks:
            return
        if self.scheduler is None and self.jobs == 1:
            for i, t in enumerate(tasks):
                yield i, fn(*t)
            return
        calls = (joblib.delayed(_indexed)(i, fn, t) for i, t in enumerate(tasks))
        if self.scheduler is not None:
            from dask.distributed import Client

            with Client(self.scheduler), joblib.parallel_config(backend="dask"):
                yield from joblib.Parallel(return_as="generator_unordered")(calls)
            return
        par = joblib.Parallel(n_jobs=self.jobs, backend="loky",
                              return_as="generator_unordered")  # fmt: skip
        results = par(calls)
        try:
            for item in results:  # noqa: UP028 (not `yield from`: closing it early is ours)
                yield item
        finally:  # a caller that stops early (the time limit) cancels the running tasks,
            with warnings.catch_warnings():  # which joblib warns about: the caller says it
                # "N tasks which were still being processed…", or "N tasks have been
                # successfully executed but not used. Additionally, …" (a filter matches the
                # message's start)
                warnings.filterwarnings("ignore", r"\d+ tasks (which were|have been)",
                                        UserWarning)  # fmt: skip
                results.close()


def _indexed(i: int, fn: Callable, task: tuple) -> tuple[int, Any]:
    return i, fn(*task)


# -- scoring and the one-standard-error pick -------------------------------------------------


def failure(folds: dict[tuple[int, int], dict]) -> str | None:
    """The reason a candidate failed (its first failed fold, `r<R>f<F>: why`), or None."""
    bad = sorted(key for key, f in folds.items() if "failed" in f)
    if not bad:
        return None
    rep, f = bad[0]
    return f"r{rep}f{f}: {folds[bad[0]]['failed']}"


def finish(row: dict, folds: dict[tuple[int, int], dict]) -> None:
    """A candidate whose folds are all done: its `score`, or `failed` with the reason."""
    why = failure(folds)
    if why is None:
        row["score"] = summarize(list(folds.values()))
    else:
        row["failed"] = why


def summarize(folds: list[dict]) -> dict[str, float]:
    """Mean int8 and float accuracy, log-loss, seconds, and the int8 mean's standard error."""
    q = np.array([f["int8"] for f in folds], np.float64)
    se = float(q.std(ddof=1) / math.sqrt(len(q))) if len(q) > 1 else 0.0
    return {
        "int8": float(q.mean()),
        "int8_se": se,
        "float": float(np.mean([f["float"] for f in folds])),
        "logloss": float(np.mean([f["logloss"] for f in folds])),
        "seconds": float(np.mean([f["seconds"] for f in folds])),
        "folds": len(folds),
    }


def one_se_pick(rows: list[dict], prefer: Callable[[dict], bool] | None = None) -> dict:
    """The simplest row within one standard error of the best mean int8 accuracy: the stage's
    starting point if it qualifies, else the fewest MACs, then the earliest in the stage.
    `prefer`: the rows a stage prefers among those within one standard error, when there are
    any (the `distill` stage: the distilled ones, the steadier)."""
    scored = [r for r in rows if r.get("score")]
    best = max(scored, key=lambda r: (r["score"]["int8"], r["score"]["float"],
                                      -r["score"]["logloss"]))  # fmt: skip
    floor = best["score"]["int8"] - best["score"]["int8_se"]
    good = [r for r in scored if r["score"]["int8"] >= floor - 1e-12]
    if prefer is not None:
        good = [r for r in good if prefer(r)] or good
    start = [r for r in good if r.get("start")]
    return start[0] if start else min(good, key=lambda r: (r["cost"]["macs"], r["order"]))


# -- the stages ------------------------------------------------------------------------------


def arch_grid(data: Windows, base: SeqAttnConfig) -> list[SeqAttnConfig]:
    """Patch (so that a window is 8…32 tokens), embedding 8…24 with 2 or 4 heads, 1 or 2
    blocks, ff = 2E."""
    longest = int(np.max(data.lengths))
    patches = sorted({max(1, -(-longest // tokens)) for tokens in (8, 16, 32)} | {base.patch})
    out = [base]
    for P in patches:
        for E, H in ((8, 2), (16, 4), (24, 4)):
            for L in (1, 2):
                a = SeqAttnConfig(patch=P, embed_dim=E, num_heads=H, blocks=L, ff_dim=2 * E,
                                  log_view=base.log_view, clip=base.clip)  # fmt: skip
                if a not in out:
                    out.append(a)
    return out


# Patch tokens of the stem stage's conv stem alone (its heap grows with them: the stem's
# activations and the Stream's per-token state), of the finer one with batch norm (a heap
# inside the rp2040 preset's, over the default budget), and of the wider one (width 16 = E,
# fewer tokens, for a board of ~96 KB for the model): docs/search.md "Why the constants are
# what they are".
STEM_ALONE_TOKENS = 64
STEM_NORM_TOKENS = 192
STEM_WIDE_TOKENS = 128


def stem_grid(data: Windows, base: SeqAttnConfig) -> list[SeqAttnConfig]:
    """The stem stage: the base, then conv stems (docs/search.md "The conv stem") at the base's
    E, H, L, ff: a stride s in {4, 8} after a patch P that leaves 16 or 32 tokens at the
    attention (`P = ceil(longest / (tokens·s))`), width 8 with dilations 1, 2 or width 16
    with dilations 2, 4; the conv stem alone (no attention block, stride 1: width 8,
    dilations 2, 4 at the `STEM_ALONE_TOKENS` patch tokens, then the masked pool), the same
    with batch norm in training (`stem_norm`) at those tokens and at `STEM_NORM_TOKENS`, and
    at width 16 (E 16) at `STEM_WIDE_TOKENS`; and the patch stem at the base's sizes when the
    base is a conv."""
    longest = int(np.max(data.lengths))
    out = [base, replace(base, stem="patch")]
    if longest == 1:  # rows: a conv over one token is a dense layer, every stride the same
        return list(dict.fromkeys(out))
    for tokens in (16, 32):
        for stride in (4, 8):
            P = max(1, -(-longest // (tokens * stride)))
            for width, dilations in ((8, (1, 2)), (16, (2, 4))):
                out.append(replace(base, stem="conv", patch=P, stem_width=width, stem_kernel=5,
                                   stem_stride=stride, stem_dilations=dilations))  # fmt: skip
    P = max(1, -(-longest // STEM_ALONE_TOKENS))
    alone = replace(base, stem="conv", patch=P, stem_width=8, stem_kernel=5, stem_stride=1,
                    stem_dilations=(2, 4), blocks=0, embed_dim=8, num_heads=2, ff_dim=16,
                    stem_norm=False)  # fmt: skip
    out.append(alone)
    if base.bias:  # with batch norm in training: at these tokens, the finer ones, and wider
        fine = max(1, -(-longest // STEM_NORM_TOKENS))
        wide = max(1, -(-longest // STEM_WIDE_TOKENS))
        out += [replace(alone, stem_norm=True), replace(alone, patch=fine, stem_norm=True),
                replace(alone, patch=wide, stem_width=16, embed_dim=16, ff_dim=32,
                        stem_norm=True)]  # fmt: skip
    return list(dict.fromkeys(out))


# The distillation the `distill` stage tries beside none and the start's: 4 teachers of the
# same architecture and recipe, temperature 2, alpha 0.9 (docs/search.md "Why the constants
# are what they are").
TEACHERS = Distill(teachers=4, temperature=2.0, alpha=0.9)


def stage_candidates(stage: str, data: Windows, base: Candidate) -> list[Candidate]:
    """The candidates of a stage around `base` (base first: the stage's starting point). The
    `family` stage: one candidate of every family that takes the data, the one a plain
    `tinyattn train` gives it first; the stages after it vary a seq-attn model (another
    family's candidate is its own only one)."""
    t, g = base.train, base.augment
    if stage == "family":
        cands = [base] + [f.candidate(data, base) for f in FAMILIES.values()
                          if f.name != base.family and f.applies(data)]  # fmt: skip
        cands.sort(key=lambda c: not FAMILIES[c.family].first(data))  # stable: base next
        return list(dict.fromkeys(cands))
    if base.family == "seq-rocket" and stage == "arch":
        return rocket_grid(data, base)
    if base.family != "seq-attn":
        return [base]
    if stage == "arch":
        return [replace(base, arch=a) for a in arch_grid(data, base.arch)]
    if stage == "stem":
        return [replace(base, arch=a) for a in stem_grid(data, base.arch)]
    if stage == "view":  # the values, their log view (heavy-tailed levels) or clip view (peaks)
        raw = replace(base.arch, log_view=False, clip=0.0)
        grid = [base.arch, raw, replace(raw, log_view=True)]
        grid += [replace(raw, clip=p) for p in VIEW_CLIPS]
        return [replace(base, arch=a) for a in dict.fromkeys(grid)]
    if stage == "recipe":  # the rate, decay and smoothing at the base's epochs; then epochs
        grid = [t] + [replace(t, lr=lr, weight_decay=wd, label_smoothing=ls)
                      for lr in (3e-3, 1e-2) for wd in (0.01, 0.1) for ls in (0.0, 0.1)]
        grid += [replace(t, epochs=e) for e in (100, 200)]  # fmt: skip
        grid += [replace(t, schedule="onecycle", epochs=300)]  # warm-up, then cosine (below)
        return [replace(base, train=r) for r in dict.fromkeys(grid)]
    if stage == "augment":
        longest = int(np.max(data.lengths))
        grid = [g] + [Augment(shift=s, scale=sc, noise=nz) for s in (0, longest // 4)
                      for sc in (0.0, 0.1) for nz in (0.0, 0.05)]
        grid += [replace(g, stretch=0.2)]  # time scaling of the start's augmentation
        return [replace(base, augment=a) for a in dict.fromkeys(grid)]  # fmt: skip
    if stage == "average":
        grid = [base.average, Average(), Average(ema=0.97), Average(swa=0.5)]
        return [replace(base, average=a) for a in dict.fromkeys(grid)]
    if stage == "distill":
        grid = [base.distill, Distill(), TEACHERS]
        return [replace(base, distill=d) for d in dict.fromkeys(grid)]
    raise ValueError(f"unknown stage {stage!r}")


# The view stage's clip ceilings (percentiles of TRAIN's values): a peak-heavy signal's int8
# input grid loses its resolution to a few extreme values; a clip at a high percentile wins it
# back (docs/search.md "Why the constants are what they are").
VIEW_CLIPS = (99.9, 99.0)

# `view` twice: the int8 input grid's cost depends on the recipe, so the clip that costs
# nothing at the first `view`'s recipe may win at the recipe `recipe` picks (docs/search.md).
# When `recipe` keeps its start, the second `view`'s candidates are the first's, every fold
# from the cache.
STAGES = ("family", "arch", "stem", "view", "recipe", "view", "augment", "average", "distill")


def steadier(row: dict) -> bool:
    """The `distill` stage's preference within one standard error: a student of an ensemble of
    its own seeds varies less from seed to seed than the model alone (the within-fold seed
    std of held-out int8 accuracy; docs/search.md "A steady pick"), so the final model,
    trained once on all of TRAIN, is less of a seed lottery."""
    return row["cand"].distill.active


def no_lottery(row: dict) -> bool:
    """The `family` stage's preference within one standard error: a family whose model is a
    function of TRAIN (seq-rocket: fixed kernels, a ridge in closed form) over one trained by
    gradient descent from a seed (DESIGN §16)."""
    return row["cand"].family == "seq-rocket"


@dataclass
class SearchResult:
    pick: Candidate
    stages: list[dict]  # per stage: its rows (label, cost, score or why not trained) and pick
    complete: bool  # False: time limit or an interrupt left stages unfinished
    seconds: float
    arch_first: str | None = None  # the stage over the budget before which `arch` ran

    def record(self) -> dict[str, Any]:
        """What the model file keeps (`meta["search"]`) and `--json` prints."""
        return {"pick": self.pick.as_dict(), "pick_label": self.pick.label(),
                "pick_key": self.pick.key(),
                "stages": self.stages, "complete": self.complete,
                "seconds": round(self.seconds, 1)}  # fmt: skip


def search(
    data: Windows,
    start: Candidate,
    budget: Budget | None = None,
    k: int = 5,
    repeats: int = 2,
    stages: tuple[str, ...] = STAGES,
    engine: Engine | None = None,
    cache_dir: Path | str = Path("build") / "search",
    time_limit: float | None = None,
    progress: bool = True,
) -> SearchResult:
    """Run the stages from `start`; each stage's pick starts the next (see the docstring)."""
    from tqdm import tqdm

    budget = budget or Budget()
    engine = engine or Engine()
    cache = Cache(Path(cache_dir), data)
    deadline = None if time_limit is None else time.monotonic() + time_limit
    t0 = time.monotonic()
    costs: dict[tuple, dict[str, int]] = {}
    pick, record, complete, arch_first = start, [], True, None
    if "distill" in stages:  # the stages before it train without teachers (5 times cheaper)
        pick = replace(start, distill=Distill())
    stages = tuple(stages)
    lead = next((i for i, st in enumerate(stages) if st != "family"), None)
    first = stage_candidates(stages[lead], data, pick) if lead is not None else []
    family_first = lead is not None and "family" in stages[:lead]
    if lead is not None and first and (
            stages[lead] != "arch" and all(budget.over(cost_of(data, c, costs)) for c in first)
            or family_first and budget.over(cost_of(data, pick, costs))):  # fmt: skip
        # the start is over the budget and the first stage that varies it cannot leave its
        # size, or `family` would compare the other families with nothing: the `arch` stage
        # finds an architecture within the budget first (before `family`)
        at = stages.index("family") if family_first else lead
        arch_first = stages[at]
        stages = (*stages[:at], "arch", *stages[at:])
    perfect = False  # a stage's pick scored 1.000 on every fold
    for stage in stages:
        if perfect and stage != "distill":
            continue
        cands = stage_candidates(stage, data, pick if stage != "distill" else
                                 replace(pick, distill=start.distill))  # fmt: skip
        cands = [rocket_within(c, budget, data) if c.family == "seq-rocket" else c
                 for c in cands]  # fmt: skip
        if [c.key() for c in cands] == [pick.key()]:
            continue  # nothing to choose (the family stage on windows; another family's pick)
        rows = []
        for i, c in enumerate(cands):
            cst = cost_of(data, c, costs)
            rows.append({"label": c.label(), "key": c.key(), "cost": cst, "order": i,
                         "start": i == 0,
                         "over": budget.over(cst), "cand": c})  # fmt: skip
        todo = [r for r in rows if not r["over"]]
        if not todo:
            least = {key: min(r["cost"][key] for r in rows) for key in ("bytes", "macs", "heap")}
            raise ValueError(
                f"no {stage} candidate fits the budget ({budget.max_bytes} B blob, "
                f"{budget.max_macs} MACs, {budget.max_heap} B heap); the least any needs: "
                f"{least['bytes']} B, {least['macs']} MACs, {least['heap']} B heap: raise "
                "--max-bytes/--max-macs/--max-heap (or --max-ms with --board)"
            )
        folds = {r["key"]: {} for r in todo}
        tasks, where = [], []
        for r in todo:
            for rep in range(repeats):
                for f in range(k):
                    hit = cache.get(r["cand"], rep, f, k)
                    if hit is not None:
                        folds[r["key"]][(rep, f)] = hit
                    else:
                        tasks.append((data, r["cand"], rep, f, k))
                        where.append((r, rep, f))
        total = len(todo) * repeats * k
        bar = tqdm(total=total, initial=total - len(tasks), desc=f"search {stage}", unit="fold",
                   disable=None if progress else True)  # fmt: skip
        try:
            for i, result in engine.run(fold_task, tasks):
                r, rep, f = where[i]
                cache.put(r["cand"], rep, f, k, result)
                folds[r["key"]][(rep, f)] = result
                bar.update(1)
                if len(folds[r["key"]]) == repeats * k:  # this candidate is complete
                    finish(r, folds[r["key"]])
                    scored = [x["score"]["int8"] for x in todo if x.get("score")]
                    if scored:
                        bar.set_postfix(best=f"{max(scored):.3f}")
                if deadline is not None and time.monotonic() > deadline:
                    complete = False
                    break
        finally:
            bar.close()
        for r in todo:  # candidates whose folds all came from the cache
            done = "score" in r or "failed" in r
            if not done and len(folds[r["key"]]) == repeats * k:
                finish(r, folds[r["key"]])
        if not any(r.get("score") for r in todo):
            failed = [r for r in todo if "failed" in r]
            if complete and len(failed) == len(todo):  # the first stage: after it a stage's
                raise ValueError(  # start is the last pick, whose folds (cached) passed
                    f"every {stage} candidate failed, so the search has no model; the first: "
                    f"{failed[0]['label']}: {failed[0]['failed']}"
                )
            complete = False
            break
        chosen = one_se_pick(todo, steadier if stage == "distill" else
                             no_lottery if stage == "family" else None)  # fmt: skip
        pick = chosen["cand"]
        kept = [{key: v for key, v in r.items() if key != "cand"} for r in rows]
        record.append({"stage": stage, "pick": chosen["label"], "rows": kept})
        if not complete:
            break
        if chosen["score"]["int8"] == 1.0 and stage != "distill" and not perfect:
            # every held-out window right on every fold: no later stage can score higher, so
            # they are skipped; `distill` still runs (a steadier pick, "A steady pick")
            perfect = True
            record[-1]["note"] = "every fold 1.000: the stages up to distill are skipped"
    return SearchResult(pick, record, complete, time.monotonic() - t0, arch_first)


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
