"""Serial tests: host-vs-device parity and the device server's robustness, over a serial link.

Against $TINYATTN_PORT (a real board) when set, else a virtual board (the MicroPython unix port
on a pseudo-terminal) that the `serial_port` fixture starts. `pytest -m serial` runs these.
"""

from __future__ import annotations

import json
import random

import pytest

from tinyattn.board.link import BoardLink, frame
from tinyattn.board.parity import FLOAT_TOL, parity
from tinyattn.data.tabular import load_dataset

pytestmark = pytest.mark.serial


def test_parity_all_iris_samples_int8_exact_float_within_tol(flashed_port, reference_model):
    data = load_dataset("iris")
    report = parity(flashed_port, reference_model["blob"], data.X, data.y, progress=False)
    s = report["summary"]
    assert s["complete"] and s["answered"] == 150
    assert s["int8_exact"] == 150, [r for r in report["rows"] if not r.get("int8_exact")][:3]
    assert s["xq_match"] == 150
    assert s["float_max_abs_diff"] <= FLOAT_TOL
    assert s["argmax_agreement"] == 150
    assert s["passed"] and s["failed_samples"] == []
    assert len(report["rows"]) == 150 and all(r["answered"] and r["ok"] for r in report["rows"])


def test_parity_single_path_int8_and_float(flashed_port, reference_model):
    data = load_dataset("iris")
    X, y = data.X[::10], data.y[::10]
    for path in ("int8", "float"):
        s = parity(flashed_port, reference_model["blob"], X, y, path=path, bench_n=0,
                   progress=False)["summary"]  # fmt: skip
        assert s["passed"], s
        assert (s["int8_exact"] is None) == (path == "float")


def _malformed_lines(rng: random.Random, n: int) -> list[bytes]:
    """Random bytes, bad JSON, wrong types, wrong counts, NaN/inf, huge lines, code strings.

    0x03 (Ctrl-C) is left out on purpose: on a MicroPython console it is the keyboard
    interrupt, which stops the server by design (docs/protocol.md).
    """
    code = "__import__('os').system('touch pwned')"
    fixed = [
        b"{",
        b"}",
        b"[]",
        b"null",
        b"42",
        b'"info"',
        b"{}",
        b'{"op": 1}',
        b'{"op": null}',
        b'{"op": "nope"}',
        b'{"op": "infer"}',
        b'{"op": "infer", "features": "1,2,3,4"}',
        b'{"op": "infer", "features": [1, 2, 3]}',
        b'{"op": "infer", "features": [1,2,3,4,5]}',
        b'{"op": "infer", "features": [NaN, 1, 2, 3]}',
        b'{"op": "infer", "features": [Infinity, 1, 2, 3]}',
        b'{"op": "infer", "features": [1e400, 1, 2, 3]}',
        b'{"op": "infer", "features": [true, 1, 2, 3]}',
        b'{"op": "infer", "features": [1, 2, 3, 4], "path": "fast"}',
        b'{"op": "batch", "samples": []}',
        b'{"op": "batch", "samples": [[1, 2, 3, 4]] }' * 3,
        b'{"op": "batch", "samples": ' + json.dumps([[1, 2, 3, 4]] * 40).encode() + b"}",
        b'{"op": "bench", "n": -1}',
        b'{"op": "bench", "n": 1e9}',
        b'{"op": "bench", "n": "x"}',
        b'{"op": "info", "id": [1]}',
        b'{"op": "info", "crc": 1}',
        b"x" * 6000,
        json.dumps({"op": code}).encode(),
        json.dumps({"op": "infer", "features": code}).encode(),
        json.dumps({"op": "infer", "features": [code] * 4}).encode(),
        code.encode(),
        b'{"op": "exec", "code": "' + code.encode() + b'"}',
    ]
    lines = list(fixed)
    alphabet = bytes(b for b in range(256) if b not in (0x03, 0x0A))
    while len(lines) < n:
        kind = rng.randrange(3)
        if kind == 0:
            lines.append(bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 80))))
        elif kind == 1:
            good = bytearray(b'{"op": "infer", "features": [5.1, 3.5, 1.4, 0.2]}')
            for _ in range(rng.randrange(1, 4)):
                good[rng.randrange(len(good))] = rng.choice(alphabet)
            lines.append(bytes(good))
        else:
            feats = [rng.choice([1.5, -2, "a", None, [], {}, 1e308, -1e308]) for _ in range(4)]
            lines.append(json.dumps({"op": "infer", "features": feats}).encode())
    return lines[:n]


def test_server_survives_1000_malformed_lines_and_heap_recovers(flashed_port):
    rng = random.Random(1234)
    lines = _malformed_lines(rng, 1000)
    with BoardLink(flashed_port, timeout=10) as link:
        link.start_server()
        before = link.request("info")
        assert before["ok"]
        for i in range(0, len(lines), 50):  # paced, as a UART's receive buffer is small
            link._write(b"\n".join(lines[i : i + 50]) + b"\n")
            assert link.request("info")["ok"], f"server stopped answering after line {i + 50}"
        after = link.request("info")
        assert after["ok"]
        infer = link.request("infer", features=[5.1, 3.5, 1.4, 0.2])
        assert infer["ok"] and infer["class"] == "setosa"
        link.stop_server()
    if before.get("free_heap") is not None:
        assert abs(after["free_heap"] - before["free_heap"]) <= 4096, (before, after)


def test_server_answers_errors_as_replies(flashed_port):
    with BoardLink(flashed_port) as link:
        link.start_server()
        cases = {
            "unknown op": {"op": "nope"},
            "expected 4 numbers, got 3": {"op": "infer", "features": [1, 2, 3]},
            "finite": {"op": "infer", "features": [1e31, 1, 2, 3]},
            "at most": {"op": "batch", "samples": [[1, 2, 3, 4]] * 17},
        }
        for expected, req in cases.items():
            op = req.pop("op")
            rep = link.request(op, **req)
            assert not rep["ok"] and expected in rep["error"], rep
        # NaN is not JSON (MicroPython's parser refuses it; CPython's accepts it and the server
        # then refuses the value): an error reply either way, after the link's resends
        rep = link.request("infer", features=[float("nan"), 1, 2, 3])
        assert not rep["ok"] and ("finite" in rep["error"] or "JSON" in rep["error"]), rep
        # a corrupted request line (CRC no longer matches) is refused, not computed
        line = frame({"id": 99, "op": "infer", "features": [5.1, 3.5, 1.4, 0.2]})
        link._write(line.replace(b"5.1", b"9.1"))
        rep = link.request("info")
        assert rep["ok"]
        link.stop_server()


def test_mip_install_of_device_package_runs_the_server(vboard_factory, mpremote, reference_model):
    """The `mpremote mip install device/package.json` route puts a working runtime on a board.
    mip installs the .py sources, which the board compiles at import: that needs more than the
    default 100 KiB (`tinyattn flash` deploys .mpy instead), so this board has 160 KiB."""
    from tinyattn.paths import DEVICE_DIR

    vboard = vboard_factory(heap="160k")
    r = mpremote(vboard.port, "mip", "install", str(DEVICE_DIR / "package.json"), timeout=60)
    assert r.returncode == 0, r.stderr
    installed = sorted(p.name for p in (vboard.fs_dir / "lib").iterdir())
    assert "attention.py" in installed and "server.py" in installed
    r = mpremote(vboard.port, "cp", str(reference_model["blob"]), ":model.bin")
    assert r.returncode == 0, r.stderr
    with BoardLink(vboard.port) as link:
        link.start_server()
        rep = link.request("infer", features=[6.3, 3.3, 6.0, 2.5])
        assert rep["ok"] and rep["class"] == "virginica", rep
        link.stop_server()


@pytest.mark.slow
def test_parity_wine_make_export_flash_parity_passes_on_a_fresh_checkout(tmp_cwd):
    """Issue 12, Must show 1: `tinyattn train --dataset wine && make export flash parity` in a
    fresh working directory (the Makefile of this checkout, its .venv). It used to fail with
    'not enough heap to load model.bin' — the .py runtime compiled on a 100 KiB board; flash
    now deploys .mpy by default."""
    import subprocess
    import sys
    from pathlib import Path

    from tinyattn import cli
    from tinyattn.paths import REPO_DIR
    from tinyattn.tools.vboard import find_micropython

    find_micropython() or pytest.skip("no unix port")
    assert cli.main(["train", "--dataset", "wine", "--quiet"]) == 0
    venv = Path(sys.executable).parent.parent
    (tmp_cwd / "pyproject.toml").symlink_to(REPO_DIR / "pyproject.toml")  # make's install rule
    proc = subprocess.run(
        ["make", "-f", str(REPO_DIR / "Makefile"), f"VENV={venv}", "export", "flash", "parity"],
        capture_output=True, text=True, timeout=600, env={**__import__("os").environ,
                                                          "TINYATTN_PORT": ""},
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "as .mpy for" in proc.stdout and "PASS" in proc.stdout
    report = json.loads((tmp_cwd / "build" / "parity.json").read_text())
    assert report["summary"]["samples"] == 178 and report["summary"]["passed"]


def test_parity_flash_without_mpy_cross_deploys_py_and_says_the_cost(
    vboard, reference_model, monkeypatch, capsys
):
    from tinyattn import cli

    monkeypatch.setenv("TINYATTN_MPY_CROSS", "/nonexistent/mpy-cross")
    code = cli.main(["flash", "--port", vboard.port, "--blob", str(reference_model["blob"]),
                     "--quiet"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "as .py sources" in out, out
    assert "note: flashing .py sources: mpy-cross not found" in out and "more heap" in out, out
    assert (vboard.fs_dir / "server.py").exists() and not (vboard.fs_dir / "server.mpy").exists()
