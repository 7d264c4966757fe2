# Host (CPython) and a virtual board: windows longer than a 4 KB request line (ACSF1).
"""A window goes to the board in one request line; a line of the default 4096 bytes holds a
window of about 740 float32 values as base64. ACSF1 (a development problem of the model search)
has 1,460 steps: its picks could not be checked by parity nor used by `predict --port`. The
server's line buffer is now sized for the model it serves (`line_size`: the least 4096 bytes,
else one whole window as base64 plus 400 bytes), allocated first by the start command
(`link.line_words`, the same formula) or by the server: a long-window model passes parity with
every int8 logit exact, and the models that fit 4096 bytes keep exactly the heap they had.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_serial_seq import _export

from tinyattn import cli
from tinyattn.board.link import MAX_LINE, line_words
from tinyattn.data.timeseries import load_ts, write_ts
from tinyattn.learn.seqmodel import SeqAttnConfig
from tinyattn.paths import DEVICE_DIR

T = 1460  # ACSF1's steps


@pytest.mark.host
def test_long_windows_host_and_device_size_the_line_alike(monkeypatch):
    """The start command's buffer (host) is the server's own size (device), for rows, short
    and long windows; 4096 bytes up to ~740 values, so the models that fit keep their heap."""
    monkeypatch.syspath_prepend(str(DEVICE_DIR))
    import server_link

    for values in (1, 4, 600, 312, 740, 741, 1460, 1460 * 3, 20000):
        assert 4 * line_words(values) == server_link.line_size(values), values
    assert 4 * line_words(600) == MAX_LINE == server_link.MAX_LINE  # BasicMotions' 100 x 6
    assert 4 * line_words(1460) >= (16 * 1460 + 2) // 3 + 400  # one ACSF1 window, base64


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.usefixtures("tmp_cwd")
def test_long_windows_parity_exact_and_predict_on_the_board(tmp_path, vboard_factory, capsys):
    rng = np.random.default_rng(5)
    N, K = 12, 3
    y = np.arange(N) % K
    t = np.arange(T)[None, :, None]
    X = np.sin(t * (0.01 + 0.01 * y[:, None, None]) + rng.normal(0, 0.1, (N, T, 1))) * 2 + 3
    names = ["a", "b", "c"]
    write_ts(tmp_path / "L_TRAIN.ts", X, None, y, names, "L")
    write_ts(tmp_path / "L_TEST.ts", X[::-1] + 0.01, None, y[::-1], names, "L")
    train, test = load_ts(tmp_path / "L_TRAIN.ts"), load_ts(tmp_path / "L_TEST.ts")
    cfg = SeqAttnConfig(patch=73, embed_dim=8, num_heads=2, blocks=1, ff_dim=16)
    npz, blob = _export(tmp_path, "L", train, test, cfg, epochs=2)
    vb = vboard_factory(heap="160k")
    assert cli.main(["flash", "--port", vb.port, "--blob", str(blob), "--quiet"]) == 0
    argv = ["parity", "--port", vb.port, "--blob", str(blob), "--model", str(npz), "--report",
            "p.json", "--quiet"]  # fmt: skip
    code = cli.main(argv)  # base64, the default
    assert code == 0, capsys.readouterr().err
    s = json.loads((tmp_path / "p.json").read_text())["summary"]
    assert s["passed"] and s["int8_exact"] == s["samples"] == N and s["enc"] == "b64", s
    # JSON text takes ~19 characters a value: the line is sized for base64, said in one line
    assert cli.main([*argv, "--enc", "json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "max_line 8188" in err[0] and "--enc b64" in err[0], err
    assert cli.main(["predict", "--ts", "L_TEST.ts", "--blob", str(blob), "--model",
                     str(npz)]) == 0  # fmt: skip
    host = capsys.readouterr().out.splitlines()
    assert cli.main(["predict", "--ts", "L_TEST.ts", "--blob", str(blob), "--model", str(npz),
                     "--port", vb.port]) == 0  # fmt: skip
    board = capsys.readouterr().out.splitlines()
    assert board[-N:] == host[-N:] and len(host) >= N
