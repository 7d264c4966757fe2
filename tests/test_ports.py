# Host (CPython): tests of port discovery and resolution (host/board/ports.py, `tinyattn devs`).
"""Issue 12, Ports: `tinyattn devs` lists serial ports with VID:PID and which look like
MicroPython boards; `--port auto` takes the only likely board or says which to choose, the same
way in every command (they all go through ports.board_port); an unusable port is one line, and
a permission error names the Linux `dialout` group.

pyserial's comports() is replaced by fake listings (objects with device/vid/pid/description/
hwid, as ListPortInfo has), so no test depends on what is plugged into this machine. No test
reaches a board: resolved fake devices do not exist, so the opener's message shows where
resolution led.
"""

from __future__ import annotations

import errno
import json
from types import SimpleNamespace

import pytest

from tinyattn import cli
from tinyattn.board import link, ports

serial = pytest.importorskip("serial")
list_ports = pytest.importorskip("serial.tools.list_ports")

pytestmark = pytest.mark.host


def _port(device: str, vid: int | None = None, pid: int | None = None, desc: str = "n/a"):
    hwid = f"USB VID:PID={vid:04X}:{pid:04X} SER=1 LOCATION=1-1:1.0" if vid is not None else "n/a"
    return SimpleNamespace(device=device, vid=vid, pid=pid, description=desc, hwid=hwid)


SERIAL0 = _port("/dev/ttyS0")  # a PC's built-in UART: no USB ids
PICO = _port("/dev/ttyACM0", 0x2E8A, 0x0005, "Board in FS mode")
ESP32_CP210X = _port("/dev/ttyUSB0", 0x10C4, 0xEA60, "CP2102 USB to UART Bridge Controller")
ESP32_CH340 = _port("/dev/ttyUSB1", 0x1A86, 0x7523, "USB Serial")
ESP32_S3 = _port("/dev/ttyACM1", 0x303A, 0x1001, "USB JTAG/serial debug unit")
FTDI = _port("/dev/ttyUSB2", 0x0403, 0x6001, "FT232R USB UART")


@pytest.fixture
def listing(monkeypatch):
    """set(*fake ports): what comports() returns from now on."""
    state: list = []
    monkeypatch.setattr(list_ports, "comports", lambda *a, **k: list(state))
    monkeypatch.delenv("TINYATTN_PORT", raising=False)

    def set_ports(*fakes) -> None:
        state[:] = fakes

    return set_ports


def _error_line(capsys, argv: list[str]) -> str:
    """Run the CLI in process: exit 2 and exactly one stderr line, no traceback."""
    code = cli.main(argv)
    out = capsys.readouterr()
    assert code == 2, (code, out.out[-500:], out.err)
    assert "Traceback" not in out.err, out.err
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1, out.err
    assert lines[0].startswith(f"tinyattn {argv[0]}: error: "), lines[0]
    return lines[0]


# -- listing ----------------------------------------------------------------------------------


def test_ports_vendor_ids_mark_micropython_boards(listing) -> None:
    listing(FTDI, ESP32_S3, SERIAL0, PICO, ESP32_CP210X, ESP32_CH340)
    found = ports.list_serial_ports()
    assert [p.device for p in found] == sorted(p.device for p in found)
    boards = {p.device: p.board for p in found}
    assert "RP2040" in boards["/dev/ttyACM0"]
    assert "Espressif" in boards["/dev/ttyACM1"]
    assert "CP210x" in boards["/dev/ttyUSB0"] and "CH340" in boards["/dev/ttyUSB1"]
    assert boards["/dev/ttyUSB2"] is None and boards["/dev/ttyS0"] is None
    assert {p.vid_pid for p in found} >= {"2E8A:0005", "10C4:EA60", "-"}


def test_ports_devs_table_lists_vid_pid_and_likely_board(listing, capsys) -> None:
    listing(SERIAL0, PICO, FTDI)
    assert cli.main(["devs"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["PORT", "VID:PID", "LOOKS", "LIKE", "DESCRIPTION"]
    row = next(line for line in out if line.startswith("/dev/ttyACM0"))
    assert "2E8A:0005" in row and "RP2040" in row and "Board in FS mode" in row
    row = next(line for line in out if line.startswith("/dev/ttyUSB2"))
    assert "0403:6001" in row and "FT232R" in row
    assert out[-1] == "1 likely board: --port auto takes /dev/ttyACM0"


def test_ports_devs_json(listing, capsys) -> None:
    listing(ESP32_CP210X, SERIAL0, ESP32_S3)
    assert cli.main(["devs", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["device"] for p in doc["ports"]] == ["/dev/ttyACM1", "/dev/ttyS0", "/dev/ttyUSB0"]
    assert doc["boards"] == ["/dev/ttyACM1", "/dev/ttyUSB0"] and doc["auto"] is None
    usb0 = doc["ports"][2]
    assert (usb0["vid"], usb0["pid"], usb0["vid_pid"]) == (0x10C4, 0xEA60, "10C4:EA60")
    assert usb0["hwid"].startswith("USB VID:PID=10C4:EA60") and "CP210x" in usb0["board"]
    assert doc["ports"][1]["vid_pid"] is None and doc["ports"][1]["board"] is None


def test_ports_devs_without_any_port_says_so(listing, capsys) -> None:
    listing()
    assert cli.main(["devs"]) == 0
    out = capsys.readouterr().out
    assert "no serial ports found" in out and "tinyattn board" in out


# -- --port auto ------------------------------------------------------------------------------


def test_ports_auto_takes_the_only_board(listing) -> None:
    listing(SERIAL0, FTDI, ESP32_CH340)
    assert ports.resolve_port("auto") == "/dev/ttyUSB1"
    with ports.board_port("auto") as port:  # what every command uses
        assert port == "/dev/ttyUSB1"
    assert ports.resolve_port("/dev/ttyACM5") == "/dev/ttyACM5"  # a named port is kept
    assert ports.resolve_port(None) is None  # a virtual board


def test_ports_auto_with_two_boards_names_them_and_says_choose(listing, capsys) -> None:
    listing(PICO, SERIAL0, ESP32_CP210X)
    line = _error_line(capsys, ["flash", "--port", "auto", "--quiet"])
    assert "2 likely boards" in line and "choose one with --port" in line, line
    assert "/dev/ttyACM0 (2E8A:0005" in line and "/dev/ttyUSB0 (10C4:EA60" in line, line


def test_ports_auto_without_a_board_says_none_and_how_to_run_a_virtual_one(
    listing, capsys
) -> None:
    listing(SERIAL0, FTDI)
    line = _error_line(capsys, ["flash", "--port", "auto", "--quiet"])
    assert "no MicroPython board found" in line and "/dev/ttyUSB2 (0403:6001" in line, line
    assert "tinyattn devs" in line and "leave --port out" in line, line
    listing()
    line = _error_line(capsys, ["flash", "--port", "auto", "--quiet"])
    assert "no MicroPython board found;" in line, line


def test_ports_auto_from_environment_names_the_variable(listing, monkeypatch, capsys) -> None:
    listing(SERIAL0)
    monkeypatch.setenv("TINYATTN_PORT", "auto")
    line = _error_line(capsys, ["flash", "--quiet"])
    assert "no MicroPython board found" in line and "unset TINYATTN_PORT" in line, line


@pytest.mark.parametrize("command", ["flash", "parity"])
def test_ports_auto_resolves_the_same_in_every_command(
    listing, capsys, reference_model, command
) -> None:
    """The resolved device reaches the opener: its 'no such serial port' names it."""
    listing(SERIAL0, _port("/dev/ttyNOPE7", 0x2E8A, 0x0005, "Board in FS mode"))
    line = _error_line(
        capsys, [command, "--port", "auto", "--blob", str(reference_model["blob"]), "--quiet"]
    )
    assert "/dev/ttyNOPE7: no such serial port" in line, line
    listing(PICO, ESP32_S3)
    line = _error_line(
        capsys, [command, "--port", "auto", "--blob", str(reference_model["blob"]), "--quiet"]
    )
    assert "2 likely boards" in line, line


def test_ports_help_explains_auto_and_devs(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["flash", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "'auto': the only MicroPython board plugged in" in help_text
    assert "'tinyattn devs' lists them" in help_text
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "devs" in capsys.readouterr().out


# -- opening a port: one wording, dialout on EACCES -------------------------------------------


def test_ports_permission_error_names_dialout_group() -> None:
    # what pyserial raises for a /dev/ttyUSB0 owned by root:dialout, mode 0660
    exc = serial.SerialException(
        errno.EACCES,
        "could not open port /dev/ttyUSB0: [Errno 13] Permission denied: '/dev/ttyUSB0'",
    )
    for error in (exc, PermissionError(errno.EACCES, "Permission denied")):
        line = link.describe_open_error("/dev/ttyUSB0", error)
        assert line.startswith("/dev/ttyUSB0: permission denied"), line
        assert "'dialout' group" in line and "sudo usermod -aG dialout $USER" in line, line
        assert "log out and in again" in line and "\n" not in line, line


def test_ports_open_errors_other_than_permission_keep_their_wording() -> None:
    missing = serial.SerialException(
        errno.ENOENT,
        "could not open port /dev/ttyX: [Errno 2] No such file or directory: '/dev/ttyX'",
    )
    assert "/dev/ttyX: no such serial port" in link.describe_open_error("/dev/ttyX", missing)
    locked = serial.SerialException(errno.EAGAIN, "Could not exclusively lock port /dev/ttyX")
    assert "/dev/ttyX: port is busy" in link.describe_open_error("/dev/ttyX", locked)


def test_ports_no_permission_is_one_line_before_mpremote_runs(
    tmp_path, monkeypatch, capsys
) -> None:
    """mpremote says only "failed to access" for EACCES: board_port checks access first.
    (Tests run as root, where every device is accessible: os.access is faked.)"""
    device = tmp_path / "ttyUSB9"
    device.touch()
    real_access = ports.os.access
    monkeypatch.setattr(
        ports.os,
        "access",
        lambda p, mode: False if str(p) == str(device) else real_access(p, mode),
    )
    line = _error_line(capsys, ["flash", "--port", str(device), "--quiet"])
    assert f"{device}: permission denied" in line and "dialout" in line, line
