"""Host (CPython): `tinyattn train --on-board` — train on the board, driven from the host.

DESIGN §11, issue 13. The host prepares the run exactly as `tinyattn train` would (the split,
the input scaling fitted on the train rows, the initial weights of `build_model(seed)`, the
minibatch order of `fit`'s `np.random.default_rng([seed, 1])`), sends the initial weights (a
board float model file, tinyattn.board.boardmodel) and the rows (TAFD, device/server_train.py) to
the board's training server, then asks for one epoch at a time with that epoch's permutation.
The board checkpoints after every epoch; the host shows a progress bar, fetches the weights
every FETCH_EVERY epochs and at the end into `OUT.tafm` (atomic), and writes `OUT` (the
ordinary model file, so export / flash / parity work unchanged) once the last epoch is done.

Windows (`seq-attn`, `--dataset basicmotions`, `--ts`): host/board/onboard_seq.py plans that run
(a windows file instead of the rows, the epoch's time shifts with its order) and drives it
with the same BoardTrainer.

`--head-only` adapts a trained model (`--base`, default the `--out` file) to new rows from
`--csv`: only the last dense (the classifier) trains, over the features of the frozen body;
the input scaling stays the base model's. The summary gives the test accuracy on the new rows
before and after.

Faults (Must show 5): a board reset or a dropped link mid-run is met by starting the training
server again and resuming from the board's last checkpoint (the epochs done are the
checkpoint's); after MAX_RECOVERIES the command stops with one line saying where the last
good weights are. Running the same command again resumes too: the board's checkpoint carries
the run's id (a hash of the initial weights, config and rows), and a board that lost its
checkpoint gets the host's copy `OUT.tafm` of the same run.

Protocol ops: docs/protocol.md, Training.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import struct
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tinyattn import remedy
from tinyattn.board.boardmodel import (
    board_bytes,
    board_meta,
    parse_board,
    read_board,
    write_board,
)
from tinyattn.board.link import (
    DEFAULT_CONNECT_TIMEOUT,
    BoardLink,
    BoardReset,
    LinkError,
    LinkTimeout,
)
from tinyattn.data.tabular import standardize, stratified_split
from tinyattn.data.windows import Windows
from tinyattn.errors import CLIError
from tinyattn.learn.model import Sequential, build_model, load_model, save_model
from tinyattn.paths import device_dir

TRAIN_PROTOCOL = 1  # device/server_train.py TRAIN_PROTOCOL
CHUNK = 2048  # file bytes per train_put / train_get (server_train.MAX_CHUNK)
FETCH_EVERY = 10  # epochs between fetches of the checkpoint into OUT.tafm
MAX_RECOVERIES = 3  # resets / drops met by a restart before the command gives up
FIRST_EPOCH_TIMEOUT = 120.0  # s; an RP2040 runs a pure-Python Iris epoch in a few seconds
EPOCH_TIMEOUT_FACTOR = 5.0  # later epochs: this many times the slowest epoch so far (+ 1 s)
DATA_MAGIC = b"TAFD"
DATA_HEADER = struct.Struct("<4sHHIII")  # magic, version, flags, n_rows, n_features, n_train


# -- what the board is sent ---------------------------------------------------------------


def data_bytes(X: np.ndarray, y: np.ndarray, n_train: int) -> bytes:
    """The TAFD file (device/server_train.py): rows X [N, F] (float32, normalized), labels
    y [N] (uint8); the first n_train rows train, the rest are evaluated only."""
    N, F = X.shape
    if N > 65535 or int(y.max()) > 255:
        raise ValueError(f"{N} rows, {int(y.max()) + 1} classes: the board takes at most "
                         "65535 rows and 256 classes")  # fmt: skip
    body = b"".join([
        DATA_HEADER.pack(DATA_MAGIC, 1, 0, N, F, n_train),
        np.ascontiguousarray(X, dtype="<f4").tobytes(),
        np.asarray(y, dtype=np.uint8).tobytes(),
        bytes(-N % 4),
    ])  # fmt: skip
    return body + struct.pack("<I", zlib.crc32(body))


def batch_orders(seed: int, n: int, epochs: int) -> np.ndarray:
    """[epochs, n] uint16: the minibatch order of host `train.fit` — one permutation of the n
    train rows per epoch from `np.random.default_rng([seed, 1])`."""
    rng = np.random.default_rng([seed, 1])  # exactly fit's minibatch rng
    return np.asarray([rng.permutation(n) for _ in range(epochs)], dtype="<u2")


class RunFiles:
    """What BoardTrainer reads of a plan besides its fields (`meta` with the run id, `rows`:
    the data file, its CRC-32 last): Plan (rows) and onboard_seq.SeqPlan (windows)."""

    meta: dict[str, Any]
    rows: bytes

    @property
    def run(self) -> str:
        return self.meta["run"]

    @property
    def data_crc(self) -> int:
        return struct.unpack("<I", self.rows[-4:])[0]


@dataclass
class Plan(RunFiles):
    """A run as the host prepares it: the bytes the board gets and what the host keeps."""

    config: Any  # train.TrainConfig
    data: Windows
    X: np.ndarray  # (N, F) normalized, all rows
    train_idx: np.ndarray
    test_idx: np.ndarray
    norm_mean: np.ndarray
    norm_std: np.ndarray
    model: Sequential  # initial weights; the trained ones are loaded into it at the end
    meta: dict[str, Any]  # the board file's meta (ops, n_features, train config, run)
    init: bytes  # TAFM of the initial weights
    rows: bytes  # TAFD: train rows then test rows
    orders: np.ndarray  # (epochs, n_train) uint16
    shifts: np.ndarray | None = None  # (epochs, n_train) int16: a window run's time shifts
    head_only: bool = False
    base: dict[str, Any] = field(default_factory=dict)  # head-only: base meta, before figures
    csv: dict[str, Any] = field(default_factory=dict)  # {"csv", "target"} of a --csv run
    heap_note = ""  # appended to a board's "not enough heap" (Iris: the board's message says it)

    @property
    def n_rows(self) -> int:
        return len(self.X)

    @property
    def n_train(self) -> int:
        return len(self.train_idx)


def check_schedule(config: Any) -> None:
    """CLIError (one line) for a learning-rate schedule the board does not run (a
    train.TrainConfig)."""
    if config.schedule not in ("cosine", "constant"):
        raise CLIError(f"--on-board: the board's schedules are cosine and constant, not "
                       f"{config.schedule}; train on the host (without --on-board), or give "
                       "--schedule cosine")  # fmt: skip


def _finish_plan(plan_args: dict[str, Any], meta: dict[str, Any]) -> Plan:
    config = plan_args["config"]
    check_schedule(config)
    X, tr, te = plan_args["X"], plan_args["train_idx"], plan_args["test_idx"]
    y = plan_args["data"].y
    rows = data_bytes(np.concatenate([X[tr], X[te]]), np.concatenate([y[tr], y[te]]), len(tr))
    meta = {**meta, "train": {**asdict(config), "head_only": plan_args["head_only"]}}
    theta = plan_args["model"].theta.astype(np.float32)
    digest = hashlib.sha256(board_bytes(meta, theta) + rows).hexdigest()[:16]
    meta["run"] = digest
    orders = batch_orders(config.seed, len(tr), config.epochs)
    return Plan(**plan_args, meta=meta, init=board_bytes(meta, theta), rows=rows, orders=orders)


def plan_full(data: Windows, config: Any) -> Plan:
    """The run `tinyattn train` would make with this config: split, scaling, init, order."""
    from tinyattn.learn.train import fit_scaling

    train_idx, test_idx = stratified_split(data.y, config.test_fraction, config.seed)
    mean, std = fit_scaling(data.rows[train_idx], config.scaling)  # windows of one step
    X = standardize(data.rows, mean, std)  # (N, F)
    model = build_model(config.model, data.n_features, data.n_classes, seed=config.seed)
    meta = board_meta({"ops": model.ops, "model": config.model, "dataset": data.name,
                       "class_names": list(data.class_names)}, mean, std)  # fmt: skip
    args = dict(config=config, data=data, X=X, train_idx=train_idx, test_idx=test_idx,
                norm_mean=mean, norm_std=std, model=model, head_only=False)  # fmt: skip
    return _finish_plan(args, meta)


def plan_head_only(base_path: Path, data: Windows, config: Any) -> Plan:
    """Adapt the model in `base_path` to `data`: its weights and scaling, a split of the new
    rows by `config.seed`, only the classifier trains."""
    try:
        base = load_model(base_path)
    except ValueError as exc:
        raise CLIError(f"{exc}; --head-only adapts a trained model (--base FILE)") from None
    # head-only retrains the last dense of a row model (windows train in onboard_seq.py)
    if base.is_seq or base.model.ops[-1].get("op") != "dense":
        raise CLIError(f"{base_path}: --head-only needs a model whose last op is a dense")
    names = base.class_names
    unknown = sorted(set(data.class_names) - set(names))
    if unknown or data.n_features != len(base.norm_mean):
        raise CLIError(
            f"{data.name}: {data.n_features} features and classes {data.class_names}, the model "
            f"{len(base.norm_mean)} and {names}; --head-only adapts to new rows of the same "
            "features and classes"
        )
    y = np.asarray([names.index(data.class_names[c]) for c in data.y], dtype=np.int64)
    data = replace(data, y=y, class_names=list(names))
    try:
        train_idx, test_idx = stratified_split(y, config.test_fraction, config.seed)
    except ValueError as exc:
        raise CLIError(f"{data.name}: {exc}") from None
    X = base.normalize(data.X)[:, 0]  # (N, F): the board takes rows
    model = base.model
    before = {
        "train_accuracy": float(np.mean(model.predict(X[train_idx]) == y[train_idx])),
        "test_accuracy": float(np.mean(model.predict(X[test_idx]) == y[test_idx])),
    }
    keep = {k: base.meta[k] for k in ("model", "feature_names") if k in base.meta}
    meta = board_meta({**keep, "ops": model.ops, "dataset": data.name, "class_names": names},
                      base.norm_mean, base.norm_std)  # fmt: skip
    args = dict(config=config, data=data, X=X, train_idx=train_idx, test_idx=test_idx,
                norm_mean=base.norm_mean, norm_std=base.norm_std, model=model, head_only=True,
                base={"path": str(base_path), "meta": base.meta, "before": before})  # fmt: skip
    return _finish_plan(args, meta)


# -- the link --------------------------------------------------------------------------------


def runtime_version() -> str:
    manifest = json.loads((device_dir() / "package.json").read_text())
    return str(manifest["version"])


@dataclass
class Epoch:
    epoch: int  # epochs done after this one (1-based)
    loss: float
    train_acc: float
    test_acc: float
    seconds: float  # on the board
    free_heap: int | None = None  # bytes free on the board after the epoch (None: not known)


class BoardTrainer:
    """One on-board run over a BoardLink, with restarts (see the module docstring)."""

    def __init__(
        self,
        port: str,
        plan: Plan,
        copy: Path,
        baud: int = 115200,
        timeout: float = DEFAULT_CONNECT_TIMEOUT,
        deploy: bool = True,
        on_epoch: Callable[[Epoch], None] | None = None,
        log: Callable[[str], None] | None = None,
    ):
        self.port = port
        self.plan = plan
        self.copy = copy  # the host's copy of the checkpoint (OUT.tafm)
        self.baud = baud
        self.timeout = timeout
        self.deploy = deploy  # flash the training runtime when the board lacks it
        self.on_epoch = on_epoch
        self.log = log or (lambda text: None)
        self.link: BoardLink | None = None
        self.deployed = False
        self.epoch_timeout = max(FIRST_EPOCH_TIMEOUT, timeout)
        self.history: dict[int, Epoch] = {}
        self.events: list[str] = []  # resets, drops, resumes: for the summary
        self.copy_epoch: int | None = None  # epoch of the host's copy
        self.start_epoch = 0  # where this command started (resumed runs: > 0)

    # -- session ----------------------------------------------------------------------------
    def close(self, stop: bool = True) -> None:
        """Close the port; `stop`: ask the server to exit first (not over a broken link)."""
        if self.link is not None:
            try:
                if stop and self.link.serial is not None:
                    self.link.stop_server()
            except LinkError:
                pass
            self.link.close()
            self.link = None

    def _request(self, op: str, timeout: float | None = None, retries: int = 3,
                 **fields: Any) -> dict[str, Any]:  # fmt: skip
        assert self.link is not None
        rep = self.link.request(op, timeout=timeout, retries=retries, **fields)
        if not rep.get("ok"):
            raise _BoardError(f"{self.port}: the board refused '{op}': {rep.get('error')}")
        return rep

    def connect(self) -> dict[str, Any]:
        """Start the training server (flashing the training runtime once if the board lacks
        it or has another version); returns its train_info."""
        for attempt in range(2):
            self.close()
            self.link = BoardLink(self.port, self.baud, timeout=5.0,
                                  connect_timeout=self.timeout).open()  # fmt: skip
            try:
                self.link.start_server(None)
                info = self._request("train_info")
                current = (info.get("train_protocol") == TRAIN_PROTOCOL
                           and info.get("runtime_version") == runtime_version())  # fmt: skip
            except LinkTimeout:
                raise
            except (LinkError, _BoardError) as exc:  # no server_train, or an old server.py
                if not self.deploy or self.deployed:
                    raise CLIError(f"{exc}; run '{remedy.flash(train=True)}'") from None
                current, info = False, {}
            if current:
                return info
            if not self.deploy or self.deployed or attempt:
                raise CLIError(
                    f"{self.port}: the board's training runtime is {info.get('runtime_version')}"
                    f" (protocol {info.get('train_protocol')}), the host's "
                    f"{runtime_version()}; run '{remedy.flash(train=True)}'"
                )
            self.close()
            self._flash()
        raise AssertionError("unreachable")  # pragma: no cover

    def _flash(self) -> None:
        from tinyattn.board.flash import flash

        self.log(f"{self.port}: installing the on-board training runtime (flash --train)")
        flash(self.port, None, progress=False, timeout=self.timeout, baud=self.baud, train=True)
        self.deployed = True
        self.events.append("flashed the training runtime")

    def upload(self, name: str, data: bytes) -> None:
        """A file to the board in CHUNK pieces (`train_put`), then `train_commit`."""
        for offset in range(0, len(data), CHUNK):
            chunk = base64.b64encode(data[offset : offset + CHUNK]).decode()
            self._request("train_put", file=name, offset=offset, b64=chunk)
        self._request("train_commit", file=name, size=len(data), file_crc=zlib.crc32(data))

    def fetch(self) -> bytes:
        """The board's weights file (checkpoint), checked (CRC, layout) before it is kept."""
        got = bytearray()
        size = None
        while size is None or len(got) < size:
            rep = self._request("train_get", offset=len(got), n=CHUNK)
            size = int(rep["size"])
            chunk = base64.b64decode(rep["b64"])
            if not chunk and len(got) < size:
                raise _BoardError(f"{self.port}: the weights file shrank while fetching")
            got += chunk
        data = bytes(got)
        parse_board(data, f"{self.port}:train_ckpt.tafm")  # ValueError: corrupt
        return data

    def keep(self, data: bytes) -> None:
        """Write the host's copy of a fetched checkpoint atomically."""
        bm = parse_board(data)
        write_board(self.copy, bm.meta, bm.theta, bm.step, bm.state, bm.average)
        self.copy_epoch = bm.step // self.steps_per_epoch

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.plan.n_train // self.plan.config.batch_size)

    def sync(self, info: dict[str, Any]) -> int:
        """Bring the board to this run; returns the epochs already done (its checkpoint)."""
        plan = self.plan
        if info.get("data_crc") != plan.data_crc or info.get("data_rows") != plan.n_rows:
            self.upload("data", plan.rows)
        if info.get("run") == plan.run and info.get("epoch") is not None:
            if info["epoch"]:
                self.events.append(f"resumed at epoch {info['epoch']} (board checkpoint)")
            return int(info["epoch"])
        init, epoch = plan.init, 0
        host = self._host_copy()
        if host is not None:
            init, epoch = host
            self.events.append(f"resumed at epoch {epoch} (host copy {self.copy})")
        self.upload("weights", init)
        return epoch

    def _host_copy(self) -> tuple[bytes, int] | None:
        """The host's copy of this run's checkpoint, if any (a board that lost its own)."""
        if not self.copy.is_file():
            return None
        try:
            bm = read_board(self.copy)
        except ValueError:
            return None
        if bm.meta.get("run") != self.plan.run or not bm.step:
            return None
        return self.copy.read_bytes(), bm.step // self.steps_per_epoch

    # -- the run -------------------------------------------------------------------------------
    def train(self) -> bytes:
        """All epochs, with restarts; returns the final weights file's bytes."""
        plan = self.plan
        epochs = plan.config.epochs
        recoveries = 0
        first = True
        while True:
            try:
                done = self.sync(self.connect())
                if first:
                    self.start_epoch = done
                    first = False
                slowest = 0.0
                for e in range(done, epochs):
                    fields = {"order": base64.b64encode(plan.orders[e].tobytes()).decode()}
                    if plan.shifts is not None:  # a window run's time shifts (onboard_seq)
                        fields["shifts"] = base64.b64encode(plan.shifts[e].tobytes()).decode()
                    rep = self._request("train_epoch", timeout=self.epoch_timeout, retries=1,
                                        epoch=e, **fields)  # fmt: skip
                    ep = Epoch(int(rep["epoch"]), float(rep["loss"]),
                               rep["train_correct"] / max(rep["n_train"], 1),
                               rep["test_correct"] / rep["n_test"] if rep["n_test"] else np.nan,
                               float(rep["seconds"]), rep.get("free_heap"))  # fmt: skip
                    self.history[ep.epoch] = ep
                    slowest = max(slowest, ep.seconds)
                    self.epoch_timeout = max(self.timeout / 2, EPOCH_TIMEOUT_FACTOR * slowest + 1)
                    if self.on_epoch is not None:
                        self.on_epoch(ep)
                    if ep.epoch % FETCH_EVERY == 0 and ep.epoch < epochs:
                        self.keep(self.fetch())
                final = self.fetch()
                self.keep(final)
                self._request("train_end", remove=True)  # the host has it all: nothing stays
                return final
            except (BoardReset, LinkTimeout) as exc:
                if first:  # never reached the training server: nothing to resume
                    raise CLIError(str(exc)) from None
                recoveries += 1
                kind = "reset" if isinstance(exc, BoardReset) else "link lost"
                self.events.append(f"{kind} after epoch {max(self.history, default=0)}: {exc}")
                if recoveries > MAX_RECOVERIES:
                    raise CLIError(self._gave_up(exc)) from None
                self.log(f"{self.port}: {kind} ({exc}); resuming from the board's checkpoint")
                self.close(stop=False)
            except _BoardError as exc:
                if "not enough heap" in str(exc):  # the same command cannot resume that:
                    self._forget()  # its files would only fill the board's flash
                    raise CLIError(f"{exc}{plan.heap_note}") from None
                raise CLIError(f"{exc}{self._where(first)}") from None
            except LinkError as exc:
                raise CLIError(f"{exc}{self._where(first)}") from None
            except KeyboardInterrupt as exc:  # Ctrl-C: cli says "interrupted" and this
                if first:
                    raise
                raise type(exc)(self._where(first)[2:]) from None

    def _forget(self) -> None:
        """Remove the run's files from the board (a run that cannot go on), if it answers."""
        try:
            self._request("train_end", remove=True)
        except LinkError:
            pass

    def _where(self, first: bool = False) -> str:
        """What a rerun resumes from, once the run has reached the board's training server
        (before that the board holds nothing of this run: nothing to say)."""
        if first:
            return ""
        copy = (f"; the host has epoch {self.copy_epoch} in {self.copy}"
                if self.copy_epoch is not None else "")  # fmt: skip
        return (f"; the board keeps its last checkpoint (train_ckpt.tafm){copy}: run "
                f"'{remedy.again('train')}' again to resume")  # fmt: skip

    def _gave_up(self, exc: Exception) -> str:
        return f"gave up after {MAX_RECOVERIES} restarts ({exc}){self._where()}"


class _BoardError(LinkError):
    """The board answered with an error reply."""


# -- the command ------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The on-board options of `tinyattn train` (added by train.add_arguments)."""
    from tinyattn.board.ports import add_port_arguments

    g = parser.add_argument_group("on-board training")
    g.add_argument(
        "--on-board", action="store_true",
        help="train on the board (--port, or a virtual board on build/board): the host sends "
        "the initial weights, rows (or windows) and batch order (and time shifts) of the host "
        "run with this seed, fetches the weights into --out (and its checkpoint into "
        "OUT.tafm); resumes an interrupted run",
    )  # fmt: skip
    g.add_argument(
        "--head-only", action="store_true",
        help="with --on-board: train only the classifier (last dense) of --base on new rows "
        "(--csv NEW.csv): personalization; prints test accuracy before and after",
    )  # fmt: skip
    g.add_argument(
        "--base", type=Path, metavar="MODEL",
        help="with --head-only: the model to adapt (default: the --out file)",
    )  # fmt: skip
    g.add_argument(
        "--timeout", type=float, default=DEFAULT_CONNECT_TIMEOUT, metavar="S",
        help="with --on-board: seconds a silent board is waited for (default %(default)g)",
    )  # fmt: skip
    add_port_arguments(g)


def check_arguments(args: argparse.Namespace) -> None:
    if not args.on_board:
        for flag, given in (("--head-only", args.head_only), ("--base", args.base is not None)):
            if given:
                raise CLIError(f"{flag} needs --on-board")
        return
    if args.cv is not None:
        raise CLIError("--on-board trains one split; --cv runs on the host only")
    if args.head_only and args.csv is None:
        raise CLIError("--head-only adapts the model to new rows: give them with --csv NEW.csv")
    if not args.timeout > 0:
        raise CLIError(f"--timeout {args.timeout}: must be positive")


def _accuracy(model: Sequential, X: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(model.predict(X) == y)) if len(y) else float("nan")


def train_on_board(
    port: str,
    plan: Plan,
    out: Path,
    baud: int = 115200,
    timeout: float = DEFAULT_CONNECT_TIMEOUT,
    on_epoch: Callable[[Epoch], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run `plan` on the board at `port`, write `out` (model.npz) and `out.tafm`; returns
    {"model": the trained Sequential, "metrics", "history", "board", "seconds"}."""
    bm, history, board, seconds = run_board(port, plan, out, baud, timeout, on_epoch, log)
    model = plan.model
    model.theta[...] = bm.theta.astype(np.float64)
    X, y = plan.X, plan.data.y
    metrics = {
        "train_accuracy": _accuracy(model, X[plan.train_idx], y[plan.train_idx]),
        "test_accuracy": _accuracy(model, X[plan.test_idx], y[plan.test_idx]),
    }
    meta = _model_meta(plan, model, history, metrics, board, seconds)
    path = save_model(out, model, plan.norm_mean, plan.norm_std, meta)
    return {"model": model, "metrics": metrics, "history": history, "board": board,
            "seconds": seconds, "out": path}  # fmt: skip


def run_board(
    port: str,
    plan: Any,
    out: Path,
    baud: int = 115200,
    timeout: float = DEFAULT_CONNECT_TIMEOUT,
    on_epoch: Callable[[Epoch], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[Any, dict[str, list[float]], dict[str, Any], float]:
    """Train `plan` (a Plan, or onboard_seq's SeqPlan) on the board at `port`, its checkpoint
    copied to `out.tafm`; returns (the final board file parsed, history, the summary's
    "on_board" figures, seconds)."""
    copy = out.with_suffix(".tafm")
    trainer = BoardTrainer(port, plan, copy, baud, timeout, on_epoch=on_epoch, log=log)
    t0 = time.perf_counter()
    try:
        final = trainer.train()
    finally:
        trainer.close()
    seconds = time.perf_counter() - t0
    bm = parse_board(final)
    epochs = plan.config.epochs
    hist = [trainer.history.get(e) for e in range(1, epochs + 1)]
    history = {
        "loss": [h.loss if h else float("nan") for h in hist],
        "train_acc": [h.train_acc if h else float("nan") for h in hist],
        "test_acc": [h.test_acc if h else float("nan") for h in hist],
    }
    board_s = [h.seconds for h in hist if h]
    free = [h.free_heap for h in hist if h and h.free_heap is not None]
    board = {
        "port": port, "run": plan.run, "step": bm.step, "head_only": plan.head_only,
        "s_per_epoch": float(np.mean(board_s)) if board_s else None,
        "min_free_heap": min(free) if free else None,
        "epochs_here": len(board_s), "start_epoch": trainer.start_epoch,
        "events": trainer.events, "checkpoint": str(copy),
    }  # fmt: skip
    return bm, history, board, seconds


def _model_meta(plan: Plan, model: Sequential, history: dict, metrics: dict, board: dict,
                seconds: float) -> dict[str, Any]:  # fmt: skip
    """docs/model-format.md meta: as `tinyattn train` writes it, plus "board"."""
    from tinyattn.learn.train import TrainResult, model_meta

    result = TrainResult(model, plan.norm_mean, plan.norm_std, seconds, plan.train_idx,
                         plan.test_idx, history, metrics, plan.config)  # fmt: skip
    meta = model_meta(plan.data, result)
    if plan.head_only:
        base = plan.base["meta"]
        meta["train"]["scaling_resolved"] = base.get("train", {}).get("scaling_resolved")
        meta["train"]["head_only"] = True
        meta["train"]["base"] = plan.base["path"]
        meta["metrics"] = {**metrics, **{f"before_{k}": v for k, v in plan.base["before"].items()}}
    meta.update(plan.csv)  # so export and parity find the rows again
    meta["board"] = board
    return meta


def drive(
    args: argparse.Namespace,
    epochs: int,
    name: str,
    run: Callable[..., dict[str, Any]],
    heap: str | None = None,
) -> dict[str, Any]:
    """`run(port, on_epoch, say)` on `--port` or a virtual board of `heap` (default: the
    inference board's, ports.VIRTUAL_HEAP) under the progress bar of `tinyattn train`."""
    from tinyattn.board.ports import VIRTUAL_HEAP, board_port
    from tinyattn.learn.train import _progress_bar

    heap = heap or VIRTUAL_HEAP
    bar = _progress_bar(epochs, f"train {name} on board", args.quiet or args.json)

    def on_epoch(ep: Epoch) -> None:
        if bar.n < ep.epoch - 1:
            bar.update(ep.epoch - 1 - bar.n)  # resumed: the epochs done before
        bar.set_postfix(loss=f"{ep.loss:.4f}", acc=f"{ep.train_acc:.3f}",
                        test=f"{ep.test_acc:.3f}", refresh=False)  # fmt: skip
        bar.update()

    def say(text: str) -> None:
        bar.write(text, file=sys.stderr)

    try:
        with board_port(args.port, heap=heap) as port:  # a virtual board: `heap`
            return run(port, on_epoch, say)
    finally:
        bar.close()


def main(args: argparse.Namespace, config: Any, data: Windows) -> int:
    """`tinyattn train --on-board`: called by traincli.main with its config and data."""
    from tinyattn.learn.train import count

    log = sys.stderr if args.json else sys.stdout
    try:
        if args.head_only:
            plan = plan_head_only(args.base or args.out, data, config)
        else:
            plan = plan_full(data, config)
    except ValueError as exc:
        raise CLIError(f"{data.name}: {exc}") from None
    if args.csv is not None:
        plan.csv = {"csv": str(args.csv.resolve()), "target": args.target}
    res = drive(args, config.epochs, data.name, lambda port, on_epoch, say: train_on_board(
        port, plan, args.out, args.baud, args.timeout, on_epoch, say))  # fmt: skip
    m, b = res["metrics"], res["board"]
    n_test, n_train = len(plan.test_idx), len(plan.train_idx)
    where = args.port or "virtual board (build/board)"
    before = ""
    if plan.head_only:
        bt = plan.base["before"]["test_accuracy"]
        before = f" (before: {bt:.3f}, {round(bt * n_test)}/{n_test})"
    resumed = f", resumed at epoch {b['start_epoch']}" if b["start_epoch"] else ""
    epochs = count(config.epochs, "epoch")
    print(
        f"test accuracy {m['test_accuracy']:.3f} ({round(m['test_accuracy'] * n_test)}/{n_test})"
        f"{before}, train {m['train_accuracy']:.3f} ({round(m['train_accuracy'] * n_train)}/"
        f"{n_train}), {epochs} on {where}{' (head only)' if plan.head_only else ''}"
        f" in {res['seconds']:.2f} s{resumed}, {res['model'].n_params} params -> {res['out']}",
        file=log,
    )
    summary = {
        "model": plan.meta.get("model", config.model), "dataset": data.name, "seed": config.seed,
        "epochs": config.epochs, "test_accuracy": m["test_accuracy"],
        "train_accuracy": m["train_accuracy"], "n_test": n_test, "n_train": n_train,
        "seconds": res["seconds"], "params": res["model"].n_params, "out": str(res["out"]),
        "on_board": b,
    }  # fmt: skip
    if plan.head_only:
        summary["before_test_accuracy"] = plan.base["before"]["test_accuracy"]
        summary["before_train_accuracy"] = plan.base["before"]["train_accuracy"]
    if args.json:
        print(json.dumps(summary))
    return 0
