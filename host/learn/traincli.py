"""Host (CPython): `tinyattn train` — one command path for rows and windows.

`main` checks the flags (`check_flow`: which data, refusals in one line each), reads the data,
then runs it on the board (`--on-board`: host/board/onboard.py, onboard_seq.py), as K-fold CV
(`--cv`) or as one split that writes the model file. The two flows differ where the math does:
rows of features (Iris, Wine, a CSV: `iris-attn`/`iris-myattn`, host/learn/train.py, input
scalings) and windows with lengths (`.ts` data: `seq-attn`, host/learn/seqcli.py, per-channel
standardization, masking, augmentation, distillation); both take their recipe flags through
`train.config_from_args`, and each provides `run_one` and `run_cv` with the same signature.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tinyattn.board import onboard, onboard_seq
from tinyattn.data.tabular import DATASETS
from tinyattn.data.timeseries import TS_DATASETS
from tinyattn.errors import CLIError
from tinyattn.learn import rocketcli, searchcli, seqcli, train
from tinyattn.learn.model import MODELS
from tinyattn.learn.seqcli import ARCH_FLAGS
from tinyattn.learn.train import SCALINGS, TrainConfig

SEQ_DEFAULT = "seq-attn: per dataset, host/learn/seqdefaults.py"  # help text of a recipe flag


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = TrainConfig()
    parser.epilog = (
        "examples:\n"
        "  tinyattn train                                # seed-0 80/20 split -> build/model.npz\n"
        "  tinyattn train --cv 5 --repeats 10 --json     # 10 x 5-fold CV, float and int8\n"
        "  tinyattn train --dataset wine --cv 5          # one 5-fold CV on Wine\n"
        "  tinyattn train --dataset basicmotions --json  # seq-attn on the archive's TRAIN/TEST\n"
        "  tinyattn train --ts X_TRAIN.ts --test X_TEST.ts  # any .ts pair (univariate too)\n"
        "  tinyattn train --dataset japanesevowels --cv 5   # CV inside the TRAIN file only\n"
        "  tinyattn train --on-board --port /dev/ttyACM0 # the same run, trained on the board\n"
        "  tinyattn train --on-board --head-only --csv mine.csv  # adapt build/model.npz\n"
        "\nTraining flags left out take the model's defaults: iris-attn/iris-myattn the values\n"
        "shown (host/learn/train.py says why), seq-attn the recipe, architecture and "
        "augmentation\n"
        "chosen per dataset by cross-validation on its TRAIN file (host/learn/seqdefaults.py; "
        "other\n"
        ".ts files: JapaneseVowels' recipe and width, a patch giving <= 20 tokens)."
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    data = parser.add_argument_group("data")
    data.add_argument(
        "--dataset", choices=sorted(DATASETS) + sorted(TS_DATASETS),
        help="vendored dataset (default: iris); iris and wine are rows, the others are "
        "windows (.ts, the archive's fixed TRAIN/TEST split) and train seq-attn",
    )  # fmt: skip
    data.add_argument(
        "--csv", type=Path, metavar="FILE", help="any numeric CSV with a header row instead"
    )
    data.add_argument("--target", metavar="COL", help="label column of --csv (default: last)")
    data.add_argument(
        "--test-fraction", type=float,
        help=f"stratified test share without --cv (default: {d.test_fraction}); for --ts "
        "without --test: the share of TRAIN held out as the test part",
    )  # fmt: skip
    hp = parser.add_argument_group("training")
    hp.add_argument(
        "--model", choices=MODELS,
        help="architecture (default: iris-attn for rows of features, seq-attn for .ts windows)",
    )  # fmt: skip
    hp.add_argument("--epochs", type=int, help=f"(default: {d.epochs}; {SEQ_DEFAULT})")
    hp.add_argument(
        "--seed", type=non_negative_int, default=d.seed,
        help=f"split, init and shuffle seed (default: {d.seed}); with --repeats R the seeds "
        "are SEED .. SEED+R-1",
    )  # fmt: skip
    hp.add_argument("--lr", type=float, help=f"peak learning rate ({d.lr}; {SEQ_DEFAULT})")
    hp.add_argument("--batch-size", type=int, help=f"({d.batch_size}; {SEQ_DEFAULT})")
    hp.add_argument(
        "--optimizer", choices=("adam", "sgd"),
        help="adam = AdamW, sgd = SGD with momentum (default: adam)",
    )  # fmt: skip
    hp.add_argument(
        "--weight-decay", type=float,
        help=f"on weight matrices (default: {d.weight_decay}; {SEQ_DEFAULT})",
    )  # fmt: skip
    hp.add_argument("--momentum", type=float, help=f"SGD momentum ({d.momentum})")
    hp.add_argument(
        "--schedule", choices=("cosine", "constant", "onecycle"),
        help=f"learning-rate schedule (default: {d.schedule})",
    )  # fmt: skip
    hp.add_argument(
        "--label-smoothing", type=float, metavar="EPS",
        help="train towards (1-EPS)*onehot + EPS/classes (default: "
        f"{d.label_smoothing}; {SEQ_DEFAULT})",
    )  # fmt: skip
    hp.add_argument(
        "--scaling", choices=SCALINGS,
        help="input scaling fitted on the train rows: feature = per-feature mean/std, center = "
        "per-feature mean and one shared std, shared = one mean and std for all features, "
        f"none = raw values (default: {d.scaling}; seq-attn always standardizes per channel)",
    )  # fmt: skip
    seqcli.add_seq_arguments(parser)
    searchcli.add_arguments(parser)
    rocketcli.add_arguments(parser)
    ev = parser.add_argument_group("cross-validation")
    ev.add_argument(
        "--cv", type=int, metavar="K",
        help="stratified K-fold CV over all rows instead of one split (.ts data: over the "
        "TRAIN windows only): float and int8 test accuracy per fold, mean ± std; no model "
        "file is written",
    )  # fmt: skip
    ev.add_argument(
        "--repeats", type=int, metavar="R",
        help="with --cv: repeat it with R different fold assignments, seeds SEED .. SEED+R-1 "
        "(default: 1); the accuracy figures of the docs and 'make bench-accuracy' are "
        "--cv 5 --repeats 10 (stratified 5-fold, split seeds 0-9)",
    )  # fmt: skip
    out = parser.add_argument_group("output")
    out.add_argument(
        "--out", type=Path, default=Path("build/model.npz"),
        help="model file (default: build/model.npz); not written with --cv",
    )  # fmt: skip
    out.add_argument(
        "--json", action="store_true",
        help="print one JSON object as the last stdout line (other output goes to stderr)",
    )  # fmt: skip
    out.add_argument("--quiet", action="store_true", help="no progress bar")
    onboard.add_arguments(parser)


def non_negative_int(text: str) -> int:
    """argparse type: a seed (NumPy's generators take integers >= 0)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number >= 0")
    return value


def _is_windows(args: argparse.Namespace) -> bool:
    return args.ts is not None or (args.dataset or "") in TS_DATASETS


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The flags of `tinyattn train` as its own parser reads them, every flag left out at its
    default (the Python API's options: tinyattn.estimator); CLIError in one line for a value
    the parser refuses (a bad choice or number) or an unknown flag."""
    parser = argparse.ArgumentParser(prog="tinyattn train", exit_on_error=False)
    add_arguments(parser)
    try:
        args, extra = parser.parse_known_args(argv)
    except argparse.ArgumentError as exc:
        raise CLIError(str(exc)) from None
    if extra:
        raise CLIError(f"unrecognized arguments: {' '.join(extra)}")
    return args


def check_flow(args: argparse.Namespace, windows: bool | None = None) -> str:
    """Which flow runs: "seq" (windows, `seq-attn`) or "rows" (features, iris models), after
    refusing flag combinations that cannot work, in one line each. `windows`: whether the data
    are windows (default: as the data flags say, `--ts` or an archive `--dataset`; the Python
    API's arrays say it themselves)."""
    windows = _is_windows(args) if windows is None else windows
    if args.ts is not None and args.csv is not None:
        raise CLIError("--ts and --csv both name the data; give one")
    if args.ts is not None and args.dataset is not None:
        raise CLIError("--ts names its own data; leave out --dataset")
    if args.test is not None and args.ts is None:
        raise CLIError("--test needs --ts TRAIN.ts (the vendored datasets have their TEST file)")
    if windows and args.model not in (None, "seq-attn", "seq-rocket"):
        raise CLIError(
            f"--model {args.model} takes rows of features, not windows; use --model seq-attn "
            "(the default for .ts data) or seq-rocket"
        )
    if not windows and args.model in ("seq-attn", "seq-rocket"):
        data = f"--csv {args.csv}" if args.csv else f"dataset {args.dataset or 'iris'!r}"
        raise CLIError(
            f"{args.model} takes .ts windows, not the rows of {data}; use --dataset basicmotions|"
            "japanesevowels or --ts TRAIN.ts"
        )
    rocket_flags = [f for f in rocketcli.FLAGS
                    if getattr(args, f[2:].replace("-", "_"), None) is not None]
    if rocket_flags and args.model != "seq-rocket":
        raise CLIError(f"{' '.join(rocket_flags)}: seq-rocket flags; add --model seq-rocket")
    if args.model == "seq-rocket":
        attn = [flag for dest, (_, flag) in ARCH_FLAGS.items() if getattr(args, dest) is not None]
        attn += ["--search"] if args.search else []
        attn += ["--on-board"] if getattr(args, "on_board", False) else []
        if attn:
            raise CLIError(
                f"{' '.join(attn)}: not for seq-rocket (its features are fixed and its head is "
                "a ridge fitted in closed form on the host; --search chooses among the families "
                "itself: leave out --model)"
            )
    if not windows:
        flags = [flag for dest, (_, flag) in ARCH_FLAGS.items() if getattr(args, dest) is not None]
        flags += ["--shift"] if args.shift is not None else []
        flags += [flag for flag, dest in (("--stem", "stem"), ("--stem-dilations",
                  "stem_dilations"), ("--stem-norm", "stem_norm"))
                  if getattr(args, dest, None) is not None]  # fmt: skip
        view = "--log-view" if args.log_view else "--clip-view" if args.clip_view else None
        if view and not args.search and not flags:  # the row models have no input view
            raise CLIError(
                f"{view}: the {args.model or 'iris-attn'} model reads its features as "
                "given; add --search (rows as windows of one step: seq-attn, which takes the "
                "input views) or train on .ts data"
            )
        if flags:
            raise CLIError(
                f"{' '.join(flags)}: seq-attn flags; they need .ts data (--dataset basicmotions"
                "|japanesevowels or --ts TRAIN.ts)"
            )
        return "rows"
    if args.scaling is not None:
        raise CLIError("--scaling: seq-attn standardizes per channel on TRAIN; leave it out")
    if args.test_fraction is not None and (args.ts is None or args.test is not None):
        raise CLIError("--test-fraction holds out part of TRAIN only for --ts without --test")
    return "seq"


def check_out(out) -> None:
    """CLIError before anything is trained when --out names a blob (a .bin, or a file that is
    one): the model file would overwrite it."""
    from tinyattn.remedy import is_blob_file

    if out is not None and is_blob_file(out):
        fix = Path(str(out)).with_suffix(".npz")
        raise CLIError(
            f"--out {out} names a blob (.bin): the model file would overwrite it; write the "
            f"model to a .npz, e.g. --out {fix}, and 'tinyattn export --model {fix}' makes its "
            "blob (nothing was written)"
        )


def main(args: argparse.Namespace) -> int:
    """`tinyattn train`: windows (`.ts` data) or rows of features (Iris, Wine, a CSV), each
    checked and read as its flow needs, then one path (`train_on`): on the board, --cv, or one
    split."""
    flow_name = check_flow(args)
    check_out(args.out)
    searchcli.check_arguments(args, flow_name)
    if flow_name == "seq":
        if args.target is not None:
            raise CLIError("--target needs --csv FILE (a .ts file declares its labels)")
        if args.on_board:  # the same run on a board: its own checks, data and setup
            return onboard_seq.main(args)
        data = seqcli.load_windows(args)
    elif args.search:  # rows searched as windows of one step: the seq-attn path, T = P = 1
        data = seqcli.rows_data(train.load_rows(args), args.csv)
    else:  # the recipe's flags are checked before the data is read
        recipe = train.config_from_args(args, model=args.model or "iris-attn")
        onboard.check_arguments(args)
        data = train.load_rows(args)
        if args.on_board:  # the same run on a board
            return onboard.main(args, recipe, data)
    log = sys.stderr if args.json else sys.stdout
    summary = train_on(args, flow_name, data, log)
    if args.json:
        print(json.dumps(summary))
    return 0


def train_on(args: argparse.Namespace, flow_name: str, data, log) -> dict[str, Any]:
    """The one training path of `tinyattn train` and of the Python API (tinyattn.estimator):
    the recipe from the flags (each flag left out: the model's default for this data), then
    --cv, --search or one split, which writes the model file `args.out`. `data`: what
    `flow_name` takes — a `seqcli.SeqData` for "seq" and for searched rows
    (`seqcli.rows_data`), the rows (`Windows`) otherwise. Returns the `--json` summary."""
    if flow_name == "seq" and args.model == "seq-rocket":
        flow, recipe = rocketcli, rocketcli.setup(args, data.train)
    elif flow_name == "seq" or args.search:
        flow, recipe = seqcli, seqcli.seq_setup(args, data.train)
    else:
        flow, recipe = train, train.config_from_args(args, model=args.model or "iris-attn")
    run = flow.run_cv if args.cv is not None else flow.run_one
    if args.search:  # the model search picks the recipe, then trains it as run_one
        run = searchcli.run_search
    return run(args, data, recipe, log)
