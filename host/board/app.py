"""Host (CPython): `tinyattn flash --app` — the board classifies its own sensor from reset.

`plan_app` checks everything `--app` needs before any board is touched (the options, the
source, an int8 blob, the replay's channels against the model's; `tinyattn flash` then checks
the board's free heap against the model's and its Stream's), so a refused flash leaves the
board as it was. `app_files` are then copied, read back and switched over with the runtime
and the blob in `tinyattn flash`'s own sessions (staged as *.new, the blob last):
device/app_main.py as `main.py` (device/package.json's "app_urls"; the stream and source
modules it imports are part of the runtime's "urls"), its settings as `app.json`, and for
`--source replay:FILE` the replay file (a .ts file's windows back to back, or a replay file as
written by tinyattn.board.stream) as `replay.tasr`. A plain `tinyattn flash` removes an
installed app (`remove_app`: main.py only when it is ours), so parity and the server work as
before. app.json (docs/protocol.md "App config"):

    {"blob": "model.bin", "source": "replay:replay.tasr@10", "hop": 10, "smooth": 3,
     "threshold": null, "kernels": "auto", "i2c": null}
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinyattn.errors import CLIError
from tinyattn.paths import device_dir

APP_MARK = "# tinyattn app"  # the first line of device/app_main.py: main.py is ours
APP_FILES = ("main.py", "app.json", "replay.tasr")
REPLAY_NAME = "replay.tasr"
IMUS = ("lsm6dsox", "bmi270", "lsm9ds1")

_REMOVE = """
import os
_mine = False
try:
    with open('main.py') as _f:
        _mine = _f.readline().startswith({mark!r})
except OSError:
    pass
if _mine:
    for _n in {names!r}:
        try:
            os.remove(_n)
        except OSError:
            pass
print('APP', 'REMOVED' if _mine else 'NONE')
del _mine, os
"""
_STALE = """
import os
for _n in {names!r}:
    try:
        os.remove(_n)
    except OSError:
        pass
print('APP', 'OK')
del _n, os
"""


def add_app_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("app (the board classifies its own sensor from reset)")
    which = g.add_mutually_exclusive_group()
    which.add_argument(
        "--app", action="store_true",
        help="also install the app: main.py + app.json; at reset the board prints one line "
        "per decision ('tinyattn monitor' shows them); without --app an installed app is "
        "removed",
    )  # fmt: skip
    which.add_argument(
        "--no-app", action="store_true",
        help="only remove an installed app (main.py, app.json, the replay file) and copy "
        "nothing: the board's runtime and model stay",
    )  # fmt: skip
    g.add_argument(
        "--source", default=None,
        help="where the app's steps come from: 'replay:FILE' (a .ts file's windows back to "
        "back, or a .tasr replay file; copied to the board and played in a loop) or "
        "'imu:lsm6dsox', 'imu:bmi270', 'imu:lsm9ds1' (a micropython-lib driver: 'mpremote mip "
        "install NAME' on the board)",
    )  # fmt: skip
    g.add_argument(
        "--rate", type=float, default=None,
        help="steps per second of the source (default: the rate the model was trained at, "
        "recorded with its data; else a replay's own; else 10); another than the model's is "
        "refused",
    )  # fmt: skip
    g.add_argument("--hop", type=int, default=10,
                   help="steps between decisions (default %(default)s)")  # fmt: skip
    g.add_argument(
        "--smooth",
        type=int,
        default=1,
        help="decisions averaged into the smoothed class (default %(default)s)",
    )
    g.add_argument("--threshold", type=float, default=None,
                   help="smoothed score (0..1) below which a decision is 'uncertain'")  # fmt: skip
    g.add_argument("--i2c", default=None, metavar="ID,SCL,SDA",
                   help="I2C bus of an imu source, e.g. 0,5,4")  # fmt: skip


def app_config(args: argparse.Namespace, rate: float = 10.0) -> tuple[dict, Path | None]:
    """(app.json's settings with the source at `rate` steps per second, local replay file to
    copy or None); CLIError on a bad option."""
    if args.hop < 1 or args.smooth < 1:
        raise CLIError(f"--hop {args.hop} / --smooth {args.smooth}: both must be >= 1")
    if args.threshold is not None and not 0 <= args.threshold <= 1:
        raise CLIError(f"--threshold {args.threshold}: give a score between 0 and 1")
    if args.rate is not None and not args.rate > 0:
        raise CLIError(f"--rate {args.rate}: give steps per second > 0")
    if not args.source:
        raise CLIError("--app needs --source replay:FILE or --source imu:NAME")
    kind, _, where = args.source.partition(":")
    cfg = {"blob": "model.bin", "hop": args.hop, "smooth": args.smooth,
           "threshold": args.threshold, "kernels": "auto", "i2c": None}  # fmt: skip
    if kind == "replay" and where:
        if not Path(where).is_file():
            raise CLIError(f"--source {args.source}: no such file {where}")
        cfg["source"] = f"replay:{REPLAY_NAME}@{rate:g}"
        return cfg, Path(where)
    if kind == "imu" and where in IMUS:
        if not args.i2c:
            raise CLIError(f"--source {args.source} needs --i2c ID,SCL,SDA (e.g. 0,5,4)")
        try:
            cfg["i2c"] = [int(v) for v in args.i2c.split(",")]
        except ValueError:
            cfg["i2c"] = []
        if len(cfg["i2c"]) != 3:
            raise CLIError(f"--i2c {args.i2c}: give three integers ID,SCL,SDA")
        cfg["source"] = f"imu:{where}@{rate:g}"
        return cfg, None
    raise CLIError(
        f"--source {args.source}: give 'replay:FILE' (.ts or .tasr) or 'imu:NAME' with NAME "
        f"one of {', '.join(IMUS)}"
    )


def replay_steps(path: Path, n_features: int) -> tuple[np.ndarray, float]:
    """(steps [N, C] float32, its own rate or 0.0) of a .ts file (its windows' valid steps back
    to back; the rate its header records) or a replay file; CLIError when unreadable or C
    differs from the model's."""
    from tinyattn.board.stream import read_steps

    try:
        steps, own = read_steps(path)
    except (OSError, ValueError) as exc:
        raise CLIError(f"--source replay:{path}: {exc}") from None
    if steps.shape[1] != n_features:
        raise CLIError(f"--source replay:{path}: {steps.shape[1]} channels, the model takes "
                       f"{n_features}")  # fmt: skip
    if not np.isfinite(steps).all():
        raise CLIError(f"--source replay:{path}: missing values (NaN) cannot be replayed")
    return steps.astype(np.float32), own


@dataclass
class AppPlan:
    """The app to install, checked on the host before any board is touched: app.json's
    settings, the replay's steps (None for a sensor), their rate."""

    cfg: dict
    steps: np.ndarray | None
    rate: float


def plan_app(args: argparse.Namespace, blob) -> AppPlan:
    """Every check `--app` can make without a board (options, source, the blob `blob` as
    read, the replay's channels); CLIError naming the problem, before anything is copied."""
    app_config(args)  # the options, before any file is read
    if blob is None:
        raise CLIError("--app needs the blob it runs: give --blob FILE")
    if not blob.quantized:
        raise CLIError(
            f"{args.blob} holds float32 weights only; the app runs the int8 path: export it "
            "without --float32"
        )
    from tinyattn.board.blobmodel import blob_model_meta

    meta, _ = blob_model_meta(blob, Path(args.blob))
    trained = float(meta["rate"]) if meta and meta.get("rate") else None
    steps, own = None, 0.0
    where = args.source.partition(":")[2]
    if args.source.startswith("replay:"):
        steps, own = replay_steps(Path(where), blob.n_features)
    rate = check_rate(args.rate, trained, own, args.source, Path(args.blob).with_suffix(".npz"))
    cfg, _ = app_config(args, rate)
    if "T" not in blob.ops[0].iparams:  # a row model: one step, nothing to stream
        raise CLIError(f"{args.blob} is a row model: the app streams windows of a sequence "
                       "model ('tinyattn train --ts …')")  # fmt: skip
    return AppPlan(cfg, steps, rate)


def check_rate(given: float | None, trained: float | None, own: float, source: str,
               model: Path) -> float:  # fmt: skip
    """The steps per second the app runs its source at: --rate (`given`), else the rate the
    model was trained at (`trained`, its model file's meta), else a replay's own (`own`), else
    10. CLIError when two of them that are known differ: the model's windows would span
    another length of time."""
    if trained and given and given != trained:
        raise CLIError(
            f"--rate {given:g}: the model was trained on data recorded at {trained:g} steps/s "
            f"({model}); its windows would span another length of time: give --rate "
            f"{trained:g} (or leave it out)"
        )
    if trained and own and own != trained:
        raise CLIError(
            f"--source {source} was recorded at {own:g} steps/s, the model at {trained:g} "
            f"({model}); replay data of the model's rate"
        )
    return given or trained or own or 10.0


def app_files(plan: AppPlan, tmp_dir: Path) -> list[tuple[Path, str]]:
    """[(local file, name on the board)] of the app beside its modules (which go with the
    runtime): main.py, app.json and the replay file, the last two written into tmp_dir."""
    files = [(device_dir() / "app_main.py", "main.py")]
    (tmp_dir / "app.json").write_text(json.dumps(plan.cfg) + "\n")
    files.append((tmp_dir / "app.json", "app.json"))
    if plan.steps is not None:
        from tinyattn.board.stream import write_replay

        write_replay(tmp_dir / REPLAY_NAME, plan.steps, plan.rate)
        files.append((tmp_dir / REPLAY_NAME, REPLAY_NAME))
    return files


def remove_app(port: str, mpremote) -> list[str]:
    """A plain flash: remove an installed app (main.py only when it is ours); the notes."""
    out = mpremote(port, "exec", _REMOVE.format(mark=APP_MARK, names=list(APP_FILES)))
    return ["the app (main.py) was removed"] if "APP REMOVED" in out else []


def drop_replay(port: str, mpremote) -> None:
    """An app without a replay source: the replay file of an earlier app goes."""
    mpremote(port, "exec", _STALE.format(names=[REPLAY_NAME]))


def installed_note(plan: AppPlan) -> str:
    cfg = plan.cfg
    return (f"app installed: main.py, app.json ({cfg['source']}, hop {cfg['hop']}, smooth "
            f"{cfg['smooth']}); reset the board and run 'tinyattn monitor'")  # fmt: skip
