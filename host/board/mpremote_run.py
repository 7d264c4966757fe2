"""Host (CPython): mpremote's command line, with an interrupt that reaches a board booting
into its app. `python -m tinyattn.board.mpremote_run connect PORT …` is `mpremote connect PORT
…` (flash.mpremote runs it).

mpremote sends one Ctrl-C when it opens the port, then waits for the raw REPL. A board that
reboots when its port opens (an ESP32 behind a USB-UART, `tinyattn board --reset-on-open`) is
still booting then: the Ctrl-C is lost, main.py (the app of `tinyattn flash --app`) starts,
and mpremote times out. Here, before mpremote's own sequence, Ctrl-C and Ctrl-B (to the
friendly REPL, from the raw one a failed session may have left) are sent every quarter
second until a REPL prompt answers, as BoardLink.enter_raw_repl does, within mpremote's own
timeout. Nothing else of mpremote changes.

References: mpremote's transport_serial.py (SerialTransport.enter_raw_repl).
"""

from __future__ import annotations

import sys
import time

PROMPTS = (b">>> ", b"raw REPL; CTRL-B to exit\r\n>")


def interrupt_until_prompt(ser, timeout: float) -> None:
    """Send Ctrl-C (twice) and Ctrl-B until a prompt shows, or `timeout` seconds pass (then
    mpremote's own sequence runs and says what it says)."""
    end = time.monotonic() + timeout
    seen = b""
    while time.monotonic() < end:
        ser.write(b"\r\x03\x03\x02")
        step = time.monotonic() + 0.25
        while time.monotonic() < step:
            n = ser.in_waiting
            if n:
                seen = (seen + ser.read(n))[-256:]
                if any(p in seen for p in PROMPTS):
                    time.sleep(0.05)  # the rest of the banner, then mpremote flushes it
                    return
            else:
                time.sleep(0.01)


def main(argv: list[str] | None = None) -> int:
    from mpremote import main as mpremote_main
    from mpremote.transport_serial import SerialTransport

    original = SerialTransport.enter_raw_repl

    def enter_raw_repl(self, soft_reset=True, timeout_overall=10):
        interrupt_until_prompt(self.serial, timeout_overall)
        return original(self, soft_reset=soft_reset, timeout_overall=timeout_overall)

    SerialTransport.enter_raw_repl = enter_raw_repl
    sys.argv = ["mpremote", *(sys.argv[1:] if argv is None else argv)]
    return mpremote_main.main()


if __name__ == "__main__":
    sys.exit(main())
