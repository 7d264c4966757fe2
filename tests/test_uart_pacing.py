# Host (CPython): tests of the virtual board's UART pacing (tools/vboard.py, `board --baud`).
"""Issue 12, UART pacing: with baud=N the virtual board's link carries at most N/10 bytes a
second each way (8N1: start bit, 8 data bits, stop bit), so a link figure is what a board on
a USB-UART at N baud would give; unpaced by default (USB-CDC).

Timing tests assert lower bounds only — pushing K bytes through a board at 9600 baud takes at
least K*10/9600 s — never upper bounds: the machine is shared and its scheduling noisy. The
wire model itself (_Uart) is checked with explicit clock values, no sleeping.
"""

from __future__ import annotations

import hashlib
import time

import pytest

from tinyattn import cli
from tinyattn.tools.vboard import BITS_PER_BYTE, VirtualBoard, _Uart, check_baud

serial = pytest.importorskip("serial")

RAW_PROMPT = b"raw REPL; CTRL-B to exit\r\n>"


def _read_until(port: serial.Serial, marker: bytes, timeout: float = 30.0) -> bytes:
    data = b""
    end = time.monotonic() + timeout
    while not data.endswith(marker):
        assert time.monotonic() < end, f"expected {marker!r}, got {data[-200:]!r}"
        data += port.read(max(1, port.in_waiting))
    return data


def _raw_repl(board: VirtualBoard) -> serial.Serial:
    port = serial.Serial(board.port, 9600, timeout=0.05)
    port.write(b"\r\x03\x01")
    _read_until(port, RAW_PROMPT)
    return port


# -- the wire model ---------------------------------------------------------------------------


@pytest.mark.host
def test_uart_pacing_wire_hands_on_a_byte_after_its_ten_bits() -> None:
    wire = _Uart(9600)  # 960 bytes/s: one byte every 1/960 s
    byte_time = BITS_PER_BYTE / 9600
    wire.push(b"x" * 100, now=50.0)
    assert wire.pop(50.0) == b""
    assert wire.pop(50.0 + 0.99 * byte_time) == b""  # the first stop bit is not there yet
    assert wire.wait(50.0) == pytest.approx(byte_time)
    assert wire.pop(50.0 + 10.5 * byte_time) == b"x" * 10
    assert wire.pop(50.0 + 1000.0) == b"x" * 90  # all of it, not more than was sent
    assert wire.wait(50.0 + 1000.0) is None


@pytest.mark.host
def test_uart_pacing_wire_carries_k_bytes_in_no_less_than_k_byte_times() -> None:
    wire = _Uart(115200)
    byte_time = BITS_PER_BYTE / 115200
    now, got = 0.0, 0
    for chunk in (b"a" * 300, b"b" * 1, b"c" * 4000):  # pushed while busy: queued behind
        wire.push(chunk, now)
        now += 0.0001
        got += len(wire.pop(now))
    while wire.pending:
        now += 0.0007  # a poll loop's coarse steps
        got += len(wire.pop(now))
        assert got <= now / byte_time + 1e-6  # (float rounding of the wire clock)
    assert got == 4301 and now >= 4301 * byte_time


@pytest.mark.host
def test_uart_pacing_idle_line_does_not_save_up_bytes() -> None:
    """A line idle for a second has no credit: the next byte still takes its 10 bits."""
    wire = _Uart(9600)
    wire.push(b"a", now=0.0)
    assert wire.pop(5.0) == b"a"
    wire.push(b"bcd", now=6.0)
    assert wire.pop(6.0) == b""
    assert wire.pop(6.0 + 2.5 * BITS_PER_BYTE / 9600) == b"bc"


@pytest.mark.host
@pytest.mark.parametrize("bad", [0, -9600, 1.5, "115200", True])
def test_uart_pacing_rejects_a_baud_that_is_not_a_positive_integer(tmp_path, bad) -> None:
    with pytest.raises(ValueError, match="positive whole number of bits per second"):
        check_baud(bad)
    with pytest.raises(ValueError, match="baud"):
        VirtualBoard(tmp_path, baud=bad)
    assert check_baud(None) is None and check_baud(921600) == 921600


@pytest.mark.host
def test_uart_pacing_board_cli_bad_baud_is_one_line(tmp_path, capsys) -> None:
    code = cli.main(["board", "--fs", str(tmp_path), "--baud", "0"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert err.strip() == (
        "tinyattn board: error: --baud: baud 0: give a positive whole number of bits per "
        "second, e.g. 115200 (or none for an unpaced USB-CDC link)"
    )


@pytest.mark.host
def test_uart_pacing_board_cli_help_names_baud(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["board", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--baud N pace the link like a UART at N baud, 8N1" in help_text
    assert "default: unpaced, like USB-CDC" in help_text


# -- a paced board ----------------------------------------------------------------------------


@pytest.mark.serial
def test_uart_pacing_board_to_host_at_9600_baud_takes_ten_bits_a_byte(vboard_factory) -> None:
    board = vboard_factory(baud=9600)
    assert board.baud == 9600
    port = _raw_repl(board)
    try:
        code = b"print('a' * 1500)\x04"
        start = time.monotonic()
        port.write(code)
        reply = _read_until(port, b"\x04>")
        elapsed = time.monotonic() - start
    finally:
        port.close()
    assert reply == b"OK" + b"a" * 1500 + b"\r\n\x04\x04>", reply[-40:]
    wire_bytes = len(code) + len(reply)  # both crossed the wire, one after the other
    assert elapsed >= wire_bytes * BITS_PER_BYTE / 9600, (elapsed, wire_bytes)


@pytest.mark.serial
def test_uart_pacing_host_to_board_at_9600_baud_takes_ten_bits_a_byte(vboard_factory) -> None:
    """The raw REPL answers OK only after the code's last byte (\\x04) has arrived."""
    board = vboard_factory(baud=9600)
    port = _raw_repl(board)
    try:
        code = b"x = '" + b"b" * 2000 + b"'\x04"
        start = time.monotonic()
        port.write(code)
        reply = _read_until(port, b"\x04>")
        elapsed = time.monotonic() - start
    finally:
        port.close()
    assert reply == b"OK\x04\x04>", reply
    assert elapsed >= (len(code) + len(reply)) * BITS_PER_BYTE / 9600, elapsed


@pytest.mark.serial
def test_uart_pacing_keeps_every_byte_mpremote_cp_roundtrip(vboard_factory, mpremote, tmp_path):
    """Pacing delays bytes, never drops or reorders them: mpremote (raw-paste flow control)
    copies a binary file both ways intact at 115200 baud."""
    board = vboard_factory(baud=115200)
    data = bytes(range(256)) * 8
    src, back = tmp_path / "blob.bin", tmp_path / "back.bin"
    src.write_bytes(data)
    res = mpremote(board.port, "cp", str(src), ":blob.bin", timeout=60)
    assert res.returncode == 0, res.stderr
    assert (board.fs_dir / "blob.bin").read_bytes() == data
    res = mpremote(board.port, "cp", ":blob.bin", str(back), timeout=60)
    assert res.returncode == 0, res.stderr
    assert hashlib.sha256(back.read_bytes()).digest() == hashlib.sha256(data).digest()


@pytest.mark.serial
def test_uart_pacing_is_off_by_default(vboard) -> None:
    assert vboard.baud is None and vboard._uart_in is None and vboard._uart_out is None
