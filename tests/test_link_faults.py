# Host (CPython): link faults between the parity tool and a virtual board (issue 6, item 2).
"""The real flash and parity code against a virtual board whose wire misbehaves.

tools/vboard.py injects the faults between the pseudo-terminal and the interpreter
(FaultConfig: dropped bytes, flipped bits, garbage lines; reset(); set_silent(); inject()).
Faults go on after `tinyattn flash` (mpremote has no resync of its own) and stay on for the
whole parity run, raw-REPL entry and server start included. For each fault the parity tool
must either resynchronise (CRC framing, resend, batch splitting, server restart) and produce a
report that passes with every row answered, or stop with a one-line message within a bounded
time and keep the rows it already had in the report. Rates are moderate and seeded, so a run
sees the same faults each time (about 20 damaged lines per run at 1e-3 per byte).

Every run goes through `_bounded`: a parity run that hangs fails the test instead of hanging
it. Marked `serial`; always a virtual board (a real board cannot be told to drop bytes).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tinyattn import cli
from tinyattn.board.flash import flash
from tinyattn.board.link import BoardLink, unframe
from tinyattn.board.parity import MAX_RESTARTS, parity
from tinyattn.data.tabular import load_dataset
from tinyattn.tools.vboard import FaultConfig, VirtualBoard, find_micropython

# parity without --model reads build/model.npz of the working directory: use an empty one
pytestmark = [pytest.mark.serial, pytest.mark.usefixtures("tmp_cwd")]

TIMEOUT = 1.0  # seconds per request (parity --timeout); the server answers a batch in ~30 ms
RETRIES = 3  # BoardLink.request's default
RUN_LIMIT = 90.0  # a parity run still going after this is a hang
# what an ESP32's ROM prints on a reset, before MicroPython's banner
ROM_NOISE = b"ets Jun  8 2016 00:22:57\r\n\r\nrst:0x1 (POWERON_RESET),boot:0x13\r\n"


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory, reference_model: dict[str, Path]):
    """One virtual board for the module, flashed with the reference blob over a clean link."""
    if find_micropython() is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    with VirtualBoard(tmp_path_factory.mktemp("faulty_board")) as vb:
        flash(vb.port, reference_model["blob"], progress=False)  # type: ignore[arg-type]
        yield vb


@pytest.fixture
def vb(board: VirtualBoard):
    """The module's board; its link is made clean again after each test."""
    yield board
    board.set_fault(None)
    board.set_silent(False)


@pytest.fixture(scope="module")
def iris():
    return load_dataset("iris")


def _bounded(fn: Callable[[], Any], limit: float = RUN_LIMIT) -> tuple[Any, float]:
    """(fn(), seconds) — fn runs in a thread; still running after `limit` s fails the test."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the test's thread
            box["error"] = exc

    t0 = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit)
    elapsed = time.monotonic() - t0
    assert not thread.is_alive(), f"parity still running after {limit:.0f} s: it hangs"
    if "error" in box:
        raise box["error"]
    return box.get("value"), elapsed


def _after_batches(monkeypatch: pytest.MonkeyPatch, at: set[int], action: Callable,
                   before: bool = False) -> list:
    """Call action(link, data) right after the host has written its n-th batch request (with
    `before`: right before it writes it), for each n in `at` (1-based; resends count too).
    Returns the list of counts seen."""
    seen: list[int] = []
    write = BoardLink._write

    def _write(link: BoardLink, data: bytes) -> None:
        batch = b'"op":"batch"' in data
        if batch:
            seen.append(len(seen) + 1)
        hit = batch and seen[-1] in at
        if hit and before:
            action(link, data)
        write(link, data)
        if hit and not before:
            action(link, data)

    monkeypatch.setattr(BoardLink, "_write", _write)
    return seen


# Batches per encoding for Iris's 150 samples: 16 JSON samples a batch (10 batches), 64 base64
# samples (the default since compact payloads: 64, 64, 22). A fault "mid-run" comes after the
# batch `MID[enc]`, and the batches before it hold `KEPT[enc]` samples.
ENCODINGS = ("b64", "json")
BATCHES = {"b64": 3, "json": 10}
MID = {"b64": 2, "json": 4}
KEPT = {"b64": 64, "json": 48}


def _run_parity(port: str, blob: Path, iris, enc: str = "b64") -> dict:
    return parity(port, blob, iris.X, iris.y, timeout=TIMEOUT, bench_n=20, progress=False, enc=enc)


def _assert_resynced(report: dict) -> dict:
    """Every sample answered and every answer right: nothing damaged got into the report."""
    s = report["summary"]
    assert s["complete"] and s["answered"] == 150, (s["error"], s["link"])
    assert s["int8_exact"] == 150 and s["xq_match"] == 150, s
    assert s["argmax_agreement"] == 150 and s["float_max_abs_diff"] <= s["float_tol"], s
    assert s["passed"]
    return s


def _one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# -- faults the link survives -----------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2])
def test_link_faults_dropped_bytes_resync(vb, reference_model, iris, seed):
    vb.set_fault(FaultConfig(drop=1e-3, direction="both", seed=seed))
    report, seconds = _bounded(lambda: _run_parity(vb.port, reference_model["blob"], iris))
    s = _assert_resynced(report)
    link = s["link"]
    assert link["damaged_replies"] + link["resends"] >= 5, link  # the faults did hit
    print(f"\ndrop 1e-3 seed {seed}: {seconds:.1f} s, {s['split_batches']} splits, link {link}")


@pytest.mark.parametrize("seed", [1, 2])
def test_link_faults_corrupted_bytes_resync(vb, reference_model, iris, seed):
    vb.set_fault(FaultConfig(corrupt=1e-3, direction="both", seed=seed))
    report, seconds = _bounded(lambda: _run_parity(vb.port, reference_model["blob"], iris))
    s = _assert_resynced(report)
    link = s["link"]
    assert link["damaged_replies"] + link["resends"] >= 5, link
    print(f"\ncorrupt 1e-3 seed {seed}: {seconds:.1f} s, {s['split_batches']} splits, {link}")


@pytest.mark.parametrize("enc", ENCODINGS)
def test_link_faults_garbage_lines_and_forged_replies_are_skipped(
    vb, reference_model, iris, monkeypatch, enc
):
    """Random garbage lines from the board, plus, after each batch request, lines made to look
    like its reply: its id without a CRC field, its id with a wrong CRC, binary noise. None may
    be taken for the reply (a forged `pred` would fail the parity check); the wrong-CRC line
    looks like a reply damaged on the way, so the request is sent again. Every batch request
    of the run is forged once (10 JSON batches, 3 base64 ones)."""
    vb.set_fault(FaultConfig(garbage=0.3, direction="from_board", seed=3))
    forged: set[int] = set()

    def forge(link: BoardLink, data: bytes) -> None:
        rid = int(re.match(rb'\{"id":(\d+),', data).group(1))  # type: ignore[union-attr]
        if rid in forged:
            return  # once per request: a resend gets a clean line
        forged.add(rid)
        fake = {"pred": [2] * 16, "n": 16, "id": rid, "ok": True}
        vb.inject(json.dumps(fake).encode() + b"\r\n")  # no CRC field: not a reply
        vb.inject(json.dumps(fake).encode()[:-1] + b',"crc":12345}\r\n')  # wrong CRC
        vb.inject(b"\xff\xfe\x00 line noise \x1b[0m\r\n")

    _after_batches(monkeypatch, set(range(1, 1000)), forge)
    report, seconds = _bounded(lambda: _run_parity(vb.port, reference_model["blob"], iris, enc))
    s = _assert_resynced(report)
    link = s["link"]
    assert len(forged) >= BATCHES[enc]
    # Each forgery is refused: its wrong-CRC line as a damaged reply when it comes before the
    # real reply, else (the reply already taken, its id no longer awaited) as noise, like its
    # other lines; which one depends on timing, so the two counts are checked together. The
    # last request's forged lines can arrive after its reply and after the host's last read
    # (the run is over: nothing is waited for), so they may go uncounted (seen under load:
    # 19 of 20); every earlier request's are read before the next reply.
    assert link["damaged_replies"] + link["garbage_lines"] >= 2 * (len(forged) - 1), link
    print(f"\n{enc}: garbage 0.3/line + {3 * len(forged)} forged lines: {seconds:.1f} s, {link}")


@pytest.mark.parametrize("enc", ENCODINGS)
def test_link_faults_board_reset_mid_run_restarts_server(
    vb, reference_model, iris, monkeypatch, enc
):
    """The board resets (ROM noise, banner, REPL) right after a batch request mid-run (the
    4th of 10 JSON batches, the 2nd of 3 base64 ones): the tool sees the reset, starts the
    server again, resends, and completes."""
    resets = vb.hard_resets
    seen = _after_batches(
        monkeypatch, {MID[enc]}, lambda link, data: vb.reset(noise=ROM_NOISE, wait=False)
    )
    report, seconds = _bounded(lambda: _run_parity(vb.port, reference_model["blob"], iris, enc))
    s = _assert_resynced(report)
    assert vb.hard_resets == resets + 1
    assert s["board_restarts"] == 1 and s["link"]["resets"] == 1, s
    assert s["link"]["server_starts"] >= 2
    assert len(seen) > MID[enc]  # the batch lost with the reset was sent again
    print(f"\n{enc}: reset after batch {MID[enc]}: {seconds:.1f} s, link {s['link']}")


def test_link_faults_crc_field_missing_a_separator_is_refused(vb, reference_model):
    """MicroPython's json reads on past a lost `,` or `:`, so a request whose `,"crc":` lost
    one still parses, with a `crc` key, and unframe never saw a CRC to check: the rest of the
    line may be damaged too (a lost byte in a base64 field did that). The server refuses it
    as `bad crc field`, which the host resends, and runs the intact request."""
    good = b'{"id":9,"op":"infer","features":[5.1,3.5,1.4,0.2]'
    with BoardLink(vb.port, timeout=TIMEOUT) as link:
        link.start_server()
        for rid, line in (
            (7, b'{"id":7,"op":"infer","features":[5.1,3.5,1.4,0.2]"crc":1}\n'),
            (8, b'{"id":8,"op":"infer","features":[5.1,3.5,1.4,0.2],"crc"1}\n'),
            (9, good + b"}\n"),  # no CRC field at all: accepted as typed by hand
        ):
            link._write(line)
            deadline = time.monotonic() + 5.0
            while (reply := unframe(link._read_line(deadline) or b"{}")) is None:
                pass
            assert reply.get("id") == rid, reply
            if rid < 9:
                assert reply["ok"] is False and reply["error"] == "bad crc field", reply
            else:
                assert reply["ok"] and reply["class"] == "setosa", reply
        link.stop_server()


# -- faults the link cannot survive: a clear message, the partial report kept ------------------


def test_link_faults_resets_beyond_limit_keep_partial_report(
    vb, reference_model, iris, monkeypatch, capsys, tmp_path
):
    """A board that resets on every batch from the 3rd on: after MAX_RESTARTS restarts the run
    stops with one line naming the problem, and the report keeps the samples answered before,
    each compared with the host."""
    _after_batches(monkeypatch, set(range(3, 100)), lambda link, d: vb.reset(wait=False))
    out = tmp_path / "parity.json"
    args = ["parity", "--port", vb.port, "--blob", str(reference_model["blob"]), "--report",
            str(out), "--timeout", str(TIMEOUT), "--bench", "0", "--quiet"]  # fmt: skip
    code, seconds = _bounded(lambda: cli.main(args))
    assert code == 2
    line = _one_line_error(capsys.readouterr().err)
    assert f"reset {MAX_RESTARTS + 1} times" in line and "power supply" in line, line
    report = json.loads(out.read_text())
    s = report["summary"]
    assert not s["complete"] and not s["passed"] and s["board_restarts"] == MAX_RESTARTS + 1
    answered = [r for r in report["rows"] if r["answered"]]
    assert 2 * 64 <= s["answered"] == len(answered) < 150  # two batches of 64 got through
    assert all(r["int8_exact"] and r["argmax_agree"] for r in answered)
    assert len(report["rows"]) == 150
    print(f"\nreset on every batch >= 3: {seconds:.1f} s, kept {s['answered']} rows: {line}")


@pytest.mark.slow
@pytest.mark.parametrize("enc", ENCODINGS)
def test_link_faults_board_goes_silent_mid_run(
    vb, reference_model, iris, monkeypatch, capsys, tmp_path, enc
):
    """The board stops answering mid-run, as a batch request goes out (the 4th of 10 JSON
    batches, the 2nd of 3 base64 ones): the tool gives up after its resends, within (retries
    + 1) × timeout plus the stop sequence, says so in one line, and the report keeps the
    batches answered before (48 or 64 samples; the request sent into the silence is lost).
    The silence starts before that request is written: set after it, it raced the board's
    reply (a loaded machine once let a 16-sample JSON batch through: 64 kept, not 48)."""
    _after_batches(monkeypatch, {MID[enc]}, lambda link, data: vb.set_silent(True), before=True)
    out = tmp_path / "parity.json"
    args = ["parity", "--port", vb.port, "--blob", str(reference_model["blob"]), "--report",
            str(out), "--timeout", str(TIMEOUT), "--bench", "0", "--quiet",
            "--enc", enc]  # fmt: skip
    code, seconds = _bounded(lambda: cli.main(args))
    assert code == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "no reply to 'batch'" in line and "reset the board" in line, line
    # (retries + 1) × timeout, the server start before (~1 s), exit + drain after (≤ 4 s)
    assert seconds <= (RETRIES + 1) * (TIMEOUT + 0.5) + 2 + 4 + 3, seconds
    report = json.loads(out.read_text())
    s = report["summary"]
    assert not s["complete"] and s["answered"] == KEPT[enc], s
    assert all(r["int8_exact"] for r in report["rows"] if r["answered"])
    print(f"\n{enc}: silent after batch {MID[enc]}: {seconds:.1f} s, kept {s['answered']} rows")


def test_link_faults_silent_board_from_the_start(vb, reference_model, capsys, tmp_path):
    """Nothing answers at all: no raw REPL prompt within 10 s, one line, exit 2, no report."""
    vb.set_silent(True)
    out = tmp_path / "parity.json"
    args = ["parity", "--port", vb.port, "--blob", str(reference_model["blob"]), "--report",
            str(out), "--timeout", str(TIMEOUT), "--quiet"]  # fmt: skip
    code, seconds = _bounded(lambda: cli.main(args))
    assert code == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "no raw REPL prompt" in line and "reset button" in line, line
    assert "(it printed nothing)" in line, line
    assert seconds <= 10 + 3, seconds
    assert not out.exists()
    print(f"\nsilent from the start: {seconds:.1f} s: {line}")


def test_link_faults_board_that_resets_when_the_port_opens(vboard_factory, reference_model):
    """An ESP32 behind a USB-UART resets when a host opens the port (DTR/RTS auto-reset): ROM
    lines, then the MicroPython banner. mpremote (flash) and the parity link open the port
    several times; each time they wait out the boot and get to the raw REPL."""
    from tinyattn.board.flash import flash
    from tinyattn.board.parity import parity as run_parity

    board = vboard_factory(reset_on_open=True)
    summary = flash(board.port, reference_model["blob"], progress=False)
    # the runtime precompiled for the board's arch (flash's default since .mpy deployment)
    assert summary["format"] == "mpy"
    assert set(summary["files"]) >= {"attention.mpy", "server.mpy", "model.bin"}
    data = load_dataset("iris")
    s = run_parity(board.port, reference_model["blob"], data.X, data.y, bench_n=0,
                   progress=False)["summary"]  # fmt: skip
    assert s["passed"] and s["int8_exact"] == 150, s
    assert board.hard_resets >= 2  # it really did reset on the opens
