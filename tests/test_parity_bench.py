# Host (CPython): the bench of `tinyattn parity` times what the board can time, and waits for it.
"""`parity --bench N` asks the board for N timed inferences per path after the parity run
(docs/protocol.md "bench"). The board replies only when all N are done, so the host must wait
for them, and must not resend the request to a board still running it. The float path of
ACSF1's rp2040 pick takes 1.9 s an inference on a Pico: a timeout guessed from N alone (50 ms
an inference) expired, the request was resent four times, and a parity run whose every logit
was exact ended FAIL with the board busy for minutes.

- A link that answers as a board of a given speed would (fake, pure): one inference first,
  then as many of N as fit in `BENCH_SECONDS` of the board's time; every timeout at least
  the work asked for; nothing resent.
- The virtual board: Iris's paths are fast, so all N are timed, and the summary and the
  table say how many.
"""

from __future__ import annotations

import numpy as np
import pytest

from tinyattn.board.parity import BENCH_SECONDS, bench_path, format_table, parity
from tinyattn.data.tabular import load_dataset


class BoardOfSpeed:
    """A link to a board whose inference takes `seconds` of its time; records each request
    and checks that its timeout covers the work it asks for."""

    timeout = 5.0

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.asked: list[tuple[int, float]] = []

    def request(self, op: str, timeout: float, n: int, path: str, **_: object) -> dict:
        assert op == "bench"
        self.asked.append((n, timeout))
        assert timeout >= n * self.seconds, (n, timeout)  # the board replies after n of them
        return {"ok": True, "n": n, "path": path, "us_per_inference": self.seconds * 1e6}


@pytest.mark.parametrize("seconds", [1.9, 0.002, 25.0])
def test_bench_times_what_fits_and_waits_for_it(seconds):
    link = BoardOfSpeed(seconds)
    reply = bench_path(link, "float", 200, slowest=seconds + 3.0)
    want = max(1, min(200, int(BENCH_SECONDS / seconds)))
    assert reply["n"] == want and reply["us_per_inference"] == seconds * 1e6
    assert link.asked[0][0] == 1  # one inference first: its time sizes the rest
    assert [n for n, _ in link.asked] == ([1] if want == 1 else [1, want])


def test_bench_refused_is_a_link_error():
    from tinyattn.board.link import LinkError

    class Refusing(BoardOfSpeed):
        def request(self, op, timeout, n, path, **_):
            return {"ok": False, "error": "n must be an integer from 1 to 10000"}

    with pytest.raises(LinkError, match=r"refused bench \(int8, n=1\): n must be"):
        bench_path(Refusing(0.01), "int8", 200, slowest=0.1)


def test_parity_bench_counts_on_the_virtual_board(flashed_port, reference_model):
    data = load_dataset("iris")
    X, y = data.X[::15], data.y[::15]
    report = parity(flashed_port, reference_model["blob"], X, y, bench_n=50, progress=False)
    s = report["summary"]
    assert s["passed"], s
    assert s["device_bench_n"] == {"int8": 50, "float": 50}  # Iris: far below 10 s a path
    assert np.isfinite(s["device_us_per_inference"]) and s["device_us_per_inference"] > 0
    lines = format_table(s, report["rows"]).splitlines()
    for path in ("int8", "float"):
        line = next(t for t in lines if t.startswith(f"device µs/inference {path}"))
        assert line.endswith("(50 runs)"), line
    slow = {**s, "link_samples_per_s": 0.176}  # an emulated Pico's 1,464-step windows
    line = next(t for t in format_table(slow).splitlines() if t.startswith("link"))
    assert line.endswith(" 0.18"), line  # not rounded to 0
