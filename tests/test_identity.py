# Host (CPython): the board says which blob and runtime it runs; hosts refuse another blob.
"""DESIGN §10, issue 12 Must show 2: `info` reports the loaded blob's CRC-32 (its own trailing
field), size and format version, the runtime version and kind (.mpy/.py) and the kernel sets;
`tinyattn parity` / `predict` with a blob other than the one flashed exit 2 with one line
naming both CRCs and `make flash`, and parity.json holds the board's blob CRC.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tinyattn import cli
from tinyattn.board.flash import flash
from tinyattn.board.link import BoardLink
from tinyattn.intmodel.blob import read_blob
from tinyattn.paths import DEVICE_DIR

pytestmark = pytest.mark.usefixtures("tmp_cwd")


@pytest.fixture(scope="module")
def other_blob(reference_model, tmp_path_factory) -> Path:
    """The reference model exported as float32: another blob (other bytes, other CRC)."""
    out = tmp_path_factory.mktemp("other") / "f32.bin"
    code = cli.main(["export", "--model", str(reference_model["npz"]), "--out", str(out),
                     "--float32"])  # fmt: skip
    assert code == 0
    return out


@pytest.mark.host
def test_identity_runtime_version_is_the_package_version():
    text = (DEVICE_DIR / "server_link.py").read_text()
    version = json.loads((DEVICE_DIR / "package.json").read_text())["version"]
    assert f'RUNTIME_VERSION = "{version}"' in text


@pytest.mark.serial
def test_identity_info_reports_blob_crc_size_runtime_and_kernels(vboard, reference_model):
    blob = read_blob(reference_model["blob"].read_bytes())
    flash(vboard.port, reference_model["blob"], progress=False)
    with BoardLink(vboard.port) as link:
        banner = link.start_server()
        info = link.request("info")
        link.stop_server()
    assert banner["blob_crc"] == blob.crc32
    assert info["blob_crc"] == blob.crc32 and info["blob_size"] == blob.file_size
    assert info["format_version"] == blob.version
    assert info["runtime_version"] == "0.1.0" and info["runtime"] == "mpy"
    assert info["kernels"] in ("viper", "native", "pure") and info["float_kernels"]


@pytest.mark.serial
def test_identity_parity_with_another_blob_exits_2_naming_both_crcs(
    vboard, reference_model, other_blob, capsys, tmp_path
):
    flash(vboard.port, reference_model["blob"], progress=False)
    flashed, held = (
        read_blob(p.read_bytes()).crc32 for p in (reference_model["blob"], other_blob)
    )
    report = tmp_path / "parity.json"
    code = cli.main(["parity", "--port", vboard.port, "--blob", str(other_blob),
                     "--report", str(report), "--quiet"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 2 and "Traceback" not in out.err
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1, out.err
    assert f"CRC {flashed:08x}" in lines[0] and f"CRC {held:08x}" in lines[0], lines[0]
    assert f"'tinyattn flash --port {vboard.port} --blob {other_blob}'" in lines[0], lines[0]
    s = json.loads(report.read_text())["summary"]
    assert s["board_blob"]["crc32"] == flashed and s["host_blob"]["crc32"] == held
    assert s["passed"] is False
    # predict on the board refuses the same way
    rows = tmp_path / "rows.csv"
    rows.write_text("a,b,c,d\n5.1,3.5,1.4,0.2\n")
    code = cli.main(["predict", "--csv", str(rows), "--port", vboard.port,
                     "--blob", str(other_blob), "--quiet"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and f"CRC {flashed:08x}" in err
    assert f"'tinyattn flash --port {vboard.port} --blob {other_blob}'" in err, err


@pytest.mark.serial
def test_identity_parity_records_both_blobs_and_defaults_to_the_blobs_paths(
    vboard, other_blob, capsys, tmp_path
):
    """A float32 blob: parity without --path runs the float path (it used to ask for both)."""
    flash(vboard.port, other_blob, progress=False)
    report = tmp_path / "parity.json"
    code = cli.main(["parity", "--port", vboard.port, "--blob", str(other_blob),
                     "--report", str(report), "--quiet", "--bench", "0"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    s = json.loads(report.read_text())["summary"]
    crc = read_blob(other_blob.read_bytes()).crc32
    assert s["path"] == "float" and s["passed"]
    assert s["board_blob"]["crc32"] == s["host_blob"]["crc32"] == crc
    assert f"CRC {crc:08x}" in out.out
