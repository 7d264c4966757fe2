"""Host (CPython): `tinyattn record` — labelled windows from the board's own source, as `.ts`.

The board reads its source (the app's, from app.json, or `--source replay:FILE` / `imu:NAME`
as for `flash --app`) and sends the steps as compact lines (device/attention_record.py, sent
with attention_source.py through the raw REPL: nothing is installed on the board): k steps of
float32 in base64 a line, each line numbered and CRC-checked, paced by the source itself
(docs/protocol.md "Recording"). The host cuts the steps into windows of `--window` steps
(non-overlapping; a line lost or damaged on the link ends the window it falls in, which is
left out) and writes them with the label into `--out`, appending to an existing file (its
windows are kept; a new label joins its class names). The source's steps per second go into
the file's header (`# rate N Hz`, tinyattn.data.timeseries); appending refuses a source of
other channels or another rate before a step is kept. A board that resets, stops sending or
goes away ends the recording in one line, keeping the windows that arrived. The file is
written atomically (host/atomic.py): a crash or Ctrl-C leaves the old file or the new one.
Ctrl-C while recording keeps the windows that arrived.

The values are the board's float32 (the replay file's, the driver's readings rounded to
float32): `.ts` holds them exactly (repr of the float64), so `load_ts` gives back the
board's values bit for bit.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import math
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tinyattn.errors import CLIError
from tinyattn.paths import device_dir

DEFAULT_WINDOW = 100  # steps a window when neither --window, --out nor --blob says
BOARD_REPLAY = "record.tasr"  # where --source replay:FILE goes on the board (removed after)
LINE_OVERHEAD = 20  # bytes of a TR line besides its base64 ("TR 123 … 1234567890\r\n")
QUIET = 5.0  # seconds without a line (beyond a line's period) before the board is given up


@dataclass
class Steps:
    """What arrived: runs of consecutive steps (a lost line starts a new run)."""

    C: int = 0
    rate: float = 0.0
    per_line: int = 1
    wanted: int | None = None  # steps asked for (None: until the source ends)
    runs: list[list[np.ndarray]] = field(default_factory=list)  # runs of [k, C] float32 blocks
    next_seq: int = 0
    lost_lines: int = 0
    bad_lines: int = 0
    t_first: float | None = None
    t_last: float | None = None

    @property
    def count(self) -> int:
        return sum(len(b) for run in self.runs for b in run)

    def add(self, line: str, now: float) -> int:
        """Take one `TR <seq> <base64> <crc>` line; returns the steps it added (0: not one)."""
        parts = line.split()
        if len(parts) != 4 or parts[0] != "TR":
            return 0
        try:
            seq, crc = int(parts[1]), int(parts[3])
            if zlib.crc32(parts[2].encode()) != crc:
                raise ValueError("crc")
            raw = base64.b64decode(parts[2], validate=True)
        except (ValueError, binascii.Error):
            self.bad_lines += 1  # damaged on the link: the gap shows at the next good line
            return 0
        if seq < self.next_seq or not raw or len(raw) % (4 * self.C):
            self.bad_lines += 1
            return 0
        block = np.frombuffer(raw, "<f4").reshape(-1, self.C)
        if seq > self.next_seq or not self.runs:
            self.lost_lines += seq - self.next_seq
            self.runs.append([])
        self.runs[-1].append(block)
        self.next_seq = seq + 1
        self.t_first = now if self.t_first is None else self.t_first
        self.t_last = now
        return len(block)


def windows(steps: Steps, window: int) -> tuple[np.ndarray, int]:
    """(X [N, window, C] float32 of consecutive, non-overlapping windows of each run, steps
    left out: a run's tail shorter than a window)."""
    out, left = [], 0
    for run in steps.runs:
        x = np.concatenate(run) if run else np.zeros((0, steps.C), np.float32)
        n = len(x) // window
        out += [x[i * window : (i + 1) * window] for i in range(n)]
        left += len(x) - n * window
    X = np.stack(out) if out else np.zeros((0, window, steps.C), np.float32)
    return X, left


def write_windows(
    path: Path, X: np.ndarray, label: str, rate: float | None = None
) -> tuple[list[str], np.ndarray]:
    """Write windows X [N, W, C] labelled `label` to `path`, after the windows already there
    (their labels, class names and lengths kept), with the steps per second `rate` in its
    header (a file that has none keeps none: its old windows' rate is not known); returns
    (class names, per-class counts)."""
    from tinyattn.data.timeseries import load_ts, write_ts

    N, W, C = X.shape
    names, y, lengths, old = [label], np.zeros(N, np.int64), np.full(N, W), None
    if path.exists():
        old = load_ts(path)
        names = list(old.class_names) + ([] if label in old.class_names else [label])
        y = np.full(N, names.index(label))
        rate = old.rate
    if old is not None:
        T = max(old.max_length, W)
        both = np.zeros((len(old.X) + N, T, C))
        both[: len(old.X), : old.max_length] = old.X
        both[len(old.X) :, :W] = X
        X, y = both, np.concatenate([old.y, y])
        lengths = np.concatenate([old.lengths, lengths])
    write_ts(path, X.astype(np.float64), lengths, y, names, problem_name=path.stem, rate=rate)
    return names, np.bincount(y, minlength=len(names))


def check_label(label: str) -> str:
    """argparse type: a class name a .ts file can hold."""
    if not label or any(ch.isspace() for ch in label) or ":" in label:
        raise argparse.ArgumentTypeError(f"{label!r}: a label has no spaces and no ':'")
    return label


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number >= 1")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tinyattn.board.app import IMUS
    from tinyattn.board.ports import add_port_arguments, positive_seconds

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "examples:\n"
        "  tinyattn record --label walk --seconds 60 --out mine.ts    # the app's source\n"
        "  tinyattn record --label rest --seconds 60 --out mine.ts    # appends\n"
        "  tinyattn train --ts mine.ts --out build/mine.npz\n"
        "  tinyattn record --port /dev/ttyACM0 --source imu:lsm6dsox --i2c 0,5,4 --rate 50 "
        "--label walk --seconds 30 --out mine.ts"
    )
    add_port_arguments(parser)
    parser.add_argument("--label", required=True, type=check_label,
                        help="the class of everything recorded in this run")  # fmt: skip
    parser.add_argument("--seconds", required=True, type=positive_seconds,
                        help="seconds of the source to record (seconds × rate steps)")  # fmt: skip
    parser.add_argument("--out", required=True, type=Path,
                        help="the .ts file written, or appended to when it exists")  # fmt: skip
    parser.add_argument(
        "--source", default=None,
        help="where the steps come from: 'replay:FILE' (a .ts or .tasr file, played once) or "
        f"'imu:NAME' (NAME one of {', '.join(IMUS)}; needs --i2c); default: the source of "
        "the app on the board (app.json, 'tinyattn flash --app')",
    )  # fmt: skip
    parser.add_argument("--rate", type=float, default=None,
                        help="steps per second of the source (default: the rate of the "
                        "--out file appended to; else the source's own: a replay file's, else "
                        "10; an imu 50)")  # fmt: skip
    parser.add_argument("--i2c", default=None, metavar="ID,SCL,SDA",
                        help="I2C bus of an imu source, e.g. 0,5,4")  # fmt: skip
    parser.add_argument(
        "--window", type=positive_int, default=None,
        help=f"steps a window (default: the windows already in --out, else the T of --blob, "
        f"else {DEFAULT_WINDOW}); consecutive windows do not overlap, a shorter tail is left out",
    )  # fmt: skip
    parser.add_argument(
        "--blob",
        type=Path,
        default=None,
        help="a sequence model's blob: its window T is the default --window",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=10.0,
        help="seconds a silent board is waited for (default %(default)g)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def window_length(args: argparse.Namespace) -> int:
    """--window, else the equal length of the windows already in --out, else --blob's T, else
    DEFAULT_WINDOW; CLIError when --out's windows differ from --window."""
    have = None
    if args.out.exists():
        from tinyattn.data.timeseries import TSFormatError, load_ts

        try:
            old = load_ts(args.out)
        except (OSError, TSFormatError) as exc:
            raise CLIError(f"--out {args.out}: cannot append to it: {exc}") from None
        if (old.lengths == old.max_length).all():
            have = int(old.max_length)
    if args.window is not None:
        if have is not None and have != args.window:
            raise CLIError(
                f"--window {args.window}: {args.out} holds windows of {have} steps, and a "
                f"model takes one length; leave --window out (then {have}), or record into "
                "another file (nothing was recorded)"
            )
        return args.window
    if have is not None:
        return have
    if args.blob is not None:
        from tinyattn.intmodel.blob import BlobError, read_blob

        try:
            spec = read_blob(args.blob.read_bytes(), source=str(args.blob))
        except (OSError, BlobError) as exc:
            raise CLIError(f"--blob {args.blob}: {exc}") from None
        T = spec.ops[0].iparams.get("T") if spec.ops else None
        if not T:
            raise CLIError(f"--blob {args.blob}: not a sequence model (no window T); give "
                           "--window")  # fmt: skip
        return int(T)
    return DEFAULT_WINDOW


def board_source(args: argparse.Namespace) -> tuple[str | None, Path | None, list | None]:
    """(source spec for the board or None for app.json's, local replay file, i2c)."""
    if args.rate is not None and not args.rate > 0:
        raise CLIError(f"--rate {args.rate}: give steps per second > 0")
    if args.source is None:
        return None, None, None
    from tinyattn.board.app import IMUS

    kind, _, where = args.source.partition(":")
    if kind == "replay" and where:
        if not Path(where).is_file():
            raise CLIError(f"--source {args.source}: no such file {where}")
        return f"replay:{BOARD_REPLAY}", Path(where), None
    if kind == "imu" and where in IMUS:
        i2c = [int(v) for v in args.i2c.split(",") if v.strip().isdigit()] if args.i2c else []
        if len(i2c) != 3:
            raise CLIError(f"--source {args.source} needs --i2c ID,SCL,SDA (e.g. 0,5,4)")
        return f"imu:{where}", None, i2c
    raise CLIError(f"--source {args.source}: give 'replay:FILE' (.ts or .tasr) or 'imu:NAME' "
                   f"with NAME one of {', '.join(IMUS)}")  # fmt: skip


def replay_file(
    path: Path, tmp: Path, rate: float | None
) -> tuple[Path, float, int, float]:
    """The replay file to copy for --source replay:PATH (a .ts file's windows back to back),
    the rate to play it at (its own unless --rate; else 10 Hz), its channels and its own rate
    (0.0: it records none)."""
    from tinyattn.board.stream import read_steps, write_replay

    try:
        steps, own = read_steps(path)
        local = write_replay(tmp / BOARD_REPLAY, steps, 0.0)
    except (OSError, ValueError) as exc:  # TSFormatError is a ValueError
        raise CLIError(f"--source replay:{path}: {exc}") from None
    return local, rate or own or 10.0, int(steps.shape[1]), own


def board_code(spec: str | None, seconds: float, rate: float | None, i2c: list | None) -> str:
    """The raw-REPL program: attention_source.py and attention_record.py in one namespace,
    then run(); a copied replay file is removed after."""
    src = (device_dir() / "attention_source.py").read_text()
    rec = (device_dir() / "attention_record.py").read_text()
    bus = list(i2c) if i2c else None  # [id, scl, sda]: open_source makes the bus
    run = f"_g['run']({spec!r},{seconds!r},{rate!r},{bus!r},_g['open_source'])"
    code = f"_g={{}}\nexec({src!r},_g)\nexec({rec!r},_g)\n"
    if spec == f"replay:{BOARD_REPLAY}":  # removed however the run ends (Ctrl-C too)
        return code + f"try:\n {run}\nfinally:\n import os\n os.remove({BOARD_REPLAY!r})\n"
    return code + run + "\n"


def drop_replay(port: str) -> str:
    """Remove the copied replay file from the board after a recording that stopped early (a
    reset skips the program's own removal): "", or what the user should remove and how."""
    from tinyattn.board.flash import mpremote

    code = f"import os\ntry:\n os.remove({BOARD_REPLAY!r})\nexcept OSError:\n pass\n"
    try:
        mpremote(port, "exec", code, timeout=15)
    except CLIError:
        return (f"; the copied replay may still be on the board: remove it with 'mpremote "
                f"connect {port} rm :{BOARD_REPLAY}'")  # fmt: skip
    return ""


RESET = "the board reset during the recording (its banner, prompt or app came back)"
RESET_MARKS = ("MicroPython v", "TA ", "TA+", "TA!", "TA.", "MPY: soft reboot")
SILENT = "the board stopped sending steps (reset, or its source stalled)"


def stream_steps(
    port: str, args: argparse.Namespace, code: str, steps: Steps, progress: bool, log=print,
    have_C: int | None = None, have_rate: float | None = None,
) -> str | None:  # fmt: skip
    """Run `code` on the board and collect its TR lines into `steps` until TR. arrives;
    returns None, or why it stopped early ("interrupted", or a link problem, a board reset
    or a source that stopped sending: what arrived is kept either way). `have_C`: the
    channels of the file appended to, `have_rate` its steps per second: a source of other
    channels or another rate is refused before a step is kept."""
    from tqdm import tqdm

    from tinyattn.board.link import BoardLink, LinkError

    bar = None
    end = None  # wall-clock end for a source without a rate
    link = BoardLink(port, args.baud, connect_timeout=args.timeout)
    try:
        link.open()
    except LinkError as exc:  # no such port, not a serial port, busy: one line
        raise CLIError(str(exc)) from None
    try:
        try:
            link.soft_reset()  # a fresh heap: a stopped app's model and Stream would stay in it
            data = code.encode()
            for i in range(0, len(data), 256):  # as exec_raw: a raw REPL without flow control
                link._write(data[i : i + 256])
                time.sleep(0.01)
            link._write(b"\x04")
            link.read_until(b"OK", timeout=5.0)
            wait = args.timeout + 5.0  # the board compiles the program and opens the source
            last_step = time.monotonic()  # any other lines (an app after a reset) do not count
            while True:
                try:
                    raw = link.read_until(b"\n", timeout=wait)
                except LinkError as exc:
                    if ">>>" in str(exc):  # the friendly REPL's prompt: a reset, no app
                        raise LinkError(f"{port}: {RESET}") from None
                    raise
                line = raw.decode("utf-8", "replace").strip()
                if steps.C and (line.startswith(RESET_MARKS) or ">>>" in line):
                    raise LinkError(f"{port}: {RESET}")  # what runs now (an app) is left be
                if time.monotonic() - last_step > wait:
                    _stop(link)
                    raise LinkError(f"{port}: no steps for {wait:.0f} s: {SILENT}")
                if "\x04" in line:  # the program ended (TR. lost on the link) or raised
                    err = line.partition("\x04")[2]
                    if "\x04" not in err:
                        err += link.read_until(b"\x04", timeout=5.0).decode(errors="replace")
                    last = [x for x in err.replace("\x04", "\n").splitlines() if x.strip()]
                    if not last:
                        return None
                    raise CLIError(f"{port}: the board's recorder failed: {last[-1].strip()}")
                if line.startswith("TR!"):
                    raise CLIError(f"{port}: the board's source: {line[4:]}")
                if line.startswith("TR+"):
                    _, C, rate, k = line.split()
                    steps.C, steps.rate, steps.per_line = int(C), float(rate), int(k)
                    last_step = time.monotonic()
                    if have_rate and steps.rate and steps.rate != have_rate:
                        _stop(link)
                        raise CLIError(
                            f"the board's source runs at {steps.rate:g} steps/s, {args.out} "
                            f"was recorded at {have_rate:g}; nothing was recorded: give "
                            f"--rate {have_rate:g}, or record into another file (--out)"
                        )
                    if have_C is not None and steps.C != have_C:  # before a step is kept
                        _stop(link)
                        raise CLIError(
                            f"the board's source gives {steps.C} values a step, {args.out} "
                            f"holds windows of {have_C} channels; nothing was recorded: record "
                            "into another file (--out) or from a source of the same channels"
                        )
                    n = steps.wanted = int(args.seconds * steps.rate + 0.5) if steps.rate else None
                    end = None if steps.rate else time.monotonic() + args.seconds
                    wait = QUIET + (steps.per_line / steps.rate if steps.rate else 0)
                    note_link(port, args.baud, steps, log)
                    bar = tqdm(total=n, desc=f"record {args.label}", unit="step",
                               disable=None if progress else True, file=sys.stderr)  # fmt: skip
                    continue
                if line.startswith("TR."):
                    return None
                got = steps.add(line, time.monotonic()) if steps.C else 0
                last_step = time.monotonic() if got else last_step
                if bar is not None and got:
                    bar.update(got)
                if end is not None and time.monotonic() > end:
                    _stop(link)
                    return None
        except KeyboardInterrupt:
            _stop(link)
            return "interrupted"
        except LinkError as exc:
            if not steps.count:
                raise CLIError(str(exc)) from None
            return f"the link failed: {exc}"
        finally:
            if bar is not None:
                bar.close()
            try:
                link._write(b"\r\x02")  # back to the friendly REPL
            except LinkError:
                pass
    finally:
        link.close()


def _stop(link) -> None:
    """Interrupt the board's recorder (Ctrl-C) and wait for the raw REPL to settle."""
    from tinyattn.board.link import LinkError

    try:
        link._write(b"\r\x03\x03")
        link.drain(quiet=0.2, limit=2.0)
    except LinkError:
        pass


def note_link(port: str, baud: int, steps: Steps, log) -> None:
    """A note when the steps need more than 90 % of a UART at `baud` (8N1: baud/10 bytes a
    second): the board would fall behind its source. Pseudo-terminals (virtual boards) and
    USB-CDC boards are not limited by the baud."""
    if not steps.rate or port.startswith("/dev/pts/"):
        return
    need = steps.rate * (math.ceil(4 * steps.C * steps.per_line / 3) * 4 / steps.per_line
                         + LINE_OVERHEAD / steps.per_line)  # fmt: skip
    if need > 0.9 * baud / 10:
        log(f"note: {steps.rate:g} steps/s of {steps.C} values need {need:.0f} B/s; a UART at "
            f"{baud} baud carries {baud / 10:.0f}: a board behind a USB-UART falls behind its "
            "source (lower --rate; USB-CDC boards such as the RP2040 are not limited)",
            file=sys.stderr)  # fmt: skip


def main(args: argparse.Namespace) -> int:
    import tempfile

    from tinyattn.board.fleet import one_port

    window = window_length(args)
    have_C = have_rate = None
    if args.out.exists():  # appending: the channels and rate must be the file's
        from tinyattn.data.timeseries import load_ts

        old = load_ts(args.out)
        have_C, have_rate = old.n_channels, old.rate
    spec, replay, i2c = board_source(args)
    rate = args.rate
    if rate is not None and have_rate and rate != have_rate:
        raise CLIError(
            f"--rate {rate:g}: {args.out} was recorded at {have_rate:g} steps/s; nothing was "
            f"recorded: give --rate {have_rate:g}, or record into another file (--out)"
        )
    if rate is None and have_rate and spec is not None:  # the file's rate, not a default
        rate = have_rate
    steps = Steps()
    with tempfile.TemporaryDirectory() as tmp:
        local = None
        if replay is not None:
            local, rate, C, own = replay_file(replay, Path(tmp), rate)
            if have_C is not None and C != have_C:
                raise CLIError(
                    f"--source replay:{replay}: {C} channels, {args.out} holds windows of "
                    f"{have_C}; nothing was recorded: record into another file (--out)"
                )
            if have_rate and (own or rate) != have_rate:
                raise CLIError(
                    f"--source replay:{replay} plays at {own or rate:g} steps/s, {args.out} was "
                    f"recorded at {have_rate:g}; nothing was recorded: give --rate "
                    f"{have_rate:g}, or record into another file (--out)"
                )
        with one_port(args.port) as port:
            if local is not None:
                from tinyattn.board.flash import check_port, mpremote

                check_port(port)
            try:
                if local is not None:
                    mpremote(port, "cp", str(local), f":{BOARD_REPLAY}", timeout=60)
                if spec is not None and spec.startswith("imu:") and rate is None:
                    rate = 50.0
                code = board_code(spec, args.seconds, rate, i2c)
                stopped = stream_steps(port, args, code, steps, not args.quiet, have_C=have_C,
                                       have_rate=have_rate)  # fmt: skip
            except CLIError as exc:  # a copy cut short, a refused source: the copy goes too
                if local is None:
                    raise
                raise CLIError(f"{exc}{drop_replay(port)}") from None
            if local is not None and stopped not in (None, "interrupted"):
                stopped += drop_replay(port)  # a reset skipped the board's own removal
    X, left = windows(steps, window)
    summary = f"{steps.count} steps" + (f" at {steps.rate:g} Hz" if steps.rate else "")
    arrived = steps.count + steps.per_line * steps.lost_lines  # lost lines: full ones
    if not stopped and steps.wanted and arrived < steps.wanted:
        summary += ", the source ended first"
    if steps.lost_lines:
        summary += (f"; {steps.lost_lines} lines lost or damaged on the link "
                    "(the windows they fell in are left out)")  # fmt: skip
    if not len(X):
        why = f" ({stopped})" if stopped else ""
        raise CLIError(f"no whole window of {window} steps arrived: {summary}{why}")
    names, counts = write_windows(args.out, X, args.label, steps.rate or None)
    tally = ", ".join(f"{n} {c}" for n, c in zip(names, counts, strict=True))
    if left:
        summary += f", {left} steps after the last whole window left out"
    print(f"wrote {args.out}: {len(X)} windows of {window} steps labelled {args.label} "
          f"({summary}); the file has {int(counts.sum())} windows: {tally}")  # fmt: skip
    if spec is None:
        print("the app was stopped for the recording: reset the board to restart it")
    if stopped == "interrupted":
        raise KeyboardInterrupt(f"kept the {len(X)} windows that arrived in {args.out}")
    if stopped:
        raise CLIError(f"{stopped}; kept the {len(X)} windows that arrived in {args.out}")
    few = few_windows_note(names, counts, window, steps.rate)
    if few:
        print(few)
    if len(names) < 2:
        print(f"next: record another label into {args.out} (training needs >= 2 classes)")
    else:
        print(f"next: tinyattn train --ts {args.out}"
              + (" --test-fraction 0 (too few windows to hold some out)"
                 if counts.min() < MIN_SPLIT else ""))  # fmt: skip


MIN_SPLIT = 3  # windows a class needs so a 20 % test part takes one and leaves two to train
ENOUGH = 10  # windows a class for a model worth testing (a first figure, not a promise)


def few_windows_note(names, counts, window: int, rate: float | None) -> str | None:
    """A note when a class has fewer windows than a useful model needs: how many seconds
    of the source one window is, and how long to record each class for ENOUGH."""
    short = [(n, int(c)) for n, c in zip(names, counts, strict=True) if c < ENOUGH]
    if not short:
        return None
    per = f", {window / rate:g} s each at {rate:g} Hz" if rate else ""
    more = ", ".join(f"{n} {c}" for n, c in short)
    want = (f"record about {ENOUGH * window / rate:g} s a class" if rate
            else f"record {ENOUGH * window} steps a class")  # fmt: skip
    return (f"few windows: {more} (windows of {window} steps{per}); {want} for {ENOUGH} "
            f"windows; with fewer than {MIN_SPLIT} a class, train with --test-fraction 0 (no "
            "test part)")

    return 0
